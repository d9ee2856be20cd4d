"""Angel's four StepSizeScheduler decays in closed form, and its configuration.

``ConstantLearningRate``, ``StandardDecay``, ``CorrectionDecay`` and
``WarmRestarts``; :func:`angel` builds one from Angel's ``ml.opt.decay.*``
keys, :func:`angel_on_batch`, :func:`angel_step` and :func:`angel_rate` say
when Angel steps it. See :mod:`fastopt.schedules` for the formulas.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from ._checks import PREFIX, as_float, flag, integer, mapping, real
from .base import Schedule


class ConstantLearningRate(Schedule):
    """Angel's ``ConstantLearningRate``: the same rate at every step.

    Parameters
    ----------
    eta : float
        The learning rate, ``>= 0``.
    """

    _ARGS = ("eta",)

    def __init__(self, eta: float) -> None:
        self._set(eta=real("ConstantLearningRate", "eta", eta))

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

    _ARGS = ("eta", "alpha", "interval")

    def __init__(self, eta: float, alpha: float = 0.001, interval: int = 100) -> None:
        self._set(
            eta=real("StandardDecay", "eta", eta),
            alpha=real("StandardDecay", "alpha", alpha),
            interval=integer("StandardDecay", "interval", interval, 1),
        )

    def _value(self, step: int) -> float:
        if self.alpha == 0.0:   # (the formula gives eta; 0 * inf would give NaN)
            return self.eta
        return self.eta / math.sqrt(1.0 + self.alpha * as_float(step + 1))

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

    _ARGS = ("eta", "alpha", "beta", "interval")

    def __init__(
        self, eta: float, alpha: float = 0.001, beta: float = 0.9, interval: int = 100
    ) -> None:
        self._set(
            eta=real("CorrectionDecay", "eta", eta),
            alpha=real("CorrectionDecay", "alpha", alpha),
            beta=real("CorrectionDecay", "beta", beta, high=1.0),
            interval=integer("CorrectionDecay", "interval", interval, 1),
        )

    def _value(self, step: int) -> float:
        c = as_float(step + 1)  # inf beyond 1.8e308: the limit, eta * 0 or eta * (1 - beta)
        root = 1.0 if self.alpha == 0.0 else math.sqrt(1.0 + self.alpha * c)
        return self.eta / root * (1.0 - self.beta) / (1.0 - self.beta**c)

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
    the peak and every cycle ends at ``eta_min``: Angel's ``next()``
    advances its counter before computing, so step 0 is already position
    ``c = 1`` (``WarmRestarts(1.0, interval=4)(0)`` is ``0.1 + 0.45 * (1 +
    cos(pi / 4))``, about 0.868, not 1.0). The
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

    _ARGS = ("eta_max", "eta_min", "alpha", "interval")

    def __init__(
        self,
        eta_max: float,
        eta_min: float | None = None,
        alpha: float = 0.001,
        interval: int = 100,
    ) -> None:
        eta_max = real("WarmRestarts", "eta_max", eta_max)
        self._set(
            eta_max=eta_max,
            eta_min=eta_max / 10 if eta_min is None else real("WarmRestarts", "eta_min", eta_min),
            alpha=real("WarmRestarts", "alpha", alpha),
            interval=integer("WarmRestarts", "interval", interval, 1),
        )

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


_EXPECTED = {"bool": "true or false", "int": "an integer", "float": "a number"}


def _parse_text(text: str, kind: str) -> Any:
    """A value as Angel writes it in its configuration; None if it does not parse."""
    text = text.strip()
    if kind == "bool":
        return {"true": True, "false": False}.get(text.lower())
    try:
        return int(text) if kind == "int" else float(text)
    except ValueError:
        return None


def _conf_value(conf: Mapping[str, Any], key: str, default: Any, kind: str) -> Any:
    """Read ``key`` as ``kind`` ('float', 'int' or 'bool'); strings as Angel
    writes them. ValueError for a string that does not parse, TypeError for a
    value of another type (a bool where a number is expected, a number where
    a bool is expected, None, ...)."""
    if key not in conf:
        return default
    raw = conf[key]
    message = f"{PREFIX}angel: conf[{key!r}] must be {_EXPECTED[kind]}, got {raw!r}"
    if isinstance(raw, str):
        value = _parse_text(raw, kind)
        if value is None:
            raise ValueError(message)
        return value
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
    elif not isinstance(raw, bool):
        if kind == "int" and isinstance(raw, numbers.Integral):
            return int(raw)
        if kind == "float" and isinstance(raw, numbers.Real):
            return float(raw)
    raise TypeError(message)


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
    TypeError
        For a ``conf`` that is not a mapping, a class name that is not a
        string, or a value of the wrong type (e.g. a bool for a number).
    ValueError
        For an unknown class name (the message lists the known ones), a string
        value that does not parse, or a parameter out of range.
    """
    mapping("angel", conf)
    name = conf.get("ml.opt.decay.class.name", "StandardDecay")
    cls = _ANGEL_CLASSES.get(name.strip().lower()) if isinstance(name, str) else None
    if cls is None:
        raise (ValueError if isinstance(name, str) else TypeError)(
            f"{PREFIX}angel: unknown ml.opt.decay.class.name {name!r}; "
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
    mapping("angel_on_batch", conf)
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
    epoch = integer("angel_step", "epoch", epoch, 0)
    batches_per_epoch = integer("angel_step", "batches_per_epoch", batches_per_epoch, 1)
    batch = integer("angel_step", "batch", batch, 0)
    if batch >= batches_per_epoch:
        raise ValueError(
            f"{PREFIX}angel_step: batch must be < batches_per_epoch "
            f"({batches_per_epoch}), got {batch}"
        )
    if flag("angel_step", "on_batch", on_batch):
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
        raise TypeError(
            f"{PREFIX}angel_rate: schedule must be a fastopt.schedules.Schedule, "
            f"got {type(schedule).__name__}"
        )
    return schedule(angel_step(epoch, batch, batches_per_epoch, on_batch))
