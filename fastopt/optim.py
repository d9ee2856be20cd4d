"""Stateful optimizers over fastopt's kernels: Momentum, Adagrad, Adam.

An optimizer owns the state tensors (V, H) of a list of NumPy parameters and
the update count T, and turns ``step(grads)`` into one fastopt C call per
parameter group::

    import fastopt.optim
    opt = fastopt.optim.Adam(params, lr=1e-3)
    for batch in data:
        grads = backward(params, batch)      # arrays, one per parameter
        opt.step(grads)                      # params updated in place
    opt.save("ckpt.npz")                     # atomic; opt.load resumes bit-exactly

Parameter groups work as in torch and MindSpore: ``params`` may be a list of
dicts, each with ``"params"`` and any per-group hyperparameter (``lr``,
``norm_coefficient``, ``clipping=None`` to exclude a layer from AGC, its own
``schedule`` ...); the keyword arguments are the defaults of every group.

The update count follows each ONNX operator's T convention (SEMANTICS.md
section 1): the first update is made with T = 0 by Momentum and Adagrad and
with T = 1 by Adam (bias-corrected); it advances by one after each applied
step. ``schedule`` is any callable ``schedule(step) -> float`` (for instance
the objects of :mod:`fastopt.schedules`, or a lambda), called with the number
of steps applied so far (0 for the first update); its value is the learning
rate of that step.
"""
from __future__ import annotations

import json
import os
import secrets
import struct
import zipfile
import zlib
from typing import Callable, Optional

import numpy as np

from . import _updates
from . import _validation as _v

__all__ = ["Momentum", "Adagrad", "Adam", "CheckpointError"]

# What reading a damaged .npz can raise, besides CheckpointError: zipfile
# raises NotImplementedError for an unknown compression method and
# RuntimeError for an "encrypted" entry (a flipped flag bit), zlib.error for
# corrupt deflate data, struct.error / OverflowError / MemoryError for
# corrupt sizes and headers.
_READ_ERRORS = (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile,
                UnicodeError, NotImplementedError, RuntimeError, zlib.error, struct.error,
                OverflowError, MemoryError)

_FORMAT = "fastopt.optim"
_VERSION = 1
_ALIGN = 64  # bytes: state views in the optional arena start on cache lines
_META_KEY = "meta"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into this optimizer.

    Raised for a file that is not a fastopt checkpoint (not an npz, truncated,
    corrupt, missing or unexpected entries) and for one that does not match
    the optimizer (another optimizer's file, other groups, other shapes or
    dtypes). The optimizer is left unchanged.
    """


_MISSING = object()


# ------------------------------------------------------------ hyperparameters

def _real(lo=None, hi=None, hi_open=False):
    def check(fname, label, value):
        return _v.check_real(fname, label, value, low=lo, high=hi, high_open=hi_open)
    return check


def _bool(fname, label, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fname}: {label} must be True or False, got {type(value).__name__}")
    return bool(value)


def _layout(fname, label, value):
    if value not in ("oi", "io"):
        raise ValueError(f"{fname}: {label} must be 'oi' (PyTorch layout) or 'io' "
                         f"(JAX/Haiku layout), got {value!r}")
    return value


def _lr_or_none(fname, label, value):
    if value is None:
        return None
    return _v.check_lr(fname, value, name=label)


def _clip_value(fname, label, value):
    v = _v.check_real(fname, label, value, low=0.0, low_open=True)
    return v


def _clipping(fname, label, value):
    """None, a positive float, or a per-tensor list of positive floats / None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [None if c is None else _clip_value(fname, f"{label}[{i}]", c)
                for i, c in enumerate(value)]
    return _clip_value(fname, label, value)


def _schedule(fname, label, value):
    if value is not None and not callable(value):
        raise TypeError(f"{fname}: {label} must be a callable step -> lr (or None), "
                        f"got {type(value).__name__}")
    return value


# ------------------------------------------------------------------ helpers

def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=")


def _order(x: np.ndarray) -> str:
    """The memory order to give x's states, so the fast path takes them."""
    return "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"


def _all_finite(a: np.ndarray) -> bool:
    """Exact test that every element of a float array is finite.

    One pass in the common case: NaN and +-Inf propagate through IEEE
    addition (Inf + -Inf is NaN), so a finite sum proves that every element is
    finite. A non-finite sum may also come from an overflow of finite values
    (float32 sums overflow from ~3.4e38), so only then is every element tested.
    """
    if np.isfinite(np.add.reduce(a, axis=None)):
        return True
    return bool(np.isfinite(a).all())


def _scale(fname: str, grad_scale) -> float:
    s = _v.check_real(fname, "grad_scale", grad_scale, low=0.0, low_open=True)
    return s


# ---------------------------------------------------------------- the base

