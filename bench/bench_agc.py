"""AGC-SGD on ResNet-50's 161 parameter tensors (25.6 M float32 values).

One benchmark group, so the table shows the ratios:

- ``momentum``        plain fastopt.onnx_momentum (the target's yardstick)
- ``fused``           fastopt.onnx_momentum(..., clipping=0.01): AGC fused in
- ``agc+momentum``    fastopt.agc (in place) then fastopt.onnx_momentum
- ``numpy``           the same AGC-SGD written in NumPy (per tensor)

NFNet's setting: clipping 0.01 on every tensor but the final classifier
(the last two, excluded), eps 1e-3, PyTorch layout. With make_tensors'
gradients (standard deviation 0.01 against 1 for the parameters) half of
the units are clipped. The target is fused <= 1.3 x momentum.

Run:  python -m pytest bench/bench_agc.py --benchmark-only
Smoke (CI): python -m pytest bench/bench_agc.py --benchmark-disable
"""
import numpy as np
import pytest

import fastopt
from fastopt import _reference as ref
from fastopt._cli.workloads import make_tensors, resnet50_shapes

LR, ALPHA, NC = 0.1, 0.9, 5e-5
CLIP = [0.01] * 159 + [None, None]      # NFNet/timm: no clipping of the classifier


@pytest.fixture(scope="module")
def tensors():
    shapes = resnet50_shapes()
    assert len(shapes) == len(CLIP)
    xs, gs, vs, _ = make_tensors(shapes, np.float32)
    return xs, gs, vs


def numpy_agc_sgd(xs, gs, vs):
    gs = ref.agc.agc_in_dtype(xs, gs, CLIP)
    for x, g, v in zip(xs, gs, vs):
        v *= ALPHA
        v += g + NC * x
        x -= LR * v


def agc_then_momentum(xs, gs, vs, kw):
    """(step, setup): agc() clips in place, so every call starts from the
    fresh gradients, as a training step would (the copy is not timed)."""
    work = [g.copy() for g in gs]

    def setup():
        for w, g in zip(work, gs):
            np.copyto(w, g)

    def step():
        fastopt.agc(xs, work, clipping=CLIP)
        fastopt.onnx_momentum(xs, work, vs, **kw)
    return step, setup


@pytest.mark.parametrize("impl", ["momentum", pytest.param("fused", marks=pytest.mark.ratios),
                                  "agc+momentum", "numpy"])
def test_agc_sgd_resnet50(benchmark, side_by_side, ceiling_probe, tensors, impl):
    xs, gs, vs = tensors
    benchmark.group = "AGC-SGD, ResNet-50 float32 (161 tensors)"
    kw = dict(lr=LR, t=1, alpha=ALPHA, norm_coefficient=NC)
    if impl == "momentum":
        benchmark(fastopt.onnx_momentum, xs, gs, vs, **kw)
    elif impl == "fused":
        # the ratios the target is stated in, timed interleaved (bench/conftest.py)
        impls = {"fused": (lambda: fastopt.onnx_momentum(xs, gs, vs, clipping=CLIP, **kw), None),
                 "momentum": (lambda: fastopt.onnx_momentum(xs, gs, vs, **kw), None),
                 "agc+momentum": agc_then_momentum(xs, gs, vs, kw),
                 "numpy": (lambda: numpy_agc_sgd(xs, gs, vs), None)}
        probe = ceiling_probe(sum(x.size for x in xs), np.float32, 3)
        if probe is not None:
            impls["ceiling"] = (probe, None)
        side_by_side(impls, [("fused", "momentum"), ("agc+momentum", "fused"),
                             ("numpy", "fused"), ("momentum", "ceiling")],
                     subject=["fused", "momentum", "agc+momentum"])
        benchmark(fastopt.onnx_momentum, xs, gs, vs, clipping=CLIP, **kw)
    elif impl == "numpy":
        benchmark.pedantic(numpy_agc_sgd, args=(xs, gs, vs), rounds=3, iterations=1)
    else:
        step, setup = agc_then_momentum(xs, gs, vs, kw)
        benchmark.pedantic(step, setup=setup, rounds=15, iterations=1)
