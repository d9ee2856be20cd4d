# cython: language_level=3, embedsignature=True, cdivision=True
"""Thin wrappers over the AGC part of the C core (src_c/agc.c).

Same contract as fastopt._core: ``agc`` and ``agc_momentum`` are *fast
paths* that accept a call only when every argument is already in the form
the C code needs (native float32/float64 ndarrays, C- or F-contiguous in the
same order within a tensor, aligned, written arrays writeable, no written
array overlapping another, plain Python float/int scalars in range, layout
"oi"/"io", clipping a positive finite float or a list of them and None).
Such a call is checked through NumPy's C-API, run as ONE C call with the GIL
released, and the function returns True. Anything else returns False before
anything is written; fastopt/_agc_api.py then raises or normalises.

How a tensor's memory forms units (fo_agc_tensor.kind) follows from its
shape, its memory order and the layout:

=================================  ==============  ==============
tensor (after squeezing dims of 1)  C order         F order
=================================  ==============  ==============
ndim <= 1: the whole tensor         1 row           1 row
"oi": unit = x[i, ...]              rows            columns
"io": unit = x[..., j]              columns         rows
=================================  ==============  ==============
"""

from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.math cimport isfinite, sqrt
from libc.stdint cimport int64_t, int32_t

from fastopt._fastpath cimport (
    FO_F32, FO_F64, _check_rc, _count, _mode, _fast_array,
    _real, _threads, fo_find_overlap, fo_momentum_args)

cimport numpy as cnp
import numpy as np

cnp.import_array()

from fastopt import _core

cdef extern from "fastopt.h" nogil:
    int FO_AGC_ROWS
    int FO_AGC_COLS

    ctypedef struct fo_agc_tensor:
        void *x
        void *g
        void *v
        int64_t n_units
        int64_t unit_len
        double clipping
        int32_t dtype
        int32_t kind

    int fo_agc(const fo_agc_tensor *ts, int64_t nt, double eps, int n_threads)
    int fo_agc_momentum(const fo_agc_tensor *ts, int64_t nt, double eps,
                        const fo_momentum_args *a, int n_threads)
    int fo_agc_unit_sumsq(const void *x, int32_t dtype, int64_t n_units,
                          int64_t unit_len, int32_t kind, double *out)


cdef enum:
    STACK_TENSORS = 8
    LAYOUT_OI = 0
    LAYOUT_IO = 1

cdef int _W = cnp.NPY_ARRAY_WRITEABLE | cnp.NPY_ARRAY_ALIGNED
cdef int _R = cnp.NPY_ARRAY_ALIGNED


cdef inline int _layout(object layout):
    """LAYOUT_OI, LAYOUT_IO, or -1 to decline."""
    if type(layout) is not str:
        return -1
    if layout == "oi":
        return LAYOUT_OI
    if layout == "io":
        return LAYOUT_IO
    return -1


cdef void _units(cnp.ndarray x, bint c_order, int layout, fo_agc_tensor *t):
    """Set t.n_units, t.unit_len and t.kind from x's shape and order."""
    cdef int nd = cnp.PyArray_NDIM(x), d, big = 0
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(x)
    cdef int64_t n = cnp.PyArray_SIZE(x), nu
    for d in range(nd):
        if dims[d] != 1:
            big += 1
    t.kind = FO_AGC_ROWS
    if n == 0:
        t.n_units = 0
        t.unit_len = 0
        return
    if big <= 1:                   # scalar or vector after squeezing
        t.n_units = 1
        t.unit_len = n
        return
    nu = dims[0] if layout == LAYOUT_OI else dims[nd - 1]
    t.n_units = nu
    t.unit_len = n // nu
    if nu == 1:                    # one unit: contiguous either way
        return
    # "oi" units are rows of a C-ordered array and columns of an F-ordered
    # one; "io" the other way round.
    if (layout == LAYOUT_OI) != c_order:
        t.kind = FO_AGC_COLS


