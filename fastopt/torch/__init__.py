"""torch.optim optimizers whose step is one fastopt C call, on CPU tensors.

Drop-ins, with torch's own names, defaults and state::

    import fastopt.torch
    # opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    opt = fastopt.torch.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)

:class:`SGD`, :class:`Adagrad`, :class:`Adam`, :class:`AdamW` and
:class:`RMSprop` take the
arguments of the torch.optim classes of the same name (torch 2.13), keep the
same state (``'step'``, ``'momentum_buffer'``, ``'sum'``, ``'exp_avg'``,
``'exp_avg_sq'``, ``'max_exp_avg_sq'``, ``'square_avg'``, ``'grad_avg'``;
``state_dict()`` has torch's shape,
so checkpoints move both ways) and compute torch's update (SGD's bit for bit,
with torch's fused multiply-adds; the others to rounding). Everything else is
torch's Optimizer:
``zero_grad``, parameter groups, ``add_param_group``, hooks and the
``torch.optim.lr_scheduler`` schedulers. What fastopt cannot honour is
refused with an error, not approximated: ``foreach``, ``fused``,
``capturable`` or ``differentiable`` set to True, tensor hyperparameters of
more than one element, parameters that are not CPU float32/float64 (complex
included; bfloat16 and float16 ones are updated in their own type or
through float32 masters, below), sparse gradients.

:class:`OnnxMomentum`, :class:`OnnxAdagrad` and :class:`OnnxAdam` are the
ONNX training operators with their own hyperparameter names (ONNX Adam adds
epsilon before the bias correction, unlike torch). The same scheme holds in
every fastopt module (docs/mappings.md): a torch name means torch's
optimizer, an ONNX form says ONNX in its name.

One step, every parameter group: the parameters, their gradients and the
states, as NumPy views of the tensors' memory (nothing copied), go to ONE C
call (``fastopt._step``) in which every group's hyperparameters travel with
its tensors. Every group's hyperparameters, every parameter, gradient and
state (dtype, device, layout, shape: torch's ``load_state_dict`` does not
check shapes) and every step count are checked before anything is written:
a step that raises changes no parameter, state or count. Gradients are
read as they were when ``step()`` was called, also one that shares memory
with a parameter the step updates (torch.optim, which runs group after
group, would read such a gradient after updating that parameter).

Step counts are per parameter, as in torch: a parameter without a gradient
is skipped and keeps its count and state.

After a step has run, the next ones are prepared: they re-check per
parameter only what torch lets change between steps (the gradient, the
data address and shape of the parameter and its states, its count; the
group lists, the hyperparameters and ``state``'s entries), about 1-4 us a
parameter instead of 7-13; anything else changed runs the full step
above. Until a step notices a change, the optimizer holds the memory of
the parameters and states it last updated (after ``p.data = new``, the old
memory is released by the next step).

The flat layout
---------------
With ``flat=True`` (the drop-ins: SGD, Adagrad, Adam, AdamW, RMSprop, Adamax, Adadelta,
RAdam, NAdam, Lion, AdEMAMix) the optimizer moves, when it is built, every parameter
that requires grad into memory that fastopt allocates: per parameter group and dtype
(float32, float64, or 16-bit updated in its own type, states rounded to nearest), one
contiguous buffer of the parameters and one of their gradients (large buffers 2
MiB-aligned and advised to sit on huge pages where the OS offers them). Each parameter's
``.data`` becomes a view of its buffer (values and shape unchanged, now contiguous), a
``.grad`` it has a view of the gradient buffer, and the states the steps create move
into buffers of their own, ``opt.state`` holding views of them (``'step'`` and NAdam's
``'mu_product'`` too). autograd accumulates into an existing ``.grad`` in place, so
after :meth:`zero_grad` the backward pass writes straight into the buffers.

A step then checks, per parameter, only that the layout still holds (the parameter's
data address, dtype and shape; its ``.grad`` the layout's view at its address; its state
entries the layout's) and runs ONE C call over the buffers (one work entry per group and
dtype, or per run of parameters whose counts agree). If anything moved (``.grad`` set to
None or replaced, ``p.data = ...``, a state replaced, ``load_state_dict``,
hyperparameters that need other states) the step takes the checked route above over the
same memory, with the same numbers, and the flat step resumes once the layout holds
again (states found outside the buffers are copied into them; :meth:`zero_grad` puts the
gradient views back). A parameter added by ``add_param_group`` gets buffers of its own.

What changes for the user:

- ``zero_grad()`` (and ``zero_grad(set_to_none=False)``) zeroes the
  gradient buffers and keeps the views; a ``.grad`` that is there but is
  not its view (a backward's first gradient) becomes it, zeroed; a ``None``
  stays ``None``, as with torch's ``set_to_none=False``. So a parameter
  that took no part in a backward steps with a zero gradient, as in
  torch.optim after ``zero_grad(set_to_none=False)``, where torch's default
  would skip it. ``zero_grad(set_to_none=True)``, given explicitly, sets
  every ``.grad`` to None as torch does; the steps then take the checked
  route until a ``zero_grad()`` after the next backward puts the views back.
- Every parameter of the buffers needs its gradient there for the flat
  step: one that never gets a gradient (left out of the forward pass, or
  set to None each step) keeps the optimizer on the checked route. A
  parameter that does not require grad when the optimizer is built stays
  where it is; it must have no gradient for the flat step.
- The parameters are views of one storage: ``torch.save`` of one
  parameter (not of a ``state_dict``) writes the whole buffer, and memory
  shared between parameters before (which ``flat=True`` refuses, as it
  would end) or views taken of a parameter before the optimizer was built
  no longer follow it.
- ``state_dict()`` holds the state views (as torch's holds its state
  tensors, not copies); checkpoints move between flat, non-flat and
  torch.optim optimizers both ways.

Mixed precision
---------------
Without ``master_weights``, the drop-ins of the torch-form rules (not LAMB,
LARS or the ONNX forms) update a bfloat16 or float16 model in its own
type, as torch's fused CPU kernels do: states of the parameter's dtype,
the arithmetic in float32 on the widened values, the new parameter and
states rounded to nearest (docs/semantics.md, "16-bit parameters in their
own type"; ``state_rounding="stochastic"`` rounds a bfloat16 model's
states stochastically, which ``flat=True`` refuses).

With ``master_weights=True`` an optimizer takes bfloat16 and float16
parameters (a model cast with ``.to(torch.bfloat16)``): it keeps a float32
master of each in ``state[p]['master_param']``, runs the rule on the
masters with the 16-bit gradients widened exactly (the float32 step's bits),
and writes each new master into its parameter, rounded as ``.to()``
rounds, in the same C pass. float32/float64 parameters are their own
masters. With ``state_dtype="bfloat16"`` (every drop-in of a torch-form rule)
the rule's states are kept in bfloat16, for float32 parameters or masters:
first moments round to nearest, and the slots that nearest rounding would
stall round stochastically (``state_rounding``; parameter k's rounding is
keyed by ``seed`` and k, docs/semantics.md, "bfloat16 states"; without them
or a 16-bit model in its own type, any but "auto" is refused). Their steps
take the prepared step as others do (a master is checked per step as a state
is; ``flat=True`` is refused), ``state_dict()`` holds the masters and the
states in their own dtypes, and ``load_state_dict`` keeps them so (torch's
would cast them to the parameter's dtype).

``state_dtype="int8-blockwise"``: bitsandbytes' 8-bit states for float32
parameters of 4096 elements or more (``state[p][name]`` uint8 codes, its
``name + "_absmax"`` a float32 per 256; a group's ``"state_dtype": "float32"``
keeps float32 ones), the checked route each step; bitsandbytes' names (``Adam8bit``,
``AdamW8bit``, ``SGD8bit``, ``Adagrad8bit``, ``RMSprop8bit``, ``Lion8bit``) take its
arguments, ``load_state_dict`` its state dicts, and ``to_bitsandbytes(opt)`` gives one it loads.

Every optimizer here works with ``torch.amp.GradScaler``: the scaler hands
the step its scale and whether it found an inf or NaN, and the C call
divides the scale out (the gradients keep their values) or the step is
skipped, writing nothing.

This module imports torch; ``import fastopt`` alone never does.
"""
from typing import ClassVar as _ClassVar

