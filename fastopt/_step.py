"""The whole optimizer step in one C call: the machinery.

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

from . import _ext, _q8
from . import _validation as _v
from ._dispatch import Op, accept
from ._rules import AMSGRAD, MAXIMIZE, NESTEROV, needs  # noqa: F401
from ._rules import ID as RULES  # noqa: F401 (re-exported)

CLIP = {"torch": 1, "optax": 2}


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
    if (grad_scale is None and max_grad_norm is None and clip_value is None
            and skip_if_nonfinite is False and type(norm_type) is float and norm_type == 2.0):
        return NO_OPTIONS           # the defaults: nothing to check
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


#: check_options' result for the defaults
NO_OPTIONS = Options(1.0, 0.0, 0.0, 0, 0, False)

#: how many values a group's ``extra`` holds (FO_STEP_EXTRA, src_c/fastopt.h)
EXTRA = 5


def group_tuple(rule: int, *, t: int, lr: float, alpha=0.0, beta=0.0, eps=0.0,
                decay=0.0, decay_post=0.0, lr_decay=0.0, flags=0, extra=()) -> tuple:
    """One group in the fast path's form (as fo_step_group); values checked
    by the caller. ``extra``: the hyperparameters of a rule beyond the named
    fields, in the order fastopt.h gives for it (the rest are 0)."""
    return (rule, flags, t, float(lr), float(alpha), float(beta), float(eps),
            float(decay), float(decay_post), float(lr_decay),
            *map(float, extra), *(0.0,) * (EXTRA - len(extra)))


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
    """arrays: x, g, s1..s3 and, when copies are written, w."""
    out = _ext.step(*arrays[:5], *scalars[:-1], ws=arrays[5] if len(arrays) > 5 else None,
                    seed=scalars[-1])
    if out is None and scalars[-2] != scalars[-2] and (scalars[7] or scalars[5]):
        return _step_measured(arrays, scalars)
    return out


def _step_measured(arrays, scalars):
    """A normalised step that measures the norm and that the fast path
    declined (some tensor is F-ordered: the norm sums each gradient in its
    logical order, whatever its layout): the norm of the gradients' C-ordered
    copies, then the step with that norm given."""
    index, groups, scale, max_norm, clip_value, clip, norm_type, check, nth, _, seed = scalars
    gs = tuple(g if g.flags.c_contiguous else np.ascontiguousarray(g) for g in arrays[1])
    measured = _ext.global_norm(gs, scale, norm_type, nth)
    if measured is None:
        return None
    norm, finite = measured
    if check and not finite:
        return (False, norm, False)             # skipped: nothing written
    out = _ext.step(*arrays[:5], index, groups, scale, max_norm, clip_value, clip,
                    norm_type, False, nth, norm, arrays[5] if len(arrays) > 5 else None,
                    seed)
    return None if out is None else (out[0], norm, finite)


def _needs_of(scalars) -> list:
    index, groups = scalars[0], scalars[1]
    counts = [needs(g) for g in groups]
    return [counts[j] for j in index]


# The step and the gradient-list functions as rows of the dispatch's table.
# Their scalars: (index, groups, grad_scale, max_norm, clip_value, clip,
# norm_type, check_finite, n_threads, given_norm, seed) for the step, as
# _ext.global_norm's and _ext.clip_grads' after the gradients for the others.
STEP = Op("fastopt step", _step_fast, ("x", "g", "s1", "s2", "s3", "w"),
          _check_n_threads(-3), wrote=itemgetter(0), needs=_needs_of, mixed=True)
GLOBAL_NORM = Op("fastopt.global_norm", lambda a, s: _ext.global_norm(a[0], *s), ("g",),
                 _check_n_threads(-1), mixed=True)
CLIP_GRADS = Op("fastopt.clip_grads", lambda a, s: _ext.clip_grads(a[0], *s), ("g",),
                _check_n_threads(-1), clips_g=True, wrote=itemgetter(0), mixed=True)


def run(f: str, xs, gs, states, index, groups, opts: Options, n_threads,
        labels=None, given_norm: float = math.nan, precheck=None,
        copies=None, seed=0, half_params=False, absmax=None) -> StepInfo:
    """The step over tensors xs/gs with states (three lists, None where a
    rule has no such state), tensor i in group index[i]: the fast path, else
    ``_dispatch.accept``. labels: role -> list of names for messages (roles
    "x", "g", "s1".."s3"), or a callable returning that dict (only called
    when the fast path declines). given_norm: the global norm of these
    gradients already measured by ``_ext.global_norm`` (then
    opts.check_finite must be False). precheck: called first when the fast
    path declines (a caller's own checks, for its own messages). copies:
    None, or per tensor an array that receives the new parameters rounded
    to its 16-bit dtype (None: no copy of that tensor). seed: the
    stochastic rounding's of bfloat16 states, an int (tensor i's key is
    seed + i * 0x9E3779B97F4A7C15 mod 2**64; docs/semantics.md) or a
    tuple of one key per tensor. half_params: bfloat16/float16 parameters
    are taken, updated in their own type with gradients and states of it
    (the torch drop-ins' way, fastopt/torch/_mixed.py; they are checked
    before, since the dispatch below takes float32 and float64 only).
    absmax: per tensor the absmax arrays of its 8-bit states, their codes in
    states; when None and some state is a ``fastopt.State8bit`` (the fast
    path declines it), _run_q8 takes the step (the dispatch below has no
    8-bit states)."""
    arrays = (tuple(xs), tuple(gs), *(tuple(s) for s in states))
    scalars = (tuple(index), tuple(groups), opts.grad_scale, opts.max_norm,
               opts.clip_value, opts.clip, opts.norm_type, opts.check_finite, n_threads,
               given_norm, seed)
    if copies is not None:
        arrays += (tuple(copies),)
    out = _ext.step(*arrays[:5], *scalars[:-1], ws=arrays[5] if copies is not None else None,
                    seed=seed, half_params=half_params, absmax=absmax)
    if out is None and absmax is None:
        eight = _q8.unpack(states, index, groups)
        if eight is not None:       # some state is a State8bit
            return _run_q8(f, xs, gs, states, index, groups, scalars, labels, copies, seed,
                           half_params, eight)
    if out is None and absmax is not None:
        _q8_refused(f)
    if out is None:
        out = accept(STEP, arrays, scalars, f, labels, precheck)
    return StepInfo(*out)


def _run_q8(f, xs, gs, states, index, groups, scalars, labels, copies, seed, half_params,
            eight):
    """run's step with 8-bit states: their arrays as they are on the fast
    path (``eight``: fastopt/_q8.py's unpack, False if some State8bit is not
    in its form), else the call checked in full (fastopt/_q8.py's split:
    TypeError/ValueError naming the argument, nothing written) and run."""
    n_threads = scalars[8]
    if eight:
        out = _ext.step(tuple(xs), tuple(gs), *(tuple(s) for s in eight[0]), *scalars[:9],
                        scalars[9], None if copies is None else tuple(copies), seed,
                        half_params, eight[1])
        if out is not None:
            return StepInfo(*out)
    gs, states, absmax = _q8.split(f, xs, gs, states, index, groups, labels, copies)
    n_threads = _v.check_n_threads(f, n_threads)
    out = _ext.step(tuple(xs), tuple(gs), *(tuple(s) for s in states), *scalars[:8],
                    n_threads, scalars[9], None if copies is None else tuple(copies), seed,
                    half_params, absmax)
    if out is None:
        _q8_refused(f)
    return StepInfo(*out)


def _q8_refused(f):
    """A step with 8-bit states, checked in full by fastopt/_q8.py, that the
    fast path still declined: only a rounded copy (param_copies) not of a
    16-bit type in C order, or an option the core refuses with them, is
    left; nothing was written."""
    raise ValueError(f"{f}: the core refused this step with 8-bit states: each rounded copy "
                     f"(param_copies) must be a C-contiguous bfloat16 or float16 array of "
                     f"its parameter's shape; nothing was written")


# ---- the front ends' lists, run as one step -----------------------------------------

_ONE = (np.ndarray, _q8.State8bit)             # a single tensor
_SEQ = (list, tuple)


def as_list(x):
    return [x] if isinstance(x, _ONE) else list(x)


def lists(f, params, grads, *states):
    """Lists of equal length (a single array counts as a list of one)."""
    if not isinstance(params, (np.ndarray, list, tuple)):
        raise TypeError(f"{f}: params must be a numpy.ndarray or a list/tuple of "
                        f"numpy.ndarray, got {_v._got(params)}")
    xs = as_list(params)
    n = len(xs)
    out = [xs]
    for name, a in (("grads", grads),) + states:    # None: per tensor (the checks say)
        out.append([None] * n if a is None else _list_of(f, name, a, n))
    return out


def _list_of(f, name, a, n) -> list:
    """lists' entry for argument `name`, which must hold n tensors."""
    if isinstance(a, _ONE):
        a = [a]
    elif not isinstance(a, _SEQ):
        raise TypeError(f"{f}: {name} must be a numpy.ndarray or a list/tuple of "
                        f"numpy.ndarray, got {_v._got(a)}")
    elif a and isinstance(a[0], np.ndarray):
        a = list(a)
    elif _v._numbers(a):
        raise TypeError(f"{f}: {name} is a {type(a).__name__} of numbers, not of arrays; "
                        f"convert it with np.asarray(..., dtype=...) to an array of its "
                        f"parameter's dtype")
    else:
        a = list(a)
    if len(a) != n:
        raise ValueError(f"{f}: {name} has {len(a)} tensors but params has "
                         f"{n}; every list must have one entry per "
                         f"parameter")
    return a


