# The whole optimizer step (src_c/step.c), included by _ext.pyx.
#
# Fast paths, as the update rules' (see the module docstring): each accepts
# a call only when every array is already in the form the C code needs,
# checked through NumPy's C-API, and otherwise returns None before anything
# is written; fastopt/_dispatch.py (accept) then checks the call in full,
# normalises it and calls back. The scalars arrive checked by fastopt/_step.py (the
# optimizers check a group's hyperparameters once, not every step); the C
# driver checks each group's rule, flags and count and the step options
# again, and its FO_EINVAL, returned before it writes anything, is a
# decline too.
#
# A tensor of a step has up to five arrays (x, g and the states s1..s3 of
# its group's rule: None where the rule has no such state), and its group's
# index; the groups are tuples (rule, flags, t, lr, alpha, beta, eps, decay,
# decay_post, lr_decay, then the FO_STEP_EXTRA values of extra) as
# fo_step_group.

cdef int _step_index(Call *c, Py_ssize_t i, fo_step_tensor *t) except -1:
    """t.group from the call's index tuple; 0 to decline."""
    cdef int64_t j = 0
    if not (_count(<object>PyTuple_GET_ITEM(<object>c.index, i), &j) and j < c.ng):
        return 0
    t.group = <int32_t>j
    return 1


cdef inline bint _states_type(Call *c, Py_ssize_t i, int k0, int dtype, void **p,
                              fo_step_tensor *t, bint c_order) noexcept:
    """t.sdtype and t.key from the states in roles k0..k0+2 (c.dt): the one
    type every given state has (x's when there is none); False if they
    differ, or if states stored apart, or 16-bit parameters, are not in C
    order (the stochastic rounding numbers elements in C order)."""
    cdef int k, st = -1
    for k in range(k0, k0 + 3):
        if p[k] != NULL:
            if st >= 0 and c.dt[k] != st:
                return False
            st = c.dt[k]
    t.sdtype = dtype if st < 0 else st
    if (t.sdtype != dtype or fo_pair(dtype, dtype) < 0) and not c_order:
        return False        # (or 16-bit parameters, whose states may round so)
    t.key = c.key0 + <uint64_t>i * FO_KEY_STEP
    return True


cdef int _set_keys(Call *c, seed, Py_ssize_t nt) except -1:
    """A call's stochastic rounding keys from its seed: an int (tensor i's
    key is seed + i * FO_KEY_STEP, mod 2**64), or a tuple of nt ints in
    [0, 2**64), one key per tensor. 0 to decline."""
    cdef Py_ssize_t i
    if type(seed) is tuple:
        if PyTuple_GET_SIZE(seed) != nt:
            return 0
        for i in range(nt):
            k = <object>PyTuple_GET_ITEM(seed, i)
            if type(k) is not int or not 0 <= k < 2**64:
                return 0
        c.keys = <PyObject *>seed
        return 1
    if type(seed) is not int or not 0 <= seed < 2**64:
        return 0
    c.key0 = <uint64_t>seed
    return 1


cdef inline void _keys_into(Call *c, Py_ssize_t nt) noexcept:
    """The gathered records' keys from c.keys (if any)."""
    cdef Py_ssize_t i
    cdef fo_step_tensor *t = <fo_step_tensor *>c.ts
    if c.keys == NULL:
        return
    for i in range(nt):
        t[i].key = <uint64_t>(<object>PyTuple_GET_ITEM(<object>c.keys, i))


cdef int _absmax_of(Call *c, Py_ssize_t i, int64_t n, void **s,
                    fo_step_tensor *t) except -1:
    """t.absmax from c.absmax[i], a tuple of three (an array of float32,
    C-contiguous, writeable, of shape (one value per block of the state,), for each
    state s[k] given; else anything), and their byte ranges after the op's
    roles' (from role c.absmax_at; with c.absmax, every tensor's, empty
    where it has none); 0 to decline, 8-bit states without their absmax."""
    cdef int k
    cdef int64_t nb = (n + FO_Q8_BLOCK - 1) // FO_Q8_BLOCK
    cdef PyObject *a
    t.absmax[0] = t.absmax[1] = t.absmax[2] = NULL
    if c.absmax == NULL:
        return t.sdtype != FO_Q8
    e = <object>PyTuple_GET_ITEM(<object>c.absmax, i)
    for k in range(3):
        _range(c, (c.absmax_at + k) * c.nt + i, NULL, 0, 1)
    if t.sdtype != FO_Q8:
        return 1
    if type(e) is not tuple or PyTuple_GET_SIZE(e) != 3:
        return 0
    for k in range(3):
        if s[k] == NULL:
            continue
        a = PyTuple_GET_ITEM(e, k)
        if not (fo_exact_array(a) and fo_accept(a, cnp.NPY_FLOAT32,
                                                cnp.NPY_ARRAY_C_CONTIGUOUS | _W, NULL)
                and cnp.PyArray_NDIM(<cnp.ndarray>a) == 1 and fo_size(a) == nb):
            return 0
        t.absmax[k] = <float *>fo_data(a)
        _range(c, (c.absmax_at + k) * c.nt + i, t.absmax[k], nb * 4, 1)
    return 1


