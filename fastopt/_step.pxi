# The whole optimizer step (src_c/step.c), included by _ext.pyx.
#
# Fast paths, as the update rules' (see the module docstring): each accepts
# a call only when every array is already in the form the C code needs,
# checked through NumPy's C-API, and otherwise returns None before anything
# is written; fastopt/_dispatch.py (accept) then checks the call in full,
# normalises it and calls back. The scalars arrive checked by fastopt/_step.py (the
# optimizers check a group's hyperparameters once, not every step); the C
# driver checks them again and its FO_EINVAL, returned before it writes
# anything, is a decline too.
#
# A tensor of a step has up to five arrays (x, g and the states s1..s3 of
# its group's rule: None where the rule has no such state), and its group's
# index; the groups are tuples (rule, flags, t, lr, alpha, beta, eps, decay,
# decay_post, lr_decay) as fo_step_group.

cdef enum:
    STEP_ROLES = 5         # x, g, s1, s2, s3


# The sorted order of the previous step's byte ranges (see _gather.pxi's
# _order: the same arrays come back every step). Touched with the GIL only.
cdef int64_t *_step_order = NULL
cdef int64_t _step_order_cap = 0
cdef int64_t _step_order_m = -1
cdef int64_t _step_order_n = -1


cdef inline bint _step_arr(object o, int type_num, int flags, int order, object like):
    """o is an array (_is_array) of type_num in native byte order with all
    of flags, contiguous in `order` and, when like is given, of like's shape."""
    if not _is_array(o):
        return False
    return fo_accept(<PyObject *>o, type_num, flags | order,
                     NULL if like is None else <PyObject *>like)


cdef struct StepBufs:
    fo_step_tensor *ts
    fo_step_group *gs
    int64_t *ext
    int64_t *scratch
    unsigned char *is_out
    const void **gp
    int64_t *ns
    int32_t *dts


cdef int _step_alloc(StepBufs *b, Py_ssize_t nt, Py_ssize_t ng, int roles) except -1:
    cdef Py_ssize_t m = nt * roles + 1
    b.ts = <fo_step_tensor *>PyMem_Malloc((nt + 1) * sizeof(fo_step_tensor))
    b.gs = <fo_step_group *>PyMem_Malloc((ng + 1) * sizeof(fo_step_group))
    b.ext = <int64_t *>PyMem_Malloc(2 * m * sizeof(int64_t))
    b.scratch = <int64_t *>PyMem_Malloc((6 * m + 1) * sizeof(int64_t))
    b.is_out = <unsigned char *>PyMem_Malloc(m)
    b.gp = <const void **>PyMem_Malloc((nt + 1) * sizeof(void *))
    b.ns = <int64_t *>PyMem_Malloc((nt + 1) * sizeof(int64_t))
    b.dts = <int32_t *>PyMem_Malloc((nt + 1) * sizeof(int32_t))
    if not (b.ts and b.gs and b.ext and b.scratch and b.is_out and b.gp and b.ns
            and b.dts):
        _step_free(b)
        raise MemoryError()
    return 0


cdef void _step_free(StepBufs *b) noexcept:
    PyMem_Free(b.ts)
    PyMem_Free(b.gs)
    PyMem_Free(b.ext)
    PyMem_Free(b.scratch)
    PyMem_Free(b.is_out)
    PyMem_Free(b.gp)
    PyMem_Free(b.ns)
    PyMem_Free(b.dts)
    b.ts = NULL
    b.gs = NULL
    b.ext = NULL
    b.scratch = NULL
    b.is_out = NULL
    b.gp = NULL
    b.ns = NULL
    b.dts = NULL


