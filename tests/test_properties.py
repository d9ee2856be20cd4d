"""Property tests (hypothesis): every op equals its float64 reference within
the dtype's error bound, over random shapes (0-d to 5-D, size 0 included),
layouts (C, F, strided, reversed, transposed, misaligned, byte-swapped),
broadcast gradients, dtypes, mixed-dtype lists, hyperparameters and thread
counts; results are bit-identical for n_threads 1, 2, 3 and 4; no byte
outside the updated elements changes; the gradient is never written.

The example budget comes from the hypothesis profile (tests/conftest.py):
"ci" (fixed, derandomized) when the CI environment variable is set.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import fastopt
from hardening_ref import REFS, STATES, check_agc, check_close, check_unitwise_norm, place

OPS = ("momentum", "adagrad", "adam")
THREADS = (1, 2, 3, 4)
BUDGET = settings.default.max_examples
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]


# ------------------------------------------------------------ strategies

def finite_values(dtype, nonneg=False):
    width = 32 if np.dtype(dtype) == np.float32 else 64
    lo = 0.0 if nonneg else -1e4
    return st.floats(lo, 1e4, width=width, allow_subnormal=True)


def special_values(nonneg=False):
    vals = [0.0, 1e-40, 1.0, math.inf, math.nan] + ([] if nonneg else [-0.0, -math.inf])
    return st.sampled_from(vals)


@st.composite
def layouts(draw, nd, itemsize):
    kind = draw(st.sampled_from(["C", "C", "F", "view"]))
    kw = {"order": "F" if kind == "F" else "C"}
    if kind == "view" and nd:
        kw["steps"] = draw(st.tuples(*[st.sampled_from([1, 2, -1, -2, 3])] * nd))
        kw["perm"] = draw(st.permutations(range(nd)))
        kw["order"] = draw(st.sampled_from("CF"))
    kw["byte_offset"] = draw(st.sampled_from([0, 0, 0, itemsize, 1, 3]))
    kw["swap"] = draw(st.booleans()) and draw(st.booleans())
    return kw


def broadcast_source_shape(draw, shape):
    """A shape that numpy broadcasts to exactly `shape`."""
    drop = draw(st.integers(0, len(shape)))
    tail = list(shape[drop:])
    for i in range(len(tail)):
        if draw(st.integers(0, 3)) == 0:
            tail[i] = 1
    return tuple(tail)


@st.composite
def tensor_specs(draw, op):
    """Everything needed to build one tensor's arrays, twice, identically."""
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=5)
                 .filter(lambda s: math.prod(s) <= 400))
    nd = len(shape)
    specials = draw(st.integers(0, 4)) == 0
    x = draw(hnp.arrays(np.float64, shape, elements=finite_values(dtype)))
    g_mode = draw(st.sampled_from(["own", "own", "own", "broadcast_view", "alias_x",
                                   "alias_state"]))
    g_shape = shape if g_mode.startswith("alias") else broadcast_source_shape(draw, shape)
    g_elems = finite_values(dtype) | special_values() if specials else finite_values(dtype)
    g = draw(hnp.arrays(np.float64, g_shape, elements=g_elems))
    states = []
    for name in STATES[op]:
        nonneg = name == "h"
        states.append(draw(hnp.arrays(np.float64, shape,
                                      elements=finite_values(dtype, nonneg))))
    return {
        "dtype": dtype, "x": x, "g": g, "states": states, "g_mode": g_mode,
        "x_layout": draw(layouts(nd, dtype.itemsize)),
        "g_layout": draw(layouts(len(g_shape), dtype.itemsize)),
        "g_readonly": draw(st.booleans()),
        "s_layouts": [draw(layouts(nd, dtype.itemsize)) for _ in STATES[op]],
    }


def scalar_forms(draw, value, *, integer=False):
    """The value as the user may spell it: Python scalar, NumPy scalar, 0-d array."""
    form = draw(st.sampled_from(["py", "py", "np", "arr"]))
    if form == "py":
        return value
    if integer:
        return np.int64(value) if form == "np" else np.array(value, np.int64)
    return np.float64(value) if form == "np" else np.array(value)


