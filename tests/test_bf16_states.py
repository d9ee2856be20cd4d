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
# momentum buffers, RMSprop's 0.99 or Adadelta's 0.9. LAMB's moments are read
# by its trust pass too, widened as the update widens them
STOCHASTIC = {
    "adamw": [False, True], "adam-amsgrad": [False, True, True],
    "sgd-nesterov": [False], "adagrad": [True],
    "rmsprop": [False, False], "adamax": [False, True], "adadelta": [False, False],
    "radam": [False, True], "lion": [False], "nadam": [False, True],
    "ademamix": [False, True, True], "lamb": [False, True], "lars": [False],
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


def test_a_bfloat16_copy_beside_bfloat16_states_is_the_new_parameters_rounded():
    """The copy of the new parameters (param_copies) is written tile by tile
    beside the update; the states' stochastic bits follow their elements'
    indices all the same."""
    rng = np.random.default_rng(12)
    name, fn, states, kw = next(c for c in CALLS if c[0] == "adam-amsgrad")
    x0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    g = [rng.standard_normal(s).astype(BF16) for s in SHAPES]
    pos, named = _state_kw(states, SHAPES, BF16, rng)
    _, xe, se = _expected(name, fn, x0, g, pos, named, kw, 3)
    for nth in (1, 3):
        xs = [a.copy() for a in x0]
        w = [np.zeros(s, BF16) for s in SHAPES]
        _, slots = _step(fn, xs, g, pos, named, kw, seed=3, n_threads=nth, param_copies=w)
        for a, b, c in zip(xs, xe, w):
            np.testing.assert_array_equal(bits(a), bits(b))
            np.testing.assert_array_equal(bits(c), bits(b.astype(BF16)))
        for st, ref in zip(slots, se):
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


# ---- fastopt.optim: state_dtype="bfloat16" ------------------------------------

OPT_SHAPES = [(30, 20), (7,), (100_000,)]     # the last big enough for the pool
OPTIMIZERS = [
    ("AdamW", dict(lr=1e-2, weight_decay=0.1), fastopt.adamw, ("exp_avg", "exp_avg_sq"),
     dict(lr=1e-2, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9), fastopt.sgd, ("momentum_buffer",),
     dict(lr=0.1, momentum=0.9)),
    ("Adagrad", dict(lr=0.1), fastopt.adagrad, ("sum",), dict(lr=0.1)),
    ("AdEMAMix", dict(lr=1e-2), fastopt.ademamix,
     ("exp_avg_fast", "exp_avg_slow", "exp_avg_sq"), dict(lr=1e-2)),
    ("LAMB", dict(lr=1e-2, weight_decay=0.1), fastopt.lamb, ("exp_avg", "exp_avg_sq"),
     dict(lr=1e-2, weight_decay=0.1)),
]


def _functional(fn, names, kw, x0, grads, seed, present):
    """The optimizer's steps replayed with the public function: tensor k
    keyed as the optimizer keys params[k] (seed + k * KEY_STEP), whichever
    tensors a step leaves out."""
    xs = [a.copy() for a in x0]
    states = {n: [np.zeros(a.shape, BF16) for a in x0] for n in names}
    for t, (gs, pr) in enumerate(zip(grads, present), 1):
        for k in range(len(xs)):
            if not pr[k]:
                continue
            args = [states[n][k] for n in names]
            fn(xs[k], gs[k], *args, **kw, step=t, seed=H.key(seed, k))
    return xs, states


@pytest.mark.parametrize("cls,okw,fn,names,fkw", OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_an_optimizer_with_bf16_states_steps_as_the_public_function(cls, okw, fn, names, fkw):
    from fastopt import optim
    rng = np.random.default_rng(4)
    x0 = [rng.standard_normal(s).astype(np.float32) for s in OPT_SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in OPT_SHAPES]
             for _ in range(6)]
    # a step without the first gradient: the others keep their keys
    present = [[True] * 3, [True] * 3, [False, True, True], [True] * 3, [True] * 3,
               [True, False, True]]
    want_x, want_s = _functional(fn, names, fkw, x0, grads, 77, present)
    for nth in (1, 2, 3):
        xs = [a.copy() for a in x0]
        opt = getattr(optim, cls)(xs, **okw, state_dtype="bfloat16", seed=77, n_threads=nth)
        for gs, pr in zip(grads, present):
            opt.step([g if p else None for g, p in zip(gs, pr)])
        for a, b in zip(xs, want_x):
            np.testing.assert_array_equal(a, b)
        for n in names:
            assert all(a.dtype == BF16 for a in opt.state[n])
            for a, b in zip(opt.state[n], want_s[n]):
                np.testing.assert_array_equal(bits(a), bits(b))


def test_bf16_states_round_trip_through_a_checkpoint_as_raw_words(tmp_path):
    from fastopt import optim
    rng = np.random.default_rng(6)
    x0 = [rng.standard_normal(s).astype(np.float32) for s in OPT_SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in OPT_SHAPES]
             for _ in range(4)]
    a = optim.AdamW([x.copy() for x in x0], lr=1e-2, state_dtype="bfloat16", seed=1)
    for gs in grads[:2]:
        a.step(gs)
    path = tmp_path / "c.npz"
    a.save(path)
    # readable without ml_dtypes: uint16 words, and the header's dtype tag
    with np.load(path) as z:
        entries = {k: z[k] for k in z.files}
    import json
    assert json.loads(str(entries["meta"]))["state_dtype"] == "bfloat16"
    assert all(v.dtype == np.uint16 for k, v in entries.items() if k.startswith("state."))
    b = optim.AdamW([x.copy() for x in a.params], lr=1e-2, state_dtype="bfloat16", seed=1)
    b.load(path)
    for gs in grads[2:]:
        a.step(gs)
        b.step(gs)
    for n in ("exp_avg", "exp_avg_sq"):
        for u, w in zip(a.state[n], b.state[n]):
            assert w.dtype == BF16
            np.testing.assert_array_equal(bits(u), bits(w))
    for u, w in zip(a.params, b.params):
        np.testing.assert_array_equal(u, w)
    # a file of float32 states is refused by a bfloat16 optimizer and the
    # reverse, with nothing changed
    f32 = optim.AdamW([x.copy() for x in x0], lr=1e-2)
    before = [s.copy() for s in b.state["exp_avg"]]
    f32.save(tmp_path / "f.npz")
    from fastopt.optim import CheckpointError
    with pytest.raises(CheckpointError, match="the checkpoint holds states of their "
                       "parameters' dtype; this optimizer keeps bfloat16 states"):
        b.load(tmp_path / "f.npz")
    with pytest.raises(CheckpointError, match="the checkpoint holds bfloat16 states; this "
                       "optimizer keeps states of their parameters' dtype"):
        f32.load(path)
    for u, w in zip(before, b.state["exp_avg"]):
        np.testing.assert_array_equal(bits(u), bits(w))


