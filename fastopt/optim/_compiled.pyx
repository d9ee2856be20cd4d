# cython: language_level=3, embedsignature=True, cdivision=True
"""fastopt.optim's remembered step: the per-step checks of an optimizer
whose last step went through its prepared plan (fastopt/optim/_fused.py
``remember``), and the bookkeeping of the step on the optimizer. The
optimizer front end's own small extension: the core (fastopt._ext) knows
arrays and pointers, not optimizers; it runs the plan
(``fastopt._ext.StepPlan.run``) and nothing here reaches below that."""

from ._checks import LAST_T as _LAST_T      # (the full step's check_update_count says why)


cpdef tuple options_key(grad_scale, skip_if_nonfinite, max_grad_norm, norm_type,
                        clip_convention):
    """The key under which an optimizer keeps its checked step options:
    the values and their types (1, 1.0 and True are equal values, yet
    checked apart: a bool is refused where a number is wanted)."""
    return (grad_scale, skip_if_nonfinite, max_grad_norm, norm_type, clip_convention,
            type(grad_scale), type(skip_if_nonfinite), type(max_grad_norm),
            type(norm_type), type(clip_convention))


def remembered_step(opt, grads, grad_scale, skip_if_nonfinite, max_grad_norm, norm_type,
                    clip_convention):
    """fastopt.optim's step when, since its last step through the prepared
    plan, only the gradients and the step count changed (the same options,
    of the same types; every group's hyperparameters equal, no schedule; the
    same parameter lists; as fastopt/optim/_fused.py ``remember`` left in
    opt._fast): the step, its bookkeeping on opt, and whether it was
    applied; or None, with nothing written, for the full route (which checks
    everything and raises). Compiled: after a step over more memory than the
    cache holds, this path runs cold, and bytecode would cost a miss a page."""
    c = opt._fast
    if c is None:
        return None
    key = options_key(grad_scale, skip_if_nonfinite, max_grad_norm, norm_type,
                      clip_convention)
    cdef tuple rec = <tuple>c
    if rec[0] != key:
        return None
    cdef tuple gkeys = <tuple>rec[1], parts = <tuple>rec[2], args = <tuple>rec[4]
    cdef Py_ssize_t j, ng = len(gkeys)
    pgs, pts = opt.param_groups, opt._param_tuples
    if type(pgs) is not list or type(pts) is not list or len(pgs) != ng or len(pts) != ng:
        return None
    keys = opt._KEYS
    t = opt._steps + opt._T0
    if t >= _LAST_T:
        return None                     # the full step refuses it, saying why
    groups = [None] * ng
    for j in range(ng):
        group = (<list>pgs)[j]
        if type(group) is not dict or group["params"] is not (<list>pts)[j]:
            return None
        v = tuple(map(group.get, keys))
        # as _group_kwargs keys them, types first (a list, which it keys as a
        # tuple, never matches: such a group takes the full route)
        if tuple(map(type, v)) + v != gkeys[j]:
            return None
        head, tail = parts[j]
        groups[j] = head + (t,) + tail
    out = rec[3].run(grads, tuple(groups), args[0], args[1], args[2], args[3], args[4],
                     args[5], opt.n_threads)
    if out is None:
        return None
    info = tuple.__new__(rec[6], out)
    opt.last_grad_norm = info[1]
    opt.last_step_info = info
    if info[0]:
        opt._steps = opt._steps + 1
        opt.last_lr = list(rec[5])
    return info[0]
