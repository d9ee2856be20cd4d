"""Adadelta (torch.optim.Adadelta's math and names), a rule built from its
table row: ``fastopt.adadelta``, ``fastopt.optim.Adadelta`` and
``fastopt.torch.Adadelta`` against the NumPy reference (bit for bit), with
the step options, torch's state_dict and signature and bad inputs
(checkpoints, the front ends agreeing and 300 steps against
torch.optim.Adadelta: tests/test_table_rules.py)."""
import copy
import inspect
import math

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

FLAGS = [dict(weight_decay=w, maximize=m, rho=r)
         for w in (0.0, 0.05) for m in (False, True) for r in (0.9, 0.5)]
IDS = ["wd%g-max%d-rho%g" % (f["weight_decay"], f["maximize"], f["rho"]) for f in FLAGS]


@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 9, 1023, 70_001])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    sq = np.abs(rng.standard_normal(n)).astype(dtype)
    acc = np.abs(rng.standard_normal(n)).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    g[:3] = [np.nan, np.inf, -0.0][: min(3, n)]
    want = ref.adadelta_torch(x, -g if kw["maximize"] else g, sq, acc, lr=0.5, rho=kw["rho"],
                              weight_decay=kw["weight_decay"])
    xs, ss, aa = x.copy(), sq.copy(), acc.copy()
    fastopt.adadelta(xs, g, ss, aa, lr=0.5, n_threads=n_threads, **kw)
    for got, w in zip((xs, ss, aa), want):
        np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_with_step_options_equals_the_reference(n_threads, dtype):
    # unscale and clip by the global norm (the tiled path), then the rule
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(n).astype(dtype) for n in (5, 4099, 70_001)]
    gs = [(rng.standard_normal(x.size) * 8).astype(dtype) for x in xs]
    sqs = [np.zeros_like(x) for x in xs]
    accs = [np.zeros_like(x) for x in xs]
    want = []
    u = [g / dtype(8.0) for g in gs]
    norm = math.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for v in u))
    coef = min(1.0, 1.0 / (norm + 1e-6))
    for x, v, s, a in zip(xs, u, sqs, accs):
        want.append(ref.adadelta_torch(x, v * dtype(coef), s, a, lr=1.0))
    info = fastopt.adadelta(xs, gs, sqs, accs, grad_scale=8.0, max_grad_norm=1.0,
                            n_threads=n_threads)
    assert info.applied
    assert info.norm == pytest.approx(norm, rel=1e-12 if dtype == np.float64 else 1e-5)
    for x, s, a, w in zip(xs, sqs, accs, want):
        np.testing.assert_allclose(x, w[0], rtol=0, atol=4 * np.finfo(dtype).eps)
        np.testing.assert_allclose(s, w[1], rtol=8 * np.finfo(dtype).eps, atol=0)
        np.testing.assert_allclose(a, w[2], rtol=0, atol=16 * np.finfo(dtype).eps)


def test_state_dict_round_trips_with_torch():
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(5)
    x0 = rng.standard_normal(17)
    p, q = (torch.nn.Parameter(torch.tensor(x0.copy())) for _ in range(2))
    mine, theirs = ft.Adadelta([p], lr=0.5), torch.optim.Adadelta([q], lr=0.5)
    for _ in range(3):
        g = rng.standard_normal(17)
        p.grad, q.grad = torch.tensor(g.copy()), torch.tensor(g.copy())
        mine.step()
        theirs.step()
    # torch's state into the drop-in (a copy: state_dict() hands out the
    # optimizer's own tensors, which load_state_dict may keep)
    mine.load_state_dict(copy.deepcopy(theirs.state_dict()))
    g = rng.standard_normal(17)
    p.grad, q.grad = torch.tensor(g.copy()), torch.tensor(g.copy())
    mine.step()
    theirs.step()
    np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12, atol=0)


def test_signatures_are_torchs():
    torch = pytest.importorskip("torch")
    from torch_helpers import EXTRAS

    import fastopt.torch as ft

    want = inspect.signature(torch.optim.Adadelta.__init__).parameters
    got = inspect.signature(ft.Adadelta.__init__).parameters
    assert [(p.name, p.kind, p.default) for p in want.values()] == [
        (p.name, p.kind, p.default) for p in got.values() if p.name not in EXTRAS]


@pytest.mark.parametrize("name,value,exc", [
    ("lr", -1.0, ValueError), ("eps", -1e-8, ValueError), ("weight_decay", -1.0, ValueError),
    ("rho", 1.5, ValueError), ("rho", -0.1, ValueError), ("rho", math.nan, ValueError),
    ("rho", "0.9", TypeError), ("maximize", 1, TypeError)])
def test_bad_hyperparameters_named_nothing_written(name, value, exc):
    x, g, s, a = np.ones(5), np.ones(5), np.zeros(5), np.zeros(5)
    with pytest.raises(exc, match=f"fastopt.adadelta: {name}"):
        fastopt.adadelta(x, g, s, a, **{name: value})
    assert (x == 1).all() and (s == 0).all() and (a == 0).all()
    with pytest.raises(exc, match=f"fastopt.optim.Adadelta: {name}"):
        fo.Adadelta([np.ones(3)], **{name: value})


def test_a_missing_state_is_named_nothing_written():
    x, g, s = np.ones(5), np.ones(5), np.zeros(5)
    with pytest.raises((TypeError, ValueError), match="fastopt.adadelta"):
        fastopt.adadelta(x, g, s, None)
    assert (x == 1).all() and (s == 0).all()