cdef int _step_overlap(StepBufs *b, int64_t m) except -1:
    """1 if some written range overlaps another, else 0 (as _overlap)."""
    global _step_order, _step_order_cap, _step_order_m, _step_order_n
    cdef int64_t oi = 0, oj = 0, none = -1
    cdef int64_t *grown
    if m <= 16:
        return fo_find_overlap(b.ext, b.is_out, m, b.scratch, b.scratch + 5 * m + 1,
                               &none, &oi, &oj)
    if m > _step_order_cap:
        grown = <int64_t *>PyMem_Realloc(_step_order, m * sizeof(int64_t))
        if grown == NULL:
            raise MemoryError()
        _step_order = grown
        _step_order_cap = m
    if m != _step_order_m:
        _step_order_m = m
        _step_order_n = -1
    return fo_find_overlap(b.ext, b.is_out, m, b.scratch, _step_order, &_step_order_n,
                           &oi, &oj)


cdef inline void _step_range(StepBufs *b, Py_ssize_t k, const void *p, int64_t nbytes,
                             unsigned char is_out) noexcept:
    b.ext[2 * k] = <int64_t>p
    b.ext[2 * k + 1] = <int64_t>p + nbytes
    b.is_out[k] = is_out


cdef bint _step_groups(tuple groups, fo_step_group *gs):
    """Read the group tuples into gs; False to decline."""
    cdef Py_ssize_t j
    cdef int64_t v = 0
    cdef tuple grp
    for j in range(PyTuple_GET_SIZE(groups)):
        o = <object>PyTuple_GET_ITEM(groups, j)
        if type(o) is not tuple or PyTuple_GET_SIZE(o) != 10:
            return False
        grp = <tuple>o
        if not (_count(grp[0], &v) and v < FO_N_RULES):
            return False
        gs[j].rule = <int32_t>v
        if not (_count(grp[1], &v) and (v & ~FO_STEP_FLAGS) == 0):
            return False
        gs[j].flags = <int32_t>v
        if not _count(grp[2], &gs[j].t):
            return False
        if not (_real(grp[3], &gs[j].lr) and _real(grp[4], &gs[j].alpha)
                and _real(grp[5], &gs[j].beta) and _real(grp[6], &gs[j].eps)
                and _real(grp[7], &gs[j].decay) and _real(grp[8], &gs[j].decay_post)
                and _real(grp[9], &gs[j].lr_decay)):
            return False
    return True


cdef bint _step_state(object a, int type_num, int order, cnp.ndarray like,
                      void **p):
    """A written state of like's form, or None (NULL); False to decline."""
    if a is None:
        p[0] = NULL
        return True
    if not _step_arr(a, type_num, _W, order, like):
        return False
    p[0] = cnp.PyArray_DATA(<cnp.ndarray>a)
    return True


