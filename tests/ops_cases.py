"""Shared by the tests of fastopt.onnx_momentum / adagrad / adam: the hyperparameter
sets of each op, random tensors, and the check of a result against the slow
references (bit for bit in the array's dtype, within tolerance in float64).
"""

import numpy as np
import public_names
from assertions import assert_close, tolerance

from fastopt import _reference as ref

OPS = {
    # name: (state names, hyperparameter sets, reference)
    "momentum": (("v",), [
        dict(alpha=0.9, beta=1.0, norm_coefficient=0.0, mode="standard"),
        dict(alpha=0.7, beta=0.4, norm_coefficient=0.01, mode="standard"),
        dict(alpha=0.9, beta=0.9, norm_coefficient=0.001, mode="nesterov"),
    ], ref.momentum),
    "adagrad": (("h",), [
        dict(),
        dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01),
    ], ref.adagrad),
    "adam": (("v", "h"), [
        dict(),
        dict(alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.02,
             norm_coefficient_post=0.01),
    ], ref.adam),
}


def make(rng, shape, dtype, nstates, positive_states=True):
    x = np.asarray(rng.standard_normal(shape), dtype)
    g = np.asarray(rng.standard_normal(shape), dtype)
    states = [np.asarray(np.abs(rng.standard_normal(shape)), dtype) for _ in range(nstates)]
    return x, g, states


def call(op, x, g, states, **kw):
    public_names.op(op)(x, g, *states, **kw)


def expected(op, x, g, states, dtype, **kw):
    kw = {k: v for k, v in kw.items() if k != "n_threads"}
    return OPS[op][2](x, g, *states, dtype=dtype, **kw)


def check(op, before, after, dtype, kw):
    """after = arrays after the fastopt call; before = copies from before."""
    x, g, states = before
    exact = expected(op, x, g, states, dtype, **kw)
    f64 = expected(op, x, g, states, np.float64, **kw)
    for got, e, r in zip(after, exact, f64):
        assert got.dtype.newbyteorder("=") == dtype
        np.testing.assert_array_equal(got, e)        # bit for bit (NaN == NaN)
        scale = max(1.0, float(np.nanmax(np.abs(r), initial=0.0)))
        assert_close(got, r, dtype=dtype, atol=tolerance(dtype) * scale)


SHAPES = [(), (0,), (1,), (2,), (7,), (16,), (17,), (31,), (33,), (1023,), (1025,),
          (3, 5), (2, 0, 3), (2, 3, 4, 5)]
