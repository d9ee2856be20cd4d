"""Property tests (hypothesis) for fastopt.optim: over random parameters
(shapes 0-d to 3-D, size 0, both dtypes, C/F/strided/reversed/misaligned/
byte-swapped layouts), parameter groups with their own hyperparameters,
contiguous or separate state, thread counts, and random sequences of steps
(gradients missing for some parameters, broadcast gradients with
broadcast_grads=True, grad_scale,
skip_if_nonfinite with NaN/Inf gradients):

- every step equals, bit for bit, the functional kernel calls an independent
  emulation makes (the T convention of each operator, the scaled gradients,
  skipped steps that change nothing and do not advance the count);
- no byte outside the parameters' elements changes and gradients are only read;
- a state_dict taken mid-run and loaded into a fresh optimizer, or a checkpoint
  file saved and loaded, resumes bit-identically.
"""
from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import public_names
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from layouts import place

from fastopt._reference import optim as ref_optim

OPTIM = pytest.importorskip("fastopt.optim")

OPTS = ref_optim.RULES
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]


@st.composite
def param_specs(draw):
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    nd = len(shape)
    values = draw(hnp.arrays(np.float64, shape, elements=st.floats(-100, 100, width=32)))
    lay = {"order": draw(st.sampled_from("CF"))}
    if nd and draw(st.booleans()):
        lay["steps"] = draw(st.tuples(*[st.sampled_from([1, 2, -1])] * nd))
        lay["perm"] = draw(st.permutations(range(nd)))
    lay["byte_offset"] = draw(st.sampled_from([0, 0, dtype.itemsize, 1]))
    lay["swap"] = draw(st.integers(0, 5)) == 0
    return dtype, values, lay


def hyper(draw, name):
    if name == "Momentum":
        return {"alpha": draw(st.floats(0, 1)), "beta": draw(st.floats(0, 1)),
                "norm_coefficient": draw(st.floats(0, 0.1)),
                "nesterov": draw(st.booleans())}
    if name == "Adagrad":
        return {"decay_factor": draw(st.floats(0, 1)),
                "epsilon": draw(st.sampled_from([1e-6, 1e-3, 0.1])),
                "norm_coefficient": draw(st.floats(0, 0.1)),
                "initial_accumulator_value": draw(st.sampled_from([0.0, 0.1, 1.0]))}
    return {"alpha": draw(st.floats(0, 0.99)), "beta": draw(st.floats(0, 1)),
            "epsilon": draw(st.sampled_from([1e-6, 1e-3, 0.1])),
            "norm_coefficient": draw(st.floats(0, 0.1)),
            "norm_coefficient_post": draw(st.floats(0, 0.01))}


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(OPTS)))
    specs = draw(st.lists(param_specs(), min_size=1, max_size=4))
    n = len(specs)
    cut = draw(st.integers(0, n)) if draw(st.booleans()) else None
    defaults = dict(hyper(draw, name), lr=draw(st.sampled_from([0.01, 0.1, 1.0])))
    group_over = [dict(hyper(draw, name), lr=draw(st.sampled_from([0.05, 0.2])))
                  if draw(st.booleans()) else {} for _ in range(2)]
    steps = []
    broadcast = draw(st.booleans())     # the optimizer built with broadcast_grads
    kinds = ["full", "full", "full", "none", "nan"] + (["bcast"] if broadcast else [])
    for _ in range(draw(st.integers(1, 4))):
        grads = []
        for dtype, values, _ in specs:
            kind = draw(st.sampled_from(kinds))
            shape = values.shape
            if kind == "bcast":
                shape = shape[draw(st.integers(0, len(shape))):]
            gv = draw(hnp.arrays(np.float64, shape, elements=st.floats(-10, 10, width=32)))
            if kind == "nan" and gv.size:
                gv.flat[0] = draw(st.sampled_from([math.nan, math.inf]))
            grads.append(None if kind == "none" else (dtype, gv))
        steps.append({"grads": grads,
                      "scale": draw(st.sampled_from([None, None, 2.0, 0.25])),
                      "skip": draw(st.booleans())})
    return {"name": name, "specs": specs, "cut": cut, "defaults": defaults,
            "group_over": group_over, "steps": steps, "broadcast": broadcast,
            "contiguous": draw(st.booleans()),
            "n_threads": draw(st.sampled_from([None, 1, 2, 3])),
            "resume_at": draw(st.integers(0, 3)), "via_file": draw(st.booleans())}