def step_count(f, step):
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"{f}: step must be an integer, got {type(step).__name__}")
    if not 1 <= step < 2**63:
        raise ValueError(f"{f}: step must be >= 1 (torch's count after this step's "
                         f"increment), got {step}")
    return int(step)


def run_lists(f, params, grads, states, group, names, n_threads, param_copies=None,
              seed=0, **options):
    opts = check_options(f, **options)
    ls = lists(f, params, grads, *zip(names, states))
    xs, gs, sts = ls[0], ls[1], ls[2:] + [[None] * len(ls[0])] * (5 - len(ls))
    n = len(xs)
    copies = None if param_copies is None else copy_list(f, param_copies, n)

    def labels():                      # only built if the fast path declines
        out = {"x": [f"params[{i}]" for i in range(n)], "g": [f"grads[{i}]" for i in range(n)],
               "w": [f"param_copies[{i}]" for i in range(n)]}
        for k, name in enumerate(names):
            out[f"s{k + 1}"] = [f"{name}[{i}]" for i in range(n)]
        return out
    return run(f, xs, gs, sts[:3], (0,) * n, (group,), opts, n_threads, labels,
               copies=copies, seed=seed)


def copy_list(f, param_copies, n) -> list:
    """param_copies as a list of n entries (an array or None each)."""
    if isinstance(param_copies, np.ndarray):
        param_copies = [param_copies]
    if not isinstance(param_copies, (list, tuple)):
        raise TypeError(f"{f}: param_copies must be a numpy.ndarray or a list/tuple of "
                        f"numpy.ndarray or None, got {_v._got(param_copies)}")
    if len(param_copies) != n:
        raise ValueError(f"{f}: param_copies has {len(param_copies)} entries but params "
                         f"has {n}; give one per parameter (None: no copy of it)")
    return list(param_copies)


