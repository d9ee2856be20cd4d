"""The optimizers' states stored apart: ``state_dtype="bfloat16"`` keeps
the states of float32 parameters (or masters) in bfloat16, widened and
rounded back by every step (docs/semantics.md, "bfloat16 states");
``state_dtype="int8-blockwise"`` keeps them in bitsandbytes' 8-bit
blockwise format (``fastopt.State8bit``; "8-bit states"), those of
parameters under ``MIN_8BIT_SIZE`` elements, and of a group with
``"state_dtype": "float32"``, in float32, as bitsandbytes does. Which
dtype a state array has, the checks of the option, and each tensor's
stochastic rounding key."""
from __future__ import annotations

import numpy as np

from .. import _dtypes, _q8, _rules, _step

#: state_dtype's name of 8-bit blockwise states
Q8 = "int8-blockwise"
#: parameters with fewer elements keep float32 states under Q8
#: (bitsandbytes' min_8bit_size)
MIN_8BIT_SIZE = 4096

#: the names state_dtype takes, and their dtypes (None: the parameter's own)
_NAMES = {"float32": np.dtype(np.float32),
          "bfloat16": next(d.numpy for d in _dtypes.DTYPES if d.name == "BF16")}


def check_dtype(f, state_dtype):
    """None, or the NumPy dtype of "float32"/"bfloat16" (a dtype or type
    naming one of them is taken too)."""
    if state_dtype is None or (isinstance(state_dtype, str) and state_dtype == Q8):
        return None
    if isinstance(state_dtype, str) and state_dtype in _NAMES:
        return _NAMES[state_dtype]
    try:
        dt = np.dtype(state_dtype)
    except (TypeError, ValueError, KeyError):
        dt = None
    if dt is not None and dt in _NAMES.values():
        return dt
    raise ValueError(f"{f}: state_dtype must be None, 'float32', 'bfloat16' or "
                     f"'{Q8}', got {state_dtype!r}")


def check_rounded(opt, f, state_rounding) -> None:
    """state_rounding other than 'auto' needs 16-bit states to round
    (state_dtype='bfloat16', or 16-bit parameters' own states): raises
    ValueError rather than ignore the option."""
    if state_rounding == "auto" or opt._state_dtype == _NAMES["bfloat16"]:
        return
    if any(isinstance(a, np.ndarray) and a.dtype.itemsize == 2
           for gs in opt._state for arrays in gs.values() for a in arrays):
        return
    raise ValueError(f"{f}: state_rounding={state_rounding!r} rounds 16-bit states, and "
                     f"this optimizer keeps none (its states are float32 or float64, or "
                     f"8-bit): pass state_dtype='bfloat16', or leave state_rounding at "
                     f"'auto'")


def is_q8(state_dtype) -> bool:
    """Does state_dtype ask for 8-bit blockwise states?"""
    return isinstance(state_dtype, str) and state_dtype == Q8


def _row(opt):
    """The C rule row of opt's update (its name), or None."""
    rule = getattr(opt, "_RULE", None)
    return getattr(rule, "row", rule)


def check_q8(opt, f) -> None:
    """8-bit states: a rule that has them and, in each group that keeps
    them (not 'state_dtype': 'float32'), float32 parameters (or masters),
    no AGC, and options that use no more states than the rule has 8-bit
    forms of (its row's q8n)."""
    row = _row(opt)
    if row not in _rules.ID or _rules.RULES[_rules.ID[row]].q8 < 0:
        takes = ", ".join(r.name for r in _rules.RULES if r.q8 >= 0)
        raise ValueError(f"{f}: state_dtype='{Q8}' is not available for "
                         f"{type(opt).__name__} (8-bit states: the rules {takes})")
    rule = _rules.RULES[_rules.ID[row]]
    for gi, group in enumerate(opt.param_groups):
        if not group_eight(opt, group):
            continue
        for i, p in enumerate(group["params"]):
            if p.dtype.newbyteorder("=") != np.float32:
                raise ValueError(f"{f}: state_dtype='{Q8}' needs float32 parameters (or "
                                 f"master_weights=True); param_groups[{gi}]['params'][{i}] "
                                 f"is {p.dtype}")
        if group.get("clipping") is not None:
            raise ValueError(f"{f}: state_dtype='{Q8}' does not combine with "
                             f"param_groups[{gi}]'s clipping (AGC)")
        # the group as the step will give it to the core, for the states it uses
        used = _rules.needs(with_flags(opt, opt._group_tuple(
            dict(opt._kwargs(group), lr=0.0, t=opt._T0))))
        if used > rule.q8n:
            raise ValueError(f"{f}: state_dtype='{Q8}': the options of param_groups[{gi}] "
                             f"{_q8.beyond(rule, used)}")


