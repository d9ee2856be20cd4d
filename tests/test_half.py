"""16-bit gradients and 16-bit copies of the new parameters.

The contract (docs/semantics.md, "Half precision"): a step on bfloat16 or
float16 gradients gives the bits of the same step on ``g.astype(float32)``
(float32 parameters) or ``g.astype(float64)`` (float64 parameters), for
every rule, option, layout and thread count; ``param_copies`` receive the
new parameters rounded as ``astype`` rounds, on applied steps only. The
conversions themselves are compared with NumPy's and ml_dtypes' on every
input.
"""
import math

import numpy as np
import pytest

import fastopt
from fastopt import _ext, _rules

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALVES = [BF16, F16]


def bits(a):
    return a.view(np.uint16 if a.dtype.itemsize == 2 else
                  np.uint32 if a.dtype.itemsize == 4 else np.uint64)


# ---- the conversions, on every input -----------------------------------------

def _f16_saturates(start, chunk):
    """The float16 bits every float32 of bits [start, start + chunk) rounds
    to when they all round to one value: +-0 where every magnitude is at
    most 2**-25 (half the smallest subnormal; ties go to the even 0), +-inf
    where every one is finite and at least 65520; else None."""
    lo, hi = start & 0x7fffffff, (start + chunk - 1) & 0x7fffffff
    if (start >> 31) != ((start + chunk - 1) >> 31):
        return None
    sign = 0x8000 if start >> 31 else 0
    if hi <= 0x33000000:
        return sign
    if 0x477ff000 <= lo and hi < 0x7f800000:
        return sign | 0x7c00
    return None


def test_rounding_every_float32_as_numpy_and_ml_dtypes_round():
    """Every one of the 2**32 float32 inputs, bfloat16 against ml_dtypes and
    float16 against NumPy. NumPy's float16 cast takes ~60 ns for each value
    that overflows or underflows (it raises the flag one value at a time),
    so on the ~1.8e9 finite inputs of magnitude >= 65520 and the ~1.7e9 of
    magnitude <= 2**-25 the kernels' answer is checked to be inf (or 0) of
    the input's sign on every input and compared with NumPy on one input in
    4099 (which gives the same there). The inputs go
    by in chunks that stay in cache, through buffers made once: allocating
    and faulting in fresh arrays took most of the time."""
    chunk = 1 << 20
    offsets = np.arange(chunk, dtype=np.uint32)
    u = np.empty(chunk, np.uint32)
    f = u.view(np.float32)
    same = np.empty(chunk, bool)
    out = {dt: (np.empty(chunk, dt), np.empty(chunk, dt)) for dt in HALVES}
    for start in range(0, 1 << 32, chunk):
        np.add(offsets, np.uint32(start), out=u)
        for dt, (mine, ref) in out.items():
            _ext.convert(f, mine)
            want = _f16_saturates(start, chunk) if dt == F16 else None
            if want is not None:
                assert (bits(mine) == want).all(), hex(start)
                with np.errstate(all="ignore"):
                    sample = f[::4099].astype(dt)
                assert (bits(sample) == want).all(), hex(start)
                continue
            with np.errstate(all="ignore"):
                np.copyto(ref, f, casting="unsafe")
            np.equal(bits(mine), bits(ref), out=same)
            if not same.all():
                i = np.flatnonzero(~same)[0]
                raise AssertionError(f"{dt}: float32 bits {start + i:#010x} -> "
                                     f"{bits(mine)[i]:#06x}, astype {bits(ref)[i]:#06x}")


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_widening_every_16bit_value_is_exact(dt):
    h = np.arange(1 << 16, dtype=np.uint16).view(dt)
    out = np.empty(1 << 16, np.float32)
    _ext.convert(h, out)
    np.testing.assert_array_equal(bits(out), bits(h.astype(np.float32)))


