"""Rejected inputs of fastopt.onnx_momentum / adagrad / adam.
"""
from __future__ import annotations

import numpy as np

from bad_inputs.builders import (
    F32,
    F64,
    LAST,
    A,
    Case,
    G,
    M,
    ada,
    adm,
    arr,
    long_adam,
    long_mom,
    mom,
    partial_g,
    ro,
    setitem,
    shared_pair,
)
from fastopt import State8bit

# Messages are exact; {L} in `what` is replaced by the long-list size.


def adw(m=None, v=None, **kw):
    """adamw (and lamb) arguments: float32 parameters with bfloat16 states."""
    from fastopt._dtypes import DTYPES
    bf16 = DTYPES[2].numpy
    m = np.zeros(3, bf16) if m is None else m
    v = np.zeros(3, bf16) if v is None else v
    return (arr(), arr(fill=0.5), m, v), dict({"step": 1}, **kw)

def q8(m=None, v=None, **kw):
    """adamw (and adamax) arguments: float32 parameters with 8-bit states."""
    m = State8bit.zeros(3) if m is None else m
    v = State8bit.zeros(3, signed=False) if v is None else v
    return (arr(), arr(fill=0.5), m, v), dict({"step": 1}, **kw)


#: The advice after a number, NumPy scalar or list of numbers given for an array.
NUMBERS_HINT = "; convert it with np.asarray(..., dtype=...) to an array of its parameter's dtype"

