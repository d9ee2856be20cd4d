"""Learning-rate schedules: pure functions of the step number.

A schedule is an immutable object called as ``schedule(step) -> float`` for
``step = 0, 1, 2, ...``. It keeps no state, so the same step always gives the
same value, in any order; schedules have a readable ``repr`` (which evaluates
back to an equal schedule) and compare and hash by their parameters. A step
must be an integer ``>= 0`` (Python or NumPy integer, not ``bool``); anything
else raises ``ValueError`` naming ``step``, as every bad parameter raises
``ValueError`` naming that parameter.

Angel's StepSizeScheduler family
--------------------------------
Angel's schedulers are stateful: each ``next()`` call advances a counter and
returns the rate. Here ``schedule(k)`` is the value of the ``(k + 1)``-th
``next()`` call, computed in closed form.

==========================  ===============================================
``ConstantLearningRate``    ``eta``
``StandardDecay``           ``eta / sqrt(1 + alpha * (k + 1))``
``CorrectionDecay``         ``eta / sqrt(1 + alpha * c) * (1 - beta) / (1 - beta**c)``
                            with ``c = k + 1`` (Angel starts at ``c = 0``, an
                            infinite first value; see the class)
``WarmRestarts``            cosine cycles of ``I, 2I, 4I, ...`` steps from the
                            peak down to ``eta_min``, the peak divided by
                            ``sqrt(1 + r * alpha)`` at the ``r``-th restart
==========================  ===============================================

:func:`angel` builds one from Angel's configuration keys (``ml.opt.decay.*``),
:func:`angel_on_batch` reads ``ml.opt.decay.on.batch``, and :func:`angel_step` /
:func:`angel_rate` give the step and rate of ``(epoch, batch)`` when the decay is
stepped once per mini-batch or once per epoch.

The standard family (optax semantics and argument names)
--------------------------------------------------------
==================================  ==========================================
``constant(value)``                 ``value``
``inverse_time(init_value, ...)``   ``init_value / (1 + decay_rate * t / T)``
                                    (ONNX Adagrad's ``R / (1 + T * d)``)
``exponential(init_value, ...)``    ``init_value * decay_rate ** (t / T)``
                                    (optax ``exponential_decay``)
``piecewise_constant(...)``         scaled at each boundary
``polynomial(...)``                 ``(init - end) * (1 - t / T) ** power + end``
``cosine_decay(...)``               ``init * ((1 - a) * (0.5 * (1 + cos(pi * t / T))) ** p + a)``
``warmup_cosine_decay(...)``        linear warmup, then cosine decay
``sgdr(cosine_kwargs)``             several warmup-cosine cycles joined
``join_schedules(...)``             schedule ``i`` sees ``step - boundaries[i - 1]``
==================================  ==========================================

The lower-case names are aliases of the classes (``exponential is
Exponential``). Degenerate settings that optax silently turns into a constant
schedule (``transition_steps <= 0``, ``decay_rate == 0``, negative
``transition_begin``) raise ``ValueError`` here instead.

Command line
------------
:func:`main` implements ``python -m fastopt schedule NAME --param k=v ...
--steps N [--plot out.png]``.
"""

from __future__ import annotations

import argparse
import ast
import bisect
import inspect
import math
import numbers
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "Schedule",
    "ConstantLearningRate",
    "StandardDecay",
    "CorrectionDecay",
    "WarmRestarts",
    "angel",
    "angel_on_batch",
    "angel_step",
    "angel_rate",
    "Constant",
    "InverseTime",
    "Exponential",
    "PiecewiseConstant",
    "Polynomial",
    "CosineDecay",
    "WarmupCosineDecay",
    "SGDR",
    "JoinSchedules",
    "constant",
    "inverse_time",
    "exponential",
    "piecewise_constant",
    "polynomial",
    "cosine_decay",
    "warmup_cosine_decay",
    "sgdr",
    "join_schedules",
    "main",
]

_PREFIX = "fastopt.schedules."


