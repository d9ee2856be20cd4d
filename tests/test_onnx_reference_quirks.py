"""Where onnx.reference and fastopt differ, pinned: multi-tensor Adam casts to
float32, 1 - attribute is rounded to float32, float32 attributes matter at
1e-12; and the Python defaults are the schema's.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_conformance_cases import (
    ATTR_SETS,
    DOMAIN,
    F32,
    F64,
    SCHEMA_DEFAULTS,
    build_model,
    f32,
    make_inputs,
    run_inplace,
)

import fastopt.onnx as fonnx  # noqa: E402
from fastopt._reference import onnx as ref_onnx  # noqa: E402


def test_reference_multi_tensor_adam_casts_to_float32():
    """The ONNX reference bug that forces the NumPy comparison above: a
    multi-tensor Adam node returns float32 even for float64 tensors, so its
    outputs are off by float32 rounding, far above 1e-12."""
    attrs = ATTR_SETS["Adam"]["all"]
    shapes = [(50,), (50,)]
    model, in_names, _ = build_model("Adam", [F64, F64], shapes, shapes, np.float64, attrs)
    rng = np.random.default_rng(3)
    xs, gs, states = make_inputs(rng, "Adam", [F64, F64], shapes, shapes)
    feeds = dict(zip(in_names, [np.array(0.05), np.array(4)] + xs + gs
                     + states[0] + states[1]))
    ref = ReferenceEvaluator(model).run(None, feeds)
    if ref[0].dtype == F64:
        pytest.skip("this onnx version keeps float64 in multi-tensor Adam")
    assert all(r.dtype == F32 for r in ref)
    eff = {k: f32(v) for k, v in attrs.items()}
    new_x, _ = run_inplace("Adam", 0.05, 4, xs, gs, states, eff)
    assert new_x[0].dtype == F64
    xn, _ = ref_onnx.node("Adam", 0.05, 4, xs[0], gs[0], [states[0][0], states[1][0]], eff)
    np.testing.assert_allclose(new_x[0], xn, rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(ref[0] - xn)) > 1e-9  # the reference cannot meet 1e-12
    # while the single-tensor node keeps float64 and agrees at 1e-12
    model1, in1, _ = build_model("Adam", [F64], shapes[:1], shapes[:1], np.float64, attrs)
    ref1 = ReferenceEvaluator(model1).run(None, dict(zip(in1, [
        np.array(0.05), np.array(4), xs[0], gs[0], states[0][0], states[1][0]])))
    assert ref1[0].dtype == F64
    np.testing.assert_allclose(new_x[0], ref1[0], rtol=1e-12, atol=1e-12)


def test_reference_rounds_one_minus_attribute_to_float32():
    """The reference evaluator hands attributes to its kernels as np.float32
    scalars, so `1 - norm_coefficient_post` (and `1 - alpha`, `1 - beta`) is
    computed and rounded in float32 even for float64 tensors: with post=0.02
    its float64 Adam is off by ~1e-8 from an exact float64 evaluation.
    fastopt is exact there; the grid above uses values whose differences are
    exact in float32, so both can be held to 1e-12."""
    attrs = dict(alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
                 norm_coefficient_post=0.02)
    model, in_names, _ = build_model("Adam", [F64], [(40,)], [(40,)], np.float64, attrs)
    rng = np.random.default_rng(11)
    xs, gs, states = make_inputs(rng, "Adam", [F64], [(40,)], [(40,)])
    ref = ReferenceEvaluator(model).run(None, dict(zip(in_names, [
        np.array(0.05), np.array(3), xs[0], gs[0], states[0][0], states[1][0]])))
    eff = {k: f32(v) for k, v in attrs.items()}
    new_x, _ = run_inplace("Adam", 0.05, 3, xs, gs, states, eff)
    xn, _ = ref_onnx.node("Adam", 0.05, 3, xs[0], gs[0], [states[0][0], states[1][0]], eff)
    np.testing.assert_allclose(new_x[0], xn, rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(ref[0] - xn)) > 1e-9
    # the reference is exactly the float64 evaluation with 1 - post rounded to float32
    post32 = float(np.float32(1) - np.float32(eff["norm_coefficient_post"]))
    np.testing.assert_allclose(ref[0], xn / (1 - eff["norm_coefficient_post"]) * post32,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(new_x[0], ref[0], rtol=1e-7)


def test_float32_attributes_matter_at_1e12():
    """Why attributes are rounded through float32 for the float64 comparison:
    with the Python value 0.9 instead of the model's 0.8999999761581421 the
    float64 results differ by far more than 1e-12."""
    attrs = dict(mode="standard", alpha=0.9, beta=0.8, norm_coefficient=0.0)
    model, in_names, _ = build_model("Momentum", [F64], [(20,)], [(20,)], np.float64, attrs)
    rng = np.random.default_rng(5)
    xs, gs, states = make_inputs(rng, "Momentum", [F64], [(20,)], [(20,)])
    ref = ReferenceEvaluator(model).run(None, dict(zip(in_names, [
        np.array(0.5), np.array(2), xs[0], gs[0], states[0][0]])))
    rounded, _ = run_inplace("Momentum", 0.5, 2, xs, gs, states,
                             {k: (f32(v) if k != "mode" else v) for k, v in attrs.items()})
    exact, _ = run_inplace("Momentum", 0.5, 2, xs, gs, states, attrs)
    np.testing.assert_allclose(rounded[0], ref[0], rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(exact[0] - ref[0])) > 1e-9


@pytest.mark.parametrize("op", ["Adagrad", "Adam"])
def test_python_defaults_are_the_schema_defaults(op):
    schema = onnx.defs.get_schema(op, 1, DOMAIN)
    fn = getattr(fonnx, op.lower())
    params = inspect.signature(fn).parameters
    for name, attr in schema.attributes.items():
        assert not attr.required
        assert f32(params[name].default) == f32(attr.default_value.f), name
        assert SCHEMA_DEFAULTS[op][name] == params[name].default, name


def test_momentum_attributes_are_required_in_both():
    schema = onnx.defs.get_schema("Momentum", 1, DOMAIN)
    assert all(a.required for a in schema.attributes.values())
    with pytest.raises(TypeError, match="alpha"):
        fonnx.momentum(0.1, 0, np.ones(2), np.ones(2), np.zeros(2), beta=1.0,
                       mode="standard", norm_coefficient=0.0)
