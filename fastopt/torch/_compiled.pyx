# cython: language_level=3, embedsignature=True, cdivision=True
"""fastopt.torch's prepared step, per step (fastopt/torch/_prep.py): the
parameters', states' and gradients' attributes read, the counts read and
advanced. The torch adapter's own small extension: the core (fastopt._ext)
knows arrays and pointers, not torch objects. No torch import: the tensors
are Python objects whose attributes are read here, and torch.strided and
torch.Tensor arrive as arguments. Compiled because the loop runs once per
parameter every step, and as bytecode it cost more than the torch calls it
makes (1000 x 1e3 AdamW: 2.4 us a parameter in Python)."""

from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int64_t

cimport numpy as cnp

import numpy as np

cnp.import_array()

from cpython.dict cimport PyDict_Next, PyDict_Size
from cpython.long cimport PyLong_AsVoidPtr
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.math cimport floor

cdef double _MAX_COUNT = 9007199254740992.0     # 2**53


cdef inline bint _count_ok(double v) noexcept:
    """fastopt.torch._base._whole, compiled: a whole number in [0, 2**53)."""
    return 0.0 <= v < _MAX_COUNT and v == floor(v)


cdef double _count_read(cnp.ndarray v) noexcept:
    """A 0-d float32/float64 count's value (build checked the dtype)."""
    if cnp.PyArray_TYPE(v) == cnp.NPY_FLOAT32:
        return (<float *>cnp.PyArray_DATA(v))[0]
    return (<double *>cnp.PyArray_DATA(v))[0]


cdef extern from *:
    """
    #define fo_prefetch(p) __builtin_prefetch((p), 0, 3)
    """
    void _prefetch "fo_prefetch"(const void *p) noexcept nogil


# how many parameters ahead a per-parameter loop asks for the objects it will read
cdef enum:
    _AHEAD = 6


cdef Py_ssize_t _noted(const void **pf, Py_ssize_t q, object t) except -1:
    """Note in pf[q:] the memory a check reads of t: the object and, for a
    tensor, the first 256 bytes of its TensorImpl and its StorageImpl's first
    line (torch's ``_cdata`` of a tensor and of a storage: their addresses).
    The new q (at most q + 6)."""
    pf[q] = <PyObject *>t
    q += 1
    try:
        impl, storage = t._cdata, t.untyped_storage()._cdata
    except Exception:       # not a tensor, or one that hides them: the object only
        return q
    if type(impl) is int and type(storage) is int:
        pf[q] = PyLong_AsVoidPtr(impl)
        pf[q + 1] = <char *>pf[q] + 64
        pf[q + 2] = <char *>pf[q] + 128
        pf[q + 3] = <char *>pf[q] + 192
        pf[q + 4] = PyLong_AsVoidPtr(storage)
        q += 5
    return q


cdef class Ahead:
    """The memory each parameter's per-step check will read, prefetched a
    few parameters ahead (:meth:`at`). After a step that streamed more
    than the caches hold, every torch object a check reads is a miss, and
    waiting for them one by one costs more than the reads themselves
    (figures in bench/RESULTS.md). Only ever prefetched, never read: a
    prefetch does not fault, so an address gone stale (an object freed
    since) costs a miss, no more, and the objects are not held."""

    cdef const void **pf        # what item k's check reads: pf[pf0[k]:pf0[k + 1]]
    cdef Py_ssize_t *pf0
    cdef Py_ssize_t n

    def __cinit__(self, items):
        """items: per parameter, in the order checked, the objects its
        check reads (None entries skipped)."""
        cdef Py_ssize_t k, q = 0, total = 0
        items = [tuple(o for o in objs if o is not None) for objs in items]
        self.n = len(items)
        for objs in items:
            total += 6 * len(objs)
        self.pf0 = <Py_ssize_t *>PyMem_Calloc(self.n + 1, sizeof(Py_ssize_t))
        self.pf = <const void **>PyMem_Calloc(total + 1, sizeof(void *))
        if not self.pf0 or not self.pf:
            raise MemoryError()
        for k in range(self.n):
            self.pf0[k] = q
            for o in items[k]:
                q = _noted(self.pf, q, o)
        self.pf0[self.n] = q

    def __dealloc__(self):
        PyMem_Free(self.pf)
        PyMem_Free(self.pf0)

    cdef void at(self, Py_ssize_t k) noexcept:
        """Prefetch what item k + _AHEAD reads (call as item k is checked)."""
        cdef Py_ssize_t j
        if k + _AHEAD < self.n:
            for j in range(self.pf0[k + _AHEAD], self.pf0[k + _AHEAD + 1]):
                _prefetch(self.pf[j])


