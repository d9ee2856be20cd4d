"""The public ops' C entry (fastopt/_entry.pxi): fastopt.onnx_momentum/adagrad/adam/agc
parse their arguments in C against the signature of the Python function they
wrap (fastopt/_ops.py). These tests pin that signature to what the docs say,
and check that the entry behaves exactly as the Python function would:
same results for every keyword, same messages for every malformed call, and
the usual ways of calling and handling a function."""
import copy
import functools
import inspect
import math
import pickle
import re

import numpy as np
import public_names
import pytest

import fastopt
from fastopt import _ext, _ops

STEP = ("grad_scale=None, max_grad_norm=None, norm_type=2.0, "
        "clip_convention: 'str' = 'torch', clip_value=None, "
        "skip_if_nonfinite: 'bool' = False) -> 'StepInfo | None'")
# The signatures as docs/api.md renders them (numpydoc, from inspect.signature).
EXPECTED = {
    "momentum": "(x: 'ArrayOrList', g: 'ArrayOrList', v: 'ArrayOrList', *, lr, "
                "t: 'int', alpha: 'float' = 0.9, beta: 'float' = 1.0, "
                "norm_coefficient: 'float' = 0.0, mode: 'str' = 'standard', "
                "n_threads: 'Optional[int]' = None, clipping=None, "
                "clip_eps: 'float' = 0.001, layout: 'str' = 'oi', " + STEP,
    "adagrad": "(x: 'ArrayOrList', g: 'ArrayOrList', h: 'ArrayOrList', *, lr, "
               "t: 'int', decay_factor: 'float' = 0.0, epsilon: 'float' = 1e-06, "
               "norm_coefficient: 'float' = 0.0, n_threads: 'Optional[int]' = None, "
               + STEP,
    "adam": "(x: 'ArrayOrList', g: 'ArrayOrList', v: 'ArrayOrList', h: 'ArrayOrList', "
            "*, lr, t: 'int', alpha: 'float' = 0.9, beta: 'float' = 0.999, "
            "epsilon: 'float' = 1e-06, norm_coefficient: 'float' = 0.0, "
            "norm_coefficient_post: 'float' = 0.0, n_threads: 'Optional[int]' = None, "
            + STEP,
    "agc": "(x: 'ArrayOrList', g: 'ArrayOrList', *, clipping: 'Clipping' = 0.01, "
           "eps: 'float' = 0.001, layout: 'str' = 'oi', "
           "n_threads: 'Optional[int]' = None) -> 'None'",
}
OPS = sorted(EXPECTED)
N_ARRAYS = {"momentum": 3, "adagrad": 3, "adam": 4, "agc": 2}


@pytest.mark.parametrize("name", OPS)
def test_signature_is_the_documented_one(name):
    op = public_names.op(name)
    assert str(inspect.signature(op)) == EXPECTED[name]
    params = inspect.signature(op).parameters.values()
    kinds = [p.kind for p in params]
    assert kinds == ([inspect.Parameter.POSITIONAL_OR_KEYWORD] * N_ARRAYS[name]
                     + [inspect.Parameter.KEYWORD_ONLY] * (len(kinds) - N_ARRAYS[name]))


def _documented(doc):
    """(names in order, {name: stated default}) from a numpydoc Parameters
    section; "a, b : float, default 1 and 2" states both."""
    section = re.search(r"Parameters\n\s*-+\n(.*?)\n\s*\n\s*(?:Raises|Returns|Notes)\n",
                        doc, re.S).group(1)
    names, defaults = [], {}
    for line in section.splitlines():
        if not line.startswith("    ") or line.startswith("     "):
            continue                       # a description line
        head, _, typ = line.strip().partition(" : ")
        group = [n.strip() for n in head.split(",")]
        names += group
        m = re.search(r"default (.*)$", typ)
        if m:
            values = [eval(v) for v in m.group(1).split(" and ")]   # noqa: S307
            defaults.update(zip(group, values if len(values) > 1 else values * len(group)))
        elif typ.endswith("optional"):
            defaults.update(dict.fromkeys(group, None))
    return names, defaults


