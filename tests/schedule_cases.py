"""Shared by the schedule tests: each fastopt schedule paired with its slow
reference (fastopt._reference.schedules: Angel's stateful emulation, the
closed-form family), every schedule kind, and the comparison tolerance.
"""
from __future__ import annotations

import math

from fastopt import schedules as S
from fastopt._reference import schedules as ref

REL = 1e-12


def close(a: float, b: float, rel: float = REL) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)


ANGEL_CASES = (
    [(S.ConstantLearningRate(eta), ref.AngelConstant(eta)) for eta in (0.0, 0.1, 3.0)]
    + [(S.StandardDecay(eta, alpha, interval), ref.AngelStandard(eta, alpha, interval))
       for eta, alpha, interval in [(1.0, 0.5, 100), (0.1, 0.001, 7), (2.5, 0.0, 1), (0.3, 3.0, 3)]]
    + [(S.CorrectionDecay(eta, alpha, beta, interval), ref.AngelCorrection(eta, alpha, beta, interval))
       for eta, alpha, beta, interval in [(1.0, 0.001, 0.9, 100), (0.1, 0.5, 0.0, 4),
                                          (0.01, 0.0, 0.99, 7), (2.0, 0.1, 0.999, 1)]]
    + [(S.WarmRestarts(eta_max, eta_min, alpha, interval),
        ref.AngelWarmRestarts(eta_max, eta_min, alpha, interval))
       for eta_max, eta_min, alpha, interval in [(1.0, 0.1, 0.001, 4), (1.0, 0.1, 0.001, 100),
                                                 (0.5, 0.0, 0.2, 3), (2.0, 0.5, 0.05, 7),
                                                 (1.0, 0.1, 0.0, 1), (0.1, 0.3, 1.0, 3)]]
)


FORMULA_CASES = [
    (S.constant(0.25), lambda t: 0.25),
    (S.inverse_time(0.1, 0.5), lambda t: 0.1 / (1 + t * 0.5)),  # ONNX Adagrad R / (1 + T d)
    (S.inverse_time(1.0, 0.3, 7, True), lambda t: ref.inverse_time(1.0, 0.3, 7, True, t)),
    (S.inverse_time(1.0, 0.3, 7), lambda t: ref.inverse_time(1.0, 0.3, 7, False, t)),
    (S.exponential(1.0, 10, 0.5), lambda t: ref.exponential(1.0, 10, 0.5, 0, False, None, t)),
    (S.exponential(0.1, 7, 0.9, 13, True), lambda t: ref.exponential(0.1, 7, 0.9, 13, True, None, t)),
    (S.exponential(0.1, 5, 0.5, 3, False, 0.02), lambda t: ref.exponential(0.1, 5, 0.5, 3, False, 0.02, t)),
    (S.exponential(0.1, 5, 1.1, 0, True, 0.5), lambda t: ref.exponential(0.1, 5, 1.1, 0, True, 0.5, t)),
    (S.piecewise_constant(1.0, {100: 0.1, 200: 0.01}),
     lambda t: ref.piecewise(1.0, {100: 0.1, 200: 0.01}, t)),
    (S.piecewise_constant(0.5, [(30, 2.0), (3, 0.5)]), lambda t: ref.piecewise(0.5, {3: 0.5, 30: 2.0}, t)),
    (S.piecewise_constant(0.5), lambda t: 0.5),
    (S.polynomial(1.0, 0.01, 2, 100, 5), lambda t: ref.polynomial(1.0, 0.01, 2, 100, 5, t)),
    (S.polynomial(0.0, 1.0, 0.5, 50), lambda t: ref.polynomial(0.0, 1.0, 0.5, 50, 0, t)),
    (S.cosine_decay(1.0, 100), lambda t: ref.cosine(1.0, 100, 0.0, 1.0, t)),
    (S.cosine_decay(0.3, 77, 0.1, 2.0), lambda t: ref.cosine(0.3, 77, 0.1, 2.0, t)),
    (S.warmup_cosine_decay(0.0, 1.0, 10, 110, 0.1),
     lambda t: ref.warmup_cosine(0.0, 1.0, 10, 110, 0.1, 1.0, t)),
    (S.warmup_cosine_decay(0.2, 0.5, 0, 40, 0.0, 1.5),
     lambda t: ref.warmup_cosine(0.2, 0.5, 0, 40, 0.0, 1.5, t)),
    (S.warmup_cosine_decay(0.2, 0.0, 5, 40, 0.3),
     lambda t: ref.warmup_cosine(0.2, 0.0, 5, 40, 0.3, 1.0, t)),
]


ALL_SCHEDULES = [case[0] for case in ANGEL_CASES + FORMULA_CASES] + [
    S.sgdr([dict(init_value=0.0, peak_value=1.0, warmup_steps=2, decay_steps=9)] * 2),
    S.join_schedules([S.constant(1.0), S.WarmRestarts(1.0, interval=3)], [4]),
]
