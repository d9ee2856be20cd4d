"""Huge but valid integers in every schedule.

A Python int has no upper bound, a float stops near 1.8e308: ``10**400`` as a
step or as a parameter must give either a ValueError that names the
parameter, or a float -- the mathematically right limit where one exists (a
decay at step 10**400 is its floor value) -- and never an OverflowError.
Property tests draw steps and parameters up to 10**500 for every class.
"""
from __future__ import annotations

import inspect
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

S = pytest.importorskip("fastopt.schedules")

HUGE = 10**400
CLASSES = sorted({getattr(S, n) for n in S.__all__
                  if inspect.isclass(getattr(S, n)) and issubclass(getattr(S, n), S.Schedule)
                  and getattr(S, n) is not S.Schedule}, key=lambda c: c.__name__)
BIG = st.integers(0, 10**500)
STEPS = st.sampled_from([0, 1, 2**63, 2**1024, 10**308, 10**309, HUGE, 10**500]) | BIG


def test_thirteen_classes():
    assert len(CLASSES) == 13, [c.__name__ for c in CLASSES]


# ------------------------------------------------------ the right limits

LIMITS = [
    (S.ConstantLearningRate(0.5), 0.5),
    (S.Constant(0.5), 0.5),
    (S.StandardDecay(1.0), 0.0),
    (S.StandardDecay(1.0, alpha=0.0), 1.0),
    (S.CorrectionDecay(1.0), 0.0),
    (S.CorrectionDecay(2.0, alpha=0.0, beta=0.5), 1.0),
    (S.InverseTime(1.0, 0.5), 0.0),
    (S.InverseTime(1.0, 0.5, staircase=True), 0.0),
    (S.InverseTime(1.0, 0.0), 1.0),
    (S.Exponential(1.0, 10, 0.5), 0.0),
    (S.Exponential(1.0, 10, 0.5, staircase=True), 0.0),
    (S.Exponential(1.0, 10, 0.5, end_value=0.125), 0.125),
    (S.Exponential(1.0, 10, 1.0), 1.0),
    (S.Exponential(1.0, 10, 2.0), math.inf),
    (S.Exponential(1.0, 10, 2.0, end_value=4.0), 4.0),
    (S.Exponential(0.0, 10, 2.0), 0.0),
    (S.PiecewiseConstant(1.0, {10: 0.5, 2**1000: 0.5}), 0.25),
    (S.Polynomial(1.0, 0.125, 2.0, 100), 0.125),
    (S.CosineDecay(1.0, 10, alpha=0.125), 0.125),
    (S.WarmupCosineDecay(0.0, 1.0, 5, 50, end_value=0.25), 0.25),
    (S.JoinSchedules([S.Constant(1.0), S.CosineDecay(2.0, 10, alpha=0.5)], [100]), 1.0),
    (S.SGDR([{"init_value": 0.0, "peak_value": 1.0, "warmup_steps": 2, "decay_steps": 10,
              "end_value": 0.125}]), 0.125),
]


@pytest.mark.parametrize("sched, want", LIMITS, ids=[repr(s) for s, _ in LIMITS])
@pytest.mark.parametrize("step", [2**1024, HUGE, 10**500], ids=["2**1024", "1e400", "1e500"])
def test_huge_step_gives_the_limit(sched, want, step):
    got = sched(step)
    assert type(got) is float and got == want, (sched, got)


def test_warm_restarts_at_a_huge_step_stays_within_its_range():
    # after r restarts the peak is eta_max / prod(sqrt(1 + j * alpha)): below
    # eta_min long before step 10**400, so the cycles run between 0 and eta_min
    s = S.WarmRestarts(1.0, eta_min=0.125)
    for step in (HUGE, 10**500, 2**1024 - 1):
        got = s(step)
        assert type(got) is float and 0.0 <= got <= 0.125


