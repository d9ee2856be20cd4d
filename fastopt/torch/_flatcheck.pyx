# cython: language_level=3, embedsignature=True, cdivision=True
"""The flat layout's per-step check (fastopt/torch/_flat.py): does every
parameter, gradient and state still sit where the layout put it? Compiled:
it runs for every parameter every step. No torch import: tensors arrive
as Python objects.

Each fact read through torch's Python attributes passes torch's error and
torch-function handling (and stride() its argument parser): several
getters a tensor cost more than the step's memory traffic on many small
tensors (bench/RESULTS.md). So the facts that can move (which TensorImpl
a tensor object owns, and in it the storage, storage offset, dtype, shape
and strides) are read as words of torch's own objects,
at the places torch keeps them: learned once from probe tensors made for
it (learn_fields), and confirmed for every tensor against its attributes
when a check is built (FlatCheck). A tensor that does not confirm, or a
torch that keeps them elsewhere, is read through its attributes. A
TensorImpl is read only after the tensor object is seen to still own it,
and only at the learned places. Which gradient a parameter holds is
read the same way, as the word of its autograd record that points at the
gradient's TensorImpl (learn_grad_fields), where learned and confirmed,
else through torch's getter; each buffer's address once a step through
data_ptr: a storage's memory can move while every word of a TensorImpl
stays (``share_memory_()``)."""

from cpython.dict cimport PyDict_Next, PyDict_Size
from cpython.long cimport PyLong_AsVoidPtr
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from cpython.ref cimport PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int64_t, intptr_t, uint16_t


# ---- where torch keeps a tensor's facts ----------------------------------------------

cdef enum:
    _SCAN = 168     # the bytes of a TensorImpl learn_fields reads (torch 2.x's has 176)
    _INLINE = 5     # dimensions a TensorImpl keeps in place (more: elsewhere)

# the learned places, byte offsets (-1: not learned; everything read through
# the attributes): in a tensor's Python object, its TensorImpl's address; in
# a TensorImpl, its StorageImpl's address, the storage offset, the number of
# dimensions (the sizes follow it, then the strides) and the dtype's 16-bit word
cdef Py_ssize_t _at_impl = -1, _at_storage = -1, _at_offset = -1, _at_dims = -1
cdef Py_ssize_t _at_dtype = -1
cdef dict _dtype_words = {}     # torch dtype -> its word
# in a TensorImpl, its autograd record's address (0: none); in that record,
# its gradient's TensorImpl's address (learn_grad_fields; -1: not learned)
cdef Py_ssize_t _at_meta = -1, _at_grad = -1


cdef inline int64_t _word(const void *at, Py_ssize_t off) noexcept nogil:
    return (<const int64_t *>(<const char *>at + off))[0]


cdef inline uint16_t _word16(const void *at, Py_ssize_t off) noexcept nogil:
    return (<const uint16_t *>(<const char *>at + off))[0]


cdef inline const char *_impl_of(const void *obj) noexcept nogil:
    return (<const char **>(<const char *>obj + _at_impl))[0]


cdef inline const char *_grad_impl_of(const char *impl, Py_ssize_t at_meta,
                                      Py_ssize_t at_grad) noexcept nogil:
    """The TensorImpl of the gradient of the tensor whose TensorImpl is
    impl, read at the places at_meta, at_grad (learn_grad_fields; NULL: no
    autograd record)."""
    cdef const char *meta = (<const char **>(impl + at_meta))[0]
    if meta == NULL:
        return NULL
    return (<const char **>(meta + at_grad))[0]


