"""Shared by the ONNX conformance tests: one-node models, their inputs, the
schema defaults, fastopt's in-place run and the comparison in a tensor's
dtype (tolerances per dtype).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, checker, helper  # noqa: E402

import fastopt  # noqa: E402

DOMAIN = "ai.onnx.preview.training"
F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
TOL = {F32: dict(rtol=1e-5, atol=1e-6), F64: dict(rtol=1e-12, atol=1e-12)}
ELEM = {F32: TensorProto.FLOAT, F64: TensorProto.DOUBLE}

# The ONNX schema defaults (also fastopt's), applied when a node omits them.
SCHEMA_DEFAULTS = {
    "Momentum": {},  # every Momentum attribute is required
    "Adagrad": {"decay_factor": 0.0, "epsilon": 1e-6, "norm_coefficient": 0.0},
    "Adam": {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "norm_coefficient": 0.0,
             "norm_coefficient_post": 0.0},
}
STATES = {"Momentum": ("V",), "Adagrad": ("H",), "Adam": ("V", "H")}
INPLACE = {"Momentum": fastopt.onnx_momentum, "Adagrad": fastopt.onnx_adagrad,
           "Adam": fastopt.onnx_adam}


def f32(a: float) -> float:
    """An attribute value as the model stores it (FLOAT is float32)."""
    return float(np.float32(a))


# ------------------------------------------------------------------ helpers

def build_model(op, x_dtypes, x_shapes, g_shapes, r_dtype, attrs):
    """A checked one-node model; returns (model, input names, output names)."""
    n = len(x_shapes)
    states = STATES[op]
    roles = ("X", "G") + states
    names = {role: [f"{role}{i}" for i in range(n)] for role in roles}
    in_names = ["R", "T"] + [nm for role in roles for nm in names[role]]
    out_names = [f"{nm}_new" for role in ("X",) + states for nm in names[role]]
    vis = [helper.make_tensor_value_info("R", ELEM[np.dtype(r_dtype)], []),
           helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    for role in roles:
        for i in range(n):
            shape = g_shapes[i] if role == "G" else x_shapes[i]
            vis.append(helper.make_tensor_value_info(
                names[role][i], ELEM[np.dtype(x_dtypes[i])], list(shape)))
    outs = [helper.make_tensor_value_info(
        f"{names[role][i]}_new", ELEM[np.dtype(x_dtypes[i])], list(x_shapes[i]))
        for role in ("X",) + states for i in range(n)]
    node = helper.make_node(op, in_names, out_names, domain=DOMAIN, **attrs)
    graph = helper.make_graph([node], f"one_{op.lower()}", vis, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(DOMAIN, 1)])
    checker.check_model(model, full_check=True)
    return model, in_names, out_names


def make_inputs(rng, op, x_dtypes, x_shapes, g_shapes):
    xs = [rng.standard_normal(s).astype(d) for s, d in zip(x_shapes, x_dtypes)]
    gs = [rng.standard_normal(s).astype(d) for s, d in zip(g_shapes, x_dtypes)]
    states = []
    for role in STATES[op]:
        if role == "V":
            states.append([rng.standard_normal(s).astype(d)
                           for s, d in zip(x_shapes, x_dtypes)])
        else:  # H accumulates squares: >= 0
            states.append([np.array(np.abs(rng.standard_normal(s)), dtype=d)
                           for s, d in zip(x_shapes, x_dtypes)])
    return xs, gs, states


def run_inplace(op, lr, t, xs, gs, states, attrs):
    """fastopt's in-place function on copies; returns new X list + state lists."""
    xs = [x.copy() for x in xs]
    states = [[s.copy() for s in role] for role in states]
    INPLACE[op](xs, gs, *states, lr=lr, t=t, **attrs)
    return xs, states


def assert_close_in_dtype(got, ref, x, label):
    """got (fastopt) keeps x's dtype and shape; ref is compared in x's dtype."""
    assert got.dtype == x.dtype, label
    assert got.shape == x.shape, label
    ref = np.asarray(ref)
    assert ref.shape == x.shape, label
    np.testing.assert_allclose(got, ref.astype(x.dtype), err_msg=label, **TOL[x.dtype])


ATTR_SETS = {
    "Momentum": {
        "std": dict(mode="standard", alpha=0.9, beta=0.8, norm_coefficient=0.0),
        "std-nc": dict(mode="standard", alpha=0.85, beta=0.3, norm_coefficient=0.01),
        "nes": dict(mode="nesterov", alpha=0.9, beta=0.8, norm_coefficient=0.0),
        "nes-nc": dict(mode="nesterov", alpha=0.85, beta=0.3, norm_coefficient=0.01),
    },
    "Adagrad": {
        "defaults": {},
        "eps": dict(epsilon=1e-3),
        "decay-eps-nc": dict(decay_factor=0.1, epsilon=1e-2, norm_coefficient=0.02),
    },
    # The reference computes 1 - alpha, 1 - beta and 1 - norm_coefficient_post
    # in float32 (its attributes are np.float32 scalars), a float32 rounding
    # no float64 runtime makes. With alpha, beta in [0.5, 1] and post = 1/16
    # these differences are exact in float32, so the 1e-12 comparison holds;
    # test_reference_rounds_one_minus_attribute_to_float32 shows the rest.
    "Adam": {
        "defaults": {},
        "all": dict(alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.01,
                    norm_coefficient_post=0.0625),
    },
}