class _Optimizer:
    """Shared machinery; see Momentum, Adagrad and Adam."""

    _KERNEL: Callable
    _STATES: tuple = ()
    _T0: int = 0
    # name -> checker(fname, label, value) -> normalised value
    _HYPER: dict = {}

    def __init__(self, params, defaults: dict, *, contiguous_state: bool = False,
                 n_threads: Optional[int] = None):
        f = self._fname()
        self.n_threads = _v.check_n_threads(f, n_threads)
        self.contiguous_state = _bool(f, "contiguous_state", contiguous_state)
        checks = dict(self._HYPER, schedule=_schedule)
        self.defaults = {k: checks[k](f, k, v) for k, v in defaults.items()}
        if self.defaults["lr"] is None and self.defaults["schedule"] is None:
            raise ValueError(f"{f}: give lr, or a schedule that supplies it")
        if self.defaults["lr"] is not None and self.defaults["schedule"] is not None:
            raise ValueError(f"{f}: give lr or schedule, not both: the schedule supplies "
                             f"the learning rate of every step")
        self.param_groups = self._make_groups(f, params)
        self._check_distinct(f)
        self._state = self._allocate()
        self._param_tuples = [g["params"] for g in self.param_groups]
        self._extents = self._written_extents()
        self._owners = self._memory_owners()
        self._steps = 0
        self.last_lr: list = [None] * len(self.param_groups)
        self._scratch: dict = {}
        self._cache: dict = {}
        self._KEYS = tuple(self._HYPER) + ("schedule",)
        self._step_name = f + ".step"

    # ------------------------------------------------------------- setup

    @classmethod
    def _fname(cls) -> str:
        return f"fastopt.optim.{cls.__name__}"

    def _make_groups(self, f, params):
        if isinstance(params, np.ndarray) or not isinstance(params, (list, tuple)):
            raise TypeError(f"{f}: params must be a list of arrays or a list of parameter "
                            f"groups (dicts with 'params'), got {type(params).__name__}")
        if len(params) == 0:
            raise ValueError(f"{f}: params is empty; give at least one parameter")
        if all(isinstance(p, dict) for p in params):
            raw = [dict(p) for p in params]
            labels = [f"param_groups[{i}]" for i in range(len(raw))]
        elif any(isinstance(p, dict) for p in params):
            raise TypeError(f"{f}: params mixes arrays and parameter groups; give a list "
                            f"of arrays or a list of dicts")
        else:
            raw = [{"params": list(params)}]
            labels = ["params"]
        groups = []
        n = 0
        for gi, (group, where) in enumerate(zip(raw, labels)):
            if "params" not in group:
                raise ValueError(f"{f}: {where} has no 'params' entry")
            ps = group["params"]
            if isinstance(ps, np.ndarray):
                ps = [ps]
            if not isinstance(ps, (list, tuple)):
                raise TypeError(f"{f}: {where}['params'] must be a list of arrays, got "
                                f"{type(ps).__name__}")
            ps = list(ps)
            for i, p in enumerate(ps):
                label = f"params[{n + i}]"
                if not isinstance(p, np.ndarray):
                    raise TypeError(f"{f}: {label} must be a numpy.ndarray, got "
                                    f"{type(p).__name__}")
                if _native(p.dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
                    raise TypeError(f"{f}: {label} has dtype {p.dtype}; fastopt updates "
                                    f"float32 or float64 arrays")
                if not p.flags.writeable:
                    raise ValueError(f"{f}: {label} is read-only; it is updated in place")
            n += len(ps)
            unknown = set(group) - set(self._HYPER) - {"params", "schedule"}
            if unknown:
                raise ValueError(
                    f"{f}: {where} has unknown key(s) {sorted(unknown)}; "
                    f"{type(self).__name__} takes {sorted(self._HYPER) + ['schedule']}")
            full = {"params": tuple(ps)}
            for k in list(self._HYPER) + ["schedule"]:
                full[k] = group.get(k, self.defaults[k])
            if full["schedule"] is not None and group.get("lr") is not None:
                raise ValueError(
                    f"{f}: {where} sets lr but a schedule supplies its learning rate; "
                    f"give the group its own 'schedule', or 'schedule': None to use a "
                    f"fixed lr")
            if full["schedule"] is not None:
                full["lr"] = None
            groups.append(self._check_group(f, full, where))
        if n == 0:
            raise ValueError(f"{f}: params is empty; give at least one parameter")
        return groups

    def _check_group(self, f, group, where):
        """Validate and normalise one group's hyperparameters (a new dict)."""
        out = {"params": group["params"]}
        for k, check in self._HYPER.items():
            out[k] = check(f, f"{where}['{k}']" if where != "params" else k, group[k])
        out["schedule"] = _schedule(f, f"{where}['schedule']", group["schedule"])
        if out["lr"] is None and out["schedule"] is None:
            raise ValueError(f"{f}: {where} has neither lr nor a schedule")
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
        return 0.0

    def _allocate(self):
        """State arrays, per group: {name: [array per parameter]}."""
        state = [{name: [] for name in self._STATES} for _ in self.param_groups]
        if not self.contiguous_state:
            for gs, group in zip(state, self.param_groups):
                for name in self._STATES:
                    fill = self._initial(group, name)
                    for p in group["params"]:
                        a = np.zeros(p.shape, _native(p.dtype), order=_order(p))
                        if fill:
                            a.fill(fill)
                        gs[name].append(a)
            self.arenas = {}
            return state
        # one arena per dtype, every state view starting on a 64-byte boundary
        layout = []   # (group index, name, dtype, offset in elements, param)
        sizes: dict = {}
        for name in self._STATES:
            for gi, group in enumerate(self.param_groups):
                for p in group["params"]:
                    dt = _native(p.dtype)
                    step = _ALIGN // dt.itemsize
                    off = sizes.get(dt, 0)
                    layout.append((gi, name, dt, off, p))
                    sizes[dt] = off + -(-p.size // step) * step
        arenas = {}
        for dt, n in sizes.items():
            raw = np.zeros(n + _ALIGN // dt.itemsize, dt)
            skip = (-raw.ctypes.data % _ALIGN) // dt.itemsize
            arenas[dt] = raw[skip:skip + n]
        for gi, name, dt, off, p in layout:
            a = arenas[dt][off:off + p.size].reshape(p.shape, order=_order(p))
            fill = self._initial(self.param_groups[gi], name)
            if fill:
                a.fill(fill)
            state[gi][name].append(a)
        self.arenas = arenas
        return state

    # ----------------------------------------------------------- inspection

    @property
    def params(self) -> list:
        """Every parameter, in group order."""
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def state(self) -> dict:
        """{state name: [array per parameter]} in the order of :attr:`params`.

        The arrays are the optimizer's own (views into :attr:`arenas` with
        ``contiguous_state=True``); modify them only deliberately.
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

    def _split(self, f, grads):
        """grads -> one list per group (entries are arrays or None)."""
        if not isinstance(grads, (list, tuple)):
            raise TypeError(f"{f}: grads must be a list with one gradient per parameter "
                            f"(or one list per group), got {type(grads).__name__}")
        sizes = [len(g["params"]) for g in self.param_groups]
        if (len(grads) == len(sizes) and len(grads) > 0
                and all(isinstance(g, (list, tuple)) for g in grads)):
            for gi, (gg, n) in enumerate(zip(grads, sizes)):
                if len(gg) != n:
                    raise ValueError(f"{f}: grads[{gi}] has {len(gg)} gradients but "
                                     f"param_groups[{gi}] has {n} parameters")
            return [list(gg) for gg in grads]
        total = sum(sizes)
        if len(grads) != total:
            raise ValueError(f"{f}: grads has {len(grads)} entries but the optimizer has "
                             f"{total} parameters; give one gradient (or None) per parameter")
        out, k = [], 0
        for n in sizes:
            out.append(list(grads[k:k + n]))
            k += n
        return out

    def _check_grads(self, f, per):
        """The checks the kernels make on each gradient (type, dtype, shape),
        with the optimizer's numbering, before anything is written."""
        k = 0
        for group, gg in zip(self.param_groups, per):
            for i, (p, g) in enumerate(zip(group["params"], gg)):
                if g is None:
                    continue
                if type(g) is not np.ndarray and not isinstance(g, np.ndarray):
                    raise TypeError(f"{f}: grads[{k + i}] must be a numpy.ndarray or None, "
                                    f"got {type(g).__name__}")
                if g.dtype != p.dtype and _native(g.dtype) != _native(p.dtype):
                    raise TypeError(f"{f}: grads[{k + i}] has dtype {g.dtype} but "
                                    f"params[{k + i}] has {p.dtype}; the gradient must "
                                    f"match its parameter")
                if g.shape != p.shape:
                    try:
                        shape = np.broadcast_shapes(g.shape, p.shape)
                    except ValueError:
                        shape = None
                    if shape != p.shape:
                        raise ValueError(f"{f}: grads[{k + i}] with shape {g.shape} cannot "
                                         f"be broadcast to params[{k + i}]'s shape {p.shape}")
            k += len(gg)

    def _written_extents(self):
        """The byte ranges [lo, hi) spanned by the parameters and states,
        merged into disjoint sorted ranges (strided arrays may interleave)."""
        ext = [_v._extent(a) for group, st in zip(self.param_groups, self._state)
               for a in list(group["params"]) + [s for n in self._STATES for s in st[n]]]
        merged: list = []
        for lo, hi in sorted(e for e in ext if e is not None):
            if merged and lo < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return (np.array([m[0] for m in merged], np.int64),
                np.array([m[1] for m in merged], np.int64))

    def _memory_owners(self) -> dict:
        """id -> object for the arrays at the root of every parameter's and
        state's chain of .base (kept alive here, so the ids stay unique)."""
        owners = {}
        for group, st in zip(self.param_groups, self._state):
            for a in list(group["params"]) + [x for n in self._STATES for x in st[n]]:
                while isinstance(a, np.ndarray):
                    owners[id(a)] = a
                    a = a.base
        return owners

    def _check_overlaps(self, f, per):
        """Gradients sharing memory with any parameter or state: raise for a
        partial overlap, copy an exact alias (it is read after being written
        when it belongs to another group). Returns per, with such copies."""
        # A gradient that owns its memory (base None) and is not itself the
        # owner of a parameter's or state's memory cannot overlap them; only
        # views need the byte-range test.
        owners = self._owners
        gl = [(g, _v._extent(g)) for gg in per for g in gg
              if g is not None and (g.base is not None or id(g) in owners)]
        gl = [(g, e) for g, e in gl if e is not None]
        if not gl:
            return per
        lo, hi = self._extents
        glo = np.array([e[0] for _, e in gl], np.int64)
        ghi = np.array([e[1] for _, e in gl], np.int64)
        j = np.searchsorted(hi, glo, side="right")  # first range ending after glo
        hit = j < len(lo)
        hit[hit] = lo[j[hit]] < ghi[hit]
        if not hit.any():  # the usual case: no gradient near written memory
            return per
        items, k = [], 0
        for group, gg, st in zip(self.param_groups, per, self._state):
            for i, (p, g) in enumerate(zip(group["params"], gg)):
                items.append((f"params[{k + i}]", p, True))
                items += [(f"state {n!r} of params[{k + i}]", st[n][i], True)
                          for n in self._STATES]
                if g is not None:
                    items.append((f"grads[{k + i}]", g, False))
            k += len(gg)
        copy = _v._overlaps(f, items)
        if copy:
            alias = {id(items[j][1]) for j in copy}
            per = [[np.array(g) if g is not None and id(g) in alias else g for g in gg]
                   for gg in per]
        return per

    def _scaled(self, per, scale):
        """Gradients divided by scale in their own dtype, into reused buffers."""
        out = []
        k = 0
        for gg in per:
            row = []
            for i, g in enumerate(gg):
                if g is None:
                    row.append(None)
                    continue
                buf = self._scratch.get(k + i)
                if buf is None or buf.shape != g.shape or buf.dtype != _native(g.dtype):
                    buf = np.empty(g.shape, _native(g.dtype))
                    self._scratch[k + i] = buf
                np.divide(g, buf.dtype.type(scale), out=buf)
                row.append(buf)
            out.append(row)
            k += len(gg)
        return out

    def _kwargs(self, group) -> dict:
        """The kernel's arguments for one checked group, except lr and t."""
        raise NotImplementedError

    def _group_kwargs(self, f, group, gi) -> dict:
        """The kernel's arguments for one group this step, every value checked.

        Hyperparameters may be edited in param_groups between steps, so they
        are checked again whenever they differ from the last checked values
        (all groups are checked before the first kernel call writes anything).
        """
        key = tuple(map(group.get, self._KEYS))
        if list in map(type, key):  # compare lists (clipping) by value, not identity
            key = tuple(tuple(v) if type(v) is list else v for v in key)
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
        return kw

    def step(self, grads, *, grad_scale=None, skip_if_nonfinite: bool = False) -> bool:
        """Apply one update to every parameter that has a gradient.

        Parameters
        ----------
        grads : list
            One gradient per parameter, in the order of :attr:`params` (or
            one list per parameter group). Each is an array of its
            parameter's dtype, broadcastable to its shape, and is only read;
            ``None`` leaves that parameter and its state untouched this step.
        grad_scale : float, optional
            Divide every gradient by this (> 0) before the update, in the
            gradient's dtype (undoing a loss scale). The gradients passed in
            are not modified.
        skip_if_nonfinite : bool, default False
            First check that every (scaled) gradient is finite; if any value
            is NaN or +-Inf, skip the step: no parameter or state changes,
            the step count does not advance and the schedule is not called.

        Returns
        -------
        bool
            True if the step was applied, False if it was skipped.

        Raises
        ------
        TypeError, ValueError
            On bad gradients or hyperparameters (including a bad value from a
            schedule); nothing is modified then.
        """
        f = self._step_name
        for gi, (group, ps) in enumerate(zip(self.param_groups, self._param_tuples)):
            if group["params"] is not ps:
                raise ValueError(f"{f}: param_groups[{gi}]['params'] was replaced; the "
                                 f"parameters are fixed when the optimizer is built")
        per = self._split(f, grads)
        checked = False
        if grad_scale is not None:
            scale = _scale(f, grad_scale)
            self._check_grads(f, per)  # the scaled copies cannot overlap anything
            checked = True
            if scale != 1.0:
                with np.errstate(all="ignore"):  # as the C kernels: inf/nan, no warning
                    per = self._scaled(per, scale)
        if skip_if_nonfinite:
            if not checked:
                self._check_grads(f, per)  # only read here
            with np.errstate(over="ignore", invalid="ignore"):
                finite = all(_all_finite(g) for gg in per for g in gg if g is not None)
            if not finite:
                return False
        if not checked and sum(any(g is not None for g in gg) for gg in per) > 1:
            # several kernel calls: one must not fail after another has written,
            # nor read a gradient that an earlier one has written
            self._check_grads(f, per)
            per = self._check_overlaps(f, per)
            checked = True
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
        kernel = type(self)._KERNEL
        for xs, gs, sts, kw in calls:
            try:
                kernel(xs, gs, *sts, **kw)
            except (TypeError, ValueError):
                if not checked:  # restate the error with the optimizer's numbering
                    self._check_grads(f, per)
                    self._check_overlaps(f, per)
                raise
        self._steps += 1
        self.last_lr = lrs
        return True

    def _select(self, kw, sel):
        """Restrict per-tensor arguments to the tensors in sel (None: all)."""

    # ---------------------------------------------------------- checkpoints

    def _hyper_of(self, group) -> dict:
        return {k: group[k] for k in self._HYPER}

    def state_dict(self) -> dict:
        """A snapshot of the optimizer: copies of the states, the step count
        and every group's hyperparameters (schedules are not included: they
        are called with the step count, so a resumed run gets the same lrs).

        The parameters are not included; save them yourself.
        """
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "optimizer": type(self).__name__,
            "steps": self._steps,
            "param_groups": [dict(self._hyper_of(g), n_params=len(g["params"]))
                             for g in self.param_groups],
            "state": {name: [np.array(a, copy=True) for a in arrays]
                      for name, arrays in self.state.items()},
        }

    def _checked_state_dict(self, f, sd):
        """Validate a state dict completely; return (groups, steps, state)."""
        if not isinstance(sd, dict):
            raise CheckpointError(f"{f}: a state dict must be a dict, got {type(sd).__name__}")
        want = {"format", "version", "optimizer", "steps", "param_groups", "state"}
        missing = want - set(sd)
        if missing:
            raise CheckpointError(f"{f}: the checkpoint has no {sorted(missing)} entry; "
                                  f"it is not a complete fastopt.optim state")
        extra = set(sd) - want
        if extra:
            raise CheckpointError(f"{f}: the checkpoint has unexpected entries {sorted(extra)}")
        if sd["format"] != _FORMAT:
            raise CheckpointError(f"{f}: not a fastopt.optim checkpoint (format "
                                  f"{sd['format']!r})")
        if sd["version"] != _VERSION:
            raise CheckpointError(f"{f}: checkpoint format version {sd['version']!r}; this "
                                  f"fastopt reads version {_VERSION}")
        name = type(self).__name__
        if sd["optimizer"] != name:
            raise CheckpointError(f"{f}: the checkpoint was saved by "
                                  f"fastopt.optim.{sd['optimizer']}, not {name}")
        steps = sd["steps"]
        if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) \
                or steps < 0:
            raise CheckpointError(f"{f}: the checkpoint's step count must be an integer "
                                  f">= 0, got {steps!r}")
        pgs = sd["param_groups"]
        if not isinstance(pgs, (list, tuple)) or len(pgs) != len(self.param_groups):
            n = len(pgs) if isinstance(pgs, (list, tuple)) else pgs
            raise CheckpointError(f"{f}: the checkpoint has {n} parameter group(s), the "
                                  f"optimizer {len(self.param_groups)}")
        groups = []
        for gi, (saved, group) in enumerate(zip(pgs, self.param_groups)):
            where = f"param_groups[{gi}]"
            if not isinstance(saved, dict):
                raise CheckpointError(f"{f}: the checkpoint's {where} is not a dict")
            keys = set(self._HYPER) | {"n_params"}
            if set(saved) != keys:
                raise CheckpointError(
                    f"{f}: the checkpoint's {where} has keys {sorted(saved)}, expected "
                    f"{sorted(keys)}")
            if saved["n_params"] != len(group["params"]):
                raise CheckpointError(
                    f"{f}: the checkpoint's {where} has {saved['n_params']} parameters, the "
                    f"optimizer's {len(group['params'])}")
            merged = dict(group)
            merged.update({k: saved[k] for k in self._HYPER})
            if merged["schedule"] is not None:
                merged["lr"] = None
            try:
                groups.append(self._check_group(f, merged, where))
            except (TypeError, ValueError) as exc:
                raise CheckpointError(f"{f}: the checkpoint's hyperparameters are invalid: "
                                      f"{exc}") from None
        state = sd["state"]
        if not isinstance(state, dict) or set(state) != set(self._STATES):
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise CheckpointError(f"{f}: the checkpoint holds states {got}; "
                                  f"{name} has {list(self._STATES)}")
        params = self.params
        for sname in self._STATES:
            arrays = state[sname]
            if not isinstance(arrays, (list, tuple)) or len(arrays) != len(params):
                n = len(arrays) if isinstance(arrays, (list, tuple)) else "no list of"
                raise CheckpointError(f"{f}: the checkpoint has {n} {sname!r} arrays for "
                                      f"{len(params)} parameters")
            for i, (a, p) in enumerate(zip(arrays, params)):
                what = f"state {sname!r} of params[{i}]"
                if not isinstance(a, np.ndarray):
                    raise CheckpointError(f"{f}: the checkpoint's {what} is not an array")
                if a.shape != p.shape:
                    raise CheckpointError(f"{f}: the checkpoint's {what} has shape "
                                          f"{a.shape} but params[{i}] has shape {p.shape}")
                if _native(a.dtype) != _native(p.dtype):
                    raise CheckpointError(f"{f}: the checkpoint's {what} has dtype "
                                          f"{a.dtype} but params[{i}] has {p.dtype}")
        return groups, int(steps), state

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
        self._load(self._fname() + ".load_state_dict", state_dict)

    def _load(self, f, state_dict):
        groups, steps, state = self._checked_state_dict(f, state_dict)
        # everything checked: commit
        for sname in self._STATES:
            for dst, src in zip(self.state[sname], state[sname]):
                np.copyto(dst, src)
        for group, new in zip(self.param_groups, groups):
            for k in self._HYPER:
                group[k] = new[k]
        self._steps = steps

    def save(self, path) -> None:
        """Write :meth:`state_dict` to ``path`` as an uncompressed .npz, atomically.

        The data goes to a temporary file in the same directory, is flushed
        to disk, and replaces ``path`` by a rename: a crash leaves either the
        previous file or the new one, never a partial checkpoint. ``path`` is
        used exactly as given (no ``.npz`` is appended).
        """
        sd = self.state_dict()
        meta = {k: sd[k] for k in ("format", "version", "optimizer", "steps", "param_groups")}
        arrays = {_META_KEY: np.array(json.dumps(meta))}
        for sname, arrs in sd["state"].items():
            for i, a in enumerate(arrs):
                arrays[f"state.{sname}.{i}"] = a
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **arrays)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:  # make the rename itself durable
            dfd = os.open(directory, os.O_RDONLY)
        except OSError:  # pragma: no cover - e.g. platforms without directory fds
            return
        try:
            os.fsync(dfd)
        except OSError:  # pragma: no cover
            pass
        finally:
            os.close(dfd)

    def load(self, path) -> None:
        """Restore a checkpoint written by :meth:`save`.

        Raises
        ------
        FileNotFoundError, PermissionError
            If the file cannot be opened.
        CheckpointError
            If it is not a fastopt checkpoint (not an npz, truncated or
            corrupt, entries missing or unexpected) or does not match this
            optimizer (another optimizer's file, other groups, shapes or
            dtypes). The optimizer is unchanged after any error.
        """
        f = self._fname() + ".load"
        path = os.fspath(path)
        with open(path, "rb") as fh:
            try:
                sd = self._read_npz(f, fh)
            except CheckpointError as exc:
                raise CheckpointError(f"{exc} (file {path!r})") from None
            except _READ_ERRORS as exc:
                raise CheckpointError(
                    f"{f}: {path!r} is not a readable fastopt checkpoint (truncated, "
                    f"corrupt or not an .npz file): {type(exc).__name__}: {exc}") from exc
        try:
            self._load(f, sd)
        except CheckpointError as exc:
            raise CheckpointError(f"{exc} (file {path!r})") from None

    def _read_npz(self, f, fh) -> dict:
        z = np.load(fh, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise CheckpointError(f"{f}: the file holds a single .npy array, not an .npz "
                                  f"checkpoint")
        with z:
            names = set(z.files)
            if _META_KEY not in names:
                raise CheckpointError(f"{f}: the file has no {_META_KEY!r} entry; it is not "
                                      f"a fastopt.optim checkpoint")
            meta_arr = z[_META_KEY]
            if meta_arr.dtype.kind != "U" or meta_arr.shape != ():
                raise CheckpointError(f"{f}: the file's {_META_KEY!r} entry is not a "
                                      f"fastopt.optim header")
            meta = json.loads(str(meta_arr[()]))
            if not isinstance(meta, dict):
                raise CheckpointError(f"{f}: the file's header is not a JSON object")
            if meta.get("format") == _FORMAT and meta.get("optimizer") != type(self).__name__:
                # say which optimizer wrote it before complaining about its entries
                raise CheckpointError(f"{f}: the checkpoint was saved by "
                                      f"fastopt.optim.{meta.get('optimizer')}, not "
                                      f"{type(self).__name__}")
            n = len(self.params)
            state = {}
            expected = {_META_KEY}
            for sname in self._STATES:
                keys = [f"state.{sname}.{i}" for i in range(n)]
                expected.update(keys)
                absent = [k for k in keys if k not in names]
                if absent:
                    raise CheckpointError(
                        f"{f}: the file has no {absent[0]!r} entry ({len(absent)} of the "
                        f"{n} {sname!r} arrays missing)")
                state[sname] = [z[k] for k in keys]  # reads (and CRC-checks) each entry
            extra = names - expected
            if extra:
                raise CheckpointError(f"{f}: the file has unexpected entries "
                                      f"{sorted(extra)[:5]}; it was written for other "
                                      f"parameters or by another program")
        sd = dict(meta)
        sd["state"] = state
        return sd


# -------------------------------------------------------------- optimizers

class Momentum(_Optimizer):
    """SGD with momentum (ONNX Momentum), optionally Nesterov and AGC-clipped.

    Each step runs :func:`fastopt.momentum` once per parameter group with
    T = 0 on the first update (so beta is ignored then, as torch ignores
    dampening on its first step) and T = the step count afterwards.

    Parameters
    ----------
    params : list of ndarray, or list of dict
        float32/float64 arrays updated in place, or parameter groups: dicts
        with ``"params"`` (a list of arrays) and any of the hyperparameters
        below, which then override the defaults for that group.
    lr : float, optional
        Learning rate (>= 0). May be omitted when ``schedule`` is given.
    alpha : float, default 0.9
        Momentum coefficient (torch.optim.SGD ``momentum``).
    beta : float, default 1.0
        Gradient coefficient after the first update (torch ``1 - dampening``).
    norm_coefficient : float, default 0.0
        L2 coefficient folded into the gradient (torch ``weight_decay``).
    nesterov : bool, default False
        Nesterov momentum (ONNX mode="nesterov").
    clipping : float or list, optional
        Adaptive gradient clipping (NFNet AGC) threshold applied to the
        gradients before the update: a float for every tensor of the group,
        or a per-tensor list in which None excludes a tensor (NFNet excludes
        the final classifier). None disables clipping.
    clip_eps : float, default 1e-3
        AGC's floor on the parameter norm.
    clip_layout : {"oi", "io"}, default "oi"
        Which axis of a weight holds the output units: "oi" for PyTorch
        layouts (OI, OIHW), "io" for JAX/Haiku (IO, HWIO).
    schedule : callable, optional
        Any ``schedule(step) -> float`` (e.g. a :mod:`fastopt.schedules`
        object or a lambda), called with the number of steps applied so far
        (0 for the first); its value replaces ``lr``. A group may give its
        own ``"schedule"``, or ``"schedule": None`` to use a fixed ``"lr"``.
    contiguous_state : bool, default False
        Allocate all states of one dtype in one contiguous, 64-byte aligned
        arena (:attr:`arenas`) and expose them as views.
    n_threads : int, optional
        Threads for the kernels (None: fastopt's current default).
    """

    _KERNEL = staticmethod(_updates.momentum)
    _STATES = ("v",)
    _T0 = 0
    _HYPER = {
        "lr": _lr_or_none,
        "alpha": _real(),
        "beta": _real(),
        "norm_coefficient": _real(),
        "nesterov": _bool,
        "clipping": _clipping,
        "clip_eps": _real(lo=0.0),
        "clip_layout": _layout,
    }

    def __init__(self, params, lr=None, alpha=0.9, beta=1.0, norm_coefficient=0.0,
                 nesterov=False, clipping=None, clip_eps=1e-3, clip_layout="oi",
                 schedule=None, *, contiguous_state=False, n_threads=None):
        super().__init__(params, dict(lr=lr, alpha=alpha, beta=beta,
                                      norm_coefficient=norm_coefficient, nesterov=nesterov,
                                      clipping=clipping, clip_eps=clip_eps,
                                      clip_layout=clip_layout, schedule=schedule),
                         contiguous_state=contiguous_state, n_threads=n_threads)

    def _check_extra(self, f, group, where):
        c = group["clipping"]
        label = "clipping" if where == "params" else f"{where}['clipping']"
        if isinstance(c, list) and len(c) != len(group["params"]):
            raise ValueError(f"{f}: {label} has {len(c)} entries but the group has "
                             f"{len(group['params'])} parameters")

    def _kwargs(self, group):
        kw = dict(alpha=float(group["alpha"]), beta=float(group["beta"]),
                  norm_coefficient=float(group["norm_coefficient"]),
                  mode="nesterov" if group["nesterov"] else "standard",
                  n_threads=self.n_threads)
        c = group["clipping"]
        if isinstance(c, list) and all(x is None for x in c):
            c = None
        if c is not None:
            kw.update(clipping=c, clip_eps=float(group["clip_eps"]),
                      layout=group["clip_layout"])
        return kw

    def _select(self, kw, sel):
        c = kw.get("clipping")
        if sel is not None and isinstance(c, list):
            c = [c[i] for i in sel]
            if all(x is None for x in c):
                for k in ("clipping", "clip_eps", "layout"):
                    del kw[k]
            else:
                kw["clipping"] = c


class Adagrad(_Optimizer):
    """Adagrad (ONNX Adagrad): T = 0 on the first update, then the step count.

    Parameters
    ----------
    params : list of ndarray, or list of dict
        As in :class:`Momentum`.
    lr : float, optional
        Learning rate (>= 0); may be omitted when ``schedule`` is given.
    decay_factor : float, default 0.0
        Inverse-time decay: the rate of step T is lr / (1 + T * decay_factor)
        (torch ``lr_decay``). It applies on top of a schedule.
    epsilon : float, default 1e-6
        Added to sqrt(H) (the ONNX schema's default; torch's ``eps`` is 1e-10).
    norm_coefficient : float, default 0.0
        L2 coefficient (torch ``weight_decay``).
    initial_accumulator_value : float, default 0.0
        Initial fill of H (>= 0), as in torch.
    schedule, contiguous_state, n_threads
        As in :class:`Momentum`.
    """

    _KERNEL = staticmethod(_updates.adagrad)
    _STATES = ("h",)
    _T0 = 0
    _HYPER = {
        "lr": _lr_or_none,
        "decay_factor": _real(lo=0.0),
        "epsilon": _real(lo=0.0),
        "norm_coefficient": _real(),
        "initial_accumulator_value": _real(lo=0.0),
    }

    def __init__(self, params, lr=None, decay_factor=0.0, epsilon=1e-6,
                 norm_coefficient=0.0, initial_accumulator_value=0.0, schedule=None, *,
                 contiguous_state=False, n_threads=None):
        super().__init__(params, dict(lr=lr, decay_factor=decay_factor, epsilon=epsilon,
                                      norm_coefficient=norm_coefficient,
                                      initial_accumulator_value=initial_accumulator_value,
                                      schedule=schedule),
                         contiguous_state=contiguous_state, n_threads=n_threads)

    def _initial(self, group, name):
        return group["initial_accumulator_value"]

    def _kwargs(self, group):
        return dict(decay_factor=float(group["decay_factor"]),
                    epsilon=float(group["epsilon"]),
                    norm_coefficient=float(group["norm_coefficient"]),
                    n_threads=self.n_threads)


class Adam(_Optimizer):
    """Adam (ONNX Adam): T = 1 on the first update (bias-corrected), then
    the step count + 1.

    Not torch.optim.Adam exactly: ONNX adds epsilon before the bias
    correction (ONNX eps = torch eps * sqrt(1 - beta**t)) and applies
    ``norm_coefficient_post`` after the step; with epsilon = 0 and no post
    decay the two agree.

    Parameters
    ----------
    params : list of ndarray, or list of dict
        As in :class:`Momentum`.
    lr : float, optional
        Learning rate (>= 0); may be omitted when ``schedule`` is given.
    alpha, beta : float, default 0.9 and 0.999
        Moment decay rates (torch ``betas``); 0 <= alpha < 1, 0 <= beta <= 1.
    epsilon : float, default 1e-6
    norm_coefficient : float, default 0.0
        L2 coefficient folded into the gradient (torch Adam ``weight_decay``).
    norm_coefficient_post : float, default 0.0
        Decay after the step: ``x *= 1 - norm_coefficient_post``.
    schedule, contiguous_state, n_threads
        As in :class:`Momentum`.
    """

    _KERNEL = staticmethod(_updates.adam)
    _STATES = ("v", "h")
    _T0 = 1
    _HYPER = {
        "lr": _lr_or_none,
        "alpha": _real(lo=0.0, hi=1.0, hi_open=True),
        "beta": _real(lo=0.0, hi=1.0),
        "epsilon": _real(lo=0.0),
        "norm_coefficient": _real(),
        "norm_coefficient_post": _real(),
    }

    def __init__(self, params, lr=None, alpha=0.9, beta=0.999, epsilon=1e-6,
                 norm_coefficient=0.0, norm_coefficient_post=0.0, schedule=None, *,
                 contiguous_state=False, n_threads=None):
        super().__init__(params, dict(lr=lr, alpha=alpha, beta=beta, epsilon=epsilon,
                                      norm_coefficient=norm_coefficient,
                                      norm_coefficient_post=norm_coefficient_post,
                                      schedule=schedule),
                         contiguous_state=contiguous_state, n_threads=n_threads)

    def _kwargs(self, group):
        return dict(alpha=float(group["alpha"]), beta=float(group["beta"]),
                    epsilon=float(group["epsilon"]),
                    norm_coefficient=float(group["norm_coefficient"]),
                    norm_coefficient_post=float(group["norm_coefficient_post"]),
                    n_threads=self.n_threads)