cdef extern from *:
    """
    #include <fcntl.h>
    #include <unistd.h>
    /* n bytes at `at` into out, or -1 (nothing read) if they are not all
     * readable: through a pipe, whose write fails with EFAULT instead of
     * faulting (n <= a pipe's buffer, so it does not block); closed on
     * exec, so that a process another thread starts meanwhile inherits
     * neither end (atomically where pipe2 exists: Linux) */
    static int fo_read_safely(const void *at, void *out, size_t n)
    {
        int fd[2];
    #ifdef __linux__
        if (pipe2(fd, O_CLOEXEC) != 0)
            return -1;
    #else
        if (pipe(fd) != 0)
            return -1;
        fcntl(fd[0], F_SETFD, FD_CLOEXEC);
        fcntl(fd[1], F_SETFD, FD_CLOEXEC);
    #endif
        int ok = write(fd[1], at, n) == (ssize_t)n && read(fd[0], out, n) == (ssize_t)n;
        close(fd[0]);
        close(fd[1]);
        return ok ? 0 : -1;
    }
    """
    int _read_safely "fo_read_safely"(const void *at, void *out, size_t n) noexcept nogil


cdef Py_ssize_t _only(list places):
    return places[0] if len(places) == 1 else -1


def forget_fields():
    """Read every tensor through its attributes from now on (for tests): a
    check built before finds its words unread and asks to be built anew."""
    global _at_impl
    _at_impl = -1


def learn_fields(list probes):
    """Learn where torch keeps what the check compares, from probes:
    tensors of three or more dtypes, two or more of each, every one on a
    storage of its own, at a storage offset and of a shape (1 to 5
    dimensions) no other probe has, contiguous. A place is taken only if it is the one
    place holding its fact in every probe (the dtype: a 16-bit word equal
    within a dtype and different between dtypes). Kept only if every place
    is found (else none is, and every tensor is read through its
    attributes); returns them as a dict (for tests), else None."""
    global _at_impl, _at_storage, _at_offset, _at_dims, _at_dtype, _dtype_words
    cdef Py_ssize_t o, j, basic = min(type(t).__basicsize__ for t in probes)
    cdef list impls = [<intptr_t>PyLong_AsVoidPtr(t._cdata) for t in probes]
    cdef list facts = [(<intptr_t>PyLong_AsVoidPtr(t.untyped_storage()._cdata),
                        t.storage_offset(), tuple(t.shape), t.stride()) for t in probes]
    cdef const char *at
    _at_impl = -1
    at_impl = _only([o for o in range(16, basic - 7, 8)
                     if all(_word(<PyObject *>t, o) == i for t, i in zip(probes, impls))])
    places = {"storage": [], "offset": [], "dims": [], "dtype": []}
    for o in range(8, _SCAN - 7, 8):
        hold = [True, True, True]
        for i, (storage, offset, dims, strides) in zip(impls, facts):
            at = <const char *><intptr_t>i
            hold[0] = hold[0] and _word(at, o) == storage
            hold[1] = hold[1] and _word(at, o) == offset
            hold[2] = hold[2] and o + 8 * (2 * _INLINE + 1) <= _SCAN and _word(at, o) == len(dims)
            for j in range(len(dims) if hold[2] else 0):
                hold[2] = (hold[2] and _word(at, o + 8 * (j + 1)) == dims[j]
                           and _word(at, o + 8 * (_INLINE + j + 1)) == strides[j])
        for name, ok in zip(("storage", "offset", "dims"), hold):
            if ok:
                places[name].append(o)
    words = {}
    for o in range(0, _SCAN - 1, 2):
        seen = {}
        for t, i in zip(probes, impls):
            seen.setdefault(t.dtype, set()).add(_word16(<const char *><intptr_t>i, o))
        if all(len(w) == 1 for w in seen.values()) and len(
                {next(iter(w)) for w in seen.values()}) == len(seen) >= 3:
            places["dtype"].append(o)
            words = {d: next(iter(w)) for d, w in seen.items()}
    found = {name: _only(ps) for name, ps in places.items()}
    found["impl"] = at_impl
    if min(found.values()) < 0 or len(words) < 3:
        return None
    _at_storage, _at_offset, _at_dims = found["storage"], found["offset"], found["dims"]
    _at_dtype, _dtype_words, _at_impl = found["dtype"], words, at_impl
    return found


