"""Run under mpiexec by tests/test_distributed.py: ``python distributed_worker.py CASE ...``.

Every rank builds the same small model, generates the gradients of EVERY
rank for every step from seeds (so each rank can compute the averaged
gradient itself), runs fastopt.distributed.ShardedOptimizer and, beside it,
the single-process fastopt.optim optimizer fed the averaged gradient, and
compares parameters and states bit for bit. The gradients are multiples of
1/256 of modest size, so their sum over up to 4 ranks is exact in float32
and the average is the same whatever order MPI adds in.

Prints one line "RANK r SIZE n CASE ok" per rank on success; anything else
is a failure (an exception's traceback, or a mismatch message).
"""
import json
import os
import sys

import ml_dtypes
import numpy as np
from mpi4py import MPI

import fastopt.optim as fo
from fastopt import State8bit
from fastopt.distributed import CheckpointError, ShardedOptimizer

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()

SHAPES = [((6, 5), np.float32), ((7,), np.float64), ((3, 4, 2), np.float32), ((1,), np.float32),
          ((0, 3), np.float32), ((9, 4), np.float64), ((50,), np.float32), ((5, 1, 3), np.float64)]


# two more float32 tensors of 4096 elements or more: 8-bit states
SHAPES_8BIT = SHAPES + [((70, 100), np.float32), ((4100,), np.float32)]
# 16-bit parameters beside float ones (master_weights)
BF16 = np.dtype(ml_dtypes.bfloat16)
SHAPES_16 = [((6, 5), BF16), ((7,), np.float64), ((50,), BF16), ((9, 4), np.float16),
             ((3, 4, 2), np.float32), ((70, 100), BF16)]


def model(seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dt) for s, dt in shapes]


# tensors of more than one 4096-element block of a trust ratio's norm, so
# that ranks hold pieces of them (float32 and float64)
SHAPES_TRUST = SHAPES + [((70, 100), np.float32), ((12289,), np.float64), ((4100,), np.float32)]


def shapes_of(name):
    return {"8bit": SHAPES_8BIT, "16": SHAPES_16, "trust": SHAPES_TRUST}.get(
        name.rsplit("_", 1)[-1], SHAPES)


def grads_of(q, step, params, none=()):
    rng = np.random.default_rng([7, step, q])
    out = []
    for i, p in enumerate(params):
        g = (np.round(rng.standard_normal(p.shape) * 256) / 256).astype(p.dtype)
        out.append(None if (q, i) in none or ("all", i) in none else g)
    return out


def averaged(step, params, world, none=()):
    per = [grads_of(q, step, params, none) for q in range(world)]
    out = []
    for i, p in enumerate(params):
        gs = [g[i] for g in per if g[i] is not None]
        if not gs:
            out.append(None)
            continue
        # 16-bit gradients are added in float32, in rank order (as the ranks do)
        acc = np.dtype(np.float32) if p.dtype.itemsize == 2 else p.dtype
        total = np.zeros(p.shape, acc)
        for g in gs:
            total = total + g.astype(acc)
        out.append(np.divide(total, acc.type(world)))
    return out


def groups_of(params, spec):
    """spec: None (a plain list) or a list of (indices, hyper dict)."""
    if spec is None:
        return list(params)
    return [dict(h, params=[params[i] for i in idx]) for idx, h in spec]


def same(a, b, what):
    if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
        bad = np.flatnonzero(a.reshape(-1) != b.reshape(-1))[:3]
        raise AssertionError(f"rank {RANK}: {what} differs at {bad}: "
                             f"{a.reshape(-1)[bad]} vs {b.reshape(-1)[bad]}")


