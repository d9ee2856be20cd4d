"""Where the fixed cost of opt.step goes: per step and per tensor.

AdamW with every step option (grad_scale, skip_if_nonfinite, max_grad_norm)
on float32 tensors of several counts and sizes (the same bytes each). Every
timed call runs right after one fo_step of the same work from the prepared
plan (StepPlan._drive, GIL released, no check), as in a training loop, and
that driver's own time is subtracted: what is left is what the call adds to
the C work, with the memory and pages the step left cold. Timed, in an order
shuffled every round:

    opt.step    the optimizer object's step (its remembered call)
    plan.run    the prepared plan alone: list to tuple, the gradients'
                checks, the written arrays' guards (read by fo_step in
                pass 1), fo_step
    np.add      a 1-element np.add: what this machine charges any Python
                call for cold memory (warm, it takes under 1 us)

A fit over the tensor counts splits opt.step's extra time into a part per
step and a part per tensor. Run it with each tree first on the path to
compare two builds (alternate the runs: this VM's speed drifts by 2x):

    PYTHONPATH=$PWD python bench/bench_fixed_cost.py             # 400 rounds
    PYTHONPATH=$PWD python bench/bench_fixed_cost.py --rounds 100

Nothing is asserted; speed lives in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import fastopt.optim as fo_optim

# tensor count x size: 4 MB of each of x, g, m, v in every row
SHAPES = ((10, 100_000), (100, 10_000), (1000, 1000), (4000, 250))
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
STEP = {"grad_scale": 1024.0, "skip_if_nonfinite": True, "max_grad_norm": 1.0}


def _calls(nt, n):
    """(plan, gradients, {name: call}) for nt float32 tensors of n values."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(n, dtype=np.float32) for _ in range(nt)]
    gs = [rng.standard_normal(n, dtype=np.float32) * np.float32(10.0) for _ in range(nt)]
    opt = fo_optim.AdamW(xs, **ADAMW)
    for _ in range(3):
        opt.step(gs, **STEP)
    if opt._plan_all is None or opt._plan_all[1] is None or opt._fast is None:
        raise RuntimeError("bench_fixed_cost: the optimizer did not prepare its step")
    plan, rec = opt._plan_all[1], opt._fast
    (head, tail), args = rec[2][0], rec[4]
    one = np.zeros(1, np.float32)

    def run():
        return plan.run(gs, (head + (opt._steps + 1,) + tail,), *args, None)

    return plan, tuple(gs), {"opt.step": lambda: opt.step(gs, **STEP), "plan.run": run,
                             "np.add": lambda: np.add(one, one, out=one)}


def measure(nt, n, rounds, seed=0):
    """Median microseconds each call adds to the C step it follows."""
    plan, gt, calls = _calls(nt, n)
    names = list(calls)
    extra = {k: [] for k in names}
    order = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        for _ in range(rounds):
            for k in order.permutation(len(names)):
                drive = plan._drive(1, gt)
                t0 = time.perf_counter()
                calls[names[k]]()
                t = time.perf_counter() - t0
                extra[names[k]].append(t - (drive if names[k] != "np.add" else 0.0))
    return {k: float(np.median(v)) * 1e6 for k, v in extra.items()}


def _fit(rows):
    """Least squares of opt.step's extra us against the tensor count:
    (us per step, ns per tensor)."""
    x = np.array([nt for nt, _, _ in rows], float)
    y = np.array([r["opt.step"] for _, _, r in rows])
    slope, icpt = np.polyfit(x, y, 1)
    return icpt, slope * 1e3


def run(rounds, out=sys.stdout, shapes=SHAPES):
    rows = []
    print("AdamW float32, every step option; extra time over the C step it "
          f"follows, p50 of {rounds} rounds (us; ns per tensor)", file=out)
    for nt, n in shapes:
        r = measure(nt, n, rounds)
        rows.append((nt, n, r))
        print(f"  {nt:5d} x {n:7,d}: opt.step {r['opt.step']:6.1f} "
              f"({r['opt.step'] * 1e3 / nt:6.1f}), plan.run {r['plan.run']:6.1f} "
              f"({r['plan.run'] * 1e3 / nt:6.1f}), a cold np.add {r['np.add']:5.1f}",
              file=out)
    if len(rows) > 1:
        per_step, per_tensor = _fit(rows)
        print(f"  opt.step's extra time ~ {per_step:.1f} us per step + "
              f"{per_tensor:.1f} ns per tensor", file=out)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=400)
    run(ap.parse_args(argv).rounds)


def test_bench_fixed_cost_smoke():
    """pytest bench/ --benchmark-disable runs this: the script works."""
    import io
    buf = io.StringIO()
    rows = run(2, out=buf, shapes=((2, 100), (3, 50)))
    assert "per tensor" in buf.getvalue()
    assert all(math.isfinite(v) for _, _, r in rows for v in r.values())


if __name__ == "__main__":
    main()
