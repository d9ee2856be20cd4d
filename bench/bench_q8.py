"""8-bit blockwise states against fastopt's own float32 AdamW, and against
bitsandbytes' CPU 8-bit AdamW, in one rotating run.

float32 parameters; per element, the bytes each variant must move (read +
written; the absmax adds 4 B per 256 elements and state, 0.03 B):

    fp32            x, g, m, v read (16), x, m, v written (12)          28 B
    8-bit           m, v as one byte each: x 8, g 4, codes 2 + 2         16.03 B
    8-bit bf16 g    and bfloat16 gradients                               14.03 B
    bnb 8-bit       bitsandbytes.optim.AdamW8bit on the same sizes (CPU: it
                    dequantizes, runs ~10 torch element-wise ops on float32
                    temporaries, quantizes; ~140 B)
    quantize        fastopt.State8bit.quantize of one float32 state alone
                    (the quantizer's own time: reads 4 B, writes 1 B)
    ceiling         the probe over 4 read and 3 written float32 arrays    28 B

Each variant's ratio to fp32 is the median of the per-round quotients, the
calls interleaved in a rotating order. Also prints the state bytes per
parameter (Adam's m and v) of each.

    python bench/bench_q8.py                      # 1x5e7, ResNet-50, 1x1e6, 1000x4096
    python bench/bench_q8.py --seconds 5 --threads 1 --workloads 1x1e6
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import fastopt
from fastopt import State8bit
from fastopt._cli.workloads import resnet50_shapes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_half import with_ceiling  # noqa: E402
from bench_torch import rotating  # noqa: E402

ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
BYTES = {"fp32": 28, "8-bit": 16.03, "8-bit bf16 g": 14.03, "bnb 8-bit": None,
         "quantize": 5, "ceiling": 28}
WORKLOADS = {"1x5e7": lambda: [(50_000_000,)], "resnet50": resnet50_shapes,
             "1x1e6": lambda: [(1_000_000,)], "1000x4096": lambda: [(4096,)] * 1000}


def _bnb(shapes, nth, rng):
    """bitsandbytes' AdamW8bit step on these shapes, or None where it is not
    installed."""
    try:
        import bitsandbytes as bnb
        import torch
    except ImportError:
        return None
    torch.set_num_threads(nth)
    ps = []
    for s in shapes:
        p = torch.nn.Parameter(torch.from_numpy(rng.standard_normal(s, dtype=np.float32)))
        p.grad = torch.from_numpy(rng.standard_normal(s, dtype=np.float32) * np.float32(1e-2))
        ps.append(p)
    opt = bnb.optim.AdamW8bit(ps, **ADAMW)
    return opt.step


def calls(shapes, nth, seed=0, with_bnb=True):
    """{name: callable} of one step each, on tensors of these shapes."""
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(seed)
    g32 = [rng.standard_normal(s, dtype=np.float32) * np.float32(1e-2) for s in shapes]
    g16 = [g.astype(bf16) for g in g32]
    out = {}
    xs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    ms, vs = [np.zeros(s, np.float32) for s in shapes], [np.zeros(s, np.float32) for s in shapes]
    out["fp32"] = lambda: fastopt.adamw(xs, g32, ms, vs, step=2, **ADAMW, n_threads=nth)
    for name, gs in (("8-bit", g32), ("8-bit bf16 g", g16)):
        x8 = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
        m8 = [State8bit.zeros(s) for s in shapes]
        v8 = [State8bit.zeros(s, signed=False) for s in shapes]
        out[name] = (lambda x8=x8, gs=gs, m8=m8, v8=v8: fastopt.adamw(
            x8, gs, m8, v8, step=2, **ADAMW, n_threads=nth))
    bnb_step = _bnb(shapes, nth, rng) if with_bnb else None
    if bnb_step is not None:
        out["bnb 8-bit"] = bnb_step
    big = g32[int(np.argmax([g.size for g in g32]))]
    out["quantize"] = lambda: State8bit.quantize(big)
    return with_ceiling(out, shapes, nth)


def state_bytes(shapes) -> dict:
    """Bytes of Adam's m and v per parameter: float32, and 8-bit."""
    n = sum(int(np.prod(s)) for s in shapes)
    eight = sum(2 * State8bit.zeros(s).nbytes for s in shapes)
    return {"fp32": 8.0, "8-bit": eight / n}


def report(label, shapes, times, out=sys.stdout):
    n = sum(int(np.prod(s)) for s in shapes)
    ref = np.array(times["fp32"])
    sb = state_bytes(shapes)
    print(f"{label}: {n:.3g} elements, {len(ref)} rounds, load average "
          f"{os.getloadavg()[0]:.2f}; state bytes per parameter fp32 {sb['fp32']:.2f}, "
          f"8-bit {sb['8-bit']:.3f}", file=out)
    print(f"  {'variant':14s} {'p50 ms':>9s} {'p99 ms':>9s} {'/ fp32':>7s} {'floor':>6s}",
          file=out)
    for k, v in times.items():
        v = np.array(v)
        floor = "" if BYTES[k] is None or k == "quantize" else f"{BYTES[k] / BYTES['fp32']:6.3f}"
        print(f"  {k:14s} {np.median(v) * 1e3:9.2f} {np.percentile(v, 99) * 1e3:9.2f} "
              f"{np.median(v / ref):7.3f} {floor:>6s}", file=out)
    if "bnb 8-bit" in times:
        q = np.median(np.array(times["bnb 8-bit"]) / np.array(times["8-bit"]))
        print(f"  bnb 8-bit / fastopt 8-bit {q:.2f}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--gap-ms", type=float, default=20.0,
                    help="sleep before each call (untimed), so that no call finds the "
                         "last one's OpenMP threads still spinning on a core")
    args = ap.parse_args(argv)
    for w in args.workloads:
        shapes = WORKLOADS[w]()
        for nth in args.threads:
            fs = calls(shapes, nth)
            report(f"{w}, {nth} thread(s)", shapes, rotating(fs, args.seconds, 9,
                                                                     args.gap_ms / 1e3))
            del fs


def test_bench_q8_smoke():
    fs = calls([(1000,), (3, 5)], 1, with_bnb=False)
    times = rotating(fs, 0.0, 2)
    assert set(times) == set(BYTES) - {"bnb 8-bit"}
    assert state_bytes([(4096,)])["8-bit"] == 2 + 2 * 4 * 16 / 4096


if __name__ == "__main__":
    main()
