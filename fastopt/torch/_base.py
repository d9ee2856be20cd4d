"""The machinery of fastopt.torch: a torch.optim.Optimizer whose step is
one fastopt step (``fastopt._step.run``) over every parameter group.

A step first plans: each group's hyperparameters are checked (they may have
been edited since), then every parameter with a gradient, its gradient and
its states (dtype, device, layout, shape) and its step count; states a
parameter's first update needs are made, but kept aside. Only then the one
C call runs, and only if it applied are the new states stored and the step
counts advanced. A gradient that shares memory with a tensor the step
writes is copied first, so every gradient is read as it was when step()
was called. The public classes are in fastopt/torch/__init__.py.
"""
from __future__ import annotations

import math
from typing import ClassVar

import torch

from .. import _interrupt, _step
from .. import _validation as _v
from . import _flat, _hooks, _mixed, _prep, _q8
from ._checks import _DTYPES, _check_flat, _check_grad, _check_once, _check_param, _check_state

_UNSUPPORTED = ("foreach", "fused", "capturable", "differentiable")
_NO_OPTIONS = _step.Options()


# ---- checks ------------------------------------------------------------------

def _suffix(gi):
    return "" if gi is None else f" (in param_groups[{gi}])"


def _scalar(f, name, v):
    """A one-element tensor hyperparameter as a Python number."""
    if isinstance(v, torch.Tensor):
        if v.numel() != 1 or v.is_complex():
            raise ValueError(f"{f}: {name} must be a real number or a one-element "
                             f"tensor, got a tensor of shape {tuple(v.shape)}")
        return v.item()
    return v


def _check(f, name, kind, v):
    """One hyperparameter: kind "lr", "bool", "betas", "decay_mode" or
    check_real bounds."""
    if kind == "decay_mode":
        _step.decay_flags(f, v, name)
        return v
    if kind == "bool":
        if not isinstance(v, bool):
            raise TypeError(f"{f}: {name} must be True or False, got {type(v).__name__}")
        return v
    if kind in ("betas", "betas3"):
        n = 3 if kind == "betas3" else 2
        try:
            bs = tuple(v)
        except TypeError:
            bs = ()
        if len(bs) != n:
            names = ", ".join(f"beta{i + 1}" for i in range(n))
            raise TypeError(f"{f}: betas must be a {'pair' if n == 2 else 'triple'} "
                            f"({names}), got {type(v).__name__}")
        return tuple(_check(f, f"betas[{i}]", {"low": 0.0, "high": 1.0, "high_open": True},
                            b) for i, b in enumerate(bs))
    if kind == "warmup":
        return _v.check_warmup(f, name, v)
    v = _scalar(f, name, v)
    if kind == "lr":
        return _v.check_lr(f, v, name=name)
    return _v.check_real(f, name, v, **kind)


def _betas_types(f, betas):
    """torch.optim's rule for the constructor's betas (ValueError, as torch
    raises): both floats or both tensors; an int is not a float."""
    try:
        b1, b2 = betas
    except (TypeError, ValueError):
        return                          # _check says what is wrong with it
    if not ((isinstance(b1, float) and isinstance(b2, float))
            or (isinstance(b1, torch.Tensor) and isinstance(b2, torch.Tensor))):
        raise ValueError(f"{f}: betas must be either both floats or both Tensors, as "
                         f"in torch.optim; got ({type(b1).__name__}, "
                         f"{type(b2).__name__})")


def _whole(v) -> bool:
    """A step count's value: a whole number in [0, 2**53) (a step takes
    all but the last: _t, and _count_ok in fastopt/torch/_compiled.pyx for
    the prepared step)."""
    return math.isfinite(v) and v == int(v) and 0 <= v < 2**53


def _count(f, where, st):
    """The update count kept in state['step'] (an int or a one-element tensor)."""
    if "step" not in st:
        raise ValueError(f"{f}: the state of {where} has no 'step'")
    v = st["step"]
    if isinstance(v, torch.Tensor):
        v = v.item() if v.numel() == 1 and not v.is_complex() else None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    if not (ok and _whole(v)):
        raise ValueError(f"{f}: state['step'] of {where} must be a whole number >= 0, "
                         f"got {st['step']!r}")
    return int(v)


