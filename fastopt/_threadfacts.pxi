# Thread facts of the C core (included by _ext.pyx). The thread count chosen
# by fastopt.set_num_threads() lives in fastopt/_threads.py (a ContextVar);
# _accept.pxi's _n_threads reads it on every call.

from fastopt._threads import default_n_threads as _default_n_threads


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