def torch_state_same(object state, tuple snap):
    """Is state (opt.state, a dict) still the snapshot's (key, value) pairs,
    in order, by identity? Read without hashing a tensor (a tensor's
    __hash__ is Python code)."""
    cdef Py_ssize_t pos = 0, i = 0
    cdef PyObject *key
    cdef PyObject *value
    cdef tuple item
    if not isinstance(state, dict) or len(<dict>state) != PyTuple_GET_SIZE(snap):
        return False
    while PyDict_Next(state, &pos, &key, &value):
        item = <tuple>PyTuple_GET_ITEM(snap, i)
        if key != PyTuple_GET_ITEM(item, 0) or value != PyTuple_GET_ITEM(item, 1):
            return False
        i += 1
    return True


def torch_gather(tuple groups, bint counted, Py_ssize_t add, Py_ssize_t nk,
                 object strided, object tensor):
    """Every parameter's per-step checks (fastopt/torch/_prep.py, the module
    docstring): (gradient addresses, each C group's t, the gradients'
    storages, held through the C call, the counts to advance), or 0 to
    decline this step (a gradient, a count's value) or 1 when what the plan
    holds changed (build anew). groups: per group (dict, params, records);
    a record is (p,) for a parameter planned without a gradient, else (p,
    st, shape, dtype, address, states, count, C group); states ((name,
    tensor, address, dtype), ...); count None (a Python int in st, or no count)
    or (tensor, address, dtype, 0-d NumPy view). tensor: torch.Tensor (a
    gradient of a subclass, whose attributes a __torch_function__ could
    answer, declines; build took parameters, states and counts of torch's
    own classes only)."""
    cdef list ptrs = [], pins = [], counts = [], carried = []
    cdef list ts = [None] * nk, held = [None] * nk
    cdef tuple grp, recs, rec, params
    cdef Py_ssize_t gi, i, n, k
    cdef int64_t t
    cdef dict st
    for gi in range(PyTuple_GET_SIZE(groups)):
        grp = <tuple>PyTuple_GET_ITEM(groups, gi)
        plist = <object>PyTuple_GET_ITEM(grp, 1)
        recs = <tuple>PyTuple_GET_ITEM(grp, 2)
        n = PyTuple_GET_SIZE(recs)
        if type(plist) is not list:
            return 1
        # a copy: Python code that an attribute read below may run (a
        # finalizer, another thread) cannot shrink what is indexed
        params = tuple(<list>plist)
        if PyTuple_GET_SIZE(params) != n:
            return 1
        for i in range(n):
            p = <object>PyTuple_GET_ITEM(params, i)
            rec = <tuple>PyTuple_GET_ITEM(recs, i)
            if <PyObject *>p != PyTuple_GET_ITEM(rec, 0):
                return 1
            g = p.grad
            if PyTuple_GET_SIZE(rec) == 1:
                if g is None:
                    continue
                return 1                    # a first gradient: new states
            if g is None:
                return 1
            st = <dict>PyTuple_GET_ITEM(rec, 1)
            if not _torch_written_same(p, rec, st):
                return 1
            # torch refuses a gradient on another device than its parameter;
            # is_cpu stays: a device address read here would crash, not raise
            if (type(g) is not tensor or g.layout is not strided
                    or g.dtype is not <object>PyTuple_GET_ITEM(rec, 3)
                    or g.shape != <object>PyTuple_GET_ITEM(rec, 2)
                    or not g.is_cpu or not g.is_contiguous() or g.is_neg()):
                return 0
            t = _torch_t(st, <object>PyTuple_GET_ITEM(rec, 6), counted, add, counts)
            if t == -1:
                return 0
            if t == -2:
                return 1
            k = <object>PyTuple_GET_ITEM(rec, 7)
            if ts[k] is None:
                ts[k] = t
            elif ts[k] != t:
                return 1                    # counts diverged: regroup
            if PyTuple_GET_SIZE(rec) > 8:   # a carried scalar (NAdam's mu_product)
                t = _torch_held(st, <tuple>PyTuple_GET_ITEM(rec, 8), held, k, carried)
                if t != 0:
                    return 0 if t == 2 else 1   # 2: the value (this step's input)
            # the storage, not the tensor: set_() or .data = on the gradient
            # from another thread cannot free what C reads
            pins.append(g.untyped_storage())
            ptrs.append(g.data_ptr())
    return tuple(ptrs), ts, pins, counts, held, carried