cdef int _step_gather(StepBufs *b, tuple xs, tuple gs, tuple s1s, tuple s2s,
                      tuple s3s, tuple index, Py_ssize_t ng,
                      bint with_g=True, bint c_only=False) except -1:
    """Fill b.ts and the byte ranges (role-major); 1, or 0 to decline.
    with_g False: the gradients' ranges are left out of the overlap check
    (StepPlan checks the written arrays alone). c_only: every tensor must be
    C-contiguous (a step that measures the norm, which sums each gradient
    in its logical order: an F-ordered one goes to _step.py's copy)."""
    cdef Py_ssize_t nt = PyTuple_GET_SIZE(xs), i
    cdef int type_num, flags, order, k
    cdef int64_t nbytes, j = 0
    cdef cnp.ndarray xa
    cdef void *p[STEP_ROLES]
    cdef tuple states = (s1s, s2s, s3s)
    for i in range(nt):
        a = <object>PyTuple_GET_ITEM(xs, i)
        if not _is_array(a):
            return 0
        xa = <cnp.ndarray>a
        type_num = cnp.PyArray_TYPE(xa)
        if type_num != cnp.NPY_FLOAT and type_num != cnp.NPY_DOUBLE:
            return 0
        flags = cnp.PyArray_FLAGS(xa)
        if flags & cnp.NPY_ARRAY_C_CONTIGUOUS:
            order = cnp.NPY_ARRAY_C_CONTIGUOUS
        elif flags & cnp.NPY_ARRAY_F_CONTIGUOUS and not c_only:
            order = cnp.NPY_ARRAY_F_CONTIGUOUS
        else:
            return 0
        if not _step_arr(a, type_num, _W, order, None):
            return 0
        p[0] = cnp.PyArray_DATA(xa)
        a = <object>PyTuple_GET_ITEM(gs, i)
        if not _step_arr(a, type_num, _R, order, xa):
            return 0
        p[1] = cnp.PyArray_DATA(<cnp.ndarray>a)
        for k in range(3):
            if not _step_state(<object>PyTuple_GET_ITEM(<tuple>states[k], i), type_num,
                               order, xa, &p[2 + k]):
                return 0
        if not (_count(<object>PyTuple_GET_ITEM(index, i), &j) and j < ng):
            return 0
        nbytes = cnp.PyArray_SIZE(xa) * cnp.PyArray_ITEMSIZE(xa)
        for k in range(STEP_ROLES):
            _step_range(b, k * nt + i, p[k],
                        nbytes if p[k] != NULL and (with_g or k != 1) else 0, k != 1)
        b.ts[i].x = p[0]
        b.ts[i].g = p[1]
        b.ts[i].s1 = p[2]
        b.ts[i].s2 = p[3]
        b.ts[i].s3 = p[4]
        b.ts[i].n = cnp.PyArray_SIZE(xa)
        b.ts[i].dtype = FO_F32 if type_num == cnp.NPY_FLOAT else FO_F64
        b.ts[i].group = <int32_t>j
    return 0 if _step_overlap(b, STEP_ROLES * nt) else 1


cdef inline void _step_opts(fo_step_opts *o, double grad_scale, double max_norm,
                            double clip_value, int clip, int norm_type,
                            bint check_finite, double given_norm) noexcept:
    """given_norm: NaN to measure (only when the step checks or clips: a
    bare update reads the gradients once), else the norm to use."""
    o.grad_scale = grad_scale
    o.max_norm = max_norm
    o.clip_value = clip_value
    o.clip = clip
    o.norm_type = norm_type
    o.check_finite = check_finite
    o.measure = FO_MEASURE_NEEDED if given_norm != given_norm else FO_MEASURE_GIVEN
    o.norm = given_norm
    o.guards = NULL
    o.guards_per_tensor = 0


cdef inline bint _measures(const fo_step_opts *o) noexcept:
    """Does the step measure the gradients' norm (pass 1 for a check or a
    clip)? Then it reads each gradient in its logical (C) order."""
    return o.measure != FO_MEASURE_GIVEN and (o.check_finite or o.clip != 0)


def step(tuple xs, tuple gs, tuple s1s, tuple s2s, tuple s3s, tuple index,
         tuple groups, double grad_scale, double max_norm, double clip_value,
         int clip, int norm_type, bint check_finite, n_threads,
         double given_norm=NAN):
    """Fast path of the fused step (fo_step). Every tuple but groups has one
    entry per tensor; given_norm (not NaN) is the global norm already
    measured by global_norm on the same gradients. Returns (applied, norm,
    finite), or None to decline (nothing written)."""
    cdef StepBufs b
    cdef fo_step_opts o
    cdef fo_step_result res
    cdef Py_ssize_t nt = PyTuple_GET_SIZE(xs), ng = PyTuple_GET_SIZE(groups)
    cdef int nth = _n_threads(n_threads), rc = FO_OK
    if not nth or not (PyTuple_GET_SIZE(gs) == PyTuple_GET_SIZE(s1s)
                       == PyTuple_GET_SIZE(s2s) == PyTuple_GET_SIZE(s3s)
                       == PyTuple_GET_SIZE(index) == nt):
        return None
    _step_opts(&o, grad_scale, max_norm, clip_value, clip, norm_type, check_finite,
               given_norm)
    _step_alloc(&b, nt, ng, STEP_ROLES)
    try:
        if not (_step_groups(groups, b.gs) and _step_gather(
                &b, xs, gs, s1s, s2s, s3s, index, ng, True, _measures(&o))):
            return None
        with nogil:
            rc = fo_step(b.ts, nt, b.gs, ng, &o, &res, nth)
    finally:
        _step_free(&b)
    if rc == FO_EINVAL:
        return None
    _check_rc(rc)
    return (res.applied != 0, res.norm, res.finite != 0)


