# fastopt.torch's prepared step, per step (fastopt/_torchprep.py), included
# by _ext.pyx after _plan.pxi. No torch import: the tensors are Python
# objects whose attributes are read here, and torch.strided arrives as an
# argument. Compiled for the same reason as remembered_step: the loop runs
# once per parameter every step, and as bytecode it cost more than the
# torch calls it makes (1000 x 1e3 AdamW: 2.4 us a parameter in Python).

from cpython.dict cimport PyDict_Next
from libc.math cimport floor

cdef double _MAX_COUNT = 9007199254740992.0     # 2**53


cdef inline bint _count_ok(double v) noexcept:
    return 0.0 <= v < _MAX_COUNT and v == floor(v)


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
                 object strided):
    """Every parameter's per-step checks (fastopt/_torchprep.py, the module
    docstring): (gradient addresses, each C group's t, the gradients, the
    counts to advance), or 0 to decline (a gradient or a count) or 1 when
    the structure changed (build anew). groups: per group (dict, params,
    records); a record is (p,) for a parameter planned without a gradient,
    else (p, st, shape, dtype, address, states, count, C group), states
    ((name, tensor, address), ...), count None (a Python int in st) or
    (tensor, address, 0-d NumPy view)."""
    cdef list ptrs = [], keep = [], counts = []
    cdef list ts = [None] * nk
    cdef tuple grp, recs, rec, sts, srec, cnt
    cdef Py_ssize_t gi, i, j, n, k
    cdef double v
    cdef dict st
    for gi in range(PyTuple_GET_SIZE(groups)):
        grp = <tuple>PyTuple_GET_ITEM(groups, gi)
        plist = <object>PyTuple_GET_ITEM(grp, 1)
        recs = <tuple>PyTuple_GET_ITEM(grp, 2)
        n = PyTuple_GET_SIZE(recs)
        if type(plist) is not list or len(<list>plist) != n:
            return 1
        for i in range(n):
            p = (<list>plist)[i]
            rec = <tuple>PyTuple_GET_ITEM(recs, i)
            g = p.grad
            if PyTuple_GET_SIZE(rec) == 1:
                if <PyObject *>p != PyTuple_GET_ITEM(rec, 0):
                    return 1
                if g is None:
                    continue
                return 1                    # a first gradient: new states
            if <PyObject *>p != PyTuple_GET_ITEM(rec, 0) or g is None:
                return 1
            st = <dict>PyTuple_GET_ITEM(rec, 1)
            size = <object>PyTuple_GET_ITEM(rec, 2)
            dt = <object>PyTuple_GET_ITEM(rec, 3)
            if (p.data_ptr() != <object>PyTuple_GET_ITEM(rec, 4) or p.shape != size
                    or p.dtype is not dt):
                return 1
            sts = <tuple>PyTuple_GET_ITEM(rec, 5)
            for j in range(PyTuple_GET_SIZE(sts)):
                srec = <tuple>PyTuple_GET_ITEM(sts, j)
                s = <object>PyTuple_GET_ITEM(srec, 1)
                if (st.get(<object>PyTuple_GET_ITEM(srec, 0)) is not s
                        or s.data_ptr() != <object>PyTuple_GET_ITEM(srec, 2)
                        or s.shape != size):
                    return 1
            # torch refuses a gradient on another device than its parameter;
            # is_cpu stays: a device address read here would crash, not raise
            if (g.layout is not strided or g.dtype is not dt or g.shape != size
                    or not g.is_cpu or not g.is_contiguous() or g.is_neg()):
                return 0
            if not counted:
                t = 1                       # SGD: the buffer exists
            elif PyTuple_GET_ITEM(rec, 6) == <PyObject *>None:
                c = st.get("step")          # a Python int
                if type(c) is not int or not 0 <= c < _MAX_COUNT:
                    return 0
                t = c + add
                counts.append(st)
            else:
                cnt = <tuple>PyTuple_GET_ITEM(rec, 6)
                c = st.get("step")
                if (<PyObject *>c != PyTuple_GET_ITEM(cnt, 0)
                        or c.data_ptr() != <object>PyTuple_GET_ITEM(cnt, 1)):
                    return 1
                view = <cnp.ndarray>PyTuple_GET_ITEM(cnt, 2)
                v = _count_read(view)
                if not _count_ok(v):
                    return 0
                t = <int64_t>v + add
                counts.append(view)
            k = <object>PyTuple_GET_ITEM(rec, 7)
            if ts[k] is None:
                ts[k] = t
            elif ts[k] != t:
                return 1                    # counts diverged: regroup
            ptrs.append(g.data_ptr())
            keep.append(g)
    return tuple(ptrs), ts, keep, counts


def torch_advance(list counts):
    """Each count + 1 after an applied step: a state dict's int, or a 0-d
    float32/float64 view's value rounded to its dtype (as += 1 in torch)."""
    cdef cnp.ndarray view
    for c in counts:
        if type(c) is dict:
            (<dict>c)["step"] += 1
        else:
            view = <cnp.ndarray>c
            if cnp.PyArray_TYPE(view) == cnp.NPY_FLOAT32:
                (<float *>cnp.PyArray_DATA(view))[0] += 1.0
            else:
                (<double *>cnp.PyArray_DATA(view))[0] += 1.0
