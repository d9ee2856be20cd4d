"""Compare two benchmark runs by their machine-stable ratios.

    python bench/compare.py OLD.json NEW.json [--band 0.25] [--ratio TEXT]
    python bench/compare.py --trim RAW.json [-o OUT.json | -o baseline] [--note TEXT]

OLD and NEW are pytest-benchmark JSON files (``--benchmark-json`` or
``--benchmark-autosave``) or the trimmed form this script writes with
``--trim`` (bench/baseline/*.json). Rows are matched by file and test name
(``bench_core.py::test_update[momentum-float32-1x1e6-fastopt]``), so a
run from another checkout or directory still matches. Only rows that timed
their rivals side by side carry ratios (``extra_info["side_by_side"]``,
see bench/conftest.py); for each ratio present in both runs the script
reports a move when NEW/OLD > 1 + band or NEW/OLD < 1 / (1 + band) (a
symmetric band: halving and doubling are equally far), says whether that
makes fastopt slower or faster, and lists the rows and ratios found in
only one run. It always exits 0 (the verdict is for a human to read, on a
shared machine); 2 when a file cannot be read.

The default band, 0.25
----------------------
Measured: the baseline (bench/baseline/amd-epyc-2c.json) against a second
run of the same code taken right after it, ``-m ratios``, 1 thread, on
this 2-core machine while other helpers kept it at load average 9-11.
Of the 118 ratios, |NEW/OLD - 1| had a median of 10.3%, a 95th percentile
of 75% and a maximum of 138% (compare.py prints these figures); for
fastopt / ceiling alone (``--ratio fastopt/ceiling``, 30 ratios) median
8.8%, p95 19.4%, max 45%. The wide tail is in the rivals' ratios
(the NumPy formula and the ONNX evaluators allocate; torch fused). At
0.25 such an unchanged pair names 19 of 118 ratios (1 of 30 fastopt /
ceiling); at 0.15, 37. Two earlier pairs under the same load gave medians
of 8-14% and fastopt / ceiling p90s of 28-32%. An idle machine should
allow a tighter band (not measured: this one was never idle during the
work). ``--ratio fastopt/ceiling`` restricts the comparison to the ratios
whose name contains that text.
"""
import argparse
import json
import math
import os
import sys

DEFAULT_BAND = 0.25
FORMAT = "fastopt-bench-trimmed/1"


def row_key(fullname):
    """'bench/bench_core.py::test_x[a]' -> 'bench_core.py::test_x[a]'."""
    path, sep, rest = fullname.partition("::")
    return os.path.basename(path) + sep + rest


def trim(raw, note=""):
    """The trimmed form of a raw pytest-benchmark JSON document."""
    rows = {}
    for b in raw.get("benchmarks", []):
        sbs = b.get("extra_info", {}).get("side_by_side")
        row = {"group": b.get("group"), "median": b["stats"]["median"]}
        if sbs:
            row.update(subject=sbs["subject"], reps=sbs["reps"], ratios=sbs["ratios"],
                       **{q: {k: v[q] for k, v in sbs["times"].items() if q in v}
                          for q in ("min", "p10", "p50", "p99")})
        rows[row_key(b["fullname"])] = row
    return {"format": FORMAT, "note": note, "datetime": raw.get("datetime"),
            "commit": raw.get("commit_info", {}).get("id"),
            "machine": raw.get("fastopt_machine") or raw.get("machine_info", {}),
            "rows": rows}


def machine_slug(machine):
    """'AMD EPYC', 2 cores -> 'amd-epyc-2c': the baseline's file name."""
    cpu = "".join(c if c.isalnum() else "-" for c in str(machine.get("cpu", "cpu")).lower())
    return "-".join(w for w in cpu.split("-") if w) + f"-{machine.get('cores', '?')}c"


def load(path):
    """Rows of a raw or trimmed file: key -> {ratios, subject, median}."""
    with open(path) as f:
        data = json.load(f)
    if data.get("format") != FORMAT:
        if "benchmarks" not in data:
            raise ValueError(f"{path}: neither pytest-benchmark JSON nor {FORMAT}")
        data = trim(data)
    return data


def verdict(name, subject, factor):
    """'slower' or 'faster' for fastopt's side of ratio 'a/b' moving by factor."""
    a, _, b = name.partition("/")
    up_is_slower = a in subject or b not in subject
    slower = (factor > 1) == up_is_slower
    return "slower" if slower else "faster"


