"""Arrays changed under a running call, from another Python thread.

The C work runs without the GIL, so while one thread is inside a large
fastopt call another thread can resize, reshape, freeze, drop or overwrite the
arrays it was given. Nothing may crash or touch freed memory (CI runs this
file under ASan too: .ci/sanitize.sh), each call is applied completely or not
at all, and results stay sane. Also: numpy.memmap parameters, ndarray
subclasses with __array_finalize__ side effects, read-only memmaps.

Timing never decides a pass: the switch interval is raised so that the only
GIL hand-off during a call is the C work's own release, and the tests accept
either order of events where the order is not forced.
"""
from __future__ import annotations

import gc
import os
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import fastopt

N = 1 << 20                     # float32 elements: 4 MB per array, a few ms per call
KW = {"lr": 0.5, "t": 1, "alpha": 0.5, "beta": 1.0, "norm_coefficient": 0.0}


@pytest.fixture(autouse=True)
def long_switch_interval():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)     # the GIL changes hands at blocking calls / C work only
    yield
    sys.setswitchinterval(old)


def arrays(n=N, dtype=np.float32, seed=0):
    """Three fresh arrays (x, g, v) of varied values, cheap to make (random
    generators are slow under ASan)."""
    i = np.arange(n, dtype=np.int64)
    return [(((i * (7919 + 104729 * (3 * seed + k))) % 2003) / 1001.0 - 1.0).astype(dtype)
            for k in range(3)]


def replay(x, g, v, calls):
    """The same momentum calls, serially, on copies."""
    x, g, v = x.copy(), g.copy(), v.copy()
    for _ in range(calls):
        fastopt.onnx_momentum(x, g, v, **KW)
    return x, v


class Worker(threading.Thread):
    """Runs ``calls`` momentum calls; records how many were applied and what
    was raised. ``started`` is set just before each call."""

    def __init__(self, fn, calls):
        super().__init__(daemon=True)
        self.fn, self.calls = fn, calls
        self.ok, self.errors = 0, []
        self.started = threading.Event()
        self.enough = threading.Event()    # set by hammer(until_inside=...)

    def run(self):
        for _ in range(self.calls):
            if self.enough.is_set():
                break
            self.started.set()
            try:
                self.fn()
                self.ok += 1
            except (TypeError, ValueError) as exc:
                self.errors.append(exc)


_PKG = os.path.dirname(fastopt.__file__) + os.sep


def in_call(worker) -> bool:
    """Whether the worker is inside a fastopt call right now, read from its
    innermost Python frame (the C work has no frame of its own: the frame
    that called it stays on top). Exact while this thread holds the GIL,
    unlike a flag the worker sets around the call, which a GIL hand-off on a
    loaded machine can leave stale for a moment after the call returned."""
    frame = sys._current_frames().get(worker.ident)
    return frame is not None and frame.f_code.co_filename.startswith(_PKG)


def hammer(worker, action, undo=None, until_inside=None):
    """Run ``action`` over and over while the worker runs its calls (the
    worker may start a call between ``action`` and ``undo``). Returns how
    often the action was tried and how often it succeeded while the worker
    was inside a call. With ``until_inside=k`` the worker stops calling once
    the action was tried k times inside a call (``calls`` is then only an
    upper bound), so a loaded machine cannot end the test before it tried."""
    worker.start()
    worker.started.wait()
    tries = done_inside = tried_inside = 0
    while worker.is_alive():
        inside = in_call(worker)     # the GIL is held from here to the action
        try:
            action()
            done_inside += inside
        except (ValueError, BufferError):
            pass
        tries += 1
        tried_inside += inside
        if until_inside is not None and tried_inside >= until_inside:
            worker.enough.set()
        if undo is not None:
            time.sleep(0.0005)       # let the worker start a call in this state
            undo()
        worker.join(0.001)
    worker.join()
    return tries, done_inside