cdef int _torch_held(dict st, tuple crec, list held, Py_ssize_t k, list carried) except -1:
    """A parameter's carried scalar (crec: its name, tensor, address, dtype,
    0-d NumPy view): its value joins C group k's (held[k]), its view the
    ones written after the step (carried). 0, or 1 when the tensor is no
    longer the plan's or the group's values differ (regroup: the full step
    splits them), or 0-decline as the full step would refuse the value."""
    c = st.get(<object>PyTuple_GET_ITEM(crec, 0))
    if (c is not <object>PyTuple_GET_ITEM(crec, 1)
            or c.data_ptr() != <object>PyTuple_GET_ITEM(crec, 2)
            or c.dtype is not <object>PyTuple_GET_ITEM(crec, 3)):
        return 1
    view = <cnp.ndarray>PyTuple_GET_ITEM(crec, 4)
    v = view[()]
    if not 0.0 <= v <= 1.0:
        return 2                            # the full step says what is wrong
    if held[k] is None:
        held[k] = v
    elif held[k] != v:
        return 1
    carried.append((view, k))
    return 0


def torch_carry(list carried, list after):
    """Each carried scalar's view set to its C group's value after an
    applied step (after[k], of the view's type)."""
    for view, k in carried:
        (<cnp.ndarray>view)[()] = after[k]


cdef int64_t _torch_t(dict st, object cnt, bint counted, Py_ssize_t add,
                      list counts) except -3:
    """The driver's t of a parameter (its state st, its count record cnt),
    its count appended to counts; -1 to decline (the count's value), -2
    when the count is no longer what the plan holds."""
    cdef double v
    if not counted:
        return 1                            # SGD: the buffer exists
    c = st.get("step")
    if cnt is None:                         # a Python int
        if type(c) is not int:
            return -2
        if not 0 <= c < _MAX_COUNT:
            return -1
        counts.append(st)
        return <int64_t>c + add
    if (c is not <object>PyTuple_GET_ITEM(cnt, 0)
            or c.data_ptr() != <object>PyTuple_GET_ITEM(cnt, 1)
            or c.dtype is not <object>PyTuple_GET_ITEM(cnt, 2)):
        return -2
    view = <cnp.ndarray>PyTuple_GET_ITEM(cnt, 3)
    v = _count_read(view)
    if not _count_ok(v):
        return -1
    counts.append(view)
    return <int64_t>v + add


cdef bint _torch_written_same(object p, tuple rec, dict st) except -1:
    """The parameter of record rec and its states (st) as the plan has
    them: the same objects, data addresses, shapes, contiguity and dtypes
    (a state re-typed in place through ``.data`` declines to the full step,
    which refuses it). A state's record: (name, tensor, address, dtype)."""
    cdef tuple sts = <tuple>PyTuple_GET_ITEM(rec, 5), srec
    cdef Py_ssize_t j
    size = <object>PyTuple_GET_ITEM(rec, 2)
    if (p.data_ptr() != <object>PyTuple_GET_ITEM(rec, 4) or p.shape != size
            or p.dtype is not <object>PyTuple_GET_ITEM(rec, 3) or not p.is_contiguous()):
        return False
    for j in range(PyTuple_GET_SIZE(sts)):
        srec = <tuple>PyTuple_GET_ITEM(sts, j)
        s = <object>PyTuple_GET_ITEM(srec, 1)
        if (st.get(<object>PyTuple_GET_ITEM(srec, 0)) is not s
                or s.data_ptr() != <object>PyTuple_GET_ITEM(srec, 2)
                or s.shape != size or s.dtype is not <object>PyTuple_GET_ITEM(srec, 3)
                or not s.is_contiguous()):
            return False
    return True


