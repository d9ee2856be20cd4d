"""Parameter checkers of the schedules: TypeError for a wrong type, ValueError
for a wrong value, each naming the schedule and the parameter.

# merge-note: the messages here ("must be a finite number >= 0, got ...") are
# asserted verbatim by tests/bad_inputs_cases.py; _validation.check_real words
# them differently. Fold these into _validation once one wording is chosen.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

PREFIX = "fastopt.schedules."


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
    number = float(value)
    if (
        not math.isfinite(number)
        or number < low
        or (low_open and number == low)
        or (high is not None and number >= high)
    ):
        raise ValueError(
            f"{PREFIX}{owner}: {name} must be a finite number {expected}, got {value!r}"
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
        raise ValueError(f"{PREFIX}{owner}: {name} must be an integer >= {low}, got {number}")
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
