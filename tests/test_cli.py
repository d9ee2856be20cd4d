"""The fastopt command line: the bench and config commands and the dispatcher."""
import pathlib
import re

import numpy as np
import pytest
from _subprocess import run_python

import fastopt
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
        assert (fields[7].endswith("x") and fields[8].endswith("x")
                or "too noisy to measure: other programs kept" in row)
    assert "p50/p99:" in out
    assert "ratios: another time / fastopt's time, higher is faster for fastopt" in out


# Rounds of one row on a shared machine: a probe of ~76 us with
# some runs descheduled for ~8 ms, fastopt ~95 us, the NumPy formula ~900 us.
_FAST = [96e-6, 95e-6, 97e-6, 94e-6, 95e-6, 96e-6, 95e-6, 98e-6, 95e-6, 96e-6, 95e-6]
_NUMPY = [900e-6, 905e-6, 910e-6, 890e-6, 900e-6, 902e-6, 899e-6, 930e-6, 901e-6,
          903e-6, 898e-6]
_PROBE = [76e-6, 113e-6, 127e-6, 78e-6, 80e-6, 76e-6, 77e-6, 79e-6, 81e-6, 76e-6, 90e-6]


def _descheduled(times, rounds, factor=130.0):
    return [t * factor if i in rounds else t for i, t in enumerate(times)]


def test_bench_statistics_ignore_descheduled_samples():
    """A few rounds slowed by other programs, in any of the three series,
    change neither the ceiling nor the ratios."""
    quiet = _bench.summarize(_FAST, _NUMPY, _PROBE, load=0.2, ncpu=2)
    assert quiet["ceiling"] == 76e-6 and quiet["refused"] is None
    assert quiet["fastopt"] == 95e-6
    assert quiet["vs_ceiling"] == pytest.approx(0.8) and 9 < quiet["vs_numpy"] < 10
    for rounds in ([3], [3, 4], [0, 5, 9]):         # a minority of the rounds
        busy = _bench.summarize(_descheduled(_FAST, rounds), _descheduled(_NUMPY, [7]),
                                _descheduled(_PROBE, rounds), load=2.5, ncpu=2)
        assert busy["ceiling"] == pytest.approx(quiet["ceiling"], rel=0.02)
        assert busy["fastopt"] == pytest.approx(quiet["fastopt"], rel=0.02)
        assert busy["vs_ceiling"] == pytest.approx(quiet["vs_ceiling"], rel=0.02)
        assert busy["vs_numpy"] == pytest.approx(quiet["vs_numpy"], rel=0.02)
        assert busy["refused"] is None
    one = _bench.summarize(_FAST, _NUMPY, _descheduled(_PROBE, [3]))
    assert (one["ceiling"], one["vs_ceiling"]) == (quiet["ceiling"], quiet["vs_ceiling"])
    # most probe runs descheduled (76, 113, 127, 7894, 7994, 76, ... us): the
    # ceiling is still the best run, not the median
    probe = _descheduled(_PROBE, [3, 4, 6, 7, 8, 10], factor=100.0)
    assert _bench.summarize(_FAST, _NUMPY, probe)["ceiling"] == 76e-6


def test_bench_statistics_pair_rounds():
    """vs numpy is the median of per-round ratios: a machine that slows
    down for half the run slows both members of a pair."""
    fast = [1e-3] * 6 + [3e-3] * 5
    numpy = [10e-3] * 6 + [30e-3] * 5
    r = _bench.summarize(fast, numpy, [0.9e-3] * 11)
    assert r["vs_numpy"] == pytest.approx(10.0)
    assert r["vs_ceiling"] == pytest.approx(0.9)


def test_bench_refuses_a_ratio_beyond_the_ceiling(monkeypatch, capsys):
    """Every probe run slowed: fastopt would seem 5x faster than the
    memory-bandwidth ceiling, so no ratio is given, only the reason."""
    r = _bench.summarize(_FAST, _NUMPY, [5 * t for t in _FAST], load=3.4, ncpu=2)
    assert r["vs_ceiling"] is None and r["vs_numpy"] is None
    assert r["refused"].startswith("too noisy to measure: other programs kept 3.4 of 2 "
                                   "cores busy")
    assert _bench.summarize(_FAST, None, [1.05 * t for t in _FAST])["refused"] is None

    def measure(op, dtype, shapes, budget=1.0, numpy=True):
        out = _bench.summarize(_FAST, _NUMPY, [5 * t for t in _FAST], load=3.4, ncpu=2)
        return dict(out, elements=1000, rounds=11, load=3.4)
    monkeypatch.setattr(_bench, "measure", measure)
    assert _bench.main(["--ops", "momentum", "--workloads", "1x1e3"]) == 0
    row = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("momentum")]
    assert len(row) == 1 and "too noisy to measure: other programs kept 3.4" in row[0]
    assert not row[0].rstrip().endswith("x")


def test_read_only_probe_reads_every_word_and_writes_none():
    """The read-only probe (the floor of a pass that only reduces) folds
    every word of its 2 or 4 arrays, float32 or float64, and changes none."""
    from fastopt._cli import _probe
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        for k in (2, 4):
            arrays = [rng.standard_normal(100_003).astype(dtype) for _ in range(k)]
            before = [a.copy() for a in arrays]
            words = np.concatenate([a.view(np.uint32) for a in arrays])
            assert _probe.probe(arrays, 2, read_only=True) == np.bitwise_xor.reduce(words)
            assert all(np.array_equal(a, b) for a, b in zip(arrays, before))
    with pytest.raises(ValueError, match="2 or 4 read_only"):
        _probe.probe([np.ones(4, np.float32)] * 3, 1, read_only=True)


