"""fastopt.distributed under real MPI: mpiexec -n 2 / -n 3 subprocesses.

Each test launches tests/distributed_worker.py under the mpiexec that sits
next to this Python (the one the mpich wheel installs; else the one on PATH)
with OMP_NUM_THREADS=1, and asserts that every rank reported success AND saw
the world size asked for: a foreign mpiexec (another MPI's launcher) starts
N independent size-1 jobs, which would otherwise pass as N single-process
runs. The worker compares against single-process fastopt.optim bit for bit
itself (see its docstring). Skipped when mpi4py or mpiexec is missing.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import fastopt
from fastopt.distributed._layout import (
    ANY,
    BLOCKS,
    ROWS,
    TRUST,
    WHOLE,
    Layout,
    agc_cut_rule,
    cut_rule,
)

pytest.importorskip("mpi4py")
MPIEXEC = (shutil.which("mpiexec", path=os.path.dirname(sys.executable))
           or shutil.which("mpiexec"))
if MPIEXEC is None:  # pragma: no cover - depends on the install
    pytest.skip("no mpiexec (python -m pip install \".[mpi]\")", allow_module_level=True)

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_worker.py")


def mpirun(n, *args, cwd):
    here = os.path.dirname(os.path.dirname(os.path.abspath(fastopt.__file__)))
    env = dict(os.environ, PYTHONPATH=here, OMP_NUM_THREADS="1")
    proc = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, WORKER, *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=60,
                          check=False)
    # the ranks' lines may interleave: take every {...} object
    reports = [json.loads(m) for m in re.findall(r"\{[^{}]*\}", proc.stdout)]
    detail = f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, detail
    assert sorted(r["rank"] for r in reports) == list(range(n)), detail
    assert all(r["size"] == n and r["ok"] for r in reports), \
        f"the ranks did not see one world of size {n} (a foreign mpiexec?)\n{detail}"


@pytest.mark.parametrize("n", [2, 3])
def test_bit_identical_to_single_process(n, tmp_path):
    """Momentum (Nesterov, AGC oi/io, groups), Adagrad, Adam with a schedule,
    grad_scale, a collective skip, None gradients; many buckets and one;
    global-norm clipping; edited hyperparameters; ranks that own nothing."""
    mpirun(n, "equiv", str(tmp_path / "tiny"), cwd=tmp_path)


def test_resume_2_1_3_ranks_bit_identical(tmp_path):
    """Save at 2 ranks, resume at 1, save, resume at 3; consolidate into a
    plain fastopt.optim checkpoint and load a plain one sharded."""
    ck = str(tmp_path / "ck")
    os.mkdir(ck)
    for n, phase in ((2, "a"), (1, "b"), (3, "c")):
        mpirun(n, "resume", phase, ck, cwd=tmp_path)
    assert os.path.exists(os.path.join(ck, "adam_schedule.plain.npz"))


@pytest.mark.parametrize("n", [2, 3])
def test_errors_are_collective(n, tmp_path):
    """Different parameters per rank, bad gradients on one rank, arguments
    that differ, a failed save, a truncated checkpoint: every rank raises the
    same error, nothing is modified, and the ranks stay in step."""
    mpirun(n, "errors", str(tmp_path / "ck"), cwd=tmp_path)


# ------------------------------------------------------- layout (no MPI needed)


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("bucket_bytes", [64, 200, 1024, 3000, 1 << 20])
def test_layout_tiles_and_never_splits_a_unit(world, bucket_bytes):
    rng = np.random.default_rng(world * 1000 + bucket_bytes)
    specs = []
    for _ in range(30):
        shape = tuple(int(d) for d in rng.integers(0, 6, size=rng.integers(0, 4)))
        clipped = bool(rng.integers(0, 2))
        layout = "oi" if rng.integers(0, 3) else "io"
        dt = np.float32 if rng.integers(0, 3) else np.float64
        kind = rng.integers(0, 5)
        if kind >= 3:                   # 8-bit blocks, or a trusted tensor's norm blocks
            shape = (int(rng.integers(0, 9000)),)
            specs.append((np.dtype(dt), shape, 0, *cut_rule(shape, False, "oi", kind == 3,
                                                            kind == 4)))
        else:
            specs.append((np.dtype(dt), shape, 0, *agc_cut_rule(shape, clipped, layout)))
    L = Layout(specs, world, bucket_bytes)
    for dt, d in L.dtypes.items():
        cover = sorted(r for q in range(world) for r in d.ranges(q))
        pos = 0
        for lo, hi in cover:
            assert lo == pos
            pos = hi
        assert pos == d.length
        sizes = [L.shard_length(dt, q) for q in range(world)]
        assert sum(sizes) == d.length
        for q in range(world):
            for p in L.pieces(q)[dt]:
                t = p.tensor
                if t.rule == ROWS:
                    assert (p.lo - t.offset) % t.unit == 0 and (p.hi - p.lo) % t.unit == 0
                if t.rule == WHOLE:
                    assert (p.lo, p.hi) == (t.offset, t.offset + t.size)
                if t.rule in (BLOCKS, TRUST):
                    assert (p.lo - t.offset) % t.unit == 0
                    assert p.hi == t.offset + t.size or (p.hi - t.offset) % t.unit == 0
                assert int(np.prod(p.shape)) == p.hi - p.lo


def test_layout_shards_are_nearly_equal():
    specs = [(np.dtype(np.float32), (1000, 1000), 0, *agc_cut_rule((1000, 1000), False, "oi"))]
    for world in (2, 3, 7):
        L = Layout(specs, world, 1 << 20)
        sizes = [L.shard_length(np.float32, q) for q in range(world)]
        assert max(sizes) - min(sizes) <= len(L.dtypes[np.dtype(np.float32)].buckets)


def _eight(n):
    return (np.dtype(np.float32), (n,), 0, *cut_rule((n,), False, "oi", True, False))


def _rows(n, m):
    return (np.dtype(np.float32), (n, m), 0, *agc_cut_rule((n, m), True, "oi"))


def _free(n):
    return (np.dtype(np.float32), (n,), 0, *agc_cut_rule((n,), False, "oi"))


@pytest.mark.parametrize("world", [2, 3, 4, 5])
@pytest.mark.parametrize("specs, bucket_bytes, unit", [
    ([_eight(8192)], 1024, 256),                  # a block a bucket
    ([_eight(8192)], 2048, 256),                  # two
    ([_eight(12288)], 3072, 256),                 # three
    ([_free(200), _eight(256)] * 16, 1024, 256),  # divisible and indivisible buckets in turn
    ([_rows(64, 400)], 3200, 400),                # two clipped rows a bucket
], ids=["1 block", "2 blocks", "3 blocks", "mixed", "rows"])
def test_units_no_cut_divides_are_dealt_so_shards_stay_nearly_equal(
        world, specs, bucket_bytes, unit):
    """A slice that cannot end at its rank's share (the unit is whole) is
    made up for in the next buckets: shards differ by about a unit, not by
    whole buckets' worth."""
    L = Layout(specs, world, bucket_bytes)
    sizes = [L.shard_length(np.float32, q) for q in range(world)]
    assert sum(sizes) == L.dtypes[np.dtype(np.float32)].length
    assert max(sizes) - min(sizes) <= 2 * unit, sizes


