"""Rejected inputs: arrays edited in place between steps, NumPy-integer
thread counts, fastopt.torch states re-typed through ``.data``, and
ShardedOptimizer checkpoints (at one rank, in this process).

Part of the catalogue of tests/bad_inputs_cases.py (tests/test_bad_inputs.py
checks each case and renders tests/BAD_INPUTS.md). A case whose optional
dependency (torch, mpi4py) is missing is skipped by the test, never dropped
from the document. ``ELSEWHERE`` lists the rejections the catalogue cannot
hold (several ranks, a second thread, the command line), each with the test
that covers it; the document prints them after the table.
"""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from bad_inputs_cases import Case, arr
from bad_inputs_hostile import CKPT_DIR, TOKEN, CheckpointError
from npz_hostile import bomb_member, raw_zip

F32, F64 = np.float32, np.float64


def _grads():
    return [arr(fill=0.5), arr((2, 3), F64, 0.5)]


def _stepped(cls="OnnxMomentum", edit=None, groups=None):
    """Arguments for ``cls.step`` on an optimizer over a (3,) float32 and a
    (2, 3) float64 parameter that has taken two steps (the second through
    the prepared step), then had ``edit(opt)`` done to it."""
    def build():
        from fastopt import optim

        params = [arr(), arr((2, 3), F64)]
        opt = getattr(optim, cls)(groups(params) if groups else params, lr=0.1)
        for _ in range(2):
            opt.step(_grads())
        edit(opt)
        return (opt, _grads()), {}
    return build


def _reshape_param(opt):
    opt.params[1].shape = (3, 2)


def _reshape_state(opt):
    opt.state["v"][1].shape = (3, 2)


def _lr_array_nan(opt):
    opt.param_groups[0]["lr"] = np.array([0.1])
    opt.step(_grads())
    opt.param_groups[0]["lr"][0] = np.nan


def _read_only_after_agc(opt):
    opt.params[1].flags.writeable = False


def _agc_first(params):
    return [{"params": params[:1], "clipping": 0.1}, {"params": params[1:]}]


def _call(*args, **kw):
    return lambda: (args, kw)


def _torch_retyped(route):
    """Arguments for fastopt.torch.AdamW.step after two steps, with the
    second parameter's exp_avg_sq viewed as int64 through .data."""
    def build():
        torch = pytest.importorskip("torch")
        import fastopt.torch as ft

        ps = [torch.nn.Parameter(torch.ones(3)),
              torch.nn.Parameter(torch.ones(2, 3, dtype=torch.float64))]
        opt = ft.AdamW(ps, lr=0.1)
        for _ in range(2):
            for p in ps:
                p.grad = torch.full_like(p, 0.5)
            opt.step()
        st = opt.state[ps[1]]
        st["exp_avg_sq"].data = st["exp_avg_sq"].data.view(torch.int64)
        if route == "full":
            opt._prep = None            # the next step takes the fully checked route
        return (opt,), {}
    return build


def _sharded(name, spoil):
    """Arguments for ShardedOptimizer.load (one rank, MPI.COMM_SELF) of a
    checkpoint directory saved by it, its version renamed to a fixed name,
    then spoiled by ``spoil(directory, version directory)``."""
    def build():
        pytest.importorskip("mpi4py")
        from mpi4py import MPI

        from fastopt import optim
        from fastopt.distributed import ShardedOptimizer

        def make():
            opt = ShardedOptimizer(optim.OnnxMomentum, [arr(), arr((2, 3), F64)], lr=0.1,
                                   comm=MPI.COMM_SELF)
            opt.step(_grads())
            return opt
        path = os.path.join(CKPT_DIR, name)
        shutil.rmtree(path, ignore_errors=True)
        if spoil is not None:
            make().save(path)
            with open(os.path.join(path, "LATEST")) as fh:
                saved = os.path.join(path, fh.read().strip())
            version = os.path.join(path, "ckpt-00000001-00000000")
            os.rename(saved, version)
            with open(os.path.join(path, "LATEST"), "w") as fh:
                fh.write("ckpt-00000001-00000000\n")
            spoil(path, version)
        else:                           # a plain checkpoint whose header is a bomb
            with open(path, "wb") as fh:
                fh.write(raw_zip([bomb_member("meta.npy", shape=(), descr=f"<U{16 << 20}",
                                              n_bytes=64 << 20)]))
        return (make(), path), {}
    return build


def _remove_shard(path, version):
    os.remove(os.path.join(version, "rank-00000.bin"))


def _fifo_meta(path, version):
    if not hasattr(os, "mkfifo"):   # pragma: no cover - not on Windows
        pytest.skip("no FIFOs here")
    os.remove(os.path.join(version, "meta.json"))
    os.mkfifo(os.path.join(version, "meta.json"))


def _fifo_latest(path, version):
    if not hasattr(os, "mkfifo"):   # pragma: no cover - not on Windows
        pytest.skip("no FIFOs here")
    os.remove(os.path.join(path, "LATEST"))
    os.mkfifo(os.path.join(path, "LATEST"))


S = "fastopt.optim.OnnxMomentum.step: "
NTH = ("n_threads must be a positive int up to 1024, -1 (all cores) or None (the default), "
       "got ")
SL = "fastopt.distributed.ShardedOptimizer.load: "
VERSION = TOKEN + "/{}/ckpt-00000001-00000000/"

