"""Tests of fastopt.schedules: golden values, a stateful emulation of Angel's
``next()``, independent formulas for the standard family, optax (optional),
purity, repr/eq, bad parameters and the command line."""

from __future__ import annotations

import copy
import math
import pickle
import random
import sys
import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastopt import schedules as S

REL = 1e-12


def close(a: float, b: float, rel: float = REL) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)


# --------------------------------------------------------------------------- golden values
GOLDEN = [
    (S.StandardDecay(1, alpha=0.5), [0.816497, 0.707107, 0.632456, 0.577350, 0.534522]),
    (S.CorrectionDecay(1, 0.001, 0.9), [0.9995, 0.52579, 0.368451, 0.290202]),
    (
        S.WarmRestarts(1, 0.1, 0.001, interval=4),
        [0.868198, 0.55, 0.231802, 0.1, 0.965265, 0.867772, 0.721862,
         0.54975, 0.377638, 0.231729, 0.134235, 0.1],
    ),
]


@pytest.mark.parametrize(("schedule", "expected"), GOLDEN, ids=lambda x: type(x).__name__)
def test_golden_values(schedule, expected):
    # The table is rounded to 6 decimals (0.368451 stands for 0.36845143, 1.2e-6
    # relative away), so the exact check is: rounds to the table, within 2e-6.
    got = [schedule(k) for k in range(len(expected))]
    assert [round(v, 6) for v in got] == expected
    assert got == pytest.approx(expected, rel=2e-6)


# --------------------------------------------------------------------------- Angel emulation
class AngelStandard:
    """Angel's StandardDecay: current += 1, then eta / sqrt(1 + alpha * current)."""

    def __init__(self, eta, alpha, interval=100):
        self.eta, self.alpha, self.interval, self.current = eta, alpha, interval, 0

    def next(self):
        self.current += 1
        return self.eta / math.sqrt(1.0 + self.alpha * self.current)

    def is_interval_boundary(self):
        return self.current % self.interval == 0


class AngelCorrection:
    """Angel's CorrectionDecay with the counter started at 1 (Angel's starts at 0)."""

    def __init__(self, eta, alpha, beta, interval=100, start=1):
        self.eta, self.alpha, self.beta, self.interval = eta, alpha, beta, interval
        self.current = start
        self.calls = 0

    def next(self):
        denominator = 1 - math.pow(self.beta, self.current)
        if denominator == 0:  # Angel (Scala doubles): (1 - beta) / 0 = +inf
            value = math.inf
        else:
            value = (self.eta / math.sqrt(1 + self.alpha * self.current)
                     * (1 - self.beta) / denominator)
        self.current += 1
        self.calls += 1
        return value

    def is_interval_boundary(self):
        return self.calls % self.interval == 0


class AngelWarmRestarts:
    """Angel's WarmRestarts, including the cumulative division of eta_max."""

    def __init__(self, eta_max, eta_min, alpha, interval=100):
        self.eta_max, self.eta_min, self.alpha = eta_max, eta_min, alpha
        self.interval, self.current, self.restarts = interval, 0, 0

    def next(self):
        self.current += 1
        value = self.eta_min + 0.5 * (self.eta_max - self.eta_min) * (
            1 + math.cos(self.current / self.interval * math.pi))
        if self.current == self.interval:
            self.current = 0
            self.interval *= 2
            self.restarts += 1
            self.eta_max = self.eta_max / math.sqrt(1.0 + self.restarts * self.alpha)
        return value

    def is_interval_boundary(self):
        return self.current == 0

    def skip(self, calls):
        """Make ``calls`` next() calls; calls whose value is unused and that do not
        end a cycle only advance the counter, so this takes O(cycles) time."""
        while calls > 0:
            room = self.interval - self.current
            if calls < room:
                self.current += calls
                return
            self.current = self.interval - 1
            self.next()
            calls -= room


class AngelConstant:
    def __init__(self, eta):
        self.eta = eta

    def next(self):
        return self.eta

    def is_interval_boundary(self):
        return False


ANGEL_CASES = (
    [(S.ConstantLearningRate(eta), AngelConstant(eta)) for eta in (0.0, 0.1, 3.0)]
    + [(S.StandardDecay(eta, alpha, interval), AngelStandard(eta, alpha, interval))
       for eta, alpha, interval in [(1.0, 0.5, 100), (0.1, 0.001, 7), (2.5, 0.0, 1), (0.3, 3.0, 3)]]
    + [(S.CorrectionDecay(eta, alpha, beta, interval), AngelCorrection(eta, alpha, beta, interval))
       for eta, alpha, beta, interval in [(1.0, 0.001, 0.9, 100), (0.1, 0.5, 0.0, 4),
                                          (0.01, 0.0, 0.99, 7), (2.0, 0.1, 0.999, 1)]]
    + [(S.WarmRestarts(eta_max, eta_min, alpha, interval),
        AngelWarmRestarts(eta_max, eta_min, alpha, interval))
       for eta_max, eta_min, alpha, interval in [(1.0, 0.1, 0.001, 4), (1.0, 0.1, 0.001, 100),
                                                 (0.5, 0.0, 0.2, 3), (2.0, 0.5, 0.05, 7),
                                                 (1.0, 0.1, 0.0, 1), (0.1, 0.3, 1.0, 3)]]
)


