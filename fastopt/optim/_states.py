"""The optimizers' states stored apart: ``state_dtype="bfloat16"`` keeps
the states of float32 parameters (or masters) in bfloat16, widened and
rounded back by every step (docs/semantics.md, "bfloat16 states"). Which
dtype a state array has, the checks of the option, and each tensor's
stochastic rounding key."""
from __future__ import annotations

import numpy as np

from .. import _dtypes, _rules, _step

#: the names state_dtype takes, and their dtypes (None: the parameter's own)
_NAMES = {"float32": np.dtype(np.float32),
          "bfloat16": next(d.numpy for d in _dtypes.DTYPES if d.name == "BF16")}


def check_dtype(f, state_dtype):
    """None, or the NumPy dtype of "float32"/"bfloat16" (a dtype or type
    naming one of them is taken too)."""
    if state_dtype is None:
        return None
    if isinstance(state_dtype, str) and state_dtype in _NAMES:
        return _NAMES[state_dtype]
    try:
        dt = np.dtype(state_dtype)
    except (TypeError, ValueError, KeyError):
        dt = None
    if dt is not None and dt in _NAMES.values():
        return dt
    raise ValueError(f"{f}: state_dtype must be None, 'float32' or 'bfloat16', got "
                     f"{state_dtype!r}")


def check_apart(opt, f) -> None:
    """States of another dtype than their parameters' are bfloat16 ones of
    float32 parameters, of a rule that stores them apart, without AGC."""
    dt = opt.state_dtype
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
    rule = getattr(opt, "_RULE", None)
    row = getattr(rule, "row", rule)      # a table rule's C row, or the row's name
    if dt == _NAMES["bfloat16"] and row in _rules.ID and _rules.ID[row] in \
            _rules.OWN_TYPE_STATES:
        raise ValueError(f"{f}: state_dtype='bfloat16' is not available for "
                         f"{type(opt).__name__}: its trust pass reads the states in "
                         f"their parameters' dtype")


def dtype_of(opt, p) -> np.dtype:
    """The dtype of parameter p's states."""
    return opt.state_dtype if opt.state_dtype is not None else p.dtype.newbyteorder("=")


def apart(opt) -> bool:
    """Does opt keep states of another dtype than their parameters'
    (bfloat16 ones, stored apart)?"""
    return opt.state_dtype is not None and opt.state_dtype != np.float32


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
