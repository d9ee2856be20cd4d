# cython: language_level=3, embedsignature=True, cdivision=True
"""fastopt's core extension: the fast paths over the C core (src_c/). It
knows arrays, pointers and numbers; the front ends' own compiled checks
(fastopt/optim/_compiled.pyx, fastopt/torch/_compiled.pyx) and the tools'
bandwidth probe (fastopt/_cli/_probe.pyx) are extensions of their own.

Each entry point (momentum, adagrad, adam, agc, agc_momentum, the step,
the norm, the clip) is a *fast path*: it accepts a call only when every
argument is already in the exact form the C code needs (ndarrays of an
element type fastopt/_dtypes.py registered, in native order, C- or
F-contiguous in the same order within a tensor, aligned, written arrays
writeable, each array of its parameter's shape, no written array
overlapping another array, plain Python float/int scalars in range). Such a
call is checked at C speed through NumPy's C-API (no memoryviews: one costs
~160 ns per array), gathered by ONE table-driven gather (_gather, over the
roles of the op: x, g, states; read or written) and run as ONE C call with
the GIL released (_run); the function returns True.

Anything else makes it return False *before anything is written*, and
fastopt/_dispatch.py takes over: it checks the call in full through
fastopt/_validation.py (which raises for the arrays and shared scalars),
normalises it and calls back. These functions never raise for bad input.

Included: _accept.pxi (the acceptors), _threadfacts.pxi (OpenMP facts),
_buildfacts.pxi (compiler and flags),
_gather.pxi (the one gather and _run), _entry.pxi (the C entry of the public
ops: their arguments parsed in C, the fast paths called without a tuple),
_step.pxi (the whole step), _plan.pxi (the prepared step, StepPlan).

How a tensor's memory forms AGC units (fo_agc_tensor.kind) follows from its
shape, its memory order and the layout:

=================================  ==============  ==============
tensor (after squeezing dims of 1)  C order         F order
=================================  ==============  ==============
ndim <= 1: the whole tensor         1 row           1 row
"oi": unit = x[i, ...]              rows            columns
"io": unit = x[..., j]              columns         rows
=================================  ==============  ==============
"""

from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport PyObject
from cpython.sequence cimport PySequence_Fast_ITEMS as _items
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.math cimport NAN, isfinite
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t, uintptr_t

cimport numpy as cnp

from fastopt._cfastopt cimport (
    FO_AGC_COLS, FO_AGC_ROWS, FO_ENOMEM, FO_F32, FO_F64, FO_NESTEROV, FO_OK,
    FO_STANDARD, fo_adagrad, fo_adagrad_args, fo_adam, fo_adam_args, fo_agc,
    fo_agc_momentum, fo_agc_tensor, fo_agc_unit_sumsq, fo_chunk_bytes,
    fo_find_overlap, fo_get_thread_stats, fo_have_openmp, fo_isa_active,
    fo_isa_paths, fo_pool_size, fo_pool_spin_ns, fo_thread_stats,
    fo_max_threads, fo_momentum, fo_momentum_args, fo_num_procs,
    fo_serial_bytes, fo_tensor,
    FO_EINVAL, FO_ESTALE, FO_MEASURE_ALWAYS, FO_MEASURE_GIVEN, FO_MEASURE_NEEDED,
    fo_clip_grads, fo_global_norm, fo_step, fo_step_guard, fo_step_group, fo_step_opts,
    fo_step_result, fo_step_tensor, FO_N_RULES, FO_N_DTYPES, FO_STEP_FLAGS, FO_STEP_EXTRA,
    fo_rule_info, fo_rule_facts, fo_dtype_name, fo_dtype_size, fo_pair, fo_grad_pair,
    fo_copy_ok, fo_spair, fo_convert, fo_round_stochastic, FO_KEY_STEP, FO_STEP_ROUND_NEAREST,
    FO_STEP_ROUND_STOCHASTIC, FO_STEP_DECAY_AFTER, FO_Q8, FO_Q8_BLOCK, fo_q8_map, fo_q8_store)

import numpy as np

cnp.import_array()

include "_threadfacts.pxi"
include "_accept.pxi"
include "_buildfacts.pxi"


# ------------------------------------------------------------ the op table

cdef enum:
    STACK_TENSORS = 8      # tensors gathered in the C stack before the heap
    MAX_ROLES = 6          # x, g, up to three states and a rounded copy
    MAX_RANGES = 9         # a tensor's byte ranges: its roles', and 8-bit states' absmax
    # what a role's element type must be (Op.kind)
    ROLE_SAME = 0          # x's (and x's a type a step updates)
    ROLE_GRAD = 1          # a gradient's: of x's storage pair (a 16-bit x's own type
    #                        with Call.half_x), or (role 0) any
    ROLE_COPY = 2          # a copy's: a row of x's FO_COPY_TABLE
    ROLE_STATE = 3         # a state's: x's, or one stored apart (FO_SPAIR_TABLE)


