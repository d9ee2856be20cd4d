# The one gather and the one _run (included by _ext.pyx, after the op table).

cdef inline void _init(Call *c) noexcept nogil:
    c.ts = c.stack_t
    c.ext = c.stack_e
    c.scratch = c.stack_s
    c.is_out = c.stack_o
    c.cap = STACK_TENSORS
    c.c_only = False
    c.half_x = False
    c.key0 = 0
    c.keys = NULL
    c.absmax = NULL


cdef int _reserve(Call *c, Py_ssize_t nt, size_t rec_size) except -1:
    cdef Py_ssize_t m = nt * MAX_RANGES
    if nt <= c.cap:
        return 0
    c.cap = nt
    c.ts = PyMem_Malloc(nt * rec_size)
    c.ext = <int64_t *>PyMem_Malloc(m * 2 * sizeof(int64_t))
    c.scratch = <int64_t *>PyMem_Malloc((m * 6 + 1) * sizeof(int64_t))
    c.is_out = <unsigned char *>PyMem_Malloc(m)
    if not (c.ts and c.ext and c.scratch and c.is_out):
        raise MemoryError()
    return 0


cdef inline void _release(Call *c) noexcept:
    if c.cap > STACK_TENSORS:     # PyMem_Free(NULL) is a no-op
        PyMem_Free(c.ts)
        PyMem_Free(c.ext)
        PyMem_Free(c.scratch)
        PyMem_Free(c.is_out)
        _init(c)


cdef inline void _range(Call *c, Py_ssize_t k, const void *p, int64_t nbytes,
                        unsigned char is_out) noexcept:
    c.ext[2 * k] = <int64_t>p
    c.ext[2 * k + 1] = <int64_t>p + nbytes
    c.is_out[k] = is_out


# The sorted order of the previous multi-tensor call's byte ranges: a
# training loop passes the same arrays every step, so their order usually
# holds and fo_find_overlap verifies it in one pass instead of sorting.
# Only touched with the GIL held (in _gather), so calls from several Python
# threads are safe; a wrong hint only costs a sort, never a missed overlap.
cdef int64_t *_order = NULL
cdef int64_t _order_cap = 0
cdef int64_t _order_m = -1
cdef int64_t _order_n = -1


cdef int _overlap(Call *c, int64_t m) except -1:
    """1 if some written range overlaps another, else 0."""
    global _order, _order_cap, _order_m, _order_n
    cdef int64_t oi = 0, oj = 0, none = -1
    cdef int64_t *grown
    if m <= 16:   # pairwise: no order needed
        return fo_find_overlap(c.ext, c.is_out, m, c.scratch,
                               c.scratch + 5 * m + 1, &none, &oi, &oj)
    if m > _order_cap:
        grown = <int64_t *>PyMem_Realloc(_order, m * sizeof(int64_t))
        if grown == NULL:
            raise MemoryError()
        _order = grown
        _order_cap = m
    if m != _order_m:
        _order_m = m
        _order_n = -1
    return fo_find_overlap(c.ext, c.is_out, m, c.scratch, _order, &_order_n, &oi, &oj)


cdef inline PyObject *_item(PyObject *arg, bint seq, Py_ssize_t i) noexcept:
    return PyTuple_GET_ITEM(<object>arg, i) if seq else arg


cdef inline bint _array(PyObject *o):
    return fo_exact_array(o) or _is_array(<object>o)


# The element types the fast paths take: NumPy type number -> C code, one
# pair per row of fastopt/_dtypes.py, which registers its rows when it is
# imported (by `import fastopt`, before any call). A type not registered
# declines; the slow path names it in its error.
cdef enum:
    MAX_DTYPES = 16
cdef int _dt_num[MAX_DTYPES]
cdef int _dt_code[MAX_DTYPES]
cdef int _n_dt = 0


def register_dtype(dtype, int code):
    """Let the fast paths take arrays of NumPy dtype ``dtype`` (native byte
    order) as the C element type ``code`` (a row of src_c/tables.h), which
    must be as wide. Called by fastopt/_dtypes.py for each of its rows. The
    fast paths look the type up by its type number (one compare a type);
    a number registered once keeps its code."""
    global _n_dt
    cdef int i, type_num
    d = np.dtype(dtype)
    if not 0 <= code < FO_N_DTYPES:
        raise ValueError(f"fastopt._ext.register_dtype: no C element type {code}")
    if d.itemsize != fo_dtype_size(code) or not d.isnative:
        raise ValueError(f"fastopt._ext.register_dtype: {d} is not C type {code} "
                         f"({fo_dtype_size(code)} bytes, native order)")
    type_num = d.num
    for i in range(_n_dt):
        if _dt_num[i] == type_num:
            if _dt_code[i] != code:
                raise ValueError(f"fastopt._ext.register_dtype: {d} is C type "
                                 f"{_dt_code[i]} already")
            return
    if _n_dt == MAX_DTYPES:
        raise ValueError("fastopt._ext.register_dtype: the type table is full")
    _dt_num[_n_dt] = type_num
    _dt_code[_n_dt] = code
    _n_dt += 1


def registered_dtypes():
    """{NumPy type number: C element type} as the fast paths take them."""
    return {_dt_num[i]: _dt_code[i] for i in range(_n_dt)}


cdef inline int _dtype_code(int type_num) noexcept:
    """The C element type of a NumPy type number, or -1: the fast path's one
    reading of the element-type table."""
    cdef int i
    for i in range(_n_dt):
        if _dt_num[i] == type_num:
            return _dt_code[i]
    return -1


