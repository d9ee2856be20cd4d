"""ShardedOptimizer's ranks cannot silently disagree: hyperparameters and
checkpoints compared across ranks, hostile or incomplete checkpoints refused
on every rank with the documented error, no rank blocked on a FIFO, and the
documented bit-identity of global-norm clipping. Each test runs one case of
tests/distributed_agreement_worker.py under mpiexec (see test_distributed.py)."""
import json
import os
import re
import signal
import subprocess
import sys

import pytest
from npz_hostile import bomb_member, raw_zip

import fastopt

pytest.importorskip("mpi4py")
from test_distributed import MPIEXEC  # noqa: E402 - after the skip

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "distributed_agreement_worker.py")


def mpirun(n, case, tmp_path, timeout=60):
    here = os.path.dirname(os.path.dirname(os.path.abspath(fastopt.__file__)))
    env = dict(os.environ, PYTHONPATH=here + os.pathsep + os.path.dirname(WORKER),
               OMP_NUM_THREADS="1")
    proc = subprocess.Popen([MPIEXEC, "-n", str(n), sys.executable, WORKER, case,
                             str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)     # the launcher and every rank it started
        out, err = proc.communicate()
        pytest.fail(f"{case}: the ranks hung (killed after {timeout} s)\n{out[-2000:]}"
                    f"\n{err[-2000:]}")
    reports = [json.loads(m) for m in re.findall(r"\{[^{}]*\}", out)]
    detail = f"stdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert proc.returncode == 0, detail
    assert sorted(r["rank"] for r in reports) == list(range(n)), detail
    assert all(r["size"] == n and r["ok"] for r in reports), detail


def test_hyperparameters_or_schedules_that_differ_between_ranks_raise_everywhere(tmp_path):
    mpirun(2, "hyper", tmp_path)


def test_optimizer_options_that_differ_between_ranks_raise_everywhere(tmp_path):
    mpirun(2, "options", tmp_path)


def test_ranks_given_different_checkpoints_fail_together(tmp_path):
    mpirun(2, "versions", tmp_path)


def test_plain_checkpoint_header_bomb_is_refused_before_allocating(tmp_path):
    (tmp_path / "bomb.npz").write_bytes(raw_zip([bomb_member(
        "meta.npy", shape=(), descr=f"<U{16 << 20}", n_bytes=64 << 20)]))
    assert (tmp_path / "bomb.npz").stat().st_size < 256 << 10
    mpirun(2, "plain_bomb", tmp_path)


def test_missing_checkpoint_files_raise_checkpoint_error_everywhere(tmp_path):
    mpirun(2, "missing", tmp_path)


def test_error_types_outside_the_table_keep_their_type_on_every_rank(tmp_path):
    mpirun(2, "error_types", tmp_path)


def test_fifo_in_a_checkpoint_is_refused_without_blocking(tmp_path):
    mpirun(2, "fifo", tmp_path, timeout=30)


@pytest.mark.parametrize("n", [2, 3])
def test_clipped_step_is_bit_identical_given_the_agreed_norm(n, tmp_path):
    mpirun(n, "clip", tmp_path)
