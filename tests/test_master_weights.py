"""fastopt.optim with master_weights=True: float32 masters of 16-bit
parameters, updated as a float32 optimizer updates them, and the 16-bit
parameters rewritten from them (rounded as astype rounds) on every applied
step, by the step itself; checkpoints hold the masters."""
import math

import numpy as np
import pytest

import fastopt.optim as fo

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
SHAPES = [(30, 20), (7,), (50001,)]

CASES = [("AdamW", dict(lr=1e-2, weight_decay=0.1)),
         ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
         ("RMSprop", dict(lr=1e-3, centered=True)),
         ("Lion", dict(lr=1e-3, weight_decay=0.1)),
         ("LAMB", dict(lr=1e-3, weight_decay=0.1)),
         ("NAdam", dict(lr=1e-3, momentum_decay=0.01)),
         ("OnnxMomentum", dict(lr=0.1, clipping=0.05))]


def bits(a):
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def _model(rng, dtypes):
    return [rng.standard_normal(s).astype(np.float32).astype(dt)
            for s, dt in zip(SHAPES, dtypes)]


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("nth", [1, 3])
def test_masters_step_as_float32_parameters_and_rewrite_the_16bit_ones(name, kw, nth):
    rng = np.random.default_rng(1)
    model = _model(rng, [BF16, np.float32, F16])
    ref = [p.astype(np.float32) for p in model]
    opt = getattr(fo, name)(model, master_weights=True, n_threads=nth, **kw)
    plain = getattr(fo, name)(ref, n_threads=nth, **kw)
    assert opt.model_params[0] is model[0] and opt.params[1] is model[1]
    for step in range(6):
        gs = [rng.standard_normal(s).astype(dt) for s, dt in zip(SHAPES, [BF16, F16, np.float32])]
        options = dict(grad_scale=2.0, max_grad_norm=5.0) if step % 2 else {}
        assert opt.step(gs, **options) == plain.step([g.astype(np.float32) for g in gs],
                                                     **options)
        for p, m, r in zip(model, opt.params, ref):
            np.testing.assert_array_equal(bits(m), bits(r))
            np.testing.assert_array_equal(bits(p), bits(r.astype(p.dtype)))
    for a, b in zip(sum(opt.state.values(), []), sum(plain.state.values(), [])):
        np.testing.assert_array_equal(a, b)


def test_a_skipped_step_rewrites_nothing():
    rng = np.random.default_rng(2)
    model = _model(rng, [BF16, BF16, BF16])
    opt = fo.AdamW(model, lr=1e-2, master_weights=True)
    opt.step([np.ones(s, BF16) for s in SHAPES])
    before = [p.copy() for p in model] + [m.copy() for m in opt.params]
    gs = [np.ones(s, BF16) for s in SHAPES]
    gs[1][3] = np.inf
    assert not opt.step(gs, skip_if_nonfinite=True)
    for a, b in zip(model + opt.params, before):
        np.testing.assert_array_equal(bits(a), bits(b))
    assert opt.steps == 1 and math.isinf(opt.last_grad_norm)


def test_a_checkpoint_holds_the_masters_and_load_rewrites_the_model(tmp_path):
    rng = np.random.default_rng(3)
    model = _model(rng, [BF16, np.float32, F16])
    opt = fo.AdamW(model, lr=1e-2, master_weights=True)
    grads = [[rng.standard_normal(s).astype(BF16) for s in SHAPES] for _ in range(6)]
    for g in grads[:3]:
        opt.step(g)
    opt.save(tmp_path / "ck.npz")               # params=False: the masters still go in
    other = [np.zeros(s, p.dtype) for s, p in zip(SHAPES, model)]
    opt2 = fo.AdamW(other, lr=1e-2, master_weights=True)
    opt2.load(tmp_path / "ck.npz")
    for p, q in zip(model, other):
        np.testing.assert_array_equal(bits(p), bits(q))
    for g in grads[3:]:
        opt.step(g)
        opt2.step(g)
    for a, b in zip(model + opt.params, other + opt2.params):
        np.testing.assert_array_equal(bits(a), bits(b))


def test_bad_input_changes_nothing():
    rng = np.random.default_rng(4)
    frozen = np.zeros(4, BF16)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match=r"fastopt.optim.AdamW: params\[1\] is read-only"):
        fo.AdamW([np.zeros(3, BF16), frozen], master_weights=True)
    model = _model(rng, [BF16, BF16, BF16])
    opt = fo.AdamW(model, lr=1e-2, master_weights=True)
    before = [p.copy() for p in model] + [m.copy() for m in opt.params]
    gs = [np.ones(s, BF16) for s in SHAPES]
    gs[2] = np.ones(SHAPES[2], np.int16)
    with pytest.raises(TypeError, match=r"grads\[2\] has dtype int16"):
        opt.step(gs)
    for a, b in zip(model + opt.params, before):
        np.testing.assert_array_equal(bits(a), bits(b))
    with pytest.raises(TypeError, match="fastopt updates float32 or float64"):
        fo.AdamW([np.zeros(3, BF16)])           # 16-bit parameters need master weights
    with pytest.raises(TypeError, match=r"params\[1\] has dtype int16; with master_weights="
                                        r"True fastopt updates float32 or float64 arrays and "
                                        r"keeps float32 masters of bfloat16 or float16 ones"):
        fo.AdamW([{"params": [np.zeros(3, BF16)]}, {"params": [np.zeros(2, np.int16)]}],
                 master_weights=True)


def test_the_prepared_step_writes_the_copies_and_a_frozen_one_is_refused(monkeypatch):
    from fastopt import _ext
    rng = np.random.default_rng(5)
    model = _model(rng, [BF16, np.float32, F16])
    opt = fo.AdamW(model, lr=1e-2, master_weights=True)
    grads = [[rng.standard_normal(s).astype(BF16) for s in SHAPES] for _ in range(4)]
    opt.step(grads[0])
    calls = []
    real = _ext.step
    monkeypatch.setattr(_ext, "step", lambda *a, **k: calls.append(1) or real(*a, **k))
    for g in grads[1:3]:
        opt.step(g)
    assert not calls                    # the prepared step, copies included
    for p, m in zip(model, opt.params):
        np.testing.assert_array_equal(bits(p), bits(m.astype(p.dtype)))
    model[2].setflags(write=False)
    before = [p.copy() for p in model] + [m.copy() for m in opt.params]
    with pytest.raises(ValueError, match=r"AdamW.step: the 16-bit params\[2\] is read-only"):
        opt.step(grads[3])
    for a, b in zip(model + opt.params, before):
        np.testing.assert_array_equal(bits(a), bits(b))
