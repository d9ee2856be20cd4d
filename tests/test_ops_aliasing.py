"""Aliasing between the arrays of one call: a gradient that is its own output,
shared gradients, and overlapping outputs found among many tensors.
"""

import numpy as np
import pytest

import fastopt
from fastopt import _reference as ref


def test_gradient_aliasing_an_output_exactly_is_read_before_writing():
    """g may be the very array it updates (read through a copy)."""
    x = np.arange(5.0)
    v = np.zeros(5)
    exp = ref.momentum(x, x, v, lr=0.1, t=0)
    fastopt.onnx_momentum(x, x, v, lr=0.1, t=0)
    np.testing.assert_array_equal(x, exp[0])
    np.testing.assert_array_equal(v, exp[1])


def test_overlap_found_among_many_tensors():
    """Enough ranges for the sorted sweep (not the pairwise check)."""
    arena = np.zeros(400, np.float32)
    xs = [arena[i * 4:(i + 1) * 4] for i in range(40)]      # adjacent, disjoint
    vs = [np.zeros(4, np.float32) for _ in range(40)]
    gs = [np.ones(4, np.float32) for _ in range(40)]
    fastopt.onnx_momentum(xs, gs, vs, lr=1.0, t=0)               # touching is fine
    np.testing.assert_array_equal(arena[:160], -1.0)
    vs[31] = arena[158:162]                                  # straddles x[39]/x[40]
    snap = arena.tobytes()
    with pytest.raises(ValueError, match=r"x\[39\] and v\[31\] share memory"):
        fastopt.onnx_momentum(xs, gs, vs, lr=1.0, t=0)
    assert arena.tobytes() == snap
    vs[31] = np.zeros(4, np.float32)
    gs[7] = arena[101:105]                                   # straddles x[25]/x[26]
    with pytest.raises(ValueError, match=r"g\[7\] partially overlaps x\[25\]"):
        fastopt.onnx_momentum(xs, gs, vs, lr=1.0, t=0)
    assert arena.tobytes() == snap


@pytest.mark.parametrize("seed", range(40))
def test_overlap_detection_matches_brute_force(seed):
    """Random contiguous views of one arena: fastopt rejects a call exactly
    when some output shares memory with another array (a gradient that is an
    output's exact view excepted), whichever path (pairwise, sorted, reused
    order) the check takes."""
    rng = np.random.default_rng(seed)
    arena = np.zeros(2000, np.float64)
    n = int(rng.integers(1, 30))
    size = int(rng.integers(1, 12))

    def view():
        if rng.random() < 0.5:
            return np.zeros(size)
        start = int(rng.integers(0, 2000 - size))
        return arena[start:start + size]

    xs, gs, vs = [view() for _ in range(n)], [view() for _ in range(n)], [view() for _ in range(n)]
    for _ in range(2):   # twice: the second call may reuse the sorted order
        outs = [(a, True) for a in xs + vs] + [(a, False) for a in gs]
        bad = False
        for i, (a, oa) in enumerate(outs):
            for b, ob in outs[i + 1:]:
                if (oa or ob) and np.shares_memory(a, b):
                    same = (a.__array_interface__["data"][0] == b.__array_interface__["data"][0])
                    bad |= oa and ob or not same
        snap = arena.tobytes()
        if bad:
            with pytest.raises(ValueError, match="share memory|partially overlaps"):
                fastopt.onnx_momentum(xs, gs, vs, lr=0.5, t=1)
            assert arena.tobytes() == snap
        else:
            fastopt.onnx_momentum(xs, gs, vs, lr=0.5, t=1)
        gs = gs[::-1]


def test_shared_gradient_across_tensors():
    g = np.full(10, 0.5)
    xs = [np.ones(10), np.ones(10)]
    vs = [np.zeros(10), np.zeros(10)]
    fastopt.onnx_momentum(xs, [g, g], vs, lr=1.0, t=0)
    np.testing.assert_array_equal(xs[0], 0.5)
    np.testing.assert_array_equal(xs[1], 0.5)


@pytest.mark.parametrize("seed", range(20))
def test_overlap_found_after_a_stale_sorted_order(seed):
    """A valid many-tensor call caches the sorted order of its ranges; the
    next call permutes the tensors (the cached order no longer sorts them,
    possibly only far into the sweep) and adds one overlap: it is still found
    and nothing is written."""
    rng = np.random.default_rng(seed)
    n = 24
    arena = np.zeros(n * 8 + 8, np.float32)
    xs = [arena[i * 8:(i + 1) * 8] for i in range(n)]
    gs = [np.ones(8, np.float32) for _ in range(n)]
    vs = [np.zeros(8, np.float32) for _ in range(n)]
    fastopt.onnx_momentum(xs, gs, vs, lr=0.1, t=1)
    perm = rng.permutation(n)
    xs2, gs2, vs2 = [xs[k] for k in perm], [gs[k] for k in perm], [vs[k] for k in perm]
    j, k = (int(v) for v in rng.choice(n, 2, replace=False))
    vs2[j] = arena[int(perm[k]) * 8 + 3:int(perm[k]) * 8 + 11]   # straddles two x
    snap, vsnap = arena.tobytes(), [v.tobytes() for v in vs]
    with pytest.raises(ValueError, match="share memory"):
        fastopt.onnx_momentum(xs2, gs2, vs2, lr=0.1, t=1)
    assert arena.tobytes() == snap
    assert [v.tobytes() for v in vs] == vsnap