@pytest.mark.parametrize(("schedule", "angel"), ANGEL_CASES, ids=repr)
def test_angel_emulation_2000_steps(schedule, angel):
    for k in range(2000):
        expected = angel.next()
        assert close(schedule(k), expected), (k, schedule(k), expected)
        assert schedule.is_interval_boundary(k) == angel.is_interval_boundary(), k


def test_correction_decay_is_angel_shifted_by_one_call():
    """Angel's literal code (counter from 0) gives +inf first, then our values."""
    literal = AngelCorrection(1.0, 0.001, 0.9, start=0)
    assert literal.next() == math.inf
    schedule = S.CorrectionDecay(1.0, 0.001, 0.9)
    for k in range(200):
        assert close(schedule(k), literal.next())


def test_correction_factor_is_inverse_momentum_sum():
    beta, schedule = 0.9, S.CorrectionDecay(1.0, 0.0, 0.9)
    for k in range(50):
        assert close(schedule(k), 1.0 / sum(beta**i for i in range(k + 1)))


@pytest.mark.parametrize("interval", [1, 3, 4, 7, 100])
@pytest.mark.parametrize("step", [10**9, 10**9 + 1, 10**12 + 12345])
def test_warm_restarts_far_step(interval, step):
    schedule = S.WarmRestarts(1.0, 0.1, 0.001, interval)
    angel = AngelWarmRestarts(1.0, 0.1, 0.001, interval)
    angel.skip(step)
    restarts, peak = angel.restarts, angel.eta_max
    assert close(schedule(step), angel.next())
    assert schedule.is_interval_boundary(step) == angel.is_interval_boundary()
    # Independent cycle structure: cycles of I, 2I, 4I, ... steps.
    r, start = 0, 0
    while start + interval * 2**r <= step:
        start += interval * 2**r
        r += 1
    assert r == restarts
    expected_peak = 1.0 / math.prod(math.sqrt(1 + j * 0.001) for j in range(1, r + 1))
    assert close(peak, expected_peak, 1e-12)
    assert min(0.1, peak) <= schedule(step) <= max(0.1, peak)


@settings(database=None, max_examples=200)
@given(
    interval=st.integers(1, 50),
    alpha=st.floats(0, 2),
    eta_max=st.floats(0, 10),
    eta_min=st.floats(0, 1),
    step=st.integers(0, 10**15),
)
def test_warm_restarts_closed_form_matches_emulation(interval, alpha, eta_max, eta_min, step):
    schedule = S.WarmRestarts(eta_max, eta_min, alpha, interval)
    angel = AngelWarmRestarts(eta_max, eta_min, alpha, interval)
    angel.skip(step)
    assert math.isclose(schedule(step), angel.next(), rel_tol=REL, abs_tol=1e-15)
    assert schedule.is_interval_boundary(step) == angel.is_interval_boundary()


def test_warm_restarts_boundaries_and_defaults():
    schedule = S.WarmRestarts(2.0, interval=4)
    assert schedule.eta_min == 0.2
    assert schedule == S.WarmRestarts(2.0, 0.2, 0.001, 4)
    assert [k for k in range(100) if schedule.is_interval_boundary(k)] == [3, 11, 27, 59]
    assert all(schedule(k) == 0.2 for k in (3, 11, 27, 59))
    assert max(schedule(k) for k in range(100)) < 2.0  # never returns eta_max


def test_standard_and_correction_boundaries():
    assert [k for k in range(30) if S.StandardDecay(1, interval=10).is_interval_boundary(k)] == [9, 19, 29]
    assert [k for k in range(9) if S.CorrectionDecay(1, interval=3).is_interval_boundary(k)] == [2, 5, 8]
    assert not any(S.ConstantLearningRate(1).is_interval_boundary(k) for k in range(10))


# --------------------------------------------------------------------------- angel(conf, eta)
def test_angel_factory_names_case_insensitive():
    for name, cls in [("StandardDecay", S.StandardDecay), ("standarddecay", S.StandardDecay),
                      ("CORRECTIONDECAY", S.CorrectionDecay), ("WarmRestarts", S.WarmRestarts),
                      (" warmrestarts ", S.WarmRestarts), ("ConstantLearningRate", S.ConstantLearningRate),
                      ("constantlearningrate", S.ConstantLearningRate)]:
        assert type(S.angel({"ml.opt.decay.class.name": name}, 0.1)) is cls


def test_angel_factory_defaults_follow_angel():
    assert S.angel({}, 0.1) == S.StandardDecay(0.1, 0.5, 100)  # Angel's fallback alpha 0.5
    assert S.angel({"ml.opt.decay.alpha": "0.01"}, 0.1) == S.StandardDecay(0.1, 0.01)
    assert S.angel({"ml.opt.decay.alpha": 0.01, "ml.learn.decay": "0.2"}, 0.1) == S.StandardDecay(0.1, 0.2)
    assert S.angel({"ml.opt.decay.class.name": "WarmRestarts"}, 1.0) == S.WarmRestarts(1.0, 0.1, 0.001, 100)
    correction = S.angel({"ml.opt.decay.class.name": "CorrectionDecay"}, 1.0)
    assert correction == S.CorrectionDecay(1.0, 0.001, 0.001)  # Angel's beta default 0.001
    assert S.angel({"ml.opt.decay.class.name": "ConstantLearningRate"}, 0.3) == S.ConstantLearningRate(0.3)


