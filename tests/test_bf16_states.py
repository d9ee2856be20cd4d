"""bfloat16 states of float32 parameters, stored apart.

The contract (docs/semantics.md, "bfloat16 states"): a step widens each
state exactly, runs the float32 rule unchanged, and rounds each new state
to bfloat16, to nearest or stochastically by the counter-based generator
that ``fastopt._reference.half`` writes out; so a step equals the float32
step on the widened states followed by that rounding, bit for bit, for every
rule, gradient type, option, layout and thread count. "auto" rounds
stochastically the slots nearest rounding stalls.
"""
import math

import numpy as np
import pytest
from test_half import CALLS, OPTIONS, _state_kw, bits

import fastopt
from fastopt._reference import half as H

BF16 = H.BF16
SHAPES = [(1,), (7,), (33, 5), (70001,)]

# which slots "auto" rounds stochastically with each call's hyperparameters:
# the sums of squares, and the averages whose decay exceeds 1 - 2**-8
# (beta2 0.999, AdEMAMix's beta3 0.9999); not the first moments (0.9),
# momentum buffers, RMSprop's 0.99 or Adadelta's 0.9
STOCHASTIC = {
    "adamw": [False, True], "adam-amsgrad": [False, True, True],
    "sgd-nesterov": [False], "adagrad": [True],
    "rmsprop": [False, False], "adamax": [False, True], "adadelta": [False, False],
    "radam": [False, True], "lion": [False], "nadam": [False, True],
    "ademamix": [False, True, True],
}
APART = [c for c in CALLS if c[0] in STOCHASTIC]


def _count(name, kw):
    """The group count t the generator reads: torch SGD's is its steps
    before this one; a rule without a step argument has 1."""
    step = kw.get("step", 1)
    return step - 1 if name.startswith("sgd") else step


def _slots(states, named):
    """The state lists in slot order (s1, s2, s3)."""
    return list(states) + list(named.values())


def _step(fn, xs, gs, pos, named, kw, **more):
    states = [[a.copy() for a in st] for st in pos]
    named = {k: [a.copy() for a in v] for k, v in named.items()}
    args = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    if "max_exp_avg_sqs" in args:           # amsgrad: the running maximum is named
        del args["max_exp_avg_sqs"]
        named["max_exp_avg_sqs"] = [a.copy() for a in states[1]]
    info = fn(xs, gs, *states, **named, **args, **more)
    return info, _slots(states, named)


def _expected(name, fn, x0, g, pos, named, kw, seed, rounding="auto", **more):
    """The float32 step on the widened states, then each slot rounded as
    the contract says."""
    xs = [a.copy() for a in x0]
    wide = [[a.astype(np.float32) for a in st] for st in pos]
    wnamed = {k: [a.astype(np.float32) for a in v] for k, v in named.items()}
    info, slots = _step(fn, xs, g, wide, wnamed, kw, **more)
    if not info.applied:
        return info, xs, [[a.copy() for a in st] for st in _slots(pos, named)]
    sto = STOCHASTIC[name]
    out = []
    for k, st in enumerate(slots):
        s = sto[k] if rounding == "auto" else rounding == "stochastic"
        out.append([H.store(a, s, H.key(seed, i), _count(name, kw), k)
                    for i, a in enumerate(st)])
    return info, xs, out


@pytest.mark.parametrize("name,fn,states,kw", APART, ids=[c[0] for c in APART])
def test_every_rule_with_bf16_states_is_the_float32_rule_then_the_rounding(
        name, fn, states, kw):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    for gdt in (np.float32, BF16, np.float16):
        for opts in OPTIONS[:3]:
            x0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
            g = [(rng.standard_normal(s) * 3).astype(gdt) for s in SHAPES]
            pos, named = _state_kw(states, SHAPES, BF16, rng)
            seed = int(rng.integers(2**64, dtype=np.uint64))
            ie, xe, se = _expected(name, fn, x0, g, pos, named, kw, seed, **opts)
            for nth in (1, 2, 3, 8):
                xs = [a.copy() for a in x0]
                info, slots = _step(fn, xs, g, pos, named, kw, seed=seed, n_threads=nth,
                                    **opts)
                assert info[0] == ie[0] and info[2] == ie[2]
                assert info.norm == ie.norm or (math.isnan(info.norm) and math.isnan(ie.norm))
                for a, b in zip(xs, xe):
                    np.testing.assert_array_equal(bits(a), bits(b))
                for st, ref in zip(slots, se):
                    assert all(a.dtype == BF16 for a in st)
                    for a, b in zip(st, ref):
                        np.testing.assert_array_equal(bits(a), bits(b))


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_state_rounding_forces_one_way_for_every_slot(rounding):
    rng = np.random.default_rng(5)
    name, fn, states, kw = next(c for c in CALLS if c[0] == "adam-amsgrad")
    x0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    g = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    pos, named = _state_kw(states, SHAPES, BF16, rng)
    _, xe, se = _expected(name, fn, x0, g, pos, named, kw, 9, rounding)
    xs = [a.copy() for a in x0]
    _, slots = _step(fn, xs, g, pos, named, kw, seed=9, state_rounding=rounding)
    for st, ref in zip(slots, se):
        for a, b in zip(st, ref):
            np.testing.assert_array_equal(bits(a), bits(b))


