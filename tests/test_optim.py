"""fastopt.optim: stateful Momentum / Adagrad / Adam over the kernels.

Every check compares with the functional kernels (fastopt.momentum/adagrad/
adam, themselves tested against NumPy in test_core.py) called by hand with
the T convention of each operator, bit for bit, or with the float64 NumPy
reference.
"""
import os
import struct
import zipfile

import numpy as np
import pytest

import fastopt
from fastopt import _reference as ref
from fastopt import optim
from fastopt.optim import CheckpointError

SHAPES = [(3, 4), (5,), (2, 3, 2), (), (7, 1)]


def make_params(seed=0, dtypes=(np.float32, np.float64)):
    rng = np.random.default_rng(seed)
    return [np.asarray(rng.standard_normal(s), dtypes[i % len(dtypes)])
            for i, s in enumerate(SHAPES)]


def make_grads(params, seed):
    rng = np.random.default_rng(1000 + seed)
    return [np.asarray(rng.standard_normal(p.shape), p.dtype) for p in params]


def snapshot(opt, params):
    return ([p.copy() for p in params],
            {k: [a.copy() for a in v] for k, v in opt.state.items()},
            opt.steps,
            [{k: (list(v) if isinstance(v, list) else v) for k, v in g.items() if k != "params"}
             for g in opt.param_groups])


def assert_same(a, b):
    pa, sa, ta, ha = a
    pb, sb, tb, hb = b
    assert ta == tb
    assert ha == hb
    for x, y in zip(pa, pb):
        np.testing.assert_array_equal(x, y, strict=True)
    assert sa.keys() == sb.keys()
    for k in sa:
        for x, y in zip(sa[k], sb[k]):
            np.testing.assert_array_equal(x, y, strict=True)


# name: (class, kwargs, kernel, state names, T of the first update)
OPTS = {
    "momentum": (optim.Momentum, dict(lr=0.1, alpha=0.8, beta=0.6, norm_coefficient=0.01),
                 fastopt.momentum, ("v",), 0),
    "nesterov": (optim.Momentum, dict(lr=0.1, alpha=0.8, beta=0.6, nesterov=True),
                 fastopt.momentum, ("v",), 0),
    "adagrad": (optim.Adagrad, dict(lr=0.1, decay_factor=0.1, epsilon=1e-5,
                                    norm_coefficient=0.01, initial_accumulator_value=0.2),
                fastopt.adagrad, ("h",), 0),
    "adam": (optim.Adam, dict(lr=0.01, alpha=0.8, beta=0.95, epsilon=1e-5,
                              norm_coefficient=0.01, norm_coefficient_post=0.001),
             fastopt.adam, ("v", "h"), 1),
}


def kernel_kwargs(name, kw):
    kw = dict(kw)
    if name in ("momentum", "nesterov"):
        kw["mode"] = "nesterov" if kw.pop("nesterov", False) else "standard"
    kw.pop("initial_accumulator_value", None)
    return kw


# ------------------------------------------------------------------- steps

@pytest.mark.parametrize("name", list(OPTS))
@pytest.mark.parametrize("contiguous", [False, True])
def test_step_equals_kernel_calls(name, contiguous):
    cls, kw, kernel, states, t0 = OPTS[name]
    params = make_params()
    mine = [p.copy() for p in params]
    fill = kw.get("initial_accumulator_value", 0.0)
    mstates = [[np.full(p.shape, fill if s == "h" else 0.0, p.dtype) for p in params]
               for s in states]
    opt = cls(params, contiguous_state=contiguous, **kw)
    assert opt.t == t0 and opt.steps == 0
    for k in range(4):
        grads = make_grads(params, k)
        assert opt.step(grads) is True
        kernel(mine, grads, *mstates, t=t0 + k, **kernel_kwargs(name, kw))
        for a, b in zip(params, mine):
            np.testing.assert_array_equal(a, b, strict=True)
        for s, ms in zip(states, mstates):
            for a, b in zip(opt.state[s], ms):
                np.testing.assert_array_equal(a, b, strict=True)
    assert opt.steps == 4 and opt.t == t0 + 4


