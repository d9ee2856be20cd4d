#!/usr/bin/env python
"""Fuzz fastopt's public API.

Each input (a byte string) is decoded into one call of a public function
with random Python objects and arrays: random dtypes, shapes (0-d to 3-D,
size 0, now and then one above the serial threshold), layouts (Fortran,
strided, reversed, transposed, misaligned views of a uint8 buffer,
byte-swapped), read-only flags, random bit patterns, lists/tuples of random
lengths, aliased and overlapping arrays, and random scalars. Most inputs
start from a valid call and apply a few mutations, so the fuzzer reaches deep
into the checks and the kernels. The oracle:

- only TypeError or ValueError may escape (anything else, a warning, a crash
  or a hang is a finding);
- when an error is raised, no array -- nor the array a view was taken
  from -- changed by a single byte;
- when the call succeeds, every array that shares no memory with an output is
  unchanged (the gradient is only read), and every output equals the float64
  reference within the dtype's error bound (tests/hardening_ref.py);
- checkpoint files mutated in their structure (tests/fuzz_checkpoint.py):
  only CheckpointError escapes ``load``, a rejection changes nothing, and the
  peak RSS stays within a small multiple of the optimizer's state;
- ShardedOptimizer checkpoint directories mutated in their structure
  (tests/fuzz_sharded_checkpoint.py, with mpi4py): the same oracle.

With atheris installed this runs coverage-guided (libFuzzer flags apply):

    python tests/fuzz_api.py -atheris_runs=200000            # a longer run
    python tests/fuzz_api.py -max_total_time=3600 corpus/     # an hour, keep a corpus

Without atheris, or with --random N, it feeds N pseudo-random inputs:

    python tests/fuzz_api.py --random 20000 [--seed 1]

FASTOPT_FUZZ_ONLY=checkpoint sends every input to the checkpoint-file target,
FASTOPT_FUZZ_ONLY=sharded to the ShardedOptimizer checkpoint target.
"""
from __future__ import annotations

import math
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

atheris = None
if __name__ == "__main__" and "--random" not in sys.argv:
    try:
        import atheris  # noqa: E402
    except ImportError:  # pragma: no cover - optional
        pass

if atheris is not None:
    with atheris.instrument_imports():
        import fastopt
        import fastopt._dispatch  # noqa: F401
        import fastopt._ops  # noqa: F401
        import fastopt._validation  # noqa: F401
        for _mod in ("fastopt.schedules", "fastopt.optim"):
            try:
                __import__(_mod)
            except ImportError:
                pass
else:
    import fastopt

import public_names  # noqa: E402
from hardening_ref import (  # noqa: E402
    REFS,
    STATES,
    check_agc,
    check_close,
    check_unitwise_norm,
)

SERIAL_ELEMS = fastopt._ext.tuning()["serial_bytes"] // 4 + 257
try:
    import fastopt.schedules  # noqa: F401
    HAVE_SCHEDULES = True
except ImportError:  # pragma: no cover - before the schedules landed
    HAVE_SCHEDULES = False
HAVE_AGC = hasattr(fastopt, "agc")
try:
    import fastopt.optim  # noqa: F401
    HAVE_OPTIM = HAVE_SCHEDULES
except ImportError:  # pragma: no cover - before the optimizers landed
    HAVE_OPTIM = False


# ----------------------------------------------------------- byte decoder

class Source:
    """Decode choices from the fuzzer's bytes (zeros once they run out)."""

    def __init__(self, data: bytes):
        self.data = data
        self.i = 0

    def byte(self) -> int:
        if self.i < len(self.data):
            b = self.data[self.i]
            self.i += 1
            return b
        return 0

    def int(self, lo: int, hi: int) -> int:
        span = hi - lo + 1
        v, n = 0, 0
        while (1 << (8 * n)) < span:
            v = (v << 8) | self.byte()
            n += 1
        return lo + v % span if span > 1 else lo

    def pick(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def chance(self, k: int) -> bool:
        """True with probability about 1/k (False once the bytes run out)."""
        return self.int(0, k - 1) == k - 1

    def raw(self, n: int) -> bytes:
        out = bytes(self.byte() for _ in range(min(n, 64)))
        return out or b"\x00"


# ------------------------------------------------------------ the objects

DTYPES = [np.float32, np.float64, np.float32, np.float64, np.float16, np.int32, np.int64,
          np.bool_, np.complex64, np.uint8, np.longdouble, ">f4", ">f8", "f4,f4", "U2",
          "M8[s]", object]
PALETTE = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -2.5, 1e-3, 1e3, 1e-30, 1e-40, 1e30, 3e38,
           1e300, math.nan, math.inf, -math.inf]


