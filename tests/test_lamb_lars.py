"""LAMB and LARS (optax's lamb and lars), the rules scaled by a trust ratio
per tensor: ``fastopt.lamb``/``lars``, their fastopt.optim classes and
fastopt.torch drop-ins against the NumPy reference (bit for bit, the norms
in the trust pass's fixed order, at 1 and 3 threads, with the step options),
the ratio's zero and NaN cases, each tensor its own ratio, optax in float64
(300 steps), the groups left out of the ratio, and bad inputs (checkpoints
and the three front ends agreeing: tests/test_table_rules.py)."""
import math

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo
from fastopt._reference import step as ref

SIZES = [1, 9, 1023, 4097, 70_001]     # 4097 and 70001 span several norm blocks


def _lists(n, dtype, seed, k):
    """k arrays of each of two tensors: one of n elements, one of 5 (another
    scale, so the two ratios differ)."""
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(n).astype(dtype), (7 * rng.standard_normal(5)).astype(dtype)]
            for _ in range(k)]


LAMB_FLAGS = [dict(weight_decay=w, maximize=m, trust_ratio=t, eps_root=r)
              for w in (0.0, 0.1) for m in (False, True) for t in (True, False)
              for r in (0.0, 1e-10)][::3]


@pytest.mark.parametrize("kw", LAMB_FLAGS, ids=str)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("n_threads", [1, 3])
def test_lamb_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    xs, ms, gs = _lists(n, dtype, n, 3)
    vs = [np.abs(a) for a in _lists(n, dtype, n + 1, 1)[0]]
    if n > 100:         # a NaN makes the first tensor's ratio, and so its update, NaN
        gs[0][:3] = [np.nan, np.inf, -0.0]
    maximize = kw.get("maximize", False)
    for step in (1, 4):
        want = [ref.lamb(x, -g if maximize else g, m, v, lr=0.01, step=step,
                         weight_decay=kw["weight_decay"], eps_root=kw.get("eps_root", 0.0),
                         trust=kw["trust_ratio"]) for x, g, m, v in zip(xs, gs, ms, vs)]
        got = [a.copy() for a in xs], [a.copy() for a in ms], [a.copy() for a in vs]
        fastopt.lamb(*got[:1], gs, *got[1:], step=step, lr=0.01, n_threads=n_threads, **kw)
        for j, w in enumerate(want):
            for a, b in zip((got[0][j], got[1][j], got[2][j]), w):
                np.testing.assert_array_equal(a, b)


LARS_FLAGS = [dict(weight_decay=w, maximize=m, trust_ratio=t, nesterov=ne, eps=e)
              for w in (0.0, 0.1) for m in (False, True) for t in (True, False)
              for ne in (False, True) for e in (0.0, 1e-9)][::3]


@pytest.mark.parametrize("kw", LARS_FLAGS, ids=str)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("n_threads", [1, 3])
def test_lars_equals_the_reference_bit_for_bit(kw, n, n_threads, dtype):
    xs, ts, gs = _lists(n, dtype, n, 3)
    maximize = kw["maximize"]
    want = [ref.lars(x, -g if maximize else g, t, lr=0.1, momentum=0.9,
                     weight_decay=kw["weight_decay"], trust_coefficient=0.01, eps=kw["eps"],
                     nesterov=kw["nesterov"], trust=kw["trust_ratio"])
            for x, g, t in zip(xs, gs, ts)]
    got = [a.copy() for a in xs], [a.copy() for a in ts]
    fastopt.lars(got[0], gs, got[1], lr=0.1, trust_coefficient=0.01, n_threads=n_threads,
                 **kw)
    for j, w in enumerate(want):
        np.testing.assert_array_equal(got[0][j], w[0])
        np.testing.assert_array_equal(got[1][j], w[1])


