"""Mixed precision in fastopt.torch: ``master_weights=True`` (bfloat16 or
float16 parameters updated through float32 masters, which the optimizer
keeps in ``state[p]['master_param']`` and rounds into the parameter in the
same C pass), ``state_dtype="bfloat16"`` (the rule's states kept in
bfloat16, rounded by the step as docs/semantics.md, "bfloat16 states",
says), and, without either, 16-bit parameters updated in their own type
as torch's fused CPU kernels do (states of the parameter's dtype, the
arithmetic in float32, each stored value rounded to nearest). The
options' checks, the dtypes each tensor of a parameter has, the NumPy view
of a tensor of any of them, and the repair of what torch's
``load_state_dict`` casts to the parameter's dtype."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .. import _dtypes, _rules, _step

#: the state entry holding a 16-bit parameter's float32 master
MASTER = "master_param"
#: torch dtype -> NumPy dtype of the 16-bit types a float32 master is copied to
HALF = {getattr(torch, d.torch): d.numpy for d in _dtypes.DTYPES
        if d.numpy is not None and d.numpy in _dtypes.COPIES_OF[np.dtype(np.float32)]}
_BF16 = torch.bfloat16
#: the names state_dtype takes
_STATE_DTYPES = {"float32": torch.float32, "bfloat16": _BF16}


class Mixed(NamedTuple):
    """The checked options; the default (nothing mixed) is ``NONE``."""
    master_weights: bool = False
    state_dtype: torch.dtype | None = None     # None: the parameter's (or master's)
    flags: int = 0                             # the group flags of state_rounding
    seed: int = 0
    own_half: bool = False      # 16-bit parameters without masters step in their type
    q8: bool = False            # state_dtype="int8-blockwise": 8-bit states (_q8.py)
    min_8bit_size: int = 4096   # ... of parameters of at least this many elements

    @property
    def active(self) -> bool:
        """Does a step write a copy, or keep states of another dtype than
        their parameter's (with keys)? Such optimizers refuse flat=True."""
        return self.master_weights or self.state_dtype is _BF16

    def master_of(self, p) -> bool:
        """Does parameter p step through a float32 master?"""
        return self.master_weights and p.dtype in HALF

    def key(self, k) -> int:
        """The stochastic rounding key of the optimizer's k-th parameter
        (in group order, whether it steps or not)."""
        return _step.key(self.seed, k)

    def run_args(self, copies, keys) -> dict:
        """_step.run's copies and seed for a step over tensors with those
        copies (None where a parameter is its own master) and keys."""
        out = {}
        if any(c is not None for c in copies):
            out["copies"] = copies
        if self.state_dtype is _BF16 or self.flags & _step.ROUNDING["stochastic"]:
            out["seed"] = tuple(keys)
        if self.own_half:
            out["half_params"] = True
        return out

    def states_dtype(self, p) -> torch.dtype:
        """The dtype of p's rule states."""
        if self.state_dtype is not None:
            return self.state_dtype
        return torch.float32 if self.master_of(p) else p.dtype


NONE = Mixed()


def check(f, cls, master_weights, state_dtype, state_rounding, seed, flat) -> Mixed:
    """The mixed-precision options of the drop-in cls (raises)."""
    if not isinstance(master_weights, bool):
        raise TypeError(f"{f}: master_weights must be True or False, got "
                        f"{type(master_weights).__name__}")
    q8 = isinstance(state_dtype, str) and state_dtype == "int8-blockwise"
    dt = None if q8 else state_dtype
    if isinstance(dt, str) or (dt is not None and dt not in _STATE_DTYPES.values()):
        dt = _STATE_DTYPES.get(dt) if isinstance(dt, str) else None
        if dt is None and state_dtype is not None:
            raise ValueError(f"{f}: state_dtype must be None, 'float32', 'bfloat16' (or "
                             f"torch.float32, torch.bfloat16) or 'int8-blockwise', got "
                             f"{state_dtype!r}")
    flags = _step.rounding_flags(f, state_rounding)
    seed = _step.check_seed(f, seed)
    # 16-bit parameters in their own type: every rule but LAMB and LARS
    # (their trust pass reads float parameters); their states round to
    # nearest as torch's do unless state_dtype or state_rounding says
    # otherwise
    own = cls._ROW in _rules.ID and _rules.RULES[_rules.ID[cls._ROW]].own16
    if own and not flags and dt is None:
        flags = _step.ROUNDING["nearest"]
    out = Mixed(master_weights, dt, flags, seed, own, q8)
    if q8 and (cls._ROW not in _rules.ID or _rules.RULES[_rules.ID[cls._ROW]].q8 < 0):
        takes = ", ".join(r.name.replace("_torch", "") for r in _rules.RULES if r.q8 >= 0)
        raise ValueError(f"{f}: state_dtype='int8-blockwise' is not available for "
                         f"{cls.__name__} (8-bit states: the rules {takes})")
    if q8 and master_weights:
        raise ValueError(f"{f}: state_dtype='int8-blockwise' keeps the states of float32 "
                         f"parameters; it does not combine with master_weights")
    if (master_weights or dt is not None or q8) and flat:
        raise ValueError(f"{f}: flat=True does not combine with master_weights or "
                         f"state_dtype; leave flat at False")
    return out


