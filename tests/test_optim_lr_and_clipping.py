"""fastopt.optim: the learning rate from schedules (callables and
fastopt.schedules objects, per group) and AGC clipping wired into Momentum.
"""

import numpy as np
import pytest
from optim_cases import assert_same, make_grads, make_params, run, snapshot

import fastopt
from fastopt import optim

# -------------------------------------------------------------- schedules

def test_schedule_supplies_the_lr_of_each_step():
    calls = []

    def sched(step):
        calls.append(step)
        return 0.1 / (1 + step)

    params = make_params()
    opt = optim.OnnxAdam(params, schedule=sched)
    mine = [p.copy() for p in params]
    v = [np.zeros_like(p) for p in params]
    h = [np.zeros_like(p) for p in params]
    assert opt.current_lr() == 0.1
    for k in range(4):
        grads = make_grads(params, k)
        opt.step(grads)
        fastopt.onnx_adam(mine, grads, v, h, lr=0.1 / (1 + k), t=k + 1)
        assert opt.last_lr == [0.1 / (1 + k)]
    for a, b in zip(params, mine):
        np.testing.assert_array_equal(a, b)
    assert calls[-4:] == [0, 1, 2, 3]


def test_fastopt_schedule_objects_drive_the_lr():
    from fastopt.schedules import WarmRestarts
    sched = WarmRestarts(1.0, 0.1, 0.001, interval=4)
    x = np.zeros(3)
    opt = optim.OnnxMomentum([x], alpha=0.0, schedule=sched)
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
    opt = optim.OnnxMomentum([{"params": params[:2], "schedule": None, "lr": 0.3},
                          {"params": params[2:3], "schedule": lambda s: 0.01 * (s + 1)},
                          {"params": params[3:]}],
                         schedule=lambda s: 0.2)
    opt.step(make_grads(params, 0))
    opt.step(make_grads(params, 1))
    assert opt.last_lr == [0.3, 0.02, 0.2]


def test_schedule_and_lr_conflicts_are_errors():
    params = make_params()
    with pytest.raises(ValueError, match="give lr or schedule, not both"):
        optim.OnnxMomentum(params, lr=0.1, schedule=lambda s: 0.1)
    with pytest.raises(ValueError, match=r"give lr, or a schedule"):
        optim.OnnxMomentum(params)
    with pytest.raises(ValueError, match=r"param_groups\[0\] sets lr but a schedule"):
        optim.OnnxMomentum([{"params": params, "lr": 0.1}], schedule=lambda s: 0.1)
    with pytest.raises(TypeError, match="schedule must be a callable"):
        optim.OnnxAdam(params, schedule=0.1)


@pytest.mark.parametrize("edit", [{"lr": 0.5}, {"schedule": lambda s: 0.5}])
def test_a_group_edited_to_both_lr_and_schedule_is_refused_at_the_step(edit):
    """The constructor refuses a group with both; so does a step after an
    edit gives one both (the schedule would silently win), changing nothing."""
    params = make_params()
    opt = optim.OnnxMomentum([{"params": params[:2], "schedule": lambda s: 0.1},
                              {"params": params[2:]}], lr=0.1)
    opt.step(make_grads(params, 0))
    opt.param_groups[0 if "lr" in edit else 1].update(edit)
    before = snapshot(opt, params)
    with pytest.raises(ValueError, match=r"param_groups\[[01]\] has an lr \(0\.[15]\) and a "
                       r"schedule, which supplies its learning rate"):
        opt.step(make_grads(params, 1))
    assert_same(before, snapshot(opt, params))
    assert opt.steps == 1


@pytest.mark.parametrize("bad", [float("nan"), -0.1, "0.1", None])
def test_bad_schedule_value_raises_and_changes_nothing(bad):
    params = make_params()
    opt = optim.OnnxMomentum([{"params": params[:2], "schedule": None, "lr": 0.1},
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
    opt = optim.OnnxMomentum([{"params": params[:2], "clipping": 0.02},
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
        fastopt.onnx_momentum(mine, gc, v, lr=0.1, t=k, alpha=0.9, norm_coefficient=0.01)
        for a, b in zip(params, mine):
            np.testing.assert_array_equal(a, b)


def test_clipping_round_trips_through_a_checkpoint(tmp_path):
    params = make_params()
    opt = optim.OnnxMomentum([{"params": params[:2], "clipping": [0.1, None]},
                          {"params": params[2:]}], lr=0.1, clipping=0.05, clip_eps=0.01)
    run(opt, params, 0, 2)
    opt.save(tmp_path / "c.npz")
    other = optim.OnnxMomentum([{"params": [p.copy() for p in params[:2]]},
                            {"params": [p.copy() for p in params[2:]]}], lr=0.1)
    other.load(tmp_path / "c.npz")
    assert other.param_groups[0]["clipping"] == [0.1, None]
    assert other.param_groups[1]["clipping"] == 0.05
    assert other.param_groups[1]["clip_eps"] == 0.01


def test_clipping_list_must_match_the_group():
    params = make_params()
    with pytest.raises(ValueError, match=r"\['clipping'\] has 2 entries but the group has 5"):
        optim.OnnxMomentum([{"params": params, "clipping": [0.1, None]}], lr=0.1)
    with pytest.raises(ValueError, match=r"clipping must be > 0"):
        optim.OnnxMomentum(params, lr=0.1, clipping=0.0)


def test_n_threads_edited_after_build_reaches_the_agc_kernel(monkeypatch):
    """AGC groups step by a kernel call per group; like the fused step, it
    takes the optimizer's n_threads as it is at the step, not as built."""
    seen = []
    kernel = optim.OnnxMomentum._KERNEL
    monkeypatch.setattr(optim.OnnxMomentum, "_KERNEL",
                        staticmethod(lambda *a, **kw: seen.append(kw["n_threads"])
                                     or kernel(*a, **kw)))
    params = make_params()
    opt = optim.OnnxMomentum(params, lr=0.1, clipping=0.05, n_threads=1)
    opt.step(make_grads(params, 0))
    opt.n_threads = 2
    opt.step(make_grads(params, 1))
    assert seen == [1, 2]
