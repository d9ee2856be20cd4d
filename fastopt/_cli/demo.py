"""``fastopt demo``: what fastopt does, on this machine, in under a minute.

Part 1, "updates": 100 updates of each operator (Momentum, Adagrad, Adam)
over the 161 parameter tensors of ResNet-50 (25.6 M float32 values), timed
per update for fastopt (one C call over all tensors) and for the plain NumPy
formula (the same math written in place, tensor by tensor).

Part 2, "train": a small MLP, forward and backward written here in NumPy, on
scikit-learn's bundled handwritten digits (1,797 8x8 images; no download),
trained with fastopt.optim: Momentum with adaptive gradient clipping and a
warm-restarts schedule, Adagrad, and Adam. One progress line per epoch, the
final test accuracy, and the optimizer's time per step next to the NumPy
formula applied to a shadow copy of the weights with the same gradients.
Part 2 needs scikit-learn: ``python -m pip install ".[demo]"`` in a clone
(``"fastopt[demo]"`` once installed from a package index).
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

import fastopt

from .. import _reference as ref
from .. import optim
from .workloads import make_tensors, resnet50_shapes


def _say(*args):
    print(*args, flush=True)


# ------------------------------------------------------------ part 1: updates

def _time_per_call(fn, reps):
    """Median time of one call (robust to a busy machine's hiccups)."""
    fn()  # warm up (page in, thread pool)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def run_updates(*, quick: bool = False) -> None:
    shapes = resnet50_shapes()
    reps, np_reps = 100, 5
    title = "ResNet-50"
    if quick:
        shapes, reps, np_reps, title = shapes[:40], 10, 3, "ResNet-50 (first 40 tensors)"
    xs, gs, vs, hs = make_tensors(shapes, np.float32)
    n = sum(x.size for x in xs)
    _say(f"== updates: {title}, {len(xs)} tensors, {n:,} float32 values, "
         f"{fastopt.get_num_threads()} thread(s) ==")
    _say(f"{'op':10s}{'fastopt':>14s}{'numpy formula':>16s}{'speed-up':>10s}"
         f"{'fastopt ns/value':>19s}")
    ops = [
        ("momentum",
         lambda: optim.OnnxMomentum(xs, lr=1e-3, alpha=0.9, norm_coefficient=1e-4),
         lambda t: ref.momentum_inplace(xs, gs, vs, lr=1e-3, t=t, alpha=0.9,
                                        norm_coefficient=1e-4)),
        ("adagrad",
         lambda: optim.OnnxAdagrad(xs, lr=1e-3),
         lambda t: ref.adagrad_inplace(xs, gs, hs, lr=1e-3, t=t)),
        ("adam",
         lambda: optim.OnnxAdam(xs, lr=1e-4),
         lambda t: ref.adam_inplace(xs, gs, vs, hs, lr=1e-4, t=t)),
    ]
    for name, make_opt, numpy_step in ops:
        opt = make_opt()
        t_fast = _time_per_call(lambda opt=opt: opt.step(gs), reps)
        t_np = _time_per_call(lambda step=numpy_step: step(1), np_reps)
        _say(f"{name:10s}{t_fast * 1e3:11.2f} ms{t_np * 1e3:13.2f} ms{t_np / t_fast:9.1f}x"
             f"{t_fast / n * 1e9:19.3f}")
    _say(f"(median time per update; fastopt over {reps} updates, NumPy over {np_reps})")


# -------------------------------------------------------------- part 2: train

def _init_mlp(sizes, rng):
    """He-initialised weights in PyTorch's (out, in) layout, zero biases."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w = rng.standard_normal((fan_out, fan_in)) * math.sqrt(2.0 / fan_in)
        params += [w.astype(np.float32), np.zeros(fan_out, np.float32)]
    return params


def _forward(params, x):
    a = x
    for k in range(0, len(params) - 2, 2):
        a = np.maximum(a @ params[k].T + params[k + 1], 0)
    return a @ params[-2].T + params[-1]


def _loss_and_grads(params, x, y):
    """Softmax cross-entropy of the MLP and its gradients (backprop by hand)."""
    acts = [x]
    pre = []
    a = x
    for k in range(0, len(params) - 2, 2):
        z = a @ params[k].T + params[k + 1]
        pre.append(z)
        a = np.maximum(z, 0)
        acts.append(a)
    z = a @ params[-2].T + params[-1]
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = -float(np.mean(np.log(p[np.arange(n), y] + 1e-12)))
    d = p
    d[np.arange(n), y] -= 1
    d /= n
    grads = [None] * len(params)
    for k in range(len(params) - 2, -1, -2):
        grads[k] = d.T @ acts[k // 2]
        grads[k + 1] = d.sum(axis=0)
        if k:
            d = (d @ params[k]) * (pre[k // 2 - 1] > 0)
    return loss, grads


def _accuracy(params, x, y):
    return float(np.mean(_forward(params, x).argmax(axis=1) == y))


def _train_one(name, make_opt, numpy_update, data, *, epochs, batch, seed):
    x_tr, y_tr, x_te, y_te = data
    rng = np.random.default_rng(seed)
    params = _init_mlp([64, 128, 128, 10], rng)
    shadow = [p.copy() for p in params]          # updated by the NumPy formula
    shadow_state = {}
    opt = make_opt(params)
    t_fast, t_np = [], []
    steps = 0
    _say(f"-- {name} --")
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x_tr))
        total = 0.0
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            loss, grads = _loss_and_grads(params, x_tr[idx], y_tr[idx])
            total += loss * len(idx)
            t0 = time.perf_counter()
            opt.step(grads)
            t1 = time.perf_counter()
            numpy_update(shadow, grads, shadow_state, opt.last_lr, steps)
            t2 = time.perf_counter()
            t_fast.append(t1 - t0)
            t_np.append(t2 - t1)
            steps += 1
        _say(f"epoch {epoch:2d}/{epochs}  loss {total / len(x_tr):.4f}  "
             f"train acc {_accuracy(params, x_tr, y_tr):.4f}  "
             f"test acc {_accuracy(params, x_te, y_te):.4f}  lr {opt.last_lr[0]:.5f}")
    acc = _accuracy(params, x_te, y_te)
    diff = max(float(np.max(np.abs(p - q))) for p, q in zip(params, shadow))
    _say(f"final test accuracy {acc:.4f} ({round(acc * len(y_te))}/{len(y_te)})")
    fast, slow = float(np.median(t_fast)), float(np.median(t_np))
    if diff == 0:
        agree = "fastopt and NumPy weights are bit-identical"
    else:   # AGC: the norms are summed in another order than np.linalg.norm's
        agree = (f"fastopt and NumPy weights agree to {diff:.1e} (AGC's norms are a rounding "
                 f"apart from NumPy's; every update itself is bit-identical)")
    _say(f"optimizer step (median of {steps}): fastopt {fast * 1e6:.1f} us, NumPy formula "
         f"{slow * 1e6:.1f} us ({slow / fast:.1f}x); {agree}")
    return acc


def run_train(*, quick: bool = False, epochs=None) -> bool:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        _say("== train: skipped: scikit-learn is not installed. It ships the digits data "
             "set this part trains on; install it with: pip install \".[demo]\" "
             "(in a checkout) or pip install \"fastopt[demo]\" ==")
        return False
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(x))
    n_test = len(x) // 5
    te, tr = order[:n_test], order[n_test:]
    data = (x[tr], y[tr], x[te], y[te])
    epochs = epochs or (8 if quick else 30)
    batch = 32
    steps_per_epoch = -(-len(tr) // batch)
    _say(f"== train: MLP 64-128-128-10 (ReLU) on scikit-learn digits: {len(tr)} train / "
         f"{len(te)} test images, batch {batch}, {epochs} epochs ==")

    # Momentum + AGC (hidden layers; the classifier is excluded, as in NFNet)
    # + warm restarts (cycles of 2, 4, 8, ... epochs)
    from ..schedules import WarmRestarts

    clip, clip_eps = 0.05, 1e-3
    sched = WarmRestarts(0.1, 0.005, interval=2 * steps_per_epoch)

    def make_momentum(p):
        hidden = {"params": p[:-2], "clipping": clip}
        return optim.OnnxMomentum([hidden, {"params": p[-2:]}], alpha=0.9,
                              norm_coefficient=1e-4, clip_eps=clip_eps, schedule=sched)

    def numpy_momentum(xs, gs, st, lrs, step):
        vs = st.setdefault("v", [np.zeros_like(a) for a in xs])
        gs = ref.agc.agc_in_dtype(xs, gs, [clip] * (len(xs) - 2) + [None, None], clip_eps)
        ref.momentum_inplace(xs, gs, vs, lr=lrs[0], t=step, alpha=0.9, norm_coefficient=1e-4)

    def numpy_adagrad(xs, gs, st, lrs, step):
        hs = st.setdefault("h", [np.zeros_like(a) for a in xs])
        ref.adagrad_inplace(xs, gs, hs, lr=lrs[0], t=step)

    def numpy_adam(xs, gs, st, lrs, step):
        vs = st.setdefault("v", [np.zeros_like(a) for a in xs])
        hs = st.setdefault("h", [np.zeros_like(a) for a in xs])
        ref.adam_inplace(xs, gs, vs, hs, lr=lrs[0], t=step + 1)

    runs = [
        ("Momentum + AGC + WarmRestarts",
         "alpha 0.9, norm_coefficient 1e-4; "
         f"AGC clipping {clip} on the hidden layers (classifier excluded); "
         "lr from WarmRestarts(0.1, 0.005): cosine cycles of 2, 4, 8, ... epochs",
         make_momentum, numpy_momentum),
        ("Adagrad", "lr 0.05", lambda p: optim.OnnxAdagrad(p, lr=0.05), numpy_adagrad),
        ("Adam", "lr 1e-3", lambda p: optim.OnnxAdam(p, lr=1e-3), numpy_adam),
    ]
    results = []
    # The MLP's matrices are tiny: a BLAS thread pool costs more than it saves
    # (threadpoolctl comes with scikit-learn).
    try:
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(1, user_api="blas")
    except ImportError:  # pragma: no cover
        limit = None
    try:
        for name, what, make_opt, numpy_update in runs:
            results.append((name, _train_one(f"{name} ({what})", make_opt, numpy_update,
                                             data, epochs=epochs, batch=batch, seed=1)))
    finally:
        if limit is not None:
            limit.restore_original_limits()
    _say("== summary ==")
    for name, acc in results:
        _say(f"{name:32s} test accuracy {acc:.4f}")
    return True


# --------------------------------------------------------------------- main

def main(argv=None) -> int:
    """Run the demo; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="fastopt demo",
        description="Time fastopt's updates on ResNet-50's parameters and train an "
                    "MLP on scikit-learn's digits with fastopt.optim.")
    parser.add_argument("--quick", action="store_true",
                        help="a reduced run (fewer tensors, updates and epochs)")
    parser.add_argument("--only", choices=("updates", "train"),
                        help="run one part only")
    parser.add_argument("--epochs", type=int, default=None,
                        help="training epochs (default 30; 8 with --quick)")
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be >= 1")
    if args.only in (None, "updates"):
        run_updates(quick=args.quick)
    if args.only in (None, "train"):
        run_train(quick=args.quick, epochs=args.epochs)
    return 0


if __name__ == "__main__":  # python -m fastopt._cli.demo
    sys.exit(main(sys.argv[1:]))
