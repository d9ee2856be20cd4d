"""ShardedOptimizer: ZeRO-1 over MPI around any fastopt.optim optimizer."""
from __future__ import annotations

import json
import math
import operator
import time
import zlib

import numpy as np

from .. import _ext, _interrupt
from ..optim import _states
from ..optim._checks import as_bool, check_update_count
from ..optim._masters import HALF
from . import _checkpoint, _exchange, _trust
from ._checks import (
    CUT_KEYS,
    _first_difference,
    _parse_groups,
    _positive,
    advance_carried,
    check_grads,
    check_inner_options,
    trusted,
)
from ._comm import default_n_threads, mpi, mpi_type, raise_agreed
from ._layout import Layout, Stream, cut_rule

_F = "fastopt.distributed.ShardedOptimizer"


def _native(dtype):
    return dtype.newbyteorder("=")
_FO_NORM_INF, _FO_NORM_SUMSQ = 1, 2    # src_c/fastopt.h's FO_NORM_INF, FO_NORM_SUMSQ
DEFAULT_BUCKET_BYTES = 8 << 20
_MISSING = object()


class ShardedOptimizer:
    """ZeRO-1 data parallelism over MPI around a :mod:`fastopt.optim` optimizer.

    Every rank passes the same parameter list (count, order, shapes,
    dtypes) and the same hyperparameters. The parameters are copied into
    flat per-dtype buffers (rank 0's values, broadcast): from then on the
    arrays to train are :attr:`params` (views into those buffers, in the order
    given); the arrays passed in are not used again and never modified. Each
    rank keeps the optimizer state of its shard only (about 1/N of it).

    ``step(grads)`` averages the ranks' gradients (reduce-scatter; 16-bit
    ones by an all-to-all added in float32), updates
    this rank's shard with one step of an inner ``optimizer_cls`` built over
    the shard's pieces, and gathers the updated parameters on every rank
    (allgather), bucket by bucket in a layout fixed at construction.

    Parameters
    ----------
    optimizer_cls : class
        A :mod:`fastopt.optim` optimizer (:class:`fastopt.optim.AdamW`,
        ``SGD``, ``LAMB``, ``OnnxMomentum``, ...). Its ``state_dtype=
        "int8-blockwise"`` shards 8-bit states (never splitting a block),
        ``master_weights=True`` bfloat16/float16 parameters with float32
        masters (the ranks exchange 16-bit gradients and parameters); a
        tensor with a trust ratio (LAMB, LARS) is cut at multiples of 4096
        elements, and the ranks exchange its blocks' norm sums
        (docs/distributed.md).
    params : list of ndarray, or list of dict
        As for ``optimizer_cls``: arrays, or parameter groups with their own
        hyperparameters.
    *args, **kwargs
        The optimizer's arguments (``lr``, ``schedule``, ...). ``n_threads``
        defaults to the node's cores divided by the ranks on the node
        (fastopt's own default if OMP_NUM_THREADS is set).
    comm : mpi4py.MPI.Intracomm, optional
        The ranks that train together (default ``MPI.COMM_WORLD``).
    bucket_bytes : int, default 8 MiB
        Size of one communication bucket (the layout depends on it and on the
        world size; results do not vary from run to run).
    """

    def __init__(self, optimizer_cls, params, *args, comm=None, bucket_bytes=DEFAULT_BUCKET_BYTES,
                 **kwargs):
        MPI = mpi()
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Intracomm):
            raise TypeError(f"{_F}: comm must be an mpi4py Intracomm, got {type(comm).__name__}")
        self.comm = comm
        self.rank, self.world = comm.Get_rank(), comm.Get_size()
        threads, self.ranks_on_node = default_n_threads(comm)   # collective
        err = desc = None
        try:
            desc = self._prepare(optimizer_cls, params, args, kwargs, bucket_bytes, threads)
        except Exception as exc:  # noqa: BLE001 - raised on every rank by _agree_on_params
            err = exc
        self._agree_on_params(err, desc)                        # collective
        self._build()                                           # collective (Bcast)

    # ------------------------------------------------------------ construction

    def _prepare(self, cls, params, args, kwargs, bucket_bytes, threads):
        f = _F
        if not isinstance(cls, type):
            raise TypeError(f"{f}: optimizer_cls must be a fastopt.optim optimizer class, "
                            f"got {type(cls).__name__}")
        bb = operator.index(bucket_bytes) if not isinstance(bucket_bytes, bool) else None
        if bb is None or bb < 64:
            raise ValueError(f"{f}: bucket_bytes must be an int >= 64, got {bucket_bytes!r}")
        kwargs = dict(kwargs)
        self._mw = as_bool(f, "master_weights", kwargs.get("master_weights", False))
        raw, as_groups = _parse_groups(f, params, self._mw)
        check_inner_options(f, kwargs.get("state_dtype"))
        if kwargs.get("n_threads", _MISSING) is _MISSING:
            kwargs["n_threads"] = threads
        self._cls, self._args, self._kwargs = cls, tuple(args), kwargs
        self._as_groups = as_groups
        probe = self._probe([{k: v for k, v in g.items() if k != "params"} for g in raw],
                            [[_native(p.dtype) for p in g["params"]] for g in raw])
        for attr in ("param_groups", "state", "step", "state_dict", "load_state_dict"):
            if not hasattr(probe, attr):
                raise TypeError(f"{f}: {cls.__name__} is not a fastopt.optim optimizer "
                                f"(it has no {attr!r})")
        self._state_names = tuple(probe.state)
        self._template = probe.state_dict()
        self._probe_type = type(probe)
        self.param_groups = []
        specs, self._originals = [], []
        self._q8, self._state_dtype = probe._q8, None
        for gi, (g, pg) in enumerate(zip(raw, probe.param_groups)):
            hyper = {k: v for k, v in pg.items() if k != "params"}
            self.param_groups.append(dict(hyper, params=None))
            clip = hyper.get("clipping")
            eight, trust = _states.group_eight(probe, pg), trusted(cls, hyper)
            for j, p in enumerate(g["params"]):
                c = clip[j] if isinstance(clip, list) else clip
                rule, unit = cut_rule(p.shape, c is not None, hyper.get("clip_layout", "oi"),
                                      eight and p.size >= _states.MIN_8BIT_SIZE, trust)
                specs.append((_native(p.dtype), p.shape, gi, rule, unit))
                self._originals.append(p)
        self._specs = specs
        self.bucket_bytes = bb
        return json.dumps({
            "optimizer": f"{cls.__module__}.{cls.__qualname__}",
            "groups": [len(g["params"]) for g in raw],
            "tensors": [[s[0].str, list(s[1])] for s in specs],
            "hyper": [{k: (None if callable(v) else repr(v)) for k, v in g.items()
                       if k != "params"} for g in self.param_groups],
            # the optimizer's own options as the probe resolved them: every rank's
            # states and cuts follow them (n_threads alone may differ)
            "options": {k: repr(getattr(probe, k)) for k in (
                "state_dtype", "master_weights", "seed", "state_rounding", "broadcast_grads")},
            "bucket_bytes": bb})

    def _probe(self, hypers, dtypes, **over):
        """An optimizer of the user's class over one-element stand-ins: it
        validates (and normalises) the hyperparameters without allocating
        state for the real parameters."""
        groups = [dict(h, params=[np.zeros(1, dt) for dt in dts])
                  for h, dts in zip(hypers, dtypes)]
        return self._cls(groups, *self._args, **dict(self._kwargs, **over))

    def _agree_on_params(self, err, desc):
        if self.world == 1:
            if err is not None:
                raise err
            return
        flag = np.array([0.0 if err is None else 1.0])
        MPI = mpi()
        self.comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
        raise_agreed(self.comm, err, flagged=bool(flag[0]))
        descs = self.comm.allgather(desc)
        if all(d == descs[0] for d in descs):
            return
        r = next(r for r, d in enumerate(descs) if d != descs[0])
        raise ValueError(f"{_F}: the ranks were given different parameters or "
                         f"hyperparameters: {_first_difference(descs[0], descs[r], r)}; "
                         f"every rank must pass the same parameter list (count, order, "
                         f"shapes, dtypes) and the same hyperparameters")

    def _build(self):
        L = Layout(self._specs, self.world, self.bucket_bytes)
        self.layout = L
        # 16-bit parameters (master_weights): float32 masters and states
        self._half = [dt for dt in L.dtypes if dt in HALF]
        f32 = np.dtype(np.float32)
        self._streams = L.streams({dt: f32 for dt in self._half})
        self._master_streams = [Stream(dt, "master", f32) for dt in self._half]
        self._flat = {dt: np.empty(d.length, dt) for dt, d in L.dtypes.items()}
        self._gstage = {dt: np.zeros(d.length, dt) for dt, d in L.dtypes.items()}
        # (their shard's gradients: float32, added from the ranks' 16-bit ones
        # through the receive buffers kept in _half_bufs)
        self._half_bufs: dict = {}
        # one rank: the shard is the whole buffer (its ranges are adjacent), no copy
        self._gshard = {dt: self._gstage[dt] if self.world == 1 and dt not in self._half
                        else np.empty(L.shard_length(dt, self.rank),
                                      np.float32 if dt in self._half else dt)
                        for dt in L.dtypes}
        views = []
        for t, p in zip(L.tensors, self._originals):
            v = self._flat[t.dtype][t.offset:t.offset + t.size].reshape(t.shape)
            np.copyto(v, p)
            views.append(v)
        del self._originals
        if self.world > 1:
            for dt, buf in self._flat.items():
                self.comm.Bcast([buf, mpi_type(dt)], root=0)
        self._views = views
        self._grad_views = [self._gstage[t.dtype][t.offset:t.offset + t.size].reshape(t.shape)
                            for t in L.tensors]
        for gi, g in enumerate(self.param_groups):
            g["params"] = tuple(v for v, t in zip(views, L.tensors) if t.group == gi)
        self._group_params = [g["params"] for g in self.param_groups]
        self._pieces = L.pieces(self.rank)
        # groups whose update a trust ratio scales (fixed: trust_ratio is a cut key)
        self._trusting = [trusted(self._cls, g) for g in self.param_groups]
        self._trust = any(self._trusting[t.group] and t.size for t in L.tensors)
        self._build_inner()
        self._steps = 0
        self.last_lr = [None] * len(self.param_groups)
        self.last_timing: dict = {}
        self.last_grad_norm = None
        self._t_inner = 0.0
        self._pushed = [self._hyper_key(g) for g in self.param_groups]

    def _build_inner(self):
        order = sorted((p for ps in self._pieces.values() for p in ps),
                       key=lambda p: (p.tensor.index, p.lo))
        self._inner_pieces = order
        groups, whole = [], []
        for gi, g in enumerate(self.param_groups):
            mine = [p for p in order if p.tensor.group == gi]
            first = min((t.index for t in self.layout.tensors if t.group == gi), default=0)
            h = self._inner_hyper(g, [p.tensor.index - first for p in mine])
            h["params"] = [self._flat[p.tensor.dtype][p.lo:p.hi].reshape(p.shape)
                           for p in mine]
            whole += [p.tensor.size for p in mine]
            groups.append(h)
        self._inner_grads = [self._gshard[p.tensor.dtype][p.shard_offset:p.shard_offset
                                                          + p.hi - p.lo].reshape(p.shape)
                             for p in order]
        self._inner_owner = np.array([p.tensor.index for p in order], np.int64)
        self.inner = None
        if order:
            # 8-bit or not is decided by the size of the tensor a piece is
            # cut from (optim._states.eight), set before the states are made
            self.inner = self._cls.__new__(self._cls)
            self.inner._whole_sizes = whole
            self.inner.__init__(groups, *self._args, **self._kwargs)

    def _inner_hyper(self, g, idx):
        """A group's hyperparameters for the inner optimizer: the learning rate
        is pushed every step (schedules are evaluated here, once per step),
        per-tensor clipping lists are mapped onto the pieces."""
        h = {k: v for k, v in g.items() if k != "params"}
        h["schedule"] = None
        if h.get("lr") is None:
            h["lr"] = 0.0
        if isinstance(h.get("clipping"), list):
            h["clipping"] = [h["clipping"][i] for i in idx]
        return h

    # ------------------------------------------------------------- inspection

    @property
    def params(self) -> list:
        """The parameters to train (views into the flat buffers), in order."""
        return list(self._views)

    @property
    def grad_buffers(self) -> list:
        """Gradient arrays owned by the optimizer, one per parameter: write the
        gradients into these and pass them to :meth:`step` to save a copy."""
        return list(self._grad_views)

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def state_bytes(self) -> int:
        """Bytes of optimizer state held by this rank."""
        if self.inner is None:
            return 0
        masters = sum(m.nbytes for m, c in zip(self.inner.params, self.inner._copies or ())
                      if c is not None)
        return masters + sum(a.nbytes for arrs in self.inner.state.values() for a in arrs)

    def __repr__(self):
        return (f"{_F}({self._cls.__name__}, {len(self._views)} parameters, rank "
                f"{self.rank} of {self.world}, steps={self._steps})")

    # -------------------------------------------------------------------- step

    def step(self, grads, *, grad_scale=None, skip_if_nonfinite=False, max_grad_norm=None,
             norm_type=2.0) -> bool:
        """One data-parallel step; collective (every rank calls it).

        Parameters
        ----------
        grads : list
            This rank's gradients, one per parameter (or one list per group),
            each of its parameter's dtype and shape (or broadcastable to it,
            with ``broadcast_grads=True`` among the optimizer's arguments), or
            None. The gradients of all ranks are averaged; a parameter whose
            gradient is None on every rank is left untouched, None on some
            ranks counts as zeros there.
        grad_scale : float, optional
            Divide the averaged gradients by this (> 0), in their dtype.
        skip_if_nonfinite : bool, default False
            Skip the step on every rank if any averaged (scaled) gradient
            element is NaN or +-Inf (decided collectively).
        max_grad_norm : float, optional
            Clip by the global norm of the averaged gradients (torch's
            ``clip_grad_norm_`` rule: multiply by ``max_grad_norm / (norm +
            1e-6)`` when that is below 1 or NaN); the norm is combined from per-rank
            partial sums in rank order and kept in :attr:`last_grad_norm`.
        norm_type : {2.0, inf}

        Every argument must be the same on every rank (checked). A bad input
        on any rank makes every rank raise before anything is communicated
        or written.

        Returns
        -------
        bool
            True if the step was applied, False if it was skipped.
        """
        f = _F + ".step"
        t0 = time.perf_counter()
        local = self._check_local(f, grads, grad_scale, skip_if_nonfinite, max_grad_norm,
                                  norm_type)
        # from its first collective on, the step runs whole on this rank: a
        # KeyboardInterrupt arriving meanwhile is raised after the last one
        # (docs/semantics.md, "Interrupted steps")
        return _interrupt.whole(self._step_agreed, f, local, skip_if_nonfinite, norm_type, t0)

    def _step_agreed(self, f, local, skip_if_nonfinite, norm_type, t0) -> bool:
        """The step from the agreement on: the collectives, the update and
        the bookkeeping."""
        flat, scale, mgn, lrs, has = self._agree(f, local, skip_if_nonfinite, norm_type)
        t1 = time.perf_counter()
        # a gradient in the staging buffers but not its own view (another
        # parameter's grad_buffers entry) is read before the copies below
        # write there
        stage = self._gstage.values()
        flat = [g.copy() if g is not None and g is not self._grad_views[i] and any(
            np.may_share_memory(g, b) for b in stage) else g for i, g in enumerate(flat)]
        for i, g in enumerate(flat):
            if g is None:
                if has[i]:
                    self._grad_views[i].fill(0)
            elif g is not self._grad_views[i]:
                np.copyto(self._grad_views[i], g, casting="same_kind")
        t2 = time.perf_counter()
        self._reduce_scatter()
        t3 = time.perf_counter()
        applied = self._update(f, has, scale, bool(skip_if_nonfinite), mgn, norm_type, lrs)
        t4 = time.perf_counter()
        if applied:
            self._allgather()
        t5 = time.perf_counter()
        # "update" is the inner optimizer's step alone; the rest of that phase
        # (scaling, the collective decisions, waiting for the slowest rank)
        # is counted as "sync"
        inner = self._t_inner if applied else 0.0
        self.last_timing = {"check": t1 - t0, "copy": t2 - t1, "reduce_scatter": t3 - t2,
                            "update": inner, "sync": t4 - t3 - inner, "allgather": t5 - t4}
        return applied

    def _check_local(self, f, grads, grad_scale, skip_if_nonfinite, max_grad_norm,
                     norm_type):
        """This rank's arguments checked and its schedules called, with no
        collective: (error or None, gradients, lrs, scale, max_grad_norm)."""
        err, flat, lrs, scale, mgn = None, None, None, None, None
        try:
            check_update_count(f, self._steps + self._cls._T0)     # (before any exchange)
            flat = self._check_grads(f, grads)
            scale = _positive(f, "grad_scale", grad_scale)
            if not isinstance(skip_if_nonfinite, (bool, np.bool_)):
                raise TypeError(f"{f}: skip_if_nonfinite must be True or False")
            mgn = _positive(f, "max_grad_norm", max_grad_norm)
            if norm_type not in (2, 2.0, math.inf):
                raise ValueError(f"{f}: norm_type must be 2.0 or inf, got {norm_type!r}")
            lrs = self._lrs_and_hypers(f)   # calls the schedules: user code
        except Exception as exc:  # noqa: BLE001 - raised on every rank by _agree
            err = exc
        return err, flat, lrs, scale, mgn

    def _agree(self, f, local, skip_if_nonfinite, norm_type):
        """Agree with the other ranks on this rank's checks (one
        Allreduce): raise everywhere if any rank has an error or the scalar
        arguments differ; return what the step needs, and which parameters
        have a gradient on some rank."""
        MPI = mpi()
        err, flat, lrs, scale, mgn = local
        n = len(self._views)
        vec = np.zeros(11 + n)
        if err is None:
            digest = self._hyper_digest(lrs)
            vec[1:11] = [scale or 0, -(scale or 0), float(skip_if_nonfinite),
                         -float(skip_if_nonfinite), mgn or 0, -(mgn or 0),
                         float(norm_type), -float(norm_type), digest, -digest]
            vec[11:] = [g is not None for g in flat]
        else:
            vec[0] = 1.0
        if self.world > 1:
            self.comm.Allreduce(MPI.IN_PLACE, vec, op=MPI.MAX)
        raise_agreed(self.comm, err, flagged=vec[0] > 0)
        for k, name in ((1, "grad_scale"), (3, "skip_if_nonfinite"), (5, "max_grad_norm"),
                        (7, "norm_type")):
            if vec[k] != -vec[k + 1]:
                raise ValueError(f"{f}: {name} differs between the ranks; pass the same "
                                 f"value on every rank")
        if vec[9] != -vec[10]:
            self._raise_hyper_difference(f, lrs)
        return flat, scale, mgn, lrs, vec[11:] > 0

    def _hyper_view(self, lrs):
        """What every rank must agree on before a step: each group's
        hyperparameters as pushed to the inner optimizer (schedules by the
        learning rate they gave) and the learning rates, as text."""
        return [[(k, None if callable(v) else repr(v)) for k, v in key] + [("lr", repr(lr))]
                for key, lr in zip(self._pushed, (float(x) for x in lrs))]

    def _hyper_digest(self, lrs) -> float:
        """A CRC-32 of :meth:`_hyper_view` (exact in a float64), compared in
        the step's one Allreduce."""
        return float(zlib.crc32(repr(self._hyper_view(lrs)).encode()))

    def _raise_hyper_difference(self, f, lrs):
        """The digests differ: find the first difference (a collective on
        this error path only) and raise it, the same on every rank."""
        views = self.comm.allgather(self._hyper_view(lrs))
        r = next(r for r, v in enumerate(views) if v != views[0])
        for gi, (a, b) in enumerate(zip(views[0], views[r])):
            for (k, x), (_, y) in zip(a, b):
                if x != y:
                    what = "the learning rate" if k == "lr" else f"['{k}']"
                    raise ValueError(f"{f}: {what} of param_groups[{gi}] differs between "
                                     f"the ranks ({x} on rank 0, {y} on rank {r}); every "
                                     f"rank must use the same hyperparameters and schedules")

    def _check_grads(self, f, grads):
        return check_grads(f, grads, self._group_params, self._views,
                           self._kwargs.get("broadcast_grads"))

    @staticmethod
    def _hyper_key(g):
        return tuple((k, tuple(v) if isinstance(v, list) else v)
                     for k, v in sorted(g.items()) if k != "params")

    def _lrs_and_hypers(self, f):
        """Check edits of param_groups, evaluate the schedules (once per step),
        and push the hyperparameters into the inner optimizer."""
        for gi, (g, ps) in enumerate(zip(self.param_groups, self._group_params)):
            if g.get("params") is not ps:
                raise ValueError(f"{f}: param_groups[{gi}]['params'] was replaced; the "
                                 f"parameters are fixed when the optimizer is built")
        changed = [gi for gi, g in enumerate(self.param_groups)
                   if self._hyper_key(g) != self._pushed[gi]]
        if changed:
            self._check_edits(f, changed)
        lrs = []
        for gi, g in enumerate(self.param_groups):
            sched = g.get("schedule")
            if sched is None:
                lrs.append(g["lr"])
                continue
            value = sched(self._steps)
            try:
                lr = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"{f}: schedule({self._steps}) of param_groups[{gi}] "
                                f"returned {type(value).__name__}, not a real number") from None
            if isinstance(value, (bool, np.bool_)) or not (math.isfinite(lr) and lr >= 0):
                raise ValueError(f"{f}: schedule({self._steps}) of param_groups[{gi}] "
                                 f"returned {value!r}; a learning rate is finite and >= 0")
            lrs.append(lr)
        return lrs

    def _check_edits(self, f, changed):
        hypers = [{k: v for k, v in g.items() if k != "params"} for g in self.param_groups]
        for gi in changed:
            old = dict(self._pushed[gi])
            for k in CUT_KEYS:
                new = hypers[gi].get(k)
                new = tuple(new) if isinstance(new, list) else new
                if old.get(k) != new:
                    raise ValueError(f"{f}: param_groups[{gi}]['{k}'] was changed; it fixes "
                                     f"the shard boundaries and cannot change after "
                                     f"construction")
        dts = [[v.dtype for v in ps] for ps in self._group_params]
        try:
            probe = self._probe(hypers, dts, n_threads=1)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{f}: an edited hyperparameter is invalid: {exc}") from None
        for gi in changed:
            norm = {k: v for k, v in probe.param_groups[gi].items() if k != "params"}
            self.param_groups[gi].update(norm)
            self._pushed[gi] = self._hyper_key(self.param_groups[gi])
            if self.inner is not None:
                ig = self.inner.param_groups[gi]
                for k, v in self._inner_hyper(norm, []).items():
                    if k not in ("clipping", "lr"):
                        ig[k] = v

    # ---------------------------------------------------------- communication

    _reduce_scatter = _exchange.reduce_scatter
    _allgather = _exchange.allgather

    # ------------------------------------------------------------------ update

    def _partial(self, live, scale, norm_type):
        """This rank's part of the global norm of u = g / scale and whether
        every u is finite, in one read-only pass of fastopt's C reduction
        (fo_global_norm: the blocks and fixed order of fastopt.optim's own
        norm): the sum of squares in double (or the max |u|)."""
        kind = _FO_NORM_INF if norm_type == math.inf else _FO_NORM_SUMSQ
        nth = self.inner.n_threads if self.inner is not None else 1
        out = _ext.global_norm(tuple(live), 1.0 if scale is None else scale, kind, nth)
        if out is None:          # not taken as they are: contiguous copies are
            out = _ext.global_norm(tuple(np.ascontiguousarray(g) for g in live),
                                   1.0 if scale is None else scale, kind, nth)
        return out

    def _update(self, f, has, scale, skip, mgn, norm_type, lrs):
        grads = [g if has[i] else None for g, i in zip(self._inner_grads, self._inner_owner)]
        live = [g for g in grads if g is not None]
        coef = 1.0
        if skip or mgn is not None:
            part, finite = self._partial(live, scale, norm_type)
            every = np.zeros(2 * self.world)
            stats = np.array([0.0 if finite else 1.0, part])
            if self.world > 1:
                self.comm.Allgather(stats, every)
            else:
                every[:] = stats
            if skip and every[0::2].any():
                return False
            if mgn is not None:
                norm = self._combine(every[1::2], norm_type)
                self.last_grad_norm = norm
                coef = mgn / (norm + 1e-6)
        unscale = scale is not None and scale != 1.0
        # (g / scale) * coef in g's dtype, as fo_step's transform; a NaN norm
        # gives a NaN coef, which multiplies too (fo_step and torch do so)
        if not coef >= 1.0:
            with np.errstate(all="ignore"):
                for g in live:
                    if unscale:
                        np.divide(g, g.dtype.type(scale), out=g)
                    np.multiply(g, g.dtype.type(coef), out=g)
            unscale = False
        err = None
        if self.inner is not None:
            for gi, lr in enumerate(lrs):
                self.inner.param_groups[gi]["lr"] = lr
        per, k = [], 0
        for ig in (self.inner.param_groups if self.inner is not None else ()):
            per.append(grads[k:k + len(ig["params"])])
            k += len(ig["params"])
        t0 = time.perf_counter()
        if self._trust:             # collective: every rank, pieces or none
            err = _trust.step(self, f, per, scale if unscale else None, has)
        elif self.inner is not None:
            try:
                # one fastopt C call over the shard (all groups); the
                # unscale, if still to do, is fused into it
                self.inner.step(per, grad_scale=scale if unscale else None)
            except Exception as exc:  # noqa: BLE001 - raised on every rank below
                err = RuntimeError(f"{f}: the shard update failed after the gradients were "
                                   f"reduced ({type(exc).__name__}: {exc}); the ranks' states "
                                   f"may now differ")
        self._t_inner = time.perf_counter() - t0
        raise_agreed(self.comm, err)
        advance_carried(self)
        self._steps += 1
        self.last_lr = list(lrs)
        return True

    @staticmethod
    def _combine(parts, norm_type) -> float:
        """The global norm from the ranks' partials, added in rank order."""
        if norm_type == math.inf:
            return float(np.max(parts))
        acc = 0.0
        for x in parts:
            acc += float(x)
        return math.sqrt(acc)

    # ------------------------------------------------------------- checkpoints

    save = _checkpoint.save
    load = _checkpoint.load
    consolidate = _checkpoint.consolidate