def test_angel_factory_reads_strings_and_numbers():
    conf = {"ml.opt.decay.class.name": "correctiondecay", "ml.opt.decay.alpha": " 0.002 ",
            "ml.opt.decay.beta": "0.9", "ml.opt.decay.intervals": "7", "ml.opt.decay.on.batch": "TRUE",
            "ml.learn.rate": "0.5"}
    assert S.angel(conf, 0.5) == S.CorrectionDecay(0.5, 0.002, 0.9, 7)
    numbers = {"ml.opt.decay.class.name": "WarmRestarts", "ml.opt.decay.alpha": 0.01,
               "ml.opt.decay.intervals": np.int64(5)}
    assert S.angel(numbers, 2.0) == S.WarmRestarts(2.0, 0.2, 0.01, 5)
    assert S.angel_on_batch(conf) is True
    assert S.angel_on_batch({}) is False
    assert S.angel_on_batch({"ml.opt.decay.on.batch": False}) is False
    assert S.angel_on_batch({"ml.opt.decay.on.batch": " false"}) is False


@pytest.mark.parametrize(
    ("conf", "match", "error"),
    [
        ({"ml.opt.decay.class.name": "CosineDecay"},
         "unknown.*StandardDecay.*WarmRestarts.*CorrectionDecay.*ConstantLearningRate",
         ValueError),
        ({"ml.opt.decay.class.name": 3}, "ml.opt.decay.class.name", TypeError),
        ({"ml.opt.decay.alpha": "fast"}, "ml.opt.decay.alpha", ValueError),
        ({"ml.opt.decay.alpha": True}, "ml.opt.decay.alpha", TypeError),
        ({"ml.opt.decay.alpha": "-1"}, "alpha", ValueError),
        ({"ml.opt.decay.class.name": "WarmRestarts", "ml.opt.decay.intervals": "1.5"},
         "ml.opt.decay.intervals", ValueError),
        ({"ml.opt.decay.class.name": "WarmRestarts", "ml.opt.decay.intervals": 0}, "interval",
         ValueError),
        ({"ml.opt.decay.class.name": "CorrectionDecay", "ml.opt.decay.beta": "1"}, "beta",
         ValueError),
    ],
)
def test_angel_factory_errors(conf, match, error):
    with pytest.raises(error, match=match):
        S.angel(conf, 0.1)


@pytest.mark.parametrize(("value", "error"), [("yes", ValueError), (1, TypeError),
                                              (None, TypeError)])
def test_angel_on_batch_errors(value, error):
    with pytest.raises(error, match="ml.opt.decay.on.batch"):
        S.angel_on_batch({"ml.opt.decay.on.batch": value})


@pytest.mark.parametrize("on_batch", [False, True])
def test_angel_rate_matches_graph_learner_loop(on_batch):
    """Replay GraphLearner: next() at each epoch start, or before each batch update."""
    schedule, batches = S.WarmRestarts(1.0, 0.1, 0.01, 3), 4
    angel = AngelWarmRestarts(1.0, 0.1, 0.01, 3)
    for epoch in range(5):
        if not on_batch:
            rate = angel.next()
        for batch in range(batches):
            if on_batch:
                rate = angel.next()
            assert close(S.angel_rate(schedule, epoch, batch, batches, on_batch), rate)
    assert S.angel_step(2, 3, 4, on_batch=True) == 11
    assert S.angel_step(2, 3, 4) == 2


@pytest.mark.parametrize(
    ("args", "match", "error"),
    [((-1, 0, 4, True), "epoch", ValueError), ((0, -1, 4, True), "batch", ValueError),
     ((0, 4, 4, True), "batch", ValueError), ((0, 0, 0, True), "batches_per_epoch", ValueError),
     ((0, 0, 4, 1), "on_batch", TypeError), ((1.0, 0, 4, False), "epoch", TypeError)],
)
def test_angel_step_errors(args, match, error):
    with pytest.raises(error, match=match):
        S.angel_step(*args)
    with pytest.raises(error, match=match):
        S.angel_rate(S.Constant(1.0), *args)
    with pytest.raises(TypeError, match="schedule"):
        S.angel_rate(lambda step: 1.0, 0, 0, 1)


# --------------------------------------------------------------------------- standard family
def ref_inverse_time(init, rate, steps, staircase, t):
    p = t // steps if staircase else t / steps
    return init / (1 + rate * p)


def ref_exponential(init, steps, rate, begin, staircase, end, t):
    count = t - begin
    p = math.floor(count / steps) if staircase else count / steps
    try:
        value = init if count <= 0 else init * rate**p
    except OverflowError:
        value = math.inf
    if end is not None:
        value = max(value, end) if rate < 1 else min(value, end)
    return value