def test_subnormals_survive_the_copy():
    # the smallest subnormals of each type, and float32 values that round to them
    x = np.array([2.0**-133, -2.0**-133, 2.0**-24, 2.0**-25 * 1.5, 1e-40], np.float32)
    for dt in HALVES:
        out = np.empty(x.size, dt)
        _ext.convert(x, out)
        np.testing.assert_array_equal(bits(out), bits(x.astype(dt)))
        assert (bits(out)[:2] & 0x7fff != 0).all() or dt == F16


# ---- every rule: 16-bit gradients give the widened gradients' bits ------------

def _torch_form_calls():
    """(name, function, states needed, keyword arguments) for each public
    torch-form function, its hyperparameters off their defaults."""
    out = [("adamw", fastopt.adamw, 2, dict(step=3, lr=1e-2, weight_decay=0.1)),
           ("adam-amsgrad", fastopt.adam, 2, dict(step=3, lr=1e-2, amsgrad=True,
                                                  weight_decay=0.1,
                                                  max_exp_avg_sqs=None)),
           ("sgd-nesterov", fastopt.sgd, 1, dict(step=3, lr=0.1, momentum=0.9,
                                                 nesterov=True, weight_decay=0.01)),
           ("adagrad", fastopt.adagrad, 1, dict(step=3, lr=0.1, lr_decay=0.01))]
    for rule in _rules.TORCH_RULES:
        fn = getattr(fastopt, rule.name)
        kw = dict(lr=1e-2, **({"step": 3} if rule.counted else {}))
        names = {a.name for a in rule.args if a.check is not None}
        if "weight_decay" in names:
            kw["weight_decay"] = 0.05
        if "momentum" in names:
            kw["momentum"] = 0.5
        slots = rule.slots(dict(_rules.defaults(rule), **kw))
        if rule.carry is not None:       # a carried scalar, updated in place (each run copies it)
            kw[rule.carry.name] = np.array(rule.carry.start, np.float32)
        out.append((rule.name, fn, [s + "s" for s in slots], kw))
    return out


CALLS = _torch_form_calls()
OPTIONS = [{}, dict(grad_scale=4.0, max_grad_norm=0.5),
           dict(grad_scale=3.0, skip_if_nonfinite=True, clip_value=0.2),
           dict(max_grad_norm=1.0, clip_convention="optax", norm_type=math.inf)]


def _state_kw(names, shapes, dtype, rng):
    if isinstance(names, int):   # the hand-written functions take their states in order
        return [[np.abs(rng.standard_normal(s)).astype(dtype) for s in shapes]
                for _ in range(names)], {}
    return [], {n: [np.abs(rng.standard_normal(s)).astype(dtype) for s in shapes]
                for n in names}


def _run(fn, xs, gs, pos, kw, **more):
    states = [[a.copy() for a in st] for st in pos]
    named = {k: [a.copy() for a in v] for k, v in kw[1].items()}
    args = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw[0].items()}
    if "max_exp_avg_sqs" in args:        # amsgrad: its running maximum too
        named["max_exp_avg_sqs"] = [np.zeros_like(x) for x in xs]
        del args["max_exp_avg_sqs"]
    info = fn(xs, gs, *states, **named, **args, **more)
    return info, states, named


SHAPES = [(1,), (7,), (33, 5), (70001,)]


@pytest.mark.parametrize("name,fn,states,kw", CALLS, ids=[c[0] for c in CALLS])
@pytest.mark.parametrize("xdt", [np.float32, np.float64], ids=["f32", "f64"])
def test_every_rule_on_16bit_gradients_equals_it_on_widened_ones(name, fn, states, kw, xdt):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    for gdt in HALVES:
        for opts in OPTIONS:
            for nth in (1, 2, 3):
                x0 = [rng.standard_normal(s).astype(xdt) for s in SHAPES]
                g = [(rng.standard_normal(s) * 3).astype(gdt) for s in SHAPES]
                pos, named = _state_kw(states, SHAPES, xdt, rng)
                xa, xb = [a.copy() for a in x0], [a.copy() for a in x0]
                ia, sa, na = _run(fn, xa, g, pos, (kw, named), n_threads=nth, **opts)
                wide = [a.astype(np.float32).astype(xdt) for a in g]
                ib, sb, nb = _run(fn, xb, wide, pos, (kw, named), n_threads=nth, **opts)
                assert ia == ib or (math.isnan(ia.norm) and math.isnan(ib.norm)
                                    and ia[0] == ib[0] and ia[2] == ib[2])
                for a, b in zip(xa + sum(sa, []) + sum(na.values(), []),
                                xb + sum(sb, []) + sum(nb.values(), [])):
                    np.testing.assert_array_equal(bits(a), bits(b))


