"""fastopt.optim's whole step: AdamW / Adam against torch,
one C call over every group, step options, and a rejected step changing
nothing."""
import math

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

torch = pytest.importorskip("torch")


def _params(seed=0, sizes=(300, 40, 7, 1025)):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n) for n in sizes]


def _grads(rng, xs, scale=1.0):
    return [rng.standard_normal(x.shape) * scale for x in xs]


@pytest.mark.parametrize("cls,tcls", [("AdamW", "AdamW"), ("Adam", "Adam")])
def test_two_groups_match_torch(cls, tcls):
    """Unscale (1024) + clip_grad_norm_(1.0) + the rule, two groups with their
    own lr / weight decay / amsgrad, 20 steps, float64."""
    xs = _params()
    groups = [{"params": xs[:2], "lr": 0.01, "weight_decay": 0.1},
              {"params": xs[2:], "lr": 0.003, "weight_decay": 0.0, "amsgrad": True,
               "maximize": True}]
    ps = [torch.tensor(x.copy(), requires_grad=True) for x in xs]
    opt_t = getattr(torch.optim, tcls)(
        [{"params": ps[:2], "lr": 0.01, "weight_decay": 0.1},
         {"params": ps[2:], "lr": 0.003, "weight_decay": 0.0, "amsgrad": True,
          "maximize": True}], betas=(0.8, 0.99))
    opt = getattr(fo, cls)(groups, betas=(0.8, 0.99))
    rng = np.random.default_rng(1)
    for _ in range(20):
        gs = _grads(rng, xs, 1024.0)
        for p, g in zip(ps, gs):
            p.grad = torch.tensor(g) / 1024.0
        tn = torch.nn.utils.clip_grad_norm_(ps, 1.0)
        opt_t.step()
        assert opt.step(gs, grad_scale=1024.0, max_grad_norm=1.0) is True
        assert opt.last_grad_norm == pytest.approx(float(tn), rel=1e-14)
    for x, p in zip(xs, ps):
        np.testing.assert_allclose(x, p.detach().numpy(), rtol=1e-13, atol=1e-15)
    st = opt.state
    for i, p in enumerate(ps):
        np.testing.assert_allclose(st["exp_avg_sq"][i], opt_t.state[p]["exp_avg_sq"].numpy(),
                                   rtol=1e-13, atol=1e-300)
    assert opt.steps == 20


