# cython: language_level=3, embedsignature=True, cdivision=True
"""Thin wrappers over the C core (src_c/fastopt.h).

The entry points here are the *fast path*: they accept a call only when every
argument is already in the exact form the C kernels need (ndarrays of native
float32/float64, C- or F-contiguous in the same order within a tensor,
aligned, writeable outputs, the gradient of the parameter's own shape, no
output overlapping any other array, plain Python float/int scalars in range).
Such a call is checked at C speed through NumPy's C-API (no memoryviews: a
memoryview costs ~160 ns per array) and run as ONE C call with the GIL
released; the function returns True.

Anything else makes them return False *before anything is written*, and the
Python layer (fastopt/_validation.py, the one place that raises for user
input) takes over: it either raises a clear error or normalises the
arguments (copies of awkward layouts, broadcast gradients) and calls back.
So these functions never raise for bad user input; they only decline it.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int64_t, int32_t

from fastopt._fastpath cimport (
    FO_F32, FO_F64, MAX_THREADS, _check_rc, _count, _mode,
    _fast_array, _pin, _real, _threads, fo_find_overlap, fo_max_threads,
    fo_momentum_args, fo_num_procs)

cimport numpy as cnp

cnp.import_array()

cdef extern from "fastopt.h" nogil:
    ctypedef struct fo_tensor:
        void *x
        const void *g
        void *s1
        void *s2
        int64_t n
        int32_t dtype

    ctypedef struct fo_adagrad_args:
        double lr, decay_factor, epsilon, norm_coefficient
        int64_t t

    ctypedef struct fo_adam_args:
        double lr, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post
        int64_t t

    int fo_momentum(const fo_tensor *ts, int64_t nt, const fo_momentum_args *a,
                    int n_threads)
    int fo_adagrad(const fo_tensor *ts, int64_t nt, const fo_adagrad_args *a,
                   int n_threads)
    int fo_adam(const fo_tensor *ts, int64_t nt, const fo_adam_args *a,
                int n_threads)
    const char *fo_isa_paths()
    const char *fo_isa_active()
    int fo_have_openmp()
    int64_t fo_serial_bytes()
    int64_t fo_chunk_bytes()


import contextvars

# Thread count chosen by fastopt.set_num_threads(); None means "whatever
# OpenMP would use now" (OMP_NUM_THREADS, threadpoolctl). A ContextVar so
# that the context manager in one Python thread does not leak into others.
default_n_threads = contextvars.ContextVar("fastopt_n_threads", default=None)

# Tensors handled with a stack buffer before we fall back to the heap.
cdef enum:
    STACK_TENSORS = 8


cdef int _OUT_FLAGS = cnp.NPY_ARRAY_WRITEABLE | cnp.NPY_ARRAY_ALIGNED
cdef int _IN_FLAGS = cnp.NPY_ARRAY_ALIGNED


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


cdef struct Gather:
    # Per-call buffers: the fo_tensor list and the byte ranges to check for
    # overlap; in the C stack frame of the entry point for a few tensors
    # (a cdef class here cost ~3,000 instructions a call: allocating and
    # zeroing 2.5 KB), on the heap beyond that.
    fo_tensor stack_t[STACK_TENSORS]
    int64_t stack_e[STACK_TENSORS * 8]
    int64_t stack_s[STACK_TENSORS * 24 + 1]
    unsigned char stack_o[STACK_TENSORS * 4]
    fo_tensor *ts
    int64_t *ext
    int64_t *scratch
    unsigned char *is_out
    Py_ssize_t cap


cdef inline void _init(Gather *b) noexcept nogil:
    b.ts = b.stack_t
    b.ext = b.stack_e
    b.scratch = b.stack_s
    b.is_out = b.stack_o
    b.cap = STACK_TENSORS


cdef int _reserve(Gather *b, Py_ssize_t nt) except -1:
    if nt <= b.cap:
        return 0
    b.cap = nt
    b.ts = <fo_tensor *>PyMem_Malloc(nt * sizeof(fo_tensor))
    b.ext = <int64_t *>PyMem_Malloc(nt * 8 * sizeof(int64_t))
    b.scratch = <int64_t *>PyMem_Malloc((nt * 24 + 1) * sizeof(int64_t))
    b.is_out = <unsigned char *>PyMem_Malloc(nt * 4)
    if not (b.ts and b.ext and b.scratch and b.is_out):
        raise MemoryError()
    return 0


cdef inline void _release(Gather *b) noexcept:
    if b.cap > STACK_TENSORS:     # PyMem_Free(NULL) is a no-op
        PyMem_Free(b.ts)
        PyMem_Free(b.ext)
        PyMem_Free(b.scratch)
        PyMem_Free(b.is_out)
        _init(b)


cdef inline void _range(Gather *buf, Py_ssize_t k, const void *p, int64_t nbytes,
                        unsigned char is_out):
    buf.ext[2 * k] = <int64_t>p
    buf.ext[2 * k + 1] = <int64_t>p + nbytes
    buf.is_out[k] = is_out


# The sorted order of the previous multi-tensor call's byte ranges: a
# training loop passes the same arrays every step, so their order usually
# holds and fo_find_overlap verifies it in one pass instead of sorting.
# Only touched with the GIL held (in _gather), so calls from several Python
# threads are safe; a wrong hint only costs a sort, never a missed overlap.
cdef int64_t *_order = NULL
cdef int64_t _order_cap = 0
cdef int64_t _order_m = -1
cdef int64_t _order_n = -1


cdef int _overlap(Gather *buf, int64_t m) except -1:
    """1 if some written range overlaps another, else 0."""
    global _order, _order_cap, _order_m, _order_n
    cdef int64_t oi = 0, oj = 0, none = -1
    cdef int64_t *grown
    if m <= 16:   # pairwise: no order needed
        return fo_find_overlap(buf.ext, buf.is_out, m, buf.scratch,
                               buf.scratch + 5 * m + 1, &none, &oi, &oj)
    if m > _order_cap:
        grown = <int64_t *>PyMem_Realloc(_order, m * sizeof(int64_t))
        if grown == NULL:
            raise MemoryError()
        _order = grown
        _order_cap = m
    if m != _order_m:
        _order_m = m
        _order_n = -1
    return fo_find_overlap(buf.ext, buf.is_out, m, buf.scratch, _order, &_order_n,
                           &oi, &oj)


cdef inline bint _is_seq(object o):
    return type(o) is list or type(o) is tuple


cdef inline object _item(object seq, Py_ssize_t i):
    if type(seq) is list:
        return (<list>seq)[i]
    return (<tuple>seq)[i]


cdef int _gather(Gather *buf, object xs, object gs, object s1s, object s2s,
                 Py_ssize_t *nt_out) except -1:
    """Fill buf with the tensors of a call if all of them qualify for the
    fast path; return 1, or 0 to decline. Writes nothing to any array."""
    cdef Py_ssize_t nt, i, m = 0, nstate = 1 if s2s is None else 2
    cdef bint seq = type(xs) is list or type(xs) is tuple
    # s2s is None for the one-state ops; for Adam every s2 must be an array
    # (a None *inside* Adam's h list is bad input, not "no second state")
    cdef bint has_s2 = s2s is not None
    cdef object x, g, s1, s2
    cdef cnp.ndarray xa
    cdef int type_num, order
    cdef int64_t nbytes, oi = 0, oj = 0

    if seq:
        nt = len(xs)
        if (nt == 0 or not _is_seq(gs) or not _is_seq(s1s) or len(gs) != nt
                or len(s1s) != nt
                or (s2s is not None and (not _is_seq(s2s) or len(s2s) != nt))):
            return 0
    else:
        nt = 1
    _reserve(buf, nt)

    for i in range(nt):
        if seq:
            x = _item(xs, i)
            g = _item(gs, i)
            s1 = _item(s1s, i)
            s2 = _item(s2s, i) if has_s2 else None
        else:
            x, g, s1, s2 = xs, gs, s1s, s2s
        if not cnp.PyArray_Check(x):
            return 0
        xa = <cnp.ndarray>x
        type_num = cnp.PyArray_TYPE(xa)
        if type_num != cnp.NPY_FLOAT and type_num != cnp.NPY_DOUBLE:
            return 0
        if cnp.PyArray_FLAGS(xa) & cnp.NPY_ARRAY_C_CONTIGUOUS:
            order = cnp.NPY_ARRAY_C_CONTIGUOUS
        elif cnp.PyArray_FLAGS(xa) & cnp.NPY_ARRAY_F_CONTIGUOUS:
            order = cnp.NPY_ARRAY_F_CONTIGUOUS
        else:
            return 0
        if not (_fast_array(x, type_num, _OUT_FLAGS, order, None)
                and _fast_array(g, type_num, _IN_FLAGS, order, xa)
                and _fast_array(s1, type_num, _OUT_FLAGS, order, xa)
                and (not has_s2 or _fast_array(s2, type_num, _OUT_FLAGS, order, xa))):
            return 0
        buf.ts[i].x = cnp.PyArray_DATA(xa)
        buf.ts[i].g = cnp.PyArray_DATA(<cnp.ndarray>g)
        buf.ts[i].s1 = cnp.PyArray_DATA(<cnp.ndarray>s1)
        buf.ts[i].s2 = cnp.PyArray_DATA(<cnp.ndarray>s2) if has_s2 else NULL
        buf.ts[i].n = cnp.PyArray_SIZE(xa)
        buf.ts[i].dtype = FO_F32 if type_num == cnp.NPY_FLOAT else FO_F64
        # byte ranges, role by role (all x, all g, all s1, all s2) so that
        # each role's arrays, usually allocated in address order, form one
        # sorted run for fo_find_overlap; g is the only one that is read.
        nbytes = buf.ts[i].n * cnp.PyArray_ITEMSIZE(xa)
        _range(buf, i, buf.ts[i].x, nbytes, 1)
        _range(buf, nt + i, buf.ts[i].g, nbytes, 0)
        _range(buf, 2 * nt + i, buf.ts[i].s1, nbytes, 1)
        if has_s2:
            _range(buf, 3 * nt + i, buf.ts[i].s2, nbytes, 1)
    m = nstate * nt + 2 * nt
    if _overlap(buf, m):
        return 0
    nt_out[0] = nt
    return 1


def momentum(xs, gs, vs, lr, t, alpha, beta, norm_coefficient, mode,
             n_threads):
    """Fast path of fastopt.momentum. True if done, False to decline."""
    cdef fo_momentum_args a
    cdef Gather buf
    cdef Py_ssize_t nt = 0
    cdef int nth, rc
    a.mode = _mode(mode)
    if a.mode < 0:
        return False
    nth = _threads(n_threads, default_n_threads)
    if not (nth and _real(lr, &a.lr) and a.lr >= 0 and _count(t, &a.t)
            and _real(alpha, &a.alpha) and _real(beta, &a.beta)
            and _real(norm_coefficient, &a.norm_coefficient)):
        return False
    xs = _pin(xs)
    gs = _pin(gs)
    vs = _pin(vs)
    _init(&buf)
    try:
        if not _gather(&buf, xs, gs, vs, None, &nt):
            return False
        with nogil:
            rc = fo_momentum(buf.ts, nt, &a, nth)
    finally:
        _release(&buf)
    _check_rc(rc)
    return True


def adagrad(xs, gs, hs, lr, t, decay_factor, epsilon, norm_coefficient,
            n_threads):
    """Fast path of fastopt.adagrad. True if done, False to decline."""
    cdef fo_adagrad_args a
    cdef Gather buf
    cdef Py_ssize_t nt = 0
    cdef int nth, rc
    nth = _threads(n_threads, default_n_threads)
    if not (nth and _real(lr, &a.lr) and a.lr >= 0 and _count(t, &a.t)
            and _real(decay_factor, &a.decay_factor) and a.decay_factor >= 0
            and _real(epsilon, &a.epsilon) and a.epsilon >= 0
            and _real(norm_coefficient, &a.norm_coefficient)):
        return False
    xs = _pin(xs)
    gs = _pin(gs)
    hs = _pin(hs)
    _init(&buf)
    try:
        if not _gather(&buf, xs, gs, hs, None, &nt):
            return False
        with nogil:
            rc = fo_adagrad(buf.ts, nt, &a, nth)
    finally:
        _release(&buf)
    _check_rc(rc)
    return True


def adam(xs, gs, vs, hs, lr, t, alpha, beta, epsilon, norm_coefficient,
         norm_coefficient_post, n_threads):
    """Fast path of fastopt.adam. True if done, False to decline."""
    cdef fo_adam_args a
    cdef Gather buf
    cdef Py_ssize_t nt = 0
    cdef int nth, rc
    nth = _threads(n_threads, default_n_threads)
    if not (nth and _real(lr, &a.lr) and a.lr >= 0 and _count(t, &a.t)
            and _real(alpha, &a.alpha) and 0 <= a.alpha <= 1
            and (a.alpha < 1 or a.t == 0)
            and _real(beta, &a.beta) and 0 <= a.beta <= 1
            and _real(epsilon, &a.epsilon) and a.epsilon >= 0
            and _real(norm_coefficient, &a.norm_coefficient)
            and _real(norm_coefficient_post, &a.norm_coefficient_post)):
        return False
    if hs is None:
        return False
    xs = _pin(xs)
    gs = _pin(gs)
    vs = _pin(vs)
    hs = _pin(hs)
    _init(&buf)
    try:
        if not _gather(&buf, xs, gs, vs, hs, &nt):
            return False
        with nogil:
            rc = fo_adam(buf.ts, nt, &a, nth)
    finally:
        _release(&buf)
    _check_rc(rc)
    return True


cdef extern from *:
    """
    #ifndef FASTOPT_BUILD_CFLAGS
    #define FASTOPT_BUILD_CFLAGS "unknown"
    #endif
    #ifndef FASTOPT_BUILD_COMPILER
    #define FASTOPT_BUILD_COMPILER "unknown"
    #endif
    """
    const char *FASTOPT_BUILD_CFLAGS
    const char *FASTOPT_BUILD_COMPILER


def build_info():
    """Compiler, flags and ISA paths the extension was built with."""
    return {
        "compiler": FASTOPT_BUILD_COMPILER.decode(),
        "cflags": FASTOPT_BUILD_CFLAGS.decode(),
        "isa_paths": fo_isa_paths().decode(),
        "isa_active": fo_isa_active().decode(),
    }


cdef extern from *:
    """
    void fo_probe_3r2w_f32(int64_t, float *, const float *, float *, int);
    void fo_probe_3r2w_f64(int64_t, double *, const double *, double *, int);
    void fo_probe_4r3w_f32(int64_t, float *, const float *, float *, float *, int);
    void fo_probe_4r3w_f64(int64_t, double *, const double *, double *, double *, int);
    """
    void fo_probe_3r2w_f32(int64_t, float *, const float *, float *, int) nogil
    void fo_probe_3r2w_f64(int64_t, double *, const double *, double *, int) nogil
    void fo_probe_4r3w_f32(int64_t, float *, const float *, float *, float *, int) nogil
    void fo_probe_4r3w_f64(int64_t, double *, const double *, double *, double *, int) nogil


def probe(arrays, int n_threads):
    """Bandwidth probe (bench/ceiling.c): 3 arrays read and 2 written, or 4
    and 3, over contiguous float32/float64 arrays of one dtype and size."""
    cdef cnp.ndarray a
    cdef void *p[4]
    cdef Py_ssize_t k, n
    cdef int type_num, narr
    arrays = list(arrays)
    narr = len(arrays)
    if narr not in (3, 4) or n_threads < 1:
        raise ValueError("probe: 3 or 4 arrays and n_threads >= 1")
    type_num = cnp.PyArray_TYPE(<cnp.ndarray?>arrays[0])
    n = cnp.PyArray_SIZE(<cnp.ndarray>arrays[0])
    for k in range(len(arrays)):
        a = <cnp.ndarray?>arrays[k]
        if (cnp.PyArray_TYPE(a) != type_num or cnp.PyArray_SIZE(a) != n
                or (type_num != cnp.NPY_FLOAT and type_num != cnp.NPY_DOUBLE)
                or not cnp.PyArray_ISCARRAY(a) or not cnp.PyArray_ISNOTSWAPPED(a)):
            raise ValueError("probe: writeable C-contiguous native float arrays of one dtype and size")
        p[k] = cnp.PyArray_DATA(a)
    with nogil:
        if narr == 3 and type_num == cnp.NPY_FLOAT:
            fo_probe_3r2w_f32(n, <float *>p[0], <float *>p[1], <float *>p[2], n_threads)
        elif narr == 3:
            fo_probe_3r2w_f64(n, <double *>p[0], <double *>p[1], <double *>p[2], n_threads)
        elif type_num == cnp.NPY_FLOAT:
            fo_probe_4r3w_f32(n, <float *>p[0], <float *>p[1], <float *>p[2], <float *>p[3], n_threads)
        else:
            fo_probe_4r3w_f64(n, <double *>p[0], <double *>p[1], <double *>p[2], <double *>p[3], n_threads)
