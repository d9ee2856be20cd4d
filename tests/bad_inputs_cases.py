"""The catalogue of rejected inputs: one entry per case, shared by
tests/test_bad_inputs.py (which checks each exception, its exact message and
that no array changed) and tests/BAD_INPUTS.md (generated from this list:
`python tests/test_bad_inputs.py --write`).

Each case builds fresh arguments; earlier tensors of the long lists are valid
and in the fast path's form, so a fast path that wrote before declining, or a
slow path that wrote before raising, would show up as a changed array.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import math

import numpy as np

import fastopt

F32, F64 = np.float32, np.float64
LONG = 40   # tensors in the long-list cases; the bad one is the last


@dataclass(frozen=True)
class Case:
    func: str          # public name, e.g. "momentum"
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


M, A, G = "momentum", "adam", "adagrad"
LAST = LONG - 1

# ------------------------------------------------------------------ cases
# Messages are exact; {L} in `what` is replaced by the long-list size.

CASES = [
    # --- arrays: writability
    Case(M, "x read-only", lambda: mom(x=ro(arr())), ValueError,
         "fastopt.momentum: x is read-only; it is updated in place"),
    Case(M, "v read-only", lambda: mom(v=ro(arr(fill=0.0))), ValueError,
         "fastopt.momentum: v is read-only; it is updated in place"),
    Case(G, "h read-only", lambda: ada(h=ro(arr(fill=0.0))), ValueError,
         "fastopt.adagrad: h is read-only; it is updated in place"),
    Case(A, "h read-only", lambda: adm(h=ro(arr(fill=0.0))), ValueError,
         "fastopt.adam: h is read-only; it is updated in place"),
    Case(M, "x a read-only broadcast view", lambda: mom(x=np.broadcast_to(arr(), (2, 3)),
                                                       g=arr((2, 3)), v=arr((2, 3), fill=0.0)),
         ValueError, "fastopt.momentum: x is read-only; it is updated in place"),
    # --- arrays: dtypes
    Case(M, "x int32", lambda: mom(x=arr(dtype=np.int32), g=arr(dtype=np.int32),
                                   v=arr(dtype=np.int32)), TypeError,
         "fastopt.momentum: x has dtype int32; fastopt updates float32 or float64 arrays"),
    Case(M, "x int64", lambda: mom(x=arr(dtype=np.int64)), TypeError,
         "fastopt.momentum: x has dtype int64; fastopt updates float32 or float64 arrays"),
    Case(M, "x bool", lambda: mom(x=arr(dtype=np.bool_)), TypeError,
         "fastopt.momentum: x has dtype bool; fastopt updates float32 or float64 arrays"),
    Case(M, "x float16", lambda: mom(x=arr(dtype=np.float16), g=arr(dtype=np.float16),
                                     v=arr(dtype=np.float16)), TypeError,
         "fastopt.momentum: x has dtype float16; fastopt updates float32 or float64 arrays"),
    Case(M, "x complex64", lambda: mom(x=arr(dtype=np.complex64)), TypeError,
         "fastopt.momentum: x has dtype complex64; fastopt updates float32 or float64 arrays"),
    Case(M, "x complex128", lambda: mom(x=arr(dtype=np.complex128)), TypeError,
         "fastopt.momentum: x has dtype complex128; fastopt updates float32 or float64 arrays"),
    Case(M, "x object", lambda: mom(x=np.array([1.0, 2.0, 3.0], dtype=object)), TypeError,
         "fastopt.momentum: x has dtype object; fastopt updates float32 or float64 arrays"),
    Case(M, "x a structured dtype", lambda: mom(x=np.zeros(3, "f4,f4")), TypeError,
         "fastopt.momentum: x has dtype [('f0', '<f4'), ('f1', '<f4')]; fastopt updates "
         "float32 or float64 arrays"),
    Case(A, "x float16 (adam)", lambda: adm(x=arr(dtype=np.float16)), TypeError,
         "fastopt.adam: x has dtype float16; fastopt updates float32 or float64 arrays"),
    Case(M, "g float64 for a float32 x", lambda: mom(g=arr(dtype=F64)), TypeError,
         "fastopt.momentum: g has dtype float64 but x has float32; the gradient must "
         "match its parameter"),
    Case(M, "g int32", lambda: mom(g=arr(dtype=np.int32)), TypeError,
         "fastopt.momentum: g has dtype int32 but x has float32; the gradient must "
         "match its parameter"),
    Case(M, "v float64 for a float32 x", lambda: mom(v=arr(dtype=F64)), TypeError,
         "fastopt.momentum: v has dtype float64 but x has float32; the state must "
         "match its parameter"),
    Case(A, "h float32 for a float64 x", lambda: adm(x=arr(dtype=F64), g=arr(dtype=F64),
                                                    v=arr(dtype=F64)), TypeError,
         "fastopt.adam: h has dtype float32 but x has float64; the state must match "
         "its parameter"),
    Case(G, "h float16", lambda: ada(h=arr(dtype=np.float16)), TypeError,
         "fastopt.adagrad: h has dtype float16 but x has float32; the state must "
         "match its parameter"),
    # --- arrays: shapes
    Case(M, "v shape (4,) for x (3,)", lambda: mom(v=arr((4,))), ValueError,
         "fastopt.momentum: v has shape (4,) but x has shape (3,); the state must "
         "have its parameter's shape"),
    Case(M, "v shape (1, 3) for x (3,) (broadcastable is not enough)",
         lambda: mom(v=arr((1, 3))), ValueError,
         "fastopt.momentum: v has shape (1, 3) but x has shape (3,); the state must "
         "have its parameter's shape"),
    Case(A, "h shape (3, 1) for x (3,)", lambda: adm(h=arr((3, 1))), ValueError,
         "fastopt.adam: h has shape (3, 1) but x has shape (3,); the state must have "
         "its parameter's shape"),
    Case(M, "g shape (2,) for x (3,)", lambda: mom(g=arr((2,))), ValueError,
         "fastopt.momentum: g with shape (2,) cannot be broadcast to x's shape (3,)"),
    Case(M, "g shape (2, 3) for x (3,) (g larger than x)", lambda: mom(g=arr((2, 3))),
         ValueError,
         "fastopt.momentum: g with shape (2, 3) cannot be broadcast to x's shape (3,)"),
    Case(G, "g shape (3, 2) for x (2, 3)",
         lambda: ada(x=arr((2, 3)), g=arr((3, 2)), h=arr((2, 3))), ValueError,
         "fastopt.adagrad: g with shape (3, 2) cannot be broadcast to x's shape (2, 3)"),
    # --- containers
    Case(M, "empty lists", lambda: (([], [], []), {"lr": 0.1, "t": 0}), ValueError,
         "fastopt.momentum: x is an empty list; give at least one tensor"),
    Case(A, "empty tuples", lambda: (((), (), (), ()), {"lr": 0.1, "t": 1}), ValueError,
         "fastopt.adam: x is an empty tuple; give at least one tensor"),
    Case(M, "g list shorter than x", lambda: (([arr(), arr()], [arr()], [arr(), arr()]),
                                              {"lr": 0.1, "t": 0}), ValueError,
         "fastopt.momentum: g has 1 tensors but x has 2; every list must have one entry "
         "per parameter"),
    Case(A, "h list longer than x", lambda: (([arr()], [arr()], [arr()], [arr(), arr()]),
                                             {"lr": 0.1, "t": 1}), ValueError,
         "fastopt.adam: h has 2 tensors but x has 1; every list must have one entry "
         "per parameter"),
    Case(M, "g a single array while x is a list", lambda: (([arr()], arr(), [arr()]),
                                                           {"lr": 0.1, "t": 0}), TypeError,
         "fastopt.momentum: g is a single array but x is a list of 1; pass g as a list "
         "of the same length"),
    Case(M, "v a list while x is a single array", lambda: mom(v=[arr()]), TypeError,
         "fastopt.momentum: v is a list but x is a single array; pass v as a single "
         "array too"),
    # --- not arrays
    Case(M, "x a Python float", lambda: mom(x=1.0), TypeError,
         "fastopt.momentum: x must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got float"),
    Case(M, "x None", lambda: ((None, arr(), arr()), {"lr": 0.1, "t": 0}), TypeError,
         "fastopt.momentum: x must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got NoneType"),
    Case(M, "x a dict of arrays", lambda: mom(x={"w": arr()}), TypeError,
         "fastopt.momentum: x must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got dict"),
    Case(M, "x a list of Python floats", lambda: (([1.0, 2.0], [arr(), arr()],
                                                   [arr(), arr()]), {"lr": 0.1, "t": 0}),
         TypeError, "fastopt.momentum: x[0] must be a numpy.ndarray, got float"),
    Case(M, "g a Python list of numbers for an array x", lambda: mom(g=[0.5, 0.5, 0.5]),
         TypeError, "fastopt.momentum: g is a list but x is a single array; pass g as a "
                    "single array too"),
    Case(G, "h a memoryview", lambda: ada(h=memoryview(arr(fill=0.0))), TypeError,
         "fastopt.adagrad: h must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got memoryview"),
    Case(A, "h[0] None in a list (used to crash in the C kernel)",
         lambda: (([arr()], [arr()], [arr()], [None]), {"lr": 0.1, "t": 1}), TypeError,
         "fastopt.adam: h[0] must be a numpy.ndarray, got NoneType"),
    Case(A, "v[1] None in a list", lambda: (([arr(), arr()], [arr(), arr()], [arr(), None],
                                             [arr(), arr()]), {"lr": 0.1, "t": 1}),
         TypeError, "fastopt.adam: v[1] must be a numpy.ndarray, got NoneType"),
    # --- memory sharing
    Case(M, "v is x", lambda: (lambda x: mom(x=x, v=x))(arr()), ValueError,
         "fastopt.momentum: x and v share memory; every parameter and state must have "
         "memory of its own"),
    Case(M, "x and v overlapping views of one buffer", lambda: (lambda p: mom(x=p[0], v=p[1]))
         (shared_pair()), ValueError,
         "fastopt.momentum: x and v share memory; every parameter and state must have "
         "memory of its own"),
    Case(A, "v is h", lambda: (lambda s: adm(v=s, h=s))(arr(fill=0.0)), ValueError,
         "fastopt.adam: v and h share memory; every parameter and state must have memory "
         "of its own"),
    Case(M, "x[0] and x[1] the same array", lambda: (lambda x: (([x, x], [arr(), arr()],
                                                                 [arr(), arr()]),
                                                                {"lr": 0.1, "t": 0}))(arr()),
         ValueError, "fastopt.momentum: x[0] and x[1] share memory; every parameter and "
                     "state must have memory of its own"),
    Case(M, "g partially overlapping x", lambda: (lambda p: mom(x=p[0], g=p[1]))
         (partial_g()), ValueError,
         "fastopt.momentum: g partially overlaps x, which is written; pass a copy of the "
         "gradient"),
    Case(A, "g partially overlapping h", lambda: (lambda b: adm(g=b[1:4], h=b[:3]))
         (np.zeros(6, F32)), ValueError,
         "fastopt.adam: g partially overlaps h, which is written; pass a copy of the "
         "gradient"),
    Case(M, "x a writeable zero-stride view (its elements share memory)",
         lambda: mom(x=np.lib.stride_tricks.as_strided(arr(), (3,), (0,), writeable=True)),
         ValueError, "fastopt.momentum: x has elements that share memory (a broadcast or "
                     "as_strided view); an updated array needs memory of its own for every "
                     "element"),
    Case(G, "h an overlapping as_strided view",
         lambda: ada(x=arr((2, 2)), g=arr((2, 2)), h=np.lib.stride_tricks.as_strided(
             arr(fill=0.0), (2, 2), (4, 4), writeable=True)), ValueError,
         "fastopt.adagrad: h has elements that share memory (a broadcast or as_strided "
         "view); an updated array needs memory of its own for every element"),
    # --- scalars: t
    Case(M, "t = -1", lambda: mom(t=-1), ValueError,
         "fastopt.momentum: t must be >= 0 (it counts updates), got -1"),
    Case(A, "t = -1 (adam)", lambda: adm(t=-1), ValueError,
         "fastopt.adam: t must be >= 0 (it counts updates), got -1"),
    Case(G, "t = -5 (adagrad)", lambda: ada(t=-5), ValueError,
         "fastopt.adagrad: t must be >= 0 (it counts updates), got -5"),
    Case(M, "t = 2**63", lambda: mom(t=2**63), ValueError,
         "fastopt.momentum: t must be < 2**63 (ONNX T is int64), got 9223372036854775808"),
    Case(M, "t a float", lambda: mom(t=1.0), TypeError,
         "fastopt.momentum: t must be an integer, got float"),
    Case(M, "t a bool", lambda: mom(t=True), TypeError,
         "fastopt.momentum: t must be an integer, got bool"),
    Case(M, "t a str", lambda: mom(t="1"), TypeError,
         "fastopt.momentum: t must be an integer, got str"),
    Case(M, "t a float array", lambda: mom(t=np.array(1.0)), TypeError,
         "fastopt.momentum: t must be an integer or a one-element integer array, got an "
         "array of shape () and dtype float64"),
    # --- scalars: lr
    Case(M, "lr = -0.1", lambda: mom(lr=-0.1), ValueError,
         "fastopt.momentum: lr must be a finite number >= 0, got -0.1"),
    Case(M, "lr = NaN", lambda: mom(lr=float("nan")), ValueError,
         "fastopt.momentum: lr must be a finite number >= 0, got nan"),
    Case(M, "lr = inf", lambda: mom(lr=float("inf")), ValueError,
         "fastopt.momentum: lr must be a finite number >= 0, got inf"),
    Case(G, "lr = -inf (adagrad)", lambda: ada(lr=float("-inf")), ValueError,
         "fastopt.adagrad: lr must be a finite number >= 0, got -inf"),
    Case(A, "lr = NaN as a float32 0-d array (adam)", lambda: adm(lr=np.array(np.nan, F32)),
         ValueError, "fastopt.adam: lr must be a finite number >= 0, got nan"),
    Case(M, "lr = 10**400 (an int beyond float range)", lambda: mom(lr=10**400), ValueError,
         "fastopt.momentum: lr must be a finite number >= 0, got inf"),
    Case(M, "lr a str", lambda: mom(lr="0.1"), TypeError,
         "fastopt.momentum: lr must be a real number, got str"),
    Case(M, "lr None", lambda: mom(lr=None), TypeError,
         "fastopt.momentum: lr must be a real number, got NoneType"),
    Case(M, "lr a bool", lambda: mom(lr=True), TypeError,
         "fastopt.momentum: lr must be a real number, got bool"),
    Case(M, "lr complex", lambda: mom(lr=0.1 + 0j), TypeError,
         "fastopt.momentum: lr must be a real number, got complex"),
    Case(M, "lr a two-element array", lambda: mom(lr=np.array([0.1, 0.2])), TypeError,
         "fastopt.momentum: lr must be a real number or a one-element real array, got an "
         "array of shape (2,) and dtype float64"),
    # --- scalars: hyperparameters
    Case(M, "mode 'Nesterov' (case matters)", lambda: mom(mode="Nesterov"), ValueError,
         "fastopt.momentum: mode must be 'standard' or 'nesterov', got 'Nesterov'"),
    Case(M, "mode 'sgd'", lambda: mom(mode="sgd"), ValueError,
         "fastopt.momentum: mode must be 'standard' or 'nesterov', got 'sgd'"),
    Case(M, "mode b'standard' (bytes)", lambda: mom(mode=b"standard"), TypeError,
         "fastopt.momentum: mode must be a str, got bytes"),
    Case(M, "mode None", lambda: mom(mode=None), TypeError,
         "fastopt.momentum: mode must be a str, got NoneType"),
    Case(M, "alpha = NaN", lambda: mom(alpha=float("nan")), ValueError,
         "fastopt.momentum: alpha must be finite, got nan"),
    Case(M, "beta = inf", lambda: mom(beta=float("inf")), ValueError,
         "fastopt.momentum: beta must be finite, got inf"),
    Case(M, "norm_coefficient a str", lambda: mom(norm_coefficient="0"), TypeError,
         "fastopt.momentum: norm_coefficient must be a real number, got str"),
    Case(G, "decay_factor = -1", lambda: ada(decay_factor=-1.0), ValueError,
         "fastopt.adagrad: decay_factor must be >= 0.0, got -1.0"),
    Case(G, "epsilon = -1e-6", lambda: ada(epsilon=-1e-6), ValueError,
         "fastopt.adagrad: epsilon must be >= 0.0, got -1e-06"),
    Case(G, "epsilon = NaN", lambda: ada(epsilon=float("nan")), ValueError,
         "fastopt.adagrad: epsilon must be finite, got nan"),
    Case(A, "alpha = 1 with t > 0 (bias correction divides by zero)",
         lambda: adm(alpha=1.0, t=1), ValueError,
         "fastopt.adam: alpha must be < 1.0, got 1.0"),
    Case(A, "alpha = 1.5", lambda: adm(alpha=1.5, t=0), ValueError,
         "fastopt.adam: alpha must be <= 1.0, got 1.5"),
    Case(A, "alpha = -0.1", lambda: adm(alpha=-0.1), ValueError,
         "fastopt.adam: alpha must be >= 0.0, got -0.1"),
    Case(A, "beta = 1.5", lambda: adm(beta=1.5), ValueError,
         "fastopt.adam: beta must be <= 1.0, got 1.5"),
    Case(A, "epsilon = -1", lambda: adm(epsilon=-1.0), ValueError,
         "fastopt.adam: epsilon must be >= 0.0, got -1.0"),
    Case(A, "norm_coefficient_post = NaN", lambda: adm(norm_coefficient_post=float("nan")),
         ValueError, "fastopt.adam: norm_coefficient_post must be finite, got nan"),
    # --- n_threads
    Case(M, "n_threads = 0", lambda: mom(n_threads=0), ValueError,
         "fastopt.momentum: n_threads must be a positive int up to 1024, -1 (all cores) or "
         "None (the default), got 0"),
    Case(G, "n_threads = -2", lambda: ada(n_threads=-2), ValueError,
         "fastopt.adagrad: n_threads must be a positive int up to 1024, -1 (all cores) or "
         "None (the default), got -2"),
    Case(A, "n_threads = 2.0", lambda: adm(n_threads=2.0), TypeError,
         "fastopt.adam: n_threads must be an int or None, got float"),
    Case(M, "n_threads = 2000 (above the cap of 1024)", lambda: mom(n_threads=2000),
         ValueError, "fastopt.momentum: n_threads must be a positive int up to 1024, -1 (all "
                     "cores) or None (the default), got 2000"),
    Case(M, "n_threads = True", lambda: mom(n_threads=True), TypeError,
         "fastopt.momentum: n_threads must be an int or None, got bool"),
    # --- Python's own argument checks
    Case(M, "lr missing", lambda: ((arr(), arr(), arr()), {"t": 0}), TypeError,
         "momentum() missing 1 required keyword-only argument: 'lr'"),
    Case(A, "h missing", lambda: ((arr(), arr(), arr()), {"lr": 0.1, "t": 1}), TypeError,
         "adam() missing 1 required positional argument: 'h'"),
    Case(M, "lr and t passed positionally", lambda: ((arr(), arr(), arr(), 0.1, 0), {}),
         TypeError, "momentum() takes 3 positional arguments but 5 were given"),
    Case(G, "an unknown keyword", lambda: ada(momentum=0.9), TypeError,
         "adagrad() got an unexpected keyword argument 'momentum'"),
    # --- the bad tensor at the end of a long list
    Case(M, "x[{L}] read-only at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: ro(xs[LAST])), ValueError,
         f"fastopt.momentum: x[{LAST}] is read-only; it is updated in place"),
    Case(M, "v[{L}] of the wrong shape at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(vs, LAST, arr((2, 2)))), ValueError,
         f"fastopt.momentum: v[{LAST}] has shape (2, 2) but x[{LAST}] has shape (1,); the "
         f"state must have its parameter's shape"),
    Case(M, "g[{L}] not broadcastable at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(gs, LAST, arr((2,)))), ValueError,
         f"fastopt.momentum: g[{LAST}] with shape (2,) cannot be broadcast to x[{LAST}]'s "
         f"shape (1,)"),
    Case(M, "g[{L}] float64 at the end of a float32 list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(gs, LAST, arr((1,), F64))), TypeError,
         f"fastopt.momentum: g[{LAST}] has dtype float64 but x[{LAST}] has float32; the "
         f"gradient must match its parameter"),
    Case(M, "x[{L}] int32 at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(xs, LAST, arr((1,), np.int32))),
         TypeError, f"fastopt.momentum: x[{LAST}] has dtype int32; fastopt updates float32 "
                    f"or float64 arrays"),
    Case(M, "v[{L}] not an array at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(vs, LAST, [0.0])), TypeError,
         f"fastopt.momentum: v[{LAST}] must be a numpy.ndarray, got list"),
    Case(M, "v[{L}] sharing memory with x[0] at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(vs, LAST, xs[0])), ValueError,
         f"fastopt.momentum: x[0] and v[{LAST}] share memory; every parameter and state "
         f"must have memory of its own"),
    Case(M, "g[{L}] partially overlapping x[0] at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: (setitem(xs, 0, np.ones(8, F32)[:4]),
                                              setitem(gs, 0, arr((4,))),
                                              setitem(vs, 0, arr((4,))),
                                              setitem(gs, LAST, xs[0].base[3:4]))),
         ValueError,
         f"fastopt.momentum: g[{LAST}] partially overlaps x[0], which is written; pass a "
         f"copy of the gradient"),
    Case(A, "h[{L}] read-only at the end of a list of {N}",
         lambda: long_adam(lambda xs, gs, vs, hs: ro(hs[LAST])), ValueError,
         f"fastopt.adam: h[{LAST}] is read-only; it is updated in place"),
    Case(A, "h[{L}] float64 at the end of a float32 list of {N}",
         lambda: long_adam(lambda xs, gs, vs, hs: setitem(hs, LAST, arr((1,), F64))),
         TypeError, f"fastopt.adam: h[{LAST}] has dtype float64 but x[{LAST}] has "
                    f"float32; the state must match its parameter"),
    # --- the thread-count context manager
    Case("set_num_threads", "n_threads = 0", lambda: ((0,), {}), ValueError,
         "fastopt.set_num_threads: n_threads must be a positive int up to 1024, -1 (all "
         "cores) or None (the default), got 0"),
    Case("set_num_threads", "n_threads a str", lambda: (("2",), {}), TypeError,
         "fastopt.set_num_threads: n_threads must be an int or None, got str"),
]

# ------------------------------------------------------- fastopt.schedules

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


# ------------------------------------------------ fastopt.agc / unitwise_norm

def agc_args(x=None, g=None, **kw):
    x = arr((3, 4)) if x is None else x
    g = arr((3, 4), fill=0.5) if g is None else g
    return (x, g), kw


def fused(**kw):
    base = {"lr": 0.1, "t": 1, "clipping": 0.01}
    base.update(kw)
    return (arr((3, 4)), arr((3, 4), fill=0.5), arr((3, 4), fill=0.0)), base


LAYOUT_MSG = ("layout must be 'oi' (PyTorch: OI, OIHW; the unit is everything but the "
              "first axis) or 'io' (JAX/Haiku: IO, HWIO; everything but the last axis), "
              "got ")
AGC_CASES = [
    Case("agc", "layout 'OI' (case matters)", lambda: agc_args(layout="OI"), ValueError,
         "fastopt.agc: " + LAYOUT_MSG + "'OI'"),
    Case("agc", "layout None", lambda: agc_args(layout=None), TypeError,
         "fastopt.agc: layout must be a str, got NoneType"),
    Case("agc", "clipping = 0", lambda: agc_args(clipping=0.0), ValueError,
         "fastopt.agc: clipping must be > 0.0, got 0.0"),
    Case("agc", "clipping = -1", lambda: agc_args(clipping=-1.0), ValueError,
         "fastopt.agc: clipping must be > 0.0, got -1.0"),
    Case("agc", "clipping = NaN", lambda: agc_args(clipping=math.nan), ValueError,
         "fastopt.agc: clipping must be finite, got nan"),
    Case("agc", "clipping a bool", lambda: agc_args(clipping=True), TypeError,
         "fastopt.agc: clipping must be a real number, got bool"),
    Case("agc", "eps = 0", lambda: agc_args(eps=0.0), ValueError,
         "fastopt.agc: eps must be > 0.0, got 0.0"),
    Case("agc", "a per-tensor clipping list of the wrong length",
         lambda: (([arr((3, 4)), arr((2,))], [arr((3, 4)), arr((2,))]), {"clipping": [0.1]}),
         ValueError, "fastopt.agc: clipping has 1 entries but x has 2 tensors; give one "
                     "value per tensor (None excludes a tensor from clipping)"),
    Case("agc", "clipping[1] = -1 in a per-tensor list",
         lambda: (([arr((3, 4)), arr((2,))], [arr((3, 4)), arr((2,))]),
                  {"clipping": [0.1, -1.0]}), ValueError,
         "fastopt.agc: clipping[1] must be > 0.0, got -1.0"),
    Case("agc", "g read-only (it is clipped in place)",
         lambda: agc_args(g=ro(arr((3, 4), fill=0.5))), ValueError,
         "fastopt.agc: g is read-only; it is clipped in place"),
    Case("agc", "g of a broadcastable but different shape",
         lambda: agc_args(g=arr((1, 4))), ValueError,
         "fastopt.agc: g has shape (1, 4) but x has shape (3, 4); the gradient is clipped "
         "in place, so it must have its parameter's shape"),
    Case("agc", "g float64 for a float32 x", lambda: agc_args(g=arr((3, 4), F64)), TypeError,
         "fastopt.agc: g has dtype float64 but x has float32; the gradient must match its "
         "parameter"),
    Case("agc", "x int64", lambda: agc_args(x=arr((3, 4), np.int64)), TypeError,
         "fastopt.agc: x has dtype int64; fastopt works on float32 or float64 arrays"),
    Case("agc", "g is x", lambda: (lambda a: agc_args(x=a, g=a))(arr((3, 4))), ValueError,
         "fastopt.agc: g shares memory with x; the gradient is clipped in place while the "
         "parameter is read, so pass a copy of one"),
    Case("agc", "g[0] and g[1] the same array",
         lambda: (lambda g: (([arr((3, 4)), arr((3, 4))], [g, g]), {}))(arr((3, 4))),
         ValueError, "fastopt.agc: g[0] and g[1] share memory; every gradient is clipped in "
                     "place and must have memory of its own"),
    Case("agc", "n_threads = 0", lambda: agc_args(n_threads=0), ValueError,
         "fastopt.agc: n_threads must be a positive int up to 1024, -1 (all cores) or None "
         "(the default), got 0"),
    Case("unitwise_norm", "layout 'xy'", lambda: ((arr((3, 4)),), {"layout": "xy"}),
         ValueError, "fastopt.unitwise_norm: " + LAYOUT_MSG + "'xy'"),
    Case("unitwise_norm", "a list of arrays", lambda: (([arr((3, 4))],), {}), TypeError,
         "fastopt.unitwise_norm: x must be a numpy.ndarray, got list"),
    Case("unitwise_norm", "x int64", lambda: ((arr((3,), np.int64),), {}), TypeError,
         "fastopt.unitwise_norm: x has dtype int64; fastopt works on float32 or float64 "
         "arrays"),
    Case(M, "clipping = 0 (fused AGC)", lambda: fused(clipping=0.0), ValueError,
         "fastopt.momentum: clipping must be > 0.0, got 0.0"),
    Case(M, "clip_eps = -1 (fused AGC)", lambda: fused(clip_eps=-1.0), ValueError,
         "fastopt.momentum: clip_eps must be > 0.0, got -1.0"),
    Case(M, "layout 'ji' (fused AGC)", lambda: fused(layout="ji"), ValueError,
         "fastopt.momentum: " + LAYOUT_MSG + "'ji'"),
    Case(M, "a clipping list longer than x (fused AGC)",
         lambda: (([arr((3, 4))], [arr((3, 4))], [arr((3, 4), fill=0.0)]),
                  {"lr": 0.1, "t": 1, "clipping": [0.1, 0.2]}), ValueError,
         "fastopt.momentum: clipping has 2 entries but x has 1 tensor; give one value per "
         "tensor (None excludes a tensor from clipping)"),
]


# --------------------------------------------------------- fastopt.optim

def _optim():
    from fastopt import optim
    return optim


def opt_ctor(*params, **kw):
    return lambda: ((list(params),), kw)


def opt_call(cls, method, *args, **kw):
    """Arguments for a method call on a fresh optimizer over two parameters."""
    def build():
        opt = getattr(_optim(), cls)([arr(), arr((2, 3), F64)], lr=0.1)
        opt.step([arr(fill=0.5), arr((2, 3), F64, 0.5)])   # non-trivial state
        return (opt,) + tuple(a() if callable(a) else a for a in args), kw
    return build


def other_state_dict():
    return _optim().Adam([arr(), arr((2, 3), F64)], lr=0.1).state_dict()


def bad_steps_state_dict():
    sd = _optim().Momentum([arr(), arr((2, 3), F64)], lr=0.1).state_dict()
    sd["steps"] = -1
    return sd


try:
    from fastopt.optim import CheckpointError
except ImportError:  # pragma: no cover - before fastopt.optim existed
    CheckpointError = ValueError

OP = "fastopt.optim."
OPTIM_CASES = [
    Case("optim.Momentum", "params a single array (not a list)",
         lambda: ((arr(),), {"lr": 0.1}), TypeError,
         OP + "Momentum: params must be a list of arrays or a list of parameter groups "
              "(dicts with 'params'), got ndarray"),
    Case("optim.Momentum", "params empty", lambda: (([],), {"lr": 0.1}), ValueError,
         OP + "Momentum: params is empty; give at least one parameter"),
    Case("optim.Momentum", "neither lr nor schedule", opt_ctor(arr()), ValueError,
         OP + "Momentum: give lr, or a schedule that supplies it"),
    Case("optim.Momentum", "both lr and schedule",
         opt_ctor(arr(), lr=0.1, schedule=abs), ValueError,
         OP + "Momentum: give lr or schedule, not both: the schedule supplies the learning "
              "rate of every step"),
    Case("optim.Adam", "lr = -0.1", opt_ctor(arr(), lr=-0.1), ValueError,
         OP + "Adam: lr must be a finite number >= 0, got -0.1"),
    Case("optim.Adagrad", "a group with an unknown key",
         lambda: (([{"params": [arr()], "momentum": 0.9}],), {"lr": 0.1}), ValueError,
         OP + "Adagrad: param_groups[0] has unknown key(s) ['momentum']; Adagrad takes "
              "['decay_factor', 'epsilon', 'initial_accumulator_value', 'lr', "
              "'norm_coefficient', 'schedule']"),
    Case("optim.Adagrad", "arrays and groups mixed",
         lambda: (([arr(), {"params": [arr()]}],), {"lr": 0.1}), TypeError,
         OP + "Adagrad: params mixes arrays and parameter groups; give a list of arrays or "
              "a list of dicts"),
    Case("optim.Adam", "the same parameter twice",
         lambda: (lambda p: (([p, p],), {"lr": 0.1}))(arr()), ValueError,
         OP + "Adam: params[0] and params[1] share memory; every parameter and state must "
              "have memory of its own (a parameter may appear only once)"),
    Case("optim.Adam", "a read-only parameter", lambda: (([arr(), ro(arr())],), {"lr": 0.1}),
         ValueError, OP + "Adam: params[1] is read-only; it is updated in place"),
    Case("optim.Adam", "an int64 parameter",
         lambda: (([arr(), arr(dtype=np.int64)],), {"lr": 0.1}), TypeError,
         OP + "Adam: params[1] has dtype int64; fastopt updates float32 or float64 arrays"),
    Case("optim.Momentum", "nesterov = 1 (not a bool)", opt_ctor(arr(), lr=0.1, nesterov=1),
         TypeError, OP + "Momentum: nesterov must be True or False, got int"),
    Case("optim.Momentum", "schedule not callable", opt_ctor(arr(), schedule=0.1), TypeError,
         OP + "Momentum: schedule must be a callable step -> lr (or None), got float"),
    Case("optim.Momentum.step", "one gradient for two parameters",
         opt_call("Momentum", "step", lambda: [arr()]), ValueError,
         OP + "Momentum.step: grads has 1 entries but the optimizer has 2 parameters; give "
              "one gradient (or None) per parameter"),
    Case("optim.Momentum.step", "grads[1] of the wrong dtype",
         opt_call("Momentum", "step", lambda: [arr(), arr((2, 3), F32)]), TypeError,
         OP + "Momentum.step: grads[1] has dtype float32 but params[1] has float64; the "
              "gradient must match its parameter"),
    Case("optim.Momentum.step", "grads[1] not broadcastable",
         opt_call("Momentum", "step", lambda: [arr(), arr((3, 2), F64)]), ValueError,
         OP + "Momentum.step: grads[1] with shape (3, 2) cannot be broadcast to params[1]'s "
              "shape (2, 3)"),
    Case("optim.Momentum.step", "grads[1] a str",
         opt_call("Momentum", "step", lambda: [arr(), "g"]), TypeError,
         OP + "Momentum.step: grads[1] must be a numpy.ndarray or None, got str"),
    Case("optim.Momentum.step", "grad_scale = 0",
         opt_call("Momentum", "step", lambda: [arr(), arr((2, 3), F64)], grad_scale=0.0),
         ValueError, OP + "Momentum.step: grad_scale must be > 0.0, got 0.0"),
    Case("optim.Momentum.step", "grad_scale = nan",
         opt_call("Momentum", "step", lambda: [arr(), arr((2, 3), F64)], grad_scale=math.nan),
         ValueError, OP + "Momentum.step: grad_scale must be finite, got nan"),
    Case("optim.Momentum.step", "max_grad_norm = 0",
         opt_call("Momentum", "step", lambda: [arr(), arr((2, 3), F64)], max_grad_norm=0.0),
         ValueError, OP + "Momentum.step: max_grad_norm must be > 0 (inf: no clipping), "
                          "got 0.0"),
    Case("optim.AdamW.step", "max_grad_norm = nan",
         opt_call("AdamW", "step", lambda: [arr(), arr((2, 3), F64)], max_grad_norm=math.nan),
         ValueError, OP + "AdamW.step: max_grad_norm must be > 0 (inf: no clipping), "
                          "got nan"),
    Case("optim.AdamW.step", "norm_type = 1",
         opt_call("AdamW", "step", lambda: [arr(), arr((2, 3), F64)], max_grad_norm=1.0,
                  norm_type=1),
         ValueError, OP + "AdamW.step: norm_type must be 2.0 or math.inf, got 1"),
    Case("optim.Momentum.load_state_dict", "another optimizer's state",
         opt_call("Momentum", "load_state_dict", other_state_dict), CheckpointError,
         OP + "Momentum.load_state_dict: the checkpoint was saved by fastopt.optim.Adam, "
              "not Momentum"),
    Case("optim.Momentum.load_state_dict", "a step count of -1",
         opt_call("Momentum", "load_state_dict", bad_steps_state_dict), CheckpointError,
         OP + "Momentum.load_state_dict: the checkpoint's step count must be an integer "
              ">= 0, got -1"),
]
