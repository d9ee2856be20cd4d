"""The slow references: plain NumPy evaluations of everything fastopt computes.

One importable place (in the spirit of ``bottleneck.slow``) that the tests
and the benchmarks compare every fast path with, a module per topic:

- ``ops``       ONNX Momentum / Adagrad / Adam, float64 (or in a given dtype,
                bit for bit), and the in-place NumPy baselines of the benchmarks
- ``tracked``   the same rules with a rigorous error bound for the dtype
                evaluation (``check_close``)
- ``agc``       NFNet unitwise norms and adaptive gradient clipping, with checks
- ``schedules`` Angel's decays (stateful emulation) and the optax/torch family
- ``optim``     the optimizer objects' contract, replayed tensor by tensor
- ``onnx``      ONNX training nodes (op names and attribute dicts) in float64
- ``half``      bfloat16 states: their rounding, to nearest and stochastic
- ``bnb8``      bitsandbytes' blockwise 8-bit states: maps, codes, absmax

The update rules are re-exported here for the common case::

    from fastopt import _reference as ref
    x_new, v_new = ref.momentum(x, g, v, lr=0.1, t=0)
    g_clipped = ref.agc.agc(x, g, 0.01, 1e-3, "oi")

Nothing here is fast or modifies its arguments (the ``*_inplace`` helpers,
which write their results back, excepted).
"""
from . import agc, onnx, ops, optim, schedules, tracked  # noqa: F401
from .ops import (  # noqa: F401
    adagrad,
    adagrad_inplace,
    adam,
    adam_inplace,
    momentum,
    momentum_inplace,
)
