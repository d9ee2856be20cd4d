"""fastopt.optim.SGD: torch.optim.SGD, as in :func:`fastopt.sgd`."""
from __future__ import annotations

from .. import _step
from . import _checks as _c
from ._base import _Optimizer


def _unsupported(*args, **kwargs):   # every group of this optimizer is fused
    raise RuntimeError("fastopt.optim: internal error: an SGD group was not fused")


class SGD(_Optimizer):
    """SGD as torch.optim.SGD computes it, one C call per step.

    Per parameter, with u the gradient (unscaled and clipped if asked,
    negated for maximize) and ``u_r = u + weight_decay * x``: on the first
    step the buffer becomes ``u_r``, later ``buf = momentum * buf + (1 -
    dampening) * u_r``; then ``x = x - lr * (u_r + momentum * buf)``
    (nesterov) or ``x = x - lr * buf``. Without momentum ``x = x - lr * u_r``
    and no buffer is kept. Each ``a + s * b`` is one fused multiply-add, as
    torch's kernels compute it (torch.optim.SGD's bits; docs/semantics.md).

    Parameters
    ----------
    params : list of ndarray, or list of dict
        As in :class:`OnnxMomentum`: arrays updated in place, or parameter
        groups with per-group hyperparameters.
    lr : float, default 1e-3
        Learning rate (>= 0); may be None with a ``schedule``.
    momentum, dampening, weight_decay : float, default 0
    nesterov : bool, default False
        Needs momentum > 0 and dampening 0.
    maximize : bool, default False
    schedule, contiguous_state, n_threads, broadcast_grads, master_weights,
    state_dtype, state_rounding, seed
        As in :class:`OnnxMomentum`.

    Notes
    -----
    State, as torch names it: ``"momentum_buffer"``, allocated when some
    group has momentum (a group may not turn momentum on later). The ONNX
    operator, with its own names and T convention, is :class:`OnnxMomentum`.
    :meth:`step` takes the step options of :class:`AdamW`.
    """

    _KERNEL = staticmethod(_unsupported)
    _RULE = "sgd_torch"
    _T0 = 0
    _HYPER = {
        "lr": _c.lr_or_none,
        "momentum": _c.real(lo=0.0),
        "dampening": _c.real(),
        "weight_decay": _c.real(lo=0.0),
        "nesterov": _c.as_bool,
        "maximize": _c.as_bool,
    }

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, maximize=False, schedule=None, *, contiguous_state=False,
                 n_threads=None, broadcast_grads=False, master_weights=False,
                 state_dtype=None, state_rounding="auto", seed=0):
        if schedule is not None and lr == 1e-3:
            lr = None                   # the schedule supplies the rate
        groups = params if isinstance(params, (list, tuple)) else [params]
        if _any_momentum(momentum, groups):
            self._STATES = ("momentum_buffer",)
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, schedule=schedule),
                         contiguous_state=contiguous_state, n_threads=n_threads,
                         broadcast_grads=broadcast_grads,
                         master_weights=master_weights, state_dtype=state_dtype,
                         state_rounding=state_rounding, seed=seed)

    def _check_extra(self, f, group, where):
        label = (lambda k: k) if where == "params" else (lambda k: f"{where}['{k}']")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(f"{f}: {label('nesterov')} needs momentum > 0 and dampening "
                             f"0 (as torch)")
        if group["momentum"] != 0 and not self._STATES:
            raise ValueError(f"{f}: {label('momentum')} was turned on after the optimizer "
                             f"was built (its state 'momentum_buffer' was not allocated); "
                             f"pass it when building the optimizer")

    def _slots(self, group) -> tuple:
        return self._STATES if group["momentum"] != 0 else ()

    def _kwargs(self, group):
        return {k: group[k] for k in ("momentum", "dampening", "weight_decay", "nesterov",
                                      "maximize")}

    def _group_tuple(self, kw):
        flags = ((_step.NESTEROV if kw["nesterov"] else 0)
                 | (_step.MAXIMIZE if kw["maximize"] else 0))
        return _step.group_tuple(_step.RULES["sgd_torch"], t=kw["t"], lr=kw["lr"],
                                 alpha=kw["momentum"], beta=kw["dampening"],
                                 decay=kw["weight_decay"], flags=flags)


def _any_momentum(default, groups) -> bool:
    """Whether some group will have momentum (unchecked values count as yes:
    the checks that follow raise for them)."""
    values = [default] + [g["momentum"] for g in groups
                          if isinstance(g, dict) and "momentum" in g]
    for v in values:
        try:
            if v != 0:
                return True
        except Exception:  # noqa: BLE001 - an invalid value: the checks raise
            return True
    return False
