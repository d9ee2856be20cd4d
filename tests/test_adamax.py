"""Adamax (torch.optim.Adamax's math and names), a rule built from its table
row: ``fastopt.adamax``, ``fastopt.optim.Adamax`` and ``fastopt.torch.Adamax``
against the NumPy reference (bit for bit), with torch's signature and bad
inputs (checkpoints, the front ends agreeing and 300 steps against
torch.optim.Adamax: tests/test_table_rules.py)."""
import inspect
import math

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

FLAGS = [dict(weight_decay=w, maximize=m, betas=b)
         for w in (0.0, 0.05) for m in (False, True) for b in ((0.9, 0.999), (0.3, 0.9))]
IDS = ["wd%g-max%d-b1%g" % (f["weight_decay"], f["maximize"], f["betas"][0]) for f in FLAGS]


@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 9, 1023, 70_001])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    m = rng.standard_normal(n).astype(dtype)
    u = np.abs(rng.standard_normal(n)).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    g[:3] = [np.nan, np.inf, -0.0][: min(3, n)]
    for step in (1, 7):
        want = ref.adamax_torch(x, -g if kw["maximize"] else g, m, u, lr=0.01, step=step,
                                beta1=kw["betas"][0], beta2=kw["betas"][1],
                                weight_decay=kw["weight_decay"])
        xs, ms, us = x.copy(), m.copy(), u.copy()
        fastopt.adamax(xs, g, ms, us, step=step, lr=0.01, n_threads=n_threads, **kw)
        for got, w in zip((xs, ms, us), want):
            np.testing.assert_array_equal(got, w)


def test_signatures_are_torchs():
    torch = pytest.importorskip("torch")
    from torch_helpers import EXTRAS

    import fastopt.torch as ft

    want = inspect.signature(torch.optim.Adamax.__init__).parameters
    got = inspect.signature(ft.Adamax.__init__).parameters
    assert [(p.name, p.kind, p.default) for p in want.values()] == [
        (p.name, p.kind, p.default) for p in got.values() if p.name not in EXTRAS]


@pytest.mark.parametrize("name,value,exc", [
    ("lr", -1.0, ValueError), ("eps", -1e-8, ValueError), ("weight_decay", -1.0, ValueError),
    ("betas", (1.0, 0.9), ValueError), ("betas", (0.9, math.nan), ValueError),
    ("betas", 0.9, TypeError), ("maximize", 1, TypeError)])
def test_bad_hyperparameters_named_nothing_written(name, value, exc):
    x, g, m, u = np.ones(5), np.ones(5), np.zeros(5), np.zeros(5)
    with pytest.raises(exc, match=f"fastopt.adamax: {name}"):
        fastopt.adamax(x, g, m, u, step=1, **{name: value})
    assert (x == 1).all() and (m == 0).all() and (u == 0).all()
    with pytest.raises(exc, match=f"fastopt.optim.Adamax: {name}"):
        fo.Adamax([np.ones(3)], **{name: value})


def test_the_step_count_is_checked():
    x, g, m, u = np.ones(5), np.ones(5), np.zeros(5), np.zeros(5)
    with pytest.raises(ValueError, match="fastopt.adamax: step must be >= 1"):
        fastopt.adamax(x, g, m, u, step=0)
    with pytest.raises(TypeError, match="fastopt.adamax: step must be an integer"):
        fastopt.adamax(x, g, m, u, step=1.5)
    assert (x == 1).all()
