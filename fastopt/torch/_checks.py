"""The checks of a fastopt.torch step's tensors: a parameter, its gradient
and a state tensor, each raising TypeError/ValueError that names it (the
step calls them before anything is written)."""
from __future__ import annotations

import torch

from .. import _dtypes
from . import _mixed

_DTYPES = _dtypes.torch_dtypes(torch)


def _check_param(f, where, p, mixed=_mixed.NONE, flat=False):
    """A parameter that fastopt can update (raises); mixed: the
    optimizer's mixed-precision options; flat: for the flat layout."""
    if p.device.type != "cpu":
        raise ValueError(f"{f}: {where} is on {p.device}; fastopt updates CPU tensors")
    _mixed.check_param(f, where, p, mixed, flat)
    if p.dtype not in _DTYPES and p.dtype not in _mixed.HALF:
        kind = "complex " if p.is_complex() else ""
        raise TypeError(f"{f}: {where} has dtype {p.dtype}; fastopt updates float32 or "
                        f"float64 tensors, not {kind}{p.dtype}")
    if p.layout != torch.strided or p.is_neg():
        raise TypeError(f"{f}: {where} is not a plain strided tensor")


def _check_grad(f, where, p, g):
    """The gradient g of the parameter p (raises)."""
    if g.is_sparse or g.layout != torch.strided:
        raise TypeError(f"{f}: {where} has a sparse gradient; fastopt needs dense ones")
    if g.dtype != p.dtype:
        raise TypeError(f"{f}: the gradient of {where} has dtype {g.dtype} but the "
                        f"parameter has {p.dtype}")
    if g.shape != p.shape:
        raise ValueError(f"{f}: the gradient of {where} has shape {tuple(g.shape)} but "
                         f"the parameter has {tuple(p.shape)}")
    if not g.is_cpu:        # p is (_check_param); is_cpu makes no device object
        raise ValueError(f"{f}: the gradient of {where} is on {g.device}")


def _check_state(f, where, p, name, s, dtype=None):
    """A state tensor of its parameter's device and shape and of dtype
    (None: the parameter's) (raises)."""
    lab = f"state[{name!r}] of {where}"
    if s is None:
        raise ValueError(f"{f}: {lab} is missing")
    if not isinstance(s, torch.Tensor):
        raise TypeError(f"{f}: {lab} must be a tensor, got {type(s).__name__}")
    if s.layout != torch.strided or s.is_neg() or s.is_conj():
        raise TypeError(f"{f}: {lab} is not a plain strided tensor")
    if s.device != p.device:
        raise ValueError(f"{f}: {lab} is on {s.device} but the parameter is on "
                         f"{p.device}")
    if s.dtype != (p.dtype if dtype is None else dtype):
        if dtype is None or dtype == p.dtype:
            raise TypeError(f"{f}: {lab} has dtype {s.dtype} but the parameter has "
                            f"{p.dtype}")
        raise TypeError(f"{f}: {lab} has dtype {s.dtype}; the optimizer keeps it in "
                        f"{dtype} (master_weights, state_dtype)")
    if s.shape != p.shape:
        raise ValueError(f"{f}: {lab} has shape {tuple(s.shape)} but the parameter has "
                         f"{tuple(p.shape)} (a state_dict of another model?)")
