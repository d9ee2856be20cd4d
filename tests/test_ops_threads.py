"""Thread counts and configuration: concurrent Python threads, set_num_threads
(per thread), threadpoolctl limits and show_config.
"""
import threading

import numpy as np
import pytest

import fastopt
from fastopt import _ext


def test_threads_concurrent_python_threads():
    """Calls from several Python threads on separate arrays (GIL released)."""
    rng = np.random.default_rng(9)
    n = 200_000
    work = [(rng.standard_normal(n), rng.standard_normal(n)) for _ in range(6)]
    expect = []
    for x0, g in work:
        x, v = x0.copy(), np.zeros(n)
        for t in range(20):
            fastopt.onnx_momentum(x, g, v, lr=0.01, t=t, n_threads=1)
        expect.append(x)
    out = [None] * len(work)
    shared_g = work[0][1]
    shared_g.flags.writeable = False

    def worker(i):
        x, v = work[i][0].copy(), np.zeros(n)
        for t in range(20):
            fastopt.onnx_momentum(x, work[i][1], v, lr=0.01, t=t, n_threads=2)
        out[i] = x

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(work))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for a, b in zip(out, expect):
        np.testing.assert_array_equal(a, b)


def test_set_num_threads_and_defaults():
    assert fastopt.get_num_threads() == _ext.max_threads()
    with fastopt.set_num_threads(3):
        assert fastopt.get_num_threads() == 3
        with fastopt.set_num_threads(-1):
            assert fastopt.get_num_threads() == _ext.num_procs()
        assert fastopt.get_num_threads() == 3
    assert fastopt.get_num_threads() == _ext.max_threads()
    with pytest.raises(ValueError, match="fastopt.set_num_threads: n_threads must be"):
        with fastopt.set_num_threads(0):
            pass


def test_set_num_threads_is_per_thread():
    seen = []
    with fastopt.set_num_threads(1):
        th = threading.Thread(target=lambda: seen.append(fastopt.get_num_threads()))
        th.start()
        th.join()
    assert seen == [_ext.max_threads()]


def test_threadpoolctl_limits_are_honoured():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    if not _ext.have_openmp():
        pytest.skip("serial build")
    with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
        assert fastopt.get_num_threads() == 1
    assert fastopt.get_num_threads() == _ext.max_threads()


def test_fastopt_default_wins_over_torch_set_num_threads():
    """docs/threads.md: torch.set_num_threads(1) may lower fastopt's default
    (one OpenMP runtime per process); fastopt.set_num_threads overrides it."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        with fastopt.set_num_threads(2):
            assert fastopt.get_num_threads() == 2
        assert fastopt.get_num_threads() in (1, _ext.max_threads())
    finally:
        torch.set_num_threads(before)


def test_show_config(capsys):
    fastopt.show_config()
    out = capsys.readouterr().out
    assert "OpenMP:" in out and "-fno-math-errno" in out and "-ffp-contract=off" in out
    assert "-ffast-math" not in out and "-march=native" not in out
    cfg = fastopt.config()
    assert ("OpenMP:        on" in out) == cfg["openmp"]
    if "runtime dispatch" in cfg["isa_paths"] and "AVX2+FMA" in cfg["isa_paths"]:
        assert ("bfloat16 parameters in their own type, Adam's bfloat16 states: x86-64-v4"
                in out)         # (GCC 12+)
    if "runtime dispatch" in cfg["isa_paths"]:
        assert "8-bit states coded and widened by byte permutes: AVX-512 VBMI" in out