def test_bf16_states_with_master_weights():
    from fastopt import optim
    rng = np.random.default_rng(2)
    x32 = [rng.standard_normal(s).astype(np.float32) for s in OPT_SHAPES]
    model = [x.astype(BF16) for x in x32]
    opt = optim.AdamW(model, lr=1e-2, master_weights=True, state_dtype="bfloat16")
    masters = [x.copy() for x in opt.params]
    ref = optim.AdamW(masters, lr=1e-2, state_dtype="bfloat16")
    for _ in range(3):
        gs = [rng.standard_normal(s).astype(BF16) for s in OPT_SHAPES]
        opt.step(gs)
        ref.step(gs)
    for a, b, m in zip(opt.params, ref.params, model):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(bits(m), bits(b.astype(BF16)))


def test_bad_state_dtype_options_raise():
    from fastopt import optim
    x = [np.zeros(8, np.float32)]
    cases = [
        (lambda: optim.AdamW(x, state_dtype="float16"),
         r"fastopt.optim.AdamW: state_dtype must be None, 'float32', 'bfloat16' or "
         r"'int8-blockwise', got 'float16'"),
        (lambda: optim.AdamW([np.zeros(8)], state_dtype="bfloat16"),
         r"state_dtype='bfloat16' needs float32 parameters \(or master_weights=True\); "
         r"param_groups\[0\]\['params'\]\[0\] is float64"),
        (lambda: optim.OnnxMomentum(x, lr=0.1, clipping=0.01, state_dtype="bfloat16"),
         r"state_dtype='bfloat16' does not combine with AGC clipping"),
        (lambda: optim.AdamW(x, state_dtype="bfloat16", state_rounding="down"),
         r"state_rounding must be 'auto', 'nearest' or 'stochastic', got 'down'"),
        (lambda: optim.AdamW(x, state_dtype="bfloat16", seed=2**64),
         r"seed must be in \[0, 2\*\*64\)"),
    ]
    for make, match in cases:
        with pytest.raises(ValueError, match=match):
            make()