@pytest.mark.parametrize("name", ["momentum", "adagrad", "adam"])
def test_first_updates_follow_the_onnx_t_convention(name):
    """Against the float64 NumPy reference: Momentum's first update ignores
    beta (T=0), Adam's is bias-corrected (T=1), Adagrad's is undecayed."""
    cls, kw, _, states, t0 = OPTS[name]
    x = np.array([0.5, -1.0, 2.0])
    opt = cls([x], **kw)
    xr = x.copy()
    fill = kw.get("initial_accumulator_value", 0.0)
    sr = [np.full(3, fill if s == "h" else 0.0) for s in states]
    reference = getattr(ref, name)
    for k in range(3):
        g = np.array([0.3, -0.2, 0.1]) * (k + 1)
        opt.step([g])
        xr, *sr = reference(xr, g, *sr, t=t0 + k, **kernel_kwargs(name, kw))
        np.testing.assert_allclose(x, xr, rtol=1e-14, atol=1e-15)


def test_contiguous_state_is_one_aligned_arena_per_dtype():
    params = make_params()
    opt = optim.Adam(params, lr=0.1, contiguous_state=True)
    assert set(opt.arenas) == {np.dtype(np.float32), np.dtype(np.float64)}
    for name, arrays in opt.state.items():
        for a, p in zip(arrays, params):
            assert a.shape == p.shape and a.dtype == p.dtype
            assert np.shares_memory(a, opt.arenas[a.dtype])
            assert a.ctypes.data % 64 == 0
    assert not optim.Adam(make_params(), lr=0.1).arenas


def test_fortran_ordered_params_get_fortran_ordered_states():
    x = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    opt = optim.Momentum([x], lr=0.1)
    assert opt.state["v"][0].flags.f_contiguous
    v = np.zeros((3, 4))
    xr = x.copy()
    g = np.ones((3, 4))
    opt.step([g])
    fastopt.momentum(xr, g, v, lr=0.1, t=0)
    np.testing.assert_array_equal(x, xr)


def test_broadcast_and_strided_gradients():
    x = np.arange(6.0).reshape(2, 3)
    y = np.zeros(8)[::2]   # a strided parameter
    opt = optim.Adagrad([x, y], lr=0.1)
    xr, yr, hx, hy = x.copy(), y.copy(), np.zeros((2, 3)), np.zeros(4)
    gx = np.array([1.0, 2.0, 3.0])
    gy = np.arange(8.0)[1::2]
    opt.step([gx, gy])
    fastopt.adagrad([xr, yr], [gx, gy], [hx, hy], lr=0.1, t=0)
    np.testing.assert_array_equal(x, xr)
    np.testing.assert_array_equal(y, yr)


# ---------------------------------------------------------------- groups

def test_parameter_groups_equal_separate_calls():
    params = make_params()
    groups = [{"params": params[:2], "lr": 0.5, "norm_coefficient": 0.1},
              {"params": params[2:], "nesterov": True}]
    opt = optim.Momentum(groups, lr=0.05, alpha=0.7)
    a, b = [p.copy() for p in params[:2]], [p.copy() for p in params[2:]]
    va, vb = [np.zeros_like(p) for p in a], [np.zeros_like(p) for p in b]
    for k in range(3):
        grads = make_grads(params, k)
        if k == 1:  # one list per group works too
            opt.step([grads[:2], grads[2:]])
        else:
            opt.step(grads)
        fastopt.momentum(a, grads[:2], va, lr=0.5, t=k, alpha=0.7, norm_coefficient=0.1)
        fastopt.momentum(b, grads[2:], vb, lr=0.05, t=k, alpha=0.7, mode="nesterov")
    for x, y in zip(params, a + b):
        np.testing.assert_array_equal(x, y, strict=True)
    assert opt.param_groups[0]["lr"] == 0.5 and opt.param_groups[1]["lr"] == 0.05
    assert opt.last_lr == [0.5, 0.05]


