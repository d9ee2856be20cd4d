"""Stored outputs: every op, dtype and layout of the catalogue below, run once
and kept as SHA-256 digests of the bytes it wrote (tests/data/golden.json).

A restructuring of the code must change no bit of any result:
``tests/test_golden.py`` runs every case at 1, 2 and 3 threads and compares
the digests with the stored ones. The catalogue covers the public in-place
ops (ONNX and torch forms, AGC, the gradient-list functions), every step
option, the optimizer objects over a few steps, mixed-dtype tensor lists,
awkward memory layouts (Fortran, strided, reversed, transposed, misaligned,
byte-swapped, broadcast gradients), NaN/Inf and sizes on both sides of the
serial threshold.

Regenerate only when a change of results is intended (and say so in the
commit): ``PYTHONPATH=$PWD python tests/golden_cases.py --write``.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys

import numpy as np
import public_names

HERE = os.path.dirname(os.path.abspath(__file__))
STORE = os.path.join(HERE, "data", "golden.json")
DTYPES = (np.float32, np.float64)
SIZES = ((), (1,), (17,), (1025,), (3, 5), (2, 3, 4), (150_001,))


def _layouts(rng, dtype):
    """name -> (x, g, make_state) builders of one tensor's arrays."""
    def arr(shape, positive=False):
        a = rng.standard_normal(shape)
        return np.asarray(np.abs(a) if positive else a, dtype)

    def contiguous(shape):
        return arr(shape), arr(shape), lambda: arr(shape, True)

    def fortran():
        return (np.asfortranarray(arr((5, 7))), np.asfortranarray(arr((5, 7))),
                lambda: np.asfortranarray(arr((5, 7), True)))

    def strided():
        return arr((40,))[::3], arr((56,))[::4], lambda: arr((28,), True)[::2]

    def reversed_():
        return arr((9, 8))[::-1, ::-2], arr((9, 4)), lambda: arr((9, 4), True)

    def transposed():
        return arr((6, 3)).T, arr((3, 6)), lambda: arr((6, 3), True).T

    def misaligned():
        raw = np.zeros(33 * np.dtype(dtype).itemsize + 1, np.uint8)[1:].view(dtype)
        raw[:] = arr((33,))
        return raw, arr((33,))[::-1], lambda: arr((34,), True)[1:]

    def swapped():
        be = np.dtype(dtype).newbyteorder(">")
        return (arr((17,)).astype(be), arr((17,)).astype(be),
                lambda: arr((17,), True).astype(be))

    def broadcast_row():
        return arr((4, 5)), arr((5,)), lambda: arr((4, 5), True)

    def specials():
        x, g = arr((64,)), arr((64,))
        g[3], g[10], g[20] = np.inf, -np.inf, np.nan
        x[5] = np.inf
        return x, g, lambda: arr((64,), True)

    out = {f"C{s}": (lambda s=s: contiguous(s)) for s in SIZES}
    out.update(F=fortran, strided=strided, reversed=reversed_, transposed=transposed,
               misaligned=misaligned, swapped=swapped, broadcast=broadcast_row,
               specials=specials)
    return out


def _digest(outputs) -> str:
    h = hashlib.sha256()
    for o in outputs:
        if isinstance(o, np.ndarray):
            a = o.astype(o.dtype.newbyteorder("="), copy=False)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(np.ascontiguousarray(a).tobytes())
        elif isinstance(o, float):
            h.update(float.hex(o).encode())
        else:
            h.update(repr(o).encode())
    return h.hexdigest()


def _info(r):
    """A StepInfo (or a norm, or None) as hashable facts."""
    if r is None:
        return None
    if isinstance(r, float):
        return float(r)
    return (bool(r.applied), float(r.norm), bool(r.finite))


# ------------------------------------------------------------- single ops
def _call(fn, kw, x, g, s, nth):
    """One public function on one case's arrays; its returned facts."""
    f = public_names.op(fn)
    if fn in ("adam_torch", "adamw"):
        r = f(x, g, s[0], s[1], max_exp_avg_sqs=s[2] if len(s) > 2 else None,
              n_threads=nth, **kw)
    elif fn == "sgd_torch":
        r = f(x, g, s[0] if s else None, n_threads=nth, **kw)
    elif fn in ("global_norm", "clip_grads"):
        r = f(g, n_threads=nth, **kw)
    else:
        r = f(x, g, *s, n_threads=nth, **kw)
    return _info(r)


OPTIONS = {
    "scaled": dict(grad_scale=1024.0),
    "clip_torch": dict(max_grad_norm=0.5, skip_if_nonfinite=True),
    "clip_optax": dict(max_grad_norm=0.5, clip_convention="optax"),
    "clip_inf": dict(max_grad_norm=0.3, norm_type=math.inf),
    "clip_value": dict(clip_value=0.25, grad_scale=3.0),
}