def torch_advance(list counts):
    """Each count + 1 after an applied step: a 0-d float32/float64 view's
    value rounded to its dtype (as += 1 in torch), or a state dict's int."""
    cdef cnp.ndarray view
    for c in counts:
        if type(c) is np.ndarray:
            view = <cnp.ndarray>c
            if cnp.PyArray_TYPE(view) == cnp.NPY_FLOAT32:
                (<float *>cnp.PyArray_DATA(view))[0] += 1.0
            else:
                (<double *>cnp.PyArray_DATA(view))[0] += 1.0
        else:
            c["step"] += 1


# ---- the flat layout (fastopt/torch/_flat.py) ---------------------------------------

cdef extern from "Python.h":
    # descrobject.h / methodobject.h: a getset descriptor's C getter and a
    # method descriptor's C function (stable since Python 2; not the
    # limited API)
    ctypedef object (*_getter "getter")(object, void *)
    ctypedef struct PyGetSetDef:
        _getter get
        void *closure
    ctypedef struct PyGetSetDescrObject:
        PyGetSetDef *d_getset
    ctypedef object (*_cfunc "PyCFunction")(object, PyObject *)
    ctypedef struct PyMethodDef:
        _cfunc ml_meth
        int ml_flags
    ctypedef struct PyMethodDescrObject:
        PyMethodDef *d_method
    int METH_NOARGS


# torch's own getters of .grad, .dtype, .shape and its data_ptr(), called
# directly (flat_accessors): an attribute read through the type costs a
# lookup and a descriptor call more, ~15 ns each, four of them a parameter
cdef _getter _get_grad = NULL
cdef _getter _get_dtype = NULL
cdef _getter _get_shape = NULL
cdef void *_cl_grad = NULL
cdef void *_cl_dtype = NULL
cdef void *_cl_shape = NULL
cdef _cfunc _data_ptr = NULL


def flat_accessors(grad, dtype, shape, data_ptr):
    """Install torch's getset descriptors of grad, dtype and shape and its
    method descriptor of data_ptr (from torch._C.TensorBase) for
    FlatCheck's direct calls; False (and nothing installed) when they are
    not of those kinds, METH_NOARGS for data_ptr."""
    global _get_grad, _get_dtype, _get_shape, _cl_grad, _cl_dtype, _cl_shape, _data_ptr
    getset = type(type.__dict__["__name__"])
    method = type(str.__dict__["upper"])
    if (type(grad) is not getset or type(dtype) is not getset or type(shape) is not getset
            or type(data_ptr) is not method
            or (<PyMethodDescrObject *>data_ptr).d_method.ml_flags != METH_NOARGS):
        return False
    _get_grad = (<PyGetSetDescrObject *>grad).d_getset.get
    _cl_grad = (<PyGetSetDescrObject *>grad).d_getset.closure
    _get_dtype = (<PyGetSetDescrObject *>dtype).d_getset.get
    _cl_dtype = (<PyGetSetDescrObject *>dtype).d_getset.closure
    _get_shape = (<PyGetSetDescrObject *>shape).d_getset.get
    _cl_shape = (<PyGetSetDescrObject *>shape).d_getset.closure
    _data_ptr = (<PyMethodDescrObject *>data_ptr).d_method.ml_meth
    return True


cdef inline object _grad(object t, bint direct):
    return _get_grad(t, _cl_grad) if direct else t.grad


cdef inline object _dtype(object t, bint direct):
    return _get_dtype(t, _cl_dtype) if direct else t.dtype


cdef inline object _shape(object t, bint direct):
    return _get_shape(t, _cl_shape) if direct else t.shape


cdef inline void *_address(object t, bint direct) except? NULL:
    return PyLong_AsVoidPtr(_data_ptr(t, NULL) if direct else t.data_ptr())