def test_none_gradient_leaves_its_parameter_alone():
    params = make_params()
    opt = optim.Adam([{"params": params[:2]}, {"params": params[2:]}], lr=0.1)
    before = [p.copy() for p in params]
    grads = make_grads(params, 0)
    grads[1] = None
    grads[2] = grads[3] = grads[4] = None   # a whole group without gradients
    opt.step(grads)
    assert not np.array_equal(params[0], before[0])
    for i in (1, 2, 3, 4):
        np.testing.assert_array_equal(params[i], before[i])
        assert not opt.state["v"][i].any()
    assert opt.steps == 1


def test_hyperparameters_edited_between_steps_are_used_and_checked():
    params = make_params()
    opt = optim.Momentum([{"params": params[:2]}, {"params": params[2:]}], lr=0.1)
    mine = [p.copy() for p in params]
    v = [np.zeros_like(p) for p in params]
    grads = make_grads(params, 0)
    opt.param_groups[1]["lr"] = 0.25
    opt.step(grads)
    fastopt.momentum(mine[:2], grads[:2], v[:2], lr=0.1, t=0)
    fastopt.momentum(mine[2:], grads[2:], v[2:], lr=0.25, t=0)
    for a, b in zip(params, mine):
        np.testing.assert_array_equal(a, b)
    before = snapshot(opt, params)
    opt.param_groups[1]["alpha"] = float("nan")
    with pytest.raises(ValueError, match=r"param_groups\[1\]\['alpha'\] must be finite"):
        opt.step(grads)
    opt.param_groups[1]["alpha"] = 0.9
    assert_same(before, snapshot(opt, params))
    opt.param_groups[0]["params"] = [params[0]]
    with pytest.raises(ValueError, match="was replaced"):
        opt.step(grads)


# -------------------------------------------------------------- schedules

def test_schedule_supplies_the_lr_of_each_step():
    calls = []

    def sched(step):
        calls.append(step)
        return 0.1 / (1 + step)

    params = make_params()
    opt = optim.Adam(params, schedule=sched)
    mine = [p.copy() for p in params]
    v = [np.zeros_like(p) for p in params]
    h = [np.zeros_like(p) for p in params]
    assert opt.current_lr() == 0.1
    for k in range(4):
        grads = make_grads(params, k)
        opt.step(grads)
        fastopt.adam(mine, grads, v, h, lr=0.1 / (1 + k), t=k + 1)
        assert opt.last_lr == [0.1 / (1 + k)]
    for a, b in zip(params, mine):
        np.testing.assert_array_equal(a, b)
    assert calls[-4:] == [0, 1, 2, 3]


def test_fastopt_schedule_objects_drive_the_lr():
    from fastopt.schedules import WarmRestarts
    sched = WarmRestarts(1.0, 0.1, 0.001, interval=4)
    x = np.zeros(3)
    opt = optim.Momentum([x], alpha=0.0, schedule=sched)
    lrs = []
    for _ in range(12):
        opt.step([np.ones(3)])
        lrs.append(opt.last_lr[0])
    # golden values of Angel's formulas (docs/semantics.md section 4)
    np.testing.assert_allclose(lrs, [0.868198, 0.55, 0.231802, 0.1, 0.965265, 0.867772,
                                     0.721862, 0.54975, 0.377638, 0.231729, 0.134235, 0.1],
                               atol=1e-6)
    np.testing.assert_allclose(x, -np.sum(lrs), rtol=1e-15)


def test_group_schedules_and_fixed_lr_groups():
    params = make_params()
    opt = optim.Momentum([{"params": params[:2], "schedule": None, "lr": 0.3},
                          {"params": params[2:3], "schedule": lambda s: 0.01 * (s + 1)},
                          {"params": params[3:]}],
                         schedule=lambda s: 0.2)
    opt.step(make_grads(params, 0))
    opt.step(make_grads(params, 1))
    assert opt.last_lr == [0.3, 0.02, 0.2]


