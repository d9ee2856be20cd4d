"""Public functions of the whole step: the global norm, in-place
gradient clipping, and the torch-named update rules (sgd, adagrad, adam,
adamw, rmsprop: torch.optim's SGD, Adagrad, Adam, AdamW and RMSprop, with
torch's argument names, defaults and math) with unscaling and clipping fused
in. After torch's hyperparameters each takes ``step`` where the rule reads
the step count, its optional states, and the step-wide options.

Every update function takes the same step-wide options and returns a
:class:`~fastopt.StepInfo`; see ``fastopt._step`` for the order of the
operations inside a step and docs/semantics.md for the math.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np

from . import _ext, _rules
from . import _validation as _v
from ._dispatch import accept
from ._step import (
    AMSGRAD,
    CLIP_GRADS,
    GLOBAL_NORM,
    MAXIMIZE,
    NESTEROV,
    RULES,
    STEP_DEFAULTS,
    StepInfo,
    as_list,
    check_norm_type,
    check_options,
    decay_flags,
    group_tuple,
    run_form,
    step_count,
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
    param_copies : ndarray or list/tuple of ndarray or None, optional
        Per parameter, an array of its shape (bfloat16 or float16, for
        float32 parameters; None: none for that parameter) that receives
        the new parameters rounded to nearest-even in the same pass, on an
        applied step only: the half-precision copy of fp32 master weights.
    state_rounding : {"auto", "nearest", "stochastic"}, default "auto"
        How bfloat16 states (of float32 parameters) are rounded when stored:
        "auto" rounds stochastically the states that nearest rounding would
        stall (sums of squares, and averages and momentum buffers whose
        decay exceeds 1 - 2**-8 = 0.99609375, as beta2 = 0.999), the rest to
        nearest;
        the others round every state one way. No effect on float32/float64
        states. See docs/semantics.md, "bfloat16 states".
    seed : int, default 0
        The stochastic rounding's seed (0 <= seed < 2**64): with the step
        count, the tensor's index and the element's index it fixes every
        random bit, so results are the same for every thread count. A rule
        without a ``step`` argument (rmsprop, adadelta, lion) draws the same
        bits for the same seed: give it a new seed every call.
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
    gs = tuple(as_list(grads)) if isinstance(grads, (np.ndarray, list, tuple)) else grads
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
    gs = tuple(as_list(grads)) if isinstance(grads, (np.ndarray, list, tuple)) else grads
    out = _ext.clip_grads(gs, *args) if type(gs) is tuple else None
    if out is None:
        out = accept(CLIP_GRADS, (gs,), args, f, {"g": "grads"})
    return out[1]


# ---- torch-form rules ----------------------------------------------------------------

_BETA_NAMES = ("betas[0]", "betas[1]", "betas[2]")


def _betas(f, betas, n=2):
    try:
        bs = betas if type(betas) is tuple else tuple(betas)
    except TypeError:
        bs = ()
    if len(bs) != n:
        names = ", ".join(f"beta{i + 1}" for i in range(n))
        raise TypeError(f"{f}: betas must be a {'pair' if n == 2 else 'triple'} ({names})")
    return tuple([_v.check_real(f, _BETA_NAMES[i], bs[i], low=0.0, high=1.0, high_open=True)
                  for i in range(n)])


def _adam_form(f, rule, a):
    """The body of adamw and adam; a holds the caller's arguments."""
    lr = _v.check_lr(f, a["lr"])
    b1, b2 = _betas(f, a["betas"])
    eps = _v.check_real(f, "eps", a["eps"], low=0.0)
    wd = _v.check_real(f, "weight_decay", a["weight_decay"], low=0.0)
    t = step_count(f, a["step"])
    if _v.check_bool(f, "decoupled_weight_decay", a.get("decoupled_weight_decay", False)):
        rule = RULES["adamw_torch"]     # torch.optim.Adam(decoupled_weight_decay=True)
    amsgrad = a["amsgrad"]
    if amsgrad and a["max_exp_avg_sqs"] is None:
        raise ValueError(f"{f}: amsgrad=True needs max_exp_avg_sqs")
    # (decay_mode "bnb" makes Adam's decay decoupled too: the core's flag)
    flags = ((AMSGRAD if amsgrad else 0) | (MAXIMIZE if a["maximize"] else 0)
             | decay_flags(f, a.get("decay_mode", "torch")))
    group = group_tuple(rule, t=t, lr=lr, alpha=b1, beta=b2, eps=eps, decay=wd, flags=flags)
    states = (a["exp_avgs"], a["exp_avg_sqs"], a["max_exp_avg_sqs"] if amsgrad else None)
    return run_form(f, a, states, group, ("exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"))


