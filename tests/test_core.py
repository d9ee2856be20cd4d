"""fastopt.momentum / adagrad / adam against plain NumPy evaluations.

Every case is checked twice: against the exact formula in float64 (within a
dtype tolerance) and against the same expression evaluated in the array's
own dtype in the kernels' order, which must match bit for bit.
"""
import threading

import numpy as np
import pytest

import fastopt
from fastopt import _ext
from fastopt import _reference as ref

DTYPES = [np.float32, np.float64]
RTOL = {np.float32: 2e-5, np.float64: 1e-13}

OPS = {
    # name: (state names, hyperparameter sets, reference)
    "momentum": (("v",), [
        dict(alpha=0.9, beta=1.0, norm_coefficient=0.0, mode="standard"),
        dict(alpha=0.7, beta=0.4, norm_coefficient=0.01, mode="standard"),
        dict(alpha=0.9, beta=0.9, norm_coefficient=0.001, mode="nesterov"),
    ], ref.momentum),
    "adagrad": (("h",), [
        dict(),
        dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01),
    ], ref.adagrad),
    "adam": (("v", "h"), [
        dict(),
        dict(alpha=0.8, beta=0.95, epsilon=1e-4, norm_coefficient=0.02,
             norm_coefficient_post=0.01),
    ], ref.adam),
}


def make(rng, shape, dtype, nstates, positive_states=True):
    x = np.asarray(rng.standard_normal(shape), dtype)
    g = np.asarray(rng.standard_normal(shape), dtype)
    states = [np.asarray(np.abs(rng.standard_normal(shape)), dtype) for _ in range(nstates)]
    return x, g, states


def call(op, x, g, states, **kw):
    getattr(fastopt, op)(x, g, *states, **kw)


def expected(op, x, g, states, dtype, **kw):
    kw = {k: v for k, v in kw.items() if k != "n_threads"}
    return OPS[op][2](x, g, *states, dtype=dtype, **kw)


def check(op, before, after, dtype, kw):
    """after = arrays after the fastopt call; before = copies from before."""
    x, g, states = before
    exact = expected(op, x, g, states, dtype, **kw)
    f64 = expected(op, x, g, states, np.float64, **kw)
    for got, e, r in zip(after, exact, f64):
        assert got.dtype.newbyteorder("=") == dtype
        np.testing.assert_array_equal(got, e)        # bit for bit (NaN == NaN)
        scale = max(1.0, float(np.nanmax(np.abs(r), initial=0.0)))
        np.testing.assert_allclose(got, r, rtol=RTOL[dtype], atol=RTOL[dtype] * scale)