cdef inline int _x_pair(Call *c, int dtype) noexcept:
    """The pair parameters of type dtype are updated in (with gradients and
    states of their type), or -1: a float type's own, or, where the caller
    takes them (c.half_x), a 16-bit type's row of FO_SPAIR_TABLE."""
    if fo_pair(dtype, dtype) >= 0 or not c.half_x:
        return fo_pair(dtype, dtype)
    return fo_spair(dtype, dtype, dtype)


cdef inline bint _role_type(Call *c, const Op *op, int k, int dtype, int type_num,
                            PyObject *a) noexcept:
    """Is array a's element type what role k of op takes beside x's dtype
    (type_num)? Sets c.dt[k]."""
    cdef int t
    if op.kind[k] == ROLE_SAME:
        c.dt[k] = dtype
        return fo_type(a) == type_num
    t = _dtype_code(fo_type(a))
    c.dt[k] = t
    if t < 0:
        return False
    if op.kind[k] == ROLE_GRAD:
        return fo_pair(dtype, t) >= 0 or (c.half_x and fo_spair(dtype, t, dtype) >= 0)
    if op.kind[k] == ROLE_STATE:
        return fo_spair(dtype, dtype, t) >= 0
    return fo_copy_ok(dtype, t) != 0


cdef int _gather(Call *c, const Op *op, PyObject **args, Py_ssize_t *nt_out) except -1:
    """Fill c with the records of a call if all its tensors qualify for the
    fast path; return 1, or 0 to decline. args[k] is role k's argument: one
    array, or a tuple (lists are pinned as tuples by _run), all borrowed; a
    role the op marks optional may hold None (in a tuple: per tensor): no
    array, a NULL pointer. Byte ranges are stored role by role (all x, all
    g, ...) so each role's arrays, usually allocated in address order, form
    one sorted run for fo_find_overlap. Writes nothing to any array."""
    cdef Py_ssize_t nt = 1, i
    cdef int k, n = op.n_roles, type_num, dtype, flags, order
    cdef bint seq = type(<object>args[0]) is tuple, c_order
    cdef PyObject *x
    cdef PyObject *a
    cdef int64_t size, nbytes
    cdef void *p[MAX_ROLES]
    if seq:
        nt = PyTuple_GET_SIZE(<object>args[0])
        if nt == 0:
            return 0
        for k in range(1, n):
            if (type(<object>args[k]) is not tuple
                    or PyTuple_GET_SIZE(<object>args[k]) != nt):
                return 0
    c.nt = nt
    _reserve(c, nt, op.rec_size)
    for k in range(MAX_ROLES):     # a role the op has not reaches its record as NULL
        p[k] = NULL
    for i in range(nt):
        x = _item(args[0], seq, i)
        if not _array(x):
            return 0
        type_num = fo_type(x)
        dtype = _dtype_code(type_num)
        if dtype < 0 or (fo_grad_pair(dtype) if op.kind[0] == ROLE_GRAD
                         else _x_pair(c, dtype)) < 0:
            return 0
        c.dt[0] = dtype
        flags = fo_flags(x)
        c_order = (flags & cnp.NPY_ARRAY_C_CONTIGUOUS) != 0
        if c_order:
            order = cnp.NPY_ARRAY_C_CONTIGUOUS
        elif flags & cnp.NPY_ARRAY_F_CONTIGUOUS and not c.c_only:
            order = cnp.NPY_ARRAY_F_CONTIGUOUS
        else:
            return 0
        size = fo_size(x)
        nbytes = size * fo_dtype_size(dtype)
        if not fo_accept(x, type_num, order | (_W if op.written[0] else _R), NULL):
            return 0
        p[0] = fo_data(x)
        _range(c, i, p[0], nbytes, op.written[0])
        for k in range(1, n):
            a = _item(args[k], seq, i)
            c.dt[k] = -1
            if op.optional[k] and a == <PyObject *>None:
                p[k] = NULL
                _range(c, k * nt + i, NULL, 0, op.written[k])
                continue
            if not _array(a):
                return 0
            if not _role_type(c, op, k, dtype, type_num, a):
                return 0
            if not fo_accept(a, fo_type(a), order | (_W if op.written[k] else _R), x):
                return 0
            p[k] = fo_data(a)
            _range(c, k * nt + i, p[k], size * fo_dtype_size(c.dt[k]), op.written[k])
        if not op.emit(c, i, x, size, dtype, c_order, p):
            return 0
    if _overlap(c, n * nt):
        return 0
    nt_out[0] = nt
    return 1


cdef int _run(const Op *op, const void *args, int nth, Call *c,
              PyObject **arrays) except -1:
    """Gather the call's tensors and run op's driver on them without the GIL:
    1 if done, 0 (nothing written) to decline. arrays: op.n_roles borrowed
    arguments, one per role of op."""
    cdef PyObject *arrs[MAX_ROLES]
    cdef Py_ssize_t nt = 0
    cdef int rc = FO_OK, k
    cdef list pinned = None
    for k in range(op.n_roles):
        arrs[k] = arrays[k]
        if type(<object>arrs[k]) is list:
            # pinned: held here, so every array stays alive during the nogil
            # call even if another thread empties the caller's list
            if pinned is None:
                pinned = []
            pinned.append(_pin(<object>arrs[k]))
            arrs[k] = <PyObject *>pinned[len(pinned) - 1]
    _init(c)
    try:
        if not _gather(c, op, arrs, &nt):
            return 0
        with nogil:
            rc = op.driver(c.ts, nt, args, nth)
    finally:
        _release(c)
    _check_rc(rc)
    return 1
