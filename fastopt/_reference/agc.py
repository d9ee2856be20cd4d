"""Adaptive gradient clipping (NFNet) in plain NumPy float64, and the checks
that compare fastopt's unitwise_norm / agc / fused clipping with it.

``unit_norms(x, layout)`` is the unitwise L2 norm with kept dims;
``agc(x, g, clipping, eps, layout)`` the clipped gradient (float64);
``clipped_units`` says which units it clips. ``check_unitwise_norm`` and
``check_agc`` assert a fast result within the documented error bound
(``norm_error``: how fastopt accumulates the sums of squares).
"""
from __future__ import annotations

import numpy as np


def unit_axes(shape, layout: str):
    """The axes AGC reduces over (docs/semantics.md section 3): all but the first
    ("oi") or the last ("io"); every axis for a scalar or a squeezed vector."""
    nd = len(shape)
    if sum(d != 1 for d in shape) <= 1:
        return tuple(range(nd))
    return tuple(range(1, nd)) if layout == "oi" else tuple(range(nd - 1))


def unit_norms(a, layout: str) -> np.ndarray:
    """Float64 unit norms of a (kept dims)."""
    with np.errstate(all="ignore"):          # signalling NaNs raise 'invalid' on a cast
        a = np.asarray(a, dtype=np.float64)
        return np.sqrt(np.sum(a * a, axis=unit_axes(a.shape, layout), keepdims=True))


def agc(x, g, clipping, eps: float, layout: str = "oi") -> np.ndarray:
    """The clipped gradient in float64 (``clipping=None``: g unchanged, as float64)."""
    g = np.asarray(g, np.float64)
    if clipping is None:
        return g
    with np.errstate(all="ignore"):
        max_norm = clipping * np.maximum(unit_norms(x, layout), eps)
        g_norm = unit_norms(g, layout)
        return np.where(g_norm > max_norm, g * (max_norm / np.maximum(g_norm, 1e-6)), g)


def clipped_units(x, g, clipping, eps: float, layout: str = "oi") -> np.ndarray:
    """Boolean array (broadcastable to x) of the units :func:`agc` clips."""
    max_norm = clipping * np.maximum(unit_norms(x, layout), eps)
    return unit_norms(g, layout) > max_norm


def agc_in_dtype(xs, gs, clipping, eps: float = 1e-3, layout: str = "oi") -> list:
    """What a NumPy user writes: each gradient clipped in its own dtype (the
    benchmarks' and the demo's baseline). ``clipping`` is one value or one per
    tensor (None: not clipped). Returns new arrays for the clipped tensors and
    the given ones for the others; modifies nothing."""
    clips = list(clipping) if isinstance(clipping, (list, tuple)) else [clipping] * len(gs)
    out = []
    for x, g, clip in zip(xs, gs, clips):
        if clip is not None:
            axes = unit_axes(x.shape, layout)
            p_norm = np.sqrt(np.sum(x * x, axis=axes, keepdims=True))
            g_norm = np.sqrt(np.sum(g * g, axis=axes, keepdims=True))
            max_norm = clip * np.maximum(p_norm, x.dtype.type(eps))
            g = np.where(g_norm > max_norm,
                         g * (max_norm / np.maximum(g_norm, g.dtype.type(1e-6))), g)
        out.append(g)
    return out


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
    ref = unit_norms(x, layout)
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
    pn = np.maximum(unit_norms(x, layout), eps)
    mx = clipping * pn
    gn = unit_norms(g, layout)
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