if __name__ == "torch":  # pragma: no cover - run with fastopt/ itself on sys.path
    raise ImportError(
        "fastopt/torch/ was imported as the top-level package 'torch', because the "
        "fastopt package directory is on sys.path (e.g. a script run from inside "
        "it). Run from elsewhere, or with `python -m`.")

try:
    import torch  # the real PyTorch: imports are absolute
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("fastopt.torch needs PyTorch (CPU build is enough), which is not "
                      "installed") from exc

from .. import _step
from ._base import _FastoptOptimizer, _scalar, _step_tensor, _zeros
from ._bnb8 import NAMES as _BNB8
from ._bnb8 import classes as _bnb8
from ._bnb8 import to_bitsandbytes
from ._generic import CLASSES as _CLASSES

# the rules of the table (fastopt._rules.TORCH_RULES): RMSprop, ...
globals().update(_CLASSES)

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    *_BNB8,
    "to_bitsandbytes",
    "OnnxAdagrad",
    "OnnxAdam",
    "OnnxMomentum",
    *_CLASSES,
]


# ---- torch.optim drop-ins ------------------------------------------------------

_MAXIMIZE = {"maximize": "bool"}


class SGD(_FastoptOptimizer):
    """torch.optim.SGD (momentum, dampening, weight decay, Nesterov, maximize).

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups, as for any torch optimizer.
    lr : float, default 1e-3
    momentum, dampening, weight_decay : float, default 0
    nesterov : bool, default False
        Needs momentum > 0 and dampening 0.
    maximize : bool, default False
    foreach, differentiable, fused
        torch's; only their defaults (None/False) are supported.
    n_threads : int, optional
        Threads for the C step (None: fastopt's current default).
    flat : bool, default False
        Parameters, gradients and states in fastopt's flat buffers: a step
        is one C call after a short check (see the module, "The flat
        layout").
    master_weights, state_dtype, state_rounding, seed
        Mixed precision: bfloat16/float16 parameters through float32
        masters (else updated in their own type), bfloat16 states (see the
        module, "Mixed precision").

    Notes
    -----
    State, as torch's: ``'momentum_buffer'`` (only with momentum). The first
    update of a parameter copies its (decayed) gradient into the buffer.
    """

    _SPEC: _ClassVar[dict] = {"lr": "lr", "momentum": {"low": 0.0}, "dampening": {},
                             "weight_decay": {"low": 0.0}, "nesterov": "bool", **_MAXIMIZE}
    _COUNTS = False
    _ROW = "sgd_torch"

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None, n_threads=None, flat=False, master_weights=False,
                 state_dtype=None, state_rounding="auto", seed=0):
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("fastopt.torch.SGD: nesterov needs a momentum > 0 and "
                             "dampening 0")
        d = {"lr": lr, "momentum": momentum, "dampening": dampening,
             "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize,
             "foreach": foreach, "differentiable": differentiable, "fused": fused}
        super().__init__(params, d, n_threads, flat,
                         (master_weights, state_dtype, state_rounding, seed))

    def _group(self, h):
        mom = h["momentum"]
        flags = ((_step.NESTEROV if h["nesterov"] and mom != 0 else 0)
                 | (_step.MAXIMIZE if h["maximize"] else 0))
        fields = {"rule": _step.RULES["sgd_torch"], "lr": h["lr"], "alpha": mom,
                  "beta": h["dampening"], "decay": h["weight_decay"], "flags": flags}
        return fields, (("momentum_buffer",) if mom != 0 else ())

    def _new_states(self, p, st, names, h):
        if names and st.get("momentum_buffer") is None:
            return {"momentum_buffer": _zeros(p)}   # torch: the buffer is None
        return {}

    def _t(self, f, where, full, new):
        return 0 if "momentum_buffer" in new else 1   # 0: buffer = gradient