def check_rounded(f, mixed, state_rounding, groups) -> None:
    """state_rounding other than 'auto' needs 16-bit states to round: some
    parameter with state_dtype='bfloat16', or a 16-bit one stepping in its
    own type (raises ValueError rather than ignore the option)."""
    if state_rounding == "auto" or mixed.state_dtype is _BF16:
        return
    if any(p.dtype in HALF and not mixed.master_weights for g in groups for p in g["params"]):
        return
    raise ValueError(f"{f}: state_rounding={state_rounding!r} rounds 16-bit states, and "
                     f"this optimizer keeps none (its states are float32 or float64, or "
                     f"8-bit): pass state_dtype='bfloat16', or leave state_rounding at "
                     f"'auto'")


def check_param(f, where, p, mixed, flat=False) -> None:
    """A 16-bit parameter steps through a master, or in its own type where
    the rule takes that (contiguous, with states of its dtype rounded as
    its dtype allows); the states' dtype fits the parameter's (raises).
    flat: for flat=True's layout, which takes 16-bit parameters in their
    own type with states rounded to nearest (stochastic rounding keys each
    tensor apart; the layout joins them)."""
    if p.dtype in HALF and flat and not mixed.own_half:
        raise TypeError(f"{f}: {where} has dtype {p.dtype}; flat=True lays out float32 or "
                        f"float64 parameters, or 16-bit ones of the rules that update "
                        f"them in their own type")
    if p.dtype in HALF and flat and mixed.flags & _step.ROUNDING["stochastic"]:
        raise ValueError(f"{f}: {where} has dtype {p.dtype}; flat=True rounds 16-bit "
                         f"states to nearest (stochastic rounding keys each tensor apart, "
                         f"the layout joins them): leave state_rounding at 'auto'")
    if mixed is not None and mixed.q8 and p.dtype != torch.float32:
        raise TypeError(f"{f}: {where} has dtype {p.dtype}; state_dtype='int8-blockwise' "
                        f"keeps the states of float32 parameters")
    if p.dtype in HALF and not mixed.master_weights:
        if not mixed.own_half:
            raise TypeError(f"{f}: {where} has dtype {p.dtype}; this optimizer updates "
                            f"float32 or float64 tensors, or {p.dtype} ones through "
                            f"float32 masters (pass master_weights=True)")
        if mixed.state_dtype is not None and mixed.state_dtype is not p.dtype:
            name = str(mixed.state_dtype).removeprefix("torch.")
            raise TypeError(f"{f}: {where} has dtype {p.dtype}; state_dtype={name!r} "
                            f"keeps the states of float32 or bfloat16 parameters (or "
                            f"pass master_weights=True)")
        if p.dtype is not _BF16 and mixed.flags & _step.ROUNDING["stochastic"]:
            raise ValueError(f"{f}: {where} has dtype {p.dtype}, whose states round to "
                             f"nearest only; state_rounding='stochastic' needs bfloat16 "
                             f"states")
        if not p.is_contiguous() and not flat:      # (the layout makes it contiguous)
            raise ValueError(f"{f}: {where} ({p.dtype}) is not contiguous; 16-bit "
                             f"parameters are updated in place when contiguous only")
    if mixed is not None and mixed.state_dtype is not None and p.dtype == torch.float64:
        name = str(mixed.state_dtype).removeprefix("torch.")
        raise TypeError(f"{f}: {where} has dtype {p.dtype}; state_dtype={name!r} keeps "
                        f"the states of float32 parameters (or masters)")


def numpy_of(t):
    """A NumPy view of tensor t's memory (bfloat16 as ml_dtypes.bfloat16,
    which torch's ``.numpy()`` does not make)."""
    t = t.detach()
    if t.dtype is _BF16:
        return t.view(torch.int16).numpy().view(HALF[_BF16])
    return t.numpy()


def new_master(p):
    """A float32 master of the 16-bit parameter p, in its layout."""
    return p.detach().to(torch.float32, memory_format=torch.preserve_format, copy=True)


