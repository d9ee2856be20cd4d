"""Argument checks of ShardedOptimizer (local; the caller agrees on errors)."""
from __future__ import annotations

import json
import math

import numpy as np

from .. import _dtypes
from .._groups import group_params, split_counts
from ..optim._masters import HALF
from ..optim._states import check_dtype


def _positive(f, label, value, *, allow_none=True):
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{f}: {label} must be a real number, got {type(value).__name__}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{f}: {label} must be finite and > 0, got {value!r}")
    return v


def trusted(cls, hyper) -> bool:
    """Is the update of a group (its hyperparameters) of optimizer class
    cls scaled per tensor by a norm of the whole tensor (LAMB's and LARS's
    trust ratio, unless the group's trust_ratio is False)?"""
    rule = getattr(cls, "_RULE", None)
    return bool(getattr(rule, "per_tensor", False) and hyper.get("trust_ratio", True))


#: hyperparameters that fix where shards may be cut (AGC's units, the
#: tensors a trust ratio cuts at its norm's blocks): not editable after construction
CUT_KEYS = ("clipping", "clip_layout", "trust_ratio")


def advance_carried(opt):
    """After an applied step of the ShardedOptimizer opt: a carried scalar of
    its rule (NAdam's mu_product) advances in opt's own groups as every
    rank's inner optimizer advances it (the same steps and hyperparameters,
    whatever the shard), so the groups a checkpoint saves hold it; marked
    pushed, as the inner already holds it."""
    carry = getattr(getattr(opt._cls, "_RULE", None), "carry", None)
    if carry is None:
        return
    t = opt._steps + opt._cls._T0
    for gi, g in enumerate(opt.param_groups):
        g[carry.name] = float(carry.advance(g, t, np.float32(g[carry.name]))[1])
        opt._pushed[gi] = opt._hyper_key(g)


def _parse_groups(f, params, masters=False):
    """params -> (list of dicts with a list 'params', whether given as groups);
    16-bit arrays are taken with ``masters`` (master_weights=True)."""
    if isinstance(params, np.ndarray) or not isinstance(params, (list, tuple)):
        raise TypeError(f"{f}: params must be a list of arrays or of parameter groups "
                        f"(dicts with 'params'), got {type(params).__name__}")
    as_groups = len(params) > 0 and all(isinstance(p, dict) for p in params)
    raw = [dict(p) for p in params] if as_groups else [{"params": list(params)}]
    n, seen = 0, set()
    for gi, g in enumerate(raw):
        try:
            g["params"] = group_params(f, g, f"param_groups[{gi}]", n,
                                       _dtypes.NUMPY + HALF if masters else None)
        except TypeError as exc:
            half = any(isinstance(p, np.ndarray) and p.dtype.newbyteorder("=") in HALF
                       for p in g.get("params", ()) if isinstance(g.get("params"), list))
            if half and not masters:
                raise TypeError(f"{exc} (16-bit parameters: pass master_weights=True)") \
                    from None
            raise
        for p in g["params"]:
            if id(p) in seen:
                raise ValueError(f"{f}: params[{n}] appears twice; a parameter may appear "
                                 f"only once")
            seen.add(id(p))
            n += 1
    return raw, as_groups


def _first_difference(a: str, b: str, r: int) -> str:
    da, db = json.loads(a), json.loads(b)
    if da["optimizer"] != db["optimizer"]:
        return f"rank 0 builds {da['optimizer']}, rank {r} {db['optimizer']}"
    ta, tb = da["tensors"], db["tensors"]
    if len(ta) != len(tb):
        return f"rank 0 has {len(ta)} parameters, rank {r} has {len(tb)}"
    for i, (x, y) in enumerate(zip(ta, tb)):
        if x != y:
            return (f"params[{i}] is {np.dtype(x[0]).name} {tuple(x[1])} on rank 0 but "
                    f"{np.dtype(y[0]).name} {tuple(y[1])} on rank {r}")
    if da["groups"] != db["groups"]:
        return f"the group sizes are {da['groups']} on rank 0 but {db['groups']} on rank {r}"
    if da["hyper"] != db["hyper"]:
        for gi, (x, y) in enumerate(zip(da["hyper"], db["hyper"])):
            for k in x:
                if x[k] != y.get(k):
                    return (f"param_groups[{gi}]['{k}'] is {x[k]} on rank 0 but {y.get(k)} "
                            f"on rank {r}")
    for k in sorted(set(da["options"]) | set(db["options"])):
        if da["options"].get(k) != db["options"].get(k):
            a, b = (d["options"].get(k, "not given") for d in (da, db))
            return f"{k} is {a} on rank 0 but {b} on rank {r}"
    return f"bucket_bytes is {da['bucket_bytes']} on rank 0 but {db['bucket_bytes']} on rank {r}"


def named_words(words):
    """A checkpoint's list of dtype words (``dtype.str``), the 16-bit float
    ones named, for a message; anything else as it is."""
    names = {dt.str: dt.name for dt in HALF}
    return [names.get(w, w) if isinstance(w, str) else w for w in words] if isinstance(
        words, list) else words


def check_inner_options(f, state_dtype) -> None:
    """The inner optimizer's state_dtype: float32 or 8-bit (the shards'
    states otherwise keep their parameters' dtype, or float32 with master
    weights; bfloat16 states stored apart are not sharded yet)."""
    dt = check_dtype(f, state_dtype)
    if dt is not None and dt != np.float32:
        raise ValueError(f"{f}: state_dtype={dt.name!r} is not available sharded: the "
                         f"shards' states keep their parameters' dtype (float32 with "
                         f"master_weights)")

def check_grads(f, grads, group_params, views, broadcast):
    """The step's gradients as one flat list, each checked against its
    parameter (dtype; shape, or broadcastable to it with ``broadcast``)."""
    per = split_counts(f, grads, [len(g) for g in group_params])
    grads = [g for gg in per for g in gg]
    for i, (g, p) in enumerate(zip(grads, views)):
        if g is None:
            continue
        if not isinstance(g, np.ndarray):
            raise TypeError(f"{f}: grads[{i}] must be a numpy.ndarray or None, got "
                            f"{type(g).__name__}")
        if g.dtype.newbyteorder("=") != p.dtype:
            raise TypeError(f"{f}: grads[{i}] has dtype {g.dtype} but params[{i}] has "
                            f"{p.dtype}; the gradient must match its parameter")
        if g.shape != p.shape and not broadcast:
            raise ValueError(f"{f}: grads[{i}] has shape {g.shape} but params[{i}] has "
                             f"shape {p.shape}; the gradient must have its parameter's "
                             f"shape (or build the optimizer with broadcast_grads=True "
                             f"to broadcast it)")
        if g.shape != p.shape:
            try:
                ok = np.broadcast_shapes(g.shape, p.shape) == p.shape
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(f"{f}: grads[{i}] with shape {g.shape} cannot be "
                                 f"broadcast to params[{i}]'s shape {p.shape}")
    return list(grads)
