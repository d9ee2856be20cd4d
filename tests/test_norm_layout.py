"""The global norm does not depend on how a gradient lies in memory: an
F-ordered or strided gradient has the norm of its C-ordered copy, bit for
bit, on every route that measures one (fastopt.global_norm, clip_grads, a
step with max_grad_norm, fastopt.optim with lr= or a schedule)."""
import math

import numpy as np
import pytest

import fastopt
from fastopt import optim

SHAPES = [(67, 130), (9, 31, 23), (300, 41)]
DTYPES = [np.float32, np.float64]


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _same(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype
    assert np.array_equal(_bits(a), _bits(b))


def _layout(c, kind, rng):
    """c's values in another layout: F-ordered, or a strided view."""
    if kind == "F":
        return np.asfortranarray(c)
    big = rng.standard_normal(tuple(3 * n for n in c.shape)).astype(c.dtype)
    view = big[tuple(slice(1, None, 3) for _ in c.shape)]
    view[...] = c
    return view


def _grads(seed, dtype):
    rng = np.random.default_rng(seed)
    cs = [(rng.standard_normal(s) * rng.uniform(0.1, 10.0)).astype(dtype) for s in SHAPES]
    return rng, cs


@pytest.mark.parametrize("kind", ["F", "strided"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_global_norm_and_clip_grads_read_gradients_in_logical_order(kind, dtype,
                                                                    norm_type):
    for seed in range(6):
        rng, cs = _grads(seed, dtype)
        gs = [_layout(c, kind, rng) for c in cs]
        assert (fastopt.global_norm(gs, norm_type=norm_type)
                == fastopt.global_norm(cs, norm_type=norm_type))
        got, want = [g.copy(order="K") for g in gs], [c.copy() for c in cs]
        n1 = fastopt.clip_grads(got, max_norm=1.0, norm_type=norm_type)
        n2 = fastopt.clip_grads(want, max_norm=1.0, norm_type=norm_type)
        assert n1 == n2
        for a, b in zip(got, want):
            _same(a, b)


@pytest.mark.parametrize("param_order", ["C", "F"])
@pytest.mark.parametrize("kind", ["F", "strided"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("skip", [False, True])
def test_step_with_max_grad_norm_measures_the_logical_order(param_order, kind, dtype,
                                                            skip):
    for seed in range(6):
        rng, cs = _grads(seed, dtype)
        gs = [_layout(c, kind, rng) for c in cs]
        x0 = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
        xs = [np.array(x, order=param_order) for x in x0]
        xc = [x.copy() for x in x0]
        ms = [np.zeros_like(x) for x in xs]
        mc = [np.zeros_like(x) for x in xc]
        kw = dict(lr=0.1, step=1, momentum=0.9, max_grad_norm=1.0,
                  skip_if_nonfinite=skip)
        i1 = fastopt.sgd(xs, gs, ms, **kw)
        i2 = fastopt.sgd(xc, cs, mc, **kw)
        assert i1 == i2
        assert i1.norm == fastopt.global_norm(gs)
        for a, b in zip(xs + ms, xc + mc):
            _same(a, b)


@pytest.mark.parametrize("param_order", ["C", "F"])
@pytest.mark.parametrize("kind", ["F", "strided"])
def test_optim_lr_and_schedule_agree_on_laid_out_gradients(param_order, kind):
    for seed in range(8):
        rng, cs = _grads(seed, np.float32 if seed % 2 else np.float64)
        x0 = [rng.standard_normal(c.shape).astype(c.dtype) for c in cs]
        runs = []
        for how in ("lr", "schedule", "C copy"):
            xs = [np.array(x, order=param_order) for x in x0]
            kw = {"schedule": lambda s: 0.05} if how == "schedule" else {"lr": 0.05}
            opt = optim.Adam(xs, **kw)
            for step in range(3):
                gs = [c * (step + 1) for c in cs]
                if how != "C copy":
                    gs = [_layout(g, kind, rng) for g in gs]
                assert opt.step(gs, max_grad_norm=1.0, skip_if_nonfinite=True)
            runs.append((xs, opt.last_grad_norm))
        for xs, norm in runs[1:]:
            assert norm == runs[0][1]
            for a, b in zip(xs, runs[0][0]):
                _same(a, b)
