"""The catalogue's vocabulary: a Case (function, the bad input in words, a
builder of fresh arguments, the exception and its exact message) and the
builders of valid arguments that each case spoils in one place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

import fastopt

F32, F64 = np.float32, np.float64
LONG = 40   # tensors in the long-list cases; the bad one is the last


@dataclass(frozen=True)
class Case:
    func: str          # public name, e.g. "onnx_momentum"
    what: str          # the bad input, in words (the catalogue's first column)
    build: Callable    # () -> (args, kwargs)
    exc: type
    message: str

    def call(self):
        args, kwargs = self.build()
        return args, kwargs, _resolve(self.func)


def _resolve(name):
    obj = fastopt
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


# --------------------------------------------------------------- builders

def arr(shape=(3,), dtype=F32, fill=1.0):
    return np.full(shape, fill, dtype)


def ro(a):
    a.flags.writeable = False
    return a


def mom(x=None, g=None, v=None, **kw):
    """momentum arguments with defaults for what is not given."""
    x = arr() if x is None else x
    g = arr(fill=0.5) if g is None else g
    v = arr(fill=0.0) if v is None else v
    base = {"lr": 0.1, "t": 1}
    base.update(kw)
    return (x, g, v), base


def ada(x=None, g=None, h=None, **kw):
    x = arr() if x is None else x
    g = arr(fill=0.5) if g is None else g
    h = arr(fill=0.0) if h is None else h
    base = {"lr": 0.1, "t": 1}
    base.update(kw)
    return (x, g, h), base


def adm(x=None, g=None, v=None, h=None, **kw):
    x = arr() if x is None else x
    g = arr(fill=0.5) if g is None else g
    v = arr(fill=0.0) if v is None else v
    h = arr(fill=0.0) if h is None else h
    base = {"lr": 0.1, "t": 1}
    base.update(kw)
    return (x, g, v, h), base


def long_lists(n_states=1, dtype=F32):
    """LONG valid tensors of mixed sizes: xs, gs, [states...]."""
    sizes = [(i % 7) * 5 + 1 for i in range(LONG - 1)] + [1]   # the last has shape (1,)
    xs = [arr((s,), dtype, 1.0 + i) for i, s in enumerate(sizes)]
    gs = [arr((s,), dtype, 0.25) for s in sizes]
    ss = [[arr((s,), dtype, 0.5) for s in sizes] for _ in range(n_states)]
    return xs, gs, ss


def long_mom(mutate):
    xs, gs, (vs,) = long_lists()
    mutate(xs, gs, vs)
    return (xs, gs, vs), {"lr": 0.1, "t": 3}


def long_adam(mutate):
    xs, gs, (vs, hs) = long_lists(2)
    mutate(xs, gs, vs, hs)
    return (xs, gs, vs, hs), {"lr": 0.1, "t": 3}


def setitem(lst, i, value):
    lst[i] = value


def shared_pair():
    base = np.zeros(6, F32)
    return base[:3], base[2:5]


def partial_g():
    base = np.ones(6, F32)
    return base[:3], base[1:4]


M, A, G = "onnx_momentum", "onnx_adam", "onnx_adagrad"
LAST = LONG - 1
