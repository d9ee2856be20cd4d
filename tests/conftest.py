"""Shared pytest configuration: hypothesis profiles and the opt-in `large` marker.

Hypothesis profiles: "ci" (a fixed, derandomized example budget; chosen when
the CI environment variable is set, as .ci/run does), "dev" (the default
otherwise) and "thorough" (for long local runs). FASTOPT_HYPOTHESIS_PROFILE
picks one explicitly.

Tests marked `large` need tens of GB of memory and run only with
`--run-large` (or FASTOPT_RUN_LARGE=1).

Tests marked `slow` (the soak test, ~60 s) run only with `--run-slow`, or
when selected by a marker expression naming them (`-m slow`); a skipped test
is not a passing one, so CI (.ci/run) runs them explicitly.
"""
import os

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=50, derandomize=True, deadline=None,
                          print_blob=True)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("FASTOPT_HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser):
    parser.addoption("--run-large", action="store_true", default=False,
                     help="run tests marked `large` (they need ~20 GB of RAM)")
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="run tests marked `slow` (the soak test, ~60 s)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "large: needs tens of GB of RAM; run with --run-large")
    config.addinivalue_line(
        "markers", "slow: a soak test with a fixed budget (~60 s); run with --run-slow "
                   "or -m slow")


def pytest_collection_modifyitems(config, items):
    skips = {}
    if not (config.getoption("--run-large") or os.environ.get("FASTOPT_RUN_LARGE") == "1"):
        skips["large"] = pytest.mark.skip(reason="large: pass --run-large (needs ~20 GB of RAM)")
    if not (config.getoption("--run-slow") or "slow" in (config.getoption("-m") or "")):
        skips["slow"] = pytest.mark.skip(reason="slow: pass --run-slow or -m slow (~60 s)")
    for item in items:
        for marker, skip in skips.items():
            if marker in item.keywords:
                item.add_marker(skip)