class Adagrad(_FastoptOptimizer):
    """torch.optim.Adagrad (lr decay, weight decay, initial accumulator, maximize).

    Parameters
    ----------
    params : iterable of Tensor or dict
    lr : float, default 1e-2
    lr_decay, weight_decay, initial_accumulator_value : float, default 0
    eps : float, default 1e-10
    foreach : None
        torch's (positional here as there); only None/False is supported.
    maximize : bool, default False
    differentiable, fused
        torch's; only their defaults are supported.
    n_threads : int, optional
    flat : bool, default False
        Parameters, gradients and states in fastopt's flat buffers: a step
        is one C call after a short check (see the module, "The flat
        layout").
    master_weights, state_dtype, state_rounding, seed
        Mixed precision: bfloat16/float16 parameters through float32
        masters (else updated in their own type), bfloat16 states (see the
        module, "Mixed precision").

    Notes
    -----
    State, as torch's: ``'step'`` (a float scalar tensor) and ``'sum'``,
    created when the optimizer is built (filled with
    initial_accumulator_value) or, for parameters added later, on their
    first update (with the optimizer's default initial_accumulator_value,
    as torch does).
    """

    _SPEC: _ClassVar[dict] = {"lr": "lr", "lr_decay": {"low": 0.0},
                             "weight_decay": {"low": 0.0},
                             "initial_accumulator_value": {"low": 0.0},
                             "eps": {"low": 0.0}, **_MAXIMIZE}
    _ROW = "adagrad_torch"

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
                 initial_accumulator_value=0, eps=1e-10, foreach=None, *, maximize=False,
                 differentiable=False, fused=None, n_threads=None, flat=False,
                 master_weights=False, state_dtype=None, state_rounding="auto", seed=0):
        d = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
             "initial_accumulator_value": initial_accumulator_value, "foreach": foreach,
             "maximize": maximize, "differentiable": differentiable, "fused": fused}
        super().__init__(params, d, n_threads, flat,
                         (master_weights, state_dtype, state_rounding, seed))
        for group in self.param_groups:
            for p in group["params"]:
                if p.is_floating_point():   # the others are refused by step()
                    like = p if not self._mixed.active else \
                        torch.empty_like(p, dtype=self._mixed.states_dtype(p))
                    self.state[p] = self._new_states(like, {}, ("sum",), None,
                                                     initial_accumulator_value)

    def share_memory(self) -> None:
        """Move the 'sum' states to shared memory (torch's Adagrad.share_memory)."""
        for group in self.param_groups:
            for p in group["params"]:
                if "sum" in self.state.get(p, {}):
                    self.state[p]["sum"].share_memory_()

    def _group(self, h):
        fields = {"rule": _step.RULES["adagrad_torch"], "lr": h["lr"], "eps": h["eps"],
                  "decay": h["weight_decay"], "lr_decay": h["lr_decay"],
                  "flags": _step.MAXIMIZE if h["maximize"] else 0}
        return fields, ("sum",)

    def _new_states(self, p, st, names, h, init=None):
        if st:
            return {}
        init = self.defaults["initial_accumulator_value"] if init is None else init
        return {"step": _step_tensor(),
                "sum": torch.full_like(p, _scalar("", "", init),
                                       memory_format=torch.preserve_format)}


