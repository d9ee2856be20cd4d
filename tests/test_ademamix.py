"""AdEMAMix (optax.contrib.ademamix; bitsandbytes' AdEMAMix names), a rule
built from its table row: ``fastopt.ademamix``, ``fastopt.optim.AdEMAMix``
and ``fastopt.torch.AdEMAMix`` against the NumPy reference (bit for bit,
inside and after the warmups) and optax in float64 (300 steps, with the
AdEMAMix paper's schedules), with bad inputs (checkpoints and the three
front ends agreeing: tests/test_table_rules.py)."""
import math

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

FLAGS = [dict(weight_decay=w, maximize=m, alpha_warmup=aw, beta3_warmup=bw, eps_root=er)
         for w in (0.0, 0.1) for m in (False, True) for aw, bw in ((None, None), (10, 20))
         for er in (0.0, 1e-12)]
IDS = ["wd%g-max%d-warm%s-root%g" % (f["weight_decay"], f["maximize"], f["alpha_warmup"],
                                     f["eps_root"]) for f in FLAGS]


@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 9, 1023, 70_001])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    m1, m2 = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    nu = np.abs(rng.standard_normal(n)).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    g[:3] = [np.nan, np.inf, -0.0][: min(3, n)]
    betas = (0.8, 0.99, 0.999)
    for step in (1, 2, 11, 25):       # inside both warmups, then past them
        want = ref.ademamix(x, -g if kw["maximize"] else g, m1, m2, nu, lr=0.01, step=step,
                            beta1=betas[0], beta2=betas[1], beta3=betas[2], alpha=4.0,
                            alpha_warmup=kw["alpha_warmup"],
                            beta3_warmup=kw["beta3_warmup"], eps_root=kw["eps_root"],
                            weight_decay=kw["weight_decay"])
        xs, a, b, c = x.copy(), m1.copy(), m2.copy(), nu.copy()
        fastopt.ademamix(xs, g, a, b, c, step=step, lr=0.01, betas=betas, alpha=4.0,
                         n_threads=n_threads, **kw)
        for got, w in zip((xs, a, b, c), want):
            np.testing.assert_array_equal(got, w)


def test_the_warmups_follow_the_papers_schedules():
    # alpha from 0 linearly, beta3 from beta1 with its half-life linear, both at the
    # 0-based count step - 1 (optax calls its schedules with the count before the update)
    b1, b3, warm = 0.9, 0.9999, 8
    half = [math.log(0.5) / math.log(b) - 1 for b in (b1, b3)]
    for step in (1, 2, 5, 8, 9, 12):
        s = step - 1
        alpha, beta3 = ref.ademamix_schedules(step, alpha=6.0, beta1=b1, beta3=b3,
                                              alpha_warmup=warm, beta3_warmup=warm)
        a = s / warm
        assert alpha == (a * 6.0 if s < warm else 6.0)
        assert beta3 == (0.5 ** (1 / ((1 - a) * half[0] + a * half[1] + 1)) if s < warm
                         else b3)
    assert ref.ademamix_schedules(1, alpha=6.0, beta1=b1, beta3=b3, alpha_warmup=warm,
                                  beta3_warmup=warm) == (0.0, pytest.approx(b1, rel=1e-15))


def _paper_schedules(jnp, alpha, b1, b3, aw, bw):
    """The AdEMAMix authors' optax schedules (their repository's alpha_scheduler
    and beta3_scheduler), for optax.contrib.ademamix."""
    def f(beta):
        return jnp.log(0.5) / jnp.log(beta) - 1

    def alpha_s(count):
        on = (count < aw).astype(jnp.float64)
        a = count / float(aw)
        return on * ((1.0 - a) * 0.0 + a * alpha) + alpha * (1.0 - on)

    def beta3_s(count):
        on = (count < bw).astype(jnp.float64)
        a = count / float(bw)
        return on * jnp.power(0.5, 1 / ((1.0 - a) * f(b1) + a * f(b3) + 1)) + b3 * (1.0 - on)
    return alpha_s, beta3_s


@pytest.mark.parametrize("kw", [dict(weight_decay=0.0), dict(weight_decay=0.1),
                                dict(weight_decay=0.1, alpha_warmup=50, beta3_warmup=120,
                                     eps_root=1e-14)], ids=["plain", "wd", "warmups"])
def test_against_optax_in_float64(kw):
    optax = pytest.importorskip("optax")
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        _optax_run(optax, jax.numpy, kw)


