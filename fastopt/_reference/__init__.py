"""The slow references: plain NumPy evaluations of everything fastopt computes.

One importable place (in the spirit of ``bottleneck.slow``) that the tests
and the benchmarks compare every fast path with. Each topic has its module;
the update rules are re-exported here for the common case::

    from fastopt import _reference as ref
    x_new, v_new = ref.momentum(x, g, v, lr=0.1, t=0)

Nothing here is fast or modifies its arguments (the ``*_inplace`` helpers,
which write their results back, excepted).
"""
from .ops import (  # noqa: F401
    adagrad, adagrad_inplace, adam, adam_inplace, momentum, momentum_inplace,
)
