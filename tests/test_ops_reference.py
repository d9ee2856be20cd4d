"""fastopt.onnx_momentum / adagrad / adam against plain NumPy evaluations.

Every case is checked twice: against the exact formula in float64 (within a
dtype tolerance) and against the same expression evaluated in the array's
own dtype in the kernels' order, which must match bit for bit. Contiguous
and awkward layouts, NaN/Inf, tensor lists, thread counts, scalar forms.
"""

import numpy as np
import public_names
import pytest
from assertions import DTYPES
from ops_cases import OPS, SHAPES, call, check, expected, make

import fastopt
from fastopt import _ext


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("t", [0, 1, 7])
def test_contiguous_against_reference(op, dtype, shape, t, rng):
    names, params, _ = OPS[op]
    for kw in params:
        kw = dict(kw, lr=0.05, t=t)
        x, g, states = make(rng, shape, dtype, len(names))
        before = (x.copy(), g.copy(), [s.copy() for s in states])
        g_before = g.copy()
        call(op, x, g, states, **kw)
        check(op, before, [x] + states, dtype, kw)
        np.testing.assert_array_equal(g, g_before)  # g is only read


def layouts(rng, dtype, nstates):
    """(description, x, g, states) with awkward memory layouts."""
    def arr(shape):
        return np.asarray(rng.standard_normal(shape), dtype)

    yield "fortran", *(np.asfortranarray(arr((5, 7))) for _ in range(2)), \
        [np.asfortranarray(np.abs(arr((5, 7)))) for _ in range(nstates)]
    yield "mixed-order", np.asfortranarray(arr((4, 6))), arr((4, 6)), \
        [np.abs(arr((4, 6))) for _ in range(nstates)]
    yield "strided", arr((40,))[::3], arr((56,))[::4], \
        [np.abs(arr((28,)))[::2] for _ in range(nstates)]
    yield "negative-strides", arr((9, 8))[::-1, ::-2], arr((9, 4)), \
        [np.abs(arr((9, 4))) for _ in range(nstates)]
    yield "transposed", arr((6, 3)).T, arr((3, 6)), \
        [np.abs(arr((6, 3))).T for _ in range(nstates)]
    yield "misaligned-offset", arr((34,))[1:], arr((34,))[1:], \
        [np.abs(arr((34,)))[1:] for _ in range(nstates)]
    raw = np.zeros(33 * np.dtype(dtype).itemsize + 1, np.uint8)[1:].view(dtype)
    raw[:] = arr((33,))
    yield "unaligned-bytes", raw, arr((33,)), [np.abs(arr((33,))) for _ in range(nstates)]
    yield "byteswapped", arr((17,)).astype(np.dtype(dtype).newbyteorder(">")), \
        arr((17,)).astype(np.dtype(dtype).newbyteorder(">")), \
        [np.abs(arr((17,))).astype(np.dtype(dtype).newbyteorder(">")) for _ in range(nstates)]
    yield "broadcast-g-row", arr((4, 5)), arr((5,)), [np.abs(arr((4, 5))) for _ in range(nstates)]
    yield ("broadcast-g-scalar", arr((3, 2, 2)), arr(()),
           [np.abs(arr((3, 2, 2))) for _ in range(nstates)])
    yield ("broadcast-g-keepdims", arr((3, 4)), arr((3, 1)),
           [np.abs(arr((3, 4))) for _ in range(nstates)])
    yield "read-only-g", arr((12,)), np.frombuffer(arr((12,)).tobytes(), dtype), \
        [np.abs(arr((12,))) for _ in range(nstates)]


@pytest.mark.parametrize("op", OPS)
def test_awkward_layouts(op, dtype):
    rng = np.random.default_rng(5)
    names, params, _ = OPS[op]
    for desc, x, g, states in layouts(rng, dtype, len(names)):
        kw = dict(params[-1], lr=0.1, t=3)
        before = (x.copy(), g.copy(), [s.copy() for s in states])
        call(op, x, g, states, **kw)
        check(op, before, [x] + states, dtype, kw)
        np.testing.assert_array_equal(g, before[1], err_msg=desc)


@pytest.mark.parametrize("op", OPS)
def test_view_updates_its_base(op):
    names = OPS[op][0]
    base = np.ones((6, 8))
    states = [np.zeros((3, 8)) for _ in names]
    public_names.op(op)(base[::2], np.ones((3, 8)), *states, lr=0.5, t=1)
    assert np.all(base[1::2] == 1.0)           # untouched rows
    assert np.all(base[::2] != 1.0)            # updated in the base's memory


