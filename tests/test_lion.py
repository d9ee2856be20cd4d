"""Lion (optax's lion, bitsandbytes' Lion), a rule built from its table row:
``fastopt.lion``, ``fastopt.optim.Lion`` and ``fastopt.torch.Lion`` against
the NumPy reference (bit for bit) and optax.lion in float64 (100 steps),
with the sign of zero and bad inputs (checkpoints and the three front ends
agreeing: tests/test_table_rules.py)."""
import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

FLAGS = [dict(weight_decay=w, maximize=m, betas=b)
         for w in (0.0, 0.1) for m in (False, True) for b in ((0.9, 0.99), (0.5, 0.9))]
IDS = ["wd%g-max%d-b1%g" % (f["weight_decay"], f["maximize"], f["betas"][0]) for f in FLAGS]


@pytest.mark.parametrize("kw", FLAGS, ids=IDS)
@pytest.mark.parametrize("n", [1, 9, 1023, 70_001])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(dtype)
    m = rng.standard_normal(n).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    g[:3] = [np.nan, np.inf, -0.0][: min(3, n)]
    want = ref.lion(x, -g if kw["maximize"] else g, m, lr=0.01, beta1=kw["betas"][0],
                    beta2=kw["betas"][1], weight_decay=kw["weight_decay"])
    xs, ms = x.copy(), m.copy()
    fastopt.lion(xs, g, ms, lr=0.01, n_threads=n_threads, **kw)
    for got, w in zip((xs, ms), want):
        np.testing.assert_array_equal(got, w)


def test_the_sign_of_zero_and_nan(dtype):
    # d = m*beta1 + (1-beta1)*g: +0, -0 and NaN keep themselves (jnp.sign)
    x = np.array([1.0, 1.0, 1.0, 1.0], dtype)
    m = np.array([0.0, -0.0, np.nan, 2.0], dtype)
    g = np.array([0.0, -0.0, 1.0, -1.0], dtype)
    fastopt.lion(x, g, m, lr=0.5)
    np.testing.assert_array_equal(x[:2], [1.0, 1.0])
    assert np.isnan(x[2]) and x[3] == 0.5


def test_against_optax_in_float64():
    optax = pytest.importorskip("optax")
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        _optax_run(optax, jax.numpy)


def _optax_run(optax, jnp):
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(257)
    tx = optax.lion(learning_rate=0.003, b1=0.9, b2=0.99, weight_decay=0.1)
    params = jnp.asarray(x0)
    state = tx.init(params)
    x, m = x0.copy(), np.zeros_like(x0)
    for _ in range(100):
        g = rng.standard_normal(257)
        upd, state = tx.update(jnp.asarray(g), state, params)
        params = optax.apply_updates(params, upd)
        fastopt.lion(x, g, m, lr=0.003, betas=(0.9, 0.99), weight_decay=0.1)
    want = np.asarray(params)
    assert want.dtype == np.float64
    np.testing.assert_allclose(x, want, rtol=1e-13, atol=1e-13 * np.max(np.abs(want)))
    np.testing.assert_allclose(m, np.asarray(state[0].mu), rtol=1e-13, atol=1e-300)



@pytest.mark.parametrize("name,value,exc", [
    ("lr", -1.0, ValueError), ("weight_decay", -1.0, ValueError),
    ("betas", (1.0, 0.9), ValueError), ("betas", (0.9, float("nan")), ValueError),
    ("betas", 0.9, TypeError), ("maximize", 1, TypeError)])
def test_bad_hyperparameters_named_nothing_written(name, value, exc):
    x, g, m = np.ones(5), np.ones(5), np.zeros(5)
    with pytest.raises(exc, match=f"fastopt.lion: {name}"):
        fastopt.lion(x, g, m, **{name: value})
    assert (x == 1).all() and (m == 0).all()
    with pytest.raises(exc, match=f"fastopt.optim.Lion: {name}"):
        fo.Lion([np.ones(3)], **{name: value})
