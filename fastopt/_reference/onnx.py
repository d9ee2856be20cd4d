"""ONNX training nodes (ai.onnx.preview.training Momentum / Adagrad / Adam)
evaluated in plain NumPy float64, one tensor at a time.

The node's view of the update rules of :mod:`.ops`: the op is named as in
ONNX ("Momentum", "Adagrad", "Adam") and its attributes come as the node's
attribute dict (every attribute present, e.g. with the schema defaults
filled in), so a conformance test can compare a node's outputs with it
directly. docs/semantics.md section 1 has the math.
"""
from __future__ import annotations

import numpy as np

from . import ops

# ONNX attribute names of each node, in the keyword names of fastopt's ops
_ATTRS = {
    "Momentum": ("alpha", "beta", "norm_coefficient", "mode"),
    "Adagrad": ("decay_factor", "epsilon", "norm_coefficient"),
    "Adam": ("alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"),
}
_RULES = {"Momentum": ops.momentum, "Adagrad": ops.adagrad, "Adam": ops.adam}


def node(op: str, lr, t, x, g, states, attrs: dict):
    """One tensor of an ONNX training node in float64: returns
    ``(x_new, [state_new, ...])`` (states in ONNX order: V for Momentum,
    H for Adagrad, V then H for Adam)."""
    kw = {name: attrs[name] for name in _ATTRS[op]}
    x = np.asarray(x).astype(np.float64)
    g = np.broadcast_to(np.asarray(g).astype(np.float64), x.shape)
    out = _RULES[op](x, g, *(np.asarray(s).astype(np.float64) for s in states),
                     lr=lr, t=t, **kw)
    return out[0], list(out[1:])
