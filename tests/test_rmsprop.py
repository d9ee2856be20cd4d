"""RMSprop (torch.optim.RMSprop's math and names) through the one step:
``fastopt.rmsprop``, ``fastopt.optim.RMSprop`` and ``fastopt.torch.RMSprop``
against the NumPy reference (bit for bit, every flag, dtype, layout and
thread count), against each other (the same bits), against torch.optim
(300-step trajectories), with bad inputs and a training loop (checkpoints:
tests/test_table_rules.py)."""
import itertools
import math

import numpy as np
import pytest
from layouts import place

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

FLAGS = [dict(momentum=m, centered=c, weight_decay=w, maximize=x)
         for m, c, w, x in itertools.product((0.0, 0.9), (False, True), (0.0, 0.05),
                                             (False, True))]
IDS = ["mom%g-cen%d-wd%g-max%d" % (f["momentum"], f["centered"], f["weight_decay"],
                                   f["maximize"]) for f in FLAGS]


def _state(x):
    return np.abs(np.random.default_rng(9).standard_normal(x.shape)).astype(x.dtype)


def _expected(x, g, sq, mb, ga, lr, alpha, eps, kw):
    gg = -g if kw["maximize"] else g
    return ref.rmsprop_torch(x, gg, sq, mb if kw["momentum"] else None,
                             ga if kw["centered"] else None, lr=lr, alpha=alpha, eps=eps,
                             weight_decay=kw["weight_decay"], momentum=kw["momentum"],
                             centered=kw["centered"])


@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 7, 9, 1023, 70_001])
@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    sq, mb, ga = _state(x), rng.standard_normal(n).astype(dtype), (
        0.1 * rng.standard_normal(n)).astype(dtype)
    for alpha in (0.99, 0.3):      # both branches of torch's lerp
        want = _expected(x, g, sq, mb, ga, 0.01, alpha, 1e-8, kw)
        xs, sqs, mbs, gas = x.copy(), sq.copy(), mb.copy(), ga.copy()
        info = fastopt.rmsprop(xs, g, sqs, lr=0.01, alpha=alpha, momentum_buffers=mbs,
                               grad_avgs=gas, n_threads=n_threads, **kw)
        assert info.applied
        np.testing.assert_array_equal(xs, want[0])
        np.testing.assert_array_equal(sqs, want[1])
        np.testing.assert_array_equal(mbs, want[2] if kw["momentum"] else mb)
        np.testing.assert_array_equal(gas, want[3] if kw["centered"] else ga)


@pytest.mark.parametrize("layout", [dict(order="F"), dict(steps=(2, -1)),
                                    dict(perm=(1, 0)), dict(byte_offset=1),
                                    dict(swap=True)], ids=str)
def test_awkward_layouts(layout, dtype):
    rng = np.random.default_rng(3)
    shape = (6, 5)
    vals = [rng.standard_normal(shape) for _ in range(4)]
    arrays = [place(v if i != 2 else np.abs(v), dtype, **layout).arr
              for i, v in enumerate(vals)]
    x, g, sq, ga = arrays
    kw = dict(momentum=0.0, centered=True, weight_decay=0.01, maximize=False)
    want = _expected(np.asarray(x, dtype), np.asarray(g, dtype), np.asarray(sq, dtype),
                     None, np.asarray(ga, dtype), 0.02, 0.9, 1e-8, kw)
    g_before = g.copy()
    fastopt.rmsprop(x, g, sq, lr=0.02, alpha=0.9, grad_avgs=ga, **kw)
    np.testing.assert_array_equal(x, want[0])
    np.testing.assert_array_equal(sq, want[1])
    np.testing.assert_array_equal(ga, want[3])
    np.testing.assert_array_equal(g, g_before)


def test_step_options_as_the_transformed_gradient():
    """Unscale and global-norm clip happen before the rule: the same bits as
    the rule run on the reference's transformed gradient."""
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(n) for n in (10, 300)]
    gs = [rng.standard_normal(x.shape) * 64 for x in xs]
    sqs = [np.zeros_like(x) for x in xs]
    norm = ref.global_norm(gs, grad_scale=64.0)[0]
    want = []
    for x, g in zip(xs, gs):
        u = ref.transform(g, grad_scale=64.0, norm=norm, max_norm=0.5)
        want.append(ref.rmsprop_torch(x, u, np.zeros_like(x), lr=0.01)[0])
    info = fastopt.rmsprop(xs, gs, sqs, lr=0.01, grad_scale=64.0, max_grad_norm=0.5)
    assert info.norm == pytest.approx(norm, rel=1e-15)
    for x, w in zip(xs, want):
        np.testing.assert_array_equal(x, w)