def compare(sharded, single, what):
    # master_weights: the 16-bit parameters, then the shard's float32 masters
    mine = single._copies or [None] * len(single.params)
    for i, (a, b, c) in enumerate(zip(sharded.params, single.params, mine)):
        same(a, b if c is None else c, f"{what}: params[{i}]")
    if sharded.inner is not None and sharded.inner._copies:
        for piece, m, c in zip(sharded._inner_pieces, sharded.inner.params,
                               sharded.inner._copies):
            t = piece.tensor
            if c is not None:
                same(m.reshape(-1), single.params[t.index].reshape(-1)[
                    piece.lo - t.offset:piece.hi - t.offset], f"{what}: master {t.index}")
    for gi, (g, h) in enumerate(zip(sharded.param_groups, single.param_groups)):
        if "mu_product" in h:       # NAdam's carried scalar, on every rank
            assert g["mu_product"] == h["mu_product"], (what, gi, g["mu_product"],
                                                        h["mu_product"])
    if sharded.inner is None:
        return
    full = single.state
    for name, arrays in sharded.inner.state.items():
        for piece, a in zip(sharded._inner_pieces, arrays):
            t = piece.tensor
            ref, lo, hi = full[name][t.index], piece.lo - t.offset, piece.hi - t.offset
            label = f"{what}: state {name} of params[{t.index}]"
            if isinstance(ref, State8bit):      # a piece's blocks are the tensor's
                assert isinstance(a, State8bit) and lo % 256 == 0, (label, lo)
                same(a.codes.reshape(-1), ref.codes.reshape(-1)[lo:hi], label + " codes")
                same(a.absmax, ref.absmax[lo // 256:-(-hi // 256)], label + " absmax")
                continue
            same(a.reshape(-1), ref.reshape(-1)[lo:hi], label)
    assert sharded.steps == single.steps, (sharded.steps, single.steps)


CONFIGS = {
    "momentum": (fo.OnnxMomentum, {"lr": 0.05, "alpha": 0.9, "norm_coefficient": 1e-3}, None),
    "nesterov_agc_groups": (fo.OnnxMomentum, {"lr": 0.05, "nesterov": True}, [
        ([0, 1, 2], {"clipping": 0.01}),
        ([3, 4, 5], {"lr": 0.01, "clipping": [None, 0.02, 0.02], "clip_layout": "io"}),
        ([6, 7], {"alpha": 0.5, "clipping": [0.01, None]})]),
    "adagrad_groups": (fo.OnnxAdagrad, {"lr": 0.1, "decay_factor": 0.01}, [
        ([0, 2, 4, 6], {"initial_accumulator_value": 0.1}), ([1, 3, 5, 7], {"epsilon": 1e-8})]),
    "adam_schedule": (fo.OnnxAdam, {"schedule": lambda s: 1e-3 / (1 + s),
                                "norm_coefficient_post": 1e-4}, None),
    # a carried scalar per group (mu_product): every rank's, and the checkpoint's
    "nadam_groups": (fo.NAdam, {"lr": 0.01, "weight_decay": 0.01}, [
        ([0, 1, 2, 3], {}), ([4, 5, 6, 7], {"betas": (0.5, 0.9)})]),
    # a trust ratio per tensor: trusted tensors are cut at multiples of 4096
    # (the ranks add their blocks' norm sums in block order), the group
    # without one is cut anywhere
    "lamb_groups": (fo.LAMB, {"lr": 0.01, "weight_decay": 0.01}, [
        ([0, 1, 2, 3, 4, 5], {}), ([6, 7], {"trust_ratio": False})]),
    "lars": (fo.LARS, {"lr": 0.1, "weight_decay": 1e-3, "nesterov": True}, None),
    "lamb_trust": (fo.LAMB, {"lr": 0.01, "weight_decay": 0.01}, [
        ([0, 1, 2, 3, 4, 5, 8, 9], {}), ([6, 7, 10], {"trust_ratio": False})]),
    "lars_trust": (fo.LARS, {"lr": 0.1, "weight_decay": 1e-3, "momentum": 0.8}, None),
    # 16-bit parameters whose float32 masters are pieces of a trusted tensor
    "lamb_master_16": (fo.LAMB, {"lr": 1e-2, "master_weights": True}, None),
    # 8-bit moments of trusted tensors (cut at 4096: whole blocks of both)
    "lamb_q8_trust": (fo.LAMB, {"lr": 1e-2, "state_dtype": "int8-blockwise"}, [
        ([0, 2, 8, 10], {}),
        ([1, 3, 4, 5, 6, 7, 9], {"trust_ratio": False, "state_dtype": "float32"})]),
    # 16-bit parameters exchanged as 16-bit words, float32 masters and states
    "adamw_master_16": (fo.AdamW, {"lr": 1e-2, "master_weights": True}, [
        ([0, 1, 2], {}), ([3, 4, 5], {"weight_decay": 0.1})]),
    # 8-bit states (blocks of 256, never split between ranks) beside float32
    # ones: a tensor under 4096 elements, and a group that keeps float32
    "adamw_8bit": (fo.AdamW, {"lr": 1e-2, "state_dtype": "int8-blockwise"}, [
        ([0, 8, 2], {}), ([6, 9], {"weight_decay": 0.1, "betas": (0.8, 0.99)}),
        ([1, 3, 4, 5, 7], {"state_dtype": "float32"})]),
}


def run_equiv(name, steps=5, bucket_bytes=64, scale=None, skip_at=None, none=()):
    cls, kw, spec = CONFIGS[name]
    params = model(shapes=shapes_of(name))
    opt = ShardedOptimizer(cls, groups_of(params, spec), bucket_bytes=bucket_bytes, **kw)
    single = cls(groups_of(model(shapes=shapes_of(name)), spec), **kw)
    for s in range(steps):
        mine = grads_of(RANK, s, opt.params, none)
        if skip_at == s and RANK == SIZE - 1:
            mine[0] = mine[0].copy()
            mine[0].reshape(-1)[0] = np.inf
        ok = opt.step(mine, grad_scale=scale, skip_if_nonfinite=skip_at is not None)
        if skip_at == s:
            assert ok is False, "the step with an Inf gradient was applied"
            continue
        assert ok is True
        single.step(averaged(s, opt.params, SIZE, none), grad_scale=scale)
        compare(opt, single, f"{name} step {s}")


def run_clip(norm_type, steps=3):
    """Global-norm clipping: the same norm on every rank, equal to the norm of
    the averaged gradient (within rounding of the partial sums), and the update
    of single-process Adam fed the clipped average."""
    params = model()
    opt = ShardedOptimizer(fo.OnnxAdam, params, lr=1e-2, bucket_bytes=64)
    single = fo.OnnxAdam(model(), lr=1e-2)
    for s in range(steps):
        opt.step(grads_of(RANK, s, opt.params), max_grad_norm=0.5, norm_type=norm_type)
        avg = averaged(s, single.params, SIZE)
        live = [g for g in avg if g is not None]
        if norm_type == 2.0:
            ref = float(np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in live)))
        else:
            ref = max(float(np.max(np.abs(g))) for g in live if g.size)
        norms = COMM.allgather(opt.last_grad_norm)
        assert all(x == norms[0] for x in norms), norms
        assert abs(norms[0] - ref) <= 1e-12 * ref, (norms[0], ref)
        coef = 0.5 / (ref + 1e-6)
        assert coef < 1
        single.step([None if g is None else g * g.dtype.type(coef) for g in avg])
        for a, b in zip(opt.params, single.params):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def run_edit():
    """Hyperparameters edited between steps (on every rank) take effect."""
    cls, kw, spec = CONFIGS["adagrad_groups"]
    opt = ShardedOptimizer(cls, groups_of(model(), spec), bucket_bytes=64, **kw)
    single = cls(groups_of(model(), spec), **kw)
    for s in range(4):
        if s == 2:
            for o in (opt, single):
                o.param_groups[1]["lr"] = 0.02
                o.param_groups[0]["epsilon"] = 1e-3
        opt.step([grads_of(RANK, s, opt.params)[:4], grads_of(RANK, s, opt.params)[4:]])
        avg = averaged(s, single.params, SIZE)
        single.step([avg[:4], avg[4:]])
        compare(opt, single, f"edited hyperparameters, step {s}")


