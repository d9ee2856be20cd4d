"""Turn a pytest-benchmark JSON file into the tables of bench/RESULTS.md.

    pytest bench/bench_core.py --benchmark-only --benchmark-json=out.json
    python bench/summarize.py out.json

Per (op, dtype, workload): the median ns per element of each implementation
and the ratios the targets are stated in (fastopt / ceiling, torch fused /
fastopt, NumPy / fastopt), plus, for the 1000-tensor workload, fastopt's
cost per tensor above the ceiling. Then the ratios each fastopt row timed
side by side with its rivals (bench/conftest.py), with p50 and p99.
"""
import json
import sys
from collections import defaultdict

IMPLS = ["fastopt", "numpy", "torch_fused", "torch_foreach", "ceiling"]


def main(path):
    with open(path) as f:
        data = json.load(f)
    rows = defaultdict(dict)
    elements = {}
    for b in data["benchmarks"]:
        p = b.get("params") or {}
        if "elements" not in b.get("extra_info", {}) or "impl" not in p:
            continue                      # bench_agc / bench_onnx rows
        key = (p["op"], p["dtype"], p["workload"])
        rows[key][p["impl"]] = b["stats"]["median"]
        elements[key] = b["extra_info"]["elements"]
    m = data.get("machine_info", {})
    print(f"machine: {m.get('cpu', {}).get('brand_raw', '?')}, "
          f"{m.get('cpu', {}).get('count', '?')} cores; python {m.get('python_version', '?')}; "
          f"{data.get('datetime', '')}")
    print()
    head = " | ".join(f"{i} ns/el" for i in IMPLS)
    print(f"| op | dtype | workload | {head} | fastopt/ceiling | torch fused/fastopt "
          f"| numpy/fastopt | fastopt call |")
    print("|" + "---|" * (len(IMPLS) + 7))
    for key in sorted(rows, key=lambda k: (k[0], k[1],
                                           list(WORK).index(k[2]) if k[2] in WORK else 9)):
        r, n = rows[key], elements[key]
        cells = [f"{r[i] / n * 1e9:.3f}" if i in r else "–" for i in IMPLS]

        def ratio(a, b, r=r):
            return f"{r[a] / r[b]:.2f}" if a in r and b in r else "–"
        call = r.get("fastopt")
        call_s = "–" if call is None else (f"{call * 1e6:.1f} us" if call < 1e-2
                                          else f"{call * 1e3:.2f} ms")
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells)
              + f" | {ratio('fastopt', 'ceiling')} | {ratio('torch_fused', 'fastopt')} "
              f"| {ratio('numpy', 'fastopt')} | {call_s} |")
    print()
    for key in sorted(rows):
        if key[2] == "1000x1e3" and "fastopt" in rows[key] and "ceiling" in rows[key]:
            extra = (rows[key]["fastopt"] - rows[key]["ceiling"]) / 1000
            print(f"- {key[0]} {key[1]} 1000x1e3: {extra * 1e9:.0f} ns per tensor above "
                  f"the ceiling")


def side_by_side(data):
    """The interleaved ratios (bench/conftest.py) of every row that has them."""
    rows = [b for b in data["benchmarks"] if b.get("extra_info", {}).get("side_by_side")]
    if not rows:
        return
    print("\n## Ratios timed side by side (median of paired quotients; p50 / p99 of "
          "the subject's call)\n")
    print("| row | reps | ratios | p50 | p99 |")
    print("|---|---|---|---|---|")
    for b in rows:
        s = b["extra_info"]["side_by_side"]
        t = s["times"][s["subject"][0]]
        ratios = ", ".join(f"{k} {v:.2f}" for k, v in s["ratios"].items())
        print(f"| {b['name']} | {s['reps']} | {ratios} | {t['p50'] * 1e6:.1f} us "
              f"| {t['p99'] * 1e6:.1f} us |")


WORK = ["1x1e3", "1x1e6", "1x5e7", "resnet50", "1000x1e3"]

if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        if "benchmarks" not in json.load(f):
            sys.exit(f"{sys.argv[1]}: a trimmed run (ratios only, as the committed "
                     f"baseline): read it with bench/compare.py, not summarize.py")
    main(sys.argv[1])
    with open(sys.argv[1]) as f:
        side_by_side(json.load(f))