@pytest.mark.parametrize("name", OPS)
def test_docstring_agrees_with_the_signature(name):
    op = public_names.op(name)
    names, defaults = _documented(op.__doc__)
    params = inspect.signature(op).parameters
    assert names == list(params)
    for n, value in defaults.items():
        assert params[n].default == value, n


@pytest.mark.parametrize("name", OPS)
def test_the_entry_wraps_the_python_function(name):
    op = public_names.op(name)
    func = op.__wrapped__
    assert inspect.isfunction(func) and func.__code__.co_filename == _ops.__file__
    assert (op.__name__, op.__qualname__, op.__module__, op.__doc__) == (
        func.__name__, func.__qualname__, func.__module__, func.__doc__)
    assert op.__doc__.startswith(("ONNX", "Adaptive"))
    assert getattr(_ops, op.__name__) is op and inspect.isroutine(op)
    assert pickle.loads(pickle.dumps(op)) is op
    assert copy.deepcopy(op) is op
    assert repr(op) == f"<function fastopt._ops.{op.__name__} (C entry)>"


def _arrays(name, dtype=np.float32, n=5):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, 3)).astype(dtype)
    g = (rng.standard_normal((n, 3)) * 0.1).astype(dtype)
    states = [np.abs(rng.standard_normal((n, 3))).astype(dtype)
              for _ in range(N_ARRAYS[name] - 2)]
    return [x, g, *states]


# Every keyword of every op set to a value other than its default (each alone,
# then all together where they combine).
NON_DEFAULT = {
    "momentum": dict(alpha=0.5, beta=0.7, norm_coefficient=0.01, mode="nesterov",
                     n_threads=2, clipping=0.05, clip_eps=0.01, layout="io",
                     grad_scale=2.0, max_grad_norm=0.3, norm_type=math.inf,
                     clip_convention="optax", clip_value=0.05, skip_if_nonfinite=True),
    "adagrad": dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01, n_threads=2,
                    grad_scale=2.0, max_grad_norm=0.3, norm_type=math.inf,
                    clip_convention="optax", clip_value=0.05, skip_if_nonfinite=True),
    "adam": dict(alpha=0.5, beta=0.7, epsilon=1e-3, norm_coefficient=0.01,
                 norm_coefficient_post=0.02, n_threads=2, grad_scale=2.0,
                 max_grad_norm=0.3, norm_type=math.inf, clip_convention="optax",
                 clip_value=0.05, skip_if_nonfinite=True),
    "agc": dict(clipping=0.001, eps=0.5, layout="io", n_threads=2),
}
REQUIRED = {"momentum": dict(lr=0.1, t=3), "adagrad": dict(lr=0.1, t=3),
            "adam": dict(lr=0.1, t=3), "agc": {}}
TOGETHER = {
    "momentum": dict(alpha=0.5, beta=0.7, norm_coefficient=0.01, mode="nesterov",
                     n_threads=2, clipping=0.05, clip_eps=0.01,
                     layout="io"),
    "adagrad": dict(decay_factor=0.1, epsilon=1e-3, norm_coefficient=0.01, n_threads=2),
    "adam": dict(alpha=0.5, beta=0.7, epsilon=1e-3, norm_coefficient=0.01,
                 norm_coefficient_post=0.02, n_threads=2),
    "agc": NON_DEFAULT["agc"],
}


def _cases():
    for name in OPS:
        yield name, {}
        for k, v in NON_DEFAULT[name].items():
            yield name, {k: v}
        yield name, TOGETHER[name]


@pytest.mark.parametrize("name, kw", list(_cases()),
                         ids=[f"{n}-{'-'.join(kw) or 'defaults'}" for n, kw in _cases()])