#: the step options every front end takes, in order, with their defaults
STEP_DEFAULTS = (("grad_scale", None), ("max_grad_norm", None), ("norm_type", 2.0),
                 ("clip_convention", "torch"), ("clip_value", None),
                 ("skip_if_nonfinite", False))
STEP_OPTIONS = tuple(name for name, _ in STEP_DEFAULTS)


#: state_rounding's values -> the group flags (FO_STEP_ROUND_*, fastopt.h)
ROUNDING = {"auto": 0, "nearest": _ext.tables()["round_nearest"],
            "stochastic": _ext.tables()["round_stochastic"]}


def rounding_flags(f, state_rounding) -> int:
    """The group flags of a state_rounding argument (raises ValueError)."""
    if not isinstance(state_rounding, str) or state_rounding not in ROUNDING:
        raise ValueError(f"{f}: state_rounding must be 'auto', 'nearest' or "
                         f"'stochastic', got {state_rounding!r}")
    return ROUNDING[state_rounding]


#: decay_mode's values -> the group flags (FO_STEP_DECAY_AFTER, fastopt.h)
DECAY_MODES = {"torch": 0, "bnb": _ext.tables()["decay_after"]}


def decay_flags(f, decay_mode, label="decay_mode") -> int:
    """The group flags of Adam's and AdamW's decay_mode (raises ValueError
    naming label): 'torch' decays before the update (torch's AdamW), 'bnb'
    after it (bitsandbytes' CUDA kernels, for its Adam and AdamW alike)."""
    if not isinstance(decay_mode, str) or decay_mode not in DECAY_MODES:
        raise ValueError(f"{f}: {label} must be 'torch' (the weight decay before the "
                         f"update) or 'bnb' (after it), got {decay_mode!r}")
    return DECAY_MODES[decay_mode]