def test_schedule_and_lr_conflicts_are_errors():
    params = make_params()
    with pytest.raises(ValueError, match="give lr or schedule, not both"):
        optim.Momentum(params, lr=0.1, schedule=lambda s: 0.1)
    with pytest.raises(ValueError, match=r"give lr, or a schedule"):
        optim.Momentum(params)
    with pytest.raises(ValueError, match=r"param_groups\[0\] sets lr but a schedule"):
        optim.Momentum([{"params": params, "lr": 0.1}], schedule=lambda s: 0.1)
    with pytest.raises(TypeError, match="schedule must be a callable"):
        optim.Adam(params, schedule=0.1)


@pytest.mark.parametrize("bad", [float("nan"), -0.1, "0.1", None])
def test_bad_schedule_value_raises_and_changes_nothing(bad):
    params = make_params()
    opt = optim.Momentum([{"params": params[:2], "schedule": None, "lr": 0.1},
                          {"params": params[2:]}], schedule=lambda s: 0.1 if s == 0 else bad)
    opt.step(make_grads(params, 0))
    before = snapshot(opt, params)
    with pytest.raises((TypeError, ValueError), match=r"schedule\(1\)"):
        opt.step(make_grads(params, 1))
    assert_same(before, snapshot(opt, params))


# -------------------------------------------------------------------- AGC

def test_clipping_wires_agc_into_momentum():
    rng = np.random.default_rng(5)
    params = [rng.standard_normal(s).astype(np.float32) for s in [(8, 6), (8,), (4, 8), (4,)]]
    opt = optim.Momentum([{"params": params[:2], "clipping": 0.02},
                          {"params": params[2:], "clipping": [0.05, None]}],
                         lr=0.1, alpha=0.9, norm_coefficient=0.01, clip_eps=1e-2)
    mine = [p.copy() for p in params]
    v = [np.zeros_like(p) for p in params]
    for k in range(3):
        grads = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
        opt.step(grads)
        gc = [g.copy() for g in grads]
        fastopt.agc(mine[:2], gc[:2], clipping=0.02, eps=1e-2)
        fastopt.agc(mine[2], gc[2], clipping=0.05, eps=1e-2)
        fastopt.momentum(mine, gc, v, lr=0.1, t=k, alpha=0.9, norm_coefficient=0.01)
        for a, b in zip(params, mine):
            np.testing.assert_array_equal(a, b)


def test_clipping_round_trips_through_a_checkpoint(tmp_path):
    params = make_params()
    opt = optim.Momentum([{"params": params[:2], "clipping": [0.1, None]},
                          {"params": params[2:]}], lr=0.1, clipping=0.05, clip_eps=0.01)
    run(opt, params, 0, 2)
    opt.save(tmp_path / "c.npz")
    other = optim.Momentum([{"params": [p.copy() for p in params[:2]]},
                            {"params": [p.copy() for p in params[2:]]}], lr=0.1)
    other.load(tmp_path / "c.npz")
    assert other.param_groups[0]["clipping"] == [0.1, None]
    assert other.param_groups[1]["clipping"] == 0.05
    assert other.param_groups[1]["clip_eps"] == 0.01


def test_clipping_list_must_match_the_group():
    params = make_params()
    with pytest.raises(ValueError, match=r"\['clipping'\] has 2 entries but the group has 5"):
        optim.Momentum([{"params": params, "clipping": [0.1, None]}], lr=0.1)
    with pytest.raises(ValueError, match=r"clipping must be > 0"):
        optim.Momentum(params, lr=0.1, clipping=0.0)


# ------------------------------------------------------ grad_scale / skips