SHAPES = [(), (0,), (1,), (2,), (7,), (16,), (17,), (31,), (33,), (1023,), (1025,),
          (3, 5), (2, 0, 3), (2, 3, 4, 5)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("t", [0, 1, 7])
def test_contiguous_against_reference(op, dtype, shape, t):
    rng = np.random.default_rng(abs(hash((op, shape, t))) % 2**32)
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
    yield "broadcast-g-scalar", arr((3, 2, 2)), arr(()), [np.abs(arr((3, 2, 2))) for _ in range(nstates)]
    yield "broadcast-g-keepdims", arr((3, 4)), arr((3, 1)), [np.abs(arr((3, 4))) for _ in range(nstates)]
    yield "read-only-g", arr((12,)), np.frombuffer(arr((12,)).tobytes(), dtype), \
        [np.abs(arr((12,))) for _ in range(nstates)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
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
    getattr(fastopt, op)(base[::2], np.ones((3, 8)), *states, lr=0.5, t=1)
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
    fastopt.momentum(x1, g, v1, lr=0.25, t=3, alpha=1, beta=1)
    fastopt.momentum(x2, g, v2, lr=np.array([0.25]), t=np.int64(3), alpha=np.float32(1),
                     beta=True + 0)
    np.testing.assert_array_equal(x1, x2)
    fastopt.adagrad(x1, g, v1, lr=np.array(0.5), t=np.array(2))
    fastopt.adagrad(x2, g, v2, lr=0.5, t=2)
    np.testing.assert_array_equal(x1, x2)


def test_gradient_aliasing_an_output_exactly_is_read_before_writing():
    """g may be the very array it updates (read through a copy)."""
    x = np.arange(5.0)
    v = np.zeros(5)
    exp = ref.momentum(x, x, v, lr=0.1, t=0)
    fastopt.momentum(x, x, v, lr=0.1, t=0)
    np.testing.assert_array_equal(x, exp[0])
    np.testing.assert_array_equal(v, exp[1])


def test_overlap_found_among_many_tensors():
    """Enough ranges for the sorted sweep (not the pairwise check)."""
    arena = np.zeros(400, np.float32)
    xs = [arena[i * 4:(i + 1) * 4] for i in range(40)]      # adjacent, disjoint
    vs = [np.zeros(4, np.float32) for _ in range(40)]
    gs = [np.ones(4, np.float32) for _ in range(40)]
    fastopt.momentum(xs, gs, vs, lr=1.0, t=0)               # touching is fine
    np.testing.assert_array_equal(arena[:160], -1.0)
    vs[31] = arena[158:162]                                  # straddles x[39]/x[40]
    snap = arena.tobytes()
    with pytest.raises(ValueError, match=r"x\[39\] and v\[31\] share memory"):
        fastopt.momentum(xs, gs, vs, lr=1.0, t=0)
    assert arena.tobytes() == snap
    vs[31] = np.zeros(4, np.float32)
    gs[7] = arena[101:105]                                   # straddles x[25]/x[26]
    with pytest.raises(ValueError, match=r"g\[7\] partially overlaps x\[25\]"):
        fastopt.momentum(xs, gs, vs, lr=1.0, t=0)
    assert arena.tobytes() == snap


@pytest.mark.parametrize("seed", range(40))
def test_overlap_detection_matches_brute_force(seed):
    """Random contiguous views of one arena: fastopt rejects a call exactly
    when some output shares memory with another array (a gradient that is an
    output's exact view excepted), whichever path (pairwise, sorted, reused
    order) the check takes."""
    rng = np.random.default_rng(seed)
    arena = np.zeros(2000, np.float64)
    n = int(rng.integers(1, 30))
    size = int(rng.integers(1, 12))

    def view():
        if rng.random() < 0.5:
            return np.zeros(size)
        start = int(rng.integers(0, 2000 - size))
        return arena[start:start + size]

    xs, gs, vs = [view() for _ in range(n)], [view() for _ in range(n)], [view() for _ in range(n)]
    for _ in range(2):   # twice: the second call may reuse the sorted order
        outs = [(a, True) for a in xs + vs] + [(a, False) for a in gs]
        bad = False
        for i, (a, oa) in enumerate(outs):
            for b, ob in outs[i + 1:]:
                if (oa or ob) and np.shares_memory(a, b):
                    same = (a.__array_interface__["data"][0] == b.__array_interface__["data"][0])
                    bad |= oa and ob or not same
        snap = arena.tobytes()
        if bad:
            with pytest.raises(ValueError, match="share memory|partially overlaps"):
                fastopt.momentum(xs, gs, vs, lr=0.5, t=1)
            assert arena.tobytes() == snap
        else:
            fastopt.momentum(xs, gs, vs, lr=0.5, t=1)
        gs = gs[::-1]


def test_shared_gradient_across_tensors():
    g = np.full(10, 0.5)
    xs = [np.ones(10), np.ones(10)]
    vs = [np.zeros(10), np.zeros(10)]
    fastopt.momentum(xs, [g, g], vs, lr=1.0, t=0)
    np.testing.assert_array_equal(xs[0], 0.5)
    np.testing.assert_array_equal(xs[1], 0.5)


# ------------------------------------------------------------------ bad input

def snapshot(*objs):
    out = []
    for o in objs:
        if isinstance(o, np.ndarray):
            out.append((o, o.tobytes()))
        elif isinstance(o, (list, tuple)):
            out.extend(snapshot(*o))
    return out


def f32(*shape, fill=1.0):
    return np.full(shape, fill, np.float32)


def bad_cases():
    """(op, args, kwargs, exception, message regex)."""
    ro = f32(3)
    ro.flags.writeable = False
    base = f32(10)
    buf = f32(8)
    cases = [
        ("momentum", (ro, f32(3), f32(3)), {}, ValueError, r"fastopt.momentum: x is read-only"),
        ("momentum", (f32(3), f32(3), ro), {}, ValueError, r"v is read-only"),
        ("adam", ([f32(2), f32(3)], [f32(2), f32(3)], [f32(2), f32(3)], [f32(2), ro]), {},
         ValueError, r"fastopt.adam: h\[1\] is read-only"),
        ("momentum", (np.ones(3, np.int64), f32(3), f32(3)), {}, TypeError, r"x has dtype int64"),
        ("momentum", (np.ones(3, bool), f32(3), f32(3)), {}, TypeError, r"x has dtype bool"),
        ("momentum", (np.ones(3, np.float16),) * 3, {}, TypeError, r"x has dtype float16"),
        ("momentum", (np.ones(3, np.complex64),) * 3, {}, TypeError, r"x has dtype complex64"),
        ("momentum", (np.ones(3, object),) * 3, {}, TypeError, r"x has dtype object"),
        ("momentum", (f32(3), np.ones(3), f32(3)), {}, TypeError,
         r"g has dtype float64 but x has float32"),
        ("adagrad", ([f32(3), np.ones(2)], [f32(3), np.ones(2)], [f32(3), f32(2)]), {},
         TypeError, r"fastopt.adagrad: h\[1\] has dtype float32 but x\[1\] has float64"),
        ("momentum", (f32(3), f32(3), f32(4)), {}, ValueError,
         r"v has shape \(4,\) but x has shape \(3,\)"),
        ("momentum", (f32(3, 2), f32(2, 3), f32(3, 2)), {}, ValueError,
         r"g with shape \(2, 3\) cannot be broadcast to x's shape \(3, 2\)"),
        ("momentum", (f32(3), f32(2, 3), f32(3)), {}, ValueError, r"cannot be broadcast"),
        ("momentum", ([f32(3)], [f32(3), f32(3)], [f32(3)]), {}, ValueError,
         r"g has 2 tensors but x has 1"),
        ("momentum", ([], [], []), {}, ValueError, r"x is an empty list"),
        ("momentum", (f32(3), [f32(3)], f32(3)), {}, TypeError,
         r"g is a list but x is a single array"),
        ("momentum", ([f32(3)], f32(3), [f32(3)]), {}, TypeError,
         r"g is a single array but x is a list"),
        ("momentum", (f32(3), f32(3), f32(3)), {"t": -1}, ValueError, r"t must be >= 0"),
        ("momentum", (f32(3), f32(3), f32(3)), {"t": 1.0}, TypeError, r"t must be an integer"),
        ("momentum", (f32(3), f32(3), f32(3)), {"t": True}, TypeError, r"t must be an integer"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": -0.1}, ValueError,
         r"lr must be a finite number >= 0"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": float("nan")}, ValueError, r"lr must be"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": float("inf")}, ValueError, r"lr must be"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": "0.1"}, TypeError, r"lr must be a real"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": np.ones(2)}, TypeError,
         r"lr must be a real number or a one-element"),
        ("momentum", (f32(3), f32(3), f32(3)), {"mode": "Nesterov"}, ValueError,
         r"mode must be 'standard' or 'nesterov'"),
        ("momentum", (f32(3), f32(3), f32(3)), {"alpha": float("nan")}, ValueError,
         r"alpha must be finite"),
        ("momentum", (f32(3), f32(3), f32(3)), {"n_threads": 0}, ValueError, r"n_threads must be"),
        ("momentum", (f32(3), f32(3), f32(3)), {"n_threads": 1.5}, TypeError, r"n_threads must be"),
        ("adagrad", (f32(3), f32(3), f32(3)), {"epsilon": -1e-8}, ValueError,
         r"epsilon must be >= 0"),
        ("adagrad", (f32(3), f32(3), f32(3)), {"decay_factor": -1.0}, ValueError,
         r"decay_factor must be >= 0"),
        ("adam", (f32(3),) * 4, {"alpha": 1.0, "t": 2}, ValueError, r"alpha must be < 1"),
        ("adam", (f32(3),) * 4, {"beta": 1.5}, ValueError, r"beta must be <= 1"),
        ("momentum", (base[:5], f32(5), base[3:8]), {}, ValueError,
         r"x and v share memory"),
        ("momentum", (base[:5], f32(5), base[:5]), {}, ValueError, r"x and v share memory"),
        ("momentum", ([buf[:4], buf[:4]], [f32(4), f32(4)], [f32(4), f32(4)]), {}, ValueError,
         r"x\[0\] and x\[1\] share memory"),
        ("momentum", (buf[:4], buf[2:6], f32(4)), {}, ValueError,
         r"g partially overlaps x"),
        ("momentum", ([f32(4), f32(4)], [f32(4), buf[1:5]], [buf[:4], f32(4)]), {}, ValueError,
         r"g\[1\] partially overlaps v\[0\]"),
        ("momentum", ([1.0, 2.0], [1.0, 2.0], [0.0, 0.0]), {}, TypeError,
         r"x\[0\] must be a numpy.ndarray, got float"),
        ("momentum", (f32(3), "g", f32(3)), {}, TypeError, r"g must be a numpy.ndarray"),
        ("momentum", (3.0, f32(3), f32(3)), {}, TypeError, r"x must be a numpy.ndarray"),
        ("adam", (f32(3), f32(3), f32(3), None), {}, TypeError, r"h must be a numpy.ndarray"),
    ]
    # a bad tensor at the end of a long list: the index is named, nothing written
    n = 50
    xs = [f32(7) for _ in range(n)]
    gs = [f32(7) for _ in range(n)]
    vs = [f32(7) for _ in range(n - 1)] + [f32(6)]
    cases.append(("momentum", (xs, gs, vs), {}, ValueError,
                  r"v\[49\] has shape \(6,\) but x\[49\] has shape \(7,\)"))
    return cases


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c[4][:40])
def test_bad_input_raises_and_modifies_nothing(case):
    op, args, kw, exc, msg = case
    kw = dict({"lr": 0.1, "t": 1}, **kw)
    snap = snapshot(*args)
    with pytest.raises(exc, match=msg):
        getattr(fastopt, op)(*args, **kw)
    for arr, data in snap:
        assert arr.tobytes() == data


