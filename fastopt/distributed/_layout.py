"""Where every element lives: flat per-dtype buffers, buckets and shards.

Pure Python over shapes and sizes (no MPI), computed identically on every
rank from the same description of the parameters, so the layout (and with
it every result) is a function of the parameter list, the world size and
the bucket size alone.

Per dtype, the parameters of that dtype are laid out one after the other
(in the order of ``params``, C order) in one flat buffer. The buffer is cut
into buckets of about ``bucket_bytes``; each bucket is cut into ``world``
contiguous slices, slice r belonging to rank r, each ending where the rank's
fair share of the buckets so far does, or at the nearest allowed cut (a
rank shorted in one bucket is made up in the next). Rank r's shard
is the union of its slices: it holds the optimizer state of exactly those
elements. The cuts move to "allowed" positions: anywhere inside a tensor
that is not AGC-clipped, at row (unit) boundaries of an AGC-clipped tensor
whose units are rows, and only at the ends of a clipped tensor that is a
single unit or whose units are strided (``clip_layout="io"``), so an AGC
unit is never split between ranks; at multiples of 256 elements from the
start of a tensor with 8-bit states (or at its end), so a block of them
is never split either; and at multiples of 4096 (``TRUST_BLOCK``, the C
core's norm block) from the start of a tensor whose update is scaled by
its own norm (LAMB's and LARS's trust ratio), so that each rank's pieces
hold whole blocks of that norm: the ranks exchange their blocks' sums and
add them in the tensor's block order, as one process does.

A state is stored in *streams*, one per dtype and kind of storage: the
values of the tensors with float states, and the codes and absmax of the
tensors with 8-bit states (:meth:`Layout.streams`); the float32 masters of
16-bit tensors are a stream of their own (kind "master"). A
range of the flat buffer maps onto each stream (:meth:`Layout.in_stream`),
so a checkpoint records the buffer's ranges and stores the streams.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from .._q8 import BLOCK as Q8_BLOCK

ANY, ROWS, WHOLE, BLOCKS, TRUST = 0, 1, 2, 3, 4

#: the C core's block of a trust ratio's norms (fastopt.h, FO_STEP_BLOCK)
TRUST_BLOCK = 4096


@dataclass(frozen=True)
class Stream:
    """One stream of a state of the dtype ``dtype``: ``kind`` "values"
    (the tensors with float states, stored as ``store``), "codes" (uint8,
    one per element) or "absmax" (float32, one per block of the tensors
    with 8-bit states), or "master" (the float32 masters of 16-bit
    tensors: every tensor of the dtype)."""
    dtype: np.dtype
    kind: str
    store: np.dtype

    @property
    def per(self) -> int:
        """Elements of the buffer per entry of the stream."""
        return Q8_BLOCK if self.kind == "absmax" else 1

    def covers(self, t) -> bool:
        """Does the stream hold entries of tensor t (of its dtype)?"""
        return self.kind == "master" or t.eight == (self.kind != "values")


def agc_cut_rule(shape, clipped: bool, layout: str):
    """(rule, unit length) for one tensor: where a shard boundary may fall."""
    size = int(np.prod(shape, dtype=np.int64))
    if not clipped or size == 0:
        return ANY, 1
    big = sum(1 for d in shape if d != 1)
    if big <= 1:
        return WHOLE, size
    nu = shape[0] if layout == "oi" else shape[-1]
    if nu == 1 or layout != "oi":
        return WHOLE, size
    return ROWS, size // nu


def cut_rule(shape, clipped: bool, layout: str, eight: bool = False, trust: bool = False):
    """(rule, unit) for one tensor: :func:`agc_cut_rule`'s; cuts at
    multiples of 256 from its start when its states are 8-bit (which
    excludes AGC); at multiples of TRUST_BLOCK when its update is scaled by
    a norm of the whole tensor (LAMB's and LARS's trust ratio; with 8-bit
    states too: a multiple of 256)."""
    if trust:
        return (BLOCKS if eight else TRUST), TRUST_BLOCK
    if eight:
        return BLOCKS, Q8_BLOCK
    return agc_cut_rule(shape, clipped, layout)


@dataclass
class Tensor:
    index: int          # position in params
    group: int
    dtype: np.dtype
    shape: tuple
    offset: int         # element offset in its dtype's flat buffer
    size: int
    rule: int
    unit: int           # unit length for ROWS and BLOCKS

    @property
    def eight(self) -> bool:
        """Are the tensor's states 8-bit?"""
        return self.rule == BLOCKS


