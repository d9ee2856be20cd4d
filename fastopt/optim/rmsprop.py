"""fastopt.optim.RMSprop: torch.optim.RMSprop, as in :func:`fastopt.rmsprop`."""
from __future__ import annotations

from .. import _rules, _step
from . import _checks as _c
from ._base import _Optimizer

_D = _rules.RMSPROP_DEFAULTS


def _unsupported(*args, **kwargs):   # every group of this optimizer is fused
    raise RuntimeError("fastopt.optim: internal error: an RMSprop group was not fused")


class RMSprop(_Optimizer):
    """RMSprop as torch.optim.RMSprop computes it, one C call per step.

    Per parameter, with u the gradient (unscaled and clipped if asked,
    negated for maximize)::

        u_r = u + weight_decay * x                    # weight_decay != 0
        sq = sq * alpha + ((1 - alpha) * u_r) * u_r
        ga = ga + (1 - alpha) * (u_r - ga)            # centered
        avg = sqrt(sq - ga * ga) + eps                # centered; else sqrt(sq) + eps
        buf = buf * momentum + u_r / avg              # momentum > 0
        x = x - lr * buf                              # momentum > 0; else
        x = x + (-lr * u_r) / avg

    Parameters
    ----------
    params : list of ndarray, or list of dict
        As in :class:`Momentum`: arrays updated in place, or parameter
        groups with per-group hyperparameters.
    lr : float, default 1e-2
        Learning rate (>= 0); may be None with a ``schedule``.
    alpha : float, default 0.99
        Smoothing constant (>= 0).
    eps : float, default 1e-8
    weight_decay : float, default 0
        L2 penalty (>= 0).
    momentum : float, default 0
        (>= 0).
    centered : bool, default False
    maximize : bool, default False
    schedule, contiguous_state, broadcast_grads, n_threads
        As in :class:`Momentum`.

    Notes
    -----
    States, as torch names them: ``"square_avg"``, and ``"momentum_buffer"``
    when a group has momentum and ``"grad_avg"`` when one is centered (both
    decided when the optimizer is built, as they are allocated then).
    :meth:`step` takes the step options of :class:`AdamW`.
    """

    _KERNEL = staticmethod(_unsupported)
    _STATES = ("square_avg",)
    _T0 = 1
    _HYPER = _c.from_spec(_rules.RMSPROP_SPEC)

    def __init__(self, params, lr=_D["lr"], alpha=_D["alpha"], eps=_D["eps"],
                 weight_decay=_D["weight_decay"], momentum=_D["momentum"],
                 centered=_D["centered"], maximize=_D["maximize"], schedule=None, *,
                 contiguous_state=False, broadcast_grads=False, n_threads=None):
        if schedule is not None and lr == _D["lr"]:
            lr = None                   # the schedule supplies the rate
        groups = params if isinstance(params, (list, tuple)) else [params]
        dicts = [g for g in groups if isinstance(g, dict)]
        any_mom = _nonzero(momentum) or any(_nonzero(g.get("momentum", 0)) for g in dicts)
        any_cen = centered is True or any(g.get("centered") is True for g in dicts)
        self._STATES = _rules.rmsprop_slots(any_mom, any_cen)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps,
                                      weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize,
                                      schedule=schedule),
                         contiguous_state=contiguous_state, broadcast_grads=broadcast_grads,
                         n_threads=n_threads)

    def _check_extra(self, f, group, where):
        for name in self._slots(group):
            if name not in self._STATES:
                key = "momentum" if name == "momentum_buffer" else "centered"
                label = key if where == "params" else f"{where}['{key}']"
                raise ValueError(f"{f}: {label} was turned on after the optimizer was "
                                 f"built (its state {name!r} was not allocated); pass it "
                                 f"when building the optimizer")

    def _slots(self, group) -> tuple:
        return _rules.rmsprop_slots(group["momentum"], group["centered"])

    def _kwargs(self, group):
        return {k: group[k] for k in _rules.RMSPROP_SPEC if k != "lr"}

    def _group_tuple(self, kw):
        return _step.group_tuple(t=kw["t"], **_rules.rmsprop_fields(kw))


def _nonzero(v) -> bool:
    """A momentum that asks for a buffer (invalid values are left to the
    checks, which raise)."""
    try:
        return float(v) != 0.0
    except (TypeError, ValueError):
        return False
