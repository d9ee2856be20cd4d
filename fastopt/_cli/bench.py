"""``fastopt bench``: throughput of the standard workloads.

For each op and workload it prints the p50 and p99 time of one update, ns
per element and GB/s of parameter+gradient+state traffic (both from the
p50), and two ratios, both another time over fastopt's (higher is faster
for fastopt): to the plain NumPy formula and to the memory-bandwidth
ceiling (a probe built into the extension: the same bytes moved over one
buffer of the same size, the ideal a multi-tensor optimizer can approach).

fastopt, NumPy and the probe are timed in turn, one call each per round,
for at least ``MIN_ROUNDS`` rounds; the NumPy ratio is the median of the
paired rounds and the ceiling the best of all the probe runs (three back to
back per round, with fastopt's thread count and with one), so runs slowed by
other programs change neither (:func:`summarize`). A ratio saying fastopt
beats the ceiling would be a broken measurement: the row says "too noisy
to measure" instead. If the machine looked busy while measuring (other
programs' CPU time during the rows, or a wide p50-p99 spread), one line
says so. ``--plot out.png``
also draws throughput against tensor size for every op and dtype (small
multiples).

The full benchmark matrix, with torch, lives in ``bench/`` (pytest-benchmark).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

from .. import _ext, _reference, get_num_threads, onnx_adagrad, onnx_adam, onnx_momentum
from . import _probe
from .workloads import TRAFFIC, WORKLOADS

_FAST = {"momentum": onnx_momentum, "adagrad": onnx_adagrad, "adam": onnx_adam}  # ONNX
_KW = {
    "momentum": {"lr": 0.01, "alpha": 0.9, "beta": 1.0, "norm_coefficient": 1e-4},
    "adagrad": {"lr": 0.01, "epsilon": 1e-6, "norm_coefficient": 1e-4},
    "adam": {"lr": 1e-3, "alpha": 0.9, "beta": 0.999, "epsilon": 1e-6},
}


#: Fewest interleaved rounds a row is computed from: a median of 11 ignores up
#: to 5 rounds slowed by other programs, a best of 11 probe runs up to 10.
MIN_ROUNDS = 11
#: How far fastopt may seem to beat the ceiling before the row is refused
#: (the probe and the update differ a little in their loop overhead).
CEILING_SLACK = 0.10


#: Back-to-back probe calls per round, the best kept: the first call after
#: other work may wait for the probe's threads to wake.
PROBE_REPEAT = 3


def interleaved(fns: dict, budget: float, max_rounds: int,
                min_rounds: int = MIN_ROUNDS, repeat: dict | None = None
                ) -> dict[str, list[float]]:
    """Wall times of every function, one call of each per round.

    The order rotates from round to round, so a slow moment of the machine
    falls on all of them alike, and round ``i`` of every list was taken at
    the same moment (the samples are paired). ``repeat[name]`` calls that
    function so many times back to back in its turn and keeps the best.
    Rounds continue until both ``min_rounds`` and ``budget`` seconds are
    reached, or ``max_rounds``.
    """
    names, repeat = list(fns), repeat or {}
    for f in fns.values():                          # warm up (page faults)
        f()
    times: dict[str, list[float]] = {k: [] for k in names}
    start, r = time.perf_counter(), 0
    while r < max(min_rounds, 1) or (r < max_rounds
                                     and time.perf_counter() - start < budget):
        for k in names[r % len(names):] + names[:r % len(names)]:
            best = math.inf
            for _ in range(repeat.get(k, 1)):
                t0 = time.perf_counter()
                fns[k]()
                best = min(best, time.perf_counter() - t0)
            times[k].append(best)
        r += 1
    return times


def summarize(fast, numpy=None, probe=None, load: float = 0.0, ncpu: int = 1,
              slack: float = CEILING_SLACK) -> dict:
    """The figures of one row, from interleaved per-round times in seconds.

    ``fastopt`` and ``fastopt_p99``: the median and 99th percentile of
    ``fast``. ``vs_numpy``: the median over rounds of ``numpy[i] / fast[i]``
    (paired). ``ceiling``: the best (least) probe time, since other programs
    only ever slow a run down. ``vs_ceiling``: ``ceiling / fastopt``. Both
    ratios are another time over fastopt's, so higher means fastopt is
    faster, and ``vs_ceiling`` cannot honestly exceed 1. When it exceeds
    ``1 + slack`` the measurement is broken (the probe ran only while the
    machine was busy): ``refused`` then holds a "too noisy to measure"
    reason naming ``load``, the cores other programs kept busy on average
    (:class:`_Others`), and both ratios are None.
    """
    fast = np.asarray(fast, dtype=float)
    out = {"fastopt": float(np.median(fast)),
           "fastopt_p99": float(np.percentile(fast, 99)),
           "vs_numpy": None, "ceiling": None, "vs_ceiling": None, "refused": None}
    if numpy is not None:
        out["vs_numpy"] = float(np.median(np.asarray(numpy, dtype=float) / fast))
    if probe is not None:
        out["ceiling"] = float(np.min(probe))
        out["vs_ceiling"] = out["ceiling"] / out["fastopt"]
        if out["vs_ceiling"] > 1.0 + slack:
            out["refused"] = (f"too noisy to measure: other programs kept {load:.1f} of "
                              f"{ncpu} cores busy (fastopt seemed {out['vs_ceiling']:.1f}x "
                              "faster than the memory-bandwidth ceiling)")
            out["vs_numpy"] = out["vs_ceiling"] = None
    return out


def _arrays(shapes, dtype, nstates):
    xs = [np.full(s, 0.5, dtype) for s in shapes]
    gs = [np.full(s, 1e-3, dtype) for s in shapes]
    states = [[np.zeros(s, dtype) for s in shapes] for _ in range(nstates)]
    return xs, gs, states


def _calls(op: str, dtype, shapes, numpy: bool) -> dict:
    """The functions one row times: fastopt, the NumPy formula, the probe
    (with fastopt's thread count and, when that is more, with one)."""
    n = sum(math.prod(s) for s in shapes)
    xs, gs, states = _arrays(shapes, dtype, 2 if op == "adam" else 1)
    kw = dict(_KW[op], t=1)
    if len(xs) == 1:
        args = (xs[0], gs[0], *(s[0] for s in states))
    else:
        args = (xs, gs, *states)
    fns = {"fastopt": lambda: _FAST[op](*args, **kw)}
    if numpy:
        ref = getattr(_reference, f"{op}_inplace")
        fns["numpy"] = lambda: ref(xs, gs, *states, **kw)
    bufs = [np.ones(n, dtype) for _ in range(TRAFFIC[op][0])]
    threads = get_num_threads()
    fns["probe"] = lambda: _probe.probe(bufs, threads)
    if threads > 1:     # its static split waits for a descheduled thread; one does not
        fns["probe 1 thread"] = lambda: _probe.probe(bufs, 1)
    return fns


def measure(op: str, dtype, shapes, budget: float = 1.0, numpy: bool = True) -> dict:
    """One row: :func:`summarize` of fastopt, the NumPy formula and the
    memory-bandwidth probe, timed in turn (:func:`interleaved`)."""
    n = sum(math.prod(s) for s in shapes)
    max_rounds = max(MIN_ROUNDS, min(20000, int(2e9 / max(n, 1))))
    fns = _calls(op, dtype, shapes, numpy)
    others = _Others()
    with np.errstate(all="ignore"):
        t = interleaved(fns, budget, max_rounds,
                        repeat={k: PROBE_REPEAT for k in fns if k.startswith("probe")})
    load = others.cores()
    probe = t["probe"] + t.get("probe 1 thread", [])
    out = summarize(t["fastopt"], t.get("numpy"), probe, load=load,
                    ncpu=os.cpu_count() or 1)
    out.update(elements=n, rounds=len(t["fastopt"]), load=load)
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


def _plot(plt, path: str, ops, dtypes, sizes=PLOT_SIZES, budget: float = 0.6) -> int:
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
                if r["refused"]:               # no point rather than a wrong one
                    print(f"{op} {np.dtype(dt).name} {n}: {r['refused']}")
                    r = {"fastopt": math.nan, "numpy": math.nan, "probe": math.nan}
                else:
                    r = {"fastopt": r["fastopt"], "numpy": r["vs_numpy"] * r["fastopt"],
                         "probe": r["ceiling"]}
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
    """One line when the machine looked busy while measuring: other programs
    keeping more than a quarter of the cores busy during some row
    (:class:`_Others`), or a p99 more than 3x its p50 in some row."""
    load = max(loads) if loads else 0.0
    why = []
    if load > 0.25 * ncpu:
        why.append(f"other programs kept {load:.1f} of {ncpu} cores busy")
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


def _busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (the first
    line of /proc/stat: user, nice, system, irq, softirq and steal), or None
    where there is no /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            f = fh.readline().split()
        v = [int(x) for x in f[1:9]]
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    if f[0] != "cpu" or len(v) < 8 or tick <= 0:
        return None
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / tick


class _Others:
    """How many cores other programs kept busy, on average, from its making
    to :meth:`cores`: the machine's busy CPU time less this process's own
    (every thread of it), over the time passed. Unlike the load average,
    which decays over a minute, it sees only the measured span: the load
    of a build that just ended does not count. Without /proc/stat, the
    1-minute load average less this process's threads stands in."""

    def __init__(self):
        self.t0, self.own0, self.busy0 = time.perf_counter(), time.process_time(), \
            _busy_seconds()

    def cores(self) -> float:
        busy = _busy_seconds()
        if busy is None or self.busy0 is None:
            return max(0.0, _loadavg() - get_num_threads())
        wall = time.perf_counter() - self.t0
        own = time.process_time() - self.own0
        return max(0.0, (busy - self.busy0 - own) / wall) if wall > 0 else 0.0


def _fmt(t: float) -> str:
    return f"{t * 1e6:.1f}us" if t < 1e-2 else f"{t * 1e3:.2f}ms"


RATIOS = ("ratios: another time / fastopt's time, higher is faster for fastopt; "
          "vs ceiling is at most 1.00 (at the memory-bandwidth ceiling; ~1.00: fastopt "
          "seemed up to 10 % faster than the probe, within the probe's own spread)")


def _row(op: str, dt, w: str, r: dict) -> str:
    """One table line; a refused row gives the reason instead of its ratios."""
    reads, writes = TRAFFIC[op]
    n, t, t99 = r["elements"], r["fastopt"], r["fastopt_p99"]
    gbs = n * np.dtype(dt).itemsize * (reads + writes) / t / 1e9
    head = (f"{op:9s} {np.dtype(dt).name:8s} {w:9s} {_fmt(t):>10s} "
            f"{_fmt(t99):>10s} {t / n * 1e9:8.3f} {gbs:6.1f} ")
    if r["refused"]:
        return head + r["refused"]
    # (above 1 but within CEILING_SLACK: at the ceiling, not beyond it)
    ceiling = f"{r['vs_ceiling']:.2f}x" if r["vs_ceiling"] <= 1.0 else "~1.00x"
    return head + f"{r['vs_numpy']:8.1f}x {ceiling:>10s}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fastopt bench", description=__doc__.split("\n")[0])
    p.add_argument("--ops", default="momentum,adagrad,adam",
                   help="comma-separated ops, from: momentum, adagrad, adam (default: all "
                        "three)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "both"])
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated, from: " + ", ".join(WORKLOADS))
    p.add_argument("--budget", type=float, default=1.0,
                   help="seconds of timing per row, an op, dtype and workload (fastopt, "
                        "NumPy and the probe in turn; default 1.0: the default rows take a "
                        "minute or two)")
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
    print(RATIOS)
    print(f"{'op':9s} {'dtype':8s} {'workload':9s} {'p50':>10s} {'p99':>10s} "
          f"{'ns/elem':>8s} {'GB/s':>6s} {'vs numpy':>9s} {'vs ceiling':>10s}")
    loads, spread = [], 0.0
    for op in ops:
        for dt in dtypes:
            for w in workloads:
                r = measure(op, dt, WORKLOADS[w], budget=a.budget)
                t, t99 = r["fastopt"], r["fastopt_p99"]
                if t99 - t > 50e-6:       # ignore microsecond jitter of tiny calls
                    spread = max(spread, t99 / t)
                loads.append(r["load"])
                print(_row(op, dt, w, r))
    print("p50/p99: median and 99th percentile of one call; ns/elem, GB/s and the "
          "ceiling ratio use the p50; vs numpy is the median of paired rounds. "
          f"Each row: at least {MIN_ROUNDS} rounds, fastopt, NumPy and the probe "
          "timed in turn; the ceiling is the best of the probe runs")
    note = _busy_note(loads, spread, os.cpu_count() or 1)
    if note:
        print(note)
    if a.plot:
        sizes = [int(float(s)) for s in a.plot_sizes.split(",") if s.strip()]
        return _plot(plt, a.plot, ops, [np.float32, np.float64], sizes,
                     budget=min(a.budget, 0.6))
    return 0
