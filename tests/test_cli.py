"""python -m fastopt: the bench and config commands and the dispatcher."""
import pytest

from fastopt import _cli as cli
from fastopt._cli import bench as _bench

from _subprocess import run_python


def test_bench_table(capsys):
    assert _bench.main(["--ops", "momentum,adam", "--workloads", "1x1e3,1000x1e3",
                        "--budget", "0.01", "--dtype", "both"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("momentum", "adam"))]
    assert len(rows) == 8                      # 2 ops x 2 dtypes x 2 workloads
    for row in rows:
        fields = row.split()
        assert float(fields[4]) > 0            # ns/element
        assert fields[6].endswith("x") and fields[7].endswith("x")


def test_bench_rejects_unknown_names(capsys):
    with pytest.raises(SystemExit):
        _bench.main(["--ops", "sgd"])
    assert "unknown op or workload: sgd" in capsys.readouterr().err


def test_bench_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "t.png"
    assert _bench.main(["--ops", "adagrad", "--workloads", "1x1e3", "--budget", "0.01",
                        "--plot", str(out), "--plot-sizes", "1000,20000"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
