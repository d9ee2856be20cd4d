"""The optimizers' step as ONE C call.

Every parameter group's tensors go into one work list for ``fastopt._step``:
per-tensor hyperparameters travel as the index of the tensor's group, the
gradients are unscaled, checked and clipped on the fly, and everything is
checked before anything is written (a rejected step changes no parameter,
state or step count). Functions of the optimizer ``opt``.

The prepared part: the parameters and states of a step are the same arrays
every step, so their flattened tuples are built once per pattern of missing
gradients and of state needs and reused (``opt._flat``), and checked once by
a ``_ext.StepPlan`` (``opt._plan_all``, every gradient given), which each
step checks only the gradients and the arrays' flags (fastopt/_plan.pxi). A
flat gradient list reaches the plan unsplit (``deferred``), and when only
the gradients changed since the last prepared step, ``opt.step`` is one
remembered call (``_compiled.remembered_step``, filled by ``remember``): no
per-tensor Python, and no bytecode on that path.
"""
from __future__ import annotations

from itertools import chain

import numpy as np

from .. import _dtypes, _ext, _q8, _step
from .. import _validation as _v
from . import _compiled, _grads, _masters, _states


def options(opt, f, grad_scale, skip_if_nonfinite, max_grad_norm, norm_type,
            clip_convention):
    """The checked step options, cached for the last arguments seen."""
    key = _compiled.options_key(grad_scale, skip_if_nonfinite, max_grad_norm, norm_type,
                                clip_convention)
    cached = opt._opts_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    o = _step.check_options(f, grad_scale=grad_scale, max_grad_norm=max_grad_norm,
                            norm_type=norm_type, clip_convention=clip_convention,
                            skip_if_nonfinite=skip_if_nonfinite)
    opt._opts_cache = (key, o)
    return o


def flat(opt, per, groups):
    """(xs, gs, (s1, s2, s3), index, labels, plan): the work list of one
    step, and its prepared form (``_ext.StepPlan``, None if the parameters
    or states need the slow path)."""
    present = tuple(tuple(g is not None for g in gg) for gg in per)
    needs = tuple(_step.needs(g) for g in groups)
    key = (present, needs)
    cached = opt._flat
    if cached is None or cached[0] != key:
        xs, s1, s2, s3, index, where = [], [], [], [], [], []
        k = 0
        for gi, (group, st, pr) in enumerate(zip(opt.param_groups, opt._state, present)):
            names = opt._slots(group)
            for i, p in enumerate(group["params"]):
                if not pr[i]:
                    continue
                xs.append(p)
                sts = [st[names[j]][i] if j < needs[gi] else None for j in range(3)]
                s1.append(sts[0])
                s2.append(sts[1])
                s3.append(sts[2])
                index.append(gi)
                where.append(k + i)
            k += len(group["params"])
        xs, states, index = tuple(xs), (tuple(s1), tuple(s2), tuple(s3)), tuple(index)
        plan = _ext.StepPlan.make(xs, *states, index, len(groups),
                                  _masters.copies_of(opt, where), _states.keys(opt, where))
        cached = (key, xs, states, index, tuple(where), plan)
        opt._flat = cached
    _, xs, states, index, where, plan = cached
    gs = tuple(g for gg in per for g in gg if g is not None and g is not True)
    return xs, gs, states, index, lambda: labels(opt, where, index), plan


def labels(opt, where, index):
    """Names for messages: tensor j is params[where[j]] of group index[j],
    its state slots named by that group's rule (opt._slots)."""
    out = {"x": [f"params[{k}]" for k in where], "g": [f"grads[{k}]" for k in where],
           "w": [f"the 16-bit params[{k}]" for k in where]}     # master_weights
    slots = [opt._slots(opt.param_groups[gi]) for gi in index]
    for j in range(3):
        out[f"s{j + 1}"] = [f"state {names[j]!r} of params[{k}]" if j < len(names) else
                            f"state {j + 1} of params[{k}]" for k, names in zip(where, slots)]
    return out


def precheck(opt, per, o):
    """For skip_if_nonfinite with a schedule (not to be consulted for a
    skipped step): the norm and finiteness of the step's gradients, measured
    before the lrs are known, or None when the gradients need the slow path
    (which then checks them itself)."""
    # the norm sums each gradient in its logical order: an F-ordered one as
    # its C-ordered copy (the fast path declines it as it is)
    gs = tuple(np.ascontiguousarray(g) if type(g) is np.ndarray and not g.flags.c_contiguous
               else g for gg in per for g in gg if g is not None)
    return _ext.global_norm(gs, o.grad_scale, o.norm_type, opt.n_threads)


