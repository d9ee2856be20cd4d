"""Benchmark fixtures: the C ceiling probe, and side-by-side ratio timing.

The probe (src_c/ceiling.c) is built by this file with the machine's C
compiler, -O3 -fopenmp -march=native, independently of how fastopt was
built, and loaded with ctypes. If no compiler is available the ceiling
benchmarks are skipped (the others still run).

Ratios that survive a change of machine
---------------------------------------------------------
pytest-benchmark times every implementation in its own test, minutes apart
on a large run. On a shared machine the load changes in between, so the
quotient of two such medians mixes the code's speed with the neighbours'.
Instead, one row per comparison (the fastopt row of each group) times its
rivals itself with the ``side_by_side`` fixture:

- the implementations run interleaved, one sample of each per repetition,
  in a rotating order (no one always runs right after another), so a burst
  of load hits all of them alike;
- a call shorter than 2 ms gets one untimed warm-up call before its sample
  (as in pytest-benchmark's back-to-back rounds, the data is in cache when
  it fits), and calls shorter than 50 us are repeated within one sample;
- each ratio is the median over repetitions of the per-repetition quotient
  (paired samples taken a few milliseconds apart), and each time's p50 and
  p99 are stored next to it.

Why the median of paired quotients rather than the quotient of the two
medians, p10s or minimums (all four computed from the same samples on
pairs of runs of unchanged code under load): for fastopt / ceiling their
run-to-run p90 was 17.4% (paired), 17.5% (medians), 17.6% (p10s), 29%
(minimums); over all ratios 41%, 47%, 33%, 38%; on an earlier pair the
paired form was best throughout (p90 38% against 43-51%). No form wins
everywhere; the paired one is never the worst and is the one that cancels
load common to both sides. With 2 threads on a busy 2-core machine every
OpenMP call can wait a scheduler tick for a descheduled thread, so the
baseline was recorded with OMP_NUM_THREADS=1.

Everything goes into the row's ``extra_info`` (so ``--benchmark-json`` and
``--benchmark-autosave`` keep it), under ``side_by_side``::

    {"subject": ["fastopt"], "reps": 31,
     "times": {"fastopt": {"min": s, "p10": s, "p50": s, "p99": s}, ...},
     "ratios": {"fastopt/ceiling": 1.02, "numpy/fastopt": 11.3, ...}}

``subject`` lists the implementations that are fastopt's own, so that
bench/compare.py can tell "slower" from "faster". The budget per row is
``--side-by-side-time`` seconds (default 1.0) with 7 to 201 repetitions.
FASTOPT_BENCH_GAP=seconds sleeps before each turn (default 0): meant for
another OpenMP pool (torch's) still spinning after its call; a 5 ms trial
here gave worse multi-threaded timings, confounded by load that began at
the same time, so it is off.
With ``--benchmark-disable`` (the CI smoke run) one repetition runs, which
exercises the code and keeps the smoke run short.

A session hook adds a machine description (CPU model from /proc/cpuinfo,
cores, python/numpy/torch versions) to the saved JSON under
``fastopt_machine``.
"""
import atexit
import ctypes
import math
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WARM_BELOW = 2e-3        # seconds: shorter calls get an untimed warm-up call
SAMPLE_MIN = 50e-6       # seconds: shorter calls are repeated within a sample
MIN_REPS, MAX_REPS = 7, 201
GAP = float(os.environ.get("FASTOPT_BENCH_GAP", "0"))  # sleep before each turn (s)


def pytest_addoption(parser):
    parser.addoption("--side-by-side-time", type=float, default=1.0,
                     help="seconds per fastopt row for the interleaved ratio timing")


def _compile_probe():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    cc = cc.split()[0]
    if shutil.which(cc) is None:
        return None, f"no C compiler ({cc})"
    out_dir = tempfile.mkdtemp(prefix="fastopt-ceiling-")
    atexit.register(shutil.rmtree, out_dir, True)     # (the loaded library stays mapped)
    lib = os.path.join(out_dir, "ceiling.so")
    base = [cc, "-O3", "-fPIC", "-shared",
            os.path.join(HERE, os.pardir, "src_c", "ceiling.c"), "-o", lib]
    for extra in (["-fopenmp", "-march=native"], ["-fopenmp"], []):
        r = subprocess.run(base + extra, capture_output=True, text=True, check=False)
        if r.returncode == 0:
            return ctypes.CDLL(lib), " ".join(extra) or "serial"
    return None, r.stderr.strip()[:500]


@pytest.fixture(scope="session")
def ceiling_lib():
    """The probe library, or None when it cannot be built (never skips)."""
    lib, info = _compile_probe()
    sys.stderr.write(f"\n[bench] ceiling probe: {info}\n")
    return lib


