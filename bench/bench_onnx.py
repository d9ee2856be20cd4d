"""ONNX training nodes: the pure onnx.reference evaluator vs fastopt's backend.

    pytest bench/bench_onnx.py --benchmark-only             # the timings
    pytest bench/bench_onnx.py --benchmark-disable          # smoke test (CI)

One group per (operator, dtype, workload), so each table row set compares:

- ``onnx-reference``: ReferenceEvaluator(model), the NumPy reference kernels;
- ``fastopt-backend``: ReferenceEvaluator(model, new_ops=fastopt.onnx.reference_ops());
- ``fastopt.onnx``: the functional form called directly (no evaluator);
- ``fastopt-inplace``: fastopt's in-place update, the floor (no output copies).

Workloads: 1e6 parameters in one tensor, and the same 1e6 in 100 tensors of
1e4 (one node updating many tensors, where per-tensor costs show).
Every non-in-place variant's outputs are checked against the pure
reference once, so the smoke run also catches a broken backend.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import fastopt  # noqa: E402
import fastopt.onnx as fonnx  # noqa: E402

DOMAIN = "ai.onnx.preview.training"
N = 1_000_000
WORKLOADS = {"1x1e6": [(N,)], "100x1e4": [(N // 100,)] * 100}
ATTRS = {
    "Momentum": dict(alpha=0.9, beta=1.0, mode="standard", norm_coefficient=0.0),
    "Adam": dict(alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
                 norm_coefficient_post=0.0),
}
STATES = {"Momentum": ["V"], "Adam": ["V", "H"]}
IMPLS = ["onnx-reference", "fastopt-backend", "fastopt.onnx", "fastopt-inplace"]
_expected: dict = {}


@functools.lru_cache(maxsize=None)
def setup(op, dtype, workload):
    """The model and its inputs, built once per group (never modified)."""
    shapes = WORKLOADS[workload]
    n = len(shapes)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    roles = ["X", "G"] + STATES[op]
    ins = ["R", "T"] + [f"{r}{i}" for r in roles for i in range(n)]
    outs = [f"{r}{i}_new" for r in ["X"] + STATES[op] for i in range(n)]
    vis = [helper.make_tensor_value_info("R", elem, []),
           helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    vis += [helper.make_tensor_value_info(f"{r}{i}", elem, shapes[i])
            for r in roles for i in range(n)]
    ovis = [helper.make_tensor_value_info(nm, elem, shapes[i % n])
            for i, nm in enumerate(outs)]
    node = helper.make_node(op, ins, outs, domain=DOMAIN, **ATTRS[op])
    model = helper.make_model(helper.make_graph([node], "bench", vis, ovis),
                              opset_imports=[helper.make_opsetid(DOMAIN, 1)])
    onnx.checker.check_model(model)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]          # X
    arrays += [rng.standard_normal(s).astype(dtype) * 0.01 for s in shapes]  # G
    for _ in STATES[op]:
        arrays += [np.abs(rng.standard_normal(s)).astype(dtype) for s in shapes]
    feeds = dict(zip(ins, [np.array(0.01, dtype), np.array(3, np.int64)] + arrays))
    return model, feeds, arrays, n


def side_by_side_impls(op, model, feeds, arrays, n):
    """All four variants as no-argument callables, for the fastopt-backend
    row's interleaved timing (bench/conftest.py)."""
    ref_sess = ReferenceEvaluator(model)
    sess = ReferenceEvaluator(model, new_ops=fonnx.reference_ops())
    fn = getattr(fonnx, op.lower())
    attrs = {k: (v if k == "mode" else float(np.float32(v))) for k, v in ATTRS[op].items()}
    mine = [a.copy() for a in arrays]
    xs, gs = mine[:n], mine[n:2 * n]
    states = [mine[(2 + k) * n:(3 + k) * n] for k in range(len(STATES[op]))]
    inplace = getattr(fastopt, "onnx_" + op.lower())
    return {
        "fastopt-backend": (lambda: sess.run(None, feeds), None),
        "onnx-reference": (lambda: ref_sess.run(None, feeds), None),
        "fastopt.onnx": (lambda: fn(feeds["R"], feeds["T"], *arrays, **attrs), None),
        "fastopt-inplace": (lambda: inplace(xs, gs, *states, lr=0.01, t=3, **ATTRS[op]),
                            None),
    }


@pytest.mark.parametrize("impl", [pytest.param(i, marks=pytest.mark.ratios)
                                  if i == "fastopt-backend" else i for i in IMPLS])
@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("op", ["Momentum", "Adam"])
def test_onnx_node(benchmark, side_by_side, op, dtype, workload, impl):
    benchmark.group = f"ONNX {op} node, {np.dtype(dtype).name}, {workload}"
    model, feeds, arrays, n = setup(op, dtype, workload)
    if impl == "fastopt-backend":
        side_by_side(side_by_side_impls(op, model, feeds, arrays, n),
                     [("fastopt-backend", "fastopt-inplace"),
                      ("fastopt.onnx", "fastopt-inplace"),
                      ("onnx-reference", "fastopt-backend")],
                     subject=["fastopt-backend", "fastopt.onnx", "fastopt-inplace"])
    if impl == "onnx-reference":
        sess = ReferenceEvaluator(model)
        out = benchmark(sess.run, None, feeds)
    elif impl == "fastopt-backend":
        sess = ReferenceEvaluator(model, new_ops=fonnx.reference_ops())
        out = benchmark(sess.run, None, feeds)
    elif impl == "fastopt.onnx":
        fn = getattr(fonnx, op.lower())
        attrs = {k: (v if k == "mode" else float(np.float32(v)))
                 for k, v in ATTRS[op].items()}
        out = benchmark(fn, feeds["R"], feeds["T"], *arrays, **attrs)
    else:
        mine = [a.copy() for a in arrays]  # updated in place, again and again
        xs, gs = mine[:n], mine[n:2 * n]
        states = [mine[(2 + k) * n:(3 + k) * n] for k in range(len(STATES[op]))]
        fn = getattr(fastopt, "onnx_" + op.lower())
        benchmark(fn, xs, gs, *states, lr=0.01, t=3, **ATTRS[op])
        return
    key = (op, dtype, workload)
    if key not in _expected:
        _expected[key] = ReferenceEvaluator(model).run(None, feeds)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=2e-7, atol=1e-9)
    for a, b in zip(out, _expected[key]):
        # float64 only to 2e-7: the reference's multi-tensor Adam is float32
        np.testing.assert_allclose(a, b.astype(a.dtype), **tol)
