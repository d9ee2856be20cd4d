"""fastopt.onnx's functional forms: equal to fastopt's in-place functions bit
for bit, outputs in ONNX order, every X's dtype kept, inputs never touched;
R and T forms, input counts, error names; usable without onnx installed.
"""
from __future__ import annotations

import numpy as np
import pytest
from _subprocess import run_python
from onnx_backend_cases import ATTRS, F32, F64, NSTATES, inplace, tensors

import fastopt.onnx as fonnx


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
                                        r"numpy\.ndarray, got a list of numbers"):
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