def values(src: Source, n: int, dtype) -> np.ndarray:
    mode = src.int(0, 3)
    if mode == 0:      # raw bit patterns, tiled
        b = src.raw(8)
        return np.frombuffer((b * (n * 16 // len(b) + 1))[: n * 16], np.uint8)
    if mode == 1:      # a palette of awkward values
        pal = np.array([src.pick(PALETTE) for _ in range(4)])
        return pal[np.arange(n) % 4]
    rng = np.random.default_rng(src.int(0, 255))
    return rng.standard_normal(n) * 10.0 ** src.int(-3, 3)


def new_array(src: Source, dtype=None, shape=None):
    dt = np.dtype(dtype if dtype is not None else src.pick(DTYPES))
    if shape is None:
        if src.chance(40):
            shape = (src.int(SERIAL_ELEMS, SERIAL_ELEMS + 3000),)
        else:
            shape = tuple(src.int(0, 4) for _ in range(src.int(0, 3)))
    n = int(np.prod(shape)) if shape else 1
    layout = 0 if dt.hasobject else src.int(0, 6)
    if layout == 5 and len(shape) >= 1:            # misaligned in a uint8 buffer
        off = src.int(1, 7)
        buf = np.zeros(n * dt.itemsize + off + 8, np.uint8)
        a = np.ndarray(shape, dt, buffer=buf, offset=off)
    elif layout == 2 and len(shape) >= 1:          # strided
        a = np.zeros(shape[:-1] + (shape[-1] * 2,), dt)[..., ::2]
    elif layout == 3 and len(shape) >= 1:          # reversed
        a = np.zeros(shape, dt)[::-1]
    elif layout == 4 and len(shape) >= 2:          # transposed
        a = np.zeros(shape[::-1], dt).T
    elif layout == 1:
        a = np.zeros(shape, dt, order="F")
    else:
        a = np.zeros(shape, dt)
    if n:
        v = values(src, n, dt)
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                if v.dtype == np.uint8 and not dt.hasobject:
                    flat = np.frombuffer(v.tobytes()[: n * dt.itemsize].ljust(
                        n * dt.itemsize, b"\0"), dt)
                    a[...] = flat.reshape(shape)
                else:
                    a[...] = v[:n].reshape(shape).astype(dt) if dt.kind != "V" else 0
            except (TypeError, ValueError):
                pass
    if layout == 6 and dt.kind in "fc" and dt.isnative:      # byte-swapped
        b = a.astype(dt.newbyteorder("S"))
        a = b
    if src.chance(15):
        a.flags.writeable = False
    return a


def related_array(src: Source, pool):
    """Something sharing memory with an existing array."""
    a = src.pick(pool)
    k = src.int(0, 5)
    if k == 0 or a.ndim == 0:
        return a
    if k == 1:
        return a[::-1]
    if k == 2:
        return a[1:] if a.shape[0] > 1 else a
    if k == 3:
        return a.T
    if k == 4:
        return np.broadcast_to(a, a.shape)
    return a.view(a.dtype.newbyteorder("S")) if a.dtype.kind == "f" else a


def other_object(src: Source):
    return src.pick([
        None, 1, 1.5, "x", b"x", [1.0, 2.0], (), [], {}, {"w": 1}, object(), range(3),
        memoryview(b"abcd"), np.float32(1.0), np.array(1.0), np.float64(2.0),
        np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0]),
    ])


def array_like(src: Source, pool):
    k = src.int(0, 9)
    if k == 9:
        return other_object(src)
    if k in (7, 8) and pool:
        return related_array(src, pool)
    a = new_array(src)
    pool.append(a)
    return a


SCALARS = {
    "lr": [0.1, 0.0, 1.0, 1e-3, 5, np.float32(0.01), np.array(0.1), np.array([0.2]),
           -0.1, math.nan, math.inf, 1e308, "0.1", None, True, 0.5 + 0j, np.array([1, 2])],
    "t": [0, 1, 2, 10, 2**62, np.int64(3), np.uint64(2**64 - 1), np.array(4), -1, 2**63,
          2**70, 1.0, True, "1", None, np.array([1, 2])],
    "real": [0.9, 0.0, 1.0, 0.5, 0.999, 1e-6, 2.0, -0.5, 0, 1, np.float32(0.9), math.nan,
             math.inf, -math.inf, "0.9", None, True, [0.9], np.array(0.9)],
    "mode": ["standard", "nesterov", "Nesterov", "", None, 1, b"standard"],
    "n_threads": [None, 1, 2, 3, 4, -1, 0, -2, 2**40, 2.0, True, "2", np.int64(2)],
}
HYPER = {
    "momentum": ["alpha", "beta", "norm_coefficient"],
    "adagrad": ["decay_factor", "epsilon", "norm_coefficient"],
    "adam": ["alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"],
}
VALID = {"alpha": 0.9, "beta": 0.99, "norm_coefficient": 0.01, "decay_factor": 0.1,
         "epsilon": 1e-6, "norm_coefficient_post": 0.001}


def scalar(src: Source, kind: str, valid):
    if not src.chance(8):
        return valid
    return src.pick(SCALARS[kind])


# ------------------------------------------------------------ the calls

def valid_call(src: Source, op: str):
    n = src.int(1, 4)
    single = n == 1 and src.chance(2)
    roles = {"x": [], "g": []}
    for name in STATES[op]:
        roles[name] = []
    for _ in range(n):
        dt = src.pick([np.float32, np.float64])
        shape = (src.int(SERIAL_ELEMS, SERIAL_ELEMS + 500),) if src.chance(30) else \
            tuple(src.int(0, 4) for _ in range(src.int(0, 3)))
        roles["x"].append(new_array(src, dt, shape))
        g_shape = shape[src.int(0, len(shape)):] if src.chance(4) else shape
        roles["g"].append(new_array(src, dt, g_shape))
        for name in STATES[op]:
            roles[name].append(new_array(src, dt, shape))
    pool = [a for items in roles.values() for a in items]
    # a few mutations
    for _ in range(src.int(0, 2)):
        role = src.pick(list(roles))
        items = roles[role]
        k = src.int(0, len(items) - 1)
        items[k] = array_like(src, pool)
    container = src.pick([list, list, tuple])
    args = [items[0] if single else container(items) for items in roles.values()]
    if src.chance(10):                      # a bad container for one role
        args[src.int(0, len(args) - 1)] = src.pick([[], (), None, {"a": 1}, "abc"])
    return args


def random_call(src: Source, op: str):
    pool = []
    args = []
    for _ in range(2 + len(STATES[op])):
        if src.chance(2):
            args.append(array_like(src, pool))
        else:
            items = [array_like(src, pool) for _ in range(src.int(0, 4))]
            args.append(src.pick([list, tuple])(items))
    return args


def make_call(src: Source):
    op = src.pick(["momentum", "adagrad", "adam"])
    args = random_call(src, op) if src.chance(3) else valid_call(src, op)
    kwargs = {"lr": scalar(src, "lr", 0.1), "t": scalar(src, "t", src.int(0, 5))}
    for name in HYPER[op]:
        if src.chance(2):
            kwargs[name] = scalar(src, "real", VALID[name])
    if op == "momentum" and src.chance(2):
        kwargs["mode"] = scalar(src, "mode", "nesterov")
    if op == "momentum" and HAVE_AGC and src.chance(4):
        kwargs.update(agc_kwargs(src, args[0], eps_name="clip_eps"))
    if src.chance(2):
        kwargs["n_threads"] = scalar(src, "n_threads", 2)
    if src.chance(50):   # an argument Python itself rejects
        if src.chance(2):
            kwargs["bogus"] = 1
        else:
            kwargs.pop("lr")
    return op, args, kwargs


# ------------------------------------------------------------ schedules

SCHED_VALUES = [0.0, 1.0, 0.5, 1e-3, 0.9, 2.0, 10, 100, 1, 0, 3, 1e308, 5e-324, -1.0, -1,
                math.nan, math.inf, 2**63, 10**30, True, False, None, "1", "0.5", "",
                np.float32(0.5), np.int64(4), np.uint64(2**64 - 1), [1, 2], {1: 0.5},
                [(10, 0.5), (20, 0.1)], ((5, 2.0),)]
ANGEL_KEYS = ["ml.opt.decay.class.name", "ml.opt.decay.alpha", "ml.opt.decay.beta",
              "ml.opt.decay.intervals", "ml.opt.decay.on.batch", "ml.learn.decay"]
ANGEL_VALUES = ["StandardDecay", " warmrestarts ", "CORRECTIONDECAY", "ConstantLearningRate",
                "Nope", "0.5", "-1", "100", "1e3", "true", "FALSE", "nan", "inf", "",
                0.5, 3, True, None, [1]]
STEPS = [0, 1, 2, 99, 100, 10**9, 2**62, 2**63, 10**30, -1, 1.0, True, None, "3",
         np.int64(5), np.uint64(2**64 - 1)]


def schedule_targets():
    import inspect

    from fastopt import schedules as S
    out = []
    for name in S.__all__:
        obj = getattr(S, name)
        if inspect.isclass(obj) and issubclass(obj, S.Schedule) and obj is not S.Schedule:
            out.append(obj)
    return S, out


def schedule_case(src: Source) -> None:
    """Build a schedule from random arguments and evaluate it at random steps."""
    import inspect

    S, classes = schedule_targets()
    kind = src.int(0, 9)
    try:
        if kind == 0:
            conf = {src.pick(ANGEL_KEYS): src.pick(ANGEL_VALUES) for _ in range(src.int(0, 4))}
            if src.chance(20):
                conf = src.pick([None, [], "conf", 3])
            sched = S.angel(conf, src.pick(SCHED_VALUES))
        elif kind == 1:
            S.angel_step(*(src.pick(SCHED_VALUES) for _ in range(3)),
                         on_batch=src.pick([False, True, None, 1]))
            return
        else:
            cls = src.pick(classes)
            params = list(inspect.signature(cls).parameters.values())
            args = {}
            for p in params:
                if p.default is not inspect.Parameter.empty and src.chance(3):
                    continue
                if p.name == "schedules":
                    args[p.name] = [S.Constant(1.0), S.CosineDecay(1.0, 10)][: src.int(0, 2)]
                elif p.name == "cosine_kwargs":
                    args[p.name] = [{"init_value": src.pick(SCHED_VALUES),
                                     "peak_value": src.pick(SCHED_VALUES),
                                     "warmup_steps": src.pick(SCHED_VALUES),
                                     "decay_steps": src.pick(SCHED_VALUES)}]
                else:
                    args[p.name] = src.pick(SCHED_VALUES)
            sched = cls(**args)
    except (TypeError, ValueError):
        return
    for _ in range(src.int(1, 4)):
        step = src.pick(STEPS)
        try:
            value = sched(step)
        except (TypeError, ValueError):
            continue
        if type(value) is not float or math.isnan(value) or value < 0:
            raise AssertionError(f"{sched!r}({step!r}) = {value!r}")
    twin = eval(repr(sched), {**vars(S), "inf": math.inf, "nan": math.nan})
    if twin != sched or hash(twin) != hash(sched):
        raise AssertionError(f"repr does not round-trip: {sched!r}")


# ------------------------------------------------------------ optimizers

OPTIM_HYPER = {
    "Momentum": ["alpha", "beta", "norm_coefficient", "nesterov", "clipping", "clip_eps",
                 "clip_layout"],
    "Adagrad": ["decay_factor", "epsilon", "norm_coefficient", "initial_accumulator_value"],
    "Adam": ["alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post"],
}
OPTIM_VALUES = [0.0, 0.5, 0.9, 1.0, 1e-3, 2.0, -0.5, math.nan, math.inf, True, False, None,
                "oi", "io", "x", [0.01, None], [None], 0.01, np.float32(0.5), [1]]
_TMP = []


def _tmpdir():
    """The fuzzer's scratch directory for checkpoints, made once and removed
    when the process exits."""
    if not _TMP:
        import atexit
        import shutil
        import tempfile
        _TMP.append(tempfile.mkdtemp(prefix="fastopt-fuzz-"))
        atexit.register(shutil.rmtree, _TMP[0], True)
    return _TMP[0]


def optim_state(opt):
    """Everything an optimizer call may change: bytes of params and states,
    the step count and the groups' hyperparameters."""
    arrays = [as_bytes(a) for a in opt.params] + \
        [as_bytes(a) for arrs in opt.state.values() for a in arrs]
    hyper = [repr(sorted((k, v) for k, v in g.items() if k != "params"))
             for g in opt.param_groups]
    return arrays, opt.steps, hyper


def optim_case(src: Source) -> None:
    from fastopt import optim as O
    from fastopt import schedules as S

    name = src.pick(["Momentum", "Adagrad", "Adam"])
    cls = getattr(O, "Onnx" + name)
    pool: list = []
    n = src.int(1, 4)
    params = []
    for _ in range(n):
        if src.chance(12):
            params.append(array_like(src, pool))
        else:
            dt = src.pick([np.float32, np.float64])
            shape = tuple(src.int(0, 4) for _ in range(src.int(0, 3)))
            a = new_array(src, dt, shape)
            pool.append(a)
            params.append(a)
    if src.chance(3):     # parameter groups
        cut = src.int(0, n)
        groups = [{"params": params[:cut]}, {"params": params[cut:]}]
        for g in groups:
            for _ in range(src.int(0, 2)):
                key = src.pick(OPTIM_HYPER[name] + ["lr", "schedule", "bogus"])
                g[key] = src.pick(OPTIM_VALUES) if key != "schedule" else \
                    src.pick([None, S.Constant(0.1), lambda k: -1.0, lambda k: "x"])
        params_arg = groups
    else:
        params_arg = params
    kwargs = {}
    if src.chance(4):
        kwargs["schedule"] = src.pick([S.CosineDecay(0.1, 10), lambda k: 0.01,
                                       lambda k: math.nan, 0.1])
    else:
        kwargs["lr"] = scalar(src, "lr", 0.01)
    for key in OPTIM_HYPER[name]:
        if src.chance(4):
            kwargs[key] = src.pick(OPTIM_VALUES)
    if src.chance(3):
        kwargs["contiguous_state"] = src.pick([True, False, 1])
    if src.chance(4):
        kwargs["n_threads"] = scalar(src, "n_threads", 2)
    watched = arrays_in(params, [])
    before = [as_bytes(a) for a in watched]
    try:
        opt = cls(params_arg, **kwargs)
    except (TypeError, ValueError):
        if [as_bytes(a) for a in watched] != before:
            raise AssertionError(f"optim.{name}() raised but modified a parameter") from None
        return
    if [as_bytes(a) for a in watched] != before:
        raise AssertionError(f"optim.{name}() modified a parameter")

    for _ in range(src.int(1, 4)):
        action = src.int(0, 9)
        snap = optim_state(opt)
        extra: list = []
        try:
            if action <= 5:                       # a step
                grads = []
                for p in opt.params:
                    k = src.int(0, 9)
                    if k == 0:
                        grads.append(None)
                    elif k == 1:
                        grads.append(array_like(src, pool))
                    else:
                        g = new_array(src, p.dtype, p.shape[src.int(0, p.ndim):]
                                      if src.chance(4) else p.shape)
                        grads.append(g)
                if src.chance(15):
                    grads = src.pick([grads[:-1], grads + [None], tuple(grads), None,
                                      [grads]])
                extra = arrays_in(grads, [])
                gbefore = [as_bytes(a) for a in extra]
                kw = {}
                if src.chance(3):
                    kw["grad_scale"] = src.pick([2.0, 0.5, 1.0, 0.0, -1.0, math.nan, 1e30])
                if src.chance(3):
                    kw["skip_if_nonfinite"] = src.pick([True, False])
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    opt.step(grads, **kw)
                outs = opt.params + [a for arrs in opt.state.values() for a in arrs]
                for a, b in zip(extra, gbefore):
                    if as_bytes(a) != b and not any(np.may_share_memory(a, o) for o in outs):
                        raise AssertionError("optim step modified a gradient")
            elif action == 6:                     # edit a group's hyperparameter
                g = src.pick(opt.param_groups)
                g[src.pick(OPTIM_HYPER[name] + ["lr"])] = src.pick(OPTIM_VALUES)
                return
            elif action == 7:                     # a mutated state dict
                sd = opt.state_dict()
                k = src.int(0, 6)
                if k == 0:
                    sd[src.pick(list(sd))] = src.pick(OPTIM_VALUES + [{}, [], -1, 2**70])
                elif k == 1:
                    del sd[src.pick(list(sd))]
                elif k == 2 and sd["param_groups"]:
                    g = sd["param_groups"][0]
                    g[src.pick(list(g) + ["zzz"])] = src.pick(OPTIM_VALUES)
                elif k == 3:
                    arrs = src.pick(list(sd["state"].values()))
                    if arrs:
                        i = src.int(0, len(arrs) - 1)
                        with np.errstate(all="ignore"):
                            half = arrs[i].astype(np.float16)
                        arrs[i] = src.pick([half, arrs[i].ravel()[:1], None, [1.0],
                                            arrs[i][None]])
                elif k == 4:
                    sd["steps"] = src.pick([-1, 1.5, True, "3", np.int64(4), 2**64])
                elif k == 5:
                    sd = src.pick([None, [], "sd", {"format": "fastopt.optim"}])
                opt.load_state_dict(sd)
            else:                                 # a saved file, possibly damaged
                path = os.path.join(_tmpdir(), "ckpt.npz")
                opt.save(path)
                with open(path, "rb") as fh:
                    data = bytearray(fh.read())
                k = src.int(0, 4)
                if k == 0 and data:
                    del data[src.int(0, len(data) - 1):]
                elif k == 1 and data:
                    for _ in range(src.int(1, 4)):
                        i = src.int(0, len(data) - 1)
                        data[i] ^= 1 << src.int(0, 7)
                elif k == 2:
                    data = bytearray(src.raw(64))
                elif k == 3:
                    import io
                    buf = io.BytesIO()
                    np.save(buf, np.zeros(3))
                    data = bytearray(buf.getvalue())
                with open(path, "wb") as fh:
                    fh.write(bytes(data))
                opt.load(path)
        except (TypeError, ValueError):
            if optim_state(opt) != snap:
                raise AssertionError(f"optim.{name}: a rejected call changed the "
                                     f"optimizer (action {action})") from None
            for a, b in zip(extra, locals().get("gbefore", [])):
                if as_bytes(a) != b:
                    raise AssertionError("a rejected step modified a gradient") from None


# ------------------------------------------------------------------- AGC

CLIP_VALUES = [0.01, 0.1, 1.0, 1e-6, 0.0, -1.0, math.nan, math.inf, None, True, "0.1",
               np.float32(0.5)]


def agc_kwargs(src: Source, x_arg, eps_name="eps"):
    kw = {}
    n = len(x_arg) if isinstance(x_arg, (list, tuple)) else 1
    k = src.int(0, 5)
    if k <= 2:
        kw["clipping"] = scalar(src, "real", src.pick([0.01, 0.1, 1.0, 1e-4]))
    elif k == 3:
        kw["clipping"] = [src.pick([0.01, 0.5, None]) if not src.chance(8)
                          else src.pick(CLIP_VALUES) for _ in range(n + (src.chance(8)))]
    else:
        kw["clipping"] = src.pick(CLIP_VALUES)
    if src.chance(3):
        kw[eps_name] = src.pick([1e-3, 1e-6, 1.0, 0.0, -1.0, math.nan])
    if src.chance(2):
        kw["layout"] = src.pick(["oi", "io", "io", "OI", None, 1])
    return kw


def agc_case(src: Source) -> None:
    """fastopt.agc and fastopt.unitwise_norm with random arguments."""
    if src.chance(3):
        pool: list = []
        x = array_like(src, pool) if src.chance(6) else new_array(
            src, src.pick([np.float32, np.float64]))
        layout = src.pick(["oi", "io", "oi", "x", None])
        watched = arrays_in(x, [])
        before = [as_bytes(a) for a in watched]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                out = fastopt.unitwise_norm(x, layout=layout)
        except (TypeError, ValueError):
            if [as_bytes(a) for a in watched] != before:
                raise AssertionError("unitwise_norm raised but modified x") from None
            return
        if [as_bytes(a) for a in watched] != before:
            raise AssertionError("unitwise_norm modified x")
        with np.errstate(all="ignore"):
            check_unitwise_norm(out, np.asarray(x), layout)
        return

    # agc(x, g): g clipped in place, x only read
    n = src.int(1, 3)
    pool = []
    xs, gs = [], []
    for _ in range(n):
        dt = src.pick([np.float32, np.float64])
        shape = (src.int(300, 400), src.int(200, 300)) if src.chance(25) else \
            tuple(src.int(0, 4) for _ in range(src.int(0, 4)))
        x = new_array(src, dt, shape)
        g = new_array(src, dt, shape)
        pool += [x, g]
        xs.append(x)
        gs.append(g)
    for _ in range(src.int(0, 2)):
        lst = src.pick([xs, gs])
        lst[src.int(0, n - 1)] = array_like(src, pool)
    single = n == 1 and src.chance(2)
    x_arg = xs[0] if single else src.pick([list, tuple])(xs)
    g_arg = gs[0] if single else src.pick([list, tuple])(gs)
    kw = agc_kwargs(src, x_arg)
    if src.chance(3):
        kw["n_threads"] = scalar(src, "n_threads", 2)
    watched = arrays_in((xs, gs), [])
    before = [as_bytes(a) for a in watched]
    g0 = [np.array(g, copy=True) if isinstance(g, np.ndarray) else None for g in gs]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fastopt.agc(x_arg, g_arg, **kw)
    except (TypeError, ValueError):
        if [as_bytes(a) for a in watched] != before:
            raise AssertionError("agc raised but modified an array") from None
        return
    for a, b in zip(watched, before):
        if as_bytes(a) != b and not any(np.may_share_memory(a, g) for g in gs):
            raise AssertionError("agc modified an array other than g")
    clip = kw.get("clipping", 0.01)
    per = [c for c in clip] if isinstance(clip, (list, tuple)) else [clip] * n
    for i in range(n):
        check_agc(gs[i], xs[i], g0[i], None if per[i] is None else float(per[i]),
                  float(kw.get("eps", 1e-3)), kw.get("layout", "oi"), f"agc g[{i}]")


def check_fused(args, pre, kwargs):
    """A successful momentum(..., clipping=...) equals agc() on a copy of g
    followed by momentum(), bit for bit (the documented equivalence)."""
    single = not isinstance(args[0], (list, tuple))
    # AGC's reduction order follows the memory order (C or F), so the copies
    # get the order the call itself ran in: x's, if x and v are both
    # contiguous in it, native and aligned (the fast path), else C (the
    # copies fastopt makes)
    orders = []
    for x, v in zip(pre[0], pre[2]):
        o = "C" if x.flags.c_contiguous else "F" if x.flags.f_contiguous else None
        flag = "c_contiguous" if o == "C" else "f_contiguous"
        ok = o is not None and all(a.dtype.isnative and a.flags.aligned and getattr(a.flags, flag)
                                   for a in (x, v))
        orders.append(o if ok else "C")
    xs = [np.array(a, dtype=a.dtype.newbyteorder("="), order=o) for a, o in zip(pre[0], orders)]
    gs = [np.array(np.broadcast_to(g, x.shape), dtype=x.dtype, order=o)
          for g, x, o in zip(pre[1], xs, orders)]
    vs = [np.array(a, dtype=a.dtype.newbyteorder("="), order=o) for a, o in zip(pre[2], orders)]
    pack = (lambda seq: seq[0]) if single else list
    rest = {k: v for k, v in kwargs.items() if k not in ("clipping", "clip_eps", "layout")}
    agc_kw = {"clipping": kwargs["clipping"], "eps": kwargs.get("clip_eps", 1e-3),
              "layout": kwargs.get("layout", "oi")}
    fastopt.agc(pack(xs), pack(gs), **agc_kw)
    fastopt.onnx_momentum(pack(xs), pack(gs), pack(vs), **rest)
    outs_x = [args[0]] if single else list(args[0])
    outs_v = [args[2]] if single else list(args[2])
    for i, (a, b) in enumerate(zip(outs_x + outs_v, xs + vs)):
        if np.asarray(a, dtype=b.dtype).tobytes() != b.tobytes():
            raise AssertionError(f"fused AGC momentum differs from agc + momentum ({i})")


# ------------------------------------------------------------ the oracle

def arrays_in(obj, out):
    if isinstance(obj, np.ndarray):
        out.append(obj)
        root = obj
        while isinstance(root.base, np.ndarray):
            root = root.base
            out.append(root)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            arrays_in(item, out)
    return out


def as_bytes(a: np.ndarray) -> bytes:
    if a.dtype.hasobject:
        return repr(a.tolist()).encode()
    return a.tobytes(order="A")


def plain(op, kwargs):
    """The hyperparameters as the reference takes them (call succeeded: valid;
    AGC's arguments without clipping are ignored by momentum)."""
    hp = {"lr": float(np.asarray(kwargs["lr"]).reshape(())),
          "t": int(np.asarray(kwargs["t"]).reshape(()))}
    for name in HYPER[op]:
        if name in kwargs:
            hp[name] = float(np.asarray(kwargs[name]).reshape(()))
    if op == "momentum":
        hp["mode"] = kwargs.get("mode", "standard")
    return hp


# FASTOPT_FUZZ_ONLY=checkpoint (or sharded): every input goes to the
# checkpoint target (or the sharded one), for a long campaign against one
# file reader alone
ONLY = {"checkpoint": 8, "sharded": 9}.get(os.environ.get("FASTOPT_FUZZ_ONLY", ""))


def _have_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return HAVE_OPTIM


def TestOneInput(data: bytes) -> None:
    src = Source(data)
    target = ONLY if ONLY is not None else src.int(0, 9)
    if target == 8 and HAVE_OPTIM:         # hostile checkpoint files
        import fuzz_checkpoint
        fuzz_checkpoint.checkpoint_case(src, _tmpdir())
        return
    if target == 9 and _have_mpi():        # hostile ShardedOptimizer checkpoints
        import fuzz_sharded_checkpoint
        fuzz_sharded_checkpoint.sharded_case(src, _tmpdir())
        return
    if target == 5 and HAVE_AGC:
        agc_case(src)
        return
    if target == 6 and HAVE_OPTIM:
        optim_case(src)
        return
    if target == 7 and HAVE_SCHEDULES:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            schedule_case(src)
        return
    op, args, kwargs = make_call(src)
    fn = public_names.op(op)
    watched = arrays_in((args, list(kwargs.values())), [])
    before = [as_bytes(a) for a in watched]
    # the values each role holds before the call (for the reference)
    pre = []
    for role in args:
        items = role if isinstance(role, (list, tuple)) else [role]
        pre.append([np.array(a, copy=True) if isinstance(a, np.ndarray) else None
                    for a in items])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fn(*args, **kwargs)
    except (TypeError, ValueError):
        changed = [i for i, a in enumerate(watched) if as_bytes(a) != before[i]]
        if changed:
            raise AssertionError(f"{op} raised but modified {len(changed)} array(s)") from None
        return

    # success: every tensor was an array, the outputs match the reference,
    # everything else is untouched
    for role, items in zip(("x", "g", "state 1", "state 2"), pre):
        if any(a is None for a in items):
            raise AssertionError(f"{op} accepted a non-array {role}")
    outs = []
    for role in [args[0]] + list(args[2:]):
        outs += list(role) if isinstance(role, (list, tuple)) else [role]
    for i, a in enumerate(watched):
        if not any(np.may_share_memory(a, o) for o in outs):
            if as_bytes(a) != before[i]:
                raise AssertionError(f"{op} modified an array it only reads")
    if kwargs.get("clipping") is not None:
        check_fused(args, pre, kwargs)
        return
    hp = plain(op, kwargs)
    xs, gs, states = pre[0], pre[1], pre[2:]
    single = not isinstance(args[0], (list, tuple))
    for i in range(len(xs)):
        ref = REFS[op](xs[i].dtype.newbyteorder("="), xs[i], gs[i],
                       *[s[i] for s in states], **hp)
        got = [args[0] if single else args[0][i]] + \
              [a if single else a[i] for a in args[2:]]
        for k, (a, r) in enumerate(zip(got, ref)):
            check_close(a, r, f"{op} output {k} of tensor {i}")


# ------------------------------------------------------------- entry point

def run_random(n: int, seed: int) -> None:
    import random

    rnd = random.Random(seed)
    for _ in range(n):
        TestOneInput(bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 256))))


def main(argv):
    if "--random" in argv or atheris is None:
        n = int(argv[argv.index("--random") + 1]) if "--random" in argv else 10000
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 0
        run_random(n, seed)
        print(f"fuzz_api: {n} random inputs, no finding")
        return
    atheris.Setup(argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