CASES = [
    # --- arrays: writability
    Case(M, "x read-only", lambda: mom(x=ro(arr())), ValueError,
         "fastopt.onnx_momentum: x is read-only; it is updated in place"),
    Case(M, "v read-only", lambda: mom(v=ro(arr(fill=0.0))), ValueError,
         "fastopt.onnx_momentum: v is read-only; it is updated in place"),
    Case(G, "h read-only", lambda: ada(h=ro(arr(fill=0.0))), ValueError,
         "fastopt.onnx_adagrad: h is read-only; it is updated in place"),
    Case(A, "h read-only", lambda: adm(h=ro(arr(fill=0.0))), ValueError,
         "fastopt.onnx_adam: h is read-only; it is updated in place"),
    Case(M, "x a read-only broadcast view", lambda: mom(x=np.broadcast_to(arr(), (2, 3)),
                                                       g=arr((2, 3)), v=arr((2, 3), fill=0.0)),
         ValueError, "fastopt.onnx_momentum: x is read-only; it is updated in place"),
    # --- arrays: dtypes
    Case(M, "x int32", lambda: mom(x=arr(dtype=np.int32), g=arr(dtype=np.int32),
                                   v=arr(dtype=np.int32)), TypeError,
         "fastopt.onnx_momentum: x has dtype int32; fastopt updates float32 or float64 arrays"),
    Case(M, "x int64", lambda: mom(x=arr(dtype=np.int64)), TypeError,
         "fastopt.onnx_momentum: x has dtype int64; fastopt updates float32 or float64 arrays"),
    Case(M, "x bool", lambda: mom(x=arr(dtype=np.bool_)), TypeError,
         "fastopt.onnx_momentum: x has dtype bool; fastopt updates float32 or float64 arrays"),
    Case(M, "x float16", lambda: mom(x=arr(dtype=np.float16), g=arr(dtype=np.float16),
                                     v=arr(dtype=np.float16)), TypeError,
         "fastopt.onnx_momentum: x has dtype float16; fastopt updates float32 or float64 arrays"),
    Case(M, "x complex64", lambda: mom(x=arr(dtype=np.complex64)), TypeError,
         "fastopt.onnx_momentum: x has dtype complex64; fastopt updates float32 or float64 arrays"),
    Case(M, "x complex128", lambda: mom(x=arr(dtype=np.complex128)), TypeError,
         "fastopt.onnx_momentum: x has dtype complex128; fastopt updates float32 or float64 "
         "arrays"),
    Case(M, "x object", lambda: mom(x=np.array([1.0, 2.0, 3.0], dtype=object)), TypeError,
         "fastopt.onnx_momentum: x has dtype object; fastopt updates float32 or float64 arrays"),
    Case(M, "x a structured dtype", lambda: mom(x=np.zeros(3, "f4,f4")), TypeError,
         "fastopt.onnx_momentum: x has dtype [('f0', '<f4'), ('f1', '<f4')]; fastopt updates "
         "float32 or float64 arrays"),
    Case(A, "x float16 (adam)", lambda: adm(x=arr(dtype=np.float16)), TypeError,
         "fastopt.onnx_adam: x has dtype float16; fastopt updates float32 or float64 arrays"),
    Case(M, "g float64 for a float32 x", lambda: mom(g=arr(dtype=F64)), TypeError,
         "fastopt.onnx_momentum: g has dtype float64 but x has float32; the gradient must "
         "match its parameter"),
    Case(M, "g int32", lambda: mom(g=arr(dtype=np.int32)), TypeError,
         "fastopt.onnx_momentum: g has dtype int32 but x has float32; the gradient must "
         "match its parameter"),
    Case(M, "v float64 for a float32 x", lambda: mom(v=arr(dtype=F64)), TypeError,
         "fastopt.onnx_momentum: v has dtype float64 but x has float32; the state must "
         "match its parameter"),
    Case(A, "h float32 for a float64 x", lambda: adm(x=arr(dtype=F64), g=arr(dtype=F64),
                                                    v=arr(dtype=F64)), TypeError,
         "fastopt.onnx_adam: h has dtype float32 but x has float64; the state must match "
         "its parameter"),
    Case(G, "h float16", lambda: ada(h=arr(dtype=np.float16)), TypeError,
         "fastopt.onnx_adagrad: h has dtype float16 but x has float32; the state must "
         "match its parameter"),
    # --- arrays: shapes
    Case(M, "v shape (4,) for x (3,)", lambda: mom(v=arr((4,))), ValueError,
         "fastopt.onnx_momentum: v has shape (4,) but x has shape (3,); the state must "
         "have its parameter's shape"),
    Case(M, "v shape (1, 3) for x (3,) (broadcastable is not enough)",
         lambda: mom(v=arr((1, 3))), ValueError,
         "fastopt.onnx_momentum: v has shape (1, 3) but x has shape (3,); the state must "
         "have its parameter's shape"),
    Case(A, "h shape (3, 1) for x (3,)", lambda: adm(h=arr((3, 1))), ValueError,
         "fastopt.onnx_adam: h has shape (3, 1) but x has shape (3,); the state must have "
         "its parameter's shape"),
    Case(M, "g shape (2,) for x (3,)", lambda: mom(g=arr((2,))), ValueError,
         "fastopt.onnx_momentum: g with shape (2,) cannot be broadcast to x's shape (3,)"),
    Case(M, "g shape (2, 3) for x (3,) (g larger than x)", lambda: mom(g=arr((2, 3))),
         ValueError,
         "fastopt.onnx_momentum: g with shape (2, 3) cannot be broadcast to x's shape (3,)"),
    Case(G, "g shape (3, 2) for x (2, 3)",
         lambda: ada(x=arr((2, 3)), g=arr((3, 2)), h=arr((2, 3))), ValueError,
         "fastopt.onnx_adagrad: g with shape (3, 2) cannot be broadcast to x's shape (2, 3)"),
    # --- containers
    Case(M, "empty lists", lambda: (([], [], []), {"lr": 0.1, "t": 0}), ValueError,
         "fastopt.onnx_momentum: x is an empty list; give at least one tensor"),
    Case(A, "empty tuples", lambda: (((), (), (), ()), {"lr": 0.1, "t": 1}), ValueError,
         "fastopt.onnx_adam: x is an empty tuple; give at least one tensor"),
    Case(M, "g list shorter than x", lambda: (([arr(), arr()], [arr()], [arr(), arr()]),
                                              {"lr": 0.1, "t": 0}), ValueError,
         "fastopt.onnx_momentum: g has 1 tensors but x has 2; every list must have one entry "
         "per parameter"),
    Case(A, "h list longer than x", lambda: (([arr()], [arr()], [arr()], [arr(), arr()]),
                                             {"lr": 0.1, "t": 1}), ValueError,
         "fastopt.onnx_adam: h has 2 tensors but x has 1; every list must have one entry "
         "per parameter"),
    Case(M, "g a single array while x is a list", lambda: (([arr()], arr(), [arr()]),
                                                           {"lr": 0.1, "t": 0}), TypeError,
         "fastopt.onnx_momentum: g is a single array but x is a list of 1; pass g as a list "
         "of the same length"),
    Case(M, "v a list while x is a single array", lambda: mom(v=[arr()]), TypeError,
         "fastopt.onnx_momentum: v is a list but x is a single array; pass v as a single "
         "array too"),
    # --- not arrays
    Case(M, "x a Python float", lambda: mom(x=1.0), TypeError,
         "fastopt.onnx_momentum: x must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got float" + NUMBERS_HINT),
    Case(M, "x None", lambda: ((None, arr(), arr()), {"lr": 0.1, "t": 0}), TypeError,
         "fastopt.onnx_momentum: x must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got NoneType"),
    Case(M, "x a dict of arrays", lambda: mom(x={"w": arr()}), TypeError,
         "fastopt.onnx_momentum: x must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got dict"),
    Case(M, "x a list of Python floats", lambda: (([1.0, 2.0], [arr(), arr()],
                                                   [arr(), arr()]), {"lr": 0.1, "t": 0}),
         TypeError,
         "fastopt.onnx_momentum: x[0] must be a numpy.ndarray, got float" + NUMBERS_HINT),
    Case(M, "g a Python list of numbers for an array x", lambda: mom(g=[0.5, 0.5, 0.5]),
         TypeError, "fastopt.onnx_momentum: g is a list of numbers but x is an array; pass "
                    "np.asarray(g, dtype=x.dtype)"),
    Case(M, "g a NumPy float32 scalar", lambda: mom(g=np.float32(0.5)), TypeError,
         "fastopt.onnx_momentum: g must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got a NumPy float32 scalar, not an array" + NUMBERS_HINT),
    Case(G, "h a memoryview", lambda: ada(h=memoryview(arr(fill=0.0))), TypeError,
         "fastopt.onnx_adagrad: h must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
         "got memoryview"),
    Case(A, "h[0] None in a list (used to crash in the C kernel)",
         lambda: (([arr()], [arr()], [arr()], [None]), {"lr": 0.1, "t": 1}), TypeError,
         "fastopt.onnx_adam: h[0] must be a numpy.ndarray, got NoneType"),
    Case(A, "v[1] None in a list", lambda: (([arr(), arr()], [arr(), arr()], [arr(), None],
                                             [arr(), arr()]), {"lr": 0.1, "t": 1}),
         TypeError, "fastopt.onnx_adam: v[1] must be a numpy.ndarray, got NoneType"),
    # --- memory sharing
    Case(M, "v is x", lambda: (lambda x: mom(x=x, v=x))(arr()), ValueError,
         "fastopt.onnx_momentum: x and v share memory; every parameter and state must have "
         "memory of its own"),
    Case(M, "x and v overlapping views of one buffer", lambda: (lambda p: mom(x=p[0], v=p[1]))
         (shared_pair()), ValueError,
         "fastopt.onnx_momentum: x and v share memory; every parameter and state must have "
         "memory of its own"),
    Case(A, "v is h", lambda: (lambda s: adm(v=s, h=s))(arr(fill=0.0)), ValueError,
         "fastopt.onnx_adam: v and h share memory; every parameter and state must have memory "
         "of its own"),
    Case(M, "x[0] and x[1] the same array", lambda: (lambda x: (([x, x], [arr(), arr()],
                                                                 [arr(), arr()]),
                                                                {"lr": 0.1, "t": 0}))(arr()),
         ValueError, "fastopt.onnx_momentum: x[0] and x[1] share memory; every parameter and "
                     "state must have memory of its own"),
    Case(M, "g partially overlapping x", lambda: (lambda p: mom(x=p[0], g=p[1]))
         (partial_g()), ValueError,
         "fastopt.onnx_momentum: g partially overlaps x, which is written; pass a copy of the "
         "gradient"),
    Case(A, "g partially overlapping h", lambda: (lambda b: adm(g=b[1:4], h=b[:3]))
         (np.zeros(6, F32)), ValueError,
         "fastopt.onnx_adam: g partially overlaps h, which is written; pass a copy of the "
         "gradient"),
    Case(M, "x a writeable zero-stride view (its elements share memory)",
         lambda: mom(x=np.lib.stride_tricks.as_strided(arr(), (3,), (0,), writeable=True)),
         ValueError, "fastopt.onnx_momentum: x has elements that share memory (a broadcast or "
                     "as_strided view); an updated array needs memory of its own for every "
                     "element"),
    Case(G, "h an overlapping as_strided view",
         lambda: ada(x=arr((2, 2)), g=arr((2, 2)), h=np.lib.stride_tricks.as_strided(
             arr(fill=0.0), (2, 2), (4, 4), writeable=True)), ValueError,
         "fastopt.onnx_adagrad: h has elements that share memory (a broadcast or as_strided "
         "view); an updated array needs memory of its own for every element"),
    # --- scalars: t
    Case(M, "t = -1", lambda: mom(t=-1), ValueError,
         "fastopt.onnx_momentum: t must be >= 0 (it counts updates), got -1"),
    Case(A, "t = -1 (adam)", lambda: adm(t=-1), ValueError,
         "fastopt.onnx_adam: t must be >= 0 (it counts updates), got -1"),
    Case(G, "t = -5 (adagrad)", lambda: ada(t=-5), ValueError,
         "fastopt.onnx_adagrad: t must be >= 0 (it counts updates), got -5"),
    Case(M, "t = 2**63", lambda: mom(t=2**63), ValueError,
         "fastopt.onnx_momentum: t must be < 2**63 (ONNX T is int64), got 9223372036854775808"),
    Case(M, "t a float", lambda: mom(t=1.0), TypeError,
         "fastopt.onnx_momentum: t must be an integer, got float"),
    Case(M, "t a bool", lambda: mom(t=True), TypeError,
         "fastopt.onnx_momentum: t must be an integer, got bool"),
    Case(M, "t a str", lambda: mom(t="1"), TypeError,
         "fastopt.onnx_momentum: t must be an integer, got str"),
    Case(M, "t a float array", lambda: mom(t=np.array(1.0)), TypeError,
         "fastopt.onnx_momentum: t must be an integer or a one-element integer array, got an "
         "array of shape () and dtype float64"),
    # --- scalars: lr
    Case(M, "lr = -0.1", lambda: mom(lr=-0.1), ValueError,
         "fastopt.onnx_momentum: lr must be a finite number >= 0, got -0.1"),
    Case(M, "lr = NaN", lambda: mom(lr=float("nan")), ValueError,
         "fastopt.onnx_momentum: lr must be a finite number >= 0, got nan"),
    Case(M, "lr = inf", lambda: mom(lr=float("inf")), ValueError,
         "fastopt.onnx_momentum: lr must be a finite number >= 0, got inf"),
    Case(G, "lr = -inf (adagrad)", lambda: ada(lr=float("-inf")), ValueError,
         "fastopt.onnx_adagrad: lr must be a finite number >= 0, got -inf"),
    Case(A, "lr = NaN as a float32 0-d array (adam)", lambda: adm(lr=np.array(np.nan, F32)),
         ValueError, "fastopt.onnx_adam: lr must be a finite number >= 0, got nan"),
    Case(M, "lr = 10**400 (an int beyond float range)", lambda: mom(lr=10**400), ValueError,
         "fastopt.onnx_momentum: lr must be a finite number >= 0, got inf"),
    Case(M, "lr a str", lambda: mom(lr="0.1"), TypeError,
         "fastopt.onnx_momentum: lr must be a real number, got str"),
    Case(M, "lr None", lambda: mom(lr=None), TypeError,
         "fastopt.onnx_momentum: lr must be a real number, got NoneType"),
    Case(M, "lr a bool", lambda: mom(lr=True), TypeError,
         "fastopt.onnx_momentum: lr must be a real number, got bool"),
    Case(M, "lr complex", lambda: mom(lr=0.1 + 0j), TypeError,
         "fastopt.onnx_momentum: lr must be a real number, got complex"),
    Case(M, "lr a two-element array", lambda: mom(lr=np.array([0.1, 0.2])), TypeError,
         "fastopt.onnx_momentum: lr must be a real number or a one-element real array, got an "
         "array of shape (2,) and dtype float64"),
    # --- scalars: hyperparameters
    Case(M, "mode 'Nesterov' (case matters)", lambda: mom(mode="Nesterov"), ValueError,
         "fastopt.onnx_momentum: mode must be 'standard' or 'nesterov', got 'Nesterov'"),
    Case(M, "mode 'sgd'", lambda: mom(mode="sgd"), ValueError,
         "fastopt.onnx_momentum: mode must be 'standard' or 'nesterov', got 'sgd'"),
    Case(M, "mode b'standard' (bytes)", lambda: mom(mode=b"standard"), TypeError,
         "fastopt.onnx_momentum: mode must be a str, got bytes"),
    Case(M, "mode None", lambda: mom(mode=None), TypeError,
         "fastopt.onnx_momentum: mode must be a str, got NoneType"),
    Case(M, "alpha = NaN", lambda: mom(alpha=float("nan")), ValueError,
         "fastopt.onnx_momentum: alpha must be finite, got nan"),
    Case(M, "beta = inf", lambda: mom(beta=float("inf")), ValueError,
         "fastopt.onnx_momentum: beta must be finite, got inf"),
    Case(M, "norm_coefficient a str", lambda: mom(norm_coefficient="0"), TypeError,
         "fastopt.onnx_momentum: norm_coefficient must be a real number, got str"),
    Case(G, "decay_factor = -1", lambda: ada(decay_factor=-1.0), ValueError,
         "fastopt.onnx_adagrad: decay_factor must be >= 0.0, got -1.0"),
    Case(G, "epsilon = -1e-6", lambda: ada(epsilon=-1e-6), ValueError,
         "fastopt.onnx_adagrad: epsilon must be >= 0.0, got -1e-06"),
    Case(G, "epsilon = NaN", lambda: ada(epsilon=float("nan")), ValueError,
         "fastopt.onnx_adagrad: epsilon must be finite, got nan"),
    Case(A, "alpha = 1 with t > 0 (bias correction divides by zero)",
         lambda: adm(alpha=1.0, t=1), ValueError,
         "fastopt.onnx_adam: alpha must be < 1.0, got 1.0"),
    Case(A, "alpha = 1.5", lambda: adm(alpha=1.5, t=0), ValueError,
         "fastopt.onnx_adam: alpha must be <= 1.0, got 1.5"),
    Case(A, "alpha = -0.1", lambda: adm(alpha=-0.1), ValueError,
         "fastopt.onnx_adam: alpha must be >= 0.0, got -0.1"),
    Case(A, "beta = 1.5", lambda: adm(beta=1.5), ValueError,
         "fastopt.onnx_adam: beta must be <= 1.0, got 1.5"),
    Case(A, "epsilon = -1", lambda: adm(epsilon=-1.0), ValueError,
         "fastopt.onnx_adam: epsilon must be >= 0.0, got -1.0"),
    Case(A, "norm_coefficient_post = NaN", lambda: adm(norm_coefficient_post=float("nan")),
         ValueError, "fastopt.onnx_adam: norm_coefficient_post must be finite, got nan"),
    # --- n_threads
    Case(M, "n_threads = 0", lambda: mom(n_threads=0), ValueError,
         "fastopt.onnx_momentum: n_threads must be a positive int up to 1024, -1 (all cores) or "
         "None (the default), got 0"),
    Case(G, "n_threads = -2", lambda: ada(n_threads=-2), ValueError,
         "fastopt.onnx_adagrad: n_threads must be a positive int up to 1024, -1 (all cores) or "
         "None (the default), got -2"),
    Case(A, "n_threads = 2.0", lambda: adm(n_threads=2.0), TypeError,
         "fastopt.onnx_adam: n_threads must be an int or None, got float"),
    Case(M, "n_threads = 2000 (above the cap of 1024)", lambda: mom(n_threads=2000),
         ValueError, "fastopt.onnx_momentum: n_threads must be a positive int up to 1024, -1 (all "
                     "cores) or None (the default), got 2000"),
    Case(M, "n_threads = True", lambda: mom(n_threads=True), TypeError,
         "fastopt.onnx_momentum: n_threads must be an int or None, got bool"),
    # --- Python's own argument checks
    Case(M, "lr missing", lambda: ((arr(), arr(), arr()), {"t": 0}), TypeError,
         "onnx_momentum() missing 1 required keyword-only argument: 'lr'"),
    Case(A, "h missing", lambda: ((arr(), arr(), arr()), {"lr": 0.1, "t": 1}), TypeError,
         "onnx_adam() missing 1 required positional argument: 'h'"),
    Case(M, "lr and t passed positionally", lambda: ((arr(), arr(), arr(), 0.1, 0), {}),
         TypeError, "onnx_momentum() takes 3 positional arguments but 5 were given"),
    Case(G, "an unknown keyword", lambda: ada(momentum=0.9), TypeError,
         "onnx_adagrad() got an unexpected keyword argument 'momentum'"),
    # --- the bad tensor at the end of a long list
    Case(M, "x[{L}] read-only at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: ro(xs[LAST])), ValueError,
         f"fastopt.onnx_momentum: x[{LAST}] is read-only; it is updated in place"),
    Case(M, "v[{L}] of the wrong shape at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(vs, LAST, arr((2, 2)))), ValueError,
         f"fastopt.onnx_momentum: v[{LAST}] has shape (2, 2) but x[{LAST}] has shape (1,); the "
         f"state must have its parameter's shape"),
    Case(M, "g[{L}] not broadcastable at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(gs, LAST, arr((2,)))), ValueError,
         f"fastopt.onnx_momentum: g[{LAST}] with shape (2,) cannot be broadcast to x[{LAST}]'s "
         f"shape (1,)"),
    Case(M, "g[{L}] float64 at the end of a float32 list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(gs, LAST, arr((1,), F64))), TypeError,
         f"fastopt.onnx_momentum: g[{LAST}] has dtype float64 but x[{LAST}] has float32; the "
         f"gradient must match its parameter"),
    Case(M, "x[{L}] int32 at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(xs, LAST, arr((1,), np.int32))),
         TypeError, f"fastopt.onnx_momentum: x[{LAST}] has dtype int32; fastopt updates float32 "
                    f"or float64 arrays"),
    Case(M, "v[{L}] not an array at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(vs, LAST, [0.0])), TypeError,
         f"fastopt.onnx_momentum: v[{LAST}] must be a numpy.ndarray, got a list of numbers"
         + NUMBERS_HINT),
    Case(M, "v[{L}] sharing memory with x[0] at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: setitem(vs, LAST, xs[0])), ValueError,
         f"fastopt.onnx_momentum: x[0] and v[{LAST}] share memory; every parameter and state "
         f"must have memory of its own"),
    Case(M, "g[{L}] partially overlapping x[0] at the end of a list of {N}",
         lambda: long_mom(lambda xs, gs, vs: (setitem(xs, 0, np.ones(8, F32)[:4]),
                                              setitem(gs, 0, arr((4,))),
                                              setitem(vs, 0, arr((4,))),
                                              setitem(gs, LAST, xs[0].base[3:4]))),
         ValueError,
         f"fastopt.onnx_momentum: g[{LAST}] partially overlaps x[0], which is written; pass a "
         f"copy of the gradient"),
    Case(A, "h[{L}] read-only at the end of a list of {N}",
         lambda: long_adam(lambda xs, gs, vs, hs: ro(hs[LAST])), ValueError,
         f"fastopt.onnx_adam: h[{LAST}] is read-only; it is updated in place"),
    Case(A, "h[{L}] float64 at the end of a float32 list of {N}",
         lambda: long_adam(lambda xs, gs, vs, hs: setitem(hs, LAST, arr((1,), F64))),
         TypeError, f"fastopt.onnx_adam: h[{LAST}] has dtype float64 but x[{LAST}] has "
                    f"float32; the state must match its parameter"),
    # --- bfloat16 states of float32 parameters (fastopt.adamw stands for every rule)
    Case("adamw", "a state of a bfloat16 look-alike dtype (fields)",
         lambda: adw(m=np.zeros(3, [("bits", "<u2")])), TypeError,
         "fastopt.adamw: exp_avgs[0] has dtype [('bits', '<u2')]; a state of params[0] "
         "(float32) must be float32 or bfloat16"),
    Case("adamw", "an int16 state", lambda: adw(m=np.zeros(3, np.int16)), TypeError,
         "fastopt.adamw: exp_avgs[0] has dtype int16; a state of params[0] (float32) must "
         "be float32 or bfloat16"),
    Case("adamw", "float16 states", lambda: adw(m=arr(dtype=np.float16), v=arr(dtype=np.float16)),
         TypeError, "fastopt.adamw: exp_avgs[0] has dtype float16; a state of params[0] "
         "(float32) must be float32 or bfloat16 (float16 states are refused: squared "
         "gradients underflow in them)"),
    Case("adamw", "states of two dtypes for one parameter", lambda: adw(v=arr()), TypeError,
         "fastopt.adamw: exp_avg_sqs[0] has dtype float32 but exp_avgs[0] has bfloat16; the "
         "states of a parameter must have one dtype"),
    Case("adamw", "state_rounding = 'even'", lambda: adw(state_rounding="even"), ValueError,
         "fastopt.adamw: state_rounding must be 'auto', 'nearest' or 'stochastic', got 'even'"),
    Case("adamw", "decay_mode = 'after'", lambda: q8(decay_mode="after"), ValueError,
         "fastopt.adamw: decay_mode must be 'torch' (the weight decay before the update) or "
         "'bnb' (after it), got 'after'"),
    # --- 8-bit states (fastopt.State8bit; fastopt.adamw stands for every rule)
    Case("adamw", "8-bit codes of dtype int8", lambda: q8(m=State8bit(
        np.zeros(3, np.int8), np.zeros(1, F32))), TypeError,
        "fastopt.adamw: exp_avgs[0].codes has dtype int8; it must be uint8"),
    Case("adamw", "8-bit codes of another length", lambda: q8(m=State8bit.zeros(4)),
         ValueError, "fastopt.adamw: exp_avgs[0].codes has shape (4,); it must be (3,) "
         "(params[0]'s shape)"),
    Case("adamw", "an 8-bit absmax of another length", lambda: q8(m=State8bit(
        np.zeros(3, np.uint8), np.zeros(2, F32))), ValueError,
        "fastopt.adamw: exp_avgs[0].absmax has shape (2,); it must be (1,) (one value per "
        "block of 256 elements of params[0])"),
    Case("adamw", "an 8-bit absmax of float64", lambda: q8(v=State8bit(
        np.zeros(3, np.uint8), np.zeros(1), False)), TypeError,
        "fastopt.adamw: exp_avg_sqs[0].absmax has dtype float64; it must be float32"),
    Case("adamw", "a second moment on the signed map", lambda: q8(v=State8bit.zeros(3)),
         ValueError, "fastopt.adamw: exp_avg_sqs[0] is on the signed map, but this state is "
         "kept on the unsigned map (State8bit(..., signed=False))"),
    Case("adamw", "8-bit and float32 states for one parameter", lambda: q8(v=arr()),
         TypeError, "fastopt.adamw: exp_avg_sqs[0] is not a State8bit (got ndarray), but the "
         "other states of params[0] are 8-bit; a parameter's states are stored alike"),
    Case("adamax", "8-bit states", lambda: q8(), ValueError,
         "fastopt.adamax: exp_avgs[0] is an 8-bit state, but the rule adamax has none "
         "(8-bit states: sgd, adagrad, adam, adamw, rmsprop, lion, lamb, lars)"),
    Case("adam", "8-bit states with amsgrad", lambda: q8(
        amsgrad=True, max_exp_avg_sqs=State8bit.zeros(3, signed=False)), ValueError,
        "fastopt.adam: exp_avgs[0] is an 8-bit state, but the options given use 3 states of "
        "adam, and only exp_avg, exp_avg_sq have an 8-bit form; use float32 states with "
        "these options"),
    # --- the thread-count context manager
    Case("set_num_threads", "n_threads = 0", lambda: ((0,), {}), ValueError,
         "fastopt.set_num_threads: n_threads must be a positive int up to 1024, -1 (all "
         "cores) or None (the default), got 0"),
    Case("set_num_threads", "n_threads a str", lambda: (("2",), {}), TypeError,
         "fastopt.set_num_threads: n_threads must be an int or None, got str"),
]
