"""Run under mpiexec by tests/test_distributed_agreement.py:
``python distributed_agreement_worker.py CASE DIR``.

Each case makes the ranks disagree (hyperparameters, checkpoints), or hands
``ShardedOptimizer.load`` a hostile or incomplete checkpoint, and checks that
every rank raises the same documented error with nothing changed, or (for
global-norm clipping) that the documented bit-identity holds. Prints one JSON
line per rank on success, like tests/distributed_worker.py.
"""
import json
import os
import sys

import numpy as np
from distributed_worker import COMM, RANK, SIZE, averaged, expect, grads_of, model, same

import fastopt.optim as fo
from fastopt.distributed import CheckpointError, ShardedOptimizer

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None


def snapshot(opt):
    state = ({k: [a.copy() for a in v] for k, v in opt.inner.state.items()}
             if opt.inner is not None else {})
    return [p.copy() for p in opt.params], state, opt.steps, [dict(g) for g in
                                                              opt.param_groups]


def unchanged(opt, snap, what):
    params, state, steps, _ = snap
    for i, (a, b) in enumerate(zip(opt.params, params)):
        same(a, b, f"{what}: params[{i}]")
    for k, arrays in state.items():
        for a, b in zip(opt.inner.state[k], arrays):
            same(a, b, f"{what}: state {k}")
    assert opt.steps == steps, (what, opt.steps, steps)


def agreed(exc_type, fn, needle, opt, what):
    """fn raises exc_type (message holding needle) on every rank, the same
    message everywhere, and opt is unchanged."""
    snap = snapshot(opt)
    msg = expect(exc_type, fn, needle)
    msgs = COMM.allgather(msg)
    assert all(m == msgs[0] for m in msgs), f"{what}: the ranks raised {msgs}"
    unchanged(opt, snap, what)
    return msg


def case_hyper(d):
    """Hyperparameters edited on one rank only, or a schedule whose value
    differs between the ranks: the step raises on every rank."""
    opt = ShardedOptimizer(fo.OnnxAdam, model(), lr=1e-3, bucket_bytes=64)
    g = grads_of(RANK, 0, opt.params)
    opt.step(g)
    for key, value in (("lr", 0.5), ("beta", 0.8), ("norm_coefficient", 0.1)):
        old = opt.param_groups[0][key]
        if RANK == SIZE - 1:
            opt.param_groups[0][key] = value
        agreed(ValueError, lambda: opt.step(g), "between the ranks", opt, key)
        opt.param_groups[0][key] = old
        opt.step(g)             # agreed again: the ranks are in step
    sched = ShardedOptimizer(fo.OnnxAdam, model(), schedule=lambda s: 1e-3 * (1 + RANK),
                             bucket_bytes=64)
    agreed(ValueError, lambda: sched.step(g), "learning rate", sched, "schedule")


def case_options(d):
    """An optimizer option that differs between the ranks (the states'
    dtype, master weights) is refused at construction on every rank, naming
    it: each rank's states and cuts would follow its own."""
    def params():
        return [np.ones(5000, np.float32), np.ones(300, np.float32)]
    for key, mine in (("state_dtype", "int8-blockwise"), ("master_weights", True),
                      ("seed", 7)):
        kw = {key: mine} if RANK == SIZE - 1 else {}
        msg = expect(ValueError, lambda kw=kw: ShardedOptimizer(fo.AdamW, params(), lr=1e-3,
                                                                **kw), f"{key} is ")
        msgs = COMM.allgather(msg)
        assert all(m == msgs[0] for m in msgs), f"{key}: the ranks raised {msgs}"
    # the same options spelled apart, and n_threads, which may differ
    kw = {"master_weights": False, "seed": np.uint64(0), "lr": 1} if RANK == SIZE - 1 else {}
    ShardedOptimizer(fo.AdamW, params(), **{"lr": 1.0, **kw}, n_threads=1 + RANK)


def case_versions(d):
    """Ranks given different checkpoints (directories or plain files) fail
    together; the same checkpoint loads."""
    opt = ShardedOptimizer(fo.OnnxAdam, model(), lr=1e-3, bucket_bytes=64)
    for s in range(3):
        opt.step(grads_of(RANK, s, opt.params))
        opt.save(os.path.join(d, f"v{s}"))
        opt.consolidate(os.path.join(d, f"v{s}.npz"))
    for kind in ("", ".npz"):
        mine = os.path.join(d, f"v{0 if RANK == 0 else 2}{kind}")
        agreed(CheckpointError, lambda m=mine: opt.load(m), "different checkpoints", opt,
               f"different checkpoints {kind}")
    opt.load(os.path.join(d, "v1"))
    assert opt.steps == 2
    opt.load(os.path.join(d, "v0.npz"))
    assert opt.steps == 1


