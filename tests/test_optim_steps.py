"""fastopt.optim: stateful Momentum / Adagrad / Adam over the kernels.

Every check compares with the functional kernels (fastopt.onnx_momentum/adagrad/
adam, themselves tested against NumPy in test_ops_reference.py) called by
hand with the T convention of each operator, bit for bit, or with the
float64 NumPy reference: steps, state arenas, layouts, parameter groups.
"""

import numpy as np
import pytest
from optim_cases import OPTS, assert_same, make_grads, make_params, snapshot

import fastopt
from fastopt import _reference as ref
from fastopt import optim

# ------------------------------------------------------------------- steps

@pytest.mark.parametrize("name", list(OPTS))
@pytest.mark.parametrize("contiguous", [False, True])
def test_step_equals_kernel_calls(name, contiguous):
    cls, kw, kernel, states, t0 = OPTS[name]
    params = make_params()
    mine = [p.copy() for p in params]
    fill = kw.get("initial_accumulator_value", 0.0)
    mstates = [[np.full(p.shape, fill if s == "h" else 0.0, p.dtype) for p in params]
               for s in states]
    opt = cls(params, contiguous_state=contiguous, **kw)
    assert opt.t == t0 and opt.steps == 0
    for k in range(4):
        grads = make_grads(params, k)
        assert opt.step(grads) is True
        kernel(mine, grads, *mstates, t=t0 + k, **ref.optim.rule_kwargs(kw))
        for a, b in zip(params, mine):
            np.testing.assert_array_equal(a, b, strict=True)
        for s, ms in zip(states, mstates):
            for a, b in zip(opt.state[s], ms):
                np.testing.assert_array_equal(a, b, strict=True)
    assert opt.steps == 4 and opt.t == t0 + 4


@pytest.mark.parametrize("name", ["momentum", "adagrad", "adam"])
def test_first_updates_follow_the_onnx_t_convention(name):
    """Against the float64 NumPy reference: Momentum's first update ignores
    beta (T=0), Adam's is bias-corrected (T=1), Adagrad's is undecayed."""
    cls, kw, _, states, t0 = OPTS[name]
    x = np.array([0.5, -1.0, 2.0])
    opt = cls([x], **kw)
    xr = x.copy()
    fill = kw.get("initial_accumulator_value", 0.0)
    sr = [np.full(3, fill if s == "h" else 0.0) for s in states]
    reference = getattr(ref, name)
    for k in range(3):
        g = np.array([0.3, -0.2, 0.1]) * (k + 1)
        opt.step([g])
        xr, *sr = reference(xr, g, *sr, t=t0 + k, **ref.optim.rule_kwargs(kw))
        np.testing.assert_allclose(x, xr, rtol=1e-14, atol=1e-15)


def test_contiguous_state_is_one_aligned_arena_per_dtype():
    params = make_params()
    opt = optim.OnnxAdam(params, lr=0.1, contiguous_state=True)
    assert set(opt.arenas) == {np.dtype(np.float32), np.dtype(np.float64)}
    for arrays in opt.state.values():
        for a, p in zip(arrays, params):
            assert a.shape == p.shape and a.dtype == p.dtype
            assert np.shares_memory(a, opt.arenas[a.dtype])
            assert a.ctypes.data % 64 == 0
    assert not optim.OnnxAdam(make_params(), lr=0.1).arenas


def test_fortran_ordered_params_get_fortran_ordered_states():
    x = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    opt = optim.OnnxMomentum([x], lr=0.1)
    assert opt.state["v"][0].flags.f_contiguous
    v = np.zeros((3, 4))
    xr = x.copy()
    g = np.ones((3, 4))
    opt.step([g])
    fastopt.onnx_momentum(xr, g, v, lr=0.1, t=0)
    np.testing.assert_array_equal(x, xr)


