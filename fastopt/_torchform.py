"""Public functions of the whole step (issue 13): the global norm, in-place
gradient clipping, and the torch-form update rules (SGD, Adagrad, Adam,
AdamW as torch.optim computes them) with unscaling and clipping fused in.

Every update function takes the same step-wide options and returns a
:class:`~fastopt.StepInfo`; see ``fastopt._step`` for the order of the
operations inside a step and docs/semantics.md for the math.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np

from . import _ext
from . import _validation as _v
from ._dispatch import accept
from ._step import (
    AMSGRAD,
    CLIP_GRADS,
    GLOBAL_NORM,
    MAXIMIZE,
    NESTEROV,
    RULES,
    StepInfo,
    check_norm_type,
    check_options,
    group_tuple,
    run,
)

ArrayOrList = Union[np.ndarray, Sequence[np.ndarray]]

_OPTIONS_DOC = """
    grad_scale : float, optional
        Divide every gradient by this (> 0) first, in the gradient's dtype
        (undo a loss scale; a power of two costs nothing extra).
    max_grad_norm : float, optional
        Clip by the global norm of all the (unscaled) gradients of the call
        to at most this (> 0; inf: measure only).
    norm_type : float, default 2.0
        2.0 or math.inf: the norm measured and clipped.
    clip_convention : {"torch", "optax"}, default "torch"
        torch's ``clip_grad_norm_``: multiply by
        ``min(1, max_grad_norm / (norm + 1e-6))``; optax's
        ``clip_by_global_norm``: ``(g / norm) * max_grad_norm`` where
        ``norm >= max_grad_norm``.
    clip_value : float, optional
        Then clamp every gradient value to [-clip_value, clip_value]
        (torch's ``clip_grad_value_``).
    skip_if_nonfinite : bool, default False
        If some unscaled gradient value is NaN or infinite, write nothing
        and return ``applied=False``.
    n_threads : int, optional
        Threads for the C call (None: the current default, -1: all cores).

    Returns
    -------
    StepInfo
        ``(applied, norm, finite)``: whether the update was written, the
        global norm of the unscaled gradients (before clipping; NaN unless
        the call checks or clips: ``max_grad_norm=math.inf`` measures
        only) and whether they were all finite.
"""


def _as_list(x):
    return [x] if isinstance(x, np.ndarray) else list(x)


def _lists(f, params, grads, *states):
    """Lists of equal length (a single array counts as a list of one)."""
    if not isinstance(params, (np.ndarray, list, tuple)):
        raise TypeError(f"{f}: params must be a numpy.ndarray or a list/tuple of "
                        f"numpy.ndarray, got {_v._got(params)}")
    out = [_as_list(params)]
    for name, a in (("grads", grads),) + states:
        if a is None:
            out.append([None] * len(out[0]))
            continue
        if not isinstance(a, (np.ndarray, list, tuple)):
            raise TypeError(f"{f}: {name} must be a numpy.ndarray or a list/tuple of "
                            f"numpy.ndarray, got {_v._got(a)}")
        if isinstance(a, (list, tuple)) and _v._numbers(a):
            raise TypeError(f"{f}: {name} is a {type(a).__name__} of numbers, not of arrays; "
                            f"convert it with np.asarray(..., dtype=...) to an array of its "
                            f"parameter's dtype")
        a = _as_list(a)
        if len(a) != len(out[0]):
            raise ValueError(f"{f}: {name} has {len(a)} tensors but params has "
                             f"{len(out[0])}; every list must have one entry per "
                             f"parameter")
        out.append(a)
    return out


def _step_count(f, step):
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"{f}: step must be an integer, got {type(step).__name__}")
    if not 1 <= step < 2**63:
        raise ValueError(f"{f}: step must be >= 1 (torch's count after this step's "
                         f"increment), got {step}")
    return int(step)


def _fused(f, params, grads, states, group, names, n_threads, **options):
    opts = check_options(f, **options)
    lists = _lists(f, params, grads, *zip(names, states))
    xs, gs, sts = lists[0], lists[1], lists[2:] + [[None] * len(lists[0])] * (5 - len(lists))
    n = len(xs)

    def labels():                      # only built if the fast path declines
        out = {"x": [f"params[{i}]" for i in range(n)], "g": [f"grads[{i}]" for i in range(n)]}
        for k, name in enumerate(names):
            out[f"s{k + 1}"] = [f"{name}[{i}]" for i in range(n)]
        return out
    return run(f, xs, gs, sts[:3], (0,) * n, (group,), opts, n_threads, labels)


_STEP_OPTIONS = ("grad_scale", "max_grad_norm", "norm_type", "clip_convention",
                 "clip_value", "skip_if_nonfinite")


def _fused_form(f, a, states, group, names):
    """_fused for a torch-form function whose arguments are the dict a."""
    return _fused(f, a["params"], a["grads"], states, group, names, a["n_threads"],
                  **{k: a[k] for k in _STEP_OPTIONS})


def step_options(grad_scale, max_grad_norm, norm_type, clip_convention, clip_value,
                 skip_if_nonfinite) -> dict:
    """The step options of an ONNX rule's call as a dict, empty when none is
    set (the plain update, returning None)."""
    if (grad_scale is None and max_grad_norm is None and clip_value is None
            and skip_if_nonfinite is False and clip_convention == "torch"
            and (norm_type == 2 if isinstance(norm_type, (int, float)) else False)):
        return {}
    return {"grad_scale": grad_scale, "max_grad_norm": max_grad_norm,
            "norm_type": norm_type, "clip_convention": clip_convention,
            "clip_value": clip_value, "skip_if_nonfinite": skip_if_nonfinite}


def onnx_fused(f, x, g, states, names, group, n_threads, options) -> StepInfo:
    """An ONNX rule (fastopt.momentum/adagrad/adam) with the step options:
    its scalars checked by the caller into ``group``."""
    return _fused(f, x, g, states, group, names, n_threads, **options)


def agc_fused(f, x, g, v, group, clipping, clip_eps, layout, n_threads,
              options) -> StepInfo:
    """Momentum with AGC and the step options: unscale / check / clip the
    gradients into copies (the gradients passed in are not written), then
    the fused AGC-momentum update on the copies."""
    from ._ops import momentum
    o = check_options(f, **options)
    gl = _as_list(g)
    copies = [np.array(a, dtype=a.dtype.newbyteorder("="), order="C") if
              isinstance(a, np.ndarray) else a for a in gl]
    args = (o.grad_scale, o.max_norm, o.clip_value, o.clip, o.norm_type, o.check_finite,
            n_threads)
    out = _ext.clip_grads(tuple(copies), *args)
    if out is None:
        out = accept(CLIP_GRADS, (tuple(copies),), args, f)
    info = StepInfo(*out)
    if info.applied:
        flags = group[1]
        momentum(x, copies[0] if isinstance(g, np.ndarray) else list(copies), v,
                 lr=group[3], t=group[2], alpha=group[4], beta=group[5],
                 norm_coefficient=group[7], mode="nesterov" if flags & NESTEROV
                 else "standard", n_threads=n_threads, clipping=clipping,
                 clip_eps=clip_eps, layout=layout)
    return info


# ---- norm and clipping ------------------------------------------------------------

def global_norm(grads: ArrayOrList, *, grad_scale: float | None = None,
                norm_type=2.0, n_threads: int | None = None) -> float:
    """The global norm of a list of gradients, read only.

    Parameters
    ----------
    grads : ndarray or list/tuple of ndarray
        float32/float64 arrays (may mix); only read.
    grad_scale : float, optional
        Measure ``g / grad_scale`` (in g's dtype) instead of g.
    norm_type : float, default 2.0
        2.0: the square root of the sum of every square, accumulated in
        double in a fixed order (the same bits for every thread count);
        math.inf: the largest magnitude.
    n_threads : int, optional
        Threads (None: the current default).

    Returns
    -------
    float
        The norm (NaN if a value is NaN; inf if one is infinite).
    """
    f = "fastopt.global_norm"
    scale = check_options(f, grad_scale=grad_scale).grad_scale
    nt = check_norm_type(f, norm_type)
    gs = tuple(_as_list(grads)) if isinstance(grads, (np.ndarray, list, tuple)) else grads
    out = _ext.global_norm(gs, scale, nt, n_threads) if type(gs) is tuple else None
    if out is None:
        out = accept(GLOBAL_NORM, (gs,), (scale, nt, n_threads), f, {"g": "grads"})
    return out[0]


def clip_grads(grads: ArrayOrList, *, max_norm: float | None = None, norm_type=2.0,
               convention: str = "torch", clip_value: float | None = None,
               grad_scale: float | None = None,
               n_threads: int | None = None) -> float:
    """Unscale and clip gradients in place; return their global norm.

    The gradient half of a fused step: ``g /= grad_scale``, then clip by
    the global norm (torch's ``clip_grad_norm_`` or optax's
    ``clip_by_global_norm``), then clamp to ``clip_value``.

    Parameters
    ----------
    grads : ndarray or list/tuple of ndarray
        float32/float64 arrays (may mix), written in place.
    max_norm : float, optional
        The largest global norm (> 0); None: no norm clipping.
    norm_type : float, default 2.0
        2.0 or math.inf.
    convention : {"torch", "optax"}, default "torch"
        How the clip scales (see :func:`fastopt.adamw`).
    clip_value : float, optional
        Clamp every value to [-clip_value, clip_value] afterwards.
    grad_scale : float, optional
        Divide by this (> 0) first.
    n_threads : int, optional
        Threads (None: the current default).

    Returns
    -------
    float
        The global norm of the unscaled gradients, before clipping.
    """
    f = "fastopt.clip_grads"
    o = check_options(f, grad_scale=grad_scale, max_grad_norm=max_norm,
                      norm_type=norm_type, clip_convention=convention,
                      clip_value=clip_value, max_name="max_norm")
    args = (o.grad_scale, o.max_norm, o.clip_value, o.clip, o.norm_type, False, n_threads)
    gs = tuple(_as_list(grads)) if isinstance(grads, (np.ndarray, list, tuple)) else grads
    out = _ext.clip_grads(gs, *args) if type(gs) is tuple else None
    if out is None:
        out = accept(CLIP_GRADS, (gs,), args, f, {"g": "grads"})
    return out[1]


# ---- torch-form rules ----------------------------------------------------------------

def _betas(f, betas):
    try:
        b1, b2 = betas
    except (TypeError, ValueError):
        raise TypeError(f"{f}: betas must be a pair (beta1, beta2)") from None
    return (_v.check_real(f, "betas[0]", b1, low=0.0, high=1.0, high_open=True),
            _v.check_real(f, "betas[1]", b2, low=0.0, high=1.0, high_open=True))


def _adam_form(f, rule, a):
    """The body of adamw and adam_torch; a holds the caller's arguments."""
    lr = _v.check_lr(f, a["lr"])
    b1, b2 = _betas(f, a["betas"])
    eps = _v.check_real(f, "eps", a["eps"], low=0.0)
    wd = _v.check_real(f, "weight_decay", a["weight_decay"], low=0.0)
    t = _step_count(f, a["step"])
    amsgrad = a["amsgrad"]
    if amsgrad and a["max_exp_avg_sqs"] is None:
        raise ValueError(f"{f}: amsgrad=True needs max_exp_avg_sqs")
    flags = (AMSGRAD if amsgrad else 0) | (MAXIMIZE if a["maximize"] else 0)
    group = group_tuple(rule, t=t, lr=lr, alpha=b1, beta=b2, eps=eps, decay=wd, flags=flags)
    states = (a["exp_avgs"], a["exp_avg_sqs"], a["max_exp_avg_sqs"] if amsgrad else None)
    return _fused_form(f, a, states, group, ("exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"))


def adamw(params: ArrayOrList, grads: ArrayOrList, exp_avgs: ArrayOrList,
          exp_avg_sqs: ArrayOrList, *, lr: float, step: int, betas=(0.9, 0.999),
          eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False,
          max_exp_avg_sqs: ArrayOrList | None = None, maximize: bool = False,
          grad_scale=None, max_grad_norm=None, norm_type=2.0, clip_convention="torch",
          clip_value=None, skip_if_nonfinite=False,
          n_threads: int | None = None) -> StepInfo:
    """torch.optim.AdamW's update, in place, in one C call.

    For each tensor, with u the unscaled, clipped (and, for maximize,
    negated) gradient and torch's operations in torch's order::

        x = x * (1 - lr * weight_decay)
        m = m + (1 - beta1) * (u - m)          # torch's lerp_
        v = v * beta2 + ((1 - beta2) * u) * u
        vmax = max(vmax, v)                    # amsgrad
        x = x + (-lr / (1 - beta1**step)) * m / (sqrt(v or vmax) / sqrt(1 - beta2**step) + eps)

    Parameters
    ----------
    params, grads, exp_avgs, exp_avg_sqs : ndarray or list/tuple of ndarray
        Parameters (float32/float64, may mix), gradients (only read;
        broadcastable), first and second moments (start from zeros), all
        updated in place but the gradients.
    lr : float
        Learning rate (>= 0).
    step : int
        torch's ``state['step']`` after this step's increment: 1 on the
        first call.
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-8
    weight_decay : float, default 1e-2
        Decoupled decay (the parameter is multiplied by ``1 - lr *
        weight_decay`` before the update).
    amsgrad : bool, default False
        Keep the running maximum of v in ``max_exp_avg_sqs`` and use it.
    max_exp_avg_sqs : ndarray or list, optional
        Required with amsgrad (start from zeros).
    maximize : bool, default False
        Ascend instead of descend.
    """
    return _adam_form("fastopt.adamw", RULES["adamw_torch"], locals())


def adam_torch(params: ArrayOrList, grads: ArrayOrList, exp_avgs: ArrayOrList,
               exp_avg_sqs: ArrayOrList, *, lr: float, step: int, betas=(0.9, 0.999),
               eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False,
               max_exp_avg_sqs: ArrayOrList | None = None, maximize: bool = False,
               grad_scale=None, max_grad_norm=None, norm_type=2.0,
               clip_convention="torch", clip_value=None, skip_if_nonfinite=False,
               n_threads: int | None = None) -> StepInfo:
    """torch.optim.Adam's update (torch's epsilon placement), in place.

    As :func:`adamw`, but weight decay is L2: ``u = u + weight_decay * x``
    before the moments (and the default weight_decay is 0). This is not
    :func:`fastopt.adam`, the ONNX operator, which adds epsilon before the
    bias correction.
    """
    return _adam_form("fastopt.adam_torch", RULES["adam_torch"], locals())


def sgd_torch(params: ArrayOrList, grads: ArrayOrList,
              momentum_buffers: ArrayOrList | None, *, lr: float, step: int,
              momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
              nesterov: bool = False, maximize: bool = False, grad_scale=None,
              max_grad_norm=None, norm_type=2.0, clip_convention="torch",
              clip_value=None, skip_if_nonfinite=False,
              n_threads: int | None = None) -> StepInfo:
    """torch.optim.SGD's update, in place, in one C call.

    With ``u_r = u + weight_decay * x``: on the first step (``step == 1``)
    the buffer becomes ``u_r``, later ``buf = momentum * buf + (1 -
    dampening) * u_r``; then ``x = x - lr * (u_r + momentum * buf)``
    (nesterov) or ``x = x - lr * buf``. Without momentum, ``x = x - lr *
    u_r`` and momentum_buffers may be None.

    Parameters
    ----------
    step : int
        1 on the first call (no buffer yet: torch copies the gradient), then
        2, 3, ...
    """
    args = locals()
    f = "fastopt.sgd_torch"
    lr = _v.check_lr(f, lr)
    mom = _v.check_real(f, "momentum", momentum, low=0.0)
    damp = _v.check_real(f, "dampening", dampening)
    wd = _v.check_real(f, "weight_decay", weight_decay, low=0.0)
    t = _step_count(f, step)
    if nesterov and (mom <= 0.0 or damp != 0.0):
        raise ValueError(f"{f}: nesterov needs momentum > 0 and dampening 0 (as torch)")
    if mom != 0.0 and momentum_buffers is None:
        raise ValueError(f"{f}: momentum != 0 needs momentum_buffers")
    flags = (NESTEROV if nesterov else 0) | (MAXIMIZE if maximize else 0)
    group = group_tuple(RULES["sgd_torch"], t=t - 1, lr=lr, alpha=mom, beta=damp,
                        decay=wd, flags=flags)
    bufs = momentum_buffers if mom != 0.0 else None
    return _fused_form(f, args, (bufs,), group, ("momentum_buffers",))


def adagrad_torch(params: ArrayOrList, grads: ArrayOrList, state_sums: ArrayOrList, *,
                  lr: float, step: int, lr_decay: float = 0.0, weight_decay: float = 0.0,
                  eps: float = 1e-10, maximize: bool = False, grad_scale=None,
                  max_grad_norm=None, norm_type=2.0, clip_convention="torch",
                  clip_value=None, skip_if_nonfinite=False,
                  n_threads: int | None = None) -> StepInfo:
    """torch.optim.Adagrad's update, in place, in one C call.

    With ``u_r = u + weight_decay * x`` and ``clr = lr / (1 + (step - 1) *
    lr_decay)``: ``sum = sum + u_r * u_r``; ``x = x - clr * u_r /
    (sqrt(sum) + eps)``. Start ``state_sums`` from torch's
    ``initial_accumulator_value``.

    Parameters
    ----------
    step : int
        torch's ``state['step']`` after this step's increment (1 first).
    """
    args = locals()
    f = "fastopt.adagrad_torch"
    lr = _v.check_lr(f, lr)
    lr_decay = _v.check_real(f, "lr_decay", lr_decay, low=0.0)
    wd = _v.check_real(f, "weight_decay", weight_decay, low=0.0)
    eps = _v.check_real(f, "eps", eps, low=0.0)
    t = _step_count(f, step)
    group = group_tuple(RULES["adagrad_torch"], t=t, lr=lr, eps=eps, decay=wd,
                        lr_decay=lr_decay, flags=MAXIMIZE if maximize else 0)
    return _fused_form(f, args, (state_sums,), group, ("state_sums",))


for _fn in (adamw, adam_torch, sgd_torch, adagrad_torch):
    _head = "" if "Parameters" in _fn.__doc__ else "\n    Parameters\n    ----------"
    _fn.__doc__ = _fn.__doc__.rstrip() + "\n" + _head + _OPTIONS_DOC
del _fn, _head
