"""Shared by the tests of fastopt.optim: parameters of mixed shapes and dtypes,
their gradients, snapshots of an optimizer, and the optimizers under test
with the kernel and T convention each one uses.
"""

import numpy as np

import fastopt
from fastopt import optim

SHAPES = [(3, 4), (5,), (2, 3, 2), (), (7, 1)]


def make_params(seed=0, dtypes=(np.float32, np.float64)):
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.standard_normal(s), dtypes[i % len(dtypes)])
            for i, s in enumerate(SHAPES)]


def make_grads(params, seed):
    rng = np.random.default_rng(1000 + seed)
    return [np.asarray(rng.standard_normal(p.shape), p.dtype) for p in params]


def snapshot(opt, params):
    return ([p.copy() for p in params],
            {k: [a.copy() for a in v] for k, v in opt.state.items()},
            opt.steps,
            [{k: (list(v) if isinstance(v, list) else v) for k, v in g.items() if k != "params"}
             for g in opt.param_groups])


def assert_same(a, b):
    pa, sa, ta, ha = a
    pb, sb, tb, hb = b
    assert ta == tb
    assert ha == hb
    for x, y in zip(pa, pb):
        np.testing.assert_array_equal(x, y, strict=True)
    assert sa.keys() == sb.keys()
    for k in sa:
        for x, y in zip(sa[k], sb[k]):
            np.testing.assert_array_equal(x, y, strict=True)


# name: (class, kwargs, kernel, state names, T of the first update)
OPTS = {
    "momentum": (optim.OnnxMomentum, dict(lr=0.1, alpha=0.8, beta=0.6, norm_coefficient=0.01),
                 fastopt.onnx_momentum, ("v",), 0),
    "nesterov": (optim.OnnxMomentum, dict(lr=0.1, alpha=0.8, beta=0.6, nesterov=True),
                 fastopt.onnx_momentum, ("v",), 0),
    "adagrad": (optim.OnnxAdagrad, dict(lr=0.1, decay_factor=0.1, epsilon=1e-5,
                                    norm_coefficient=0.01, initial_accumulator_value=0.2),
                fastopt.onnx_adagrad, ("h",), 0),
    "adam": (optim.OnnxAdam, dict(lr=0.01, alpha=0.8, beta=0.95, epsilon=1e-5,
                              norm_coefficient=0.01, norm_coefficient_post=0.001),
             fastopt.onnx_adam, ("v", "h"), 1),
}


def run(opt, params, k0, n):
    for k in range(k0, k0 + n):
        opt.step(make_grads(params, k))
