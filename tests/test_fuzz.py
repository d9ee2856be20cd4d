"""Run the API fuzzer (tests/fuzz_api.py) for a fixed number of inputs.

- in process, on seeded pseudo-random inputs (needs nothing extra);
- coverage-guided with atheris, in a subprocess (so a crash or a hang is a
  failed test, not a dead test run), with a fixed seed.

FASTOPT_FUZZ_RUNS scales both (default 4000 atheris inputs); for a long
campaign run the harness directly (see its docstring).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import fastopt

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS = os.path.join(HERE, "fuzz_api.py")
RUNS = int(os.environ.get("FASTOPT_FUZZ_RUNS", "4000"))


def test_fuzz_random_inputs_in_process():
    import random

    import fuzz_api

    rnd = random.Random(20240607)
    for _ in range(max(200, RUNS // 4)):
        data = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 200)))
        fuzz_api.TestOneInput(data)


def test_fuzz_with_atheris(tmp_path):
    pytest.importorskip("atheris")
    env = dict(os.environ)
    under_asan = "asan" in env.get("LD_PRELOAD", "")
    # the child imports the very fastopt this test run imports
    root = os.path.dirname(os.path.dirname(os.path.abspath(fastopt.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in
                                                  [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, HARNESS, f"-atheris_runs={RUNS}", "-seed=12345",
           "-timeout=60", "-max_len=512", "-print_final_stats=1",
           f"-artifact_prefix={tmp_path}{os.sep}"]
    if under_asan:
        # atheris' libFuzzer cannot run under GCC's preloaded ASan runtime
        # (.ci/sanitize.sh): feed the same harness seeded random inputs instead
        cmd = [sys.executable, HARNESS, "--random", str(RUNS), "--seed", "12345"]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"fuzzer found a problem (exit {proc.returncode}):\n{out[-6000:]}"
    done = f"{RUNS} random inputs, no finding" if under_asan else f"Done {RUNS} "
    assert done in out, out[-3000:]
