"""fastopt.optim.OnnxMomentum: SGD with momentum (ONNX Momentum), Nesterov, AGC."""
from __future__ import annotations

from .. import _ops, _step
from . import _checks as _c
from ._base import _Optimizer


class OnnxMomentum(_Optimizer):
    """SGD with momentum (ONNX Momentum), optionally Nesterov and AGC-clipped.

    The ONNX operator's names and T convention; torch.optim.SGD is
    :class:`SGD`.

    Each step runs :func:`fastopt.onnx_momentum` once per parameter group with
    T = 0 on the first update (so beta is ignored then, as torch ignores
    dampening on its first step) and T = the step count afterwards.

    Parameters
    ----------
    params : list of ndarray, or list of dict
        float32/float64 arrays updated in place, or parameter groups: dicts
        with ``"params"`` (a list of arrays) and any of the hyperparameters
        below, which then override the defaults for that group.
    lr : float, optional
        Learning rate (>= 0). May be omitted when ``schedule`` is given.
    alpha, beta, norm_coefficient : float, default 0.9, 1.0 and 0.0
        As in :func:`fastopt.onnx_momentum`: the momentum coefficient (torch.optim.SGD
        ``momentum``), the gradient coefficient after the first update (torch
        ``1 - dampening``) and the L2 coefficient (torch ``weight_decay``).
    nesterov : bool, default False
        Nesterov momentum (ONNX mode="nesterov").
    clipping : float or list, optional
        Adaptive gradient clipping (NFNet AGC) threshold applied to the
        gradients before the update: a float for every tensor of the group,
        or a per-tensor list in which None excludes a tensor (NFNet excludes
        the final classifier). None disables clipping.
    clip_eps : float, default 1e-3
        AGC's floor on the parameter norm.
    clip_layout : {"oi", "io"}, default "oi"
        Which axis of a weight holds the output units: "oi" for PyTorch
        layouts (OI, OIHW), "io" for JAX/Haiku (IO, HWIO).
    schedule : callable, optional
        Any ``schedule(step) -> float`` (e.g. a :mod:`fastopt.schedules`
        object or a lambda), called with the number of steps applied so far
        (0 for the first); its value replaces ``lr``. A group may give its
        own ``"schedule"``, or ``"schedule": None`` to use a fixed ``"lr"``.
    contiguous_state : bool, default False
        Allocate all states of one dtype in one contiguous, 64-byte aligned
        arena (:attr:`arenas`) and expose them as views.
    n_threads : int, optional
        Threads for the kernels (None: fastopt's current default).
    broadcast_grads : bool, default False
        Accept a gradient that broadcasts to its parameter's shape (NumPy
        rules, as the functions such as :func:`fastopt.onnx_momentum` do). By
        default a gradient must have exactly its parameter's shape, as in
        torch: a (10,) gradient for a (128, 10) weight is a ValueError, not
        an update of every row.
    master_weights : bool, default False
        Keep float32 masters of 16-bit parameters (bfloat16, float16): the
        optimizer updates the masters (:attr:`params`) and, in the same
        pass, writes them rounded into the 16-bit arrays given
        (:attr:`model_params`), as ``astype`` rounds; float32/float64
        parameters are updated in place as usual. Gradients may be 16-bit
        or float32. :meth:`save` then always writes the masters (they are
        the optimizer's state) and :meth:`load` restores them and rewrites
        the 16-bit parameters from them.
    state_dtype : {None, "float32", "bfloat16", "int8-blockwise"}, default None
        The states' dtype: None keeps each parameter's own; "bfloat16"
        halves their memory for float32 parameters (or masters): each step
        widens them exactly, updates them as float32 states and rounds them
        back (docs/semantics.md, "bfloat16 states"). Not with AGC clipping.
        "int8-blockwise" keeps the states of float32 parameters of 4096
        elements or more in bitsandbytes' 8-bit blockwise format
        (:class:`fastopt.State8bit` entries in :attr:`state`; smaller ones,
        and those of a group with ``"state_dtype": "float32"``, in float32),
        for SGD, Adagrad, Adam, AdamW, RMSprop (no momentum, not centred),
        Lion, LAMB and LARS (docs/semantics.md, "8-bit states").
    state_rounding : {"auto", "nearest", "stochastic"}, default "auto"
        How bfloat16 states are rounded back (as :func:`fastopt.adamw`'s
        argument): "auto" rounds stochastically the states nearest rounding
        would stall (Adam's second moment at beta2 = 0.999, Adagrad's sums).
        Another value with no 16-bit states to round raises ValueError.
    seed : int, default 0
        The stochastic rounding's seed (0 <= seed < 2**64); with the step
        count, the parameter's index and the element's index it fixes every
        random bit, so a run is reproducible and the same for every thread
        count.
    """

    _OLD_NAMES = ("Momentum",)     # checkpoints saved under its former name
    _KERNEL = staticmethod(_ops.onnx_momentum)
    _STATES = ("v",)
    _T0 = 0
    _HYPER = {
        "lr": _c.lr_or_none,
        "alpha": _c.real(),
        "beta": _c.real(),
        "norm_coefficient": _c.real(),
        "nesterov": _c.as_bool,
        "clipping": _c.clipping,
        "clip_eps": _c.real(lo=0.0),
        "clip_layout": _c.layout,
    }

    def __init__(self, params, lr=None, alpha=0.9, beta=1.0, norm_coefficient=0.0,
                 nesterov=False, clipping=None, clip_eps=1e-3, clip_layout="oi",
                 schedule=None, *, contiguous_state=False, n_threads=None,
                 broadcast_grads=False, master_weights=False,
                 state_dtype=None, state_rounding="auto", seed=0):
        super().__init__(params, dict(lr=lr, alpha=alpha, beta=beta,
                                      norm_coefficient=norm_coefficient, nesterov=nesterov,
                                      clipping=clipping, clip_eps=clip_eps,
                                      clip_layout=clip_layout, schedule=schedule),
                         contiguous_state=contiguous_state, n_threads=n_threads,
                         broadcast_grads=broadcast_grads,
                         master_weights=master_weights, state_dtype=state_dtype,
                         state_rounding=state_rounding, seed=seed)

    def _check_extra(self, f, group, where):
        c = group["clipping"]
        label = "clipping" if where == "params" else f"{where}['clipping']"
        if isinstance(c, list) and len(c) != len(group["params"]):
            raise ValueError(f"{f}: {label} has {len(c)} entries but the group has "
                             f"{len(group['params'])} parameters")

    def _kwargs(self, group):
        kw = dict(alpha=float(group["alpha"]), beta=float(group["beta"]),
                  norm_coefficient=float(group["norm_coefficient"]),
                  mode="nesterov" if group["nesterov"] else "standard",
                  n_threads=self.n_threads)
        c = group["clipping"]
        if isinstance(c, list) and all(x is None for x in c):
            c = None
        if c is not None:
            kw.update(clipping=c, clip_eps=float(group["clip_eps"]),
                      layout=group["clip_layout"])
        return kw

    def _group_tuple(self, kw):
        if "clipping" in kw:          # AGC: one kernel call per group
            return None
        return _step.group_tuple(_step.RULES["momentum"], t=kw["t"], lr=kw["lr"],
                                 alpha=kw["alpha"], beta=kw["beta"],
                                 decay=kw["norm_coefficient"],
                                 flags=_step.NESTEROV if kw["mode"] == "nesterov" else 0)

    def _select(self, kw, sel):
        c = kw.get("clipping")
        if sel is not None and isinstance(c, list):
            c = [c[i] for i in sel]
            if all(x is None for x in c):
                for k in ("clipping", "clip_eps", "layout"):
                    del kw[k]
            else:
                kw["clipping"] = c