cdef class _Buf:
    """Per-call buffers: the tensor list and the byte ranges to check."""
    cdef fo_agc_tensor stack_t[STACK_TENSORS]
    cdef int64_t stack_e[STACK_TENSORS * 6]
    cdef int64_t stack_s[STACK_TENSORS * 18 + 1]
    cdef unsigned char stack_o[STACK_TENSORS * 3]
    cdef fo_agc_tensor *ts
    cdef int64_t *ext
    cdef int64_t *scratch
    cdef unsigned char *is_out
    cdef Py_ssize_t cap

    def __cinit__(self):
        self.ts = self.stack_t
        self.ext = self.stack_e
        self.scratch = self.stack_s
        self.is_out = self.stack_o
        self.cap = STACK_TENSORS

    cdef int reserve(self, Py_ssize_t nt) except -1:
        if nt <= self.cap:
            return 0
        self.ts = <fo_agc_tensor *>PyMem_Malloc(nt * sizeof(fo_agc_tensor))
        self.ext = <int64_t *>PyMem_Malloc(nt * 6 * sizeof(int64_t))
        self.scratch = <int64_t *>PyMem_Malloc((nt * 18 + 1) * sizeof(int64_t))
        self.is_out = <unsigned char *>PyMem_Malloc(nt * 3)
        self.cap = nt
        if not (self.ts and self.ext and self.scratch and self.is_out):
            raise MemoryError()
        return 0

    def __dealloc__(self):
        if self.ts != self.stack_t:
            PyMem_Free(self.ts)
            PyMem_Free(self.ext)
            PyMem_Free(self.scratch)
            PyMem_Free(self.is_out)


cdef inline void _range(_Buf buf, Py_ssize_t m, void *p, int64_t nbytes,
                        bint out):
    buf.ext[2 * m] = <int64_t>p
    buf.ext[2 * m + 1] = <int64_t>(<char *>p + nbytes)
    buf.is_out[m] = out


cdef inline bint _clip_value(object c, double *out):
    """A positive finite float, or None (excluded, stored as 0)."""
    if c is None:
        out[0] = 0.0
        return True
    return _real(c, out) and out[0] > 0


cdef int _gather(_Buf buf, object xs, object gs, object vs, object clipping,
                 int layout, Py_ssize_t *nt_out) except -1:
    """Fill buf if every tensor qualifies; return 1, or 0 to decline.
    vs is None for fo_agc (x read, g written), else x and v are written and
    g only read. Writes nothing to any array."""
    cdef Py_ssize_t nt, i, m = 0
    cdef bint seq = type(xs) is list or type(xs) is tuple
    cdef bint fused = vs is not None
    cdef bint per_tensor, c_order
    cdef object x, g, v, clip_list = None
    cdef cnp.ndarray xa
    cdef int type_num, order
    cdef int64_t nbytes, oi = 0, oj = 0, no_hint = -1
    cdef double clip_all = 0.0

    if seq:
        if type(xs) is list:
            xs = tuple(xs)
        if type(gs) is list:
            gs = tuple(gs)
        if type(vs) is list:
            vs = tuple(vs)
        nt = len(<tuple>xs)
        if (nt == 0 or type(gs) is not tuple or len(<tuple>gs) != nt
                or (fused and (type(vs) is not tuple or len(<tuple>vs) != nt))):
            return 0
    else:
        nt = 1
    per_tensor = type(clipping) is list or type(clipping) is tuple
    if per_tensor:
        clip_list = tuple(clipping)
        if len(<tuple>clip_list) != nt:
            return 0
    elif not _clip_value(clipping, &clip_all) or clipping is None:
        return 0
    buf.reserve(nt)

    for i in range(nt):
        if seq:
            x = (<tuple>xs)[i]
            g = (<tuple>gs)[i]
            v = (<tuple>vs)[i] if fused else None
        else:
            x, g, v = xs, gs, vs
        if not cnp.PyArray_Check(x):
            return 0
        xa = <cnp.ndarray>x
        type_num = cnp.PyArray_TYPE(xa)
        if type_num != cnp.NPY_FLOAT and type_num != cnp.NPY_DOUBLE:
            return 0
        c_order = (cnp.PyArray_FLAGS(xa) & cnp.NPY_ARRAY_C_CONTIGUOUS) != 0
        if c_order:
            order = cnp.NPY_ARRAY_C_CONTIGUOUS
        elif cnp.PyArray_FLAGS(xa) & cnp.NPY_ARRAY_F_CONTIGUOUS:
            order = cnp.NPY_ARRAY_F_CONTIGUOUS
        else:
            return 0
        if fused:
            if not (_fast_array(x, type_num, _W, order, None)
                    and _fast_array(g, type_num, _R, order, xa)
                    and _fast_array(v, type_num, _W, order, xa)):
                return 0
        elif not (_fast_array(x, type_num, _R, order, None)
                  and _fast_array(g, type_num, _W, order, xa)):
            return 0
        if per_tensor:
            if not _clip_value((<tuple>clip_list)[i], &buf.ts[i].clipping):
                return 0
        else:
            buf.ts[i].clipping = clip_all
        buf.ts[i].x = cnp.PyArray_DATA(xa)
        buf.ts[i].g = cnp.PyArray_DATA(<cnp.ndarray>g)
        buf.ts[i].v = cnp.PyArray_DATA(<cnp.ndarray>v) if fused else NULL
        buf.ts[i].dtype = FO_F32 if type_num == cnp.NPY_FLOAT else FO_F64
        _units(xa, c_order, layout, &buf.ts[i])
        nbytes = cnp.PyArray_SIZE(xa) * cnp.PyArray_ITEMSIZE(xa)
        _range(buf, m, buf.ts[i].x, nbytes, fused)
        _range(buf, m + 1, buf.ts[i].g, nbytes, not fused)
        m += 2
        if fused:
            _range(buf, m, buf.ts[i].v, nbytes, True)
            m += 1
    # scratch holds 5*m + 1 values for the sort, then m for the order (no
    # hint reused across calls here: AGC calls are rarer than plain updates)
    if fo_find_overlap(buf.ext, buf.is_out, m, buf.scratch, buf.scratch + 5 * m + 1,
                       &no_hint, &oi, &oj):
        return 0
    nt_out[0] = nt
    return 1


