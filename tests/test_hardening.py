"""Edge cases that must give the documented result: NumPy integers where an
int is expected, extreme scalars, in-place changes between steps."""
import numpy as np
import pytest

import fastopt
from fastopt._reference.step import adagrad_torch as adagrad_reference
from fastopt._reference.step import sgd_torch as sgd_reference


def _z():
    return np.zeros(4)


NP_INT_CALLS = {
    "adamw": lambda x, g, n: fastopt.adamw(x, g, _z(), _z(), lr=0.1, step=1, n_threads=n),
    "adam_torch": lambda x, g, n: fastopt.adam(x, g, _z(), _z(), lr=0.1, step=1,
                                                      n_threads=n),
    "sgd_torch": lambda x, g, n: fastopt.sgd(x, g, _z(), lr=0.1, step=1,
                                                    momentum=0.9, n_threads=n),
    "adagrad_torch": lambda x, g, n: fastopt.adagrad(x, g, _z(), lr=0.1, step=1,
                                                            n_threads=n),
    "global_norm": lambda x, g, n: fastopt.global_norm([g], n_threads=n),
    "clip_grads": lambda x, g, n: fastopt.clip_grads([g], max_norm=1.0, n_threads=n),
    "momentum with grad_scale": lambda x, g, n: fastopt.onnx_momentum(
        x, g, _z(), lr=0.1, t=1, grad_scale=0.5, n_threads=n),
    "clipped momentum with grad_scale": lambda x, g, n: fastopt.onnx_momentum(
        x, g, _z(), lr=0.1, t=1, grad_scale=0.5, clipping=0.1, n_threads=n),
    "adam with max_grad_norm": lambda x, g, n: fastopt.onnx_adam(
        x, g, _z(), _z(), lr=0.1, t=1, max_grad_norm=1.0, n_threads=n),
    "adagrad with grad_scale": lambda x, g, n: fastopt.onnx_adagrad(
        x, g, _z(), lr=0.1, t=1, grad_scale=0.5, n_threads=n),
}


@pytest.mark.parametrize("n", [np.int64(2), np.int32(1), np.uint8(3), np.int64(-1)])
@pytest.mark.parametrize("call", list(NP_INT_CALLS))
def test_numpy_integer_n_threads_is_an_int(call, n):
    x, g = np.linspace(1.0, 2.0, 4), np.linspace(-1.0, 3.0, 4)
    x0, g0 = x.copy(), g.copy()
    want = NP_INT_CALLS[call](x0, g0, int(n))
    got = NP_INT_CALLS[call](x, g, n)
    np.testing.assert_equal(got, want)   # a norm not measured is NaN in both
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(g, g0)


@pytest.mark.parametrize("kind", ["optim", "torch"])
@pytest.mark.parametrize("clipping", [None, 0.1])
def test_an_optimizers_numpy_integer_n_threads_is_an_int(kind, clipping):
    if kind == "optim":
        x = np.linspace(1.0, 2.0, 4)
        opt = fastopt.optim.OnnxMomentum([x], lr=0.1, clipping=clipping)
        opt.n_threads = np.int64(2)

        def step():
            return opt.step([np.ones(4)], max_grad_norm=0.5)
    else:
        if clipping is not None:
            pytest.skip("fastopt.torch has no clipping=")
        torch = pytest.importorskip("torch")
        p = torch.nn.Parameter(torch.linspace(1.0, 2.0, 4, dtype=torch.float64))
        opt = fastopt.torch.AdamW([p], lr=0.1)
        opt.n_threads = np.int64(2)
        x = p.detach().numpy()

        def step():
            p.grad = torch.ones(4, dtype=torch.float64)
            return opt.step(max_grad_norm=0.5)
    for _ in range(3):      # the full step, then the prepared one
        step()
    assert np.all(x < np.linspace(1.0, 2.0, 4))


TINY_F64 = np.array([0.0, -0.0, 2.0**-1074, -(2.0**-1060), 1e-310, 2.0**-1030])


@pytest.mark.parametrize("scale", [2.0**-1023, 2.0**-1024, 2.0**-1050, 2.0**-1074])
@pytest.mark.parametrize("clip", [None, 1e300])
def test_float64_grad_scale_below_the_normal_range_divides(scale, clip):
    x = np.ones(TINY_F64.size)
    fastopt.sgd(x, TINY_F64.copy(), None, lr=2.0**-60, step=1, grad_scale=scale,
                      max_grad_norm=clip)
    np.testing.assert_array_equal(x, 1.0 - 2.0**-60 * (TINY_F64 / scale))
    info = fastopt.global_norm([TINY_F64], grad_scale=scale)
    assert info == np.sqrt(np.sum((TINY_F64 / scale) ** 2))


