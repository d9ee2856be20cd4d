"""Master weights in fastopt.distributed, in one process (``MPI.COMM_SELF``):
16-bit parameters exchanged as 16-bit words with float32 masters and states
sharded, equal to the single-process optimizer; checkpoints that hold the
masters, and their refusals. Several ranks: tests/test_distributed.py (its
worker's "adamw_master_16" configuration, stepped and resumed at 1, 2 and
3 ranks, consolidated)."""
import json
import os

import numpy as np
import pytest

import fastopt.optim as fo

ml_dtypes = pytest.importorskip("ml_dtypes")
pytest.importorskip("mpi4py")
BF16 = np.dtype(ml_dtypes.bfloat16)
SHAPES = (((70, 100), BF16), ((300,), np.float32), ((5000,), BF16), ((9,), np.float16))


def _model():
    rng = np.random.default_rng(1)
    return [rng.standard_normal(s).astype(d) for s, d in SHAPES]


def _grads(params, k):
    rng = np.random.default_rng(k)
    return [np.asarray(np.round(rng.standard_normal(p.shape) * 64) / 64, p.dtype)
            for p in params]


def _sharded(params, **kw):
    from mpi4py import MPI

    from fastopt.distributed import ShardedOptimizer
    return ShardedOptimizer(fo.AdamW, params, lr=1e-2, master_weights=True,
                            comm=MPI.COMM_SELF, **dict({"bucket_bytes": 1000}, **kw))


def _params_of(single):
    """What the single-process optimizer's user sees: the 16-bit arrays."""
    return [m if c is None else c for m, c in zip(single.params, single._copies)]


def test_16bit_words_are_exchanged_and_the_steps_are_the_single_process_ones():
    opt = _sharded(_model())
    single = fo.AdamW(_model(), lr=1e-2, master_weights=True)
    for k in range(4):
        g = _grads(opt.params, k)
        assert opt.step(g, max_grad_norm=50.0)
        single.step([x.astype(np.float32) for x in g], max_grad_norm=50.0)
    for a, b in zip(opt.params, _params_of(single)):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    # the buffers the ranks exchange hold 16-bit words; the shard's masters float32
    assert {dt.itemsize for dt in opt._flat if dt != np.float32} == {2}
    assert all(opt._gstage[dt].dtype == dt for dt in opt._flat)
    masters = 4 * sum(p.size for p in opt.params if p.dtype.itemsize == 2)
    states = 8 * sum(p.size for p in opt.params)
    assert opt.state_bytes == masters + states


def test_checkpoints_hold_the_masters(tmp_path):
    opt = _sharded(_model())
    single = fo.AdamW(_model(), lr=1e-2, master_weights=True)
    for k in range(3):
        g = _grads(opt.params, k)
        opt.step(g)
        single.step([x.astype(np.float32) for x in g])
    opt.save(tmp_path / "ck")
    back = _sharded(_model(), bucket_bytes=64)            # another layout of the buffers
    back.load(tmp_path / "ck")
    back.params[1][...] = opt.params[1]                     # (a float32 parameter: the user's)
    for a, b in zip(back.params, _params_of(single)):       # rewritten from the masters
        assert a.tobytes() == b.tobytes()
    g = _grads(opt.params, 9)
    back.step(g)
    single.step([x.astype(np.float32) for x in g])
    for a, b in zip(back.params, _params_of(single)):
        assert a.tobytes() == b.tobytes()
    back.consolidate(tmp_path / "plain.npz")
    again = fo.AdamW(_model(), lr=1e-2, master_weights=True)
    again.load(tmp_path / "plain.npz")
    for a, b in zip(again.params, single.params):
        assert a.tobytes() == b.tobytes()


def test_mismatched_master_checkpoints_are_refused_and_nothing_changes(tmp_path):
    opt = _sharded(_model())
    opt.step(_grads(opt.params, 0))
    opt.save(tmp_path / "ck")
    with open(tmp_path / "ck" / "LATEST") as fh:
        meta_path = tmp_path / "ck" / fh.read().strip() / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["masters"] == [BF16.str, np.dtype(np.float16).str]
    meta.pop("masters")
    meta_path.write_text(json.dumps(meta))
    before = [p.tobytes() for p in opt.params] + [m.tobytes() for m in opt.inner.params]
    with pytest.raises(fo.CheckpointError, match=r"holds float32 masters of 16-bit "
                                                 r"parameters: none; this optimizer keeps "
                                                 r"those of \['bfloat16', 'float16'\]"):
        opt.load(tmp_path / "ck")
    fo.AdamW([p.astype(np.float32) for p in _model()], lr=1e-2).save(tmp_path / "f.npz")
    with pytest.raises(fo.CheckpointError, match="holds no parameters; with master_weights "
                                                 "a plain checkpoint holds the masters"):
        opt.load(tmp_path / "f.npz")
    assert before == [p.tobytes() for p in opt.params] + [m.tobytes()
                                                          for m in opt.inner.params]
    assert os.path.exists(tmp_path / "ck")


def test_16bit_parameters_need_master_weights_and_16bit_gradients():
    from mpi4py import MPI

    from fastopt.distributed import ShardedOptimizer
    with pytest.raises(TypeError, match=r"params\[0\] has dtype bfloat16; fastopt updates "
                                        r"float32 or float64 arrays"):
        ShardedOptimizer(fo.AdamW, _model(), lr=0.1, comm=MPI.COMM_SELF)
    opt = _sharded(_model())
    g = _grads(opt.params, 0)
    g[2] = g[2].astype(np.float32)
    with pytest.raises(TypeError, match=r"grads\[2\] has dtype float32 but params\[2\] has "
                                        r"bfloat16"):
        opt.step(g)
    assert opt.steps == 0


def test_master_weights_over_float32_parameters_only_round_trip(tmp_path):
    """No 16-bit parameter: no masters to shard, and the plain checkpoint
    (which fastopt.optim writes with the parameters) loads back sharded."""
    rng = np.random.default_rng(4)
    params = [rng.standard_normal(s).astype(np.float32) for s in ((30, 7), (11,))]
    opt = _sharded([p.copy() for p in params], bucket_bytes=64)
    single = fo.AdamW([p.copy() for p in params], lr=1e-2, master_weights=True)
    for k in range(2):
        g = _grads(params, k)
        opt.step(g)
        single.step(g)
    opt.consolidate(tmp_path / "plain.npz")
    back = _sharded([p.copy() for p in single.params], bucket_bytes=200)
    back.load(tmp_path / "plain.npz")
    g = _grads(params, 5)
    back.step(g)
    single.step(g)
    for a, b in zip(back.params, single.params):
        assert a.tobytes() == b.tobytes()


def test_the_masters_message_names_the_16_bit_dtypes_of_the_file():
    from fastopt.distributed._checks import named_words
    bf16 = pytest.importorskip("ml_dtypes").bfloat16
    assert named_words([np.dtype(bf16).str, "<f2", "<f4", 3]) == ["bfloat16", "float16",
                                                                   "<f4", 3]
    assert named_words("<V2") == "<V2"