def agc(xs, gs, clipping, eps, layout, n_threads):
    """Fast path of fastopt.agc. True if done, False to decline."""
    cdef _Buf buf
    cdef Py_ssize_t nt = 0
    cdef int nth, rc, lay
    cdef double e = 0.0
    lay = _layout(layout)
    nth = _threads(n_threads, _core.default_n_threads)
    if lay < 0 or not (nth and _real(eps, &e) and e > 0):
        return False
    # tuples held here: the C call runs without the GIL, and another thread
    # could empty a list the caller passed (see _core._pin)
    xs = tuple(xs) if type(xs) is list else xs
    gs = tuple(gs) if type(gs) is list else gs
    buf = _Buf.__new__(_Buf)
    if not _gather(buf, xs, gs, None, clipping, lay, &nt):
        return False
    with nogil:
        rc = fo_agc(buf.ts, nt, e, nth)
    _check_rc(rc)
    return True


def agc_momentum(xs, gs, vs, lr, t, alpha, beta, norm_coefficient, mode,
                 clipping, eps, layout, n_threads):
    """Fast path of fastopt.momentum with clipping. True if done, False to
    decline."""
    cdef fo_momentum_args a
    cdef _Buf buf
    cdef Py_ssize_t nt = 0
    cdef int nth, rc, lay
    cdef double e = 0.0
    a.mode = _mode(mode)
    if a.mode < 0:
        return False
    lay = _layout(layout)
    nth = _threads(n_threads, _core.default_n_threads)
    if lay < 0 or vs is None or not (
            nth and _real(lr, &a.lr) and a.lr >= 0 and _count(t, &a.t)
            and _real(alpha, &a.alpha) and _real(beta, &a.beta)
            and _real(norm_coefficient, &a.norm_coefficient)
            and _real(eps, &e) and e > 0):
        return False
    xs = tuple(xs) if type(xs) is list else xs     # held for the nogil call
    gs = tuple(gs) if type(gs) is list else gs
    vs = tuple(vs) if type(vs) is list else vs
    buf = _Buf.__new__(_Buf)
    if not _gather(buf, xs, gs, vs, clipping, lay, &nt):
        return False
    with nogil:
        rc = fo_agc_momentum(buf.ts, nt, e, &a, nth)
    _check_rc(rc)
    return True


def unit_norms(cnp.ndarray x not None, layout):
    """The unit norms (float64, one per unit, in unit order) of a native,
    aligned, C- or F-contiguous float32/float64 array; the caller checks
    that. Computed in the order fo_agc uses."""
    cdef fo_agc_tensor t
    cdef int type_num = cnp.PyArray_TYPE(x), lay = _layout(layout), rc
    cdef bint c_order = (cnp.PyArray_FLAGS(x) & cnp.NPY_ARRAY_C_CONTIGUOUS) != 0
    cdef cnp.ndarray out
    if lay < 0 or (type_num != cnp.NPY_FLOAT and type_num != cnp.NPY_DOUBLE) \
            or not (c_order or cnp.PyArray_FLAGS(x) & cnp.NPY_ARRAY_F_CONTIGUOUS) \
            or not cnp.PyArray_ISNOTSWAPPED(x) \
            or not cnp.PyArray_FLAGS(x) & cnp.NPY_ARRAY_ALIGNED:
        raise ValueError("fastopt._agc.unit_norms: internal error: array not normalised")
    _units(x, c_order, lay, &t)
    out = np.empty(t.n_units, np.float64)
    if t.n_units * t.unit_len == 0:
        out[...] = 0.0
        return out
    with nogil:
        rc = fo_agc_unit_sumsq(cnp.PyArray_DATA(x),
                               FO_F32 if type_num == cnp.NPY_FLOAT else FO_F64,
                               t.n_units, t.unit_len, t.kind,
                               <double *>cnp.PyArray_DATA(out))
    _check_rc(rc)
    return np.sqrt(out, out=out)
