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

Gradients passed in are never written. :func:`run` is the acceptance rule
for a step (as ``_dispatch.run`` for the plain update rules): the extension's
fast path (``_ext.step``), else a full check here (raises TypeError or
ValueError naming the function, argument and index; nothing written),
normalisation (contiguous native copies, materialised broadcasts) and the
fast path again, copies written back. The public functions are in
``fastopt._torchform`` and the optimizers in ``fastopt.optim``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import _ext
from . import _validation as _v

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


def run(f: str, xs, gs, states, index, groups, opts: Options, n_threads,
        labels=None, given_norm: float = math.nan, precheck=None) -> StepInfo:
    """The step over tensors xs/gs with states (three lists, None where a
    rule has no such state), tensor i in group index[i]. labels: role ->
    list of names for messages (roles "x", "g", "s1".."s3"), or a callable
    returning that dict (only called when the fast path declines).
    given_norm: the global norm of these gradients already measured by
    ``_ext.global_norm`` (then opts.check_finite must be False).
    precheck: called first when the fast path declines (a caller's own
    checks, for its own messages)."""
    xs, gs = tuple(xs), tuple(gs)
    s1, s2, s3 = (tuple(s) for s in states)
    index = tuple(index)
    groups = tuple(groups)
    args = (opts.grad_scale, opts.max_norm, opts.clip_value, opts.clip,
            opts.norm_type, opts.check_finite, n_threads, given_norm)
    out = _ext.step(xs, gs, s1, s2, s3, index, groups, *args)
    if out is not None:
        return StepInfo(*out)
    _v.check_n_threads(f, n_threads)
    if precheck is not None:
        precheck()
    if callable(labels):
        labels = labels()
    prep = _check(f, xs, gs, (s1, s2, s3), index, groups, labels)
    out = _ext.step(*prep.args, index, groups, *args)
    if out is None:
        raise RuntimeError(f"{f}: internal error: a normalised step was declined")
    info = StepInfo(*out)
    if info.applied:
        prep.finish()
    return info


class _Prepared:
    __slots__ = ("args", "writeback")

    def __init__(self, args, writeback):
        self.args = args
        self.writeback = writeback

    def finish(self):
        for dst, src in self.writeback:
            dst[...] = src


def _label(labels, role, i, default):
    seq = (labels or {}).get(role)
    return seq[i] if seq is not None else f"{default}[{i}]"


def _check(f, xs, gs, states, index, groups, labels) -> _Prepared:
    """Check every tensor of a step (raises; nothing written) and return it
    normalised for the fast path."""
    n = len(xs)
    if len(gs) != n or any(len(s) != n for s in states) or len(index) != n:
        raise ValueError(f"{f}: every list must have one entry per parameter")
    items = []
    for i in range(n):
        x, xlab = xs[i], _label(labels, "x", i, "params")
        _v.check_array(f, xlab, x)
        if not x.flags.writeable:
            raise ValueError(f"{f}: {xlab} is read-only; it is updated in place")
        if _v._self_overlapping(x):
            raise ValueError(f"{f}: {xlab} has elements that share memory (a broadcast "
                             f"or as_strided view); an updated array needs memory of "
                             f"its own for every element")
        items.append((xlab, x, True))
        glab = _label(labels, "g", i, "grads")
        _v._check_role(f, glab, xlab, gs[i], x, "g", False)
        items.append((glab, gs[i], False))
        need = _needs(groups[index[i]])
        names = STATES[groups[index[i]][0]]
        for k in range(3):
            a = states[k][i]
            if k < need:
                lab = _label(labels, f"s{k + 1}", i, names[k])
                if a is None:
                    raise ValueError(f"{f}: {lab} is missing; the rule needs it")
                _v._check_role(f, lab, xlab, a, x, "state", True)
                items.append((lab, a, True))
    copy_g = _v._overlaps(f, items)
    return _normalise(xs, gs, states, items, copy_g, index, groups)


def _normalise(xs, gs, states, items, copy_g, index, groups) -> _Prepared:
    """Contiguous native copies where needed (written back afterwards)."""
    out_x, out_g, out_s = [], [], ([], [], [])
    writeback = []
    pos = 0
    for i, x in enumerate(xs):
        need = _needs(groups[index[i]])
        outs = [x] + [states[k][i] for k in range(need)]
        g_pos = pos + 1
        pos += 2 + need
        order = "C" if x.flags.c_contiguous else "F" if x.flags.f_contiguous else None
        flag = "c_contiguous" if order == "C" else "f_contiguous"
        if order is None or not all(a.dtype.isnative and a.flags.aligned
                                    and getattr(a.flags, flag) for a in outs):
            order, flag = "C", "c_contiguous"
            copies = [np.array(a, dtype=a.dtype.newbyteorder("="), order="C") for a in outs]
            writeback.extend(zip(outs, copies))
            outs = copies
        out_x.append(outs[0])
        for k in range(3):
            out_s[k].append(outs[1 + k] if k < need else None)
        g = gs[i]
        if (g_pos in copy_g or g.shape != x.shape or not g.dtype.isnative
                or not g.flags.aligned or not getattr(g.flags, flag)):
            g = np.array(np.broadcast_to(g, x.shape), dtype=g.dtype.newbyteorder("="),
                         order=order)
        out_g.append(g)
    return _Prepared((tuple(out_x), tuple(out_g), *map(tuple, out_s)), writeback)


# ---- gradient lists ------------------------------------------------------------

def grad_list(f: str, name: str, grads, written: bool):
    """A tuple of checked gradients (fast-path form, copies where needed)
    and the write-back pairs."""
    if isinstance(grads, np.ndarray):
        grads = [grads]
    if not isinstance(grads, (list, tuple)):
        raise TypeError(f"{f}: {name} must be a numpy.ndarray or a list/tuple of "
                        f"numpy.ndarray, got {type(grads).__name__}")
    out, back, items = [], [], []
    for i, g in enumerate(grads):
        lab = f"{name}[{i}]"
        _v.check_array(f, lab, g, "updates" if written else "works on")
        if written and not g.flags.writeable:
            raise ValueError(f"{f}: {lab} is read-only; it is clipped in place")
        if written and _v._self_overlapping(g):
            raise ValueError(f"{f}: {lab} has elements that share memory; a clipped "
                             f"array needs memory of its own for every element")
        items.append((lab, g, written))
        if not (g.dtype.isnative and g.flags.aligned
                and (g.flags.c_contiguous or g.flags.f_contiguous)):
            c = np.array(g, dtype=g.dtype.newbyteorder("="), order="C")
            if written:
                back.append((g, c))
            g = c
        out.append(g)
    if written:
        for j, k in _v.sharing_pairs(items):
            raise ValueError(f"{f}: {items[j][0]} and {items[k][0]} share memory; "
                             f"each gradient is clipped in place on its own")
    return tuple(out), back
