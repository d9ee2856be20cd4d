"""Support for the hardening tests: float64 references with error bounds, and
arrays in awkward memory layouts whose surrounding bytes are watched.

References
----------
Each update rule is written once, generically, over a tiny "tracked value"
arithmetic (:class:`Tracked`): every operation computes its float64 value and
a rigorous first-order bound on the error that evaluating the same formula in
the tensor's dtype may have (``u * |result|`` per rounding, plus half the
smallest subnormal, plus the propagated input errors; a quotient whose
denominator could be zero gets an infinite bound). The check then asserts
``|fast - ref| <= K * bound`` element by element: tight (a wrong coefficient,
a missed element or a wrong T convention is off by far more than a few ulps)
but honest about ill-conditioned elements (catastrophic cancellation in
``norm_coefficient * x + g`` divided by a tiny ``sqrt(h) + eps``), which get
the wide bound they deserve rather than a blanket tolerance for everyone.

Non-finite reference values must be matched exactly (NaN by NaN, inf by the
same inf); elements whose bound is infinite, or whose evaluation in the dtype
overflows where float64 does not, are not compared; where a coefficient
underflows to zero in the dtype (0 * inf is NaN), only finite results are.
"""
from __future__ import annotations

import math

import numpy as np

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# --------------------------------------------------------------- tracked

class Tracked:
    """A float64 value array, a bound on the dtype evaluation's error, and
    whether the dtype evaluation overflowed where float64 did not."""

    __slots__ = ("v", "e", "o", "z")

    def __init__(self, v, e, o=False, z=False):
        self.v = v
        self.e = e
        self.o = o   # the dtype evaluation overflowed where float64 did not
        self.z = z   # a coefficient underflowed to zero in the dtype


class Arith:
    """Tracked arithmetic for results computed in ``dtype``."""

    def __init__(self, dtype):
        fi = np.finfo(dtype)
        self.dtype = np.dtype(dtype)
        self.u = float(fi.eps) / 2.0                   # unit roundoff
        self.eta = float(fi.smallest_subnormal) / 2.0  # absolute floor (subnormals)
        self.max = float(fi.max)

    def exact(self, a) -> Tracked:
        """An input array: its values are exact (the reference reads the same bits)."""
        v = np.asarray(a, dtype=np.float64)
        return Tracked(v, np.zeros_like(v))

    def const(self, c: float) -> Tracked:
        """A coefficient computed in double and rounded to the dtype."""
        c = float(c)
        # a coefficient that overflows, or underflows to zero, in the dtype
        # changes results qualitatively (0 * inf is NaN): flagged like overflow
        with np.errstate(all="ignore"):
            rounded = float(self.dtype.type(c))
        return Tracked(np.float64(c), 4.0 * self.u * abs(c) + self.eta,
                       abs(c) > self.max, c != 0.0 and rounded == 0.0)

    def _round(self, v, e, *args):
        o = np.isfinite(v) & (np.abs(v) > self.max)
        z = False
        for a in args:
            o = o | a.o
            z = z | a.z
        return Tracked(v, e + self.u * np.abs(v) + self.eta, o, z)

    def add(self, a: Tracked, b: Tracked) -> Tracked:
        return self._round(a.v + b.v, a.e + b.e, a, b)

    def sub(self, a: Tracked, b: Tracked) -> Tracked:
        return self._round(a.v - b.v, a.e + b.e, a, b)

    def mul(self, a: Tracked, b: Tracked) -> Tracked:
        return self._round(a.v * b.v, np.abs(a.v) * b.e + np.abs(b.v) * a.e + a.e * b.e,
                           a, b)

    def div(self, a: Tracked, b: Tracked) -> Tracked:
        v = a.v / b.v
        room = np.abs(b.v) - b.e
        e = np.where(room > 0, (a.e + np.abs(v) * b.e) / np.where(room > 0, room, 1.0),
                     np.inf)
        return self._round(v, e, a, b)

    def sqrt(self, a: Tracked) -> Tracked:
        v = np.sqrt(a.v)
        lin = np.where(v > 0, a.e / (2.0 * np.where(v > 0, v, 1.0)), np.inf)
        out = self._round(v, np.minimum(lin, np.sqrt(a.e)), a)
        # an argument that may be either sign within its error (a negative
        # state cancelling a positive g*g) is NaN in one evaluation and a
        # number in the other: not comparable
        out.o = out.o | ((a.v - a.e < 0) & (a.v + a.e >= 0) & (a.e > 0))
        return out


# ------------------------------------------------------------ references