# ---- the base class ------------------------------------------------------------

class _FastoptOptimizer(torch.optim.Optimizer):
    """A torch Optimizer whose step is one fastopt step over all groups.

    Subclasses give _SPEC (hyperparameter -> check kind) and implement
    _group (checked hyperparameters -> the driver's group fields and the
    state names the group needs, in s1..s3 order) and _new_states (the
    states a parameter's update creates: all of them on its first update).
    The driver's t is state['step'] + _T_ADD (_t) when _COUNTS (then
    state['step'] advances with each applied step); else (SGD) 0 on a
    parameter's first update (a new buffer), 1 after.

    After a full step, the next ones go through a prepared plan
    (fastopt/_prep.py) while nothing but what a step may change did.
    """

    _SPEC: ClassVar[dict] = {}
    # defaults beyond the constructor's own (a subclass's, set before it runs)
    _more_defaults: ClassVar[dict] = {}
    _COUNTS = True
    _T_ADD = 1
    _PREPARE = True     # steps after a full one may take the prepared or flat route
    _FLAT_CALL = True   # flat=True steps may be one call over the buffers
    # torch.amp.GradScaler sets grad_scale and found_inf (tensors) on the
    # optimizer for its step(), which unscales in the C call or skips
    _step_supports_amp_scaling = True
    _ROW = ""           # the rule's row of fastopt._rules.RULES (drop-ins)

    def __init__(self, params, defaults, n_threads, flat=False, mixed=None):
        name = f"fastopt.torch.{type(self).__name__}"
        self.n_threads = _v.check_n_threads(name, n_threads)
        if not isinstance(flat, bool):
            raise TypeError(f"{name}: flat must be True or False, got {type(flat).__name__}")
        # the mixed-precision options (mixed: master_weights, state_dtype,
        # state_rounding, seed as given), fastopt/torch/_mixed.py
        self._mixed = _mixed.NONE if mixed is None else _mixed.check(
            name, type(self), *mixed, flat)
        self.last_step = None
        # id(tensor) -> (tensor, data_ptr, shape, strides, NumPy view), of the
        # last step (_views) and, while a step plans, of the one before (_old)
        self._views = self._old = {}
        self._master_seen = {}  # _mixed.sync_masters
        self._prep = None       # the prepared step (_prep.Prepared)
        self._flat = None       # the flat layout (_flat.FlatLayout), with flat=True
        defaults = {**defaults, **self._more_defaults}
        self._checked(name, defaults, None)
        super().__init__(params, defaults)
        _q8.check_groups(name, self)
        if mixed is not None:
            _mixed.check_rounded(name, self._mixed, mixed[2], self.param_groups)
        if flat:
            _check_flat(name, [g["params"] for g in self.param_groups], self._mixed)
            self._flat = _flat.FlatLayout()
            for gi, group in enumerate(self.param_groups):
                self._flat.add_group(gi, group["params"])

    @property
    def flat(self) -> bool:
        """Whether the parameters, gradients and states live in fastopt's
        flat buffers (the ``flat=True`` layout)."""
        return self._flat is not None

    def add_param_group(self, param_group: dict) -> None:
        """torch's add_param_group; a parameter listed twice in the group
        raises ValueError (torch warns). On a flat optimizer the group's
        parameters that require grad move into new buffers of their own."""
        f, lay = f"fastopt.torch.{type(self).__name__}", getattr(self, "_flat", None)
        ps = param_group.get("params") if isinstance(param_group, dict) else None
        if ps is not None and not isinstance(ps, set):     # (torch refuses a set)
            if isinstance(ps, torch.Tensor):
                ps = [ps]
            else:
                param_group["params"] = ps = list(ps)     # as torch would; read once
            _check_once(f, len(self.param_groups), ps)
            if lay is not None:
                _check_flat(f + ".add_param_group", [ps], self._mixed,
                            [g["params"] for g in self.param_groups])
        super().add_param_group(param_group)
        if lay is None:
            return None
        lay.add_group(len(self.param_groups) - 1, self.param_groups[-1]["params"])
        return None

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """torch's zero_grad. On a flat optimizer the default (and
        ``set_to_none=False``) zeroes the gradient buffers and keeps every
        ``.grad`` a view of them (a gradient that is there but is not its
        view becomes it; a ``None`` stays ``None``); ``set_to_none=True``
        sets every ``.grad`` to None as torch does, and the steps take the
        checked route until the next zero_grad puts the views back after a
        backward. Without flat, None means torch's default (True)."""
        if self._flat is None or set_to_none:
            return super().zero_grad(set_to_none is not False)
        self._flat.zero_grad(self)
        return None

    @property
    def master_weights(self) -> bool:
        """Whether bfloat16/float16 parameters step through float32 masters
        (``state[p]['master_param']``)."""
        return self._mixed.master_weights

    @property
    def state_dtype(self):
        """The dtype the rule's states are kept in (None: the parameter's,
        or its master's)."""
        return self._mixed.state_dtype

    def load_state_dict(self, state_dict) -> None:
        """torch's load_state_dict; masters and states keep their dtype where
        torch would cast them to the parameter's; bitsandbytes' state dicts
        (``state1``, ``absmax1``, ``qmap1``...) load as this one's keys."""
        state_dict = _q8.from_bitsandbytes(self, state_dict)
        _q8.check_loaded(self, state_dict)
        self._check_loaded_counts(state_dict)
        saved, codes = _mixed.saved_tensors(self, state_dict), _q8.saved_codes(self, state_dict)
        super().load_state_dict(state_dict)
        self._master_seen = {}          # each master compared with its parameter again
        _mixed.restore(self, saved)
        _q8.restore_codes(self, codes)

    def _check_loaded_counts(self, state_dict) -> None:
        """Each count (``state['step']``) of a state dict about to be loaded
        is one a step takes (:func:`_count`), or ValueError before anything
        is replaced."""
        st = state_dict.get("state") if isinstance(state_dict, dict) else None
        if not (self._COUNTS and isinstance(st, dict)):
            return
        f = f"fastopt.torch.{type(self).__name__}.load_state_dict"
        for i, s in st.items():
            if isinstance(s, dict) and "step" in s:
                _count(f, f"state {i!r}", s)

    def __getstate__(self):
        """torch's state and fastopt's options; a copy (pickle, deepcopy) of
        a flat optimizer lays its own parameters out in buffers of its own."""
        return {**super().__getstate__(), "n_threads": self.n_threads,
                "_mixed": self._mixed, "_flat_copy": self._flat is not None}

    def __copy__(self):
        """A shallow copy shares the original's parameters, so it is not
        flat: laying them out again would take them from the original."""
        out = type(self).__new__(type(self))
        out.__setstate__({**self.__getstate__(), "_flat_copy": False})
        return out

    def __setstate__(self, state):
        super().__setstate__(state)
        self.__dict__.setdefault("n_threads", None)
        self.__dict__.setdefault("_mixed", _mixed.NONE)
        self._master_seen = {}
        self.last_step = None
        self._views = self._old = {}
        self._prep = None
        for group in self.param_groups:
            for k, v in self.defaults.items():
                group.setdefault(k, v)
        if self.__dict__.setdefault("_flat", None) is not None:
            self._flat.changed()        # load_state_dict: new groups and states
        elif self.__dict__.pop("_flat_copy", False):
            self._flat = _flat.FlatLayout()
            for gi, group in enumerate(self.param_groups):
                self._flat.add_group(gi, group["params"])

    def _checked(self, f, group, gi) -> dict:
        """The group's hyperparameters, checked (they may have been edited)."""
        try:
            for k in _UNSUPPORTED:
                if group.get(k):
                    raise ValueError(f"{f}: {k}=True is not supported: fastopt runs its "
                                     f"own multi-tensor C step on CPU tensors; leave {k} "
                                     f"at its default")
            if gi is None and "betas" in self._SPEC:     # the constructor's, as torch
                _betas_types(f, group["betas"])
            return {k: _check(f, k, kind, group[k]) for k, kind in self._SPEC.items()}
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{exc}{_suffix(gi)}") from None

    def _view(self, old, t, make=False):
        """The NumPy view of tensor t from the last step's cache ``old``, if t
        still has the same memory, shape, strides and dtype (else None: a
        state re-typed in place through ``.data`` is checked again), or, with
        make, a new one; either way kept for the next step."""
        key = id(t)
        e = old.get(key)
        if make or e is None or e[0] is not t or e[1] != t.data_ptr() \
                or e[2] != t.shape or e[3] != t.stride() or e[5] is not t.dtype:
            if not make:
                return None
            e = (t, t.data_ptr(), t.shape, t.stride(), _mixed.numpy_of(t), t.dtype)
        self._views[key] = e
        return e[4]

    def _read_count(self, f, where, st):
        """state['step'] as an int (a CPU tensor's read through a cached view)."""
        v = st.get("step")
        if type(v) is torch.Tensor and v.dim() == 0 and v.dtype in _DTYPES:
            view = self._view(self._old, v)
            if view is None and v.device.type == "cpu":
                view = self._view(self._old, v, True)
            if view is not None:
                c = float(view)
                if _whole(c):
                    return int(c)
        return _count(f, where, st)

    def _t(self, f, where, full, new):
        """The driver's t for a parameter whose state is full (new: the
        states this update creates). The count after the step must still be
        one a state dict holds (_whole), so that what this step leaves loads
        back."""
        c = self._read_count(f, where, full)
        if c >= 2**53 - 1:
            raise ValueError(f"{f}: state['step'] of {where} is {c}; one more step would "
                             f"count 2**53, past the whole numbers a float64 holds: this "
                             f"optimizer has taken its last step")
        return c + self._T_ADD

    def _carried(self, f, where, full):
        """A rule's carried scalar in the state full: (its tensor, its value
        as a NumPy scalar of the tensor's type), or None for a rule without."""
        return None

    def _group_at(self, fields, h, t, held):
        """The C group of parameters at count t carrying the value held (None:
        no carried scalar), and the carried value after the step."""
        return _step.group_tuple(t=t, **fields), None

    def _group_fields(self, h):
        """_group's fields, with state_rounding's flags, and state names."""
        fields, names = self._group(h)
        if self._mixed.flags:
            fields = {**fields, "flags": fields.get("flags", 0) | self._mixed.flags}
        return fields, names

    def _master(self, f, w, p, st, new, old):
        """The float32 master of the 16-bit parameter p (made into new if it
        has none) and its NumPy view (old: the last step's views, or
        False when p was not among them)."""
        x = st.get(_mixed.MASTER)
        if x is None:
            x = new[_mixed.MASTER] = _mixed.new_master(p)
        xv = self._view(old, x) if old else None
        if xv is None:
            _check_state(f, w, p, _mixed.MASTER, x, torch.float32)
            xv = self._view(old or {}, x, True)
        return x, xv

    def _plan(self, f):
        """Everything the step needs, checked; nothing written."""
        xs, gs, s1, s2, s3, index, groups = [], [], [], [], [], [], []
        where, names_of, fresh, counted, carried, after = [], [], [], [], [], []
        keys, written = {}, set()
        mixed, copies, seeds, pos = self._mixed, [], [], 0
        old = self._old = self._views
        self._views = {}
        for gi, group in enumerate(self.param_groups):
            h = self._checked(f, group, gi)
            fields, names = self._group_fields(h)
            group8 = _q8.group_eight(f, gi, group, mixed.q8)
            first, pos = pos, pos + len(group["params"])
            for i, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                w = f"param_groups[{gi}]['params'][{i}]"
                xv = self._view(old, p)   # None: not seen with this memory before
                hit = xv is not None
                if not hit:
                    _check_param(f, w, p, mixed)
                    xv = self._view(old, p, True)
                g = p.grad
                _check_grad(f, w, p, g)
                st = self.state.get(p) or {}
                x, new = p, {}
                copies.append(xv if mixed.master_of(p) else None)
                if copies[-1] is not None:      # x: the master; p gets the copy
                    written.add(p.untyped_storage().data_ptr())
                    x, xv = self._master(f, w, p, st, new, hit and old)
                sdt = mixed.states_dtype(p)
                made = self._new_states(x, st, names, h)
                q8 = _q8.eight(mixed, p, group8)
                made = _q8.floats(st, names) if q8 and not made else made   # (eager ones)
                if made:
                    new.update(_q8.quantized(self._ROW, made, names) if q8 else
                               _mixed.retype(made, names, sdt) if mixed.active else made)
                full = {**st, **new} if new else st
                views = self._state_views(f, w, p, names, (full, new, st), sdt, q8, hit, old,
                                          written)
                seeds.append(mixed.key(first + i))
                t = self._t(f, w, full, new)
                held = self._carried(f, w, full)
                k = keys.setdefault((gi, t) if held is None else
                                    (gi, t, type(held[1]), held[1]), len(groups))
                if k == len(groups):
                    grp, a = self._group_at(fields, h, t, None if held is None else held[1])
                    groups.append(grp)
                    after.append(a)
                if held is not None:
                    carried.append((held[0], after[k]))
                index.append(k)
                xs.append(xv)
                written.add(x.untyped_storage().data_ptr())
                if g.requires_grad:            # a gradient made with create_graph
                    g = g.detach()
                if copies[-1] is None and p.dtype in _mixed.HALF and not g.is_contiguous():
                    g = g.contiguous()  # (the C step reads a 16-bit x's gradient so)
                gs.append(g.resolve_neg() if g.is_neg() else g)
                written.update(full[n].untyped_storage().data_ptr() for n in names)
                views += [None] * 3
                s1.append(views[0])
                s2.append(views[1])
                s3.append(views[2])
                where.append(w)
                names_of.append(names)
                if new:
                    fresh.append((p, new))
                counted.append(p)
        # read every gradient before anything is written: one sharing memory
        # with a parameter or state of the step is copied first
        gs = [_mixed.numpy_of(g.clone() if g.untyped_storage().data_ptr() in written else g)
              for g in gs]
        return ((xs, gs, (s1, s2, s3), index, groups), where, names_of, fresh, counted,
                carried, mixed.run_args(copies, seeds))

    @_hooks.hooked
    @torch.no_grad()
    def step(self, closure=None, *, grad_scale=None, max_grad_norm=None, norm_type=2.0,
             clip_convention="torch", skip_if_nonfinite=False):
        """One update of every parameter that has a gradient, in one C call.

        Called as torch's ``step(closure)``, this is torch.optim's step. The
        keyword-only options fuse what a training loop does to the
        gradients before it (the gradients themselves are never written).

        Parameters
        ----------
        closure : callable, optional
            Re-evaluates the model and returns the loss (run with grad
            enabled before the update), as in torch.optim.
        grad_scale : float, optional
            Divide every gradient by this (> 0) first (GradScaler's scale).
        max_grad_norm : float, optional
            Clip by the global norm of all the step's gradients, as
            ``torch.nn.utils.clip_grad_norm_(params, max_grad_norm,
            norm_type)`` before ``step()`` (clip_convention "torch") or
            ``optax.clip_by_global_norm`` ("optax").
        norm_type : float, default 2.0
            2.0 or math.inf.
        clip_convention : {"torch", "optax"}, default "torch"
        skip_if_nonfinite : bool, default False
            If a gradient value is NaN or infinite, write nothing (no
            parameter, state or count changes).

        Returns
        -------
        The closure's loss, or None. :attr:`last_step` holds what the step
        found (``applied``, ``norm``, ``finite``; the norm is NaN when
        nothing asked for it).

        Raises
        ------
        TypeError, ValueError
            For a bad option, hyperparameter, parameter, gradient or state;
            then nothing was written.
        """
        f = f"fastopt.torch.{type(self).__name__}.step"
        opts = _NO_OPTIONS
        amp = _mixed.amp_scale(f, self.__dict__, grad_scale)
        if amp is not False:
            grad_scale = amp
        if (grad_scale, max_grad_norm, skip_if_nonfinite) != (None, None, False):
            opts = _step.check_options(f, grad_scale=grad_scale,
                                       max_grad_norm=max_grad_norm,
                                       norm_type=norm_type, clip_convention=clip_convention,
                                       skip_if_nonfinite=skip_if_nonfinite)
        if amp is False:                # GradScaler found an inf or NaN: no step
            self.last_step = _step.StepInfo(False, math.nan, False)
            return None
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        _interrupt.whole(self._update, f, opts)
        return loss

    def _state_views(self, f, w, p, names, states, sdt, q8, hit, old, written) -> list:
        """The step's views of p's states (names; states: all, the new, the
        kept): NumPy views, from the last step's cache ``old`` when p was a
        ``hit`` there, else checked and made, or (q8) State8bit views."""
        full, new, st = states
        views = []
        for k, name in enumerate(names):
            if q8:
                views.append(_q8.view(f, w, self._ROW, k, p, name, full))
                written.add(full[name + _q8.ABSMAX].untyped_storage().data_ptr())
                continue
            s = full[name] if name in new else st.get(name)
            v = self._view(old, s) if hit and s is not None else None
            if v is None:
                _check_state(f, w, p, name, s, sdt)
                v = self._view(old, s, True)
            views.append(v)
        return views

    def _update(self, f, opts) -> None:
        """The update of step(), run whole (a KeyboardInterrupt meanwhile
        is raised after it: fastopt._interrupt); masters first taken from
        their edited parameters (_mixed.sync_masters), as they were if it
        raises."""
        undo = _mixed.sync_masters(self)
        try:
            self._routes(f, opts)
        except BaseException:
            _mixed.unsync_masters(self, undo)
            raise

    def _routes(self, f, opts) -> None:
        prepare = self._PREPARE and not self._mixed.q8     # (8-bit: the checked route)
        if self._flat is not None and prepare and self._FLAT_CALL:
            info = self._flat.run(self, f, opts)
            if info is not None:
                self.last_step = info
                return
        prep = self._prep
        if prep is not None:
            info = prep.run(self, f, opts)
            if info is not None:
                self.last_step = info
                return
            if prep.stale:
                self._prep = None
        args, where, names_of, fresh, counted, carried, extra = self._plan(f)
        if not args[0]:
            self.last_step = _step.StepInfo(True, 0.0, True)
            return

        def labels():
            out = {"x": where, "g": [f"the gradient of {w}" for w in where]}
            for k in range(3):
                out[f"s{k + 1}"] = [f"state[{n[k]!r}] of {w}" if k < len(n) else "-"
                                    for w, n in zip(where, names_of)]
            return out

        self.last_step = info = _step.run(f, *args, opts, self.n_threads, labels, **extra)
        if not info.applied:
            if self._prep is None and not fresh and prepare:
                self._prep = _prep.build(self, args, names_of, counted, extra)
            return
        for p, new in fresh:
            self.state[p].update(new)
        for tensor, value in carried:
            tensor.fill_(float(value))
        if fresh and self._flat is not None:
            self._flat.changed()        # new states to move into the buffers
        if self._COUNTS:
            for p in counted:
                st = self.state[p]
                v = st["step"]
                e = self._views.get(id(v)) if type(v) is torch.Tensor else None
                if e is not None and e[0] is v:
                    # the tensor's memory, without a torch op: its scalar + 1,
                    # rounded to its dtype as += 1 would (1 is a weak int)
                    e[4][()] = e[4][()] + 1
                else:
                    st["step"] += 1
        if self._prep is None and prepare:
            self._prep = _prep.build(self, args, names_of, counted, extra)


def _zeros(p):
    return torch.zeros_like(p, memory_format=torch.preserve_format)


def _step_tensor(value=0.0):
    """torch's step count: a float scalar tensor of the default float type."""
    dtype = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
    return torch.tensor(float(value), dtype=dtype)
