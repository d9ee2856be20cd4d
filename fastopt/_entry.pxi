# The public ops' entry (included by _ext.pyx, after the fast paths).
#
# fastopt.onnx_momentum/adagrad/adam/agc are Entry objects: each wraps the Python
# function of the same name in fastopt/_ops.py, which stays the one place of
# the signature (names, defaults, kinds), the docstring and the slow path.
# A call reaches the Entry through vectorcall (PEP 590): it matches the
# keyword names against the function's parameters (by identity: both are
# interned), fills the rest from the function's own __kwdefaults__ (read
# once, when the Entry is made) and offers the call to the op's fast path,
# all in C. When the fast path declines, or the call is anything but plain
# (a missing, extra or unknown argument), the Entry passes the call through
# unchanged to the Python function, so CPython raises its own messages and
# the slow path (fastopt/_dispatch.py) checks, normalises and runs.
#
# Why: a Python function with 17-20 keyword-only parameters costs ~1,200
# instructions a call just to fill their defaults (one dict lookup each);
# this costs a fraction of that (bench/overhead.py; figures in bench/RESULTS.md).

import functools
from inspect import CO_VARARGS, CO_VARKEYWORDS
from types import MethodType

from cpython.object cimport PyTypeObject
from libc.string cimport memcpy, memset


cdef extern from *:
    """
    /* Instances of t become callable through vectorcall, their function
       pointer at byte offset `offset` (PEP 590; tp_call converts a
       tuple-and-dict call). Done once, before any instance is called. */
    static void fo_set_vectorcall(PyTypeObject *t, Py_ssize_t offset)
    {
        t->tp_vectorcall_offset = offset;
        t->tp_call = PyVectorcall_Call;
        t->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
        PyType_Modified(t);
    }
    """
    void fo_set_vectorcall(PyTypeObject *t, Py_ssize_t offset)
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    object PyObject_Vectorcall(object f, PyObject **args, size_t nargsf, PyObject *kwnames)


cdef enum:
    ENTRY_MAX = 24      # parameters of a public op, positional and keyword-only

ctypedef int (*entry_fast_t)(PyObject **arrays, PyObject **s) except -1

_STEPS = ("grad_scale", "max_grad_norm", "norm_type", "clip_convention", "clip_value",
          "skip_if_nonfinite")

# Per op: the keyword-only parameters in the order its entry's fast path
# reads them (s below), and that fast path. The Python signature may list
# them in any order, but must have exactly these (checked when the Entry is
# made, so a parameter added on one side only fails at import).
_ENTRY_ORDER = {
    "momentum": ("lr", "t", "alpha", "beta", "norm_coefficient", "mode", "clipping",
                 "clip_eps", "layout", "n_threads", *_STEPS),
    "adagrad": ("lr", "t", "decay_factor", "epsilon", "norm_coefficient", "n_threads",
                *_STEPS),
    "adam": ("lr", "t", "alpha", "beta", "epsilon", "norm_coefficient",
             "norm_coefficient_post", "n_threads", *_STEPS),
    "agc": ("clipping", "eps", "layout", "n_threads"),
}


cdef int _entry_momentum(PyObject **arrays, PyObject **s) except -1:
    cdef PyObject *plain[7]
    if not _no_steps(s + 10):
        return 0
    if <object>s[6] is not None:              # clipping: AGC-momentum
        return _agc_momentum(arrays, s)
    memcpy(plain, s, 6 * sizeof(PyObject *))  # lr .. mode
    plain[6] = s[9]                           # n_threads
    return _momentum(arrays, plain)


cdef int _entry_adagrad(PyObject **arrays, PyObject **s) except -1:
    return _no_steps(s + 6) and _adagrad(arrays, s)


cdef int _entry_adam(PyObject **arrays, PyObject **s) except -1:
    return _no_steps(s + 8) and _adam(arrays, s)


cdef entry_fast_t _entry_fast(str op) except NULL:
    if op == "momentum":
        return _entry_momentum
    if op == "adagrad":
        return _entry_adagrad
    if op == "adam":
        return _entry_adam
    if op == "agc":
        return _agc
    raise ValueError(f"fastopt._ext.entry: no fast path named {op!r}")


