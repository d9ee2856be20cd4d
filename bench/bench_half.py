"""Half precision against fastopt's own float32 AdamW, out of cache.

float32 masters and states; per element, the bytes each variant must move
(read + written):

    fp32            x, g, m, v read (16), x, m, v written (12)        28 B
    bf16 grads      g read as 2 bytes                                   26 B
    f16 grads       the same, float16                                   26 B
    fp32 + copy     fp32, plus the bf16 copy of x written               30 B
    bf16 g + copy   bf16 grads and the bf16 copy, one pass                 28 B
    offload         bf16 grads read twice (norm, update), bf16 copy    30 B
    fp32 offload    the offload step's options on fp32 grads, no copy   32 B
                    (its float32 counterpart: the half-precision
                    work is offload / fp32 offload)
    bf16 + astype   bf16 grads, then x.astype(bf16) into the copy     26 + 6 B
    bf16 states     m, v stored as bfloat16 (v rounded stochastically)  20 B
    bf16 st+grads   bf16 states and bf16 grads                          18 B
    st+g nearest    the same, every state rounded to nearest            18 B
    ceiling         the probe over 4 read and 3 written float32 arrays  28 B

Peers in the same rounds, when importable (install them in the bench's own
environment; fastopt depends on neither):

    torch fused     torch.optim.AdamW(fused=True), float32 grads        28 B
    DeepSpeedCPUAdam  its step alone, float32 grads                     28 B
    ds offload      DeepSpeed's CPU sequence for the offload step: the
                    bf16 grads upcast into float32 buffers (copy_, 2+4),
                    their norm (4), unscale and clip (mul_, 4+4),
                    DeepSpeedCPUAdam (28), the cast into the bf16 copy
                    (copy_, 4+2)                                         52 B

Peer threads: torch.set_num_threads(n); DeepSpeed's OpenMP loop takes
OMP_NUM_THREADS, so run one thread count a process with it set.

The offload step is the CPU half of offloaded training in one call:
``fastopt.adamw(masters, bf16 grads, m, v, grad_scale=, skip_if_nonfinite=,
max_grad_norm=, param_copies=bf16 params)``. Each variant's
ratio to fp32 is the median of the per-round quotients, the calls
interleaved in a rotating order.

    python bench/bench_half.py                     # 1x5e7 and ResNet-50, 1 and 2 threads
    OMP_NUM_THREADS=1 python bench/bench_half.py --threads 1    # with the peers
    python bench/bench_half.py --in-cache --threads 1           # the arithmetic, in cache
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time

import numpy as np

import fastopt
from fastopt._cli import _probe
from fastopt._cli.workloads import resnet50_shapes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import rotating  # noqa: E402

ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
BYTES = {"fp32": 28, "bf16 grads": 26, "f16 grads": 26, "fp32 + copy": 30,
         "bf16 g + copy": 28, "offload": 30, "fp32 offload": 32,
         "bf16 + astype": 32, "bf16 states": 20, "bf16 st+grads": 18, "st+g nearest": 18,
         "ceiling": 28, "torch fused": 28, "DeepSpeedCPUAdam": 28, "ds offload": 52}


def calls(shapes, nth, seed=0):
    """{name: callable} of one step each, on tensors of these shapes."""
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(seed)

    def state():
        xs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
        return xs, [np.zeros_like(x) for x in xs], [np.zeros_like(x) for x in xs]

    g32 = [rng.standard_normal(s, dtype=np.float32) * np.float32(1e-2) for s in shapes]
    g16 = [g.astype(bf16) for g in g32]
    gh = [g.astype(np.float16) for g in g32]
    out = {}
    for name, gs, copy in (("fp32", g32, False), ("bf16 grads", g16, False),
                           ("f16 grads", gh, False), ("fp32 + copy", g32, True),
                           ("bf16 g + copy", g16, True)):
        xs, ms, vs = state()
        ws = [np.zeros(s, bf16) for s in shapes] if copy else None
        out[name] = (lambda xs=xs, gs=gs, ms=ms, vs=vs, ws=ws: fastopt.adamw(
            xs, gs, ms, vs, step=1, **ADAMW, param_copies=ws, n_threads=nth))
    # (its own names: a closure over xs, ms, vs would see the bf16 states
    # the loop below binds to them)
    xo, mo, vo = state()
    wo = [np.zeros(s, bf16) for s in shapes]
    out["offload"] = lambda: fastopt.adamw(
        xo, g16, mo, vo, step=1, **ADAMW, grad_scale=1024.0, skip_if_nonfinite=True,
        max_grad_norm=1e9, param_copies=wo, n_threads=nth)
    xf, mf, vf = state()
    out["fp32 offload"] = lambda: fastopt.adamw(
        xf, g32, mf, vf, step=1, **ADAMW, grad_scale=1024.0, skip_if_nonfinite=True,
        max_grad_norm=1e9, n_threads=nth)
    xa, ma, va = state()
    wa = [np.zeros(s, bf16) for s in shapes]

    def then_astype():
        fastopt.adamw(xa, g16, ma, va, step=1, **ADAMW, n_threads=nth)
        for w, x in zip(wa, xa):
            np.copyto(w, x, casting="unsafe")
    out["bf16 + astype"] = then_astype
    for name, gs, how in (("bf16 states", g32, "auto"), ("bf16 st+grads", g16, "auto"),
                          ("st+g nearest", g16, "nearest")):
        xs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
        ms, vs = ([np.zeros(s, bf16) for s in shapes] for _ in range(2))
        out[name] = (lambda xs=xs, gs=gs, ms=ms, vs=vs, how=how: fastopt.adamw(
            xs, gs, ms, vs, step=1, **ADAMW, state_rounding=how, n_threads=nth))
    out.update(peers(shapes, nth, g32, g16, rng))
    return with_ceiling(out, shapes, nth)


def peers(shapes, nth, g32, g16, rng) -> dict:
    """{name: callable} of the peers that import (see the module): each on
    float32 parameters of its own, the gradients' memory shared."""
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(nth)

    def params():
        return [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(s, dtype=np.float32)))
                for s in shapes]

    out = {}
    ps = params()
    for p, g in zip(ps, g32):
        p.grad = torch.from_numpy(g)
    out["torch fused"] = torch.optim.AdamW(ps, **ADAMW, fused=True).step
    if importlib.util.find_spec("deepspeed") is None:
        return out
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    ps = params()
    for p, g in zip(ps, g32):
        p.grad = torch.from_numpy(g)
    out["DeepSpeedCPUAdam"] = DeepSpeedCPUAdam(ps, adamw_mode=True, **ADAMW).step
    ps = params()
    gt = [torch.from_numpy(g.view(np.int16)).view(torch.bfloat16) for g in g16]
    for p in ps:
        p.grad = torch.zeros_like(p)
    ws = [torch.zeros(s, dtype=torch.bfloat16) for s in shapes]
    ds = DeepSpeedCPUAdam(ps, adamw_mode=True, **ADAMW)
    scale, max_norm = 1024.0, 1e9

    def ds_offload():
        # as ZeRO-Offload's CPU step: upcast, norm (and the overflow
        # check), unscale and clip in one multiply, the step, the cast
        for p, g in zip(ps, gt):
            p.grad.copy_(g)
        norm = float(torch.linalg.vector_norm(torch.stack(
            torch._foreach_norm([p.grad for p in ps]))))
        if not math.isfinite(norm):
            return
        clip = (norm / scale + 1e-6) / max_norm
        combined = clip * scale if clip > 1 else scale
        torch._foreach_mul_([p.grad for p in ps], 1.0 / combined)
        ds.step()
        for w, p in zip(ws, ps):
            w.copy_(p.detach())
    out["ds offload"] = ds_offload
    return out


