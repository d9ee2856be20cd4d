"""fastopt.optim optimizers take a gradient of exactly its parameter's shape,
unless built with broadcast_grads=True; the functions keep broadcasting."""
import math
import re

import numpy as np
import pytest
from optim_cases import assert_same, snapshot

import fastopt
from fastopt import optim
from fastopt.schedules import WarmRestarts

CLASSES = ["OnnxMomentum", "OnnxAdagrad", "OnnxAdam", "AdamW", "Adam"]
SHAPES = [(128, 10), (10,), (4, 1, 3)]


def _params(dtype=np.float32):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(dtype) for s in SHAPES]


def _grads(params, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape).astype(p.dtype) for p in params]


def _make(name, params, **kw):
    return getattr(optim, name)(params, lr=0.01, **kw)


def _message(name, k, gshape, pshape):
    return (rf"fastopt\.optim\.{name}\.step: grads\[{k}\] has shape "
            + re.escape(str(gshape)) + rf" but params\[{k}\] has shape "
            + re.escape(str(pshape)) + r"; the gradient must have its parameter's shape "
            r"\(or build the optimizer with broadcast_grads=True to broadcast it\)")


@pytest.mark.parametrize("name", CLASSES)
@pytest.mark.parametrize("warm", [0, 3], ids=["first step", "after prepared steps"])
@pytest.mark.parametrize("gshape", [(10,), (1,), (1, 10), ()])
def test_broadcastable_gradient_is_refused_and_nothing_written(name, warm, gshape):
    """A (10,) or (1,) gradient for a (128, 10) weight is a backprop shape
    bug: refused on the first step and on the prepared (remembered) step,
    with no parameter, state or step count changed."""
    params = _params()
    opt = _make(name, params)
    for k in range(warm):
        assert opt.step(_grads(params, k))
    before = snapshot(opt, params)
    grads = _grads(params, 9)
    grads[0] = np.ones(gshape, np.float32)
    with pytest.raises(ValueError, match=_message(name, 0, gshape, (128, 10))):
        opt.step(grads)
    assert_same(before, snapshot(opt, params))
    assert opt.steps == warm
    assert opt.step(_grads(params, 9))        # a good step still runs


@pytest.mark.parametrize("name", CLASSES)
def test_refused_in_every_form_of_step(name):
    """Parameter groups, a missing gradient, clipping and grad_scale take
    other routes through the step; each refuses the shape too."""
    params = _params(np.float64)
    opt = getattr(optim, name)([{"params": params[:1]}, {"params": params[1:]}], lr=0.01)
    opt.step(_grads(params))
    before = snapshot(opt, params)
    good = _grads(params, 2)
    bad = [good[0], good[1], np.ones((3,))]             # (3,) for (4, 1, 3)
    msg = _message(name, 2, (3,), (4, 1, 3))
    for grads, kw in [(bad, {}), ([bad[:1], bad[1:]], {}), ([None, None, bad[2]], {}),
                      (bad, {"grad_scale": 2.0}), (bad, {"max_grad_norm": 1.0}),
                      (bad, {"skip_if_nonfinite": True})]:
        with pytest.raises(ValueError, match=msg):
            opt.step(grads, **kw)
    assert_same(before, snapshot(opt, params))


def test_refused_with_agc_clipping():
    """A Momentum group with adaptive gradient clipping runs its own kernel
    call; the shape is refused there as well."""
    params = _params()
    opt = optim.OnnxMomentum([{"params": params[:1], "clipping": 0.01},
                          {"params": params[1:]}], lr=0.1)
    opt.step(_grads(params))
    before = snapshot(opt, params)
    grads = _grads(params, 2)
    grads[0] = np.ones((10,), np.float32)
    for kw in ({}, {"max_grad_norm": 1.0}):
        with pytest.raises(ValueError, match=_message("OnnxMomentum", 0, (10,), (128, 10))):
            opt.step(grads, **kw)
    assert_same(before, snapshot(opt, params))


def test_refused_even_when_the_step_would_be_skipped():
    """With a schedule and skip_if_nonfinite, a non-finite gradient skips
    the step before the schedule is consulted; a wrong shape is still an
    error, not a silent skip."""
    params = _params()
    opt = optim.OnnxAdam(params, schedule=WarmRestarts(0.1, 0.001, interval=10))
    grads = _grads(params)
    grads[0] = np.full((10,), math.nan, np.float32)
    with pytest.raises(ValueError, match=_message("OnnxAdam", 0, (10,), (128, 10))):
        opt.step(grads, skip_if_nonfinite=True)
    grads = _grads(params)
    grads[1] = np.full((10,), math.nan, np.float32)     # the right shape: skipped
    assert opt.step(grads, skip_if_nonfinite=True) is False


@pytest.mark.parametrize("name", CLASSES)
def test_broadcast_grads_opts_in(name):
    """broadcast_grads=True reads a broadcastable gradient as the functions
    do: the same bits as passing the broadcast array itself."""
    a, b = _params(), _params()
    opt_a = _make(name, a, broadcast_grads=True)
    opt_b = _make(name, b)
    for k in range(4):                         # first, prepared and remembered steps
        grads = _grads(a, k)
        small = grads[0][:1]                   # (1, 10) for (128, 10)
        opt_a.step([small] + grads[1:])
        opt_b.step([np.broadcast_to(small, (128, 10)).copy()] + grads[1:])
        for x, y in zip(a, b):
            assert x.tobytes() == y.tobytes()
    assert opt_a.broadcast_grads is True and opt_b.broadcast_grads is False
    with pytest.raises(ValueError, match=r"grads\[0\] with shape \(3, 10\) cannot be "
                                         r"broadcast to params\[0\]'s shape \(128, 10\)"):
        opt_a.step([np.ones((3, 10), np.float32)] + _grads(a)[1:])


def test_functions_keep_broadcasting():
    """The functional API broadcasts a gradient, as documented."""
    x = np.ones((128, 10), np.float32)
    v = np.zeros_like(x)
    fastopt.onnx_momentum(x, np.full(10, 0.5, np.float32), v, lr=0.1, t=0)
    np.testing.assert_array_equal(x, np.full((128, 10), 0.95, np.float32))