cdef class Entry:
    """A public op: its Python function (``__wrapped__``: signature,
    docstring, slow path) behind a C call that parses the arguments and runs
    the fast path. Made by :func:`entry`."""
    cdef void *vectorcall           # first, at the offset the type records
    cdef object func
    cdef dict kwdefaults            # holds the default objects
    cdef tuple names                # holds the parameter names
    cdef entry_fast_t fast
    cdef Py_ssize_t n_pos, n_all
    cdef PyObject *name[ENTRY_MAX]      # parameter k's name (signature order)
    cdef int slot[ENTRY_MAX]            # parameter k's index in vals
    cdef PyObject *dflt[ENTRY_MAX]      # vals' defaults; NULL: required
    cdef dict __dict__

    def __cinit__(self):
        self.vectorcall = <void *>_entry_call

    def __init__(self, func, str op):
        if self.func is not None:
            raise TypeError("fastopt._ext.Entry: already made")
        self.fast = _entry_fast(op)
        code = func.__code__
        self.n_pos = code.co_argcount
        self.n_all = self.n_pos + code.co_kwonlyargcount
        self.names = code.co_varnames[:self.n_all]
        order = _ENTRY_ORDER[op]
        if (code.co_posonlyargcount or func.__defaults__ or self.n_all > ENTRY_MAX
                or code.co_flags & (CO_VARARGS | CO_VARKEYWORDS)
                or sorted(self.names[self.n_pos:]) != sorted(order)):
            raise RuntimeError(
                f"fastopt internal error: {func.__qualname__}{self.names} must take its "
                f"arrays positionally, then exactly the keyword-only {order} of "
                f"fastopt/_entry.pxi, and no *args or **kwargs")
        self.func = func
        self.kwdefaults = dict(func.__kwdefaults__ or {})
        for k, name in enumerate(self.names):
            self.name[k] = <PyObject *>name
            self.slot[k] = k if k < self.n_pos else self.n_pos + order.index(name)
            self.dflt[self.slot[k]] = NULL          # required
            if name in self.kwdefaults:
                self.dflt[self.slot[k]] = <PyObject *>self.kwdefaults[name]
        functools.update_wrapper(self, func)

    def __get__(self, obj, cls):
        """Bound like a function when stored in a class."""
        return self if obj is None else MethodType(self, obj)

    def __reduce__(self):
        return self.__qualname__          # pickled by name, as a function is

    def __repr__(self):
        return f"<function {self.__module__}.{self.__qualname__} (C entry)>"


cdef inline Py_ssize_t _param(Entry e, PyObject *name):
    """The index of the parameter called name, or -1."""
    cdef Py_ssize_t k
    for k in range(e.n_all):
        if e.name[k] == name:
            return k
    for k in range(e.n_all):      # an equal string that is not the interned one
        if <object>e.name[k] == <object>name:
            return k
    return -1


cdef object _entry_call(Entry self, PyObject **args, size_t nargsf, PyObject *kwnames):
    """The vectorcall of an Entry: the fast path when every argument is
    matched, else the Python function on the same arguments."""
    cdef Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), i, k
    cdef PyObject *vals[ENTRY_MAX]
    cdef bint plain = nargs <= self.n_pos
    if plain:
        memcpy(vals, self.dflt, self.n_all * sizeof(PyObject *))
        memcpy(vals, args, nargs * sizeof(PyObject *))
        if kwnames != NULL:
            for i in range(PyTuple_GET_SIZE(<object>kwnames)):
                k = _param(self, PyTuple_GET_ITEM(<object>kwnames, i))
                if k < nargs:          # unknown, or also given positionally
                    plain = False
                    break
                vals[self.slot[k]] = args[nargs + i]
        for k in range(self.n_all):
            if vals[k] == NULL:        # a required argument is missing
                plain = False
        if plain and self.fast != NULL and self.fast(vals, vals + self.n_pos):
            return None
    return PyObject_Vectorcall(self.func, args, nargsf, kwnames)


cdef void _enable_vectorcall():
    # Each instance's vectorcall pointer sits where this probe's does.
    cdef Entry probe = Entry.__new__(Entry)
    fo_set_vectorcall(<PyTypeObject *>Entry,
                      <char *>&probe.vectorcall - <char *><PyObject *>probe)


_enable_vectorcall()


def entry(str op):
    """Decorator of fastopt/_ops.py: ``@entry("momentum")`` makes the public
    function an :class:`Entry` over the fast path of that op."""
    return functools.partial(Entry, op=op)