def test_agc_cut_rules():
    assert agc_cut_rule((4, 3), False, "oi")[0] not in (ROWS, WHOLE)
    assert agc_cut_rule((4, 3), True, "oi") == (ROWS, 3)
    assert agc_cut_rule((4, 3, 2, 2), True, "oi") == (ROWS, 12)
    assert agc_cut_rule((4, 3), True, "io") == (WHOLE, 12)
    assert agc_cut_rule((1, 7, 1), True, "oi") == (WHOLE, 7)
    assert agc_cut_rule((1, 3, 4), True, "oi") == (WHOLE, 12)    # one unit (dims[0] == 1)


def test_demo_two_ranks_matches_single_process(tmp_path):
    pytest.importorskip("sklearn")
    here = os.path.dirname(os.path.dirname(os.path.abspath(fastopt.__file__)))
    env = dict(os.environ, PYTHONPATH=here, OMP_NUM_THREADS="1")
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "fastopt",
                           "distributed-demo", "--epochs", "2"], capture_output=True, text=True,
                          cwd=tmp_path,
                          env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "over 2 rank(s)" in proc.stdout
    assert "rank 1 of 2: Adam state" in proc.stdout
    assert "parameters bit-identical: yes" in proc.stdout


# ------------------------------------------------- the shard update (one rank)

