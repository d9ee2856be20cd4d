"""Hypothesis strategies and runners shared by the property tests: finite and
special values, memory layouts, broadcast gradients, hyperparameters in every
accepted scalar form, whole cases, and running a case with a thread count
while watching every byte around its arrays.
"""
from __future__ import annotations

import math

import numpy as np
import public_names
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from layouts import place

import fastopt
from fastopt._reference.tracked import STATES

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
    fn = public_names.op(op)
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