cdef int _emit_step(Call *c, Py_ssize_t i, PyObject *x, int64_t n, int dtype,
                    bint c_order, void **p) except -1:
    cdef fo_step_tensor *t = (<fo_step_tensor *>c.ts) + i
    t.x = p[0]
    t.g = p[1]
    t.s1 = p[2]
    t.s2 = p[3]
    t.s3 = p[4]
    t.w = p[5]
    t.n = n
    t.dtype = dtype
    t.gdtype = c.dt[1]
    t.wdtype = c.dt[5] if p[5] != NULL else 0
    if not (_states_type(c, i, 2, dtype, p, t, c_order) and _absmax_of(c, i, n, p + 2, t)):
        return 0
    return _step_index(c, i, t)


cdef int _emit_plan(Call *c, Py_ssize_t i, PyObject *x, int64_t n, int dtype,
                    bint c_order, void **p) except -1:
    """A prepared step's tensor: its written arrays alone (the gradients
    come per step), and its rounded copy with OP_PLAN_COPY."""
    cdef fo_step_tensor *t = (<fo_step_tensor *>c.ts) + i
    t.x = p[0]
    t.g = NULL
    t.s1 = p[1]
    t.s2 = p[2]
    t.s3 = p[3]
    t.w = p[4]
    t.n = n
    t.dtype = dtype
    t.gdtype = dtype
    t.wdtype = c.dt[4] if p[4] != NULL else 0
    t.absmax[0] = t.absmax[1] = t.absmax[2] = NULL
    if not _states_type(c, i, 1, dtype, p, t, c_order) or t.sdtype == FO_Q8:
        return 0
    return _step_index(c, i, t)


cdef int _emit_grad(Call *c, Py_ssize_t i, PyObject *x, int64_t n, int dtype,
                    bint c_order, void **p) except -1:
    """A gradient of a norm or a clip, in .x."""
    cdef fo_step_tensor *t = (<fo_step_tensor *>c.ts) + i
    t.x = p[0]
    t.n = n
    t.dtype = dtype
    return 1


#          roles:  x  g  s1 s2 s3 w (lower case: may be None)
cdef Op OP_STEP = _op(5, "WGsss", sizeof(fo_step_tensor), _emit_step, NULL)
cdef Op OP_STEP_COPY = _op(6, "WGsssc", sizeof(fo_step_tensor), _emit_step, NULL)
cdef Op OP_PLAN = _op(4, "Wsss", sizeof(fo_step_tensor), _emit_plan, NULL)
cdef Op OP_PLAN_COPY = _op(5, "Wsssc", sizeof(fo_step_tensor), _emit_plan, NULL)
cdef Op OP_NORM = _op(1, "G", sizeof(fo_step_tensor), _emit_grad, NULL)
cdef Op OP_CLIP = _op(1, "H", sizeof(fo_step_tensor), _emit_grad, NULL)


cdef bint _step_groups(tuple groups, fo_step_group *gs):
    """Read the group tuples into gs; False to decline."""
    cdef Py_ssize_t j, k
    cdef int64_t v = 0
    cdef tuple grp
    for j in range(PyTuple_GET_SIZE(groups)):
        o = <object>PyTuple_GET_ITEM(groups, j)
        if type(o) is not tuple or PyTuple_GET_SIZE(o) != 10 + FO_STEP_EXTRA:
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
        for k in range(FO_STEP_EXTRA):
            if not _real(grp[10 + k], &gs[j].extra[k]):
                return False
    return True


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
    o.trust_out = NULL
    o.trust_in = NULL
    o.trust_len = 0