class Adam(_FastoptOptimizer):
    """torch.optim.Adam (amsgrad, maximize; decoupled_weight_decay: AdamW).

    Torch's epsilon placement: ``denom = sqrt(v) / sqrt(1 - beta2**t) + eps``
    and step size ``lr / (1 - beta1**t)``; weight_decay is L2 (added to the
    gradient) unless ``decoupled_weight_decay``. Not :class:`OnnxAdam`.

    Parameters
    ----------
    params : iterable of Tensor or dict
    lr : float, default 1e-3
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-8
    weight_decay : float, default 0
    amsgrad : bool, default False
    maximize : bool, default False
    decoupled_weight_decay : bool, default False
        True: AdamW's decay (``x *= 1 - lr * weight_decay`` first).
    foreach, capturable, differentiable, fused
        torch's; only their defaults are supported.
    n_threads : int, optional
    flat : bool, default False
        Parameters, gradients and states in fastopt's flat buffers: a step
        is one C call after a short check (see the module, "The flat
        layout").
    master_weights, state_dtype, state_rounding, seed
        Mixed precision: bfloat16/float16 parameters through float32
        masters (else updated in their own type), bfloat16 states (see the
        module, "Mixed precision").

    Notes
    -----
    State, as torch's: ``'step'`` (a float scalar tensor), ``'exp_avg'``,
    ``'exp_avg_sq'`` and, with amsgrad, ``'max_exp_avg_sq'`` (created from
    zeros if amsgrad is turned on later).
    """

    _SPEC: _ClassVar[dict] = {"lr": "lr", "betas": "betas", "eps": {"low": 0.0},
                             "weight_decay": {"low": 0.0}, "amsgrad": "bool", **_MAXIMIZE,
                             "decoupled_weight_decay": "bool"}
    _ROW = "adam_torch"     # (or adamw_torch: the same table facts)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False,
                 n_threads=None, flat=False, master_weights=False, state_dtype=None,
                 state_rounding="auto", seed=0):
        d = {"lr": lr, "betas": tuple(betas) if isinstance(betas, list) else betas,
             "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad,
             "maximize": maximize, "foreach": foreach, "capturable": capturable,
             "differentiable": differentiable,
             "fused": fused, "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, d, n_threads, flat,
                         (master_weights, state_dtype, state_rounding, seed))

    def _group(self, h):
        b1, b2 = h["betas"]
        rule = "adamw_torch" if h["decoupled_weight_decay"] else "adam_torch"
        flags = ((_step.AMSGRAD if h["amsgrad"] else 0)
                 | (_step.MAXIMIZE if h["maximize"] else 0))
        fields = {"rule": _step.RULES[rule], "lr": h["lr"], "alpha": b1, "beta": b2,
                  "eps": h["eps"], "decay": h["weight_decay"], "flags": flags}
        names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if h["amsgrad"] else ())
        return fields, names

    def _new_states(self, p, st, names, h):
        if not st:
            return {"step": _step_tensor(), **{n: _zeros(p) for n in names}}
        if "max_exp_avg_sq" in names and "max_exp_avg_sq" not in st:
            return {"max_exp_avg_sq": _zeros(p)}
        return {}


