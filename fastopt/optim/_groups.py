"""Building an optimizer's parameter groups and allocating its state arrays."""
from __future__ import annotations

import numpy as np

from .. import _dtypes, _q8
from .._groups import group_params
from ._checks import order
from ._states import dtype_of, new_state

_ALIGN = 64  # bytes: state views in the optional arena start on cache lines
_FLOATS = _dtypes.NUMPY


def _raw_groups(f, params):
    """params -> (list of group dicts, label of each group)."""
    if isinstance(params, np.ndarray) or not isinstance(params, (list, tuple)):
        raise TypeError(f"{f}: params must be a list of arrays or a list of parameter "
                        f"groups (dicts with 'params'), got {type(params).__name__}")
    if len(params) == 0:
        raise ValueError(f"{f}: params is empty; give at least one parameter")
    if all(isinstance(p, dict) for p in params):
        raw = [dict(p) for p in params]
        return raw, [f"param_groups[{i}]" for i in range(len(raw))]
    if any(isinstance(p, dict) for p in params):
        raise TypeError(f"{f}: params mixes arrays and parameter groups; give a list "
                        f"of arrays or a list of dicts")
    return [{"params": list(params)}], ["params"]


def make_groups(opt, f, params):
    """The optimizer's checked parameter groups, every key filled in."""
    raw, labels = _raw_groups(f, params)
    keys = list(opt._HYPER) + ["schedule"]
    groups = []
    n = 0
    for group, where in zip(raw, labels):
        ps = group_params(f, group, where, n)
        n += len(ps)
        unknown = set(group) - set(opt._HYPER) - {"params", "schedule", "state_dtype"}
        if unknown:
            takes = sorted(opt._HYPER) + ["schedule"] + (["state_dtype"] if opt._q8 else [])
            raise ValueError(
                f"{f}: {where} has unknown key(s) {sorted(unknown)}; "
                f"{type(opt).__name__} takes {takes}")
        full = {"params": tuple(ps)}
        for k in keys:
            full[k] = group.get(k, opt.defaults[k])
        if full["schedule"] is not None and group.get("lr") is not None:
            raise ValueError(
                f"{f}: {where} sets lr but a schedule supplies its learning rate; "
                f"give the group its own 'schedule', or 'schedule': None to use a "
                f"fixed lr")
        if full["schedule"] is not None:
            full["lr"] = None
        checked = opt._check_group(f, full, where)
        if "state_dtype" in group:      # (not a hyperparameter: how its states are kept)
            _q8.group_keeps_8bit(f, where, group["state_dtype"], opt._q8)     # (checked)
            checked["state_dtype"] = group["state_dtype"]
        groups.append(checked)
    if n == 0:
        raise ValueError(f"{f}: params is empty; give at least one parameter")
    return groups


def allocate(opt):
    """(state, arenas): per group {name: [array per parameter]}, and the
    per-dtype arenas holding them with ``contiguous_state`` (else {})."""
    state = [{name: [] for name in opt._STATES} for _ in opt.param_groups]
    first = np.cumsum([0] + [len(g["params"]) for g in opt.param_groups]).tolist()
    if not opt.contiguous_state:
        for gs, group, k0 in zip(state, opt.param_groups, first):
            for name in opt._STATES:
                fill = opt._initial(group, name)
                for k, p in enumerate(group["params"], k0):
                    a = new_state(opt, group, p, k, name, fill)
                    if a is None:
                        a = np.zeros(p.shape, dtype_of(opt, p), order=order(p))
                        if fill:
                            a.fill(fill)
                    gs[name].append(a)
        return state, {}
    # one arena per dtype, every state view starting on a 64-byte boundary
    layout = []   # (group index, name, dtype, offset in elements, param)
    sizes: dict = {}
    for name in opt._STATES:
        for gi, group in enumerate(opt.param_groups):
            for k, p in enumerate(group["params"], first[gi]):
                eight = new_state(opt, group, p, k, name, opt._initial(group, name))
                if eight is not None:               # 8-bit: its own arrays
                    layout.append((gi, name, None, eight, p))
                    continue
                dt = dtype_of(opt, p)
                step = _ALIGN // dt.itemsize
                off = sizes.get(dt, 0)
                layout.append((gi, name, dt, off, p))
                sizes[dt] = off + -(-p.size // step) * step
    arenas = {}
    for dt, n in sizes.items():
        raw = np.zeros(n + _ALIGN // dt.itemsize, dt)
        skip = (-raw.ctypes.data % _ALIGN) // dt.itemsize
        arenas[dt] = raw[skip:skip + n]
    for gi, name, dt, off, p in layout:
        if dt is None:
            state[gi][name].append(off)
            continue
        a = arenas[dt][off:off + p.size].reshape(p.shape, order=order(p))
        fill = opt._initial(opt.param_groups[gi], name)
        if fill:
            a.fill(fill)
        state[gi][name].append(a)
    return state, arenas