@dataclass
class Piece:
    """The part [lo, hi) of one tensor that one rank owns inside one bucket."""
    tensor: Tensor
    lo: int             # flat element offsets in the dtype buffer
    hi: int
    shard_offset: int   # element offset in the rank's packed shard of the dtype

    @property
    def shape(self) -> tuple:
        t = self.tensor
        n = self.hi - self.lo
        if t.rule in (WHOLE, TRUST) and n == t.size:
            return t.shape
        if t.rule == ROWS:
            return (n // t.unit, t.unit)
        return (n,)


@dataclass
class DtypeLayout:
    dtype: np.dtype
    length: int
    tensors: list
    buckets: list = field(default_factory=list)   # [(lo, [cut_0..cut_world])]

    def ranges(self, rank: int) -> list:
        """Rank's [lo, hi) slices, one per bucket where it owns something."""
        out = []
        for cuts in self.buckets:
            lo, hi = cuts[rank], cuts[rank + 1]
            if hi > lo:
                out.append((lo, hi))
        return out


class Layout:
    """The flat layout of ``tensors`` (list of (dtype, shape, group, rule,
    unit)) over ``world`` ranks with buckets of about ``bucket_bytes``."""

    def __init__(self, specs, world: int, bucket_bytes: int):
        self.world = world
        self.bucket_bytes = bucket_bytes
        self.tensors = []
        self.dtypes: dict = {}
        self._starts: dict = {}          # stream -> {tensor index: first entry}
        for i, (dt, shape, group, rule, unit) in enumerate(specs):
            dt = np.dtype(dt)
            d = self.dtypes.setdefault(dt, DtypeLayout(dt, 0, []))
            size = int(np.prod(shape, dtype=np.int64))
            t = Tensor(i, group, dt, tuple(shape), d.length, size, rule, unit)
            d.tensors.append(t)
            d.length += size
            self.tensors.append(t)
        for d in self.dtypes.values():
            self._cut(d)
        # dtype -> its tensors' offsets (for bisect), and whether some are 8-bit
        self._offsets = {dt: [t.offset for t in d.tensors] for dt, d in self.dtypes.items()}
        self._eight = {dt: any(t.eight for t in d.tensors) for dt, d in self.dtypes.items()}

    # ------------------------------------------------------------ cutting

    @staticmethod
    def _bracket(d: DtypeLayout, starts: list, pos: int) -> tuple:
        """The allowed cuts at or below pos and above it (both pos where any
        cut is allowed)."""
        if pos <= 0 or pos >= d.length:
            c = min(max(pos, 0), d.length)
            return c, c
        k = bisect.bisect_right(starts, pos) - 1
        t = d.tensors[k]
        rel = pos - t.offset
        if rel == 0 or t.rule == ANY:
            return pos, pos
        step = t.unit if t.rule in (ROWS, BLOCKS, TRUST) else t.size
        below = (rel // step) * step
        return t.offset + below, t.offset + min(below + step, t.size)

    @staticmethod
    def _snap(d: DtypeLayout, starts: list, pos: int) -> int:
        """The allowed cut nearest to pos (ties: the lower one)."""
        below, above = Layout._bracket(d, starts, pos)
        return below if pos - below <= above - pos else above

    @staticmethod
    def _next_cut(d: DtypeLayout, starts: list, pos: int) -> int:
        """The first allowed cut after pos (< d.length)."""
        k = bisect.bisect_right(starts, pos) - 1
        t = d.tensors[k]
        rel = pos - t.offset
        step = 1 if t.rule == ANY else t.unit if t.rule in (ROWS, BLOCKS, TRUST) else t.size
        return t.offset + min((rel // step + 1) * step, t.size)

    def _cut(self, d: DtypeLayout) -> None:
        starts = [t.offset for t in d.tensors]
        per = max(1, self.bucket_bytes // d.dtype.itemsize)
        bounds = [0]
        while bounds[-1] < d.length:
            nxt = self._snap(d, starts, bounds[-1] + per)
            if nxt <= bounds[-1]:   # a unit longer than a bucket: take it whole
                nxt = self._next_cut(d, starts, bounds[-1])
            bounds.append(nxt)
        w = self.world
        # w times what each rank is owed of its fair share of the buckets so
        # far: a cut that cannot fall at the share's end (units: 8-bit blocks,
        # rows, clipped tensors) makes up for it in the next buckets, so an
        # indivisible bucket goes to the ranks in turn, not always to one
        owed = [0] * w
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            n, cuts = hi - lo, [lo]
            for r in range(1, w):
                want = w * cuts[-1] + n + owed[r - 1]       # w times rank r-1's end
                below, above = self._bracket(d, starts, min(max(want // w, cuts[-1]), hi))
                c = below if want - w * below <= w * above - want else above
                cuts.append(min(max(c, cuts[-1]), hi))
            cuts.append(hi)
            for r in range(w):
                owed[r] += n - w * (cuts[r + 1] - cuts[r])
            d.buckets.append(cuts)

    # ------------------------------------------------------------- shards

    def pieces(self, rank: int) -> dict:
        """dtype -> [Piece] of rank's shard, in flat order."""
        out = {}
        for dt, d in self.dtypes.items():
            starts = [t.offset for t in d.tensors]
            ps, off = [], 0
            for lo, hi in d.ranges(rank):
                k = bisect.bisect_right(starts, lo) - 1
                while k < len(d.tensors) and d.tensors[k].offset < hi:
                    t = d.tensors[k]
                    a, b = max(lo, t.offset), min(hi, t.offset + t.size)
                    if b > a:
                        ps.append(Piece(t, a, b, off + a - lo))
                    k += 1
                off += hi - lo
            out[dt] = ps
        return out

    def shard_length(self, dt, rank: int) -> int:
        return sum(hi - lo for lo, hi in self.dtypes[np.dtype(dt)].ranges(rank))

    # ------------------------------------------------------------ streams

    def streams(self, store=None) -> list:
        """The streams of one state, in a checkpoint's order: per dtype, the
        float states' values (stored as ``store[dtype]``, else the dtype)
        if any tensor has them, then codes and absmax if any tensor has
        8-bit states."""
        out = []
        for dt, d in self.dtypes.items():
            if any(not t.eight for t in d.tensors):
                out.append(Stream(dt, "values", np.dtype((store or {}).get(dt, dt))))
            if self._eight[dt]:
                out += [Stream(dt, "codes", np.dtype(np.uint8)),
                        Stream(dt, "absmax", np.dtype(np.float32))]
        return out

    def _stream_starts(self, s: Stream) -> dict:
        """tensor index -> its first entry in stream s (tensors in s only)."""
        if s not in self._starts:
            pos, starts = 0, {}
            for t in self.dtypes[s.dtype].tensors:
                if s.covers(t):
                    starts[t.index] = pos
                    pos += -(-t.size // s.per)
            self._starts[s] = starts
        return self._starts[s]

    def in_stream(self, s: Stream, ranges) -> list:
        """The buffer's [lo, hi) ranges (of s's dtype, cut where cuts are
        allowed) as [lo, hi) ranges of stream s, adjacent ones merged."""
        d, starts, offs = self.dtypes[s.dtype], self._stream_starts(s), self._offsets[s.dtype]
        out = []
        for lo, hi in ranges:
            k = max(bisect.bisect_right(offs, lo) - 1, 0)
            while k < len(d.tensors) and d.tensors[k].offset < hi:
                t = d.tensors[k]
                a, b = max(lo, t.offset), min(hi, t.offset + t.size)
                if b > a and t.index in starts:
                    x = starts[t.index] + (a - t.offset) // s.per
                    y = starts[t.index] + -(-(b - t.offset) // s.per)
                    if out and out[-1][1] == x:
                        out[-1][1] = y
                    else:
                        out.append([x, y])
                k += 1
        return [tuple(r) for r in out]

    def stream_start(self, s: Stream, t: Tensor) -> int:
        """Tensor t's first entry in stream s (t must be in s)."""
        return self._stream_starts(s)[t.index]

    def block_cut(self, dt, pos: int):
        """The tensor with 8-bit states a cut at pos would split inside one
        of its blocks, or None."""
        dt = np.dtype(dt)
        if not self._eight[dt]:
            return None
        k = bisect.bisect_right(self._offsets[dt], pos) - 1
        t = self.dtypes[dt].tensors[k] if k >= 0 else None
        rel = pos - t.offset if t is not None else 0
        return t if t is not None and t.eight and 0 < rel < t.size and rel % t.unit else None
