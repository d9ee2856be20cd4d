"""Every schedule as an object: pure in any call order, repr/eq/hash, and bad
parameters or steps rejected with the right error.
"""
from __future__ import annotations

import copy
import math
import pickle
import random

import numpy as np
import pytest
from schedule_cases import ALL_SCHEDULES

from fastopt import schedules as S

# --------------------------------------------------------------------------- object protocol


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