def test_step_equals_reference_bits():
    """One optimizer step = the reference whole step, bit for bit (mixed
    float32/float64, two groups, every option)."""
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal(n).astype(dt) for n, dt in
          [(70001, np.float32), (33, np.float64), (1025, np.float32), (5, np.float64)]]
    x0 = [x.copy() for x in xs]
    opt = fo.AdamW([{"params": xs[:2]}, {"params": xs[2:], "lr": 0.5, "amsgrad": True}],
                   lr=0.01)
    gs = [(rng.standard_normal(x.shape) * 8).astype(x.dtype) for x in xs]
    opt.step(gs, grad_scale=8.0, max_grad_norm=3.0, clip_convention="optax",
             norm_type=math.inf)
    hp = {"rule": "adamw_torch", "alpha": 0.9, "beta": 0.999, "eps": 1e-8, "decay": 0.01,
          "t": 1}
    z = [np.zeros_like(x) for x in x0]
    _, norm, want, _ = ref.step(x0, gs, [(a, a, a) for a in z],
                                [dict(hp, lr=0.01), dict(hp, lr=0.5, amsgrad=True)],
                                [0, 0, 1, 1], grad_scale=8.0, max_norm=3.0,
                                convention="optax", norm_type=math.inf)
    assert opt.last_grad_norm == norm
    for a, b in zip(xs, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("cls", ["OnnxMomentum", "OnnxAdagrad", "OnnxAdam", "AdamW", "Adam"])
def test_readonly_param_of_group_one_changes_nothing(cls):
    """Regression: a parameter of group 1 made read-only after the
    optimizer was built: step() raises, and group 0, every state and the
    step count are untouched (a retry does not apply group 0 twice)."""
    xs = _params(3)
    opt = getattr(fo, cls)([{"params": xs[:2]}, {"params": xs[2:]}], lr=0.1)
    rng = np.random.default_rng(4)
    opt.step(_grads(rng, xs))
    before = [x.copy() for x in xs]
    states = {k: [a.copy() for a in v] for k, v in opt.state.items()}
    xs[3].flags.writeable = False
    with pytest.raises(ValueError, match=r"params\[3\] is read-only"):
        opt.step(_grads(rng, xs), max_grad_norm=1.0)
    for a, b in zip(xs, before):
        assert np.array_equal(a, b)
    for k, v in opt.state.items():
        for a, b in zip(v, states[k]):
            assert np.array_equal(a, b)
    assert opt.steps == 1


def test_gradient_aliasing_an_earlier_groups_param():
    """A gradient of group 1 that IS a parameter of group 0 is read as it was
    before the step (copied), not after group 0 was written."""
    xs = _params(5, sizes=(50, 50))
    ys = [x.copy() for x in xs]
    opt = fo.AdamW([{"params": [xs[0]]}, {"params": [xs[1]]}], lr=0.1)
    ref_opt = fo.AdamW([{"params": [ys[0]]}, {"params": [ys[1]]}], lr=0.1)
    g0 = np.ones(50)
    opt.step([g0, xs[0]])
    ref_opt.step([g0, ys[0].copy()])
    for a, b in zip(xs, ys):
        assert np.array_equal(a, b)


def test_one_c_call_for_every_group(monkeypatch):
    """Three groups, one C call (the unprepared route is spied on; the
    prepared one is the same single fo_step call)."""
    calls = []
    real = fastopt._ext.step
    monkeypatch.setattr(fastopt._ext, "StepPlan", type("NoPlan", (), {
        "make": staticmethod(lambda *a: None)}))

    def spy(*args, **kw):
        calls.append(len(args[0]))
        return real(*args, **kw)
    monkeypatch.setattr(fastopt._ext, "step", spy)
    xs = _params(6)
    opt = fo.OnnxMomentum([{"params": xs[:1]}, {"params": xs[1:3], "lr": 0.5},
                       {"params": xs[3:], "nesterov": True}], lr=0.1)
    opt.step(_grads(np.random.default_rng(7), xs), grad_scale=2.0)
    assert calls == [4]


def test_skip_and_last_grad_norm():
    xs = _params(8)
    calls = []
    opt = fo.AdamW(xs, schedule=lambda s: calls.append(s) or 0.1 / (1 + s))
    gs = _grads(np.random.default_rng(9), xs)
    gs[2] = gs[2].copy()
    gs[2][0] = np.nan
    before = [x.copy() for x in xs]
    assert opt.step(gs, skip_if_nonfinite=True, max_grad_norm=1.0) is False
    assert math.isnan(opt.last_grad_norm) and opt.steps == 0
    assert calls == []                  # a skipped step does not consult the schedule
    assert not opt.last_step_info.applied
    for a, b in zip(xs, before):
        assert np.array_equal(a, b)
    gs[2][0] = 0.0
    assert opt.step(gs, skip_if_nonfinite=True, max_grad_norm=1.0) is True
    assert opt.last_grad_norm == pytest.approx(
        math.sqrt(sum(float(g @ g) for g in gs)), rel=1e-14)


def test_momentum_agc_groups_take_step_options():
    xs = [x.reshape(1, -1) for x in _params(10)]
    ys = [x.copy() for x in xs]
    opt = fo.OnnxMomentum(xs, lr=0.1, clipping=0.01)
    twin = fo.OnnxMomentum(ys, lr=0.1, clipping=0.01)
    gs = [g.reshape(1, -1) for g in _grads(np.random.default_rng(11), _params(10), 64.0)]
    opt.step(gs, grad_scale=64.0, max_grad_norm=0.5)
    clipped = [g.copy() for g in gs]
    norm = fastopt.clip_grads(clipped, max_norm=0.5, grad_scale=64.0)
    twin.step(clipped)
    assert opt.last_grad_norm == norm
    for a, b in zip(xs, ys):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("kw,match", [
    ({"max_grad_norm": 0.0}, "max_grad_norm must be > 0"),
    ({"max_grad_norm": math.nan}, "max_grad_norm must be > 0"),
    ({"norm_type": 3}, "norm_type must be 2.0 or math.inf"),
    ({"grad_scale": 0.0}, "grad_scale must be > 0"),
    ({"grad_scale": math.nan}, "grad_scale must be finite"),
])
def test_bad_step_options(kw, match):
    xs = _params(12)
    opt = fo.AdamW(xs, lr=0.1)
    before = [x.copy() for x in xs]
    with pytest.raises(ValueError, match="fastopt.optim.AdamW.step: " + match):
        opt.step(_grads(np.random.default_rng(13), xs), **kw)
    assert opt.steps == 0
    for a, b in zip(xs, before):
        assert np.array_equal(a, b)


def test_adamw_checkpoint_roundtrip(tmp_path):
    xs = _params(14)
    opt = fo.AdamW(xs, lr=0.1, amsgrad=True)
    rng = np.random.default_rng(15)
    opt.step(_grads(rng, xs))
    path = tmp_path / "ckpt.npz"
    opt.save(path)
    ys = [x.copy() for x in xs]
    twin = fo.AdamW(ys, lr=0.1, amsgrad=True)
    twin.load(path)
    gs = _grads(rng, xs)
    opt.step(gs)
    twin.step(gs)
    for a, b in zip(xs, ys):
        assert np.array_equal(a, b)


def test_prepared_step_then_missing_and_strided_grads():
    """The prepared route (every gradient given) and the full route (a None
    gradient, a strided gradient) give the same bits as a fresh optimizer."""
    xs = _params(16)
    ys = [x.copy() for x in xs]
    opt = fo.AdamW(xs, lr=0.05)
    rng = np.random.default_rng(17)
    seq = []
    for k in range(4):
        gs = _grads(rng, xs)
        if k == 1:
            gs[2] = None
        if k == 2:
            gs[0] = np.repeat(gs[0], 2)[::2]          # strided view
        seq.append(gs)
        opt.step(gs, max_grad_norm=1.0)
    assert opt._plan_all[1] is not None
    opt2 = fo.AdamW(ys, lr=0.05)          # the same steps through the full route only
    for gs in seq:
        opt2._plan_all = ((2,), None)      # "prepared: none": the full route
        opt2.step(gs, max_grad_norm=1.0)
    for a, b in zip(xs, ys):
        assert np.array_equal(a, b)
