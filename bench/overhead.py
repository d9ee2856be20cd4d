"""Per-call overhead of the public in-place ops: one call from Python
on 1e3-element float32 arrays, for the tree on PYTHONPATH and, with
``--against DIR`` (repeatable), other built trees (each root put first on
PYTHONPATH in turn), columns named after their directories.

    PYTHONPATH=$PWD python bench/overhead.py                     # this tree
    PYTHONPATH=$PWD python bench/overhead.py --against /work/wt/old

Per op, two figures, each measured in a fresh child process:

- instructions per call (callgrind, when ``valgrind`` is on PATH): a child
  making N calls minus a child making none, divided by N, with
  PYTHONHASHSEED=0 and OMP_NUM_THREADS=1 so the count repeats to a few
  instructions. It includes the 1e3-element kernel itself and is the
  reliable column on a shared machine. The count moves with the stack's
  alignment, which the size of the environment sets (up to ~4 % of a call
  was seen between two environments differing by 40 bytes), so it is the
  mean over ``--offsets`` environment sizes 16 bytes apart, the same sizes
  for every tree.
- timeit p50 and p99 in ns: ``--repeat`` samples of ``--number`` calls each,
  the per-call mean of each sample, pooled over the same environment sizes
  and over ``--rounds`` rounds in which the trees alternate; for each other
  tree, the median over rounds of its p50 over this tree's (so a machine
  whose speed drifts moves both alike). Wall-clock: only meaningful on an
  idle machine.

Nothing here is asserted; speed lives in bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

OPS = ("momentum", "adagrad", "adam", "agc", "momentum_clip", "adamw_torch", "sgd_torch")
LABELS = {"momentum_clip": "momentum(clipping=)", "adamw_torch": "adamw (torch form)",
          "sgd_torch": "sgd (torch form, momentum)"}


def _call(op):
    """The op's call, as a zero-argument function (in the child)."""
    import numpy as np

    import fastopt

    x = np.ones(1000, np.float32)
    g = np.full(1000, 1e-3, np.float32)
    v = np.zeros(1000, np.float32)
    h = np.zeros(1000, np.float32)
    # the ONNX operators; a tree from before they took their onnx_ names
    # (--against an older build) has them under the plain names
    mom, ada, adam = (getattr(fastopt, f"onnx_{n}", None) or getattr(fastopt, n)
                      for n in ("momentum", "adagrad", "adam"))
    return {
        "momentum": lambda: mom(x, g, v, lr=0.01, t=1),
        "adagrad": lambda: ada(x, g, h, lr=0.01, t=1),
        "adam": lambda: adam(x, g, v, h, lr=0.01, t=1),
        "agc": lambda: fastopt.agc(x, g, clipping=0.01),
        "momentum_clip": lambda: mom(x, g, v, lr=0.01, t=1, clipping=0.01),
        # the torch-form functions: lists of one tensor, as a caller looping
        # over its parameters passes them
        "adamw_torch": lambda: fastopt.adamw([x], [g], [v], [h], lr=0.01, step=1),
        "sgd_torch": lambda: fastopt.sgd([x], [g], [v], lr=0.01, momentum=0.9, step=1),
    }[op]


def child(op: str, n: int, number: int) -> None:
    """n >= 0: make n calls (after one warm-up call); n < 0: print -n timeit
    samples (ns per call), one per line."""
    f = _call(op)
    f()
    if n >= 0:
        for _ in range(n):
            f()
        return
    import timeit

    for t in timeit.repeat(f, number=number, repeat=-n):
        print(t / number * 1e9)


def _env(tree, pad=0):
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1",
               FASTOPT_BENCH_PAD="x" * pad)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (tree, os.environ.get("PYTHONPATH")) if p)
    return env


def _child_cmd(op, n, number):
    return [sys.executable, os.path.abspath(__file__), "--child", op, str(n),
            "--number", str(number)]


