"""fastopt against torch.optim through the mapping of docs/mappings.md (PyTorch).

200-step float64 trajectories of torch.optim.SGD and torch.optim.Adagrad are
reproduced by fastopt's ONNX rules (max absolute difference <= 1e-12 at
every step), and Adam's documented difference is shown exactly on one step:
ONNX adds epsilon before the bias correction, so it equals torch.optim.Adam
when eps_onnx = eps_torch * sqrt(1 - beta2**t).

The gradient of each step depends on the current parameters (a separable
quadratic plus fixed noise), so every step builds on the last and a wrong
mapping compounds rather than washes out.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fastopt  # noqa: E402

STEPS = 200
SHAPES = [(7,), (3, 4), (2, 3, 2), ()]
TOL = 1e-12


def problem(seed):
    """Initial params, curvatures and per-step noise for SHAPES (float64)."""
    rng = np.random.default_rng(seed)
    x0 = [rng.standard_normal(s) for s in SHAPES]
    curv = [rng.uniform(0.2, 2.0, s) for s in SHAPES]
    noise = [rng.standard_normal((STEPS,) + s) * 0.1 for s in SHAPES]
    return x0, curv, noise


def grad(x, c, noise_k, sign=1.0):
    """sign * d/dx of 0.5 * c * x**2 + noise * x: depends on the current x."""
    return np.asarray(sign * (c * x + noise_k))


def run_torch(optimizer_cls, options, x0, curv, noise, sign=1.0):
    params = [torch.tensor(x, dtype=torch.float64) for x in x0]
    opt = optimizer_cls(params, **options)
    traj = []
    for k in range(STEPS):
        for p, c, nz in zip(params, curv, noise):
            p.grad = torch.from_numpy(grad(p.numpy(), c, nz[k], sign))
        opt.step()
        traj.append([p.numpy().copy() for p in params])
    return traj


def max_diff(traj_a, traj_b):
    return max(float(np.max(np.abs(a - b), initial=0.0))
               for step_a, step_b in zip(traj_a, traj_b)
               for a, b in zip(step_a, step_b))


# ------------------------------------------------------------------ SGD

SGD_SETS = {
    "momentum": dict(lr=0.05, momentum=0.9),
    "dampening-wd": dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-2),
    "nesterov-wd": dict(lr=0.08, momentum=0.8, nesterov=True, weight_decay=5e-3),
    "dampening-nesterov-off": dict(lr=0.02, momentum=0.5, dampening=0.9),
    "plain": dict(lr=0.1, weight_decay=1e-3),  # momentum 0: alpha 0, beta 1
    "maximize": dict(lr=0.05, momentum=0.7, dampening=0.1, maximize=True),
}


def sgd_to_onnx(o):
    """docs/mappings.md (PyTorch): lr/momentum/weight_decay -> R/alpha/norm_coefficient,
    1 - dampening -> beta, nesterov -> mode, maximize -> pass -G."""
    return dict(alpha=o.get("momentum", 0.0), beta=1.0 - o.get("dampening", 0.0),
                norm_coefficient=o.get("weight_decay", 0.0),
                mode="nesterov" if o.get("nesterov", False) else "standard")


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
@pytest.mark.parametrize("name", list(SGD_SETS))
def test_sgd_trajectory(name, foreach):
    options = SGD_SETS[name]
    x0, curv, noise = problem(zlib.crc32(name.encode()))
    sign = -1.0 if options.get("maximize") else 1.0
    traj_t = run_torch(torch.optim.SGD, dict(options, foreach=foreach), x0, curv, noise,
                       sign)

    xs = [x.copy() for x in x0]
    vs = [np.zeros_like(x) for x in x0]  # torch's first step: no buffer = V 0, T 0
    attrs = sgd_to_onnx(options)
    traj_f = []
    for k in range(STEPS):
        # maximize: torch ascends along its gradient; ONNX gets -G
        gs = [grad(x, c, nz[k], -sign if options.get("maximize") else sign)
              for x, c, nz in zip(xs, curv, noise)]
        fastopt.onnx_momentum(xs, gs, vs, lr=options["lr"], t=k, **attrs)
        traj_f.append([x.copy() for x in xs])

    assert max_diff(traj_t, traj_f) <= TOL
    # the trajectory went somewhere: not a trivially equal pair
    assert max(float(np.max(np.abs(a - b), initial=0.0))
               for a, b in zip(traj_f[-1], x0)) > 0.1


def test_sgd_mapping_is_not_vacuous():
    """The same run with dampening forgotten (beta = 1) is far off: the
    comparison above can tell mappings apart."""
    options = SGD_SETS["dampening-wd"]
    x0, curv, noise = problem(1)
    traj_t = run_torch(torch.optim.SGD, options, x0, curv, noise)
    xs = [x.copy() for x in x0]
    vs = [np.zeros_like(x) for x in x0]
    attrs = dict(sgd_to_onnx(options), beta=1.0)
    traj_f = []
    for k in range(STEPS):
        gs = [grad(x, c, nz[k]) for x, c, nz in zip(xs, curv, noise)]
        fastopt.onnx_momentum(xs, gs, vs, lr=options["lr"], t=k, **attrs)
        traj_f.append([x.copy() for x in xs])
    assert max_diff(traj_t, traj_f) > 1e-3


# ------------------------------------------------------------------ Adagrad

ADAGRAD_SETS = {
    "defaults": dict(lr=0.1),
    "lr_decay-eps-wd-init": dict(lr=0.2, lr_decay=0.01, eps=1e-6, weight_decay=1e-2,
                                 initial_accumulator_value=0.1),
    "strong-decay-big-eps": dict(lr=0.5, lr_decay=0.5, eps=1e-3,
                                 initial_accumulator_value=1.0),
}


@pytest.mark.parametrize("foreach", [False, True], ids=["for-loop", "foreach"])
@pytest.mark.parametrize("name", list(ADAGRAD_SETS))
def test_adagrad_trajectory(name, foreach):
    options = ADAGRAD_SETS[name]
    x0, curv, noise = problem(zlib.crc32(name.encode()) + 1)
    traj_t = run_torch(torch.optim.Adagrad, dict(options, foreach=foreach), x0, curv, noise)

    defaults = torch.optim.Adagrad([torch.zeros(1)]).defaults
    o = {**defaults, **options}
    xs = [x.copy() for x in x0]
    hs = [np.full_like(x, o["initial_accumulator_value"]) for x in x0]
    traj_f = []
    for k in range(STEPS):  # torch's state step is 1-based: T = step - 1 = k
        gs = [grad(x, c, nz[k]) for x, c, nz in zip(xs, curv, noise)]
        fastopt.onnx_adagrad(xs, gs, hs, lr=o["lr"], t=k, decay_factor=o["lr_decay"],
                        epsilon=o["eps"], norm_coefficient=o["weight_decay"])
        traj_f.append([x.copy() for x in xs])

    assert max_diff(traj_t, traj_f) <= TOL
    assert max(float(np.max(np.abs(a - b), initial=0.0))
               for a, b in zip(traj_f[-1], x0)) > 0.1


# ------------------------------------------------------------------ Adam

def torch_adam_step(x, g, m, v, t, lr, betas, eps, weight_decay):
    """One torch.optim.Adam step at (1-based) step t from state (m, v)."""
    p = torch.tensor(x, dtype=torch.float64)
    opt = torch.optim.Adam([p], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                           foreach=False)
    opt.state[p] = {"step": torch.tensor(float(t - 1)),
                    "exp_avg": torch.tensor(m, dtype=torch.float64),
                    "exp_avg_sq": torch.tensor(v, dtype=torch.float64)}
    p.grad = torch.tensor(g, dtype=torch.float64)
    opt.step()
    return p.numpy().copy()


def fastopt_adam_step(x, g, m, v, t, lr, betas, eps, weight_decay):
    x, m, v = x.copy(), m.copy(), v.copy()
    fastopt.onnx_adam(x, g, m, v, lr=lr, t=t, alpha=betas[0], beta=betas[1], epsilon=eps,
                 norm_coefficient=weight_decay)
    return x


@pytest.mark.parametrize("t", [1, 2, 10, 1000])
def test_adam_epsilon_relation(t):
    rng = np.random.default_rng(t)
    n = 50
    x = rng.standard_normal(n)
    g = rng.standard_normal(n) * 0.05
    m = rng.standard_normal(n) * 0.05
    v = rng.uniform(0.0, 0.003, n)  # small second moments: epsilon matters
    lr, betas, eps, wd = 0.01, (0.9, 0.999), 0.05, 0.01
    want = torch_adam_step(x, g, m, v, t, lr, betas, eps, wd)

    # ONNX adds epsilon before the bias correction: scale it
    eps_onnx = eps * math.sqrt(1 - betas[1] ** t)
    got = fastopt_adam_step(x, g, m, v, t, lr, betas, eps_onnx, wd)
    assert np.max(np.abs(got - want)) <= TOL

    # the same epsilon in both is a different step (the difference is real)
    same = fastopt_adam_step(x, g, m, v, t, lr, betas, eps, wd)
    assert np.max(np.abs(same - want)) > 1e-5

    # with epsilon 0 the two rules coincide
    want0 = torch_adam_step(x, g, m, v, t, lr, betas, 0.0, wd)
    got0 = fastopt_adam_step(x, g, m, v, t, lr, betas, 0.0, wd)
    assert np.max(np.abs(got0 - want0)) <= TOL
