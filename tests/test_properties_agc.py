"""Property tests (hypothesis) of AGC: fastopt.agc, unitwise_norm and the fused
momentum(..., clipping=...) against the float64 reference within the norms'
error bound, over random shapes, layouts, dtypes and thread counts.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from layouts import place
from property_strategies import BUDGET, SLOW_OK, THREADS, finite_values, hyper, layouts

import fastopt
from fastopt._reference.agc import check_agc, check_unitwise_norm

# ------------------------------------------------------------------- AGC

HAVE_AGC = hasattr(fastopt, "agc")
needs_agc = pytest.mark.skipif(not HAVE_AGC, reason="fastopt.agc not merged yet")


@st.composite
def agc_tensor(draw, big=False):
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
    if big:
        shape = draw(st.sampled_from([(257, 301), (301, 257), (64, 3, 3, 41), (3, 3, 8, 1000),
                                      (70001,), (1, 80000)]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        x = rng.standard_normal(shape) * 10.0 ** draw(st.integers(-3, 1))
        g = rng.standard_normal(shape) * 10.0 ** draw(st.integers(-4, 1))
        if draw(st.booleans()):
            x[(0,) * len(shape)] = 0.0
        lay_x, lay_g = {"byte_offset": draw(st.sampled_from([0, 4]))}, {}
    else:
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=5)
                     .filter(lambda s: math.prod(s) <= 400))
        x = draw(hnp.arrays(np.float64, shape, elements=finite_values(dtype)))
        scale = 10.0 ** draw(st.integers(-6, 2))
        g = np.array(draw(hnp.arrays(np.float64, shape, elements=finite_values(dtype))) * scale)
        if draw(st.integers(0, 4)) == 0:
            x[...] = 0.0                     # the eps floor
        if draw(st.integers(0, 4)) == 0:
            g[...] = 0.0                     # the 1e-6 floor
        lay_x = draw(layouts(len(shape), dtype.itemsize))
        lay_g = draw(layouts(len(shape), dtype.itemsize))
    clipping = draw(st.none() | st.sampled_from([0.01, 0.1, 1.0]) | st.floats(1e-4, 10.0))
    return {"dtype": dtype, "x": x, "g": g, "lay_x": lay_x, "lay_g": lay_g,
            "clipping": clipping}


@st.composite
def agc_cases(draw, big=False):
    tensors = draw(st.lists(agc_tensor(big), min_size=1, max_size=2 if big else 3))
    single = len(tensors) == 1 and draw(st.booleans())
    if single or draw(st.booleans()):
        clipping = draw(st.sampled_from([0.01, 0.1, 1.0]) | st.floats(1e-4, 10.0))
        per = [clipping] * len(tensors)
    else:
        per = [t["clipping"] for t in tensors]
        clipping = per
    return {"tensors": tensors, "single": single, "clipping": clipping, "per": per,
            "eps": draw(st.sampled_from([1e-3, 1e-6, 1.0])),
            "layout": draw(st.sampled_from(["oi", "io"])),
            "n_threads": draw(st.sampled_from([None, 1, 2, 3]))}


def agc_build(case):
    xs, gs = [], []
    for k, t in enumerate(case["tensors"]):
        rng = np.random.default_rng(50 + k)
        xs.append(place(t["x"], t["dtype"], rng=rng, readonly=k % 2 == 1, **t["lay_x"]))
        gs.append(place(t["g"], t["dtype"], rng=rng, **t["lay_g"]))
    return xs, gs


def pack(case, arrs):
    return arrs[0] if case["single"] else list(arrs)


def agc_args(case, placed):
    return pack(case, [p.arr for p in placed])


def agc_run(case, n_threads):
    xs, gs = agc_build(case)
    fastopt.agc(agc_args(case, xs), agc_args(case, gs), clipping=case["clipping"],
                eps=case["eps"], layout=case["layout"], n_threads=n_threads)
    return xs, gs


def check_agc_case(case):
    xs0, gs0 = agc_build(case)
    g_before = [p.arr.astype(np.float64) for p in gs0]
    xs, gs = agc_run(case, case["n_threads"])
    for i, (px, pg) in enumerate(zip(xs, gs)):
        assert px.unchanged(), f"agc wrote x[{i}]"
        assert pg.untouched_outside(), f"agc wrote around g[{i}]"
        check_agc(pg.arr, xs0[i].arr, g_before[i].astype(pg.arr.dtype), case["per"][i],
                  case["eps"], case["layout"], f"agc g[{i}]")
    expect = [p.buf.copy() for p in gs]
    for nt in THREADS:
        _, again = agc_run(case, nt)
        for a, b in zip(again, expect):
            assert np.array_equal(a.buf, b), f"agc: n_threads={nt} gave different bits"


@needs_agc
@settings(suppress_health_check=SLOW_OK)
@given(case=agc_cases())
def test_agc_matches_reference_any_layout(case):
    check_agc_case(case)


@needs_agc
@settings(max_examples=max(4, BUDGET // 6), suppress_health_check=SLOW_OK)
@given(case=agc_cases(big=True))
def test_agc_threaded_matches_reference(case):
    check_agc_case(case)


@needs_agc
@settings(suppress_health_check=SLOW_OK)
@given(t=agc_tensor(), layout=st.sampled_from(["oi", "io"]))
def test_unitwise_norm_matches_reference(t, layout):
    p = place(t["x"], t["dtype"], rng=np.random.default_rng(3), **t["lay_x"])
    out = fastopt.unitwise_norm(p.arr, layout=layout)
    assert p.unchanged()
    check_unitwise_norm(out, t["x"].astype(t["dtype"]), layout)


@needs_agc
@settings(suppress_health_check=SLOW_OK)
@given(case=agc_cases(), hp=hyper("momentum"), bcast=st.booleans())
def test_fused_agc_momentum_equals_agc_then_momentum(case, hp, bcast):
    """momentum(..., clipping=c) == agc() on a copy of g, then momentum(),
    bit for bit, for every thread count; g is only read."""
    results = []
    for nt in (case["n_threads"],) + THREADS:
        xs, gs = agc_build(case)
        xs = [place(p.arr.astype(np.float64), p.arr.dtype.newbyteorder("="),
                    rng=np.random.default_rng(9), **t["lay_x"])
              for p, t in zip(xs, case["tensors"])]        # writeable copies
        vs = [place(np.zeros(p.arr.shape), p.arr.dtype.newbyteorder("="),
                    rng=np.random.default_rng(11)) for p in xs]
        # a broadcast gradient: the first row, shape (last axis,)
        g_in = [np.array(p.arr.reshape(-1)[:p.arr.shape[-1]])
                if bcast and p.arr.ndim and p.arr.size else p.arr for p in gs]
        g_bytes = [np.array(g).tobytes() for g in g_in]
        fastopt.onnx_momentum(agc_args(case, xs), pack(case, g_in), agc_args(case, vs),
                         **hp, clipping=case["clipping"], clip_eps=case["eps"],
                         layout=case["layout"], n_threads=nt)
        assert [np.array(g).tobytes() for g in g_in] == g_bytes, "fused momentum wrote g"
        results.append([(p.arr.tobytes(), q.arr.tobytes()) for p, q in zip(xs, vs)])
        # the two-call composition on fresh copies
        xs2 = [place(p.arr.astype(np.float64), p.arr.dtype.newbyteorder("="),
                     rng=np.random.default_rng(9), **t["lay_x"])
               for p, t in zip(agc_build(case)[0], case["tensors"])]
        vs2 = [np.zeros(p.arr.shape, p.arr.dtype.newbyteorder("=")) for p in xs2]
        gcopy = [np.array(np.broadcast_to(g, p.arr.shape), dtype=p.arr.dtype.newbyteorder("="))
                 for g, p in zip(g_in, xs2)]
        fastopt.agc(agc_args(case, xs2), pack(case, gcopy), clipping=case["clipping"],
                    eps=case["eps"], layout=case["layout"], n_threads=nt)
        fastopt.onnx_momentum(agc_args(case, xs2), pack(case, gcopy), pack(case, vs2), **hp,
                         n_threads=nt)
        for (xb, vb), p, v in zip(results[-1], xs2, vs2):
            assert xb == p.arr.tobytes(), "fused x != agc + momentum"
            assert vb == v.tobytes(), "fused v != agc + momentum"
    assert all(r == results[0] for r in results), "fused AGC-momentum depends on n_threads"
