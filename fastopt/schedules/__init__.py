"""Learning-rate schedules: pure functions of the step number.

A schedule is an immutable object called as ``schedule(step) -> float`` for
``step = 0, 1, 2, ...``. It keeps no state, so the same step always gives the
same value, in any order; schedules have a readable ``repr`` (which evaluates
back to an equal schedule) and compare and hash by their parameters. A step
must be an integer ``>= 0`` (Python or NumPy integer, not ``bool``): a step
of another type raises ``TypeError`` and a negative one ``ValueError``, naming
``step``; every bad parameter likewise raises ``TypeError`` for a wrong type
and ``ValueError`` for a wrong value, naming that parameter.

Angel's StepSizeScheduler family
--------------------------------
The four learning-rate decays of Angel, Tencent's distributed machine
learning platform (github.com/Angel-ML/angel), and its configuration keys.
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
``fastopt schedule NAME --param k=v ... --steps N [--plot out.png]`` prints
(and plots) the first values of any of these schedules; ``fastopt schedule
--help`` lists each one's parameters (the code is in
``fastopt/_cli/schedule.py``).

Layout: ``base.py`` (the :class:`Schedule` protocol), ``_checks.py`` (the
parameter checkers), ``angel.py`` (Angel's four decays and its
configuration), ``family.py`` (the optax/torch family).
"""

from .angel import (
    ConstantLearningRate,
    CorrectionDecay,
    StandardDecay,
    WarmRestarts,
    angel,
    angel_on_batch,
    angel_rate,
    angel_step,
)
from .base import Schedule
from .family import (
    SGDR,
    Constant,
    CosineDecay,
    Exponential,
    InverseTime,
    JoinSchedules,
    PiecewiseConstant,
    Polynomial,
    WarmupCosineDecay,
    constant,
    cosine_decay,
    exponential,
    inverse_time,
    join_schedules,
    piecewise_constant,
    polynomial,
    sgdr,
    warmup_cosine_decay,
)

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
]

