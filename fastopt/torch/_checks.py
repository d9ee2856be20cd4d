"""The checks of a fastopt.torch step's tensors: a parameter, its gradient
and a state tensor, each raising TypeError/ValueError that names it (the
step calls them before anything is written), and of the parameter lists an
optimizer is given (each tensor once; what flat=True lays out)."""
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


def _check_once(f, gi, ps):
    """No tensor twice in the params list ps of param group gi (raises
    ValueError: a step could not update it; torch warns and steps it twice)."""
    first = {}
    for j, p in enumerate(ps):
        if not isinstance(p, torch.Tensor):
            continue                    # torch says what is wrong with it
        k = first.setdefault(id(p), j)
        if k != j:
            raise ValueError(f"{f}: param group {gi} lists one tensor twice, as params[{k}] "
                             f"and params[{j}]; a parameter may appear only once")


def _check_flat(f, plists, mixed, others=()):
    """The parameters (lists plists) that flat=True lays out, checked
    before any moves: what the step accepts (mixed: the optimizer's
    mixed-precision options), and none sharing memory with another
    parameter (each that moves gets its own place in the buffers, so the
    sharing would end). others: the lists already laid out."""
    spans = []
    for k, plist in enumerate(plists):
        for i, p in enumerate(plist):
            if not isinstance(p, torch.Tensor):
                continue                # torch says what is wrong with it
            w = f"param_groups[{len(others) + k}]['params'][{i}]"
            if p.requires_grad:
                _check_param(f, w, p, mixed, flat=True)
            spans.append(_span(p, w, p.requires_grad))
    spans += [_span(p, "a parameter of another group", False)
              for plist in others for p in plist if isinstance(p, torch.Tensor)]
    spans = sorted(s for s in spans if s[1] > s[0])
    for j, (_, hi, w, moves) in enumerate(spans):
        for lo2, _, w2, moves2 in spans[j + 1:]:
            if lo2 >= hi:
                break
            if moves or moves2:
                raise ValueError(f"{f}: with flat=True, {w2 if moves2 else w} shares memory "
                                 f"with {w if moves2 else w2}; the flat buffers would give "
                                 f"each its own copy")


def _span(p, where, moves):
    """The bytes tensor p covers (its strides may leave gaps), and its labels."""
    n = p.numel() and 1 + sum((d - 1) * abs(s) for d, s in zip(p.shape, p.stride()))
    lo = p.data_ptr() - p.element_size() * sum(
        (d - 1) * -s for d, s in zip(p.shape, p.stride()) if s < 0)
    return (lo, lo + n * p.element_size(), where, moves)
