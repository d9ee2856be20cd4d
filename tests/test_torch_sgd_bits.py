"""torch's SGD, bit for bit: fastopt computes each ``a + alpha*b`` of
torch.optim.SGD as one fused multiply-add, as torch's vector kernels do
when they run with AVX2 or AVX-512 (its CPU capability), and rounds
``buf * momentum`` first, as torch's ``mul_`` does."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fastopt  # noqa: E402
import fastopt.torch as ft  # noqa: E402  (after the importorskip)

# where torch's kernels fuse a + alpha*b (its DEFAULT capability rounds twice)
FUSED = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
SHAPES = [(37,), (5, 7), (1001,), (3,), ()]
OPTIONS = [dict(momentum=0.9, dampening=0.1, weight_decay=0.01),
           dict(momentum=0.9, nesterov=True, weight_decay=1e-3),
           dict(weight_decay=0.05, maximize=True),
           dict(momentum=0.5),
           dict()]


def _params(dtype):
    g = torch.Generator().manual_seed(3)
    return [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype)) for s in SHAPES]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kw", OPTIONS, ids=lambda kw: "-".join(kw) or "plain")
def test_sgd_trajectory_is_torchs(dtype, kw):
    """300 steps of fastopt.torch.SGD and torch.optim.SGD on the same
    gradients: the same bits at every 50th step (on a torch that rounds
    twice, within an ulp or so a step)."""
    ours, theirs = _params(dtype), _params(dtype)
    a = ft.SGD(ours, lr=0.01, **kw)
    b = torch.optim.SGD(theirs, lr=0.01, **kw)
    g = torch.Generator().manual_seed(7)
    for k in range(300):
        for p, q in zip(ours, theirs):
            p.grad = torch.randn(p.shape, generator=g, dtype=dtype)
            q.grad = p.grad.clone()
        a.step()
        b.step()
        if k % 50 == 49:
            for p, q in zip(ours, theirs):
                if FUSED:
                    assert torch.equal(p, q), f"step {k + 1}"
                else:
                    torch.testing.assert_close(p, q, rtol=1e-10 if dtype == torch.float64
                                               else 1e-4, atol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numpy_sgd_is_torchs_and_not_the_twice_rounded_formula(dtype):
    """fastopt.sgd is torch's update; the formula with every product
    rounded differs from it (so the comparison can fail)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4096).astype(dtype)
    g = rng.standard_normal(4096).astype(dtype)
    buf = rng.standard_normal(4096).astype(dtype)
    p = torch.nn.Parameter(torch.tensor(x))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.01)
    opt.state[p]["momentum_buffer"] = torch.tensor(buf)
    p.grad = torch.tensor(g)
    opt.step()
    ours, b = x.copy(), buf.copy()
    fastopt.sgd(ours, g, b, lr=0.1, momentum=0.9, dampening=0.2, weight_decay=0.01, step=2)
    c = np.dtype(dtype).type
    gr = g + c(0.01) * x
    twice = x + c(-0.1) * (buf * c(0.9) + c(0.8) * gr)
    assert (ours != twice).sum() > 100
    if FUSED:
        np.testing.assert_array_equal(ours, p.detach().numpy())
        np.testing.assert_array_equal(b, opt.state[p]["momentum_buffer"].numpy())
