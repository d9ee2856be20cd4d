"""NAdam (torch.optim.NAdam's math and names), a rule built from its table
row with a carried scalar (torch's mu_product): ``fastopt.nadam``,
``fastopt.optim.NAdam`` and ``fastopt.torch.NAdam`` against the NumPy
reference (bit for bit), the product's rounding in its own dtype and its
life through skipped steps, checkpoints and torch's state_dict, torch's
signature and bad inputs (the front ends agreeing and 300 steps against
torch.optim.NAdam: tests/test_table_rules.py)."""
import copy
import inspect
import math

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

FLAGS = [dict(weight_decay=w, decoupled_weight_decay=d, maximize=m, betas=b)
         for w, d in ((0.0, False), (0.05, False), (0.05, True)) for m in (False, True)
         for b in ((0.9, 0.999), (0.3, 0.9))]
IDS = ["wd%g-dec%d-max%d-b1%g" % (f["weight_decay"], f["decoupled_weight_decay"],
                                  f["maximize"], f["betas"][0]) for f in FLAGS]


@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 9, 1023, 70_001])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    m = rng.standard_normal(n).astype(dtype)
    v = np.abs(rng.standard_normal(n)).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    g[:3] = [np.nan, np.inf, -0.0][: min(3, n)]
    for step, kind in ((1, np.float32), (2, np.float64), (40, np.float32)):
        held = kind(0.37) if step > 1 else kind(1.0)
        want = ref.nadam_torch(x, -g if kw["maximize"] else g, m, v, held, lr=0.01,
                               step=step, beta1=kw["betas"][0], beta2=kw["betas"][1],
                               weight_decay=kw["weight_decay"], momentum_decay=0.01,
                               decoupled=kw["decoupled_weight_decay"])
        xs, ms, vs, mp = x.copy(), m.copy(), v.copy(), np.array(held)
        fastopt.nadam(xs, g, ms, vs, step=step, mu_product=mp, lr=0.01, momentum_decay=0.01,
                      n_threads=n_threads, **kw)
        for got, w in zip((xs, ms, vs), want):
            np.testing.assert_array_equal(got, w)
        assert mp.dtype == kind and mp[()] == want[3]


def test_the_same_bits_for_every_thread_count():
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(n) for n in (5, 4099, 70_001)]
    outs = []
    for n_threads in (1, 2, 3):
        opt = fo.NAdam([x.copy() for x in xs], lr=0.01, weight_decay=0.01,
                       n_threads=n_threads)
        g = np.random.default_rng(4)
        for _ in range(4):
            opt.step([g.standard_normal(x.shape) for x in xs])
        outs.append((opt.params, opt.state, opt.param_groups[0]["mu_product"]))
    for params, state, mp in outs[1:]:
        for a, b in zip(params, outs[0][0]):
            np.testing.assert_array_equal(a, b)
        for name in state:
            for a, b in zip(state[name], outs[0][1][name]):
                np.testing.assert_array_equal(a, b)
        assert mp == outs[0][2]


def test_the_product_is_rounded_in_its_own_dtype():
    # torch multiplies its float32 scalar tensor by the Python float mu_t in float32;
    # a float64 tensor (torch's default dtype float64, or after load_state_dict onto
    # float64 parameters) keeps the product in double
    b1, md = 0.9, 4e-3
    mu = [b1 * (1 - 0.5 * 0.96 ** (s * md)) for s in (1, 2, 3)]
    for kind in (np.float32, np.float64):
        mp = np.array(1.0, kind)
        for s in (1, 2, 3):
            fastopt.nadam(np.ones(3), np.ones(3), np.zeros(3), np.zeros(3), step=s,
                          mu_product=mp)
        want = kind(1.0)
        for u in mu:
            want = want * kind(u)
        assert mp.dtype == kind and mp[()] == want


