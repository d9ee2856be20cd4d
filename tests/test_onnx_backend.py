"""fastopt.onnx.reference_ops(): plugged into onnx.reference.ReferenceEvaluator,
on the C fast path, stricter than the reference on bad nodes, and running a
real training graph (linear regression, gradient written in ONNX ops,
Momentum node, 50 iterations) exactly like the pure reference.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx_backend_cases import ATTRS, DOMAIN, F32, F64, NSTATES, TOL, tensors

import fastopt.onnx as fonnx

# ------------------------------------------------------- the onnx backend



@pytest.fixture(scope="module")
def onnx():
    return pytest.importorskip("onnx")


def test_reference_ops_classes(onnx):
    from onnx.reference.op_run import OpRun
    ops = fonnx.reference_ops()
    assert [c.__name__ for c in ops] == ["Momentum", "Adagrad", "Adam"]
    assert all(issubclass(c, OpRun) and c.op_domain == DOMAIN for c in ops)
    assert fonnx.reference_ops() == ops and fonnx.reference_ops() is not ops


def one_node_model(onnx, op_type, shapes, dtypes, attrs):
    from onnx import TensorProto, helper
    states = {"Momentum": ["V"], "Adagrad": ["H"], "Adam": ["V", "H"]}[op_type]
    roles = ["X", "G"] + states
    elem = {F32: TensorProto.FLOAT, F64: TensorProto.DOUBLE}
    n = len(shapes)
    ins = ["R", "T"] + [f"{r}{i}" for r in roles for i in range(n)]
    outs = [f"{r}{i}_new" for r in ["X"] + states for i in range(n)]
    vis = [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
           helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    vis += [helper.make_tensor_value_info(f"{r}{i}", elem[dtypes[i]], shapes[i])
            for r in roles for i in range(n)]
    ovis = [helper.make_tensor_value_info(nm, elem[dtypes[i % n]], shapes[i % n])
            for i, nm in enumerate(outs)]
    node = helper.make_node(op_type, ins, outs, domain=DOMAIN, **attrs)
    model = helper.make_model(helper.make_graph([node], "g", vis, ovis),
                              opset_imports=[helper.make_opsetid(DOMAIN, 1)])
    onnx.checker.check_model(model)
    return model, ins


@pytest.mark.parametrize("op", ["momentum", "adagrad", "adam"])
@pytest.mark.parametrize("dtypes", [[F32], [F64], [F64, F32, F64]], ids=["f32", "f64", "mixed"])
def test_evaluator_with_fastopt_ops(onnx, op, dtypes):
    """A node run by ReferenceEvaluator(new_ops=reference_ops()) gives exactly
    fastopt.onnx's outputs (float32 attributes) and the pure reference's
    within the dtype tolerance; each output keeps its X's dtype."""
    from onnx.reference import ReferenceEvaluator
    op_type = {"momentum": "Momentum", "adagrad": "Adagrad", "adam": "Adam"}[op]
    n = len(dtypes)
    shapes = [(5,), (2, 3), (4,)][:n]
    model, ins = one_node_model(onnx, op_type, shapes, dtypes, ATTRS[op])
    rng = np.random.default_rng(4)
    inputs = tensors(rng, op, shapes, dtypes)
    feeds = dict(zip(ins, [np.array(0.05, np.float32), np.array(2)] + inputs))
    before = [a.copy() for a in inputs]
    fast_sess = ReferenceEvaluator(model, new_ops=fonnx.reference_ops())
    assert type(fast_sess.rt_nodes_[0]) in fonnx.reference_ops()
    fast = fast_sess.run(None, feeds)
    pure = ReferenceEvaluator(model).run(None, feeds)
    direct = getattr(fonnx, op)(np.float32(0.05), 2, *inputs,
                                **{k: (v if k == "mode" else float(np.float32(v)))
                                   for k, v in ATTRS[op].items()})
    assert len(fast) == len(pure) == len(direct)
    for k, (a, b, c) in enumerate(zip(fast, pure, direct)):
        x = inputs[k % n]
        assert a.dtype == x.dtype
        np.testing.assert_array_equal(a, c)
        if b.dtype != x.dtype and x.dtype == F64:
            # the reference's multi-tensor Adam returns float32 (see the
            # conformance tests); only float32 agreement can be asked of it
            assert op == "adam" and n > 1 and b.dtype == F32
            np.testing.assert_allclose(a, b, rtol=2.0**-23, atol=1e-30)
        else:
            np.testing.assert_allclose(a, b.astype(x.dtype), **TOL[x.dtype])
    for a, b in zip(inputs, before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("op", ["momentum", "adagrad", "adam"])
def test_evaluator_calls_stay_on_the_c_fast_path(onnx, op, monkeypatch):
    """The evaluator passes attributes as np.float32 and R, T as 0-d arrays;
    fastopt.onnx converts them so ordinary nodes never fall back to the
    slower fully-checked Python path (a 100-tensor node cost 2x there)."""
    from onnx.reference import ReferenceEvaluator

    import fastopt._validation as upd

    def no_slow_path(*args, **kwargs):
        raise AssertionError("fastopt took the slow path")

    op_type = {"momentum": "Momentum", "adagrad": "Adagrad", "adam": "Adam"}[op]
    dtypes, shapes = [F32, F64, F32], [(5,), (2, 3), (4,)]
    model, ins = one_node_model(onnx, op_type, shapes, dtypes, ATTRS[op])
    inputs = tensors(np.random.default_rng(6), op, shapes, dtypes)
    sess = ReferenceEvaluator(model, new_ops=fonnx.reference_ops())
    monkeypatch.setattr(upd, "tensors", no_slow_path)
    out = sess.run(None, dict(zip(ins, [np.array(0.05, np.float32), np.array(2)] + inputs)))
    assert len(out) == 3 * (1 + NSTATES[op])


@pytest.mark.parametrize("case", ["bad-mode", "bad-count", "negative-T"])
def test_evaluator_rejects_what_the_reference_lets_through(onnx, case):
    """SEMANTICS §1: the reference runs any unknown mode as Nesterov, slices
    a wrong input count silently and treats negative T as T = 0. With
    fastopt's ops each of these raises."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    x, g, v = np.ones(3), np.full(3, 0.5), np.ones(3)
    attrs = dict(alpha=0.75, beta=0.5, mode="standard", norm_coefficient=0.0)  # exact in float32
    ins, T = ["R", "T", "X", "G", "V"], np.array(1)
    feeds_extra = {}
    if case == "bad-mode":
        attrs["mode"] = "nesterov_typo"
    elif case == "bad-count":
        ins = ins + ["W"]
        feeds_extra = {"W": np.ones(3)}
    else:
        T = np.array(-1)
    vis = [helper.make_tensor_value_info("R", TensorProto.DOUBLE, []),
           helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    vis += [helper.make_tensor_value_info(nm, TensorProto.DOUBLE, [3]) for nm in ins[2:]]
    ovis = [helper.make_tensor_value_info(nm, TensorProto.DOUBLE, [3])
            for nm in ["X_new", "V_new"]]
    node = helper.make_node("Momentum", ins, ["X_new", "V_new"], domain=DOMAIN, **attrs)
    model = helper.make_model(helper.make_graph([node], "g", vis, ovis),
                              opset_imports=[helper.make_opsetid(DOMAIN, 1)])
    onnx.checker.check_model(model)
    feeds = {"R": np.array(0.1), "T": T, "X": x, "G": g, "V": v, **feeds_extra}

    pure = ReferenceEvaluator(model).run(None, feeds)  # runs without complaint
    if case == "bad-mode":  # ... as Nesterov
        nesterov = fonnx.momentum(0.1, 1, x, g, v, **{**attrs, "mode": "nesterov"})
        np.testing.assert_allclose(pure[0], nesterov[0], rtol=1e-12)
    elif case == "negative-T":  # ... as T = 0, which ignores beta
        t0 = fonnx.momentum(0.1, 0, x, g, v, **attrs)
        np.testing.assert_allclose(pure[1], t0[1], rtol=1e-12)

    sess = ReferenceEvaluator(model, new_ops=fonnx.reference_ops())
    match = {"bad-mode": "mode must be 'standard' or 'nesterov'",
             "bad-count": "got 4 tensor inputs after R and T; expected a non-zero multiple of 3",
             "negative-T": "T must be >= 0"}[case]
    with pytest.raises(ValueError, match=r"^fastopt\.onnx\.momentum: " + match):
        sess.run(None, feeds)


# ------------------------------------------- a real training graph

def linear_regression_model(onnx, dtype, mode):
    """Linear regression y ~ X @ W + B trained by a Momentum node.

    The loss is mean((X @ W + B - Y)**2); its gradient is written out in
    ONNX ops: dW = (2/N) X^T E and dB = (2/N) sum(E, axis 0), E = X @ W + B - Y.
    Inputs R, T, W, B, VW, VB; outputs loss, W_new, B_new, VW_new, VB_new.
    """
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(8)
    N, D = 64, 6
    X = rng.standard_normal((N, D)).astype(dtype)
    w_true = rng.standard_normal((D, 1))
    Y = (X.astype(np.float64) @ w_true + 0.7
         + 0.01 * rng.standard_normal((N, 1))).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = [numpy_helper.from_array(X, "Xd"), numpy_helper.from_array(Y, "Y"),
             numpy_helper.from_array(np.array(2.0 / N, dtype), "two_over_n"),
             numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    nodes = [
        helper.make_node("MatMul", ["Xd", "W"], ["XW"]),
        helper.make_node("Add", ["XW", "B"], ["P"]),
        helper.make_node("Sub", ["P", "Y"], ["E"]),
        helper.make_node("Mul", ["E", "E"], ["E2"]),
        helper.make_node("ReduceMean", ["E2"], ["loss"], keepdims=0),
        helper.make_node("Transpose", ["Xd"], ["XdT"], perm=[1, 0]),
        helper.make_node("MatMul", ["XdT", "E"], ["XtE"]),
        helper.make_node("Mul", ["XtE", "two_over_n"], ["GW"]),
        helper.make_node("ReduceSum", ["E", "axis0"], ["SE"], keepdims=1),
        helper.make_node("Mul", ["SE", "two_over_n"], ["GB"]),
        helper.make_node("Momentum", ["R", "T", "W", "B", "GW", "GB", "VW", "VB"],
                         ["W_new", "B_new", "VW_new", "VB_new"], domain=DOMAIN,
                         alpha=0.9, beta=0.9, mode=mode, norm_coefficient=1e-3),
    ]
    vi = helper.make_tensor_value_info
    from onnx import TensorProto
    inputs = [vi("R", elem, []), vi("T", TensorProto.INT64, []),
              vi("W", elem, [D, 1]), vi("B", elem, [1, 1]),
              vi("VW", elem, [D, 1]), vi("VB", elem, [1, 1])]
    outputs = [vi("loss", elem, []), vi("W_new", elem, [D, 1]), vi("B_new", elem, [1, 1]),
               vi("VW_new", elem, [D, 1]), vi("VB_new", elem, [1, 1])]
    graph = helper.make_graph(nodes, "linreg_momentum", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid(DOMAIN, 1)])
    onnx.checker.check_model(model, full_check=True)
    return model, D


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_linear_regression_training_graph(onnx, dtype, mode):
    from onnx.reference import ReferenceEvaluator
    dtype = np.dtype(dtype)
    model, D = linear_regression_model(onnx, dtype, mode)
    fast = ReferenceEvaluator(model, new_ops=fonnx.reference_ops())
    pure = ReferenceEvaluator(model)
    assert sum(type(nd) in fonnx.reference_ops() for nd in fast.rt_nodes_) == 1
    init = [np.zeros((D, 1), dtype), np.zeros((1, 1), dtype),
            np.zeros((D, 1), dtype), np.zeros((1, 1), dtype)]
    R = np.array(0.02, dtype)
    state_fast = [a.copy() for a in init]
    state_pure = [a.copy() for a in init]
    losses = []
    for t in range(50):
        feeds = dict(zip(["W", "B", "VW", "VB"], state_fast), R=R, T=np.array(t))
        kept = [a.copy() for a in state_fast]
        out_fast = fast.run(None, feeds)
        for a, b in zip(state_fast, kept):  # the feeds are not modified
            np.testing.assert_array_equal(a, b)
        out_pure = pure.run(None, dict(zip(["W", "B", "VW", "VB"], state_pure),
                                       R=R, T=np.array(t)))
        for a, b in zip(out_fast, out_pure):
            assert a.dtype == dtype
            np.testing.assert_allclose(a, b.astype(dtype), **TOL[dtype])
        losses.append(float(out_fast[0]))
        state_fast, state_pure = list(out_fast[1:]), list(out_pure[1:])
    assert losses[-1] < 0.01 * losses[0]  # it actually trains
