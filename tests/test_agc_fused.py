"""The fused fastopt.onnx_momentum(..., clipping=...): bit for bit agc() then
momentum(), the float64 formula, every thread count, and a property test.
"""
import numpy as np
import pytest
from agc_cases import LAYOUTS, RTOL, make, mixed_workload, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

import fastopt
from fastopt import _reference as ref


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode,t,nc", [("standard", 0, 0.0), ("standard", 3, 1e-4),
                                       ("nesterov", 5, 5e-5)])
def test_fused_equals_agc_then_momentum_bit_for_bit(layout, mode, t, nc):
    xs, gs, vs, clip = mixed_workload(layout)
    kw = dict(lr=0.1, t=t, alpha=0.9, beta=0.9, norm_coefficient=nc, mode=mode)
    x1, v1 = [x.copy(order="K") for x in xs], [v.copy(order="K") for v in vs]
    g_in = [g.copy(order="K") for g in gs]
    fastopt.onnx_momentum(x1, gs, v1, clipping=clip, clip_eps=1e-3, layout=layout, **kw)
    assert snapshot(*gs) == snapshot(*g_in)            # g is not modified
    x2, v2 = [x.copy(order="K") for x in xs], [v.copy(order="K") for v in vs]
    g2 = [g.copy(order="K") for g in gs]
    fastopt.agc(xs, g2, clipping=clip, eps=1e-3, layout=layout)
    fastopt.onnx_momentum(x2, g2, v2, **kw)
    assert snapshot(*x1, *v1) == snapshot(*x2, *v2)
    # and both are the float64 formula
    for k, (x, g, v) in enumerate(zip(xs, g_in, vs)):
        gc = ref.agc.agc(x, g, clip[k], 1e-3, layout)
        xw, vw = ref.momentum(x, gc, v, lr=0.1, t=t, alpha=0.9, beta=0.9,
                              norm_coefficient=nc, mode=mode)
        rtol = 1e-5 if x.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(x1[k], xw, rtol=rtol, atol=1e-7)
        np.testing.assert_allclose(v1[k], vw, rtol=rtol, atol=1e-7)


def test_fused_all_excluded_is_plain_momentum():
    xs, gs, vs, _ = mixed_workload("oi")
    x1, v1 = [x.copy(order="K") for x in xs], [v.copy(order="K") for v in vs]
    fastopt.onnx_momentum(x1, gs, v1, lr=0.1, t=1, clipping=[None] * len(xs))
    fastopt.onnx_momentum(xs, gs, vs, lr=0.1, t=1)
    assert snapshot(*x1, *v1) == snapshot(*xs, *vs)


def test_fused_single_array_and_broadcast_gradient():
    x, g = make((8, 16), np.float64, "oi")
    v = np.zeros_like(x)
    x1, v1 = x.copy(), v.copy()
    fastopt.onnx_momentum(x1, g, v1, lr=0.5, t=0, clipping=0.01)
    gc = g.copy()
    fastopt.agc(x, gc)
    x2, v2 = x.copy(), v.copy()
    fastopt.onnx_momentum(x2, gc, v2, lr=0.5, t=0)
    assert x1.tobytes() == x2.tobytes() and v1.tobytes() == v2.tobytes()
    # a broadcast gradient is clipped as its materialised array
    row = g[:1]
    x3, v3 = x.copy(), v.copy()
    fastopt.onnx_momentum(x3, row, v3, lr=0.5, t=0, clipping=[0.01])
    gb = np.broadcast_to(row, x.shape).copy()
    fastopt.agc(x, gb)
    x4, v4 = x.copy(), v.copy()
    fastopt.onnx_momentum(x4, gb, v4, lr=0.5, t=0)
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
        fastopt.onnx_momentum(x, gs, v, lr=0.1, t=2, norm_coefficient=1e-4, clipping=clip,
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
    fastopt.onnx_momentum(x1, g, v1, lr=0.3, t=1, beta=0.5, clipping=0.01, layout=layout,
                     n_threads=n_threads)
    g2 = g.copy(order="K")
    fastopt.agc(x, g2, layout=layout, n_threads=n_threads)
    np.testing.assert_allclose(g2, ref.agc.agc(x, g, 0.01, 1e-3, layout), rtol=RTOL[dtype])
    fastopt.onnx_momentum(x, g2, v, lr=0.3, t=1, beta=0.5)
    assert x1.tobytes() == x.tobytes() and v1.tobytes() == v.tobytes()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fused_follows_x_order_when_states_differ(layout):
    """x Fortran-ordered, v and g C-ordered: the fused call is normalised in
    x's order, as fastopt.agc normalises it, so the two agree bit for bit
    (unit norms of the same values reduced in C and F order may differ in
    the last bit: a sum of 8 equal squares, found by hypothesis)."""
    x = np.asfortranarray(np.zeros((2, 2, 4), np.float32))
    g = np.full((2, 2, 4), 1.3, np.float32)
    v = np.zeros((2, 2, 4), np.float32)
    x2, v2, g2 = x.copy(order="K"), v.copy(), g.copy()
    fastopt.onnx_momentum(x, g, v, lr=0.01, t=0, alpha=0.0, clipping=0.01, layout=layout)
    fastopt.agc(x2, g2, clipping=0.01, layout=layout)
    fastopt.onnx_momentum(x2, g2, v2, lr=0.01, t=0, alpha=0.0)
    assert x.flags.f_contiguous and x.tobytes() == x2.tobytes()
    assert v.tobytes() == v2.tobytes()
