"""8-bit blockwise states (bitsandbytes' format) of float32 parameters.

The contract (docs/semantics.md, "8-bit states"): a step reads each state
as ``map[code] * absmax`` of its block, runs the float32 rule unchanged, and
stores each new state block by block as fastopt/_reference/bnb8.py writes
out (the block's largest magnitude, the nearest code, ties to the even
code, the signed map's sign fix); so a step equals the float32 step on the
dequantized states followed by the reference's quantization, bit for bit in
parameters, codes and absmax, for every rule that has them, every gradient
type, option and thread count.
"""
import math

import numpy as np
import pytest

import fastopt
from fastopt import State8bit, _ext, _rules
from fastopt._reference import bnb8

ml_dtypes = pytest.importorskip("ml_dtypes")
F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)
SIGNED, UNSIGNED = bnb8.dynamic_map(True), bnb8.dynamic_map(False)
# a block exactly, one short, one over, a short last block, and a tensor that
# two threads split (over the serial threshold, cut at a block boundary)
SHAPES = [(1,), (256,), (255,), (3, 257), (70001,)]


def bits(a):
    return a.view(np.uint32) if a.dtype == F32 else a


# ---- the maps and one block ---------------------------------------------------------

@pytest.mark.parametrize("signed", [True, False])
def test_the_kernels_maps_are_bitsandbytes_maps(signed):
    np.testing.assert_array_equal(_ext.q8_map(0 if signed else 1).view(np.uint32),
                                  bnb8.dynamic_map(signed).view(np.uint32))
    np.testing.assert_array_equal(fastopt.State8bit.zeros(1, signed).dequantize(),
                                  np.zeros(1, F32))
    with pytest.raises(ValueError, match="kind is 0 or 1"):
        _ext.q8_map(2)
    with pytest.raises(ValueError, match="kind is 0 or 1"):
        _ext.q8_store(np.zeros(3, F32), 2)


def _awkward_blocks(rng):
    """Blocks of 1..256 values: plain, all zeros, signed zeros, tiny
    negatives, subnormals, every midpoint of a map (ties), a NaN."""
    out = []
    for n in (1, 2, 17, 255, 256):
        for scale in (1e-12, 1e-3, 1.0, 1e6):
            out.append((rng.standard_normal(n) * scale).astype(F32))
    out.append(np.zeros(256, F32))
    out.append(np.array([0.0, -0.0, -1e-12, 1e-12, 3.0], F32))
    out.append(np.array([1e-45, -1e-45, 2e-38], F32))
    for code in (SIGNED, UNSIGNED):
        mids = (code[:-1] + code[1:]) * F32(0.5)
        out.append(np.concatenate([[F32(1.0)], mids[:255]]).astype(F32))
        out.append(np.concatenate([[F32(1.0)], np.nextafter(mids[:255], F32(2))]).astype(F32))
        out.append(np.concatenate([[F32(1.0)], np.nextafter(mids[:255], F32(-2))]).astype(F32))
    out.append(np.array([1.0, np.nan, -2.0], F32))
    out.append(np.array([1.0, np.inf, -2.0], F32))
    out.append(np.array([-np.inf, 0.5, 0.0], F32))
    return out


def test_a_block_is_stored_as_the_reference_stores_it():
    rng = np.random.default_rng(11)
    for v in _awkward_blocks(rng):
        for kind, code in ((0, SIGNED), (1, UNSIGNED)):
            vv = v if kind == 0 else np.abs(v)
            c, a = _ext.q8_store(np.ascontiguousarray(vv), kind)
            rc, ra = bnb8.quantize(vv, code, kind == 0)
            np.testing.assert_array_equal(c, rc)
            np.testing.assert_array_equal(a, ra)


