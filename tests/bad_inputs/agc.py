"""Rejected inputs of fastopt.agc, unitwise_norm and momentum(..., clipping=...).
"""
from __future__ import annotations

import math

import numpy as np

from bad_inputs.builders import F64, Case, M, arr, ro


def agc_args(x=None, g=None, **kw):
    x = arr((3, 4)) if x is None else x
    g = arr((3, 4), fill=0.5) if g is None else g
    return (x, g), kw


def fused(**kw):
    base = {"lr": 0.1, "t": 1, "clipping": 0.01}
    base.update(kw)
    return (arr((3, 4)), arr((3, 4), fill=0.5), arr((3, 4), fill=0.0)), base


LAYOUT_MSG = ("layout must be 'oi' (PyTorch: OI, OIHW; the unit is everything but the "
              "first axis) or 'io' (JAX/Haiku: IO, HWIO; everything but the last axis), "
              "got ")
AGC_CASES = [
    Case("agc", "layout 'OI' (case matters)", lambda: agc_args(layout="OI"), ValueError,
         "fastopt.agc: " + LAYOUT_MSG + "'OI'"),
    Case("agc", "layout None", lambda: agc_args(layout=None), TypeError,
         "fastopt.agc: layout must be a str, got NoneType"),
    Case("agc", "clipping = 0", lambda: agc_args(clipping=0.0), ValueError,
         "fastopt.agc: clipping must be > 0.0, got 0.0"),
    Case("agc", "clipping = -1", lambda: agc_args(clipping=-1.0), ValueError,
         "fastopt.agc: clipping must be > 0.0, got -1.0"),
    Case("agc", "clipping = NaN", lambda: agc_args(clipping=math.nan), ValueError,
         "fastopt.agc: clipping must be finite, got nan"),
    Case("agc", "clipping a bool", lambda: agc_args(clipping=True), TypeError,
         "fastopt.agc: clipping must be a real number, got bool"),
    Case("agc", "eps = 0", lambda: agc_args(eps=0.0), ValueError,
         "fastopt.agc: eps must be > 0.0, got 0.0"),
    Case("agc", "a per-tensor clipping list of the wrong length",
         lambda: (([arr((3, 4)), arr((2,))], [arr((3, 4)), arr((2,))]), {"clipping": [0.1]}),
         ValueError, "fastopt.agc: clipping has 1 entries but x has 2 tensors; give one "
                     "value per tensor (None excludes a tensor from clipping)"),
    Case("agc", "clipping[1] = -1 in a per-tensor list",
         lambda: (([arr((3, 4)), arr((2,))], [arr((3, 4)), arr((2,))]),
                  {"clipping": [0.1, -1.0]}), ValueError,
         "fastopt.agc: clipping[1] must be > 0.0, got -1.0"),
    Case("agc", "g read-only (it is clipped in place)",
         lambda: agc_args(g=ro(arr((3, 4), fill=0.5))), ValueError,
         "fastopt.agc: g is read-only; it is clipped in place"),
    Case("agc", "g of a broadcastable but different shape",
         lambda: agc_args(g=arr((1, 4))), ValueError,
         "fastopt.agc: g has shape (1, 4) but x has shape (3, 4); the gradient is clipped "
         "in place, so it must have its parameter's shape"),
    Case("agc", "g float64 for a float32 x", lambda: agc_args(g=arr((3, 4), F64)), TypeError,
         "fastopt.agc: g has dtype float64 but x has float32; the gradient must match its "
         "parameter"),
    Case("agc", "x int64", lambda: agc_args(x=arr((3, 4), np.int64)), TypeError,
         "fastopt.agc: x has dtype int64; fastopt works on float32 or float64 arrays"),
    Case("agc", "g is x", lambda: (lambda a: agc_args(x=a, g=a))(arr((3, 4))), ValueError,
         "fastopt.agc: g shares memory with x; the gradient is clipped in place while the "
         "parameter is read, so pass a copy of one"),
    Case("agc", "g[0] and g[1] the same array",
         lambda: (lambda g: (([arr((3, 4)), arr((3, 4))], [g, g]), {}))(arr((3, 4))),
         ValueError, "fastopt.agc: g[0] and g[1] share memory; every gradient is clipped in "
                     "place and must have memory of its own"),
    Case("agc", "n_threads = 0", lambda: agc_args(n_threads=0), ValueError,
         "fastopt.agc: n_threads must be a positive int up to 1024, -1 (all cores) or None "
         "(the default), got 0"),
    Case("unitwise_norm", "layout 'xy'", lambda: ((arr((3, 4)),), {"layout": "xy"}),
         ValueError, "fastopt.unitwise_norm: " + LAYOUT_MSG + "'xy'"),
    Case("unitwise_norm", "a list of arrays", lambda: (([arr((3, 4))],), {}), TypeError,
         "fastopt.unitwise_norm: x must be a numpy.ndarray, got list"),
    Case("unitwise_norm", "x int64", lambda: ((arr((3,), np.int64),), {}), TypeError,
         "fastopt.unitwise_norm: x has dtype int64; fastopt works on float32 or float64 "
         "arrays"),
    Case(M, "clipping = 0 (fused AGC)", lambda: fused(clipping=0.0), ValueError,
         "fastopt.onnx_momentum: clipping must be > 0.0, got 0.0"),
    Case(M, "clip_eps = -1 (fused AGC)", lambda: fused(clip_eps=-1.0), ValueError,
         "fastopt.onnx_momentum: clip_eps must be > 0.0, got -1.0"),
    Case(M, "layout 'ji' (fused AGC)", lambda: fused(layout="ji"), ValueError,
         "fastopt.onnx_momentum: " + LAYOUT_MSG + "'ji'"),
    Case(M, "a clipping list longer than x (fused AGC)",
         lambda: (([arr((3, 4))], [arr((3, 4))], [arr((3, 4), fill=0.0)]),
                  {"lr": 0.1, "t": 1, "clipping": [0.1, 0.2]}), ValueError,
         "fastopt.onnx_momentum: clipping has 2 entries but x has 1 tensor; give one value per "
         "tensor (None excludes a tensor from clipping)"),
]