def ref_polynomial(init, end, power, steps, begin, t):
    count = min(max(t - begin, 0), steps)
    return (init - end) * (1 - count / steps) ** power + end


def ref_cosine(init, steps, alpha, exponent, t):
    t = min(t, steps)
    return init * ((1 - alpha) * (0.5 * (1 + math.cos(math.pi * t / steps))) ** exponent + alpha)


def ref_warmup_cosine(init, peak, warmup, steps, end, exponent, t):
    if t < warmup:
        return init + (peak - init) * t / warmup
    alpha = end / peak if peak else 0.0
    return ref_cosine(peak, steps - warmup, alpha, exponent, t - warmup)


def ref_piecewise(init, table, t):
    return init * math.prod(scale for boundary, scale in table.items() if t >= boundary)


FORMULA_CASES = [
    (S.constant(0.25), lambda t: 0.25),
    (S.inverse_time(0.1, 0.5), lambda t: 0.1 / (1 + t * 0.5)),  # ONNX Adagrad R / (1 + T d)
    (S.inverse_time(1.0, 0.3, 7, True), lambda t: ref_inverse_time(1.0, 0.3, 7, True, t)),
    (S.inverse_time(1.0, 0.3, 7), lambda t: ref_inverse_time(1.0, 0.3, 7, False, t)),
    (S.exponential(1.0, 10, 0.5), lambda t: ref_exponential(1.0, 10, 0.5, 0, False, None, t)),
    (S.exponential(0.1, 7, 0.9, 13, True), lambda t: ref_exponential(0.1, 7, 0.9, 13, True, None, t)),
    (S.exponential(0.1, 5, 0.5, 3, False, 0.02), lambda t: ref_exponential(0.1, 5, 0.5, 3, False, 0.02, t)),
    (S.exponential(0.1, 5, 1.1, 0, True, 0.5), lambda t: ref_exponential(0.1, 5, 1.1, 0, True, 0.5, t)),
    (S.piecewise_constant(1.0, {100: 0.1, 200: 0.01}),
     lambda t: ref_piecewise(1.0, {100: 0.1, 200: 0.01}, t)),
    (S.piecewise_constant(0.5, [(30, 2.0), (3, 0.5)]), lambda t: ref_piecewise(0.5, {3: 0.5, 30: 2.0}, t)),
    (S.piecewise_constant(0.5), lambda t: 0.5),
    (S.polynomial(1.0, 0.01, 2, 100, 5), lambda t: ref_polynomial(1.0, 0.01, 2, 100, 5, t)),
    (S.polynomial(0.0, 1.0, 0.5, 50), lambda t: ref_polynomial(0.0, 1.0, 0.5, 50, 0, t)),
    (S.cosine_decay(1.0, 100), lambda t: ref_cosine(1.0, 100, 0.0, 1.0, t)),
    (S.cosine_decay(0.3, 77, 0.1, 2.0), lambda t: ref_cosine(0.3, 77, 0.1, 2.0, t)),
    (S.warmup_cosine_decay(0.0, 1.0, 10, 110, 0.1),
     lambda t: ref_warmup_cosine(0.0, 1.0, 10, 110, 0.1, 1.0, t)),
    (S.warmup_cosine_decay(0.2, 0.5, 0, 40, 0.0, 1.5),
     lambda t: ref_warmup_cosine(0.2, 0.5, 0, 40, 0.0, 1.5, t)),
    (S.warmup_cosine_decay(0.2, 0.0, 5, 40, 0.3),
     lambda t: ref_warmup_cosine(0.2, 0.0, 5, 40, 0.3, 1.0, t)),
]


@pytest.mark.parametrize(("schedule", "reference"), FORMULA_CASES, ids=repr)
def test_standard_family_formulas(schedule, reference):
    for t in list(range(400)) + [10**6, 10**9]:
        assert math.isclose(schedule(t), reference(t), rel_tol=1e-12, abs_tol=1e-15), t


def test_standard_family_known_values():
    assert S.inverse_time(1.0, 0.5)(2) == 0.5
    assert S.inverse_time(1.0, 0.5, 3, staircase=True)(5) == pytest.approx(2 / 3)
    expo = S.exponential(1.0, 10, 0.5)
    assert (expo(0), expo(10), expo(20)) == (1.0, 0.5, 0.25)
    assert expo(5) == pytest.approx(math.sqrt(0.5))
    assert S.exponential(1.0, 10, 0.5, staircase=True)(19) == 0.5
    assert S.exponential(1.0, 10, 0.5, transition_begin=5)(15) == 0.5
    assert S.exponential(1.0, 10, 0.5, end_value=0.3)(100) == 0.3
    assert S.exponential(1.0, 10, 2.0, end_value=3.0)(100) == 3.0
    assert S.exponential(1.0, 1, 2.0)(10**6) == math.inf  # overflow, as float32 optax
    assert S.exponential(1.0, 1, 2.0, end_value=5.0)(10**6) == 5.0
    assert S.exponential(0.0, 1, 2.0)(10**6) == 0.0
    piecewise = S.piecewise_constant(1.0, {100: 0.1, 200: 0.01})
    assert [piecewise(t) for t in (50, 99, 100, 150, 199, 200, 250)] == pytest.approx(
        [1.0, 1.0, 0.1, 0.1, 0.1, 0.001, 0.001])
    poly = S.polynomial(1.0, 0.01, 2, 100, 5)  # optax's docstring example
    assert [round(poly(t), 4) for t in (0, 5, 6, 104, 105, 110)] == [1.0, 1.0, 0.9803, 0.0101, 0.01, 0.01]
    cos = S.cosine_decay(1.0, 100)
    assert (cos(0), cos(100), cos(500)) == (1.0, 0.0, 0.0)
    assert cos(50) == pytest.approx(0.5)
    assert S.cosine_decay(1.0, 100, alpha=0.1)(100) == pytest.approx(0.1)
    warm = S.warmup_cosine_decay(0.0, 1.0, 10, 110, end_value=0.1)
    assert [warm(t) for t in (0, 5, 10, 60, 110, 1000)] == pytest.approx([0.0, 0.5, 1.0, 0.55, 0.1, 0.1])