# ---- the three front ends give the same bits --------------------------------------

def _run_three(kw, dt, steps=12):
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(5)
    shapes = [(8, 3), (5,), (2000,)]
    x0 = [rng.standard_normal(s).astype(dt) for s in shapes]
    fx = [x.copy() for x in x0]
    st = {n: [np.zeros_like(x) for x in x0] for n in ("sq", "mb", "ga")}
    ox = [x.copy() for x in x0]
    opt = fo.RMSprop(ox, lr=0.01, **kw)
    tp = [torch.nn.Parameter(torch.tensor(x.copy())) for x in x0]
    topt = ft.RMSprop(tp, lr=0.01, **kw)
    for _ in range(steps):
        gs = [rng.standard_normal(s).astype(dt) for s in shapes]
        fastopt.rmsprop(fx, gs, st["sq"], lr=0.01, momentum_buffers=st["mb"],
                        grad_avgs=st["ga"], **kw)
        opt.step(gs)
        for p, g in zip(tp, gs):
            p.grad = torch.tensor(g.copy())
        topt.step()
    return fx, ox, [p.detach().numpy() for p in tp], opt, topt, tp


@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
def test_function_optim_and_torch_dropin_agree(kw, dtype):
    fx, ox, tx, opt, topt, tp = _run_three(kw, dtype)
    for a, b, c in zip(fx, ox, tx):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    names = {"square_avg"} | ({"momentum_buffer"} if kw["momentum"] else set()) | (
        {"grad_avg"} if kw["centered"] else set())
    assert set(opt.state) == names
    assert set(topt.state[tp[0]]) == names | {"step"}
    assert topt.state[tp[0]]["step"].item() == 12.0


# ---- against torch.optim.RMSprop -----------------------------------------------

@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
@pytest.mark.parametrize("alpha", [0.99, 0.4])
def test_trajectory_against_torch(kw, alpha, dtype):
    """300 steps from the same start and gradients: fastopt.torch.RMSprop
    against torch.optim.RMSprop. torch's for-loop and foreach results are
    identical here, so its own spread is zero; fastopt differs from both at
    the rounding level only (torch fuses multiply-adds and its vectorized
    square root is not correctly rounded; docs/semantics.md), within
    1e-11 (float64) or 1e-4 (float32) of the parameters' scale."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(6)
    x0 = rng.standard_normal(257).astype(dtype)
    a = torch.nn.Parameter(torch.tensor(x0.copy()))
    b = torch.nn.Parameter(torch.tensor(x0.copy()))
    c = torch.nn.Parameter(torch.tensor(x0.copy()))
    o_loop = torch.optim.RMSprop([a], lr=0.003, alpha=alpha, foreach=False, **kw)
    o_each = torch.optim.RMSprop([b], lr=0.003, alpha=alpha, foreach=True, **kw)
    o_fast = ft.RMSprop([c], lr=0.003, alpha=alpha, **kw)
    for _ in range(300):
        g = torch.tensor(rng.standard_normal(257).astype(dtype))
        for p, o in ((a, o_loop), (b, o_each), (c, o_fast)):
            p.grad = g.clone()
            o.step()
    loop, each, fast = (p.detach().numpy() for p in (a, b, c))
    scale = float(np.max(np.abs(loop)))
    tol = 1e-11 if dtype == np.float64 else 1e-4
    assert np.max(np.abs(loop - each)) <= tol * scale      # torch's own spread
    assert np.max(np.abs(fast - loop)) <= tol * scale
    assert np.all(np.isfinite(fast))


def test_a_training_script_swaps_torch_for_fastopt():
    """The drop-in: the same script with torch.optim.RMSprop replaced by
    fastopt.torch.RMSprop gives the same loss curve (float64)."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    def train(cls):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 1)).double()
        opt = cls(model.parameters(), lr=0.01, momentum=0.5, centered=True)
        gen = torch.Generator().manual_seed(1)
        xb = torch.randn(128, 8, generator=gen, dtype=torch.float64)
        yb = xb.sum(1, keepdim=True).sin()
        losses = []
        for _ in range(60):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return np.array(losses)

    want, got = train(torch.optim.RMSprop), train(ft.RMSprop)
    assert got[-1] < 0.5 * got[0]
    np.testing.assert_allclose(got, want, rtol=1e-10)


# ---- bad inputs: named, nothing written -----------------------------------------

