"""Stateful optimizers over fastopt's kernels, named as everywhere in
fastopt (docs/mappings.md): :class:`SGD`, :class:`Adagrad`, :class:`Adam`,
:class:`AdamW` and :class:`RMSprop` are torch.optim's, with torch's
argument names, defaults and math; :class:`OnnxMomentum`,
:class:`OnnxAdagrad` and :class:`OnnxAdam` are the ONNX operators.

An optimizer owns the state arrays of a list of NumPy parameters and the
update count, and turns ``step(grads)`` into ONE fastopt C call over every
parameter group (unscale, non-finite skip and global-norm clipping fused
in: ``step(grads, grad_scale=..., skip_if_nonfinite=...,
max_grad_norm=...)``; the norm measured is ``opt.last_grad_norm``)::

    import fastopt.optim
    opt = fastopt.optim.Adam(params, lr=1e-3)
    for batch in data:
        grads = backward(params, batch)      # arrays, one per parameter
        opt.step(grads)                      # params updated in place
    opt.save("ckpt.npz")                     # atomic; opt.load resumes bit-exactly

Parameter groups work as in torch and MindSpore: ``params`` may be a list of
dicts, each with ``"params"`` and any per-group hyperparameter (``lr``,
``weight_decay``, ``clipping=None`` to exclude a layer from AGC, its own
``schedule`` ...); the keyword arguments are the defaults of every group.

The torch-named optimizers count steps as torch does (1 on the first
update). The ONNX ones follow each ONNX operator's T convention
(docs/semantics.md, section 1): the first update is made with T = 0 by
OnnxMomentum and OnnxAdagrad and with T = 1 by OnnxAdam (bias-corrected).
``schedule`` is any callable ``schedule(step) -> float`` (for instance the
objects of :mod:`fastopt.schedules`, or a lambda), called with the number of
steps applied so far (0 for the first update); its value is the learning
rate of that step.

Layout: ``_base.py`` (the shared optimizer: groups, state, step),
``sgd.py`` / ``adagrad.py`` / ``adamw.py`` (torch's rules; ``RMSprop`` is
built from its table row by ``_generic.py``), ``onnx_momentum.py`` /
``onnx_adagrad.py`` / ``onnx_adam.py`` (the ONNX operators),
``checkpoint.py`` (state dicts, save/load, CheckpointError), ``_checks.py``
(hyperparameter checkers), ``_groups.py`` (groups and state allocation),
``_grads.py`` (a step's gradients: split, checked).
"""
from ._generic import CLASSES as _CLASSES
from .adagrad import Adagrad
from .adamw import Adam, AdamW
from .checkpoint import CheckpointError
from .onnx_adagrad import OnnxAdagrad
from .onnx_adam import OnnxAdam
from .onnx_momentum import OnnxMomentum
from .sgd import SGD

# the rules of the table (fastopt._rules.TORCH_RULES): RMSprop, ...
globals().update(_CLASSES)

__all__ = ["SGD", "Adagrad", "Adam", "AdamW", *_CLASSES, "OnnxMomentum", "OnnxAdagrad",
           "OnnxAdam", "CheckpointError"]

# Old names, kept for one release: each warns and returns its new name's class.
_DEPRECATED = {
    "Momentum": ("OnnxMomentum", "the same class; torch.optim.SGD is fastopt.optim.SGD"),
    "AdamTorch": ("Adam", "the same class"),
}


def __getattr__(name):
    if name in _DEPRECATED:
        from .._deprecated import resolve

        return resolve(__name__, globals(), _DEPRECATED, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