def remember(opt, kws, groups):
    """After a step through the prepared plan: what the remembered step
    (``_compiled.remembered_step``, fastopt/optim/_compiled.pyx) reuses, if
    every group's lr is fixed (no schedule) and its group tuple holds the
    step count in its own slot only."""
    opt._fast = None
    parts = []
    o = opt._opts_cache[1]
    for gi, (kw, g) in enumerate(zip(kws, groups)):
        cached = opt._cache.get(gi)
        if cached is None or cached[1]["schedule"] is not None or g[2] != kw["t"]:
            return
        nxt = _states.with_flags(opt, opt._group_tuple(dict(kw, t=kw["t"] + 1)))
        if nxt != g[:2] + (kw["t"] + 1,) + g[3:]:
            return
        parts.append((g[:2], g[3:]))
    opt._fast = (opt._opts_cache[0], tuple(opt._cache[gi][0] for gi in range(len(kws))),
                 tuple(parts), opt._plan_all[1], (o.grad_scale, o.max_norm, o.clip_value,
                                                  o.clip, o.norm_type, o.check_finite),
                 tuple(kw["lr"] for kw in kws), _step.StepInfo)


def deferred(opt, grads):
    """Can the split of grads wait (their form already that of the prepared
    step: a flat list or tuple, one entry per parameter)? Exactly when
    _grads.split would take them flat and cannot raise."""
    if type(grads) is not list and type(grads) is not tuple:
        return False
    n = sum(map(len, opt._param_tuples))
    return len(grads) == n and (n == 0 or not isinstance(grads[0], (list, tuple)))


def run(opt, f, grads, per, groups, o, given_norm=float("nan")):
    """The fused step; returns its StepInfo (nothing written if not applied).
    per: the gradients split per group, or None when ``deferred``: grads
    then go to the prepared step as they are (no per-tensor Python work),
    and are split only if it declines."""
    groups = tuple(groups)
    needs = tuple(map(_step.needs, groups))
    plan = opt._plan_all
    if plan is None or plan[0] != needs:        # prepared for "every gradient given"
        every = [[True] * len(g["params"]) for g in opt.param_groups]
        p = flat(opt, every, groups)[-1]
        plan = opt._plan_all = (needs, p)
    if plan[1] is not None:      # the prepared step: only gradients and flags checked
        out = plan[1].run(grads if per is None else tuple(chain.from_iterable(per)),
                          groups, o.grad_scale, o.max_norm, o.clip_value, o.clip,
                          o.norm_type, o.check_finite, opt.n_threads, given_norm)
        if out is not None:
            opt._prepared_ran = True
            return _step.StepInfo(*out)
    opt._prepared_ran = False
    # some gradient missing or in another form, or a parameter no longer
    # writeable: the work list of this step, checked in full
    if per is None:
        per = _grads.split(opt, f, grads)
    _grads.check_shapes(opt, f, per)      # the fast path below would broadcast
    xs, gs, states, index, lab, _ = flat(opt, per, groups)
    return _step.run(f, xs, gs, states, index, groups, o, opt.n_threads, lab, given_norm,
                     lambda: _grads.check_grads(opt, f, per),
                     _masters.copies_of(opt, opt._flat[4]), _states.keys(opt, opt._flat[4]))


def run_trust(opt, f, per, groups, o, trust_out=None, trust_in=None):
    """The fused step of a shard whose LAMB/LARS tensors are pieces of
    tensors split between processes (fastopt.distributed): with trust_out,
    the trust pass alone, its block sums written there (nothing else
    written); with trust_in, the step with each trusted tensor's sums
    given (fastopt.h, fo_step_opts). The arrays are the optimizer's own
    (checked when it was built), so a declined call is an internal error."""
    groups = tuple(groups)
    _grads.check_shapes(opt, f, per)
    xs, gs, states, index, _, _ = flat(opt, per, groups)
    where = opt._flat[4]
    absmax = None
    eight = _q8.unpack(states, index, groups)
    if eight:
        states, absmax = eight
    copies = _masters.copies_of(opt, where)
    out = _ext.step(xs, gs, *(tuple(s) for s in states), index, groups, o.grad_scale,
                    o.max_norm, o.clip_value, o.clip, o.norm_type, o.check_finite,
                    opt.n_threads, float("nan"), None if copies is None else tuple(copies),
                    _states.keys(opt, where), False, absmax, trust_out=trust_out,
                    trust_in=trust_in)
    if out is None:
        raise RuntimeError(f"{f}: internal error: the step of a trust ratio's pieces was "
                           f"declined")
    return _step.StepInfo(*out)


def pre_clip(opt, f, per, o):
    """For a step that cannot be fused (AGC): the gradient half of the step
    on scratch copies. Returns (StepInfo, per with the copies)."""
    _grads.check_grads(opt, f, per)
    copies = [[None if g is None else np.array(np.broadcast_to(g, p.shape),
                                               dtype=_dtypes.working_type(g, p), order="C")
               for g, p in zip(gg, group["params"])]
              for gg, group in zip(per, opt.param_groups)]
    flat_copies = tuple(g for gg in copies for g in gg if g is not None)
    out = _ext.clip_grads(flat_copies, o.grad_scale, o.max_norm, o.clip_value, o.clip,
                          o.norm_type, o.check_finite, _v.check_n_threads(f, opt.n_threads))
    if out is None:
        raise RuntimeError(f"{f}: internal error: scratch gradients were declined")
    return _step.StepInfo(*out), copies