cdef class FlatCheck:
    """Does the flat layout hold this step (fastopt/torch/_flat.py)? Built
    from the groups' records (see __init__), checked by :meth:`check`.
    The facts compared sit in C arrays: the check runs for every parameter
    every step, where each torch attribute read costs 35-100 ns (more with
    its objects out of cache) and each object of ours read is one more
    cache line. The objects a parameter's check reads are prefetched a few
    parameters ahead (Ahead)."""

    cdef tuple keep             # every object the arrays point at, held
    cdef tuple plists           # per group: its params list
    cdef Py_ssize_t ng, n, nst
    cdef bint direct            # torch's getters called directly (flat_accessors)
    cdef Py_ssize_t *sizes      # per group: its number of parameters
    cdef PyObject **params      # per parameter (all groups, in order)
    cdef PyObject **gviews      # the gradient view; NULL outside the layout
    cdef void **pptr
    cdef void **gptr
    cdef PyObject **shapes
    cdef PyObject **dtypes
    cdef PyObject **dicts       # the state dict (NULL: no states)
    cdef Py_ssize_t *st0        # its values are views[st0[i]:st0[i + 1]], in order
    cdef PyObject **views
    cdef void **vptr            # a layout view's address (NULL: another value)
    cdef char *vmine            # 1: the value is a layout view (its address compared)
    cdef Ahead ahead

    def __cinit__(self, tuple groups, bint direct):
        """direct: every parameter and gradient view reads grad, dtype,
        shape and data_ptr through the accessors flat_accessors installed
        (their types override none of them). groups: per group (params
        list, params tuple, records); a record
        is None for a parameter outside the layout (it must have no
        gradient), else (gradient view, parameter address, gradient
        address, shape, dtype, state dict or None, the dict's values in
        order, each as (value, its address if it is a layout view else
        None))."""
        cdef Py_ssize_t gi, i, j, k = 0, m = 0
        cdef tuple grp, rec, sts
        self.keep = groups
        self.direct = direct and _get_grad != NULL
        self.plists = tuple(grp[0] for grp in groups)
        self.ng = len(groups)
        self.n = sum(len(grp[1]) for grp in groups)
        self.nst = sum(len(rec[6]) for grp in groups for rec in grp[2] if rec is not None)
        self.sizes = <Py_ssize_t *>PyMem_Calloc(self.ng + 1, sizeof(Py_ssize_t))
        self.params = <PyObject **>PyMem_Calloc(self.n + 1, sizeof(PyObject *))
        self.gviews = <PyObject **>PyMem_Calloc(self.n + 1, sizeof(PyObject *))
        self.pptr = <void **>PyMem_Calloc(self.n + 1, sizeof(void *))
        self.gptr = <void **>PyMem_Calloc(self.n + 1, sizeof(void *))
        self.shapes = <PyObject **>PyMem_Calloc(self.n + 1, sizeof(PyObject *))
        self.dtypes = <PyObject **>PyMem_Calloc(self.n + 1, sizeof(PyObject *))
        self.dicts = <PyObject **>PyMem_Calloc(self.n + 1, sizeof(PyObject *))
        self.st0 = <Py_ssize_t *>PyMem_Calloc(self.n + 1, sizeof(Py_ssize_t))
        self.views = <PyObject **>PyMem_Calloc(self.nst + 1, sizeof(PyObject *))
        self.vptr = <void **>PyMem_Calloc(self.nst + 1, sizeof(void *))
        self.vmine = <char *>PyMem_Calloc(self.nst + 1, sizeof(char))
        if (not self.sizes or not self.params
                or not self.gviews or not self.pptr or not self.gptr or not self.shapes
                or not self.dtypes or not self.dicts
                or not self.st0 or not self.views or not self.vptr or not self.vmine):
            raise MemoryError()
        for gi in range(self.ng):
            grp = <tuple>groups[gi]
            self.sizes[gi] = len(grp[1])
            for i in range(self.sizes[gi]):
                self.params[k] = <PyObject *>grp[1][i]
                self.st0[k] = m
                if grp[2][i] is not None:
                    rec = <tuple>grp[2][i]
                    self.gviews[k] = <PyObject *>rec[0]
                    self.pptr[k] = PyLong_AsVoidPtr(rec[1])
                    self.gptr[k] = PyLong_AsVoidPtr(rec[2])
                    self.shapes[k] = <PyObject *>rec[3]
                    self.dtypes[k] = <PyObject *>rec[4]
                    if rec[5] is not None:
                        self.dicts[k] = <PyObject *>rec[5]
                    sts = <tuple>rec[6]
                    for j in range(len(sts)):
                        self.views[m] = <PyObject *>sts[j][0]
                        if sts[j][1] is not None:
                            self.vmine[m] = 1
                            self.vptr[m] = PyLong_AsVoidPtr(sts[j][1])
                        m += 1
                k += 1
        self.st0[k] = m
        self.ahead = Ahead([(p,) if rec is None else (p, rec[0], rec[5], *(v for v, _ in rec[6]))
                            for grp in groups for p, rec in zip(grp[1], grp[2])])

    def __dealloc__(self):
        PyMem_Free(self.sizes)
        PyMem_Free(self.params)
        PyMem_Free(self.gviews)
        PyMem_Free(self.pptr)
        PyMem_Free(self.gptr)
        PyMem_Free(self.shapes)
        PyMem_Free(self.dtypes)
        PyMem_Free(self.dicts)
        PyMem_Free(self.st0)
        PyMem_Free(self.views)
        PyMem_Free(self.vptr)
        PyMem_Free(self.vmine)

    def check(self):
        """0: the layout holds; 1: a gradient is not the layout's (this step
        declines, the record stays); 2: something else moved (build anew).
        A gradient is the layout's own view object at its address (its
        dtype and shape change only if it is re-viewed in place); a
        parameter keeps its address, dtype and shape; its state dict holds
        the same objects in the same order (walked, not hashed), each
        layout view at its address (``share_memory_()`` or ``.data =``
        moves it)."""
        cdef Py_ssize_t gi, i, j, k = 0, n, pos
        cdef tuple params
        cdef PyObject *key
        cdef PyObject *value
        cdef bint d = self.direct
        for gi in range(self.ng):
            plist = <object>PyTuple_GET_ITEM(self.plists, gi)
            n = self.sizes[gi]
            # a copy: Python code that an attribute read below may run (a
            # finalizer, another thread) cannot shrink what is indexed
            params = tuple(<list>plist)
            if PyTuple_GET_SIZE(params) != n:
                return 2
            for i in range(n):
                self.ahead.at(k)
                p = <object>PyTuple_GET_ITEM(params, i)
                if <PyObject *>p != self.params[k]:
                    return 2
                g = _grad(p, d)
                if self.gviews[k] == NULL:
                    if g is not None:
                        return 1
                    k += 1
                    continue
                if <PyObject *>g != self.gviews[k] or _address(g, d) != self.gptr[k]:
                    return 1
                if (_address(p, d) != self.pptr[k]
                        or _dtype(p, d) is not <object>self.dtypes[k]
                        or _shape(p, d) != <object>self.shapes[k]):
                    return 2
                if self.dicts[k] != NULL:
                    j, pos = self.st0[k], 0
                    if PyDict_Size(<object>self.dicts[k]) != self.st0[k + 1] - j:
                        return 2
                    while PyDict_Next(<object>self.dicts[k], &pos, &key, &value):
                        if value != self.views[j] or (
                                self.vmine[j] and _address(<object>value, d) != self.vptr[j]):
                            return 2
                        j += 1
                k += 1
        return 0