@pytest.mark.parametrize("gdt", [np.float32, BF16], ids=["f32 grads", "bf16 grads"])
def test_the_onnx_functions_refuse_bf16_states_on_every_route(gdt):
    x = np.ones(300, np.float32)
    g = np.full(300, 0.5, np.float32).astype(gdt)
    v = np.zeros(300, BF16)
    for call, lab in ((lambda: fastopt.onnx_momentum(x, g, v, lr=0.1, t=1), "v"),
                      (lambda: fastopt.onnx_adagrad(x, g, v, lr=0.1, t=1), "h"),
                      (lambda: fastopt.onnx_adam(x, g, np.zeros(300, np.float32), v, lr=0.1,
                                                 t=1, max_grad_norm=1.0), "h")):
        with pytest.raises(TypeError, match=f"{lab} has dtype bfloat16 but x has float32; "
                                            "the state must match its parameter"):
            call()
        assert (x == 1).all() and (bits(v) == 0).all()


# "auto" with decays past 1 - 2**-8: (function, states, keyword arguments,
# which slots round stochastically)
DECAYS = [
    (fastopt.sgd, ["momentum_buffers"], dict(lr=0.1, momentum=0.999, step=3), [True]),
    (fastopt.rmsprop, ["square_avgs", "momentum_buffers", "grad_avgs"],
     dict(lr=1e-2, alpha=0.999, momentum=0.5, centered=True), [True, False, True]),
    (fastopt.rmsprop, ["square_avgs", "grad_avgs"],
     dict(lr=1e-2, alpha=0.999, centered=True), [True, True]),
    (fastopt.rmsprop, ["square_avgs", "momentum_buffers"],
     dict(lr=1e-2, alpha=0.9, momentum=0.999), [False, True]),
    (fastopt.adadelta, ["square_avgs", "acc_deltas"], dict(rho=0.999), [True, True]),
    (fastopt.lion, ["exp_avgs"], dict(lr=1e-3, betas=(0.9, 0.999)), [True]),
]


@pytest.mark.parametrize("fn,names,kw,sto", DECAYS, ids=[
    "sgd-0.999", "rmsprop-centered-momentum", "rmsprop-centered", "rmsprop-momentum-0.999",
    "adadelta-0.999", "lion-0.999"])
def test_auto_rounds_stochastically_the_slots_whose_decay_stalls(fn, names, kw, sto):
    rng = np.random.default_rng(12)
    x0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    g = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    named = {n: [np.abs(rng.standard_normal(s)).astype(BF16) for s in SHAPES] for n in names}
    t = kw.get("step", 1) - (fn is fastopt.sgd)
    xe = [a.copy() for a in x0]
    wide = {n: [a.astype(np.float32) for a in v] for n, v in named.items()}
    fn(xe, g, **wide, **kw)
    xs = [a.copy() for a in x0]
    got = {n: [a.copy() for a in v] for n, v in named.items()}
    fn(xs, g, **got, **kw, seed=5, n_threads=2)
    for a, b in zip(xs, xe):
        np.testing.assert_array_equal(a, b)
    for k, n in enumerate(names):
        for i, (a, w) in enumerate(zip(got[n], wide[n])):
            want = H.store(w, sto[k], H.key(5, i), t, k)
            np.testing.assert_array_equal(bits(a), bits(want))


