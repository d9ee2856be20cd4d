"""The C step driver (src_c/step.c) against the NumPy reference
(fastopt/_reference/step.py), bit for bit, through a ctypes harness:
awkward lengths, mixed float32/float64, NaN/Inf, every rule and flag,
every option, n_threads 1..4."""
import math

import _step_ctypes as cs
import numpy as np
import pytest

from fastopt._reference import step as ref

SIZES = [0, *range(1, 18), 31, 33, 1023, 1025, 4097]
BIG = [70001, 150000]          # above the serial threshold: parallel passes
THREADS = [1, 2, 3, 4]


def _same(a, b):
    """Bit-identical, NaN positions included (NaN payloads not compared)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    na, nb = np.isnan(a), np.isnan(b)
    np.testing.assert_array_equal(na, nb)
    u = np.uint32 if a.dtype == np.float32 else np.uint64
    bad = np.flatnonzero(a.view(u)[~na] != b.view(u)[~nb])
    assert bad.size == 0, (bad[:5], a[~na][bad[:5]], b[~nb][bad[:5]])


GROUPS = {
    "momentum": {"lr": 0.1, "alpha": 0.9, "beta": 0.5, "decay": 0.01, "t": 3},
    "momentum_nesterov_t0": {"rule": "momentum", "lr": 0.1, "alpha": 0.9, "beta": 0.5,
                                 "decay": 0.0, "t": 0, "nesterov": True},
    "adagrad": {"lr": 0.1, "eps": 1e-6, "decay": 0.02, "lr_decay": 0.1, "t": 2},
    "adam": {"lr": 0.01, "alpha": 0.9, "beta": 0.999, "eps": 1e-6, "decay": 0.01,
                 "decay_post": 0.001, "t": 4},
    "sgd_torch": {"lr": 0.1, "alpha": 0.9, "beta": 0.1, "decay": 0.01, "t": 2},
    "sgd_torch_first_nesterov": {"rule": "sgd_torch", "lr": 0.1, "alpha": 0.9, "beta": 0.0,
                                     "decay": 0.0, "t": 0, "nesterov": True, "maximize": True},
    "sgd_torch_plain": {"rule": "sgd_torch", "lr": 0.1, "alpha": 0.0, "beta": 0.0, "decay": 0.0,
                        "t": 5},
    "adagrad_torch": {"lr": 0.1, "eps": 1e-10, "decay": 0.01, "lr_decay": 0.01, "t": 3,
                          "maximize": True},
    "adam_torch": {"lr": 0.01, "alpha": 0.9, "beta": 0.999, "eps": 1e-8, "decay": 0.01, "t": 3},
    "adam_torch_ams_max": {"rule": "adam_torch", "lr": 0.01, "alpha": 0.3, "beta": 0.99,
                               "eps": 1e-8, "decay": 0.0, "t": 1, "amsgrad": True,
                               "maximize": True},
    "adamw_torch": {"lr": 0.01, "alpha": 0.9, "beta": 0.999, "eps": 1e-8, "decay": 0.1, "t": 7},
    "adamw_torch_ams": {"rule": "adamw_torch", "lr": 0.01, "alpha": 0.8, "beta": 0.9,
                            "eps": 1e-8, "decay": 0.05, "t": 2, "amsgrad": True},
}


def _group(name):
    hp = dict(GROUPS[name])
    hp.setdefault("rule", name)
    return hp


def _nstates(hp):
    r = hp["rule"]
    if r == "adam":
        return 2
    if r in ("adam_torch", "adamw_torch"):
        return 3 if hp.get("amsgrad") else 2
    if r == "sgd_torch" and hp["alpha"] == 0.0:
        return 0
    return 1


def _case(rng, group_names, sizes, dtypes=(np.float32, np.float64), scale=1.0,
          bad=None):
    groups = [_group(n) for n in group_names]
    xs, gs, states, index = [], [], [], []
    for k, n in enumerate(sizes):
        j = k % len(groups)
        dt = dtypes[k % len(dtypes)]
        xs.append(rng.standard_normal(n).astype(dt))
        gs.append((rng.standard_normal(n) * scale).astype(dt))
        ns = _nstates(groups[j])
        # every state kept non-negative: H / v / vmax must be
        states.append(tuple(np.abs(rng.standard_normal(n)).astype(dt) for _ in range(ns)))
        index.append(j)
    if bad is not None:
        k = next(i for i, g in enumerate(gs) if g.size > 3)
        gs[k][2] = bad
    return xs, gs, states, groups, index


def _run_both(lib, case, n_threads=1, **opts):
    xs, gs, states, groups, index = case
    g_before = [g.copy() for g in gs]
    applied, norm, x_ref, st_ref = ref.step(xs, gs, states, groups, index, **_ref_opts(opts))
    xc = [x.copy() for x in xs]
    sc = [tuple(s.copy() for s in st) for st in states]
    rc, res = cs.step(lib, xc, gs, sc, groups, index, n_threads=n_threads, **opts)
    assert rc == 0
    for g, g0 in zip(gs, g_before):
        _same(g, g0)                          # gradients never written
    assert bool(res.applied) == applied
    if not (math.isnan(norm) and math.isnan(res.norm)):
        assert res.norm == norm
    for a, b in zip(xc, x_ref):
        _same(a, b)
    for a, b in zip(sc, st_ref):
        for s, r in zip(a, b):
            _same(s, r)
    return res, xc, sc


def _ref_opts(opts):
    o = dict(opts)
    o.pop("measure", None)
    return o


@pytest.mark.parametrize("name", sorted(GROUPS))
@pytest.mark.parametrize("opts", [
    {}, {"grad_scale": 1024.0}, {"max_norm": 1.0}, {"grad_scale": 1000.0},
    {"grad_scale": 1024.0, "max_norm": 1.0}, {"grad_scale": 0.25, "max_norm": 2.0},
    {"grad_scale": 8.0, "max_norm": 0.5, "convention": "optax"},
    {"max_norm": 0.5, "norm_type": math.inf}, {"clip_value": 0.3},
    {"grad_scale": 2.0, "max_norm": 3.0, "clip_value": 0.05, "check_finite": True},
])
def test_rule_matches_reference(lib, name, opts):
    rng = np.random.default_rng(abs(hash((name, str(opts)))) % 2**32)
    case = _case(rng, [name], SIZES, scale=1.0 * opts.get("grad_scale", 1.0))
    _run_both(lib, case, **opts)


def test_all_rules_in_one_call_threads(lib):
    """Every rule in one call (one group each), big tensors, n_threads 1..4:
    the result matches the reference and is the same for every count."""
    rng = np.random.default_rng(11)
    names = sorted(GROUPS)
    case = _case(rng, names, SIZES + BIG * 3, scale=3.0)
    out = [_run_both(lib, case, n_threads=n, grad_scale=4.0, max_norm=10.0,
                     check_finite=True) for n in THREADS]
    for res, xc, _sc in out[1:]:
        assert res.norm == out[0][0].norm
        for a, b in zip(xc, out[0][1]):
            _same(a, b)


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
@pytest.mark.parametrize("grad_scale", [1.0, 3.0])
def test_global_norm(lib, norm_type, grad_scale):
    rng = np.random.default_rng(12)
    for sizes in (SIZES, SIZES + BIG, [], [0, 0]):
        gs = [(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3)).astype(
            (np.float32, np.float64)[k % 2]) for k, n in enumerate(sizes)]
        norm, finite = ref.global_norm(gs, grad_scale=grad_scale, norm_type=norm_type)
        for n in THREADS:
            rc, res = cs.global_norm(lib, gs, grad_scale, norm_type, n)
            assert rc == 0 and res.norm == norm and res.finite == finite


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("grad_scale", [1.0, 3.0, 4.0])
def test_global_norm_of_each_small_block(lib, dtype, grad_scale):
    """Blocks of up to FO_STEP_LANES elements take a short path (the tree
    over the lanes they fill): each alone, and each with a NaN or an
    infinity in it, gives the reference's bits (grad_scale 4: the exact
    inverse; 3: a division)."""
    rng = np.random.default_rng(16)
    for n in range(1, 2 * ref.LANES + 2):
        g = (rng.standard_normal(n) * 10.0 ** rng.integers(-20, 20)).astype(dtype)
        cases = [g]
        for bad in (np.nan, np.inf):
            b = g.copy()
            b[rng.integers(n)] = bad
            cases.append(b)
        for gg in cases:
            for norm_type in (2.0, math.inf):
                norm, finite = ref.global_norm([gg], grad_scale=grad_scale,
                                               norm_type=norm_type)
                rc, res = cs.global_norm(lib, [gg], grad_scale, norm_type, 1)
                assert rc == 0 and res.finite == finite, (n, gg)
                assert res.norm == norm or (math.isnan(res.norm) and math.isnan(norm)), (
                    n, norm_type, res.norm, norm)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_nonfinite_skip_writes_nothing(lib, bad, norm_type):
    rng = np.random.default_rng(13)
    case = _case(rng, ["adamw_torch", "momentum"], SIZES + BIG, bad=bad)
    for n in THREADS:
        res, xc, _sc = _run_both(lib, case, n_threads=n, max_norm=1.0,
                                check_finite=True, norm_type=norm_type)
        assert not res.applied and not res.finite
        for a, b in zip(xc, case[0]):
            _same(a, b)
        # a NaN gives a NaN norm; an infinity alone an infinite one
        assert math.isnan(res.norm) == math.isnan(bad)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_without_check_applies(lib, bad):
    rng = np.random.default_rng(14)
    case = _case(rng, ["sgd_torch"], SIZES, bad=bad)
    res, _, _ = _run_both(lib, case, max_norm=1.0)
    assert res.applied and not res.finite


def test_float64_overflowing_squares_are_finite(lib):
    g = [np.array([1e200, -1e200, 3.0])]
    norm, finite = ref.global_norm(g)
    _rc, res = cs.global_norm(lib, g)
    assert finite and res.finite and res.norm == norm == math.inf


@pytest.mark.parametrize("opts", [
    {"max_norm": 1.0}, {"max_norm": 0.5, "convention": "optax", "grad_scale": 4.0},
    {"clip_value": 0.2, "grad_scale": 2.0}, {"max_norm": 0.1, "norm_type": math.inf},
    {"max_norm": 1e9}, {"max_norm": 1.0, "check_finite": True}])
def test_clip_grads_in_place(lib, opts):
    rng = np.random.default_rng(15)
    gs = [rng.standard_normal(n).astype((np.float32, np.float64)[n % 2])
          for n in SIZES + BIG]
    o = _ref_opts(opts)
    norm, _ = ref.global_norm(gs, grad_scale=o.get("grad_scale", 1.0),
                              norm_type=o.get("norm_type", 2.0))
    want = [ref.transform(g, norm=norm, grad_scale=o.get("grad_scale", 1.0),
                          max_norm=o.get("max_norm"),
                          convention=o.get("convention", "torch"),
                          clip_value=o.get("clip_value")) for g in gs]
    for n in THREADS:
        got = [g.copy() for g in gs]
        rc, res = cs.clip_grads(lib, got, n_threads=n, **opts)
        assert rc == 0 and res.applied and res.norm == norm
        for a, b in zip(got, want):
            _same(a, b)


def test_clip_grads_skip_leaves_list(lib):
    gs = [np.ones(10, np.float32), np.array([1.0, np.nan])]
    got = [g.copy() for g in gs]
    rc, res = cs.clip_grads(lib, got, max_norm=0.1, check_finite=True)
    assert rc == 0 and not res.applied
    for a, b in zip(got, gs):
        _same(a, b)


@pytest.mark.parametrize("change", [
    {"grad_scale": 0.0}, {"grad_scale": math.nan}, {"grad_scale": math.inf},
    {"max_norm": 0.0}, {"max_norm": -1.0}, {"max_norm": math.nan},
    {"clip_value": -1.0}, {"clip_value": math.nan}, {"norm_type": 1.0},
])
def test_bad_options_write_nothing(lib, change):
    rng = np.random.default_rng(16)
    case = _case(rng, ["adamw_torch"], [5, 7])
    xs = [x.copy() for x in case[0]]
    opts = {"max_norm": 1.0}
    opts.update(change)
    if "norm_type" in change:
        opts_s = cs.opts_struct(max_norm=1.0)
        opts_s.norm_type = 7
    rc, _ = (cs.step(lib, *case, **opts) if "norm_type" not in change
             else _step_raw(lib, case, opts_s))
    assert rc == -2
    for a, b in zip(case[0], xs):
        _same(a, b)


def _step_raw(lib, case, o):
    import ctypes as ct
    xs, gs, states, groups, index = case
    ts = (cs.Tensor * len(xs))()
    for k, (x, g, st, j) in enumerate(zip(xs, gs, states, index)):
        ts[k] = cs.tensor(x, g, st, j)
    gr = (cs.Group * len(groups))(*[cs.group_struct(h) for h in groups])
    res = cs.Result()
    return lib.fo_step(ts, len(xs), gr, len(groups), ct.byref(o), ct.byref(res), 1), res


@pytest.mark.parametrize("mutate", ["t_adam", "t_onnx", "rule", "flags", "state",
                                    "group_index"])
def test_bad_groups_write_nothing(lib, mutate):
    """A bad group or tensor anywhere: FO_EINVAL and no byte written, even
    of the tensors of the good group before it."""
    rng = np.random.default_rng(17)
    case = list(_case(rng, ["momentum", "adamw_torch_ams"], [9, 11, 13, 15]))
    groups = [dict(h) for h in case[3]]
    index = list(case[4])
    states = list(case[2])
    if mutate == "t_adam":
        groups[1]["t"] = 0
    elif mutate == "t_onnx":
        groups[0]["t"] = -1
    elif mutate == "rule":
        groups[1]["rule"] = "adam"
        groups[1]["decay_post"] = 0.0
        states[3] = states[3][:1]
    elif mutate == "flags":
        groups[1]["amsgrad"] = True
        states[3] = states[3][:2]
    elif mutate == "state":
        states[2] = ()
    else:
        index[3] = 2
    xs0 = [x.copy() for x in case[0]]
    st0 = [tuple(s.copy() for s in st) for st in states]
    rc, res = cs.step(lib, case[0], case[1], states, groups, index, n_threads=2,
                      max_norm=1.0)
    assert rc == -2 and not res.applied
    for a, b in zip(case[0], xs0):
        _same(a, b)
    for a, b in zip(states, st0):
        for s, r in zip(a, b):
            _same(s, r)


def test_onnx_rules_equal_core_kernels(lib):
    """fo_step's ONNX rules give fo_momentum/fo_adagrad/fo_adam's bits: the
    reference (ops.py) is the same expression the core kernels evaluate."""
    rng = np.random.default_rng(18)
    for name in ("momentum", "adagrad", "adam"):
        case = _case(rng, [name], [1025, 33])
        _run_both(lib, case)


@pytest.mark.parametrize("scale", [2.0 ** 16, 2.0 ** -3, 2.0 ** 140, 3.0])
def test_unscale_of_tiny_and_huge_values(lib, scale):
    """A power-of-two scale is applied as a multiplication by its inverse:
    the same bits as the division, subnormal results and overflow included."""
    rng = np.random.default_rng(19)
    case = _case(rng, ["sgd_torch", "adamw_torch"], [40, 41, 1025])
    for g in case[1]:
        g[:10] = np.array([1e-40, -3e-42, 1e-45, 2e-38, -1e-39, 3e38, -3.4e38,
                           1e-300, 0.0, -0.0]).astype(g.dtype)
    _run_both(lib, case, grad_scale=scale)
    _run_both(lib, case, grad_scale=scale, max_norm=1e-3)


def test_given_norm_skips_pass_one(lib):
    """FO_MEASURE_GIVEN: the norm of an earlier fo_global_norm, same bits."""
    rng = np.random.default_rng(20)
    case = _case(rng, ["adamw_torch", "sgd_torch"], SIZES + BIG, scale=5.0)
    rc, res = cs.global_norm(lib, case[1], 2.0)
    want = _run_both(lib, case, grad_scale=2.0, max_norm=1.0)
    xc = [x.copy() for x in case[0]]
    sc = [tuple(s.copy() for s in st) for st in case[2]]
    rc, got = cs.step(lib, xc, case[1], sc, case[3], case[4], grad_scale=2.0,
                      max_norm=1.0, given_norm=res.norm)
    assert rc == 0 and got.applied and got.norm == want[0].norm
    for a, b in zip(xc, want[1]):
        _same(a, b)
    rc, _ = cs.step(lib, xc, case[1], sc, case[3], case[4], given_norm=1.0,
                    check_finite=True)
    assert rc == -2
