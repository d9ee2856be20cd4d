"""fastopt.onnx: the functional ONNX forms and the onnx.reference backend.

The functional forms must equal fastopt's in-place functions bit for bit,
return the outputs in ONNX order, keep every X's dtype and never touch their
inputs. reference_ops() must plug into onnx.reference.ReferenceEvaluator and
run a real training graph (linear regression, gradient written in ONNX ops,
Momentum node, 50 iterations) exactly like the pure reference.
"""
from __future__ import annotations


import numpy as np
import pytest

import fastopt
import fastopt.onnx as fonnx
from _subprocess import run_python

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
TOL = {F32: dict(rtol=1e-5, atol=1e-6), F64: dict(rtol=1e-12, atol=1e-12)}
DOMAIN = "ai.onnx.preview.training"
NSTATES = {"momentum": 1, "adagrad": 1, "adam": 2}
ATTRS = {
    "momentum": dict(alpha=0.9, beta=0.7, mode="nesterov", norm_coefficient=0.01),
    "adagrad": dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01),
    "adam": dict(alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.01,
                 norm_coefficient_post=0.0625),
}


def tensors(rng, op, shapes, dtypes, g_shapes=None):
    """ONNX-ordered tensor inputs: all X, all G, then each state."""
    g_shapes = g_shapes or shapes
    xs = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
    gs = [rng.standard_normal(s).astype(d) for s, d in zip(g_shapes, dtypes)]
    states = []
    for _ in range(NSTATES[op]):
        states += [np.array(np.abs(rng.standard_normal(s)), dtype=d)
                   for s, d in zip(shapes, dtypes)]
    return xs + gs + states


def inplace(op, R, T, inputs, attrs):
    """The reference for the functional form: fastopt's in-place function."""
    n = len(inputs) // (2 + NSTATES[op])
    xs = [a.copy() for a in inputs[:n]]
    gs = list(inputs[n:2 * n])
    states = [[a.copy() for a in inputs[(2 + k) * n:(3 + k) * n]]
              for k in range(NSTATES[op])]
    getattr(fastopt, op)(xs, gs, *states, lr=R, t=T, **attrs)
    return xs + [a for s in states for a in s]


# ------------------------------------------------------- functional forms

@pytest.mark.parametrize("op", ["momentum", "adagrad", "adam"])
@pytest.mark.parametrize("layout", ["single", "three-mixed", "broadcast-empty"])
def test_functional_equals_inplace_and_leaves_inputs(op, layout):
    rng = np.random.default_rng(1)
    if layout == "single":
        inputs = tensors(rng, op, [(4, 5)], [F64])
    elif layout == "three-mixed":
        inputs = tensors(rng, op, [(), (7,), (2, 3, 4)], [F32, F64, F32])
    else:
        inputs = tensors(rng, op, [(3, 4), (0,), (2, 0)], [F64, F32, F64],
                         g_shapes=[(4,), (0,), (1, 0)])
    before = [a.copy() for a in inputs]
    R, T = np.array(0.05, np.float32), np.array(3, np.int64)
    got = getattr(fonnx, op)(R, T, *inputs, **ATTRS[op])
    want = inplace(op, float(R), 3, inputs, ATTRS[op])
    n = len(inputs) // (2 + NSTATES[op])
    assert isinstance(got, tuple) and len(got) == n * (1 + NSTATES[op])
    like = [a for k in [0] + list(range(2, 2 + NSTATES[op]))
            for a in inputs[k * n:(k + 1) * n]]
    for a, b, src in zip(got, want, like):
        assert a.dtype == src.dtype and a.shape == src.shape
        np.testing.assert_array_equal(a, b)  # same kernels, same bits
        assert not np.shares_memory(a, src)
        assert a.size == 0 or a.ctypes.data % 64 == 0  # cache-line aligned
    for i, a in enumerate(got):  # outputs are independent of each other
        for b in got[i + 1:]:
            assert not np.shares_memory(a, b)
    for a, b in zip(inputs, before):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_outputs_are_in_onnx_order():
    x1, x2 = np.array([1.0]), np.array([10.0, 20.0])
    g1, g2 = np.array([1.0]), np.array([2.0, 3.0])
    v1, v2 = np.zeros(1), np.zeros(2)
    h1, h2 = np.zeros(1), np.zeros(2)
    x1n, x2n, v1n, v2n, h1n, h2n = fonnx.adam(1.0, 0, x1, x2, g1, g2, v1, v2, h1, h2,
                                              alpha=0.5, beta=0.5, epsilon=0.0)
    np.testing.assert_array_equal(v1n, [0.5])
    np.testing.assert_array_equal(v2n, [1.0, 1.5])
    np.testing.assert_array_equal(h1n, [0.5])
    np.testing.assert_array_equal(h2n, [2.0, 4.5])
    # X - R * V / sqrt(H): sign steps of size 1/sqrt(2)
    np.testing.assert_allclose(x1n, [1 - 0.5 / np.sqrt(0.5)])
    np.testing.assert_allclose(x2n, [10 - 1 / np.sqrt(2), 20 - 1.5 / np.sqrt(4.5)])
    x1n, x2n, v1n, v2n = fonnx.momentum(0.5, 0, x1, x2, g1, g2, v1, v2, alpha=0.9,
                                        beta=0.1, mode="standard", norm_coefficient=0.0)
    np.testing.assert_array_equal(v2n, [2.0, 3.0])
    np.testing.assert_array_equal(x2n, [9.0, 18.5])


