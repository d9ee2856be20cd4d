"""The table rules (RMSprop, Adamax, Adadelta, RAdam, Lion, NAdam, AdEMAMix,
LAMB, LARS) against their byte floor and against torch.optim, in one run.

Out of cache (1x5e7 float32, ``fastopt.optim.X.step``): each rule's time
over its byte floor, the ceiling probe's time for the arrays the rule must
move. The probe moves 3 arrays read and 2 written, or 4 and 3; AdEMAMix
(5 read and 4 written) is scaled by bytes, 9/7 of the 4-and-3 probe.
LAMB and LARS add a first pass that only reads (x, g and LAMB's two
states): its floor is the read-only probe over as many arrays, timed in
the same rounds (on one core a pass that only reads moves its arrays no
faster than one that also writes, so scaling the update's probe by bytes
would give a floor no pass can reach):

    rule       update reads/writes   first pass   floor
    RMSprop    3 / 2                 -            probe(3, 2)
    Adamax, Adadelta, RAdam, NAdam   4 / 3        probe(4, 3)
    Lion       3 / 2                 -            probe(3, 2)
    AdEMAMix   5 / 4                 -            probe(4, 3) * 9/7
    LAMB       4 / 3                 4 reads      probe(4, 3) + read probe(4)
    LARS       3 / 2                 2 reads      probe(3, 2) + read probe(2)

On 1000 tensors of 1e3 (float32 torch Parameters with .grad):
``fastopt.torch.X`` (also with ``flat=True``) and ``fastopt.optim.X``
against ``torch.optim.X`` in its default for-loop form and with
``foreach=True`` (torch has no Lion, AdEMAMix, LAMB or LARS). Each
workload's calls are interleaved, one call each per round in a rotating
order; ratios are medians of per-round quotients. Nothing is asserted;
speed lives in bench/RESULTS.md.

    PYTHONPATH=$PWD python bench/bench_rules.py                  # both workloads
    PYTHONPATH=$PWD python bench/bench_rules.py --seconds 3 --threads 1
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import fastopt.optim
from fastopt._cli import _probe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_torch import rotating  # noqa: E402

# rule: (probe arrays read/written, byte scale over that probe, arrays a
# read-only first pass reads (0: none), torch.optim class or None)
RULES = {
    "RMSprop": ((3, 2), 1.0, 0, "RMSprop"),
    "Adamax": ((4, 3), 1.0, 0, "Adamax"),
    "Adadelta": ((4, 3), 1.0, 0, "Adadelta"),
    "RAdam": ((4, 3), 1.0, 0, "RAdam"),
    "Lion": ((3, 2), 1.0, 0, None),
    "NAdam": ((4, 3), 1.0, 0, "NAdam"),
    "AdEMAMix": ((4, 3), 9 / 7, 0, None),
    "LAMB": ((4, 3), 1.0, 4, None),
    "LARS": ((3, 2), 1.0, 2, None),
}


def out_of_cache(n, nth, seed=0):
    """{name: callable}: each rule's optimizer step on one tensor of n
    float32 elements, and the two probes."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in RULES:
        x = rng.standard_normal(n, dtype=np.float32)
        g = rng.standard_normal(n, dtype=np.float32) * np.float32(1e-2)
        opt = getattr(fastopt.optim, name)([x], lr=1e-3, n_threads=nth)
        out[name] = (lambda opt=opt, g=g: opt.step([g]))
    for r, w in {(3, 2), (4, 3)}:
        bufs = [np.ones(n, np.float32) for _ in range(r)]
        out[f"probe {r}/{w}"] = (lambda bufs=bufs: _probe.probe(bufs, nth))
    for r in {first for _, _, first, _ in RULES.values() if first}:
        bufs = [np.ones(n, np.float32) for _ in range(r)]
        out[f"probe {r}/0"] = (lambda bufs=bufs: _probe.probe(bufs, nth, read_only=True))
    for f in out.values():
        f()
    return out


