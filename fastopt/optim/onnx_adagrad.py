"""fastopt.optim.OnnxAdagrad (ONNX Adagrad)."""
from __future__ import annotations

from .. import _ops, _step
from . import _checks as _c
from ._base import _Optimizer


class OnnxAdagrad(_Optimizer):
    """Adagrad (ONNX Adagrad): T = 0 on the first update, then the step count.

    The ONNX operator's names, epsilon default and T convention;
    torch.optim.Adagrad is :class:`Adagrad`.

    Parameters
    ----------
    params : list of ndarray, or list of dict
        As in :class:`OnnxMomentum`.
    lr : float, optional
        Learning rate (>= 0); may be omitted when ``schedule`` is given.
    decay_factor : float, default 0.0
        Inverse-time decay: the rate of step T is lr / (1 + T * decay_factor)
        (torch ``lr_decay``). It applies on top of a schedule.
    epsilon : float, default 1e-6
        Added to sqrt(H) (the ONNX schema's default; torch's ``eps`` is 1e-10).
    norm_coefficient : float, default 0.0
        L2 coefficient (torch ``weight_decay``).
    initial_accumulator_value : float, default 0.0
        Initial fill of H (>= 0), as in torch.
    schedule, contiguous_state, n_threads, broadcast_grads, master_weights,
    state_dtype, state_rounding, seed
        As in :class:`OnnxMomentum`.
    """

    _OLD_NAMES = ("Adagrad",)     # checkpoints saved under its former name
    _KERNEL = staticmethod(_ops.onnx_adagrad)
    _STATES = ("h",)
    _T0 = 0
    _HYPER = {
        "lr": _c.lr_or_none,
        "decay_factor": _c.real(lo=0.0),
        "epsilon": _c.real(lo=0.0),
        "norm_coefficient": _c.real(),
        "initial_accumulator_value": _c.real(lo=0.0),
    }

    def __init__(self, params, lr=None, decay_factor=0.0, epsilon=1e-6,
                 norm_coefficient=0.0, initial_accumulator_value=0.0, schedule=None, *,
                 contiguous_state=False, n_threads=None, broadcast_grads=False,
                 master_weights=False,
                 state_dtype=None, state_rounding="auto", seed=0):
        super().__init__(params, dict(lr=lr, decay_factor=decay_factor, epsilon=epsilon,
                                      norm_coefficient=norm_coefficient,
                                      initial_accumulator_value=initial_accumulator_value,
                                      schedule=schedule),
                         contiguous_state=contiguous_state, n_threads=n_threads,
                         broadcast_grads=broadcast_grads,
                         master_weights=master_weights, state_dtype=state_dtype,
                         state_rounding=state_rounding, seed=seed)

    def _initial(self, group, name):
        return group["initial_accumulator_value"]

    def _kwargs(self, group):
        return dict(decay_factor=float(group["decay_factor"]),
                    epsilon=float(group["epsilon"]),
                    norm_coefficient=float(group["norm_coefficient"]),
                    n_threads=self.n_threads)

    def _group_tuple(self, kw):
        return _step.group_tuple(_step.RULES["adagrad"], t=kw["t"], lr=kw["lr"],
                                 lr_decay=kw["decay_factor"], eps=kw["epsilon"],
                                 decay=kw["norm_coefficient"])
