# Thread facts of the C core (included by _ext.pyx), and the per-context
# default thread count: a ContextVar created here, so the core imports nothing
# of fastopt. fastopt/_threads.py sets it (set_num_threads); _accept.pxi's
# _n_threads reads it on every call with n_threads=None.

import contextvars

# None means "whatever OpenMP would use now" (OMP_NUM_THREADS, threadpoolctl).
# A ContextVar, so a setting in one Python thread (or asyncio task) does not
# leak into others.
default_n_threads = contextvars.ContextVar("fastopt_n_threads", default=None)
_default_n_threads = default_n_threads


def have_openmp():
    """Whether the extension was compiled with OpenMP."""
    return bool(fo_have_openmp())


def max_threads():
    """omp_get_max_threads() (1 without OpenMP)."""
    return fo_max_threads()


def num_procs():
    """omp_get_num_procs() (1 without OpenMP)."""
    return fo_num_procs()


def tuning():
    """The C driver's tuning constants, in bytes of parameters."""
    return {"serial_bytes": fo_serial_bytes(), "chunk_bytes": fo_chunk_bytes()}


def thread_stats():
    """Facts about the parallel driver (src_c/pool.c), process-wide.

    serial_calls / parallel_calls: driver calls run on the calling thread
    alone / with the thread pool; backoffs: pooled calls found no faster than
    serial (their size class then ran serially for a while); last_bytes,
    last_threads, last_joined: the latest call's size, the threads it was
    allowed (1: the serial path) and the threads that ran part of it;
    pool_size: pool threads alive; spin_ns: how long an idle one spins.
    """
    cdef fo_thread_stats s
    fo_get_thread_stats(&s)
    return {"serial_calls": s.serial_calls, "parallel_calls": s.parallel_calls,
            "backoffs": s.backoffs, "last_bytes": s.last_bytes,
            "last_threads": s.last_threads, "last_joined": s.last_joined,
            "pool_size": fo_pool_size(), "spin_ns": fo_pool_spin_ns()}