cdef union Rec:
    # A tensor's record, as the op's C driver takes it.
    fo_tensor plain
    fo_agc_tensor agc
    fo_step_tensor step


cdef struct Call:
    # Per-call buffers, in the C stack frame of the entry point for a few
    # tensors (a cdef class cost ~3,000 instructions a call: allocating and
    # zeroing 2.5 KB), on the heap beyond that. ts holds the op's records
    # (Rec: the largest record sizes the stack room).
    Rec stack_t[STACK_TENSORS]
    int64_t stack_e[STACK_TENSORS * MAX_RANGES * 2]
    int64_t stack_s[STACK_TENSORS * MAX_RANGES * 6 + 1]
    unsigned char stack_o[STACK_TENSORS * MAX_RANGES]
    void *ts
    int64_t *ext
    int64_t *scratch
    unsigned char *is_out
    Py_ssize_t cap
    Py_ssize_t nt      # tensors in the call (set by _gather)
    bint c_only        # every tensor C-contiguous (a step that measures the norm)
    bint half_x        # 16-bit parameters of the whole step taken (in their own type)
    int dt[MAX_ROLES]  # the element type of each role of the tensor being emitted
    # the whole step only: each tensor's group index (a tuple held by the
    # caller) and the number of groups
    PyObject *index
    Py_ssize_t ng
    uint64_t key0      # tensor i's stochastic rounding key: key0 + i * FO_KEY_STEP,
    PyObject *keys     # or keys[i] (a tuple of ints held by the caller; NULL: none)
    PyObject *absmax   # 8-bit states' absmax: a tuple of nt (held by the caller; NULL: none),
    int absmax_at      # their byte ranges' first role index (after the op's roles)
    # AGC only: per-tensor clipping (a tuple held by the caller, or NULL for
    # clip_all on every tensor) and the unit layout
    PyObject *clips
    double clip_all
    int layout


ctypedef int (*emit_t)(Call *c, Py_ssize_t i, PyObject *x, int64_t n, int dtype,
                       bint c_order, void **p) except -1
ctypedef int (*driver_t)(const void *ts, int64_t nt, const void *args,
                         int n_threads) noexcept nogil


cdef struct Op:
    # One row of the op table: the arrays of a tensor, in the order the
    # caller passes them (x, g, states), whether the C code writes each and
    # whether it may be None (a state the tensor's rule has not), how a
    # tensor's record is filled, and the C driver (NULL: the caller runs it).
    int n_roles
    unsigned char written[MAX_ROLES]
    unsigned char optional[MAX_ROLES]
    unsigned char kind[MAX_ROLES]     # ROLE_*
    size_t rec_size
    emit_t emit
    driver_t driver


cdef struct AgcArgs:
    double eps
    fo_momentum_args m


cdef int _emit_tensor(Call *c, Py_ssize_t i, PyObject *x, int64_t n, int dtype,
                      bint c_order, void **p) except -1:
    cdef fo_tensor *t = (<fo_tensor *>c.ts) + i
    t.x = p[0]
    t.g = p[1]
    t.s1 = p[2]
    t.s2 = p[3]
    t.n = n
    t.dtype = dtype
    t.quantum = 0
    return 1


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


cdef int _emit_agc(Call *c, Py_ssize_t i, PyObject *x, int64_t n, int dtype,
                   bint c_order, void **p) except -1:
    cdef fo_agc_tensor *t = (<fo_agc_tensor *>c.ts) + i
    if dtype != FO_F32 and dtype != FO_F64:     # AGC's kernels read float or double
        return 0
    if c.clips != NULL:
        if PyTuple_GET_SIZE(<object>c.clips) != c.nt:
            return 0
        if not _clip_value(<object>PyTuple_GET_ITEM(<object>c.clips, i), &t.clipping):
            return 0
    else:
        t.clipping = c.clip_all
    t.x = p[0]
    t.g = p[1]
    t.v = p[2]
    t.dtype = dtype
    _units(<cnp.ndarray>x, c_order, c.layout, t)
    return 1


cdef int _drive_momentum(const void *ts, int64_t nt, const void *a, int nth) noexcept nogil:
    return fo_momentum(<const fo_tensor *>ts, nt, <const fo_momentum_args *>a, nth)


cdef int _drive_adagrad(const void *ts, int64_t nt, const void *a, int nth) noexcept nogil:
    return fo_adagrad(<const fo_tensor *>ts, nt, <const fo_adagrad_args *>a, nth)


cdef int _drive_adam(const void *ts, int64_t nt, const void *a, int nth) noexcept nogil:
    return fo_adam(<const fo_tensor *>ts, nt, <const fo_adam_args *>a, nth)


