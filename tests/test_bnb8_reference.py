"""The NumPy reference of bitsandbytes' blockwise 8-bit states
(fastopt/_reference/bnb8.py): its maps are bitsandbytes', bit for bit; its
nearest-code rule gives what the CUDA kernels' seven-step search gives; a
stored state round-trips as the format says."""
import pathlib

import numpy as np
import pytest

from fastopt._reference import bnb8

F32 = np.float32
MAPS = pathlib.Path(__file__).parent / "data" / "bnb8_maps.txt"


def _stored(kind):
    rows = [ln.split() for ln in MAPS.read_text().splitlines() if ln[:1] == kind]
    assert [int(r[1]) for r in rows] == list(range(256))
    return np.array([int(r[2], 16) for r in rows], np.uint32)


@pytest.mark.parametrize("signed,kind", [(True, "S"), (False, "U")])
def test_the_maps_are_bitsandbytes_maps(signed, kind):
    code = bnb8.dynamic_map(signed)
    np.testing.assert_array_equal(code.view(np.uint32), _stored(kind))
    assert (np.diff(code) > 0).all()
    assert code[255] == 1.0 and (code[127] == 0.0 if signed else code[0] == 0.0)


def test_the_maps_equal_the_installed_bitsandbytes():
    F = pytest.importorskip("bitsandbytes.functional")
    for signed in (True, False):
        theirs = F.create_dynamic_map(signed=signed).numpy().astype(F32)
        np.testing.assert_array_equal(bnb8.dynamic_map(signed).view(np.uint32),
                                      theirs.view(np.uint32))


def _kernel_search(code, x, signed):
    """The CUDA kernels' code search, step by step: a binary search from the
    middle with halving steps 64 .. 1, bounded by -1 (signed) or 0 and by
    1.0, then the nearer of the last two candidates (float32 midpoints)."""
    pivot, hi, lo = 127, 255, 0
    lower, upper = F32(-1.0 if signed else 0.0), F32(1.0)
    val = code[127]
    step = 64
    while step:
        if x > val:
            lo, lower, pivot = pivot, val, pivot + step
        else:
            hi, upper, pivot = pivot, val, pivot - step
        val = code[pivot]
        step //= 2
    if x > val:
        return hi if x > (upper + val) * F32(0.5) else pivot
    return lo if x < (lower + val) * F32(0.5) else pivot


def _probes(code, seed, n):
    """Values to search: every code, every midpoint and its neighbours, n
    uniform values over [-1.2, 1.2], the signed zeros, +-1, +-2, +-inf."""
    mids = (code[:-1] + code[1:]) * F32(0.5)
    return np.concatenate([code, mids, np.nextafter(mids, F32(2)), np.nextafter(mids, F32(-2)),
                           np.random.default_rng(seed).uniform(-1.2, 1.2, n).astype(F32),
                           np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, np.inf, -np.inf], F32)])


@pytest.mark.parametrize("signed", [True, False])
def test_nearest_code_is_the_kernels_search(signed):
    code = bnb8.dynamic_map(signed)
    mids = (code[:-1] + code[1:]) * F32(0.5)
    xs = _probes(code, 0, 4000)
    for x in xs.astype(F32):
        assert bnb8.nearest_code(x, code) == _kernel_search(code, x, signed), x
    assert bnb8.nearest_code(F32(np.nan), code) == _kernel_search(code, F32(np.nan), signed) == 0
    # an exact midpoint goes to the even index of its pair
    k = 200
    assert bnb8.nearest_code(mids[k], code) == (k if k % 2 == 0 else k + 1)


def test_a_state_round_trips_as_the_format_says():
    rng = np.random.default_rng(3)
    signed, unsigned = bnb8.dynamic_map(True), bnb8.dynamic_map(False)
    m = (rng.standard_normal(700) * 1e-3).astype(F32)       # 3 blocks, the last of 188
    m[5] = F32(-1e-12)                                       # tiny and negative
    m[300:556] = 0.0                                         # a block of zeros
    codes, absmax = bnb8.quantize(m, signed, True)
    assert codes.dtype == np.uint8 and absmax.shape == (bnb8.blocks(700),) == (3,)
    np.testing.assert_array_equal(absmax[[0, 2]], [np.abs(m[:256]).max(), np.abs(m[512:]).max()])
    assert absmax[1] == np.abs(m[256:512]).max()
    back = bnb8.dequantize(codes, absmax, signed)
    assert back[5] < 0                                       # the sign fix kept it negative
    nz = m != 0
    assert (np.sign(back[nz]) == np.sign(m[nz])).all()
    # each value within half the gap around its code (the fix excepted)
    for i in np.flatnonzero(nz)[:300]:
        b = i // 256
        q = m[i] / absmax[b]
        c = bnb8.nearest_code(q, signed)
        assert abs(signed[c] - q) <= abs(signed[min(c + 1, 255)] - signed[max(c - 1, 0)])
    v = np.abs(rng.standard_normal(300)).astype(F32)
    vc, va = bnb8.quantize(v, unsigned, False)
    assert (bnb8.dequantize(vc, va, unsigned) <= va[np.arange(300) // 256]).all()
    assert vc.reshape(-1)[np.argmax(v[:256])] == 255         # the block's largest is 1.0


@pytest.mark.parametrize("signed", [True, False])
def test_nearest_codes_is_nearest_code_elementwise(signed):
    code = bnb8.dynamic_map(signed)
    xs = np.append(_probes(code, 1, 3000), F32(np.nan))
    np.testing.assert_array_equal(bnb8.nearest_codes(xs, code),
                                  [bnb8.nearest_code(x, code) for x in xs])


def test_quantize_is_the_format_element_by_element():
    rng = np.random.default_rng(9)
    v = (rng.standard_normal(600) * 1e-3).astype(F32)
    v[[3, 4, 5, 6]] = [0.0, -0.0, -1e-12, np.nan]
    v[300:556] = 0.0
    code = bnb8.dynamic_map(True)
    codes, absmax = bnb8.quantize(v, code, True)
    for i, x in enumerate(v):
        a = absmax[i // bnb8.BLOCK]
        with np.errstate(invalid="ignore", divide="ignore"):
            want = bnb8.sign_fix(bnb8.nearest_code(x / a, code), x, code)
        assert codes[i] == want, i