@pytest.mark.parametrize("name", ["momentum", "adagrad", "adam"])
def test_grad_scale_divides_the_gradients(name):
    cls, kw, _, _, _ = OPTS[name]
    params = make_params()
    twin = [p.copy() for p in params]
    a, b = cls(params, **kw), cls(twin, **kw)
    for k in range(3):
        grads = make_grads(params, k)
        scaled = [np.asarray(g * g.dtype.type(1024.0)) for g in grads]
        kept = [g.copy() for g in scaled]
        a.step(scaled, grad_scale=1024.0)
        b.step([np.asarray(g / g.dtype.type(1024.0)) for g in scaled])
        for g, c in zip(scaled, kept):
            np.testing.assert_array_equal(g, c)  # the inputs are only read
    for x, y in zip(params, twin):
        np.testing.assert_array_equal(x, y, strict=True)
    with pytest.raises(ValueError, match="grad_scale must be > 0"):
        a.step(make_grads(params, 0), grad_scale=0.0)
    with pytest.raises(ValueError, match="grad_scale must be finite"):
        a.step(make_grads(params, 0), grad_scale=float("inf"))


def test_grad_scale_is_not_an_lr_scale():
    """With weight decay the two differ: the scale must divide g only."""
    x = np.array([1.0, 2.0])
    opt = optim.Momentum([x], lr=0.1, norm_coefficient=0.5)
    opt.step([np.array([4.0, 8.0])], grad_scale=4.0)
    np.testing.assert_allclose(x, [1.0 - 0.1 * (0.5 + 1.0), 2.0 - 0.1 * (1.0 + 2.0)])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", ["momentum", "adagrad", "adam"])
def test_skip_if_nonfinite_changes_nothing(name, bad):
    cls, kw, _, _, _ = OPTS[name]
    calls = []
    params = make_params()
    kw = dict(kw)
    del kw["lr"]
    opt = cls([{"params": params[:2]}, {"params": params[2:]}], **kw,
              schedule=lambda s: calls.append(s) or 0.01)
    opt.step(make_grads(params, 0))
    before = snapshot(opt, params)
    n_calls = len(calls)
    grads = make_grads(params, 1)
    grads[3] = grads[3].copy()
    grads[3][...] = bad       # the 0-d tensor of the second group
    kept = [g.copy() for g in grads]
    assert opt.step(grads, skip_if_nonfinite=True) is False
    assert_same(before, snapshot(opt, params))
    assert len(calls) == n_calls  # the schedule was not consulted
    for g, c in zip(grads, kept):
        np.testing.assert_array_equal(g, c)
    assert opt.step(grads, grad_scale=2.0, skip_if_nonfinite=True) is False
    assert_same(before, snapshot(opt, params))
    grads[3][...] = 1.0
    assert opt.step(grads, skip_if_nonfinite=True) is True
    assert opt.steps == 2


def test_skip_if_nonfinite_is_exact_when_a_float32_sum_overflows():
    x = np.zeros(4, np.float32)
    opt = optim.Momentum([x], lr=1e-40)
    g = np.full(4, 3e38, np.float32)       # finite, but its float32 sum is inf
    with np.errstate(over="ignore"):
        assert np.isinf(np.sum(g))
    assert opt.step([g], skip_if_nonfinite=True) is True
    assert opt.steps == 1
    # a scale below 1 can make finite gradients overflow: those are skipped
    assert opt.step([g], grad_scale=0.5, skip_if_nonfinite=True) is False
    assert opt.steps == 1


# ---------------------------------------------------------- bad arguments