def test_bench_interleaves_rounds():
    """One call of each function per round, in a rotating order, until both
    the minimum number of rounds and the time budget are reached."""
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in "abc"}
    t = _bench.interleaved(fns, budget=0.0, max_rounds=100, min_rounds=4)
    assert {k: len(v) for k, v in t.items()} == {"a": 4, "b": 4, "c": 4}
    assert order[3:] == list("abc" "bca" "cab" "abc")     # after one warm-up call each
    order.clear()
    t = _bench.interleaved(fns, budget=0.0, max_rounds=100, min_rounds=2,
                           repeat={"c": 3})
    assert order[3:] == list("abccc" "bccca") and len(t["c"]) == 2


def test_bench_counts_the_cpu_time_of_other_programs_only(monkeypatch):
    """_Others: the machine's busy time less this process's, over the time
    passed; a load that ended before the span does not count (the load
    average would), and this process's own work never does."""
    busy, own, now = [100.0], [5.0], [0.0]
    monkeypatch.setattr(_bench, "_busy_seconds", lambda: busy[0])
    monkeypatch.setattr(_bench.time, "process_time", lambda: own[0])
    monkeypatch.setattr(_bench.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(_bench, "_loadavg", lambda: 9.0)
    o = _bench._Others()
    busy[0], own[0], now[0] = 103.0, 7.0, 2.0     # 3 s busy in 2 s, 2 of them ours
    assert o.cores() == pytest.approx(0.5)
    busy[0] = 102.0                               # only ours
    assert o.cores() == 0.0
    monkeypatch.setattr(_bench, "_busy_seconds", lambda: None)   # no /proc/stat
    assert _bench._Others().cores() == 9.0 - _bench.get_num_threads()


def test_bench_busy_note():
    assert _bench._busy_note([0.3, 0.5], 1.2, 2) is None
    note = _bench._busy_note([0.5, 9.7], 1.1, 2)
    assert note.startswith("note: the machine was busy") and "kept 9.7 of 2 cores" in note
    note = _bench._busy_note([0.1], 12.0, 8)
    assert "p99 up to 12.0x p50" in note and "kept" not in note


def test_a_bench_row_never_prints_a_ratio_beyond_the_ceiling():
    """A row fastopt seems to win by less than the slack (the probe's own
    spread) is printed at the ceiling, never above 1.00."""
    for seemed, shown in ((0.8, "0.80x"), (1.0, "1.00x"), (1.07, "~1.00x")):
        fast = [95e-6] * 11
        r = _bench.summarize(fast, _NUMPY, [seemed * t for t in fast])
        assert r["refused"] is None
        row = _bench._row("adam", np.float32, "1x1e3", dict(r, elements=1000))
        assert row.split()[-1] == shown


def test_bench_rejects_unknown_names(capsys):
    with pytest.raises(SystemExit):
        _bench.main(["--ops", "sgd"])
    assert "unknown op or workload: sgd" in capsys.readouterr().err


def _fake_measure(calls):
    def measure(op, dtype, shapes, budget=0.4, numpy=True):
        calls.append((op, np.dtype(dtype).name, tuple(shapes)))
        return {"elements": 1000, "fastopt": 1e-6, "fastopt_p99": 2e-6,
                "vs_numpy": 5.0, "ceiling": 8e-7, "vs_ceiling": 0.8, "refused": None,
                "rounds": 11, "load": 0.1}
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
    r = run_python(["-m", "fastopt", "--version"], tmp_path)
    assert r.returncode == 0 and r.stdout == f"fastopt {fastopt.__version__}\n"


def test_version(capsys):
    for flag in ("--version", "-V"):
        assert cli.main([flag]) == 0
        assert capsys.readouterr().out == f"fastopt {fastopt.__version__}\n"


@pytest.mark.parametrize("command", ["demo", "bench", "schedule", "config",
                                     "distributed-demo"])
def test_usage_names_the_fastopt_command(command, capsys):
    """Usage lines name the console script, which works from any directory
    (``python -m fastopt`` does not work from the root of a source checkout)."""
    assert cli.main(["--help"]) == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage: fastopt COMMAND") and "python -m" not in usage
    assert f"  {command} " in usage or f"  {command}\n" in usage
    try:
        status = cli.main([command, "--help"])
    except SystemExit as exit_:          # argparse's --help
        status = exit_.code
    assert status == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: fastopt {command}") and "python -m" not in out


_ROOT = pathlib.Path(__file__).resolve().parent.parent
_COMMAND = re.compile(r"^\s*(\$ )?(mpiexec .*)?python -m fastopt\b")


def test_docs_suggest_the_fastopt_command():
    """No command line in the README or the docs runs ``python -m fastopt``."""
    pages = [_ROOT / "README.md", *sorted((_ROOT / "docs").glob("*.md"))]
    if not all(p.exists() for p in pages[:2]):
        pytest.skip("the README and docs/ are not next to the tests")
    bad = [f"{p.name}:{i}: {line.strip()}" for p in pages
           for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
           if _COMMAND.search(line)]
    assert bad == []


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
