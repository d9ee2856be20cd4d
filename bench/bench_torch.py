"""fastopt.torch's drop-ins against torch.optim's fused step, in one run.

Per workload (float32 torch.nn.Parameters with .grad set, one step per
call) and rule (SGD with momentum and weight decay; AdamW), these run
interleaved, one call each per round in a rotating order, each on its own
copy of the tensors:

    fastopt.torch   the drop-in as users call it (the prepared step after
                    the first call)
    flat            the drop-in with flat=True: parameters, gradients and
                    states in fastopt's buffers, one C call a step
    flat 4k         the same with its buffers on 4 KiB pages (no huge-page
                    advice): what the pages give
    full route      the same optimizer with the prepared step switched off:
                    every step checked in full
    torch fused     torch.optim.SGD/AdamW(fused=True)
    fastopt.optim   fastopt.optim.OnnxMomentum/AdamW over NumPy views of the
                    same shapes (its own prepared step): the C step with the
                    least Python in front of it
    DeepSpeedCPUAdam  AdamW only, when deepspeed is importable (its own
                    environment: it is no dependency of fastopt's)
    ceiling         the bandwidth probe over the bytes the rule must move
                    (fastopt._cli._probe: SGD 3 arrays read and 2 written,
                    AdamW 4 and 3, float32); the quotients over it divide
                    by its best round, and one below 1.0 is flagged: not a
                    figure

Workloads (``--workloads``, comma-separated): 1000x1, 1000x1e3, resnet50 (the
default three) and gpt2 (GPT-2 small's 148 tensors, 124 M values); the two
big ones run without flat 4k and full route (memory: a copy each).

Printed: p50 and p99 ms of each, the median of the per-round quotients
against torch fused (paired samples, so load common to both cancels),
fastopt.torch's cost per parameter over fastopt.optim's, and flat's
per-round quotient over fastopt.optim (the target: at most 1.5). With ``--load
busy`` a spinning process shares the machine (a training machine is never
idle). Nothing is asserted; speed lives in bench/RESULTS.md.

    PYTHONPATH=$PWD python bench/bench_torch.py                # idle
    PYTHONPATH=$PWD python bench/bench_torch.py --load busy
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time

import numpy as np

WORKLOADS = {"1000x1": [(1,)] * 1000, "1000x1e3": [(1000,)] * 1000}
# the big workloads: each implementation's copy is its parameters, gradients
# and states (GPT-2 small in float32 with AdamW's: 2 GB), so these skip the
# two diagnostic variants (flat 4k, full route)
BIG = ("resnet50", "gpt2")


def gpt2_shapes():
    """The 148 parameter tensors of GPT-2 small (124,439,808 values; the
    output layer tied to the token embedding): token and position
    embeddings, 12 blocks of layer norm, attention (qkv 768 -> 2304, output
    768 -> 768), layer norm and MLP (768 -> 3072 -> 768), each weight with
    its bias, and the final layer norm."""
    d = 768
    shapes = [(50257, d), (1024, d)]
    for _ in range(12):
        shapes += [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,),
                   (d,), (d,), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    return shapes + [(d,), (d,)]


RULES = ("sgd", "adamw")
SGD = {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4}
ADAMW = {"lr": 1e-3, "weight_decay": 1e-2}


def _params(torch, shapes, seed):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g) * 1e-2
    return ps


def _full_route(opt, tp):
    """opt.step with fastopt.torch's prepared step off (the full route)."""
    def step():
        opt._prep = None
        build, tp.build = tp.build, (lambda *args: None)
        try:
            opt.step()
        finally:
            tp.build = build
    return step


def calls(shapes, rule, diagnostic=True):
    """{name: one step} for the implementations (see the module); without
    the variants flat 4k and full route unless diagnostic."""
    import torch

    import fastopt
    import fastopt.optim as fo
    import fastopt.torch as ft
    import fastopt.torch._flat as tf
    import fastopt.torch._prep as tp
    from fastopt._cli import _probe
    from fastopt._cli.workloads import TRAFFIC
    out = {}
    a, c, d, e = (_params(torch, shapes, s) for s in (0, 2, 3, 4))
    cls, kw = (ft.SGD, SGD) if rule == "sgd" else (ft.AdamW, ADAMW)
    first = cls(a, **kw)
    out["fastopt.torch"] = first.step
    out["flat"] = cls(e, **kw, flat=True).step   # .grad moves in
    if diagnostic:
        tf.HUGE_PAGES = False
        try:
            out["flat 4k"] = cls(_params(torch, shapes, 5), **kw, flat=True).step
            out["flat 4k"]()        # the states' buffers made here too
            out["flat 4k"]()
        finally:
            tf.HUGE_PAGES = True
        out["full route"] = _full_route(cls(_params(torch, shapes, 1), **kw), tp)
    out["torch fused"] = getattr(torch.optim, cls.__name__)(c, **kw, fused=True).step
    if rule == "sgd":
        opt = fo.OnnxMomentum([p.detach().numpy() for p in d], lr=SGD["lr"], alpha=0.9,
                              norm_coefficient=SGD["weight_decay"])
    else:
        opt = fo.AdamW([p.detach().numpy() for p in d], **ADAMW)
    gs = [p.grad.numpy() for p in d]
    out["fastopt.optim"] = lambda: opt.step(gs)
    if rule == "adamw" and importlib.util.find_spec("deepspeed") is not None:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        out["DeepSpeedCPUAdam"] = DeepSpeedCPUAdam(_params(torch, shapes, 6), adamw_mode=True,
                                                   **ADAMW).step
    # the bytes of the rule's step moved as fast as this machine moves them
    # (SGD with momentum: 3 arrays read, 2 written; AdamW 4 and 3)
    n = sum(int(np.prod(s)) for s in shapes)
    reads = TRAFFIC["momentum" if rule == "sgd" else "adam"][0]
    bufs = [np.ones(n, np.float32) for _ in range(reads)]
    nth = first.n_threads or fastopt.get_num_threads()
    out["ceiling"] = lambda: _probe.probe(bufs, nth)
    for f in out.values():      # first steps: states made, plans prepared
        f()
        f()
    return out