def _optax_run(optax, jnp, kw):
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(257)
    b1, b2, b3, alpha = 0.9, 0.999, 0.995, 5.0
    sched = {}
    if kw.get("alpha_warmup"):
        sa, sb = _paper_schedules(jnp, alpha, b1, b3, kw["alpha_warmup"], kw["beta3_warmup"])
        sched = {"alpha": sa, "b3": sb}
    tx = optax.contrib.ademamix(
        learning_rate=0.003, b1=b1, b2=b2, b3=sched.get("b3", b3),
        alpha=sched.get("alpha", alpha), eps=1e-8, eps_root=kw.get("eps_root", 0.0),
        weight_decay=kw["weight_decay"])
    params = jnp.asarray(x0)
    state = tx.init(params)
    x, m1, m2, nu = x0.copy(), np.zeros_like(x0), np.zeros_like(x0), np.zeros_like(x0)
    for step in range(1, 301):
        g = rng.standard_normal(257)
        upd, state = tx.update(jnp.asarray(g), state, params)
        params = optax.apply_updates(params, upd)
        fastopt.ademamix(x, g, m1, m2, nu, step=step, lr=0.003, betas=(b1, b2, b3),
                         alpha=alpha, **kw)
    want = np.asarray(params)
    assert want.dtype == np.float64
    np.testing.assert_allclose(x, want, rtol=1e-13, atol=1e-13 * np.max(np.abs(want)))
    for got, name in ((m1, "m1"), (m2, "m2"), (nu, "nu")):
        np.testing.assert_allclose(got, np.asarray(getattr(state[0], name)), rtol=1e-13,
                                   atol=1e-300)


def test_against_bitsandbytes_without_warmups():
    """bitsandbytes' AdEMAMix (float32 states, its CPU kernel) where the two
    conventions meet: no warmups, no weight decay (bitsandbytes scales x by
    1 - lr*weight_decay first, optax adds weight_decay*x to the update; its
    t_alpha and t_beta3 warmups count from 1, optax's from 0)."""
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(257).astype(np.float32)
    p = torch.nn.Parameter(torch.tensor(x0.copy()))
    theirs = bnb.optim.AdEMAMix([p], lr=0.003, betas=(0.9, 0.999, 0.995), alpha=5.0,
                                weight_decay=0.0)
    x, m1, m2, nu = x0.copy(), *(np.zeros_like(x0) for _ in range(3))
    for step in range(1, 301):
        g = rng.standard_normal(257).astype(np.float32)
        p.grad = torch.tensor(g.copy())
        theirs.step()
        fastopt.ademamix(x, g, m1, m2, nu, step=step, lr=0.003, betas=(0.9, 0.999, 0.995))
    want = p.detach().numpy()
    assert np.max(np.abs(x - want)) <= 1e-6 * np.max(np.abs(want))


def test_the_drop_in_and_its_state():
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(4)
    x0 = rng.standard_normal(33)
    p = torch.nn.Parameter(torch.tensor(x0.copy()))
    opt = ft.AdEMAMix([p], lr=0.01, alpha_warmup=5, beta3_warmup=5, flat=True)
    x, m1, m2, nu = x0.copy(), np.zeros(33), np.zeros(33), np.zeros(33)
    for step in range(1, 9):
        g = rng.standard_normal(33)
        p.grad = torch.tensor(g.copy())
        opt.step()
        fastopt.ademamix(x, g, m1, m2, nu, step=step, lr=0.01, alpha_warmup=5,
                         beta3_warmup=5)
    np.testing.assert_array_equal(p.detach().numpy(), x)
    st = opt.state[p]
    assert list(st) == ["step", "exp_avg_fast", "exp_avg_slow", "exp_avg_sq"]
    assert st["step"].item() == 8.0
    np.testing.assert_array_equal(st["exp_avg_slow"].numpy(), m2)


@pytest.mark.parametrize("name,value,exc", [
    ("lr", -1.0, ValueError), ("eps", -1e-8, ValueError), ("weight_decay", -1.0, ValueError),
    ("alpha", -1.0, ValueError), ("alpha", math.inf, ValueError),
    ("eps_root", -1.0, ValueError),
    ("betas", (0.9, 0.999), TypeError), ("betas", (0.9, 0.999, 1.0), ValueError),
    ("betas", (0.9, math.nan, 0.99), ValueError), ("betas", 0.9, TypeError),
    ("alpha_warmup", 0, ValueError), ("alpha_warmup", 2.5, TypeError),
    ("beta3_warmup", -3, ValueError), ("beta3_warmup", True, TypeError),
    ("maximize", 1, TypeError)])
def test_bad_hyperparameters_named_nothing_written(name, value, exc):
    x, g = np.ones(5), np.ones(5)
    m1, m2, nu = np.zeros(5), np.zeros(5), np.zeros(5)
    with pytest.raises(exc, match=f"fastopt.ademamix: {name}"):
        fastopt.ademamix(x, g, m1, m2, nu, step=1, **{name: value})
    assert (x == 1).all() and not (m1.any() or m2.any() or nu.any())
    with pytest.raises(exc, match=f"fastopt.optim.AdEMAMix: {name}"):
        fo.AdEMAMix([np.ones(3)], **{name: value})
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    with pytest.raises(exc, match=f"fastopt.torch.AdEMAMix: {name}"):
        ft.AdEMAMix([torch.nn.Parameter(torch.ones(3))], **{name: value})


def test_the_step_count_is_checked():
    x = np.ones(5)
    with pytest.raises(ValueError, match="fastopt.ademamix: step must be >= 1"):
        fastopt.ademamix(x, np.ones(5), np.zeros(5), np.zeros(5), np.zeros(5), step=0)
    assert (x == 1).all()
