"""The serial default path against n_threads=1 on a busy machine.

One Python process spinning on the last CPU (as bench/bench_load.py's "busy"
load), then rounds of [default, n_threads=1, NumPy formula] and [n_threads=1,
default, NumPy formula] of Adam on one float32 array, every call below the
busy-machine size so both fastopt calls run serially. Prints each one's p50
and p99, the p50 of the calls that ran first and second in their round, and
the pool's counters (pooled calls must be 0 for the comparison to mean the
same code). This is the measurement behind the machine-load sample interval
of src_c/machine_load.c (bench/RESULTS.md):

    PYTHONPATH=$PWD python bench/serial_gap.py              # 1e6 elements, 1000 rounds
    PYTHONPATH=$PWD python bench/serial_gap.py --no-numpy   # the two fastopt calls only

Nothing is asserted; speed lives in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

import fastopt
from fastopt import _reference as ref

KW = {"lr": 1e-3, "alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "norm_coefficient": 0.0}


def _spinner():
    last = os.cpu_count() - 1
    code = f"import os\nos.sched_setaffinity(0, {{{last}}})\nwhile True: pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def measure(n, rounds, numpy_step=True):
    """{name: (times in s, position of each call in its round)}."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    v, h = np.zeros_like(x), np.zeros_like(x)
    steps = {"default": lambda: fastopt.onnx_adam(x, g, v, h, t=1, n_threads=None, **KW),
             "n_threads=1": lambda: fastopt.onnx_adam(x, g, v, h, t=1, n_threads=1, **KW)}
    if numpy_step:
        steps["numpy"] = lambda: ref.adam_inplace([x], [g], [v], [h], t=1, **KW)
    a, b, *rest = steps
    orders = [[a, b, *rest], [b, a, *rest]]
    out = {k: ([], []) for k in steps}
    with np.errstate(all="ignore"):
        for r in range(rounds):
            for pos, k in enumerate(orders[r % 2]):
                t0 = time.perf_counter()
                steps[k]()
                out[k][0].append(time.perf_counter() - t0)
                out[k][1].append(pos)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--no-numpy", action="store_true")
    args = ap.parse_args(argv)
    spin = _spinner()
    try:
        time.sleep(0.5)                     # the spinner is running
        before = fastopt._ext.thread_stats()["parallel_calls"]
        res = measure(int(args.n), args.rounds, not args.no_numpy)
        pooled = fastopt._ext.thread_stats()["parallel_calls"] - before
    finally:
        spin.kill()
        spin.wait()
    p50 = {}
    for k in ("default", "n_threads=1"):
        t, pos = np.asarray(res[k][0]) * 1e6, np.asarray(res[k][1])
        p50[k] = [np.percentile(t, 50)] + [np.percentile(t[pos == i], 50) for i in (0, 1)]
        print(f"{k:12s} p50 {p50[k][0]:7.0f} us  p99 {np.percentile(t, 99):7.0f} us  "
              f"first in round {p50[k][1]:7.0f} us  second {p50[k][2]:7.0f} us")
    d, s = p50["default"], p50["n_threads=1"]
    print(f"default / n_threads=1 p50: {d[0] / s[0]:.2f} (second in round "
          f"{d[2] / s[2]:.2f}); pooled calls {pooled}")


if __name__ == "__main__":
    main()
