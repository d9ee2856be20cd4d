"""Float64 references with a rigorous error bound for the dtype evaluation.

Each update rule is written once, generically, over a tiny "tracked value"
arithmetic (:class:`Tracked`): every operation computes its float64 value and
a rigorous first-order bound on the error that evaluating the same formula in
the tensor's dtype may have (``u * |result|`` per rounding, plus half the
smallest subnormal, plus the propagated input errors; a quotient whose
denominator could be zero gets an infinite bound). :func:`check_close` then
asserts ``|fast - ref| <= K * bound`` element by element: tight (a wrong
coefficient, a missed element or a wrong T convention is off by far more than
a few ulps) but honest about ill-conditioned elements (catastrophic
cancellation in ``norm_coefficient * x + g`` divided by a tiny
``sqrt(h) + eps``), which get the wide bound they deserve rather than a
blanket tolerance for everyone.

Non-finite reference values must be matched exactly (NaN by NaN, inf by the
same inf); elements whose bound is infinite, or whose evaluation in the dtype
overflows where float64 does not, are not compared; where a coefficient
underflows to zero in the dtype (0 * inf is NaN), only finite results are.

``ref.tracked.momentum(dtype, x, g, v, lr=..., t=...)`` returns tracked
(x_new, v_new); ``REFS``/``STATES`` name the rules and their state roles.
"""
from __future__ import annotations

import math

import numpy as np

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# --------------------------------------------------------------- tracked

class Tracked:
    """A float64 value array, a bound on the dtype evaluation's error, and
    whether the dtype evaluation overflowed where float64 did not."""

    __slots__ = ("e", "o", "v", "z")

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

def momentum(dtype, x, g, v, *, lr, t, alpha=0.9, beta=1.0,
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


def adagrad(dtype, x, g, h, *, lr, t, decay_factor=0.0, epsilon=1e-6,
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


def adam(dtype, x, g, v, h, *, lr, t, alpha=0.9, beta=0.999, epsilon=1e-6,
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


REFS = {"momentum": momentum, "adagrad": adagrad, "adam": adam}
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
