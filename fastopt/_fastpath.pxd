# cython: language_level=3
"""Declarations and inline checks shared by the fast paths of _core.pyx and
_agc.pyx: each accepts a call only in the exact form the C kernels need and
otherwise declines (returns False) without writing; see _core.pyx."""

from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.math cimport isfinite
from libc.stdint cimport int64_t, int32_t
from libc.string cimport memcmp

cimport numpy as cnp

cdef extern from "fastopt.h" nogil:
    int FO_OK
    int FO_ENOMEM
    int FO_F32
    int FO_F64
    int FO_STANDARD
    int FO_NESTEROV

    ctypedef struct fo_momentum_args:
        double lr, alpha, beta, norm_coefficient
        int64_t t
        int32_t mode

    int fo_find_overlap(const int64_t *ext, const unsigned char *is_out,
                        int64_t m, int64_t *scratch, int64_t *order,
                        int64_t *norder, int64_t *i, int64_t *j)
    int fo_max_threads()
    int fo_num_procs()


# Largest n_threads accepted, as _validation.MAX_THREADS (the C drivers also
# never start more threads than a call has 64 KiB pieces of work).
cdef enum:
    MAX_THREADS = 1024


cdef inline int _threads(object n_threads, object default_var):
    """Resolve n_threads (None: default_var's value, else OpenMP's default)
    to a positive count, or 0 to decline."""
    cdef long long v
    cdef int overflow = 0
    if n_threads is None:
        n_threads = default_var.get()
        if n_threads is None:
            return fo_max_threads()
    if type(n_threads) is not int:
        return 0
    v = PyLong_AsLongLongAndOverflow(n_threads, &overflow)
    if overflow or v == 0 or v < -1 or v > MAX_THREADS:
        return 0
    if v == -1:
        return fo_num_procs()
    return <int>v


cdef inline int _mode(object mode):
    """FO_STANDARD or FO_NESTEROV for a str mode, or -1 to decline."""
    if type(mode) is not str:
        return -1
    if mode == "standard":
        return FO_STANDARD
    if mode == "nesterov":
        return FO_NESTEROV
    return -1


cdef inline object _pin(object seq):
    """A list's items as a tuple held by the caller's frame: the C call runs
    without the GIL, so every array it writes must stay referenced even if
    another Python thread empties the caller's list meanwhile."""
    return tuple(<list>seq) if type(seq) is list else seq


cdef inline bint _real(object o, double *out):
    """Accept a finite Python float (ints and others go the slow way)."""
    if type(o) is not float:
        return False
    out[0] = PyFloat_AS_DOUBLE(o)
    return isfinite(out[0])


cdef inline bint _count(object o, int64_t *out):
    """Accept a Python int in [0, 2**63)."""
    cdef int overflow = 0
    cdef long long v
    if type(o) is not int:
        return False
    v = PyLong_AsLongLongAndOverflow(o, &overflow)
    if overflow or v < 0:
        return False
    out[0] = v
    return True


cdef inline bint _same_shape(cnp.ndarray a, cnp.ndarray b):
    cdef int nd = cnp.PyArray_NDIM(a)
    if cnp.PyArray_NDIM(b) != nd:
        return False
    return nd == 0 or memcmp(cnp.PyArray_DIMS(a), cnp.PyArray_DIMS(b),
                             nd * sizeof(cnp.npy_intp)) == 0


cdef inline bint _fast_array(object o, int type_num, int flags, int order,
                             cnp.ndarray like):
    """o is an ndarray of type_num in native byte order with all of flags,
    contiguous in `order` and, when like is given, of like's shape."""
    cdef cnp.ndarray a
    if not cnp.PyArray_Check(o):
        return False
    a = <cnp.ndarray>o
    return (cnp.PyArray_TYPE(a) == type_num
            and cnp.PyArray_ISNOTSWAPPED(a)
            and (cnp.PyArray_FLAGS(a) & (flags | order)) == (flags | order)
            and (like is None or _same_shape(a, like)))


cdef inline int _check_rc(int rc) except -1:
    if rc == FO_ENOMEM:
        raise MemoryError("fastopt: out of memory in the C driver")
    if rc != FO_OK:
        raise RuntimeError(f"fastopt: internal error {rc} from the C driver")
    return 0
