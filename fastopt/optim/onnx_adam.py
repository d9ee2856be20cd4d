"""fastopt.optim.OnnxAdam (ONNX Adam)."""
from __future__ import annotations

from .. import _ops, _step
from . import _checks as _c
from ._base import _Optimizer


class OnnxAdam(_Optimizer):
    """Adam (ONNX Adam): T = 1 on the first update (bias-corrected), then
    the step count + 1.

    Not torch.optim.Adam (that is :class:`Adam`): ONNX adds epsilon before the bias
    correction (ONNX eps = torch eps * sqrt(1 - beta**t)) and applies
    ``norm_coefficient_post`` after the step; with epsilon = 0 and no post
    decay the two agree.

    Parameters
    ----------
    params, lr
        As in :class:`OnnxMomentum` (``lr`` >= 0, optional with a ``schedule``).
    alpha, beta : float, default 0.9 and 0.999
        Moment decay rates (torch ``betas``); 0 <= alpha < 1, 0 <= beta <= 1.
    epsilon : float, default 1e-6
    norm_coefficient : float, default 0.0
        L2 coefficient folded into the gradient (torch Adam ``weight_decay``).
    norm_coefficient_post : float, default 0.0
        Decay after the step: ``x *= 1 - norm_coefficient_post``.
    schedule, contiguous_state, n_threads, broadcast_grads, master_weights,
    state_dtype, state_rounding, seed
        As in :class:`OnnxMomentum`.
    """

    _OLD_NAMES = ("Adam",)     # checkpoints saved under its former name
    _KERNEL = staticmethod(_ops.onnx_adam)
    _STATES = ("v", "h")
    _T0 = 1
    _HYPER = {
        "lr": _c.lr_or_none,
        "alpha": _c.real(lo=0.0, hi=1.0, hi_open=True),
        "beta": _c.real(lo=0.0, hi=1.0),
        "epsilon": _c.real(lo=0.0),
        "norm_coefficient": _c.real(),
        "norm_coefficient_post": _c.real(),
    }

    def __init__(self, params, lr=None, alpha=0.9, beta=0.999, epsilon=1e-6,
                 norm_coefficient=0.0, norm_coefficient_post=0.0, schedule=None, *,
                 contiguous_state=False, n_threads=None, broadcast_grads=False,
                 master_weights=False,
                 state_dtype=None, state_rounding="auto", seed=0):
        super().__init__(params, dict(lr=lr, alpha=alpha, beta=beta, epsilon=epsilon,
                                      norm_coefficient=norm_coefficient,
                                      norm_coefficient_post=norm_coefficient_post,
                                      schedule=schedule),
                         contiguous_state=contiguous_state, n_threads=n_threads,
                         broadcast_grads=broadcast_grads,
                         master_weights=master_weights, state_dtype=state_dtype,
                         state_rounding=state_rounding, seed=seed)

    def _kwargs(self, group):
        return dict(alpha=float(group["alpha"]), beta=float(group["beta"]),
                    epsilon=float(group["epsilon"]),
                    norm_coefficient=float(group["norm_coefficient"]),
                    norm_coefficient_post=float(group["norm_coefficient_post"]),
                    n_threads=self.n_threads)

    def _group_tuple(self, kw):
        return _step.group_tuple(_step.RULES["adam"], t=kw["t"], lr=kw["lr"],
                                 alpha=kw["alpha"], beta=kw["beta"], eps=kw["epsilon"],
                                 decay=kw["norm_coefficient"],
                                 decay_post=kw["norm_coefficient_post"])