class AdamW(Adam):
    """torch.optim.AdamW: :class:`Adam` with decoupled weight decay
    (``x *= 1 - lr * weight_decay`` before the update), default 1e-2.

    Parameters
    ----------
    params, lr, betas, eps, amsgrad, maximize, n_threads, flat
        As :class:`Adam`.
    weight_decay : float, default 1e-2
    foreach, capturable, differentiable, fused
        torch's; only their defaults are supported.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None, n_threads=None, flat=False,
                 master_weights=False, state_dtype=None, state_rounding="auto", seed=0):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True, n_threads=n_threads, flat=flat,
                         master_weights=master_weights, state_dtype=state_dtype,
                         state_rounding=state_rounding, seed=seed)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True


# ---- the ONNX operators ----------------------------------------------------------

class _Onnx(_FastoptOptimizer):
    """An ONNX rule: state['step'] is an int, T = step + _T_ADD."""

    _RULE = ""
    _STATES: tuple = ()
    _T_ADD = 0

    def _group(self, h):
        return self._fields(h), self._STATES

    def _new_states(self, p, st, names, h):
        if st:
            return {}
        fill = h.get("initial_accumulator_value", 0.0)
        new = {"step": 0}
        for name in names:
            new[name] = torch.full_like(p, fill, memory_format=torch.preserve_format)
        return new


class OnnxMomentum(_Onnx):
    """ONNX Momentum (torch.optim.SGD with momentum, in ONNX's names).

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups, as for any torch optimizer.
    lr : float
    alpha : float, default 0.9
        torch ``momentum``.
    beta : float, default 1.0
        torch ``1 - dampening`` (ignored on a parameter's first update).
    norm_coefficient : float, default 0.0
        torch ``weight_decay``.
    nesterov : bool, default False
    n_threads : int, optional
        Threads for the C step (None: fastopt's current default).
    master_weights : bool, default False
        bfloat16/float16 parameters through float32 masters (see the
        module, "Mixed precision").

    Notes
    -----
    State: ``'step'`` (an int, T) and ``'momentum_buffer'``.
    """

    _STATES = ("momentum_buffer",)
    _SPEC: _ClassVar[dict] = {"lr": "lr", "alpha": {}, "beta": {}, "norm_coefficient": {},
                             "nesterov": "bool"}

    def __init__(self, params, lr, alpha=0.9, beta=1.0, norm_coefficient=0.0,
                 nesterov=False, *, n_threads=None, master_weights=False):
        d = {"lr": lr, "alpha": alpha, "beta": beta, "norm_coefficient": norm_coefficient,
             "nesterov": nesterov}
        super().__init__(params, d, n_threads, False, (master_weights, None, "auto", 0))

    def _fields(self, h):
        return {"rule": _step.RULES["momentum"], "lr": h["lr"], "alpha": h["alpha"],
                "beta": h["beta"], "decay": h["norm_coefficient"],
                "flags": _step.NESTEROV if h["nesterov"] else 0}


class OnnxAdagrad(_Onnx):
    """ONNX Adagrad (torch.optim.Adagrad, in ONNX's names).

    Parameters
    ----------
    params : iterable of Tensor or dict
    lr : float
    decay_factor : float, default 0.0
        torch ``lr_decay``.
    epsilon : float, default 1e-6
        torch ``eps`` (whose default is 1e-10).
    norm_coefficient : float, default 0.0
        torch ``weight_decay``.
    initial_accumulator_value : float, default 0.0
    n_threads : int, optional
    master_weights : bool, default False
        bfloat16/float16 parameters through float32 masters (see the
        module, "Mixed precision").

    Notes
    -----
    State: ``'step'`` (an int, T) and ``'sum'``.
    """

    _STATES = ("sum",)
    _SPEC: _ClassVar[dict] = {"lr": "lr", "decay_factor": {"low": 0.0},
                             "epsilon": {"low": 0.0}, "norm_coefficient": {},
                             "initial_accumulator_value": {"low": 0.0}}

    def __init__(self, params, lr, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0,
                 initial_accumulator_value=0.0, *, n_threads=None, master_weights=False):
        d = {"lr": lr, "decay_factor": decay_factor, "epsilon": epsilon,
             "norm_coefficient": norm_coefficient,
             "initial_accumulator_value": initial_accumulator_value}
        super().__init__(params, d, n_threads, False, (master_weights, None, "auto", 0))

    def _fields(self, h):
        return {"rule": _step.RULES["adagrad"], "lr": h["lr"], "eps": h["epsilon"],
                "decay": h["norm_coefficient"], "lr_decay": h["decay_factor"]}


class OnnxAdam(_Onnx):
    """ONNX Adam on CPU tensors (T = 1 on a parameter's first update).

    Equals torch.optim.Adam(betas=(alpha, beta), eps=0, weight_decay=
    norm_coefficient) when ``epsilon=0`` and ``norm_coefficient_post=0``:
    ONNX adds epsilon before the bias correction (ONNX eps = torch eps *
    sqrt(1 - beta**t)), and ``norm_coefficient_post`` decays after the step,
    unlike AdamW's decoupled decay before it. For torch's Adam, use
    :class:`Adam`.

    Parameters
    ----------
    params : iterable of Tensor or dict
    lr : float
    alpha, beta : float, default 0.9 and 0.999
    epsilon : float, default 1e-6
    norm_coefficient : float, default 0.0
    norm_coefficient_post : float, default 0.0
    n_threads : int, optional
    master_weights : bool, default False
        bfloat16/float16 parameters through float32 masters (see the
        module, "Mixed precision").

    Notes
    -----
    State: ``'step'`` (an int, T - 1), ``'exp_avg'`` and ``'exp_avg_sq'``.
    """

    _STATES = ("exp_avg", "exp_avg_sq")
    _T_ADD = 1
    _SPEC: _ClassVar[dict] = {"lr": "lr",
                             "alpha": {"low": 0.0, "high": 1.0, "high_open": True},
                             "beta": {"low": 0.0, "high": 1.0}, "epsilon": {"low": 0.0},
                             "norm_coefficient": {}, "norm_coefficient_post": {}}

    def __init__(self, params, lr, alpha=0.9, beta=0.999, epsilon=1e-6,
                 norm_coefficient=0.0, norm_coefficient_post=0.0, *, n_threads=None,
                 master_weights=False):
        d = {"lr": lr, "alpha": alpha, "beta": beta, "epsilon": epsilon,
             "norm_coefficient": norm_coefficient,
             "norm_coefficient_post": norm_coefficient_post}
        super().__init__(params, d, n_threads, False, (master_weights, None, "auto", 0))

    def _fields(self, h):
        return {"rule": _step.RULES["adam"], "lr": h["lr"], "alpha": h["alpha"],
                "beta": h["beta"], "eps": h["epsilon"], "decay": h["norm_coefficient"],
                "decay_post": h["norm_coefficient_post"]}


globals().update(_bnb8(globals()))          # bitsandbytes' names: Adam8bit, ...
# Old names, kept for one release: each warns and returns its new name's class.
_DEPRECATED = {"Momentum": ("OnnxMomentum", "the same class; torch.optim.SGD is "
                            "fastopt.torch.SGD")}


def __getattr__(name):
    if name in _DEPRECATED:
        from .._deprecated import resolve

        return resolve(__name__, globals(), _DEPRECATED, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