def run_tiny(ckpt):
    """Fewer elements than ranks: some ranks own nothing (no inner optimizer)
    and still take part in every step, save, load and consolidate."""
    opt = ShardedOptimizer(fo.OnnxAdam, [np.ones(2, np.float32)], lr=0.1)
    single = fo.OnnxAdam([np.ones(2, np.float32)], lr=0.1)
    for s in range(3):
        opt.step(grads_of(RANK, s, opt.params))
        single.step(averaged(s, single.params, SIZE))
        compare(opt, single, "tiny")
    opt.save(ckpt)
    opt.load(ckpt)
    opt.consolidate(ckpt + ".npz")
    again = fo.OnnxAdam([single.params[0].copy()], lr=0.1)
    again.load(ckpt + ".npz")
    for x, y in zip(again.state.values(), single.state.values()):
        same(x[0], y[0], "tiny consolidated")


def check_threads():
    """Default threads per rank: the node's cores // the ranks on the node
    (all ranks of the test share one node); fastopt's default under
    OMP_NUM_THREADS."""
    from fastopt.distributed._comm import default_n_threads
    saved = os.environ.pop("OMP_NUM_THREADS", None)
    try:
        got = default_n_threads(COMM)
        opt = ShardedOptimizer(fo.OnnxMomentum, model(), lr=0.1)
    finally:
        if saved is not None:
            os.environ["OMP_NUM_THREADS"] = saved
    want = max(1, (os.cpu_count() or 1) // SIZE)
    assert got == (want, SIZE), (got, want)
    assert opt.inner.n_threads == want, opt.inner.n_threads
    assert ShardedOptimizer(fo.OnnxMomentum, model(), lr=0.1, n_threads=2).inner.n_threads == 2


def case_equiv():
    check_threads()
    run_tiny(sys.argv[2])
    run_clip(2.0)
    run_clip(np.inf)
    run_edit()
    for name in CONFIGS:
        run_equiv(name)
    run_equiv("adam_schedule", bucket_bytes=1 << 20)        # one bucket
    run_equiv("momentum", scale=1024.0)
    run_equiv("adagrad_groups", scale=0.5, skip_at=2)
    run_equiv("momentum", none=[(0, 1), ("all", 5)])         # None on one rank / every rank
    # the non-finite decision is collective even when only the last rank sees the Inf
    run_equiv("nesterov_agc_groups", skip_at=1)
    run_equiv("adamw_8bit", bucket_bytes=3000, scale=2.0, skip_at=1)
    run_equiv("adamw_master_16", bucket_bytes=3000, scale=4.0, skip_at=2)
    run_equiv("adamw_master_16", none=[(0, 1), ("all", 3), (SIZE - 1, 5)])
    # trusted pieces: unscaled in the step, a skipped step, a gradient missing
    run_equiv("lamb_trust", bucket_bytes=1 << 20, scale=2.0, skip_at=1)
    run_equiv("lars_trust", none=[("all", 9)])
    run_equiv("lamb_q8_trust", bucket_bytes=1 << 20, scale=2.0)


def case_resume(phase, ckpt_root):
    for name in ("nesterov_agc_groups", "adam_schedule", "nadam_groups", "adamw_8bit",
                 "lamb_groups", "lamb_trust", "lamb_q8_trust", "adamw_master_16"):
        resume_one(name, phase, os.path.join(ckpt_root, name))


def resume_one(name, phase, ckpt):
    """Phases run at different world sizes over one checkpoint directory."""
    cls, kw, spec = CONFIGS[name]
    first = {"a": 0, "b": 3, "c": 5}[phase]
    n = {"a": 3, "b": 2, "c": 2}[phase]
    worlds = {0: 2, 1: 2, 2: 2, 3: 1, 4: 1, 5: 3, 6: 3}   # the world size of each step
    params = model(shapes=shapes_of(name))
    opt = ShardedOptimizer(cls, groups_of(params, spec), bucket_bytes=96, **kw)
    single = cls(groups_of(model(shapes=shapes_of(name)), spec), **kw)
    for s in range(first + n):
        single.step(averaged(s, opt.params, worlds[s]))
    if first:
        opt.load(ckpt)
        # the parameters are the user's to save; take them from the reference run
        ref = cls(groups_of(model(shapes=shapes_of(name)), spec), **kw)
        for s in range(first):
            ref.step(averaged(s, opt.params, worlds[s]))
        # master weights: the load rewrote the 16-bit parameters from the masters
        for k, (a, c) in enumerate(zip(opt.params, ref._copies or [])):
            if c is not None:
                same(a, c, f"resume phase {phase}: 16-bit params[{k}] after the load")
        for a, b in zip(opt.params, ref.params):
            a[...] = b
    for s in range(first, first + n):
        opt.step(grads_of(RANK, s, opt.params))
    compare(opt, single, f"resume phase {phase}")
    opt.save(ckpt)
    if phase == "c":
        plain = ckpt + ".plain.npz"
        opt.consolidate(plain)
        # opt.params are in group order; groups_of takes the model's order
        order = range(len(opt.params)) if spec is None else [i for idx, _ in spec
                                                               for i in idx]
        mine = dict(zip(order, (p.copy() for p in opt.params)))
        again = cls(groups_of([mine[i] for i in sorted(mine)], spec), **kw)
        again.load(plain)
        for k, (x, y) in enumerate(zip(again.state.values(), single.state.values())):
            for i, (a, b) in enumerate(zip(x, y)):
                label = f"consolidated state {k} of params[{i}]"
                if isinstance(b, State8bit):
                    same(a.codes, b.codes, label + " codes")
                    same(a.absmax, b.absmax, label + " absmax")
                else:
                    same(a, b, label)
        back = ShardedOptimizer(cls, groups_of(model(shapes=shapes_of(name)), spec),
                                bucket_bytes=200, **kw)
        back.load(plain)
        for a, b in zip(back.params, single.params):
            a[...] = b
        compare(back, single, "plain checkpoint loaded sharded")


def expect(exc_type, fn, needle):
    try:
        fn()
    except exc_type as exc:
        msg = str(exc)
        if needle not in msg:
            raise AssertionError(f"rank {RANK}: {needle!r} not in {msg!r}") from None
        return msg
    raise AssertionError(f"rank {RANK}: no {exc_type.__name__} ({needle!r})")


def hostile_files(opt, ck):
    """Spoil the checkpoint at ck in several ways, one at a time: every load
    must fail on every rank with the same CheckpointError, changing nothing."""
    state = [a.copy() for a in opt.inner.state["v"]] if opt.inner else []
    with open(os.path.join(ck, "LATEST")) as fh:
        vdir = os.path.join(ck, fh.read().strip())
    rf = os.path.join(vdir, "rank-00001.bin")
    with open(rf, "rb") as fh:
        data = fh.read()
    with open(os.path.join(vdir, "meta.json")) as fh:
        meta = fh.read()
    hostile = [   # (what to write where, the error it must give)
        (rf, data[:-8], "bytes"),                                  # cut short
        (rf, data[:5] + bytes([data[5] ^ 1]) + data[6:], "CRC"),   # one bit flipped
        (os.path.join(vdir, "meta.json"), meta[:len(meta) // 2], "not a readable"),
        (os.path.join(vdir, "meta.json"), meta.replace('"world_size": ', '"world_size": 1'),
         "world size"),
        (os.path.join(ck, "LATEST"), "../../etc\n", "not a checkpoint version"),
    ]
    m9 = []
    COMM.Barrier()      # every rank has read the good files before rank 0 spoils them
    for target, content, needle in hostile:
        if RANK == 0:
            with open(target, "wb" if isinstance(content, bytes) else "w") as fh:
                fh.write(content)
        COMM.Barrier()
        m9.append(expect(CheckpointError, lambda: opt.load(ck), needle))
        for a, b in zip(opt.inner.state["v"] if opt.inner else [], state):
            same(a, b, "a state after a rejected load")
        COMM.Barrier()
        if RANK == 0:   # repair
            for path, good in ((rf, data), (os.path.join(vdir, "meta.json"), meta),
                               (os.path.join(ck, "LATEST"), os.path.basename(vdir) + "\n")):
                with open(path, "wb" if isinstance(good, bytes) else "w") as fh:
                    fh.write(good)
        COMM.Barrier()
    opt.load(ck)
    return " | ".join(m9)


def checkpoint_faults(opt, ck):
    """A failed save, debris of a crashed one, hostile files: every rank raises the
    same CheckpointError/OSError and the optimizer is unchanged. Returns the messages."""
    opt.save(ck)
    saved = [a.copy() for a in opt.inner.state["v"]] if opt.inner else []
    # a save that fails on one rank (disk full) raises everywhere; the previous
    # version stays the loadable one, and debris of a crashed save is ignored
    import fastopt.distributed._checkpoint as cp
    real = cp._write_rank_file

    def full_disk(o, tmp):
        if RANK == SIZE - 1:
            raise OSError(28, "No space left on device")
        return real(o, tmp)
    cp._write_rank_file = full_disk
    m10 = expect(OSError, lambda: opt.save(ck), "No space left")
    cp._write_rank_file = real
    if RANK == 0:
        os.makedirs(os.path.join(ck, ".ckpt-00000009-0badf00d.tmp"))
        os.makedirs(os.path.join(ck, "ckpt-00000009-0badf00d"))
        with open(os.path.join(ck, "ckpt-00000009-0badf00d", "meta.json"), "w") as fh:
            fh.write("{half a header")
    COMM.Barrier()
    opt.step(grads_of(RANK, 1, opt.params))
    opt.load(ck)
    assert opt.steps == 1
    for a, b in zip(opt.inner.state["v"] if opt.inner else [], saved):
        same(a, b, "a state loaded after a failed save")
    m9 = hostile_files(opt, ck)
    # files of several CRC blocks (4 MiB): a bit flipped in the second block
    big = ShardedOptimizer(fo.OnnxAdam, [np.ones(2_200_000, np.float32)], lr=1e-3)
    big.step([np.full(2_200_000, 0.5 + RANK, np.float32)])
    bk = ck + "-big"
    big.save(bk)
    before = [a.copy() for a in big.inner.state["h"]]
    big.step([np.full(2_200_000, 3.0, np.float32)])
    big.load(bk)
    for a, b in zip(big.inner.state["h"], before):
        same(a, b, "a state of a multi-block checkpoint")
    if RANK == 0:
        with open(os.path.join(bk, "LATEST")) as fh:
            rf = os.path.join(bk, fh.read().strip(), "rank-00000.bin")
        with open(rf, "r+b") as fh:
            fh.seek(5 << 20)
            b = fh.read(1)
            fh.seek(5 << 20)
            fh.write(bytes([b[0] ^ 4]))
    COMM.Barrier()
    m9 += " | " + expect(CheckpointError, lambda: big.load(bk), "block 1 fails its CRC")
    return m9, m10


def case_errors():
    params = model()
    bad = [p.copy() for p in params]
    if RANK == SIZE - 1:
        bad[5] = np.zeros((9, 5), np.float64)
    before = [p.copy() for p in bad]
    m1 = expect(ValueError, lambda: ShardedOptimizer(fo.OnnxAdam, bad, lr=1e-3), "params[5]")
    m2 = expect(ValueError, lambda: ShardedOptimizer(fo.OnnxAdam, params[:-1] if RANK == 1
                                                     else params, lr=1e-3), "parameters")
    m3 = expect(ValueError, lambda: ShardedOptimizer(fo.OnnxAdam, params, lr=1e-3 if RANK else 0.1),
                "'lr'")
    m4 = expect(ValueError, lambda: ShardedOptimizer(fo.OnnxAdam, params, lr=-1.0 if RANK == 1
                                                     else 1e-3), "lr")
    for a, b in zip(bad, before):
        same(a, b, "a parameter after a rejected construction")
    opt = ShardedOptimizer(fo.OnnxAdam, params, lr=1e-3, bucket_bytes=64)
    snap = [p.copy() for p in opt.params]
    good = grads_of(RANK, 0, opt.params)
    wrong = list(good)
    if RANK == 1:
        wrong[3] = np.zeros(4, np.float32)
    m5 = expect(ValueError, lambda: opt.step(wrong), "grads[3]")
    wrong = list(good)
    if RANK == 0:
        wrong[6] = wrong[6].astype(np.float64)
    m6 = expect(TypeError, lambda: opt.step(wrong), "grads[6]")
    m7 = expect(ValueError, lambda: opt.step(good, grad_scale=2.0 if RANK else 4.0), "grad_scale")
    m8 = expect(ValueError, lambda: opt.step(good[:-1] if RANK == 1 else good), "entries")
    def sched(step):    # user code that fails on one rank only
        if RANK == SIZE - 1:
            raise ZeroDivisionError("the schedule failed")
        return 1e-3
    sopt = ShardedOptimizer(fo.OnnxAdam, [p.copy() for p in params], schedule=sched)
    m11 = expect(ZeroDivisionError, lambda: sopt.step(good), "the schedule failed")
    for a, b in zip(opt.params, snap):
        same(a, b, "a parameter after a rejected step")
    assert opt.steps == 0
    opt.step(good)      # the ranks are still in step
    m9, m10 = checkpoint_faults(opt, sys.argv[2])
    msgs = COMM.allgather([m1, m2, m3, m4, m5, m6, m7, m8, m9, m10, m11])
    assert all(m == msgs[0] for m in msgs), "the ranks raised different messages"
    if os.environ.get("SHOW_MESSAGES") and RANK == 0:
        print("\n".join(msgs[0]))


def main():
    case = sys.argv[1]
    if case == "equiv":
        case_equiv()
    elif case == "resume":
        case_resume(sys.argv[2], sys.argv[3])
    elif case == "errors":
        case_errors()
    print(json.dumps({"rank": RANK, "size": SIZE, "case": case, "ok": True}), flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001 - an exception on one rank must not leave the others waiting
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        COMM.Abort(1)
