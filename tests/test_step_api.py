"""The public whole-step functions (fastopt.adamw, adam_torch, sgd_torch,
adagrad_torch, global_norm, clip_grads and the step options of momentum /
adagrad / adam) against the reference (fastopt/_reference/step.py), bit
for bit; the fallback path (awkward layouts), and the bad-input catalogue:
every rejected call writes nothing."""
import math

import numpy as np
import public_names
import pytest

import fastopt
from fastopt._reference import step as ref

SIZES = [1, 7, 33, 1025, 70001]
OPTS = [{}, {"grad_scale": 1024.0}, {"max_grad_norm": 1.0},
        {"grad_scale": 1000.0, "max_grad_norm": 0.5, "clip_convention": "optax"},
        {"max_grad_norm": 2.0, "norm_type": math.inf}, {"clip_value": 0.01},
        {"grad_scale": 8.0, "max_grad_norm": 1.0, "skip_if_nonfinite": True}]


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    u = np.uint32 if a.dtype == np.float32 else np.uint64
    m = ~np.isnan(a)
    assert np.array_equal(a.view(u)[m], b.view(u)[m])


def _data(seed, scale=1.0):
    rng = np.random.default_rng(seed)
    dts = [np.float32, np.float64]
    xs = [rng.standard_normal(n).astype(dts[i % 2]) for i, n in enumerate(SIZES)]
    gs = [(rng.standard_normal(x.shape) * scale).astype(x.dtype) for x in xs]
    return xs, gs


def _ref_opts(o):
    return {"grad_scale": o.get("grad_scale", 1.0), "max_norm": o.get("max_grad_norm"),
            "norm_type": o.get("norm_type", 2.0),
            "convention": o.get("clip_convention", "torch"),
            "clip_value": o.get("clip_value"),
            "check_finite": o.get("skip_if_nonfinite", False)}


def _check(xs, gs, states, group, opts, run):
    want = ref.step(xs, gs, [tuple(s) for s in states], [group], [0] * len(xs),
                    **_ref_opts(opts))
    xc = [x.copy() for x in xs]
    sc = [[s.copy() for s in st] for st in states]
    g0 = [g.copy() for g in gs]
    info = run(xc, gs, sc)
    assert isinstance(info, fastopt.StepInfo)
    measured = opts.get("max_grad_norm") is not None or opts.get("skip_if_nonfinite")
    assert info.applied == want[0]
    assert info.norm == want[1] if measured else math.isnan(info.norm)
    for a, b in zip(xc, want[2]):
        _same(a, b)
    for st, ws in zip(sc, want[3]):
        for a, b in zip(st, ws):
            _same(a, b)
    for g, h in zip(gs, g0):
        _same(g, h)


@pytest.mark.parametrize("opts", OPTS)
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("fn", ["adamw", "adam_torch"])
@pytest.mark.parametrize("decay_mode", ["torch", "bnb"])
def test_adam_forms(opts, amsgrad, fn, decay_mode):
    """decay_mode "bnb" moves the decoupled decay after the update, and makes
    Adam's decay decoupled (bitsandbytes' CUDA order for both)."""
    xs, gs = _data(1, opts.get("grad_scale", 1.0))
    states = [[np.zeros_like(x), np.abs(x) * 0.1] + ([np.abs(x) * 0.2] if amsgrad else [])
              for x in xs]
    after = decay_mode == "bnb"
    group = {"rule": "adamw_torch" if fn == "adamw" else "adam_torch", "lr": 0.01,
             "alpha": 0.9, "beta": 0.99, "eps": 1e-8, "decay": 0.05, "t": 3,
             "amsgrad": amsgrad, "maximize": amsgrad, "decay_after": after}

    def run(xc, gs, sc):
        return public_names.op(fn)(xc, gs, [s[0] for s in sc], [s[1] for s in sc],
                                    lr=0.01, step=3, betas=(0.9, 0.99), eps=1e-8,
                                    weight_decay=0.05, amsgrad=amsgrad, maximize=amsgrad,
                                    max_exp_avg_sqs=[s[2] for s in sc] if amsgrad else None,
                                    decay_mode=decay_mode, **opts)
    _check(xs, gs, states, group, opts, run)


@pytest.mark.parametrize("opts", OPTS)
@pytest.mark.parametrize("step,nesterov,momentum", [(1, False, 0.9), (3, True, 0.9),
                                                    (2, False, 0.0)])
