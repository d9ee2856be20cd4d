"""Shared pytest configuration: hypothesis profiles, the dtype / rng / assert_close
fixtures and the opt-in `large` marker.

Hypothesis profiles: "ci" (a fixed, derandomized example budget; chosen when
the CI environment variable is set, as .ci/run does), "dev" (the default
otherwise) and "thorough" (for long local runs). FASTOPT_HYPOTHESIS_PROFILE
picks one explicitly.

Fixtures shared by every test module:

- ``dtype``: the tests run once per float dtype fastopt supports
  (``np.float32``, ``np.float64``: the scalar types, as ``DTYPES`` lists);
- ``rng``: a ``np.random.Generator`` seeded from the test's node id through
  ``zlib.crc32``, so each test (and parameter set) draws its own numbers and
  the same ones in every process and run (``hash()`` of a string is salted
  per process);
- ``assert_close``: tests/assertions.py's comparison, whose error bound
  (``|actual - expected| <= atol + rtol * |expected|``, rtol from ``rtol=``,
  ``ulps=`` or the dtype's default) is documented there.

Tests marked `large` need tens of GB of memory and run only with
`--run-large` (or FASTOPT_RUN_LARGE=1).

Tests marked `slow` (the soak test, ~60 s) run only with `--run-slow`, or
when selected by a marker expression naming them (`-m slow`); a skipped test
is not a passing one, so CI (.ci/run) runs them explicitly.
"""
import os
import zlib

import assertions
import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=50, derandomize=True, deadline=None,
                          print_blob=True)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("FASTOPT_HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(params=assertions.DTYPES, ids=lambda t: np.dtype(t).name)
def dtype(request):
    """Each float dtype fastopt supports, as its scalar type."""
    return request.param


def seed_of(nodeid: str) -> int:
    """A 32-bit seed that depends only on the text of a test's node id."""
    return zlib.crc32(nodeid.encode("utf-8"))


@pytest.fixture
def rng(request):
    """A deterministic generator, its seed the crc32 of the test's node id."""
    return np.random.default_rng(seed_of(request.node.nodeid))


@pytest.fixture
def assert_close():
    """tests/assertions.py's assert_close (the bound is documented there)."""
    return assertions.assert_close


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


@pytest.fixture(scope="session")
def lib(tmp_path_factory):
    """src_c's step driver built on its own and loaded with ctypes
    (tests/_step_ctypes.py), for test_step_c.py, test_step_guards.py and
    test_q8.py; built once per run."""
    import _step_ctypes
    built = _step_ctypes.build(str(tmp_path_factory.mktemp("fo_step")))
    if built is None:
        pytest.skip("no C compiler")
    return built