# --------------------------------------------------------------------------- validation
def _real(
    owner: str,
    name: str,
    value: Any,
    *,
    low: float = 0.0,
    low_open: bool = False,
    high: float | None = None,
) -> float:
    """Return ``value`` as a finite float in ``[low, high)`` (``(low, high)`` if
    ``low_open``), or raise ValueError naming ``name``."""
    if high is not None:
        expected = f"in {'(' if low_open else '['}{low:g}, {high:g})"
    else:
        expected = f"{'>' if low_open else '>='} {low:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"{_PREFIX}{owner}: {name} must be a finite number {expected}, "
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
            f"{_PREFIX}{owner}: {name} must be a finite number {expected}, got {value!r}"
        )
    return number


def _integer(owner: str, name: str, value: Any, low: int = 0) -> int:
    """Return ``value`` as an int ``>= low`` (bool and floats are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"{_PREFIX}{owner}: {name} must be an integer >= {low}, "
            f"got {value!r} ({type(value).__name__})"
        )
    number = int(value)
    if number < low:
        raise ValueError(f"{_PREFIX}{owner}: {name} must be an integer >= {low}, got {number}")
    return number


def _flag(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(
            f"{_PREFIX}{owner}: {name} must be True or False, "
            f"got {value!r} ({type(value).__name__})"
        )
    return value


def _freeze(value: Any) -> Any:
    """A hashable equivalent of a constructor argument (dicts, lists -> tuples)."""
    if isinstance(value, Mapping):
        return tuple(sorted((key, _freeze(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    return value


# --------------------------------------------------------------------------- base class
class Schedule:
    """Base class of all schedules: immutable, pure ``schedule(step) -> float``.

    Subclasses implement ``_value(step)`` (``step`` already validated as an int
    ``>= 0``) and ``_args()`` (the constructor arguments, in order, which drive
    ``repr``, ``==`` and ``hash``).
    """

    def __call__(self, step: int) -> float:
        """Return the learning rate at ``step``.

        Parameters
        ----------
        step : int
            Step number, ``0`` for the first update. Python or NumPy integer.

        Returns
        -------
        float
            The learning rate.

        Raises
        ------
        ValueError
            If ``step`` is not an integer ``>= 0`` (``bool`` and ``2.0`` included).
        """
        return self._value(self._step(step))

    def _step(self, step: Any) -> int:
        return _integer(type(self).__name__, "step", step, 0)

    def _value(self, step: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _args(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _set(self, **attributes: Any) -> None:
        for name, value in attributes.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in self._args().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedule):
            return NotImplemented
        return type(self) is type(other) and _freeze(self._args()) == _freeze(other._args())

    def __hash__(self) -> int:
        return hash((type(self), _freeze(self._args())))


# --------------------------------------------------------------------------- Angel
class ConstantLearningRate(Schedule):
    """Angel's ``ConstantLearningRate``: the same rate at every step.

    Parameters
    ----------
    eta : float
        The learning rate, ``>= 0``.
    """

    def __init__(self, eta: float) -> None:
        self._set(eta=_real("ConstantLearningRate", "eta", eta))

    def _args(self) -> dict[str, Any]:
        return {"eta": self.eta}

    def _value(self, step: int) -> float:
        return self.eta

    def is_interval_boundary(self, step: int) -> bool:
        """Always False (Angel's default ``isIntervalBoundary``)."""
        self._step(step)
        return False


class StandardDecay(Schedule):
    """Angel's ``StandardDecay``: ``eta / sqrt(1 + alpha * (step + 1))``.

    Angel increments its counter before computing, so the first value
    (``step = 0``) is already decayed: ``eta / sqrt(1 + alpha)``.

    Parameters
    ----------
    eta : float
        Base learning rate, ``>= 0``.
    alpha : float, default 0.001
        Decay coefficient, ``>= 0``. (Angel's factory falls back to 0.5 when
        neither ``ml.learn.decay`` nor ``ml.opt.decay.alpha`` is set; see
        :func:`angel`.)
    interval : int, default 100
        Angel's ``ml.opt.decay.intervals``; only used by
        :meth:`is_interval_boundary`.
    """

    def __init__(self, eta: float, alpha: float = 0.001, interval: int = 100) -> None:
        self._set(
            eta=_real("StandardDecay", "eta", eta),
            alpha=_real("StandardDecay", "alpha", alpha),
            interval=_integer("StandardDecay", "interval", interval, 1),
        )

    def _args(self) -> dict[str, Any]:
        return {"eta": self.eta, "alpha": self.alpha, "interval": self.interval}

    def _value(self, step: int) -> float:
        return self.eta / math.sqrt(1.0 + self.alpha * (step + 1))

    def is_interval_boundary(self, step: int) -> bool:
        """True when ``step + 1`` (the number of ``next()`` calls so far, this
        one included) is a multiple of ``interval``, as Angel's
        ``current % interval == 0`` after the call."""
        return (self._step(step) + 1) % self.interval == 0


class CorrectionDecay(Schedule):
    """Angel's ``CorrectionDecay``, with the count taken from 1.

    ``schedule(step) = eta / sqrt(1 + alpha * c) * (1 - beta) / (1 - beta**c)``
    with ``c = step + 1``. The factor ``(1 - beta) / (1 - beta**c)`` is the
    inverse of ``1 + beta + ... + beta**(c - 1)``, the sum of the coefficients
    that a ``v = beta * v + g`` momentum buffer has accumulated after ``c``
    gradients, so ``beta`` should equal that optimizer's momentum.

    Difference from Angel: Angel evaluates the formula with its counter at 0
    on the first ``next()`` call and increments afterwards, so its first value
    is ``(1 - beta) / 0 = +inf`` and its ``(k + 2)``-th call equals
    ``schedule(k)`` here. Counting from 1 is Angel's evident intent; the first
    value here is ``eta / sqrt(1 + alpha)``.

    Parameters
    ----------
    eta : float
        Base learning rate, ``>= 0``.
    alpha : float, default 0.001
        Decay coefficient, ``>= 0``.
    beta : float, default 0.9
        Momentum being corrected for, in ``[0, 1)``.
    interval : int, default 100
        Angel's ``ml.opt.decay.intervals``; only used by
        :meth:`is_interval_boundary`.
    """

    def __init__(
        self, eta: float, alpha: float = 0.001, beta: float = 0.9, interval: int = 100
    ) -> None:
        self._set(
            eta=_real("CorrectionDecay", "eta", eta),
            alpha=_real("CorrectionDecay", "alpha", alpha),
            beta=_real("CorrectionDecay", "beta", beta, high=1.0),
            interval=_integer("CorrectionDecay", "interval", interval, 1),
        )

    def _args(self) -> dict[str, Any]:
        return {"eta": self.eta, "alpha": self.alpha, "beta": self.beta, "interval": self.interval}

    def _value(self, step: int) -> float:
        c = step + 1
        return self.eta / math.sqrt(1.0 + self.alpha * c) * (1.0 - self.beta) / (1.0 - self.beta**c)

    def is_interval_boundary(self, step: int) -> bool:
        """True when ``step + 1`` (the number of values produced so far, this
        one included) is a multiple of ``interval``; with Angel's own counter
        (from 0) that is its ``current % interval == 0`` after the call."""
        return (self._step(step) + 1) % self.interval == 0


class WarmRestarts(Schedule):
    """Angel's ``WarmRestarts``: cosine annealing with doubling cycles (SGDR).

    Cycle ``r = 0, 1, 2, ...`` lasts ``interval * 2**r`` steps and starts at
    step ``interval * (2**r - 1)``. At position ``c = 1 .. L`` of a cycle of
    length ``L``::

        value = eta_min + 0.5 * (peak_r - eta_min) * (1 + cos(pi * c / L))
        peak_r = eta_max / prod(sqrt(1 + j * alpha) for j in 1..r)

    exactly as Angel's iterative code divides its current ``eta_max`` by
    ``sqrt(1 + restarts * alpha)`` at each restart. The value never equals
    the peak (``c`` starts at 1) and every cycle ends at ``eta_min``. The
    value is computed in closed form (a loop over the ``O(log step)`` restarts
    only), so ``schedule(10**9)`` is immediate; cycle lengths are exact
    integers (Angel's ``Int`` interval would overflow after about 2**31 steps).

    Parameters
    ----------
    eta_max : float
        Initial peak learning rate, ``>= 0``.
    eta_min : float or None, default None
        Floor reached at the end of each cycle, ``>= 0``; None means
        ``eta_max / 10`` (Angel's factory).
    alpha : float, default 0.001
        Decay of the peak at each restart, ``>= 0`` (0: no decay).
    interval : int, default 100
        Length ``I`` of the first cycle, ``>= 1``.
    """

    def __init__(
        self,
        eta_max: float,
        eta_min: float | None = None,
        alpha: float = 0.001,
        interval: int = 100,
    ) -> None:
        eta_max = _real("WarmRestarts", "eta_max", eta_max)
        self._set(
            eta_max=eta_max,
            eta_min=eta_max / 10 if eta_min is None else _real("WarmRestarts", "eta_min", eta_min),
            alpha=_real("WarmRestarts", "alpha", alpha),
            interval=_integer("WarmRestarts", "interval", interval, 1),
        )

    def _args(self) -> dict[str, Any]:
        return {
            "eta_max": self.eta_max,
            "eta_min": self.eta_min,
            "alpha": self.alpha,
            "interval": self.interval,
        }

    def _cycle(self, step: int) -> tuple[int, int, int]:
        """Return ``(restarts, position, length)`` of ``step``, position 1-based."""
        restarts = (step // self.interval + 1).bit_length() - 1
        start = self.interval * ((1 << restarts) - 1)
        return restarts, step - start + 1, self.interval << restarts

    def _value(self, step: int) -> float:
        restarts, position, length = self._cycle(step)
        peak = self.eta_max
        for j in range(1, restarts + 1):
            peak = peak / math.sqrt(1.0 + j * self.alpha)
        return self.eta_min + 0.5 * (peak - self.eta_min) * (
            1.0 + math.cos(position / length * math.pi)
        )

    def is_interval_boundary(self, step: int) -> bool:
        """True when ``step`` ends a cycle: Angel's counter reaches the
        interval on this call and is reset to 0 (its ``current == 0`` after the
        call). These are the steps ``interval * (2**r - 1) - 1``, ``r >= 1``,
        where the value is ``eta_min``."""
        _, position, length = self._cycle(self._step(step))
        return position == length


# --------------------------------------------------------------------------- Angel config
_ANGEL_CLASSES: dict[str, type[Schedule]] = {
    cls.__name__.lower(): cls
    for cls in (StandardDecay, WarmRestarts, CorrectionDecay, ConstantLearningRate)
}
_ANGEL_NAMES = ", ".join(cls.__name__ for cls in _ANGEL_CLASSES.values())


def _conf_value(conf: Mapping[str, Any], key: str, default: Any, kind: str) -> Any:
    """Read ``key`` as ``kind`` ('float', 'int' or 'bool'); strings as Angel writes them."""
    if key not in conf:
        return default
    raw = conf[key]
    text = raw.strip() if isinstance(raw, str) else None
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            if text is not None and text.lower() in ("true", "false"):
                return text.lower() == "true"
        elif kind == "int":
            if text is not None:
                return int(text)
            if isinstance(raw, numbers.Integral) and not isinstance(raw, bool):
                return int(raw)
        else:
            if text is not None:
                return float(text)
            if isinstance(raw, numbers.Real) and not isinstance(raw, bool):
                return float(raw)
    except ValueError:
        pass
    expected = {"bool": "true or false", "int": "an integer", "float": "a number"}[kind]
    raise ValueError(f"{_PREFIX}angel: conf[{key!r}] must be {expected}, got {raw!r}")


def angel(conf: Mapping[str, Any], eta: float) -> Schedule:
    """Build the schedule Angel's ``StepSizeScheduler`` factory builds from ``conf``.

    Parameters
    ----------
    conf : Mapping[str, Any]
        Angel configuration; values may be strings (as in Angel) or numbers.
        Keys read, with Angel's defaults:

        ``ml.opt.decay.class.name``
            ``"StandardDecay"``; one of ``StandardDecay``, ``WarmRestarts``,
            ``CorrectionDecay``, ``ConstantLearningRate``, case-insensitive
            (surrounding blanks ignored).
        ``ml.opt.decay.alpha``
            0.001. For ``StandardDecay`` Angel reads the deprecated
            ``ml.learn.decay`` first, then this key, and falls back to **0.5**
            when neither is set; that is reproduced.
        ``ml.opt.decay.beta``
            0.001 (Angel's ``DEFAULT_ML_OPT_DECAY_BETA``; note that
            ``CorrectionDecay``'s own default is 0.9).
        ``ml.opt.decay.intervals``
            100 (``WarmRestarts``' first cycle; the boundary period of the others).

        ``ml.opt.decay.on.batch`` does not change the schedule; read it with
        :func:`angel_on_batch`. Other keys are ignored.
    eta : float
        Base learning rate (Angel's ``ml.learn.rate``); ``WarmRestarts`` gets
        ``eta_max = eta`` and ``eta_min = eta / 10``.

    Returns
    -------
    Schedule
        A ``StandardDecay``, ``WarmRestarts``, ``CorrectionDecay`` or
        ``ConstantLearningRate``.

    Raises
    ------
    ValueError
        For an unknown class name (the message lists the known ones), a value
        that does not parse, or a parameter out of range.
    """
    name = conf.get("ml.opt.decay.class.name", "StandardDecay")
    cls = _ANGEL_CLASSES.get(name.strip().lower()) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(
            f"{_PREFIX}angel: unknown ml.opt.decay.class.name {name!r}; "
            f"known (case-insensitive): {_ANGEL_NAMES}"
        )
    if cls is ConstantLearningRate:
        return ConstantLearningRate(eta)
    interval = _conf_value(conf, "ml.opt.decay.intervals", 100, "int")
    if cls is StandardDecay:
        alpha = _conf_value(conf, "ml.opt.decay.alpha", 0.5, "float")
        alpha = _conf_value(conf, "ml.learn.decay", alpha, "float")
        return StandardDecay(eta, alpha, interval)
    alpha = _conf_value(conf, "ml.opt.decay.alpha", 0.001, "float")
    if cls is WarmRestarts:
        return WarmRestarts(eta, None, alpha, interval)
    beta = _conf_value(conf, "ml.opt.decay.beta", 0.001, "float")
    return CorrectionDecay(eta, alpha, beta, interval)


def angel_on_batch(conf: Mapping[str, Any]) -> bool:
    """Return Angel's ``ml.opt.decay.on.batch`` (default False: once per epoch).

    Parameters
    ----------
    conf : Mapping[str, Any]
        Angel configuration; the value may be a bool or ``"true"``/``"false"``
        in any case.

    Returns
    -------
    bool
        True if the decay is stepped once per mini-batch.
    """
    return _conf_value(conf, "ml.opt.decay.on.batch", False, "bool")


def angel_step(epoch: int, batch: int, batches_per_epoch: int, on_batch: bool = False) -> int:
    """Return the schedule step Angel uses for mini-batch ``batch`` of ``epoch``.

    Angel's ``GraphLearner`` calls ``next()`` once before each mini-batch's
    update when ``on_batch`` is true, and once at the start of each epoch
    otherwise. Counting epochs and batches from 0, the rate of ``(epoch,
    batch)`` is therefore ``schedule(angel_step(...))`` with

    - per batch (``on_batch=True``): ``epoch * batches_per_epoch + batch``
    - per epoch (``on_batch=False``): ``epoch`` (every batch of the epoch)

    Parameters
    ----------
    epoch : int
        Epoch number, ``>= 0``, counted from the start of training.
    batch : int
        Mini-batch number within the epoch, ``0 <= batch < batches_per_epoch``.
    batches_per_epoch : int
        Mini-batches per epoch (Angel's ``ml.num.update.per.epoch``), ``>= 1``.
    on_batch : bool, default False
        Angel's ``ml.opt.decay.on.batch`` (see :func:`angel_on_batch`).

    Returns
    -------
    int
        The step to pass to the schedule.
    """
    epoch = _integer("angel_step", "epoch", epoch, 0)
    batches_per_epoch = _integer("angel_step", "batches_per_epoch", batches_per_epoch, 1)
    batch = _integer("angel_step", "batch", batch, 0)
    if batch >= batches_per_epoch:
        raise ValueError(
            f"{_PREFIX}angel_step: batch must be < batches_per_epoch "
            f"({batches_per_epoch}), got {batch}"
        )
    if _flag("angel_step", "on_batch", on_batch):
        return epoch * batches_per_epoch + batch
    return epoch


def angel_rate(
    schedule: Schedule, epoch: int, batch: int, batches_per_epoch: int, on_batch: bool = False
) -> float:
    """Return the learning rate Angel applies to mini-batch ``batch`` of ``epoch``.

    Equal to ``schedule(angel_step(epoch, batch, batches_per_epoch, on_batch))``;
    see :func:`angel_step` for the two modes. Works with any schedule.

    Parameters
    ----------
    schedule : Schedule
        The schedule, e.g. from :func:`angel`.
    epoch, batch, batches_per_epoch, on_batch
        As in :func:`angel_step`.

    Returns
    -------
    float
        The learning rate.
    """
    if not isinstance(schedule, Schedule):
        raise ValueError(
            f"{_PREFIX}angel_rate: schedule must be a fastopt.schedules.Schedule, "
            f"got {type(schedule).__name__}"
        )
    return schedule(angel_step(epoch, batch, batches_per_epoch, on_batch))


# --------------------------------------------------------------------------- standard family
class Constant(Schedule):
    """A constant schedule (optax ``constant_schedule``).

    Parameters
    ----------
    value : float
        The learning rate, ``>= 0``.
    """

    def __init__(self, value: float) -> None:
        self._set(value=_real("Constant", "value", value))

    def _args(self) -> dict[str, Any]:
        return {"value": self.value}

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

    def __init__(
        self,
        init_value: float,
        decay_rate: float,
        transition_steps: int = 1,
        staircase: bool = False,
    ) -> None:
        self._set(
            init_value=_real("InverseTime", "init_value", init_value),
            decay_rate=_real("InverseTime", "decay_rate", decay_rate),
            transition_steps=_integer("InverseTime", "transition_steps", transition_steps, 1),
            staircase=_flag("InverseTime", "staircase", staircase),
        )

    def _args(self) -> dict[str, Any]:
        return {
            "init_value": self.init_value,
            "decay_rate": self.decay_rate,
            "transition_steps": self.transition_steps,
            "staircase": self.staircase,
        }

    def _value(self, step: int) -> float:
        if self.staircase:
            p: float = step // self.transition_steps
        else:
            p = step / self.transition_steps
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
            init_value=_real("Exponential", "init_value", init_value),
            transition_steps=_integer("Exponential", "transition_steps", transition_steps, 1),
            decay_rate=_real("Exponential", "decay_rate", decay_rate, low_open=True),
            transition_begin=_integer("Exponential", "transition_begin", transition_begin, 0),
            staircase=_flag("Exponential", "staircase", staircase),
            end_value=None if end_value is None else _real("Exponential", "end_value", end_value),
        )

    def _args(self) -> dict[str, Any]:
        return {
            "init_value": self.init_value,
            "transition_steps": self.transition_steps,
            "decay_rate": self.decay_rate,
            "transition_begin": self.transition_begin,
            "staircase": self.staircase,
            "end_value": self.end_value,
        }

    def _value(self, step: int) -> float:
        count = step - self.transition_begin
        if count <= 0 or self.init_value == 0.0:
            value = self.init_value
        else:
            steps = self.transition_steps
            p: float = count // steps if self.staircase else count / steps
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
        except (TypeError, ValueError):
            raise ValueError(
                f"{_PREFIX}{owner}: {name} must be a dict {{boundary: scale}} or "
                f"(boundary, scale) pairs, got {boundaries_and_scales!r}"
            ) from None
        checked = sorted(
            (_integer(owner, f"{name} boundary", b, 0), _real(owner, f"{name} scale", s))
            for b, s in pairs
        )
        boundaries = [b for b, _ in checked]
        if len(set(boundaries)) != len(boundaries):
            raise ValueError(f"{_PREFIX}{owner}: {name} has a repeated boundary: {boundaries}")
        self._set(
            init_value=_real(owner, "init_value", init_value),
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

    def __init__(
        self,
        init_value: float,
        end_value: float,
        power: float,
        transition_steps: int,
        transition_begin: int = 0,
    ) -> None:
        self._set(
            init_value=_real("Polynomial", "init_value", init_value),
            end_value=_real("Polynomial", "end_value", end_value),
            power=_real("Polynomial", "power", power, low_open=True),
            transition_steps=_integer("Polynomial", "transition_steps", transition_steps, 1),
            transition_begin=_integer("Polynomial", "transition_begin", transition_begin, 0),
        )

    def _args(self) -> dict[str, Any]:
        return {
            "init_value": self.init_value,
            "end_value": self.end_value,
            "power": self.power,
            "transition_steps": self.transition_steps,
            "transition_begin": self.transition_begin,
        }

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

    def __init__(
        self, init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
    ) -> None:
        self._set(
            init_value=_real("CosineDecay", "init_value", init_value),
            decay_steps=_integer("CosineDecay", "decay_steps", decay_steps, 1),
            alpha=_real("CosineDecay", "alpha", alpha),
            exponent=_real("CosineDecay", "exponent", exponent, low_open=True),
        )

    def _args(self) -> dict[str, Any]:
        return {
            "init_value": self.init_value,
            "decay_steps": self.decay_steps,
            "alpha": self.alpha,
            "exponent": self.exponent,
        }

    def _value(self, step: int) -> float:
        count = min(step, self.decay_steps)
        cosine = max(0.0, 0.5 * (1.0 + math.cos(math.pi * count / self.decay_steps)))
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
        peak_value = _real(owner, "peak_value", peak_value)
        warmup_steps = _integer(owner, "warmup_steps", warmup_steps, 0)
        decay_steps = _integer(owner, "decay_steps", decay_steps, warmup_steps + 1)
        end_value = _real(owner, "end_value", end_value)
        exponent = _real(owner, "exponent", exponent, low_open=True)
        alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
        self._set(
            init_value=_real(owner, "init_value", init_value),
            peak_value=peak_value,
            warmup_steps=warmup_steps,
            decay_steps=decay_steps,
            end_value=end_value,
            exponent=exponent,
            _cosine=CosineDecay(peak_value, decay_steps - warmup_steps, alpha, exponent),
        )

    def _args(self) -> dict[str, Any]:
        return {
            "init_value": self.init_value,
            "peak_value": self.peak_value,
            "warmup_steps": self.warmup_steps,
            "decay_steps": self.decay_steps,
            "end_value": self.end_value,
            "exponent": self.exponent,
        }

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
            raise ValueError(
                f"{_PREFIX}{owner}: schedules must be a non-empty sequence of "
                f"fastopt.schedules.Schedule, got {schedules!r}"
            )
        if isinstance(boundaries, (str, bytes)) or not isinstance(boundaries, Iterable):
            raise ValueError(
                f"{_PREFIX}{owner}: boundaries must be a sequence of integers, got {boundaries!r}"
            )
        boundaries = tuple(_integer(owner, "boundaries", b, 0) for b in boundaries)
        if len(boundaries) != len(schedules) - 1:
            raise ValueError(
                f"{_PREFIX}{owner}: boundaries must have len(schedules) - 1 = "
                f"{len(schedules) - 1} entries, got {len(boundaries)}"
            )
        if list(boundaries) != sorted(boundaries):
            raise ValueError(
                f"{_PREFIX}{owner}: boundaries must be non-decreasing, got {list(boundaries)}"
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
            raise ValueError(
                f"{_PREFIX}SGDR: cosine_kwargs must be a list of dicts, got {cosine_kwargs!r}"
            )
        for i, kwargs in enumerate(cosine_kwargs):
            if not isinstance(kwargs, Mapping):
                raise ValueError(
                    f"{_PREFIX}SGDR: cosine_kwargs[{i}] must be a dict, got {kwargs!r}"
                )
            try:
                cycle = WarmupCosineDecay(**kwargs)
            except (TypeError, ValueError) as error:
                raise ValueError(f"{_PREFIX}SGDR: cosine_kwargs[{i}]: {error}") from None
            cycles.append(cycle)
            elapsed += cycle.decay_steps
            boundaries.append(elapsed)
        if not cycles:
            raise ValueError(f"{_PREFIX}SGDR: cosine_kwargs must hold at least one cycle")
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


# --------------------------------------------------------------------------- command line
def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "").replace("-", "")


_CLI_SCHEDULES: dict[str, type[Schedule]] = {
    _normalize(cls.__name__): cls  # "InverseTime" and "inverse_time" both give "inversetime"
    for cls in (
        *_ANGEL_CLASSES.values(),
        Constant,
        InverseTime,
        Exponential,
        PiecewiseConstant,
        Polynomial,
        CosineDecay,
        WarmupCosineDecay,
        SGDR,
    )
}
_CLI_NAMES = (
    "ConstantLearningRate, StandardDecay, CorrectionDecay, WarmRestarts (any case), "
    "constant, inverse_time, exponential, piecewise_constant, polynomial, cosine_decay, "
    "warmup_cosine_decay, sgdr"
)


def _parse_value(text: str) -> Any:
    """A Python literal (``3``, ``0.5``, ``[1, 2]``, ``{100: 0.1}``), else
    true/false/none in any case, else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {"true": True, "false": False, "none": None, "null": None}.get(text.lower(), text)


def _build_from_cli(name: str, params: list[str]) -> Schedule:
    cls = _CLI_SCHEDULES.get(_normalize(name))
    if cls is None:
        raise ValueError(f"unknown schedule {name!r}; known: {_CLI_NAMES}")
    signature = inspect.signature(cls)
    kwargs: dict[str, Any] = {}
    for item in params:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--param expects k=v, got {item!r}")
        if key not in signature.parameters:
            raise ValueError(
                f"{cls.__name__} has no parameter {key!r}; "
                f"accepted: {', '.join(signature.parameters)}"
            )
        kwargs[key] = _parse_value(text.strip())
    missing = [
        p for p in signature.parameters.values() if p.default is p.empty and p.name not in kwargs
    ]
    if missing:
        raise ValueError(
            f"{cls.__name__} needs --param {' --param '.join(p.name + '=...' for p in missing)}"
        )
    return cls(**kwargs)


def main(argv: list[str] | None = None) -> int:
    """Print (and optionally plot) the first values of a schedule.

    Usage: ``python -m fastopt schedule NAME [--param k=v ...] [--steps N]
    [--plot out.png]``. NAME is an Angel class name (any case) or a standard
    family name; each ``--param`` value is read as a Python literal (``0.1``,
    ``100``, ``{100: 0.5}``, ``[{...}]``) or ``true``/``false``/``none``.
    Prints a ``#`` header with the schedule's repr, then one ``step value``
    line per step.

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the word ``schedule`` (default ``sys.argv[2:]``).

    Returns
    -------
    int
        0 on success, 2 for a usage error (unknown name, bad parameter), 1 if
        ``--plot`` is given but matplotlib is not installed.
    """
    parser = argparse.ArgumentParser(
        prog="python -m fastopt schedule",
        description="Print the first values of a learning-rate schedule.",
        epilog=f"Schedules: {_CLI_NAMES}.",
    )
    parser.add_argument("name", metavar="NAME", help="schedule name")
    parser.add_argument(
        "--param", action="append", default=[], metavar="K=V", help="a parameter k=v (repeatable)"
    )
    parser.add_argument(
        "--steps", type=int, default=10, metavar="N", help="number of steps (default 10)"
    )
    parser.add_argument(
        "--plot", metavar="OUT.PNG", help="save a plot of the curve (needs matplotlib)"
    )
    try:
        args = parser.parse_args(sys.argv[2:] if argv is None else argv)
    except SystemExit as exit_:  # argparse has printed the message
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        if args.steps < 1:
            raise ValueError(f"--steps must be >= 1, got {args.steps}")
        schedule = _build_from_cli(args.name, args.param)
    except (TypeError, ValueError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    if args.plot:
        try:
            from matplotlib.figure import Figure
        except ImportError:
            print(
                f"{parser.prog}: --plot needs matplotlib, which is not installed "
                "(pip install matplotlib)",
                file=sys.stderr,
            )
            return 1
    steps = range(args.steps)
    values = [schedule(step) for step in steps]
    print(f"# {schedule!r}")
    for step, value in zip(steps, values):
        print(f"{step} {value!r}")
    if args.plot:
        figure = Figure(figsize=(7, 4))
        axes = figure.subplots()
        axes.plot(list(steps), values)
        axes.set_xlabel("step")
        axes.set_ylabel("learning rate")
        axes.set_title(type(schedule).__name__)
        figure.savefig(args.plot)
        print(f"# plot saved to {args.plot}")
    return 0