@pytest.mark.parametrize("make, step, want", [
    (lambda: S.CosineDecay(1.0, decay_steps=HUGE), 0, 1.0),
    (lambda: S.CosineDecay(1.0, decay_steps=HUGE), 10**6, 1.0),
    (lambda: S.CosineDecay(1.0, decay_steps=HUGE, alpha=0.5), HUGE, 0.5),
    (lambda: S.CosineDecay(1.0, decay_steps=2 * HUGE), HUGE, 0.5),
    (lambda: S.Polynomial(1.0, 0.0, 1.0, transition_steps=2 * HUGE), HUGE, 0.5),
    (lambda: S.Polynomial(1.0, 0.0, 1.0, 10, transition_begin=HUGE), HUGE, 1.0),
    (lambda: S.InverseTime(1.0, 1.0, transition_steps=HUGE), HUGE, 0.5),
    (lambda: S.InverseTime(1.0, 1.0, transition_steps=HUGE), 0, 1.0),
    (lambda: S.Exponential(1.0, HUGE, 0.25), HUGE, 0.25),
    (lambda: S.Exponential(1.0, 10, 0.5, transition_begin=HUGE), HUGE, 1.0),
    (lambda: S.WarmupCosineDecay(0.0, 1.0, HUGE, 2 * HUGE), HUGE // 2, 0.5),
    (lambda: S.WarmupCosineDecay(0.0, 1.0, 0, 2 * HUGE), HUGE, 0.5),
    (lambda: S.StandardDecay(1.0, alpha=0.0, interval=HUGE), HUGE, 1.0),
    (lambda: S.WarmRestarts(1.0, eta_min=0.0, alpha=0.0, interval=HUGE), 0, 1.0),
    (lambda: S.PiecewiseConstant(1.0, {HUGE: 0.5}), HUGE - 1, 1.0),
    (lambda: S.JoinSchedules([S.Constant(1.0), S.Constant(0.5)], [HUGE]), HUGE, 0.5),
])
def test_huge_integer_parameters_are_exact(make, step, want):
    got = make()(step)
    assert type(got) is float and got == want


# ----------------------------------- huge reals: ValueError naming them

@pytest.mark.parametrize("make, name", [
    (lambda v: S.ConstantLearningRate(v), "eta"),
    (lambda v: S.Constant(v), "value"),
    (lambda v: S.StandardDecay(v), "eta"),
    (lambda v: S.StandardDecay(1.0, alpha=v), "alpha"),
    (lambda v: S.CorrectionDecay(1.0, alpha=v), "alpha"),
    (lambda v: S.WarmRestarts(v), "eta_max"),
    (lambda v: S.WarmRestarts(1.0, eta_min=v), "eta_min"),
    (lambda v: S.InverseTime(v, 1.0), "init_value"),
    (lambda v: S.InverseTime(1.0, v), "decay_rate"),
    (lambda v: S.Exponential(1.0, 10, v), "decay_rate"),
    (lambda v: S.Exponential(1.0, 10, 0.5, end_value=v), "end_value"),
    (lambda v: S.PiecewiseConstant(v), "init_value"),
    (lambda v: S.Polynomial(1.0, v, 1.0, 10), "end_value"),
    (lambda v: S.Polynomial(1.0, 0.0, v, 10), "power"),
    (lambda v: S.CosineDecay(1.0, 10, exponent=v), "exponent"),
    (lambda v: S.WarmupCosineDecay(0.0, v, 1, 10), "peak_value"),
])
@pytest.mark.parametrize("value", [HUGE, 10**500, 2**1024], ids=["1e400", "1e500", "2**1024"])
def test_huge_real_parameter_is_a_value_error_naming_it(make, name, value):
    with pytest.raises(ValueError, match=rf"^fastopt\.schedules\.\w+: {name} must be a "
                                         rf"finite number .*, got an integer of \d+ digits$"):
        make(value)


def test_piecewise_scale_overflowing_to_infinity():
    # each scale is finite; their product may overflow: the value is inf, not an error
    s = S.PiecewiseConstant(1e300, {1: 1e300})
    assert s(0) == 1e300 and s(1) == math.inf


# ------------------------------------------------ property tests, all classes

def value_ok(sched, step):
    try:
        got = sched(step)
    except ValueError as exc:          # only for an invalid step: never for an int >= 0
        raise AssertionError(f"{sched!r}({step}) raised {exc}") from None
    assert type(got) is float and not math.isnan(got) and got >= 0, (sched, step, got)
    return got


def construct(cls, args, name):
    """cls(**args), where a huge value for ``name`` may be refused with a
    ValueError naming it; None when refused."""
    try:
        return cls(**args)
    except ValueError as exc:
        assert f"fastopt.schedules.{cls.__name__}: {name} " in str(exc), str(exc)
        return None


DEFAULTS = {
    "ConstantLearningRate": {"eta": 0.5},
    "StandardDecay": {"eta": 0.5, "alpha": 0.01, "interval": 10},
    "CorrectionDecay": {"eta": 0.5, "alpha": 0.01, "beta": 0.9, "interval": 10},
    "WarmRestarts": {"eta_max": 0.5, "eta_min": 0.01, "alpha": 0.01, "interval": 10},
    "Constant": {"value": 0.5},
    "InverseTime": {"init_value": 0.5, "decay_rate": 0.1, "transition_steps": 3,
                    "staircase": False},
    "Exponential": {"init_value": 0.5, "transition_steps": 3, "decay_rate": 0.5,
                    "transition_begin": 2, "staircase": False, "end_value": None},
    "PiecewiseConstant": {"init_value": 0.5, "boundaries_and_scales": {10: 0.5, 100: 2.0}},
    "Polynomial": {"init_value": 0.5, "end_value": 0.01, "power": 2.0, "transition_steps": 50,
                   "transition_begin": 5},
    "CosineDecay": {"init_value": 0.5, "decay_steps": 50, "alpha": 0.1, "exponent": 1.0},
    "WarmupCosineDecay": {"init_value": 0.0, "peak_value": 0.5, "warmup_steps": 5,
                          "decay_steps": 50, "end_value": 0.01, "exponent": 1.0},
    "SGDR": {"cosine_kwargs": [{"init_value": 0.0, "peak_value": 0.5, "warmup_steps": 2,
                                "decay_steps": 10}]},
    "JoinSchedules": {"schedules": [S.Constant(0.5), S.CosineDecay(0.5, 10)],
                      "boundaries": [20]},
}


def numeric_params(cls):
    return [k for k, v in DEFAULTS[cls.__name__].items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@given(step=STEPS, data=st.data())
def test_every_class_any_huge_step_or_parameter(cls, step, data):
    args = dict(DEFAULTS[cls.__name__])
    names = numeric_params(cls)
    name = None
    if names and data.draw(st.booleans()):
        name = data.draw(st.sampled_from(names))
        args[name] = data.draw(BIG | st.sampled_from([HUGE, 10**500, 2**1024]))
    if cls.__name__ == "WarmupCosineDecay" and name == "warmup_steps":
        args["decay_steps"] = args["warmup_steps"] + 1 + data.draw(BIG)
    if cls.__name__ == "PiecewiseConstant" and data.draw(st.booleans()):
        args["boundaries_and_scales"] = {data.draw(BIG): 0.5, data.draw(BIG): 0.25}
    if cls.__name__ == "JoinSchedules" and data.draw(st.booleans()):
        args["boundaries"] = [data.draw(BIG)]
    if cls.__name__ == "SGDR" and data.draw(st.booleans()):
        w = data.draw(BIG)
        args["cosine_kwargs"] = [{"init_value": 0.0, "peak_value": 0.5, "warmup_steps": w,
                                  "decay_steps": w + 1 + data.draw(BIG)}] * 2
    sched = construct(cls, args, name)
    if sched is None:
        return
    value_ok(sched, step)
    value_ok(sched, 0)


MONOTONE = [S.StandardDecay(1.0, 0.5), S.CorrectionDecay(1.0, 0.5, 0.5),
            S.InverseTime(1.0, 0.5, 7), S.Exponential(1.0, 7, 0.5),
            S.Polynomial(1.0, 0.0, 1.5, 1000), S.CosineDecay(1.0, 1000, 0.25),
            S.Exponential(1.0, 7, 0.5, staircase=True)]


@pytest.mark.parametrize("sched", MONOTONE, ids=repr)
@given(a=STEPS, b=STEPS)
def test_decays_never_increase_up_to_huge_steps(sched, a, b):
    lo, hi = min(a, b), max(a, b)
    assert value_ok(sched, hi) <= value_ok(sched, lo)
