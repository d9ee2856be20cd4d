"""Benchmark fixtures: the C ceiling probe, compiled here on its own.

The probe (src_c/ceiling.c) is built by this file with the machine's C
compiler, -O3 -fopenmp -march=native, independently of how fastopt was
built, and loaded with ctypes. If no compiler is available the ceiling
benchmarks are skipped (the others still run).
"""
import ctypes
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _compile_probe():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    cc = cc.split()[0]
    if shutil.which(cc) is None:
        return None, f"no C compiler ({cc})"
    out_dir = tempfile.mkdtemp(prefix="fastopt-ceiling-")
    lib = os.path.join(out_dir, "ceiling.so")
    base = [cc, "-O3", "-fPIC", "-shared", os.path.join(HERE, os.pardir, "src_c", "ceiling.c"), "-o", lib]
    for extra in (["-fopenmp", "-march=native"], ["-fopenmp"], []):
        r = subprocess.run(base + extra, capture_output=True, text=True)
        if r.returncode == 0:
            return ctypes.CDLL(lib), " ".join(extra) or "serial"
    return None, r.stderr.strip()[:500]


@pytest.fixture(scope="session")
def ceiling():
    lib, info = _compile_probe()
    if lib is None:
        pytest.skip(f"ceiling probe not built: {info}")
    sys.stderr.write(f"\n[bench] ceiling probe built with {info}\n")
    return lib