def adamw(params: ArrayOrList, grads: ArrayOrList, exp_avgs: ArrayOrList,
          exp_avg_sqs: ArrayOrList, *, lr: float = 1e-3, betas=(0.9, 0.999),
          eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False,
          maximize: bool = False, step: int, max_exp_avg_sqs: ArrayOrList | None = None,
          decay_mode: str = "torch",
          grad_scale=None, max_grad_norm=None, norm_type=2.0, clip_convention="torch",
          clip_value=None, skip_if_nonfinite=False,
          param_copies=None, state_rounding="auto", seed=0,
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
        broadcastable; of the parameter's dtype, or bfloat16/float16),
        first and second moments (start from zeros; of the parameter's
        dtype, or bfloat16 for float32 parameters: see state_rounding), all
        updated in place but the gradients.
    lr : float, default 1e-3
        Learning rate (>= 0).
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-8
    weight_decay : float, default 1e-2
        Decoupled decay (the parameter is multiplied by ``1 - lr *
        weight_decay`` before the update).
    amsgrad : bool, default False
        Keep the running maximum of v in ``max_exp_avg_sqs`` and use it.
    maximize : bool, default False
        Ascend instead of descend.
    step : int
        torch's ``state['step']`` after this step's increment: 1 on the
        first call.
    max_exp_avg_sqs : ndarray or list, optional
        Required with amsgrad (start from zeros).
    decay_mode : {"torch", "bnb"}, default "torch"
        Where the decay multiplies the parameter: "torch" before the update
        (above), "bnb" after it, as bitsandbytes' CUDA kernels do (``x = (x
        + update) * (1 - lr * weight_decay)``; the update unchanged).
    """
    return _adam_form("fastopt.adamw", RULES["adamw_torch"], locals())


def adam(params: ArrayOrList, grads: ArrayOrList, exp_avgs: ArrayOrList,
         exp_avg_sqs: ArrayOrList, *, lr: float = 1e-3, betas=(0.9, 0.999),
         eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False,
         maximize: bool = False, decoupled_weight_decay: bool = False, step: int,
         max_exp_avg_sqs: ArrayOrList | None = None, decay_mode: str = "torch",
         grad_scale=None, max_grad_norm=None, norm_type=2.0, clip_convention="torch",
         clip_value=None,
         skip_if_nonfinite=False, param_copies=None, state_rounding="auto", seed=0,
         n_threads: int | None = None) -> StepInfo:
    """torch.optim.Adam's update (torch's epsilon placement), in place.

    As :func:`adamw`, but weight decay is L2: ``u = u + weight_decay * x``
    before the moments (and the default weight_decay is 0), unless
    ``decoupled_weight_decay=True``, which makes it :func:`adamw` (as in
    torch), or ``decay_mode="bnb"``, which makes it :func:`adamw` with
    ``decay_mode="bnb"`` (bitsandbytes' CUDA kernels decay its Adam so). The
    ONNX operator, which adds epsilon before the bias correction and counts
    ``t`` its own way, is :func:`fastopt.onnx_adam`.

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> x = np.zeros(2); m = np.zeros(2); v = np.zeros(2)
    >>> info = fastopt.adam(x, np.array([1.0, -1.0]), m, v, lr=0.1, step=1)
    >>> x.round(6)
    array([-0.1,  0.1])
    """
    return _adam_form("fastopt.adam", RULES["adam_torch"], locals())


def sgd(params: ArrayOrList, grads: ArrayOrList,
        momentum_buffers: ArrayOrList | None, *, lr: float = 1e-3, momentum: float = 0,
        dampening: float = 0, weight_decay: float = 0, nesterov: bool = False,
        maximize: bool = False, step: int, grad_scale=None, max_grad_norm=None,
        norm_type=2.0, clip_convention="torch", clip_value=None,
        skip_if_nonfinite=False, param_copies=None, state_rounding="auto", seed=0,
        n_threads: int | None = None) -> StepInfo:
    """torch.optim.SGD's update, in place, in one C call.

    With ``u_r = u + weight_decay * x``: on the first step (``step == 1``)
    the buffer becomes ``u_r``, later ``buf = momentum * buf + (1 -
    dampening) * u_r``; then ``x = x - lr * (u_r + momentum * buf)``
    (nesterov) or ``x = x - lr * buf``. Without momentum, ``x = x - lr *
    u_r`` and momentum_buffers may be None. Each ``a + s * b`` here is one
    fused multiply-add (``buf * momentum`` rounded first), as torch's
    kernels compute it: the result is torch.optim.SGD's, bit for bit
    (docs/semantics.md, "torch's fused multiply-adds").

    The ONNX operator (its own names and T convention) is
    :func:`fastopt.onnx_momentum`.

    Parameters
    ----------
    step : int
        1 on the first call (no buffer yet: torch copies the gradient), then
        2, 3, ...

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> x = np.ones(3, np.float32); buf = np.zeros_like(x)
    >>> info = fastopt.sgd(x, np.full(3, 0.5, np.float32), buf, lr=0.1, momentum=0.9, step=1)
    >>> x
    array([0.95, 0.95, 0.95], dtype=float32)
    """
    args = locals()
    f = "fastopt.sgd"
    lr = _v.check_lr(f, lr)
    mom = _v.check_real(f, "momentum", momentum, low=0.0)
    damp = _v.check_real(f, "dampening", dampening)
    wd = _v.check_real(f, "weight_decay", weight_decay, low=0.0)
    t = step_count(f, step)
    if nesterov and (mom <= 0.0 or damp != 0.0):
        raise ValueError(f"{f}: nesterov needs momentum > 0 and dampening 0 (as torch)")
    if mom != 0.0 and momentum_buffers is None:
        raise ValueError(f"{f}: momentum != 0 needs momentum_buffers")
    flags = (NESTEROV if nesterov else 0) | (MAXIMIZE if maximize else 0)
    group = group_tuple(RULES["sgd_torch"], t=t - 1, lr=lr, alpha=mom, beta=damp,
                        decay=wd, flags=flags)
    bufs = momentum_buffers if mom != 0.0 else None
    return run_form(f, args, (bufs,), group, ("momentum_buffers",))


def adagrad(params: ArrayOrList, grads: ArrayOrList, state_sums: ArrayOrList, *,
            lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
            eps: float = 1e-10, maximize: bool = False, step: int, grad_scale=None,
            max_grad_norm=None, norm_type=2.0, clip_convention="torch",
            clip_value=None, skip_if_nonfinite=False,
            param_copies=None, state_rounding="auto", seed=0,
            n_threads: int | None = None) -> StepInfo:
    """torch.optim.Adagrad's update, in place, in one C call.

    With ``u_r = u + weight_decay * x`` and ``clr = lr / (1 + (step - 1) *
    lr_decay)``: ``sum = sum + u_r * u_r``; ``x = x - clr * u_r /
    (sqrt(sum) + eps)``. Start ``state_sums`` from torch's
    ``initial_accumulator_value``. The ONNX operator (its own names, epsilon
    default and T convention) is :func:`fastopt.onnx_adagrad`.

    Parameters
    ----------
    step : int
        torch's ``state['step']`` after this step's increment (1 first).
    """
    args = locals()
    f = "fastopt.adagrad"
    lr = _v.check_lr(f, lr)
    lr_decay = _v.check_real(f, "lr_decay", lr_decay, low=0.0)
    wd = _v.check_real(f, "weight_decay", weight_decay, low=0.0)
    eps = _v.check_real(f, "eps", eps, low=0.0)
    t = step_count(f, step)
    group = group_tuple(RULES["adagrad_torch"], t=t, lr=lr, eps=eps, decay=wd,
                        lr_decay=lr_decay, flags=MAXIMIZE if maximize else 0)
    return run_form(f, args, (state_sums,), group, ("state_sums",))


# ---- the rules of fastopt._rules.TORCH_RULES: one generic function each ----------

_STEP_DEFAULTS = STEP_DEFAULTS + (("param_copies", None), ("state_rounding", "auto"),
                                  ("seed", 0), ("n_threads", None))


def check_hyper(f, rule, values) -> dict:
    """A rule's hyperparameters checked (raises TypeError/ValueError naming
    ``f`` and the argument), by the kinds of its table row."""
    out = {}
    for name, kind in _rules.spec(rule).items():
        v = values[name]
        if kind == "lr":
            out[name] = _v.check_lr(f, v)
        elif kind == "bool":
            out[name] = _v.check_bool(f, name, v)
        elif kind in ("betas", "betas3"):
            out[name] = _betas(f, v, 3 if kind == "betas3" else 2)
        elif kind == "warmup":
            out[name] = _v.check_warmup(f, name, v)
        else:
            out[name] = _v.check_real(f, name, v, **kind)
    return out


def check_carried(f, carry, value):
    """A carried scalar's array (NAdam's mu_product): a writeable NumPy
    array of shape (), float32 or float64 (its type is the rounding of the
    product, as torch's scalar tensor), finite and in [0, 1]. Returns its
    value as a NumPy scalar of its type."""
    name = carry.name
    if not isinstance(value, np.ndarray) or value.shape != () or value.dtype not in (
            np.dtype(np.float32), np.dtype(np.float64)):
        got = (f"an array of shape {value.shape} and dtype {value.dtype}"
               if isinstance(value, np.ndarray) else _v._type_name(value))
        raise TypeError(f"{f}: {name} must be a float32 or float64 NumPy array of shape () "
                        f"(torch's state[{name!r}], updated in place), got {got}")
    if not value.flags.writeable:
        raise ValueError(f"{f}: {name} is read-only; it is updated in place")
    v = value[()]
    _v.check_real(f, name, float(v), low=0.0, high=1.0)
    return v


def _rule_call(rule, a):
    """The body of a generated rule function; ``a`` holds its arguments."""
    f = f"fastopt.{rule.name}"
    h = check_hyper(f, rule, a)
    slots = rule.slots(h)
    for name in slots:
        if a[name + "s"] is None and name in rule.needs:
            raise ValueError(f"{f}: {rule.needs[name]} needs {name}s")
    t = step_count(f, a["step"]) if rule.counted else 1
    carry, extra = rule.carry, {}
    if carry is not None:
        held = a[carry.name]
        extra["extra"], after = carry.advance(h, t, check_carried(f, carry, held))
    group = group_tuple(t=t, **rule.fields(h), **extra)
    info = run_form(f, a, tuple(a[n + "s"] for n in slots), group,
                    tuple(n + "s" for n in slots))
    if carry is not None and info.applied:
        held[()] = after
    return info


def _rule_doc(rule) -> str:
    given = [n for n in rule.states if n not in rule.needs]
    rest = [n for n in rule.states if n in rule.needs]
    lines = [f"{rule.summary}: in place, in one C call.", "",
             "For each tensor, with u the unscaled, clipped (and, for maximize,",
             "negated) gradient and torch's operations in torch's order::", ""]
    lines += ["    " + ln for ln in rule.formula.splitlines()]
    lines += ["", "Parameters", "----------",
              f"params, grads, {', '.join(n + 's' for n in given)} : ndarray or list/tuple "
              "of ndarray",
              "    Parameters (float32/float64, may mix), gradients (only read;",
              "    broadcastable; of the parameter's dtype, or bfloat16/float16)",
              f"    and torch's {', '.join(f'``{n}``' for n in given)}",
              "    states (start from zeros; of the parameter's dtype, or bfloat16",
              "    for float32 parameters: see state_rounding), all updated in place",
              "    but the gradients."]
    for arg in rule.args:
        if arg.check is not None:
            lines += [f"{arg.name} : {_rules.doc_type(arg)}, default {arg.default!r}",
                      f"    {arg.doc}"]
    if rule.counted:
        lines += ["step : int",
                  "    torch's ``state['step']`` after this step's increment (1 first)."]
    if rule.carry is not None:
        c = rule.carry.name
        lines += [f"{c} : ndarray of shape (), float32 or float64",
                  f"    torch's ``state[{c!r}]`` ({rule.carry.doc}) before",
                  "    this step, multiplied in place in its own dtype when the step",
                  "    applies (torch keeps it in float32 under its default dtype)."]
    for name in rest:
        lines += [f"{name}s : ndarray or list/tuple of ndarray, optional",
                  f"    torch's ``{name}`` states (start from zeros); needed when "
                  f"{rule.needs[name]}."]
    return "\n    ".join(lines)


def _rule_function(rule):
    rest = [n for n in rule.states if n in rule.needs]
    params = ["params", "grads", *(n + "s" for n in rule.states if n not in rule.needs), "*"]
    params += ["step"] if rule.counted else []
    params += [rule.carry.name] if rule.carry is not None else []
    params += [f"{k}=D[{k!r}]" for k in _rules.defaults(rule)]
    params += [f"{n}s=None" for n in rest]
    params += [f"{k}=S[{k!r}]" for k, _ in _STEP_DEFAULTS]
    fn = _rules.define(rule.name, params, "call(rule, locals())",
                       {"D": _rules.defaults(rule), "S": dict(_STEP_DEFAULTS),
                        "call": _rule_call, "rule": rule}, "fastopt")
    fn.__doc__ = _rule_doc(rule)
    return fn


#: name -> the public function of every rule of the table
RULE_FUNCTIONS = {r.name: _rule_function(r) for r in _rules.TORCH_RULES}


for _fn in (adamw, adam, sgd, adagrad, *RULE_FUNCTIONS.values()):
    _doc, _sep, _examples = _fn.__doc__.rstrip().partition("\n\n    Examples\n")
    _head = "" if "Parameters" in _doc else "\n    Parameters\n    ----------"
    _fn.__doc__ = _doc + "\n" + _head + _OPTIONS_DOC + _sep[1:] + _examples
del _fn, _head, _doc, _sep, _examples
