"""The schedule protocol: an immutable object, ``schedule(step) -> float``."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._checks import integer


def _freeze(value: Any) -> Any:
    """A hashable equivalent of a constructor argument (dicts, lists -> tuples)."""
    if isinstance(value, Mapping):
        return tuple(sorted((key, _freeze(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    return value


class Schedule:
    """Base class of all schedules: immutable, pure ``schedule(step) -> float``.

    Subclasses implement ``_value(step)`` (``step`` already validated as an int
    ``>= 0``) and name their constructor arguments, in order, in ``_ARGS``
    (or override ``_args()``); those drive ``repr``, ``==`` and ``hash``.
    """

    _ARGS: tuple[str, ...] = ()

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
        TypeError
            If ``step`` is not an integer (``bool`` and ``2.0`` included).
        ValueError
            If ``step`` is negative.
        """
        return self._value(self._step(step))

    def _step(self, step: Any) -> int:
        return integer(type(self).__name__, "step", step, 0)

    def _value(self, step: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _args(self) -> dict[str, Any]:
        """The constructor arguments, in order."""
        return {name: getattr(self, name) for name in self._ARGS}

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