def test_a_skipped_step_leaves_the_product():
    x, mp = np.ones(4), np.array(1.0, np.float32)
    info = fastopt.nadam(x, np.array([1.0, np.nan, 0, 0]), np.zeros(4), np.zeros(4), step=1,
                         mu_product=mp, skip_if_nonfinite=True)
    assert not info.applied and mp[()] == 1.0 and (x == 1).all()
    opt = fo.NAdam([np.ones(4)])
    assert not opt.step([np.array([np.inf, 0, 0, 0])], skip_if_nonfinite=True)
    assert opt.param_groups[0]["mu_product"] == 1.0
    assert opt.step([np.ones(4)])
    assert opt.param_groups[0]["mu_product"] == float(np.float32(0.9 * (1 - 0.5 * 0.96 ** 4e-3)))


def test_groups_keep_their_own_product_and_a_checkpoint_restores_it(tmp_path):
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal(7), rng.standard_normal(3)]
    opt = fo.NAdam([{"params": [xs[0]]}, {"params": [xs[1]], "betas": (0.5, 0.99)}])
    for _ in range(3):
        opt.step([rng.standard_normal(7), rng.standard_normal(3)])
    a, b = (g["mu_product"] for g in opt.param_groups)
    assert a != b and 0 < b < a < 1
    opt.save(tmp_path / "ck.npz")
    other = fo.NAdam([{"params": [xs[0].copy()]}, {"params": [xs[1].copy()],
                                                   "betas": (0.5, 0.99)}])
    other.load(tmp_path / "ck.npz")
    assert [g["mu_product"] for g in other.param_groups] == [a, b]


@pytest.mark.parametrize("flat", [False, True])
def test_the_drop_in_follows_torch_with_skipped_parameters(flat):
    """Parameters whose counts and products differ (one sat out steps) form
    C groups of their own; flat=True takes the checked route for NAdam."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(8)
    x0 = [rng.standard_normal(5), rng.standard_normal((2, 3))]
    mine = [torch.nn.Parameter(torch.tensor(x.copy())) for x in x0]
    theirs = [torch.nn.Parameter(torch.tensor(x.copy())) for x in x0]
    a = ft.NAdam(mine, lr=0.01, weight_decay=0.01, flat=flat)
    b = torch.optim.NAdam(theirs, lr=0.01, weight_decay=0.01, foreach=False)
    for step in range(8):
        gs = [rng.standard_normal(x.shape) for x in x0]
        for ps in (mine, theirs):
            for i, p in enumerate(ps):
                p.grad = None if (i == 1 and step in (2, 3)) else torch.tensor(gs[i].copy())
        a.step()
        b.step()
    for p, q in zip(mine, theirs):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-14,
                                   atol=1e-15)
        for name in ("step", "mu_product"):
            assert a.state[p][name].item() == b.state[q][name].item()
            assert a.state[p][name].dtype == b.state[q][name].dtype
    assert a.state[mine[0]]["mu_product"] != a.state[mine[1]]["mu_product"]


def test_state_dict_from_torch_continues_as_torch():
    """Through torch's load_state_dict, which casts every state but 'step' to
    the parameter's dtype: mu_product becomes float64 on float64 parameters,
    in torch.optim.NAdam as in the drop-in, and both keep it so."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(5)
    x0 = rng.standard_normal(17)
    p, q, r = (torch.nn.Parameter(torch.tensor(x0.copy())) for _ in range(3))
    mine, theirs = ft.NAdam([p], lr=0.01), torch.optim.NAdam([q], lr=0.01)
    for _ in range(7):
        q.grad = torch.tensor(rng.standard_normal(17))
        theirs.step()
    p.data.copy_(q.data)
    r.data.copy_(q.data)
    mine.load_state_dict(copy.deepcopy(theirs.state_dict()))
    again = torch.optim.NAdam([r], lr=0.01, foreach=False)
    again.load_state_dict(copy.deepcopy(theirs.state_dict()))
    assert mine.state[p]["mu_product"].dtype == torch.float64
    for _ in range(3):
        g = rng.standard_normal(17)
        p.grad, r.grad = torch.tensor(g.copy()), torch.tensor(g.copy())
        mine.step()
        again.step()
    np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), rtol=1e-14, atol=0)
    assert mine.state[p]["mu_product"].item() == again.state[r]["mu_product"].item()
    assert again.state[r]["mu_product"].dtype == torch.float64


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_a_16_bit_models_state_dict_from_torch_steps(half):
    """torch's load_state_dict casts mu_product to a 16-bit model's dtype;
    the drop-in takes that dict and steps on with the product in float32."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    dt = getattr(torch, half)
    q = torch.nn.Parameter(torch.randn(9, generator=torch.Generator().manual_seed(0)).to(dt))
    theirs = torch.optim.NAdam([q], lr=0.01)
    for k in range(3):
        q.grad = torch.randn(9, generator=torch.Generator().manual_seed(k)).to(dt)
        theirs.step()
    again = torch.optim.NAdam([q], lr=0.01)
    again.load_state_dict(copy.deepcopy(theirs.state_dict()))
    sd = copy.deepcopy(again.state_dict())
    assert sd["state"][0]["mu_product"].dtype == dt          # torch's cast
    p = torch.nn.Parameter(q.detach().clone())
    mine = ft.NAdam([p], lr=0.01)
    mine.load_state_dict(sd)
    assert mine.state[p]["mu_product"].dtype == torch.float32
    assert mine.state[p]["mu_product"].item() == sd["state"][0]["mu_product"].item()
    p.grad = torch.ones(9, dtype=dt)
    mine.step()
    assert float(mine.state[p]["step"]) == 4


@pytest.mark.parametrize("name,state", [("NAdam", "exp_avg"), ("RAdam", "exp_avg_sq"),
                                        ("RMSprop", "square_avg"), ("Adamax", "exp_inf"),
                                        ("Adadelta", "acc_delta"), ("Lion", "exp_avg"),
                                        ("AdEMAMix", "exp_avg_slow")])
def test_a_state_dict_missing_a_kept_state_is_refused_at_the_step(name, state):
    """A truncated checkpoint: the step names the missing state and writes
    nothing, as torch (a KeyError) and the drop-in's Adam refuse it, instead
    of starting that state again from zeros."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    p = torch.nn.Parameter(torch.randn(4, generator=torch.Generator().manual_seed(0)))
    opt = getattr(ft, name)([p], lr=0.01)
    for k in range(2):
        p.grad = torch.randn(4, generator=torch.Generator().manual_seed(k))
        opt.step()
    sd = copy.deepcopy(opt.state_dict())
    del sd["state"][0][state]
    other = getattr(ft, name)([p], lr=0.01)
    other.load_state_dict(sd)
    before = p.detach().clone()
    with pytest.raises(ValueError, match=rf"state\['{state}'\] of param_groups\[0\]\['params'\]"
                                         rf"\[0\] is missing"):
        other.step()
    assert torch.equal(p.detach(), before) and float(other.state[p]["step"]) == 2


