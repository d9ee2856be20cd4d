"""fastopt.optim.Adagrad: torch.optim.Adagrad, as in :func:`fastopt.adagrad`."""
from __future__ import annotations

from .. import _step
from . import _checks as _c
from ._base import _Optimizer


def _unsupported(*args, **kwargs):   # every group of this optimizer is fused
    raise RuntimeError("fastopt.optim: internal error: an Adagrad group was not fused")


class Adagrad(_Optimizer):
    """Adagrad as torch.optim.Adagrad computes it, one C call per step.

    Per parameter, with u the gradient (unscaled and clipped if asked,
    negated for maximize), ``u_r = u + weight_decay * x`` and ``clr = lr /
    (1 + (step - 1) * lr_decay)`` (``step`` the 1-based count of this step):
    ``sum = sum + u_r * u_r``; ``x = x - clr * u_r / (sqrt(sum) + eps)``.

    Parameters
    ----------
    params : list of ndarray, or list of dict
        As in :class:`OnnxMomentum`: arrays updated in place, or parameter
        groups with per-group hyperparameters.
    lr : float, default 1e-2
        Learning rate (>= 0); may be None with a ``schedule``.
    lr_decay, weight_decay : float, default 0
    initial_accumulator_value : float, default 0
        The fill of the ``"sum"`` state (>= 0).
    eps : float, default 1e-10
    maximize : bool, default False
    schedule, contiguous_state, n_threads, broadcast_grads, master_weights,
    state_dtype, state_rounding, seed
        As in :class:`OnnxMomentum`.

    Notes
    -----
    State, as torch names it: ``"sum"``. The ONNX operator, with its own
    names, epsilon default and T convention, is :class:`OnnxAdagrad`.
    :meth:`step` takes the step options of :class:`AdamW`.
    """

    _KERNEL = staticmethod(_unsupported)
    _RULE = "adagrad_torch"
    _STATES = ("sum",)
    _T0 = 1
    _HYPER = {
        "lr": _c.lr_or_none,
        "lr_decay": _c.real(lo=0.0),
        "weight_decay": _c.real(lo=0.0),
        "initial_accumulator_value": _c.real(lo=0.0),
        "eps": _c.real(lo=0.0),
        "maximize": _c.as_bool,
    }

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, maximize=False, schedule=None, *,
                 contiguous_state=False, n_threads=None, broadcast_grads=False,
                 master_weights=False,
                 state_dtype=None, state_rounding="auto", seed=0):
        if schedule is not None and lr == 1e-2:
            lr = None                   # the schedule supplies the rate
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize, schedule=schedule),
                         contiguous_state=contiguous_state, n_threads=n_threads,
                         broadcast_grads=broadcast_grads,
                         master_weights=master_weights, state_dtype=state_dtype,
                         state_rounding=state_rounding, seed=seed)

    def _initial(self, group, name):
        return group["initial_accumulator_value"]

    def _kwargs(self, group):
        return {k: group[k] for k in ("lr_decay", "weight_decay", "eps", "maximize")}

    def _group_tuple(self, kw):
        return _step.group_tuple(_step.RULES["adagrad_torch"], t=kw["t"], lr=kw["lr"],
                                 eps=kw["eps"], decay=kw["weight_decay"],
                                 lr_decay=kw["lr_decay"],
                                 flags=_step.MAXIMIZE if kw["maximize"] else 0)