def momentum_ref(dtype, x, g, v, *, lr, t, alpha=0.9, beta=1.0,
                 norm_coefficient=0.0, mode="standard"):
    """ONNX Momentum (docs/semantics.md section 1): returns tracked (x_new, v_new)."""
    A = Arith(dtype)
    with np.errstate(all="ignore"):
        X, G, V = A.exact(x), A.exact(np.broadcast_to(g, np.shape(x))), A.exact(v)
        gr = A.add(A.mul(A.const(norm_coefficient), X), G)
        b = beta if t > 0 else 1.0
        vn = A.add(A.mul(A.const(alpha), V), A.mul(A.const(b), gr))
        if mode == "nesterov":
            step = A.add(gr, A.mul(A.const(alpha), vn))
        else:
            step = vn
        xn = A.sub(X, A.mul(A.const(lr), step))
    return xn, vn


def adagrad_ref(dtype, x, g, h, *, lr, t, decay_factor=0.0, epsilon=1e-6,
                norm_coefficient=0.0):
    """ONNX Adagrad: returns tracked (x_new, h_new)."""
    A = Arith(dtype)
    with np.errstate(all="ignore"):
        X, G, H = A.exact(x), A.exact(np.broadcast_to(g, np.shape(x))), A.exact(h)
        gr = A.add(A.mul(A.const(norm_coefficient), X), G)
        r = lr / (1.0 + t * decay_factor)
        hn = A.add(H, A.mul(gr, gr))
        xn = A.sub(X, A.div(A.mul(A.const(r), gr), A.add(A.sqrt(hn), A.const(epsilon))))
    return xn, hn


def adam_ref(dtype, x, g, v, h, *, lr, t, alpha=0.9, beta=0.999, epsilon=1e-6,
             norm_coefficient=0.0, norm_coefficient_post=0.0):
    """ONNX Adam: returns tracked (x_new, v_new, h_new)."""
    A = Arith(dtype)
    with np.errstate(all="ignore"):
        X, G = A.exact(x), A.exact(np.broadcast_to(g, np.shape(x)))
        V, H = A.exact(v), A.exact(h)
        gr = A.add(A.mul(A.const(norm_coefficient), X), G)
        if t > 0:
            radj = lr * math.sqrt(1.0 - beta ** t) / (1.0 - alpha ** t)
        else:
            radj = lr
        vn = A.add(A.mul(A.const(alpha), V), A.mul(A.const(1.0 - alpha), gr))
        hn = A.add(A.mul(A.const(beta), H), A.mul(A.mul(A.const(1.0 - beta), gr), gr))
        xt = A.sub(X, A.div(A.mul(A.const(radj), vn), A.add(A.sqrt(hn), A.const(epsilon))))
        xn = A.mul(A.const(1.0 - norm_coefficient_post), xt)
    return xn, vn, hn


REFS = {"momentum": momentum_ref, "adagrad": adagrad_ref, "adam": adam_ref}
STATES = {"momentum": ("v",), "adagrad": ("h",), "adam": ("v", "h")}


def check_close(fast, ref: Tracked, what: str = "", k: float = 3.0) -> None:
    """Assert ``fast`` equals the tracked reference within ``k`` error bounds."""
    fast = np.asarray(fast)
    dtype = fast.dtype.newbyteorder("=")
    f = fast.astype(np.float64)
    r = np.broadcast_to(ref.v, f.shape)
    e = np.broadcast_to(ref.e, f.shape)
    over = np.broadcast_to(ref.o, f.shape)
    under = np.broadcast_to(ref.z, f.shape)
    big = float(np.finfo(dtype).max) / 4
    with np.errstate(all="ignore"):
        nonfinite = ~np.isfinite(r) & ~over & ~under
        # a non-finite reference (NaN/Inf inputs, division by zero) is matched exactly
        bad = nonfinite & ~((np.isnan(r) & np.isnan(f)) | (r == f))
        comparable = (np.isfinite(r) & np.isfinite(e) & (np.abs(r) + e < big)
                      & ~over & (~under | np.isfinite(f)))
        bad |= comparable & ~(np.abs(f - r) <= k * e)
    if bad.any():
        idx = np.argwhere(bad)[:5]
        rows = [f"  at {tuple(int(i) for i in ix)}: fast={f[tuple(ix)]!r} "
                f"ref={r[tuple(ix)]!r} bound={k * e[tuple(ix)]!r}" for ix in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} of {f.size} elements differ "
                             f"from the float64 reference\n" + "\n".join(rows))


# --------------------------------------------------------------- layouts

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
        elif hasattr(o, "param_groups") and hasattr(o, "state"):   # an optimizer
            visit(o.params)
            visit(o.state)

    visit(objs)
    return out


def _bytes_of(a: np.ndarray) -> bytes:
    if a.dtype.hasobject:
        return repr(a.tolist()).encode()
    try:
        return a.tobytes(order="A")
    except Exception:  # pragma: no cover - exotic dtypes
        return repr(a).encode()


def unchanged(snap) -> list:
    """Indices of arrays in a snapshot whose bytes changed."""
    return [i for i, (a, b) in enumerate(snap) if _bytes_of(a) != b]


