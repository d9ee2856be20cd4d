"""LAMB's and LARS's trust ratio over tensors split between ranks.

A tensor whose group scales its update by a trust ratio is cut only at
multiples of ``TRUST_BLOCK`` from its start (``_layout.cut_rule``), the
block of the C core's trust pass, so every rank's piece holds whole blocks
of the whole tensor. A step is then two calls of the rank's inner
optimizer around one exchange:

1. the trust pass alone over the rank's pieces: two sums per block (of
   x*x and of w*w, w the rule's update before the ratio), nothing written;
2. an Allgatherv of every rank's block sums;
3. per trusted tensor, its blocks' sums added in the tensor's block order
   from 0.0 (each rank adds the same numbers in the same order), and the
   step with those two sums given for each of the rank's pieces.

One process adds the same block sums in the same order, so every ratio,
and with it every parameter and state, is the single-process optimizer's
bit for bit at every world size (docs/distributed.md).
"""
from __future__ import annotations

import numpy as np

from ._comm import mpi_type, raise_agreed
from ._layout import TRUST_BLOCK


def trusted_pieces(opt, rank: int, has) -> list:
    """Rank's pieces of trusted tensors that have a gradient this step, in
    the order of its inner optimizer's tensors (group, then tensor, then
    position): the order of the C step's trusted tensors."""
    ps = [p for pp in opt.layout.pieces(rank).values() for p in pp
          if opt._trusting[p.tensor.group] and has[p.tensor.index]]
    return sorted(ps, key=lambda p: (p.tensor.group, p.tensor.index, p.lo))


def _blocks(p) -> int:
    return -(-(p.hi - p.lo) // TRUST_BLOCK)


def sums_given(opt, every, has) -> np.ndarray:
    """From every rank's block sums (concatenated in rank order), this
    rank's trust_in: per piece, its whole tensor's two sums."""
    blocks: dict = {}
    pos = 0
    for r in range(opt.world):
        for p in trusted_pieces(opt, r, has):
            for b in range(_blocks(p)):
                blocks.setdefault(p.tensor.index, []).append(
                    (p.lo + b * TRUST_BLOCK, float(every[pos]), float(every[pos + 1])))
                pos += 2
    totals = {}
    for k, bs in blocks.items():
        sx = sw = 0.0
        for _, a, b in sorted(bs):          # the tensor's block order
            sx += a
            sw += b
        totals[k] = (sx, sw)
    return np.array([v for p in trusted_pieces(opt, opt.rank, has)
                     for v in totals[p.tensor.index]], np.float64)


def step(opt, f, per, grad_scale, has):
    """The inner optimizer's step with the whole tensors' trust ratios
    (every rank calls it: it is collective). Returns the error of the
    update, if it failed, for the caller to raise on every rank."""
    mine = 2 * sum(_blocks(p) for p in trusted_pieces(opt, opt.rank, has))
    out = np.zeros(mine, np.float64)
    err = None
    if opt.inner is not None:
        try:
            opt.inner._step_trust(per, grad_scale, trust_out=out)
        except Exception as exc:  # noqa: BLE001 - raised on every rank below
            err = RuntimeError(f"{f}: the trust ratio's pass failed ({type(exc).__name__}: "
                               f"{exc}); nothing was written")
    raise_agreed(opt.comm, err)
    counts = [2 * sum(_blocks(p) for p in trusted_pieces(opt, r, has))
              for r in range(opt.world)]
    every = np.empty(sum(counts), np.float64)
    if opt.world > 1:
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
        opt.comm.Allgatherv(out, [every, counts, displs, mpi_type(np.dtype(np.float64))])
    else:
        every[:] = out
    if opt.inner is None:
        return None
    try:
        opt.inner._step_trust(per, grad_scale, trust_in=sums_given(opt, every, has))
    except Exception as exc:  # noqa: BLE001 - raised on every rank by the caller
        return RuntimeError(f"{f}: the shard update failed after the gradients were "
                            f"reduced ({type(exc).__name__}: {exc}); the ranks' states "
                            f"may now differ")
    return None
