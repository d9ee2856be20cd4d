"""8-bit states in fastopt.distributed, in one process (``MPI.COMM_SELF``):
the layout never splits a block, the states' streams tile exactly, a
sharded step equals the single-process one with pieces under 4096
elements, and hostile or mismatched 8-bit checkpoints are refused with
nothing changed. Several ranks: tests/test_distributed.py (its worker's
"adamw_8bit" configuration, stepped and resumed at 1, 2 and 3 ranks)."""
import json
import os
import zlib

import numpy as np
import pytest

import fastopt.optim as fo
from fastopt import State8bit
from fastopt.distributed._layout import BLOCKS, Layout, cut_rule

pytest.importorskip("mpi4py")
Q8 = "int8-blockwise"


@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("bucket_bytes", [64, 3000, 1 << 20])
def test_blocks_are_never_split_and_the_streams_tile(world, bucket_bytes):
    rng = np.random.default_rng(world * 7 + bucket_bytes)
    specs = []
    for _ in range(12):
        size = int(rng.choice([0, 5, 255, 256, 257, 4096, 5000, 9999]))
        eight = size >= 4096 and bool(rng.integers(0, 4))
        shape = (size,) if rng.integers(0, 2) else (1, size)
        specs.append((np.dtype(np.float32), shape, 0, *cut_rule(shape, False, "oi", eight)))
    L = Layout(specs, world, bucket_bytes)
    d = L.dtypes[np.dtype(np.float32)]
    for q in range(world):
        for p in L.pieces(q)[np.dtype(np.float32)]:
            t = p.tensor
            if t.rule == BLOCKS:
                assert (p.lo - t.offset) % 256 == 0
                assert (p.hi - t.offset) % 256 == 0 or p.hi == t.offset + t.size
            for pos in (p.lo, p.hi):
                assert L.block_cut(np.float32, pos) is None
    for s in L.streams():
        total = sum(-(-t.size // s.per) for t in d.tensors if t.eight == (s.kind != "values"))
        cover = sorted(r for q in range(world) for r in L.in_stream(s, d.ranges(q)))
        pos = 0
        for lo, hi in cover:            # every entry of the stream on exactly one rank
            assert lo == pos, (s, cover)
            pos = hi
        assert pos == total


def _model(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in ((70, 100), (300,), (4100,))]


def _grads(params, k):
    rng = np.random.default_rng(k)
    return [(np.round(rng.standard_normal(p.shape) * 256) / 256).astype(np.float32)
            for p in params]


def _sharded(params, bucket_bytes=1000, **kw):
    from mpi4py import MPI

    from fastopt.distributed import ShardedOptimizer
    return ShardedOptimizer(fo.AdamW, params, lr=1e-2, bucket_bytes=bucket_bytes,
                            comm=MPI.COMM_SELF, **dict({"state_dtype": Q8}, **kw))


def _snapshot(opt):
    return (opt.steps, [p.tobytes() for p in opt.params],
            [b.tobytes() for arrs in opt.inner.state.values() for a in arrs
             for b in ((a.codes, a.absmax) if isinstance(a, State8bit) else (a,))])


def test_pieces_under_4096_elements_keep_their_tensors_8bit_states():
    opt = _sharded(_model(), bucket_bytes=1000)
    single = fo.AdamW(_model(), lr=1e-2, state_dtype=Q8)
    kinds = [isinstance(a, State8bit) for a in next(iter(opt.inner.state.values()))]
    sizes = [p.hi - p.lo for p in opt._inner_pieces]
    assert any(k and n < 4096 for k, n in zip(kinds, sizes))     # a piece of a big tensor
    assert kinds == [p.tensor.size >= 4096 for p in opt._inner_pieces]
    for k in range(4):
        g = _grads(single.params, k)
        opt.step([x.copy() for x in g])
        single.step(g)
    for a, b in zip(opt.params, single.params):
        assert a.tobytes() == b.tobytes()
    # blocks are whole: the shard holds as many bytes of state as one process does
    assert opt.state_bytes == sum(a.nbytes for arrs in single.state.values() for a in arrs)
    eight = sum(p.size for p in single.params if p.size >= 4096)
    per = sum(a.nbytes for arrs in single.state.values() for a, p in zip(arrs, single.params)
              if p.size >= 4096) / eight
    assert per < 2.04


def _version(path):
    with open(os.path.join(path, "LATEST")) as fh:
        return os.path.join(path, fh.read().strip())


def _rewrite(path, edit):
    vdir = _version(path)
    with open(os.path.join(vdir, "meta.json")) as fh:
        meta = json.load(fh)
    edit(meta, vdir)
    with open(os.path.join(vdir, "meta.json"), "w") as fh:
        json.dump(meta, fh)


def _refused(opt, path, match):
    before = _snapshot(opt)
    with pytest.raises(fo.CheckpointError, match=match):
        opt.load(path)
    assert _snapshot(opt) == before


def test_mismatched_8bit_checkpoints_are_refused_and_nothing_changes(tmp_path):
    opt = _sharded(_model())
    opt.step(_grads(opt.params, 0))
    opt.save(tmp_path / "q8")
    plain32 = _sharded(_model(), state_dtype=None)
    plain32.step(_grads(plain32.params, 0))
    plain32.save(tmp_path / "f32")
    _refused(opt, tmp_path / "f32", r"holds states of their parameters' dtype; this "
                                    r"optimizer keeps 8-bit states")
    _refused(plain32, tmp_path / "q8", r"holds 8-bit states; this optimizer keeps states "
                                       r"of their parameters' dtype")
    fo.AdamW(_model(), lr=1e-2).save(tmp_path / "f32.npz")          # plain, float states
    _refused(opt, tmp_path / "f32.npz", r"holds states of their parameters' dtype")
    for key, value in (("block", 128), ("tensors", [0]), ("maps", {"signed": "00",
                                                                    "unsigned": "00"})):
        (tmp_path / key).mkdir()
        opt.save(tmp_path / key)
        _rewrite(tmp_path / key, lambda meta, _v, k=key, v=value: meta["q8"].__setitem__(k, v))
        _refused(opt, tmp_path / key, "the checkpoint's 8-bit states have other")
    opt.load(tmp_path / "q8")                     # the right one still loads
    plain8 = fo.AdamW(_model(), lr=1e-2, state_dtype=Q8)   # a plain 8-bit checkpoint
    plain8.step(_grads(plain8.params, 0))
    plain8.save(tmp_path / "q8.npz")
    with np.load(tmp_path / "q8.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["state.exp_avg.0.absmax"] = -arrays["state.exp_avg.0.absmax"]
    np.savez(tmp_path / "negative.npz", **arrays)
    _refused(opt, tmp_path / "negative.npz", r"state\.exp_avg\.0 holds a negative absmax")
    opt.load(tmp_path / "q8.npz")


def test_ranges_that_cut_a_block_are_refused(tmp_path):
    """Two old ranks whose files are consistent with a cut inside a block
    (each holding that block's absmax): refused, never merged."""
    opt = _sharded(_model(), bucket_bytes=1 << 20)
    opt.step(_grads(opt.params, 0))
    opt.save(tmp_path / "ck")
    L, dt = opt.layout, np.dtype(np.float32)
    cut = opt.layout.tensors[2].offset + 300        # inside block 1 of the 8-bit (4100,)
    assert L.block_cut(dt, cut) is opt.layout.tensors[2]

    def split(meta, vdir):
        with open(os.path.join(vdir, "rank-00000.bin"), "rb") as fh:
            data = fh.read()
        whole = [[0, L.dtypes[dt].length]]
        ranks, blobs = [[[0, cut]], [[cut, L.dtypes[dt].length]]], [b"", b""]
        pos = 0
        for _ in meta["states"]:
            for s in opt._streams:      # (the sections of a rank file, in order)
                n = sum(b - a for a, b in L.in_stream(s, whole)) * s.store.itemsize
                seg = np.frombuffer(data[pos:pos + n], s.store)
                pos += n
                for q, rs in enumerate(ranks):
                    blobs[q] += b"".join(seg[a:b].tobytes() for a, b in L.in_stream(s, rs))
        meta["world_size"] = 2
        meta["ranks"] = []
        for q, blob in enumerate(blobs):
            name = f"rank-{q:05d}.bin"
            with open(os.path.join(vdir, name), "wb") as fh:
                fh.write(blob)
            meta["ranks"].append({"file": name, "bytes": len(blob), "ranges": {
                dt.str: ranks[q]}, "crc": [zlib.crc32(blob[i:i + (1 << 22)])
                                            for i in range(0, len(blob), 1 << 22)]})
    _rewrite(tmp_path / "ck", split)
    _refused(opt, tmp_path / "ck", r"rank 0's range \[0, 7600\) of float32 cuts a "
                                   r"256-element block of params\[2\]'s 8-bit states")


def test_8bit_options_sharding_refuses_say_why():
    from mpi4py import MPI

    from fastopt.distributed import ShardedOptimizer
    with pytest.raises(ValueError, match="needs float32 parameters"):
        ShardedOptimizer(fo.AdamW, [np.zeros(5000)], lr=0.1, state_dtype=Q8,
                         comm=MPI.COMM_SELF)
    with pytest.raises(ValueError, match="not available for OnnxMomentum"):
        ShardedOptimizer(fo.OnnxMomentum, [np.zeros(5000, np.float32)], lr=0.1,
                         state_dtype=Q8, comm=MPI.COMM_SELF)
