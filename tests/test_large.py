"""Opt-in: one tensor of more than 2**31 elements (64-bit indexing).

    python -m pytest tests/test_large.py --run-large       # ~18 GB of RAM, ~1 min

x and v are float32 arrays of N = 2**31 + 2**20 + 3 elements (8.6 GB each).
The gradient is np.zeros(N): calloc'd pages that are only ever read map the
kernel's shared zero page, so it costs no memory. With g = 0, t = 0,
norm_coefficient = 0.5, lr = 0.5 a Momentum step is exact in float32:
v = 0.5 * x and x = 0.75 * x. A second step on one thread (alpha = 0, t = 1)
gives x = 0.5625 * x0 and v = 0.375 * x0, again exactly. Every element is
checked (in chunks), so a skipped, doubled or misplaced chunk anywhere -- in
particular past element 2**31 -- fails the test.
"""
from __future__ import annotations

import numpy as np
import pytest

import fastopt

N = 2**31 + 2**20 + 3
PERIOD = 4093                      # prime: values repeat out of step with any chunking
CHUNK = 1 << 26
NEED_BYTES = 2 * 4 * N + (2 << 30)


def mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def pattern(lo: int, hi: int) -> np.ndarray:
    return (np.arange(lo, hi, dtype=np.int64) % PERIOD + 1).astype(np.float32)


def fill(x: np.ndarray) -> None:
    row = pattern(0, PERIOD)
    full = (x.size // PERIOD) * PERIOD
    x[:full].reshape(-1, PERIOD)[...] = row
    x[full:] = pattern(full, x.size)


def assert_scaled(a: np.ndarray, factor: float, what: str) -> None:
    for lo in range(0, a.size, CHUNK):
        hi = min(lo + CHUNK, a.size)
        expect = pattern(lo, hi) * np.float32(factor)
        bad = np.flatnonzero(a[lo:hi] != expect)
        assert bad.size == 0, (f"{what}: {bad.size} wrong elements in [{lo}, {hi}), "
                               f"first at {lo + int(bad[0])}")


@pytest.mark.large
def test_momentum_beyond_2_pow_31_elements():
    if mem_available() < NEED_BYTES:
        pytest.skip(f"needs {NEED_BYTES / 2**30:.1f} GiB available, "
                    f"have {mem_available() / 2**30:.1f} GiB")
    x = np.empty(N, np.float32)
    fill(x)
    g = np.zeros(N, np.float32)        # read-only use: the zero page, no memory
    v = np.zeros(N, np.float32)
    assert x.size > 2**31 and x[2**31 + 5] == np.float32((2**31 + 5) % PERIOD + 1)

    fastopt.onnx_momentum(x, g, v, lr=0.5, t=0, norm_coefficient=0.5, n_threads=2)
    assert_scaled(x, 0.75, "x after the parallel step")
    assert_scaled(v, 0.5, "v after the parallel step")

    fastopt.onnx_momentum(x, g, v, lr=0.5, t=1, alpha=0.0, norm_coefficient=0.5, n_threads=1)
    assert_scaled(x, 0.5625, "x after the serial step")
    assert_scaled(v, 0.375, "v after the serial step")
    for lo in range(0, N, CHUNK):
        assert not g[lo:lo + CHUNK].any(), "the gradient was written"
