"""The whole optimizer step, ResNet-50 shapes, float32.

One step = unscale (loss scale 1024) + non-finite check + clip by the global
norm at 1.0 + the update (SGD momentum 0.9 with weight decay 1e-4, or AdamW).
Implementations, timed in one run so the ratios mean something:

    fastopt.optim   the optimizer object's step(grads, grad_scale=...,
                    skip_if_nonfinite=True, max_grad_norm=1.0): one C call
    fastopt.fn      the functional fastopt.sgd / fastopt.adamw with the
                    same options (one C call, no optimizer object)
    torch           torch's sequence: _amp_foreach_non_finite_check_and_unscale_,
                    clip_grad_norm_(foreach=True), SGD/AdamW(fused=True).step()
    numpy           the formula in NumPy, in place, tensor by tensor
    plain kernel    the bare update on the same tensors (fastopt.onnx_momentum /
                    fastopt.adamw without unscale, check or clip)
    norm pass       fastopt.global_norm alone (the step's pass 1: reads g once)
    ceiling         fastopt's C bandwidth probe moving the bytes of the update,
                    scaled by (update bytes + one read of g) / update bytes

Per rule, the read floor: the norm pass's read rate beside the plain
kernel's, and the step against plain x (reads + 1) / reads, the bound where
reading, not writing, sets the pace (docs/performance.md, "The whole step").

Then the fixed overhead of opt.step on 1000 tensors of 1e3 elements: opt.step
minus the C driver's own time on the same work (fo_step from the prepared
plan, no check, GIL released), per tensor; and the whole step of 1000
tensors of 1 element, per tensor.

    python bench/bench_step.py                # prints p50 / p99 in ms and ratios
    python bench/bench_step.py --reps 5       # quicker
    python bench/bench_step.py --threads 1    # one thread (fastopt and torch)
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import numpy as np

import fastopt
import fastopt.optim as fo_optim
from fastopt._cli import _probe
from fastopt._cli.workloads import resnet50_shapes

SCALE = 1024.0
MAX_NORM = 1.0
SGD = {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4}
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}


def _tensors(shapes, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    gs = [rng.standard_normal(s, dtype=np.float32) * np.float32(SCALE * 1e-2) for s in shapes]
    return xs, gs


# ---- implementations ---------------------------------------------------------------

def fastopt_optim(rule, xs, gs):
    if rule == "sgd":
        opt = fo_optim.OnnxMomentum(xs, lr=SGD["lr"], alpha=SGD["momentum"],
                                    norm_coefficient=SGD["weight_decay"])
    else:
        opt = fo_optim.AdamW(xs, **ADAMW)
    return lambda: opt.step(gs, grad_scale=SCALE, skip_if_nonfinite=True,
                            max_grad_norm=MAX_NORM)


def fastopt_fn(rule, xs, gs, plain=False):
    opts = {} if plain else {"grad_scale": SCALE, "skip_if_nonfinite": True,
                                 "max_grad_norm": MAX_NORM}
    if rule == "sgd":
        bufs = [np.zeros_like(x) for x in xs]
        if plain:
            return lambda: fastopt.onnx_momentum(xs, gs, bufs, lr=SGD["lr"], t=1,
                                            alpha=SGD["momentum"],
                                            norm_coefficient=SGD["weight_decay"])
        return lambda: fastopt.sgd(xs, gs, bufs, step=2, **SGD, **opts)
    ms = [np.zeros_like(x) for x in xs]
    vs = [np.zeros_like(x) for x in xs]
    return lambda: fastopt.adamw(xs, gs, ms, vs, step=3, **ADAMW, **opts)


def numpy_step(rule, xs, gs):
    bufs = [np.zeros_like(x) for x in xs]
    ms = [np.zeros_like(x) for x in xs]
    vs = [np.zeros_like(x) for x in xs]
    lr, b1, b2 = ADAMW["lr"], *ADAMW["betas"]

    def step():
        us = [g / np.float32(SCALE) for g in gs]
        if not all(np.isfinite(u).all() for u in us):
            return False
        norm = math.sqrt(sum(float(np.dot(u.ravel(), u.ravel())) for u in us))
        coef = min(1.0, MAX_NORM / (norm + 1e-6))
        for x, u, b, m, v in zip(xs, us, bufs, ms, vs):
            u *= np.float32(coef)
            if rule == "sgd":
                u += np.float32(SGD["weight_decay"]) * x
                b *= np.float32(SGD["momentum"])
                b += u
                x -= np.float32(SGD["lr"]) * b
            else:
                x *= np.float32(1 - lr * ADAMW["weight_decay"])
                m += np.float32(1 - b1) * (u - m)
                v *= np.float32(b2)
                v += np.float32(1 - b2) * u * u
                x -= np.float32(lr / (1 - b1 ** 3)) * m / (
                    np.sqrt(v) / np.float32(math.sqrt(1 - b2 ** 3)) + np.float32(1e-8))
        return True
    return step


def torch_step(rule, xs, gs):
    import torch
    params = [torch.from_numpy(x) for x in xs]
    grads = [torch.from_numpy(g) for g in gs]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    if rule == "sgd":
        opt = torch.optim.SGD(params, fused=True, **SGD)
    else:
        opt = torch.optim.AdamW(params, fused=True, **ADAMW)
    found = torch.zeros(1)
    inv = torch.full((1,), 1.0 / SCALE)

    def step():
        for p, g in zip(params, grads):       # fresh scaled grads, as backward gives
            p.grad.copy_(g)
        found.zero_()
        torch._amp_foreach_non_finite_check_and_unscale_([p.grad for p in params],
                                                         found, inv)
        if found.item():
            return False
        torch.nn.utils.clip_grad_norm_(params, MAX_NORM, foreach=True)
        opt.step()
        return True
    step.copy_only = lambda: [p.grad.copy_(g) for p, g in zip(params, grads)]
    return step


def norm_pass(gs):
    """Pass 1 alone: fastopt.global_norm over the scaled gradients (reads g
    once, writes nothing)."""
    def step():
        fastopt.global_norm(gs, grad_scale=SCALE)   # a float: not a time (_samples)
    return step


def ceiling_step(rule, xs):
    """fastopt's bandwidth probe over the update's arrays (3 read, 2 written
    for SGD; 4 and 3 for AdamW); its time is scaled by the one extra read of
    the gradients a whole step needs (24/20 and 32/28 bytes per element)."""
    n = sum(x.size for x in xs)
    bufs = [np.ones(n, np.float32) for _ in range(3 if rule == "sgd" else 4)]
    nth = fastopt.get_num_threads()
    return (lambda: _probe.probe(bufs, nth)), (24 / 20 if rule == "sgd" else 32 / 28)


# ---- the run -------------------------------------------------------------------------

def run(reps: int, out=sys.stdout):
    shapes = resnet50_shapes()
    n = sum(math.prod(s) for s in shapes)
    print(f"ResNet-50: {len(shapes)} tensors, {n:,} float32 values; "
          f"threads {fastopt.get_num_threads()}; p50 / p99 of {reps} steps (ms)", file=out)
    rows = []
    for rule in ("sgd", "adamw"):
        xs, gs = _tensors(shapes)
        impls = {"fastopt.optim": fastopt_optim(rule, xs, gs),
                 "fastopt.fn": fastopt_fn(rule, xs, gs),
                 "plain kernel": fastopt_fn(rule, xs, gs, plain=True),
                 "numpy": numpy_step(rule, xs, gs)}
        try:
            impls["torch"] = torch_step(rule, [x.copy() for x in xs], gs)
        except (ImportError, RuntimeError, TypeError, ValueError) as exc:
            # no torch, or no fused CPU path in it
            print(f"  torch: unavailable ({exc})", file=out)
        ceil, factor = ceiling_step(rule, xs)
        impls["ceiling"] = ceil
        impls["norm pass"] = norm_pass(gs)
        if "torch" in impls:   # torch's time includes copying the grads back
            impls["copy"] = impls["torch"].copy_only
        with np.errstate(all="ignore"):   # every round runs each once: side by side
            res = dict(zip(impls, map(_p50_p99, _samples(list(impls.values()), reps))))
        res["ceiling"] = (res["ceiling"][0] * factor, res["ceiling"][1] * factor)
        if "copy" in res:
            copy = res.pop("copy")[0]
            res["torch"] = (res["torch"][0] - copy, res["torch"][1] - copy)
        reads = res.pop("norm pass")[0]
        base = res["plain kernel"][0]
        for name, (p50, p99) in res.items():
            rows.append((rule, name, p50, p99, p50 / base))
            print(f"  {rule:6s} {name:14s} {p50 * 1e3:8.2f} {p99 * 1e3:8.2f}   "
                  f"{p50 / base:5.2f}x plain  {p50 / res['ceiling'][0]:5.2f}x ceiling  "
                  f"{p50 / res['fastopt.optim'][0]:5.2f}x fastopt.optim", file=out)
        _read_floor(rule, n, res, reads, out)
    _fixed_overhead(reps, out)
    return rows


def _read_floor(rule, n, res, t_norm, out):
    """The step's floor where reading, not writing, bounds the machine: the
    update reads 3 arrays (SGD: x, g, buffer) or 4 (AdamW: x, g, m, v) and
    the step reads g once more (the norm pass), so step >= plain x 4/3 or
    5/4 when reads set the pace. Printed with the evidence: the read rate of
    the norm pass alone (one array read, nothing written) against the plain
    kernel's read rate (its reads / its time)."""
    k = 3 if rule == "sgd" else 4
    plain = res["plain kernel"][0]
    floor = plain * (k + 1) / k
    print(f"  {rule:6s} reads: norm pass alone {n * 4 / t_norm / 1e9:.1f} GB/s "
          f"({t_norm * 1e3:.2f} ms), plain kernel {n * 4 * k / plain / 1e9:.1f} GB/s of "
          f"reads; read floor plain x {k + 1}/{k} = {floor * 1e3:.2f} ms: "
          f"fastopt.fn {res['fastopt.fn'][0] / floor:.2f}x, "
          f"fastopt.optim {res['fastopt.optim'][0] / floor:.2f}x the floor", file=out)


