"""The package's import structure: no cycle, and the package itself imported
from inside it only for its compiled extension.

The layers themselves are an import-linter contract (pyproject.toml,
``lint-imports`` in CI). The linter reads ``from . import _ext`` as an import
of the package (the extension is no .py file) and so ignores imports of the
package; this test reads every module's imports itself, resolving the
extension, and checks what that leaves out.
"""
from __future__ import annotations

import ast
import os
import re

import fastopt

ROOT = os.path.dirname(os.path.abspath(fastopt.__file__))
# the compiled modules (no .py file): the core, two front ends' own (the torch
# one's two) and a tool
EXTENSIONS = ("fastopt._ext", "fastopt.optim._compiled", "fastopt.torch._compiled",
              "fastopt.torch._flatcheck", "fastopt._cli._probe")
# the modules that may use the package's public names (fastopt.onnx_momentum ...)
TOOLS = ("fastopt._cli",)


def _modules():
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), os.path.dirname(ROOT))
                name = rel[:-3].replace(os.sep, ".")
                if name.endswith(".__init__"):
                    name = name[: -len(".__init__")]
                yield name, os.path.join(dirpath, f)


def _imports(name, path):
    """(imported module, the names taken) for every import in the file,
    function-level ones included, relative ones resolved."""
    is_pkg = path.endswith("__init__.py")
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = name.split(".")
                base = parts if is_pkg else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            yield mod, tuple(a.name for a in node.names)


def _graph():
    mods = dict(_modules())
    graph = {}
    for name, path in mods.items():
        out = set()
        for mod, names in _imports(name, path):
            if not mod.startswith("fastopt"):
                continue
            for n in names or ("",):
                sub = f"{mod}.{n}" if n else mod
                out.add(sub if sub in mods or sub in EXTENSIONS else mod)
        out.discard(name)
        graph[name] = out
    return graph


def test_no_import_cycle():
    graph = _graph()
    index, low, stack, on, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_package_is_imported_from_inside_only_for_its_extension():
    graph = _graph()
    wrong = sorted(m for m, deps in graph.items()
                   if "fastopt" in deps and m != "fastopt"
                   and not m.startswith(TOOLS) and m != "fastopt.__main__")
    assert wrong == []


def test_the_extensions_are_read_as_modules():
    # the resolution above must see `from . import _ext` as the extension
    graph = _graph()
    assert "fastopt._ext" in graph["fastopt._step"]
    assert "fastopt.optim._compiled" in graph["fastopt.optim._base"]
    assert "fastopt.torch._compiled" in graph["fastopt.torch._prep"]
    assert "fastopt.torch._flatcheck" in graph["fastopt.torch._flat"]


# What the core may not touch: torch objects and an optimizer's attributes
# (the front ends' own compiled modules, fastopt/optim/_compiled.pyx,
# fastopt/torch/_compiled.pyx and _flatcheck.pyx, read those and hand the core arrays,
# pointers and numbers).
FOREIGN = re.compile(r"\b(?:torch|param_groups|data_ptr|untyped_storage|grad)\b"
                     r"|\bopt\.\w|\bself\.state\b")


def _core_code():
    """(file, line number, line) of the core extension's code: fastopt/_ext.pyx
    and its includes, without comments and docstrings."""
    for f in sorted(os.listdir(ROOT)):
        if not (f == "_ext.pyx" or f.endswith(".pxi")):
            continue
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            text = fh.read()
        # docstrings and C blocks in triple quotes are prose or C, not Cython
        text = re.sub(r'"""(?:.|\n)*?"""', lambda m: "\n" * m.group().count("\n"), text)
        for i, line in enumerate(text.splitlines(), 1):
            # string literals are names and messages ("torch" is a convention)
            code = re.sub(r'"[^"]*"|\'[^\']*\'', '""', line).split("#", 1)[0]
            if code.strip():
                yield f, i, code


def test_the_core_reads_no_front_end_object():
    hits = [f"{f}:{i}: {c.strip()}" for f, i, c in _core_code() if FOREIGN.search(c)]
    assert hits == []


def test_the_core_scan_sees_code():
    # the scan above must read the extension's code, not an empty list
    assert sum(1 for _ in _core_code()) > 1000


def test_the_tools_stay_outside_the_import_of_the_library():
    # the demo, the bench workloads and the bandwidth probe are tools:
    # `import fastopt` (and its optimizers) loads none of them
    import subprocess
    import sys
    code = ("import sys, fastopt, fastopt.optim, fastopt.schedules, fastopt.onnx; "
            "print(sorted(m for m in sys.modules if m.startswith('fastopt._cli')))")
    # from the package's parent: a source checkout as the working directory
    # would put its uncompiled tree first
    top = os.path.dirname(ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=top, env=dict(os.environ, PYTHONPATH=top))
    assert out.stdout.strip() == "[]"
    assert not hasattr(fastopt._ext, "probe")