# ------------------------------------------------------------------- AGC

def unit_axes(shape, layout: str):
    """The axes AGC reduces over (docs/semantics.md section 3): all but the first
    ("oi") or the last ("io"); every axis for a scalar or a squeezed vector."""
    nd = len(shape)
    if sum(d != 1 for d in shape) <= 1:
        return tuple(range(nd))
    return tuple(range(1, nd)) if layout == "oi" else tuple(range(nd - 1))


def unit_norms64(a, layout: str) -> np.ndarray:
    """Float64 unit norms of a (kept dims)."""
    with np.errstate(all="ignore"):          # signalling NaNs raise 'invalid' on a cast
        a = np.asarray(a, dtype=np.float64)
        return np.sqrt(np.sum(a * a, axis=unit_axes(a.shape, layout), keepdims=True))


def norm_error(dtype, n: int) -> float:
    """Relative error bound of fastopt's unit norms (src_c/agc.inc): float64
    data accumulates in double; float32 data squares and sums in float32
    within sub-blocks of at most 256 elements (about 20 roundings on a path),
    in double above that."""
    f32 = np.dtype(dtype) == np.float32
    return (24 * 2.0**-24 if f32 else 0.0) + 4 * (n + 2) * 2.0**-53


def check_unitwise_norm(fast, x, layout: str, what: str = "unitwise_norm") -> None:
    """fast equals the float64 norms within the accumulation's error bound
    (norm_error) plus the final rounding to x's dtype."""
    ref = unit_norms64(x, layout)
    dtype = np.asarray(x).dtype.newbyteorder("=")
    assert fast.shape == ref.shape and fast.dtype == dtype, (fast.shape, ref.shape, fast.dtype)
    n = max(1, np.asarray(x).size)
    u = float(np.finfo(dtype).eps) / 2
    tol = (u + norm_error(dtype, n)) * ref + float(np.finfo(dtype).smallest_subnormal)
    f = fast.astype(np.float64)
    with np.errstate(all="ignore"):
        rounded = ref.astype(dtype).astype(np.float64)   # inf beyond the dtype's range
        ok = ((np.abs(f - ref) <= tol) | (np.isnan(f) & np.isnan(ref)) | (f == ref)
              | (np.isinf(rounded) & (f == rounded)))
    assert ok.all(), f"{what}: {f[~ok][:5]} vs {ref[~ok][:5]}"


def check_agc(fast_g, x, g, clipping, eps: float, layout: str, what: str = "agc") -> None:
    """fast_g is g clipped by AGC (NFNet): units at or below the threshold are
    bit for bit unchanged; clipped units are g * max_norm / ||g_unit|| within
    the factor's rounding and one multiplication in the dtype. Units whose
    norm is within the norms' error of the threshold may go either way."""
    g = np.asarray(g)
    dtype = g.dtype.newbyteorder("=")
    g_native = g.astype(dtype)
    if clipping is None:
        assert fast_g.astype(dtype).tobytes() == g_native.tobytes(), f"{what}: excluded tensor changed"
        return
    pn = np.maximum(unit_norms64(x, layout), eps)
    mx = clipping * pn
    gn = unit_norms64(g, layout)
    n = max(1, g.size)
    slack = 2 * norm_error(dtype, n)
    with np.errstate(all="ignore"):
        clip = gn > mx * (1 + slack)
        keep = gn <= mx * (1 - slack)
        factor = mx / np.maximum(gn, 1e-6)
        ref = g_native.astype(np.float64) * factor
    u = float(np.finfo(dtype).eps) / 2
    with np.errstate(all="ignore"):
        f = fast_g.astype(dtype).astype(np.float64)
    shape = g.shape
    keep_b = np.broadcast_to(keep, shape)
    clip_b = np.broadcast_to(clip, shape)
    def as_bytes(a):
        return np.ascontiguousarray(a, dtype=dtype).reshape(-1).view(np.uint8).reshape(
            shape + (dtype.itemsize,))

    same = (as_bytes(fast_g) == as_bytes(g_native)).all(axis=-1)
    bad = keep_b & ~same
    with np.errstate(all="ignore"):
        # the factor is rounded to the dtype: relative u, or absolute half a
        # subnormal when it is that small (gradients of norm > ~1e35)
        tiny = float(np.finfo(dtype).smallest_subnormal)
        tol = (3 * u + 2 * slack) * np.abs(ref) + tiny + np.abs(g_native) * tiny
        close = (np.abs(f - ref) <= tol) | (np.isnan(f) & np.isnan(ref)) | (f == ref)
    bad |= clip_b & ~close
    # in-between units: either unchanged or clipped
    mid = ~keep_b & ~clip_b
    bad |= mid & ~(same | close)
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements wrong, e.g. fast="
                           f"{f[bad][:3]} ref={ref[bad][:3]} g={g_native[bad][:3]}")
