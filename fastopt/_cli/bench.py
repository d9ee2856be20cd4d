"""``python -m fastopt bench``: throughput of the standard workloads.

For each op and workload it prints the p50 and p99 time of one update, ns
per element and GB/s of parameter+gradient+state traffic (both from the
p50), and the ratio to the plain NumPy formula and to the memory-bandwidth
ceiling (a probe built into the extension: the same bytes moved over one
buffer of the same size, the ideal a multi-tensor optimizer can approach).
If the machine looked busy while measuring (load average, or a wide p50-p99
spread), one line says so. ``--plot out.png`` also draws throughput against
tensor size for every op and dtype (small multiples).

The full benchmark matrix, with torch, lives in ``bench/`` (pytest-benchmark).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

from .. import _ext, _reference, adagrad, adam, get_num_threads, momentum
from .workloads import TRAFFIC, WORKLOADS

_FAST = {"momentum": momentum, "adagrad": adagrad, "adam": adam}
_KW = {
    "momentum": {"lr": 0.01, "alpha": 0.9, "beta": 1.0, "norm_coefficient": 1e-4},
    "adagrad": {"lr": 0.01, "epsilon": 1e-6, "norm_coefficient": 1e-4},
    "adam": {"lr": 1e-3, "alpha": 0.9, "beta": 0.999, "epsilon": 1e-6},
}


def _times(fn, budget: float, max_reps: int, min_reps: int = 3) -> list[float]:
    """Wall times of fn() over as many runs as fit in ~budget seconds."""
    fn()                                            # warm up (page faults)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps
                                     or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _median_time(fn, budget: float, max_reps: int, min_reps: int = 3) -> float:
    """Median wall time of fn() over as many runs as fit in ~budget seconds."""
    return float(np.median(_times(fn, budget, max_reps, min_reps)))


def _arrays(shapes, dtype, nstates):
    xs = [np.full(s, 0.5, dtype) for s in shapes]
    gs = [np.full(s, 1e-3, dtype) for s in shapes]
    states = [[np.zeros(s, dtype) for s in shapes] for _ in range(nstates)]
    return xs, gs, states


def measure(op: str, dtype, shapes, budget: float = 0.4, numpy: bool = True) -> dict:
    """Median seconds per update for fastopt (and its p99), the NumPy formula
    and the memory-bandwidth ceiling (the probe)."""
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
    t = _times(lambda: _FAST[op](*args, **kw), budget, max_reps, min_reps=10)
    out["fastopt"] = float(np.percentile(t, 50))
    out["fastopt_p99"] = float(np.percentile(t, 99))
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
CEILING = "memory-bandwidth ceiling"


def _pyplot():
    """matplotlib.pyplot (Agg backend), or None when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _plot(plt, path: str, ops, dtypes, sizes=PLOT_SIZES, budget: float = 0.2) -> int:
    """Throughput against tensor size, one panel per op x dtype."""
    fig, axes = plt.subplots(len(ops), len(dtypes), squeeze=False, sharex=True,
                             figsize=(4.2 * len(dtypes), 3.0 * len(ops)))
    for i, op in enumerate(ops):
        reads, writes = TRAFFIC[op]
        for j, dt in enumerate(dtypes):
            nbytes = np.dtype(dt).itemsize * (reads + writes)
            series: dict[str, list[float]] = {"fastopt": [], "numpy": [], "probe": []}
            for n in sizes:
                r = measure(op, dt, [(n,)], budget=budget)
                for k, ys in series.items():
                    ys.append(n * nbytes / r[k] / 1e9)
            ax = axes[i][j]
            for k, label in (("fastopt", "fastopt"), ("numpy", "NumPy formula"),
                             ("probe", CEILING)):
                ax.plot(sizes, series[k], marker="o", markersize=3, label=label,
                        linestyle="--" if k == "probe" else "-")
            ax.set_xscale("log")
            ax.set_title(f"{op} {np.dtype(dt).name}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if j == 0:
                ax.set_ylabel("GB/s")
            if i == len(ops) - 1:
                ax.set_xlabel("elements in the tensor")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"fastopt, {get_num_threads()} threads: GB/s of x, g and state traffic")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")
    return 0


