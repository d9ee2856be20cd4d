"""The C API's entry points give the bits of the Python functions over the
same core: the step with its gradient transform (unscale, clip by the
global norm, clip_value, the non-finite skip, 16-bit gradients and copies),
the given-norm mode, the global norm, the gradient clip, AGC and the fused
AGC-momentum."""
import ctypes as ct

import ml_dtypes
import numpy as np
import pytest
from capi_helpers import RULE, C, F, S, grad_lists, new, opts, result, step, tensor

import fastopt

BF16 = np.dtype(ml_dtypes.bfloat16)


def _sgd_group(step_count=2):
    return new("fastopt_group", rule=RULE["sgd_torch"], flags=C["FASTOPT_NESTEROV"],
               t=step_count, lr=0.05, alpha=0.9, decay=1e-3)


def _model(seed, gdtype=None):
    rng = np.random.default_rng(seed)
    out = []
    for n, dt in ((33, np.float32), (1025, np.float64), (4100, np.float32)):
        x = rng.standard_normal(n).astype(dt)
        g = (3 * rng.standard_normal(n)).astype(gdtype or dt)
        out.append((x, g, rng.standard_normal(n).astype(dt)))
    return out


@pytest.mark.parametrize("convention", ["torch", "optax"])
def test_step_with_the_gradient_transform(convention):
    mine, ref = _model(0), _model(0)
    o = opts(grad_scale=2.0, clip=C["FASTOPT_CLIP_" + convention.upper()], max_norm=1.5,
             clip_value=0.7, measure=C["FASTOPT_MEASURE_ALWAYS"])
    rc, res = step([tensor(x, g, b) for x, g, b in mine], [_sgd_group()], o)
    info = fastopt.sgd([t[0] for t in ref], [t[1] for t in ref], [t[2] for t in ref],
                       lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True, step=3,
                       grad_scale=2.0, max_grad_norm=1.5, clip_convention=convention,
                       clip_value=0.7)
    assert rc == 0 and res.applied == 1 and res.norm == info.norm
    for a, b in zip(mine, ref):
        assert all(p.tobytes() == q.tobytes() for p, q in zip(a, b))


def test_the_given_norm_is_used_as_measured():
    a, b = _model(1), _model(1)
    o = opts(clip=C["FASTOPT_CLIP_TORCH"], max_norm=1.0)
    step([tensor(*t) for t in a], [_sgd_group()], o)
    ptrs, ns, dts = grad_lists([t[1] for t in b])
    r = result()
    assert F["global_norm"](ptrs, ns, dts, 3, 1.0, C["FASTOPT_NORM_2"], ct.byref(r), 1) == 0
    assert r.norm == fastopt.global_norm([t[1] for t in b])
    given = opts(clip=C["FASTOPT_CLIP_TORCH"], max_norm=1.0,
                 measure=C["FASTOPT_MEASURE_GIVEN"], norm=r.norm)
    step([tensor(*t) for t in b], [_sgd_group()], given)
    assert [p.tobytes() for t in a for p in t] == [p.tobytes() for t in b for p in t]


def test_a_nonfinite_gradient_skips_the_step():
    model = _model(2)
    model[1][1][7] = np.inf
    before = [p.copy() for t in model for p in t]
    rc, res = step([tensor(*t) for t in model], [_sgd_group()], opts(check_finite=1))
    assert (rc, res.applied, res.finite) == (0, 0, 0)
    assert all(p.tobytes() == q.tobytes() for p, q in zip(before, [p for t in model
                                                                   for p in t]))


def test_bfloat16_gradients_and_copies():
    mine, ref = _model(3, BF16), _model(3, BF16)
    copies = [np.zeros(t[0].size, BF16) if t[0].dtype == np.float32 else None for t in mine]
    recs = []
    for (x, g, b), w in zip(mine, copies):
        extra = {} if w is None else {"w": w.ctypes.data, "wdtype": C["FASTOPT_BF16"]}
        recs.append(tensor(x, g, b, **extra))
    rc, res = step(recs, [_sgd_group()])
    ref_copies = [np.zeros(t[0].size, BF16) if t[0].dtype == np.float32 else None for t in ref]
    fastopt.sgd([t[0] for t in ref], [t[1] for t in ref], [t[2] for t in ref], lr=0.05,
                momentum=0.9, weight_decay=1e-3, nesterov=True, step=3,
                param_copies=ref_copies)
    assert rc == 0
    for a, b in zip(mine, ref):
        assert all(p.tobytes() == q.tobytes() for p, q in zip(a, b))
    for w, v in zip(copies, ref_copies):
        assert (w is None and v is None) or w.tobytes() == v.tobytes()


