"""A fused multiply-add, a*b + c rounded once, element by element.

NumPy has none, so this calls the C library's ``fma``/``fmaf`` (correctly
rounded, as IEEE 754 defines the operation) on each element: slow, and
exact. torch's vector kernels compute ``a + alpha*b`` so (docs/semantics.md,
"torch's fused multiply-adds"), and the references of the torch-form rules
that follow them use this.
"""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np


def _libm():
    # glibc's name, the platform's, then the interpreter itself (musl links
    # its libm into libc, and find_library may not find it by name)
    for name in ("libm.so.6", ctypes.util.find_library("m"), None):
        try:
            lib = ctypes.CDLL(name)
            if hasattr(lib, "fma") and hasattr(lib, "fmaf"):
                return lib
        except OSError:
            continue
    raise ImportError("fastopt._reference.fma needs the C library's fma (libm)")


_LIBM = _libm()
_FMA = {}
for _t, _name in ((ctypes.c_double, "fma"), (ctypes.c_float, "fmaf")):
    _fn = getattr(_LIBM, _name)
    _fn.restype, _fn.argtypes = _t, [_t] * 3
    _FMA[np.dtype(np.float64 if _t is ctypes.c_double else np.float32)] = np.frompyfunc(
        _fn, 3, 1)


def fma(a, b, c):
    """``a*b + c`` rounded once, in c's dtype (float32 or float64); a and b
    are converted to it first (as a coefficient is)."""
    c = np.asarray(c)
    dt = c.dtype
    if dt not in _FMA:
        raise TypeError(f"fma: float32 or float64 arrays, got {dt}")
    a, b, c = np.broadcast_arrays(np.asarray(a, dt), np.asarray(b, dt), c)
    if c.size == 0:
        return np.array(c, dtype=dt)
    return np.asarray(_FMA[dt](a, b, c), dtype=dt)