cdef enum:
    _META = 16      # the words of an autograd record learn_grad_fields reads


def learn_grad_fields(list probes, list bare):
    """Learn where torch keeps which gradient a tensor holds, after
    learn_fields: probes, tensors that require grad, each with a gradient
    of its own; bare, tensors that do not. In a TensorImpl the place is
    the one word that is 0 in every bare tensor and in every probe the
    address of a record (read only after a read through a pipe shows it
    readable) holding, at one place for all, the address of the probe's
    gradient's TensorImpl. Returns {"meta": ..., "grad": ...}, or None
    (then every gradient is read through torch's getter)."""
    global _at_meta, _at_grad
    cdef Py_ssize_t o, o2
    cdef intptr_t meta
    cdef int64_t words[_META]
    _at_meta = _at_grad = -1
    if _at_impl < 0 or not probes or not bare:
        return None
    impls = [<intptr_t>PyLong_AsVoidPtr(t._cdata) for t in probes]
    grads = [<intptr_t>PyLong_AsVoidPtr(t.grad._cdata) for t in probes]
    zero = [<intptr_t>PyLong_AsVoidPtr(t._cdata) for t in bare]
    found = []
    for o in range(8, _SCAN - 7, 8):
        if any(_word(<const char *><intptr_t>z, o) != 0 for z in zero):
            continue
        metas = [_word(<const char *><intptr_t>i, o) for i in impls]
        if len(set(metas)) != len(metas) or any(m == 0 or m % 8 for m in metas):
            continue
        places = None
        for m, g in zip(metas, grads):
            meta = m
            if _read_safely(<const void *>meta, words, sizeof(words)) != 0:
                places = set()
                break
            here = {8 * o2 for o2 in range(_META) if words[o2] == g}
            places = here if places is None else places & here
        if places is not None and len(places) == 1:
            found.append((o, places.pop()))
    if len(found) != 1:
        return None
    _at_meta, _at_grad = found[0]
    return {"meta": _at_meta, "grad": _at_grad}


cdef struct Fields:
    # what the layout put in a tensor: its facts as words (impl NULL: not
    # confirmed, the attributes alone compared) ...
    const char *impl
    int64_t storage, offset
    int64_t ndim
    int64_t sizes[_INLINE]
    int64_t strides[_INLINE]
    uint16_t dtype
    # ... and through its attributes: the data address, (dtype, shape, strides)
    void *ptr
    PyObject *facts


cdef int _confirm(Fields *f, object t, object ptr, set storages, list held) except -1:
    """Fill f with what t holds now (at ptr); its words only if the learned
    places hold what t's attributes say and t's storage is one of
    storages (None: none is; the layout's buffers', which the check holds and whose
    addresses it reads every step: another storage could move or be
    freed and its address reused unseen)."""
    cdef const char *at
    cdef Py_ssize_t j
    facts = (t.dtype, t.shape, t.stride())
    held.append(facts)
    f.ptr, f.facts, f.impl = PyLong_AsVoidPtr(ptr), <PyObject *>facts, NULL
    word = _dtype_words.get(t.dtype)
    storage = t.untyped_storage()._cdata
    dims, strides = tuple(t.shape), t.stride()
    if (_at_impl < 0 or word is None or storages is None or storage not in storages
            or len(dims) > _INLINE
            or type(t).__basicsize__ < _at_impl + 8):
        return 0
    at = <const char *>PyLong_AsVoidPtr(t._cdata)
    if (_impl_of(<PyObject *>t) != at
            or _word(at, _at_storage) != <intptr_t>PyLong_AsVoidPtr(storage)
            or _word(at, _at_offset) != t.storage_offset() or _word16(at, _at_dtype) != word
            or _word(at, _at_dims) != len(dims)):
        return 0
    for j in range(len(dims)):
        if (_word(at, _at_dims + 8 * (j + 1)) != dims[j]
                or _word(at, _at_dims + 8 * (_INLINE + j + 1)) != strides[j]):
            return 0
        f.sizes[j], f.strides[j] = dims[j], strides[j]
    f.storage, f.offset, f.dtype = _word(at, _at_storage), _word(at, _at_offset), word
    f.ndim, f.impl = len(dims), at
    return 0


