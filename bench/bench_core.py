"""Benchmarks: op x dtype x workload x implementation, one group per
(op, dtype, workload) so pytest-benchmark's table shows the ratios.

    pytest bench/ --benchmark-only                 # measure
    pytest bench/ --benchmark-only -k "momentum and float32"
    pytest bench/ --benchmark-disable              # smoke test (CI)
    OMP_NUM_THREADS=1 pytest bench/ -m ratios --benchmark-only --benchmark-json=r.json
        # only the fastopt rows, each timing its rivals side by side
        # (bench/conftest.py); compare runs with bench/compare.py

Implementations: fastopt; the NumPy formula in place (what a NumPy user
writes, tensor by tensor); torch.optim with fused=True and foreach=True
(when torch is installed); the C ceiling probe (src_c/ceiling.c: the same
bytes moved over one buffer of the same total size, no per-tensor work).
"""
import ctypes
import math

import numpy as np
import pytest

import fastopt
from fastopt import _reference as ref
from fastopt._cli.workloads import TRAFFIC, WORKLOADS

OPS = ["momentum", "adagrad", "adam"]
DTYPES = ["float32", "float64"]
IMPLS = ["fastopt", "numpy", "torch_fused", "torch_foreach", "ceiling"]

KW = {
    "momentum": dict(lr=0.01, alpha=0.9, beta=1.0, norm_coefficient=1e-4),
    "adagrad": dict(lr=0.01, decay_factor=0.0, epsilon=1e-6, norm_coefficient=1e-4),
    "adam": dict(lr=1e-3, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0),
}


def tensors(shapes, dtype, nstates):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s, dtype=dtype) for s in shapes]
    gs = [rng.standard_normal(s, dtype=dtype) * dtype(1e-2) for s in shapes]
    states = [[np.zeros(s, dtype) for s in shapes] for _ in range(nstates)]
    return xs, gs, states


def fastopt_step(op, xs, gs, states):
    f = getattr(fastopt, "onnx_" + op)
    kw = KW[op]
    if len(xs) == 1:
        xs, gs, states = xs[0], gs[0], [s[0] for s in states]
    return lambda: f(xs, gs, *states, t=1, **kw)


def numpy_step(op, xs, gs, states):
    f = getattr(ref, f"{op}_inplace")
    return lambda: f(xs, gs, *states, t=1, **KW[op])


def torch_step(op, xs, gs, flavour):
    step = torch_step_or_reason(op, xs, gs, flavour)
    if isinstance(step, str):
        pytest.skip(step)
    return step


def torch_step_or_reason(op, xs, gs, flavour):
    """torch's step on tensors sharing the arrays, or why there is none."""
    try:
        import torch
    except ImportError:
        return "torch not installed"
    params = [torch.from_numpy(x) for x in xs]          # shares memory
    for p, g in zip(params, gs):
        p.grad = torch.from_numpy(g)
    kw = KW[op]
    flag = {"fused": True} if flavour == "fused" else {"foreach": True}
    try:
        if op == "momentum":
            opt = torch.optim.SGD(params, lr=kw["lr"], momentum=kw["alpha"],
                                  weight_decay=kw["norm_coefficient"], **flag)
        elif op == "adagrad":
            opt = torch.optim.Adagrad(params, lr=kw["lr"], eps=kw["epsilon"],
                                      weight_decay=kw["norm_coefficient"], **flag)
        else:
            opt = torch.optim.Adam(params, lr=kw["lr"], betas=(kw["alpha"], kw["beta"]),
                                   eps=kw["epsilon"], **flag)
        opt.step()                                      # allocate the state
    except (RuntimeError, TypeError, ValueError) as exc:
        return f"torch {flavour} {op} unavailable on CPU: {exc}"
    return opt.step


def ceiling_step(op, shapes, dtype, lib):
    n = sum(math.prod(s) for s in shapes)
    reads, _ = TRAFFIC[op]
    bufs = [np.ones(n, dtype) for _ in range(reads)]
    suffix = "f32" if dtype == np.float32 else "f64"
    fn = getattr(lib, f"fo_probe_{'4r3w' if reads == 4 else '3r2w'}_{suffix}")
    ptrs = [ctypes.c_void_p(b.ctypes.data) for b in bufs]
    nthreads = fastopt.get_num_threads()

    def step(bufs=bufs):          # the closure keeps the buffers alive
        fn(ctypes.c_int64(n), *ptrs, ctypes.c_int(nthreads))
    return step


def side_by_side_rivals(op, shapes, dt, xs, gs, states, lib):
    """The fastopt row's rivals, timed interleaved with it (bench/conftest.py):
    the NumPy formula and torch fused on the same arrays, the ceiling probe.
    The ratios go into the row's extra_info; see conftest's docstring."""
    impls = {"fastopt": (fastopt_step(op, xs, gs, states), None),
             "numpy": (numpy_step(op, xs, gs, states), None)}
    if lib is not None:
        impls["ceiling"] = (ceiling_step(op, shapes, dt, lib), None)
    torch_fused = torch_step_or_reason(op, xs, gs, "fused")
    if not isinstance(torch_fused, str):
        impls["torch_fused"] = (torch_fused, None)
    ratios = [("fastopt", "ceiling"), ("numpy", "fastopt"), ("torch_fused", "fastopt")]
    return impls, ratios


@pytest.mark.parametrize("impl", [pytest.param(i, marks=pytest.mark.ratios)
                                  if i == "fastopt" else i for i in IMPLS])
@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_update(benchmark, request, side_by_side, op, dtype, workload, impl):
    shapes = WORKLOADS[workload]
    dt = np.dtype(dtype).type
    nstates = 2 if op == "adam" else 1
    n = sum(math.prod(s) for s in shapes)
    benchmark.group = f"{op} {dtype} {workload}"
    reads, writes = TRAFFIC[op]
    benchmark.extra_info.update(elements=n, bytes=n * np.dtype(dtype).itemsize * (reads + writes))
    if impl == "ceiling":
        step = ceiling_step(op, shapes, dt, request.getfixturevalue("ceiling"))
    else:
        xs, gs, states = tensors(shapes, dt, nstates)
        if impl == "fastopt":
            step = fastopt_step(op, xs, gs, states)
            side_by_side(*side_by_side_rivals(op, shapes, dt, xs, gs, states,
                                              request.getfixturevalue("ceiling_lib")),
                         subject=["fastopt"])
        elif impl == "numpy":
            step = numpy_step(op, xs, gs, states)
        else:
            step = torch_step(op, xs, gs, impl.split("_")[1])
    with np.errstate(all="ignore"):
        benchmark(step)
