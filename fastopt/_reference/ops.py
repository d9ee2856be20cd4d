"""Plain NumPy evaluations of the update rules (docs/semantics.md section 1).

These are the slow references the tests compare every fast path with, and
the "numpy formula" baseline of the benchmarks. Each returns new arrays and
modifies nothing.

``dtype=np.float64`` (the default) is the exact formula in float64. With
``dtype=np.float32`` the same expression is evaluated in float32 with the
scalar coefficients derived in double and rounded once, in the very order the
C kernels use; since the kernels are built with -ffp-contract=off and every
operation involved (+, *, /, sqrt) is correctly rounded in IEEE arithmetic,
that evaluation and fastopt agree bit for bit.
"""
from __future__ import annotations

import math

import numpy as np


def _prep(dtype, x, g, *states):
    dtype = np.dtype(dtype)
    x = np.array(x, dtype=dtype)
    g = np.broadcast_to(np.asarray(g, dtype=dtype), x.shape)
    return (dtype.type, x, g) + tuple(np.array(s, dtype=dtype) for s in states)


def momentum(x, g, v, *, lr, t, alpha=0.9, beta=1.0, norm_coefficient=0.0,
             mode="standard", dtype=np.float64):
    """ONNX Momentum: returns (x_new, v_new)."""
    c, x, g, v = _prep(dtype, x, g, v)
    b = beta if t > 0 else 1.0
    gr = c(norm_coefficient) * x + g
    vn = c(alpha) * v + c(b) * gr
    if mode == "standard":
        xn = x - c(lr) * vn
    else:
        xn = x - c(lr) * (gr + c(alpha) * vn)
    return xn, vn


def adagrad(x, g, h, *, lr, t, decay_factor=0.0, epsilon=1e-6,
            norm_coefficient=0.0, dtype=np.float64):
    """ONNX Adagrad: returns (x_new, h_new)."""
    c, x, g, h = _prep(dtype, x, g, h)
    r = lr / (1.0 + t * decay_factor)
    gr = c(norm_coefficient) * x + g
    hn = h + gr * gr
    xn = x - c(r) * gr / (np.sqrt(hn) + c(epsilon))
    return xn, hn


def adam(x, g, v, h, *, lr, t, alpha=0.9, beta=0.999, epsilon=1e-6,
         norm_coefficient=0.0, norm_coefficient_post=0.0, dtype=np.float64):
    """ONNX Adam: returns (x_new, v_new, h_new)."""
    c, x, g, v, h = _prep(dtype, x, g, v, h)
    radj = lr * math.sqrt(1.0 - beta ** t) / (1.0 - alpha ** t) if t > 0 else lr
    gr = c(norm_coefficient) * x + g
    vn = c(alpha) * v + c(1.0 - alpha) * gr
    hn = c(beta) * h + c(1.0 - beta) * gr * gr
    xn = c(1.0 - norm_coefficient_post) * (x - c(radj) * vn / (np.sqrt(hn) + c(epsilon)))
    return xn, vn, hn


def momentum_inplace(xs, gs, vs, *, lr, t, alpha=0.9, beta=1.0,
                     norm_coefficient=0.0, mode="standard"):
    """What a NumPy user writes: the formula in place, tensor by tensor, in
    each array's own dtype (the benchmarks' "numpy formula" baseline)."""
    b = beta if t > 0 else 1.0
    for x, g, v in zip(xs, gs, vs):
        gr = norm_coefficient * x + g
        v *= alpha
        v += b * gr
        if mode == "standard":
            x -= lr * v
        else:
            x -= lr * (gr + alpha * v)


def adagrad_inplace(xs, gs, hs, *, lr, t, decay_factor=0.0, epsilon=1e-6,
                    norm_coefficient=0.0):
    """In-place NumPy Adagrad, tensor by tensor (benchmark baseline)."""
    r = lr / (1.0 + t * decay_factor)
    for x, g, h in zip(xs, gs, hs):
        gr = norm_coefficient * x + g
        h += gr * gr
        x -= r * gr / (np.sqrt(h) + epsilon)


def adam_inplace(xs, gs, vs, hs, *, lr, t, alpha=0.9, beta=0.999, epsilon=1e-6,
                 norm_coefficient=0.0, norm_coefficient_post=0.0):
    """In-place NumPy Adam, tensor by tensor (benchmark baseline)."""
    radj = lr * math.sqrt(1.0 - beta ** t) / (1.0 - alpha ** t) if t > 0 else lr
    for x, g, v, h in zip(xs, gs, vs, hs):
        gr = norm_coefficient * x + g
        v *= alpha
        v += (1.0 - alpha) * gr
        h *= beta
        h += (1.0 - beta) * gr * gr
        x -= radj * v / (np.sqrt(h) + epsilon)
        x *= 1.0 - norm_coefficient_post