cdef inline bint _same(const Fields *f, PyObject *t) noexcept:
    """Does t (confirmed into f) still own f's TensorImpl, with f's facts?
    (False once the places are forgotten.)"""
    cdef const char *at
    cdef Py_ssize_t j
    if _at_impl < 0:
        return False
    at = _impl_of(t)
    if (at != f.impl or _word(at, _at_storage) != f.storage
            or _word(at, _at_offset) != f.offset or _word16(at, _at_dtype) != f.dtype
            or _word(at, _at_dims) != f.ndim):
        return False
    for j in range(f.ndim):
        if (_word(at, _at_dims + 8 * (j + 1)) != f.sizes[j]
                or _word(at, _at_dims + 8 * (_INLINE + j + 1)) != f.strides[j]):
            return False
    return True


include "_flatahead.pxi"


# ---- the check ---------------------------------------------------------------------

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
# lookup and a descriptor call more
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


cdef inline bint _holds(const Fields *f, object t, bint direct, bint words_only) except -1:
    """Is t what f says: its words, where confirmed (and only they if
    words_only), else its address, dtype, shape and strides."""
    if f.impl != NULL:
        if _same(f, <PyObject *>t):
            return True
        if words_only:
            return False
    facts = <tuple>f.facts
    return (_address(t, direct) == f.ptr
            and _dtype(t, direct) is <object>PyTuple_GET_ITEM(facts, 0)
            and _shape(t, direct) == <object>PyTuple_GET_ITEM(facts, 1)
            and t.stride() == <object>PyTuple_GET_ITEM(facts, 2))