def test_resize_with_refcheck_is_refused_during_calls():
    x, g, v = arrays()
    x0, g0, v0 = x.copy(), g.copy(), v.copy()
    w = Worker(lambda: fastopt.onnx_momentum(x, g, v, **KW), 400)
    tries, resized = hammer(w, lambda: in_call(w) and x.resize(N // 2), until_inside=3)
    assert tries > 0 and resized == 0          # referenced by the call: never resized
    assert w.errors == [] and w.ok > 0 and x.shape == (N,)
    rx, rv = replay(x0, g0, v0, w.ok)
    np.testing.assert_array_equal(x, rx)
    np.testing.assert_array_equal(v, rv)


def test_resize_of_a_listed_array_whose_name_was_dropped():
    xs, gs, vs = ([a] for a in arrays())
    keep = [a.copy() for a in (xs[0], gs[0], vs[0])]
    w = Worker(lambda: fastopt.onnx_momentum(xs, gs, vs, **KW), 400)
    tries, resized = hammer(w, lambda: in_call(w) and xs[0].resize(2 * N, refcheck=True),
                            until_inside=3)
    assert tries > 0 and resized == 0 and w.ok > 0 and w.errors == []
    np.testing.assert_array_equal(xs[0], replay(*keep, w.ok)[0])


def test_reshape_in_place_during_calls():
    """x.shape = ... between and during calls: a call either sees a shape
    that matches g (applied in full) or not (rejected, nothing written)."""
    x, g, v = arrays()
    x0, g0, v0 = x.copy(), g.copy(), v.copy()
    w = Worker(lambda: fastopt.onnx_momentum(x, g, v, **KW), 10)

    def flip():
        x.shape = (N // 2, 2)

    def back():
        x.shape = (N,)
    hammer(w, flip, back)
    assert all("shape" in str(e) for e in w.errors), w.errors
    rx, rv = replay(x0, g0, v0, w.ok)
    np.testing.assert_array_equal(x, rx)
    np.testing.assert_array_equal(v, rv)


def test_writeable_flag_cleared_during_calls():
    x, g, v = arrays()
    x0, g0, v0 = x.copy(), g.copy(), v.copy()
    w = Worker(lambda: fastopt.onnx_momentum(x, g, v, **KW), 10)

    def freeze():
        x.flags.writeable = False

    def thaw():
        x.flags.writeable = True
    hammer(w, freeze, thaw)
    assert all("read-only" in str(e) for e in w.errors), w.errors
    rx, rv = replay(x0, g0, v0, w.ok)
    np.testing.assert_array_equal(x, rx)
    np.testing.assert_array_equal(v, rv)


@pytest.mark.parametrize("how", ["replace", "del", "clear"])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_last_reference_dropped_during_a_call(how, layout):
    """The caller's list loses the only reference to x while the C work runs:
    x must stay alive until the call returns (it dies in the worker thread,
    after the call), and the call completes. Repeated until the drop has
    happened during a call at least once (on a loaded machine the call may
    also finish, or not yet start, before the drop: both are checked too)."""
    during = 0
    for trial in range(20):
        x, g, v = arrays(seed=trial % 2)
        if layout == "strided":
            x = np.repeat(x, 2)[::2]          # the copying path
        xs, gs, vs = [x], [g], [v]
        seen = {}
        weakref.finalize(x, lambda seen=seen: seen.setdefault("thread", threading.get_ident()))
        del x
        w = Worker(lambda xs=xs, gs=gs, vs=vs: fastopt.onnx_momentum(xs, gs, vs, **KW), 1)
        w.start()
        w.started.wait()
        new = np.zeros(N, np.float32)
        if how == "replace":
            xs[0] = new
        elif how == "del":
            del xs[0]
        else:
            xs.clear()
        w.join()
        gc.collect()
        if seen.get("thread") == w.ident:     # in use at the drop: kept alive, updated
            assert w.ok == 1, w.errors
            assert not new.any()
            during += 1
            break
        # dropped outside the call: either it had finished (new untouched)
        # or had not started (new updated, or the list was empty: rejected)
        if w.ok and new.any():
            assert how == "replace"
        elif not w.ok:
            assert how != "replace" and isinstance(w.errors[0], ValueError), w.errors
    assert during == 1


def test_list_element_replaced_keeps_results_exact():
    """Replace every list element with a fresh array during a multi-tensor
    call: the arrays the call started with get exactly one update."""
    parts = [arrays(N // 4, seed=s) for s in range(4)]
    xs, gs, vs = ([p[k] for p in parts] for k in range(3))
    originals = list(xs)
    want = [replay(*p, 1)[0] for p in parts]
    w = Worker(lambda: fastopt.onnx_momentum(xs, gs, vs, **KW), 1)
    w.start()
    w.started.wait()
    for i in range(4):
        xs[i] = np.full(N // 4, 7.0, np.float32)
    w.join()
    assert w.ok == 1
    if all((a == 7.0).all() for a in xs):        # the call held the arrays it started with
        for a, ref in zip(originals, want):
            np.testing.assert_array_equal(a, ref)
    else:                                         # it started after the swap (rare)
        assert all(not (a == 7.0).all() for a in xs)


def test_gradient_overwritten_during_a_call():
    """Another thread writes g while the call reads it: each element of the
    result is the update with the old g or with the new g, bit for bit."""
    x, g, v = arrays(dtype=np.float64)
    g[:] = 1.0
    x0, v0 = x.copy(), v.copy()
    w = Worker(lambda: fastopt.onnx_momentum(x, g, v, **KW), 1)
    w.start()
    w.started.wait()
    g[:] = 2.0
    w.join()
    assert w.ok == 1
    old_x, old_v = replay(x0, np.ones_like(g), v0, 1)
    new_x, new_v = replay(x0, np.full_like(g, 2.0), v0, 1)
    either = ((x == old_x) & (v == old_v)) | ((x == new_x) & (v == new_v))
    assert either.all()


def test_adam_states_dropped_during_a_call():
    x, g, v = arrays()
    h = np.abs(arrays(seed=5)[0])
    xs, gs, vs, hs = [x], [g], [v], [h]
    ref = [a.copy() for a in (x, g, v, h)]
    fastopt.onnx_adam(*[[a] for a in ref], lr=0.1, t=1)
    untouched = x.copy()
    del v, h
    w = Worker(lambda: fastopt.onnx_adam(xs, gs, vs, hs, lr=0.1, t=1), 1)
    w.start()
    w.started.wait()
    vs[0] = None
    hs.clear()
    w.join()
    if w.ok:
        np.testing.assert_array_equal(x, ref[0])
    else:                                   # it started after the change: rejected
        assert isinstance(w.errors[0], (TypeError, ValueError))
        np.testing.assert_array_equal(x, untouched)


# ------------------------------------------------------------- memmaps

def test_memmap_parameters_are_updated_and_flushable(tmp_path):
    path = tmp_path / "x.f32"
    x0, g, v0 = arrays(4099)
    mm = np.memmap(path, dtype=np.float32, mode="w+", shape=x0.shape)
    mm[:] = x0
    v = v0.copy()
    fastopt.onnx_momentum(mm, g, v, **KW)
    mm.flush()
    want, _ = replay(x0, g, v0, 1)
    np.testing.assert_array_equal(np.asarray(mm), want)
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), want)
    del mm


def test_memmap_parameters_in_an_optimizer(tmp_path):
    from fastopt import optim

    path = tmp_path / "w.f64"
    x0 = np.linspace(-1, 1, 513)
    mm = np.memmap(path, dtype=np.float64, mode="w+", shape=(513,))
    mm[:] = x0
    plain = x0.copy()
    a, b = optim.OnnxAdam([mm], lr=0.01), optim.OnnxAdam([plain], lr=0.01)
    for k in range(3):
        grad = np.cos(x0 * (k + 1))
        a.step([grad])
        b.step([grad])
    mm.flush()
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float64), plain)
    del a, mm


def test_read_only_memmap_is_rejected_and_not_written(tmp_path):
    path = tmp_path / "ro.f32"
    x0, g, v = arrays(1000)
    x0.tofile(path)
    ro = np.memmap(path, dtype=np.float32, mode="r", shape=(1000,))
    v0 = v.copy()
    with pytest.raises(ValueError, match=r"^fastopt.onnx_momentum: x is read-only; it is updated "
                                         r"in place$"):
        fastopt.onnx_momentum(ro, g, v, **KW)
    with pytest.raises(ValueError, match=r"x\[1\] is read-only"):
        fastopt.onnx_momentum([g.copy(), ro], [g, g], [v, v.copy()], **KW)
    np.testing.assert_array_equal(v, v0)
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), x0)
    del ro


