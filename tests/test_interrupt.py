"""A KeyboardInterrupt (SIGINT) arriving while a step runs: the step happens
in full (parameters, states and step count) or not at all, wherever the
signal lands (docs/semantics.md, "Interrupted steps"): fastopt.optim,
fastopt.torch, ShardedOptimizer on one rank, and the public in-place
functions on the checked route's copies. Signals are sent by a
second thread after a random delay, over many steps; the gradients are big
enough that many land while the C work runs."""
from __future__ import annotations

import gc
import os
import signal
import threading
import time

import numpy as np
import pytest

import fastopt
from fastopt import optim

SHAPES = [(512, 256), (300,), (64, 64, 8)]
HITS = 25          # interrupted steps wanted per case
MAX_STEPS = 3000   # steps tried at least, and on while a case has run under
MAX_SECONDS = 60.0  # this long: on a busy machine the killer thread wakes
                    # late, and fewer of its signals land inside a step
_KILLERS: list = []


@pytest.fixture(autouse=True)
def _no_finalizers_while_signals_fly():
    """A SIGINT taken while Python runs a weakref callback or a finalizer is
    lost there ("Exception ignored in ..."): CPython's behaviour, not
    fastopt's. Freeing a finished killer thread runs one (threading's
    WeakSet of threads), and so may the cyclic collector at any allocation.
    So the killers stay alive and the collector waits until the test ends.
    SIGINT gets Python's own handler meanwhile: a process started in the
    background by a shell without job control inherits SIGINT ignored, and
    Python then never raises KeyboardInterrupt."""
    enabled = gc.isenabled()
    handler = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    gc.disable()
    try:
        yield
    finally:
        _KILLERS.clear()
        if handler is not None:     # (None: a handler not set from Python)
            signal.signal(signal.SIGINT, handler)
        if enabled:
            gc.enable()


def _killer(delay):
    """A thread that sends SIGINT to this process after delay seconds, once
    started (from inside the caller's try: it may fire while starting). It
    is kept alive until the test ends (see the fixture above)."""
    def run():
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGINT)
    t = threading.Thread(target=run, daemon=True)
    _KILLERS.append(t)
    return t


def _attempts():
    """One case's tries: MAX_STEPS, then more until MAX_SECONDS have passed
    since the first."""
    end = time.monotonic() + MAX_SECONDS
    k = 0
    while k < MAX_STEPS or time.monotonic() < end:
        yield k
        k += 1


def _settle(t):
    """Wait for the killer to have signalled, and take the signal here if it
    is still pending (it landed after the step). True if it was taken here."""
    late = False
    while True:
        try:
            if t.ident is None:         # interrupted before it was started
                t.start()
            t.join()
            time.sleep(0.0002)          # checks for pending signals
            return late
        except KeyboardInterrupt:
            late = True


def _interrupted_steps(step, snapshot, count, twin_step, rng):
    """Run steps, each with a SIGINT after a random delay up to a little more
    than a step takes, until HITS of them were interrupted (_attempts:
    MAX_STEPS tries, more within MAX_SECONDS); after each, the arrays
    (snapshot[0]()) and count() must be those after a whole step (as the
    uninterrupted twin's, snapshot[1]()) or those before it. Returns how
    many steps were interrupted."""
    hits, took, scale = 0, 0.002, 1.0
    for _ in _attempts():
        if hits >= HITS:
            break
        before, n0 = [a.copy() for a in snapshot[0]()], count()
        t = _killer(rng.uniform(0.0, 1.5 * took * scale))
        t0 = time.perf_counter()
        try:
            t.start()
            step()
            took = 0.8 * took + 0.2 * (time.perf_counter() - t0)
        except KeyboardInterrupt:
            hits += 1
            scale = min(1.0, 1.25 * scale)
        if _settle(t):
            # the signal came after the step: on a busy machine the killer
            # thread wakes late, so aim earlier (down to firing at once)
            scale *= 0.7
        n1 = count()
        after = snapshot[0]()
        if n1 == n0:
            for a, b in zip(after, before):
                assert np.array_equal(a, b), "an interrupted step wrote without counting"
        else:
            assert n1 == n0 + 1
            twin_step()
            for a, b in zip(after, snapshot[1]()):
                assert np.array_equal(a, b), "a counted step was not written in full"
    return hits


