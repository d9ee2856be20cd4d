"""The public modules expose what they document: every public attribute is
a submodule or listed in ``__all__``, so no import helper (``annotations``,
``ClassVar``, a command-line entry) reads as part of the API."""
import importlib
import inspect
import pathlib
import re

import pytest

PUBLIC = ["fastopt", "fastopt.optim", "fastopt.schedules", "fastopt.onnx", "fastopt.torch",
          "fastopt.capi",
          "fastopt.distributed"]


def _module(name):
    if name == "fastopt.torch":
        pytest.importorskip("torch")
    return importlib.import_module(name)


@pytest.mark.parametrize("name", PUBLIC)
def test_no_helper_names_leak(name):
    module = _module(name)
    extra = [n for n in dir(module) if not n.startswith("_") and n not in module.__all__
             and not inspect.ismodule(getattr(module, n))]
    assert extra == []


def test_schedules_has_no_command_line_entry():
    import fastopt.schedules
    assert not hasattr(fastopt.schedules, "main")


def test_every_public_name_is_in_the_api_reference():
    """docs/api.md documents (or renders through automodule) every name of
    every public module's ``__all__``."""
    api = pathlib.Path(__file__).resolve().parent.parent / "docs" / "api.md"
    if not api.exists():
        pytest.skip("docs/ is not next to the tests")
    text = api.read_text(encoding="utf-8")
    rendered = set(re.findall(r"automodule:: ([\w.]+)\n   :members:", text))
    missing = [f"{name}.{n}" for name in PUBLIC if name not in rendered
               for n in _module(name).__all__
               if not re.search(re.escape(f"{name}.{n}") + r"\b", text)]
    assert missing == []