def test_join_schedules_and_sgdr():
    join = S.join_schedules([S.constant(1.0), S.constant(2.0), S.polynomial(1.0, 0.0, 1, 10)], [3, 5])
    assert [join(t) for t in range(8)] == pytest.approx([1, 1, 1, 2, 2, 1.0, 0.9, 0.8])
    same = S.join_schedules([S.constant(1.0), S.constant(2.0), S.constant(3.0)], [4, 4])
    assert (same(3), same(4)) == (1.0, 3.0)
    assert S.join_schedules([S.constant(1.0)], [])(10) == 1.0

    cycle = dict(init_value=0.0, peak_value=1.0, warmup_steps=5, decay_steps=20, end_value=0.1)
    second = dict(cycle, peak_value=0.5, decay_steps=30, end_value=0.0)
    sgdr = S.sgdr([cycle, second])
    first_wc, second_wc = S.warmup_cosine_decay(**cycle), S.warmup_cosine_decay(**second)
    for t in range(100):
        expected = first_wc(t) if t < 20 else second_wc(t - 20)
        assert sgdr(t) == expected
    assert sgdr(5) == 1.0 and sgdr(20) == 0.0 and sgdr(25) == 0.5 and sgdr(1000) == 0.0
    assert sgdr == S.SGDR([cycle, second])
    assert sgdr != S.join_schedules([first_wc, second_wc], [20])  # same values, other type


OPTAX_CASES = [
    ("constant_schedule", dict(value=0.1), S.constant(0.1)),
    ("exponential_decay", dict(init_value=1.0, transition_steps=10, decay_rate=0.5),
     S.exponential(1.0, 10, 0.5)),
    ("exponential_decay", dict(init_value=0.1, transition_steps=7, decay_rate=0.9, transition_begin=13,
                               staircase=True, end_value=0.05),
     S.exponential(0.1, 7, 0.9, 13, True, 0.05)),
    ("exponential_decay", dict(init_value=0.1, transition_steps=5, decay_rate=1.1, staircase=True,
                               end_value=0.5),
     S.exponential(0.1, 5, 1.1, staircase=True, end_value=0.5)),
    ("piecewise_constant_schedule", dict(init_value=1.0, boundaries_and_scales={100: 0.1, 200: 0.01}),
     S.piecewise_constant(1.0, {100: 0.1, 200: 0.01})),
    ("piecewise_constant_schedule", dict(init_value=0.5, boundaries_and_scales={0: 0.5, 30: 3.0}),
     S.piecewise_constant(0.5, {0: 0.5, 30: 3.0})),
    ("polynomial_schedule", dict(init_value=0.0, end_value=1.0, power=0.5, transition_steps=50),
     S.polynomial(0.0, 1.0, 0.5, 50)),
    ("linear_schedule", dict(init_value=0.5, end_value=0.1, transition_steps=40, transition_begin=7),
     S.polynomial(0.5, 0.1, 1, 40, 7)),
    ("cosine_decay_schedule", dict(init_value=1.0, decay_steps=100), S.cosine_decay(1.0, 100)),
    ("warmup_cosine_decay_schedule", dict(init_value=0.2, peak_value=0.5, warmup_steps=0, decay_steps=40,
                                          exponent=1.5),
     S.warmup_cosine_decay(0.2, 0.5, 0, 40, exponent=1.5)),
    ("polynomial_schedule", dict(init_value=1.0, end_value=0.01, power=2, transition_steps=100,
                                 transition_begin=5),
     S.polynomial(1.0, 0.01, 2, 100, 5)),
    ("cosine_decay_schedule", dict(init_value=0.3, decay_steps=77, alpha=0.1, exponent=2.0),
     S.cosine_decay(0.3, 77, 0.1, 2.0)),
    ("warmup_cosine_decay_schedule", dict(init_value=0.0, peak_value=1.0, warmup_steps=10, decay_steps=110,
                                          end_value=0.1),
     S.warmup_cosine_decay(0.0, 1.0, 10, 110, 0.1)),
    ("sgdr_schedule",
     dict(cosine_kwargs=[dict(init_value=0.0, peak_value=1.0, warmup_steps=5, decay_steps=20)] * 3),
     S.sgdr([dict(init_value=0.0, peak_value=1.0, warmup_steps=5, decay_steps=20)] * 3)),
]


