"""Test utilities: arrays placed in awkward memory layouts inside watched byte
buffers, and byte snapshots of everything a call could have written.

``place(values, dtype, steps=..., perm=..., order=..., byte_offset=...,
swap=..., readonly=...)`` builds the view (strided, reversed, transposed,
misaligned, byte-swapped ...) and remembers the bytes around it;
``snapshot(objs)`` / ``unchanged(snap)`` prove a rejected call wrote nothing.
"""
from __future__ import annotations

import numpy as np


class Placed:
    """An ndarray view placed inside a watched byte buffer.

    ``arr`` is the view handed to fastopt; ``buf`` is the uint8 buffer it
    lives in, with random bytes around (and between) its elements;
    ``footprint`` marks the bytes the view covers.
    """

    def __init__(self, arr, buf, footprint):
        self.arr = arr
        self.buf = buf
        self.footprint = footprint
        self.before = buf.copy()

    def untouched_outside(self) -> bool:
        """No byte outside the view's elements changed."""
        return bool(np.array_equal(self.buf[~self.footprint], self.before[~self.footprint]))

    def unchanged(self) -> bool:
        return bool(np.array_equal(self.buf, self.before))


def place(values, dtype, *, steps=None, perm=None, order="C", byte_offset=0,
          swap=False, readonly=False, rng=None) -> Placed:
    """Put ``values`` (any float array of the logical shape) into a view.

    The view has logical shape ``values.shape`` and dtype ``dtype`` (byte-swapped
    with ``swap``); it is built from a dense array of ``order`` whose axis i
    is ``|steps[i]|`` times longer, sliced with those steps (negative steps
    walk backwards), then transposed by ``perm``, starting ``byte_offset``
    bytes into a uint8 buffer (a non-multiple of the item size makes it
    misaligned).
    """
    values = np.asarray(values)
    shape = values.shape
    nd = len(shape)
    steps = tuple(steps) if steps is not None else (1,) * nd
    perm = tuple(perm) if perm is not None else tuple(range(nd))
    dt = np.dtype(dtype)
    if swap:
        dt = dt.newbyteorder("S")
    isz = dt.itemsize
    # logical axis perm[k] of the view is axis k of the sliced dense array
    pre_shape = [0] * nd
    pre_steps = [1] * nd
    for k in range(nd):
        pre_shape[k] = shape[perm.index(k)] if nd else 0
        pre_steps[k] = steps[perm.index(k)] if nd else 1
    dense_shape = tuple(max(1, n * abs(s)) if n > 0 else 0
                        for n, s in zip(pre_shape, pre_steps))
    count = int(np.prod(dense_shape)) if nd else 1
    rng = rng or np.random.default_rng(12345)
    nbytes = byte_offset + count * isz + 16
    buf = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    # dense strides in bytes
    strides = [0] * nd
    acc = isz
    axes = range(nd - 1, -1, -1) if order == "C" else range(nd)
    for a in axes:
        strides[a] = acc
        acc *= max(dense_shape[a], 1)
    dense = np.ndarray(dense_shape, dt, buffer=buf, offset=byte_offset,
                       strides=tuple(strides))
    view = dense[tuple(slice(None, None, s) for s in pre_steps)] if nd else dense
    # per-axis view: take every |s|-th element of the dense axis
    view = view.transpose(perm) if nd else view
    view[...] = values.astype(dt.newbyteorder("="), copy=False)
    # footprint: the same view over a boolean mask buffer
    mask = np.zeros(nbytes, np.bool_)
    if view.size:
        mview = np.ndarray(view.shape + (isz,), np.bool_, buffer=mask,
                           offset=_offset_in(view, buf),
                           strides=view.strides + (1,))
        mview[...] = True
    if readonly:
        view.flags.writeable = False
    return Placed(view, buf, mask)


def _offset_in(view, buf) -> int:
    return view.__array_interface__["data"][0] - buf.__array_interface__["data"][0]


def layout_names():
    return ["C", "F", "strided", "reversed", "transposed", "misaligned", "swapped",
            "misaligned-swapped-strided"]


def snapshot(objs):
    """Bytes of every ndarray reachable in objs (and of their bases)."""
    out = []
    seen = set()

    def visit(o):
        if isinstance(o, np.ndarray):
            root = o
            while isinstance(root.base, np.ndarray):
                root = root.base
            for a in (o, root):
                if id(a) not in seen:
                    seen.add(id(a))
                    out.append((a, _bytes_of(a)))
        elif isinstance(o, (list, tuple)):
            for item in o:
                visit(item)
        elif isinstance(o, dict):
            for item in o.values():
                visit(item)
        elif hasattr(o, "codes") and hasattr(o, "absmax"):          # an 8-bit state
            visit([o.codes, o.absmax])
        elif hasattr(o, "detach") and hasattr(o, "numpy"):          # a torch tensor
            visit(o.detach().numpy())
        elif hasattr(o, "param_groups") and hasattr(o, "inner"):    # a ShardedOptimizer
            visit(o.params)
            visit(o.inner)
        elif hasattr(o, "param_groups") and hasattr(o, "state"):    # an optimizer
            visit(o.params if hasattr(o, "params")                  # (fastopt.torch's:
                  else [p for g in o.param_groups for p in g["params"]])  # torch's form)
            visit(o.state)

    visit(objs)
    return out


def _bytes_of(a: np.ndarray) -> bytes:
    if a.dtype.hasobject:
        return repr(a.tolist()).encode()
    try:
        return a.tobytes(order="A")
    except Exception:  # noqa: BLE001  # pragma: no cover - exotic dtypes
        return repr(a).encode()


def unchanged(snap) -> list:
    """Indices of arrays in a snapshot whose bytes changed."""
    return [i for i, (a, b) in enumerate(snap) if _bytes_of(a) != b]