@pytest.mark.parametrize("op", OPS)
def test_nan_inf_propagate(op):
    names, params, _ = OPS[op]
    for dtype in DTYPES:
        x = np.linspace(-1, 1, 40).astype(dtype)
        g = np.zeros(40, dtype)
        g[[1, 5, 9]] = [np.nan, np.inf, -np.inf]
        states = [np.ones(40, dtype) for _ in names]
        before = (x.copy(), g.copy(), [s.copy() for s in states])
        kw = dict(params[0], lr=0.1, t=2)
        with np.errstate(all="ignore"):
            call(op, x, g, states, **kw)
            check(op, before, [x] + states, dtype, kw)
        assert np.isnan(x[1])
        assert np.isfinite(x[0]) and np.isfinite(x[10:]).all()


@pytest.mark.parametrize("op", OPS)
def test_many_tensors_mixed_dtypes_one_call(op):
    """A list update equals tensor-by-tensor updates, bit for bit."""
    rng = np.random.default_rng(11)
    names, params, _ = OPS[op]
    shapes = [(3,), (), (0,), (17, 3), (1025,), (2, 3, 4), (64,)]
    dtypes = [np.float32, np.float64, np.float32, np.float64, np.float32, np.float64, np.float32]
    tensors = [make(rng, s, d, len(names)) for s, d in zip(shapes, dtypes)]
    kw = dict(params[-1], lr=0.03, t=4)
    singles = [(x.copy(), g, [s.copy() for s in st]) for x, g, st in tensors]
    for x, g, st in singles:
        call(op, x, g, st, **kw)
    xs = [x for x, _, _ in tensors]
    gs = tuple(g for _, g, _ in tensors)     # a tuple works like a list
    sts = [[st[k] for _, _, st in tensors] for k in range(len(names))]
    call(op, xs, gs, sts, **kw)
    for (x, _, st), (x1, _, st1) in zip(tensors, singles):
        np.testing.assert_array_equal(x, x1)
        for a, b in zip(st, st1):
            np.testing.assert_array_equal(a, b)


def big_list(rng, names, dtype_cycle=(np.float32, np.float64)):
    sizes = [300_001, 17, 0, 70_000, 1, 123_457, 5, 250_000]
    out = []
    for i, n in enumerate(sizes):
        d = dtype_cycle[i % len(dtype_cycle)]
        out.append(make(rng, (n,), d, len(names)))
    return out


@pytest.mark.parametrize("op", OPS)
def test_bit_identical_across_thread_counts(op):
    """Large enough for the parallel driver (many chunks, unaligned starts)."""
    rng = np.random.default_rng(3)
    names, params, _ = OPS[op]
    base = big_list(rng, names)
    base[3] = tuple([base[3][0][1:], base[3][1][1:], [s[1:] for s in base[3][2]]])
    total = sum(x.nbytes for x, _, _ in base)
    assert total > 4 * _ext.tuning()["serial_bytes"]
    results = []
    for n_threads in (1, 2, 3, 4, -1, None):
        tensors = [(x.copy(), g, [s.copy() for s in st]) for x, g, st in base]
        kw = dict(params[-1], lr=0.01, t=5, n_threads=n_threads)
        call(op, [x for x, _, _ in tensors], [g for _, g, _ in tensors],
             [[st[k] for _, _, st in tensors] for k in range(len(names))], **kw)
        results.append(b"".join(a.tobytes() for x, _, st in tensors for a in [x] + st))
    assert all(r == results[0] for r in results)
    # and the parallel result is the formula
    x, g, st = base[0]
    exact = expected(op, x, g, st, x.dtype.type, **dict(params[-1], lr=0.01, t=5))
    tensors = [(x.copy(), g, [s.copy() for s in st])]
    call(op, tensors[0][0], g, tensors[0][2], **dict(params[-1], lr=0.01, t=5, n_threads=2))
    np.testing.assert_array_equal(tensors[0][0], exact[0])


def test_scalar_forms():
    """lr as a 0-d or one-element array and t as a NumPy integer, like ONNX."""
    x1, x2 = np.ones(4), np.ones(4)
    v1, v2 = np.zeros(4), np.zeros(4)
    g = np.full(4, 2.0)
    fastopt.onnx_momentum(x1, g, v1, lr=0.25, t=3, alpha=1, beta=1)
    fastopt.onnx_momentum(x2, g, v2, lr=np.array([0.25]), t=np.int64(3), alpha=np.float32(1),
                     beta=True + 0)
    np.testing.assert_array_equal(x1, x2)
    fastopt.onnx_adagrad(x1, g, v1, lr=np.array(0.5), t=np.array(2))
    fastopt.onnx_adagrad(x2, g, v2, lr=0.5, t=2)
    np.testing.assert_array_equal(x1, x2)
