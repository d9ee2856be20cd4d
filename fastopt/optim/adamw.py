"""fastopt.optim.AdamW and fastopt.optim.Adam: torch.optim's AdamW and Adam
(torch's epsilon placement), as in :func:`fastopt.adamw` and
:func:`fastopt.adam`."""
from __future__ import annotations

from .. import _step
from . import _checks as _c
from ._base import _Optimizer


def _unsupported(*args, **kwargs):   # every group of these optimizers is fused
    raise RuntimeError("fastopt.optim: internal error: an AdamW group was not fused")


class AdamW(_Optimizer):
    """AdamW as torch.optim.AdamW computes it, one C call per step.

    Per parameter, with u the gradient (unscaled and clipped if asked, negated
    for maximize) and ``step`` the 1-based count of this step::

        x = x * (1 - lr * weight_decay)
        m = m + (1 - beta1) * (u - m)
        v = v * beta2 + ((1 - beta2) * u) * u
        vmax = max(vmax, v)                       # amsgrad
        x = x - lr / (1 - beta1**step) * m / (sqrt(v or vmax) / sqrt(1 - beta2**step) + eps)

    Parameters
    ----------
    params : list of ndarray, or list of dict
        As in :class:`Momentum`: arrays updated in place, or parameter
        groups with per-group hyperparameters.
    lr : float, default 1e-3
        Learning rate (>= 0); may be None with a ``schedule``.
    betas : (float, float), default (0.9, 0.999)
        Moment decay rates, each in [0, 1).
    eps : float, default 1e-8
    weight_decay : float, default 1e-2
        Decoupled weight decay (>= 0).
    amsgrad : bool, default False
        Keep the running maximum of the second moment (state
        ``"max_exp_avg_sq"``, allocated when any group asks for it).
    maximize : bool, default False
    schedule, contiguous_state, n_threads, broadcast_grads, master_weights,
    state_dtype, state_rounding, seed
        As in :class:`Momentum`.
    decay_mode : {"torch", "bnb"}, default "torch"
        Per group: the decay multiplies the parameter before the update
        (torch) or after it (bitsandbytes' CUDA kernels: ``x = (x + update)
        * (1 - lr * weight_decay)``), as in :func:`fastopt.adamw`.

    Notes
    -----
    States: ``"exp_avg"``, ``"exp_avg_sq"`` (and ``"max_exp_avg_sq"``), as
    torch names them. :meth:`step` takes ``grad_scale``,
    ``skip_if_nonfinite``, ``max_grad_norm``, ``norm_type`` and
    ``clip_convention`` and records the measured norm in
    :attr:`last_grad_norm`.
    """

    _KERNEL = staticmethod(_unsupported)
    _STATES = ("exp_avg", "exp_avg_sq")
    _T0 = 1
    _RULE = "adamw_torch"
    _HYPER = {
        "lr": _c.lr_or_none,
        "betas": None,          # filled below (needs the pair checker)
        "eps": _c.real(lo=0.0),
        "weight_decay": _c.real(lo=0.0),
        "amsgrad": _c.as_bool,
        "maximize": _c.as_bool,
        "decay_mode": _c.decay_mode,
    }
    _ADDED = {"decay_mode": "torch"}      # (checkpoints written before it load)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, maximize=False, schedule=None, *, contiguous_state=False,
                 n_threads=None, broadcast_grads=False, master_weights=False,
                 state_dtype=None, state_rounding="auto", seed=0, decay_mode="torch"):
        if schedule is not None and lr == 1e-3:
            lr = None                   # the schedule supplies the rate
        groups = params if isinstance(params, (list, tuple)) else [params]
        any_ams = bool(amsgrad) or any(isinstance(g, dict) and g.get("amsgrad")
                                       for g in groups)
        if any_ams:      # only then the third state (as torch allocates it)
            self._STATES = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
        super().__init__(params, self._defaults(dict(
                             lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                             amsgrad=amsgrad, maximize=maximize, schedule=schedule,
                             decay_mode=decay_mode)),
                         contiguous_state=contiguous_state, n_threads=n_threads,
                         broadcast_grads=broadcast_grads,
                         master_weights=master_weights, state_dtype=state_dtype,
                         state_rounding=state_rounding, seed=seed)

    def _defaults(self, hyper):
        return hyper

    def _rule(self, kw):
        return self._RULE

    def _check_extra(self, f, group, where):
        if group["amsgrad"] and "max_exp_avg_sq" not in self._STATES:
            label = "amsgrad" if where == "params" else f"{where}['amsgrad']"
            raise ValueError(f"{f}: {label} was turned on after the optimizer was built; "
                             f"pass amsgrad=True when building it")

    def _kwargs(self, group):
        b1, b2 = group["betas"]
        return {"betas": (b1, b2), "eps": float(group["eps"]),
                "weight_decay": float(group["weight_decay"]),
                "amsgrad": group["amsgrad"], "maximize": group["maximize"],
                "decay_mode": group["decay_mode"]}

    def _group_tuple(self, kw):
        flags = ((_step.AMSGRAD if kw["amsgrad"] else 0)
                 | (_step.MAXIMIZE if kw["maximize"] else 0)
                 | _step.DECAY_MODES[kw["decay_mode"]])
        b1, b2 = kw["betas"]
        return _step.group_tuple(_step.RULES[self._rule(kw)], t=kw["t"], lr=kw["lr"],
                                 alpha=b1, beta=b2, eps=kw["eps"],
                                 decay=kw["weight_decay"], flags=flags)


AdamW._HYPER["betas"] = _c.betas


class Adam(AdamW):
    """Adam as torch.optim.Adam computes it (torch's epsilon placement),
    one C call per step.

    As :class:`AdamW` but ``weight_decay`` (default 0) is L2: ``u = u +
    weight_decay * x`` before the moments, unless ``decoupled_weight_decay``
    is True, which makes the group :class:`AdamW` (as in torch), or
    ``decay_mode`` is "bnb", which makes it :class:`AdamW` with "bnb"
    (bitsandbytes' CUDA kernels decay its Adam so). The ONNX operator, which
    adds epsilon before the bias correction, is :class:`OnnxAdam`.
    """

    _RULE = "adam_torch"
    _OLD_NAMES = ("AdamTorch",)
    _HYPER = dict(AdamW._HYPER, decoupled_weight_decay=_c.as_bool)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, maximize=False, decoupled_weight_decay=False,
                 schedule=None, *, contiguous_state=False, n_threads=None,
                 broadcast_grads=False, master_weights=False,
                 state_dtype=None, state_rounding="auto", seed=0, decay_mode="torch"):
        self._decoupled = decoupled_weight_decay
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, schedule,
                         contiguous_state=contiguous_state, n_threads=n_threads,
                         broadcast_grads=broadcast_grads,
                         master_weights=master_weights, state_dtype=state_dtype,
                         state_rounding=state_rounding, seed=seed, decay_mode=decay_mode)

    def _defaults(self, hyper):
        return dict(hyper, decoupled_weight_decay=self._decoupled)

    def _kwargs(self, group):
        return dict(super()._kwargs(group), decoupled=group["decoupled_weight_decay"])

    def _rule(self, kw):
        return "adamw_torch" if kw["decoupled"] else self._RULE
