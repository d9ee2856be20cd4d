"""The whole optimizer step in one C call (issue 13): the machinery.

Order inside one step (docs/semantics.md, "The whole step")::

    u = g / grad_scale          unscale, in the gradient's dtype
    finite?                     skip_if_nonfinite: nothing written, applied=False
    norm = global norm of u     norm_type 2 (sum of squares in double) or inf
    clip by the global norm     torch: u *= min(1, max_norm / (norm + 1e-6))
                                optax: u = (u / norm) * max_norm where norm >= max_norm
    clip_value                  u = clip(u, -clip_value, clip_value)
    maximize                    u = -u
    the rule                    with u as its gradient (weight decay inside)

Gradients passed in are never written. :func:`run` offers a step to the
extension's fast path (``_ext.step``) and, when that declines, hands it to
``fastopt._dispatch.accept`` as the row ``STEP``: the same acceptance rule
as every in-place op (check in full through ``fastopt._validation``, raising
TypeError or ValueError naming the function, argument and index with
nothing written; normalise; run; write back unless the step was skipped).
``GLOBAL_NORM`` and ``CLIP_GRADS`` are the rows of the gradient-list
functions. The public functions are in ``fastopt._torchform`` and the
optimizers in ``fastopt.optim``.
"""
from __future__ import annotations

import math
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from . import _ext
from . import _validation as _v
from ._dispatch import Op, accept

RULES = {"momentum": 0, "adagrad": 1, "adam": 2, "sgd_torch": 3,
         "adagrad_torch": 4, "adam_torch": 5, "adamw_torch": 6}
