"""The update pass runs the elements before a parameter's first 64-byte
boundary as a piece of their own (step_piece, src_c/step.inc, and the
16-bit states' step_piece_apart): wherever the arrays start within a cache
line, every bit written is the same."""
import itertools

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo

ml_dtypes = pytest.importorskip("ml_dtypes")


def at(n, dtype, offset):
    """n elements of dtype starting offset elements past a 64-byte boundary."""
    size = np.dtype(dtype).itemsize
    raw = np.zeros(n * size + 64 + 64 * size, np.uint8)
    base = -raw.ctypes.data % 64 + offset * size
    return raw[base:base + n * size].view(dtype)


def run(n, dtype, offset, options, n_threads, copy, states=None):
    rng = np.random.default_rng(n)
    x, g = (at(n, dtype, offset) for _ in range(2))
    m, v = (at(n, states or dtype, offset) for _ in range(2))
    x[:], g[:] = rng.standard_normal((2, n))
    m[:], v[:] = rng.standard_normal(n), rng.random(n)
    w = at(n, ml_dtypes.bfloat16, offset % 3) if copy else None
    kw = dict(options, param_copies=w) if copy else options
    fastopt.adamw(x, g, m, v, lr=1e-2, step=3, n_threads=n_threads, **kw)
    return [a.view(np.uint8).copy() for a in (x, m, v, w) if a is not None]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [7, 300, 5000, 70001])
def test_every_start_within_a_line_writes_the_same_bits(dtype, n):
    for options, n_threads, copy in itertools.product(
            [{}, dict(clip_value=0.5), dict(max_grad_norm=1.0), dict(grad_scale=4.0)], [1, 2],
            [False, True] if dtype == np.float32 else [False]):
        want = run(n, dtype, 0, options, n_threads, copy)
        for offset in range(1, 64 // np.dtype(dtype).itemsize):
            got = run(n, dtype, offset, options, n_threads, copy)
            assert all(np.array_equal(a, b) for a, b in zip(got, want)), (offset, options)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
def test_bfloat16_states_too(rounding):
    """Their tiles start after the head as well; stochastic rounding is keyed
    by element, not by tile."""
    for n, n_threads in itertools.product([300, 70001], [1, 2]):
        options = dict(state_rounding=rounding, seed=5)
        want = run(n, np.float32, 0, options, n_threads, False, ml_dtypes.bfloat16)
        for offset in range(1, 16):
            got = run(n, np.float32, offset, options, n_threads, False, ml_dtypes.bfloat16)
            assert all(np.array_equal(a, b) for a, b in zip(got, want)), offset


@pytest.mark.parametrize("name", ["RMSprop", "Lion", "Adadelta", "NAdam"])
def test_the_table_rules_too(name):
    n, outs = 3001, []
    for offset in range(16):
        rng = np.random.default_rng(0)
        x, g = at(n, np.float32, offset), at(n, np.float32, offset)
        x[:] = rng.standard_normal(n)
        opt = getattr(fo, name)([x], lr=1e-2, n_threads=2)
        for _ in range(3):
            g[:] = rng.standard_normal(n)
            opt.step([g])
        outs.append(x.view(np.uint8).copy())
    assert all(np.array_equal(o, outs[0]) for o in outs)
