"""The schedule command line (fastopt schedule ...): printed values, errors,
help, and plotting with and without matplotlib.
"""
from __future__ import annotations

import inspect
import sys
import types

import pytest

from fastopt import schedules as S
from fastopt._cli import schedule as cli


def parse_output(out):
    lines = out.strip().splitlines()
    assert lines[0].startswith("# ")
    return lines[0][2:], [(int(a), float(b)) for a, b in (line.split() for line in lines[1:]
                                                           if not line.startswith("#"))]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["StandardDecay", "--param", "eta=1", "--param", "alpha=0.5", "--steps", "5"],
         S.StandardDecay(1, 0.5)),
        (["standarddecay", "--param", "eta=1"], S.StandardDecay(1)),
        (["WARMRESTARTS", "--param", "eta_max=1", "--param", "interval=4", "--steps", "30"],
         S.WarmRestarts(1, interval=4)),
        (["correctiondecay", "--param", "eta=0.1", "--param", "beta=0.99", "--steps", "3"],
         S.CorrectionDecay(0.1, beta=0.99)),
        (["exponential", "--param", "init_value=0.1", "--param", "transition_steps=10",
          "--param", "decay_rate=0.5", "--param", "staircase=true", "--steps", "25"],
         S.exponential(0.1, 10, 0.5, staircase=True)),
        (["piecewise_constant", "--param", "init_value=1",
          "--param", "boundaries_and_scales={3: 0.5, 6: 0.1}"],
         S.piecewise_constant(1, {3: 0.5, 6: 0.1})),
        (["Cosine-Decay", "--param", "init_value=1", "--param", "decay_steps=8", "--steps", "10"],
         S.cosine_decay(1, 8)),
        (["sgdr", "--param",
          'cosine_kwargs=[{"init_value": 0, "peak_value": 1, "warmup_steps": 2, '
          '"decay_steps": 6}] * 2'],
         None),
        (["sgdr", "--param",
          'cosine_kwargs=[{"init_value": 0, "peak_value": 1, "warmup_steps": 2, '
          '"decay_steps": 6}]'],
         S.sgdr([dict(init_value=0, peak_value=1, warmup_steps=2, decay_steps=6)])),
    ],
)
def test_cli_prints_values(capsys, argv, expected):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    if expected is None:  # an expression, not a literal: a clear error, code 2
        assert code == 2 and "cosine_kwargs" in err and out == ""
        return
    assert code == 0 and err == ""
    header, rows = parse_output(out)
    assert eval(header, vars(S)) == expected
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 10
    assert rows == [(t, expected(t)) for t in range(steps)]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["nope", "--param", "eta=1"], "unknown schedule 'nope'"),
        (["join_schedules"], "unknown schedule"),
        (["StandardDecay"], "eta"),
        (["StandardDecay", "--param", "eta=-1"], "eta"),
        (["StandardDecay", "--param", "eta=1", "--param", "beta=0.9"], "beta"),
        (["StandardDecay", "--param", "eta"], "k=v"),
        (["StandardDecay", "--param", "eta=1", "--steps", "0"], "steps"),
        (["StandardDecay", "--param", "eta=1", "--steps", "x"], "steps"),
        (["cosine_decay", "--param", "init_value=1", "--param", "decay_steps=10.5"], "decay_steps"),
        ([], "NAME"),
    ],
)
def test_cli_errors(capsys, argv, match):
    assert cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert match in err


def test_cli_help_and_default_argv(capsys, monkeypatch):
    assert cli.main(["--help"]) == 0  # argparse's SystemExit becomes the return code
    assert "NAME" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["python -m fastopt", "schedule", "constant",
                                      "--param", "value=2", "--steps", "2"])
    assert cli.main() == 0
    assert parse_output(capsys.readouterr().out)[1] == [(0, 2.0), (1, 2.0)]


def test_cli_help_lists_every_schedule_and_its_parameters(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "ConstantLearningRate: eta\n" in out
    assert "WarmRestarts: eta_max, eta_min=None, alpha=0.001, interval=100\n" in out
    assert "WarmupCosineDecay: init_value, peak_value, warmup_steps, decay_steps, " in out
    for cls in set(cli._CLI_SCHEDULES.values()):
        line = next(ln for ln in out.splitlines() if ln.startswith(f"  {cls.__name__}: "))
        for name in inspect.signature(cls).parameters:
            assert name in line


def test_cli_explains_the_first_warm_restarts_value(capsys):
    """WarmRestarts' step 0 is below eta_max: the output says why."""
    assert cli.main(["WarmRestarts", "--param", "eta_max=1", "--param", "interval=4",
                     "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "0 0.868198" in out
    assert "# step 0 is position 1 of the first cycle, as in Angel" in out
    assert "eta_max, which is never returned" in out
    assert cli.main(["constant", "--param", "value=1", "--steps", "1"]) == 0
    assert "position" not in capsys.readouterr().out


def test_cli_plot_without_matplotlib(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    out_file = tmp_path / "curve.png"
    assert cli.main(["constant", "--param", "value=1", "--plot", str(out_file)]) == 1
    out, err = capsys.readouterr()
    assert "matplotlib" in err and "not installed" in err
    assert not out_file.exists()


def test_cli_plot_with_fake_matplotlib(capsys, monkeypatch, tmp_path):
    saved = {}

    class Axes:
        def plot(self, x, y):
            saved["xy"] = (list(x), list(y))

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    class Figure:
        def __init__(self, **kwargs):
            pass

        def subplots(self):
            return Axes()

        def savefig(self, path):
            saved["path"] = path

    figure_module = types.ModuleType("matplotlib.figure")
    figure_module.Figure = Figure
    package = types.ModuleType("matplotlib")
    package.figure = figure_module
    monkeypatch.setitem(sys.modules, "matplotlib", package)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", figure_module)
    out_file = str(tmp_path / "curve.png")
    assert cli.main(["WarmRestarts", "--param", "eta_max=1", "--param", "interval=3",
                     "--steps", "12", "--plot", out_file]) == 0
    assert saved["path"] == out_file
    assert saved["xy"] == (list(range(12)), [S.WarmRestarts(1, interval=3)(t) for t in range(12)])
    assert "plot saved" in capsys.readouterr().out


def test_cli_plot_with_matplotlib(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    out_file = tmp_path / "curve.png"
    assert cli.main(["cosine_decay", "--param", "init_value=1", "--param", "decay_steps=50",
                     "--steps", "60", "--plot", str(out_file)]) == 0
    assert out_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_streams_its_lines_and_stops_quietly_on_a_closed_pipe(monkeypatch):
    """--steps 10**12 prints as it goes (it does not build the list first),
    and a reader that goes away (``| head``) ends it with status 0."""
    from fastopt._cli import schedule as cli_schedule

    printed = []

    class Head:
        def write(self, text):
            printed.append(text)
            if "".join(printed).count("\n") > 5:
                raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    class Counted:
        calls = 0

        def __call__(self, step):
            self.calls += 1
            assert self.calls < 1000 or printed, "values computed before any was printed"
            return 0.1

    monkeypatch.setattr(cli_schedule, "_build_from_cli", lambda name, params: Counted())
    monkeypatch.setattr(sys, "stdout", Head())
    assert cli_schedule.main(["constant", "--steps", str(10**12)]) == 0
    assert "".join(printed).splitlines()[1:4] == ["0 0.1", "1 0.1", "2 0.1"]
