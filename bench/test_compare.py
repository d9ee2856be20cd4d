"""bench/compare.py's matching logic, on two tiny runs written to tmp_path."""
import importlib.util
import json
import os

import pytest

_spec = importlib.util.spec_from_file_location(
    "fastopt_bench_compare", os.path.join(os.path.dirname(__file__), "compare.py"))
compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare)


def raw_row(fullname, ratios, median=1e-3):
    """One row of a pytest-benchmark JSON file, as bench/conftest.py fills it."""
    names = {n for r in ratios for n in r.split("/")}
    return {"fullname": fullname, "name": fullname.split("::")[-1], "group": "g",
            "stats": {"median": median},
            "extra_info": {"side_by_side": {
                "subject": ["fastopt"], "reps": 5, "ratios": ratios,
                "times": {n: {"p50": 1.0, "p99": 2.0} for n in names}}}}


def write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text(json.dumps({"datetime": "now", "commit_info": {"id": "abc"},
                                "benchmarks": rows}))
    return str(path)


@pytest.fixture
def runs(tmp_path):
    old = write(tmp_path, "old.json", [
        raw_row("bench/bench_core.py::t[a]", {"fastopt/ceiling": 1.0, "numpy/fastopt": 10.0}),
        raw_row("bench/bench_core.py::t[b]", {"fastopt/ceiling": 1.0}),
        raw_row("bench/bench_core.py::t[gone]", {"fastopt/ceiling": 1.0}),
        {"fullname": "bench/bench_core.py::t[plain]", "name": "t[plain]",
         "stats": {"median": 1.0}, "extra_info": {}},
    ])
    # NEW ran from another directory: the path prefix differs, the keys match
    new = write(tmp_path, "new.json", [
        raw_row("/elsewhere/bench/bench_core.py::t[a]",
                {"fastopt/ceiling": 1.30, "numpy/fastopt": 10.5}),
        raw_row("bench_core.py::t[b]", {"fastopt/ceiling": 0.80, "torch_fused/fastopt": 2.0}),
        raw_row("bench/bench_core.py::t[new]", {"fastopt/ceiling": 1.0}),
        {"fullname": "bench/bench_core.py::t[plain]", "name": "t[plain]",
         "stats": {"median": 5.0}, "extra_info": {}},
    ])
    return old, new


def test_matching_moves_and_one_sided_rows(runs):
    old, new = (compare.load(p) for p in runs)
    moves, only_old, only_new, gaps, factors = compare.compare(old, new, 0.15)
    got = {(k, n): v for k, n, _, _, _, v in moves}
    # a: fastopt/ceiling x1.30 is beyond 15% (slower); numpy/fastopt x1.05 is not
    # b: x0.80 is beyond the symmetric band 1/1.15 = 0.87 (faster)
    assert got == {("bench_core.py::t[a]", "fastopt/ceiling"): "slower",
                   ("bench_core.py::t[b]", "fastopt/ceiling"): "faster"}
    assert only_old == ["bench_core.py::t[gone]"]
    assert only_new == ["bench_core.py::t[new]"]
    assert gaps == [("bench_core.py::t[b]", "torch_fused/fastopt", "new")]
    assert len(factors) == 3          # rows without ratios are matched, not compared
    # a wider band names nothing; a ratio filter keeps only matching names
    assert compare.compare(old, new, 0.35)[0] == []
    assert compare.compare(old, new, 0.15, only=["numpy"])[0] == []
    assert len(compare.compare(old, new, 0.15, only=["ceiling"])[0]) == 2


def test_trimmed_form_compares_like_raw(runs, tmp_path):
    trimmed = tmp_path / "old-trimmed.json"
    assert compare.main(["--trim", runs[0], "-o", str(trimmed), "--note", "test"]) == 0
    doc = json.loads(trimmed.read_text())
    assert doc["format"] == compare.FORMAT and doc["note"] == "test"
    assert doc["rows"]["bench_core.py::t[a]"]["p99"]["fastopt"] == 2.0
    raw = compare.compare(compare.load(runs[0]), compare.load(runs[1]), 0.15)
    via_trim = compare.compare(compare.load(str(trimmed)), compare.load(runs[1]), 0.15)
    assert raw == via_trim


def test_verdict_direction():
    assert compare.verdict("fastopt/ceiling", ["fastopt"], 1.2) == "slower"
    assert compare.verdict("numpy/fastopt", ["fastopt"], 1.2) == "faster"
    assert compare.verdict("torch_fused/fastopt", ["fastopt"], 0.5) == "slower"
    assert compare.verdict("fused/momentum", ["fused", "momentum"], 1.2) == "slower"


def test_report_exit_codes(runs, tmp_path, capsys):
    assert compare.main([*runs, "--band", "0.15"]) == 0
    out = capsys.readouterr().out
    assert "2 ratios moved beyond the band" in out and "t[gone]" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert compare.main([runs[0], str(bad)]) == 2
    assert compare.main([runs[0], str(tmp_path / "missing.json")]) == 2


def test_machine_slug():
    assert compare.machine_slug({"cpu": "AMD EPYC", "cores": 2}) == "amd-epyc-2c"
    assert compare.machine_slug({"cpu": "Intel(R) Xeon(R) 8375C @ 2.9GHz", "cores": 4}) \
        == "intel-r-xeon-r-8375c-2-9ghz-4c"