@pytest.mark.parametrize("cls", ["OnnxAdam", "OnnxMomentum"])
@pytest.mark.parametrize("remembered", [False, True])
def test_the_last_step_leaves_a_count_that_loads_back_and_refuses_the_next(
        cls, remembered, tmp_path):
    """Every count a step leaves is one a checkpoint holds: the step whose
    count after it would make the next update count 2**63 (beyond int64,
    which load refuses) is refused, with nothing written: by the full step
    and by the remembered one (fastopt/optim/_compiled.pyx), which a step
    leaves for the next."""
    x = np.ones(3)
    opt = getattr(fastopt.optim, cls)([x], lr=0.1)
    opt.step([np.ones(3)])
    assert opt._fast is not None
    last = 2**63 - 1 - opt._T0       # the largest count a checkpoint takes
    sd = opt.state_dict()
    sd["steps"] = last - 1
    opt.load_state_dict(sd)
    opt.step([np.ones(3)])
    assert opt.steps == last
    opt.load_state_dict(opt.state_dict())
    opt.save(tmp_path / "last.npz")
    opt.load(tmp_path / "last.npz")
    before = (x.copy(), opt.state_dict())
    if not remembered:
        opt._fast = None             # (the full route's check)
    with pytest.raises(ValueError, match=rf"fastopt\.optim\.{cls}\.step: the update count "
                                         r"would reach 2\*\*63 - 1"):
        opt.step([np.ones(3)])
    np.testing.assert_array_equal(x, before[0])
    assert opt.steps == last
    np.testing.assert_equal(opt.state_dict()["state"], before[1]["state"])


@pytest.mark.parametrize("momentum, weight_decay", [(1e-300, 0.0), (0.0, 1e-300),
                                                    (1e-300, 1e-300), (1e-45, 0.0)])