cdef int _drive_agc(const void *ts, int64_t nt, const void *a, int nth) noexcept nogil:
    return fo_agc(<const fo_agc_tensor *>ts, nt, (<const AgcArgs *>a).eps, nth)


cdef int _drive_agc_momentum(const void *ts, int64_t nt, const void *a,
                             int nth) noexcept nogil:
    return fo_agc_momentum(<const fo_agc_tensor *>ts, nt, (<const AgcArgs *>a).eps,
                           &(<const AgcArgs *>a).m, nth)


cdef Op _op(int n_roles, str written, size_t rec_size, emit_t emit, driver_t driver):
    """A row of the op table; written: per role "W" (written) or "R" (read)
    of x's type, "G" (read) or "H" (written) a gradient of x's storage pair
    (in role 0: a gradient alone), "C" a written rounded copy of x, "S" a
    written state (x's type, or a type stored apart for x's); in lower
    case when the role may be None."""
    cdef Op op
    cdef int k
    op.n_roles = n_roles
    for k in range(MAX_ROLES):
        op.written[k] = k < n_roles and written[k] in "WwHCcSs"
        op.optional[k] = k < n_roles and written[k] in "wrgcs"
        op.kind[k] = (ROLE_GRAD if k < n_roles and written[k] in "GgH" else
                      ROLE_COPY if k < n_roles and written[k] in "Cc" else
                      ROLE_STATE if k < n_roles and written[k] in "Ss" else ROLE_SAME)
    op.rec_size = rec_size
    op.emit = emit
    op.driver = driver
    return op


#        roles:  x  g  states          record                  driver
cdef Op OP_MOMENTUM = _op(3, "WRW", sizeof(fo_tensor), _emit_tensor, _drive_momentum)
cdef Op OP_ADAGRAD = _op(3, "WRW", sizeof(fo_tensor), _emit_tensor, _drive_adagrad)
cdef Op OP_ADAM = _op(4, "WRWW", sizeof(fo_tensor), _emit_tensor, _drive_adam)
cdef Op OP_AGC = _op(2, "RW", sizeof(fo_agc_tensor), _emit_agc, _drive_agc)
cdef Op OP_AGC_MOMENTUM = _op(3, "WRW", sizeof(fo_agc_tensor), _emit_agc,
                              _drive_agc_momentum)


include "_gather.pxi"
include "_step.pxi"
include "_plan.pxi"


# ------------------------------------------------------------ fast paths

# Each op's fast path is a cdef function over borrowed pointers: arrays (one
# argument per role) and s (its scalars, in the order of the op's row in
# fastopt/_ops.py); 1 if done, 0 to decline. The public functions reach them
# from C (_entry.pxi); the def wrappers below take two tuples, for
# fastopt/_dispatch.py's call of a normalised call (and the tests).

cdef int _momentum(PyObject **arrays, PyObject **s) except -1:
    """s: lr, t, alpha, beta, norm_coefficient, mode, n_threads."""
    cdef fo_momentum_args a
    cdef Call c
    cdef int nth = _n_threads(<object>s[6])
    a.mode = _mode(<object>s[5])
    if not (nth and a.mode >= 0 and _real(<object>s[0], &a.lr) and a.lr >= 0
            and _count(<object>s[1], &a.t) and _real(<object>s[2], &a.alpha)
            and _real(<object>s[3], &a.beta) and _real(<object>s[4], &a.norm_coefficient)):
        return 0
    return _run(&OP_MOMENTUM, &a, nth, &c, arrays)


cdef int _adagrad(PyObject **arrays, PyObject **s) except -1:
    """s: lr, t, decay_factor, epsilon, norm_coefficient, n_threads."""
    cdef fo_adagrad_args a
    cdef Call c
    cdef int nth = _n_threads(<object>s[5])
    if not (nth and _real(<object>s[0], &a.lr) and a.lr >= 0 and _count(<object>s[1], &a.t)
            and _real(<object>s[2], &a.decay_factor) and a.decay_factor >= 0
            and _real(<object>s[3], &a.epsilon) and a.epsilon >= 0
            and _real(<object>s[4], &a.norm_coefficient)):
        return 0
    return _run(&OP_ADAGRAD, &a, nth, &c, arrays)


cdef int _adam(PyObject **arrays, PyObject **s) except -1:
    """s: lr, t, alpha, beta, epsilon, norm_coefficient,
    norm_coefficient_post, n_threads."""
    cdef fo_adam_args a
    cdef Call c
    cdef int nth = _n_threads(<object>s[7])
    if not (nth and _real(<object>s[0], &a.lr) and a.lr >= 0 and _count(<object>s[1], &a.t)
            and _real(<object>s[2], &a.alpha) and 0 <= a.alpha <= 1
            and (a.alpha < 1 or a.t == 0)
            and _real(<object>s[3], &a.beta) and 0 <= a.beta <= 1
            and _real(<object>s[4], &a.epsilon) and a.epsilon >= 0
            and _real(<object>s[5], &a.norm_coefficient)
            and _real(<object>s[6], &a.norm_coefficient_post)):
        return 0
    return _run(&OP_ADAM, &a, nth, &c, arrays)


