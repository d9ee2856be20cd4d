"""Arrays frozen or reshaped by another Python thread while a call takes the
copying route (a strided parameter: the call is checked in full, copied,
run and written back). Each call either raises the error a fresh call would
raise (ValueError naming the array, nothing written) or is applied in full;
never an internal error or a raw NumPy error. The GIL changes hands during
the route's large copies and the C work (see test_hostile_threads.py)."""
from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

import fastopt
from fastopt import optim

N = 1 << 20
KW = {"lr": 0.5, "t": 1, "alpha": 0.5, "beta": 1.0, "norm_coefficient": 0.0}


@pytest.fixture(autouse=True)
def long_switch_interval():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    yield
    sys.setswitchinterval(old)


def _arrays(seed=0):
    i = np.arange(N, dtype=np.int64)
    return [(((i * (7919 + 104729 * (3 * seed + k))) % 2003) / 1001.0 - 1.0)
            .astype(np.float32) for k in range(3)]


class Worker(threading.Thread):
    """Runs ``fn`` ``calls`` times; counts the calls applied and keeps every
    exception (of any type)."""

    def __init__(self, fn, calls):
        super().__init__(daemon=True)
        self.fn, self.calls = fn, calls
        self.ok, self.errors = 0, []
        self.started = threading.Event()

    def run(self):
        for _ in range(self.calls):
            self.started.set()
            try:
                self.fn()
                self.ok += 1
            except Exception as exc:         # noqa: BLE001 (every kind is recorded)
                self.errors.append(exc)


def _hammer(worker, action, undo):
    worker.start()
    worker.started.wait()
    while worker.is_alive():
        action()
        time.sleep(0.0003)
        undo()
        worker.join(0.0005)
    worker.join()


def _momentum_setup(seed):
    x0, g, v = _arrays(seed)
    big = np.zeros(2 * N, np.float32)
    x = big[::2]                       # strided: the copying route
    x[...] = x0
    return x, g, v


def _replay(x0, g, v0, calls):
    x, v = x0.copy(), v0.copy()
    for _ in range(calls):
        fastopt.onnx_momentum(x, g, v, **KW)
    return x, v


def _check_errors(errors, word):
    for e in errors:
        assert type(e) in (TypeError, ValueError), repr(e)
        assert str(e).startswith("fastopt.onnx_momentum: "), repr(e)
        assert "internal error" not in str(e) and word in str(e), repr(e)


@pytest.mark.parametrize("target", ["x", "v"])
def test_writeable_flag_flipped_during_a_copying_call(target):
    x, g, v = _momentum_setup(1)
    x0, v0 = x.copy(), v.copy()
    arr = x if target == "x" else v
    w = Worker(lambda: fastopt.onnx_momentum(x, g, v, **KW), 60)

    def freeze():
        arr.flags.writeable = False

    def thaw():
        arr.flags.writeable = True
    _hammer(w, freeze, thaw)
    _check_errors(w.errors, "read-only")
    rx, rv = _replay(x0, g, v0, w.ok)
    np.testing.assert_array_equal(x, rx)
    np.testing.assert_array_equal(v, rv)


@pytest.mark.parametrize("target", ["x", "v"])
def test_reshape_during_a_copying_call(target):
    x, g, v = _momentum_setup(2)
    x0, v0 = x.copy(), v.copy()
    arr = x if target == "x" else v
    w = Worker(lambda: fastopt.onnx_momentum(x, g, v, **KW), 60)

    def flip():
        arr.shape = (N // 2, 2)

    def back():
        arr.shape = (N,)
    _hammer(w, flip, back)
    _check_errors(w.errors, "shape")
    rx, rv = _replay(x0, g, v0, w.ok)
    np.testing.assert_array_equal(x.reshape(N), rx)
    np.testing.assert_array_equal(v.reshape(N), rv)


@pytest.mark.parametrize("action", ["freeze", "reshape"])
def test_optimizer_step_with_a_strided_parameter_under_a_hostile_thread(action):
    x, g, _ = _momentum_setup(3)
    x0 = x.copy()
    opt = optim.Adam([x], lr=0.01)

    def one():
        opt.step([g], max_grad_norm=1.0)
    w = Worker(one, 60)

    def do():
        if action == "freeze":
            x.flags.writeable = False
        else:
            x.shape = (N // 2, 2)

    def undo():
        if action == "freeze":
            x.flags.writeable = True
        else:
            x.shape = (N,)
    _hammer(w, do, undo)
    for e in w.errors:
        assert type(e) in (TypeError, ValueError), repr(e)
        assert "internal error" not in str(e) and str(e).startswith("fastopt.optim"), repr(e)
    assert opt._steps == w.ok
    ref = optim.Adam([x0], lr=0.01)
    for _ in range(w.ok):
        ref.step([g], max_grad_norm=1.0)
    np.testing.assert_array_equal(x.reshape(N), x0)     # ref stepped x0 itself