cdef int _grad_list(StepBufs *b, tuple gs, bint written) except -1:
    """b.gp/ns/dts from native aligned C-contiguous float arrays (the norm
    sums each in its logical order: an F-ordered one is declined, and the
    dispatch copies it); written: also writeable and not overlapping. 1, or
    0 to decline."""
    cdef Py_ssize_t nt = PyTuple_GET_SIZE(gs), i
    cdef int type_num
    cdef cnp.ndarray ga
    for i in range(nt):
        a = <object>PyTuple_GET_ITEM(gs, i)
        if not _is_array(a):
            return 0
        ga = <cnp.ndarray>a
        type_num = cnp.PyArray_TYPE(ga)
        if type_num != cnp.NPY_FLOAT and type_num != cnp.NPY_DOUBLE:
            return 0
        if not _step_arr(a, type_num, _W if written else _R, cnp.NPY_ARRAY_C_CONTIGUOUS,
                         None):
            return 0
        b.gp[i] = cnp.PyArray_DATA(ga)
        b.ns[i] = cnp.PyArray_SIZE(ga)
        b.dts[i] = FO_F32 if type_num == cnp.NPY_FLOAT else FO_F64
        _step_range(b, i, b.gp[i], b.ns[i] * cnp.PyArray_ITEMSIZE(ga), written)
    return 0 if written and _step_overlap(b, nt) else 1


def global_norm(tuple gs, double grad_scale, int norm_type, n_threads):
    """Fast path of fastopt.global_norm: (norm, finite), or None to decline."""
    cdef StepBufs b
    cdef fo_step_result res
    cdef Py_ssize_t nt = PyTuple_GET_SIZE(gs)
    cdef int nth = _n_threads(n_threads), rc = FO_OK
    if not nth:
        return None
    _step_alloc(&b, nt, 0, 1)
    try:
        if not _grad_list(&b, gs, False):
            return None
        with nogil:
            rc = fo_global_norm(b.gp, b.ns, b.dts, nt, grad_scale, norm_type, &res, nth)
    finally:
        _step_free(&b)
    if rc == FO_EINVAL:
        return None
    _check_rc(rc)
    return (res.norm, res.finite != 0)


def clip_grads(tuple gs, double grad_scale, double max_norm, double clip_value,
               int clip, int norm_type, bint check_finite, n_threads):
    """Fast path of fastopt.clip_grad_norm (in place): (applied, norm,
    finite), or None to decline."""
    cdef StepBufs b
    cdef fo_step_opts o
    cdef fo_step_result res
    cdef Py_ssize_t nt = PyTuple_GET_SIZE(gs)
    cdef int nth = _n_threads(n_threads), rc = FO_OK
    if not nth:
        return None
    _step_opts(&o, grad_scale, max_norm, clip_value, clip, norm_type, check_finite, NAN)
    o.measure = FO_MEASURE_ALWAYS       # clip_grads returns the norm
    _step_alloc(&b, nt, 0, 1)
    try:
        if not _grad_list(&b, gs, True):
            return None
        with nogil:
            rc = fo_clip_grads(<void *const *>b.gp, b.ns, b.dts, nt, &o, &res, nth)
    finally:
        _step_free(&b)
    if rc == FO_EINVAL:
        return None
    _check_rc(rc)
    return (res.applied != 0, res.norm, res.finite != 0)