@pytest.mark.parametrize("n", [17, 1000, 4113])
def test_float16_gradients_keep_every_special_value_as_numpy_widens_it(n):
    """float16 gradients are widened by the CPU's instruction where it has
    one, a tile at a time, and by the exact loop for a vector that holds a
    NaN or an infinity: the widened bits are NumPy's for every value, a
    signalling NaN's quiet bit included. torch SGD's first step stores the
    gradient itself in its buffer, so the buffer shows them bit for bit."""
    rng = np.random.default_rng(n)
    g = (rng.standard_normal(n) * 3).astype(np.float16)
    words = g.view(np.uint16)
    specials = [0x7d01, 0xfd55, 0x7e01, 0x7c00, 0xfc00, 0x0001, 0x83ff, 0x8000, 0x7bff]
    at = rng.choice(n, size=min(n, 3 * len(specials)), replace=False)
    words[at[::3]] = np.resize(specials, len(at[::3]))
    words[np.arange(0, n, 97)] = 0x03ff                 # subnormals in clean vectors too
    x0 = rng.standard_normal(n).astype(np.float32)
    for nth in (1, 3):
        xa, xb = x0.copy(), x0.copy()
        ba, bb = np.zeros(n, np.float32), np.zeros(n, np.float32)
        fastopt.sgd(xa, g, ba, lr=0.1, momentum=0.9, step=1, n_threads=nth)
        fastopt.sgd(xb, g.astype(np.float32), bb, lr=0.1, momentum=0.9, step=1, n_threads=nth)
        np.testing.assert_array_equal(bits(ba), bits(g.astype(np.float32)))
        np.testing.assert_array_equal(bits(ba), bits(bb))
        np.testing.assert_array_equal(bits(xa), bits(xb))


@pytest.mark.parametrize("gdt", HALVES, ids=str)
def test_the_onnx_rules_on_16bit_gradients_equal_them_on_widened_ones(gdt):
    rng = np.random.default_rng(5)
    calls = [(fastopt.onnx_momentum, 1, dict(lr=0.1, t=2, mode="nesterov")),
             (fastopt.onnx_momentum, 1, dict(lr=0.1, t=2, clipping=0.05)),
             (fastopt.onnx_adagrad, 1, dict(lr=0.1, t=2, decay_factor=0.1)),
             (fastopt.onnx_adam, 2, dict(lr=0.1, t=2, norm_coefficient=0.01))]
    for fn, ns, kw in calls:
        for opts in ({}, dict(grad_scale=2.0, max_grad_norm=0.3)):
            x = rng.standard_normal((40, 9)).astype(np.float32)
            g = rng.standard_normal((40, 9)).astype(gdt)
            st = [np.abs(rng.standard_normal((40, 9))).astype(np.float32) for _ in range(ns)]
            xb, stb = x.copy(), [s.copy() for s in st]
            ra = fn(x, g, *st, **kw, **opts)
            rb = fn(xb, g.astype(np.float32), *stb, **kw, **opts)
            assert (ra is None) == (rb is None) == (not opts)
            for a, b in zip([x] + st, [xb] + stb):
                np.testing.assert_array_equal(bits(a), bits(b))


