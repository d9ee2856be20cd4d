"""python -m fastopt: the bench and config commands and the dispatcher."""
import numpy as np
import pytest
from _subprocess import run_python

from fastopt import _cli as cli
from fastopt._cli import bench as _bench


def test_bench_table(capsys):
    assert _bench.main(["--ops", "momentum,adam", "--workloads", "1x1e3,1000x1e3",
                        "--budget", "0.01", "--dtype", "both"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("momentum", "adam"))]
    assert len(rows) == 8                      # 2 ops x 2 dtypes x 2 workloads
    for row in rows:
        fields = row.split()                   # op dtype workload p50 p99 ns/el ...
        assert fields[3].endswith(("us", "ms")) and fields[4].endswith(("us", "ms"))
        assert float(fields[5]) > 0            # ns/element
        assert fields[7].endswith("x") and fields[8].endswith("x")
    assert "p50/p99:" in out


def test_bench_busy_note():
    assert _bench._busy_note([0.3, 0.5], 1.2, 2) is None
    note = _bench._busy_note([0.5, 9.7], 1.1, 2)
    assert note.startswith("note: the machine was busy") and "load average 9.7 on 2" in note
    note = _bench._busy_note([0.1], 12.0, 8)
    assert "p99 up to 12.0x p50" in note and "load average" not in note


def test_bench_rejects_unknown_names(capsys):
    with pytest.raises(SystemExit):
        _bench.main(["--ops", "sgd"])
    assert "unknown op or workload: sgd" in capsys.readouterr().err


def _fake_measure(calls):
    def measure(op, dtype, shapes, budget=0.4, numpy=True):
        calls.append((op, np.dtype(dtype).name, tuple(shapes)))
        return {"elements": 1000, "fastopt": 1e-6, "fastopt_p99": 2e-6,
                "numpy": 5e-6, "probe": 8e-7}
    return measure


def test_bench_plot(tmp_path, monkeypatch):
    """Every op x dtype is drawn (small multiples), the probe labelled as the
    memory-bandwidth ceiling."""
    pytest.importorskip("matplotlib")
    calls, labels = [], []
    monkeypatch.setattr(_bench, "measure", _fake_measure(calls))
    real = _bench._plot

    def spy(plt, *a, **kw):
        orig = plt.Axes.plot

        def plot(self, *pa, **pkw):
            labels.append(pkw.get("label"))
            return orig(self, *pa, **pkw)
        monkeypatch.setattr(plt.Axes, "plot", plot)
        return real(plt, *a, **kw)
    monkeypatch.setattr(_bench, "_plot", spy)
    out = tmp_path / "t.png"
    assert _bench.main(["--ops", "momentum,adagrad,adam", "--workloads", "1x1e3",
                        "--budget", "0.01", "--plot", str(out),
                        "--plot-sizes", "1000,20000"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    drawn = {(op, dt) for op, dt, shapes in calls if shapes == ((20000,),)}
    assert drawn == {(op, dt) for op in ("momentum", "adagrad", "adam")
                     for dt in ("float32", "float64")}
    assert labels.count("memory-bandwidth ceiling") == 6
    assert "probe" not in labels


def test_bench_plot_needs_matplotlib_before_measuring(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(_bench, "measure", _fake_measure(calls))
    monkeypatch.setattr(_bench, "_pyplot", lambda: None)
    assert _bench.main(["--ops", "momentum", "--workloads", "1x1e3",
                        "--plot", "x.png"]) == 2
    assert calls == []
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_dispatcher(capsys):
    assert cli.main(["config"]) == 0
    assert "OpenMP" in capsys.readouterr().out
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0


def test_module_entry_point(tmp_path):
    r = run_python(["-m", "fastopt", "schedule", "StandardDecay", "--param", "eta=1",
                    "--param", "alpha=0.5", "--steps", "2"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "0.816496" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--batch", "0"], "argument --batch: must be an integer >= 1, got '0'"),
    (["--batch", "x"], "argument --batch: must be an integer >= 1, got 'x'"),
    (["--epochs", "-1"], "argument --epochs: must be an integer >= 0, got '-1'"),
    (["--lr", "nan"], "argument --lr: must be a finite number >= 0, got 'nan'"),
    (["--lr", "inf"], "argument --lr: must be a finite number >= 0, got 'inf'"),
    (["--lr", "-0.1"], "argument --lr: must be a finite number >= 0, got '-0.1'"),
])
def test_distributed_demo_refuses_bad_arguments_through_argparse(args, message, capsys):
    """Refused while parsing, before MPI is imported: every rank prints the
    usage error and exits with status 2 (no traceback)."""
    from fastopt.distributed import demo

    with pytest.raises(SystemExit) as exit_:
        demo.main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: fastopt distributed-demo") and message in err