def _grads_like(rng, params):
    return [rng.standard_normal(p.shape).astype(p.dtype) for p in params]


@pytest.mark.parametrize("scale", [1.0, 3.0, 0.25])
def test_partial_norm_is_the_sum_before_the_root(scale):
    """The rank's partial (FO_NORM_SUMSQ) is the very sum fastopt's global
    norm takes the root of; the inf partial is the inf norm."""
    from fastopt import _ext
    rng = np.random.default_rng(7)
    gs = (rng.standard_normal(10_000).astype(np.float32), rng.standard_normal((70, 3)),
          np.zeros(0, np.float32))
    part, finite = _ext.global_norm(gs, scale, 2, 2)
    assert finite and np.sqrt(part) == _ext.global_norm(gs, scale, 0, 2)[0]
    assert _ext.global_norm(gs, scale, 1, 2)[0] == fastopt.global_norm(
        list(gs), grad_scale=scale, norm_type=np.inf)


@pytest.mark.parametrize("kw", [{}, {"grad_scale": 4.0}, {"max_grad_norm": 0.01},
                                {"max_grad_norm": 1e9, "grad_scale": 2.0},
                                {"skip_if_nonfinite": True}])
def test_sharded_step_is_one_update_call(monkeypatch, kw):
    """A step updates the rank's shard, every group, in one fastopt step
    call (plus one read-only norm pass when it checks or clips)."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt import _ext
    from fastopt.distributed import ShardedOptimizer
    from fastopt.optim import _fused
    rng = np.random.default_rng(3)
    params = [rng.standard_normal((30, 20)).astype(np.float32), rng.standard_normal(50),
              rng.standard_normal(7).astype(np.float32)]
    groups = [{"params": params[:2]}, {"params": params[2:], "lr": 0.1}]
    opt = ShardedOptimizer(fo.OnnxAdam, groups, lr=1e-3, comm=MPI.COMM_SELF)
    single = fo.OnnxAdam([{"params": [p.copy() for p in params[:2]]},
                      {"params": [params[2].copy()], "lr": 0.1}], lr=1e-3)
    calls = []
    for mod, name in ((_fused, "run"), (_ext, "global_norm")):
        fn = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _fn=fn, _n=name, **k:
                            calls.append(_n) or _fn(*a, **k))
    g = _grads_like(rng, params)
    assert opt.step([x.copy() for x in g], **kw)
    checks = bool(kw.get("max_grad_norm") or kw.get("skip_if_nonfinite"))
    assert calls == ["global_norm"] * checks + ["run"]
    single.step(g, **kw)
    for a, b in zip(opt.params, single.params):
        np.testing.assert_array_equal(a, b)



@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_norm_clips_as_single_process(bad):
    """A NaN (or infinite) global norm without skip_if_nonfinite: the clip
    coefficient max_norm / (norm + 1e-6) is NaN (0) and multiplies every
    gradient, as in fastopt.optim (and torch's clip_grad_norm_), so the
    sharded step stays bit-identical to the single-process one."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer
    rng = np.random.default_rng(5)
    params = [rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal(9)]
    opt = ShardedOptimizer(fo.OnnxMomentum, [p.copy() for p in params], lr=0.1,
                           comm=MPI.COMM_SELF)
    single = fo.OnnxMomentum([p.copy() for p in params], lr=0.1)
    g = _grads_like(rng, params)
    g[1][3] = bad
    with np.errstate(all="ignore"):
        opt.step([x.copy() for x in g], max_grad_norm=1.0)
        single.step([x.copy() for x in g], max_grad_norm=1.0)
    for a, b in zip(opt.params, single.params):
        np.testing.assert_array_equal(a, b)
    if np.isnan(bad):    # a NaN coefficient reaches every parameter
        assert all(np.isnan(p).all() for p in opt.params)


def test_grads_per_group_or_flat_and_their_errors():
    """step() takes one flat list or one list per group, as fastopt.optim
    (the same rule and messages: fastopt._groups.split_counts), and a list that
    fits neither form raises with nothing written."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer
    rng = np.random.default_rng(7)
    params = [rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(4),
              rng.standard_normal(6).astype(np.float32)]
    groups = [{"params": params[:2]}, {"params": params[2:], "lr": 0.5}]
    flat = ShardedOptimizer(fo.OnnxMomentum, groups, lr=0.1, comm=MPI.COMM_SELF)
    per = ShardedOptimizer(fo.OnnxMomentum, groups, lr=0.1, comm=MPI.COMM_SELF)
    g = _grads_like(rng, params)
    flat.step(g)
    per.step([g[:2], g[2:]])
    for a, b in zip(flat.params, per.params):
        np.testing.assert_array_equal(a, b)
    before = [p.copy() for p in per.params]
    with pytest.raises(TypeError, match=r"ShardedOptimizer.step: grads must be a list"):
        per.step(tuple(g)[0])
    with pytest.raises(ValueError, match=r"grads\[1\] has 2 gradients but "
                                         r"param_groups\[1\] has 1 parameters"):
        per.step([g[:2], g[:2]])
    with pytest.raises(ValueError, match="grads has 2 entries but the optimizer has 3"):
        per.step(g[:2])
    for a, b in zip(per.params, before):
        np.testing.assert_array_equal(a, b)


def test_gradient_shapes_as_in_optim():
    """A gradient that only broadcasts to its parameter is refused, as by
    fastopt.optim, unless the optimizer is built with broadcast_grads=True."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer
    params = [np.ones((5, 3), np.float32), np.ones(4)]
    exact = ShardedOptimizer(fo.OnnxAdam, [p.copy() for p in params], lr=0.1,
                             comm=MPI.COMM_SELF)
    before = [p.copy() for p in exact.params]
    g = [np.ones(3, np.float32), np.ones(4)]
    with pytest.raises(ValueError, match=r"ShardedOptimizer.step: grads\[0\] has shape "
                                         r"\(3,\) but params\[0\] has shape \(5, 3\); "
                                         r"the gradient must have its parameter's shape"):
        exact.step(g)
    for a, b in zip(exact.params, before):
        np.testing.assert_array_equal(a, b)
    loose = ShardedOptimizer(fo.OnnxAdam, [p.copy() for p in params], lr=0.1,
                             comm=MPI.COMM_SELF, broadcast_grads=True)
    single = fo.OnnxAdam([p.copy() for p in params], lr=0.1)
    loose.step(g)
    single.step([np.ones((5, 3), np.float32), np.ones(4)])
    for a, b in zip(loose.params, single.params):
        np.testing.assert_array_equal(a, b)


def test_plain_checkpoint_with_parameters_is_refused_with_a_reason(tmp_path):
    """A plain checkpoint saved with params=True names why a ShardedOptimizer
    (which restores optimizer state only) refuses it, and nothing changes."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer
    rng = np.random.default_rng(3)
    params = [rng.standard_normal((64, 32)), rng.standard_normal(9).astype(np.float32)]
    plain = fo.OnnxAdam([p.copy() for p in params], lr=0.1)
    plain.step(_grads_like(rng, params))
    plain.save(tmp_path / "c.npz", params=True)
    opt = ShardedOptimizer(fo.OnnxAdam, params, lr=0.1, comm=MPI.COMM_SELF)
    opt.step(_grads_like(rng, params))
    before = [p.copy() for p in opt.params]
    with pytest.raises(fastopt.optim.CheckpointError,
                       match=r"holds the parameters too \(saved with params=True\)"):
        opt.load(tmp_path / "c.npz")
    assert opt.steps == 1
    for a, b in zip(opt.params, before):
        np.testing.assert_array_equal(a, b)
    plain.save(tmp_path / "c.npz")
    opt.load(tmp_path / "c.npz")
    assert opt.steps == 1


@pytest.mark.parametrize("sharded", [False, True])
def test_the_last_count_a_step_leaves_loads_back(tmp_path, sharded):
    """A ShardedOptimizer loads every count fastopt.optim does (plain and
    sharded checkpoints): after the last step it may take, its checkpoint
    loads, and its next step is refused with nothing written."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer
    rng = np.random.default_rng(4)
    params = [rng.standard_normal(300).astype(np.float32)]
    plain = fo.OnnxAdam([p.copy() for p in params], lr=0.1)
    plain.step(_grads_like(rng, params))
    sd = plain.state_dict()
    sd["steps"] = 2**63 - 3                 # Adam: the update count is steps + 1
    plain.load_state_dict(sd)
    plain.save(tmp_path / "c.npz")
    opt = ShardedOptimizer(fo.OnnxAdam, params, lr=0.1, comm=MPI.COMM_SELF)
    opt.load(tmp_path / "c.npz")
    opt.step(_grads_like(rng, params))
    assert opt.steps == 2**63 - 2
    path = tmp_path / ("d" if sharded else "d.npz")
    if sharded:
        opt.save(path)                      # a directory of shards
    else:
        opt.consolidate(path)               # one plain file
    opt.load(path)
    before = [p.copy() for p in opt.params]
    with pytest.raises(ValueError, match=r"the update count would reach 2\*\*63 - 1"):
        opt.step(_grads_like(rng, params))
    assert opt.steps == 2**63 - 2 and all((a == b).all() for a, b in zip(opt.params, before))


def test_a_gradient_given_in_another_parameters_buffer_is_read_before_it_is_written():
    """grad_buffers[j] passed as parameter i's gradient: the step reads it
    before the copies into the staging buffers write there, and equals the
    single-process optimizer on the same gradients."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer
    params = [np.full(8, 0.5, np.float32), np.full(8, 0.25, np.float32)]
    opt = ShardedOptimizer(fo.SGD, [p.copy() for p in params], lr=1.0, comm=MPI.COMM_SELF)
    single = fo.SGD([p.copy() for p in params], lr=1.0)
    gb = opt.grad_buffers
    gb[0][:], gb[1][:] = 1.0, 2.0
    grads = [gb[1], gb[0]]
    want = [g.copy() for g in grads]
    opt.step(grads)
    single.step(want)
    for a, b in zip(opt.params, single.params):
        np.testing.assert_array_equal(a, b)


def test_trusted_tensors_are_cut_at_norm_blocks_and_their_flag_is_fixed():
    """LAMB's trusted tensors are cut only at multiples of 4096 elements
    (the C core's norm block): here one rank holds three pieces of one
    tensor in three buckets, adds their block sums in block order and steps
    them with the whole tensor's ratio, bit for bit the single-process
    optimizer's (tests/distributed_worker.py does it across 2 and 3 ranks).
    The untrusted group is cut anywhere; trust_ratio cannot be edited after
    construction."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer
    rng = np.random.default_rng(5)
    shapes = [(90, 100), (50,)]

    def groups(ps):
        return [{"params": ps[:1]}, {"params": ps[1:], "trust_ratio": False}]
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    opt = ShardedOptimizer(fo.LAMB, groups([p.copy() for p in params]), lr=0.1,
                           weight_decay=0.01, bucket_bytes=64, comm=MPI.COMM_SELF)
    single = fo.LAMB(groups(params), lr=0.1, weight_decay=0.01)
    assert [t.rule for t in opt.layout.tensors] == [TRUST, ANY]
    pieces = [(p.tensor.index, p.lo, p.hi, p.shape) for p in opt._inner_pieces]
    assert pieces[:3] == [(0, 0, 4096, (4096,)), (0, 4096, 8192, (4096,)),
                          (0, 8192, 9000, (808,))] and len(pieces) > 4
    for _ in range(3):
        grads = [rng.standard_normal(sh).astype(np.float32) for sh in shapes]
        opt.step(grads, grad_scale=2.0)
        single.step(grads, grad_scale=2.0)
        for a, b in zip(opt.params, single.params):
            np.testing.assert_array_equal(a, b)
    opt.param_groups[1]["trust_ratio"] = True
    before = [p.copy() for p in opt.params]
    with pytest.raises(ValueError, match=r"param_groups\[1\]\['trust_ratio'\] was changed"):
        opt.step(grads)
    assert opt.steps == 3 and all((a == b).all() for a, b in zip(opt.params, before))


def test_trust_cut_rule():
    """A trusted tensor's cuts fall on multiples of 4096 (256-element 8-bit
    blocks included), every size, empty ones too."""
    assert cut_rule((5000,), False, "oi", trust=True) == (TRUST, 4096)
    assert cut_rule((0,), False, "oi", trust=True) == (TRUST, 4096)
    assert cut_rule((70, 100), False, "oi", eight=True, trust=True)[1] % 256 == 0
    specs = [(np.dtype(np.float32), (9000,), 0, TRUST, 4096)]
    for world in (2, 3):
        for bb in (64, 1 << 20):
            L = Layout(specs, world, bb)
            cuts = sorted({c for q in range(world) for r in L.dtypes[np.dtype(np.float32)]
                           .ranges(q) for c in r})
            assert all(c % 4096 == 0 or c == 9000 for c in cuts), (world, bb, cuts)


def _stored_run():
    """The optimizer (and its three steps) that wrote tests/data/sharded_float_v1."""
    from mpi4py import MPI

    import fastopt.optim as fo
    from fastopt.distributed import ShardedOptimizer
    rng = np.random.default_rng(11)
    params = [rng.standard_normal(s).astype(d) for s, d in (
        ((6, 5), np.float32), ((7,), np.float64), ((40,), np.float32), ((3, 3), np.float64))]
    opt = ShardedOptimizer(fo.AdamW, [{"params": params[:2]},
                                      {"params": params[2:], "weight_decay": 0.1}],
                           lr=1e-2, bucket_bytes=64, comm=MPI.COMM_SELF)
    for k in range(3):
        r = np.random.default_rng(k)
        opt.step([(np.round(r.standard_normal(p.shape) * 256) / 256).astype(p.dtype)
                  for p in opt.params])
    return opt


def test_checkpoints_of_float_states_keep_their_stored_bytes(tmp_path):
    """A checkpoint without 8-bit states or masters is written byte for byte
    as the stored one (written before those existed), and loads."""
    stored = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                          "sharded_float_v1")
    opt = _stored_run()
    opt.save(tmp_path / "ck")

    def version(path):
        with open(os.path.join(path, "LATEST")) as fh:
            return os.path.join(path, fh.read().strip())
    for name in ("rank-00000.bin", "meta.json"):
        with open(os.path.join(version(stored), name), "rb") as a, \
                open(os.path.join(version(tmp_path / "ck"), name), "rb") as b:
            assert a.read() == b.read(), name
    fresh = _stored_run()
    for arrs in fresh.inner.state.values():
        for a in arrs:
            a.fill(0)
    fresh.load(stored)
    for x, y in zip(fresh.inner.state.values(), opt.inner.state.values()):
        for a, b in zip(x, y):
            assert a.tobytes() == b.tobytes()
