# Acceptors of the fast path (included by _ext.pyx): each says whether one
# argument is already in the exact form the C code needs. They decline
# (return False, 0 or -1); they never raise for user input -- raising is
# fastopt/_validation.py's job once the fast path has declined.

import sys

from cpython.ref cimport Py_XDECREF

# Largest n_threads accepted, as _validation.MAX_THREADS (the C drivers also
# never start more threads than a call has 64 KiB pieces of work).
cdef enum:
    MAX_THREADS = 1024
    LAYOUT_OI = 0
    LAYOUT_IO = 1

cdef int _W = cnp.NPY_ARRAY_WRITEABLE | cnp.NPY_ARRAY_ALIGNED   # a written array
cdef int _R = cnp.NPY_ARRAY_ALIGNED                              # a read array
cdef dict _modules = sys.modules


cdef extern from "Python.h":
    int PyContextVar_Get(object var, PyObject *default_value, PyObject **value) except -1

# set_num_threads()'s ContextVar, held in C: read through the C API on every
# call (a Python-level .get() costs ~600 instructions, this ~60).
cdef object _n_threads_var = _default_n_threads


cdef inline int _n_threads(object n_threads):
    """Resolve n_threads (None: the set_num_threads() value, else OpenMP's
    default) to a positive count, or 0 to decline."""
    cdef long long v
    cdef int overflow = 0
    cdef PyObject *chosen = NULL
    if n_threads is None:
        if PyContextVar_Get(_n_threads_var, NULL, &chosen) < 0:
            return 0
        n_threads = <object>chosen     # a new reference of ours: drop it
        Py_XDECREF(chosen)
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


cdef inline int _layout(object layout):
    """LAYOUT_OI, LAYOUT_IO, or -1 to decline."""
    if type(layout) is not str:
        return -1
    if layout == "oi":
        return LAYOUT_OI
    if layout == "io":
        return LAYOUT_IO
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


cdef inline bint _no_steps(PyObject **s):
    """s: the public call's step options (grad_scale, max_grad_norm,
    norm_type, clip_convention, clip_value, skip_if_nonfinite), borrowed.
    True when none is set (the plain update); anything else declines, and
    fastopt/_ops.py runs the whole step."""
    norm_type = <object>s[2]
    convention = <object>s[3]
    return (<object>s[0] is None and <object>s[1] is None and <object>s[4] is None
            and <object>s[5] is False and type(convention) is str and convention == "torch"
            and ((type(norm_type) is float and <double>norm_type == 2.0)
                 or (type(norm_type) is int and norm_type == 2)))


cdef inline bint _no_step_options(object steps):
    """_no_steps over a tuple of the six, or None (none set)."""
    if steps is None:
        return True
    return (type(steps) is tuple and PyTuple_GET_SIZE(steps) == 6
            and _no_steps(_items(steps)))


cdef inline bint _clip_value(object c, double *out):
    """A positive finite float, or None (excluded, stored as 0)."""
    if c is None:
        out[0] = 0.0
        return True
    return _real(c, out) and out[0] > 0


cdef bint _masked(object o):
    """o is a numpy.ma.MaskedArray (its masked elements must not be
    updated, so the fast path declines it and _validation rejects it). A
    masked array cannot exist before numpy.ma is imported."""
    ma = _modules.get("numpy.ma")
    return ma is not None and isinstance(o, ma.MaskedArray)


cdef inline bint _is_array(object o):
    """An ndarray, or a subclass of it other than a masked array."""
    if cnp.PyArray_CheckExact(o):
        return True
    return cnp.PyArray_Check(o) and not _masked(o)


cdef extern from *:
    """
    /* The per-array test of the gather's hot loop, on borrowed pointers (no
       reference counting): fo_exact_array: o is exactly a numpy.ndarray;
       fo_accept: the ndarray o has type_num, native byte order, every bit of
       flags and, when like is not NULL, like's shape. */
    static inline int fo_exact_array(PyObject *o)
    {
        return Py_TYPE(o) == &PyArray_Type;
    }
    #define fo_type(o) PyArray_TYPE((PyArrayObject *)(o))
    #define fo_flags(o) PyArray_FLAGS((PyArrayObject *)(o))
    #define fo_size(o) ((int64_t)PyArray_SIZE((PyArrayObject *)(o)))
    #define fo_data(o) PyArray_DATA((PyArrayObject *)(o))
    static inline int fo_accept(PyObject *o, int type_num, int flags, PyObject *like)
    {
        PyArrayObject *a = (PyArrayObject *)o, *l = (PyArrayObject *)like;
        int nd;
        if (PyArray_TYPE(a) != type_num || !PyArray_ISNOTSWAPPED(a)
                || (PyArray_FLAGS(a) & flags) != flags)
            return 0;
        if (l == NULL)
            return 1;
        nd = PyArray_NDIM(l);
        return PyArray_NDIM(a) == nd && (nd == 0 || memcmp(
            PyArray_DIMS(a), PyArray_DIMS(l), nd * sizeof(npy_intp)) == 0);
    }
    """
    bint fo_exact_array(PyObject *o) noexcept
    int fo_type(PyObject *o) noexcept
    int fo_flags(PyObject *o) noexcept
    int64_t fo_size(PyObject *o) noexcept
    void *fo_data(PyObject *o) noexcept
    bint fo_accept(PyObject *o, int type_num, int flags, PyObject *like) noexcept


cdef inline int _check_rc(int rc) except -1:
    if rc == FO_ENOMEM:
        raise MemoryError("fastopt: out of memory in the C driver")
    if rc != FO_OK:
        raise RuntimeError(f"fastopt: internal error {rc} from the C driver")
    return 0
