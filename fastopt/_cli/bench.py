"""``python -m fastopt bench``: throughput of the standard workloads.

For each op and workload it prints the median time of one update, ns per
element, GB/s of parameter+gradient+state traffic, and the ratio to the
plain NumPy formula and to a bandwidth probe (bench/ceiling.c, built into
the extension: the same bytes moved over one buffer of the same size, the
ideal a multi-tensor optimizer can approach). ``--plot out.png`` also draws
throughput against tensor size for fastopt, NumPy and the probe.

The full benchmark matrix, with torch, lives in ``bench/`` (pytest-benchmark).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from .. import _ext, _reference, get_num_threads
from .. import adagrad, adam, momentum
from .workloads import TRAFFIC, WORKLOADS

_FAST = {"momentum": momentum, "adagrad": adagrad, "adam": adam}
_KW = {
    "momentum": dict(lr=0.01, alpha=0.9, beta=1.0, norm_coefficient=1e-4),
    "adagrad": dict(lr=0.01, epsilon=1e-6, norm_coefficient=1e-4),
    "adam": dict(lr=1e-3, alpha=0.9, beta=0.999, epsilon=1e-6),
}


def _median_time(fn, budget: float, max_reps: int, min_reps: int = 3) -> float:
    """Median wall time of fn() over as many runs as fit in ~budget seconds."""
    fn()                                            # warm up (page faults)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps
                                     or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _arrays(shapes, dtype, nstates):
    xs = [np.full(s, 0.5, dtype) for s in shapes]
    gs = [np.full(s, 1e-3, dtype) for s in shapes]
    states = [[np.zeros(s, dtype) for s in shapes] for _ in range(nstates)]
    return xs, gs, states


def measure(op: str, dtype, shapes, budget: float = 0.4, numpy: bool = True) -> dict:
    """Median seconds per update for fastopt, the NumPy formula and the probe."""
    n = sum(math.prod(s) for s in shapes)
    nstates = 2 if op == "adam" else 1
    xs, gs, states = _arrays(shapes, dtype, nstates)
    kw = dict(_KW[op], t=1)
    if len(xs) == 1:
        args = (xs[0], gs[0], *(s[0] for s in states))
    else:
        args = (xs, gs, *states)
    max_reps = max(5, min(20000, int(2e9 / max(n, 1))))
    out = {"elements": n}
    out["fastopt"] = _median_time(lambda: _FAST[op](*args, **kw), budget, max_reps)
    if numpy:
        ref = getattr(_reference, f"{op}_inplace")
        with np.errstate(all="ignore"):
            out["numpy"] = _median_time(lambda: ref(xs, gs, *states, **kw),
                                        budget, max(3, max_reps // 10))
    reads, _ = TRAFFIC[op]
    bufs = [np.ones(n, dtype) for _ in range(reads)]
    threads = get_num_threads()
    with np.errstate(all="ignore"):
        out["probe"] = _median_time(lambda: _ext.probe(bufs, threads), budget, max_reps)
    return out


PLOT_SIZES = [10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6, 10 ** 7, 5 * 10 ** 7]


def _plot(path: str, op: str, dtype, sizes=PLOT_SIZES, budget: float = 0.2) -> int:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot needs matplotlib: pip install matplotlib", file=sys.stderr)
        return 1
    reads, writes = TRAFFIC[op]
    nbytes = np.dtype(dtype).itemsize * (reads + writes)
    series: dict[str, list[float]] = {"fastopt": [], "numpy": [], "probe": []}
    for n in sizes:
        r = measure(op, dtype, [(n,)], budget=budget)
        for k in series:
            series[k].append(n * nbytes / r[k] / 1e9)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, v in series.items():
        ax.plot(sizes, v, marker="o", label=k)
    ax.set_xscale("log")
    ax.set_xlabel("elements in the tensor")
    ax.set_ylabel("GB/s (x, g and state traffic)")
    ax.set_title(f"{op} {np.dtype(dtype).name}, {get_num_threads()} threads")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fastopt bench", description=__doc__.split("\n")[0])
    p.add_argument("--ops", default="momentum,adagrad,adam",
                   help="comma-separated ops (default: all three)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "both"])
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated, from: " + ", ".join(WORKLOADS))
    p.add_argument("--budget", type=float, default=0.3,
                   help="seconds of timing per implementation and workload")
    p.add_argument("--plot", metavar="PNG", help="draw throughput against size (matplotlib)")
    p.add_argument("--plot-sizes", default=",".join(map(str, PLOT_SIZES)),
                   help="comma-separated tensor sizes for --plot")
    a = p.parse_args(argv)
    ops = [o.strip() for o in a.ops.split(",") if o.strip()]
    workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    bad = [o for o in ops if o not in _FAST] + [w for w in workloads if w not in WORKLOADS]
    if bad:
        p.error(f"unknown op or workload: {', '.join(bad)}")
    dtypes = [np.float32, np.float64] if a.dtype == "both" else [np.dtype(a.dtype).type]

    cfg = _ext.build_info()
    print(f"fastopt bench: {get_num_threads()} threads, kernels {cfg['isa_active']}, "
          f"OpenMP {'on' if _ext.have_openmp() else 'off'}")
    print(f"{'op':9s} {'dtype':8s} {'workload':9s} {'time':>10s} {'ns/elem':>8s} "
          f"{'GB/s':>6s} {'vs numpy':>9s} {'vs probe':>9s}")
    for op in ops:
        reads, writes = TRAFFIC[op]
        for dt in dtypes:
            for w in workloads:
                r = measure(op, dt, WORKLOADS[w], budget=a.budget)
                n = r["elements"]
                gbs = n * np.dtype(dt).itemsize * (reads + writes) / r["fastopt"] / 1e9
                t = r["fastopt"]
                unit = f"{t * 1e6:8.1f}us" if t < 1e-2 else f"{t * 1e3:8.2f}ms"
                print(f"{op:9s} {np.dtype(dt).name:8s} {w:9s} {unit:>10s} "
                      f"{t / n * 1e9:8.3f} {gbs:6.1f} {r['numpy'] / t:8.1f}x "
                      f"{t / r['probe']:8.2f}x")
    print("vs numpy: how many times faster than the NumPy formula; "
          "vs probe: time / bandwidth-probe time (1.00 = at the memory ceiling)")
    if a.plot:
        sizes = [int(float(s)) for s in a.plot_sizes.split(",") if s.strip()]
        return _plot(a.plot, ops[0], dtypes[0], sizes, budget=a.budget)
    return 0