def test_self_overlapping_outputs_are_rejected():
    buf = np.zeros(4)
    x = np.lib.stride_tricks.as_strided(buf, (3,), (0,), writeable=True)
    with pytest.raises(ValueError, match=r"x has elements that share memory"):
        fastopt.momentum(x, np.ones(3), np.zeros(3), lr=0.1, t=0)
    v = np.lib.stride_tricks.as_strided(buf, (2, 2), (8, 8), writeable=True)
    with pytest.raises(ValueError, match=r"v\[1\] has elements that share memory"):
        fastopt.momentum([np.ones(1), np.ones((2, 2))], [np.ones(1), np.ones((2, 2))],
                         [np.zeros(1), v], lr=0.1, t=0)
    assert not buf.any()
    # a strided view that does not overlap itself is fine
    y = np.zeros((4, 6))[::2, ::3]
    fastopt.momentum(y, np.ones((2, 2)), np.zeros((2, 2)), lr=1.0, t=0)
    assert (y == -1).all()


def test_huge_numbers_and_odd_types_raise_clear_errors():
    a = [f32(3), f32(3), f32(3)]
    with pytest.raises(ValueError, match="fastopt.momentum: lr must be a finite number"):
        fastopt.momentum(*a, lr=10**400, t=0)
    with pytest.raises(ValueError, match="fastopt.momentum: alpha must be finite"):
        fastopt.momentum(*a, lr=0.1, t=0, alpha=-10**400)
    with pytest.raises(TypeError, match="fastopt.momentum: mode must be a str"):
        fastopt.momentum(*a, lr=0.1, t=0, mode=np.array(["nesterov"]))
    with pytest.raises(ValueError, match="n_threads must be a positive int up to 1024"):
        fastopt.momentum(*a, lr=0.1, t=0, n_threads=5000)