def instructions(tree, op: str, n: int, offsets: int) -> int:
    """Instructions per call: a run of n calls minus a run of none, the
    mean over `offsets` environment sizes (stack alignments)."""
    def refs(k, pad):
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             *_child_cmd(op, k, 1)], env=_env(tree, pad), capture_output=True,
            text=True, check=True).stderr
        return int(re.search(r"refs:\s*([\d,]+)", out).group(1).replace(",", ""))

    per = [(refs(n, 16 * j) - refs(0, 16 * j)) / n for j in range(offsets)]
    return round(sum(per) / len(per))


def samples(tree, op: str, repeat: int, number: int, offsets: int):
    """ns per call, ``repeat`` samples at each of `offsets` environment sizes
    (the stack's alignment moves the time too)."""
    ts = []
    for j in range(offsets):
        out = subprocess.run(_child_cmd(op, -repeat, number), env=_env(tree, 16 * j),
                             capture_output=True, text=True, check=True).stdout
        ts += [float(s) for s in out.split()]
    return ts


def _pct(ts, q):
    ts = sorted(ts)
    return ts[min(len(ts) - 1, int(q * len(ts)))]


def _row(op, trees, a, grind):
    """One op's cells: per tree its count, p50 and p99 over every round, and
    for each other tree the median over rounds of its p50 / this tree's
    (the rounds alternate the trees' order, so drift hits both alike)."""
    pooled = {name: [] for name, _ in trees}
    per = {name: [] for name, _ in trees}
    for r in range(0 if a.no_timeit else a.rounds):
        for name, tree in (trees if r % 2 == 0 else trees[::-1]):
            ts = samples(tree, op, a.repeat, a.number, a.offsets)
            pooled[name] += ts
            per[name].append(_pct(ts, 0.5))
    row = [LABELS.get(op, op)]
    for name, tree in trees:
        if grind:
            row.append(f"{instructions(tree, op, a.calls, a.offsets):,}")
        if not a.no_timeit:
            row += [f"{_pct(pooled[name], 0.5):,.0f}", f"{_pct(pooled[name], 0.99):,.0f}"]
            if name != "this":
                q = sorted(o / t for o, t in zip(per[name], per["this"]))
                row.append(f"{q[len(q) // 2]:.3f}")
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", metavar="DIR", action="append", default=[],
                   help="another built tree, side by side (repeatable)")
    p.add_argument("--calls", type=int, default=1000, help="calls per callgrind run")
    p.add_argument("--repeat", type=int, default=101, help="timeit samples")
    p.add_argument("--number", type=int, default=2000, help="calls per timeit sample")
    p.add_argument("--offsets", type=int, default=12,
                   help="environment sizes (stack alignments) averaged per count")
    p.add_argument("--no-callgrind", action="store_true")
    p.add_argument("--no-timeit", action="store_true",
                   help="instructions only (they need no quiet machine)")
    p.add_argument("--rounds", type=int, default=3,
                   help="timing rounds, the trees alternating within each")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated subset")
    p.add_argument("--child", nargs=2, metavar=("OP", "N"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(a.child[0], int(a.child[1]), a.number)
        return
    trees = [("this", None)] + [(os.path.basename(os.path.abspath(d)), os.path.abspath(d))
                                for d in a.against]
    grind = shutil.which("valgrind") is not None and not a.no_callgrind
    head = ["op"]
    for name, _ in trees:
        head += ([f"{name} instr"] if grind else []) + ([] if a.no_timeit else (
            [f"{name} p50 ns", f"{name} p99 ns"]
            + ([] if name == "this" else [f"{name} / this p50"])))
    print("| " + " | ".join(head) + " |")
    print("|---" + "|---:" * (len(head) - 1) + "|")
    for op in a.ops.split(","):
        print("| " + " | ".join(_row(op, trees, a, grind)) + " |", flush=True)
    if not grind:
        print("(valgrind not on PATH or --no-callgrind: no instruction counts)")


if __name__ == "__main__":
    main()