@st.composite
def hyper(draw, op):
    t = draw(st.sampled_from([0, 1, 2, 7]) | st.integers(0, 2**63 - 1))
    unit = st.floats(0.0, 1.0)
    hp = {"lr": draw(st.sampled_from([0.0, 0.01, 1.0]) | st.floats(0.0, 10.0)), "t": t,
          "norm_coefficient": draw(st.sampled_from([0.0]) | st.floats(-1.0, 1.0))}
    if op == "momentum":
        hp.update(alpha=draw(st.floats(0.0, 1.5)), beta=draw(st.floats(0.0, 2.0)),
                  mode=draw(st.sampled_from(["standard", "nesterov"])))
    elif op == "adagrad":
        hp.update(decay_factor=draw(st.sampled_from([0.0]) | st.floats(0.0, 10.0)),
                  epsilon=draw(st.sampled_from([0.0, 1e-10, 1e-6, 1.0]) | unit))
    else:
        hp.update(alpha=draw(st.floats(0.0, 1.0, exclude_max=t > 0)),
                  beta=draw(unit),
                  epsilon=draw(st.sampled_from([0.0, 1e-8, 1e-6, 1.0]) | unit),
                  norm_coefficient_post=draw(st.sampled_from([0.0]) | st.floats(-0.5, 1.0)))
    return hp


@st.composite
def cases(draw, op):
    n = draw(st.integers(1, 4))
    single = n == 1 and draw(st.booleans())
    container = draw(st.sampled_from([list, tuple]))
    specs = [draw(tensor_specs(op)) for _ in range(n)]
    hp = draw(hyper(op))
    call_hp = dict(hp)
    call_hp["lr"] = scalar_forms(draw, hp["lr"])
    call_hp["t"] = scalar_forms(draw, hp["t"], integer=True)
    n_threads = draw(st.sampled_from([None, 1, 2, 3, 4, -1]))
    use_ctx = draw(st.booleans())
    return {"op": op, "single": single, "container": container, "specs": specs,
            "hp": hp, "call_hp": call_hp, "n_threads": n_threads, "use_ctx": use_ctx}


# ------------------------------------------------------------ running

def build(case):
    """Fresh arrays for a case: lists of Placed for x, g and each state."""
    out = {"x": [], "g": [], "states": [[] for _ in STATES[case["op"]]], "g_arr": []}
    for k, s in enumerate(case["specs"]):
        rng = np.random.default_rng(1000 + k)
        px = place(s["x"], s["dtype"], rng=rng, **s["x_layout"])
        pstates = [place(v, s["dtype"], rng=rng, **lay)
                   for v, lay in zip(s["states"], s["s_layouts"])]
        if s["g_mode"] == "alias_x":
            pg, garr = None, px.arr
        elif s["g_mode"] == "alias_state":
            pg, garr = None, pstates[0].arr
        elif s["g_mode"] == "broadcast_view":   # zero strides, read-only
            pg = place(s["g"], s["dtype"], rng=rng, **s["g_layout"])
            garr = np.broadcast_to(pg.arr, s["x"].shape)
        else:
            pg = place(s["g"], s["dtype"], rng=rng, readonly=s["g_readonly"], **s["g_layout"])
            garr = pg.arr
        out["x"].append(px)
        out["g"].append(pg)
        out["g_arr"].append(garr)
        for lst, p in zip(out["states"], pstates):
            lst.append(p)
    return out


def run(case, arrays, n_threads, use_ctx=False):
    op = case["op"]
    pack = (lambda ps: ps[0]) if case["single"] else (lambda ps: case["container"](ps))
    xs = pack([p.arr for p in arrays["x"]])
    gs = pack(arrays["g_arr"])
    ss = [pack([p.arr for p in lst]) for lst in arrays["states"]]
    fn = getattr(fastopt, op)
    if use_ctx:
        with fastopt.set_num_threads(n_threads):
            fn(xs, gs, *ss, **case["call_hp"])
    else:
        fn(xs, gs, *ss, **case["call_hp"], n_threads=n_threads)


def inputs_as_read(arrays):
    """The float64 values fastopt will read, taken before the call."""
    xs = [p.arr.astype(np.float64) for p in arrays["x"]]
    gs = [np.array(g, dtype=np.float64) for g in arrays["g_arr"]]
    ss = [[p.arr.astype(np.float64) for p in lst] for lst in arrays["states"]]
    return xs, gs, ss


def all_buffers(arrays):
    bufs = [p.buf for p in arrays["x"]] + [p.buf for p in arrays["g"] if p is not None]
    for lst in arrays["states"]:
        bufs += [p.buf for p in lst]
    return bufs


