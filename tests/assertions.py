"""``assert_close``: the one floating-point comparison of the tests, with its
error bound written down (also the ``assert_close`` fixture of conftest.py).

The bound is NumPy's: every element must satisfy

    |actual - expected| <= atol + rtol * |expected|

with NaN matching NaN and an infinity matching the same infinity. ``rtol``
comes from, in this order: ``rtol=``; ``ulps=`` units of the dtype's
machine epsilon (``ulps * finfo(dtype).eps``: 1 ulp is one rounding of a
value near a power of two, half an ulp is the correctly rounded result);
``RTOL[dtype]``, the default for a short chain of roundings compared with a
float64 reference (float32: 2e-5 ~ 168 ulps, float64: 1e-13 ~ 450 ulps).
``atol`` defaults to 0 (no absolute slack). With ``dtype=`` the actual
array's dtype, in native byte order, must be that dtype.
"""
from __future__ import annotations

import numpy as np

DTYPES = (np.float32, np.float64)   # the float dtypes fastopt supports
RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-13}


def tolerance(dtype, *, rtol=None, ulps=None) -> float:
    """The relative tolerance assert_close uses for ``dtype``."""
    if rtol is not None:
        return float(rtol)
    if ulps is not None:
        return float(ulps) * float(np.finfo(dtype).eps)
    return RTOL[np.dtype(dtype)]


def assert_close(actual, expected, *, dtype=None, rtol=None, ulps=None, atol=0.0,
                 err_msg="") -> None:
    """Assert ``actual`` equals ``expected`` within the bound above."""
    actual = np.asarray(actual)
    if dtype is not None:
        assert actual.dtype.newbyteorder("=") == np.dtype(dtype), (actual.dtype, dtype)
    kind = dtype if dtype is not None else (
        actual.dtype if actual.dtype.kind == "f" else np.float64)
    np.testing.assert_allclose(actual, expected, rtol=tolerance(kind, rtol=rtol, ulps=ulps),
                               atol=atol, equal_nan=True, err_msg=err_msg)
