# The prepared step, included by _ext.pyx after _step.pxi.
#
# An optimizer passes the same parameters and states every step: StepPlan
# checks them once (types, dtypes, shapes, layouts, alignment, no written
# array overlapping another, through _gather) and keeps their
# pointers and shapes. Per step:
#   - every written array (x, s1..s3) must still have the plan's data
#     pointer, dtype object and flags (writeable, aligned, its contiguity):
#     a parameter or state made read-only, re-typed or moved must not be
#     written. These are the plan's guards (fo_step_guard, src_c/fastopt.h):
#     fo_step reads them in pass 1, beside the gradients, on the pool's
#     threads (else before pass 2), and returns FO_ESTALE, nothing written,
#     if one fails; the plan then marks itself stale and declines, and
#     runs again once its own test passes anew (_refresh: a parameter made
#     writeable again). Read here, in a loop under the GIL, the same words
#     cost three cold header lines per tensor after a step bigger than the
#     cache (bench/RESULTS.md);
#   - every gradient, here: an ndarray of the plan's dtype in native byte
#     order, aligned, contiguous in the parameter's order, of its shape, and
#     not overlapping any written memory. The overlap test (a binary search
#     in the merged written ranges) runs only when a gradient's data pointer
#     differs from the one accepted last step for that tensor: the written
#     ranges never change, so a pointer once accepted stays clear of them;
#   - the shape of every parameter and state, here (a.shape = ... in place
#     changes no guard, and the fully checked route refuses a state whose
#     shape is not its parameter's).
# Anything else declines (None, nothing written) and the caller takes the
# fully checked path, which raises or runs the step.

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec


cdef extern from *:
    """
    /* The prepared step's per-array test: o (an ndarray) has every bit of
       flags, shape dims[0..nd) and the plan's element type in native byte
       order: the plan's dtype object itself (one compare; a descriptor
       never changes), or another of the same type_num, not swapped. */
    static inline int fo_plan_arr(PyObject *o, PyArray_Descr *descr, int type_num,
                                  int flags, int nd, const npy_intp *dims)
    {
        PyArrayObject *a = (PyArrayObject *)o;
        const npy_intp *d;
        int k;
        if ((PyArray_FLAGS(a) & flags) != flags || PyArray_NDIM(a) != nd)
            return 0;
        if (PyArray_DESCR(a) != descr
                && (PyArray_TYPE(a) != type_num || !PyArray_ISNOTSWAPPED(a)))
            return 0;
        d = PyArray_DIMS(a);
        for (k = 0; k < nd; k++)
            if (d[k] != dims[k])
                return 0;
        return 1;
    }
    /* Has o (an ndarray) the shape dims[0..nd)? */
    static inline int fo_plan_shape(PyObject *o, int nd, const npy_intp *dims)
    {
        const npy_intp *d = PyArray_DIMS((PyArrayObject *)o);
        int k;
        if (PyArray_NDIM((PyArrayObject *)o) != nd)
            return 0;
        for (k = 0; k < nd; k++)
            if (d[k] != dims[k])
                return 0;
        return 1;
    }
    /* A written array's guard: its data pointer, dtype object and every bit
       of flags (writeable, aligned, its contiguity) as now. Its shape is
       not guarded: the optimizer holds a reference to it, so NumPy refuses
       to resize it (only resize(refcheck=False), which NumPy documents as
       unsafe, could), and an in-place reshape keeps its size (the shapes of
       a parameter and its states are compared with the plan's in
       StepPlan._accept). */
    static inline void fo_plan_guard(fo_step_guard *g, PyObject *o, int flags)
    {
        PyArrayObject_fields *a = (PyArrayObject_fields *)o;
        g->w[0] = (const void *const *)&a->data;
        g->want[0] = a->data;
        g->w[1] = (const void *const *)&a->descr;
        g->want[1] = a->descr;
        g->flags = &a->flags;
        g->mask = flags;
        g->pad_ = 0;
    }
    """
    bint fo_plan_arr(PyObject *o, void *descr, int type_num, int flags, int nd,
                     const cnp.npy_intp *dims) noexcept
    void fo_plan_guard(fo_step_guard *g, PyObject *o, int flags) noexcept
    bint fo_plan_shape(PyObject *o, int nd, const cnp.npy_intp *dims) noexcept