@pytest.mark.parametrize("name", ["lamb", "lars"])
def test_the_ratio_sees_the_transformed_gradient(name, dtype):
    """grad_scale, the global-norm clip, clip_value and maximize act before
    the trust pass: it and the update read the same u (the reference's whole
    step)."""
    xs, gs, ss = _lists(5000, dtype, 7, 3)
    rule = "lamb" if name == "lamb" else "lars"
    hp = {"rule": rule, "lr": 0.01, "t": 2, "alpha": 0.9, "beta": 0.999, "eps": 1e-6,
          "decay": 0.1, "extra": (0.0, 1.0) if name == "lamb" else (0.01, 1.0),
          "maximize": True}
    states = [(s.copy(), np.abs(s) if name == "lamb" else None) for s in ss]
    opts = dict(grad_scale=4.0, max_norm=3.0, convention="optax", clip_value=0.5)
    _, _, want_x, want_s = ref.step(xs, gs, states, [hp], [0, 0], **opts)
    got_x = [x.copy() for x in xs]
    got_s = [[s[i].copy() for s in states] for i in range(2 if name == "lamb" else 1)]
    common = dict(grad_scale=4.0, max_grad_norm=3.0, clip_convention="optax",
                  clip_value=0.5, maximize=True, weight_decay=0.1, lr=0.01)
    if name == "lamb":
        fastopt.lamb(got_x, gs, *got_s, step=2, **common)
    else:
        fastopt.lars(got_x, gs, *got_s, trust_coefficient=0.01, eps=1e-6, **common)
    for j in range(2):
        np.testing.assert_array_equal(got_x[j], want_x[j])
        for i, s in enumerate(got_s):
            np.testing.assert_array_equal(s[j], want_s[j][i])


def test_the_same_bits_for_every_thread_count():
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(n) for n in (5, 4099, 70_001)]
    for cls in (fo.LAMB, fo.LARS):
        outs = []
        for n_threads in (1, 2, 3):
            opt = cls([x.copy() for x in xs], weight_decay=0.01, n_threads=n_threads)
            g = np.random.default_rng(4)
            for _ in range(3):
                opt.step([g.standard_normal(x.shape) for x in xs])
            outs.append(opt.params + [a for arrays in opt.state.values() for a in arrays])
        for other in outs[1:]:
            for a, b in zip(other, outs[0]):
                np.testing.assert_array_equal(a, b)


def test_the_ratio_is_one_where_a_norm_is_zero():
    # |x| = 0: the ratio is 1, so the step is -lr * w
    x, t = np.zeros(4), np.zeros(4)
    fastopt.lars(x, np.ones(4), t, lr=0.5, momentum=0.0, trust_coefficient=0.001)
    np.testing.assert_array_equal(x, np.full(4, -0.5))
    # |w| = 0: x stays, the trace decays
    x, t = np.ones(4), np.ones(4)
    fastopt.lars(x, np.zeros(4), t, lr=0.5, momentum=0.5)
    np.testing.assert_array_equal(t, np.full(4, 0.5))
    np.testing.assert_array_equal(x, np.full(4, 1.5))
    # a NaN makes its own tensor's ratio NaN and leaves the others' alone
    xs, ts = [np.ones(4), np.ones(4)], [np.zeros(4), np.zeros(4)]
    fastopt.lars(xs, [np.array([np.nan, 1, 1, 1]), np.ones(4)], ts, lr=0.5, momentum=0.0)
    assert np.isnan(xs[0]).all() and np.isfinite(xs[1]).all()


def test_each_tensor_has_its_own_ratio():
    # two tensors, one ten times the other: with weight decay off and the same
    # gradient the ratios differ tenfold, so do the steps
    xs, ts = [np.ones(3), np.full(3, 10.0)], [np.zeros(3), np.zeros(3)]
    fastopt.lars(xs, [np.ones(3), np.ones(3)], ts, lr=1.0, momentum=0.0,
                 trust_coefficient=1.0)
    np.testing.assert_allclose(1.0 - xs[0], 1.0, rtol=1e-15)
    np.testing.assert_allclose(10.0 - xs[1], 10.0, rtol=1e-15)


def _optax_lamb(optax, trust):
    if trust:
        return optax.lamb(0.003, weight_decay=0.1, eps_root=1e-12)
    return optax.chain(optax.scale_by_adam(eps=1e-6, eps_root=1e-12),
                       optax.add_decayed_weights(0.1), optax.scale_by_learning_rate(0.003))


@pytest.mark.parametrize("name,trust", [("lamb", True), ("lamb", False), ("lars", True),
                                        ("lars", False)])
