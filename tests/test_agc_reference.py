"""Adaptive gradient clipping: fastopt.unitwise_norm and fastopt.agc against
a plain NumPy float64 implementation of the NFNet formula
(fastopt._reference.agc; docs/semantics.md section 3): every shape and
layout, the eps and 1e-6 floors, the strict threshold, NaN/Inf, memory layouts.
"""
import numpy as np
import pytest
from agc_cases import EMPTY, LAYOUTS, RTOL, SHAPES, make

import fastopt
from fastopt import _reference as ref

# ----------------------------------------------------------- unitwise_norm

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES + EMPTY)
def test_unitwise_norm_matches_reference(shape, layout, dtype):
    x, _ = make(shape, dtype, layout)
    got = fastopt.unitwise_norm(x, layout=layout)
    want = ref.agc.unit_norms(x, layout)
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
    want = ref.agc.unit_norms(x, layout)
    for view in (np.asfortranarray(x), x[:, ::-1], x.astype(">f4"),
                 np.frombuffer(b"\0" + x.tobytes(), np.float32, offset=1).reshape(x.shape)):
        got = fastopt.unitwise_norm(view, layout=layout)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=RTOL[np.float32])


# ----------------------------------------------------------- agc

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES + EMPTY)
def test_agc_matches_reference(shape, layout, dtype):
    x, g = make(shape, dtype, layout)
    g0, x0 = g.copy(), x.copy()
    want = ref.agc.agc(x, g, 0.01, 1e-3, layout)
    fastopt.agc(x, g, layout=layout)
    np.testing.assert_allclose(g, want, rtol=RTOL[dtype], atol=0)
    keep = np.broadcast_to(~ref.agc.clipped_units(x, g0, 0.01, 1e-3, layout), x.shape)
    assert np.array_equal(g[keep], g0[keep])           # untouched units: same bits
    assert x.tobytes() == x0.tobytes()
    if keep.size and not keep.all():                   # clipped units: at max_norm
        max_norm = 0.01 * np.maximum(ref.agc.unit_norms(x, layout), 1e-3)
        norms = np.broadcast_to(ref.agc.unit_norms(g, layout), x.shape)
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
    np.testing.assert_allclose(gs[0], ref.agc.agc(xs[0], g_in[0], 0.01, 1e-3, "oi"), rtol=5e-7)
    np.testing.assert_allclose(gs[1], ref.agc.agc(xs[1], g_in[1], 0.02, 1e-3, "oi"), rtol=1e-13)
    assert gs[2].tobytes() == g_in[2].tobytes()         # excluded: untouched
    assert gs[0].tobytes() != g_in[0].tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_parameters_use_the_eps_floor(layout, dtype):
    x = np.zeros((6, 50), dtype)
    g = np.full((6, 50), 0.01, dtype)                 # unit norms ~0.07
    want = ref.agc.agc(x, g, 0.5, 1e-3, layout)
    fastopt.agc(x, g, clipping=0.5, layout=layout)
    np.testing.assert_allclose(g, want, rtol=RTOL[dtype])
    np.testing.assert_allclose(ref.agc.unit_norms(g, layout), 0.5 * 1e-3, rtol=RTOL[dtype] * 10)
    g = np.full((6, 50), 0.1, dtype)
    fastopt.agc(x, g, clipping=0.5, eps=0.1, layout=layout)   # a bigger floor
    np.testing.assert_allclose(ref.agc.unit_norms(g, layout), 0.5 * 0.1, rtol=RTOL[dtype] * 10)


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
    np.testing.assert_allclose(g, ref.agc.agc(x, g0, 1e-4, 1e-3, "oi"), rtol=RTOL[dtype])


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
        assert np.array_equal(ref.agc.clipped_units(x, g0, clip, eps, layout),
                              np.full(ref.agc.unit_norms(x, layout).shape, clipped))
        fastopt.agc(x, g, clipping=clip, eps=eps, layout=layout)
        if clipped:
            factor = dtype(max_norm / 1e-6)
            assert np.array_equal(g, g0 * factor)
        else:
            assert g.tobytes() == g0.tobytes()
        # the fused update sees the same clipped gradient
        xf, v = np.zeros_like(x), np.zeros_like(x)
        fastopt.onnx_momentum(xf, g0, v, lr=1.0, t=0, clipping=clip, clip_eps=eps,
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
    want = ref.agc.agc(x, g0, 0.1, 1e-3, "oi")
    np.testing.assert_allclose(g, want, rtol=1e-13, equal_nan=True)
    assert g[0].tobytes() == g0[0].tobytes() and g[2].tobytes() == g0[2].tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_agc_any_memory_layout(layout):
    x, g = make((12, 7, 3), np.float32, layout, seed=3)
    want = ref.agc.agc(x, g, 0.01, 1e-3, layout)
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
