"""Extensions that embed fastopt through its published C API, built here
against the fastopt these tests import (fastopt.get_include(), the shipped
fastopt/cython_api.pxd) with setuptools' compiler: a C extension, a Cython
module compiled as C and as C++, a C++ extension (plain C++ against the
Python C-API) and a pybind11 extension (pybind11 is in the test extras).
Each runs the step without the GIL and must give the bits of fastopt's
Python API, alone and from eight Python threads at once."""
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import threading

import numpy as np
import pytest

import fastopt
import fastopt.capi

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "capi_consumers", "build_consumers.py")
NAMES = ("_fo_consumer_c", "_fo_consumer_cy", "_fo_consumer_cy_cpp", "_fo_consumer_cpp",
         "_fo_consumer_pybind")
OPTIONAL = {"_fo_consumer_pybind": "pybind11"}
HYPER = dict(lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.01)


@pytest.fixture(scope="module")
def consumers(tmp_path_factory):
    pytest.importorskip("Cython")
    pytest.importorskip("setuptools")
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip("no C compiler (%s) to build the consumers with" % cc)
    out = tmp_path_factory.mktemp("capi_consumers")
    # the subprocess imports the very fastopt these tests import
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(fastopt.__file__)))]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    proc = subprocess.run([sys.executable, BUILD, str(out)], capture_output=True, text=True,
                          env=env, cwd=str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sys.path.insert(0, str(out))
    try:
        yield {name: importlib.import_module(name) for name in NAMES
               if name not in OPTIONAL or importlib.util.find_spec(OPTIONAL[name])}
    finally:
        sys.path.remove(str(out))


def _arrays(n, dtype, seed):
    rng = np.random.default_rng(seed)
    x, g = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    return [x, g, np.zeros_like(x), np.zeros_like(x)]


def _consumer_steps(mod, arrays, steps, typed, n_threads=1, grads=None):
    x, g, m, v = arrays
    code = 0 if x.dtype == np.float32 else 1
    for t in range(1, steps + 1):
        if grads is not None:
            g[...] = grads(t)
        rc, field = mod.adam(x.ctypes.data, g.ctypes.data, m.ctypes.data, v.ctypes.data,
                             x.size, code, HYPER["lr"], *HYPER["betas"], HYPER["eps"],
                             HYPER["weight_decay"], t, n_threads, typed)
        assert (rc, field) == (0, 0)


def _python_steps(arrays, steps, grads=None):
    x, g, m, v = arrays
    for t in range(1, steps + 1):
        if grads is not None:
            g[...] = grads(t)
        fastopt.adam(x, g, m, v, step=t, **HYPER)


def _same_bits(a, b):
    for p, q in zip(a, b):
        assert p.dtype == q.dtype and p.tobytes() == q.tobytes()


@pytest.mark.parametrize("typed", [0, 1], ids=["list", "typed"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", NAMES)
def test_consumer_step_equals_the_python_api(consumers, name, dtype, typed):
    if name not in consumers:
        pytest.skip("%s is not installed" % OPTIONAL[name])
    for n, n_threads in ((1, 1), (1027, 1), (300_001, 2)):
        mine, ref = _arrays(n, dtype, 5), _arrays(n, dtype, 5)
        _consumer_steps(consumers[name], mine, 3, typed, n_threads)
        _python_steps(ref, 3)
        _same_bits(mine, ref)


def test_consumers_see_this_version(consumers):
    m = fastopt.capi.manifest()
    for mod in consumers.values():
        assert mod.abi() == (m["abi_major"], m["abi_minor"], fastopt.__version__)


def test_a_newer_target_version_is_refused_at_import(consumers):
    minor = fastopt.capi.manifest()["abi_minor"]
    with pytest.raises(ImportError, match=rf"needs version 1\.99 .* has 1\.{minor}"):
        importlib.import_module("_fo_consumer_c_future")


def test_eight_threads_drive_the_consumers_at_once(consumers):
    """Eight Python threads over the consumers (list and typed calls), each on
    its own buffers; every result equals the same steps run serially."""
    names = sorted(consumers)
    # odd jobs: large enough for fastopt's own pool (n_threads=2) to join in
    jobs = [(names[k % len(names)], (k // len(names)) % 2, np.float32 if k % 2 else np.float64,
             300_000 + k if k % 2 else 20_000 + 999 * k) for k in range(8)]

    def grads(k):
        return lambda t: np.sin(np.arange(jobs[k][3]) * 0.01 * t + k)

    mine = [_arrays(n, dt, k) for k, (_, _, dt, n) in enumerate(jobs)]
    barrier, errors = threading.Barrier(len(jobs)), []

    def run(k):
        try:
            name, typed = jobs[k][:2]
            barrier.wait()
            _consumer_steps(consumers[name], mine[k], 25, typed, 1 + k % 2, grads=grads(k))
        except BaseException as exc:   # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    for k, (name, typed, dt, n) in enumerate(jobs):
        serial = _arrays(n, dt, k)
        _consumer_steps(consumers[name], serial, 25, typed, grads=grads(k))
        _same_bits(mine[k], serial)
        ref = _arrays(n, dt, k)
        _python_steps(ref, 25, grads=grads(k))
        _same_bits(mine[k], ref)