def with_ceiling(out: dict, shapes, nth) -> dict:
    """out with the ceiling probe over as many float32 elements as the
    shapes hold (4 arrays read, 3 written), every call run once (warm)."""
    n = sum(int(np.prod(s)) for s in shapes)
    bufs = [np.ones(n, np.float32) for _ in range(4)]
    out["ceiling"] = lambda: _probe.probe(bufs, nth)
    for f in out.values():
        f()
    return out


def measure(fs, seconds, min_rounds=9, gap=0.0):
    return rotating(fs, seconds, min_rounds, gap)


def report(label, n, times, out=sys.stdout):
    ref = np.array(times["fp32"])
    print(f"{label}: {n:.3g} elements, {len(ref)} rounds, load average "
          f"{os.getloadavg()[0]:.2f}", file=out)
    print(f"  {'variant':16s} {'p50 ms':>8s} {'p99 ms':>8s} {'/ fp32':>7s} {'floor':>6s} "
          f"{'GB/s':>6s}", file=out)
    ceiling = BYTES["ceiling"] * n / np.median(times["ceiling"])
    for k, v in times.items():
        v = np.array(v)
        p50 = np.median(v)
        rate = BYTES[k] * n / p50
        # moving its bytes faster than the probe moves bytes is not a result
        flag = "  faster than the probe: noise, not a figure" if rate > ceiling * 1.01 else ""
        print(f"  {k:16s} {p50 * 1e3:8.2f} {np.percentile(v, 99) * 1e3:8.2f} "
              f"{np.median(v / ref):7.3f} {BYTES[k] / BYTES['fp32']:6.3f} "
              f"{rate / 1e9:6.1f}{flag}", file=out)
    a = np.array(times["bf16 grads"])
    off = np.array(times["offload"])
    print(f"  offload / (bf16 grads + astype) "
          f"{np.median(off / np.array(times['bf16 + astype'])):.3f};"
          f" offload / fp32 offload {np.median(off / np.array(times['fp32 offload'])):.3f};"
          f" bf16 grads / fp32 {np.median(a / ref):.3f}", file=out)
    for peer, ours in (("ds offload", "offload"), ("DeepSpeedCPUAdam", "fp32"),
                       ("torch fused", "fp32")):
        if peer in times:
            q = np.median(np.array(times[peer]) / np.array(times[ours]))
            print(f"  {peer} / {ours} {q:.3f} (above 1: fastopt faster)", file=out)