def _arrays(opt, params):
    return list(params) + [a for arrs in opt.state.values() for a in arrs]


@pytest.mark.parametrize("how", ["schedule", "lr", "schedule+skip"])
def test_interrupted_optim_step_is_whole_or_absent(how):
    rng = np.random.default_rng(0)
    x0 = [rng.standard_normal(s) for s in SHAPES]
    g = [rng.standard_normal(s) for s in SHAPES]
    kw = {"lr": 0.01} if how == "lr" else {"schedule": lambda s: 0.01 / (1 + s)}
    step_kw = {"max_grad_norm": 1.0}
    if how.endswith("skip"):
        step_kw["skip_if_nonfinite"] = True
    xs, ys = [a.copy() for a in x0], [a.copy() for a in x0]
    opt, twin = optim.Adam(xs, **kw), optim.Adam(ys, **kw)
    hits = _interrupted_steps(lambda: opt.step(g, **step_kw),
                              (lambda: _arrays(opt, xs), lambda: _arrays(twin, ys)),
                              lambda: opt._steps, lambda: twin.step(g, **step_kw), rng)
    assert hits == HITS


@pytest.mark.parametrize("route", ["prepared", "full"])
def test_interrupted_torch_step_is_whole_or_absent(route):
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(1)
    x0 = [torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in SHAPES]
    ps = [torch.nn.Parameter(a.clone()) for a in x0]
    qs = [torch.nn.Parameter(a.clone()) for a in x0]
    for p, q in zip(ps, qs):
        p.grad = torch.from_numpy(rng.standard_normal(tuple(p.shape)).astype(np.float32))
        q.grad = p.grad.clone()
    opt, twin = ft.Adam(ps, lr=0.01), ft.Adam(qs, lr=0.01)
    opt.step()
    twin.step()

    def arrays(o, params):
        out = [p.detach().numpy() for p in params]
        for p in params:
            st = o.state[p]
            out += [st[k].numpy() for k in ("exp_avg", "exp_avg_sq")]
        return out

    def step():
        if route == "full":
            opt._prep = None
        opt.step()

    def count():
        return [float(opt.state[p]["step"]) for p in ps][0]
    hits = _interrupted_steps(step, (lambda: arrays(opt, ps), lambda: arrays(twin, qs)),
                              count, twin.step, rng)
    assert hits == HITS


def _strided(rng, k):
    """k arrays that take the checked route's copies (every other column of
    a bigger array), with the buffers they are views of."""
    bases = [np.abs(rng.standard_normal((s[0], 2 * int(np.prod(s[1:]))))) for s in SHAPES[:k]]
    return bases, [b[:, ::2] for b in bases]


