"""The whole-step reference (fastopt/_reference/step.py) against torch 2.13
and optax, in float64, over a few steps: clip conventions, torch-form SGD,
Adagrad, Adam and AdamW with every flag."""
import math

import numpy as np
import pytest

from fastopt._reference import step as ref

torch = pytest.importorskip("torch")

RTOL = 1e-15


def _close(a, b, rtol=RTOL):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = max(np.max(np.abs(b), initial=0.0), 1e-300)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


def _grads(rng, sizes, scale=1.0):
    return [rng.standard_normal(n) * scale for n in sizes]


SIZES = [0, 1, 7, 33, 1025, 5000]


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
@pytest.mark.parametrize("scale", [0.01, 1.0, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, scale):
    rng = np.random.default_rng(1)
    # torch's inf-norm refuses an empty tensor
    gs = _grads(rng, SIZES if norm_type == 2.0 else SIZES[1:], scale)
    ts = [torch.tensor(g) for g in gs]
    params = [torch.zeros_like(t, requires_grad=True) for t in ts]
    for p, t in zip(params, ts):
        p.grad = t.clone()
    total = torch.nn.utils.clip_grad_norm_(params, 1.0, norm_type=norm_type)
    norm, finite = ref.global_norm(gs, norm_type=norm_type)
    assert finite
    _close(norm, float(total))
    for g, p in zip(gs, params):
        _close(ref.transform(g, norm=norm, max_norm=1.0, convention="torch"),
               p.grad.numpy())


def test_clip_grad_value_matches_torch():
    rng = np.random.default_rng(2)
    g = rng.standard_normal(100) * 3
    g[5] = np.nan
    p = torch.zeros(100, dtype=torch.float64, requires_grad=True)
    p.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_value_([p], 1.5)
    np.testing.assert_array_equal(ref.transform(g, clip_value=1.5), p.grad.numpy())


def test_nonfinite_norm_propagates_like_torch():
    g = [np.array([1.0, np.inf]), np.array([2.0])]
    norm, finite = ref.global_norm(g)
    assert not finite and norm == math.inf
    g = [np.array([1.0, np.nan]), np.array([np.inf])]
    for nt in (2.0, math.inf):
        norm, finite = ref.global_norm(g, norm_type=nt)
        assert not finite and math.isnan(norm)
        assert np.isnan(ref.transform(g[1], norm=norm, max_norm=1.0)).all()


def test_unscale_then_norm():
    g = [np.array([3.0, 4.0], dtype=np.float32) * 1024, np.array([12.0]) * 1024]
    norm, _ = ref.global_norm(g, grad_scale=1024.0)
    assert norm == 13.0


def test_clip_by_global_norm_matches_optax():
    optax = pytest.importorskip("optax")
    jax = pytest.importorskip("jax")
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        import jax.numpy as jnp
        for scale, max_norm in [(0.01, 1.0), (1.0, 1.0), (10.0, 0.5)]:
            gs = _grads(rng, SIZES, scale)
            tx = optax.clip_by_global_norm(max_norm)
            out, _ = tx.update([jnp.asarray(g) for g in gs], tx.init(None))
            norm, _ = ref.global_norm(gs)
            for g, o in zip(gs, out):
                assert np.asarray(o).dtype == np.float64
                _close(ref.transform(g, norm=norm, max_norm=max_norm,
                                     convention="optax"), np.asarray(o))


# ---- rules over a few steps --------------------------------------------------

def _run_torch(opt_cls, kwargs, x0, grads):
    p = torch.tensor(x0.copy(), requires_grad=True)
    opt = opt_cls([p], **kwargs)
    for g in grads:
        p.grad = torch.tensor(g)
        opt.step()
    return p.detach().numpy(), opt.state[p]


STEPS = 6


def _setup(seed, n=257):
    rng = np.random.default_rng(seed)
    x0 = rng.standard_normal(n)
    grads = [rng.standard_normal(n) for _ in range(STEPS)]
    return x0, grads


@pytest.mark.parametrize("momentum,dampening,nesterov", [
    (0.0, 0.0, False), (0.9, 0.0, False), (0.9, 0.3, False), (0.9, 0.0, True)])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
@pytest.mark.parametrize("maximize", [False, True])
def test_sgd_torch(momentum, dampening, nesterov, weight_decay, maximize):
    x0, grads = _setup(4)
    kw = {"lr": 0.05, "momentum": momentum, "dampening": dampening,
              "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize}
    xt, st = _run_torch(torch.optim.SGD, kw, x0, grads)
    x, buf = x0.copy(), np.zeros_like(x0)
    for i, g in enumerate(grads):
        u = ref.transform(g, maximize=maximize)
        x, buf = ref.sgd_torch(x, u, buf, lr=0.05, momentum=momentum,
                               dampening=dampening, weight_decay=weight_decay,
                               nesterov=nesterov, first=i == 0)
    _close(x, xt)
    if momentum:
        _close(buf, st["momentum_buffer"].numpy())


@pytest.mark.parametrize("lr_decay,weight_decay,init,eps", [
    (0.0, 0.0, 0.0, 1e-10), (0.01, 0.0, 0.1, 1e-10), (0.0, 0.02, 0.0, 1e-3)])
@pytest.mark.parametrize("maximize", [False, True])
def test_adagrad_torch(lr_decay, weight_decay, init, eps, maximize):
    x0, grads = _setup(5)
    kw = {"lr": 0.05, "lr_decay": lr_decay, "weight_decay": weight_decay,
              "initial_accumulator_value": init, "eps": eps, "maximize": maximize}
    xt, st = _run_torch(torch.optim.Adagrad, kw, x0, grads)
    x, h = x0.copy(), np.full_like(x0, init)
    for i, g in enumerate(grads):
        u = ref.transform(g, maximize=maximize)
        x, h = ref.adagrad_torch(x, u, h, lr=0.05, step=i + 1, lr_decay=lr_decay,
                                 weight_decay=weight_decay, eps=eps)
    _close(x, xt)
    _close(h, st["sum"].numpy())


@pytest.mark.parametrize("decoupled", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("weight_decay,betas", [
    (0.0, (0.9, 0.999)), (0.05, (0.8, 0.99)), (0.01, (0.3, 0.9))])
def test_adam_torch(decoupled, amsgrad, maximize, weight_decay, betas):
    x0, grads = _setup(6)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    kw = {"lr": 0.01, "betas": betas, "eps": 1e-8, "weight_decay": weight_decay,
              "amsgrad": amsgrad, "maximize": maximize}
    xt, st = _run_torch(cls, kw, x0, grads)
    x, m, v = x0.copy(), np.zeros_like(x0), np.zeros_like(x0)
    vm = np.zeros_like(x0) if amsgrad else None
    for i, g in enumerate(grads):
        u = ref.transform(g, maximize=maximize)
        x, m, v, vm = ref.adam_torch(x, u, m, v, vm, lr=0.01, step=i + 1,
                                     beta1=betas[0], beta2=betas[1], eps=1e-8,
                                     weight_decay=weight_decay, amsgrad=amsgrad,
                                     decoupled=decoupled)
    _close(x, xt)
    _close(m, st["exp_avg"].numpy())
    _close(v, st["exp_avg_sq"].numpy())
    if amsgrad:
        _close(vm, st["max_exp_avg_sq"].numpy())


def test_full_step_matches_torch_sequence():
    """unscale + clip_grad_norm_ + AdamW over two parameters and steps."""
    rng = np.random.default_rng(7)
    x0 = [rng.standard_normal(300), rng.standard_normal(40)]
    ps = [torch.tensor(x.copy(), requires_grad=True) for x in x0]
    opt = torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1)
    xs = [x.copy() for x in x0]
    states = [(np.zeros_like(x), np.zeros_like(x), None) for x in x0]
    group = {"rule": "adamw_torch", "lr": 0.01, "alpha": 0.9, "beta": 0.999, "eps": 1e-8,
                 "decay": 0.1, "t": 0}
    for i in range(STEPS):
        gs = [rng.standard_normal(x.shape) * 1024 * 3 for x in x0]
        for p, g in zip(ps, gs):
            p.grad = torch.tensor(g) / 1024.0
        tn = torch.nn.utils.clip_grad_norm_(ps, 1.0)
        opt.step()
        group["t"] = i + 1
        applied, norm, xs, states = ref.step(xs, gs, states, [group], [0, 0],
                                             grad_scale=1024.0, check_finite=True,
                                             max_norm=1.0)
        assert applied
        _close(norm, float(tn))
    for x, p in zip(xs, ps):
        _close(x, p.detach().numpy())
