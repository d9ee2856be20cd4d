"""fastopt.agc against optax.adaptive_grad_clip (optional: needs optax/jax).
"""
import numpy as np
import pytest
from agc_cases import make

import fastopt


def test_optax_adaptive_grad_clip_io():
    """optax.adaptive_grad_clip on JAX layouts (float32, its default), ranks
    0 to 5 but 3: optax reduces only axis 0 of a rank-3 tensor (multi-head
    linear), while fastopt's "io" reduces every axis but the last."""
    optax = pytest.importorskip("optax")
    jnp = pytest.importorskip("jax.numpy")
    shapes = [(), (7,), (1, 5), (6, 5), (5, 1), (3, 3, 4, 8), (2, 3, 3, 4, 6)]
    xs, gs = zip(*(make(s, np.float32, "io", seed=11 + k) for k, s in enumerate(shapes)))
    tx = optax.adaptive_grad_clip(0.01, eps=1e-3)
    params = [jnp.asarray(x) for x in xs]
    want, _ = tx.update([jnp.asarray(g) for g in gs], tx.init(params), params)
    gs = [g.copy() for g in gs]
    fastopt.agc(list(xs), gs, clipping=0.01, eps=1e-3, layout="io")
    for k, (g, w) in enumerate(zip(gs, want)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=0, err_msg=str(shapes[k]))