def test_every_keyword_as_the_python_function_reads_it(name, kw):
    """Through the C entry and through the Python function alone (its slow
    path, which rechecks everything): bit-identical arrays, equal results."""
    op = public_names.op(name)
    kw = {**REQUIRED[name], **kw}
    mine, theirs = _arrays(name), _arrays(name)
    got = op(*mine, **kw)
    want = op.__wrapped__(*theirs, **kw)
    assert repr(got) == repr(want)
    for a, b in zip(mine, theirs):
        np.testing.assert_array_equal(a, b, strict=True)
    # and every argument by keyword, in reverse order
    third = _arrays(name)
    roles = list(inspect.signature(op).parameters)[:N_ARRAYS[name]]
    full = {**dict(zip(roles, third)), **kw}
    assert repr(op(**dict(reversed(full.items())))) == repr(want)
    for a, b in zip(third, theirs):
        np.testing.assert_array_equal(a, b, strict=True)


def _message(f, *args, **kw):
    with pytest.raises(TypeError) as info:
        f(*args, **kw)
    return str(info.value)


@pytest.mark.parametrize("name", OPS)
def test_malformed_calls_raise_the_python_message(name):
    op = public_names.op(name)
    arrays = _arrays(name)
    req = REQUIRED[name]
    calls = [
        (arrays[:-1], req),                          # a missing array
        (arrays + [arrays[0]], req),                 # one array too many
        (arrays, {**req, "momentum": 0.9}),          # an unknown keyword
        (arrays, {**req, "x": arrays[0]}),           # x twice
        ((), req),                                   # no arrays
    ]
    if req:
        calls.append((arrays, {"t": 1}))             # lr missing
        calls.append((arrays + [0.1, 1], {}))        # lr, t positionally
    for args, kw in calls:
        assert _message(op, *args, **kw) == _message(op.__wrapped__, *args, **kw)


def test_the_ways_of_calling_a_function():
    x, g, v = _arrays("momentum")
    want = [a.copy() for a in (x, g, v)]
    fastopt.onnx_momentum(*want, lr=0.1, t=1)
    kw = {"".join(["l", "r"]): 0.1, "t": 1}          # a key that is not interned
    args = (x, g, v)
    assert callable(fastopt.onnx_momentum)
    calls = [
        lambda: fastopt.onnx_momentum(x, g, v, **kw),
        lambda: fastopt.onnx_momentum(*args, **kw),
        lambda: functools.partial(fastopt.onnx_momentum, lr=0.1)(x, g, v, t=1),
        lambda: staticmethod(fastopt.onnx_momentum).__get__(None, object)(x, g, v, lr=0.1, t=1),
    ]

    class Holder:
        step = fastopt.onnx_momentum                       # bound like a function

    calls.append(lambda: Holder.step(x, g, v, lr=0.1, t=1))
    with pytest.raises(TypeError, match="positional"):
        Holder().step(x, g, v, lr=0.1, t=1)           # self too: one argument too many
    for call in calls:
        x[...], v[...] = _arrays("momentum")[0], _arrays("momentum")[2]
        assert call() is None
        np.testing.assert_array_equal(x, want[0], strict=True)
        np.testing.assert_array_equal(v, want[2], strict=True)


def test_a_signature_that_drifted_from_the_entry_fails_at_import():
    def momentum(x, g, v, *, lr, t, alpha=0.9):
        """Too few keyword-only parameters for the C entry."""

    with pytest.raises(RuntimeError, match="keyword-only"):
        _ext.entry("momentum")(momentum)

    def agc(x, g, *args, clipping=0.01, eps=1e-3, layout="oi", n_threads=None):
        pass

    with pytest.raises(RuntimeError, match=r"\*args"):
        _ext.entry("agc")(agc)
    with pytest.raises(ValueError, match="no fast path"):
        _ext.entry("sgd")(agc)