def test_constructor_errors():
    p = make_params()
    with pytest.raises(TypeError, match=r"params\[1\] must be a numpy.ndarray"):
        optim.Momentum([p[0], [1.0]], lr=0.1)
    with pytest.raises(TypeError, match=r"params\[0\] has dtype int64"):
        optim.Momentum([np.arange(3)], lr=0.1)
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"params\[0\] is read-only"):
        optim.Adagrad([ro], lr=0.1)
    with pytest.raises(ValueError, match="share memory.*only once"):
        optim.Adam([{"params": [p[0]]}, {"params": [p[0]]}], lr=0.1)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['momentum'\]"):
        optim.Momentum([{"params": p, "momentum": 0.9}], lr=0.1)
    with pytest.raises(ValueError, match="params is empty"):
        optim.Adam([], lr=0.1)
    with pytest.raises(TypeError, match="list of arrays or a list of parameter groups"):
        optim.Adam(p[0], lr=0.1)
    with pytest.raises(ValueError, match="alpha must be < 1.0"):
        optim.Adam(p, lr=0.1, alpha=1.0)
    with pytest.raises(ValueError, match=r"param_groups\[1\]\['epsilon'\] must be >= 0"):
        optim.Adagrad([{"params": p[:1]}, {"params": p[1:], "epsilon": -1.0}], lr=0.1)
    with pytest.raises(ValueError, match="lr must be a finite number >= 0"):
        optim.Momentum(p, lr=-1.0)


def test_step_errors_change_nothing():
    params = make_params()
    opt = optim.Momentum([{"params": params[:2]}, {"params": params[2:]}], lr=0.1)
    opt.step(make_grads(params, 0))
    before = snapshot(opt, params)
    grads = make_grads(params, 1)
    with pytest.raises(ValueError, match="grads has 4 entries but the optimizer has 5"):
        opt.step(grads[:4])
    bad = list(grads)
    bad[4] = bad[4].astype(np.float32 if bad[4].dtype == np.float64 else np.float64)
    with pytest.raises(TypeError, match=r"grads\[4\] has dtype .* params\[4\]"):
        opt.step(bad)
    bad = list(grads)
    bad[2] = np.ones((4, 4), grads[2].dtype)
    with pytest.raises(ValueError, match=r"grads\[2\] with shape \(4, 4\) cannot be broadcast"):
        opt.step(bad)
    bad = list(grads)
    bad[3] = 1.0
    with pytest.raises(TypeError, match=r"grads\[3\] must be a numpy.ndarray"):
        opt.step(bad)
    bad = list(grads)
    bad[2] = opt.state["v"][2].reshape(-1)[1:7].reshape(2, 3, 1)  # part of a state
    with pytest.raises(ValueError, match="partially overlaps"):
        opt.step(bad)
    assert_same(before, snapshot(opt, params))
    # single group: the kernel's own check, restated with the optimizer's numbering
    single = optim.Adam(params, lr=0.1)
    with pytest.raises(TypeError, match=r"fastopt.optim.Adam.step: grads\[4\] has dtype"):
        single.step(grads[:4] + [grads[4].astype(np.float16)])
    assert single.steps == 0 and not single.state["v"][0].any()


def test_interleaved_strided_parameters_and_a_gradient_overlapping_one():
    base = np.zeros(12)
    a, b = base[0::2], base[1::2]   # no shared element, interleaved byte ranges
    opt = optim.Momentum([{"params": [a]}, {"params": [b]}], lr=0.1)
    opt.step([np.ones(6), np.ones(6)])
    np.testing.assert_array_equal(base, -0.1)
    with pytest.raises(ValueError, match=r"grads\[0\] partially overlaps params\[[01]\]"):
        opt.step([base[3:9], np.ones(6)])
    np.testing.assert_array_equal(base, -0.1)


def test_gradient_that_is_another_groups_parameter_is_read_before_writing():
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    opt = optim.Momentum([{"params": [a]}, {"params": [b]}], lr=0.1)
    opt.step([np.array([0.5, 0.5]), a])   # b's gradient is a's memory
    np.testing.assert_array_equal(b, [3.0 - 0.1, 4.0 - 0.2])


# ------------------------------------------------------------ checkpoints

def run(opt, params, k0, n):
    for k in range(k0, k0 + n):
        opt.step(make_grads(params, k))