def test_sgd_torch(opts, step, nesterov, momentum):
    xs, gs = _data(2, opts.get("grad_scale", 1.0))
    states = [[np.abs(x)] if momentum else [] for x in xs]
    group = {"rule": "sgd_torch", "lr": 0.1, "alpha": momentum, "beta": 0.0,
             "decay": 0.01, "t": step - 1, "nesterov": nesterov}

    def run(xc, gs, sc):
        return fastopt.sgd(xc, gs, [s[0] for s in sc] if momentum else None,
                                 lr=0.1, step=step, momentum=momentum, weight_decay=0.01,
                                 nesterov=nesterov, **opts)
    _check(xs, gs, states, group, opts, run)


@pytest.mark.parametrize("opts", OPTS)
def test_adagrad_torch(opts):
    xs, gs = _data(3, opts.get("grad_scale", 1.0))
    states = [[np.full_like(x, 0.1)] for x in xs]
    group = {"rule": "adagrad_torch", "lr": 0.1, "eps": 1e-10, "decay": 0.01,
             "lr_decay": 0.01, "t": 2, "maximize": True}

    def run(xc, gs, sc):
        return fastopt.adagrad(xc, gs, [s[0] for s in sc], lr=0.1, step=2,
                                     lr_decay=0.01, weight_decay=0.01, eps=1e-10,
                                     maximize=True, **opts)
    _check(xs, gs, states, group, opts, run)


@pytest.mark.parametrize("opts", OPTS[1:])
@pytest.mark.parametrize("rule", ["momentum", "adagrad", "adam"])
def test_onnx_rules_take_step_options(opts, rule):
    xs, gs = _data(4, opts.get("grad_scale", 1.0))
    n = 2 if rule == "adam" else 1
    states = [[np.abs(x) * (k + 1) for k in range(n)] for x in xs]
    group = {"rule": rule, "lr": 0.1, "alpha": 0.9, "beta": 0.99, "eps": 1e-6,
             "decay": 0.01, "decay_post": 0.001, "lr_decay": 0.1, "t": 2,
             "nesterov": True}
    kw = {"momentum": {"alpha": 0.9, "beta": 0.99, "norm_coefficient": 0.01,
                       "mode": "nesterov"},
          "adagrad": {"decay_factor": 0.1, "epsilon": 1e-6, "norm_coefficient": 0.01},
          "adam": {"alpha": 0.9, "beta": 0.99, "epsilon": 1e-6, "norm_coefficient": 0.01,
                   "norm_coefficient_post": 0.001}}[rule]

    def run(xc, gs, sc):
        st = [[s[k] for s in sc] for k in range(n)]
        return public_names.op(rule)(xc, gs, *st, lr=0.1, t=2, **kw, **opts)
    _check(xs, gs, states, group, opts, run)


