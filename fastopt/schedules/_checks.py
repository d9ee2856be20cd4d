"""Parameter checkers of the schedules: TypeError for a wrong type, ValueError
for a wrong value, each naming the schedule and the parameter. Their wording
("must be a finite number >= 0, got ...") is the schedules' own, asserted by
tests/bad_inputs_cases.py; fastopt._validation.check_real words its messages
differently.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

PREFIX = "fastopt.schedules."

# Python ints have no bound, floats stop near 1.8e308: every formula turns a
# huge integer (a step, a step count) into a float through as_float/ratio,
# whose overflow is +inf (the limit the formulas then reach), never an
# OverflowError.
_SHOW_DIGITS = 30


def show(value: Any) -> str:
    """repr(value), except a huge integer is described by its digit count
    (its repr could run to thousands of digits, or fail beyond 4300)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        v = abs(int(value))
        if v >= 10**_SHOW_DIGITS:
            d = int(math.log10(v)) + 1
            d += (v >= 10**d) - (v < 10 ** (d - 1))
            return f"an integer of {d} digits"
    return repr(value)


def as_float(n: int) -> float:
    """float(n), or +-inf where n is beyond the float range."""
    try:
        return float(n)
    except OverflowError:
        return math.inf if n > 0 else -math.inf


def ratio(a: int, b: int) -> float:
    """a / b for ints b > 0, correctly rounded (Python's int true division),
    +-inf where the quotient is beyond the float range."""
    try:
        return a / b
    except OverflowError:
        return math.inf if a > 0 else -math.inf


def real(owner: str, name: str, value: Any, *, low: float = 0.0, low_open: bool = False,
         high: float | None = None) -> float:
    """Return ``value`` as a finite float in ``[low, high)`` (``(low, high)`` if
    ``low_open``); TypeError for a non-real, ValueError out of range."""
    if high is not None:
        expected = f"in {'(' if low_open else '['}{low:g}, {high:g})"
    else:
        expected = f"{'>' if low_open else '>='} {low:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{PREFIX}{owner}: {name} must be a finite number {expected}, "
            f"got {value!r} ({type(value).__name__})"
        )
    try:
        number = float(value)
    except OverflowError:  # an int (or Fraction ...) beyond the float range
        number = math.inf
    if (
        not math.isfinite(number)
        or number < low
        or (low_open and number == low)
        or (high is not None and number >= high)
    ):
        raise ValueError(
            f"{PREFIX}{owner}: {name} must be a finite number {expected}, got {show(value)}"
        )
    return number


def integer(owner: str, name: str, value: Any, low: int = 0) -> int:
    """Return ``value`` as an int ``>= low``: TypeError for bool, floats and
    other non-integers, ValueError below ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{PREFIX}{owner}: {name} must be an integer >= {low}, "
            f"got {value!r} ({type(value).__name__})"
        )
    number = int(value)
    if number < low:
        raise ValueError(
            f"{PREFIX}{owner}: {name} must be an integer >= {low}, got {show(number)}"
        )
    return number


def flag(owner: str, name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool, else raise TypeError."""
    if not isinstance(value, bool):
        raise TypeError(
            f"{PREFIX}{owner}: {name} must be True or False, "
            f"got {value!r} ({type(value).__name__})"
        )
    return value


def mapping(owner: str, conf: Any) -> None:
    """Raise TypeError unless ``conf`` is a mapping (Angel configuration)."""
    if not isinstance(conf, Mapping):
        raise TypeError(
            f"{PREFIX}{owner}: conf must be a mapping of Angel configuration keys, "
            f"got {type(conf).__name__}"
        )
