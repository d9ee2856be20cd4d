"""What every rule built from a TorchRule row (fastopt/_rules.py) must do,
checked once for all of them: a checkpoint of its fastopt.optim class
resumes bit for bit, and its three front ends (the public function, the
fastopt.optim class, the fastopt.torch drop-in) give the same bits. Each
rule's own file checks its math (tests/test_<rule>.py)."""
import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt import _rules

# hyperparameters away from the defaults where a rule has them, so the
# paths they switch on are the ones resumed and compared
NON_DEFAULT = {"weight_decay": 0.01, "momentum": 0.9, "centered": True,
               "decoupled_weight_decay": True}
RULES = {r.name: r for r in _rules.TORCH_RULES}


def _kw(rule):
    names = {a.name for a in rule.args if a.check is not None}
    return {k: v for k, v in NON_DEFAULT.items() if k in names}


def _per_call(rule, step, carried):
    """The public function's arguments beyond the hyperparameters: the step
    count of a counted rule, the carried scalar's array (float32, torch's
    default scalar type) of a rule that has one."""
    out = {"step": step} if rule.counted else {}
    if rule.carry is not None:
        out[rule.carry.name] = carried
    return out


def _carried(rule):
    return None if rule.carry is None else np.array(rule.carry.start, np.float32)


@pytest.mark.parametrize("name", sorted(RULES))
def test_checkpoint_round_trip(name, tmp_path):
    rule, rng = RULES[name], np.random.default_rng(10)
    cls = getattr(fo, rule.cls)
    xs = [rng.standard_normal(20), rng.standard_normal(3)]
    opt = cls(xs, lr=0.01, **_kw(rule))
    grads = [[rng.standard_normal(x.shape) for x in xs] for _ in range(12)]
    for g in grads[:6]:
        opt.step(g)
    opt.save(tmp_path / "ck.npz")
    ys = [x.copy() for x in xs]
    for g in grads[6:]:
        opt.step(g)
    opt2 = cls(ys, lr=0.01, **_kw(rule))
    opt2.load(tmp_path / "ck.npz")
    for g in grads[6:]:
        opt2.step(g)
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", sorted(RULES))
def test_the_three_front_ends_give_the_same_bits(name, dtype):
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rule, rng = RULES[name], np.random.default_rng(2)
    kw = dict(_kw(rule), lr=0.003)
    x0 = rng.standard_normal(301).astype(dtype)
    ox = x0.copy()
    opt = getattr(fo, rule.cls)([ox], **kw)
    p = torch.nn.Parameter(torch.tensor(x0.copy()))
    topt = getattr(ft, rule.cls)([p], **kw)
    fx = x0.copy()
    # the function names each state list after torch's state, plural
    states = {f"{s}s": np.zeros_like(x0)
              for s in rule.slots(dict(_rules.defaults(rule), **kw))}
    fn, carried = getattr(fastopt, rule.name), _carried(rule)
    for step in range(1, 21):
        g = rng.standard_normal(301).astype(dtype)
        fn(fx, g, **states, **kw, **_per_call(rule, step, carried))
        opt.step([g])
        p.grad = torch.tensor(g.copy())
        topt.step()
    np.testing.assert_array_equal(ox, fx)
    np.testing.assert_array_equal(p.detach().numpy(), fx)
    if rule.carry is not None:      # the three keep the same carried scalar
        name = rule.carry.name
        assert opt.param_groups[0][name] == float(carried) == topt.state[p][name].item()


# each rule's hyperparameters away from torch's defaults (the other branch of a
# lerp, decays on), for the comparison with torch.optim
TORCH_KW = {"adamax": [{}, dict(weight_decay=0.05, maximize=True, betas=(0.3, 0.9))],
            "adadelta": [{}, dict(weight_decay=0.05, maximize=True, rho=0.5)],
            "radam": [{}, dict(weight_decay=0.05, maximize=True, betas=(0.3, 0.9)),
                      dict(weight_decay=0.05, decoupled_weight_decay=True)],
            "nadam": [{}, dict(weight_decay=0.05, maximize=True, betas=(0.3, 0.9)),
                      dict(weight_decay=0.05, decoupled_weight_decay=True,
                           momentum_decay=0.02)]}
CASES = [(n, i) for n in sorted(TORCH_KW) for i in range(len(TORCH_KW[n]))]


@pytest.mark.parametrize("name,case", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_follows_torch_within_its_own_spread(name, case, dtype):
    """300 steps of the public function against torch.optim's for-loop and
    foreach steps on the same run: fastopt within the distance between
    torch's two (1e-12 of the scale in float64, 1e-5 in float32); the
    drop-in keeps torch's state names and count."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rule, kw = RULES[name], dict(TORCH_KW[name][case], lr=0.003)
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal(301).astype(dtype)
    fx = x0.copy()
    states = {f"{s}s": np.zeros_like(x0)
              for s in rule.slots(dict(_rules.defaults(rule), **kw))}
    cls = getattr(torch.optim, rule.cls)
    ps = [torch.nn.Parameter(torch.tensor(x0.copy())) for _ in range(3)]
    topts = [getattr(ft, rule.cls)([ps[0]], **kw), cls([ps[1]], foreach=False, **kw),
             cls([ps[2]], foreach=True, **kw)]
    fn, carried = getattr(fastopt, rule.name), _carried(rule)
    for step in range(1, 301):
        g = rng.standard_normal(301).astype(dtype)
        fn(fx, g, **states, **kw, **_per_call(rule, step, carried))
        for p, o in zip(ps, topts):
            p.grad = torch.tensor(g.copy())
            o.step()
    dropin, loop, each = (p.detach().numpy() for p in ps)
    np.testing.assert_array_equal(dropin, fx)
    scale = float(np.max(np.abs(loop)))
    tol = 1e-12 if dtype == np.float64 else 1e-5
    assert np.max(np.abs(loop - each)) <= tol * scale
    assert np.max(np.abs(fx - loop)) <= tol * scale
    assert set(topts[0].state[ps[0]]) == set(topts[1].state[ps[1]])
    assert topts[0].state[ps[0]]["step"].item() == 300.0
    for name in [rule.carry.name] if rule.carry is not None else []:
        want = topts[1].state[ps[1]][name]
        assert topts[0].state[ps[0]][name].dtype == want.dtype
        assert topts[0].state[ps[0]][name].item() == want.item() == float(carried)