def retype(new: dict, names, dtype) -> dict:
    """The new states with the rule's (names) of the dtype given."""
    return {k: (v.to(dtype) if k in names and isinstance(v, torch.Tensor)
                and v.dtype != dtype else v) for k, v in new.items()}


def saved_tensors(opt, state_dict) -> dict:
    """Before torch's load_state_dict casts every floating state to its
    parameter's dtype: (parameter position, key) -> the saved tensor, for
    every tensor entry but the count."""
    if not (opt._mixed.active or opt._mixed.own_half) or not isinstance(state_dict, dict):
        return {}
    saved_ids = [i for g in state_dict.get("param_groups", ()) for i in g.get("params", ())]
    params = [p for g in opt.param_groups for p in g["params"]]
    st = state_dict.get("state", {})
    return {(pos, k): v for pos, (i, p) in enumerate(zip(saved_ids, params))
            for k, v in (st.get(i) or {}).items()
            if isinstance(v, torch.Tensor) and k != "step"}


def restore(opt, saved: dict) -> None:
    """After torch's load_state_dict: the saved entries again in the dtypes
    the options keep them in: a master in float32, the rule's states in
    the states' dtype, anything else (a carried scalar, which a 16-bit
    model in its own type keeps in float32 too) in its own."""
    if not saved:
        return
    params, names = [], []
    for gi, group in enumerate(opt.param_groups):
        try:        # (hyperparameters the step refuses: it will say so)
            rule_names = opt._group(opt._checked("", group, gi))[1]
        except (TypeError, ValueError):
            rule_names = ()
        params += group["params"]
        names += [rule_names] * len(group["params"])
    for (pos, k), v in saved.items():
        p = params[pos]
        if not opt._mixed.active and p.dtype not in HALF:
            continue            # (a float model's entries as torch loads them)
        dt = torch.float32 if k == MASTER else \
            opt._mixed.states_dtype(p) if k in names[pos] else v.dtype
        if dt != p.dtype:
            opt.state[p][k] = v.detach().to(device=p.device, dtype=dt, copy=True)


def amp_scale(f, attrs, grad_scale):
    """The gradient scale of a step that torch.amp.GradScaler called (it
    sets the optimizer's ``grad_scale``, its scale or None when
    ``unscale_`` ran, and ``found_inf``, non-zero when a gradient was not
    finite): False if found_inf says skip, else the scale to divide by
    (times the step's own grad_scale), or grad_scale itself without them."""
    found = attrs.get("found_inf")
    if found is None and "grad_scale" not in attrs:
        return grad_scale
    if isinstance(found, torch.Tensor):
        found = float(found.sum())
    if found:
        return False
    scale = attrs.get("grad_scale")
    if scale is None:
        return grad_scale
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError(f"{f}: the GradScaler's grad_scale must be one number, got "
                             f"shape {tuple(scale.shape)}")
        scale = float(scale)
    return scale if grad_scale is None else scale * grad_scale


def sync_masters(opt) -> list:
    """Before a step with master weights: a 16-bit parameter a torch
    operation wrote since this optimizer's last step (in place: clamp_, an
    init, ``model.load_state_dict``), or whose ``p.data`` was replaced by
    other values, gives its float32 master its value, so that the step goes
    on from the edited weights as torch.optim's would; so does one whose
    master does not round to it when first seen (a ``master_param`` from a
    state dict older than the weights). Per parameter, ``opt._master_seen``
    keeps the version and address torch gave it at the last check (the step
    writes the parameter's memory without a torch op, so it moves neither;
    a write through another view of that memory goes unseen). Returns
    (master, its old value) for :func:`unsync_masters`, should the step
    raise."""
    undo = []
    if not opt._mixed.master_weights:
        return undo
    seen = opt._master_seen
    for group in opt.param_groups:
        for p in group["params"]:
            if p.dtype not in HALF:
                continue
            mark = (p._version, p.data_ptr())
            rec = seen.get(id(p))
            if rec is not None and rec[0] is p and rec[1] == mark:
                continue
            st = opt.state.get(p)
            x = st.get(MASTER) if st else None
            if type(x) is not torch.Tensor or x.dtype != torch.float32 or x.shape != p.shape:
                continue                # (none yet, or one the step's checks refuse)
            written = rec is not None and rec[0] is p and rec[1][0] != mark[0]
            if written or not torch.equal(x.to(p.dtype), p):
                undo.append((x, x.clone()))
                x.copy_(p)
            seen[id(p)] = (p, mark)
    return undo


def unsync_masters(opt, undo) -> None:
    """A step that raised leaves the masters as they were (and checks them
    again at the next one)."""
    for x, old in undo:
        x.copy_(old)
    if undo:
        opt._master_seen.clear()