def _samples(fns, reps):
    """Seconds of each fn over reps rounds, the calls interleaved (each round
    runs every fn once, so a change of load hits them alike) in an order
    shuffled every round (seeded), so no fn always follows the same other:
    after torch, its OpenMP threads spin for a while and slow whatever comes
    next (measured: the fn right after torch took 15 ms where it takes 13);
    a fn returning a float reports its own time."""
    ts = [[] for _ in fns]
    order = np.random.default_rng(0)
    for fn in fns:
        fn()
    for _ in range(reps):
        for k in order.permutation(len(fns)):
            t0 = time.perf_counter()
            own = fns[k]()
            ts[k].append(own if isinstance(own, float) else time.perf_counter() - t0)
    return ts


def _p50_p99(t):
    t = sorted(t)
    return statistics.median(t), t[min(len(t) - 1, math.ceil(0.99 * len(t)) - 1)]


def _interleaved(fns, reps):
    """Median seconds of each fn, the calls interleaved (see _samples)."""
    return [statistics.median(t) for t in _samples(fns, reps)]


def fixed_overhead(n, reps):
    """1000 float32 tensors of n values, AdamW with every step option
    (grad_scale, skip_if_nonfinite, max_grad_norm). Returns seconds per step
    (opt.step, the C driver alone on the same work, plain fastopt.adamw).

    The C driver's time is fo_step run from the prepared plan with the GIL
    released and no check (StepPlan._drive, timed around the C call alone),
    so opt.step - driver is what the optimizer object adds: Python, the
    per-step checks of gradients and flags, the call. Fourth, for scale: a
    1-element np.add timed right after the same C step (what this machine
    charges any Python call for memory and pages the step left cold)."""
    xs, gs = _tensors([(n,)] * 1000)
    opt = fo_optim.AdamW(xs, **ADAMW)
    ms = [np.zeros_like(x) for x in xs]
    vs = [np.zeros_like(x) for x in xs]

    def step():
        return opt.step(gs, grad_scale=SCALE, skip_if_nonfinite=True,
                        max_grad_norm=MAX_NORM)

    def drive():
        return plan._drive(1, gt)

    def plain():
        return fastopt.adamw(xs, gs, ms, vs, step=3, **ADAMW)

    one = np.zeros(1, np.float32)

    def cold_add():
        plan._drive(1, gt)
        t0 = time.perf_counter()
        np.add(one, one, out=one)
        return time.perf_counter() - t0

    step()
    plan, gt = opt._plan_all[1], tuple(gs)
    if plan is None:
        raise RuntimeError("bench_step: the optimizer did not prepare its step")
    with np.errstate(all="ignore"):      # step and driver alternate: each after the other
        t_step, t_drive, t_add = _interleaved([step, drive, cold_add], reps)
        return t_step, t_drive, _interleaved([plain], reps)[0], t_add


