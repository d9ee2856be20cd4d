"""Every example of the documentation pages (each ```{doctest} block of
docs/*.md) runs on its own, as a reader would paste it: in a new Python
process, started in an empty directory, with nothing imported or defined
beforehand. The Sphinx doctest run (docs/conf.py) also gives each block its
own namespace; this test does not depend on that configuration.
"""
import doctest
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

import fastopt

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```\{doctest\}\n((?::[\w-]+:[^\n]*\n)*)\n?(.*?)^```", re.M | re.S)

RUN = r"""
import doctest, sys
text, name = sys.stdin.read(), sys.argv[1]
test = doctest.DocTestParser().get_doctest(text, {"__name__": "__main__"}, name, name, 0)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
runner.run(test)
sys.exit(1 if runner.failures else 0)
"""


def _blocks():
    if not DOCS.is_dir():
        return []
    out = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            options = dict(re.findall(r"^:([\w-]+):\s*(.*)$", m.group(1), re.M))
            out.append(pytest.param(m.group(2), options, id=f"{page.name}:{line}"))
    return out


BLOCKS = _blocks()


def test_the_pages_have_examples():
    if not DOCS.is_dir():
        pytest.skip("docs/ is not next to the tests")
    assert len(BLOCKS) >= 15


@pytest.mark.parametrize("code, options", BLOCKS)
def test_example_runs_alone_in_a_new_interpreter(code, options, tmp_path, request):
    m = re.fullmatch(r"(\w+) is None", options.get("skipif", "").strip())
    if "skipif" in options:
        assert m, f"unexpected :skipif: {options['skipif']!r}"
        if importlib.util.find_spec(m.group(1)) is None:
            pytest.skip(f"{m.group(1)} is not installed")
    assert doctest.DocTestParser().get_examples(code), "a block without examples"
    here = os.path.dirname(os.path.dirname(os.path.abspath(fastopt.__file__)))
    env = dict(os.environ, PYTHONPATH=here, OMP_NUM_THREADS="2")
    proc = subprocess.run([sys.executable, "-c", RUN, request.node.callspec.id], input=code,
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