@pytest.mark.parametrize("name,value,exc", [
    ("lr", -1.0, ValueError), ("alpha", -0.1, ValueError), ("eps", -1e-8, ValueError),
    ("weight_decay", -0.1, ValueError), ("momentum", -0.5, ValueError),
    ("momentum", math.nan, ValueError), ("centered", 1, TypeError),
    ("maximize", "yes", TypeError)])
def test_bad_hyperparameters_named_nothing_written(name, value, exc):
    x, g, sq = np.ones(5), np.ones(5), np.zeros(5)
    buf, ga = np.zeros(5), np.zeros(5)
    with pytest.raises(exc, match=f"fastopt.rmsprop: {name} "):
        fastopt.rmsprop(x, g, sq, momentum_buffers=buf, grad_avgs=ga, **{name: value})
    assert (x == 1).all() and (sq == 0).all() and (buf == 0).all() and (ga == 0).all()
    with pytest.raises(exc, match=f"fastopt.optim.RMSprop: {name}"):
        fo.RMSprop([np.ones(3)], **{name: value})


def test_missing_states_are_named():
    x, g, sq = np.ones(4), np.ones(4), np.zeros(4)
    with pytest.raises(ValueError, match="momentum > 0 needs momentum_buffers"):
        fastopt.rmsprop(x, g, sq, momentum=0.9)
    with pytest.raises(ValueError, match="centered=True needs grad_avgs"):
        fastopt.rmsprop(x, g, sq, centered=True)
    with pytest.raises(ValueError, match=r"grad_avgs\[1\] has shape"):
        fastopt.rmsprop([x, x.copy()], [g, g], [sq, sq.copy()], centered=True,
                        grad_avgs=[np.zeros(4), np.zeros(3)])
    assert (x == 1).all() and (sq == 0).all()


def test_a_state_turned_on_after_building_is_refused():
    xs = [np.ones(3)]
    opt = fo.RMSprop(xs, lr=0.1)
    opt.param_groups[0]["centered"] = True
    with pytest.raises(ValueError, match=r"\['centered'\] was turned on after"):
        opt.step([np.ones(3)])
    assert (xs[0] == 1).all() and opt.steps == 0


def test_groups_with_their_own_states():
    """A group with momentum and one centered without: each gets the states
    its rule reads, in the right slots (checked against the reference)."""
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal(6), rng.standard_normal(9)
    opt = fo.RMSprop([{"params": [a], "momentum": 0.9},
                      {"params": [b], "centered": True, "lr": 0.02}], lr=0.01)
    ra, rb = a.copy(), b.copy()
    sa, ma, sb, gb = (np.zeros(6), np.zeros(6), np.zeros(9), np.zeros(9))
    for _ in range(5):
        ga_, gb_ = rng.standard_normal(6), rng.standard_normal(9)
        opt.step([ga_, gb_])
        ra, sa, ma, _ = ref.rmsprop_torch(ra, ga_, sa, ma, lr=0.01, momentum=0.9)
        rb, sb, _, gb = ref.rmsprop_torch(rb, gb_, sb, None, gb, lr=0.02, centered=True)
    np.testing.assert_array_equal(a, ra)
    np.testing.assert_array_equal(b, rb)



def test_torch_state_dict_moves_both_ways():
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(11)
    x0 = rng.standard_normal(50)
    p1, p2 = (torch.nn.Parameter(torch.tensor(x0.copy())) for _ in range(2))
    o1 = torch.optim.RMSprop([p1], lr=0.01, momentum=0.9, centered=True)
    o2 = ft.RMSprop([p2], lr=0.01, momentum=0.9, centered=True)
    for _ in range(3):
        g = torch.tensor(rng.standard_normal(50))
        p1.grad, p2.grad = g.clone(), g.clone()
        o1.step()
        o2.step()
    o3 = ft.RMSprop([p1], lr=0.01, momentum=0.9, centered=True)
    o3.load_state_dict(o1.state_dict())        # torch's checkpoint into fastopt
    o4 = torch.optim.RMSprop([p2], lr=0.01, momentum=0.9, centered=True)
    o4.load_state_dict(o2.state_dict())        # and back
    assert set(o3.state[p1]) == set(o1.state[p1])
    g = torch.tensor(rng.standard_normal(50))
    p1.grad, p2.grad = g.clone(), g.clone()
    o3.step()
    o4.step()
    np.testing.assert_allclose(p1.detach().numpy(), p2.detach().numpy(), rtol=1e-12,
                               atol=1e-14)