def test_list_emptied_by_another_thread_during_the_call():
    """The C call runs without the GIL: the arrays of a list must stay
    referenced even if another thread empties the list meanwhile."""
    n = 4_000_000
    for _ in range(3):
        xs, gs, vs = [np.zeros(n, np.float32)], [np.ones(n, np.float32)], [np.zeros(n, np.float32)]
        started = threading.Event()

        def clear():
            started.wait()
            xs.clear()
            vs.clear()
            gs.clear()

        th = threading.Thread(target=clear)
        th.start()
        x0 = xs[0]
        refs = (xs, gs, vs)
        started.set()
        try:   # must not crash; if the lists were emptied first, a clear error
            fastopt.momentum(*refs, lr=0.5, t=0, n_threads=2)
        except (TypeError, ValueError) as exc:
            assert "empty" in str(exc) or "tensors but x has" in str(exc)
        th.join()
        assert x0[0] in (0.0, -0.5)


def test_missing_keywords_are_required():
    with pytest.raises(TypeError):
        fastopt.momentum(f32(2), f32(2), f32(2), lr=0.1)   # t is required
    with pytest.raises(TypeError):
        fastopt.momentum(f32(2), f32(2), f32(2), 0.1, 0)   # keyword-only


# -------------------------------------------------------------- threads/config