def _fixed_overhead(reps, out):
    """The fixed overhead of opt.step (the target: <= 15 ns per tensor
    on 1000 x 1e3 float32): (opt.step - C driver) / 1000, and the whole
    1000 x 1 step per tensor."""
    big = fixed_overhead(1000, reps * 8)
    small = fixed_overhead(1, reps * 8)
    print(f"  1000 x 1e3 AdamW, every option: opt.step {big[0] * 1e6:.0f} us, C driver "
          f"{big[1] * 1e6:.0f} us, plain fastopt.adamw {big[2] * 1e6:.0f} us; fixed "
          f"overhead of opt.step (opt.step - C driver) / 1000 = "
          f"{(big[0] - big[1]) * 1e6:.0f} ns per tensor", file=out)
    print(f"  for scale: a 1-element np.add right after the same C step takes "
          f"{big[3] * 1e6:.1f} us here (cold memory and pages; warm: under 1 us)",
          file=out)
    print(f"  1000 x 1 (fixed cost): opt.step {small[0] * 1e6:.0f} us = "
          f"{small[0] * 1e6:.0f} ns per tensor (C driver {small[1] * 1e6:.0f} ns, "
          f"opt.step - driver {(small[0] - small[1]) * 1e6:.0f} ns)", file=out)
    return big, small


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None,
                    help="fastopt's and torch's thread count (default: fastopt's)")
    args = ap.parse_args(argv)
    if args.threads is None:
        run(args.reps)
        return
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        pass
    with fastopt.set_num_threads(args.threads):
        run(args.reps)


def test_bench_step_smoke():
    """pytest bench/ --benchmark-disable runs this: the script works."""
    import io
    buf = io.StringIO()
    run(1, out=buf)
    assert "fastopt.optim" in buf.getvalue()


if __name__ == "__main__":
    main()
