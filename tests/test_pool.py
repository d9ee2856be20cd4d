"""The parallel driver (src_c/pool.c): when it is entered, bit-identity for
every thread count, fork safety, exit, and the OMP_WAIT_POLICY switch.

The driver's facts come from the C counters (fo_get_thread_stats): serial and
pooled calls, and what the latest call was allowed. No timing is asserted.
"""
from __future__ import annotations

import textwrap

import numpy as np
import pytest
from _subprocess import run_python

import fastopt
from fastopt import _ext

SERIAL = _ext.tuning()["serial_bytes"]
THREADED = _ext.have_openmp()


def thread_stats(op="momentum"):
    """The parallel driver's counters (one pool for every op)."""
    return _ext.thread_stats()


def call(op, xs, n_threads=None):
    """One multi-tensor call of op on float arrays xs (updated in place)."""
    gs = [np.full_like(x, 0.5) for x in xs]
    vs = [np.zeros_like(x) for x in xs]
    hs = [np.zeros_like(x) for x in xs]
    if op == "momentum":
        fastopt.onnx_momentum(xs, gs, vs, lr=0.1, t=1, norm_coefficient=0.01,
                         n_threads=n_threads)
    elif op == "adagrad":
        fastopt.onnx_adagrad(xs, gs, vs, lr=0.1, t=1, decay_factor=0.1, epsilon=1e-6,
                        norm_coefficient=0.01, n_threads=n_threads)
    elif op == "adam":
        fastopt.onnx_adam(xs, gs, vs, hs, lr=0.1, t=1, n_threads=n_threads)
    elif op == "agc":
        fastopt.agc(xs, gs, clipping=0.01, n_threads=n_threads)
        return gs
    elif op == "momentum+agc":
        fastopt.onnx_momentum(xs, gs, vs, lr=0.1, t=1, clipping=0.01, n_threads=n_threads)
    return xs