def test_float32_sgd_torch_takes_torchs_path_for_a_coefficient_that_rounds_to_zero(
        momentum, weight_decay):
    """torch picks the buffer and weight-decay paths by the Python float, then
    computes with it rounded to float32 (where 1e-300 is 0): the same NaNs and
    buffer as torch, the reference's bits."""
    torch = pytest.importorskip("torch")
    x0 = np.array([1.0, np.inf, -2.0, 3.0], np.float32)
    p = torch.nn.Parameter(torch.from_numpy(x0.copy()))
    hyper = dict(lr=0.1, momentum=momentum, dampening=0.5, weight_decay=weight_decay)
    ref = torch.optim.SGD([p], **hyper)
    x, buf = x0.copy(), np.zeros(4, np.float32)
    want, want_buf = x0.copy(), None
    for step in range(1, 4):
        g = np.array([0.5, 1.0, -0.25, 2.0], np.float32) * step
        p.grad = torch.from_numpy(g.copy())
        ref.step()
        fastopt.sgd(x, g, buf, step=step, **hyper)
        want, want_buf = sgd_reference(want, g, want_buf, first=step == 1, **hyper)
    np.testing.assert_array_equal(x, want)
    np.testing.assert_allclose(x, p.detach().numpy(), rtol=1e-6)    # torch uses FMAs
    if momentum:
        np.testing.assert_array_equal(buf, want_buf)
        np.testing.assert_allclose(buf, ref.state[p]["momentum_buffer"].numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("options", [{}, {"grad_scale": 2.0}, {"max_grad_norm": 1.0}])
def test_adagrad_torch_without_weight_decay_never_multiplies_the_parameter(dtype, options):
    """torch adds weight_decay * x only when weight_decay != 0, so an infinite
    parameter stays infinite and its sum finite."""
    n = 37                            # a vector body and a tail
    x0 = np.linspace(-3.0, 3.0, n).astype(dtype)
    x0[[0, 5, n - 1]] = [np.inf, -np.inf, np.inf]
    g = np.linspace(0.5, 2.0, n).astype(dtype)
    x, h = x0.copy(), np.full(n, 0.1, dtype)
    fastopt.adagrad(x, g, h, lr=0.1, step=3, lr_decay=0.01, **options)
    assert np.isfinite(h).all()
    np.testing.assert_array_equal(x[np.isinf(x0)], x0[np.isinf(x0)])
    assert np.isfinite(x[np.isfinite(x0)]).all()
    if not options:
        want_x, want_h = adagrad_reference(x0, g, np.full(n, 0.1, dtype), lr=0.1, step=3,
                                           lr_decay=0.01)
        np.testing.assert_array_equal(x, want_x)
        np.testing.assert_array_equal(h, want_h)


@pytest.mark.parametrize("cls", ["OnnxMomentum", "OnnxAdam", "AdamW", "OnnxAdagrad"])
@pytest.mark.parametrize("shape", [(1,), ()])
def test_an_lr_array_in_param_groups_changed_in_place_is_the_lr_of_the_next_step(cls,
                                                                                 shape):
    lr = np.full(shape, 0.1)
    x, y = np.ones(3), np.ones(3)
    opt = getattr(fastopt.optim, cls)([x], lr=0.1)
    ref = getattr(fastopt.optim, cls)([y], lr=0.1)
    opt.param_groups[0]["lr"] = lr
    for value in (0.1, 0.1, 0.1, 0.0, 0.0, 0.5, 0.5, 0.25):
        lr[...] = value
        ref.param_groups[0]["lr"] = value
        assert opt.current_lr() == value
        opt.step([np.ones(3)])
        ref.step([np.ones(3)])
        assert opt.last_lr == [value]
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("cls", ["OnnxMomentum", "AdamW"])
def test_a_parameter_reshaped_in_place_is_refused_by_the_prepared_step_as_by_the_full_one(
        cls):
    x = np.ones(6)
    opt = getattr(fastopt.optim, cls)([x], lr=0.1)
    for _ in range(3):                   # the prepared and the remembered step
        opt.step([np.ones(6)])
    x.shape = (2, 3)
    before, steps = x.copy(), opt.steps
    refusals = {(6,): r"grads\[0\] has shape \(6,\) but params\[0\] has shape \(2, 3\)",
                (2, 3): r"state '\w+' of params\[0\] has shape \(6,\) but params\[0\] has "
                        r"shape \(2, 3\)"}
    for shape, message in refusals.items():
        with pytest.raises(ValueError, match=message):
            opt.step([np.ones(shape)])
        np.testing.assert_array_equal(x, before)
        assert opt.steps == steps
    x.shape = (6,)                       # back as it was: the steps run again
    opt.step([np.ones(6)])
    assert opt.steps == steps + 1


@pytest.mark.parametrize("options", [{}, {"max_grad_norm": 1.0}])
@pytest.mark.parametrize("what", ["param", "state", "state dtype"])
def test_a_bad_array_in_a_later_agc_group_writes_nothing(what, options):
    a, b = np.ones(4), np.ones(4)
    opt = fastopt.optim.OnnxMomentum([{"params": [a], "clipping": 0.1}, {"params": [b]}],
                                 lr=0.1)
    opt.step([np.ones(4), np.ones(4)])
    if what == "param":
        b.flags.writeable = False
        message = r"Momentum\.step: params\[1\] is read-only"
    elif what == "state":
        opt.state["v"][1].flags.writeable = False
        message = r"Momentum\.step: state 'v' of params\[1\] is read-only"
    else:
        opt.state["v"][1].dtype = np.int64
        message = r"Momentum\.step: state 'v' of params\[1\] has dtype int64"
    before = (a.copy(), opt.state["v"][0].copy(), opt.steps)
    with pytest.raises((TypeError, ValueError), match=message):
        opt.step([np.ones(4), np.ones(4)], **options)
    np.testing.assert_array_equal(a, before[0])
    np.testing.assert_array_equal(opt.state["v"][0], before[1])
    assert opt.steps == before[2]


@pytest.mark.parametrize("cls, kw", [("OnnxMomentum", {}), ("Adam", {"amsgrad": True}),
                                     ("SGD", {"momentum": 0.9}), ("OnnxAdagrad", {})])
def test_a_state_reshaped_in_place_is_refused_by_the_prepared_step_as_by_the_full_one(
        cls, kw):
    xs = [np.ones((4, 6)), np.ones(5)]
    opt = getattr(fastopt.optim, cls)(xs, lr=0.1, **kw)
    grads = [np.ones((4, 6)), np.ones(5)]
    for _ in range(3):                   # the prepared and the remembered step
        opt.step(grads)
    for name, arrays in opt.state.items():
        s = arrays[0]
        s.shape = (6, 4)
        before = [a.copy() for a in xs] + [a.copy() for arrs in opt.state.values()
                                           for a in arrs]
        steps = opt.steps
        with pytest.raises(ValueError, match=rf"state '{name}' of params\[0\] has shape "
                                             rf"\(6, 4\) but params\[0\] has shape \(4, 6\)"):
            opt.step(grads)
        after = [a for a in xs] + [a for arrs in opt.state.values() for a in arrs]
        for a, b in zip(after, before):
            np.testing.assert_array_equal(a, b)
        assert opt.steps == steps
        s.shape = (4, 6)                 # back as it was: the steps run again
        opt.step(grads)
        assert opt.steps == steps + 1
