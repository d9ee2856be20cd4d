"""bfloat16 states stored apart, in plain NumPy: the rounding of a float32
state to bfloat16, to nearest or stochastically, bit for bit as
docs/semantics.md ("bfloat16 states") specifies and the C core does.

The stochastic rounding's random bits come from a counter-based hash of
(key, step, slot, element index), written here with NumPy's wrapping
unsigned integer arithmetic::

    mix64(z): z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9
              z = (z ^ z >> 27) * 0x94d049bb133111eb;   z ^ z >> 31
    mix32(x): x ^= x >> 16;  x *= 0x7feb352d;  x ^= x >> 15
              x *= 0x846ca68b;  x ^= x >> 16
    h       = mix64(key + mix64(4 * step + slot))
    r(i)    = mix32(lo32(i) ^ lo32(h) ^ mix32(hi32(i) ^ hi32(h))) >> 16
    bf16    = (bits(f) + r(i)) >> 16          (NaN: the quiet NaN of its sign)

Tensor k of a call (or of an optimizer's parameter list) has the key
``seed + k * 0x9E3779B97F4A7C15`` (mod 2**64).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
KEY_STEP = 0x9E3779B97F4A7C15       # FO_KEY_STEP (tests/test_tables.py)
_M64 = (1 << 64) - 1


def mix64(z: int) -> int:
    """SplitMix64's finalizer, on a Python int (mod 2**64)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def mix32(x: np.ndarray) -> np.ndarray:
    """Wellons' lowbias32, elementwise on uint32 (wrapping)."""
    x = x.astype(np.uint32)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x


def key(seed: int, k: int) -> int:
    """The key of tensor k of a call whose seed is ``seed``."""
    return (seed + k * KEY_STEP) & _M64


def stream(key_: int, step: int, slot: int) -> int:
    """h: the stream of one state slot (0..2) of a tensor at one step."""
    return mix64(key_ + mix64(((step << 2) + slot) & _M64))


def random_bits(h: int, n: int, start: int = 0) -> np.ndarray:
    """r(i) for i in [start, start + n): 16 random bits each, as uint32."""
    i = np.arange(start, start + n, dtype=np.uint64)
    lo = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (i >> np.uint64(32)).astype(np.uint32)
    c = np.uint32(h & 0xFFFFFFFF) ^ mix32(hi ^ np.uint32(h >> 32))
    return mix32(lo ^ c) >> np.uint32(16)


def round_nearest(v: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 to nearest, ties to even (ml_dtypes' astype)."""
    return np.asarray(v, np.float32).astype(BF16)


def round_stochastic(v: np.ndarray, r: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 rounded up in magnitude with probability (the
    dropped half) / 2**16, by the random bits r (uint32, < 2**16); a NaN
    becomes the quiet NaN of its sign."""
    v = np.ascontiguousarray(v, np.float32).ravel()
    u = v.view(np.uint32)
    with np.errstate(over="ignore"):
        out = ((u + r.astype(np.uint32)) >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(v)
    out[nan] = ((u[nan] >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16) | 0x7FC0
    return out.view(BF16)


def store(v: np.ndarray, stochastic: bool, key_: int, step: int, slot: int) -> np.ndarray:
    """A state slot's new float32 values v (any shape, C order) as stored:
    bfloat16 rounded to nearest or stochastically (element i by its index
    in C order)."""
    shape = np.shape(v)
    if not stochastic:
        return round_nearest(v).reshape(shape)
    r = random_bits(stream(key_, step, slot), int(np.size(v)))
    return round_stochastic(v, r).reshape(shape)


def stalls(decay: float) -> bool:
    """Does an average with this decay lose its updates when rounded to
    nearest bfloat16 (its complement below 2**-8)?"""
    return 1.0 - decay < 2.0**-8
