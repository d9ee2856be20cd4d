"""The standard family of schedules, with optax's semantics and argument names.

``Constant``, ``InverseTime``, ``Exponential``, ``PiecewiseConstant``,
``Polynomial``, ``CosineDecay``, ``WarmupCosineDecay``, ``JoinSchedules`` and
``SGDR``, each also under optax's lower-case name (``exponential is
Exponential``). See :mod:`fastopt.schedules` for the formulas.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._checks import PREFIX, as_float, flag, integer, ratio, real
from .base import Schedule

_FLOAT_SAFE = 2**1000  # ints below convert to float, and pi times them stays finite


class Constant(Schedule):
    """A constant schedule (optax ``constant_schedule``).

    Parameters
    ----------
    value : float
        The learning rate, ``>= 0``.
    """

    _ARGS = ("value",)

    def __init__(self, value: float) -> None:
        self._set(value=real("Constant", "value", value))

    def _value(self, step: int) -> float:
        return self.value


class InverseTime(Schedule):
    """Inverse-time decay: ``init_value / (1 + decay_rate * p)``, ``p = step / transition_steps``.

    With the default ``transition_steps=1`` this is ONNX Adagrad's learning
    rate ``R / (1 + T * decay_factor)``; with ``transition_steps`` and
    ``staircase`` it is Keras' ``InverseTimeDecay``.

    Parameters
    ----------
    init_value : float
        Rate at step 0, ``>= 0``.
    decay_rate : float
        ``>= 0``.
    transition_steps : int, default 1
        ``>= 1``.
    staircase : bool, default False
        If True, ``p = step // transition_steps`` (integer division).
    """

    _ARGS = ("init_value", "decay_rate", "transition_steps", "staircase")

    def __init__(
        self,
        init_value: float,
        decay_rate: float,
        transition_steps: int = 1,
        staircase: bool = False,
    ) -> None:
        self._set(
            init_value=real("InverseTime", "init_value", init_value),
            decay_rate=real("InverseTime", "decay_rate", decay_rate),
            transition_steps=integer("InverseTime", "transition_steps", transition_steps, 1),
            staircase=flag("InverseTime", "staircase", staircase),
        )

    def _value(self, step: int) -> float:
        if self.decay_rate == 0.0:  # (the formula gives init_value; 0 * inf: NaN)
            return self.init_value
        if self.staircase:
            p = as_float(step // self.transition_steps)
        else:
            p = ratio(step, self.transition_steps)
        return self.init_value / (1.0 + self.decay_rate * p)


class Exponential(Schedule):
    """Exponential decay (optax ``exponential_decay``).

    With ``t = step - transition_begin``: ``init_value`` while ``t <= 0``,
    then ``init_value * decay_rate ** (t / transition_steps)`` (``t //
    transition_steps`` if ``staircase``). ``end_value``, if given, is a lower
    bound when ``decay_rate < 1`` and an upper bound otherwise, applied at every
    step (as optax does).

    Parameters
    ----------
    init_value : float
        ``>= 0``.
    transition_steps : int
        ``>= 1`` (optax turns ``<= 0`` into a constant schedule; refused here).
    decay_rate : float
        ``> 0`` (optax turns 0 into a constant schedule; refused here).
        Above 1 the rate grows.
    transition_begin : int, default 0
        ``>= 0``; steps held at ``init_value``.
    staircase : bool, default False
        Decay in discrete jumps every ``transition_steps``.
    end_value : float or None, default None
        ``>= 0``; bound described above.
    """

    _ARGS = (
        "init_value", "transition_steps", "decay_rate", "transition_begin", "staircase",
        "end_value",
    )

    def __init__(
        self,
        init_value: float,
        transition_steps: int,
        decay_rate: float,
        transition_begin: int = 0,
        staircase: bool = False,
        end_value: float | None = None,
    ) -> None:
        self._set(
            init_value=real("Exponential", "init_value", init_value),
            transition_steps=integer("Exponential", "transition_steps", transition_steps, 1),
            decay_rate=real("Exponential", "decay_rate", decay_rate, low_open=True),
            transition_begin=integer("Exponential", "transition_begin", transition_begin, 0),
            staircase=flag("Exponential", "staircase", staircase),
            end_value=None if end_value is None else real("Exponential", "end_value", end_value),
        )

    def _value(self, step: int) -> float:
        count = step - self.transition_begin
        if count <= 0 or self.init_value == 0.0:
            value = self.init_value
        else:
            steps = self.transition_steps
            p = as_float(count // steps) if self.staircase else ratio(count, steps)
            try:
                value = self.init_value * self.decay_rate**p
            except OverflowError:  # decay_rate > 1 over very many steps
                value = math.inf
        if self.end_value is not None:
            bound = max if self.decay_rate < 1 else min
            value = bound(value, self.end_value)
        return value


class PiecewiseConstant(Schedule):
    """Piecewise constant (optax ``piecewise_constant_schedule``).

    The value at ``step`` is ``init_value`` times every ``scale`` whose
    ``boundary <= step``.

    Parameters
    ----------
    init_value : float
        ``>= 0``.
    boundaries_and_scales : Mapping[int, float] or iterable of (int, float), optional
        Boundaries (integers ``>= 0``, distinct) and their scales (``>= 0``).
    """

    def __init__(
        self,
        init_value: float,
        boundaries_and_scales: Mapping[int, float] | Iterable[tuple[int, float]] | None = None,
    ) -> None:
        owner, name = "PiecewiseConstant", "boundaries_and_scales"
        items = () if boundaries_and_scales is None else boundaries_and_scales
        if isinstance(items, Mapping):
            items = items.items()
        try:
            pairs = [(boundary, scale) for boundary, scale in items]
        except (TypeError, ValueError) as error:  # not iterable (a type), pairs of 3 (a value)
            raise type(error)(
                f"{PREFIX}{owner}: {name} must be a dict {{boundary: scale}} or "
                f"(boundary, scale) pairs, got {boundaries_and_scales!r}"
            ) from None
        checked = sorted(
            (integer(owner, f"{name} boundary", b, 0), real(owner, f"{name} scale", s))
            for b, s in pairs
        )
        boundaries = [b for b, _ in checked]
        if len(set(boundaries)) != len(boundaries):
            raise ValueError(f"{PREFIX}{owner}: {name} has a repeated boundary: {boundaries}")
        self._set(
            init_value=real(owner, "init_value", init_value),
            boundaries_and_scales=tuple(checked),
        )

    def _args(self) -> dict[str, Any]:
        return {
            "init_value": self.init_value,
            "boundaries_and_scales": dict(self.boundaries_and_scales),
        }

    def _value(self, step: int) -> float:
        value = self.init_value
        for boundary, scale in self.boundaries_and_scales:
            if step < boundary:
                break
            value *= scale
        return value


class Polynomial(Schedule):
    """Polynomial transition (optax ``polynomial_schedule``).

    With ``t = clip(step - transition_begin, 0, transition_steps)``:
    ``(init_value - end_value) * (1 - t / transition_steps) ** power + end_value``.
    ``power=1`` is optax's ``linear_schedule``.

    Parameters
    ----------
    init_value, end_value : float
        ``>= 0``.
    power : float
        ``> 0``.
    transition_steps : int
        ``>= 1`` (optax turns ``<= 0`` into a constant schedule; refused here).
    transition_begin : int, default 0
        ``>= 0``.
    """

    _ARGS = ("init_value", "end_value", "power", "transition_steps", "transition_begin")

    def __init__(
        self,
        init_value: float,
        end_value: float,
        power: float,
        transition_steps: int,
        transition_begin: int = 0,
    ) -> None:
        self._set(
            init_value=real("Polynomial", "init_value", init_value),
            end_value=real("Polynomial", "end_value", end_value),
            power=real("Polynomial", "power", power, low_open=True),
            transition_steps=integer("Polynomial", "transition_steps", transition_steps, 1),
            transition_begin=integer("Polynomial", "transition_begin", transition_begin, 0),
        )

    def _value(self, step: int) -> float:
        count = min(max(step - self.transition_begin, 0), self.transition_steps)
        fraction = 1.0 - count / self.transition_steps
        return (self.init_value - self.end_value) * fraction**self.power + self.end_value


class CosineDecay(Schedule):
    """Cosine decay (optax ``cosine_decay_schedule``).

    ``init_value * ((1 - alpha) * (0.5 * (1 + cos(pi * t / decay_steps))) ** exponent + alpha)``
    with ``t = min(step, decay_steps)``; ``alpha * init_value`` from
    ``decay_steps`` on.

    Parameters
    ----------
    init_value : float
        ``>= 0``.
    decay_steps : int
        ``>= 1``.
    alpha : float, default 0.0
        Final multiplier, ``>= 0``.
    exponent : float, default 1.0
        ``> 0``.
    """

    _ARGS = ("init_value", "decay_steps", "alpha", "exponent")

    def __init__(
        self, init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
    ) -> None:
        self._set(
            init_value=real("CosineDecay", "init_value", init_value),
            decay_steps=integer("CosineDecay", "decay_steps", decay_steps, 1),
            alpha=real("CosineDecay", "alpha", alpha),
            exponent=real("CosineDecay", "exponent", exponent, low_open=True),
        )

    def _value(self, step: int) -> float:
        count = min(step, self.decay_steps)
        if self.decay_steps < _FLOAT_SAFE:
            angle = math.pi * count / self.decay_steps
        else:  # pi * count would overflow: the same angle, from the exact ratio
            angle = math.pi * ratio(count, self.decay_steps)
        cosine = max(0.0, 0.5 * (1.0 + math.cos(angle)))
        return self.init_value * ((1.0 - self.alpha) * cosine**self.exponent + self.alpha)


class WarmupCosineDecay(Schedule):
    """Linear warmup then cosine decay (optax ``warmup_cosine_decay_schedule``).

    Steps ``0 .. warmup_steps - 1`` go linearly from ``init_value`` towards
    ``peak_value``; from ``warmup_steps`` on the value is
    ``CosineDecay(peak_value, decay_steps - warmup_steps, alpha=end_value /
    peak_value, exponent)(step - warmup_steps)`` (``alpha = 0`` if
    ``peak_value == 0``), reaching ``end_value`` at ``decay_steps``.

    Parameters
    ----------
    init_value, peak_value : float
        ``>= 0``.
    warmup_steps : int
        ``>= 0``.
    decay_steps : int
        Total length *including* the warmup, ``> warmup_steps``.
    end_value : float, default 0.0
        ``>= 0``.
    exponent : float, default 1.0
        ``> 0``.
    """

    _ARGS = ("init_value", "peak_value", "warmup_steps", "decay_steps", "end_value", "exponent")

    def __init__(
        self,
        init_value: float,
        peak_value: float,
        warmup_steps: int,
        decay_steps: int,
        end_value: float = 0.0,
        exponent: float = 1.0,
    ) -> None:
        owner = "WarmupCosineDecay"
        peak_value = real(owner, "peak_value", peak_value)
        warmup_steps = integer(owner, "warmup_steps", warmup_steps, 0)
        decay_steps = integer(owner, "decay_steps", decay_steps, warmup_steps + 1)
        end_value = real(owner, "end_value", end_value)
        exponent = real(owner, "exponent", exponent, low_open=True)
        alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
        self._set(
            init_value=real(owner, "init_value", init_value),
            peak_value=peak_value,
            warmup_steps=warmup_steps,
            decay_steps=decay_steps,
            end_value=end_value,
            exponent=exponent,
            _cosine=CosineDecay(peak_value, decay_steps - warmup_steps, alpha, exponent),
        )

    def _value(self, step: int) -> float:
        if step < self.warmup_steps:
            fraction = 1.0 - step / self.warmup_steps
            return (self.init_value - self.peak_value) * fraction + self.peak_value
        return self._cosine._value(step - self.warmup_steps)


class JoinSchedules(Schedule):
    """Run schedules one after another (optax ``join_schedules``).

    With ``i`` the number of boundaries ``<= step``, the value is
    ``schedules[i](step - boundaries[i - 1])`` (``schedules[0](step)`` when
    ``i == 0``): each later schedule restarts its count at its boundary.

    Parameters
    ----------
    schedules : sequence of Schedule
        At least one.
    boundaries : sequence of int
        ``len(schedules) - 1`` non-decreasing integers ``>= 0``.
    """

    def __init__(self, schedules: Sequence[Schedule], boundaries: Sequence[int]) -> None:
        self._set(**self._check("JoinSchedules", schedules, boundaries))

    @staticmethod
    def _check(owner: str, schedules: Any, boundaries: Any) -> dict[str, Any]:
        if isinstance(schedules, Iterable) and not isinstance(schedules, (str, bytes)):
            schedules = tuple(schedules)
        if not isinstance(schedules, tuple) or not schedules or not all(
            isinstance(s, Schedule) for s in schedules
        ):
            wrong_type = not isinstance(schedules, tuple) or bool(schedules)
            raise (TypeError if wrong_type else ValueError)(
                f"{PREFIX}{owner}: schedules must be a non-empty sequence of "
                f"fastopt.schedules.Schedule, got {schedules!r}"
            )
        if isinstance(boundaries, (str, bytes)) or not isinstance(boundaries, Iterable):
            raise TypeError(
                f"{PREFIX}{owner}: boundaries must be a sequence of integers, got {boundaries!r}"
            )
        boundaries = tuple(integer(owner, "boundaries", b, 0) for b in boundaries)
        if len(boundaries) != len(schedules) - 1:
            raise ValueError(
                f"{PREFIX}{owner}: boundaries must have len(schedules) - 1 = "
                f"{len(schedules) - 1} entries, got {len(boundaries)}"
            )
        if list(boundaries) != sorted(boundaries):
            raise ValueError(
                f"{PREFIX}{owner}: boundaries must be non-decreasing, got {list(boundaries)}"
            )
        return {"schedules": schedules, "boundaries": boundaries}

    def _args(self) -> dict[str, Any]:
        return {"schedules": list(self.schedules), "boundaries": list(self.boundaries)}

    def _value(self, step: int) -> float:
        index = bisect.bisect_right(self.boundaries, step)
        if index == 0:
            return self.schedules[0](step)
        return self.schedules[index](step - self.boundaries[index - 1])


class SGDR(JoinSchedules):
    """SGD with warm restarts (optax ``sgdr_schedule``).

    Each dict of ``cosine_kwargs`` holds the arguments of one
    :class:`WarmupCosineDecay` cycle; cycle ``i`` starts when the previous
    cycles' ``decay_steps`` have elapsed, and the last cycle holds its
    ``end_value`` after it ends. (Angel's :class:`WarmRestarts` is the
    closed-form doubling variant.)

    Parameters
    ----------
    cosine_kwargs : iterable of dict
        At least one; e.g. ``[dict(init_value=0.0, peak_value=0.1,
        warmup_steps=10, decay_steps=100)] * 3``.
    """

    def __init__(self, cosine_kwargs: Iterable[Mapping[str, Any]]) -> None:
        cycles, boundaries, elapsed = [], [], 0
        if isinstance(cosine_kwargs, (str, bytes, Mapping)) or not isinstance(
            cosine_kwargs, Iterable
        ):
            raise TypeError(
                f"{PREFIX}SGDR: cosine_kwargs must be a list of dicts, got {cosine_kwargs!r}"
            )
        for i, kwargs in enumerate(cosine_kwargs):
            if not isinstance(kwargs, Mapping):
                raise TypeError(
                    f"{PREFIX}SGDR: cosine_kwargs[{i}] must be a dict, got {kwargs!r}"
                )
            try:
                cycle = WarmupCosineDecay(**kwargs)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{PREFIX}SGDR: cosine_kwargs[{i}]: {error}") from None
            cycles.append(cycle)
            elapsed += cycle.decay_steps
            boundaries.append(elapsed)
        if not cycles:
            raise ValueError(f"{PREFIX}SGDR: cosine_kwargs must hold at least one cycle")
        self._set(schedules=tuple(cycles), boundaries=tuple(boundaries[:-1]))

    def _args(self) -> dict[str, Any]:
        return {"cosine_kwargs": [cycle._args() for cycle in self.schedules]}


constant = Constant
inverse_time = InverseTime
exponential = Exponential
piecewise_constant = PiecewiseConstant
polynomial = Polynomial
cosine_decay = CosineDecay
warmup_cosine_decay = WarmupCosineDecay
sgdr = SGDR
join_schedules = JoinSchedules