cdef bint _trust_opts(fo_step_opts *o, trust_out, trust_in) except -1:
    """The trust sums' arrays of step() into o: False if one is not a
    C-contiguous float64 array (trust_out writeable)."""
    cdef cnp.ndarray a
    for a_obj, out in ((trust_out, True), (trust_in, False)):
        if a_obj is None:
            continue
        if (type(a_obj) is not cnp.ndarray
                or cnp.PyArray_TYPE(<cnp.ndarray>a_obj) != cnp.NPY_DOUBLE
                or not cnp.PyArray_ISCARRAY(<cnp.ndarray>a_obj)
                or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>a_obj)):
            return False
        a = <cnp.ndarray>a_obj
        o.trust_len = cnp.PyArray_SIZE(a)
        if out:
            o.trust_out = <double *>cnp.PyArray_DATA(a)
        else:
            o.trust_in = <const double *>cnp.PyArray_DATA(a)
    return True


cdef inline bint _measures(const fo_step_opts *o) noexcept:
    """Does the step measure the gradients' norm (pass 1 for a check or a
    clip)? Then it reads each gradient in its logical (C) order."""
    return o.measure != FO_MEASURE_GIVEN and (o.check_finite or o.clip != 0)


cdef int _step_call(Call *c, const Op *op, PyObject **arrays, Py_ssize_t nt,
                    bint c_only) except -1:
    """The gather of a step-family call (each argument a tuple of nt): 1, or
    0 to decline. No tensors at all is a call too (nothing to gather)."""
    c.c_only = c_only
    return nt == 0 or _gather(c, op, arrays, &nt)


cdef int _norm_lists(Call *c, Py_ssize_t nt, const void ***gp, int64_t **ns,
                     int32_t **dts) except -1:
    """The gathered gradients (records' .x, .n, .dtype) as the three lists
    the norm's C functions take, on the heap."""
    cdef Py_ssize_t i
    cdef fo_step_tensor *t = <fo_step_tensor *>c.ts
    gp[0] = <const void **>PyMem_Malloc((nt + 1) * sizeof(void *))
    ns[0] = <int64_t *>PyMem_Malloc((nt + 1) * sizeof(int64_t))
    dts[0] = <int32_t *>PyMem_Malloc((nt + 1) * sizeof(int32_t))
    if not (gp[0] and ns[0] and dts[0]):
        raise MemoryError()
    for i in range(nt):
        gp[0][i] = t[i].x
        ns[0][i] = t[i].n
        dts[0][i] = t[i].dtype
    return 0


def step(tuple xs, tuple gs, tuple s1s, tuple s2s, tuple s3s, tuple index,
         tuple groups, double grad_scale, double max_norm, double clip_value,
         int clip, int norm_type, bint check_finite, n_threads,
         double given_norm=NAN, tuple ws=None, seed=0, bint half_params=False,
         tuple absmax=None, trust_out=None, trust_in=None):
    """Fast path of the fused step (fo_step). Every tuple but groups has one
    entry per tensor; given_norm (not NaN) is the global norm already
    measured by global_norm on the same gradients; ws, the arrays that
    receive the new parameters rounded (None in it: no copy of that
    tensor); seed, the stochastic rounding's: an int (tensor i's key is
    seed + i * 0x9E3779B97F4A7C15 mod 2**64) or a tuple of one key per
    tensor; half_params, whether bfloat16/float16 parameters are taken,
    updated in their own type with gradients and states of it (the torch
    drop-ins' way; the NumPy front ends leave it False); absmax, for
    8-bit states (uint8 codes), per tensor a tuple of the three states'
    absmax arrays (float32, one value per block of FO_Q8_BLOCK elements;
    None where a state is not given; the entry of a tensor without 8-bit
    states is ignored). trust_out, trust_in: for a tensor split between
    processes (fastopt.distributed), a writeable float64 array that
    receives the trust pass's block sums (then nothing else is written and
    applied is False), or one that gives each trusted tensor's two sums
    (fastopt.h, fo_step_opts; C-contiguous, of the length it states).
    Returns (applied, norm, finite), or None to decline (nothing written)."""
    cdef Call c
    cdef fo_step_opts o
    cdef fo_step_result res
    cdef fo_step_group *grp = NULL
    cdef PyObject *arrays[6]
    cdef Py_ssize_t nt = PyTuple_GET_SIZE(xs), ng = PyTuple_GET_SIZE(groups)
    cdef int nth = _n_threads(n_threads), rc = FO_OK
    cdef const Op *op = &OP_STEP if ws is None else &OP_STEP_COPY
    if not nth or not (PyTuple_GET_SIZE(gs) == PyTuple_GET_SIZE(s1s)
                       == PyTuple_GET_SIZE(s2s) == PyTuple_GET_SIZE(s3s)
                       == PyTuple_GET_SIZE(index) == nt):
        return None
    if ((ws is not None and PyTuple_GET_SIZE(ws) != nt)
            or (absmax is not None and PyTuple_GET_SIZE(absmax) != nt)):
        return None
    _step_opts(&o, grad_scale, max_norm, clip_value, clip, norm_type, check_finite,
               given_norm)
    if not _trust_opts(&o, trust_out, trust_in):
        return None
    arrays[0] = <PyObject *>xs
    arrays[1] = <PyObject *>gs
    arrays[2] = <PyObject *>s1s
    arrays[3] = <PyObject *>s2s
    arrays[4] = <PyObject *>s3s
    arrays[5] = <PyObject *>ws
    _init(&c)
    c.half_x = half_params
    c.index = <PyObject *>index
    c.ng = ng
    if absmax is not None:
        c.absmax = <PyObject *>absmax
        c.absmax_at = op.n_roles
    try:
        grp = <fo_step_group *>PyMem_Malloc((ng + 1) * sizeof(fo_step_group))
        if grp == NULL:
            raise MemoryError()
        if not (_set_keys(&c, seed, nt) and _step_groups(groups, grp)
                and _step_call(&c, op, arrays, nt, _measures(&o))):
            return None
        if absmax is not None and nt > 0 and _overlap(&c, (op.n_roles + 3) * nt):
            return None         # an absmax overlaps another array
        _keys_into(&c, nt)
        with nogil:
            rc = fo_step(<fo_step_tensor *>c.ts, nt, grp, ng, &o, &res, nth)
    finally:
        PyMem_Free(grp)
        _release(&c)
    if rc == FO_EINVAL:
        return None
    _check_rc(rc)
    return (res.applied != 0, res.norm, res.finite != 0)


