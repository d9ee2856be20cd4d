"""Checkers for the optimizers' hyperparameters, and small array helpers.

Each checker has the signature ``check(fname, label, value) -> value`` (the
normalised value) so that a table ``{name: checker}`` drives the validation
of every parameter group. The scalar rules themselves live in
:mod:`fastopt._validation`; these adapt them to the table's signature.
"""
from __future__ import annotations

import numpy as np

from .. import _step
from .. import _validation as _v


def real(lo=None, hi=None, hi_open=False):
    """A checker for a finite real in [lo, hi] (or [lo, hi))."""
    def check(fname, label, value):
        return _v.check_real(fname, label, value, low=lo, high=hi, high_open=hi_open)
    return check


def positive(fname, label, value) -> float:
    """A finite real > 0 (a clipping threshold, a gradient scale)."""
    return _v.check_real(fname, label, value, low=0.0, low_open=True)


def as_bool(fname, label, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fname}: {label} must be True or False, got {type(value).__name__}")
    return bool(value)


def decay_mode(fname, label, value) -> str:
    """Adam's and AdamW's decay_mode: 'torch' or 'bnb' (fastopt._step.DECAY_MODES)."""
    _step.decay_flags(fname, value, label)
    return value


def layout(fname, label, value):
    return _v.check_layout(fname, value, name=label)


def lr_or_none(fname, label, value):
    if value is None:
        return None
    return _v.check_lr(fname, value, name=label)


def clipping(fname, label, value):
    """None, a positive float, or a per-tensor list of positive floats / None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [None if c is None else positive(fname, f"{label}[{i}]", c)
                for i, c in enumerate(value)]
    return positive(fname, label, value)


def schedule(fname, label, value):
    if value is not None and not callable(value):
        raise TypeError(f"{fname}: {label} must be a callable step -> lr (or None), "
                        f"got {type(value).__name__}")
    return value


# ------------------------------------------------------------------ arrays

def native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=")


def order(x: np.ndarray) -> str:
    """The memory order to give x's states, so the fast path takes them."""
    return "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"


def all_finite(a: np.ndarray) -> bool:
    """Exact test that every element of a float array is finite.

    One pass in the common case: NaN and +-Inf propagate through IEEE
    addition (Inf + -Inf is NaN), so a finite sum proves that every element is
    finite. A non-finite sum may also come from an overflow of finite values
    (float32 sums overflow from ~3.4e38), so only then is every element tested.
    """
    if np.isfinite(np.add.reduce(a, axis=None)):
        return True
    return bool(np.isfinite(a).all())


def from_spec(spec: dict) -> dict:
    """A rule's hyperparameter spec (fastopt._rules: "lr", "bool" or the
    bounds of a real) as a table of checkers."""
    def real_of(bounds):
        def check(fname, label, value):
            return _v.check_real(fname, label, value, **bounds)
        return check
    named = {"lr": lr_or_none, "bool": as_bool, "betas": betas, "betas3": betas3,
             "warmup": _v.check_warmup}
    return {k: named[kind] if isinstance(kind, str) else real_of(kind)
            for k, kind in spec.items()}


def betas(fname, label, value):
    """A pair (beta1, beta2), each in [0, 1)."""
    try:
        b1, b2 = value
    except (TypeError, ValueError):
        raise TypeError(f"{fname}: {label} must be a pair (beta1, beta2), got "
                        f"{_v._got(value)}") from None
    check = real(lo=0.0, hi=1.0, hi_open=True)
    return (check(fname, f"{label}[0]", b1), check(fname, f"{label}[1]", b2))


def betas3(fname, label, value):
    """A triple (beta1, beta2, beta3), each in [0, 1) (AdEMAMix's)."""
    try:
        b1, b2, b3 = value
    except (TypeError, ValueError):
        raise TypeError(f"{fname}: {label} must be a triple (beta1, beta2, beta3), got "
                        f"{_v._got(value)}") from None
    check = real(lo=0.0, hi=1.0, hi_open=True)
    return tuple(check(fname, f"{label}[{i}]", b) for i, b in enumerate((b1, b2, b3)))


#: The first update count a step may not take: after a step at it, the next
#: count (steps + T0) would be 2**63, beyond the int64 a checkpoint holds.
LAST_T = 2**63 - 1


def check_update_count(f, t) -> None:
    """A step at update count t leaves a count its checkpoint holds (raises
    ValueError before anything is written; fastopt.optim's and
    fastopt.distributed's steps)."""
    if t >= LAST_T:
        raise ValueError(f"{f}: the update count would reach 2**63 - 1, and the next one "
                         f"2**63, beyond int64; this optimizer has taken its last step")
