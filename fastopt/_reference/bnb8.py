"""bitsandbytes' blockwise 8-bit optimizer states, in plain NumPy: the format
and its rounding, written to be read, as the reference an 8-bit state
storage in fastopt is compared with.

The format (bitsandbytes' CUDA kernels for blockwise 8-bit optimizers):

- a state tensor, flattened, is cut into blocks of 256 consecutive elements
  (the last may be shorter); each block keeps a float32 ``absmax`` and each
  element a uint8 *code*, an index into a 256-entry float32 map;
- a value is ``map[code] * absmax`` (one float32 multiplication);
- first moments and one-state buffers use the *signed* dynamic map, second
  moments the *unsigned* one (:func:`dynamic_map`);
- storing new values: the block's absmax becomes the largest magnitude among
  them, and each value ``v`` gets the code nearest to ``v / absmax``
  (:func:`nearest_code`), plus, on the signed map, a sign fix: a code whose
  value has the other sign than ``v`` moves one step towards ``v`` (a tiny
  negative first moment never becomes 0 or positive).

Departures of the CUDA kernels from this plain form, recorded here for the
comparisons: their divisions and square roots are the approximate ones of
``--use_fast_math`` (and subnormals are flushed), and a short last block is
padded with lanes whose states also enter the new absmax (a padded first
moment contributes about 5.5e-7 of the old absmax). This module divides
exactly and takes the absmax over the block's own elements.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32
BLOCK = 256


def _linspace32(start: float, stop: float, k: int) -> np.ndarray:
    """k points from start to stop as torch's float32 linspace makes them: a
    float32 step; the first half counted up from start, the rest down from
    stop, each point rounded once (its value is exact in float64 first)."""
    s, e = F32(start), F32(stop)
    step = (e - s) / F32(k - 1)
    half = k // 2
    pts = [float(s) + float(step) * i if i < half else float(e) - float(step) * (k - 1 - i)
           for i in range(k)]
    return np.array(pts, dtype=F32)


def dynamic_map(signed: bool) -> np.ndarray:
    """bitsandbytes' dynamic 8-bit map (``create_dynamic_map``), float32[256],
    sorted. Seven decades 1e-6 .. 1: decade i holds the midpoints of a
    linspace(0.1, 1) of 2**i + 1 points (signed) or 2**(i+1) + 1 (unsigned),
    times 10**(i - 6); the signed map adds their negatives; both add 0 and 1.
    So the signed map holds 0 (code 127) and 1.0 (code 255) but not -1.0."""
    vals = [0.0, 1.0]
    for i in range(7):
        k = (2 ** i if signed else 2 ** (i + 1)) + 1
        b = _linspace32(0.1, 1.0, k)
        mids = (b[:-1] + b[1:]) / F32(2.0)
        scaled = F32(10.0 ** (i - 6)) * mids
        vals += [float(v) for v in scaled]
        if signed:
            vals += [-float(v) for v in scaled]
    return np.array(sorted(vals), dtype=F32)


def nearest_code(x, code: np.ndarray) -> int:
    """The code of float32 x on the sorted map ``code``: the nearest entry;
    at an exact midpoint (computed in float32) the even index of the two;
    at or beyond an end, that end; NaN gives 0 (the kernels' search, which
    compares with ``>``, ends there)."""
    x = F32(x)
    if x >= code[255]:
        return 255
    if not x > code[0]:
        return 0
    k = int(np.searchsorted(code, x, side="left"))      # code[k-1] < x <= code[k]
    if x == code[k]:
        return k
    mid = (code[k - 1] + code[k]) * F32(0.5)
    if x < mid:
        return k - 1
    if x > mid:
        return k
    return k if k % 2 == 0 else k - 1


def sign_fix(c: int, value, code: np.ndarray) -> int:
    """The signed map's fix: if code c's value and ``value`` differ in sign
    bit, one code towards ``value`` (mod 256, as the kernels' uint8)."""
    if np.signbit(code[c]) != np.signbit(F32(value)):
        c = c + 1 if F32(value) > 0 else c - 1
    return c % 256


def nearest_codes(x, code: np.ndarray) -> np.ndarray:
    """:func:`nearest_code` of every element of x at once (int64)."""
    x = np.asarray(x, F32)
    k = np.clip(np.searchsorted(code, x, side="left"), 1, 255)   # code[k-1] < x <= code[k]
    mid = (code[k - 1] + code[k]) * F32(0.5)
    tie = np.where(k % 2 == 0, k, k - 1)
    out = np.where(x < mid, k - 1, np.where(x > mid, k, tie))
    out = np.where(x == code[k], k, out)
    out = np.where(x >= code[255], 255, out)
    return np.where(x > code[0], out, 0)                          # NaN too


def quantize(values: np.ndarray, code: np.ndarray, fix_sign: bool):
    """(codes uint8, absmax float32 per block) of a float32 state, flattened
    in C order, as stored after a step: per block the largest magnitude
    (NaN if a value is NaN), per element :func:`nearest_code` of value /
    absmax and, when fix_sign, :func:`sign_fix`."""
    v = np.ascontiguousarray(values, F32).ravel()
    nb = blocks(v.size)
    padded = np.zeros(nb * BLOCK, F32)
    padded[:v.size] = np.abs(v)
    absmax = padded.reshape(nb, BLOCK).max(axis=1).astype(F32)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = v / np.repeat(absmax, BLOCK)[:v.size]
    c = nearest_codes(q, code)
    if fix_sign:
        other = np.signbit(code[c]) != np.signbit(v)
        c = np.where(other, np.where(v > 0, c + 1, c - 1), c) % 256
    return c.astype(np.uint8).reshape(np.shape(values)), absmax


def dequantize(codes: np.ndarray, absmax: np.ndarray, code: np.ndarray) -> np.ndarray:
    """The float32 state of codes and block absmaxes: code value x absmax."""
    c = np.ascontiguousarray(codes).ravel()
    blocks = np.arange(c.size) // BLOCK
    return (code[c] * absmax[blocks]).astype(F32).reshape(np.shape(codes))


def blocks(n: int) -> int:
    """How many absmax values a state of n elements keeps."""
    return -(-n // BLOCK)