def in_cache(nth, n=131072, small=16, reps=(3000, 30), rounds=7, out=sys.stdout):
    """Each variant's time an element in cache: its call repeated back to
    back on n elements (about 2 MB for fp32: the core's L2 and L3) and on
    `small`, the latter's time (the call's fixed cost) taken off; best of
    `rounds`. Printed with the quotient to fp32 (the peers left out)."""
    per = {}
    for size, k in ((small, reps[0]), (n, reps[1])):
        fs = {name: f for name, f in calls([(size,)], nth).items() if name in BYTES
              and name not in ("torch fused", "DeepSpeedCPUAdam", "ds offload", "ceiling")}
        for name, f in fs.items():
            best = math.inf
            for _ in range(rounds):
                t0 = time.perf_counter()
                for _ in range(k):
                    f()
                best = min(best, (time.perf_counter() - t0) / k)
            per.setdefault(name, []).append(best)
    ns = {name: (big - fixed) / (n - small) * 1e9 for name, (fixed, big) in per.items()}
    print(f"in cache, {n} elements, {nth} thread(s), load average {os.getloadavg()[0]:.2f}",
          file=out)
    for name, v in ns.items():
        print(f"  {name:16s} {v:6.3f} ns an element  / fp32 {v / ns['fp32']:5.2f}"
              f"  (fixed {per[name][0] * 1e6:5.1f} us a call)", file=out)
    print(f"  offload / fp32 offload {ns['offload'] / ns['fp32 offload']:5.2f}", file=out)
    return ns


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--workloads", nargs="+", default=["1x5e7", "resnet50"])
    ap.add_argument("--gap-ms", type=float, default=20.0,
                    help="sleep before each call (untimed), so that no call finds the "
                         "last one's OpenMP threads still spinning on a core")
    ap.add_argument("--in-cache", action="store_true",
                    help="instead: each variant's arithmetic in cache (in_cache)")
    args = ap.parse_args(argv)
    if args.in_cache:
        for nth in args.threads:
            in_cache(nth)
        return
    shapes = {"1x5e7": [(50_000_000,)], "resnet50": resnet50_shapes()}
    for w in args.workloads:
        for nth in args.threads:
            fs = calls(shapes[w], nth)
            n = sum(int(np.prod(s)) for s in shapes[w])
            report(f"{w}, {nth} thread(s)", n, measure(fs, args.seconds, gap=args.gap_ms / 1e3))
            del fs


def test_bench_half_smoke():
    import io
    assert set(in_cache(1, n=256, small=16, reps=(2, 2), rounds=1, out=io.StringIO())) \
        == set(BYTES) - {"torch fused", "DeepSpeedCPUAdam", "ds offload", "ceiling"}
    fs = calls([(1000,), (3, 5)], 1)
    times = measure(fs, 0.0, min_rounds=2)
    assert set(BYTES) - {"torch fused", "DeepSpeedCPUAdam", "ds offload"} <= set(times)
    assert set(times) <= set(BYTES)


if __name__ == "__main__":
    main()