def test_broadcast_and_strided_gradients():
    x = np.arange(6.0).reshape(2, 3)
    y = np.zeros(8)[::2]   # a strided parameter
    opt = optim.OnnxAdagrad([x, y], lr=0.1, broadcast_grads=True)
    xr, yr, hx, hy = x.copy(), y.copy(), np.zeros((2, 3)), np.zeros(4)
    gx = np.array([1.0, 2.0, 3.0])
    gy = np.arange(8.0)[1::2]
    opt.step([gx, gy])
    fastopt.onnx_adagrad([xr, yr], [gx, gy], [hx, hy], lr=0.1, t=0)
    np.testing.assert_array_equal(x, xr)
    np.testing.assert_array_equal(y, yr)


# ---------------------------------------------------------------- groups

def test_parameter_groups_equal_separate_calls():
    params = make_params()
    groups = [{"params": params[:2], "lr": 0.5, "norm_coefficient": 0.1},
              {"params": params[2:], "nesterov": True}]
    opt = optim.OnnxMomentum(groups, lr=0.05, alpha=0.7)
    a, b = [p.copy() for p in params[:2]], [p.copy() for p in params[2:]]
    va, vb = [np.zeros_like(p) for p in a], [np.zeros_like(p) for p in b]
    for k in range(3):
        grads = make_grads(params, k)
        if k == 1:  # one list per group works too
            opt.step([grads[:2], grads[2:]])
        else:
            opt.step(grads)
        fastopt.onnx_momentum(a, grads[:2], va, lr=0.5, t=k, alpha=0.7, norm_coefficient=0.1)
        fastopt.onnx_momentum(b, grads[2:], vb, lr=0.05, t=k, alpha=0.7, mode="nesterov")
    for x, y in zip(params, a + b):
        np.testing.assert_array_equal(x, y, strict=True)
    assert opt.param_groups[0]["lr"] == 0.5 and opt.param_groups[1]["lr"] == 0.05
    assert opt.last_lr == [0.5, 0.05]


def test_none_gradient_leaves_its_parameter_alone():
    params = make_params()
    opt = optim.OnnxAdam([{"params": params[:2]}, {"params": params[2:]}], lr=0.1)
    before = [p.copy() for p in params]
    grads = make_grads(params, 0)
    grads[1] = None
    grads[2] = grads[3] = grads[4] = None   # a whole group without gradients
    opt.step(grads)
    assert not np.array_equal(params[0], before[0])
    for i in (1, 2, 3, 4):
        np.testing.assert_array_equal(params[i], before[i])
        assert not opt.state["v"][i].any()
    assert opt.steps == 1


def test_hyperparameters_edited_between_steps_are_used_and_checked():
    params = make_params()
    opt = optim.OnnxMomentum([{"params": params[:2]}, {"params": params[2:]}], lr=0.1)
    mine = [p.copy() for p in params]
    v = [np.zeros_like(p) for p in params]
    grads = make_grads(params, 0)
    opt.param_groups[1]["lr"] = 0.25
    opt.step(grads)
    fastopt.onnx_momentum(mine[:2], grads[:2], v[:2], lr=0.1, t=0)
    fastopt.onnx_momentum(mine[2:], grads[2:], v[2:], lr=0.25, t=0)
    for a, b in zip(params, mine):
        np.testing.assert_array_equal(a, b)
    before = snapshot(opt, params)
    opt.param_groups[1]["alpha"] = float("nan")
    with pytest.raises(ValueError, match=r"param_groups\[1\]\['alpha'\] must be finite"):
        opt.step(grads)
    opt.param_groups[1]["alpha"] = 0.9
    assert_same(before, snapshot(opt, params))
    opt.param_groups[0]["params"] = [params[0]]
    with pytest.raises(ValueError, match="was replaced"):
        opt.step(grads)


def test_repr_and_state_views():
    params = make_params()
    opt = optim.OnnxAdagrad(params, lr=0.1, initial_accumulator_value=0.5)
    assert "fastopt.optim.OnnxAdagrad(5 parameters in 1 group(s), steps=0)" == repr(opt)
    assert all((h == 0.5).all() for h in opt.state["h"])
    assert opt.params[0] is params[0]