GUARD_CASES = [
    Case("optim.OnnxMomentum.step", "params[1] reshaped in place after a step (gradients "
         "of its old shape)", _stepped(edit=_reshape_param), ValueError,
         S + "grads[1] has shape (2, 3) but params[1] has shape (3, 2); the gradient must "
             "have its parameter's shape (or build the optimizer with broadcast_grads=True "
             "to broadcast it)"),
    Case("optim.OnnxMomentum.step", "the state of params[1] reshaped in place after a step",
         _stepped(edit=_reshape_state), ValueError,
         S + "state 'v' of params[1] has shape (3, 2) but params[1] has shape (2, 3); the "
             "state must have its parameter's shape"),
    Case("optim.OnnxMomentum.step", "an lr array in param_groups set to NaN in place after "
         "a step", _stepped(edit=_lr_array_nan), ValueError,
         S + "param_groups[0]['lr'] must be a finite number >= 0, got nan"),
    Case("optim.OnnxMomentum.step", "params[1] made read-only, in the group after one with "
         "AGC clipping", _stepped(edit=_read_only_after_agc, groups=_agc_first), ValueError,
         S + "params[1] is read-only; it is updated in place"),
    Case("adamw", "n_threads = np.int64(0) (a NumPy integer is checked as an int)",
         _call([arr()], [arr()], [arr()], [arr()], step=1, n_threads=np.int64(0)),
         ValueError, "fastopt.adamw: " + NTH + "0"),
    Case("global_norm", "n_threads = np.int64(2000)",
         _call([arr()], n_threads=np.int64(2000)), ValueError,
         "fastopt.global_norm: " + NTH + "2000"),
    Case("optim.OnnxAdam", "n_threads = np.int64(0)",
         _call([arr()], lr=0.1, n_threads=np.int64(0)), ValueError,
         "fastopt.optim.OnnxAdam: " + NTH + "0"),
    Case("torch.AdamW.step", "a state re-typed in place through .data (float64 viewed as "
         "int64), prepared step", _torch_retyped("prepared"), TypeError,
         "fastopt.torch.AdamW.step: state['exp_avg_sq'] of param_groups[0]['params'][1] has "
         "dtype torch.int64 but the parameter has torch.float64"),
    Case("torch.AdamW.step", "a state re-typed in place through .data (float64 viewed as "
         "int64), full step", _torch_retyped("full"), TypeError,
         "fastopt.torch.AdamW.step: state['exp_avg_sq'] of param_groups[0]['params'][1] has "
         "dtype torch.int64 but the parameter has torch.float64"),
    Case("distributed.ShardedOptimizer.load", "a checkpoint directory without its rank file",
         _sharded("no-shard", _remove_shard), CheckpointError,
         SL + "the checkpoint has no '" + VERSION.format("no-shard") + "rank-00000.bin' (an "
              "incomplete or removed version)"),
    Case("distributed.ShardedOptimizer.load", "meta.json a FIFO (a load would wait forever)",
         _sharded("fifo-meta", _fifo_meta), CheckpointError,
         SL + "'" + VERSION.format("fifo-meta") + "meta.json' is not a regular file (a FIFO); "
              "a checkpoint holds regular files only"),
    Case("distributed.ShardedOptimizer.load", "LATEST a FIFO",
         _sharded("fifo-latest", _fifo_latest), CheckpointError,
         SL + "'" + TOKEN + "/fifo-latest/LATEST' is not a regular file (a FIFO); a "
              "checkpoint holds regular files only"),
    Case("distributed.ShardedOptimizer.load", "a plain .npz of 65 KiB whose header "
         "entry inflates to 64 MiB (a 16 Mi-character string)", _sharded("plain-bomb.npz", None),
         CheckpointError,
         SL + "the file's 'meta' entry declares shape () dtype <U16777216; it is not a "
              "fastopt.optim header"),
]

# Rejections the table cannot hold, and the test of each.
ELSEWHERE = [
    ("ShardedOptimizer.step with hyperparameters or schedules that differ between ranks",
     "the same ValueError on every rank, nothing written",
     "tests/test_distributed_agreement.py::"
     "test_hyperparameters_or_schedules_that_differ_between_ranks_raise_everywhere"),
    ("ShardedOptimizer.load of different checkpoints on different ranks (other paths, or "
     "LATEST switched by a save while they read)",
     "CheckpointError on every rank, nothing loaded",
     "tests/test_distributed_agreement.py::"
     "test_ranks_given_different_checkpoints_fail_together"),
    ("ShardedOptimizer.load of a missing shard, or meta.json / LATEST a FIFO, at 2 ranks",
     "CheckpointError on every rank, no rank blocked",
     "tests/test_distributed_agreement.py::"
     "test_missing_checkpoint_files_raise_checkpoint_error_everywhere, "
     "test_fifo_in_a_checkpoint_is_refused_without_blocking"),
    ("ShardedOptimizer.load of a plain .npz header bomb at 2 ranks",
     "CheckpointError on every rank before the bomb is allocated",
     "tests/test_distributed_agreement.py::"
     "test_plain_checkpoint_header_bomb_is_refused_before_allocating"),
    ("an error of a type outside the ranks' agreement table (e.g. FileExistsError) on one "
     "rank", "the same type on every rank",
     "tests/test_distributed_agreement.py::"
     "test_error_types_outside_the_table_keep_their_type_on_every_rank"),
    ("another thread making an array read-only or reshaping it during a call",
     "the documented ValueError, nothing half-written",
     "tests/test_hostile_threads_copies.py::test_writeable_flag_flipped_during_a_copying_call, "
     "test_reshape_during_a_copying_call; tests/test_hostile_threads.py::"
     "test_reshape_in_place_during_calls, test_writeable_flag_cleared_during_calls"),
    ("fastopt distributed-demo --batch 0, --epochs -1, --lr nan",
     "argparse's usage error on every rank (exit status 2)",
     "tests/test_cli.py::test_distributed_demo_refuses_bad_arguments_through_argparse"),
]

__all__ = ["ELSEWHERE", "GUARD_CASES"]