OPS = ["momentum", "adagrad", "adam", "agc", "momentum+agc"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_threads", [None, 2, 8, -1])
def test_never_parallel_below_serial_threshold(op, dtype, n_threads):
    es = np.dtype(dtype).itemsize
    for total in (1, 1000, SERIAL // es // 2, SERIAL // es - 1):
        xs = [np.linspace(-1, 1, total // 3 + 1).astype(dtype),
              np.linspace(-2, 2, total - total // 3 - 1 or 1).astype(dtype)
              .reshape(-1, 1)]
        before = thread_stats()
        call(op, xs, n_threads)
        after = thread_stats()
        assert after["parallel_calls"] == before["parallel_calls"]
        assert after["serial_calls"] == before["serial_calls"] + 1
        assert after["last_threads"] == 1
        assert after["last_bytes"] < SERIAL


@pytest.mark.parametrize("op", ["momentum", "adam", "agc"])
def test_one_thread_is_serial_at_every_size(op):
    xs = [np.ones(4 * SERIAL // 4, np.float32)]
    before = thread_stats()
    call(op, xs, n_threads=1)
    after = thread_stats()
    assert after["parallel_calls"] == before["parallel_calls"]
    assert after["last_threads"] == 1
    assert after["last_bytes"] == 4 * SERIAL


@pytest.mark.parametrize("op", ["momentum", "agc"])
def test_above_threshold_allowed_at_most_n_threads(op):
    xs = [np.ones(8 * SERIAL // 4, np.float32)]
    for nth in (2, 3):
        call(op, xs, n_threads=nth)
        s = thread_stats()
        assert 1 <= s["last_threads"] <= (nth if THREADED else 1)
        assert 1 <= s["last_joined"] <= s["last_threads"]


def _awkward(dtype, seed):
    """Tensors whose concatenation crosses the serial threshold several times
    over, with odd lengths and misaligned starts."""
    rng = np.random.default_rng(seed)
    n = SERIAL // np.dtype(dtype).itemsize
    sizes = [3 * n + 17, 1, 1023, n // 3 + 5, 2 * n + 1]
    out = []
    for s in sizes:
        base = rng.standard_normal(s + 1).astype(dtype)
        out.append(base[1:])                       # misaligned view
    out.append(rng.standard_normal((257, 515)).astype(dtype))   # AGC rows/cols
    return out


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bit_identical_for_every_thread_count(op, dtype):
    ref = call(op, _awkward(dtype, 3), n_threads=1)
    for nth in range(2, 9):
        got = call(op, _awkward(dtype, 3), n_threads=nth)
        for a, b in zip(ref, got):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def _script(body):
    return textwrap.dedent("""
        import os, sys, warnings
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads
        import numpy as np
        import fastopt
        def upd(n_threads):
            x = np.ones(4_000_000, np.float32); g = np.full_like(x, 0.5)
            v = np.zeros_like(x)
            fastopt.onnx_momentum(x, g, v, lr=0.5, t=1, n_threads=n_threads)
            assert float(x[0]) == 0.75 and float(x[-1]) == 0.75
        """) + textwrap.dedent(body)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no os.fork")
def test_fork_after_pool_started(tmp_path, monkeypatch):
    """A pool made before fork() must not hang the child: the child re-makes
    its threads on demand. (OMP_DYNAMIC=false: threads even on a busy
    machine.)"""
    monkeypatch.setenv("OMP_DYNAMIC", "false")
    r = run_python(["-c", _script("""
        def pool_size():
            return fastopt._ext.thread_stats()["pool_size"]
        upd(2)                           # the first call always uses the pool
        assert pool_size() >= 1 or not fastopt._ext.have_openmp()
        pid = os.fork()
        if pid == 0:
            try:
                assert pool_size() == 0
                upd(2)
                assert pool_size() >= 1 or not fastopt._ext.have_openmp()
                for _ in range(5):
                    upd(2)
                    upd(None)
                fastopt.agc([np.ones((600, 600), np.float32)],
                            [np.ones((600, 600), np.float32)], n_threads=2)
            except BaseException:
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        upd(2)                           # the parent's pool still works
        print("child", os.waitstatus_to_exitcode(status))
        """)], cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "child 0" in r.stdout


def test_exit_with_pool_running(tmp_path, monkeypatch):
    """The interpreter exits promptly with pool threads alive, also while a
    daemon thread is mid-call."""
    monkeypatch.setenv("OMP_DYNAMIC", "false")
    r = run_python(["-c", _script("""
        import threading
        def loop():
            while True:
                upd(2)
        threading.Thread(target=loop, daemon=True).start()
        upd(2)
        print("ok")
        """)], cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


@pytest.mark.parametrize("policy, spins", [("passive", False), ("ACTIVE", True),
                                           (None, True)])
def test_omp_wait_policy_sets_the_spin(tmp_path, monkeypatch, policy, spins):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    if policy is not None:
        monkeypatch.setenv("OMP_WAIT_POLICY", policy)
    code = _script("""
        upd(2)
        print(fastopt._ext.thread_stats()["spin_ns"])
        """)
    r = run_python(["-c", code], cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr
    spin = int(r.stdout.strip())
    if not THREADED:
        assert spin == 0
    else:
        assert (spin > 0) == spins


@pytest.mark.skipif(not THREADED or not (2 <= __import__("os").cpu_count() <= 8)
                    or not __import__("os").path.exists("/proc/loadavg"),
                    reason="needs the pool, Linux's /proc/loadavg and 2-8 cores")
def test_no_free_core_keeps_mid_size_calls_serial():
    """With other busy processes on every core but the caller's (one on a
    2-core machine), a call under the busy-machine size (16 MiB) is not
    handed to a worker: there it would share a core with a busy task."""
    import os
    import subprocess
    import sys
    import time
    spin = "import time\nt = time.time()\nwhile time.time() - t < 3: pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", spin])
             for _ in range(os.cpu_count() - 1)]
    try:
        time.sleep(0.3)                       # the spinners are running
        x = [np.ones(1 << 20, np.float32)]    # 4 MiB: pooled on a free machine
        allowed = []
        for _ in range(40):                   # samples of the load, 100 ms apart
            call("momentum", x, n_threads=2)
            allowed.append(thread_stats()["last_threads"])
            time.sleep(0.025)
        assert allowed[-4:] == [1, 1, 1, 1], allowed
    finally:
        for p in procs:
            p.kill()
            p.wait()
