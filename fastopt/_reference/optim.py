"""The contract of fastopt.optim's optimizer objects, replayed tensor by tensor.

An optimizer step is, by contract, one call of its update rule per parameter
with the group's hyperparameters and ``t = steps + t0`` (t0 is 0 for Momentum
and Adagrad, 1 for Adam: ONNX's T conventions), after dividing the gradients
by ``grad_scale`` and, with ``skip_if_nonfinite``, skipping the whole step
when a gradient holds a non-finite value. Parameters whose gradient is None
are left alone. :class:`Optimizer` replays exactly that on its own copies.

The rule is by default the slow reference of :mod:`.ops` evaluated in each
parameter's dtype (bit for bit what the kernels compute); pass ``update=``
(e.g. ``fastopt.onnx_momentum``) to replay through another implementation.
"""
from __future__ import annotations

import numpy as np

from . import ops

# optimizer class name: (rule name, state names, T of the first update)
RULES = {"Momentum": ("momentum", ("v",), 0), "Adagrad": ("adagrad", ("h",), 0),
         "Adam": ("adam", ("v", "h"), 1)}


def rule_kwargs(hyper: dict) -> dict:
    """An optimizer's hyperparameters as the keywords of its update rule."""
    kw = dict(hyper)
    kw.pop("initial_accumulator_value", None)
    if "nesterov" in kw:
        kw["mode"] = "nesterov" if kw.pop("nesterov") else "standard"
    return kw


def _in_dtype(rule):
    """The reference rule evaluated in x's dtype, written back in place."""
    def update(x, g, *states, **kw):
        out = rule(x, g, *states, dtype=x.dtype, **kw)
        for dst, src in zip((x, *states), out):
            dst[...] = src
    return update


class Optimizer:
    """Replays optimizer ``name``'s steps over copies of ``params``.

    ``defaults`` are the optimizer's keyword hyperparameters; ``groups[i]``
    (optional) the overrides of parameter i's group. ``xs`` and ``states``
    (``states[i][j]``: state j of parameter i) hold the replayed values.
    """

    def __init__(self, name, params, defaults, groups=None, update=None):
        rule, self.state_names, self.t0 = RULES[name]
        self.update = update or _in_dtype(getattr(ops, rule))
        self.xs = [np.array(p) for p in params]
        self.hyper = [dict(defaults, **(groups[i] if groups else {}))
                      for i in range(len(self.xs))]
        self.states = [[np.full(x.shape, hp.get("initial_accumulator_value", 0.0), x.dtype)
                        if s == "h" else np.zeros(x.shape, x.dtype)
                        for s in self.state_names]
                       for x, hp in zip(self.xs, self.hyper)]
        self.steps = 0

    def step(self, grads, scale=None, skip=False) -> bool:
        """One step; returns whether it was applied."""
        if scale is not None:
            grads = [None if g is None else np.asarray(np.divide(g, g.dtype.type(scale)))
                     for g in grads]
        if skip and not all(np.isfinite(g).all() for g in grads if g is not None):
            return False
        for x, g, st, hp in zip(self.xs, grads, self.states, self.hyper):
            if g is not None:
                self.update(x, g, *st, **rule_kwargs(hp), t=self.steps + self.t0)
        self.steps += 1
        return True
