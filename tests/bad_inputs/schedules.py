"""Rejected inputs of fastopt.schedules.
"""
from __future__ import annotations

import math

from bad_inputs.builders import Case


def _sched():
    from fastopt import schedules
    return schedules


def sched(*args, **kwargs):
    """Arguments for a schedule constructor (resolved lazily: the module is optional)."""
    return lambda: (args, kwargs)


def on(name, ctor_args, *call_args):
    """Arguments for calling an instance: (instance, step)."""
    return lambda: ((getattr(_sched(), name)(*ctor_args),) + call_args, {})


P = "fastopt.schedules."
SCHEDULE_CASES = [
    Case("schedules.ConstantLearningRate", "eta = -0.1", sched(-0.1), ValueError,
         P + "ConstantLearningRate: eta must be a finite number >= 0, got -0.1"),
    Case("schedules.ConstantLearningRate", "eta = NaN", sched(math.nan), ValueError,
         P + "ConstantLearningRate: eta must be a finite number >= 0, got nan"),
    Case("schedules.ConstantLearningRate", "eta a str", sched("0.1"), TypeError,
         P + "ConstantLearningRate: eta must be a finite number >= 0, got '0.1' (str)"),
    Case("schedules.StandardDecay", "alpha = -0.5", sched(0.1, alpha=-0.5), ValueError,
         P + "StandardDecay: alpha must be a finite number >= 0, got -0.5"),
    Case("schedules.StandardDecay", "interval = 0", sched(0.1, interval=0), ValueError,
         P + "StandardDecay: interval must be an integer >= 1, got 0"),
    Case("schedules.CorrectionDecay", "beta = 1", sched(0.1, beta=1.0), ValueError,
         P + "CorrectionDecay: beta must be a finite number in [0, 1), got 1.0"),
    Case("schedules.WarmRestarts", "interval = 0", sched(0.1, interval=0), ValueError,
         P + "WarmRestarts: interval must be an integer >= 1, got 0"),
    Case("schedules.WarmRestarts", "eta_min = inf", sched(0.1, eta_min=math.inf),
         ValueError, P + "WarmRestarts: eta_min must be a finite number >= 0, got inf"),
    Case("schedules.Exponential", "decay_rate = 0", sched(0.1, 10, 0.0), ValueError,
         P + "Exponential: decay_rate must be a finite number > 0, got 0.0"),
    Case("schedules.Exponential", "transition_steps = 0", sched(0.1, 0, 0.5), ValueError,
         P + "Exponential: transition_steps must be an integer >= 1, got 0"),
    Case("schedules.Exponential", "transition_begin = -1",
         sched(0.1, 10, 0.5, transition_begin=-1), ValueError,
         P + "Exponential: transition_begin must be an integer >= 0, got -1"),
    Case("schedules.InverseTime", "staircase = 1 (not a bool)",
         sched(0.1, 0.5, staircase=1), TypeError,
         P + "InverseTime: staircase must be True or False, got 1 (int)"),
    Case("schedules.Polynomial", "power = 0", sched(0.1, 0.0, 0.0, 10), ValueError,
         P + "Polynomial: power must be a finite number > 0, got 0.0"),
    Case("schedules.CosineDecay", "decay_steps = 0", sched(0.1, 0), ValueError,
         P + "CosineDecay: decay_steps must be an integer >= 1, got 0"),
    Case("schedules.WarmupCosineDecay", "decay_steps = warmup_steps",
         sched(0.0, 0.1, 10, 10), ValueError,
         P + "WarmupCosineDecay: decay_steps must be an integer >= 11, got 10"),
    Case("schedules.PiecewiseConstant", "a negative boundary", sched(0.1, {-1: 0.5}),
         ValueError, P + "PiecewiseConstant: boundaries_and_scales boundary must be an "
                         "integer >= 0, got -1"),
    Case("schedules.PiecewiseConstant", "a negative scale", sched(0.1, {10: -0.5}),
         ValueError, P + "PiecewiseConstant: boundaries_and_scales scale must be a finite "
                         "number >= 0, got -0.5"),
    Case("schedules.JoinSchedules", "too few boundaries",
         lambda: (([_sched().Constant(1.0), _sched().Constant(0.5)], []), {}), ValueError,
         P + "JoinSchedules: boundaries must have len(schedules) - 1 = 1 entries, got 0"),
    Case("schedules.SGDR", "no cycle", sched([]), ValueError,
         P + "SGDR: cosine_kwargs must hold at least one cycle"),
    Case("schedules.Constant.__call__", "step = -1", on("Constant", (0.1,), -1), ValueError,
         P + "Constant: step must be an integer >= 0, got -1"),
    Case("schedules.Constant.__call__", "step = 1.0", on("Constant", (0.1,), 1.0), TypeError,
         P + "Constant: step must be an integer >= 0, got 1.0 (float)"),
    Case("schedules.CosineDecay.__call__", "step = True", on("CosineDecay", (0.1, 100), True),
         TypeError, P + "CosineDecay: step must be an integer >= 0, got True (bool)"),
    Case("schedules.angel", "an unknown class name",
         lambda: (({"ml.opt.decay.class.name": "Nope"}, 0.1), {}), ValueError,
         P + "angel: unknown ml.opt.decay.class.name 'Nope'; known (case-insensitive): "
             "StandardDecay, WarmRestarts, CorrectionDecay, ConstantLearningRate"),
    Case("schedules.angel", "alpha that does not parse",
         lambda: (({"ml.opt.decay.alpha": "fast"}, 0.1), {}), ValueError,
         P + "angel: conf['ml.opt.decay.alpha'] must be a number, got 'fast'"),
    Case("schedules.angel", "conf None", lambda: ((None, 0.1), {}), TypeError,
         P + "angel: conf must be a mapping of Angel configuration keys, got NoneType"),
    Case("schedules.angel_step", "batch = batches_per_epoch", lambda: ((0, 5, 5), {}),
         ValueError, P + "angel_step: batch must be < batches_per_epoch (5), got 5"),
    Case("schedules.angel_rate", "a float for the schedule", lambda: ((0.1, 0, 0, 5), {}),
         TypeError, P + "angel_rate: schedule must be a fastopt.schedules.Schedule, got float"),
]