@pytest.fixture(scope="session")
def ceiling(ceiling_lib):
    if ceiling_lib is None:
        pytest.skip("ceiling probe not built (see the [bench] line)")
    return ceiling_lib


@pytest.fixture(scope="session")
def ceiling_probe(ceiling_lib):
    """``ceiling_probe(n, dtype, reads)``: a no-argument callable streaming an
    update's bytes over one buffer of n elements (reads 3: 3 read + 2 written;
    4: 4 + 3), on fastopt's thread count; None without the probe."""
    def make(n, dtype, reads):
        if ceiling_lib is None:
            return None
        import fastopt
        bufs = [np.ones(n, dtype) for _ in range(reads)]
        suffix = "f32" if np.dtype(dtype) == np.float32 else "f64"
        fn = getattr(ceiling_lib, f"fo_probe_{'4r3w' if reads == 4 else '3r2w'}_{suffix}")
        ptrs = [ctypes.c_void_p(b.ctypes.data) for b in bufs]
        nthreads = ctypes.c_int(fastopt.get_num_threads())

        def step(bufs=bufs):          # the default keeps the buffers alive
            fn(ctypes.c_int64(n), *ptrs, nthreads)
        return step
    return make


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "ratios: the rows that time their rivals side by side "
        "(select them alone with -m ratios)")


def _percentile(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def _once(fn, setup):
    if setup is not None:
        setup()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(impls, ratios, subject, budget, one_rep=False):
    """Time ``impls`` (name -> (fn, setup or None)) interleaved; return the
    ``side_by_side`` record (see the module docstring). ``ratios`` lists
    (numerator, denominator) name pairs."""
    names = list(impls)
    first = {k: _once(*impls[k]) for k in names}           # calibration + warm-up
    inner = {k: max(1, math.ceil(SAMPLE_MIN / max(first[k], 1e-9))) for k in names}
    if any(impls[k][1] is not None for k in names):
        inner = {k: 1 for k in names}                       # setup runs per call
    warm = {k: first[k] < WARM_BELOW for k in names}
    per_rep = sum(first[k] * (inner[k] + warm[k]) + GAP for k in names)
    reps = 1 if one_rep else int(min(MAX_REPS, max(MIN_REPS, budget / max(per_rep, 1e-9))))
    samples = {k: [] for k in names}
    for r in range(reps):
        for j in range(len(names)):
            k = names[(r + j) % len(names)]
            fn, setup = impls[k]
            time.sleep(GAP)         # let the previous one's idle threads stop spinning
            if warm[k]:
                _once(fn, setup)
            if setup is not None:
                samples[k].append(_once(fn, setup))
                continue
            t0 = time.perf_counter()
            for _ in range(inner[k]):
                fn()
            samples[k].append((time.perf_counter() - t0) / inner[k])
    out_ratios = {}
    for a, b in ratios:
        if a in samples and b in samples:
            q = [x / y for x, y in zip(samples[a], samples[b])]
            out_ratios[f"{a}/{b}"] = round(float(np.median(q)), 4)
    times = {k: {"min": min(v), "p10": _percentile(v, 10), "p50": _percentile(v, 50),
                 "p99": _percentile(v, 99)} for k, v in samples.items()}
    return {"subject": list(subject), "reps": reps, "times": times, "ratios": out_ratios}


@pytest.fixture
def side_by_side(request, benchmark):
    """``side_by_side(impls, ratios, subject)`` times the implementations
    interleaved and records the result in this row's extra_info."""
    budget = request.config.getoption("--side-by-side-time")

    def run(impls, ratios, subject):
        with np.errstate(all="ignore"):
            rec = measure(impls, ratios, subject, budget, one_rep=benchmark.disabled)
        benchmark.extra_info["side_by_side"] = rec
        return rec
    return run


# -- machine description in the saved JSON ------------------------------------

def machine_description():
    """CPU model, cores and library versions: what a baseline was taken on."""
    cpu = platform.processor() or platform.machine()
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu == (platform.processor() or
                                                             platform.machine()):
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    fl = line.split(":", 1)[1].split()
                    flags = " ".join(x for x in ("avx512f", "avx2", "fma") if x in fl)
    except OSError:
        pass
    desc = {"cpu": cpu, "isa": flags, "cores": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}
    try:
        import torch
        desc["torch"] = torch.__version__
        desc["torch_threads"] = torch.get_num_threads()
    except ImportError:
        desc["torch"] = None
    try:
        import fastopt
        desc["fastopt_threads"] = fastopt.get_num_threads()
    except (ImportError, AttributeError):
        pass
    try:
        with open("/proc/loadavg") as f:
            desc["loadavg_at_end"] = f.read().split()[:3]
    except OSError:
        pass
    return desc


def pytest_benchmark_update_json(config, benchmarks, output_json):
    output_json["fastopt_machine"] = machine_description()