def test_signatures_are_torchs():
    torch = pytest.importorskip("torch")
    from torch_helpers import EXTRAS

    import fastopt.torch as ft

    want = inspect.signature(torch.optim.NAdam.__init__).parameters
    got = inspect.signature(ft.NAdam.__init__).parameters
    assert [(p.name, p.kind, p.default) for p in want.values()] == [
        (p.name, p.kind, p.default) for p in got.values() if p.name not in EXTRAS]


@pytest.mark.parametrize("name,value,exc", [
    ("lr", -1.0, ValueError), ("eps", -1e-8, ValueError), ("weight_decay", -1.0, ValueError),
    ("momentum_decay", -1e-3, ValueError), ("momentum_decay", math.inf, ValueError),
    ("betas", (1.0, 0.9), ValueError), ("betas", (0.9, math.nan), ValueError),
    ("betas", 0.9, TypeError), ("decoupled_weight_decay", 1, TypeError),
    ("maximize", 1, TypeError)])
def test_bad_hyperparameters_named_nothing_written(name, value, exc):
    x, g, m, v, mp = np.ones(5), np.ones(5), np.zeros(5), np.zeros(5), np.array(np.float32(1))
    with pytest.raises(exc, match=f"fastopt.nadam: {name}"):
        fastopt.nadam(x, g, m, v, step=1, mu_product=mp, **{name: value})
    assert (x == 1).all() and (m == 0).all() and (v == 0).all() and mp[()] == 1
    with pytest.raises(exc, match=f"fastopt.optim.NAdam: {name}"):
        fo.NAdam([np.ones(3)], **{name: value})