def test_the_avx512_and_the_portable_loops_give_the_same_bits(tmp_path):
    """src_c/q8.c codes and widens with AVX-512F intrinsics where the CPU
    has them (a search; where it also has VBMI, a bucket lookup and a
    widening in byte permutes, 64 values at a time) and with plain C loops
    elsewhere (or built with FO_NO_CLONES): all give the same codes, absmax
    and widened values, on blocks with ties, values a float either side of
    every midpoint, NaN, infinities, zeros of both signs, subnormals, and
    short blocks; every code widened at every position of a block, in and
    out of order."""
    if "AVX-512" not in fastopt.config()["isa_active"]:
        pytest.skip("this CPU has no AVX-512F: the portable loops are the only ones")
    import _step_ctypes as cs
    simd, plain = cs.build_q8(str(tmp_path), False), cs.build_q8(str(tmp_path), True)
    if simd is None:
        pytest.skip("no C compiler")
    search = cs.build_q8(str(tmp_path), False, search=True)
    rng = np.random.default_rng(21)
    blocks = _awkward_blocks(rng)
    for code in (SIGNED, UNSIGNED):
        mids = (code[:-1] + code[1:]) * F32(0.5)
        for scale in (F32(3.0), F32(1e-30), F32(7e30)):
            v = np.concatenate([mids, np.nextafter(mids, F32(-2)), np.nextafter(mids, F32(2)),
                                code, -code]).astype(F32) * scale
            blocks += [np.concatenate([[scale], v[i:i + 255]]) for i in range(0, v.size, 255)]
    blocks += [(rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(F32)
               for n in (1, 15, 16, 17, 257, 1000, 20000)]
    for v in blocks:
        for kind in (0, 1):
            vv = np.ascontiguousarray(v if kind == 0 else np.abs(v))
            pc, pa = cs.q8_store(plain, vv, kind)
            for lib in (simd, search):
                c, a = cs.q8_store(lib, vv, kind)
                np.testing.assert_array_equal(c, pc)
                np.testing.assert_array_equal(a.view(np.uint32), pa.view(np.uint32))
            np.testing.assert_array_equal(pc, _ext.q8_store(vv, kind)[0])
    every = np.arange(256, dtype=np.uint8)
    orders = [every, every[::-1], rng.permutation(every), np.roll(every, 77)]
    for kind in (0, 1):
        for codes in orders:
            for n in (256, 193, 128, 100, 64, 63, 16, 7):
                for absmax in (F32(1.5), F32(3e-39), F32(np.inf), F32(np.nan)):
                    np.testing.assert_array_equal(
                        cs.q8_widen(simd, kind, codes[-n:], absmax).view(np.uint32),
                        cs.q8_widen(plain, kind, codes[-n:], absmax).view(np.uint32))


def test_every_quotient_in_minus_one_to_one_gets_the_portable_loops_code(tmp_path):
    """Every float32 x in [-1, 1] on both maps: the AVX-512 codes (the
    bucket lookup where the CPU has VBMI, else the search) are the portable
    loop's. Blocks of 256 values led by 1.0, so that the absmax is 1 and
    each quotient the value itself; chunks reuse their buffers (fresh
    arrays cost most of the time)."""
    if "AVX-512" not in fastopt.config()["isa_active"]:
        pytest.skip("this CPU has no AVX-512F: the portable loops are the only ones")
    import _step_ctypes as cs
    simd, plain = cs.build_q8(str(tmp_path), False), cs.build_q8(str(tmp_path), True)
    if simd is None:
        pytest.skip("no C compiler")
    rows = 4096
    u = np.empty((rows, 256), np.uint32)
    u[:, 0] = np.float32(1.0).view(np.uint32)
    step = np.arange(rows * 255, dtype=np.uint32).reshape(rows, 255)
    v = u.reshape(-1).view(F32)
    c, pc = np.empty(v.size, np.uint8), np.empty(v.size, np.uint8)
    a = np.empty(rows, F32)
    one = int(np.float32(1.0).view(np.uint32))
    for sign in (0, 0x80000000):
        for start in range(0, one + 1, step.size):
            np.minimum(step + np.uint32(start), np.uint32(one), out=u[:, 1:])
            u[:, 1:] |= np.uint32(sign)
            for kind in (0, 1):
                assert simd.fo_q8_store(cs._ptr(v), v.size, kind, cs._ptr(c), cs._ptr(a)) == 0
                assert plain.fo_q8_store(cs._ptr(v), v.size, kind, cs._ptr(pc), cs._ptr(a)) == 0
                if not np.array_equal(c, pc):
                    i = np.flatnonzero(c != pc)[0]
                    raise AssertionError(f"map {kind}: x {v[i]!r} ({u.reshape(-1)[i]:#010x}) "
                                         f"code {c[i]}, portable {pc[i]}")


def test_quantize_and_dequantize_are_the_formats():
    rng = np.random.default_rng(4)
    v = (rng.standard_normal((33, 40)) * 1e-3).astype(F32)
    v[0, :5] = [0.0, -0.0, -1e-12, np.nan, 1.0]
    for signed, code in ((True, SIGNED), (False, UNSIGNED)):
        vv = v if signed else np.abs(v)
        s = State8bit.quantize(vv, signed)
        rc, ra = bnb8.quantize(vv, code, signed)
        np.testing.assert_array_equal(s.codes, rc)
        np.testing.assert_array_equal(s.absmax, ra)
        np.testing.assert_array_equal(s.dequantize(), bnb8.dequantize(rc, ra, code))
        assert s.codes.shape == v.shape and s.absmax.shape == (bnb8.blocks(v.size),)
        assert s.nbytes == v.size + 4 * bnb8.blocks(v.size)


# ---- every rule: the float32 step on the dequantized states, then stored ----------

def _calls():
    """(name, function, state names, keyword arguments) of each rule with
    8-bit states, hyperparameters off their defaults."""
    return [
        ("adamw", fastopt.adamw, ["exp_avgs", "exp_avg_sqs"],
         dict(step=3, lr=1e-2, weight_decay=0.1)),
        ("adam", fastopt.adam, ["exp_avgs", "exp_avg_sqs"],
         dict(step=5, lr=1e-2, weight_decay=0.1, eps=1e-6)),
        ("adamw bnb", fastopt.adamw, ["exp_avgs", "exp_avg_sqs"],
         dict(step=3, lr=1e-2, weight_decay=0.1, decay_mode="bnb")),
        ("sgd", fastopt.sgd, ["momentum_buffers"],
         dict(step=3, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
        ("adagrad", fastopt.adagrad, ["state_sums"], dict(step=3, lr=0.1, lr_decay=0.01)),
        ("rmsprop", fastopt.rmsprop, ["square_avgs"], dict(lr=1e-2, weight_decay=0.05)),
        ("lion", fastopt.lion, ["exp_avgs"], dict(lr=1e-3, weight_decay=0.1)),
        # the trust pass reads LAMB's moments widened as the update widens them
        ("lamb", fastopt.lamb, ["exp_avgs", "exp_avg_sqs"],
         dict(step=3, lr=1e-2, weight_decay=0.1)),
        ("lars", fastopt.lars, ["momentum_buffers"], dict(lr=0.1, momentum=0.9,
                                                          weight_decay=0.01, nesterov=True)),
    ]


CALLS = _calls()
UNSIGNED_SLOT = {"exp_avg_sqs": True}
OPTIONS = [{}, dict(grad_scale=4.0, max_grad_norm=0.5, maximize=True),
           dict(grad_scale=3.0, skip_if_nonfinite=True, clip_value=0.2),
           dict(max_grad_norm=1.0, clip_convention="optax", norm_type=math.inf)]


def _states(names, rng):
    """Per state name, per shape: a State8bit of random values (non-negative
    on the unsigned map)."""
    out = {}
    for name in names:
        unsigned = UNSIGNED_SLOT.get(name, False)
        vals = [rng.standard_normal(s).astype(F32) * F32(1e-2) for s in SHAPES]
        out[name] = [State8bit.quantize(np.abs(v) if unsigned or name == "state_sums"
                                        or name == "square_avgs" else v, not unsigned)
                     for v in vals]
    return out


def _copy(states):
    return {k: [State8bit(s.codes.copy(), s.absmax.copy(), s.signed) for s in v]
            for k, v in states.items()}


def _expected(fn, x0, g, states, kw, opts):
    xs = [a.copy() for a in x0]
    wide = {k: [s.dequantize() for s in v] for k, v in states.items()}
    info = fn(xs, g, **wide, **kw, **opts)
    if not info.applied:
        return info, xs, _copy(states)
    out = {}
    for k, v in wide.items():
        code = UNSIGNED if UNSIGNED_SLOT.get(k) else SIGNED
        out[k] = []
        for a in v:
            c, m = bnb8.quantize(a, code, code is SIGNED)
            out[k].append(State8bit(c, m, code is SIGNED))
    return info, xs, out


@pytest.mark.parametrize("name,fn,names,kw", CALLS, ids=[c[0] for c in CALLS])
def test_every_rule_with_8bit_states_is_the_float32_rule_then_the_format(name, fn, names, kw):
    rng = np.random.default_rng(sum(map(ord, name)))
    for gdt in (np.float32, BF16, np.float16):
        for opts in OPTIONS:
            opts = dict(opts)
            if "maximize" in opts and name == "rmsprop":
                opts.pop("maximize")
            x0 = [rng.standard_normal(s).astype(F32) for s in SHAPES]
            g = [(rng.standard_normal(s) * 3).astype(gdt) for s in SHAPES]
            st = _states(names, rng)
            ie, xe, se = _expected(fn, x0, g, st, kw, opts)
            for nth in (1, 2, 3):
                xs = [a.copy() for a in x0]
                mine = _copy(st)
                info = fn(xs, g, **mine, **kw, **opts, n_threads=nth)
                assert info.applied == ie.applied and info.finite == ie.finite
                assert info.norm == ie.norm or (math.isnan(info.norm) and math.isnan(ie.norm))
                for a, b in zip(xs, xe):
                    np.testing.assert_array_equal(bits(a), bits(b))
                for k in names:
                    for a, b in zip(mine[k], se[k]):
                        np.testing.assert_array_equal(a.codes, b.codes)
                        np.testing.assert_array_equal(a.absmax, b.absmax)


def test_a_trajectory_of_adamw_stays_the_float32_rule_then_the_format():
    """Fifty steps from zeros, each equal to the float32 step on the
    dequantized states then stored; the first moment of a small negative
    gradient stays negative (the sign fix)."""
    rng = np.random.default_rng(2)
    x8 = rng.standard_normal((40, 70)).astype(F32)
    m, v = State8bit.zeros(x8.shape), State8bit.zeros(x8.shape, signed=False)
    for t in range(1, 51):
        g = rng.standard_normal(x8.shape).astype(F32)
        g[0, 0] = -1e-9
        ie, xe, se = _expected(fastopt.adamw, [x8], [g], {"exp_avgs": [m],
                                                          "exp_avg_sqs": [v]},
                               dict(step=t, lr=1e-3), {})
        fastopt.adamw(x8, g, m, v, step=t, lr=1e-3)
        np.testing.assert_array_equal(bits(x8), bits(xe[0]))
        np.testing.assert_array_equal(m.codes, se["exp_avgs"][0].codes)
        np.testing.assert_array_equal(v.absmax, se["exp_avg_sqs"][0].absmax)
    assert m.dequantize()[0, 0] < 0 and m.codes[0, 0] < 127


def test_a_second_moment_below_the_maps_reach_in_its_block_reads_zero_and_its_step_grows():
    """docs/semantics.md, "8-bit states": in a block whose largest gradient
    is 1e4 times an element's, that element's second moment is under the
    unsigned map's first midpoint (1.6e-7 of the block's absmax), stores as
    code 0 and reads 0 the next step, so its Adam step grows towards
    1 / sqrt(1 - beta2) times the float32 one (the first moment, on the
    signed map, keeps its value); at 1e2 times the steps stay the float32
    ones within 1 %."""
    for small, grows in ((1e-3, True), (1e-1, False)):
        x8, x32 = np.zeros(256, F32), np.zeros(256, F32)
        m, v = State8bit.zeros(256), State8bit.zeros(256, signed=False)
        m32, v32 = np.zeros(256, F32), np.zeros(256, F32)
        g = np.full(256, small, F32)
        g[0] = 10.0
        for t in range(1, 201):
            b8, b32 = x8.copy(), x32.copy()
            fastopt.adamw(x8, g, m, v, step=t, lr=1e-3, weight_decay=0.0)
            fastopt.adamw(x32, g, m32, v32, step=t, lr=1e-3, weight_decay=0.0)
        ratio = (x8 - b8) / (x32 - b32)
        assert abs(ratio[0] - 1) < 1e-2                 # the block's largest
        if grows:
            assert (v.codes[1:] == 0).all()
            assert 10 < ratio[1:].min() and ratio[1:].max() < 1 / math.sqrt(1 - 0.999)
        else:
            assert (v.codes[1:] > 0).all() and np.abs(ratio[1:] - 1).max() < 1e-2


def test_a_step_mixes_8bit_and_float32_tensors_under_one_global_norm():
    rng = np.random.default_rng(6)
    shapes = [(5000,), (10,), (300, 7)]
    x0 = [rng.standard_normal(s).astype(F32) for s in shapes]
    g = [rng.standard_normal(s).astype(F32) for s in shapes]
    ms = [State8bit.zeros(shapes[0]), np.zeros(shapes[1], F32), State8bit.zeros(shapes[2])]
    vs = [State8bit.zeros(shapes[0], False), np.zeros(shapes[1], F32),
          State8bit.zeros(shapes[2], False)]
    xs = [a.copy() for a in x0]
    info = fastopt.adamw(xs, g, ms, vs, step=1, lr=1e-2, max_grad_norm=0.1)
    xw = [a.copy() for a in x0]
    mw = [np.zeros(s, F32) for s in shapes]
    vw = [np.zeros(s, F32) for s in shapes]
    ref = fastopt.adamw(xw, g, mw, vw, step=1, lr=1e-2, max_grad_norm=0.1)
    assert info.norm == ref.norm
    for a, b in zip(xs, xw):                 # states start at 0: the same update
        np.testing.assert_array_equal(bits(a), bits(b))
    np.testing.assert_array_equal(ms[1], mw[1])
    np.testing.assert_array_equal(ms[0].codes, bnb8.quantize(mw[0], SIGNED, True)[0])


def test_a_nonfinite_gradient_with_skip_writes_nothing():
    rng = np.random.default_rng(7)
    x = rng.standard_normal(1000).astype(F32)
    m = State8bit.quantize(rng.standard_normal(1000).astype(F32))
    v = State8bit.quantize(np.abs(rng.standard_normal(1000)).astype(F32), False)
    before = [a.copy() for a in (x, m.codes, m.absmax, v.codes, v.absmax)]
    g = rng.standard_normal(1000).astype(np.float16)
    g[700] = np.inf
    info = fastopt.adamw(x, g, m, v, step=2, skip_if_nonfinite=True)
    assert not info.applied and not info.finite
    for a, b in zip((x, m.codes, m.absmax, v.codes, v.absmax), before):
        np.testing.assert_array_equal(a, b)


def test_without_skip_a_nan_gradient_makes_its_blocks_nan():
    """The documented consequence: a NaN state makes its block's absmax NaN,
    so every value of that block reads NaN afterwards (other blocks keep
    theirs)."""
    x = np.ones(600, F32)
    m, v = State8bit.zeros(600), State8bit.zeros(600, False)
    g = np.full(600, 0.5, F32)
    g[300] = np.nan
    fastopt.adamw(x, g, m, v, step=1)
    assert np.isnan(m.absmax[1]) and np.isfinite(m.absmax[[0, 2]]).all()
    assert np.isnan(m.dequantize()[256:512]).all() and np.isfinite(m.dequantize()[:256]).all()


# ---- refusals: a clear error, nothing written ---------------------------------------

def _bad_calls():
    x = np.ones(600, F32)
    g = np.ones(600, F32)

    def m():
        return State8bit.zeros(600)

    def v():
        return State8bit.zeros(600, False)

    short = State8bit(np.zeros(600, np.uint8), np.zeros(2, F32))
    wide = State8bit(np.zeros(600, np.uint16), np.zeros(3, F32))
    return [
        ("wrong map", lambda: fastopt.adamw(x, g, v(), v(), step=1),
         ValueError, r"exp_avgs\[0\] is on the unsigned map"),
        ("absmax length", lambda: fastopt.adamw(x, g, short, v(), step=1),
         ValueError, r"exp_avgs\[0\]\.absmax has shape \(2,\); it must be \(3,\)"),
        ("codes dtype", lambda: fastopt.adamw(x, g, wide, v(), step=1),
         TypeError, r"exp_avgs\[0\]\.codes has dtype uint16"),
        ("codes shape", lambda: fastopt.adamw(x, g, State8bit.zeros(599), v(), step=1),
         ValueError, r"exp_avgs\[0\]\.codes has shape \(599,\)"),
        ("float64 params", lambda: fastopt.adamw(x.astype(np.float64), g.astype(np.float64),
                                                 m(), v(), step=1),
         TypeError, r"8-bit states are kept for float32 parameters"),
        ("rule without", lambda: fastopt.adamax(x, g, m(), v(), step=1),
         ValueError, r"the rule adamax has none"),
        ("amsgrad", lambda: fastopt.adam(x, g, m(), v(), step=1, amsgrad=True,
                                         max_exp_avg_sqs=State8bit.zeros(600, False)),
         ValueError, r"the options given use 3 states of adam, and only exp_avg, exp_avg_sq"),
        ("rmsprop momentum", lambda: fastopt.rmsprop(
            x, g, m(), momentum_buffers=np.zeros(600, F32), momentum=0.9),
         ValueError, r"use 2 states of rmsprop, and only square_avg has an 8-bit form"),
        ("mixed states", lambda: fastopt.adamw(x, g, m(), np.zeros(600, F32), step=1),
         TypeError, r"the other states of params\[0\] are 8-bit"),
        ("broadcast grad", lambda: fastopt.adamw(x, g[:1], m(), v(), step=1),
         ValueError, r"grads\[0\] has shape \(1,\)"),
        ("shared absmax", lambda: (lambda a: fastopt.adamw(
            x, g, a, State8bit(np.zeros(600, np.uint8), a.absmax, False), step=1))(m()),
         ValueError, r"exp_avgs\[0\]\.absmax and exp_avg_sqs\[0\]\.absmax share memory"),
        ("read-only codes", lambda: fastopt.adamw(x, g, _readonly(m()), v(), step=1),
         ValueError, r"exp_avgs\[0\]\.codes must be a writeable"),
        ("signed flag", lambda: fastopt.adamw(x, g, State8bit(m().codes, m().absmax, 1),
                                              v(), step=1),
         TypeError, r"exp_avgs\[0\]\.signed must be a bool"),
        ("absmax of three rows", lambda: fastopt.adamw(
            x, g, State8bit(np.zeros(600, np.uint8), np.zeros((3, 1), F32)), v(), step=1),
         ValueError, r"exp_avgs\[0\]\.absmax has shape \(3, 1\); it must be \(3,\)"),
    ] + [(f"param_copies: {what}", (lambda w=w: fastopt.adamw(
        [x, x.copy()], [g, g], [m(), m()], [v(), v()], step=1, param_copies=w)), exc, msg)
        for what, w, exc, msg in _bad_copies()], x


def _bad_copies():
    """(what, param_copies, error, message) of a step with 8-bit states: as
    with float states, each names the copy and the reason."""
    bf16 = BF16
    ro = np.zeros(600, bf16)
    ro.setflags(write=False)
    same = np.zeros(600, bf16)
    return [
        ("read-only", [None, ro], ValueError, r"param_copies\[1\] is read-only"),
        ("int16", [None, np.zeros(600, np.int16)], TypeError,
         r"param_copies\[1\] has dtype int16; a rounded copy of params\[1\]"),
        ("shape", [np.zeros(601, bf16), None], ValueError,
         r"param_copies\[0\] has shape \(601,\) but params\[0\]"),
        ("one array twice", [same, same], ValueError,
         r"param_copies\[0\] and param_copies\[1\] share memory"),
        ("strided", [None, np.zeros(1200, bf16)[::2]], ValueError,
         r"param_copies\[1\] must be C-contiguous"),
    ]


def _readonly(s):
    s.codes.setflags(write=False)
    return s


def test_bad_8bit_inputs_raise_and_write_nothing():
    calls, x = _bad_calls()
    for what, call, exc, msg in calls:
        before = x.copy()
        with pytest.raises(exc, match=msg):
            call()
        np.testing.assert_array_equal(x, before, err_msg=what)


def test_an_absmax_in_an_ndarray_subclass_is_written_through(tmp_path):
    """A np.memmap absmax (C-contiguous, writeable float32) is taken as the
    codes are: the step writes the file's memory."""
    x, g = np.ones(600, F32), np.full(600, 0.5, F32)
    m = State8bit.zeros(600)
    m.absmax = np.memmap(tmp_path / "absmax", dtype=F32, mode="w+", shape=(3,))
    ref = State8bit.zeros(600)
    fastopt.adamw(x.copy(), g, ref, State8bit.zeros(600, False), step=1)
    fastopt.adamw(x, g, m, State8bit.zeros(600, False), step=1)
    np.testing.assert_array_equal(np.asarray(m.absmax), ref.absmax)
    np.testing.assert_array_equal(m.codes, ref.codes)


def test_the_rules_table_says_which_rules_have_8bit_states():
    have = {r.name for r in _rules.RULES if r.q8 >= 0}
    assert have == {"sgd_torch", "adagrad_torch", "adam_torch", "adamw_torch",
                    "rmsprop_torch", "lion", "lamb", "lars"}
    assert _rules.RULES[_rules.ID["adamw_torch"]].q8 == 2     # exp_avg_sq unsigned


def test_the_core_refuses_8bit_states_without_absmax_or_for_another_rule():
    """The fast path under the checks: uint8 states without their absmax,
    an absmax of the wrong length, or a rule without 8-bit states decline
    (None) with nothing written, whatever reaches the core."""
    from fastopt import _step
    x = np.ones(600, F32)
    g = np.ones(600, F32)
    m, v = np.zeros(600, np.uint8), np.zeros(600, np.uint8)
    am, av = np.zeros(3, F32), np.zeros(3, F32)
    adamw = _step.group_tuple(_rules.ID["adamw_torch"], t=1, lr=0.1, alpha=0.9, beta=0.999,
                              eps=1e-8)
    adamax = (_rules.ID["adamax_torch"],) + adamw[1:]
    args = ((x,), (g,), (m,), (v,), (None,), (0,))
    tail = (1.0, 0.0, 0.0, 0, 0, False, 2)
    assert _ext.step(*args, (adamw,), *tail) is None
    assert _ext.step(*args, (adamw,), *tail, absmax=((am, np.zeros(2, F32), None),)) is None
    assert _ext.step(*args, (adamw,), *tail, absmax=((am, am, None),)) is None   # shared
    assert _ext.step(*args, (adamax,), *tail, absmax=((am, av, None),)) is None
    assert (x == 1).all() and not m.any() and not v.any() and not am.any() and not av.any()
    assert _ext.step(*args, (adamw,), *tail, absmax=((am, av, None),)) is not None
    assert (x != 1).all() and am.all() and av.all()


def test_the_core_declines_options_whose_states_have_no_8bit_form():
    """Under the checks, the core itself: amsgrad's maximum, RMSprop's
    momentum buffer or centred average held 8-bit decline (None) with
    nothing written (FO_RULE_TABLE's Q8N against the states the group
    uses); RMSprop with neither steps."""
    from fastopt import _step
    x, g = np.ones(600, F32), np.ones(600, F32)
    s = [np.zeros(600, np.uint8) for _ in range(3)]
    a = [np.zeros(3, F32) for _ in range(3)]
    tail = (1.0, 0.0, 0.0, 0, 0, False, 2)
    amsgrad = _step.group_tuple(_rules.ID["adamw_torch"], t=1, lr=0.1, alpha=0.9, beta=0.999,
                                eps=1e-8, flags=_rules.AMSGRAD)
    rms = dict(t=1, lr=0.01, alpha=0.99, eps=1e-8)
    momentum = _step.group_tuple(_rules.ID["rmsprop_torch"], beta=0.9, **rms)
    centred = _step.group_tuple(_rules.ID["rmsprop_torch"], flags=_rules.CENTERED, **rms)
    for group, n in ((amsgrad, 3), (momentum, 2), (centred, 2)):
        states = tuple((s[k],) if k < n else (None,) for k in range(3))
        absmax = ((tuple(a[k] if k < n else None for k in range(3))),)
        assert _ext.step((x,), (g,), *states, (0,), (group,), *tail, absmax=absmax) is None
        assert (x == 1).all() and not any(t.any() for t in s + a)
    plain = _step.group_tuple(_rules.ID["rmsprop_torch"], **rms)
    assert _ext.step((x,), (g,), (s[0],), (None,), (None,), (0,), (plain,), *tail,
                     absmax=((a[0], None, None),)) is not None
    assert (x != 1).all() and a[0].all()


def test_8bit_states_give_the_same_bits_when_the_pool_splits_them(lib, tmp_path):
    """The C driver (the session's ctypes build, tests/conftest.py) through
    a copy of the library that pools every call (tests/_step_ctypes.py): a
    tensor of 1e6 + 3 elements cut into chunks at block boundaries by 2 and
    3 threads gives the serial call's bits, and the extension's."""
    import ctypes as ct

    import _step_ctypes as cs
    pooled = cs.pooled_copy(lib, str(tmp_path))
    rng = np.random.default_rng(12)
    n = 1_000_003
    x0 = rng.standard_normal(n).astype(F32)
    g = rng.standard_normal(n).astype(F32)
    m0 = State8bit.quantize(rng.standard_normal(n).astype(F32) * F32(1e-2))
    v0 = State8bit.quantize(rng.standard_normal(n).astype(F32) ** 2 * F32(1e-4), False)
    hp = dict(rule="adamw_torch", t=3, lr=1e-2, alpha=0.9, beta=0.999, eps=1e-8, decay=0.01)

    def run(library, nth):
        x = x0.copy()
        out = [x, m0.codes.copy(), m0.absmax.copy(), v0.codes.copy(), v0.absmax.copy()]
        t = cs.tensor(x, g, (out[1], out[3]), 0)
        t.absmax[0], t.absmax[1] = out[2].ctypes.data, out[4].ctypes.data
        ts = (cs.Tensor * 1)(t)
        gr = (cs.Group * 1)(cs.group_struct(hp))
        o, res = cs.opts_struct(), cs.Result()
        assert library.fo_step(ts, 1, gr, 1, ct.byref(o), ct.byref(res), nth) == 0
        return out

    serial = run(lib, 1)
    before = cs.parallel_calls(pooled)
    for nth in (2, 3):
        for a, b in zip(run(pooled, nth), serial):
            np.testing.assert_array_equal(a, b)
    assert cs.parallel_calls(pooled) >= before + 2          # (each call pooled)
    x = x0.copy()
    m = State8bit(m0.codes.copy(), m0.absmax.copy())
    v = State8bit(v0.codes.copy(), v0.absmax.copy(), False)
    fastopt.adamw(x, g, m, v, step=3, lr=1e-2, weight_decay=0.01, n_threads=2)
    for a, b in zip((x, m.codes, m.absmax, v.codes, v.absmax), serial):
        np.testing.assert_array_equal(a, b)