@pytest.mark.parametrize(("name", "kwargs", "ours"), OPTAX_CASES, ids=[c[0] for c in OPTAX_CASES])
def test_matches_optax(name, kwargs, ours):
    optax = pytest.importorskip("optax")
    theirs = getattr(optax, name)(**kwargs)
    for t in range(0, 300, 3):
        assert float(theirs(t)) == pytest.approx(ours(t), rel=1e-5, abs=1e-7), t


def test_join_matches_optax():
    optax = pytest.importorskip("optax")
    theirs = optax.join_schedules([optax.constant_schedule(1.0), optax.linear_schedule(1.0, 0.0, 10)], [5])
    ours = S.join_schedules([S.constant(1.0), S.polynomial(1.0, 0.0, 1, 10)], [5])
    for t in range(30):
        assert float(theirs(t)) == pytest.approx(ours(t), rel=1e-5, abs=1e-7)


# --------------------------------------------------------------------------- object protocol
ALL_SCHEDULES = [case[0] for case in ANGEL_CASES + FORMULA_CASES] + [
    S.sgdr([dict(init_value=0.0, peak_value=1.0, warmup_steps=2, decay_steps=9)] * 2),
    S.join_schedules([S.constant(1.0), S.WarmRestarts(1.0, interval=3)], [4]),
]


@pytest.mark.parametrize("schedule", ALL_SCHEDULES, ids=repr)
def test_purity_any_order(schedule):
    steps = list(range(300)) + [10**9]
    forward = [schedule(t) for t in steps]
    order = list(range(len(steps)))
    random.Random(0).shuffle(order)
    shuffled = {i: schedule(steps[i]) for i in order}
    assert [shuffled[i] for i in range(len(steps))] == forward
    assert [schedule(t) for t in reversed(steps)] == forward[::-1]
    assert [schedule(t) for t in steps] == forward
    assert all(isinstance(v, float) for v in forward)


@pytest.mark.parametrize("schedule", ALL_SCHEDULES, ids=repr)
def test_repr_eq_hash(schedule):
    rebuilt = eval(repr(schedule), vars(S))
    assert rebuilt == schedule and hash(rebuilt) == hash(schedule)
    assert repr(rebuilt) == repr(schedule)
    assert pickle.loads(pickle.dumps(schedule)) == schedule
    assert copy.deepcopy(schedule) == schedule
    assert schedule != "not a schedule"
    assert schedule(np.int64(17)) == schedule(17) == schedule(np.uint8(17))
    with pytest.raises(AttributeError, match="immutable"):
        schedule.foo = 1


def test_eq_details():
    assert S.StandardDecay(1, 0.5) == S.StandardDecay(1.0, alpha=0.5, interval=100)
    assert S.StandardDecay(1, 0.5) != S.StandardDecay(1, 0.25)
    assert S.Constant(1.0) != S.ConstantLearningRate(1.0)
    assert len({S.Constant(1), S.Constant(1.0), S.constant(2)}) == 2
    assert S.piecewise_constant(1, {2: 0.5, 1: 0.1}) == S.piecewise_constant(1, [(1, 0.1), (2, 0.5)])
    assert repr(S.StandardDecay(1, 0.5)) == "StandardDecay(eta=1.0, alpha=0.5, interval=100)"
    assert S.exponential is S.Exponential and S.join_schedules is S.JoinSchedules


