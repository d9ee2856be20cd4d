"""Stateful optimizers over fastopt's kernels: Momentum, Adagrad, Adam (ONNX
forms), AdamW, AdamTorch and RMSprop (torch.optim's AdamW, Adam and RMSprop).

An optimizer owns the state tensors (V, H) of a list of NumPy parameters and
the update count T, and turns ``step(grads)`` into ONE fastopt C call over
every parameter group (unscale, non-finite skip and global-norm clipping
fused in: ``step(grads, grad_scale=..., skip_if_nonfinite=...,
max_grad_norm=...)``; the norm measured is ``opt.last_grad_norm``)::

    import fastopt.optim
    opt = fastopt.optim.Adam(params, lr=1e-3)
    for batch in data:
        grads = backward(params, batch)      # arrays, one per parameter
        opt.step(grads)                      # params updated in place
    opt.save("ckpt.npz")                     # atomic; opt.load resumes bit-exactly

Parameter groups work as in torch and MindSpore: ``params`` may be a list of
dicts, each with ``"params"`` and any per-group hyperparameter (``lr``,
``norm_coefficient``, ``clipping=None`` to exclude a layer from AGC, its own
``schedule`` ...); the keyword arguments are the defaults of every group.

The update count follows each ONNX operator's T convention (docs/semantics.md,
section 1): the first update is made with T = 0 by Momentum and Adagrad and
with T = 1 by Adam (bias-corrected); it advances by one after each applied
step. ``schedule`` is any callable ``schedule(step) -> float`` (for instance
the objects of :mod:`fastopt.schedules`, or a lambda), called with the number
of steps applied so far (0 for the first update); its value is the learning
rate of that step.

Layout: ``_base.py`` (the shared optimizer: groups, state, step),
``momentum.py`` / ``adagrad.py`` / ``adam.py`` (one rule each),
``checkpoint.py`` (state dicts, save/load, CheckpointError), ``_checks.py``
(hyperparameter checkers), ``_groups.py`` (groups and state allocation),
``_grads.py`` (a step's gradients: split, checked).
"""
from ._generic import CLASSES as _CLASSES
from .adagrad import Adagrad
from .adam import Adam
from .adamw import AdamTorch, AdamW
from .checkpoint import CheckpointError
from .momentum import Momentum

# the rules of the table (fastopt._rules.TORCH_RULES): RMSprop, ...
globals().update(_CLASSES)

__all__ = ["Momentum", "Adagrad", "Adam", "AdamW", "AdamTorch", *_CLASSES, "CheckpointError"]
