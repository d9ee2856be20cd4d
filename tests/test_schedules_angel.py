"""Angel's decays in fastopt.schedules: golden values, a stateful emulation of
Angel's ``next()``, warm restarts far out, and the angel(conf, eta) factory.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schedule_cases import ANGEL_CASES, REL, close

from fastopt import schedules as S
from fastopt._reference import schedules as ref

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


@pytest.mark.parametrize(("schedule", "angel"), ANGEL_CASES, ids=repr)
def test_angel_emulation_2000_steps(schedule, angel):
    for k in range(2000):
        expected = angel.next()
        assert close(schedule(k), expected), (k, schedule(k), expected)
        assert schedule.is_interval_boundary(k) == angel.is_interval_boundary(), k


def test_correction_decay_is_angel_shifted_by_one_call():
    """Angel's literal code (counter from 0) gives +inf first, then our values."""
    literal = ref.AngelCorrection(1.0, 0.001, 0.9, start=0)
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
    angel = ref.AngelWarmRestarts(1.0, 0.1, 0.001, interval)
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
    angel = ref.AngelWarmRestarts(eta_max, eta_min, alpha, interval)
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
    angel = ref.AngelWarmRestarts(1.0, 0.1, 0.01, 3)
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