# --------------------------------------------------------------------------- bad parameters
BAD = [
    (lambda: S.ConstantLearningRate(-0.1), "eta"),
    (lambda: S.ConstantLearningRate(float("nan")), "eta"),
    (lambda: S.ConstantLearningRate(math.inf), "eta"),
    (lambda: S.ConstantLearningRate("0.1"), "eta", TypeError),
    (lambda: S.ConstantLearningRate(True), "eta", TypeError),
    (lambda: S.StandardDecay(-1.0), "eta"),
    (lambda: S.StandardDecay(1.0, -0.001), "alpha"),
    (lambda: S.StandardDecay(1.0, interval=0), "interval"),
    (lambda: S.StandardDecay(1.0, interval=2.0), "interval", TypeError),
    (lambda: S.CorrectionDecay(-1.0), "eta"),
    (lambda: S.CorrectionDecay(1.0, alpha=-1), "alpha"),
    (lambda: S.CorrectionDecay(1.0, beta=1.0), "beta"),
    (lambda: S.CorrectionDecay(1.0, beta=-0.1), "beta"),
    (lambda: S.CorrectionDecay(1.0, beta=1.5), "beta"),
    (lambda: S.CorrectionDecay(1.0, interval=-3), "interval"),
    (lambda: S.WarmRestarts(-1.0), "eta_max"),
    (lambda: S.WarmRestarts(1.0, -0.1), "eta_min"),
    (lambda: S.WarmRestarts(1.0, alpha=-0.5), "alpha"),
    (lambda: S.WarmRestarts(1.0, interval=0), "interval"),
    (lambda: S.WarmRestarts(1.0, interval=True), "interval", TypeError),
    (lambda: S.constant(-1), "value"),
    (lambda: S.inverse_time(-1, 0.1), "init_value"),
    (lambda: S.inverse_time(1, -0.1), "decay_rate"),
    (lambda: S.inverse_time(1, 0.1, 0), "transition_steps"),
    (lambda: S.inverse_time(1, 0.1, staircase=1), "staircase", TypeError),
    (lambda: S.exponential(-1, 10, 0.5), "init_value"),
    (lambda: S.exponential(1, 0, 0.5), "transition_steps"),
    (lambda: S.exponential(1, 10, 0.0), "decay_rate"),
    (lambda: S.exponential(1, 10, -0.5), "decay_rate"),
    (lambda: S.exponential(1, 10, 0.5, -1), "transition_begin"),
    (lambda: S.exponential(1, 10, 0.5, staircase="yes"), "staircase", TypeError),
    (lambda: S.exponential(1, 10, 0.5, end_value=-1), "end_value"),
    (lambda: S.piecewise_constant(-1.0), "init_value"),
    (lambda: S.piecewise_constant(1.0, {10: -0.5}), "boundaries_and_scales"),
    (lambda: S.piecewise_constant(1.0, {-10: 0.5}), "boundaries_and_scales"),
    (lambda: S.piecewise_constant(1.0, {1.5: 0.5}), "boundaries_and_scales", TypeError),
    (lambda: S.piecewise_constant(1.0, [(1, 0.5), (1, 0.2)]), "boundaries_and_scales"),
    (lambda: S.piecewise_constant(1.0, [1, 2]), "boundaries_and_scales", TypeError),
    (lambda: S.polynomial(-1, 0, 1, 10), "init_value"),
    (lambda: S.polynomial(1, -1, 1, 10), "end_value"),
    (lambda: S.polynomial(1, 0, 0, 10), "power"),
    (lambda: S.polynomial(1, 0, 1, 0), "transition_steps"),
    (lambda: S.polynomial(1, 0, 1, 10, -5), "transition_begin"),
    (lambda: S.cosine_decay(-1, 10), "init_value"),
    (lambda: S.cosine_decay(1, 0), "decay_steps"),
    (lambda: S.cosine_decay(1, 10, alpha=-0.1), "alpha"),
    (lambda: S.cosine_decay(1, 10, exponent=0), "exponent"),
    (lambda: S.warmup_cosine_decay(-1, 1, 10, 100), "init_value"),
    (lambda: S.warmup_cosine_decay(0, -1, 10, 100), "peak_value"),
    (lambda: S.warmup_cosine_decay(0, 1, -1, 100), "warmup_steps"),
    (lambda: S.warmup_cosine_decay(0, 1, 10, 10), "decay_steps"),
    (lambda: S.warmup_cosine_decay(0, 1, 10, 100, end_value=-1), "end_value"),
    (lambda: S.warmup_cosine_decay(0, 1, 10, 100, exponent=-1), "exponent"),
    (lambda: S.sgdr([]), "cosine_kwargs"),
    (lambda: S.sgdr({"init_value": 0}), "cosine_kwargs", TypeError),
    (lambda: S.sgdr([dict(init_value=0, peak_value=1, warmup_steps=1, decay_steps=5, bogus=1)]),
     "cosine_kwargs", TypeError),
    (lambda: S.sgdr([dict(init_value=0, peak_value=1, warmup_steps=1, decay_steps=1)]),
     r"cosine_kwargs\[0\].*decay_steps"),
    (lambda: S.sgdr([5]), "cosine_kwargs", TypeError),
    (lambda: S.join_schedules([], []), "schedules"),
    (lambda: S.join_schedules([lambda t: 1.0], []), "schedules", TypeError),
    (lambda: S.join_schedules([S.constant(1)], [3]), "boundaries"),
    (lambda: S.join_schedules([S.constant(1)] * 3, [5, 2]), "boundaries"),
    (lambda: S.join_schedules([S.constant(1)] * 2, [-1]), "boundaries"),
    (lambda: S.join_schedules([S.constant(1)] * 2, 5), "boundaries", TypeError),
]


# a wrong type raises TypeError, a wrong value ValueError (the rows without a class)
BAD = [row if len(row) == 3 else (*row, ValueError) for row in BAD]


@pytest.mark.parametrize(("make", "match", "error"), BAD,
                         ids=[b[1] + str(i) for i, b in enumerate(BAD)])
def test_bad_parameters(make, match, error):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize(("step", "error"),
                         [(-1, ValueError), (2.0, TypeError), (1.5, TypeError), (True, TypeError),
                          (np.bool_(True), TypeError), ("3", TypeError), (None, TypeError),
                          (np.float64(2.0), TypeError)])
@pytest.mark.parametrize("schedule", [S.StandardDecay(1.0), S.WarmRestarts(1.0), S.cosine_decay(1.0, 10)],
                         ids=repr)
def test_bad_step(schedule, step, error):
    with pytest.raises(error, match="step"):
        schedule(step)
    if hasattr(schedule, "is_interval_boundary"):
        with pytest.raises(error, match="step"):
            schedule.is_interval_boundary(step)