@pytest.mark.parametrize("value,exc,match", [
    (1.0, TypeError, r"mu_product must be a float32 or float64 NumPy array of shape \(\)"),
    (np.ones(1), TypeError, r"mu_product must be .* got an array of shape \(1,\)"),
    (np.array(1, np.int64), TypeError, "mu_product must be .* and dtype int64"),
    (np.array(1.5), ValueError, "mu_product must be <= 1.0"),
    (np.array(-0.5), ValueError, "mu_product must be >= 0.0"),
    (np.array(np.nan), ValueError, "mu_product must be finite")])
def test_a_bad_product_is_named_nothing_written(value, exc, match):
    x, m, v = np.ones(5), np.zeros(5), np.zeros(5)
    with pytest.raises(exc, match=f"fastopt.nadam: {match}"):
        fastopt.nadam(x, np.ones(5), m, v, step=1, mu_product=value)
    assert (x == 1).all() and (m == 0).all() and (v == 0).all()
    ro = np.array(1.0)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="fastopt.nadam: mu_product is read-only"):
        fastopt.nadam(x, np.ones(5), m, v, step=1, mu_product=ro)
    assert (x == 1).all()


def test_a_bad_product_in_a_group_or_a_torch_state_is_named():
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['mu_product'\] must be <= 1"):
        opt = fo.NAdam([np.ones(3)])
        opt.param_groups[0]["mu_product"] = 2.0
        opt.step([np.ones(3)])
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    p = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    opt = ft.NAdam([p])
    p.grad = torch.ones(3, dtype=torch.float64)
    opt.step()
    opt.state[p]["mu_product"] = torch.tensor(-1.0)
    before = p.detach().clone()
    with pytest.raises(ValueError, match=r"state\['mu_product'\] of param_groups\[0\]"):
        opt.step()
    assert torch.equal(p.detach(), before)
    del opt.state[p]["mu_product"]
    with pytest.raises(ValueError, match="is missing"):
        opt.step()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_drop_in_prepared_step_equals_its_full_step(dtype):
    """After one full step the drop-in takes its prepared step, which reads
    and advances each parameter's mu_product: the same bits as the full
    step every time, also when a product is edited between steps (its
    parameter then regroups) or is invalid (the full step names it)."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(3)
    shapes = [(40, 30), (7,), (1000,)]
    base = [torch.randn(s, generator=gen, dtype=dt) for s in shapes]
    grads = [[torch.randn(s, generator=gen, dtype=dt) for s in shapes] for _ in range(6)]
    pa = [torch.nn.Parameter(b.clone()) for b in base]
    pb = [torch.nn.Parameter(b.clone()) for b in base]
    a = ft.NAdam(pa, lr=1e-2, weight_decay=0.01)
    b = ft.NAdam(pb, lr=1e-2, weight_decay=0.01)
    prepared = 0
    for step, gs in enumerate(grads):
        for p, q, g in zip(pa, pb, gs):
            p.grad, q.grad = g.clone(), g.clone()
        if step == 3:                       # one product edited between steps
            for o, ps in ((a, pa), (b, pb)):
                o.state[ps[1]]["mu_product"].fill_(0.5)
        a.step()
        prepared += a._prep is not None
        b._prep = None                      # b: the full step every time
        b.step()
        for p, q in zip(pa, pb):
            assert torch.equal(p, q)
            for k in ("exp_avg", "exp_avg_sq", "mu_product", "step"):
                assert torch.equal(a.state[p][k], b.state[q][k]), k
    assert prepared >= 4
    a.state[pa[0]]["mu_product"].fill_(2.0)
    for p, g in zip(pa, grads[0]):
        p.grad = g.clone()
    before = [p.detach().clone() for p in pa]
    with pytest.raises(ValueError, match=r"mu_product"):
        a.step()
    assert all(torch.equal(p, q) for p, q in zip(pa, before))
