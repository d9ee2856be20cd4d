"""A ctypes harness for the C step driver (src_c/step.c): builds src_c into a
shared library with the extension's arithmetic flags and calls fo_step / fo_global_norm
/ fo_clip_grads on NumPy arrays. Used by tests/test_step_c.py until the
driver is wired into the extension, and kept as a second, Python-free
route to the C afterwards."""
import ctypes as ct
import glob
import math
import os
import shutil
import subprocess

import numpy as np

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src_c")
# The extension's arithmetic (no fast-math, no contraction into FMA), so the
# same bits, at -O2: step.c compiles several times faster than at -O3, and
# test_q8.py's comparison of this build with the extension checks that the
# bits do not depend on the optimization level.
CFLAGS = ["-O2", "-fno-math-errno", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC"]

RULES = {"momentum": 0, "adagrad": 1, "adam": 2, "sgd_torch": 3,
         "adagrad_torch": 4, "adam_torch": 5, "adamw_torch": 6}
NESTEROV, AMSGRAD, MAXIMIZE = 1, 2, 4
CLIPS = {None: 0, "torch": 1, "optax": 2}


class Group(ct.Structure):
    _fields_ = [("rule", ct.c_int32), ("flags", ct.c_int32), ("t", ct.c_int64),
                ("lr", ct.c_double), ("alpha", ct.c_double), ("beta", ct.c_double),
                ("eps", ct.c_double), ("decay", ct.c_double),
                ("decay_post", ct.c_double), ("lr_decay", ct.c_double),
                ("extra", ct.c_double * 5)]     # FO_STEP_EXTRA


class Tensor(ct.Structure):
    _fields_ = [("x", ct.c_void_p), ("g", ct.c_void_p), ("s1", ct.c_void_p),
                ("s2", ct.c_void_p), ("s3", ct.c_void_p), ("w", ct.c_void_p),
                ("n", ct.c_int64), ("dtype", ct.c_int32), ("group", ct.c_int32),
                ("gdtype", ct.c_int32), ("wdtype", ct.c_int32), ("sdtype", ct.c_int32),
                ("key", ct.c_uint64),
                ("absmax", ct.c_void_p * 3)]    # 8-bit states' (NULL: none)


def tensor(x, g, states, j, w=None, key=0):
    """The record of parameter x with gradient g (its own dtype), states
    (up to three, None where absent; of the first one's dtype), group j,
    copy w and stochastic rounding key."""
    s = (tuple(states) + (None, None, None))[:3]
    first = next((a for a in s if a is not None), x)
    return Tensor(_ptr(x), _ptr(g), _ptr(s[0]), _ptr(s[1]), _ptr(s[2]), _ptr(w), x.size,
                  _dt(x), j, _dt(g if g is not None else x), 0 if w is None else _dt(w),
                  _dt(first), key)


class Guard(ct.Structure):
    """fo_step_guard: words w0, w1 must hold want0, want1; *flags every bit
    of mask (a None address is not checked)."""
    _fields_ = [("w0", ct.c_void_p), ("w1", ct.c_void_p), ("want0", ct.c_void_p),
                ("want1", ct.c_void_p), ("flags", ct.c_void_p), ("mask", ct.c_int32),
                ("pad", ct.c_int32)]


class Opts(ct.Structure):
    _fields_ = [("grad_scale", ct.c_double), ("max_norm", ct.c_double),
                ("clip_value", ct.c_double), ("clip", ct.c_int32),
                ("norm_type", ct.c_int32), ("check_finite", ct.c_int32),
                ("measure", ct.c_int32), ("norm", ct.c_double),
                ("guards", ct.POINTER(Guard)), ("guards_per_tensor", ct.c_int64),
                ("trust_out", ct.c_void_p), ("trust_in", ct.c_void_p),
                ("trust_len", ct.c_int64)]


class Result(ct.Structure):
    _fields_ = [("norm", ct.c_double), ("finite", ct.c_int32), ("applied", ct.c_int32)]


def build(outdir):
    """Compile the C library (every src_c/*.c, as setup.py does) into outdir;
    return the loaded library."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    so = os.path.join(outdir, "libfo_step.so")
    # capi.c (the published C API) includes the header setup.py generates; the
    # core it wraps is all here, and the C API has tests of its own
    sources = sorted(p for p in glob.glob(os.path.join(SRC, "*.c"))
                     if os.path.basename(p) != "capi.c")
    subprocess.run([cc] + CFLAGS + ["-o", so] + sources + ["-lm", "-lpthread"], check=True)
    lib = ct.CDLL(so)
    lib.fo_step.argtypes = [ct.POINTER(Tensor), ct.c_int64, ct.POINTER(Group), ct.c_int64,
                            ct.POINTER(Opts), ct.POINTER(Result), ct.c_int]
    lib.fo_global_norm.argtypes = [ct.POINTER(ct.c_void_p), ct.POINTER(ct.c_int64),
                                   ct.POINTER(ct.c_int32), ct.c_int64, ct.c_double,
                                   ct.c_int32, ct.POINTER(Result), ct.c_int]
    lib.fo_clip_grads.argtypes = [ct.POINTER(ct.c_void_p), ct.POINTER(ct.c_int64),
                                  ct.POINTER(ct.c_int32), ct.c_int64, ct.POINTER(Opts),
                                  ct.POINTER(Result), ct.c_int]
    return lib


def build_q8(outdir, portable, search=False):
    """src_c/q8.c alone (the 8-bit blocks' store and widening), built into
    outdir at the extension's arithmetic, with FO_NO_CLONES where portable
    (the plain C loops only: no AVX-512F search), with FO_Q8_SEARCH where
    search (the AVX-512F search where the CPU's VBMI would take the bucket
    lookup); the loaded library, or None without a C compiler."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    name = ("libfo_q8_portable.so" if portable else
            "libfo_q8_search.so" if search else "libfo_q8.so")
    so = os.path.join(outdir, name)
    flags = ([f for f in CFLAGS if f != "-fopenmp"] + (["-DFO_NO_CLONES"] if portable else [])
             + (["-DFO_Q8_SEARCH"] if search else []))
    subprocess.run([cc] + flags + ["-I", SRC, "-o", so, os.path.join(SRC, "q8.c"), "-lm"],
                   check=True)
    lib = ct.CDLL(so)
    lib.fo_q8_store.argtypes = [ct.c_void_p, ct.c_int64, ct.c_int32, ct.c_void_p,
                                ct.c_void_p]
    lib.step_q8_widen.argtypes = [ct.c_int32, ct.c_int64, ct.c_void_p, ct.c_float,
                                  ct.c_void_p]
    return lib


def build_half(outdir, portable):
    """src_c/half.c alone (the 16-bit conversions), built into outdir at the
    extension's arithmetic, with FO_NO_CLONES where portable (the plain C
    loops only: no AVX-512F rounding); the loaded library, or None without
    a C compiler."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    so = os.path.join(outdir, "libfo_half_portable.so" if portable else "libfo_half.so")
    flags = [f for f in CFLAGS if f != "-fopenmp"] + (["-DFO_NO_CLONES"] if portable else [])
    subprocess.run([cc] + flags + ["-I", SRC, "-o", so, os.path.join(SRC, "half.c"), "-lm"],
                   check=True)
    lib = ct.CDLL(so)
    lib.fo_convert.argtypes = [ct.c_void_p, ct.c_int32, ct.c_void_p, ct.c_int32, ct.c_int64]
    lib.fo_round_stochastic.argtypes = [ct.c_void_p, ct.c_void_p, ct.c_int64, ct.c_uint64,
                                        ct.c_uint64]
    return lib


def q8_store(lib, v, kind):
    """fo_q8_store of float32 v: (codes, absmax)."""
    v = np.ascontiguousarray(v, np.float32)
    c = np.zeros(v.size, np.uint8)
    a = np.zeros((v.size + 255) // 256, np.float32)
    assert lib.fo_q8_store(_ptr(v), v.size, kind, _ptr(c), _ptr(a)) == 0
    return c, a


def q8_widen(lib, kind, codes, absmax):
    """step_q8_widen of one block's codes: map[code] * absmax, float32."""
    c = np.ascontiguousarray(codes, np.uint8)
    out = np.empty(c.size, np.float32)
    lib.step_q8_widen(kind, c.size, _ptr(c), absmax, _ptr(out))
    return out


class ThreadStats(ct.Structure):
    """fo_thread_stats."""
    _fields_ = [("serial_calls", ct.c_int64), ("parallel_calls", ct.c_int64),
                ("backoffs", ct.c_int64), ("last_bytes", ct.c_int64),
                ("last_threads", ct.c_int32), ("last_joined", ct.c_int32)]


def pooled_copy(lib, outdir):
    """A second copy of lib (its own pool and counters) that pools every call
    above the serial threshold whatever the machine's load (OMP_DYNAMIC=false,
    read by its first pooled call; the variable is restored after it), so a
    test of the pooled paths cannot fall back to the serial one."""
    so = os.path.join(outdir, "libfo_step_pooled.so")
    shutil.copyfile(lib._name, so)
    old = os.environ.get("OMP_DYNAMIC")
    os.environ["OMP_DYNAMIC"] = "false"
    try:
        copy = ct.CDLL(so)
        for name in ("fo_step", "fo_global_norm", "fo_clip_grads"):
            getattr(copy, name).argtypes = getattr(lib, name).argtypes
        g = np.ones(1 << 20, np.float32)
        global_norm(copy, [g], n_threads=2)          # reads the policy
    finally:
        if old is None:
            del os.environ["OMP_DYNAMIC"]
        else:
            os.environ["OMP_DYNAMIC"] = old
    return copy


def parallel_calls(lib):
    st = ThreadStats()
    lib.fo_get_thread_stats(ct.byref(st))
    return st.parallel_calls


def _ptr(a):
    return None if a is None else a.ctypes.data


def _dt(a):
    from fastopt import _dtypes
    return _dtypes.CODE[a.dtype.newbyteorder("=")]


def group_struct(hp):
    flags = ((NESTEROV if hp.get("nesterov") else 0) | (AMSGRAD if hp.get("amsgrad") else 0)
             | (MAXIMIZE if hp.get("maximize") else 0))
    return Group(RULES[hp["rule"]], flags, hp["t"], hp["lr"], hp.get("alpha", 0.0),
                 hp.get("beta", 0.0), hp.get("eps", 0.0), hp.get("decay", 0.0),
                 hp.get("decay_post", 0.0), hp.get("lr_decay", 0.0))


def opts_struct(grad_scale=1.0, max_norm=None, convention="torch", clip_value=None,
                norm_type=2.0, check_finite=False, measure=True, given_norm=None,
                guards=None):
    """guards: None, or one list of Guard per tensor (padded with empty
    guards to the longest)."""
    o = Opts(grad_scale, 0.0 if max_norm is None else max_norm,
             0.0 if clip_value is None else clip_value,
             CLIPS[None if max_norm is None else convention],
             0 if norm_type == 2.0 else 1, int(check_finite),
             int(measure) if given_norm is None else 2,
             math.nan if given_norm is None else given_norm, None, 0)
    if guards is not None:
        per = max(1, *map(len, guards)) if guards else 1
        arr = (Guard * max(1, per * len(guards)))()
        for k, gk in enumerate(guards):
            for r, g in enumerate(gk):
                arr[k * per + r] = g
        o.guards = ct.cast(arr, ct.POINTER(Guard))
        o.guards_per_tensor = per
        o._keep = arr               # alive as long as the options
    return o


def step(lib, xs, gs, states, groups, index, n_threads=1, **opts):
    """fo_step in place; returns (rc, Result)."""
    ts = (Tensor * max(len(xs), 1))()
    for k, (x, g, st, j) in enumerate(zip(xs, gs, states, index)):
        ts[k] = tensor(x, g, st, j)
    gr = (Group * max(len(groups), 1))(*[group_struct(h) for h in groups])
    o = opts_struct(**opts)
    res = Result()
    rc = lib.fo_step(ts, len(xs), gr, len(groups), ct.byref(o), ct.byref(res), n_threads)
    return rc, res


def _lists(gs):
    n = max(len(gs), 1)
    ptrs = (ct.c_void_p * n)(*[g.ctypes.data for g in gs])
    ns = (ct.c_int64 * n)(*[g.size for g in gs])
    dts = (ct.c_int32 * n)(*[_dt(g) for g in gs])
    return ptrs, ns, dts


def global_norm(lib, gs, grad_scale=1.0, norm_type=2.0, n_threads=1):
    ptrs, ns, dts = _lists(gs)
    res = Result()
    rc = lib.fo_global_norm(ptrs, ns, dts, len(gs), grad_scale,
                            0 if norm_type == 2.0 else 1, ct.byref(res), n_threads)
    return rc, res


def clip_grads(lib, gs, n_threads=1, **opts):
    ptrs, ns, dts = _lists(gs)
    o = opts_struct(**opts)
    res = Result()
    rc = lib.fo_clip_grads(ptrs, ns, dts, len(gs), ct.byref(o), ct.byref(res), n_threads)
    return rc, res