@pytest.mark.parametrize("name", list(OPTS))
def test_resume_from_a_checkpoint_is_bit_exact(name, tmp_path):
    cls, kw, _, _, _ = OPTS[name]
    kw = dict(kw)
    del kw["lr"]
    from fastopt.schedules import WarmRestarts
    sched = WarmRestarts(0.05, 0.001, interval=3)
    params = make_params()
    opt = cls(params, schedule=sched, **kw)
    run(opt, params, 0, 5)
    saved_params = [p.copy() for p in params]
    opt.save(tmp_path / "ckpt.npz")
    run(opt, params, 5, 5)

    resumed = [p.copy() for p in saved_params]
    opt2 = cls(resumed, schedule=sched, contiguous_state=True, **kw)
    opt2.load(tmp_path / "ckpt.npz")
    assert opt2.steps == 5
    run(opt2, resumed, 5, 5)
    for x, y in zip(params, resumed):
        np.testing.assert_array_equal(x, y, strict=True)
    for s in opt.state:
        for x, y in zip(opt.state[s], opt2.state[s]):
            np.testing.assert_array_equal(x, y, strict=True)
    assert not [f for f in os.listdir(tmp_path) if f != "ckpt.npz"]  # no temp files


def test_state_dict_round_trip_and_hyperparameters():
    params = make_params()
    opt = optim.Momentum([{"params": params[:2], "norm_coefficient": 0.25},
                          {"params": params[2:], "lr": 0.2}], lr=0.1, nesterov=True)
    run(opt, params, 0, 2)
    sd = opt.state_dict()
    assert sd["optimizer"] == "Momentum" and sd["steps"] == 2
    assert sd["param_groups"][0]["norm_coefficient"] == 0.25
    other = optim.Momentum([{"params": [p.copy() for p in params[:2]]},
                            {"params": [p.copy() for p in params[2:]]}], lr=0.5)
    other.load_state_dict(sd)
    assert other.param_groups[0]["norm_coefficient"] == 0.25
    assert other.param_groups[0]["lr"] == 0.1 and other.param_groups[1]["lr"] == 0.2
    assert other.param_groups[1]["nesterov"] is True
    assert other.steps == opt.steps == 2
    for a, b in zip(opt.state["v"], other.state["v"]):
        np.testing.assert_array_equal(a, b, strict=True)
    # the snapshot holds copies: stepping on does not change it
    v0 = sd["state"]["v"][0].copy()
    opt.step(make_grads(params, 9))
    np.testing.assert_array_equal(sd["state"]["v"][0], v0)


def _trained(cls=optim.Adam, **kw):
    params = make_params()
    opt = cls(params, lr=0.01, **kw)
    run(opt, params, 0, 3)
    return opt, params


def _check_unchanged(opt, params, fn, match):
    before = snapshot(opt, params)
    with pytest.raises(CheckpointError, match=match):
        fn()
    assert_same(before, snapshot(opt, params))


def _rewrite(src, dst, change):
    with np.load(src) as z:
        entries = {k: z[k] for k in z.files}
    change(entries)
    np.savez(dst, **entries)


@pytest.mark.parametrize("case", ["shape", "dtype", "missing", "extra", "optimizer",
                                  "groups", "hyper", "meta"])
def test_mismatched_checkpoint_file_is_rejected(case, tmp_path):
    src = tmp_path / "ok.npz"
    donor, _ = _trained()
    donor.save(src)
    opt, params = _trained()
    opt.param_groups[0]["lr"] = 0.5   # distinct from the donor's
    bad = tmp_path / "bad.npz"
    match = {
        "shape": r"state 'v' of params\[2\] has shape \(3, 4\) but params\[2\] has shape",
        "dtype": r"state 'h' of params\[1\] has dtype float32 but params\[1\] has float64",
        "missing": r"no 'state.h.4' entry",
        "extra": r"unexpected entries \['state.x.0'\]",
        "optimizer": r"saved by fastopt.optim.Momentum, not Adam",
        "groups": r"checkpoint has 2 parameter group\(s\), the optimizer 1",
        "hyper": r"hyperparameters are invalid.*\['alpha'\] must be < 1.0",
        "meta": r"no 'meta' entry",
    }[case]
    if case == "optimizer":
        p = make_params()
        m = optim.Momentum(p, lr=0.1)
        run(m, p, 0, 1)
        m.save(bad)
    elif case == "groups":
        p = make_params()
        optim.Adam([{"params": p[:1]}, {"params": p[1:]}], lr=0.1).save(bad)
    else:
        def change(e):
            import json
            if case == "shape":
                e["state.v.2"] = e["state.v.0"]
            elif case == "dtype":
                e["state.h.1"] = e["state.h.1"].astype(np.float32)
            elif case == "missing":
                del e["state.h.4"]
            elif case == "extra":
                e["state.x.0"] = e["state.v.0"]
            elif case == "hyper":
                meta = json.loads(str(e["meta"][()]))
                meta["param_groups"][0]["alpha"] = 1.5
                e["meta"] = np.array(json.dumps(meta))
            elif case == "meta":
                del e["meta"]
        _rewrite(src, bad, change)
    _check_unchanged(opt, params, lambda: opt.load(bad), match)