def test_momentum_agc_with_step_options_equals_clip_then_agc():
    xs, gs = _data(5, 1024.0)
    xs = [x.reshape(1, -1) for x in xs]
    gs = [g.reshape(1, -1) for g in gs]
    vs = [np.zeros_like(x) for x in xs]
    xa, va = [x.copy() for x in xs], [v.copy() for v in vs]
    info = fastopt.onnx_momentum(xs, gs, vs, lr=0.1, t=1, clipping=0.01, grad_scale=1024.0,
                            max_grad_norm=1.0)
    ga = [g.copy() for g in gs]
    norm = fastopt.clip_grads(ga, max_norm=1.0, grad_scale=1024.0)
    fastopt.onnx_momentum(xa, ga, va, lr=0.1, t=1, clipping=0.01)
    assert info.norm == norm
    for a, b in zip(xs, xa):
        _same(a, b)


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_global_norm_and_clip_grads(norm_type):
    _, gs = _data(6, 3.0)
    gs.append(np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    gs.append(np.arange(40.0)[::2])                        # strided: the slow path
    norm, _ = ref.global_norm(gs, grad_scale=2.0, norm_type=norm_type)
    assert fastopt.global_norm(gs, grad_scale=2.0, norm_type=norm_type) == norm
    for conv in ("torch", "optax"):
        got = [g.copy() for g in gs]
        assert fastopt.clip_grads(got, max_norm=1.0, grad_scale=2.0, convention=conv,
                                  norm_type=norm_type, clip_value=0.3) == norm
        for a, g in zip(got, gs):
            _same(a, ref.transform(g, grad_scale=2.0, norm=norm, max_norm=1.0,
                                   convention=conv, clip_value=0.3))


def test_awkward_layouts_fall_back_and_match():
    """Strided / byte-swapped / broadcast inputs: copies, same bits."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((40, 30))
    x = base[::2, ::3]                              # strided view, written back
    g = rng.standard_normal(10)                     # broadcast along the first axis
    m = np.zeros((20, 10)).astype(">f8")            # byte-swapped state
    v = np.full((20, 10), 0.5)
    want = ref.adam_torch(np.array(x), ref.transform(np.broadcast_to(g, x.shape),
                                                     grad_scale=4.0),
                          np.zeros((20, 10)), v.copy(), lr=0.01, step=1,
                          weight_decay=0.1, decoupled=True)
    info = fastopt.adamw(x, g, m, v, lr=0.01, step=1, weight_decay=0.1, grad_scale=4.0)
    assert info.applied
    _same(np.array(x), want[0])
    _same(m.astype(np.float64), want[1])
    _same(v, want[2])


def test_gradient_aliasing_a_parameter_is_read_before_written():
    x = np.linspace(-1, 1, 50)
    y = np.linspace(2, 3, 50)
    ms = [np.zeros(50), np.zeros(50)]
    vs = [np.zeros(50), np.zeros(50)]
    want = [ref.adam_torch(a, b, np.zeros(50), np.zeros(50), lr=0.1, step=1,
                           decoupled=True, weight_decay=0.01)[0]
            for a, b in ((x, y), (y, x))]
    fastopt.adamw([x, y], [y, x], ms, vs, lr=0.1, step=1)   # g of 0 is x of 1
    _same(x, want[0])
    _same(y, want[1])


def test_skip_writes_nothing():
    xs, gs = _data(8)
    gs[2][5] = np.inf
    xc = [x.copy() for x in xs]
    ms = [np.zeros_like(x) for x in xs]
    vs = [np.zeros_like(x) for x in xs]
    info = fastopt.adamw(xc, gs, ms, vs, lr=0.1, step=1, skip_if_nonfinite=True,
                         max_grad_norm=1.0)
    assert info == (False, math.inf, False)
    for a, b in zip(xc, xs):
        _same(a, b)
    assert not any(m.any() for m in ms) and not any(v.any() for v in vs)


BAD = [
    ({"max_grad_norm": 0.0}, ValueError, "max_grad_norm must be > 0"),
    ({"max_grad_norm": -1.0}, ValueError, "max_grad_norm must be > 0"),
    ({"max_grad_norm": math.nan}, ValueError, "max_grad_norm must be > 0"),
    ({"max_grad_norm": "1"}, TypeError, "max_grad_norm must be a real number"),
    ({"norm_type": 1.0}, ValueError, "norm_type must be 2.0 or math.inf"),
    ({"norm_type": None}, TypeError, "norm_type must be 2.0 or math.inf"),
    ({"grad_scale": 0.0}, ValueError, "grad_scale must be > 0"),
    ({"grad_scale": math.nan}, ValueError, "grad_scale must be finite"),
    ({"grad_scale": math.inf}, ValueError, "grad_scale must be finite"),
    ({"clip_value": -1.0}, ValueError, "clip_value must be > 0"),
    ({"max_grad_norm": 1.0, "clip_convention": "keras"}, ValueError, "clip_convention"),
    ({"skip_if_nonfinite": 1}, TypeError, "skip_if_nonfinite must be a bool"),
    ({"step": 0}, ValueError, "step must be >= 1"),
    ({"betas": (0.9, 1.0)}, ValueError, r"betas\[1\] must be < 1"),
    ({"lr": -1.0}, ValueError, "lr must be a finite number >= 0"),
    ({"amsgrad": True}, ValueError, "amsgrad=True needs max_exp_avg_sqs"),
]


@pytest.mark.parametrize("change,exc,match", BAD)
def test_bad_inputs_write_nothing(change, exc, match):
    xs, gs = _data(9)
    xc = [x.copy() for x in xs]
    ms = [np.ones_like(x) for x in xs]
    kw = {"lr": 0.1, "step": 2}
    kw.update(change)
    with pytest.raises(exc, match="fastopt.adamw: " + match):
        fastopt.adamw(xc, gs, ms, [m.copy() for m in ms], **kw)
    for a, b in zip(xc, xs):
        _same(a, b)
    assert all((m == 1).all() for m in ms)


@pytest.mark.parametrize("what", ["readonly", "dtype", "shape", "overlap", "missing"])
def test_bad_tensors_write_nothing(what):
    xs, gs = _data(10)
    ms = [np.zeros_like(x) for x in xs]
    vs = [np.zeros_like(x) for x in xs]
    x0 = [x.copy() for x in xs]
    match = {"readonly": r"params\[3\] is read-only", "dtype": r"exp_avgs\[3\] has dtype",
             "shape": r"exp_avg_sqs\[3\] has shape", "overlap": "share memory",
             "missing": r"exp_avgs\[3\] is missing"}[what]
    if what == "readonly":
        xs[3].flags.writeable = False
    elif what == "dtype":
        ms[3] = ms[3].astype(np.float32 if ms[3].dtype == np.float64 else np.float64)
    elif what == "shape":
        vs[3] = np.zeros(xs[3].size + 1, xs[3].dtype)
    elif what == "overlap":
        vs[3] = ms[3]
    else:
        ms[3] = None
    with pytest.raises((TypeError, ValueError), match=match):
        fastopt.adamw(xs, gs, ms, vs, lr=0.1, step=1, max_grad_norm=1.0)
    for a, b in zip(xs, x0):
        _same(a, b)


def test_clip_grads_awkward_layouts_written_back():
    """Strided and byte-swapped gradients go through the dispatch's copies,
    written back: the same bits as contiguous native gradients."""
    rng = np.random.default_rng(11)
    plain = [rng.standard_normal(n).astype(dt) for n, dt in ((9, np.float32), (6, np.float64))]
    big = np.zeros(18, np.float32)
    big[::2] = plain[0]
    awkward = [big[::2], plain[1].astype(">f8")]
    want = fastopt.clip_grads([g.copy() for g in plain], max_norm=0.5, grad_scale=2.0)
    assert fastopt.clip_grads(awkward, max_norm=0.5, grad_scale=2.0) == want
    ref_out = [g.copy() for g in plain]
    fastopt.clip_grads(ref_out, max_norm=0.5, grad_scale=2.0)
    for a, b in zip(awkward, ref_out):
        _same(a.astype(b.dtype), b)
    assert (big[1::2] == 0).all()


def _bad_grad_lists():
    ro = np.ones(3, np.float32)
    ro.flags.writeable = False
    same = np.ones(4, np.float32)
    zero_stride = np.lib.stride_tricks.as_strided(np.ones(4, np.float32), (3, 4), (0, 4),
                                                  writeable=True)
    return {"readonly": ([np.ones(2), ro], r"grads\[1\] is read-only; it is clipped in place"),
            "self-overlap": ([zero_stride], r"grads\[0\] has elements that share memory"),
            "shared": ([same, same], r"grads\[0\] and grads\[1\] share memory"),
            "dtype": ([np.ones(2), np.ones(2, np.int32)], r"grads\[1\] has dtype int32"),
            "type": ([np.ones(2), [1.0]],
                     r"grads\[1\] must be a numpy.ndarray, got a list of numbers")}


@pytest.mark.parametrize("what", sorted(_bad_grad_lists()))
def test_clip_grads_bad_gradients_write_nothing(what):
    grads, match = _bad_grad_lists()[what]
    before = [g.copy() for g in grads if isinstance(g, np.ndarray)]
    with pytest.raises((TypeError, ValueError), match="fastopt.clip_grads: " + match):
        fastopt.clip_grads(grads, max_norm=0.1, grad_scale=2.0)
    for a, b in zip([g for g in grads if isinstance(g, np.ndarray)], before):
        assert a.tobytes() == b.tobytes()


def test_grads_none_is_named_per_tensor():
    """grads=None is a list of missing gradients, as a list of Nones is:
    the rule's check names the first."""
    x = np.ones(3, np.float32)
    for grads in (None, [None]):
        with pytest.raises(ValueError, match=r"fastopt.adamw: grads\[0\] is missing; the rule "
                                             r"needs it"):
            fastopt.adamw([x], grads, [np.zeros(3, np.float32)], [np.zeros(3, np.float32)],
                          step=1)
    np.testing.assert_array_equal(x, np.ones(3, np.float32))