def test_clip_grads_and_the_sum_of_squares():
    gs, ref = [t[1] for t in _model(4)], [t[1] for t in _model(4)]
    ptrs, ns, dts = grad_lists(gs)
    r = result()
    o = opts(grad_scale=4.0, clip=C["FASTOPT_CLIP_TORCH"], max_norm=0.25)
    assert F["clip_grads"](ptrs, ns, dts, 3, ct.byref(o), ct.byref(r), 1) == 0
    norm = fastopt.clip_grads(ref, max_norm=0.25, grad_scale=4.0)
    assert r.norm == norm and all(a.tobytes() == b.tobytes() for a, b in zip(gs, ref))
    assert F["global_norm"](ptrs, ns, dts, 3, 1.0, C["FASTOPT_NORM_SUMSQ"], ct.byref(r), 1) == 0
    np.testing.assert_allclose(np.sqrt(r.norm), fastopt.global_norm(gs), rtol=1e-15)


def _agc_record(x, g, v=None):
    return new("fastopt_agc_tensor", x=x.ctypes.data, g=g.ctypes.data,
               v=None if v is None else v.ctypes.data, n_units=x.shape[0],
               unit_len=x.shape[1], clipping=0.05, dtype=C["FASTOPT_F32"],
               kind=C["FASTOPT_AGC_ROWS"])


def _agc_arrays():
    rng = np.random.default_rng(5)
    return [rng.standard_normal((16, 40)).astype(np.float32) for _ in range(3)]


def test_agc_and_the_fused_momentum():
    x, g, v = _agc_arrays()
    rx, rg, rv = _agc_arrays()
    res = result()
    ts = (S["fastopt_agc_tensor"] * 1)(_agc_record(x, g))
    assert F["agc"](ts, 1, 1e-3, ct.byref(res), 1) == 0
    fastopt.agc(rx, rg, clipping=0.05, eps=1e-3)
    assert g.tobytes() == rg.tobytes()

    x, g, v = _agc_arrays()
    rx, rg, rv = _agc_arrays()
    grp = new("fastopt_group", rule=RULE["momentum"], t=3, lr=0.1, alpha=0.9, beta=1.0,
              decay=1e-4)
    ts = (S["fastopt_agc_tensor"] * 1)(_agc_record(x, g, v))
    assert F["agc_momentum"](ts, 1, 1e-3, ct.byref(grp), ct.byref(res), 1) == 0
    fastopt.onnx_momentum(rx, rg, rv, lr=0.1, t=3, alpha=0.9, beta=1.0,
                          norm_coefficient=1e-4, clipping=0.05, clip_eps=1e-3)
    assert (x.tobytes(), v.tobytes(), g.tobytes()) == (rx.tobytes(), rv.tobytes(),
                                                       rg.tobytes())


def test_a_rule_with_further_hyperparameters():
    """LAMB's eps_root and trust-ratio switch travel in the group's extra."""
    mine, ref = _model(6), _model(6)
    for t in mine + ref:
        t[2][...] = 0.0
    seconds = [np.zeros_like(t[0]) for t in mine]
    ref_seconds = [np.zeros_like(t[0]) for t in ref]
    grp = new("fastopt_group", rule=C["FASTOPT_RULE_LAMB"], t=1, lr=0.01, alpha=0.9,
              beta=0.999, eps=1e-6, decay=0.01)
    grp.extra[0], grp.extra[1] = 1e-9, 1.0
    rc, res = step([tensor(x, g, m, s) for (x, g, m), s in zip(mine, seconds)], [grp])
    fastopt.lamb([t[0] for t in ref], [t[1] for t in ref], [t[2] for t in ref], ref_seconds,
                 step=1, lr=0.01, betas=(0.9, 0.999), eps=1e-6, eps_root=1e-9,
                 weight_decay=0.01, trust_ratio=True)
    assert rc == 0
    for (a, s), (b, r) in zip(zip(mine, seconds), zip(ref, ref_seconds)):
        assert all(p.tobytes() == q.tobytes() for p, q in zip(a + (s,), b + (r,)))
    grp.extra[7] = 1.0                                # room no rule of this version reads
    rc, res = step([tensor(x, g, m, s) for (x, g, m), s in zip(mine, seconds)], [grp])
    assert (rc, res.error_field) == (C["FASTOPT_EUNSUPPORTED"], C["FASTOPT_FIELD_HYPER"])


# ---- bfloat16 states (ABI 1.1) ------------------------------------------------------

def _bf16_model(seed, n=3001):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    return x, g, (rng.standard_normal(n) * 0.1).astype(BF16), \
        np.abs(rng.standard_normal(n) * 0.01).astype(BF16)