def test_against_optax_in_float64(name, trust):
    optax = pytest.importorskip("optax")
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        jnp = jax.numpy
        rng = np.random.default_rng(3)
        x0 = [rng.standard_normal(257), 3 * rng.standard_normal((7, 5))]
        tx = (_optax_lamb(optax, trust) if name == "lamb" else
              optax.lars(0.3, weight_decay=0.01, trust_coefficient=0.01, eps=1e-9,
                         nesterov=True, trust_ratio_mask=trust))
        params = [jnp.asarray(a) for a in x0]
        state = tx.init(params)
        xs = [a.copy() for a in x0]
        s1, s2 = [np.zeros_like(a) for a in x0], [np.zeros_like(a) for a in x0]
        for step in range(1, 301):
            gs = [rng.standard_normal(a.shape) for a in x0]
            upd, state = tx.update([jnp.asarray(g) for g in gs], state, params)
            params = optax.apply_updates(params, upd)
            if name == "lamb":
                fastopt.lamb(xs, gs, s1, s2, step=step, lr=0.003, weight_decay=0.1,
                             eps_root=1e-12, trust_ratio=trust)
            else:
                fastopt.lars(xs, gs, s1, lr=0.3, weight_decay=0.01, trust_coefficient=0.01,
                             eps=1e-9, nesterov=True, trust_ratio=trust)
        for a, b in zip(xs, params):
            want = np.asarray(b)
            assert want.dtype == np.float64
            np.testing.assert_allclose(a, want, rtol=1e-13, atol=1e-13 * np.max(np.abs(want)))


def test_groups_left_out_of_the_ratio():
    """The usual split: weights with decay and the ratio, biases and norms
    without either (optax's masks, group by group)."""
    rng = np.random.default_rng(9)
    w, b = rng.standard_normal((4, 3)), rng.standard_normal(3)
    opt = fo.LARS([{"params": [w.copy()]},
                   {"params": [b.copy()], "weight_decay": 0.0, "trust_ratio": False}],
                  lr=0.1, weight_decay=0.01)
    x, t = [w.copy(), b.copy()], [np.zeros_like(w), np.zeros_like(b)]
    for _ in range(3):
        gs = [rng.standard_normal(w.shape), rng.standard_normal(b.shape)]
        opt.step(gs)
        fastopt.lars(x[:1], gs[:1], t[:1], lr=0.1, weight_decay=0.01)
        fastopt.lars(x[1:], gs[1:], t[1:], lr=0.1, trust_ratio=False)
    for a, c in zip(opt.params, x):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("cls", ["LAMB", "LARS"])
def test_the_drop_in_with_flat_buffers_steps_per_tensor(cls):
    """flat=True joins the parameters in buffers; the ratio stays each
    parameter's (its steps take the prepared route over the parameters)."""
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft

    rng = np.random.default_rng(11)
    x0 = [rng.standard_normal(50), 5 * rng.standard_normal((3, 4))]
    runs = []
    for flat in (False, True):
        ps = [torch.nn.Parameter(torch.tensor(a.copy())) for a in x0]
        opt = getattr(ft, cls)(ps, lr=0.01, weight_decay=0.01, flat=flat)
        g = np.random.default_rng(12)
        for _ in range(4):
            for p in ps:
                p.grad = torch.tensor(g.standard_normal(tuple(p.shape)))
            opt.step()
        runs.append([p.detach().numpy().copy() for p in ps])
    xs, ss = [a.copy() for a in x0], [[np.zeros_like(a) for a in x0] for _ in range(2)]
    g = np.random.default_rng(12)
    for step in range(1, 5):
        gs = [g.standard_normal(a.shape) for a in x0]
        if cls == "LAMB":
            fastopt.lamb(xs, gs, *ss, step=step, lr=0.01, weight_decay=0.01)
        else:
            fastopt.lars(xs, gs, ss[0], lr=0.01, weight_decay=0.01)
    for run in runs:
        for a, b in zip(run, xs):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("cls", ["LAMB", "LARS"])
