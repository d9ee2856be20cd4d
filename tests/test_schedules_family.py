"""The optax/torch family of fastopt.schedules against independent formulas
(fastopt._reference.schedules) and against optax (optional).
"""
from __future__ import annotations

import math

import pytest
from schedule_cases import FORMULA_CASES

from fastopt import schedules as S


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
