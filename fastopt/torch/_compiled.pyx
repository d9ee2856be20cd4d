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

from cpython.dict cimport PyDict_Next
from libc.math cimport floor

cdef double _MAX_COUNT = 9007199254740992.0     # 2**53


cdef inline bint _count_ok(double v) noexcept:
    """A count a step may advance: fastopt.torch._base._whole, compiled, less
    its last value (the count after the step must be one _whole takes; the
    full step says why it refuses 2**53 - 1)."""
    return 0.0 <= v < _MAX_COUNT - 1 and v == floor(v)


cdef double _count_read(cnp.ndarray v) noexcept:
    """A 0-d float32/float64 count's value (build checked the dtype)."""
    if cnp.PyArray_TYPE(v) == cnp.NPY_FLOAT32:
        return (<float *>cnp.PyArray_DATA(v))[0]
    return (<double *>cnp.PyArray_DATA(v))[0]


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
        if not 0 <= c < _MAX_COUNT - 1:
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


cdef inline double _count_at(cnp.ndarray a, Py_ssize_t i) noexcept:
    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
        return (<float *>cnp.PyArray_DATA(a))[i]
    return (<double *>cnp.PyArray_DATA(a))[i]


def flat_counts(tuple counts):
    """Each segment's counts (a 1-D float32/float64 array, or None when the
    rule counts nothing: 0): the count when all agree, else the runs of
    equal counts as ((first, stop, count), ...) over the segment's
    parameters; None when a count is not a whole number in [0, 2**53 - 1)."""
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
