"""ShardedOptimizer checkpoint directories under the structural fuzzer
(tests/fuzz_sharded_checkpoint.py), in a fresh process so its peak-RSS
oracle starts from a small baseline; and the header-size regression it
found (a meta.json beyond the size limit was read, 64 MiB, before it was
refused). FASTOPT_FUZZ_RUNS scales the run as for tests/test_fuzz.py."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import fastopt

pytest.importorskip("mpi4py")
HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = int(os.environ.get("FASTOPT_FUZZ_RUNS", "4000"))


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(fastopt.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root, HERE] + [p for p in [env.get("PYTHONPATH")]
                                                        if p])
    return env


def test_sharded_checkpoint_fuzz_random_inputs(tmp_path):
    n = max(300, RUNS // 8)
    env = dict(_env(), FASTOPT_FUZZ_ONLY="sharded")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_api.py"), "--random",
                           str(n), "--seed", "2028"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"fuzzer found a problem:\n{out[-6000:]}"
    assert f"{n} random inputs, no finding" in out, out[-3000:]


SPARSE_META = r"""
import os, resource, sys
import numpy as np
from mpi4py import MPI
from fastopt import optim
from fastopt.distributed import ShardedOptimizer
path = sys.argv[1]
opt = ShardedOptimizer(optim.OnnxMomentum, [np.zeros(10)], lr=0.1, comm=MPI.COMM_SELF)
opt.save(path)
with open(os.path.join(path, "LATEST")) as fh:
    meta = os.path.join(path, fh.read().strip(), "meta.json")
with open(meta, "r+b") as fh:
    fh.truncate((1 << 26) + 1)           # sparse: one byte over the limit, no disk used
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    opt.load(path)
except optim.CheckpointError as exc:
    print("rejected", exc)
print("growth_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_a_meta_json_beyond_the_size_limit_is_refused_unread(tmp_path):
    pytest.importorskip("resource")
    proc = subprocess.run([sys.executable, "-c", SPARSE_META, str(tmp_path / "ck")],
                          env=_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "meta.json' is larger than 67108864 bytes" in proc.stdout, proc.stdout
    growth = int(proc.stdout.split("growth_kib")[1])
    assert growth < 16 * 1024, proc.stdout       # KiB; reading it cost 64 MiB
