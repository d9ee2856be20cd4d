"""300-step trajectories: fastopt's fused step against torch.optim and optax.

torch: ``torch.nn.utils.clip_grad_norm_`` then ``torch.optim.SGD / Adagrad /
Adam / AdamW`` (every flag, two parameter groups with their own
hyperparameters), against ``fastopt.torch.X.step(max_grad_norm=...)``, where
unscaling, the global norm, the clip and every group's update are one C call.
optax: ``optax.chain(optax.clip_by_global_norm(c), optax.adamw(...))``
against ``fastopt.optim.AdamW`` with ``max_grad_norm=c`` in optax's
convention.

Each gradient depends on the current parameters (a quadratic around a
moving target, see :func:`problem`), so a wrong step compounds instead of
washing out. The clip threshold sits inside the range of the gradient
norms: some steps clip, some do not (checked). float64 agrees within 1e-13 relative
(to each tensor's largest magnitude over the trajectory, at every step);
float32 within rounding (2e-5: ~170 float32 ulps after 300 steps, as two
float32 evaluations of one formula in different operation orders; torch
fuses some multiply-adds).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fastopt.torch as ft  # noqa: E402

STEPS = 300
SHAPES = [(6, 4), (9,), (2, 3, 2), ()]
# the clip threshold, times the first step's global norm: inside the range
# of the norms (the descents bring them below 2/3 of the first), so some
# steps clip and some do not (checked)
CLIP = 0.8
# largest |difference| / largest |value| of a tensor over the trajectory
TOL = {torch.float64: 1e-13, torch.float32: 2e-5}


def problem(n, dtype, seed=0):
    """Initial parameters, curvatures and per-step offsets of n tensors: the
    gradient of step k is ``c * x + offset[k]``, i.e. a quadratic around a
    target that moves (a sine per element) plus a little noise. Tracking a
    moving target keeps the gradients away from zero, where Adam's update
    would turn rounding into chaos and no two implementations would agree."""
    g = torch.Generator().manual_seed(seed)
    x0, curv, offsets = [], [], []
    k = torch.arange(STEPS, dtype=torch.float64)
    for i in range(n):
        s = SHAPES[i % len(SHAPES)]
        x0.append(torch.randn(s, generator=g, dtype=torch.float64))
        c = torch.rand(s, generator=g, dtype=torch.float64) * 1.5 + 0.2
        amp = torch.randn(s, generator=g, dtype=torch.float64) * 2.0
        phase = torch.rand(s, generator=g, dtype=torch.float64) * 6.0
        wave = torch.sin(k.reshape((-1,) + (1,) * len(s)) / 15.0 + phase)
        noise = torch.randn((STEPS,) + s, generator=g, dtype=torch.float64) * 0.05
        curv.append(c)
        offsets.append(-(c * amp) * wave + noise)
    return [[t.to(dtype) for t in ts] for ts in (x0, curv, offsets)]


def trajectory(make, step, dtype, groups, seed=0):
    """The parameters after every step (a list of STEPS lists of arrays).
    Two tensors per parameter group; a maximize group gets the negated
    gradient (it ascends -f: the same well-behaved path)."""
    x0, curv, offsets = problem(2 * len(groups), dtype, seed)
    ps = [torch.nn.Parameter(x.clone()) for x in x0]
    signs = [-1.0 if g.get("maximize") else 1.0 for g in groups for _ in range(2)]
    opt = make([{"params": ps[2 * i:2 * i + 2], **g} for i, g in enumerate(groups)])
    out = []
    for k in range(STEPS):
        with torch.no_grad():
            for p, c, off, sign in zip(ps, curv, offsets, signs):
                p.grad = (c * p + off[k]) * sign
        step(opt, ps)
        out.append([p.detach().numpy().copy() for p in ps])
    return out


def first_norm(groups, dtype, norm_type=2.0):
    """The global norm of the first step's gradients."""
    x0, curv, offsets = problem(2 * len(groups), dtype)
    g = torch.cat([(c * x + off[0]).reshape(-1) for x, c, off in zip(x0, curv, offsets)])
    return torch.linalg.vector_norm(g, norm_type).item()


def torch_step(clip, norm_type, norms=None):
    def step(opt, ps):
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(ps, clip, norm_type=norm_type)
            if norms is not None:
                norms.append(norm.item())
        opt.step()
    return step


def fastopt_step(clip, norm_type):
    def step(opt, ps):
        if clip is None:
            opt.step()
        else:
            opt.step(max_grad_norm=clip, norm_type=norm_type)
    return step


def assert_same_trajectory(a, b, dtype):
    """Largest |difference| relative to the tensor's largest |value| over
    the trajectory (a tensor crossing zero does not make it ill-defined)."""
    scales = [max(float(np.max(np.abs(step[i]), initial=0.0)) for step in a)
              for i in range(len(a[0]))]
    worst = 0.0
    for step_a, step_b in zip(a, b):
        for x, y, scale in zip(step_a, step_b, scales):
            worst = max(worst, float(np.max(np.abs(x - y), initial=0.0)) / scale)
    assert worst <= TOL[dtype], f"relative difference {worst:.3g}"