#: the stride of the stochastic rounding keys (FO_KEY_STEP, src_c/fastopt.h)
KEY_STEP = _ext.tables()["key_step"]


def key(seed: int, k: int) -> int:
    """The stochastic rounding key of an optimizer's k-th parameter (in
    group order, whether a step updates it or not): seed + k * KEY_STEP
    (mod 2**64; docs/semantics.md, "bfloat16 states")."""
    return (seed + k * KEY_STEP) & 0xFFFFFFFFFFFFFFFF


def check_seed(f, seed) -> int:
    """A stochastic rounding seed: an integer in [0, 2**64)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{f}: seed must be an integer, got {type(seed).__name__}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"{f}: seed must be in [0, 2**64), got {seed}")
    return int(seed)


def run_form(f, a, states, group, names):
    """run_lists for a torch-form function whose arguments are the dict a:
    its state_rounding joins the group's flags, and its seed the call."""
    group = (group[0], group[1] | rounding_flags(f, a["state_rounding"])) + group[2:]
    return run_lists(f, a["params"], a["grads"], states, group, names, a["n_threads"],
                     a["param_copies"], seed=check_seed(f, a["seed"]),
                     **{k: a[k] for k in STEP_OPTIONS})


def step_options(grad_scale, max_grad_norm, norm_type, clip_convention, clip_value,
                 skip_if_nonfinite) -> dict:
    """The step options of an ONNX rule's call as a dict, empty when none is
    set (the plain update, returning None)."""
    if (grad_scale is None and max_grad_norm is None and clip_value is None
            and skip_if_nonfinite is False and clip_convention == "torch"
            and (norm_type == 2 if isinstance(norm_type, (int, float)) else False)):
        return {}
    return {"grad_scale": grad_scale, "max_grad_norm": max_grad_norm,
            "norm_type": norm_type, "clip_convention": clip_convention,
            "clip_value": clip_value, "skip_if_nonfinite": skip_if_nonfinite}


def onnx_fused(f, x, g, states, names, group, n_threads, options) -> StepInfo:
    """An ONNX rule (fastopt.onnx_momentum/adagrad/adam) with the step options:
    its scalars checked by the caller into ``group``."""
    return run_lists(f, x, g, states, group, names, n_threads, **options)
