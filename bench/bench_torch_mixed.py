"""A bfloat16 torch model's optimizer step: fastopt.torch (in bfloat16 as
torch does it, or with float32 masters) against what torch.optim offers,
in one interleaved run.

Per workload (bfloat16 torch.nn.Parameters with bfloat16 .grad set; AdamW),
one call each per round in a rotating order, each on its own copy:

    bf16             fastopt.torch.AdamW on the bfloat16 model: states of
                     bfloat16, the arithmetic in float32 (torch fused's way)
    bf16 flat        the same with flat=True (one C call over fastopt's
                     buffers after the layout check)
    masters          fastopt.torch.AdamW(master_weights=True): float32
                     masters and states, the new masters rounded into the
                     bfloat16 parameters in the same C pass
    masters+bf16 st  the same with state_dtype="bfloat16"
    torch fused bf16 torch.optim.AdamW(fused=True) on the bfloat16 model:
                     states of bfloat16, the arithmetic in float32
    torch fused fp32 torch.optim.AdamW(fused=True) on a float32 copy of the
                     model with float32 gradients: the step without 16 bits

Bytes an element: masters 4+2 (master, param copy) + 2 (grad) + 8 (m, v)
read, 4+2+8 written = 30; bfloat16 (parameter, gradient, m, v read; parameter,
m, v written) 14; float32 28. Printed: p50 and
p99 ms and the median per-round quotient against torch fused bf16.

    PYTHONPATH=$PWD python bench/bench_torch_mixed.py [--seconds 4]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import rotating  # noqa: E402

WORKLOADS = {"1000x4096": [(4096,)] * 1000, "1x5e7": [(50_000_000,)]}
ADAMW = {"lr": 1e-3, "weight_decay": 1e-2}


def _params(torch, shapes, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g).to(dtype)) for s in shapes]
    for p in ps:
        p.grad = (torch.randn(p.shape, generator=g) * 1e-2).to(dtype)
    return ps


def calls(shapes):
    """{name: one step} (see the module)."""
    import torch

    import fastopt.torch as ft
    bf16 = torch.bfloat16
    out = {
        "bf16": ft.AdamW(_params(torch, shapes, 4, bf16), **ADAMW).step,
        "bf16 flat": ft.AdamW(_params(torch, shapes, 5, bf16), flat=True, **ADAMW).step,
        "masters": ft.AdamW(_params(torch, shapes, 0, bf16), master_weights=True,
                            **ADAMW).step,
        "masters+bf16 st": ft.AdamW(_params(torch, shapes, 1, bf16), master_weights=True,
                                    state_dtype="bfloat16", **ADAMW).step,
        "torch fused bf16": torch.optim.AdamW(_params(torch, shapes, 2, bf16), fused=True,
                                              **ADAMW).step,
        "torch fused fp32": torch.optim.AdamW(_params(torch, shapes, 3, torch.float32),
                                              fused=True, **ADAMW).step,
    }
    for f in out.values():      # first steps: states and masters made
        f()
        f()
    return out


def report(label, times, out=sys.stdout):
    ref = np.array(times["torch fused bf16"])
    print(f"{label} ({len(ref)} rounds)", file=out)
    for k, v in times.items():
        v = np.array(v)
        print(f"  {k:17s} p50 {np.median(v) * 1e3:8.3f} ms  p99 "
              f"{np.percentile(v, 99) * 1e3:8.3f} ms   / torch fused bf16 "
              f"{np.median(v / ref):5.2f} x", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="per workload")
    ap.add_argument("--workloads", default="1000x4096,1x5e7")
    ap.add_argument("--gap-ms", type=float, default=0.0,
                    help="sleep before each call (untimed), so that no call finds the "
                         "last one's OpenMP threads still spinning on a core")
    args = ap.parse_args(argv)
    import torch
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
          f"{os.getloadavg()[0]:.2f}")
    for w in args.workloads.split(","):
        report(f"{w} AdamW bfloat16 model",
               rotating(calls(WORKLOADS[w]), args.seconds, 7, args.gap_ms / 1e3))
    print(f"load average {os.getloadavg()[0]:.2f}")


def test_bench_torch_mixed_smoke():
    """pytest bench/ --benchmark-disable runs this: the script works."""
    import io

    import pytest
    pytest.importorskip("torch")
    buf = io.StringIO()
    report("smoke", rotating(calls([(4, 3), (5,), ()]), 0.0, 2), out=buf)
    assert buf.getvalue().count("/ torch fused bf16") == 6


if __name__ == "__main__":
    main()