def case_plain_bomb(d):
    """A small plain checkpoint whose header entry declares 64 MiB is
    rejected before the data is read: peak RSS does not grow by it."""
    opt = ShardedOptimizer(fo.OnnxAdam, model(), lr=1e-3, bucket_bytes=64)
    opt.step(grads_of(RANK, 0, opt.params))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if resource else 0
    agreed(CheckpointError, lambda: opt.load(os.path.join(d, "bomb.npz")), "meta", opt,
           "a header bomb")
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if resource else 0) - before
    assert grown < 16 * 1024, f"rank {RANK}: peak RSS grew by {grown} KiB"


def case_missing(d):
    """A shard, meta.json, LATEST or the version directory missing: every
    rank raises CheckpointError."""
    opt = ShardedOptimizer(fo.OnnxAdam, model(), lr=1e-3, bucket_bytes=64)
    opt.step(grads_of(RANK, 0, opt.params))
    ck = os.path.join(d, "ck")
    opt.save(ck)
    with open(os.path.join(ck, "LATEST")) as fh:
        vdir = os.path.join(ck, fh.read().strip())
    for victim in ("rank-00001.bin", "meta.json", "../LATEST", ""):
        path = os.path.normpath(os.path.join(vdir, victim))
        COMM.Barrier()
        if RANK == 0:
            os.rename(path, path + ".away")
        COMM.Barrier()
        agreed(CheckpointError, lambda: opt.load(ck), "", opt, f"missing {victim}")
        COMM.Barrier()
        if RANK == 0:
            os.rename(path + ".away", path)
        COMM.Barrier()
    opt.load(ck)


def case_error_types(d):
    """An error type outside the agreement table keeps its type on every
    rank (FileExistsError); one that cannot be rebuilt from a message
    becomes its nearest rebuildable base class."""
    from fastopt.distributed._comm import raise_agreed
    opt = ShardedOptimizer(fo.OnnxAdam, model(), lr=1e-3, bucket_bytes=64)
    for err, kind in ((FileExistsError(17, "it exists"), FileExistsError),
                      (IsADirectoryError("a directory"), IsADirectoryError),
                      (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), ValueError)):
        mine = err if RANK == SIZE - 1 else None
        agreed(kind, lambda m=mine: raise_agreed(COMM, m), f"rank {SIZE - 1}", opt, kind.__name__)


def case_fifo(d):
    """LATEST, meta.json or a shard that is a FIFO, and a FIFO given as the
    path: every rank raises CheckpointError at once (no rank blocks)."""
    opt = ShardedOptimizer(fo.OnnxAdam, model(), lr=1e-3, bucket_bytes=64)
    opt.step(grads_of(RANK, 0, opt.params))
    ck = os.path.join(d, "ck")
    opt.save(ck)
    with open(os.path.join(ck, "LATEST")) as fh:
        vdir = os.path.join(ck, fh.read().strip())
    for path in (os.path.join(ck, "LATEST"), os.path.join(vdir, "meta.json"),
                 os.path.join(vdir, "rank-00000.bin"), os.path.join(d, "fifo.npz")):
        COMM.Barrier()
        if RANK == 0:
            if os.path.exists(path):
                os.rename(path, path + ".away")
            os.mkfifo(path)
        COMM.Barrier()
        target = path if path.endswith(".npz") else ck
        agreed(CheckpointError, lambda t=target: opt.load(t), "not a regular file", opt, path)
        COMM.Barrier()
        if RANK == 0:
            os.unlink(path)
            if os.path.exists(path + ".away"):
                os.rename(path + ".away", path)
        COMM.Barrier()
    opt.load(ck)


def case_clip(d):
    """With max_grad_norm, the norm is the same on every rank, and the
    update is bit-identical to fastopt.optim's step on the averaged
    gradients multiplied by max_grad_norm / (last_grad_norm + 1e-6) in
    their dtype (docs/distributed.md)."""
    for seed in range(6):
        opt = ShardedOptimizer(fo.OnnxAdam, model(seed), lr=1e-2, bucket_bytes=64)
        single = fo.OnnxAdam(model(seed), lr=1e-2)
        for s in range(3):
            opt.step(grads_of(RANK, s, opt.params), max_grad_norm=0.5)
            norms = COMM.allgather(opt.last_grad_norm)
            assert all(x == norms[0] for x in norms), norms
            coef = 0.5 / (norms[0] + 1e-6)
            avg = averaged(s, single.params, SIZE)
            single.step([g * g.dtype.type(coef) for g in avg])
            for i, (a, b) in enumerate(zip(opt.params, single.params)):
                same(a, b, f"seed {seed} step {s}: params[{i}]")


def main():
    case, d = sys.argv[1], sys.argv[2]
    globals()["case_" + case](d)
    print(json.dumps({"rank": RANK, "size": SIZE, "case": case, "ok": True}), flush=True)


if __name__ == "__main__":
    try:
        main()
    except BaseException:  # noqa: BLE001 - an exception on one rank must not leave the others waiting
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        COMM.Abort(1)