@pytest.mark.parametrize("rounding", ["auto", "nearest", "stochastic"])
def test_bfloat16_states_give_the_functions_bits(rounding):
    """A tensor with states=FASTOPT_STATES_BF16 and a key steps as
    fastopt.adamw does with bfloat16 states and that key as its seed; the
    group's rounding flags are state_rounding's."""
    x, g, m, v = _bf16_model(3)
    xr, gr, mr, vr = (a.copy() for a in (x, g, m, v))
    flags = {"auto": 0, "nearest": C["FASTOPT_ROUND_NEAREST"],
             "stochastic": C["FASTOPT_ROUND_STOCHASTIC"]}[rounding]
    grp = new("fastopt_group", rule=RULE["adamw_torch"], flags=flags, t=4, lr=1e-2,
              alpha=0.9, beta=0.999, eps=1e-8, decay=1e-2)
    key = 0x1234_5678_9ABC_DEF0
    rc, res = step([tensor(x, g, m, v, states=C["FASTOPT_STATES_BF16"], key=key)], [grp],
                   n_threads=2)
    fastopt.adamw(xr, gr, mr, vr, step=4, lr=1e-2, weight_decay=1e-2,
                  state_rounding=rounding, seed=key)
    assert rc == 0 and res.applied == 1
    assert x.tobytes() == xr.tobytes()
    assert m.tobytes() == mr.tobytes() and v.tobytes() == vr.tobytes()


def test_a_version_1_0_tensor_still_steps():
    """A caller built against 1.0 passes the shorter tensor (its size ends
    before `states`): own-type states, as before."""
    a, b = _model(4), _model(4)
    short = S["fastopt_tensor"].states.offset
    ts = [tensor(*t) for t in a]
    for t in ts:
        t.size = short
    buf = ct.create_string_buffer(short * len(ts))
    for k, t in enumerate(ts):
        ct.memmove(ct.addressof(buf) + k * short, ct.addressof(t), short)
    res = result()
    rc = F["step"](ct.cast(buf, ct.POINTER(S["fastopt_tensor"])), len(ts),
                   (S["fastopt_group"] * 1)(_sgd_group()), 1, ct.byref(opts()),
                   ct.byref(res), 1)
    step([tensor(*t) for t in b], [_sgd_group()])
    assert rc == 0 and [p.tobytes() for t in a for p in t] == \
        [p.tobytes() for t in b for p in t]


@pytest.mark.parametrize("size", ["between", "odd"])
def test_a_tensor_size_between_versions_is_refused(size):
    """A size past 1.0's that does not cover 1.1's fields would leave
    `states` unread (bfloat16 states taken for float32 ones: writes past
    their arrays): refused, nothing written; so is a misaligned size."""
    x, g, m, v = _bf16_model(6, n=64)
    grp = new("fastopt_group", rule=RULE["adamw_torch"], t=1, lr=1e-2, alpha=0.9,
              beta=0.999, eps=1e-8)
    t = tensor(x, g, m, v, states=C["FASTOPT_STATES_BF16"])
    t.size = S["fastopt_tensor"].states.offset + (4 if size == "between" else 1)
    before = [a.tobytes() for a in (x, m, v)]
    res = result()
    rc = F["step"](ct.byref(t), 1, (S["fastopt_group"] * 1)(grp), 1, ct.byref(opts()),
                   ct.byref(res), 1)
    assert rc == C["FASTOPT_EINVAL"]
    assert (res.error_where, res.error_field) == (C["FASTOPT_WHERE_TENSOR"],
                                                  C["FASTOPT_FIELD_SIZE"])
    assert [a.tobytes() for a in (x, m, v)] == before


def test_both_roundings_at_once_are_refused():
    x, g, m, v = _bf16_model(7, n=64)
    grp = new("fastopt_group", rule=RULE["adamw_torch"], t=1, lr=1e-2, alpha=0.9,
              beta=0.999, eps=1e-8,
              flags=C["FASTOPT_ROUND_NEAREST"] | C["FASTOPT_ROUND_STOCHASTIC"])
    rc, res = step([tensor(x, g, m, v, states=C["FASTOPT_STATES_BF16"])], [grp])
    assert rc == C["FASTOPT_EINVAL"]
    assert (res.error_where, res.error_field) == (C["FASTOPT_WHERE_GROUP"],
                                                  C["FASTOPT_FIELD_FLAGS"])


def test_the_key_reads_back_as_a_64_bit_integer():
    t = tensor(*_bf16_model(8, n=4), key=2**64 - 1)
    assert t.key == 2**64 - 1 and S["fastopt_tensor"].key.size == 8


@pytest.mark.parametrize("case", ["value", "float64"])
def test_bad_states_are_refused_by_name(case):
    x, g, m, v = _bf16_model(5, n=64)
    states, rule = C["FASTOPT_STATES_BF16"], RULE["adamw_torch"]
    if case == "value":
        states = 7
    else:
        x, g = x.astype(np.float64), g.astype(np.float64)
    grp = new("fastopt_group", rule=rule, t=1, lr=1e-2, alpha=0.9, beta=0.999, eps=1e-8)
    before = [a.tobytes() for a in (x, m, v)]
    rc, res = step([tensor(x, g, m, v, states=states)], [grp])
    assert rc == C["FASTOPT_EINVAL"]
    assert (res.error_where, res.error_field, res.error_index) == (
        C["FASTOPT_WHERE_TENSOR"], C["FASTOPT_FIELD_STATES"], 0)
    assert [a.tobytes() for a in (x, m, v)] == before