def test_a_shard_steps_them_whole_as_one_process_does(cls):
    """Sharded (in buckets far smaller than the tensors), each trusted
    tensor is stepped whole, so the bits are the single-process ones (at
    2 and 3 ranks: tests/test_distributed.py)."""
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    from fastopt.distributed import ShardedOptimizer
    rng = np.random.default_rng(5)
    params = [rng.standard_normal(s).astype(np.float32) for s in ((30, 20), (7,), (300,))]
    sharded = ShardedOptimizer(getattr(fo, cls), [p.copy() for p in params], lr=0.01,
                               weight_decay=0.01, bucket_bytes=64, comm=MPI.COMM_SELF)
    single = getattr(fo, cls)([p.copy() for p in params], lr=0.01, weight_decay=0.01)
    for _ in range(3):
        grads = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
        sharded.step([g.copy() for g in grads])
        single.step(grads)
    for a, b in zip(sharded.params, single.params):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("fn,cls,name,value,exc", [
    ("lamb", "LAMB", "lr", -1.0, ValueError), ("lamb", "LAMB", "eps", -1e-8, ValueError),
    ("lamb", "LAMB", "eps_root", math.nan, ValueError),
    ("lamb", "LAMB", "weight_decay", -1.0, ValueError),
    ("lamb", "LAMB", "betas", (1.0, 0.9), ValueError),
    ("lamb", "LAMB", "trust_ratio", 1, TypeError),
    ("lars", "LARS", "momentum", -0.5, ValueError),
    ("lars", "LARS", "trust_coefficient", -1.0, ValueError),
    ("lars", "LARS", "trust_coefficient", math.inf, ValueError),
    ("lars", "LARS", "eps", -1.0, ValueError), ("lars", "LARS", "nesterov", 1, TypeError),
    ("lars", "LARS", "trust_ratio", None, TypeError)])
def test_bad_hyperparameters_named_nothing_written(fn, cls, name, value, exc):
    x, g, s = np.ones(5), np.ones(5), [np.zeros(5)] * (2 if fn == "lamb" else 1)
    s = [a.copy() for a in s]
    with pytest.raises(exc, match=f"fastopt.{fn}: {name}"):
        getattr(fastopt, fn)(x, g, *s, **({"step": 1} if fn == "lamb" else {}),
                             **{name: value})
    assert (x == 1).all() and not any(a.any() for a in s)
    with pytest.raises(exc, match=f"fastopt.optim.{cls}: {name}"):
        getattr(fo, cls)([np.ones(3)], **{name: value})


@pytest.mark.parametrize("cls", [fo.LAMB, fo.LARS])
def test_trust_sums_out_and_in(cls):
    """The split-tensor contract (fastopt.h, fo_step_opts; fastopt.distributed
    uses it): trust_out receives the trust pass's two sums per 4096-element
    block of each trusted tensor and writes nothing else; the same step with
    each tensor's block sums added in block order given as trust_in equals
    the ordinary step bit for bit; a buffer of the wrong length is refused
    with nothing written."""
    rng = np.random.default_rng(2)
    shapes = [(9000,), (3,), (50,)]
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    gs = [rng.standard_normal(s).astype(np.float32) for s in shapes]

    def make(ps):
        return cls([{"params": ps[:2]}, {"params": ps[2:], "trust_ratio": False}],
                   lr=0.1, weight_decay=0.01)
    opt, ref_opt = make([x.copy() for x in xs]), make([x.copy() for x in xs])
    ref_opt.step(gs, grad_scale=4.0)
    before = [p.copy() for p in opt.params]
    out = np.full(2 * (3 + 1), np.nan)              # 3 blocks and 1 of the trusted tensors
    assert opt._step_trust([gs[:2], gs[2:]], 4.0, trust_out=out) is False
    assert all((a == b).all() for a, b in zip(opt.params, before)) and opt.steps == 0
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[0:6:2].sum(), np.sum(xs[0].astype(np.float64) ** 2),
                               rtol=1e-12)
    np.testing.assert_allclose(out[6], np.sum(xs[1].astype(np.float64) ** 2), rtol=1e-12)
    for bad in (np.zeros(6), np.zeros(10)):
        with pytest.raises(RuntimeError, match="declined"):
            opt._step_trust([gs[:2], gs[2:]], 4.0, trust_out=bad)
        with pytest.raises(RuntimeError, match="declined"):
            opt._step_trust([gs[:2], gs[2:]], 4.0, trust_in=bad[:3])
    assert all((a == b).all() for a, b in zip(opt.params, before)) and opt.steps == 0
    sx = sw = 0.0
    for a, b in zip(out[0:6:2], out[1:6:2]):        # block order, from 0.0
        sx += float(a)
        sw += float(b)
    given = np.array([sx, sw, out[6], out[7]])
    assert opt._step_trust([gs[:2], gs[2:]], 4.0, trust_in=given) is True
    assert opt.steps == 1
    for a, b in zip(opt.params, ref_opt.params):
        np.testing.assert_array_equal(a, b)
