"""The gradients of one step: split per group, checked with the optimizer's
numbering, kept apart from the memory the step writes.

Functions of the optimizer ``opt`` (its groups, states and scratch buffers).
"""
from __future__ import annotations

import numpy as np

from .. import _validation as _v
from .._groups import split_counts
from .._q8 import State8bit


def split(opt, f, grads):
    """grads -> one list per group (entries are arrays or None)."""
    return split_counts(f, grads, [len(g["params"]) for g in opt.param_groups])


def check_grads(opt, f, per):
    """The checks the kernels make on each gradient (type, dtype, shape),
    with the optimizer's numbering, before anything is written."""
    k = 0
    for group, gg in zip(opt.param_groups, per):
        for i, (p, g) in enumerate(zip(group["params"], gg)):
            if g is None:
                continue
            if type(g) is not np.ndarray and not isinstance(g, np.ndarray):
                raise TypeError(f"{f}: grads[{k + i}] must be a numpy.ndarray or None, "
                                f"got {_v._got(g)}")
            _v._check_role(f, f"grads[{k + i}]", f"params[{k + i}]", g, p, "g", False,
                           mixed=True)
        k += len(gg)


def check_shapes(opt, f, per):
    """Unless the optimizer was built with ``broadcast_grads=True``: every
    gradient array has exactly its parameter's shape (one that would only
    broadcast is most often a bug in the backward pass). The prepared step
    accepts exact shapes only; this guards the paths that broadcast."""
    if opt.broadcast_grads:
        return
    k = 0
    for group, gg in zip(opt.param_groups, per):
        for i, (p, g) in enumerate(zip(group["params"], gg)):
            if isinstance(g, np.ndarray) and g.shape != p.shape:
                raise ValueError(
                    f"{f}: grads[{k + i}] has shape {g.shape} but params[{k + i}] has "
                    f"shape {p.shape}; the gradient must have its parameter's shape (or "
                    f"build the optimizer with broadcast_grads=True to broadcast it)")
        k += len(gg)


def check_written(opt, f, per):
    """The kernels' checks of every parameter and state a step writes (an
    array of a float dtype, writeable, its state of its dtype and shape),
    with the optimizer's numbering: for a step of several kernel calls,
    which must not fail after an earlier one has written."""
    k = 0
    for group, gg, st in zip(opt.param_groups, per, opt._state):
        for i, (p, g) in enumerate(zip(group["params"], gg)):
            if g is None:
                continue
            plab = f"params[{k + i}]"
            _v.check_array(f, plab, p)
            _v.check_written(f, plab, p)
            for n in opt._STATES:
                _v._check_role(f, f"state {n!r} of {plab}", plab, st[n][i], p, n, True)
        k += len(gg)


def _written(opt):
    """Every parameter and state array, group by group."""
    for group, st in zip(opt.param_groups, opt._state):
        yield from group["params"]
        for n in opt._STATES:
            for a in st[n]:
                if isinstance(a, State8bit):
                    yield a.codes
                    yield a.absmax
                else:
                    yield a


def written_extents(opt):
    """The byte ranges [lo, hi) spanned by the parameters and states,
    merged into disjoint sorted ranges (strided arrays may interleave)."""
    ext = [_v._extent(a) for a in _written(opt)]
    merged: list = []
    for lo, hi in sorted(e for e in ext if e is not None):
        if merged and lo < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return (np.array([m[0] for m in merged], np.int64),
            np.array([m[1] for m in merged], np.int64))


def memory_owners(opt) -> dict:
    """id -> object for the arrays at the root of every parameter's and
    state's chain of .base (kept alive by the optimizer, so the ids stay unique)."""
    owners = {}
    for a in _written(opt):
        while isinstance(a, np.ndarray):
            owners[id(a)] = a
            a = a.base
    return owners


def _near_written(opt, per) -> bool:
    """Whether any gradient view's bytes fall inside a written range."""
    # A gradient that owns its memory (base None) and is not itself the
    # owner of a parameter's or state's memory cannot overlap them; only
    # views need the byte-range test.
    owners = opt._owners
    gl = [_v._extent(g) for gg in per for g in gg
          if g is not None and (g.base is not None or id(g) in owners)]
    gl = [e for e in gl if e is not None]
    if not gl:
        return False
    lo, hi = opt._extents
    glo = np.array([e[0] for e in gl], np.int64)
    ghi = np.array([e[1] for e in gl], np.int64)
    j = np.searchsorted(hi, glo, side="right")  # first range ending after glo
    hit = j < len(lo)
    hit[hit] = lo[j[hit]] < ghi[hit]
    return bool(hit.any())


def check_overlaps(opt, f, per):
    """Gradients sharing memory with any parameter or state: raise for a
    partial overlap, copy an exact alias (it is read after being written
    when it belongs to another group). Returns per, with such copies."""
    if not _near_written(opt, per):  # the usual case: no gradient near written memory
        return per
    items, k = [], 0
    for group, gg, st in zip(opt.param_groups, per, opt._state):
        for i, (p, g) in enumerate(zip(group["params"], gg)):
            items.append((f"params[{k + i}]", p, True))
            items += [(f"state {n!r} of params[{k + i}]", st[n][i], True)
                      for n in opt._STATES]
            if g is not None:
                items.append((f"grads[{k + i}]", g, False))
        k += len(gg)
    copy = _v._overlaps(f, items)
    if copy:
        alias = {id(items[j][1]) for j in copy}
        per = [[np.array(g) if g is not None and id(g) in alias else g for g in gg]
               for gg in per]
    return per