def test_threads_concurrent_python_threads():
    """Calls from several Python threads on separate arrays (GIL released)."""
    rng = np.random.default_rng(9)
    n = 200_000
    work = [(rng.standard_normal(n), rng.standard_normal(n)) for _ in range(6)]
    expect = []
    for x0, g in work:
        x, v = x0.copy(), np.zeros(n)
        for t in range(20):
            fastopt.momentum(x, g, v, lr=0.01, t=t, n_threads=1)
        expect.append(x)
    out = [None] * len(work)
    shared_g = work[0][1]
    shared_g.flags.writeable = False

    def worker(i):
        x, v = work[i][0].copy(), np.zeros(n)
        for t in range(20):
            fastopt.momentum(x, work[i][1], v, lr=0.01, t=t, n_threads=2)
        out[i] = x

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(work))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for a, b in zip(out, expect):
        np.testing.assert_array_equal(a, b)


def test_set_num_threads_and_defaults():
    assert fastopt.get_num_threads() == _ext.max_threads()
    with fastopt.set_num_threads(3):
        assert fastopt.get_num_threads() == 3
        with fastopt.set_num_threads(-1):
            assert fastopt.get_num_threads() == _ext.num_procs()
        assert fastopt.get_num_threads() == 3
    assert fastopt.get_num_threads() == _ext.max_threads()
    with pytest.raises(ValueError, match="fastopt.set_num_threads: n_threads must be"):
        with fastopt.set_num_threads(0):
            pass


def test_set_num_threads_is_per_thread():
    seen = []
    with fastopt.set_num_threads(1):
        th = threading.Thread(target=lambda: seen.append(fastopt.get_num_threads()))
        th.start()
        th.join()
    assert seen == [_ext.max_threads()]


def test_threadpoolctl_limits_are_honoured():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not _ext.have_openmp():
        pytest.skip("serial build")
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        assert fastopt.get_num_threads() == 1
    assert fastopt.get_num_threads() == _ext.max_threads()


def test_show_config(capsys):
    fastopt.show_config()
    out = capsys.readouterr().out
    assert "OpenMP:" in out and "-fno-math-errno" in out and "-ffp-contract=off" in out
    assert "-ffast-math" not in out and "-march=native" not in out
    cfg = fastopt.config()
    assert ("OpenMP:        on" in out) == cfg["openmp"]
