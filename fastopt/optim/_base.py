"""The optimizer base class: parameter groups, state, one step.

``_Optimizer`` holds what every optimizer shares: it checks the parameter
groups and hyperparameters (:mod:`._groups`, :mod:`._checks`), owns the
state arrays, and turns ``step(grads)`` into ONE C call over every group
(:mod:`._fused`: per-group hyperparameters in the work list, unscale /
non-finite skip / global-norm clip fused in, everything checked before
anything is written); only a group with AGC clipping (Momentum) still runs
one kernel call per group. Checkpoints are in :mod:`.checkpoint`. A
subclass names its kernel, its states, its first T and its hyperparameter
checkers, maps a checked group to the kernel's keyword arguments
(``_kwargs``) and those to the fused step's group (``_group_tuple``).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from .. import _interrupt, _q8, _step
from .. import _validation as _v
from . import _compiled, _fused, _grads, _masters, _states, checkpoint
from ._checks import as_bool, check_update_count
from ._checks import schedule as _schedule
from ._groups import allocate, make_groups


class _Optimizer:
    """Shared machinery; see Momentum, Adagrad and Adam."""

    _KERNEL: Callable
    _STATES: tuple = ()
    _T0: int = 0
    # name -> checker(fname, label, value) -> normalised value
    _HYPER: dict = {}
    # hyperparameters added after checkpoints were written: name -> the value
    # such a checkpoint's groups load with (optim/checkpoint.py)
    _ADDED: dict = {}

    def __init__(self, params, defaults: dict, *, contiguous_state: bool = False,
                 n_threads: Optional[int] = None, broadcast_grads: bool = False,
                 master_weights: bool = False, state_dtype=None,
                 state_rounding: str = "auto", seed: int = 0):
        f = self._fname()
        self._state_dtype = _states.check_dtype(f, state_dtype)
        self._q8 = _states.is_q8(state_dtype)
        self._round_flags = _step.rounding_flags(f, state_rounding)
        self._state_rounding = state_rounding
        self._seed = _step.check_seed(f, seed)
        self.n_threads = _v.check_n_threads(f, n_threads)
        self.contiguous_state = as_bool(f, "contiguous_state", contiguous_state)
        self.broadcast_grads = as_bool(f, "broadcast_grads", broadcast_grads)
        self.master_weights = as_bool(f, "master_weights", master_weights)
        # with master_weights: the 16-bit arrays given, per parameter (None
        # where a float32/float64 parameter is its own master)
        self._copies = None
        if self.master_weights:
            params, self._copies = _masters.split(f, params)
        checks = dict(self._HYPER, schedule=_schedule)
        self.defaults = {k: checks[k](f, k, v) for k, v in defaults.items()}
        if self.defaults["lr"] is None and self.defaults["schedule"] is None:
            raise ValueError(f"{f}: give lr, or a schedule that supplies it")
        if self.defaults["lr"] is not None and self.defaults["schedule"] is not None:
            raise ValueError(f"{f}: give lr or schedule, not both: the schedule supplies "
                             f"the learning rate of every step")
        self.param_groups = make_groups(self, f, params)
        self._check_distinct(f)
        _states.check_apart(self, f)
        self._state, self.arenas = allocate(self)
        _states.check_rounded(self, f, state_rounding)
        self._param_tuples = [g["params"] for g in self.param_groups]
        self._extents = _grads.written_extents(self)
        self._owners = _grads.memory_owners(self)
        self._steps = 0
        self.last_lr: list = [None] * len(self.param_groups)
        self._cache: dict = {}
        self._KEYS = tuple(self._HYPER) + ("schedule",)
        self._step_name = f + ".step"
        self._flat = None          # the work list (see _fused.flat)
        self._plan_all = None      # the prepared step with every gradient given
        self._opts_cache = None
        self._fast = None          # the remembered step (_fused.remember)
        self._prepared_ran = False
        self.last_grad_norm: float = float("nan")
        self.last_step_info = None

    def __getstate__(self):
        """For copy and pickle: the prepared plans (C structures over this
        optimizer's arrays) are left out and made again by the next step."""
        out = dict(self.__dict__)
        out.update(_flat=None, _plan_all=None, _opts_cache=None, _fast=None,
                   _prepared_ran=False)
        return out

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.arenas:     # contiguous_state: the copied values into new arenas' views
            old, (self._state, self.arenas) = self._state, allocate(self)
            for dst, src in zip(self._state, old):
                for name, arrays in dst.items():
                    for a, b in zip(arrays, src[name]):
                        for x, y in ((a.codes, b.codes), (a.absmax, b.absmax)) if isinstance(
                                a, _q8.State8bit) else ((a, b),):
                            np.copyto(x, y)
        self._extents = _grads.written_extents(self)    # the copied arrays' memory
        self._owners = _grads.memory_owners(self)

    # ------------------------------------------------------------- setup

    @classmethod
    def _fname(cls) -> str:
        return f"fastopt.optim.{cls.__name__}"

    def _check_group(self, f, group, where):
        """Validate and normalise one group's hyperparameters (a new dict)."""
        out = {"params": group["params"]}
        for k, check in self._HYPER.items():
            out[k] = check(f, f"{where}['{k}']" if where != "params" else k, group[k])
        out["schedule"] = _schedule(f, f"{where}['schedule']", group["schedule"])
        if out["lr"] is None and out["schedule"] is None:
            raise ValueError(f"{f}: {where} has neither lr nor a schedule")
        if out["lr"] is not None and out["schedule"] is not None:
            raise ValueError(f"{f}: {where} has an lr ({out['lr']!r}) and a schedule, which "
                             f"supplies its learning rate; set one of them to None")
        self._check_extra(f, out, where)
        return out

    def _check_extra(self, f, group, where):
        """Per-optimizer checks that involve the group's parameters."""

    def _check_distinct(self, f):
        items = [(f"params[{i}]", p, True) for i, p in enumerate(self.params)]
        try:
            _v._overlaps(f, items)
        except ValueError as exc:
            raise ValueError(f"{exc} (a parameter may appear only once)") from None

    def _initial(self, group, name) -> float:
        """The value a state starts from (0 unless the optimizer says otherwise)."""
        return 0.0

    # ----------------------------------------------------------- inspection

    @property
    def state_dtype(self):
        """The states' dtype as built (``state_dtype=``; None: each
        parameter's own; ``"int8-blockwise"``: 8-bit states). Fixed for the
        optimizer's life."""
        return _states.Q8 if self._q8 else self._state_dtype

    @property
    def state_rounding(self) -> str:
        """How bfloat16 states are rounded back (``state_rounding=``)."""
        return self._state_rounding

    @property
    def seed(self) -> int:
        """The stochastic rounding's seed (``seed=``). Not saved in
        checkpoints: a resumed run passes it again to draw the same bits."""
        return self._seed

    @property
    def params(self) -> list:
        """Every parameter, in group order (with ``master_weights=True``, the
        float32 masters of the 16-bit parameters)."""
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def model_params(self) -> list:
        """The arrays given as parameters, in group order: with
        ``master_weights=True`` the 16-bit ones each step rewrites from their
        masters; else :attr:`params` itself."""
        if self._copies is None:
            return self.params
        return [p if c is None else c for p, c in zip(self.params, self._copies)]

    @property
    def state(self) -> dict:
        """{state name: [array per parameter]} in the order of :attr:`params`.

        The arrays are the optimizer's own (views into :attr:`arenas` with
        ``contiguous_state=True``); modify them only deliberately. With
        ``state_dtype="int8-blockwise"`` a parameter's entry is a
        :class:`fastopt.State8bit` (its codes and absmax, updated in place).
        """
        return {name: [a for gs in self._state for a in gs[name]] for name in self._STATES}

    @property
    def steps(self) -> int:
        """How many steps have been applied."""
        return self._steps

    @property
    def t(self) -> int:
        """The update count T the next step passes to the kernel."""
        return self._steps + self._T0

    def current_lr(self, group: int = 0) -> float:
        """The learning rate the next step would use for a group."""
        g = self.param_groups[group]
        return self._lr(self._fname() + ".current_lr", g, group)

    def __repr__(self):
        n = sum(len(g["params"]) for g in self.param_groups)
        return (f"{self._fname()}({n} parameters in {len(self.param_groups)} group(s), "
                f"steps={self._steps})")

    # ----------------------------------------------------------------- step

    def _lr(self, f, group, gi) -> float:
        sched = group["schedule"]
        if sched is None:
            return _v.check_lr(f, group["lr"], name=f"param_groups[{gi}]['lr']")
        value = sched(self._steps)
        if type(value) is float and 0.0 <= value < float("inf"):
            return value
        try:
            return _v.check_lr(f, value, name=f"schedule({self._steps})")
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{exc} (the value the schedule of param_groups[{gi}] returned)") \
                from None

    def _kwargs(self, group) -> dict:
        """The kernel's arguments for one checked group, except lr and t."""
        raise NotImplementedError

    def _group_kwargs(self, f, group, gi) -> dict:
        """The kernel's arguments for one group this step, every value checked.

        Hyperparameters may be edited in param_groups between steps, so they
        are checked again whenever they differ from the last checked values
        (all groups are checked before the first kernel call writes anything).
        """
        values = tuple(map(group.get, self._KEYS))
        types = tuple(map(type, values))
        # the types too (0 == False: a value was checked with its type), and
        # first: a comparison meets an array's type before the array
        key = types + values
        if list in types:           # compare lists (clipping) by value, not identity
            key = tuple(tuple(v) if type(v) is list else v for v in key)
        if any(isinstance(v, np.ndarray) for v in values):
            key = object()          # an array (an lr) may change in place: check it anew
        cached = self._cache.get(gi)
        if cached is None or cached[0] != key:
            checked = self._check_group(f, group, f"param_groups[{gi}]")
            cached = (key, checked, self._kwargs(checked))
            self._cache[gi] = cached
        checked = cached[1]
        kw = dict(cached[2])
        if checked["schedule"] is None:
            kw["lr"] = checked["lr"]
        else:
            kw["lr"] = self._lr(f, checked, gi)
        kw["t"] = self._steps + self._T0
        if "n_threads" in kw:       # (a kernel call per group: read as the step is)
            kw["n_threads"] = self.n_threads
        check_update_count(f, kw["t"])     # (only after a checkpoint loaded near the limit)
        return kw

    def _calls(self, f, per):
        """(kernel calls as (xs, gs, states, kwargs), the lr of every group)."""
        calls = []
        lrs = []
        for gi, (group, gg, st) in enumerate(zip(self.param_groups, per, self._state)):
            kw = self._group_kwargs(f, group, gi)
            lrs.append(kw["lr"])
            if not gg:
                continue  # an empty parameter group: no kernel call (it would reject [])
            if all(g is not None for g in gg):
                xs, gs, sts = group["params"], gg, [st[name] for name in self._STATES]
                sel = None
            else:
                sel = [i for i, g in enumerate(gg) if g is not None]
                if not sel:
                    continue
                xs = [group["params"][i] for i in sel]
                gs = [gg[i] for i in sel]
                sts = [[st[name][i] for i in sel] for name in self._STATES]
            self._select(kw, sel)
            calls.append((xs, gs, sts, kw))
        return calls, lrs

    def _slots(self, group) -> tuple:
        """The state names a group's rule reads, in the fused step's slot
        order s1, s2, s3 (every state of the optimizer unless a rule packs
        them by group)."""
        return self._STATES

    def _group_tuple(self, kw) -> tuple | None:
        """The fused step's group (fastopt._step.group_tuple) for one group's
        kernel arguments, or None if the group cannot be fused."""
        return None

    def step(self, grads, *, grad_scale=None, skip_if_nonfinite: bool = False,
             max_grad_norm=None, norm_type=2.0, clip_convention: str = "torch") -> bool:
        """Apply one update to every parameter that has a gradient.

        The whole step is one C call over every parameter group: unscale,
        non-finite check, global norm and clip, then each group's update
        with its own hyperparameters; everything is checked before anything
        is written.

        Parameters
        ----------
        grads : list
            One gradient per parameter, in the order of :attr:`params` (or
            one list per parameter group). Each is an array of its
            parameter's dtype and shape (or only broadcastable to its shape,
            with ``broadcast_grads=True``), and is only read; ``None``
            leaves that parameter and its state untouched this step.
        grad_scale : float, optional
            Divide every gradient by this (> 0) first, in the gradient's
            dtype (undoing a loss scale). The gradients passed in are not
            modified.
        skip_if_nonfinite : bool, default False
            If any (unscaled) gradient value is NaN or +-Inf, skip the step:
            no parameter or state changes, the step count does not advance
            and the schedule is not called.
        max_grad_norm : float, optional
            Clip by the global norm of every gradient of the step (all
            groups) to at most this (> 0; inf measures without clipping).
        norm_type : float, default 2.0
            2.0 or math.inf: the norm measured and clipped.
        clip_convention : {"torch", "optax"}, default "torch"
            torch's ``clip_grad_norm_`` (multiply by ``min(1, max_grad_norm
            / (norm + 1e-6))``) or optax's ``clip_by_global_norm``.

        Returns
        -------
        bool
            True if the step was applied, False if it was skipped. The
            global norm it measured (before clipping) is
            :attr:`last_grad_norm` (NaN when the step neither checks nor
            clips: pass ``max_grad_norm=math.inf`` to measure only);
            :attr:`last_step_info` holds the :class:`fastopt.StepInfo`.

        Raises
        ------
        TypeError, ValueError
            On bad gradients, options or hyperparameters (including a bad
            value from a schedule, a parameter made read-only); nothing is
            modified then and the step count does not advance.
        """
        applied = _compiled.remembered_step(self, grads, grad_scale, skip_if_nonfinite,
                                            max_grad_norm, norm_type, clip_convention)
        if applied is not None:         # only the gradients changed: checked in C
            return applied
        f = self._step_name
        o = _fused.options(self, f, grad_scale, skip_if_nonfinite, max_grad_norm,
                           norm_type, clip_convention)
        if len(self.param_groups) != len(self._param_tuples):
            raise ValueError(f"{f}: param_groups has {len(self.param_groups)} groups; this "
                             f"optimizer was built with {len(self._param_tuples)} and its "
                             f"groups are fixed (build a new one to add or remove a group)")
        for gi, (group, ps) in enumerate(zip(self.param_groups, self._param_tuples)):
            if group["params"] is not ps:
                raise ValueError(f"{f}: param_groups[{gi}]['params'] was replaced; the "
                                 f"parameters are fixed when the optimizer is built")
        # a flat list goes to the prepared step unsplit (split only if declined)
        per = None if _fused.deferred(self, grads) else _grads.split(self, f, grads)
        given = float("nan")
        if o.check_finite and self._scheduled():
            if per is None:
                per = _grads.split(self, f, grads)
            pre = _fused.precheck(self, per, o)   # skip before the schedule is consulted
            if pre is not None:
                if not pre[1]:
                    _grads.check_grads(self, f, per)    # refused even when skipped
                    _grads.check_shapes(self, f, per)
                    self.last_grad_norm = pre[0]
                    self.last_step_info = _step.StepInfo(False, pre[0], False)
                    return False
                given, o = pre[0], o._replace(check_finite=False)
        kws = [self._group_kwargs(f, group, gi)
               for gi, group in enumerate(self.param_groups)]
        groups = [_states.with_flags(self, self._group_tuple(kw)) for kw in kws]
        if None in groups:                   # a group that cannot be fused (AGC)
            if per is None:
                per = _grads.split(self, f, grads)
            return _interrupt.whole(self._step_groups, f, per, o)
        return _interrupt.whole(self._step_fused, f, grads, per, groups, o, given, kws)

    def _step_fused(self, f, grads, per, groups, o, given, kws) -> bool:
        """The one C call of a step and its bookkeeping, run whole (a
        KeyboardInterrupt meanwhile is raised after it: fastopt._interrupt)."""
        info = _fused.run(self, f, grads, per, groups, o, given)
        if self._prepared_ran and given != given:
            _fused.remember(self, kws, groups)
        else:
            self._fast = None
        self.last_grad_norm = info.norm
        self.last_step_info = info
        if not info.applied:
            return False
        self._steps += 1
        self.last_lr = [kw["lr"] for kw in kws]
        return True

    def _step_trust(self, grads, grad_scale=None, *, trust_out=None, trust_in=None):
        """fastopt.distributed's step of a shard whose LAMB/LARS tensors
        are pieces (_fused.run_trust): with trust_out (a float64 array), the
        trust pass's block sums, nothing else written; with trust_in, each
        trusted tensor's two sums given, the step taken. grads per group."""
        f = self._step_name
        o = _fused.options(self, f, grad_scale, False, None, 2.0, "torch")
        per = _grads.split(self, f, grads)
        kws = [self._group_kwargs(f, group, gi) for gi, group in enumerate(self.param_groups)]
        groups = [_states.with_flags(self, self._group_tuple(kw)) for kw in kws]
        info = _fused.run_trust(self, f, per, groups, o, trust_out, trust_in)
        if trust_out is not None:
            return False
        self._fast = None
        self.last_grad_norm = info.norm
        self.last_step_info = info
        self._steps += 1
        self.last_lr = [kw["lr"] for kw in kws]
        return True

    def _scheduled(self) -> bool:
        """Does some group take its lr from a schedule?"""
        for group in self.param_groups:
            if group["schedule"] is not None:
                return True
        return False

    def _step_groups(self, f, per, o) -> bool:
        """A step with one kernel call per group (AGC has no fused form): the
        gradient half of the step first, on scratch copies."""
        _grads.check_shapes(self, f, per)
        if o != _step.Options():
            info, per = _fused.pre_clip(self, f, per, o)
            self.last_grad_norm = info.norm
            self.last_step_info = info
            if not info.applied:
                return False
            checked = True
        else:
            checked = False
            if sum(any(g is not None for g in gg) for gg in per) > 1:
                # several kernel calls: one must not fail after another has
                # written, nor read a gradient an earlier one has written
                _grads.check_grads(self, f, per)
                per = _grads.check_overlaps(self, f, per)
                checked = True
        if sum(any(g is not None for g in gg) for gg in per) > 1:
            _grads.check_written(self, f, per)   # before the first call writes
        calls, lrs = self._calls(f, per)
        kernel = type(self)._KERNEL
        for xs, gs, sts, kw in calls:
            try:
                kernel(xs, gs, *sts, **kw)
            except (TypeError, ValueError):
                if not checked:  # restate the error with the optimizer's numbering
                    _grads.check_grads(self, f, per)
                    _grads.check_overlaps(self, f, per)
                raise
        _masters.refresh(self)        # the kernels write no 16-bit copies
        self._steps += 1
        self.last_lr = lrs
        return True

    def _select(self, kw, sel):
        """Restrict per-tensor arguments to the tensors in sel (None: all)."""

    # ---------------------------------------------------------- checkpoints

    def state_dict(self) -> dict:
        """A snapshot of the optimizer: copies of the states, the step count
        and every group's hyperparameters (schedules are not included: they
        are called with the step count, so a resumed run gets the same lrs).

        The parameters are not included: they are the caller's arrays
        (``save(path, params=True)`` writes them into the same file).
        A hyperparameter edited into a group since the last step is checked
        here (TypeError/ValueError, as the step would raise).
        """
        return checkpoint.state_dict(self, self._fname() + ".state_dict")

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict` snapshot (states, step count and the
        groups' hyperparameters; the schedules stay those of this optimizer).

        Raises
        ------
        CheckpointError
            If the snapshot is incomplete or does not match this optimizer
            (another optimizer, other groups, shapes or dtypes); nothing is
            changed then.
        """
        checkpoint.restore(self, self._fname() + ".load_state_dict", state_dict)

    def save(self, path, params: bool = False) -> None:
        """Write :meth:`state_dict` to ``path`` as an uncompressed .npz, atomically.

        The data goes to a temporary file in the same directory, is flushed
        to disk, and replaces ``path`` by a rename: a crash leaves either the
        previous file or the new one, never a partial checkpoint. ``path`` is
        used exactly as given (no ``.npz`` is appended).

        With ``params=True`` the file holds the parameters too (entries
        ``params.0``, ``params.1`` ..., in the order of :attr:`params`), so
        one atomic file resumes a run: :meth:`load` restores them with the
        state. Without it the parameters are the caller's to save. With
        ``master_weights=True`` the file always holds the float32 masters.

        A save killed midway (power loss, SIGKILL) leaves its temporary file,
        ``.<name>.<12 hex digits>.tmp``, beside ``path``; each save first
        removes those of the same ``path`` that are older than a second and
        that no running save holds (a save locks its temporary file until
        the rename). Other files are never touched.
        """
        checkpoint.save(self, path, True if self.master_weights else params)

    def load(self, path, params: bool | None = None) -> None:
        """Restore a checkpoint written by :meth:`save`.

        The state, the step count and the groups' hyperparameters are
        restored; the parameters too when the file holds them (saved with
        ``params=True``). ``params=True`` requires them in the file,
        ``params=False`` leaves the parameters as they are. With
        ``master_weights=True`` the masters are restored (the file must
        hold them unless ``params=False``) and the 16-bit parameters are
        rewritten from them.

        Raises
        ------
        FileNotFoundError, PermissionError
            If the file cannot be opened.
        CheckpointError
            If it is not a fastopt checkpoint (not a regular file, e.g. a
            FIFO, which is refused without waiting; not an npz, truncated or
            corrupt, entries missing or unexpected) or does not match this
            optimizer (another optimizer's file, other groups, shapes or
            dtypes). The optimizer is unchanged after any error. The file is
            treated as hostile: its size, zip directory and every entry's
            header are checked before any state data is read, nothing is
            decompressed beyond the expected sizes, and every number in it
            is bounded (the step count below 2**63, floats finite). Saved
            parameters are checked like the states (shape and dtype against
            :attr:`params`, every parameter writeable) and written only
            after every check has passed, together with the state.
        """
        if params is None and self.master_weights:
            params = True               # the masters are the optimizer's state
        checkpoint.load(self, self._fname() + ".load", path, params)
        _masters.refresh(self)
