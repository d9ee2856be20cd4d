"""RAdam (torch.optim.RAdam's math and names), a rule built from its table
row: ``fastopt.radam``, ``fastopt.optim.RAdam`` and ``fastopt.torch.RAdam``
against the NumPy reference (bit for bit, on both sides of the
rectification threshold), with torch's state_dict and signature and bad
inputs (checkpoints, the front ends agreeing and 300 steps against
torch.optim.RAdam: tests/test_table_rules.py)."""
import copy
import inspect
import math

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

FLAGS = [dict(weight_decay=w, decoupled_weight_decay=d, maximize=m, betas=b)
         for w, d in ((0.0, False), (0.05, False), (0.05, True)) for m in (False, True)
         for b in ((0.9, 0.999), (0.3, 0.9))]
IDS = ["wd%g-dec%d-max%d-b1%g" % (f["weight_decay"], f["decoupled_weight_decay"],
                                  f["maximize"], f["betas"][0]) for f in FLAGS]


@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 9, 1023, 70_001])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    m = rng.standard_normal(n).astype(dtype)
    v = np.abs(rng.standard_normal(n)).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    g[:3] = [np.nan, np.inf, -0.0][: min(3, n)]
    # step 1-5: plain (rho_t <= 5 for beta2 = 0.999); 7 and 100: rectified
    for step in (1, 5, 7, 100):
        want = ref.radam_torch(x, -g if kw["maximize"] else g, m, v, lr=0.01, step=step,
                               beta1=kw["betas"][0], beta2=kw["betas"][1],
                               weight_decay=kw["weight_decay"],
                               decoupled=kw["decoupled_weight_decay"])
        xs, ms, vs = x.copy(), m.copy(), v.copy()
        fastopt.radam(xs, g, ms, vs, step=step, lr=0.01, n_threads=n_threads, **kw)
        for got, w in zip((xs, ms, vs), want):
            np.testing.assert_array_equal(got, w)


def test_both_branches_are_taken():
    # the reference's threshold decision, as torch's: plain for the first
    # steps, rectified later (beta2 = 0.999: rho_t > 5 from step 6)
    beta2 = 0.999
    rho_inf = 2 / (1 - beta2) - 1
    rho = [rho_inf - 2 * s * beta2 ** s / (1 - beta2 ** s) for s in range(1, 9)]
    assert [r > 5 for r in rho] == [False] * 5 + [True] * 3


def test_state_dict_from_torch_continues_as_torch():
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(5)
    x0 = rng.standard_normal(17)
    p, q = (torch.nn.Parameter(torch.tensor(x0.copy())) for _ in range(2))
    mine, theirs = ft.RAdam([p], lr=0.01), torch.optim.RAdam([q], lr=0.01)
    for _ in range(7):
        q.grad = torch.tensor(rng.standard_normal(17))
        theirs.step()
    p.data.copy_(q.data)
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

    want = inspect.signature(torch.optim.RAdam.__init__).parameters
    got = inspect.signature(ft.RAdam.__init__).parameters
    assert [(p.name, p.kind, p.default) for p in want.values()] == [
        (p.name, p.kind, p.default) for p in got.values() if p.name not in EXTRAS]


@pytest.mark.parametrize("name,value,exc", [
    ("lr", -1.0, ValueError), ("eps", -1e-8, ValueError), ("weight_decay", -1.0, ValueError),
    ("betas", (1.0, 0.9), ValueError), ("betas", (0.9, math.nan), ValueError),
    ("betas", 0.9, TypeError), ("decoupled_weight_decay", 1, TypeError),
    ("maximize", 1, TypeError)])
def test_bad_hyperparameters_named_nothing_written(name, value, exc):
    x, g, m, v = np.ones(5), np.ones(5), np.zeros(5), np.zeros(5)
    with pytest.raises(exc, match=f"fastopt.radam: {name}"):
        fastopt.radam(x, g, m, v, step=1, **{name: value})
    assert (x == 1).all() and (m == 0).all() and (v == 0).all()
    with pytest.raises(exc, match=f"fastopt.optim.RAdam: {name}"):
        fo.RAdam([np.ones(3)], **{name: value})


def test_the_step_count_is_checked():
    x, g, m, v = np.ones(5), np.ones(5), np.zeros(5), np.zeros(5)
    with pytest.raises(ValueError, match="fastopt.radam: step must be >= 1"):
        fastopt.radam(x, g, m, v, step=0)
    assert (x == 1).all()
