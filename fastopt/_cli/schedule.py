"""``fastopt schedule NAME --param k=v ... --steps N [--plot out.png]``:
print (and optionally plot) the first values of a learning-rate schedule."""
from __future__ import annotations

import argparse
import ast
import inspect
import sys
from typing import Any

from ..schedules import (
    SGDR,
    Constant,
    ConstantLearningRate,
    CorrectionDecay,
    CosineDecay,
    Exponential,
    InverseTime,
    PiecewiseConstant,
    Polynomial,
    Schedule,
    StandardDecay,
    WarmRestarts,
    WarmupCosineDecay,
)


def _normalize(name: str) -> str:
    return name.strip().lower().replace("_", "").replace("-", "")


_CLI_SCHEDULES: dict[str, type[Schedule]] = {
    _normalize(cls.__name__): cls  # "InverseTime" and "inverse_time" both give "inversetime"
    for cls in (
        ConstantLearningRate,
        StandardDecay,
        CorrectionDecay,
        WarmRestarts,
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
#: A line printed under the values of a schedule whose first values surprise.
_NOTES = {
    WarmRestarts: "step 0 is position 1 of the first cycle, as in Angel (next() advances "
                  "its counter first): one step below eta_max, which is never returned",
}
_CLI_NAMES = (
    "ConstantLearningRate, StandardDecay, CorrectionDecay, WarmRestarts (any case), "
    "constant, inverse_time, exponential, piecewise_constant, polynomial, cosine_decay, "
    "warmup_cosine_decay, sgdr"
)


def _parameters() -> str:
    """One line per schedule: its name and parameters (with defaults)."""
    lines = []
    for cls in _CLI_SCHEDULES.values():
        args = [p.name if p.default is p.empty else f"{p.name}={p.default!r}"
                for p in inspect.signature(cls).parameters.values()]
        lines.append(f"  {cls.__name__}: {', '.join(args)}")
    return "\n".join(lines)


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

    Usage: ``fastopt schedule NAME [--param k=v ...] [--steps N]
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
        prog="fastopt schedule",
        description="Print the first values of a learning-rate schedule.",
        epilog=f"Schedules (NAME in any case, _ optional) and their parameters "
               f"(--param k=v; those without a default are required):\n{_parameters()}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    values = [] if args.plot else None
    try:        # line by line: --steps 10**12 | head prints at once and stops
        print(f"# {schedule!r}")
        for step in steps:
            value = schedule(step)
            print(f"{step} {value!r}")
            if values is not None:
                values.append(value)
        if type(schedule) in _NOTES:
            print(f"# {_NOTES[type(schedule)]}")
    except BrokenPipeError:     # the reader has gone (| head): stop, quietly
        sys.stdout = None       # nothing more to flush at exit
        return 0
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