def test_copy_on_write_memmap_leaves_the_file_alone(tmp_path):
    path = tmp_path / "c.f32"
    x0, g, v = arrays(1000)
    x0.tofile(path)
    cow = np.memmap(path, dtype=np.float32, mode="c", shape=(1000,))
    fastopt.onnx_momentum(cow, g, v.copy(), **KW)
    np.testing.assert_array_equal(np.asarray(cow), replay(x0, g, v, 1)[0])
    np.testing.assert_array_equal(np.fromfile(path, dtype=np.float32), x0)
    del cow


# --------------------------------------------------------------- subclasses

class Noisy(np.ndarray):
    """An ndarray subclass whose __array_finalize__ logs every new view and
    scribbles on the view's attributes (never on data)."""

    log: list = []

    def __array_finalize__(self, obj):
        Noisy.log.append((type(obj).__name__, getattr(obj, "shape", None)))
        self.tag = len(Noisy.log)


class Hostile(np.ndarray):
    """__array_finalize__ raises: any view fastopt took would fail."""

    def __array_finalize__(self, obj):
        if getattr(obj, "armed", False):
            raise RuntimeError("no views of me")


@pytest.mark.parametrize("layout", ["contiguous", "strided", "fortran"])
def test_subclass_with_finalize_side_effects(layout):
    x0, g, v0 = arrays(6 * 50, dtype=np.float64)
    shape = (6, 50)
    base = x0.reshape(shape)
    if layout == "fortran":
        base = np.asfortranarray(base)
    x = base.view(Noisy) if layout != "strided" else np.repeat(base, 2, 1)[:, ::2].view(Noisy)
    g2, v = g.reshape(shape), v0.reshape(shape).copy()
    want = replay(np.array(base), g2, v0.reshape(shape), 1)
    fastopt.onnx_momentum(x, g2, v, **KW)
    assert type(x) is Noisy
    np.testing.assert_array_equal(np.asarray(x), want[0])
    np.testing.assert_array_equal(v, want[1])


def test_subclass_whose_finalize_raises():
    x0, g, v = arrays(64, dtype=np.float64)
    x = x0.copy().view(Hostile)
    x.armed = True
    want = replay(x0, g, v, 1)
    try:
        fastopt.onnx_momentum(x, g, v, **KW)
    except RuntimeError:
        np.testing.assert_array_equal(np.asarray(x), x0)     # raised: nothing written
    else:
        np.testing.assert_array_equal(np.asarray(x), want[0])
        np.testing.assert_array_equal(v, want[1])
