# cython: language_level=3, embedsignature=True
"""The memory-bandwidth ceiling probe (src_c/ceiling.c) that ``fastopt bench``
and bench/bench_step.py compare every update with: a tool, so its own small
extension, outside the library's import path (``import fastopt`` does not
load it)."""

from libc.stdint cimport int64_t, uint32_t

cimport numpy as cnp

cnp.import_array()


cdef extern from *:
    """
    /* src_c/ceiling.c, linked into this module alone */
    void fo_probe_3r2w_f32(int64_t n, float *x, const float *g, float *v,
                           int n_threads);
    void fo_probe_3r2w_f64(int64_t n, double *x, const double *g, double *v,
                           int n_threads);
    void fo_probe_4r3w_f32(int64_t n, float *x, const float *g, float *v,
                           float *h, int n_threads);
    void fo_probe_4r3w_f64(int64_t n, double *x, const double *g, double *v,
                           double *h, int n_threads);
    uint32_t fo_probe_read(int64_t n, const uint32_t *const *a, int k, int n_threads);
    """
    void fo_probe_3r2w_f32(int64_t n, float *x, const float *g, float *v,
                           int n_threads) nogil
    void fo_probe_3r2w_f64(int64_t n, double *x, const double *g, double *v,
                           int n_threads) nogil
    void fo_probe_4r3w_f32(int64_t n, float *x, const float *g, float *v, float *h,
                           int n_threads) nogil
    void fo_probe_4r3w_f64(int64_t n, double *x, const double *g, double *v,
                           double *h, int n_threads) nogil
    uint32_t fo_probe_read(int64_t n, const uint32_t *const *a, int k,
                           int n_threads) nogil


def probe(arrays, int n_threads, bint read_only=False):
    """Bandwidth probe over contiguous float32/float64 arrays of one dtype
    and size: 3 arrays read and 2 written, or 4 and 3; with ``read_only``,
    2 or 4 arrays read and none written (their bits folded, the result
    returned)."""
    cdef cnp.ndarray a
    cdef void *p[4]
    cdef Py_ssize_t k, n
    cdef int type_num, narr
    cdef bint f32
    cdef uint32_t folded = 0
    arrays = list(arrays)
    narr = len(arrays)
    if narr not in ((2, 4) if read_only else (3, 4)) or n_threads < 1:
        raise ValueError("probe: 3 or 4 arrays (2 or 4 read_only) and n_threads >= 1")
    type_num = cnp.PyArray_TYPE(<cnp.ndarray?>arrays[0])
    n = cnp.PyArray_SIZE(<cnp.ndarray>arrays[0])
    for k in range(narr):
        a = <cnp.ndarray?>arrays[k]
        if (cnp.PyArray_TYPE(a) != type_num or cnp.PyArray_SIZE(a) != n
                or (type_num != cnp.NPY_FLOAT and type_num != cnp.NPY_DOUBLE)
                or not cnp.PyArray_ISCARRAY(a) or not cnp.PyArray_ISNOTSWAPPED(a)):
            raise ValueError("probe: writeable C-contiguous native float arrays "
                             "of one dtype and size")
        p[k] = cnp.PyArray_DATA(a)
    f32 = type_num == cnp.NPY_FLOAT
    with nogil:
        if read_only:
            folded = fo_probe_read(n * (1 if f32 else 2), <const uint32_t *const *>p, narr,
                                   n_threads)
        elif narr == 3 and f32:
            fo_probe_3r2w_f32(n, <float *>p[0], <float *>p[1], <float *>p[2], n_threads)
        elif narr == 3:
            fo_probe_3r2w_f64(n, <double *>p[0], <double *>p[1], <double *>p[2],
                              n_threads)
        elif f32:
            fo_probe_4r3w_f32(n, <float *>p[0], <float *>p[1], <float *>p[2],
                              <float *>p[3], n_threads)
        else:
            fo_probe_4r3w_f64(n, <double *>p[0], <double *>p[1], <double *>p[2],
                              <double *>p[3], n_threads)
    return folded if read_only else None