# name -> (number of states, public function, its arguments)
SINGLE = {
    "momentum": (1, "momentum", dict(lr=0.05, t=3, alpha=0.9, beta=0.8,
                                     norm_coefficient=0.01)),
    "momentum_t0": (1, "momentum", dict(lr=0.05, t=0, alpha=0.7, beta=0.4)),
    "nesterov": (1, "momentum", dict(lr=0.05, t=2, mode="nesterov", norm_coefficient=0.001)),
    "adagrad": (1, "adagrad", dict(lr=0.1, t=4, decay_factor=0.1, epsilon=1e-3,
                                   norm_coefficient=0.01)),
    "adam": (2, "adam", dict(lr=0.01, t=3, alpha=0.8, beta=0.95, epsilon=1e-4,
                             norm_coefficient=0.02, norm_coefficient_post=0.01)),
    "adam_t0": (2, "adam", dict(lr=0.01, t=0)),
    "agc": (0, "agc", dict(clipping=0.05)),
    "momentum_agc": (1, "momentum", dict(lr=0.05, t=3, clipping=0.02)),
    "sgd": (0, "sgd_torch", dict(lr=0.1, step=1, weight_decay=0.01)),
    "sgd_momentum": (1, "sgd_torch", dict(lr=0.1, step=2, momentum=0.9, dampening=0.1,
                                          weight_decay=0.01)),
    "sgd_nesterov_max": (1, "sgd_torch", dict(lr=0.1, step=1, momentum=0.9, nesterov=True,
                                              maximize=True)),
    "adagrad_torch": (1, "adagrad_torch", dict(lr=0.1, step=3, lr_decay=0.01,
                                               weight_decay=0.02)),
    "adam_torch": (2, "adam_torch", dict(lr=1e-3, step=4, weight_decay=0.01)),
    "adam_torch_ams": (3, "adam_torch", dict(lr=1e-3, step=2, amsgrad=True, maximize=True)),
    "adamw": (2, "adamw", dict(lr=1e-3, step=5, betas=(0.8, 0.99))),
    "global_norm": (0, "global_norm", {}),
    "clip_grads": (0, "clip_grads", dict(max_norm=0.5)),
}
# the step options apply to these
WITH_OPTIONS = ("momentum", "adagrad", "adam", "sgd_momentum", "adagrad_torch",
                "adam_torch", "adamw")


def _cases():
    """name -> run(nth) -> list of outputs, every case built afresh per run."""
    cases = {}
    table = dict(SINGLE)
    for name in WITH_OPTIONS:
        n, fn, kw = SINGLE[name]
        for o, opts in OPTIONS.items():
            table[f"{name}+{o}"] = (n, fn, dict(kw, **opts))
    for name, (nstates, fn, kw) in table.items():
        def call(x, g, s, nth, fn=fn, kw=kw):
            return _call(fn, kw, x, g, s, nth)
        for dt in DTYPES:
            for lay in _layouts(np.random.default_rng(0), dt):
                key = f"{name}/{np.dtype(dt).name}/{lay}"
                cases[key] = _single_case(name, nstates, call, dt, lay)
        cases[f"{name}/list"] = _list_case(nstates, call)
    cases.update(_optim_cases())
    return cases


def _seed(text) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _single_case(name, nstates, call, dt, lay):
    def run(nth):
        rng = np.random.default_rng(_seed(f"{name}{dt}{lay}"))
        x, g, mk = _layouts(rng, dt)[lay]()
        states = [mk() for _ in range(nstates)]
        try:
            extra = call(x, g, states, nth)
        except (TypeError, ValueError) as e:     # refused: recorded, nothing written
            extra = type(e).__name__
        return [x, g, *states, extra]
    return run


def _list_case(nstates, call):
    """Many tensors of mixed dtypes and sizes in one call."""
    def run(nth):
        rng = np.random.default_rng(7)
        shapes = [(3,), (1000,), (0,), (17, 3), (40_000,), (5,)]
        dts = [np.float32, np.float64, np.float32, np.float64, np.float32, np.float32]
        xs = [np.asarray(rng.standard_normal(s), d) for s, d in zip(shapes, dts)]
        gs = [np.asarray(rng.standard_normal(s), d) for s, d in zip(shapes, dts)]
        st = [[np.asarray(np.abs(rng.standard_normal(s)), d) for s, d in zip(shapes, dts)]
              for _ in range(nstates)]
        extra = call(xs, gs, st, nth)
        return [*xs, *gs, *(a for s in st for a in s), extra]
    return run


def _optim_cases():
    import fastopt.optim as fo
    specs = {
        "OnnxMomentum": dict(lr=0.05, alpha=0.9, norm_coefficient=1e-3, nesterov=True),
        "OnnxMomentum-agc": dict(lr=0.05, clipping=0.02),
        "OnnxAdagrad": dict(lr=0.1, decay_factor=0.01),
        "OnnxAdam": dict(lr=0.01, norm_coefficient_post=0.01),
        "AdamW": dict(lr=1e-3, amsgrad=True),
        "Adam": dict(lr=1e-3, weight_decay=0.01, maximize=True),
    }
    cases = {}
    for name, kw in specs.items():
        cls = getattr(fo, name.split("-")[0])
        for dt in DTYPES:
            cases[f"optim.{name}/{np.dtype(dt).name}"] = _optim_case(cls, kw, dt)
    return cases


def _optim_case(cls, kw, dt):
    def run(nth):
        rng = np.random.default_rng(11)
        shapes = [(8, 4), (4,), (3000,), (2, 3, 5)]
        params = [np.asarray(rng.standard_normal(s), dt) for s in shapes]
        opt = cls(params, n_threads=nth, **kw)
        out = []
        for step in range(4):
            grads = [np.asarray(rng.standard_normal(s), dt) for s in shapes]
            steps = dict(max_grad_norm=1.0) if step == 2 else {}
            r = opt.step(grads, **steps)
            out.append(_info(r) if not isinstance(r, bool) else r)
        state = [a for name in sorted(opt.state) for a in opt.state[name]
                 if isinstance(a, np.ndarray)]
        return [*params, *state, *out]
    return run


def digests(nth) -> dict:
    return {k: _digest(run(nth)) for k, run in _cases().items()}


def main(argv):
    if argv[1:] != ["--write"]:
        print(__doc__)
        return 2
    d = digests(1)
    os.makedirs(os.path.dirname(STORE), exist_ok=True)
    with open(STORE, "w") as fh:
        json.dump(d, fh, indent=0, sort_keys=True)
        fh.write("\n")
    print(f"wrote {len(d)} digests to {STORE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