def global_norm(tuple gs, double grad_scale, int norm_type, n_threads):
    """Fast path of fastopt.global_norm: (norm, finite), or None to decline.
    The norm sums each gradient in its logical order: an F-ordered one is
    declined, and the dispatch copies it."""
    cdef Call c
    cdef fo_step_result res
    cdef const void **gp = NULL
    cdef int64_t *ns = NULL
    cdef int32_t *dts = NULL
    cdef PyObject *arrays[1]
    cdef Py_ssize_t nt = PyTuple_GET_SIZE(gs)
    cdef int nth = _n_threads(n_threads), rc = FO_OK
    if not nth:
        return None
    arrays[0] = <PyObject *>gs
    _init(&c)
    try:
        if not _step_call(&c, &OP_NORM, arrays, nt, True):
            return None
        _norm_lists(&c, nt, &gp, &ns, &dts)
        with nogil:
            rc = fo_global_norm(gp, ns, dts, nt, grad_scale, norm_type, &res, nth)
    finally:
        PyMem_Free(gp)
        PyMem_Free(ns)
        PyMem_Free(dts)
        _release(&c)
    if rc == FO_EINVAL:
        return None
    _check_rc(rc)
    return (res.norm, res.finite != 0)


def clip_grads(tuple gs, double grad_scale, double max_norm, double clip_value,
               int clip, int norm_type, bint check_finite, n_threads):
    """Fast path of fastopt.clip_grad_norm (in place): (applied, norm,
    finite), or None to decline."""
    cdef Call c
    cdef fo_step_opts o
    cdef fo_step_result res
    cdef const void **gp = NULL
    cdef int64_t *ns = NULL
    cdef int32_t *dts = NULL
    cdef PyObject *arrays[1]
    cdef Py_ssize_t nt = PyTuple_GET_SIZE(gs)
    cdef int nth = _n_threads(n_threads), rc = FO_OK
    if not nth:
        return None
    _step_opts(&o, grad_scale, max_norm, clip_value, clip, norm_type, check_finite, NAN)
    o.measure = FO_MEASURE_ALWAYS       # clip_grads returns the norm
    arrays[0] = <PyObject *>gs
    _init(&c)
    try:
        if not _step_call(&c, &OP_CLIP, arrays, nt, True):
            return None
        _norm_lists(&c, nt, &gp, &ns, &dts)
        with nogil:
            rc = fo_clip_grads(<void *const *>gp, ns, dts, nt, &o, &res, nth)
    finally:
        PyMem_Free(gp)
        PyMem_Free(ns)
        PyMem_Free(dts)
        _release(&c)
    if rc == FO_EINVAL:
        return None
    _check_rc(rc)
    return (res.applied != 0, res.norm, res.finite != 0)
