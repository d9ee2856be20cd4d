"""Leaks: reference counts of every argument are unchanged after many calls
(fast path, copying path, error path), traced Python memory blocks do not
grow, and the process's resident memory stays flat over 100,000 calls.
(Invalid reads/writes and C-level leaks: .ci/valgrind.sh.)
"""
from __future__ import annotations

import gc
import os
import sys
import tracemalloc

import numpy as np
import pytest

import fastopt

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def memory_in_use():
    """(bytes, what): the process's resident memory; under AddressSanitizer
    (.ci/sanitize.sh preloads it) the bytes its allocator has live instead,
    since ASan holds freed memory in a quarantine (256 MB by default) and
    the resident size then grows by tens of MB whatever the code does."""
    import ctypes
    try:
        live = ctypes.CDLL(None).__sanitizer_get_current_allocated_bytes
    except (AttributeError, OSError):
        return rss_bytes(), "RSS"
    live.restype = ctypes.c_size_t
    return int(live()), "ASan's live heap"


def workload():
    """A list of zero-argument callables covering the paths of every op."""
    f32, f64 = np.float32, np.float64
    x = np.ones(64, f32)
    g = np.full(64, 0.5, f32)
    v = np.zeros(64, f32)
    h = np.zeros(64, f32)
    xs = [np.ones(n, f64) for n in (1, 7, 33, 100)]
    gs = [np.full(n, 0.25, f64) for n in (1, 7, 33, 100)]
    vs = [np.zeros(n, f64) for n in (1, 7, 33, 100)]
    hs = [np.zeros(n, f64) for n in (1, 7, 33, 100)]
    xf = np.ones((8, 8), f32, order="F")
    gf = np.ones((8, 8), f32, order="F")
    vf = np.zeros((8, 8), f32, order="F")
    strided = np.ones(128, f32)[::2]
    row = np.ones(8, f32)
    lr_arr = np.array(0.001)
    bad_v = [np.zeros(n, f64) for n in (1, 7, 33)] + [np.zeros(3, f64)]
    ro = np.ones(64, f32)
    ro.flags.writeable = False
    # 200 tensors totalling just above the serial threshold: the OpenMP driver
    # (its work list is allocated per call; a leak would be ~1.6 kB a call)
    per = fastopt._ext.tuning()["serial_bytes"] // 4 // 200 + 1
    px = [np.ones(per, f32) for _ in range(200)]
    pg = [np.full(per, 1e-3, f32) for _ in range(200)]
    pv = [np.zeros(per, f32) for _ in range(200)]

    def err(fn):
        try:
            fn()
        except (TypeError, ValueError):
            return
        raise AssertionError("expected an error")

    return [
        lambda: fastopt.onnx_momentum(x, g, v, lr=1e-3, t=1),
        lambda: fastopt.onnx_momentum(px, pg, pv, lr=1e-3, t=1, n_threads=2),   # parallel
        lambda: fastopt.onnx_momentum(xs, gs, vs, lr=1e-3, t=1, mode="nesterov", n_threads=2),
        lambda: fastopt.onnx_adagrad(x, g, h, lr=1e-3, t=3),
        lambda: fastopt.onnx_adam(xs, gs, vs, hs, lr=1e-3, t=5),
        lambda: fastopt.onnx_momentum(xf, gf, vf, lr=1e-3, t=2),               # Fortran
        lambda: fastopt.onnx_adam(x, strided, v, h, lr=lr_arr, t=np.int64(2)),  # copying path
        lambda: fastopt.onnx_adagrad(xf, row, vf, lr=1e-3, t=1),              # broadcast g
        lambda: err(lambda: fastopt.onnx_momentum(xs, gs, bad_v, lr=1e-3, t=1)),
        lambda: err(lambda: fastopt.onnx_adam(ro, g, v, h, lr=1e-3, t=1)),
        lambda: err(lambda: fastopt.onnx_adagrad(x, g, h, lr=-1.0, t=1)),
    ] + agc_calls(x, g, v, xf, gf, vf, err)


def agc_calls(x, g, v, xf, gf, vf, err):
    if not hasattr(fastopt, "agc"):
        return []
    w = np.ones((16, 9), np.float32)
    gw = np.full((16, 9), 0.5, np.float32)
    vw = np.zeros((16, 9), np.float32)
    gc_ = np.empty_like(gw)

    def clip():
        np.copyto(gc_, gw)
        fastopt.agc(w, gc_, clipping=0.01)

    return [
        clip,
        lambda: fastopt.unitwise_norm(w, layout="io"),
        lambda: fastopt.onnx_momentum(w, gw, vw, lr=1e-3, t=1, clipping=0.01),
        lambda: fastopt.onnx_momentum([w, xf], [gw, gf], [vw, vf], lr=1e-3, t=1,
                                 clipping=[0.01, None], layout="io"),
        lambda: err(lambda: fastopt.agc(w, gw, clipping=-1.0)),
    ]


def test_reference_counts_unchanged():
    x = np.ones(50, np.float32)
    g = np.full(50, 0.5, np.float32)
    v = np.zeros(50, np.float32)
    s = np.ones(100, np.float32)[::2]
    lr = float("0.00125")        # a fresh float object, not a cached constant
    xs, gs, vs = [x], [g], [v]
    bad = np.zeros(3, np.float32)
    objs = [x, g, v, s, lr, xs, gs, vs, bad]
    before = [sys.getrefcount(o) for o in objs]
    for _ in range(2000):
        fastopt.onnx_momentum(x, g, v, lr=lr, t=1)          # fast path
        fastopt.onnx_momentum(xs, gs, vs, lr=lr, t=1)       # fast path, lists
        fastopt.onnx_momentum(x, s, v, lr=lr, t=1)          # copying path
        with pytest.raises(ValueError):
            fastopt.onnx_momentum(x, g, bad, lr=lr, t=1)    # error path
    gc.collect()
    after = [sys.getrefcount(o) for o in objs]
    assert after == before


def _blocks() -> int:
    return sum(stat.count for stat in tracemalloc.take_snapshot().statistics("filename"))


def test_python_allocations_flat():
    # counts blocks, not bytes: NumPy keeps one ~1 MB block that comes and
    # goes, while a leak adds at least one block per call
    calls = workload()
    for i in range(2000):
        calls[i % len(calls)]()
    gc.collect()
    tracemalloc.start()
    try:
        base = _blocks()
        for i in range(5_500):
            calls[i % len(calls)]()
        gc.collect()
        growth = _blocks() - base
    finally:
        tracemalloc.stop()
    assert growth < 250, f"{growth} more Python memory blocks after 5,500 calls"


def test_rss_flat_over_100k_calls():
    """100,000 calls: every tenth one from the whole workload (copying
    paths, errors, the OpenMP driver, AGC), the rest fast-path updates;
    the memory in use (memory_in_use) stays flat.
    C-level leaks of any size are also caught by .ci/valgrind.sh
    (definitely-lost blocks allocated in fastopt's code)."""
    calls = workload()
    fast = calls[:1] + calls[2:4]           # fast path: single, lists
    def run(n):
        for i in range(n):
            if i % 10 == 0:
                calls[(i // 10) % len(calls)]()
            else:
                fast[i % len(fast)]()
    run(20_000)
    gc.collect()
    r0, what = memory_in_use()
    run(100_000)
    gc.collect()
    growth = memory_in_use()[0] - r0
    # malloc's own steps are up to ~1 MB here; a leak of one small object
    # per call would be >= 100_000 * 32 bytes = 3.2 MB
    assert growth < 3 * 1024 * 1024, f"{what} grew by {growth / 1e6:.2f} MB over 100,000 calls"