@pytest.mark.parametrize("case", ["truncated", "garbage", "text", "npy", "empty", "flipped"])
def test_corrupt_checkpoint_file_is_rejected(case, tmp_path):
    src = tmp_path / "ok.npz"
    donor, _ = _trained()
    donor.save(src)
    data = src.read_bytes()
    bad = tmp_path / "bad.npz"
    if case == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif case == "garbage":
        bad.write_bytes(bytes(range(256)) * 10)
    elif case == "text":
        bad.write_text("this is not a checkpoint\n")
    elif case == "npy":
        with bad.open("wb") as fh:
            np.save(fh, np.zeros(3))
    elif case == "empty":
        bad.write_bytes(b"")
    elif case == "flipped":  # a byte of array data changed: the zip CRC catches it
        with zipfile.ZipFile(src) as z:
            h = z.getinfo("state.v.0.npy").header_offset
        name_len, extra_len = struct.unpack("<HH", data[h + 26:h + 30])
        pos = h + 30 + name_len + extra_len + 128 + 8   # past the .npy header
        bad.write_bytes(data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1:])
    opt, params = _trained()
    _check_unchanged(opt, params, lambda: opt.load(bad),
                     "not a readable fastopt checkpoint|not an .npz|single .npy")


def test_missing_checkpoint_file_is_file_not_found(tmp_path):
    opt, _ = _trained()
    with pytest.raises(FileNotFoundError):
        opt.load(tmp_path / "nope.npz")


@pytest.mark.parametrize("case", ["not a dict", "missing", "format", "steps", "state",
                                  "count", "array"])
def test_bad_state_dict_is_rejected(case):
    donor, _ = _trained()
    opt, params = _trained()
    sd = donor.state_dict()
    if case == "not a dict":
        sd = [sd]
    elif case == "missing":
        del sd["steps"]
    elif case == "format":
        sd["format"] = "torch"
    elif case == "steps":
        sd["steps"] = -1
    elif case == "state":
        del sd["state"]["h"]
    elif case == "count":
        sd["state"]["v"] = sd["state"]["v"][:3]
    elif case == "array":
        sd["state"]["v"][2] = sd["state"]["v"][2].tolist()
    _check_unchanged(opt, params, lambda: opt.load_state_dict(sd), "fastopt.optim.Adam")


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    opt, params = _trained()
    opt.save(path)
    good = path.read_bytes()
    run(opt, params, 3, 1)

    def crash(fh, **arrays):
        fh.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        opt.save(path)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["ckpt.npz"]
    monkeypatch.undo()
    opt.save(path)
    fresh, _ = _trained()
    fresh.load(path)
    assert fresh.steps == 4


def test_repr_and_state_views():
    params = make_params()
    opt = optim.Adagrad(params, lr=0.1, initial_accumulator_value=0.5)
    assert "fastopt.optim.Adagrad(5 parameters in 1 group(s), steps=0)" == repr(opt)
    assert all((h == 0.5).all() for h in opt.state["h"])
    assert opt.params[0] is params[0]