# name, constructor keywords, the parameter groups' own keywords
CASES = [
    ("SGD", dict(lr=0.03), [
        {}, dict(momentum=0.9), dict(momentum=0.8, dampening=0.3, weight_decay=0.01),
        dict(lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.01),
        dict(momentum=0.9, maximize=True), dict(maximize=True, weight_decay=0.02)]),
    ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.2), [
        {}, dict(lr_decay=0.01), dict(weight_decay=0.01, eps=1e-6),
        dict(maximize=True, lr_decay=0.1)]),
    ("Adagrad", dict(lr=0.1), [{}, dict(maximize=True, weight_decay=0.05)]),
    ("Adam", dict(lr=0.05), [
        {}, dict(amsgrad=True), dict(weight_decay=0.01),
        dict(maximize=True, betas=(0.5, 0.9)),
        dict(amsgrad=True, maximize=True, eps=1e-6, weight_decay=0.01),
        dict(decoupled_weight_decay=True, weight_decay=0.05)]),
    ("AdamW", dict(lr=0.05), [
        {}, dict(amsgrad=True), dict(weight_decay=0.1), dict(maximize=True),
        dict(amsgrad=True, maximize=True, betas=(0.8, 0.99))]),
]


@pytest.mark.parametrize("clip, dtype", [(True, torch.float64), (True, torch.float32),
                                         (False, torch.float64)],
                         ids=["clip-f64", "clip-f32", "noclip-f64"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_torch_trajectory(case, clip, dtype):
    """torch.optim with clip_grad_norm_ before it, every flag in some group."""
    name, kw, groups = case
    clip = CLIP * first_norm(groups, dtype) if clip else None
    norms = []
    a = trajectory(lambda g: getattr(torch.optim, name)(g, **kw),
                   torch_step(clip, 2.0, norms), dtype, groups)
    b = trajectory(lambda g: getattr(ft, name)(g, **kw), fastopt_step(clip, 2.0),
                   dtype, groups)
    assert_same_trajectory(a, b, dtype)
    if clip is not None:
        assert min(norms) < clip < max(norms)


@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_torch_trajectory_inf_norm(name):
    groups = [dict(momentum=0.9), {}] if name == "SGD" else [{}, dict(amsgrad=True)]
    kw = dict(lr=0.03) if name == "SGD" else dict(lr=0.05)
    dtype = torch.float64
    clip = CLIP * first_norm(groups, dtype, math.inf)
    norms = []
    a = trajectory(lambda g: getattr(torch.optim, name)(g, **kw),
                   torch_step(clip, math.inf, norms), dtype, groups)
    b = trajectory(lambda g: getattr(ft, name)(g, **kw), fastopt_step(clip, math.inf),
                   dtype, groups)
    assert_same_trajectory(a, b, dtype)
    assert min(norms) < clip < max(norms)


def test_last_step_norm_is_torchs_total_norm():
    x0, curv, noise = problem(4, torch.float64)
    ps = [torch.nn.Parameter(x.clone()) for x in x0]
    opt = ft.SGD(ps, lr=0.03, momentum=0.9)
    for k in range(20):
        with torch.no_grad():
            for p, c, nz in zip(ps, curv, noise):
                p.grad = c * p + nz[k]
        norm = torch.nn.utils.get_total_norm([p.grad for p in ps]).item()
        opt.step(max_grad_norm=1.0)
        assert opt.last_step.norm == pytest.approx(norm, rel=1e-15)


# ---- optax ---------------------------------------------------------------------------

def _optax_setup():
    optax = pytest.importorskip("optax")
    jax = pytest.importorskip("jax")
    import fastopt.optim
    if not hasattr(fastopt.optim, "AdamW"):
        pytest.skip("fastopt.optim.AdamW is not there yet (it needs the whole step)")
    jax.config.update("jax_enable_x64", True)
    return optax, jax, fastopt.optim


def test_optax_clip_by_global_norm_then_adamw():
    optax, jax, optim = _optax_setup()
    jnp = jax.numpy
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.99, 1e-8, 0.05
    x0, curv, noise = ([t.numpy() for t in ts] for ts in problem(4, torch.float64))
    jcurv, jnoise = [jnp.asarray(c) for c in curv], [jnp.asarray(n) for n in noise]

    clip = CLIP * first_norm([{}, {}], torch.float64)
    tx = optax.chain(optax.clip_by_global_norm(clip),
                     optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=wd))

    @jax.jit
    def update(params, state, k):
        grads = [c * p + nz[k] for p, c, nz in zip(params, jcurv, jnoise)]
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params = [jnp.asarray(x) for x in x0]
    state = tx.init(params)
    ours = [x.copy() for x in x0]
    opt = optim.AdamW(ours, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    worst, clipped = 0.0, 0
    for k in range(STEPS):
        params, state = update(params, state, k)
        grads = [np.asarray(c * p + nz[k]) for p, c, nz in zip(ours, curv, noise)]
        norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads))
        clipped += norm >= clip
        opt.step(grads, max_grad_norm=clip, clip_convention="optax")
        for p, q in zip(params, ours):
            p = np.asarray(p)
            worst = max(worst, float(np.max(np.abs(p - q), initial=0.0))
                        / float(np.max(np.abs(p), initial=0.0)))
    assert 0 < clipped < STEPS
    assert worst <= TOL[torch.float64], f"relative difference {worst:.3g}"