def compare(old, new, band, only=()):
    """(moves, only_old, only_new, ratio_gaps, all_factors) for two loaded runs;
    ``only``: compare just the ratios whose name contains one of these texts."""
    ro, rn = old["rows"], new["rows"]
    moves, gaps, factors = [], [], []
    for key in sorted(set(ro) & set(rn)):
        a, b = ro[key].get("ratios", {}), rn[key].get("ratios", {})
        subject = rn[key].get("subject") or ro[key].get("subject") or []
        for name in sorted(set(a) | set(b)):
            if only and not any(o in name for o in only):
                continue
            if name not in a or name not in b:
                gaps.append((key, name, "old" if name in a else "new"))
                continue
            if not (a[name] > 0 and b[name] > 0):
                continue
            factor = b[name] / a[name]
            factors.append(factor)
            if factor > 1 + band or factor < 1 / (1 + band):
                moves.append((key, name, a[name], b[name], factor,
                              verdict(name, subject, factor)))
    return (moves, sorted(set(ro) - set(rn)), sorted(set(rn) - set(ro)), gaps, factors)


def spread(factors):
    """Median, 95th percentile and largest |NEW/OLD - 1| on the symmetric scale."""
    d = sorted(math.exp(abs(math.log(f))) - 1 for f in factors)
    if not d:
        return None
    def pick(q):
        return d[min(len(d) - 1, round(q * (len(d) - 1)))]
    return pick(0.5), pick(0.95), d[-1]


def report(old_path, new_path, band, only=(), out=None):
    out = out or sys.stdout
    old, new = load(old_path), load(new_path)
    moves, only_old, only_new, gaps, factors = compare(old, new, band, only)

    def p(*a):
        print(*a, file=out)
    for label, run in (("OLD", old), ("NEW", new)):
        m = run.get("machine", {})
        p(f"{label}: {run.get('datetime')} commit {str(run.get('commit'))[:10]} "
          f"cpu {m.get('cpu', '?')} threads {m.get('fastopt_threads', '?')}")
    s = spread(factors)
    if s:
        p(f"{len(factors)} ratios compared; |NEW/OLD - 1|: median {s[0]:.1%}, "
          f"p95 {s[1]:.1%}, max {s[2]:.1%}; band {band:.0%}")
    p(f"\n{len(moves)} ratios moved beyond the band:")
    for key, name, a, b, factor, v in moves:
        p(f"  {key}  {name}: {a:.3g} -> {b:.3g} (x{factor:.2f}, fastopt {v})")
    for label, keys in (("only in OLD", only_old), ("only in NEW", only_new)):
        p(f"\n{len(keys)} rows {label}:")
        for key in keys:
            p(f"  {key}")
    if gaps:
        p(f"\n{len(gaps)} ratios in one run only:")
        for key, name, where in gaps:
            p(f"  {key}  {name} (only {where})")
    return moves, only_old, only_new


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="OLD.json NEW.json, or RAW.json with --trim")
    ap.add_argument("--band", type=float, default=DEFAULT_BAND,
                    help=f"noise band as a fraction (default {DEFAULT_BAND})")
    ap.add_argument("--ratio", action="append", default=[], metavar="TEXT",
                    help="compare only ratios whose name contains TEXT (repeatable)")
    ap.add_argument("--trim", action="store_true", help="write the trimmed form of RAW.json")
    ap.add_argument("-o", "--out", help="with --trim: output path (default stdout; "
                    "'baseline' = bench/baseline/<machine>.json)")
    ap.add_argument("--note", default="", help="with --trim: a note stored in the file")
    args = ap.parse_args(argv)
    try:
        if args.trim:
            (path,) = args.files
            with open(path) as f:
                doc = trim(json.load(f), args.note)
            text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
            if args.out == "baseline":
                args.out = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                        "baseline", machine_slug(doc["machine"]) + ".json")
                print(f"writing {args.out}", file=sys.stderr)
            if args.out:
                with open(args.out, "w") as f:
                    f.write(text)
            else:
                sys.stdout.write(text)
            return 0
        if len(args.files) != 2:
            ap.error("give OLD.json and NEW.json")
        report(args.files[0], args.files[1], args.band, args.ratio)
    except BrokenPipeError:             # | head
        return 0
    except (OSError, ValueError, KeyError) as exc:
        print(f"compare.py: cannot read: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