@pytest.mark.parametrize("gdt", HALVES, ids=str)
def test_16bit_gradients_in_other_layouts(gdt):
    # F-ordered parameters with F-ordered gradients (the fast path takes them
    # as they are), strided and broadcast gradients (copied by the checked path)
    rng = np.random.default_rng(8)
    x0 = np.asfortranarray(rng.standard_normal((30, 20)).astype(np.float32))
    for g in (np.asfortranarray(rng.standard_normal((30, 20)).astype(gdt)),
              rng.standard_normal((30, 40)).astype(gdt)[:, ::2],
              np.broadcast_to(rng.standard_normal(20).astype(gdt), (30, 20))):
        for opts in ({}, dict(max_grad_norm=0.5)):
            xa, xb = x0.copy(order="A"), x0.copy(order="A")
            ma, va = np.zeros_like(x0), np.zeros_like(x0)
            mb, vb = np.zeros_like(x0), np.zeros_like(x0)
            ia = fastopt.adamw(xa, g, ma, va, step=1, lr=0.1, **opts)
            ib = fastopt.adamw(xb, g.astype(np.float32), mb, vb, step=1, lr=0.1, **opts)
            assert ia.applied and ib.applied
            if opts:
                assert ia.norm == ib.norm
            for a, b in ((xa, xb), (ma, mb), (va, vb)):
                np.testing.assert_array_equal(a, b)


def test_global_norm_and_clip_of_16bit_gradients():
    rng = np.random.default_rng(3)
    for gdt in HALVES:
        gs = [(rng.standard_normal(s) * 10).astype(gdt) for s in SHAPES]
        wide = [a.astype(np.float32) for a in gs]
        for norm_type in (2.0, math.inf):
            assert (fastopt.global_norm(gs, norm_type=norm_type, grad_scale=2.0)
                    == fastopt.global_norm(wide, norm_type=norm_type, grad_scale=2.0))
        norm = fastopt.clip_grads(gs, max_norm=1.0)
        assert norm == fastopt.clip_grads(wide, max_norm=1.0)
        # clipped in place: the float32 result rounded to the gradient's type
        for a, b in zip(gs, wide):
            np.testing.assert_array_equal(bits(a), bits(b.astype(gdt)))


