"""fastopt.optim: grad_scale, skip_if_nonfinite, and rejected arguments that
change nothing (constructor, step, overlapping parameters and gradients).
"""

import numpy as np
import pytest
from optim_cases import OPTS, assert_same, make_grads, make_params, snapshot

from fastopt import optim

# ------------------------------------------------------ grad_scale / skips

@pytest.mark.parametrize("name", ["momentum", "adagrad", "adam"])
def test_grad_scale_divides_the_gradients(name):
    cls, kw, _, _, _ = OPTS[name]
    params = make_params()
    twin = [p.copy() for p in params]
    a, b = cls(params, **kw), cls(twin, **kw)
    for k in range(3):
        grads = make_grads(params, k)
        scaled = [np.asarray(g * g.dtype.type(1024.0)) for g in grads]
        kept = [g.copy() for g in scaled]
        a.step(scaled, grad_scale=1024.0)
        b.step([np.asarray(g / g.dtype.type(1024.0)) for g in scaled])
        for g, c in zip(scaled, kept):
            np.testing.assert_array_equal(g, c)  # the inputs are only read
    for x, y in zip(params, twin):
        np.testing.assert_array_equal(x, y, strict=True)
    with pytest.raises(ValueError, match="grad_scale must be > 0"):
        a.step(make_grads(params, 0), grad_scale=0.0)
    with pytest.raises(ValueError, match="grad_scale must be finite"):
        a.step(make_grads(params, 0), grad_scale=float("inf"))


def test_grad_scale_is_not_an_lr_scale():
    """With weight decay the two differ: the scale must divide g only."""
    x = np.array([1.0, 2.0])
    opt = optim.OnnxMomentum([x], lr=0.1, norm_coefficient=0.5)
    opt.step([np.array([4.0, 8.0])], grad_scale=4.0)
    np.testing.assert_allclose(x, [1.0 - 0.1 * (0.5 + 1.0), 2.0 - 0.1 * (1.0 + 2.0)])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", ["momentum", "adagrad", "adam"])
def test_skip_if_nonfinite_changes_nothing(name, bad):
    cls, kw, _, _, _ = OPTS[name]
    calls = []
    params = make_params()
    kw = dict(kw)
    del kw["lr"]
    opt = cls([{"params": params[:2]}, {"params": params[2:]}], **kw,
              schedule=lambda s: calls.append(s) or 0.01)
    opt.step(make_grads(params, 0))
    before = snapshot(opt, params)
    n_calls = len(calls)
    grads = make_grads(params, 1)
    grads[3] = grads[3].copy()
    grads[3][...] = bad       # the 0-d tensor of the second group
    kept = [g.copy() for g in grads]
    assert opt.step(grads, skip_if_nonfinite=True) is False
    assert_same(before, snapshot(opt, params))
    assert len(calls) == n_calls  # the schedule was not consulted
    for g, c in zip(grads, kept):
        np.testing.assert_array_equal(g, c)
    assert opt.step(grads, grad_scale=2.0, skip_if_nonfinite=True) is False
    assert_same(before, snapshot(opt, params))
    grads[3][...] = 1.0
    assert opt.step(grads, skip_if_nonfinite=True) is True
    assert opt.steps == 2


@pytest.mark.parametrize("bad,err,msg", [
    (lambda g: g.astype(np.float64) * np.nan, TypeError,
     r"grads\[1\] has dtype float64; the gradient of params\[1\] \(float32\)"),
    (lambda g: np.full((1,), np.nan, g.dtype), ValueError,
     r"grads\[1\] has shape \(1,\) but params\[1\] has shape \(3,\)")])
def test_a_bad_nonfinite_gradient_is_refused_not_skipped(bad, err, msg):
    """With a schedule and skip_if_nonfinite the step measures the
    gradients before it consults the schedule; a gradient the step would
    refuse (wrong dtype, wrong shape) is refused then too, not skipped as
    non-finite, and nothing changes."""
    ps = [np.ones(4, np.float32), np.ones(3, np.float32)]
    opt = optim.AdamW(ps, lr=None, schedule=lambda s: 0.01)
    opt.step([np.ones(4, np.float32), np.ones(3, np.float32)])
    before = snapshot(opt, ps)
    with pytest.raises(err, match=msg):
        opt.step([np.ones(4, np.float32), bad(np.ones(3, np.float32))], skip_if_nonfinite=True)
    assert_same(before, snapshot(opt, ps))
    assert opt.steps == 1


def test_skip_if_nonfinite_is_exact_when_a_float32_sum_overflows():
    x = np.zeros(4, np.float32)
    opt = optim.OnnxMomentum([x], lr=1e-40)
    g = np.full(4, 3e38, np.float32)       # finite, but its float32 sum is inf
    with np.errstate(over="ignore"):
        assert np.isinf(np.sum(g))
    assert opt.step([g], skip_if_nonfinite=True) is True
    assert opt.steps == 1
    # a scale below 1 can make finite gradients overflow: those are skipped
    assert opt.step([g], grad_scale=0.5, skip_if_nonfinite=True) is False
    assert opt.steps == 1


