"""Draw docs/_static/results.png from the table in bench/RESULTS.md.

    python docs/_scripts/plot_results.py bench/RESULTS.md docs/_static/results.png

One panel per operation and dtype; x: the workload, y: median ns per element
(log scale) for fastopt, the NumPy formula, torch's fused optimizer and the
memory-bandwidth ceiling (src_c/ceiling.c: the same bytes moved, no arithmetic).
Rerun it after updating the benchmark table; the docs build does not.
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = [("fastopt", "fastopt ns/el", "C0", "o"),
          ("NumPy formula", "numpy ns/el", "C1", "s"),
          ("torch fused=True", "torch_fused ns/el", "C2", "^"),
          ("memory-bandwidth ceiling", "ceiling ns/el", "0.4", "")]


def read_table(path):
    rows, header = [], None
    with open(path) as fh:
        for line in fh:
            if not line.startswith("|"):
                if header and rows:
                    break
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(cells[0]) <= set("-: "):
                rows.append(dict(zip(header, cells)))
    return rows


def main(src, dst):
    rows = read_table(src)
    ops = sorted({r["op"] for r in rows}, key=["momentum", "adagrad", "adam"].index)
    dtypes = ["float32", "float64"]
    fig, axes = plt.subplots(len(dtypes), len(ops), figsize=(4 * len(ops), 6.5),
                             sharex=True, sharey=True, squeeze=False)
    for j, op in enumerate(ops):
        for i, dt in enumerate(dtypes):
            ax = axes[i][j]
            sel = [r for r in rows if r["op"] == op and r["dtype"] == dt]
            names = [r["workload"] for r in sel]
            for label, col, color, marker in SERIES:
                ax.plot(names, [float(r[col]) for r in sel], marker=marker, color=color,
                        linestyle="--" if not marker else "-", label=label)
            ax.set_yscale("log")
            ax.set_title(f"{op}, {dt}")
            ax.grid(True, which="both", alpha=0.3)
            if j == 0:
                ax.set_ylabel("ns per element (median)")
            ax.tick_params(axis="x", labelrotation=30)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=90)


if __name__ == "__main__":
    main(*sys.argv[1:3])