@pytest.mark.parametrize("op", ["momentum", "adagrad", "adam"])
def test_awkward_and_readonly_inputs(op):
    """Read-only, Fortran-ordered, strided and byte-swapped inputs work and
    are left alone; outputs are fresh native C-contiguous arrays."""
    rng = np.random.default_rng(2)
    inputs = tensors(rng, op, [(6, 4)], [F64])
    want = inplace(op, 0.1, 2, inputs, ATTRS[op])
    odd = []
    for k, a in enumerate(inputs):
        b = [np.asfortranarray(a), np.repeat(a, 2, axis=1)[:, ::2],
             a.astype(a.dtype.newbyteorder()), a.copy()][k % 4]
        b.flags.writeable = False
        odd.append(b)
    got = getattr(fonnx, op)(0.1, 2, *odd, **ATTRS[op])
    for a, b in zip(got, want):
        assert a.flags.c_contiguous and a.flags.writeable and a.dtype.isnative
        np.testing.assert_array_equal(a, b)
    for a, b in zip(odd, inputs):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("R, T", [(0.1, 2), (np.float32(0.1), np.int64(2)),
                                  (np.array(0.1), np.array(2)),
                                  (np.array([0.1], np.float32), np.array([2]))])
def test_r_and_t_forms(R, T):
    x, g, v = np.ones(3), np.full(3, 2.0), np.ones(3)
    got = fonnx.momentum(R, T, x, g, v, **ATTRS["momentum"])
    want = inplace("momentum", float(np.asarray(R).item()), 2, [x, g, v], ATTRS["momentum"])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("op, k", [("momentum", 0), ("momentum", 2), ("momentum", 4),
                                   ("adagrad", 5), ("adam", 3), ("adam", 6),
                                   ("adam", 0)])
def test_wrong_input_count(op, k):
    inputs = [np.ones(2)] * k
    attrs = ATTRS[op]
    mult = 4 if op == "adam" else 3
    with pytest.raises(ValueError, match=rf"fastopt\.onnx\.{op}: got {k} tensor inputs "
                                         rf"after R and T; expected a non-zero multiple "
                                         rf"of {mult}"):
        getattr(fonnx, op)(0.1, 1, *inputs, **attrs)


def test_errors_name_the_onnx_function():
    x, g, v = np.ones(3), np.ones(3), np.zeros(3)
    a = ATTRS["momentum"]
    with pytest.raises(ValueError, match=r"^fastopt\.onnx\.momentum: T must be >= 0"):
        fonnx.momentum(0.1, np.array(-1), x, g, v, **a)
    with pytest.raises(TypeError, match=r"^fastopt\.onnx\.momentum: T must be an integer"):
        fonnx.momentum(0.1, np.array(1.0), x, g, v, **a)
    with pytest.raises(ValueError, match=r"^fastopt\.onnx\.adagrad: R must be a finite"):
        fonnx.adagrad(np.array(-0.1), 0, x, g, v)
    with pytest.raises(ValueError, match=r"^fastopt\.onnx\.momentum: mode must be "
                                         r"'standard' or 'nesterov', got 'Nesterov'"):
        fonnx.momentum(0.1, 0, x, g, v, **{**a, "mode": "Nesterov"})
    with pytest.raises(TypeError, match=r"^fastopt\.onnx\.adam: g\[1\] has dtype float32 "
                                        r"but x\[1\] has float64"):
        fonnx.adam(0.1, 1, x, x, g, g.astype(np.float32), v, v, v, v)
    with pytest.raises(ValueError, match=r"^fastopt\.onnx\.adagrad: h\[0\] has shape \(2,\)"):
        fonnx.adagrad(0.1, 0, x, g, np.zeros(2))
    with pytest.raises(TypeError, match=r"^fastopt\.onnx\.momentum: alpha must be a real "
                                        r"number, got str"):
        fonnx.momentum(0.1, 0, x, g, v, **{**a, "alpha": "0.9"})
    with pytest.raises(ValueError, match=r"^fastopt\.onnx\.adam: alpha must be < 1"):
        fonnx.adam(0.1, 1, x, g, v, v, alpha=1.0)
    with pytest.raises(TypeError, match=r"^fastopt\.onnx\.momentum: x\[0\] must be a "
                                        r"numpy\.ndarray, got list"):
        fonnx.momentum(0.1, 0, [1.0, 2.0], g, v, **a)
    with pytest.raises(TypeError, match=r"^fastopt\.onnx\.momentum: x\[0\] has dtype int64"):
        fonnx.momentum(0.1, 0, np.ones(3, np.int64), g, v, **a)


def test_works_without_onnx_installed(tmp_path):
    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "import numpy as np, fastopt.onnx as fo\n"
        "out = fo.adagrad(0.5, 0, np.ones(2), np.array([3.0, -4.0]), np.zeros(2),"
        " epsilon=0.0)\n"
        "assert out[0].tolist() == [0.5, 1.5] and out[1].tolist() == [9.0, 16.0]\n"
        "try:\n    fo.reference_ops()\nexcept ImportError as e:\n    print('IE', e)\n"
    )
    res = run_python(["-c", code], tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("IE fastopt.onnx.reference_ops() needs the onnx package")


def test_importing_does_not_import_onnx(tmp_path):
    code = "import sys, fastopt.onnx; print('onnx' in sys.modules)"
    res = run_python(["-c", code], tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


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
    from onnx.reference import ReferenceEvaluator
    from onnx import TensorProto, helper
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
@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_linear_regression_training_graph(onnx, dtype, mode):
    from onnx.reference import ReferenceEvaluator
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