def report_floor(label, times, out=sys.stdout):
    print(f"{label}: {len(times['RMSprop'])} rounds, load average "
          f"{os.getloadavg()[0]:.2f}", file=out)
    print(f"  {'rule':10s} {'p50 ms':>8s} {'p99 ms':>8s} {'/ floor':>8s}", file=out)
    for name, ((r, w), scale, first, _) in RULES.items():
        v = np.array(times[name])
        floor = np.array(times[f"probe {r}/{w}"]) * scale
        if first:
            floor = floor + np.array(times[f"probe {first}/0"])
        print(f"  {name:10s} {np.median(v) * 1e3:8.2f} {np.percentile(v, 99) * 1e3:8.2f} "
              f"{np.median(v / floor):8.3f}", file=out)
    probes = sorted(k for k in times if k.startswith("probe "))
    print("  probes (arrays read/written), p50 ms: " + ", ".join(
        f"{k[6:]} {np.median(times[k]) * 1e3:.2f}" for k in probes), file=out)


def many_small(shapes, nth, seed=0):
    """{name: callable}: per torch rule, fastopt.torch.X (and with
    flat=True), fastopt.optim.X,
    torch.optim.X (for-loop) and torch.optim.X(foreach=True), each on its
    own tensors."""
    import torch

    import fastopt.torch as ft
    out = {}
    for name, (_, _, _, tname) in RULES.items():
        if tname is None:
            continue
        for kind in ("fastopt.torch", "flat", "fastopt.optim", "torch", "torch foreach"):
            gen = torch.Generator().manual_seed(seed)
            ps = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
            for p in ps:
                p.grad = torch.randn(p.shape, generator=gen) * 1e-2
            if kind == "fastopt.optim":
                xs = [p.detach().numpy() for p in ps]
                gs = [p.grad.numpy() for p in ps]
                opt = getattr(fastopt.optim, name)(xs, lr=1e-3, n_threads=nth)
                out[f"{name} {kind}"] = (lambda opt=opt, gs=gs: opt.step(gs))
                continue
            if kind in ("fastopt.torch", "flat"):
                opt = getattr(ft, name)(ps, lr=1e-3, n_threads=nth, flat=kind == "flat")
            else:
                opt = getattr(torch.optim, tname)(ps, lr=1e-3,
                                                  foreach=kind == "torch foreach")
            out[f"{name} {kind}"] = opt.step
    torch.set_num_threads(nth)
    for f in out.values():
        f()
    return out


def report_small(label, times, out=sys.stdout):
    print(f"{label}: load average {os.getloadavg()[0]:.2f}", file=out)
    print(f"  {'rule':10s} {'fastopt.torch ms':>16s} {'torch / it':>10s} "
          f"{'foreach / it':>12s} {'flat ms':>8s} {'torch / flat':>12s} "
          f"{'foreach / flat':>14s} {'fastopt.optim ms':>16s}", file=out)
    for name, (_, _, _, tname) in RULES.items():
        if tname is None:
            continue
        a, fl = (np.array(times[f"{name} {k}"]) for k in ("fastopt.torch", "flat"))
        torch_, foreach = (np.array(times[f"{name} {k}"]) for k in ("torch", "torch foreach"))
        print(f"  {name:10s} {np.median(a) * 1e3:16.3f} {np.median(torch_ / a):10.1f} "
              f"{np.median(foreach / a):12.1f} {np.median(fl) * 1e3:8.3f} "
              f"{np.median(torch_ / fl):12.1f} {np.median(foreach / fl):14.1f} "
              f"{np.median(times[f'{name} fastopt.optim']) * 1e3:16.3f}", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--workloads", nargs="+", default=["1x5e7", "1000x1e3"])
    args = ap.parse_args(argv)
    for nth in args.threads:
        if "1x5e7" in args.workloads:
            fs = out_of_cache(50_000_000, nth)
            report_floor(f"1x5e7, {nth} thread(s)", rotating(fs, args.seconds, 9))
            del fs
        if "1000x1e3" in args.workloads:
            fs = many_small([(1000,)] * 1000, nth)
            report_small(f"1000x1e3, {nth} thread(s)", rotating(fs, args.seconds, 9))
            del fs


def test_bench_rules_smoke():
    times = rotating(out_of_cache(1000, 1), 0.0, 2)
    assert set(RULES) <= set(times)
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    times = rotating(many_small([(10,)] * 3, 1), 0.0, 2)
    assert "RMSprop torch foreach" in times


if __name__ == "__main__":
    main()