@pytest.mark.parametrize("gdt", HALVES, ids=lambda d: np.dtype(d).name)
def test_the_norm_of_16bit_gradients_is_that_of_the_widened_ones_bit_for_bit(gdt):
    """The norm pass sums 16-bit gradients widened in registers where the
    CPU has AVX-512F (src_c/half.c), else widened into a tile: every length
    around the 32 lanes and the 4096-element block, every way of unscaling
    (none, a division, a power of two's inverse), subnormal, tiny and huge
    values, a NaN or an infinity in one block, 1-3 threads: the float32
    gradients' norm, bit for bit."""
    rng = np.random.default_rng(11)
    lengths = [31, 32, 33, 63, 64, 65, 100, 4095, 4096, 4097, 8191, 70001]
    tiny = float(ml_dtypes.finfo(gdt).smallest_subnormal)
    for n in lengths:
        g = (rng.standard_normal(n) * rng.choice([tiny * 3, 1e-3, 1.0, 300.0], n)).astype(gdt)
        wide = g.astype(np.float32)
        for scale in (1.0, 3.0, 1024.0, 0.25):
            for nth in (1, 2, 3):
                for norm_type in (2.0, math.inf):
                    a = fastopt.global_norm([g, g[: n // 3]], norm_type=norm_type,
                                            grad_scale=scale, n_threads=nth)
                    b = fastopt.global_norm([wide, wide[: n // 3]], norm_type=norm_type,
                                            grad_scale=scale, n_threads=nth)
                    assert bits(np.float64(a)) == bits(np.float64(b)), (n, scale, nth)
        for bad in (np.nan, np.inf, -np.inf):
            h = g.copy()
            h[rng.integers(n)] = bad
            a = fastopt.global_norm([h], grad_scale=3.0)
            b = fastopt.global_norm([h.astype(np.float32)], grad_scale=3.0)
            assert math.isnan(a) == math.isnan(b) and (math.isnan(a) or a == b)
            assert not math.isfinite(a)


def test_a_float16_overflow_skips_the_step_and_writes_nothing():
    x = np.linspace(-1, 1, 1000).astype(np.float32)
    with np.errstate(over="ignore"):    # the overflow a float16 gradient suffers
        g = np.full(1000, 1e4, np.float16) * np.float16(10)
    assert np.isinf(g).all()
    m, v = np.zeros_like(x), np.zeros_like(x)
    w = np.full(1000, 7, BF16)
    before = [a.copy() for a in (x, m, v, w)]
    info = fastopt.adamw(x, g, m, v, step=1, skip_if_nonfinite=True, param_copies=w)
    assert not info.applied and not info.finite
    for a, b in zip((x, m, v, w), before):
        np.testing.assert_array_equal(bits(a), bits(b))


# ---- the copies -------------------------------------------------------------------

@pytest.mark.parametrize("nth", [1, 2, 3])
def test_param_copies_receive_the_rounded_new_parameters(nth):
    rng = np.random.default_rng(4)
    shapes = [(5,), (100003,), (40, 30), (3,)]
    xs = [rng.standard_normal(s).astype(np.float32) * 1e3 for s in shapes]
    xs[0][:] = [np.inf, -0.0, 6e-8, 65520.0, 3.4e38]     # specials and overflow
    gs = [rng.standard_normal(s).astype(BF16) for s in shapes]
    ms = [np.zeros_like(x) for x in xs]
    vs = [np.zeros_like(x) for x in xs]
    ws = [np.zeros(shapes[0], F16), np.zeros(shapes[1], BF16), None,
          np.asfortranarray(np.zeros(shapes[3], BF16))]
    ref = [x.copy() for x in xs]
    fastopt.adamw(ref, [g.astype(np.float32) for g in gs], [m.copy() for m in ms],
                  [v.copy() for v in vs], step=1, lr=0.01, n_threads=nth)
    info = fastopt.adamw(xs, gs, ms, vs, step=1, lr=0.01, param_copies=ws, n_threads=nth)
    assert info.applied
    for x, r, w in zip(xs, ref, ws):
        np.testing.assert_array_equal(bits(x), bits(r))
        if w is not None:
            with np.errstate(all="ignore"):
                np.testing.assert_array_equal(bits(w), bits(r.astype(w.dtype)))


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_copies_of_a_step_larger_than_the_caches_are_the_rounded_parameters(nth):
    """Copies of millions of parameters, cut into pieces between threads:
    copies starting 2 to 62 bytes past a cache line, lengths ending
    mid-line, float32 and bfloat16 states, specials; every copy as astype
    rounds the new parameters."""
    rng = np.random.default_rng(9)
    sizes = [1_500_007, 700_001, 33, 5]
    for skew, sdt in ((1, np.float32), (7, BF16), (31, np.float32)):
        xs = [(rng.standard_normal(n) * 1e3).astype(np.float32) for n in sizes]
        xs[0][:4] = [np.inf, -0.0, 3.4e38, np.nan]
        gs = [rng.standard_normal(n).astype(BF16) for n in sizes]
        ms = [np.zeros(n, sdt) for n in sizes]
        vs = [np.zeros(n, sdt) for n in sizes]
        raw = np.zeros(sum(sizes) + 64 * len(sizes), BF16)
        at = (-raw.ctypes.data % 64) // 2 + skew
        ws = []
        for n in sizes:                 # each copy `skew` elements past a line
            ws.append(raw[at:at + n])
            at += n + 32 - (n % 32) + 32
        info = fastopt.adamw(xs, gs, ms, vs, step=1, lr=0.01, param_copies=ws,
                             n_threads=nth)
        assert info.applied
        for x, w in zip(xs, ws):
            np.testing.assert_array_equal(bits(w), bits(x.astype(BF16)))


def test_a_copy_in_another_layout_goes_through_the_checked_path():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((20, 30)).astype(np.float32)
    g = rng.standard_normal((20, 30)).astype(np.float32)
    big = np.zeros((20, 60), BF16)
    w = big[:, ::2]                   # strided: written through a scratch copy
    fastopt.sgd(x, g, None, step=1, lr=0.1, param_copies=w)
    np.testing.assert_array_equal(bits(w), bits(x.astype(BF16)))
    assert (bits(big[:, 1::2]) == 0).all()


HALF_ONLY = "must be bfloat16 or float16"
BAD_COPIES = [
    ("float32 copy", lambda x: np.zeros(x.shape, np.float32), TypeError, HALF_ONLY),
    ("int16 copy", lambda x: np.zeros(x.shape, np.int16), TypeError, HALF_ONLY),
    ("structured look-alike", lambda x: np.zeros(x.shape, [("b", np.uint16)]), TypeError,
     HALF_ONLY),
    ("wrong shape", lambda x: np.zeros(x.size + 1, BF16), ValueError, "its parameter's shape"),
    ("read-only", None, ValueError, "read-only"),
    ("a list of numbers", lambda x: [0.0] * x.size, TypeError, "numpy.ndarray"),
]


def _read_only(x):
    w = np.zeros(x.shape, BF16)
    w.setflags(write=False)
    return w


@pytest.mark.parametrize("what,make,exc,match", BAD_COPIES, ids=[b[0] for b in BAD_COPIES])
def test_a_bad_copy_raises_and_writes_nothing(what, make, exc, match):
    x = np.linspace(-1, 1, 50).astype(np.float32)
    g = np.ones(50, BF16)
    m, v = np.zeros_like(x), np.zeros_like(x)
    w = (make or _read_only)(x)
    good = np.zeros(50, BF16)
    before = [a.copy() for a in (x, m, v, good)]
    with pytest.raises(exc, match=match) as e:
        fastopt.adamw([x, x.copy()], [g, g], [m, m.copy()], [v, v.copy()], step=1,
                      param_copies=[good, w])
    assert "fastopt.adamw" in str(e.value) and "param_copies[1]" in str(e.value)
    for a, b in zip((x, m, v, good), before):
        np.testing.assert_array_equal(bits(a), bits(b))


def test_copies_of_float64_parameters_are_refused():
    x = np.ones(4)
    with pytest.raises(TypeError, match=r"params\[0\] \(float64\) cannot be written"):
        fastopt.sgd(x, np.ones(4), None, step=1, param_copies=np.zeros(4, BF16))
    assert (x == 1).all()


def test_a_copy_sharing_memory_with_a_parameter_is_refused():
    x = np.linspace(-1, 1, 64).astype(np.float32)
    before = x.copy()
    with pytest.raises(ValueError, match="share memory"):
        fastopt.sgd(x, np.ones(64, np.float32), None, step=1, param_copies=x.view(F16)[:64])
    np.testing.assert_array_equal(x, before)


BAD_GRADS = [
    ("int16", lambda n: np.ones(n, np.int16)),
    ("structured look-alike", lambda n: np.zeros(n, [("b", np.uint16)])),
    ("uint16 bits", lambda n: np.zeros(n, np.uint16)),
]


@pytest.mark.parametrize("what,make", BAD_GRADS, ids=[b[0] for b in BAD_GRADS])
def test_a_gradient_of_another_16bit_type_raises_and_writes_nothing(what, make):
    x = np.linspace(-1, 1, 50).astype(np.float32)
    m, v = np.zeros_like(x), np.zeros_like(x)
    before = [a.copy() for a in (x, m, v)]
    with pytest.raises(TypeError, match=r"fastopt.adamw: grads\[1\] has dtype .*must be "
                                        r"float32, bfloat16 or float16"):
        fastopt.adamw([x, x.copy()], [np.ones(50, BF16), make(50)], [m, m.copy()],
                      [v, v.copy()], step=1)
    for a, b in zip((x, m, v), before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_16bit_parameters_and_states_are_refused(dt):
    x = np.ones(8, dt)
    v = np.zeros(8, dt)
    with pytest.raises(TypeError, match=f"params\\[0\\] has dtype {dt}; fastopt updates "
                                        "float32 or float64"):
        fastopt.sgd(x, np.ones(8, dt), v, step=1, momentum=0.9)
    assert (x == 1).all()
    x32 = np.ones(8, np.float32)
    if dt == np.float16:
        # float16 states are refused (bfloat16 ones are stored apart:
        # tests/test_bf16_states.py)
        with pytest.raises(TypeError, match=r"momentum_buffers\[0\] has dtype float16; "
                           r"a state of params\[0\] \(float32\) must be float32 or "
                           r"bfloat16 \(float16 states"):
            fastopt.sgd(x32, np.ones(8, dt), v, step=1, momentum=0.9)
        assert (x32 == 1).all()
    x64 = np.ones(8, np.float64)
    with pytest.raises(TypeError, match="must match its parameter"):
        fastopt.sgd(x64, np.ones(8, dt), v, step=1, momentum=0.9)
    assert (x64 == 1).all()


@pytest.mark.parametrize("gdt", HALVES, ids=str)
def test_an_optimizer_steps_on_16bit_gradients_through_its_prepared_step(gdt, monkeypatch):
    import fastopt.optim as fo
    rng = np.random.default_rng(9)
    xa = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    xb = [x.copy() for x in xa]
    a, b = fo.AdamW(xa, lr=1e-2), fo.AdamW(xb, lr=1e-2)
    grads = [[rng.standard_normal(s).astype(gdt) for s in SHAPES] for _ in range(4)]
    a.step(grads[0])                                # prepares the step
    calls = []
    real = _ext.step
    monkeypatch.setattr(_ext, "step", lambda *a, **k: calls.append(1) or real(*a, **k))
    for g in grads[1:]:
        a.step(g)
    assert not calls                                # no checked route after the first
    for g in grads:
        b.step([x.astype(np.float32) for x in g])
    for x, y in zip(xa, xb):
        np.testing.assert_array_equal(x, y)


def test_the_avx512_and_the_portable_roundings_give_the_same_bits(tmp_path):
    """src_c/half.c rounds float32 to bfloat16 (to nearest, and stochastically)
    with AVX-512F intrinsics where the CPU has them and with plain C loops
    elsewhere (or built with FO_NO_CLONES): both give the same bits on NaN
    payloads of both signs, zeros, infinities, the largest finite value and
    what rounds up to inf, ties, subnormals, at every length 1..40 (full
    vectors and tails), for streams and indices either side of 2**32."""
    if "AVX-512" not in fastopt.config()["isa_active"]:
        pytest.skip("this CPU has no AVX-512F: the portable loops are the only ones")
    import _step_ctypes as cs
    simd, plain = cs.build_half(str(tmp_path), False), cs.build_half(str(tmp_path), True)
    if simd is None:
        pytest.skip("no C compiler")
    from fastopt import _dtypes
    f32, bf = _dtypes.CODE[np.dtype(np.float32)], _dtypes.CODE[np.dtype(BF16)]
    edge = np.array([0x7FC00001, 0x7F800001, 0xFFFFFFFF, 0xFF800001, 0, 0x80000000,
                     0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF,
                     0x3F808000, 0x3F818000, 0x3F808001, 1, 0x007FFFFF, 0x00008000,
                     0x80008000, 0x3F800000], np.uint32)
    rng = np.random.default_rng(5)
    pool = np.concatenate([edge, rng.integers(0, 2**32, 200, dtype=np.uint32)])
    for n in list(range(1, 41)) + [100, 257]:
        u = np.ascontiguousarray(rng.choice(pool, n))
        out = [np.zeros(n, np.uint16) for _ in range(2)]
        for lib, o in zip((simd, plain), out):
            assert lib.fo_convert(u.ctypes.data, f32, o.ctypes.data, bf, n) == 0
        np.testing.assert_array_equal(out[0], out[1])
        for h, i0 in ((0, 0), (0x0123456789ABCDEF, 2**32 - 7), (2**64 - 1, 12345)):
            out = [np.zeros(n, np.uint16) for _ in range(2)]
            for lib, o in zip((simd, plain), out):
                assert lib.fo_round_stochastic(u.ctypes.data, o.ctypes.data, n, h, i0) == 0
            np.testing.assert_array_equal(out[0], out[1])