def make_params(case):
    return [place(values, dtype, rng=np.random.default_rng(7 + i), **lay)
            for i, (dtype, values, lay) in enumerate(case["specs"])]


def make_opt(case, placed):
    arrays = [p.arr for p in placed]
    if case["cut"] is None:
        params = arrays
    else:
        params = [dict(case["group_over"][0], params=arrays[:case["cut"]]),
                  dict(case["group_over"][1], params=arrays[case["cut"]:])]
    return getattr(OPTIM, "Onnx" + case["name"])(params, **case["defaults"],
                                    contiguous_state=case["contiguous"],
                                    n_threads=case["n_threads"],
                                    broadcast_grads=case["broadcast"])


def group_of(case, i):
    if case["cut"] is None:
        return {}
    return case["group_over"][0 if i < case["cut"] else 1]


def emulation(case):
    """The optimizer's contract replayed with the functional API."""
    op = ref_optim.RULES[case["name"]][0]
    params = [np.array(v, dtype=d) for d, v, _ in case["specs"]]
    groups = [group_of(case, i) for i in range(len(params))]
    return ref_optim.Optimizer(case["name"], params, case["defaults"], groups,
                               update=public_names.op(op))


def grads_for(step):
    return [None if g is None else np.array(g[1], dtype=g[0]) for g in step["grads"]]


def roundtrip(case, opt, placed):
    """A fresh optimizer over copies of the parameters, loaded from opt."""
    twin_placed = [place(p.arr.astype(np.float64), dtype,
                         rng=np.random.default_rng(7 + i), **lay)
                   for i, (p, (dtype, _, lay)) in enumerate(zip(placed, case["specs"]))]
    twin = make_opt(case, twin_placed)
    if case["via_file"]:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ckpt.npz")
            opt.save(path)
            twin.load(path)
    else:
        twin.load_state_dict(opt.state_dict())
    return twin, twin_placed


def _bits(a):
    """a's bytes in native order with every NaN made the same NaN. IEEE 754
    leaves to the implementation which NaN operand's payload and sign an
    operation returns, and the compiler may swap the operands of a commutative
    +: the optimizer's fused step and the functional kernel are different
    compiled loops, so a NaN from two NaN operands may differ in its sign bit
    (seen: Adagrad, h = NaN + g*g with a NaN g). Every other value is
    compared bit for bit."""
    a = np.array(a, dtype=a.dtype.newbyteorder("="))
    a[np.isnan(a)] = np.nan
    return a.tobytes()


@settings(suppress_health_check=SLOW_OK)
@given(case=cases())
def test_steps_equal_functional_calls_and_resume_bit_exactly(case):
    placed = make_params(case)
    opt = make_opt(case, placed)
    emu = emulation(case)
    twin = None
    for k, step in enumerate(case["steps"]):
        if k == case["resume_at"]:
            twin, twin_placed = roundtrip(case, opt, placed)
        grads = grads_for(step)
        gbytes = [None if g is None else g.tobytes() for g in grads]
        applied = opt.step(grads, grad_scale=step["scale"], skip_if_nonfinite=step["skip"])
        assert applied == emu.step(grads, step["scale"], step["skip"])
        assert opt.steps == emu.steps
        assert [None if g is None else g.tobytes() for g in grads] == gbytes
        if twin is not None:
            assert twin.step(grads_for(step), grad_scale=step["scale"],
                             skip_if_nonfinite=step["skip"]) == applied
        for i, p in enumerate(placed):
            assert _bits(p.arr) == _bits(emu.xs[i]), f"params[{i}] after step {k}"
            assert p.untouched_outside(), f"bytes around params[{i}] changed"
        for j, name in enumerate(OPTS[case["name"]][1]):
            for i, a in enumerate(opt.state[name]):
                assert _bits(a) == _bits(emu.states[i][j]), f"state {name}[{i}]"
    if twin is not None:
        assert twin.steps == opt.steps
        for p, q in zip(placed, twin_placed):
            assert p.arr.tobytes() == q.arr.tobytes()
        for name in OPTS[case["name"]][1]:
            for a, b in zip(opt.state[name], twin.state[name]):
                assert a.tobytes() == b.tobytes()
