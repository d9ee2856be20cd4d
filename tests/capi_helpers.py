"""ctypes records of the published C API's structs (fastopt.capi), for the
tests that call the capsule's entry points directly."""
import ctypes as ct

import numpy as np

import fastopt.capi as capi
from fastopt import _dtypes

S = capi.ctypes_structs()
F = capi.ctypes_functions()
C = capi.manifest()["constants"]
RULE = {r: C["FASTOPT_RULE_" + r.upper()] for r in
        ("momentum", "sgd_torch", "adam_torch", "adamw_torch", "adagrad_torch", "lion")}


def new(name, **fields):
    """A struct with its size set and the given fields."""
    rec = S[name]()
    rec.size = ct.sizeof(S[name])
    for k, v in fields.items():
        setattr(rec, k, v)
    return rec


def dt(a):
    return _dtypes.CODE[a.dtype.newbyteorder("=")]


def ptr(a):
    return None if a is None else a.ctypes.data


def tensor(x, g, s1=None, s2=None, s3=None, group=0, **kw):
    return new("fastopt_tensor", x=ptr(x), g=ptr(g), s1=ptr(s1), s2=ptr(s2), s3=ptr(s3),
               n=x.size, dtype=dt(x), gdtype=dt(g), group=group, **kw)


def adam_group(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, step=1):
    return new("fastopt_group", rule=RULE["adam_torch"], t=step, lr=lr, alpha=betas[0],
               beta=betas[1], eps=eps, decay=weight_decay)


def opts(**kw):
    kw.setdefault("grad_scale", 1.0)
    return new("fastopt_opts", **kw)


def result():
    return new("fastopt_result")


def step(tensors, groups, o=None, n_threads=1):
    """fastopt_step over lists of records; returns (rc, result)."""
    ts = (S["fastopt_tensor"] * max(1, len(tensors)))(*tensors)
    gs = (S["fastopt_group"] * max(1, len(groups)))(*groups)
    res = result()
    rc = F["step"](ts, len(tensors), gs, len(groups), ct.byref(o or opts()), ct.byref(res),
                   n_threads)
    return rc, res


def grad_lists(gs):
    n = max(1, len(gs))
    return ((ct.c_void_p * n)(*[g.ctypes.data for g in gs]),
            (ct.c_int64 * n)(*[g.size for g in gs]),
            (ct.c_int32 * n)(*[dt(g) for g in gs]))


def adam_arrays(n, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    m = (0.1 * rng.standard_normal(n)).astype(dtype)
    v = np.abs(0.1 * rng.standard_normal(n)).astype(dtype)
    return x, g, m, v