# --------------------------------------------------------------------------- command line
def parse_output(out):
    lines = out.strip().splitlines()
    assert lines[0].startswith("# ")
    return lines[0][2:], [(int(a), float(b)) for a, b in (line.split() for line in lines[1:]
                                                           if not line.startswith("#"))]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["StandardDecay", "--param", "eta=1", "--param", "alpha=0.5", "--steps", "5"],
         S.StandardDecay(1, 0.5)),
        (["standarddecay", "--param", "eta=1"], S.StandardDecay(1)),
        (["WARMRESTARTS", "--param", "eta_max=1", "--param", "interval=4", "--steps", "30"],
         S.WarmRestarts(1, interval=4)),
        (["correctiondecay", "--param", "eta=0.1", "--param", "beta=0.99", "--steps", "3"],
         S.CorrectionDecay(0.1, beta=0.99)),
        (["exponential", "--param", "init_value=0.1", "--param", "transition_steps=10",
          "--param", "decay_rate=0.5", "--param", "staircase=true", "--steps", "25"],
         S.exponential(0.1, 10, 0.5, staircase=True)),
        (["piecewise_constant", "--param", "init_value=1",
          "--param", "boundaries_and_scales={3: 0.5, 6: 0.1}"],
         S.piecewise_constant(1, {3: 0.5, 6: 0.1})),
        (["Cosine-Decay", "--param", "init_value=1", "--param", "decay_steps=8", "--steps", "10"],
         S.cosine_decay(1, 8)),
        (["sgdr", "--param",
          'cosine_kwargs=[{"init_value": 0, "peak_value": 1, "warmup_steps": 2, "decay_steps": 6}] * 2'],
         None),
        (["sgdr", "--param",
          'cosine_kwargs=[{"init_value": 0, "peak_value": 1, "warmup_steps": 2, "decay_steps": 6}]'],
         S.sgdr([dict(init_value=0, peak_value=1, warmup_steps=2, decay_steps=6)])),
    ],
)
def test_cli_prints_values(capsys, argv, expected):
    code = S.main(argv)
    out, err = capsys.readouterr()
    if expected is None:  # an expression, not a literal: a clear error, code 2
        assert code == 2 and "cosine_kwargs" in err and out == ""
        return
    assert code == 0 and err == ""
    header, rows = parse_output(out)
    assert eval(header, vars(S)) == expected
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 10
    assert rows == [(t, expected(t)) for t in range(steps)]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["nope", "--param", "eta=1"], "unknown schedule 'nope'"),
        (["join_schedules"], "unknown schedule"),
        (["StandardDecay"], "eta"),
        (["StandardDecay", "--param", "eta=-1"], "eta"),
        (["StandardDecay", "--param", "eta=1", "--param", "beta=0.9"], "beta"),
        (["StandardDecay", "--param", "eta"], "k=v"),
        (["StandardDecay", "--param", "eta=1", "--steps", "0"], "steps"),
        (["StandardDecay", "--param", "eta=1", "--steps", "x"], "steps"),
        (["cosine_decay", "--param", "init_value=1", "--param", "decay_steps=10.5"], "decay_steps"),
        ([], "NAME"),
    ],
)
def test_cli_errors(capsys, argv, match):
    assert S.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert match in err


def test_cli_help_and_default_argv(capsys, monkeypatch):
    assert S.main(["--help"]) == 0  # argparse's SystemExit becomes the return code
    assert "NAME" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["python -m fastopt", "schedule", "constant", "--param", "value=2",
                                      "--steps", "2"])
    assert S.main() == 0
    assert parse_output(capsys.readouterr().out)[1] == [(0, 2.0), (1, 2.0)]


def test_cli_plot_without_matplotlib(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    out_file = tmp_path / "curve.png"
    assert S.main(["constant", "--param", "value=1", "--plot", str(out_file)]) == 1
    out, err = capsys.readouterr()
    assert "matplotlib" in err and "not installed" in err
    assert not out_file.exists()


def test_cli_plot_with_fake_matplotlib(capsys, monkeypatch, tmp_path):
    saved = {}

    class Axes:
        def plot(self, x, y):
            saved["xy"] = (list(x), list(y))

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    class Figure:
        def __init__(self, **kwargs):
            pass

        def subplots(self):
            return Axes()

        def savefig(self, path):
            saved["path"] = path

    figure_module = types.ModuleType("matplotlib.figure")
    figure_module.Figure = Figure
    package = types.ModuleType("matplotlib")
    package.figure = figure_module
    monkeypatch.setitem(sys.modules, "matplotlib", package)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", figure_module)
    out_file = str(tmp_path / "curve.png")
    assert S.main(["WarmRestarts", "--param", "eta_max=1", "--param", "interval=3", "--steps", "12",
                   "--plot", out_file]) == 0
    assert saved["path"] == out_file
    assert saved["xy"] == (list(range(12)), [S.WarmRestarts(1, interval=3)(t) for t in range(12)])
    assert "plot saved" in capsys.readouterr().out


def test_cli_plot_with_matplotlib(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out_file = tmp_path / "curve.png"
    assert S.main(["cosine_decay", "--param", "init_value=1", "--param", "decay_steps=50", "--steps", "60",
                   "--plot", str(out_file)]) == 0
    assert out_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
