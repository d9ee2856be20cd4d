"""Adaptive gradient clipping: fastopt.unitwise_norm, fastopt.agc and the
fused fastopt.momentum(..., clipping=...), against a plain NumPy float64
implementation of the NFNet formula (docs/semantics.md section 3)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastopt

DTYPES = [np.float32, np.float64]
LAYOUTS = ["oi", "io"]
# ranks 0 to 5, with length-1 axes that squeeze away, odd lengths, a row
# longer than one 4096-element block and a row long enough for two passes
SHAPES = [
    (), (1,), (7,), (1, 1), (1, 5), (5, 1), (4, 6), (33, 17), (3, 5000),
    (1, 1, 9), (3, 5, 7), (2, 1, 3), (4, 3, 1),
    (8, 3, 3, 3), (3, 3, 4, 8), (1, 6, 1, 1),
    (2, 3, 2, 2, 3), (1, 4, 1, 3, 1), (2, 40000),
]
EMPTY = [(0,), (0, 3), (3, 0), (2, 0, 4)]
RTOL = {np.float32: 5e-7, np.float64: 1e-13}


# ----------------------------------------------------------- the reference

def ref_norm(x, layout):
    """NFNet unitwise_norm in float64, kept dims."""
    x = np.asarray(x, np.float64)
    if np.squeeze(x).ndim <= 1:
        return np.sqrt(np.sum(x * x, keepdims=True))
    axes = tuple(range(1, x.ndim)) if layout == "oi" else tuple(range(x.ndim - 1))
    return np.sqrt(np.sum(x * x, axis=axes, keepdims=True))


def ref_agc(x, g, clipping, eps, layout):
    """The clipped gradient in float64 (None: not clipped)."""
    g = np.asarray(g, np.float64)
    if clipping is None:
        return g
    with np.errstate(all="ignore"):
        max_norm = clipping * np.maximum(ref_norm(x, layout), eps)
        g_norm = ref_norm(g, layout)
        return np.where(g_norm > max_norm, g * (max_norm / np.maximum(g_norm, 1e-6)), g)


def ref_momentum(x, g, v, lr, t, alpha, beta, nc, mode):
    x, g, v = (np.asarray(a, np.float64) for a in (x, g, v))
    gr = nc * x + g
    v = alpha * v + (beta if t > 0 else 1.0) * gr
    x = x - lr * (v if mode == "standard" else gr + alpha * v)
    return x, v


def clipped_units(x, g, clipping, eps, layout):
    """Boolean array (broadcastable to x) of the units the reference clips."""
    max_norm = clipping * np.maximum(ref_norm(x, layout), eps)
    return ref_norm(g, layout) > max_norm


def make(shape, dtype, layout, seed=0, clip_fraction=True):
    """x ~ N(0, 1) and g whose units are scaled so that, with clipping 0.01,
    about half of them are clipped (and none is near the threshold)."""
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.standard_normal(shape), dtype)
    g = np.asarray(rng.standard_normal(shape))
    if clip_fraction and g.size:
        nshape = ref_norm(g, layout).shape
        scale = np.where(rng.random(nshape) < 0.5, 3e-3, 3e-2)
        g = g * scale
    return x, np.asarray(g, dtype)


def snapshot(*arrays):
    return [a.tobytes() for a in arrays]


# ----------------------------------------------------------- unitwise_norm

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES + EMPTY)
def test_unitwise_norm_matches_reference(shape, layout, dtype):
    x, _ = make(shape, dtype, layout)
    got = fastopt.unitwise_norm(x, layout=layout)
    want = ref_norm(x, layout)
    assert got.dtype == dtype
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL[dtype], atol=0)


def test_unitwise_norm_shapes():
    x = np.ones((4, 3, 2, 5))
    assert fastopt.unitwise_norm(x).shape == (4, 1, 1, 1)
    assert fastopt.unitwise_norm(x, layout="io").shape == (1, 1, 1, 5)
    assert fastopt.unitwise_norm(np.ones((1, 7, 1))).shape == (1, 1, 1)
    assert fastopt.unitwise_norm(np.full((), -3.0)).shape == ()
    assert fastopt.unitwise_norm(np.full((), -3.0)) == 3.0
    np.testing.assert_array_equal(fastopt.unitwise_norm(np.full((4, 9), 2.0)),
                                  np.full((4, 1), 6.0))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_unitwise_norm_any_memory_layout(layout):
    x, _ = make((6, 5, 4), np.float32, layout)
    want = ref_norm(x, layout)
    for view in (np.asfortranarray(x), x[:, ::-1], x.astype(">f4"),
                 np.frombuffer(b"\0" + x.tobytes(), np.float32, offset=1).reshape(x.shape)):
        got = fastopt.unitwise_norm(view, layout=layout)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=RTOL[np.float32])


# ----------------------------------------------------------- agc

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES + EMPTY)
def test_agc_matches_reference(shape, layout, dtype):
    x, g = make(shape, dtype, layout)
    g0, x0 = g.copy(), x.copy()
    want = ref_agc(x, g, 0.01, 1e-3, layout)
    fastopt.agc(x, g, layout=layout)
    np.testing.assert_allclose(g, want, rtol=RTOL[dtype], atol=0)
    keep = np.broadcast_to(~clipped_units(x, g0, 0.01, 1e-3, layout), x.shape)
    assert np.array_equal(g[keep], g0[keep])           # untouched units: same bits
    assert x.tobytes() == x0.tobytes()
    if keep.size and not keep.all():                   # clipped units: at max_norm
        max_norm = 0.01 * np.maximum(ref_norm(x, layout), 1e-3)
        norms = np.broadcast_to(ref_norm(g, layout), x.shape)
        mask = ~keep
        np.testing.assert_allclose(norms[mask], np.broadcast_to(max_norm, x.shape)[mask],
                                   rtol=10 * RTOL[dtype])


def test_agc_list_mixed_dtypes_and_excluded():
    shapes = [(16, 3, 3, 3), (16,), (10, 16)]
    xs, gs = [], []
    for k, (s, d) in enumerate(zip(shapes, [np.float32, np.float64, np.float32])):
        x, g = make(s, d, "oi", seed=k)
        xs.append(x)
        gs.append(g)
    g_in = [g.copy() for g in gs]
    fastopt.agc(xs, gs, clipping=[0.01, 0.02, None])
    np.testing.assert_allclose(gs[0], ref_agc(xs[0], g_in[0], 0.01, 1e-3, "oi"), rtol=5e-7)
    np.testing.assert_allclose(gs[1], ref_agc(xs[1], g_in[1], 0.02, 1e-3, "oi"), rtol=1e-13)
    assert gs[2].tobytes() == g_in[2].tobytes()         # excluded: untouched
    assert gs[0].tobytes() != g_in[0].tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_parameters_use_the_eps_floor(layout, dtype):
    x = np.zeros((6, 50), dtype)
    g = np.full((6, 50), 0.01, dtype)                 # unit norms ~0.07
    want = ref_agc(x, g, 0.5, 1e-3, layout)
    fastopt.agc(x, g, clipping=0.5, layout=layout)
    np.testing.assert_allclose(g, want, rtol=RTOL[dtype])
    np.testing.assert_allclose(ref_norm(g, layout), 0.5 * 1e-3, rtol=RTOL[dtype] * 10)
    g = np.full((6, 50), 0.1, dtype)
    fastopt.agc(x, g, clipping=0.5, eps=0.1, layout=layout)   # a bigger floor
    np.testing.assert_allclose(ref_norm(g, layout), 0.5 * 0.1, rtol=RTOL[dtype] * 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_and_tiny_gradients_use_the_1e6_floor(dtype):
    x = np.zeros((3, 4), dtype)
    g = np.zeros((3, 4), dtype)
    fastopt.agc(x, g)                                 # zero gradient: untouched
    assert not g.any() and not np.signbit(g).any()
    # max_norm = 1e-4 * 1e-3 = 1e-7 < ||g|| = 5e-7 < 1e-6: the factor is
    # max_norm / 1e-6 = 0.1, not max_norm / ||g|| = 0.2
    g = np.full((3, 4), 5e-7 / 2, dtype)
    g0 = g.copy()
    fastopt.agc(x, g, clipping=1e-4)
    np.testing.assert_allclose(g, g0.astype(np.float64) * 0.1, rtol=RTOL[dtype])
    np.testing.assert_allclose(g, ref_agc(x, g0, 1e-4, 1e-3, "oi"), rtol=RTOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_threshold_is_strict(layout, dtype):
    """A unit whose gradient norm equals max_norm exactly is not clipped.

    Exact in floating point: eps = 2**-10, clipping = 2**-11 and x = 0 give
    max_norm = 2**-21; a unit of four values 2**-22 has the sum of squares
    2**-42 and the norm 2**-21, all exact in either dtype. Since 2**-21 is
    below the 1e-6 floor, clipping at equality would scale by
    2**-21 / 1e-6 = 0.48, so `>` versus `>=` is visible in the result.
    One ulp more on every value makes the norm exceed max_norm (clipped);
    one ulp less keeps it below (untouched)."""
    eps, clip, max_norm = 2.0 ** -10, 2.0 ** -11, 2.0 ** -21
    at = np.full((4, 4), 2.0 ** -22, dtype)
    above = np.nextafter(at, dtype(1))
    below = np.nextafter(at, dtype(0))
    if layout == "io":
        at, above, below = at.T.copy(), above.T.copy(), below.T.copy()
    x = np.zeros((4, 4), dtype)
    for g, clipped in ((at, False), (above, True), (below, False)):
        g0 = g.copy()
        assert np.array_equal(clipped_units(x, g0, clip, eps, layout),
                              np.full(ref_norm(x, layout).shape, clipped))
        fastopt.agc(x, g, clipping=clip, eps=eps, layout=layout)
        if clipped:
            factor = dtype(max_norm / 1e-6)
            assert np.array_equal(g, g0 * factor)
        else:
            assert g.tobytes() == g0.tobytes()
        # the fused update sees the same clipped gradient
        xf, v = np.zeros_like(x), np.zeros_like(x)
        fastopt.momentum(xf, g0, v, lr=1.0, t=0, clipping=clip, clip_eps=eps,
                         layout=layout)
        assert np.array_equal(v, g)


def test_threshold_at_ordinary_scale():
    # x rows (3, 4): norm 5, clipping 0.5: max_norm 2.5 = ||(1.5, 2)|| exactly
    x = np.array([[3.0, 4.0]] * 2, np.float32)
    g = np.array([[1.5, 2.0], [1.5, np.nextafter(np.float32(2), np.float32(3))]], np.float32)
    g0 = g.copy()
    fastopt.agc(x, g, clipping=0.5)
    assert g[0].tobytes() == g0[0].tobytes()
    np.testing.assert_allclose(g[1], g0[1] * (2.5 / np.linalg.norm(g0[1].astype(np.float64))),
                               rtol=2e-7)


def test_nan_and_inf_follow_the_reference():
    x = np.ones((4, 8))
    g = np.full((4, 8), 1.0)
    g[0, 3] = np.nan          # g norm NaN: comparison false, unit untouched
    g[1, 2] = np.inf          # g norm inf: factor 0 (inf * 0 = NaN)
    x[2, 5] = np.nan          # max_norm NaN: untouched
    g0 = g.copy()
    fastopt.agc(x, g, clipping=0.1)
    want = ref_agc(x, g0, 0.1, 1e-3, "oi")
    np.testing.assert_allclose(g, want, rtol=1e-13, equal_nan=True)
    assert g[0].tobytes() == g0[0].tobytes() and g[2].tobytes() == g0[2].tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_agc_any_memory_layout(layout):
    x, g = make((12, 7, 3), np.float32, layout, seed=3)
    want = ref_agc(x, g, 0.01, 1e-3, layout)
    xf, gf = np.asfortranarray(x), np.asfortranarray(g)
    fastopt.agc(xf, gf, layout=layout)                 # F order: no copies
    np.testing.assert_allclose(gf, want, rtol=5e-7)
    base = np.zeros((12, 7, 6), np.float32)           # strided x and g: via copies
    gs = base[:, :, ::2]
    gs[...] = g
    xbase = np.full((12, 14, 3), np.nan, np.float32)
    xs = xbase[:, ::2]
    xs[...] = x
    fastopt.agc(xs, gs, layout=layout)
    np.testing.assert_allclose(gs, want, rtol=5e-7)
    assert not base[:, :, 1::2].any()
    assert np.isnan(xbase[:, 1::2]).all() and np.array_equal(xs, x)
    gb = g.astype(">f4")                               # byte-swapped: via a copy
    fastopt.agc(x.astype(">f4"), gb, layout=layout)
    np.testing.assert_allclose(gb.astype(np.float32), want, rtol=5e-7)
    x.flags.writeable = False                          # x is only read
    g2 = g.copy()
    fastopt.agc(x, g2, layout=layout)
    np.testing.assert_allclose(g2, want, rtol=5e-7)


# ----------------------------------------------------------- fused momentum

def mixed_workload(layout, seed=0, big=False):
    """Tensors of every unit kind: short rows, long rows (two passes),
    strided units, vectors, scalars, both dtypes, F order, an excluded one."""
    shapes = [(64, 3, 3, 3), (64,), (), (128, 64, 1, 1), (3, 5, 7), (2, 40000),
              (300, 70), (5, 1)]
    if big:
        # (24, 50000) holds more than 8 MiB of x and g in two passes (long rows
        # for "oi", strided units for "io"): the C driver splits the call into
        # groups after it
        shapes += [(256, 128, 3, 3), (24, 50000), (1000, 512)]
    dtypes = [np.float32, np.float64, np.float32, np.float32, np.float64, np.float32,
              np.float64, np.float32] + [np.float32, np.float32, np.float64][: len(shapes) - 8]
    xs, gs = [], []
    for k, (s, d) in enumerate(zip(shapes, dtypes)):
        x, g = make(s, d, layout, seed=seed + k)
        if k == 4:
            x, g = np.asfortranarray(x), np.asfortranarray(g)
        xs.append(x)
        gs.append(g)
    vs = [np.asarray(np.random.default_rng(seed + 99 + k).standard_normal(x.shape) * 0.01,
                     x.dtype) for k, x in enumerate(xs)]
    vs = [np.asfortranarray(v) if x.flags.f_contiguous and not x.flags.c_contiguous else v
          for v, x in zip(vs, xs)]
    clipping = [0.01] * len(xs)
    clipping[1] = None
    clipping[6] = 0.02
    return xs, gs, vs, clipping


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode,t,nc", [("standard", 0, 0.0), ("standard", 3, 1e-4),
                                       ("nesterov", 5, 5e-5)])
def test_fused_equals_agc_then_momentum_bit_for_bit(layout, mode, t, nc):
    xs, gs, vs, clip = mixed_workload(layout)
    kw = dict(lr=0.1, t=t, alpha=0.9, beta=0.9, norm_coefficient=nc, mode=mode)
    x1, v1 = [x.copy(order="K") for x in xs], [v.copy(order="K") for v in vs]
    g_in = [g.copy(order="K") for g in gs]
    fastopt.momentum(x1, gs, v1, clipping=clip, clip_eps=1e-3, layout=layout, **kw)
    assert snapshot(*gs) == snapshot(*g_in)            # g is not modified
    x2, v2 = [x.copy(order="K") for x in xs], [v.copy(order="K") for v in vs]
    g2 = [g.copy(order="K") for g in gs]
    fastopt.agc(xs, g2, clipping=clip, eps=1e-3, layout=layout)
    fastopt.momentum(x2, g2, v2, **kw)
    assert snapshot(*x1, *v1) == snapshot(*x2, *v2)
    # and both are the float64 formula
    for k, (x, g, v) in enumerate(zip(xs, g_in, vs)):
        gc = ref_agc(x, g, clip[k], 1e-3, layout)
        xw, vw = ref_momentum(x, gc, v, 0.1, t, 0.9, 0.9, nc, mode)
        rtol = 1e-5 if x.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(x1[k], xw, rtol=rtol, atol=1e-7)
        np.testing.assert_allclose(v1[k], vw, rtol=rtol, atol=1e-7)


def test_fused_all_excluded_is_plain_momentum():
    xs, gs, vs, _ = mixed_workload("oi")
    x1, v1 = [x.copy(order="K") for x in xs], [v.copy(order="K") for v in vs]
    fastopt.momentum(x1, gs, v1, lr=0.1, t=1, clipping=[None] * len(xs))
    fastopt.momentum(xs, gs, vs, lr=0.1, t=1)
    assert snapshot(*x1, *v1) == snapshot(*xs, *vs)


def test_fused_single_array_and_broadcast_gradient():
    x, g = make((8, 16), np.float64, "oi")
    v = np.zeros_like(x)
    x1, v1 = x.copy(), v.copy()
    fastopt.momentum(x1, g, v1, lr=0.5, t=0, clipping=0.01)
    gc = g.copy()
    fastopt.agc(x, gc)
    x2, v2 = x.copy(), v.copy()
    fastopt.momentum(x2, gc, v2, lr=0.5, t=0)
    assert x1.tobytes() == x2.tobytes() and v1.tobytes() == v2.tobytes()
    # a broadcast gradient is clipped as its materialised array
    row = g[:1]
    x3, v3 = x.copy(), v.copy()
    fastopt.momentum(x3, row, v3, lr=0.5, t=0, clipping=[0.01])
    gb = np.broadcast_to(row, x.shape).copy()
    fastopt.agc(x, gb)
    x4, v4 = x.copy(), v.copy()
    fastopt.momentum(x4, gb, v4, lr=0.5, t=0)
    assert x3.tobytes() == x4.tobytes() and v3.tobytes() == v4.tobytes()


# ----------------------------------------------------------- threads

@pytest.mark.parametrize("layout", LAYOUTS)
def test_bit_identical_across_thread_counts(layout):
    xs, gs, vs, clip = mixed_workload(layout, seed=7, big=True)
    out_agc, out_fused = [], []
    for n in (1, 2, 3, 4):
        g = [a.copy(order="K") for a in gs]
        fastopt.agc(xs, g, clipping=clip, layout=layout, n_threads=n)
        out_agc.append(snapshot(*g))
        x, v = [a.copy(order="K") for a in xs], [a.copy(order="K") for a in vs]
        fastopt.momentum(x, gs, v, lr=0.1, t=2, norm_coefficient=1e-4, clipping=clip,
                         layout=layout, n_threads=n)
        out_fused.append(snapshot(*x, *v))
    assert all(o == out_agc[0] for o in out_agc)
    assert all(o == out_fused[0] for o in out_fused)
    assert out_agc[0] != snapshot(*gs)                 # something was clipped
    norms = [fastopt.unitwise_norm(xs[-1], layout=layout).tobytes()]
    with fastopt.set_num_threads(3):
        norms.append(fastopt.unitwise_norm(xs[-1], layout=layout).tobytes())
    assert norms[0] == norms[1]


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=0, max_size=5).map(tuple),
       layout=st.sampled_from(LAYOUTS), f64=st.booleans(),
       order=st.sampled_from("CF"), seed=st.integers(0, 2**16),
       n_threads=st.sampled_from([1, 2, 3]))
def test_property_reference_and_fusion(shape, layout, f64, order, seed, n_threads):
    dtype = np.float64 if f64 else np.float32
    x, g = make(shape, dtype, layout, seed=seed)
    x, g = np.asarray(x, order=order), np.asarray(g, order=order)
    v = np.zeros_like(x)
    x1, v1 = x.copy(order="K"), v.copy(order="K")
    fastopt.momentum(x1, g, v1, lr=0.3, t=1, beta=0.5, clipping=0.01, layout=layout,
                     n_threads=n_threads)
    g2 = g.copy(order="K")
    fastopt.agc(x, g2, layout=layout, n_threads=n_threads)
    np.testing.assert_allclose(g2, ref_agc(x, g, 0.01, 1e-3, layout), rtol=RTOL[dtype])
    fastopt.momentum(x, g2, v, lr=0.3, t=1, beta=0.5)
    assert x1.tobytes() == x.tobytes() and v1.tobytes() == v.tobytes()


# ----------------------------------------------------------- bad input

def _agc_case(**kw):
    xs = [np.ones((3, 4), np.float32), np.ones((5,), np.float64)]
    gs = [np.full((3, 4), 0.5, np.float32), np.full((5,), 0.5)]
    return xs, gs, kw


def _bad_agc_cases():
    ro = np.full((5,), 0.5)
    ro.flags.writeable = False
    x0 = np.ones((3, 4), np.float32)
    shared = np.full((3, 4), 0.5, np.float32)
    return [
        # (xs, gs, kwargs, exception, match)
        (*_agc_case(layout="OI"), ValueError, r"fastopt.agc: layout must be 'oi'.*got 'OI'"),
        (*_agc_case(layout=1), TypeError, r"layout must be a str, got int"),
        (*_agc_case(clipping=0.0), ValueError, r"clipping must be > 0.0, got 0.0"),
        (*_agc_case(clipping=-1), ValueError, r"clipping must be > 0.0, got -1.0"),
        (*_agc_case(clipping=float("inf")), ValueError, r"clipping must be finite"),
        (*_agc_case(clipping=None), TypeError, r"clipping must be a real number > 0 or a list"),
        (*_agc_case(clipping=[0.01]), ValueError,
         r"clipping has 1 entries but x has 2 tensors; give one value per tensor"),
        (*_agc_case(clipping=[0.01, 0.02, 0.03]), ValueError, r"clipping has 3 entries"),
        (*_agc_case(clipping=[0.01, -0.5]), ValueError, r"clipping\[1\] must be > 0.0"),
        (*_agc_case(clipping=[0.01, float("nan")]), ValueError, r"clipping\[1\] must be finite"),
        (*_agc_case(clipping=[0.01, "0.1"]), TypeError, r"clipping\[1\] must be a real number, got str"),
        (*_agc_case(eps=0.0), ValueError, r"eps must be > 0.0, got 0.0"),
        (*_agc_case(eps=-1e-3), ValueError, r"eps must be > 0.0"),
        (*_agc_case(eps=float("nan")), ValueError, r"eps must be finite"),
        (*_agc_case(n_threads=0), ValueError, r"n_threads must be a positive int"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32), ro], {}, ValueError,
         r"fastopt.agc: g\[1\] is read-only; it is clipped in place"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32), np.full((1,), 0.5)], {},
         ValueError, r"g\[1\] has shape \(1,\) but x\[1\] has shape \(5,\)"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32), np.full(5, 0.5, np.float32)], {},
         TypeError, r"g\[1\] has dtype float32 but x\[1\] has float64; the gradient must match"),
        ([x0, np.ones(5, np.int64)], [np.full((3, 4), 0.5, np.float32), np.ones(5, np.int64)],
         {}, TypeError, r"x\[1\] has dtype int64; fastopt works on float32 or float64"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32), [0.5] * 5], {}, TypeError,
         r"g\[1\] must be a numpy.ndarray, got list"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32)], {}, ValueError,
         r"g has 1 tensors but x has 2"),
        ([x0, np.ones(5)], np.full((3, 4), 0.5, np.float32), {}, TypeError,
         r"g is a single array but x is a list of 2"),
        ([], [], {}, ValueError, r"fastopt.agc: x is an empty list"),
        ([shared, np.ones(5)], [shared, np.full(5, 0.5)], {}, ValueError,
         r"g\[0\] shares memory with x\[0\]; the gradient is clipped in place"),
        ([x0, np.ones((3, 4), np.float32)], [shared, shared], {}, ValueError,
         r"g\[0\] and g\[1\] share memory|g\[1\] and g\[0\] share memory"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_agc_cases())))
def test_agc_bad_input_raises_and_modifies_nothing(case):
    xs, gs, kw, exc, match = _bad_agc_cases()[case]
    arrays = [a for a in list(xs) + list(gs if isinstance(gs, list) else [gs])
              if isinstance(a, np.ndarray)]
    before = snapshot(*arrays)
    with pytest.raises(exc, match=match):
        fastopt.agc(xs, gs, **kw)
    assert snapshot(*arrays) == before


def _bad_fused_cases():
    return [
        (dict(layout="hwio"), ValueError, r"fastopt.momentum: layout must be 'oi'"),
        (dict(clip_eps=0.0), ValueError, r"fastopt.momentum: clip_eps must be > 0.0"),
        (dict(clip_eps=-1.0), ValueError, r"clip_eps must be > 0.0"),
        (dict(clipping=-0.01), ValueError, r"fastopt.momentum: clipping must be > 0.0"),
        (dict(clipping=0), ValueError, r"clipping must be > 0.0"),
        (dict(clipping=[0.01]), ValueError, r"clipping has 1 entries but x has 2 tensors"),
        (dict(clipping=[0.01, -1.0]), ValueError, r"clipping\[1\] must be > 0.0"),
        (dict(clipping=[0.01, True]), TypeError, r"clipping\[1\] must be a real number, got bool"),
        (dict(clipping="0.01"), TypeError, r"clipping must be a real number, got str"),
        (dict(lr=-1.0), ValueError, r"lr must be a finite number >= 0"),
        (dict(mode="nest"), ValueError, r"mode must be 'standard' or 'nesterov'"),
        (dict(v_shape=(4, 3)), ValueError,
         r"v\[0\] has shape \(4, 3\) but x\[0\] has shape \(3, 4\)"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_fused_cases())))
def test_fused_bad_input_raises_and_modifies_nothing(case):
    kw, exc, match = _bad_fused_cases()[case]
    kw = dict(kw)
    xs = [np.ones((3, 4), np.float32), np.ones((5,), np.float64)]
    gs = [np.full((3, 4), 0.5, np.float32), np.full((5,), 0.5)]
    vs = [np.zeros(kw.pop("v_shape", (3, 4)), np.float32), np.zeros(5)]
    call = dict(lr=0.1, t=1, clipping=0.01)
    call.update(kw)
    before = snapshot(*xs, *gs, *vs)
    with pytest.raises(exc, match=match):
        fastopt.momentum(xs, gs, vs, **call)
    assert snapshot(*xs, *gs, *vs) == before


def test_unitwise_norm_bad_input():
    with pytest.raises(TypeError, match=r"fastopt.unitwise_norm: x must be a numpy.ndarray, got list"):
        fastopt.unitwise_norm([1.0, 2.0])
    with pytest.raises(TypeError, match=r"x has dtype int64"):
        fastopt.unitwise_norm(np.ones(3, np.int64))
    with pytest.raises(ValueError, match=r"fastopt.unitwise_norm: layout must be 'oi'"):
        fastopt.unitwise_norm(np.ones(3), layout="xy")


def test_clipping_none_leaves_momentum_unchanged():
    # clipping=None is the plain update; clip_eps and layout are unused then
    x, g = make((4, 5), np.float32, "oi")
    v = np.zeros_like(x)
    x1, v1 = x.copy(), v.copy()
    fastopt.momentum(x1, g, v1, lr=0.1, t=0, clipping=None, layout="io", clip_eps=0.5)
    fastopt.momentum(x, g, v, lr=0.1, t=0)
    assert x1.tobytes() == x.tobytes() and v1.tobytes() == v.tobytes()


# ----------------------------------------------------------- optax

def test_optax_adaptive_grad_clip_io():
    """optax.adaptive_grad_clip on JAX layouts (float32, its default), ranks
    0 to 5 but 3: optax reduces only axis 0 of a rank-3 tensor (multi-head
    linear), while fastopt's "io" reduces every axis but the last."""
    optax = pytest.importorskip("optax")
    jnp = pytest.importorskip("jax.numpy")
    shapes = [(), (7,), (1, 5), (6, 5), (5, 1), (3, 3, 4, 8), (2, 3, 3, 4, 6)]
    xs, gs = zip(*(make(s, np.float32, "io", seed=11 + k) for k, s in enumerate(shapes)))
    tx = optax.adaptive_grad_clip(0.01, eps=1e-3)
    params = [jnp.asarray(x) for x in xs]
    want, _ = tx.update([jnp.asarray(g) for g in gs], tx.init(params), params)
    gs = [g.copy() for g in gs]
    fastopt.agc(list(xs), gs, clipping=0.01, eps=1e-3, layout="io")
    for k, (g, w) in enumerate(zip(gs, want)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=0, err_msg=str(shapes[k]))