def _busy_note(loads: list[float], spread: float, ncpu: int) -> str | None:
    """One line when the machine looked busy while measuring: a load average
    above ~70% of the cores, or a p99 more than 3x its p50 in some row."""
    load = max(loads) if loads else 0.0
    why = []
    if load > 0.7 * ncpu:
        why.append(f"load average {load:.1f} on {ncpu} cores")
    if spread > 3.0:
        why.append(f"p99 up to {spread:.1f}x p50")
    if not why:
        return None
    return ("note: the machine was busy while measuring (" + "; ".join(why)
            + "): these times include waiting for other programs, not only "
            "fastopt; measure again on a quiet machine for its speed")


def _loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def _fmt(t: float) -> str:
    return f"{t * 1e6:.1f}us" if t < 1e-2 else f"{t * 1e3:.2f}ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fastopt bench", description=__doc__.split("\n")[0])
    p.add_argument("--ops", default="momentum,adagrad,adam",
                   help="comma-separated ops (default: all three)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "both"])
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated, from: " + ", ".join(WORKLOADS))
    p.add_argument("--budget", type=float, default=0.3,
                   help="seconds of timing per implementation and workload")
    p.add_argument("--plot", metavar="PNG",
                   help="also draw throughput against size for every op and dtype "
                        "(needs matplotlib)")
    p.add_argument("--plot-sizes", default=",".join(map(str, PLOT_SIZES)),
                   help="comma-separated tensor sizes for --plot")
    a = p.parse_args(argv)
    ops = [o.strip() for o in a.ops.split(",") if o.strip()]
    workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    bad = [o for o in ops if o not in _FAST] + [w for w in workloads if w not in WORKLOADS]
    if bad:
        p.error(f"unknown op or workload: {', '.join(bad)}")
    dtypes = [np.float32, np.float64] if a.dtype == "both" else [np.dtype(a.dtype).type]

    plt = None
    if a.plot:                           # before measuring anything
        plt = _pyplot()
        if plt is None:
            print("fastopt bench: --plot needs matplotlib (pip install matplotlib); "
                  "nothing measured", file=sys.stderr)
            return 2
    cfg = _ext.build_info()
    print(f"fastopt bench: {get_num_threads()} threads, kernels {cfg['isa_active']}, "
          f"OpenMP {'on' if _ext.have_openmp() else 'off'}")
    print(f"{'op':9s} {'dtype':8s} {'workload':9s} {'p50':>10s} {'p99':>10s} "
          f"{'ns/elem':>8s} {'GB/s':>6s} {'vs numpy':>9s} {'vs probe':>9s}")
    loads, spread = [_loadavg()], 0.0
    for op in ops:
        reads, writes = TRAFFIC[op]
        for dt in dtypes:
            for w in workloads:
                r = measure(op, dt, WORKLOADS[w], budget=a.budget)
                n = r["elements"]
                gbs = n * np.dtype(dt).itemsize * (reads + writes) / r["fastopt"] / 1e9
                t, t99 = r["fastopt"], r["fastopt_p99"]
                if t99 - t > 50e-6:       # ignore microsecond jitter of tiny calls
                    spread = max(spread, t99 / t)
                loads.append(_loadavg())
                print(f"{op:9s} {np.dtype(dt).name:8s} {w:9s} {_fmt(t):>10s} "
                      f"{_fmt(t99):>10s} {t / n * 1e9:8.3f} {gbs:6.1f} "
                      f"{r['numpy'] / t:8.1f}x {t / r['probe']:8.2f}x")
    print("p50/p99: median and 99th percentile of one call; ns/elem, GB/s and the "
          "ratios use the p50. vs numpy: how many times faster than the NumPy formula; "
          "vs probe: time / memory-bandwidth-ceiling time (1.00 = at the ceiling)")
    note = _busy_note(loads, spread, os.cpu_count() or 1)
    if note:
        print(note)
    if a.plot:
        sizes = [int(float(s)) for s in a.plot_sizes.split(",") if s.strip()]
        return _plot(plt, a.plot, ops, [np.float32, np.float64], sizes,
                     budget=min(a.budget, 0.2))
    return 0
