"""A ShardedOptimizer's states as streams (``_layout.Stream``): this rank's
shard of one state packed into one flat array per stream, and back.

A tensor with states of its own dtype contributes its values to the
"values" stream of its dtype; a tensor with 8-bit states its codes to the
"codes" stream and its blocks' absmax to the "absmax" stream. The rank's
pieces are taken in the flat buffer's order, which is the order of the
rank's ranges mapped onto each stream (``Layout.in_stream``), so a packed
stream is exactly the concatenation of those ranges. The float32 masters
of 16-bit tensors (master weights) are packed the same way, as the
"master" pseudo-state.
"""
from __future__ import annotations

import numpy as np

from .. import _q8
from ..optim import _states
from ._layout import Q8_BLOCK


def length(opt, s, rank) -> int:
    """Entries of stream s on rank."""
    ranges = opt.layout.dtypes[s.dtype].ranges(rank)
    return sum(hi - lo for lo, hi in opt.layout.in_stream(s, ranges))


def slices(a, rel: int, n: int, eight: bool) -> dict:
    """kind -> the flat entries of elements [rel, rel + n) of state a (an
    array, or a State8bit whose blocks start at element 0; rel is then a
    multiple of the block)."""
    if not eight:
        return {"values": a.reshape(-1)[rel:rel + n]}
    b = rel // Q8_BLOCK
    return {"codes": a.codes.reshape(-1)[rel:rel + n],
            "absmax": a.absmax[b:b + _q8.blocks(n)]}


def pack(opt, held, streams=None) -> dict:
    """(dtype, kind) -> this rank's packed stream of one state (of
    ``streams``, default the states'), from ``held``: per inner piece, (the
    state holding it, or None, and its first element there)."""
    streams = opt._streams if streams is None else streams
    out = {(s.dtype, s.kind): np.empty(length(opt, s, opt.rank), s.store) for s in streams}
    pos = dict.fromkeys(out, 0)
    for p, (a, rel) in zip(opt._inner_pieces, held):
        if a is None:
            continue
        n = p.hi - p.lo
        parts = {"master": a.reshape(-1)[rel:rel + n]} if (p.tensor.dtype, "master") in out \
            else slices(a, rel, n, p.tensor.eight)
        for kind, v in parts.items():
            key = (p.tensor.dtype, kind)
            out[key][pos[key]:pos[key] + v.size] = v
            pos[key] += v.size
    return out


def masters(opt) -> list:
    """Per inner piece, (its float32 master, 0), or (None, 0) for a piece
    that is its own master (float32 or float64)."""
    if opt.inner is None:
        return []
    return [(m if c is not None else None, 0)
            for m, c in zip(opt.inner.params, opt.inner._copies or [None] * len(opt.inner.params))]


def unpack(opt, name, packed) -> list:
    """One state's packed streams -> its array (or State8bit) per inner
    parameter, views into the packed arrays; for ``name`` "master", the
    master of each 16-bit piece (None for the others)."""
    pos = dict.fromkeys(packed, 0)
    out = []
    for p in opt._inner_pieces:
        n, dt = p.hi - p.lo, p.tensor.dtype
        if name == "master":
            kinds = (("master", n),) if (dt, "master") in packed else ()
        elif p.tensor.eight:
            kinds = (("codes", n), ("absmax", _q8.blocks(n)))
        else:
            kinds = (("values", n),)
        take = {}
        for kind, k in kinds:
            take[kind] = packed[dt, kind][pos[dt, kind]:pos[dt, kind] + k]
            pos[dt, kind] += k
        if "codes" in take:
            out.append(_q8.State8bit(take["codes"].reshape(p.shape), take["absmax"],
                                     not _states.unsigned(opt._cls, name)))
        else:
            v = take.get("values", take.get("master"))
            out.append(None if v is None else v.reshape(p.shape))
    return out


def whole(opt, name, full) -> list:
    """One state's whole streams (every rank's, in stream order) -> its
    array (or State8bit) per tensor, for a plain checkpoint; for ``name``
    "master", each 16-bit tensor's float32 master (None for the others)."""
    out = []
    for t in opt.layout.tensors:
        streams = opt._master_streams if name == "master" else opt._streams
        starts = {s.kind: opt.layout.stream_start(s, t) for s in streams
                  if s.dtype == t.dtype and s.covers(t)}
        if not starts:
            out.append(None)
        elif not t.eight or name == "master":
            kind, a = next(iter(starts.items()))
            out.append(full[t.dtype, kind][a:a + t.size].reshape(t.shape))
        else:
            c, b = starts["codes"], starts["absmax"]
            out.append(_q8.State8bit(full[t.dtype, "codes"][c:c + t.size].reshape(t.shape),
                                     full[t.dtype, "absmax"][b:b + _q8.blocks(t.size)],
                                     not _states.unsigned(opt._cls, name)))
    return out
