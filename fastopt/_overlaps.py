"""Which arrays of a call share memory: the overlap checks of
``fastopt._validation`` (re-exported there), by byte ranges swept in order
and NumPy's exact test where two ranges meet. Each raises ValueError naming
the function and both arrays; nothing is written by any of them."""
from __future__ import annotations

import numpy as np

try:  # NumPy >= 2.0
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # pragma: no cover - NumPy 1.x
    _byte_bounds = np.byte_bounds  # noqa: NPY201 (the NumPy 1.x name)


def _extent(a: np.ndarray):
    if a.size == 0:
        return None
    return _byte_bounds(a)


def _self_overlapping(a: np.ndarray) -> bool:
    """Whether two elements of a may share memory (a broadcast or as_strided
    view). Sufficient test: in order of stride size, every stride must clear
    the extent spanned by the smaller ones. (Exotic interleaved layouts that
    pass numpy's exact test but fail this one are rejected too.)"""
    if a.size <= 1 or a.flags.c_contiguous or a.flags.f_contiguous:
        return False
    dims = sorted((abs(s), n) for s, n in zip(a.strides, a.shape) if n > 1)
    extent = a.itemsize
    for stride, n in dims:
        if stride < extent:
            return True
        extent = stride * (n - 1) + extent
    return False


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.strides == b.strides
            and a.dtype.itemsize == b.dtype.itemsize)


def sharing_pairs(items):
    """items: (label, array, is_output). Yield (j, k), indices into items, for
    every pair that shares memory with at least one of the two written, found
    by a sweep over byte ranges sorted by start (exact np.shares_memory only
    where the ranges intersect)."""
    ranges = []
    for k, (_, a, _) in enumerate(items):
        ext = _extent(a)
        if ext is not None:
            ranges.append((ext[0], ext[1], k))
    ranges.sort()
    active = []
    for lo, hi, k in ranges:
        active = [(h, j) for h, j in active if h > lo]
        for _, j in active:
            if (items[j][2] or items[k][2]) and np.shares_memory(items[j][1], items[k][1]):
                yield j, k
        active.append((hi, k))


def _sharing_read(fname: str, items, why: str):
    """The pairs (j, k) of items (label, array, is_written) sharing memory
    of which one is only read; raise for two written ones sharing memory."""
    for j, k in sharing_pairs(items):
        if items[j][2] and items[k][2]:
            raise ValueError(f"{fname}: {items[j][0]} and {items[k][0]} share memory; {why}")
        yield j, k


def _overlaps(fname: str, items):
    """items: (label, array, is_output). Raise for any output sharing memory
    with another array, except a gradient that is exactly an output's view,
    which is returned (by index into items) to be copied first."""
    copy_g = set()
    for j, k in _sharing_read(fname, items, "every parameter and state must "
                              "have memory of its own"):
        (la, a, oa), (lb, b, _) = items[j], items[k]
        gk = j if not oa else k
        if _same_view(a, b):
            copy_g.add(gk)  # reading an exact alias is fine once copied
            continue
        gl, ol = (la, lb) if gk == j else (lb, la)
        raise ValueError(
            f"{fname}: {gl} partially overlaps {ol}, which is written; pass "
            f"a copy of the gradient")
    return copy_g


def _clip_overlaps(fname: str, items) -> None:
    """items: (label, array, is_written). Raise if a clipped gradient shares
    memory with any other array of the call."""
    for j, k in _sharing_read(fname, items, "every gradient is clipped in "
                              "place and must have memory of its own"):
        (la, _, oa), (lb, _, _) = items[j], items[k]
        gl, xl = (la, lb) if oa else (lb, la)
        raise ValueError(
            f"{fname}: {gl} shares memory with {xl}; the gradient is clipped "
            f"in place while the parameter is read, so pass a copy of one")
