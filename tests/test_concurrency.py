"""Concurrency: 8 Python threads x 1,000 calls each (Momentum, Adagrad,
Adam and AGC-fused Momentum), with OpenMP threads inside the calls, on
per-thread parameters and states and on gradients shared read-only between
all threads (contiguous ones through the fast path, strided
and broadcast ones through the copying path). Every result must equal, bit
for bit, a serial replay of the same sequence of calls on one thread.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import public_names

import fastopt

N_PY_THREADS = 8
CALLS = 1000
OPS = ("momentum", "adagrad", "adam", "momentum+agc")
STATES = {"momentum": 1, "adagrad": 1, "adam": 2, "momentum+agc": 1}


def shared_gradients():
    """Read-only gradients every thread reads at once."""
    serial = fastopt._ext.tuning()["serial_bytes"]
    rng = np.random.default_rng(7)
    big = serial // 4 + 1000          # float32 elements: above the serial threshold
    g = [rng.standard_normal(big).astype(np.float32),
         rng.standard_normal(301).astype(np.float64),
         rng.standard_normal((7, 9)).astype(np.float32)]
    strided = rng.standard_normal(2 * 301).astype(np.float64)[::2]   # non-contiguous
    row = rng.standard_normal(9).astype(np.float32)                    # broadcast
    for a in g + [strided, row]:
        a.flags.writeable = False
    return g, strided, row


def fresh_params(seed):
    rng = np.random.default_rng(seed)
    serial = fastopt._ext.tuning()["serial_bytes"]
    big = serial // 4 + 1000
    return [rng.standard_normal(big).astype(np.float32),
            rng.standard_normal(301).astype(np.float64),
            rng.standard_normal((7, 9)).astype(np.float32)]


def plan(k):
    """What Python thread k does: its op, thread count and hyperparameters."""
    op = OPS[k % 4]
    if op == "momentum+agc" and not hasattr(fastopt, "agc"):
        op = "momentum"
    n_threads = 2 + k % 3
    return op, n_threads


def run_sequence(k, shared, n_threads_override=None, check_ctx=False):
    op, n_threads = plan(k)
    if n_threads_override is not None:
        n_threads = n_threads_override
    g, strided, row = shared
    xs = fresh_params(100 + k)
    states = [[np.abs(a) * 0.1 for a in fresh_params(200 + k + 10 * j)]
              for j in range(STATES[op])]
    fn = public_names.op(op.split("+")[0])
    extra = {"clipping": [0.01, None, 0.1]} if op == "momentum+agc" else {}
    for i in range(CALLS):
        lr = 1e-3 * (1 + (i + k) % 5)
        if i % 4 == 3:   # strided and broadcast shared gradients: the copying path
            gs = [g[0], strided, row]
        else:
            gs = g
        kw = {"lr": lr, "t": i + (1 if op == "adam" else 0), **extra}
        if check_ctx:
            with fastopt.set_num_threads(n_threads):
                assert fastopt.get_num_threads() == n_threads
                fn(xs, gs, *states, **kw)
                assert fastopt.get_num_threads() == n_threads
        else:
            fn(xs, gs, *states, **kw, n_threads=n_threads)
    return xs, states


def test_threads_match_serial_replay():
    shared = shared_gradients()
    snapshot = [a.tobytes() for a in shared[0] + [shared[1], shared[2]]]
    start = threading.Barrier(N_PY_THREADS)

    def work(k):
        start.wait()
        return run_sequence(k, shared, check_ctx=k % 2 == 1)

    with ThreadPoolExecutor(N_PY_THREADS) as pool:
        results = list(pool.map(work, range(N_PY_THREADS)))

    for k, (xs, states) in enumerate(results):
        xs1, states1 = run_sequence(k, shared, n_threads_override=1)
        for a, b in zip(xs, xs1):
            assert a.tobytes() == b.tobytes(), f"python thread {k}: x differs from serial"
        for sa, sb in zip(states, states1):
            for a, b in zip(sa, sb):
                assert a.tobytes() == b.tobytes(), f"python thread {k}: state differs"
        assert all(np.isfinite(a).all() for a in xs)
    # the shared gradients were only read
    assert [a.tobytes() for a in shared[0] + [shared[1], shared[2]]] == snapshot


def test_thread_count_setting_is_per_thread():
    seen = {}
    start = threading.Barrier(N_PY_THREADS)

    def work(k):
        with fastopt.set_num_threads(k + 1):
            start.wait()
            for _ in range(200):
                seen.setdefault(k, set()).add(fastopt.get_num_threads())
        return fastopt.get_num_threads()

    before = fastopt.get_num_threads()
    with ThreadPoolExecutor(N_PY_THREADS) as pool:
        after = list(pool.map(work, range(N_PY_THREADS)))
    assert all(seen[k] == {k + 1} for k in range(N_PY_THREADS))
    assert fastopt.get_num_threads() == before
    assert all(a >= 1 for a in after)