CALLS = {
    "adamw": lambda x, g, s: fastopt.adamw(x, g, s[0], s[1], lr=0.01, step=3),
    "adamw+clip": lambda x, g, s: fastopt.adamw(x, g, s[0], s[1], lr=0.01, step=3,
                                                max_grad_norm=1.0),
    "onnx_adam": lambda x, g, s: fastopt.onnx_adam(x, g, s[0], s[1], lr=0.01, t=3),
    "onnx_momentum": lambda x, g, s: fastopt.onnx_momentum(x, g, s[0], lr=0.01, t=3),
    "onnx_momentum+agc": lambda x, g, s: fastopt.onnx_momentum(x, g, s[0], lr=0.01, t=3,
                                                               clipping=0.05),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_interrupted_public_call_on_copies_is_whole_or_absent(name):
    """A public in-place function whose arrays need the checked route's
    copies writes them back after its C call: an interrupt must not stop
    that write-back between two arrays."""
    call = CALLS[name]
    n_states = 2 if "adam" in name else 1
    rng = np.random.default_rng(2)
    bases, xs = _strided(rng, 3)
    sbases = [_strided(rng, 3) for _ in range(n_states)]
    states = [views for _, views in sbases]
    g = [rng.standard_normal(x.shape) for x in xs]
    written = bases + [b for bs, _ in sbases for b in bs]
    twin_bases, twin_xs = _strided(rng, 3)
    twin_s = [_strided(rng, 3) for _ in range(n_states)]
    twin = twin_bases + [b for bs, _ in twin_s for b in bs]
    hits, took, scale = 0, 0.002, 1.0
    for _ in _attempts():
        if hits >= HITS:
            break
        before = [a.copy() for a in written]
        for t, b in zip(twin, before):
            t[...] = b
        call(twin_xs, g, [views for _, views in twin_s])     # the whole call
        t = _killer(rng.uniform(0.0, 1.5 * took * scale))
        t0 = time.perf_counter()
        try:
            t.start()
            call(xs, g, states)
            took = 0.8 * took + 0.2 * (time.perf_counter() - t0)
        except KeyboardInterrupt:
            hits += 1
            scale = min(1.0, 1.25 * scale)
        if _settle(t):
            scale *= 0.7              # a late signal: aim earlier (see above)
        if any(a.tobytes() != b.tobytes() for a, b in zip(written, before)):
            whole = [a.tobytes() == b.tobytes() for a, b in zip(written, twin)]
            assert all(whole), f"an interrupted call was written in part: {whole}"
    assert hits == HITS


@pytest.mark.parametrize("kw", [{}, {"max_grad_norm": 1.0}])
def test_interrupted_sharded_step_is_whole_or_absent(kw):
    """ShardedOptimizer.step on one rank: its count, its parameters (the
    flat buffers) and its shard's states move together."""
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    from fastopt.distributed import ShardedOptimizer

    rng = np.random.default_rng(3)
    x0 = [rng.standard_normal(s) for s in SHAPES]
    g = [rng.standard_normal(s) for s in SHAPES]
    opt, twin = (ShardedOptimizer(optim.Adam, [a.copy() for a in x0], lr=0.01,
                                  schedule=None, comm=MPI.COMM_SELF) for _ in range(2))

    def arrays(o):
        return list(o.params) + [a for arrs in o.inner.state.values() for a in arrs]
    hits = _interrupted_steps(lambda: opt.step(g, **kw), (lambda: arrays(opt),
                                                          lambda: arrays(twin)),
                              lambda: opt.steps, lambda: twin.step(g, **kw), rng)
    assert hits == HITS


def _saved_then_stepped(tmp_path):
    """An optimizer saved to tmp_path/ck.npz and stepped once more: (the
    optimizer, the path, the bytes saved)."""
    opt = optim.OnnxMomentum([np.ones(5)], lr=0.1)
    opt.step([np.ones(5)])
    path = tmp_path / "ck.npz"
    opt.save(path)
    saved = path.read_bytes()
    opt.step([np.ones(5)])
    return opt, path, saved


# np.savez's zip writer, stopped at the end of an entry, fails in its own
# cleanup (and its ZipFile's __del__ complains once more)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_save_interrupted_inside_the_zip_writer_raises_keyboard_interrupt(
        tmp_path, monkeypatch):
    """Ctrl-C at the end of an entry of np.savez's zip writer: its cleanup
    raises ValueError, which must not replace the KeyboardInterrupt; the
    previous checkpoint stays, and no temporary file."""
    import zipfile

    opt, path, saved = _saved_then_stepped(tmp_path)
    real = zipfile._ZipWriteFile.close

    def close(self):
        monkeypatch.setattr(zipfile._ZipWriteFile, "close", real)
        raise KeyboardInterrupt
    monkeypatch.setattr(zipfile._ZipWriteFile, "close", close)
    with pytest.raises(KeyboardInterrupt):
        opt.save(path)
    assert path.read_bytes() == saved
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]


def test_a_sigint_during_a_save_is_not_lost_in_a_finalizer(tmp_path, monkeypatch):
    """A SIGINT whose handler would run inside a finalizer the zip writer
    runs (where Python prints the KeyboardInterrupt and drops it) is raised
    once the archive is written: the save is undone, the old file stays."""
    opt, path, saved = _saved_then_stepped(tmp_path)
    real = np.savez

    class Finalized:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs here, in __del__
            self.done = True

    def savez(*args, **kwargs):
        real(*args, **kwargs)
        Finalized()                         # made and finalized at once

    monkeypatch.setattr(np, "savez", savez)
    with pytest.raises(KeyboardInterrupt):
        opt.save(path)
    assert path.read_bytes() == saved
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]