@pytest.mark.parametrize("tag", ["float16", 5, "", None, "bfloat16 "])
def test_a_checkpoint_with_a_hostile_state_dtype_tag_is_refused(tmp_path, tag):
    import json

    from fastopt import optim
    from fastopt.optim import CheckpointError
    x = [np.ones(300, np.float32)]
    opt = optim.AdamW(x, lr=1e-2, state_dtype="bfloat16")
    opt.step([np.full(300, 0.5, np.float32)])
    opt.save(tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as z:
        entries = {k: z[k] for k in z.files}
    meta = json.loads(str(entries["meta"]))
    if tag is None:
        del meta["state_dtype"]
    else:
        meta["state_dtype"] = tag
    entries["meta"] = np.array(json.dumps(meta))
    np.savez(tmp_path / "bad.npz", **entries)
    before = [a.copy() for a in opt.state["exp_avg"] + opt.state["exp_avg_sq"]] + [x[0].copy()]
    with pytest.raises(CheckpointError, match="the checkpoint holds .*; this optimizer keeps "
                                              "bfloat16 states"):
        opt.load(tmp_path / "bad.npz")
    for a, b in zip(opt.state["exp_avg"] + opt.state["exp_avg_sq"] + [x[0]], before):
        np.testing.assert_array_equal(bits(a), bits(b))


@pytest.mark.parametrize("sdt", ["bfloat16", BF16])
def test_sharded_optimizers_refuse_bf16_states(sdt):
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    from fastopt import optim
    from fastopt.distributed import ShardedOptimizer
    with pytest.raises(ValueError, match="state_dtype='bfloat16' is not available sharded"):
        ShardedOptimizer(optim.AdamW, [np.ones(10, np.float32)], lr=0.1, state_dtype=sdt,
                         comm=MPI.COMM_SELF)
    ShardedOptimizer(optim.AdamW, [np.ones(10, np.float32)], lr=0.1, state_dtype=np.float32,
                     comm=MPI.COMM_SELF)


def test_the_generator_is_the_reference_across_the_2_32_index_boundary():
    """The kernels' loop runs over pieces whose indices share their high 32
    bits; a tile that crosses 2**32 is split there, and every element keeps
    the bits of its own 64-bit index."""
    from fastopt import _ext
    rng = np.random.default_rng(1)
    v = rng.standard_normal(3000).astype(np.float32)
    v[7] = np.nan
    v[8] = -np.inf
    for h in (0, 0x0123456789ABCDEF, 2**64 - 1):
        for i0 in (0, 12345, 2**32 - 1000, 2**33 - 5, 2**63):
            out = np.empty(v.size, np.uint16)
            _ext.round_stochastic(v, out, h, i0)
            want = H.round_stochastic(v, H.random_bits(h, v.size, i0))
            np.testing.assert_array_equal(out, want.view(np.uint16))


def test_a_skipped_step_rounds_and_writes_nothing():
    rng = np.random.default_rng(21)
    x = rng.standard_normal(5000).astype(np.float32)
    g = rng.standard_normal(5000).astype(np.float32)
    g[4321] = np.inf
    m = rng.standard_normal(5000).astype(BF16)
    v = np.abs(rng.standard_normal(5000)).astype(BF16)
    before = [bits(a).copy() for a in (x, m, v)]
    for nth in (1, 2):
        info = fastopt.adamw(x, g, m, v, step=3, skip_if_nonfinite=True, seed=4,
                             state_rounding="stochastic", n_threads=nth)
        assert not info.applied and not info.finite
        for a, b in zip((x, m, v), before):
            np.testing.assert_array_equal(bits(a), b)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("states", [None, "float32", "int8-blockwise"])
def test_state_rounding_without_16_bit_states_is_refused(rounding, states):
    """state_rounding rounds 16-bit states: with none to round it would do
    nothing, so it is refused rather than ignored ("auto", the default,
    and state_dtype="bfloat16" take it)."""
    from fastopt import optim
    x = np.ones(5000, np.float32)
    with pytest.raises(ValueError, match=r"fastopt\.optim\.AdamW: state_rounding="
                                         rf"'{rounding}' rounds 16-bit states, and this "
                                         r"optimizer keeps none"):
        optim.AdamW([x], lr=0.1, state_dtype=states, state_rounding=rounding)
    opt = optim.AdamW([x], lr=0.1, state_dtype="bfloat16", state_rounding=rounding)
    assert opt.state_rounding == rounding
    optim.AdamW([x], lr=0.1, state_dtype=states)