def unsigned(opt, name) -> bool:
    """Is state ``name`` of opt's rule kept on the unsigned map?"""
    row = _rules.RULES[_rules.ID[_row(opt)]]
    return name in row.states and bool(row.q8 >> row.states.index(name) & 1)


def group_eight(opt, group) -> bool:
    """Does the group keep 8-bit states (the optimizer's state_dtype, unless
    the group's own says 'float32'; checked when the groups were made)?"""
    return _q8.group_keeps_8bit(opt._fname(), "a parameter group", group.get("state_dtype"),
                                opt._q8)


def eight(opt, group, p, k) -> bool:
    """Are the states of parameter p (params[k], of this group) 8-bit:
    :func:`group_eight`, p of at least MIN_8BIT_SIZE elements? (A sharded
    optimizer's inner one steps pieces of tensors: its ``_whole_sizes[k]``
    is the size of the tensor params[k] is cut from, which decides.)"""
    whole = getattr(opt, "_whole_sizes", None)
    size = p.size if whole is None else whole[k]
    return group_eight(opt, group) and size >= MIN_8BIT_SIZE


def eights(opt) -> list:
    """:func:`eight` of every parameter, in the order of opt.params."""
    pairs = [(g, p) for g in opt.param_groups for p in g["params"]]
    return [eight(opt, g, p, k) for k, (g, p) in enumerate(pairs)]


def new_state(opt, group, p, k, name, fill=0.0):
    """A fresh state of parameter p (params[k]) of group: a State8bit
    (:func:`eight`), else None to let the caller allocate an array of its
    dtype."""
    if not eight(opt, group, p, k):
        return None
    if fill:
        return _q8.State8bit.quantize(np.full(p.shape, fill, np.float32),
                                      not unsigned(opt, name))
    return _q8.State8bit.zeros(p.shape, not unsigned(opt, name))


def check_apart(opt, f) -> None:
    """States of another dtype than their parameters' are bfloat16 ones of
    float32 parameters, of a rule that stores them apart, without AGC."""
    if opt._q8:
        check_q8(opt, f)
        return
    dt = opt._state_dtype
    if dt is None:
        return
    for gi, group in enumerate(opt.param_groups):
        for i, p in enumerate(group["params"]):
            native = p.dtype.newbyteorder("=")
            if dt != native and (native != np.float32 or dt != _NAMES["bfloat16"]):
                raise ValueError(f"{f}: state_dtype={dt.name!r} needs float32 parameters "
                                 f"(or master_weights=True); param_groups[{gi}]['params']"
                                 f"[{i}] is {p.dtype}")
        if dt == _NAMES["bfloat16"] and group.get("clipping") is not None:
            raise ValueError(f"{f}: state_dtype='bfloat16' does not combine with AGC "
                             f"clipping (param_groups[{gi}] clips)")


def dtype_of(opt, p) -> np.dtype:
    """The dtype of parameter p's states."""
    return opt._state_dtype if opt._state_dtype is not None else p.dtype.newbyteorder("=")


def apart(opt) -> bool:
    """Does opt keep states of another dtype than their parameters'
    (bfloat16 ones, stored apart)?"""
    return opt._state_dtype is not None and opt._state_dtype != np.float32


def keys(opt, where):
    """The stochastic rounding keys of the work list's tensors, params[k]
    for k in where: seed + k * KEY_STEP (mod 2**64), whichever tensors a
    step leaves out (0, no keys, when no state is stored apart)."""
    if not apart(opt):
        return 0
    return tuple(_step.key(opt.seed, k) for k in where)


def with_flags(opt, group):
    """A fused group tuple with the optimizer's state_rounding flags."""
    if group is None or not opt._round_flags:
        return group
    return (group[0], group[1] | opt._round_flags) + group[2:]


def read_only(opt, params: bool) -> str | None:
    """Before a checkpoint is restored: the first array it would write that
    is read-only (the states, with ``params`` the parameters, the 16-bit
    parameters master weights rewrite), named, or None; so that nothing
    is half restored."""
    arrays = [(f"params[{i}]", p) for i, p in enumerate(opt.params)] if params else []
    for name, states in opt.state.items():
        for i, a in enumerate(states):
            parts = (a.codes, a.absmax) if isinstance(a, _q8.State8bit) else (a,)
            arrays += [(f"state[{name!r}][{i}]", b) for b in parts]
    arrays += [(f"the 16-bit params[{i}]", c) for i, c in enumerate(opt._copies or ())
               if c is not None]
    return next((label for label, a in arrays if not a.flags.writeable), None)