cdef struct PlanTensor:
    cnp.npy_intp *dims      # x's shape then (into StepPlan.dims)
    void *descr             # x's dtype object then (StepPlan.descrs holds it)
    int64_t nbytes          # x's bytes
    int64_t gbytes          # the bytes of the gradient accepted last (at ts[i].g)
    int ndim
    int type_num
    int wflags              # what a written array must have: _W | order
    int rflags              # what a gradient must have: _R | order


cdef class StepPlan:
    """Parameters and states of a step checked once (see the comment above).
    Build with StepPlan.make(...), which returns None when they need the
    slow path; run(grads, ...) per step."""
    cdef fo_step_tensor *ts     # .g: the gradient accepted last (NULL: none yet)
    cdef fo_step_group *gs
    cdef fo_step_guard *guards  # nt * npg: each written array's (fo_step_guard)
    cdef Py_ssize_t npg         # guards per tensor (1: x alone ... 5: x, s1..s3, w)
    cdef PlanTensor *pt
    cdef cnp.npy_intp *dims
    cdef int64_t *wlo
    cdef int64_t *whi
    cdef Py_ssize_t nt, ng, nw
    cdef tuple keep             # xs, the state tuples and (if given) the copies
    cdef list descrs            # their dtype objects (a pointer compared must stay valid)
    cdef fo_step_opts last      # the options of the last step run (for _drive)
    cdef int last_nth
    cdef bint ran
    cdef readonly bint stale    # a guard failed: _refresh before running
    cdef readonly bint busy     # a step (or _drive) of this plan is running
    cdef list gdescrs           # the dtype objects the guards compare with
    cdef bint fonly             # some parameter is F-ordered and not C-contiguous
    cdef tuple pcodes           # run_pointers' gradients' type codes (None: x's)

    def __dealloc__(self):
        PyMem_Free(self.ts)
        PyMem_Free(self.gs)
        PyMem_Free(self.guards)
        PyMem_Free(self.pt)
        PyMem_Free(self.dims)
        PyMem_Free(self.wlo)
        PyMem_Free(self.whi)

    @staticmethod
    def make(tuple xs, tuple s1s, tuple s2s, tuple s3s, tuple index, Py_ssize_t ng,
             tuple ws=None, seed=0, bint half_params=False):
        """ws: per tensor the array that receives its new parameters rounded
        (the step's param_copies; None in it: no copy), or None for none;
        seed, the stochastic rounding's of states stored apart (as step's:
        an int, or a tuple of one key per tensor); half_params, as step's:
        16-bit parameters updated in their own type are taken."""
        cdef StepPlan p = StepPlan.__new__(StepPlan)
        cdef Call c
        cdef PyObject *arrays[5]
        cdef Py_ssize_t nt = PyTuple_GET_SIZE(xs)
        cdef const Op *op = &OP_PLAN if ws is None else &OP_PLAN_COPY
        if not (PyTuple_GET_SIZE(s1s) == PyTuple_GET_SIZE(s2s) == PyTuple_GET_SIZE(s3s)
                == PyTuple_GET_SIZE(index) == nt):
            return None
        if ws is not None and PyTuple_GET_SIZE(ws) != nt:
            return None
        p.nt = nt
        p.ng = ng
        p.keep = (xs, s1s, s2s, s3s) if ws is None else (xs, s1s, s2s, s3s, ws)
        p.ts = <fo_step_tensor *>PyMem_Malloc((nt + 1) * sizeof(fo_step_tensor))
        p.gs = <fo_step_group *>PyMem_Malloc((ng + 1) * sizeof(fo_step_group))
        p.pt = <PlanTensor *>PyMem_Malloc((nt + 1) * sizeof(PlanTensor))
        p.wlo = <int64_t *>PyMem_Malloc((op.n_roles * nt + 1) * sizeof(int64_t))
        p.whi = <int64_t *>PyMem_Malloc((op.n_roles * nt + 1) * sizeof(int64_t))
        if not (p.ts and p.gs and p.pt and p.wlo and p.whi):
            raise MemoryError()
        arrays[0] = <PyObject *>xs
        arrays[1] = <PyObject *>s1s
        arrays[2] = <PyObject *>s2s
        arrays[3] = <PyObject *>s3s
        arrays[4] = <PyObject *>ws
        _init(&c)
        c.half_x = half_params
        c.index = <PyObject *>index
        c.ng = ng
        try:
            # the written arrays alone: the gradients come per step
            if not (_set_keys(&c, seed, nt) and _step_call(&c, op, arrays, nt, False)):
                return None
            _keys_into(&c, nt)
            p._fill(&c, op.n_roles)
        finally:
            _release(&c)
        p._sort_written()
        return p

    cdef int _fill(self, Call *c, int n_roles) except -1:
        """The per-tensor records and written ranges from a gather."""
        cdef Py_ssize_t nt = self.nt, i, k, m = 0, nd = 0
        cdef tuple xs = <tuple>self.keep[0]
        cdef cnp.ndarray xa
        cdef PlanTensor *t
        for i in range(nt):
            nd += cnp.PyArray_NDIM(<cnp.ndarray>PyTuple_GET_ITEM(xs, i))
        self.dims = <cnp.npy_intp *>PyMem_Malloc((nd + 1) * sizeof(cnp.npy_intp))
        if self.dims == NULL:
            raise MemoryError()
        nd = 0
        self.descrs = []
        for i in range(nt):
            xa = <cnp.ndarray>PyTuple_GET_ITEM(xs, i)
            t = &self.pt[i]
            self.ts[i] = (<fo_step_tensor *>c.ts)[i]
            self.ts[i].g = NULL
            t.type_num = cnp.PyArray_TYPE(xa)
            t.descr = <void *>cnp.PyArray_DESCR(xa)
            self.descrs.append(<object>t.descr)
            order = (cnp.NPY_ARRAY_C_CONTIGUOUS
                     if cnp.PyArray_FLAGS(xa) & cnp.NPY_ARRAY_C_CONTIGUOUS
                     else cnp.NPY_ARRAY_F_CONTIGUOUS)
            t.wflags = _W | order
            self.fonly = self.fonly or order == cnp.NPY_ARRAY_F_CONTIGUOUS
            t.rflags = _R | order
            t.ndim = cnp.PyArray_NDIM(xa)
            t.dims = self.dims + nd
            for k in range(t.ndim):
                t.dims[k] = cnp.PyArray_DIMS(xa)[k]
            nd += t.ndim
            t.nbytes = cnp.PyArray_SIZE(xa) * cnp.PyArray_ITEMSIZE(xa)
            t.gbytes = t.nbytes
        self._guard()
        for k in range(n_roles):    # every role is written
            for i in range(nt):
                lo = c.ext[2 * (k * nt + i)]
                hi = c.ext[2 * (k * nt + i) + 1]
                if lo < hi:
                    self.wlo[m] = lo
                    self.whi[m] = hi
                    m += 1
        self.nw = m
        return 0

    cdef int _guard(self) except -1:
        """The guards as the written arrays are now: one per written array
        of each tensor (x first), an empty one (no address) where a tensor
        has fewer; allocated on the first call."""
        cdef Py_ssize_t nt = self.nt, i, k, r
        cdef size_t size
        if self.guards == NULL:
            self.npg = 1
            for k in range(1, len(self.keep)):
                for i in range(nt):
                    if PyTuple_GET_ITEM(<tuple>self.keep[k], i) != <PyObject *>None:
                        self.npg = k + 1
                        break
            size = (nt * self.npg + 1) * sizeof(fo_step_guard)
            self.guards = <fo_step_guard *>PyMem_Malloc(size)
            if self.guards == NULL:
                raise MemoryError()
            memset(self.guards, 0, size)
        # the dtype objects compared by address must outlive the guards
        self.gdescrs = []
        for i in range(nt):
            r = 0
            for k in range(self.npg):
                o = PyTuple_GET_ITEM(<tuple>self.keep[k], i)
                if o != <PyObject *>None:
                    fo_plan_guard(&self.guards[i * self.npg + r], o, self.pt[i].wflags)
                    self.gdescrs.append((<cnp.ndarray>o).dtype)
                    r += 1
        return 0

    cdef bint _written_ok(self):
        """Does every written array still pass the plan's own test (its data
        pointer then, its shape; writeable, aligned, its contiguity; the
        element type in native order)?"""
        cdef Py_ssize_t i, k, r
        cdef PlanTensor *t
        cdef PyObject *o
        for i in range(self.nt):
            t = &self.pt[i]
            r = 0
            for k in range(self.npg):
                o = PyTuple_GET_ITEM(<tuple>self.keep[k], i)
                if o == <PyObject *>None:
                    continue
                if fo_data(o) != self.guards[i * self.npg + r].want[0]:
                    return False
                if k == 4 or (k > 0 and self.ts[i].sdtype != self.ts[i].dtype):
                    # a copy, or a state stored apart: of its own type
                    if (_dtype_code(fo_type(o)) != (self.ts[i].wdtype if k == 4
                                                    else self.ts[i].sdtype)
                            or not fo_plan_arr(o, cnp.PyArray_DESCR(<cnp.ndarray>o),
                                               fo_type(o), t.wflags, t.ndim, t.dims)
                            or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>o)):
                        return False
                elif not fo_plan_arr(o, t.descr, t.type_num, t.wflags, t.ndim, t.dims):
                    return False
                r += 1
        return True

    cdef bint _refresh(self) except -1:
        """After a guard failed (FO_ESTALE): if the written arrays pass the
        plan's own test again (_written_ok), the guards are taken anew (a
        dtype object replaced by an equal one fails a guard yet changes
        nothing) and the plan runs again; else it declines again, and the
        fully checked route says what changed."""
        if not self._written_ok():
            return False
        self._guard()
        self.stale = False
        return True

    cdef int _sort_written(self) except -1:
        cdef Py_ssize_t i, m = self.nw
        order = np.argsort(np.array([self.wlo[i] for i in range(m)], dtype=np.int64),
                           kind="stable")
        los = [self.wlo[j] for j in order]
        his = [self.whi[j] for j in order]
        for i in range(m):
            self.wlo[i] = los[i]
            self.whi[i] = his[i]
        return 0

    cdef bint _written_hit(self, int64_t lo, int64_t hi) noexcept:
        """Does [lo, hi) intersect a written range? (they are disjoint, sorted)"""
        cdef Py_ssize_t a = 0, c = self.nw, mid
        while a < c:                    # first range ending after lo
            mid = (a + c) // 2
            if self.whi[mid] <= lo:
                a = mid + 1
            else:
                c = mid
        return a < self.nw and self.wlo[a] < hi

    cdef bint _accept(self, tuple gs):
        """The gradients' per-step checks (see the comment above); False to
        decline."""
        cdef Py_ssize_t i, k
        cdef PlanTensor *t
        cdef PyObject *g
        cdef PyObject *o
        cdef void *gp
        cdef int64_t nb
        cdef tuple xs = <tuple>self.keep[0]
        for i in range(self.nt):
            t = &self.pt[i]
            g = PyTuple_GET_ITEM(gs, i)
            if not fo_exact_array(g) and not _is_array(<object>g):
                return False
            if fo_plan_arr(g, t.descr, t.type_num, t.rflags, t.ndim, t.dims):
                self.ts[i].gdtype = self.ts[i].dtype
            elif not self._accept_16bit(i, g):
                return False
            # the shapes of the parameter and its states (a.shape = ... in
            # place keeps every guard)
            if not fo_plan_shape(PyTuple_GET_ITEM(xs, i), t.ndim, t.dims):
                return False
            for k in range(1, self.npg):
                o = PyTuple_GET_ITEM(<tuple>self.keep[k], i)
                if o != <PyObject *>None and not fo_plan_shape(o, t.ndim, t.dims):
                    return False
            gp = fo_data(g)
            nb = self.ts[i].n * fo_dtype_size(self.ts[i].gdtype)
            if gp != self.ts[i].g or nb != t.gbytes:
                if nb and self._written_hit(<int64_t>gp, <int64_t>gp + nb):
                    return False
                self.ts[i].g = gp
                t.gbytes = nb
        return True

    cdef bint _accept_16bit(self, Py_ssize_t i, PyObject *g):
        """Tensor i's gradient g of a 16-bit type paired with its parameter's
        (a storage pair of tables.h), with the flags and shape _accept asks
        for: its type set in the record (checked again by fo_step). The
        overlap test then spans its own bytes, fewer than a parameter's."""
        cdef PlanTensor *t = &self.pt[i]
        cdef int code = _dtype_code(fo_type(g))
        if code < 0 or fo_pair(self.ts[i].dtype, code) < 0:
            return False
        if not fo_plan_arr(g, cnp.PyArray_DESCR(<cnp.ndarray>g), fo_type(g), t.rflags,
                           t.ndim, t.dims) or not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>g):
            return False
        self.ts[i].gdtype = code
        return True

    def pointer_types(self, tuple codes):
        """The type code of each tensor's gradient that run_pointers will
        be given (fastopt._dtypes.CODE; 16-bit gradients of float32 masters),
        instead of its parameter's; False (and nothing set) if a pair is not
        built or the length is wrong."""
        cdef Py_ssize_t i
        if PyTuple_GET_SIZE(codes) != self.nt:
            return False
        for i in range(self.nt):
            o = <object>PyTuple_GET_ITEM(codes, i)
            if type(o) is not int or fo_pair(self.ts[i].dtype, <int>o) < 0:
                return False
        self.pcodes = codes
        return True

    cdef bint _accept_pointers(self, tuple ptrs) except -1:
        """Gradients given as data addresses (Python ints) by a caller that
        has checked the rest of what _accept checks (the plan's element
        type or the one pointer_types gave, shape and contiguity) and keeps
        their memory alive through the call: fastopt.torch's prepared step,
        whose gradients are tensors.
        Tested here: the alignment to the element type and _accept's overlap
        test. A tensor with no elements may have address 0 (never read: the
        plan's own array stands in). False to decline."""
        cdef Py_ssize_t i
        cdef void *gp
        cdef uintptr_t u
        cdef int code
        cdef int64_t nb
        for i in range(self.nt):
            o = <object>PyTuple_GET_ITEM(ptrs, i)
            if type(o) is not int or o < 0:
                return False
            u = <uintptr_t>o
            if self.pt[i].nbytes == 0:
                u = <uintptr_t>self.ts[i].x
            code = self.ts[i].dtype if self.pcodes is None else \
                <int>(<object>PyTuple_GET_ITEM(self.pcodes, i))
            if u == 0 or u % fo_dtype_size(code):
                return False
            gp = <void *>u
            self.ts[i].gdtype = code
            nb = self.ts[i].n * fo_dtype_size(code)
            if gp != self.ts[i].g or self.pt[i].gbytes != nb:
                if nb and self._written_hit(<int64_t>gp, <int64_t>gp + nb):
                    return False
                self.ts[i].g = gp
                self.pt[i].gbytes = nb
        return True

    def run(self, grads, tuple groups, double grad_scale, double max_norm,
            double clip_value, int clip, int norm_type, bint check_finite, n_threads,
            double given_norm=NAN):
        """The step with these gradients (a list or tuple, one array per
        tensor of the plan): (applied, norm, finite) as step(), or None to
        decline (nothing written)."""
        return self._run(grads, groups, grad_scale, max_norm, clip_value, clip,
                         norm_type, check_finite, n_threads, given_norm, False)

    def run_pointers(self, tuple ptrs, tuple groups, double grad_scale, double max_norm,
                     double clip_value, int clip, int norm_type, bint check_finite,
                     n_threads):
        """run() with each gradient given as its data address (a Python
        int), for a caller that vouches for the rest: each is of its
        tensor's dtype (native order) or of the type pointer_types gave, of
        its shape, contiguous in its parameter's order, and alive until this
        returns. Only the alignment
        and the overlap with written memory are tested here
        (_accept_pointers). Private to fastopt: a wrong address is a wrong
        read, not an error."""
        return self._run(ptrs, groups, grad_scale, max_norm, clip_value, clip,
                         norm_type, check_finite, n_threads, NAN, True)

    cdef object _run(self, grads, tuple groups, double grad_scale, double max_norm,
                     double clip_value, int clip, int norm_type, bint check_finite,
                     n_threads, double given_norm, bint pointers):
        # One step at a time per plan: its records (the gradients' pointers,
        # the groups, the options) are rewritten by every step, so a second
        # thread stepping the same optimizer while fo_step runs with the GIL
        # released declines to the fully checked route, which builds its own.
        if self.busy:
            return None
        self.busy = True
        try:
            return self._run_now(grads, groups, grad_scale, max_norm, clip_value, clip,
                                 norm_type, check_finite, n_threads, given_norm, pointers)
        finally:
            self.busy = False

    cdef object _run_now(self, grads, tuple groups, double grad_scale, double max_norm,
                         double clip_value, int clip, int norm_type, bint check_finite,
                         n_threads, double given_norm, bint pointers):
        cdef fo_step_result res
        cdef int nth = _n_threads(n_threads), rc = FO_OK
        cdef tuple gs
        if type(grads) is tuple:
            gs = <tuple>grads
        elif type(grads) is list and not pointers:
            gs = tuple(<list>grads)    # a tuple holds the arrays while the GIL is off
        else:
            return None
        if self.stale and not self._refresh():
            return None
        # a measured norm sums each gradient in its logical (C) order: an
        # F-ordered tensor's step goes to the fully checked route's copy
        if self.fonly and given_norm != given_norm and (check_finite or clip != 0):
            return None
        if (not nth or PyTuple_GET_SIZE(gs) != self.nt
                or PyTuple_GET_SIZE(groups) != self.ng
                or not _step_groups(groups, self.gs)
                or not (self._accept_pointers(gs) if pointers else self._accept(gs))):
            return None
        _step_opts(&self.last, grad_scale, max_norm, clip_value, clip, norm_type,
                   check_finite, given_norm)
        self.last.guards = self.guards
        self.last.guards_per_tensor = self.npg
        self.last_nth = nth
        with nogil:
            rc = fo_step(self.ts, self.nt, self.gs, self.ng, &self.last, &res, nth)
        if rc == FO_ESTALE:
            self.stale = True
            return None
        if rc == FO_EINVAL:
            return None
        _check_rc(rc)
        self.ran = True
        return (res.applied != 0, res.norm, res.finite != 0)

    def _drive(self, Py_ssize_t reps, tuple grads):
        """Benchmarks only: fo_step `reps` times, GIL released, on the
        arrays of the last step run (grads: those gradients, checked and
        held alive here) with its options and groups: the C driver's own
        time for the work of one step, with no per-step check. Returns the
        seconds of the reps calls (a monotonic clock around the C loop
        alone). Updates the parameters as those steps would. The written
        arrays are checked once, before (_written_ok), and the guards are
        not passed: what they cost a step stays in opt.step's time.
        """
        cdef fo_step_result res
        cdef fo_step_opts o = self.last
        cdef Py_ssize_t r
        cdef int rc = FO_OK
        cdef timespec t0, t1
        if (self.busy or not self.ran or self.stale or PyTuple_GET_SIZE(grads) != self.nt
                or not self._written_ok() or not self._accept(grads)):
            raise ValueError("StepPlan._drive: run a step with these gradients first")
        o.guards = NULL
        o.guards_per_tensor = 0
        self.busy = True
        with nogil:
            clock_gettime(CLOCK_MONOTONIC, &t0)
            for r in range(reps):
                rc = fo_step(self.ts, self.nt, self.gs, self.ng, &o, &res,
                             self.last_nth)
                if rc != FO_OK:
                    break
            clock_gettime(CLOCK_MONOTONIC, &t1)
        self.busy = False
        _check_rc(rc)
        return (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9