NESTEROV, AMSGRAD, MAXIMIZE = 1, 2, 4
CLIP = {"torch": 1, "optax": 2}
# states each rule needs (names for messages); SGD without momentum has none
STATES = {0: ("v",), 1: ("h",), 2: ("v", "h"), 3: ("momentum_buffer",),
          4: ("sum",), 5: ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
          6: ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")}


class StepInfo(NamedTuple):
    """What a fused step did.

    Attributes
    ----------
    applied : bool
        False if the step was skipped (``skip_if_nonfinite`` and some
        unscaled gradient was NaN or infinite): then nothing was written.
    norm : float
        The global norm of the unscaled gradients (norm_type 2 or inf),
        measured before any clipping; NaN or inf if some value was. Measured
        only when the step checks (skip_if_nonfinite) or clips
        (max_grad_norm; ``math.inf`` measures without clipping), else NaN:
        a bare update reads the gradients once.
    finite : bool
        Whether every unscaled gradient value was finite (True when not
        measured).
    """
    applied: bool
    norm: float
    finite: bool


class Options(NamedTuple):
    """Checked step-wide options, in the fast path's form."""
    grad_scale: float = 1.0
    max_norm: float = 0.0
    clip_value: float = 0.0
    clip: int = 0
    norm_type: int = 0
    check_finite: bool = False


def check_norm_type(f: str, norm_type) -> int:
    """0 for the 2-norm, 1 for the inf-norm (2, 2.0, inf, 'inf')."""
    if isinstance(norm_type, str) and norm_type.lower() == "inf":
        return 1
    if isinstance(norm_type, (bool, np.bool_)) or not isinstance(
            norm_type, (int, float, np.integer, np.floating)):
        raise TypeError(f"{f}: norm_type must be 2.0 or math.inf, got "
                        f"{type(norm_type).__name__}")
    if norm_type == 2:
        return 0
    if norm_type == math.inf:
        return 1
    raise ValueError(f"{f}: norm_type must be 2.0 or math.inf, got {norm_type!r}")


def check_options(f: str, *, grad_scale=None, max_grad_norm=None, norm_type=2.0,
                  clip_convention="torch", clip_value=None,
                  skip_if_nonfinite=False, max_name="max_grad_norm") -> Options:
    """Every step-wide option checked (raises TypeError/ValueError)."""
    scale = 1.0 if grad_scale is None else _v.check_real(
        f, "grad_scale", grad_scale, low=0.0, low_open=True)
    nt = check_norm_type(f, norm_type)
    clip, max_norm = 0, 0.0
    if max_grad_norm is not None:
        if isinstance(max_grad_norm, (bool, np.bool_)) or not isinstance(
                max_grad_norm, (int, float, np.integer, np.floating)):
            raise TypeError(f"{f}: {max_name} must be a real number, got "
                            f"{type(max_grad_norm).__name__}")
        max_norm = float(max_grad_norm)
        if not max_norm > 0.0:
            raise ValueError(f"{f}: {max_name} must be > 0 (inf: no clipping), "
                             f"got {max_norm!r}")
        if clip_convention not in CLIP:
            raise ValueError(f"{f}: clip_convention must be 'torch' or 'optax', "
                             f"got {clip_convention!r}")
        clip = CLIP[clip_convention]
    cv = 0.0 if clip_value is None else _v.check_real(
        f, "clip_value", clip_value, low=0.0, low_open=True)
    if not isinstance(skip_if_nonfinite, (bool, np.bool_)):
        raise TypeError(f"{f}: skip_if_nonfinite must be a bool, got "
                        f"{type(skip_if_nonfinite).__name__}")
    return Options(scale, max_norm, cv, clip, nt, bool(skip_if_nonfinite))


def group_tuple(rule: int, *, t: int, lr: float, alpha=0.0, beta=0.0, eps=0.0,
                decay=0.0, decay_post=0.0, lr_decay=0.0, flags=0) -> tuple:
    """One group in the fast path's form (as fo_step_group); values checked
    by the caller."""
    return (rule, flags, t, float(lr), float(alpha), float(beta), float(eps),
            float(decay), float(decay_post), float(lr_decay))


def _needs(group: tuple) -> int:
    """How many states a group's rule needs."""
    rule, flags = group[0], group[1]
    if rule == 3:
        return 1 if group[4] != 0.0 else 0
    if rule in (5, 6):
        return 3 if flags & AMSGRAD else 2
    return len(STATES[rule])


def _check_n_threads(at: int):
    """The scalar check of a step-family entry point: n_threads (at index
    ``at`` of its scalars; the others arrive checked) is the only one,
    returned as an int (a NumPy integer is one too)."""
    def check(f, arrays, scalars):
        out = list(scalars)
        out[at] = _v.check_n_threads(f, scalars[at])
        return tuple(out)
    return check


def _step_fast(arrays, scalars):
    return _ext.step(*arrays, *scalars)


def _needs_of(scalars) -> list:
    index, groups = scalars[0], scalars[1]
    needs = [_needs(g) for g in groups]
    return [needs[j] for j in index]


# The step and the gradient-list functions as rows of the dispatch's table.
# Their scalars: (index, groups, grad_scale, max_norm, clip_value, clip,
# norm_type, check_finite, n_threads, given_norm) for the step, as
# _ext.global_norm's and _ext.clip_grads' after the gradients for the others.
STEP = Op("fastopt step", _step_fast, ("x", "g", "s1", "s2", "s3"), _check_n_threads(-2),
          wrote=itemgetter(0), needs=_needs_of)
GLOBAL_NORM = Op("fastopt.global_norm", lambda a, s: _ext.global_norm(a[0], *s), ("g",),
                 _check_n_threads(-1))
CLIP_GRADS = Op("fastopt.clip_grads", lambda a, s: _ext.clip_grads(a[0], *s), ("g",),
                _check_n_threads(-1), clips_g=True, wrote=itemgetter(0))


def run(f: str, xs, gs, states, index, groups, opts: Options, n_threads,
        labels=None, given_norm: float = math.nan, precheck=None) -> StepInfo:
    """The step over tensors xs/gs with states (three lists, None where a
    rule has no such state), tensor i in group index[i]: the fast path, else
    ``_dispatch.accept``. labels: role -> list of names for messages (roles
    "x", "g", "s1".."s3"), or a callable returning that dict (only called
    when the fast path declines). given_norm: the global norm of these
    gradients already measured by ``_ext.global_norm`` (then
    opts.check_finite must be False). precheck: called first when the fast
    path declines (a caller's own checks, for its own messages)."""
    arrays = (tuple(xs), tuple(gs), *(tuple(s) for s in states))
    scalars = (tuple(index), tuple(groups), opts.grad_scale, opts.max_norm,
               opts.clip_value, opts.clip, opts.norm_type, opts.check_finite, n_threads,
               given_norm)
    out = _ext.step(*arrays, *scalars)
    if out is None:
        out = accept(STEP, arrays, scalars, f, labels, precheck)
    return StepInfo(*out)
