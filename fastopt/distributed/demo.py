"""A real distributed run on one machine: ``mpiexec -n 2 fastopt distributed-demo``.

Trains a small MLP (64-128-10, ReLU, softmax cross-entropy; forward and
backward in NumPy) on scikit-learn's bundled handwritten digits (1,797 8x8
images, no download) with :class:`~fastopt.distributed.ShardedOptimizer`
around :class:`fastopt.optim.OnnxAdam`, data parallel: every mini-batch is split
between the ranks, each computes the gradient of its part, the optimizer
averages them. Each rank holds only its shard of Adam's two states.

Rank 0 also runs the single-process ``fastopt.optim.OnnxAdam`` on the same
mini-batches, fed the same average of the per-part gradients, and reports
whether the two runs end with the same parameters, bit for bit, and the
same test accuracy. (The average is formed by MPI in the distributed run; at
2 ranks a sum of two numbers does not depend on the order, so the runs are
bit-identical; at 3 or more ranks they are whenever MPI adds in rank order.)
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np


def _data(seed=0):
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # pragma: no cover - depends on the install
        raise SystemExit("the demo needs scikit-learn: python -m pip install \".[demo]\" "
                         "(in a clone of fastopt)") from None
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    return x[:1400], y[:1400], x[1400:], y[1400:]


def _init(sizes, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        out.append((rng.standard_normal((b, a)) * np.sqrt(2.0 / a)).astype(np.float32))
        out.append(np.zeros(b, np.float32))
    return out


def _forward(p, x):
    acts = [x]
    for k in range(0, len(p), 2):
        z = acts[-1] @ p[k].T + p[k + 1]
        acts.append(np.maximum(z, 0) if k + 2 < len(p) else z)
    return acts


def _grads(p, x, y):
    """Gradients of the mean cross-entropy over the rows of x."""
    acts = _forward(p, x)
    z = acts[-1] - acts[-1].max(axis=1, keepdims=True)
    e = np.exp(z)
    d = e / e.sum(axis=1, keepdims=True)
    d[np.arange(len(y)), y] -= 1
    d /= np.float32(len(y))
    out = [None] * len(p)
    for k in range(len(p) - 2, -1, -2):
        out[k] = (d.T @ acts[k // 2]).astype(np.float32)
        out[k + 1] = d.sum(axis=0).astype(np.float32)
        if k:
            d = (d @ p[k]) * (acts[k // 2] > 0)
    return out


def _accuracy(p, x, y):
    return float(np.mean(np.argmax(_forward(p, x)[-1], axis=1) == y))


def _at_least(low):
    """An argparse type: an int >= low (every rank refuses it while parsing)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value
    return parse


def _rate(text):
    """An argparse type: a finite float >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0.0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fastopt distributed-demo",
                                 description="Train the digits MLP with sharded Adam over MPI.")
    ap.add_argument("--epochs", type=_at_least(0), default=15)
    ap.add_argument("--batch", type=_at_least(1), default=64)
    ap.add_argument("--lr", type=_rate, default=3e-3)
    args = ap.parse_args(argv)
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    xtr, ytr, xte, yte = _data()
    opt = ShardedOptimizer(fo.OnnxAdam, _init([64, 128, 10]), lr=args.lr, comm=comm)
    params = opt.params
    single = fo.OnnxAdam(_init([64, 128, 10]), lr=args.lr) if rank == 0 else None
    rng = np.random.default_rng(2)
    for _epoch in range(args.epochs):
        order = rng.permutation(len(xtr))
        for s in range(0, len(order), args.batch):
            batch = order[s:s + args.batch]
            if len(batch) < world:
                continue
            parts = [batch[r::world] for r in range(world)]
            opt.step(_grads(params, xtr[parts[rank]], ytr[parts[rank]]))
            if single is not None:   # the same average, formed here in rank order
                per = [_grads(single.params, xtr[b], ytr[b]) for b in parts]
                avg = []
                for i in range(len(per[0])):
                    total = per[0][i]
                    for q in range(1, world):
                        total = total + per[q][i]
                    avg.append(np.divide(total, np.float32(world)))
                single.step(avg)
    full = sum(p.nbytes for p in params) * 2
    lines = comm.gather(f"rank {rank} of {world}: Adam state {opt.state_bytes / 1024:7.1f} KiB "
                        f"(single process: {full / 1024:.1f} KiB)", root=0)
    acc = _accuracy(params, xte, yte)
    if rank == 0:
        print(f"digits MLP 64-128-10, {sum(p.size for p in params):,} float32 parameters, "
              f"{args.epochs} epochs, batches of {args.batch} split over {world} rank(s)")
        print("\n".join(lines))
        ref = _accuracy(single.params, xte, yte)
        same = all(a.tobytes() == b.tobytes() for a, b in zip(params, single.params))
        print(f"test accuracy, sharded over {world} rank(s): {acc:.4f}")
        print(f"test accuracy, single process:           {ref:.4f}")
        print(f"parameters bit-identical: {'yes' if same else 'no'}")
        sys.stdout.flush()
        return 0 if acc == ref else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