def check_case(case):
    op = case["op"]
    arrays = build(case)
    xs0, gs0, ss0 = inputs_as_read(arrays)
    run(case, arrays, case["n_threads"], case["use_ctx"])

    ref = REFS[op]
    for i, spec in enumerate(case["specs"]):
        states_in = [ss0[j][i] for j in range(len(ss0))]
        out = ref(spec["dtype"], xs0[i], gs0[i], *states_in, **case["hp"])
        check_close(arrays["x"][i].arr, out[0], f"{op} x[{i}]")
        for j, name in enumerate(STATES[op]):
            check_close(arrays["states"][j][i].arr, out[1 + j], f"{op} {name}[{i}]")
        # nothing outside the updated elements changed; the gradient was not written
        assert arrays["x"][i].untouched_outside(), f"x[{i}]: bytes outside the view changed"
        for j in range(len(STATES[op])):
            assert arrays["states"][j][i].untouched_outside(), "state bytes outside changed"
        if arrays["g"][i] is not None:
            assert arrays["g"][i].unchanged(), f"g[{i}] was modified"

    # bit-identical for every thread count
    expect = [b.copy() for b in all_buffers(arrays)]
    for nt in THREADS:
        again = build(case)
        run(case, again, nt)
        for a, b in zip(all_buffers(again), expect):
            assert np.array_equal(a, b), f"n_threads={nt} gave different bits"


@pytest.mark.parametrize("op", OPS)
@settings(suppress_health_check=SLOW_OK)
@given(data=st.data())
def test_matches_reference_any_layout(op, data):
    check_case(data.draw(cases(op)))


# ------------------------------------------------ above the serial threshold

@st.composite
def big_cases(draw, op):
    """Lists whose total crosses the serial threshold, so the OpenMP work
    list (chunks across tensors, 64-byte aligned boundaries) is exercised."""
    serial = fastopt._ext.tuning()["serial_bytes"]
    n = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    tensors = []
    for _ in range(n):
        dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
        size = draw(st.sampled_from([0, 1, 17, 1023, 4099]) |
                    st.integers(serial // 16, serial // 2))
        offset = draw(st.sampled_from([0, 1, 3]))   # element offset: not 64-byte aligned
        tensors.append((dtype, size, offset))
    total = sum(s * d.itemsize for d, s, _ in tensors)
    assume(total >= serial)
    hp = draw(hyper(op))
    return {"op": op, "tensors": tensors, "seed": seed, "hp": hp}


def build_big(case):
    rng = np.random.default_rng(case["seed"])
    out = []
    for dtype, size, offset in case["tensors"]:
        def arr(nonneg=False):
            a = rng.standard_normal(size + offset) * 10.0
            if nonneg:
                a = np.abs(a)
            base = a.astype(dtype)
            return base[offset:]
        x, g = arr(), arr()
        if size:
            g[rng.integers(0, size)] = np.nan
        states = [arr(nonneg=(name == "h")) for name in STATES[case["op"]]]
        out.append((x, g, states))
    return out


def run_big(case, tensors, n_threads):
    xs = [t[0] for t in tensors]
    gs = [t[1] for t in tensors]
    ss = [[t[2][j] for t in tensors] for j in range(len(STATES[case["op"]]))]
    getattr(fastopt, case["op"])(xs, gs, *ss, **case["hp"], n_threads=n_threads)


@pytest.mark.parametrize("op", OPS)
@settings(max_examples=max(4, BUDGET // 6), suppress_health_check=SLOW_OK)
@given(data=st.data())
def test_threaded_work_list_matches_reference(op, data):
    case = data.draw(big_cases(op))
    before = build_big(case)
    results = {}
    for nt in THREADS:
        tensors = build_big(case)
        run_big(case, tensors, nt)
        results[nt] = tensors
    ref = REFS[op]
    for i, (x0, g0, s0) in enumerate(before):
        out = ref(x0.dtype, x0, g0, *s0, **case["hp"])
        x1, _, s1 = results[1][i]
        check_close(x1, out[0], f"{op} x[{i}]")
        for j, s in enumerate(s1):
            check_close(s, out[1 + j], f"{op} state {j} [{i}]")
        for nt in THREADS[1:]:
            xn, gn, sn = results[nt][i]
            assert xn.tobytes() == x1.tobytes(), f"x[{i}] differs with n_threads={nt}"
            assert all(a.tobytes() == b.tobytes() for a, b in zip(sn, s1))
            assert gn.tobytes() == g0.tobytes(), "the gradient was written"


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
        fastopt.momentum(agc_args(case, xs), pack(case, g_in), agc_args(case, vs),
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
        fastopt.momentum(agc_args(case, xs2), pack(case, gcopy), pack(case, vs2), **hp,
                         n_threads=nt)
        for (xb, vb), p, v in zip(results[-1], xs2, vs2):
            assert xb == p.arr.tobytes(), "fused x != agc + momentum"
            assert vb == v.tobytes(), "fused v != agc + momentum"
    assert all(r == results[0] for r in results), "fused AGC-momentum depends on n_threads"
