"""Shared by the tests of fastopt.onnx's functional forms and backend: ONNX
attribute sets, ONNX-ordered tensor inputs, and fastopt's in-place function
as the reference of a functional form.
"""
from __future__ import annotations

import numpy as np
import public_names

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
TOL = {F32: dict(rtol=1e-5, atol=1e-6), F64: dict(rtol=1e-12, atol=1e-12)}
DOMAIN = "ai.onnx.preview.training"
NSTATES = {"momentum": 1, "adagrad": 1, "adam": 2}
ATTRS = {
    "momentum": dict(alpha=0.9, beta=0.7, mode="nesterov", norm_coefficient=0.01),
    "adagrad": dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01),
    "adam": dict(alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.01,
                 norm_coefficient_post=0.0625),
}


def tensors(rng, op, shapes, dtypes, g_shapes=None):
    """ONNX-ordered tensor inputs: all X, all G, then each state."""
    g_shapes = g_shapes or shapes
    xs = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
    gs = [rng.standard_normal(s).astype(d) for s, d in zip(g_shapes, dtypes)]
    states = []
    for _ in range(NSTATES[op]):
        states += [np.array(np.abs(rng.standard_normal(s)), dtype=d)
                   for s, d in zip(shapes, dtypes)]
    return xs + gs + states


def inplace(op, R, T, inputs, attrs):
    """The reference for the functional form: fastopt's in-place function."""
    n = len(inputs) // (2 + NSTATES[op])
    xs = [a.copy() for a in inputs[:n]]
    gs = list(inputs[n:2 * n])
    states = [[a.copy() for a in inputs[(2 + k) * n:(3 + k) * n]]
              for k in range(NSTATES[op])]
    public_names.op(op)(xs, gs, *states, lr=R, t=T, **attrs)
    return xs + [a for s in states for a in s]