def measure(shapes, rule, seconds, min_rounds=7, diagnostic=True, gap=0.0):
    """{name: per-round seconds}, interleaved in a rotating order (gap:
    seconds slept before each call)."""
    return rotating(calls(shapes, rule, diagnostic), seconds, min_rounds, gap)


def rotating(fs, seconds, min_rounds, gap=0.0):
    """{name: per-round seconds} of the calls fs, one each a round in an
    order rotated every round, for at least min_rounds rounds and seconds;
    gap: seconds slept before each call (untimed)."""
    names = list(fs)
    times = {k: [] for k in names}
    start, r = time.perf_counter(), 0
    while r < min_rounds or time.perf_counter() - start < seconds:
        for k in names[r % len(names):] + names[:r % len(names)]:
            if gap:
                time.sleep(gap)
            t0 = time.perf_counter()
            fs[k]()
            times[k].append(time.perf_counter() - t0)
        r += 1
    return times


def report(label, n, times, out=sys.stdout):
    ref = np.array(times["torch fused"])
    print(f"{label} ({len(ref)} rounds)", file=out)
    for k, v in times.items():
        v = np.array(v)
        print(f"  {k:16s} p50 {np.median(v) * 1e3:8.3f} ms  p99 "
              f"{np.percentile(v, 99) * 1e3:8.3f} ms   / torch fused "
              f"{np.median(v / ref):5.2f} x", file=out)
    opt = np.array(times["fastopt.optim"])
    extra = np.median(np.array(times["fastopt.torch"]) - opt)
    print(f"  fastopt.torch over fastopt.optim: {extra / n * 1e6:.2f} us per parameter; "
          f"flat / fastopt.optim {np.median(np.array(times['flat']) / opt):.2f} x", file=out)
    # the ceiling is the probe's best round (a descheduled one only slows it);
    # a p50 below it moved the bytes faster than the machine can: not a figure
    best = min(times["ceiling"])
    print("  / ceiling (best probe): " + ", ".join(
        f"{k} {np.median(times[k]) / best:.2f} x"
        + (" (faster than the probe: not a figure)" if np.median(times[k]) < best else "")
        for k in ("flat", "torch fused", "fastopt.optim", "DeepSpeedCPUAdam") if k in times),
        file=out)


def _resnet50():
    from fastopt._cli.workloads import WORKLOADS as W
    return W["resnet50"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per workload and rule")
    ap.add_argument("--load", choices=("idle", "busy"), default="idle")
    ap.add_argument("--workloads", default="1000x1,1000x1e3,resnet50")
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="sleep before each call (untimed): no call finds the last one's "
                         "OpenMP threads spinning")
    args = ap.parse_args(argv)
    import torch
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; load: {args.load}")
    spinner = None
    if args.load == "busy":
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.3)
    try:
        for w in args.workloads.split(","):
            make = {"resnet50": _resnet50, "gpt2": gpt2_shapes}.get(w)
            if make is None and w not in WORKLOADS:
                ap.error(f"unknown workload {w!r}: one of "
                         f"{', '.join([*WORKLOADS, 'resnet50', 'gpt2'])}")
            shapes = make() if make is not None else WORKLOADS[w]
            for rule in RULES:
                report(f"{w} {rule} float32", len(shapes),
                       measure(shapes, rule, args.seconds, diagnostic=w not in BIG,
                               gap=args.gap_ms / 1e3))
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def test_bench_torch_smoke():
    """pytest bench/ --benchmark-disable runs this: the script works."""
    import io

    import pytest
    pytest.importorskip("torch")
    buf = io.StringIO()
    for rule in RULES:
        report(rule, 3, measure([(4, 3), (5,), ()], rule, 0.0, min_rounds=2), out=buf)
    assert buf.getvalue().count("us per parameter") == 2


if __name__ == "__main__":
    main()