cdef bint _clipping(Call *c, object clipping, object layout):
    """Set c's AGC fields; False to decline. The caller holds `clipping`
    (a tuple, see _pin) for the duration of the call."""
    c.layout = _layout(layout)
    c.clips = NULL
    c.clip_all = 0.0
    if c.layout < 0:
        return False
    if type(clipping) is tuple:
        c.clips = <PyObject *>clipping
        return True
    return clipping is not None and _clip_value(clipping, &c.clip_all)


cdef int _agc(PyObject **arrays, PyObject **s) except -1:
    """s: clipping, eps, layout, n_threads."""
    cdef AgcArgs a
    cdef Call c
    cdef int nth = _n_threads(<object>s[3])
    clipping = _pin(<object>s[0])
    if not (nth and _real(<object>s[1], &a.eps) and a.eps > 0
            and _clipping(&c, clipping, <object>s[2])):
        return 0
    return _run(&OP_AGC, &a, nth, &c, arrays)


cdef int _agc_momentum(PyObject **arrays, PyObject **s) except -1:
    """s: lr, t, alpha, beta, norm_coefficient, mode, clipping, eps, layout,
    n_threads."""
    cdef AgcArgs a
    cdef Call c
    cdef int nth = _n_threads(<object>s[9])
    clipping = _pin(<object>s[6])
    a.m.mode = _mode(<object>s[5])
    if not (nth and a.m.mode >= 0 and _real(<object>s[0], &a.m.lr) and a.m.lr >= 0
            and _count(<object>s[1], &a.m.t) and _real(<object>s[2], &a.m.alpha)
            and _real(<object>s[3], &a.m.beta)
            and _real(<object>s[4], &a.m.norm_coefficient)
            and _real(<object>s[7], &a.eps) and a.eps > 0
            and _clipping(&c, clipping, <object>s[8])):
        return 0
    return _run(&OP_AGC_MOMENTUM, &a, nth, &c, arrays)


include "_entry.pxi"
include "_capi.pxi"


# The same fast paths over two tuples, (arrays, scalars) in the order of the
# op's row in fastopt/_ops.py; the ONNX rules also take the public call's
# step options (see _no_step_options). True if done, False to decline.

cdef inline bint _fits(tuple arrays, Py_ssize_t n_arrays, tuple scalars, Py_ssize_t n_scalars,
                       object steps):
    return (PyTuple_GET_SIZE(arrays) == n_arrays and PyTuple_GET_SIZE(scalars) == n_scalars
            and _no_step_options(steps))


def momentum(tuple arrays not None, tuple scalars not None, steps=None):
    """Fast path of fastopt.onnx_momentum: arrays (x, g, v), scalars (lr, t,
    alpha, beta, norm_coefficient, mode, n_threads). True if done, False to
    decline."""
    return _fits(arrays, 3, scalars, 7, steps) and _momentum(_items(arrays),
                                                             _items(scalars)) == 1


def adagrad(tuple arrays not None, tuple scalars not None, steps=None):
    """Fast path of fastopt.onnx_adagrad: arrays (x, g, h), scalars (lr, t,
    decay_factor, epsilon, norm_coefficient, n_threads)."""
    return _fits(arrays, 3, scalars, 6, steps) and _adagrad(_items(arrays),
                                                            _items(scalars)) == 1


def adam(tuple arrays not None, tuple scalars not None, steps=None):
    """Fast path of fastopt.onnx_adam: arrays (x, g, v, h), scalars (lr, t, alpha,
    beta, epsilon, norm_coefficient, norm_coefficient_post, n_threads)."""
    return _fits(arrays, 4, scalars, 8, steps) and _adam(_items(arrays),
                                                         _items(scalars)) == 1


def agc(tuple arrays not None, tuple scalars not None):
    """Fast path of fastopt.agc: arrays (x, g), scalars (clipping, eps,
    layout, n_threads)."""
    return _fits(arrays, 2, scalars, 4, None) and _agc(_items(arrays), _items(scalars)) == 1


def agc_momentum(tuple arrays not None, tuple scalars not None, steps=None):
    """Fast path of fastopt.onnx_momentum with clipping: arrays (x, g, v),
    scalars (lr, t, alpha, beta, norm_coefficient, mode, clipping, eps,
    layout, n_threads)."""
    return _fits(arrays, 3, scalars, 10, steps) and _agc_momentum(_items(arrays),
                                                                  _items(scalars)) == 1


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
        raise ValueError("fastopt._ext.unit_norms: internal error: array not normalised")
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
