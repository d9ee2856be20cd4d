"""fastopt against the ONNX reference evaluator (onnx.reference).

One-node Momentum / Adagrad / Adam models (domain ai.onnx.preview.training,
version 1) are built with onnx.helper, checked with onnx.checker and run with
onnx.reference.ReferenceEvaluator; fastopt's IN-PLACE functions are run on
copies of the same inputs and compared with the evaluator's outputs.

Tolerances come from X's dtype: float32 rtol 1e-5; float64 rtol 1e-12. ONNX
FLOAT attributes are float32 inside a model (alpha=0.9 is stored as
0.8999999761581421), so fastopt is called with every attribute rounded
through float32, which is what the evaluator computes with. Outputs are
compared in X's dtype: the reference returns float64 for float32 inputs in
some cases (float32 Adam with T > 0, float64 R with float32 X), which is
harmless once cast back.

One reference bug cannot be compared around: multi-tensor Adam casts every
output to float32, so a float64 node's outputs carry float32 rounding
(~1e-8 relative) and a 1e-12 comparison is impossible. There (and only
there) fastopt is compared at 1e-12 with a plain NumPy float64 evaluation
of docs/semantics.md section 1 (fastopt._reference.onnx), and with the reference's float32 outputs within
one float32 rounding; test_reference_multi_tensor_adam_casts_to_float32
demonstrates the bug.

The seven official backend cases (onnx.backend.test.case.node) run in
test_onnx_official.py; the reference's quirks are pinned in
test_onnx_reference_quirks.py.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_conformance_cases import (
    ATTR_SETS,
    F32,
    F64,
    SCHEMA_DEFAULTS,
    STATES,
    assert_close_in_dtype,
    build_model,
    f32,
    make_inputs,
    run_inplace,
)

import fastopt.onnx as fonnx  # noqa: E402
from fastopt._reference import onnx as ref_onnx  # noqa: E402

# ------------------------------------------------------------------ the grid

# (x shapes, g shapes) per tensor of the node
SHAPE_SETS = {
    "scalar": ([()], [()]),
    "1d": ([(7,)], [(7,)]),
    "3d": ([(2, 3, 4)], [(2, 3, 4)]),
    "three": ([(6,), (2, 3), (4, 1, 2)], [(6,), (2, 3), (4, 1, 2)]),
    "broadcast": ([(3, 4), (2, 3, 4), (5,)], [(4,), (1, 3, 1), ()]),
    "empty": ([(0,), (2, 0, 3)], [(0,), (2, 0, 3)]),
}
DTYPES = {"float32": [F32], "float64": [F64], "mixed": [F32, F64]}  # cycled over tensors


T_VALUES = {"Momentum": (0, 3), "Adagrad": (0, 3), "Adam": (0, 1, 4)}


def _cases():
    for op, sets in ATTR_SETS.items():
        for (aname, attrs), t, (sname, shapes), dname in itertools.product(
                sets.items(), T_VALUES[op], SHAPE_SETS.items(), DTYPES):
            if dname == "mixed" and len(shapes[0]) == 1:
                continue
            yield pytest.param(op, attrs, t, shapes, dname,
                               id=f"{op}-{aname}-T{t}-{sname}-{dname}")


@pytest.mark.parametrize("op, attrs, t, shapes, dname", list(_cases()))
def test_matches_reference_evaluator(op, attrs, t, shapes, dname, rng):
    x_shapes, g_shapes = shapes
    n = len(x_shapes)
    x_dtypes = [DTYPES[dname][i % len(DTYPES[dname])] for i in range(n)]
    r_dtype = np.float64 if all(d == F64 for d in x_dtypes) else np.float32
    model, in_names, out_names = build_model(op, x_dtypes, x_shapes, g_shapes,
                                             r_dtype, attrs)
    xs, gs, states = make_inputs(rng, op, x_dtypes, x_shapes, g_shapes)
    R = np.array(0.05, dtype=r_dtype)
    T = np.array(t, dtype=np.int64)
    feeds = dict(zip(in_names, [R, T] + xs + gs + [s for role in states for s in role]))
    ref = ReferenceEvaluator(model).run(None, feeds)

    # what the evaluator computes with: float32-rounded attributes
    eff = {k: f32(v) for k, v in {**SCHEMA_DEFAULTS[op], **attrs}.items() if k != "mode"}
    if op == "Momentum":
        eff["mode"] = attrs["mode"]
    lr = float(R)
    new_x, new_states = run_inplace(op, lr, t, xs, gs, states, eff)
    got = new_x + [s for role in new_states for s in role]
    like = [x for _ in (["X"] + list(STATES[op])) for x in xs]  # X of each output

    assert len(got) == len(ref) == len(out_names)
    reference_casts = op == "Adam" and n > 1  # the reference bug, see module doc
    for k, (g_out, r_out, x) in enumerate(zip(got, ref, like)):
        label = f"output {out_names[k]}"
        if reference_casts and x.dtype == F64 and r_out.dtype != F64:
            i = k % n
            xn, sn = ref_onnx.node(op, lr, t, xs[i], gs[i],
                                   [role[i] for role in states], eff)
            want = [xn] + sn
            assert_close_in_dtype(g_out, want[k // n], x, label + " (NumPy float64)")
            # and the reference's output is ours rounded to float32
            np.testing.assert_allclose(g_out, r_out.astype(F64), rtol=2.0**-23,
                                       atol=1e-30, err_msg=label)
        else:
            assert_close_in_dtype(g_out, r_out, x, label)


def test_grid_covers_the_issue_list():
    ids = [p.id for p in _cases()]
    for needle in ("Momentum-std-T0", "Momentum-nes-T3", "-nc-", "Adagrad-defaults",
                   "Adagrad-decay-eps-nc-T3", "Adam-all-T4", "Adam-defaults-T1",
                   "-scalar-", "-1d-", "-3d-", "-three-", "-broadcast-", "-empty-",
                   "-float32", "-float64", "-mixed"):
        assert any(needle in i for i in ids), needle


@pytest.mark.parametrize("op", ["Momentum", "Adagrad", "Adam"])
@pytest.mark.parametrize("r_dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_dtype", [F32, F64])
def test_r_of_either_dtype(op, r_dtype, x_dtype):
    """R may be float or double whatever X is (ONNX type T1 vs T3)."""
    attrs = {"Momentum": ATTR_SETS["Momentum"]["nes-nc"], "Adagrad": {},
             "Adam": ATTR_SETS["Adam"]["all"]}[op]
    model, in_names, _ = build_model(op, [x_dtype], [(5,)], [(5,)], r_dtype, attrs)
    rng = np.random.default_rng(7)
    xs, gs, states = make_inputs(rng, op, [x_dtype], [(5,)], [(5,)])
    R = np.array(0.1, dtype=r_dtype)
    feeds = dict(zip(in_names, [R, np.array(2)] + xs + gs + [s[0] for s in states]))
    ref = ReferenceEvaluator(model).run(None, feeds)
    got = getattr(fonnx, op.lower())(R, np.array(2), *xs, *gs, *[s[0] for s in states],
                                      **{k: (f32(v) if k != "mode" else v)
                                         for k, v in {**SCHEMA_DEFAULTS[op], **attrs}.items()})
    for g_out, r_out in zip(got, ref):
        assert_close_in_dtype(g_out, r_out, xs[0], op)
