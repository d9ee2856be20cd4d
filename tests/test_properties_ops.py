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

import numpy as np
import public_names
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from property_strategies import (
    BUDGET,
    OPS,
    SLOW_OK,
    THREADS,
    all_buffers,
    build,
    cases,
    hyper,
    inputs_as_read,
    run,
)

import fastopt
from fastopt._reference.tracked import REFS, STATES, check_close


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
        def arr(nonneg=False, size=size, offset=offset, dtype=dtype):
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
    public_names.op(case["op"])(xs, gs, *ss, **case["hp"], n_threads=n_threads)


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
