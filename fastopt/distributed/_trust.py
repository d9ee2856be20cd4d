"""LAMB's and LARS's trust ratio over tensors split between ranks.

A tensor whose group scales its update by a trust ratio is cut only at
multiples of ``TRUST_BLOCK`` from its start (``_layout.cut_rule``), the
block of the C core's trust pass, so every rank's piece holds whole blocks
of the whole tensor. A step is then two calls of the rank's inner
optimizer around one exchange:

1. the trust pass alone over the rank's pieces: two sums per block (of
   x*x and of w*w, w the rule's update before the ratio), nothing written;
2. an Allgatherv of every rank's block sums;
3. per trusted tensor the rank holds, its blocks' sums added in the
   tensor's block order from 0.0 (a sequential accumulation: the same
   additions in the same order on every rank), and the step with those two
   sums given for each of the rank's pieces.

One process adds the same block sums in the same order, so every ratio,
and with it every parameter and state, is the single-process optimizer's
bit for bit at every world size (docs/distributed.md).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._comm import mpi_type, raise_agreed
from ._layout import TRUST_BLOCK


class Plan(NamedTuple):
    """The exchange for one pattern of present gradients."""
    counts: list    # doubles each rank sends (2 per block)
    displs: list    # where each rank's land in the gathered array
    sums: list      # per trusted piece of this rank: its tensor's block positions
    #                 in the gathered array, in the tensor's block order


def trusted_pieces(opt, rank: int, has) -> list:
    """Rank's pieces of trusted tensors that have a gradient this step, in
    the order of its inner optimizer's tensors (group, then tensor, then
    position): the order of the C step's trusted tensors."""
    ps = [p for pp in opt.layout.pieces(rank).values() for p in pp
          if opt._trusting[p.tensor.group] and has[p.tensor.index]]
    return sorted(ps, key=lambda p: (p.tensor.group, p.tensor.index, p.lo))


def _blocks(p) -> int:
    return -(-(p.hi - p.lo) // TRUST_BLOCK)


def plan(opt, has) -> Plan:
    """The exchange for this step's present gradients (kept for the last
    pattern: the layout is fixed, so only missing gradients change it)."""
    key = tuple(bool(h) for h in has)
    cached = getattr(opt, "_trust_plan", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    where: dict = {}        # tensor index -> [(position in the tensor, block k)]
    counts, k = [], 0
    for r in range(opt.world):
        n = 0
        for p in trusted_pieces(opt, r, has):
            for b in range(_blocks(p)):
                where.setdefault(p.tensor.index, []).append((p.lo + b * TRUST_BLOCK, k))
                k += 1
                n += 1
        counts.append(2 * n)
    order = {t: np.array([k for _, k in sorted(bs)], np.intp) for t, bs in where.items()}
    displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
    out = Plan(counts, displs, [order[p.tensor.index]
                                for p in trusted_pieces(opt, opt.rank, has)])
    opt._trust_plan = (key, out)
    return out


def sums_given(pl: Plan, every) -> np.ndarray:
    """This rank's trust_in from every rank's block sums: per trusted piece,
    its whole tensor's two sums, each the sequential sum of its blocks' in
    block order (np.add.accumulate adds one at a time, left to right)."""
    xx, ww = every[0::2], every[1::2]
    out = np.empty(2 * len(pl.sums), np.float64)
    for j, idx in enumerate(pl.sums):
        out[2 * j] = np.add.accumulate(xx[idx])[-1]
        out[2 * j + 1] = np.add.accumulate(ww[idx])[-1]
    return out


def step(opt, f, per, grad_scale, has):
    """The inner optimizer's step with the whole tensors' trust ratios
    (every rank calls it: it is collective). Returns the error of the
    update, if it failed, for the caller to raise on every rank."""
    pl = plan(opt, has)
    out = np.zeros(pl.counts[opt.rank], np.float64)
    err = None
    if opt.inner is not None:
        try:
            opt.inner._step_trust(per, grad_scale, trust_out=out)
        except Exception as exc:  # noqa: BLE001 - raised on every rank below
            err = RuntimeError(f"{f}: the trust ratio's pass failed ({type(exc).__name__}: "
                               f"{exc}); nothing was written")
    raise_agreed(opt.comm, err)
    every = np.empty(sum(pl.counts), np.float64)
    if opt.world > 1:
        opt.comm.Allgatherv(out, [every, pl.counts, pl.displs,
                                  mpi_type(np.dtype(np.float64))])
    else:
        every[:] = out
    if opt.inner is None:
        return None
    try:
        opt.inner._step_trust(per, grad_scale, trust_in=sums_given(pl, every))
    except Exception as exc:  # noqa: BLE001 - raised on every rank by the caller
        return RuntimeError(f"{f}: the shard update failed after the gradients were "
                            f"reduced ({type(exc).__name__}: {exc}); the ranks' states "
                            f"may now differ")
    return None