cdef class FlatCheck:
    """Does the flat layout hold this step (fastopt/torch/_flat.py)? Built
    from the groups' records (see __init__), checked by :meth:`check`.
    The facts compared sit in C arrays (each object of ours read is one
    more cache line), each tensor's as Fields where it confirmed (see the
    module). The objects a parameter's check reads are prefetched a few
    parameters ahead (Ahead)."""

    cdef tuple keep             # every object the arrays point at, held
    cdef tuple plists           # per group: its params list
    cdef Py_ssize_t ng, n, nst
    cdef bint direct            # torch's getters called directly (flat_accessors)
    cdef Py_ssize_t *sizes      # per group: its number of parameters
    cdef PyObject **params      # per parameter (all groups, in order)
    cdef PyObject **gviews      # the gradient view; NULL outside the layout
    cdef PyObject **dicts       # the state dict (NULL: no states)
    cdef Py_ssize_t *st0        # its values are views[st0[i]:st0[i + 1]], in order
    cdef PyObject **views
    cdef char *vmine            # 1: the value is a layout view (its Fields compared)
    cdef Fields *pf             # per parameter, its gradient view, each value: Fields
    cdef Fields *gf
    cdef Fields *vf
    cdef char *gword            # 1: which gradient the parameter holds is read as words,
    cdef Py_ssize_t at_meta, at_grad    # at the places learned when the check was built
    cdef list held              # the Fields' facts tuples
    cdef tuple bufs             # the buffers' tensors ...
    cdef void **bptr            # ... and their addresses
    cdef Ahead ahead

    def __cinit__(self, tuple groups, bint direct, tuple buffers):
        """direct: every parameter and gradient view reads grad, dtype,
        shape and data_ptr through the accessors flat_accessors installed
        (their types override none of them), and only then may a tensor's
        facts be read as words of torch's objects. buffers: the layout's
        buffers as (tensor, address). groups: per group (params
        list, params tuple, records); a record
        is None for a parameter outside the layout (it must have no
        gradient), else (gradient view, parameter address, gradient
        address, shape, dtype, state dict or None, the dict's values in
        order, each as (value, its address if it is a layout view else
        None)). Every tensor is as the layout put it (FlatLayout.arm)."""
        cdef Py_ssize_t gi, i, j, k = 0, m = 0
        cdef tuple grp, rec, sts
        cdef set storages = {t.untyped_storage()._cdata for t, _ in buffers}
        self.keep, self.held = groups, []
        self.at_meta, self.at_grad = _at_meta, _at_grad
        self.direct = direct and _get_grad != NULL
        self.plists = tuple(grp[0] for grp in groups)
        self.ng = len(groups)
        self.n = sum(len(grp[1]) for grp in groups)
        self.nst = sum(len(rec[6]) for grp in groups for rec in grp[2] if rec is not None)
        self.sizes = <Py_ssize_t *>PyMem_Calloc(self.ng + 1, sizeof(Py_ssize_t))
        self.params = <PyObject **>PyMem_Calloc(self.n + 1, sizeof(PyObject *))
        self.gviews = <PyObject **>PyMem_Calloc(self.n + 1, sizeof(PyObject *))
        self.dicts = <PyObject **>PyMem_Calloc(self.n + 1, sizeof(PyObject *))
        self.st0 = <Py_ssize_t *>PyMem_Calloc(self.n + 1, sizeof(Py_ssize_t))
        self.views = <PyObject **>PyMem_Calloc(self.nst + 1, sizeof(PyObject *))
        self.vmine = <char *>PyMem_Calloc(self.nst + 1, sizeof(char))
        self.pf = <Fields *>PyMem_Calloc(self.n + 1, sizeof(Fields))
        self.gf = <Fields *>PyMem_Calloc(self.n + 1, sizeof(Fields))
        self.vf = <Fields *>PyMem_Calloc(self.nst + 1, sizeof(Fields))
        self.gword = <char *>PyMem_Calloc(self.n + 1, sizeof(char))
        self.bufs = tuple(t for t, _ in buffers)
        self.bptr = <void **>PyMem_Calloc(len(buffers) + 1, sizeof(void *))
        if (not self.sizes or not self.params
                or not self.gviews or not self.dicts
                or not self.st0 or not self.views or not self.vmine
                or not self.pf or not self.gf or not self.vf or not self.bptr
                or not self.gword):
            raise MemoryError()
        for i in range(len(buffers)):
            self.bptr[i] = PyLong_AsVoidPtr(buffers[i][1])
        for gi in range(self.ng):
            grp = <tuple>groups[gi]
            self.sizes[gi] = len(grp[1])
            for i in range(self.sizes[gi]):
                self.params[k] = <PyObject *>grp[1][i]
                self.st0[k] = m
                if grp[2][i] is not None:
                    rec = <tuple>grp[2][i]
                    self.gviews[k] = <PyObject *>rec[0]
                    _confirm(&self.pf[k], grp[1][i], rec[1], storages if self.direct else None,
                             self.held)
                    _confirm(&self.gf[k], rec[0], rec[2], storages if self.direct else None,
                             self.held)
                    self.gword[k] = (grp[1][i].grad is rec[0] and _at_meta >= 0
                                     and self.pf[k].impl != NULL and self.gf[k].impl != NULL
                                     and _grad_impl_of(self.pf[k].impl, _at_meta, _at_grad)
                                     == self.gf[k].impl)
                    if rec[5] is not None:
                        self.dicts[k] = <PyObject *>rec[5]
                    sts = <tuple>rec[6]
                    for j in range(len(sts)):
                        self.views[m] = <PyObject *>sts[j][0]
                        if sts[j][1] is not None:
                            self.vmine[m] = 1
                            _confirm(&self.vf[m], sts[j][0], sts[j][1],
                                     storages if self.direct else None, self.held)
                        m += 1
                k += 1
        self.st0[k] = m
        # (a parameter read as words: its autograd record's address too)
        metas = [_word(self.pf[i].impl, self.at_meta) if self.gword[i] else None
                 for i in range(self.n)]
        self.ahead = Ahead([(p,) if rec is None else (p, rec[0], rec[5], *(v for v, _ in rec[6]),
                                                      meta)
                            for (p, rec), meta in zip(
                                ((p, rec) for grp in groups for p, rec in zip(grp[1], grp[2])),
                                metas)])

    def __dealloc__(self):
        PyMem_Free(self.sizes)
        PyMem_Free(self.params)
        PyMem_Free(self.gviews)
        PyMem_Free(self.dicts)
        PyMem_Free(self.st0)
        PyMem_Free(self.views)
        PyMem_Free(self.vmine)
        PyMem_Free(self.pf)
        PyMem_Free(self.gf)
        PyMem_Free(self.vf)
        PyMem_Free(self.bptr)
        PyMem_Free(self.gword)

    def read_as_words(self):
        """How many parameters, gradients and state views the check reads
        as words of torch's objects (the rest through their attributes),
        and of how many parameters which gradient they hold."""
        cdef Py_ssize_t i
        return (sum(1 for i in range(self.n) if self.pf[i].impl != NULL),
                sum(1 for i in range(self.n) if self.gf[i].impl != NULL),
                sum(1 for i in range(self.nst) if self.vf[i].impl != NULL),
                sum(1 for i in range(self.n) if self.gword[i]))

    def check(self):
        """0: the layout holds; 1: a gradient is not the layout's (this step
        declines, the record stays); 2: something else moved (build anew).
        A gradient is the layout's own view object with its address,
        dtype, shape and strides; a parameter keeps its own; its state dict
        holds the same objects in the same order (walked, not hashed), each
        layout view with its own (``share_memory_()`` or ``.data =`` moves
        it), and every buffer keeps its address."""
        cdef Py_ssize_t gi, i, j, k = 0, n, pos
        cdef tuple params
        cdef PyObject *key
        cdef PyObject *value
        cdef bint d = self.direct
        for i in range(PyTuple_GET_SIZE(self.bufs)):
            if _address(<object>PyTuple_GET_ITEM(self.bufs, i), d) != self.bptr[i]:
                return 2
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
                # the parameter and its gradient as words where they hold
                # (the parameter's own TensorImpl, whose record points at
                # the gradient view's, whose facts are the layout's), else
                # through torch's getter, which tells which does not
                if not (self.gword[k] and _at_meta >= 0 and _same(&self.pf[k], <PyObject *>p)
                        and _grad_impl_of(self.pf[k].impl, self.at_meta, self.at_grad)
                        == self.gf[k].impl
                        and _same(&self.gf[k], self.gviews[k])):
                    g = _grad(p, d)
                    if self.gviews[k] == NULL:
                        if g is not None:
                            return 1
                        k += 1
                        continue
                    # (a gradient whose words moved may still hold its
                    # memory: another storage object over it, which the
                    # attributes accept; this step would decline forever)
                    if <PyObject *>g != self.gviews[k] or not _holds(&self.gf[k], g, d, False):
                        return 1
                    if not _holds(&self.pf[k], p, d, True):
                        return 2
                if self.dicts[k] != NULL:
                    j, pos = self.st0[k], 0
                    if PyDict_Size(<object>self.dicts[k]) != self.st0[k + 1] - j:
                        return 2
                    while PyDict_Next(<object>self.dicts[k], &pos, &key, &value):
                        if value != self.views[j]:
                            return 2
                        if self.vmine[j] and not _holds(&self.vf[j], <object>value, d, True):
                            return 2
                        j += 1
                k += 1
        return 0


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