# ---------------------------------------------------------- bad arguments

def test_constructor_errors():
    p = make_params()
    with pytest.raises(TypeError, match=r"params\[1\] must be a numpy.ndarray"):
        optim.OnnxMomentum([p[0], [1.0]], lr=0.1)
    with pytest.raises(TypeError, match=r"params\[0\] has dtype int64"):
        optim.OnnxMomentum([np.arange(3)], lr=0.1)
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"params\[0\] is read-only"):
        optim.OnnxAdagrad([ro], lr=0.1)
    with pytest.raises(ValueError, match="share memory.*only once"):
        optim.OnnxAdam([{"params": [p[0]]}, {"params": [p[0]]}], lr=0.1)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['momentum'\]"):
        optim.OnnxMomentum([{"params": p, "momentum": 0.9}], lr=0.1)
    with pytest.raises(ValueError, match="params is empty"):
        optim.OnnxAdam([], lr=0.1)
    with pytest.raises(TypeError, match="list of arrays or a list of parameter groups"):
        optim.OnnxAdam(p[0], lr=0.1)
    with pytest.raises(ValueError, match="alpha must be < 1.0"):
        optim.OnnxAdam(p, lr=0.1, alpha=1.0)
    with pytest.raises(ValueError, match=r"param_groups\[1\]\['epsilon'\] must be >= 0"):
        optim.OnnxAdagrad([{"params": p[:1]}, {"params": p[1:], "epsilon": -1.0}], lr=0.1)
    with pytest.raises(ValueError, match="lr must be a finite number >= 0"):
        optim.OnnxMomentum(p, lr=-1.0)


def test_step_errors_change_nothing():
    params = make_params()
    opt = optim.OnnxMomentum([{"params": params[:2]}, {"params": params[2:]}], lr=0.1)
    opt.step(make_grads(params, 0))
    before = snapshot(opt, params)
    grads = make_grads(params, 1)
    with pytest.raises(ValueError, match="grads has 4 entries but the optimizer has 5"):
        opt.step(grads[:4])
    bad = list(grads)
    bad[4] = bad[4].astype(np.float32 if bad[4].dtype == np.float64 else np.float64)
    with pytest.raises(TypeError, match=r"grads\[4\] has dtype .* params\[4\]"):
        opt.step(bad)
    bad = list(grads)
    bad[2] = np.ones((4, 4), grads[2].dtype)
    with pytest.raises(ValueError, match=r"grads\[2\] has shape \(4, 4\) but params\[2\]"):
        opt.step(bad)
    bad = list(grads)
    bad[3] = 1.0
    with pytest.raises(TypeError, match=r"grads\[3\] must be a numpy.ndarray"):
        opt.step(bad)
    bad = list(grads)
    bad[2] = np.lib.stride_tricks.as_strided(      # part of a state, the parameter's shape
        opt.state["v"][2].reshape(-1)[1:], (2, 3, 2), (0, 2 * bad[2].itemsize, bad[2].itemsize),
        writeable=False)
    with pytest.raises(ValueError, match="partially overlaps"):
        opt.step(bad)
    assert_same(before, snapshot(opt, params))
    # single group: the kernel's own check, restated with the optimizer's numbering
    single = optim.OnnxAdam(params, lr=0.1)
    with pytest.raises(TypeError, match=r"fastopt.optim.OnnxAdam.step: grads\[4\] has dtype"):
        single.step(grads[:4] + [grads[4].astype(np.int16)])
    assert single.steps == 0 and not single.state["v"][0].any()


def test_interleaved_strided_parameters_and_a_gradient_overlapping_one():
    base = np.zeros(12)
    a, b = base[0::2], base[1::2]   # no shared element, interleaved byte ranges
    opt = optim.OnnxMomentum([{"params": [a]}, {"params": [b]}], lr=0.1)
    opt.step([np.ones(6), np.ones(6)])
    np.testing.assert_array_equal(base, -0.1)
    with pytest.raises(ValueError, match=r"grads\[0\] partially overlaps params\[[01]\]"):
        opt.step([base[3:9], np.ones(6)])
    np.testing.assert_array_equal(base, -0.1)


def test_gradient_that_is_another_groups_parameter_is_read_before_writing():
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    opt = optim.OnnxMomentum([{"params": [a]}, {"params": [b]}], lr=0.1)
    opt.step([np.array([0.5, 0.5]), a])   # b's gradient is a's memory
    np.testing.assert_array_equal(b, [3.0 - 0.1, 4.0 - 0.2])