cdef inline double _count_at(cnp.ndarray a, Py_ssize_t i) noexcept:
    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
        return (<float *>cnp.PyArray_DATA(a))[i]
    return (<double *>cnp.PyArray_DATA(a))[i]


def flat_counts(tuple counts):
    """Each segment's counts (a 1-D float32/float64 array, or None when the
    rule counts nothing: 0): the count when all agree, else the runs of
    equal counts as ((first, stop, count), ...) over the segment's
    parameters; None when a count is not a whole number in [0, 2**53)."""
    cdef list out = [], runs
    cdef cnp.ndarray a
    cdef Py_ssize_t i, i0, n
    cdef double v, w
    for c in counts:
        if c is None:
            out.append(0)
            continue
        a = <cnp.ndarray>c
        n = cnp.PyArray_SIZE(a)
        v = _count_at(a, 0)
        if not _count_ok(v):
            return None
        runs, i0 = [], 0
        for i in range(1, n):
            w = _count_at(a, i)
            if w != v:
                if not _count_ok(w):
                    return None
                runs.append((i0, i, <int64_t>v))
                i0, v = i, w
        if not runs:
            out.append(<int64_t>v)
        else:
            runs.append((i0, n, <int64_t>v))
            out.append(tuple(runs))
    return out


def flat_unbound(tuple params, tuple views, tuple ptrs):
    """The indices of the parameters whose gradient is there but is not the
    layout's view at its address (zero_grad makes it so)."""
    cdef list out = []
    cdef Py_ssize_t i
    for i in range(PyTuple_GET_SIZE(params)):
        g = (<object>PyTuple_GET_ITEM(params, i)).grad
        if g is None:
            continue
        if (<PyObject *>g != PyTuple_GET_ITEM(views, i)
                or g.data_ptr() != <object>PyTuple_GET_ITEM(ptrs, i)):
            out.append(i)
    return out