def test_other_layouts_take_the_checked_route_with_the_same_bits():
    rng = np.random.default_rng(8)
    shape = (40, 30)
    x0 = rng.standard_normal(shape).astype(np.float32)
    g = rng.standard_normal(shape).astype(np.float32)
    m0 = rng.standard_normal(shape).astype(BF16)
    v0 = np.abs(rng.standard_normal(shape)).astype(BF16)
    x, m, v = x0.copy(), m0.copy(), v0.copy()
    fastopt.adamw(x, g, m, v, step=4, seed=3)
    # the same values in F order, and the states as strided views
    xf = np.asfortranarray(x0)
    mb = np.zeros((40, 60), BF16)
    mv = mb[:, ::2]
    mv[...] = m0
    vf = np.asfortranarray(v0)
    fastopt.adamw(xf, np.asfortranarray(g), mv, vf, step=4, seed=3)
    np.testing.assert_array_equal(xf, x)
    np.testing.assert_array_equal(bits(np.ascontiguousarray(mv)), bits(m))
    # element indices are C-order indices whatever the layout
    np.testing.assert_array_equal(bits(np.ascontiguousarray(vf)), bits(v))


def test_stochastic_rounding_is_unbiased():
    # torch SGD's first step stores the gradient itself as the buffer: each
    # element is one rounding of the same float32 value
    v = np.float32(1.0 + 2.0**-9 + 2.0**-12)    # between two bfloat16 values
    n = 200_000
    means = []
    for seed in range(4):
        x = np.zeros(n, np.float32)
        buf = np.zeros(n, BF16)
        fastopt.sgd(x, np.full(n, v), buf, lr=0.0, momentum=0.9, step=1,
                    state_rounding="stochastic", seed=seed)
        wide = buf.astype(np.float64)
        assert set(np.unique(wide)) == {1.0, 1.0 + 2.0**-7}
        means.append(wide.mean())
    assert abs(np.mean(means) / float(v) - 1) < 1e-4
    assert len(set(means)) == 4                 # each seed its own bits
    # to nearest, every element is the same
    buf = np.zeros(n, BF16)
    fastopt.sgd(np.zeros(n, np.float32), np.full(n, v), buf, lr=0.0, momentum=0.9,
                step=1, state_rounding="nearest")
    assert (buf.astype(np.float64) == 1.0).all()


def test_nearest_rounding_stalls_the_second_moment_and_stochastic_does_not():
    """With gradients gone, v should decay as beta2**k: to nearest bfloat16,
    0.999 * v rounds back to v (1 - 0.999 is below half an ulp), so v
    never moves; rounded stochastically it decays as in float32."""
    n, steps, b2 = 20_000, 700, 0.999
    out = {}
    for rounding in ("nearest", "auto"):
        x = np.zeros(n, np.float32)
        m = np.zeros(n, BF16)
        v = np.ones(n, BF16)
        for t in range(1, steps + 1):
            fastopt.adam(x, np.zeros(n, np.float32), m, v, lr=0.0, betas=(0.9, b2),
                         step=t, state_rounding=rounding)
        out[rounding] = v.astype(np.float64)
    assert (out["nearest"] == 1.0).all()
    assert abs(out["auto"].mean() / b2**steps - 1) < 0.01


def test_bad_states_raise_and_write_nothing():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(64).astype(np.float32)
    g = rng.standard_normal(64).astype(np.float32)
    m = rng.standard_normal(64).astype(BF16)
    v = np.abs(rng.standard_normal(64)).astype(BF16)
    before = [a.copy() for a in (x, m, v)]
    cases = [
        (TypeError, r"fastopt.adamw: exp_avg_sqs\[0\] has dtype float32 but exp_avgs\[0\] "
                    r"has bfloat16; the states of a parameter must have one dtype",
         lambda: fastopt.adamw(x, g, m, v.astype(np.float32), step=1)),
        (TypeError, r"exp_avgs\[0\] has dtype float16; a state of params\[0\] \(float32\) "
                    r"must be float32 or bfloat16 \(float16 states are refused",
         lambda: fastopt.adamw(x, g, m.astype(np.float16), v, step=1)),
        (TypeError, r"exp_avgs\[0\] has dtype bfloat16 but params\[0\] has float64",
         lambda: fastopt.adamw(x.astype(np.float64), g.astype(np.float64), m, v, step=1)),
        (TypeError, r"fastopt.lamb: exp_avgs\[0\] has dtype bfloat16 but its parameter has "
                    r"float32; LAMB's and LARS's states keep their parameter's dtype",
         lambda: fastopt.lamb(x, g, m, v, step=1)),
        (ValueError, r"state_rounding must be 'auto', 'nearest' or 'stochastic', got 'up'",
         lambda: fastopt.adamw(x, g, m, v, step=1, state_rounding="up")),
        (ValueError, r"fastopt.adamw: seed must be in \[0, 2\*\*64\), got -1",
         lambda: fastopt.adamw(x, g, m, v, step=1, seed=-1)),
        (TypeError, r"fastopt.adamw: seed must be an integer, got float",
         lambda: fastopt.adamw(x, g, m, v, step=1, seed=1.0)),
    ]
    for exc, match, call in cases:
        with pytest.raises(exc, match=match):
            call()
        for a, b in zip((x, m, v), before):
            np.testing.assert_array_equal(bits(a), bits(b))
