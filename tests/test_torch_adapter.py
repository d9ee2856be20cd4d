"""fastopt.torch against torch.optim on a small nn.Module, 100 steps."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import fastopt.torch as ft  # noqa: E402  (after the importorskip)

STEPS = 100
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-5)}


class Net(torch.nn.Module):
    """Two layers; the first weight is stored transposed (a non-contiguous,
    Fortran-ordered parameter) to exercise strided views."""

    def __init__(self, dtype):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w1 = torch.nn.Parameter(torch.randn(8, 5, generator=g, dtype=dtype).t())
        self.b1 = torch.nn.Parameter(torch.randn(8, generator=g, dtype=dtype) * 0.1)
        self.out = torch.nn.Linear(8, 3, dtype=dtype)
        with torch.no_grad():
            self.out.weight.copy_(torch.randn(3, 8, generator=g, dtype=dtype) * 0.3)
            self.out.bias.copy_(torch.randn(3, generator=g, dtype=dtype) * 0.1)

    def forward(self, x):
        return self.out(torch.tanh(x @ self.w1 + self.b1))


def data(dtype, step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(16, 5, generator=g, dtype=dtype), torch.randn(16, 3, generator=g,
                                                                      dtype=dtype)


def train(model, opt, steps=STEPS, hook=None):
    for k in range(steps):
        x, y = data(next(model.parameters()).dtype, k)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        if hook:
            hook(model, k)
        opt.step()


def assert_models_close(a, b, dtype):
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb
        np.testing.assert_allclose(pa.detach().numpy(), pb.detach().numpy(), **TOL[dtype],
                                   err_msg=na)


CASES = {
    "sgd": (lambda p: torch.optim.SGD(p, lr=0.05),
            lambda p: ft.OnnxMomentum(p, lr=0.05, alpha=0.0)),
    "momentum": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                 lambda p: ft.OnnxMomentum(p, lr=0.05, alpha=0.9)),
    "dampening+decay": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3,
                                                  weight_decay=0.01),
                        lambda p: ft.OnnxMomentum(p, lr=0.05, alpha=0.8, beta=0.7,
                                              norm_coefficient=0.01)),
    "nesterov": (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                           weight_decay=0.001),
                 lambda p: ft.OnnxMomentum(p, lr=0.05, alpha=0.9, nesterov=True,
                                       norm_coefficient=0.001)),
    "adagrad": (lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, eps=1e-8,
                                              weight_decay=0.01,
                                              initial_accumulator_value=0.1),
                lambda p: ft.OnnxAdagrad(p, lr=0.1, decay_factor=0.01, epsilon=1e-8,
                                     norm_coefficient=0.01, initial_accumulator_value=0.1)),
    # ONNX adds epsilon before the bias correction (ONNX eps = torch eps *
    # sqrt(1 - beta2**t)): with eps = 0 the two are the same rule.
    "adam": (lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=0.0,
                                        weight_decay=0.01),
             lambda p: ft.OnnxAdam(p, lr=0.01, alpha=0.8, beta=0.99, epsilon=0.0,
                               norm_coefficient=0.01)),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("case", list(CASES))
def test_equals_torch_optim(case, dtype):
    make_torch, make_fast = CASES[case]
    a, b = Net(dtype), Net(dtype)
    assert not b.w1.is_contiguous()
    train(a, make_torch(a.parameters()))
    train(b, make_fast(b.parameters()))
    assert_models_close(a, b, dtype)


def test_adam_with_epsilon_differs_from_torch_as_documented():
    """With eps > 0, fastopt's Adam equals torch's with eps_torch scaled per
    step; check the first step, where ONNX eps = torch eps * sqrt(1 - beta2)."""
    beta2, eps = 0.99, 1e-3
    x = torch.nn.Parameter(torch.tensor([0.5, -1.0], dtype=torch.float64))
    y = torch.nn.Parameter(x.detach().clone())
    x.grad = torch.tensor([1e-3, -2e-3], dtype=torch.float64)
    y.grad = x.grad.clone()
    torch.optim.Adam([x], lr=0.1, betas=(0.9, beta2), eps=eps).step()
    ft.OnnxAdam([y], lr=0.1, alpha=0.9, beta=beta2, epsilon=eps * (1 - beta2) ** 0.5).step()
    np.testing.assert_allclose(x.detach().numpy(), y.detach().numpy(), rtol=1e-14)
    z = torch.nn.Parameter(torch.tensor([0.5, -1.0], dtype=torch.float64))
    z.grad = x.grad.clone()
    ft.OnnxAdam([z], lr=0.1, alpha=0.9, beta=beta2, epsilon=eps).step()
    assert not np.allclose(x.detach().numpy(), z.detach().numpy(), rtol=1e-6)


def test_updates_in_place_without_copies(monkeypatch):
    model = Net(torch.float32)
    opt = ft.OnnxMomentum(model.parameters(), lr=0.1)
    ptrs = [p.data_ptr() for p in model.parameters()]
    seen = []
    real = ft._step.run

    def spy(f, xs, gs, states, index, groups, *args):
        for p, x, g in zip(model.parameters(), xs, gs):
            assert np.shares_memory(x, p.detach().numpy())
            assert np.shares_memory(g, p.grad.numpy())
        seen.append((xs, gs, states[0]))
        return real(f, xs, gs, states, index, groups, *args)

    def check(model, k):   # the states of the last step are the optimizer's
        for _, _, vs in seen[-1:]:
            for p, v in zip(model.parameters(), vs):
                assert np.shares_memory(v, opt.state[p]["momentum_buffer"].numpy())

    monkeypatch.setattr(ft._step, "run", spy)
    before = [p.detach().clone() for p in model.parameters()]
    train(model, opt, steps=2, hook=check)
    check(model, 2)
    assert [len(xs) for xs, _, _ in seen] == [4, 4]   # one call per step, every group
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    assert all(not torch.equal(p, q) for p, q in zip(model.parameters(), before))


def test_momentum_is_the_deprecated_old_name_of_onnx_momentum():
    with pytest.warns(DeprecationWarning, match="fastopt.torch.OnnxMomentum"):
        assert ft.Momentum is ft.OnnxMomentum


def test_parameters_without_gradients_keep_their_own_count():
    """torch counts steps per parameter: one that first gets a gradient at
    step 10 starts from a fresh buffer (the first update ignores dampening)."""
    def hook(model, k):
        if k < 10:
            model.out.bias.grad = None
    a, b = Net(torch.float64), Net(torch.float64)
    train(a, torch.optim.SGD(a.parameters(), lr=0.05, momentum=0.9, dampening=0.5),
          steps=20, hook=hook)
    opt = ft.OnnxMomentum(b.parameters(), lr=0.05, alpha=0.9, beta=0.5)
    train(b, opt, steps=20, hook=hook)
    assert_models_close(a, b, torch.float64)
    assert opt.state[b.out.bias]["step"] == 10 and opt.state[b.w1]["step"] == 20


def test_param_groups_and_lr_scheduler():
    def groups(m):
        return [{"params": [m.w1, m.b1], "lr": 0.1},
                {"params": m.out.parameters(), "weight_decay": 0.01}]

    def groups_fast(m):
        return [{"params": [m.w1, m.b1], "lr": 0.1},
                {"params": m.out.parameters(), "norm_coefficient": 0.01}]

    a, b = Net(torch.float64), Net(torch.float64)
    oa = torch.optim.SGD(groups(a), lr=0.05, momentum=0.9)
    ob = ft.OnnxMomentum(groups_fast(b), lr=0.05, alpha=0.9)
    sa = torch.optim.lr_scheduler.StepLR(oa, step_size=10, gamma=0.5)
    sb = torch.optim.lr_scheduler.StepLR(ob, step_size=10, gamma=0.5)
    for k in range(30):
        for model, opt, sched in ((a, oa, sa), (b, ob, sb)):
            x, y = data(torch.float64, k)
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()
            sched.step()
    assert ob.param_groups[0]["lr"] == pytest.approx(0.1 / 8)
    assert_models_close(a, b, torch.float64)


@pytest.mark.parametrize("cls", ["Momentum", "Adagrad", "Adam"])
def test_state_dict_resume(cls):
    make = {"Momentum": lambda p: ft.OnnxMomentum(p, lr=0.05, alpha=0.9, beta=0.8),
            "Adagrad": lambda p: ft.OnnxAdagrad(p, lr=0.05, decay_factor=0.1),
            "Adam": lambda p: ft.OnnxAdam(p, lr=0.01)}[cls]
    a = Net(torch.float64)
    oa = make(a.parameters())
    train(a, oa, steps=5)
    buf = io.BytesIO()   # through bytes, as a checkpoint on disk
    torch.save({"model": a.state_dict(), "opt": oa.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf)
    b = Net(torch.float64)
    b.load_state_dict(ckpt["model"])
    ob = make(b.parameters())
    ob.load_state_dict(ckpt["opt"])

    def more(model, opt):
        for k in range(5, 10):
            x, y = data(torch.float64, k)
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            opt.step()

    more(a, oa)
    more(b, ob)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)


def test_closure_and_errors():
    model = Net(torch.float32)
    opt = ft.OnnxAdagrad(model.parameters(), lr=0.1)
    x, y = data(torch.float32, 0)

    def closure():
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        return loss

    assert opt.step(closure).item() > 0
    half = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    half.grad = torch.ones(3, dtype=torch.float16)
    other = torch.nn.Parameter(torch.ones(3))
    other.grad = torch.ones(3)
    bad = ft.OnnxMomentum([other, half], lr=0.1)
    with pytest.raises(TypeError, match=r"\['params'\]\[1\] has dtype torch.float16"):
        bad.step()
    assert torch.equal(other, torch.ones(3))   # nothing was written
    with pytest.raises(ValueError, match="lr must be a finite number >= 0"):
        ft.OnnxAdam(model.parameters(), lr=-1.0)
    with pytest.raises(ValueError, match="alpha must be < 1.0"):
        ft.OnnxAdam(model.parameters(), lr=0.1, alpha=1.0)
    opt.param_groups[0]["epsilon"] = -1.0
    with pytest.raises(ValueError,
                       match=r"epsilon must be >= 0.0, got -1.0 \(in param_groups\[0\]\)"):
        opt.step(closure)
