"""fastopt demo, reduced (--quick): it runs and the MLP learns digits."""
import re

import pytest

from fastopt._cli import demo as _demo


def test_demo_updates_part_runs(capsys):
    assert _demo.main(["--quick", "--only", "updates"]) == 0
    out = capsys.readouterr().out
    for op in ("momentum", "adagrad", "adam"):
        assert re.search(rf"^{op}\s+\d+\.\d+ ms\s+\d+\.\d+ ms\s+\d+\.\dx", out, re.M), out


def test_demo_trains_to_high_accuracy(capsys):
    pytest.importorskip("sklearn")
    assert _demo.main(["--quick", "--only", "train"]) == 0
    out = capsys.readouterr().out
    accs = [float(a) for a in re.findall(r"^final test accuracy (\d\.\d+)", out, re.M)]
    assert len(accs) == 3, out
    assert min(accs) > 0.9, out
    assert len(re.findall(r"^epoch ", out, re.M)) == 3 * 8
    # the NumPy formula applied to shadow weights with the same gradients ends
    # where fastopt does: bit for bit, except through AGC's norms, which the
    # line explains (the README promises bit-identical updates)
    assert len(re.findall(r"weights are bit-identical$", out, re.M)) == 2, out
    agc = re.findall(r"weights agree to (\S+) \(AGC's norms are a rounding apart from "
                     r"NumPy's; every update itself is bit-identical\)$", out, re.M)
    assert len(agc) == 1 and float(agc[0]) < 1e-4, out


def test_demo_without_sklearn_says_how_to_install(capsys, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_sklearn(name, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError("No module named 'sklearn'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    assert _demo.main(["--only", "train"]) == 0
    assert 'pip install ".[demo]"' in capsys.readouterr().out


def test_demo_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        _demo.main(["--epochs", "0"])
