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

import fastopt

ROOT = os.path.dirname(os.path.abspath(fastopt.__file__))
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
                out.add(sub if sub in mods or sub == "fastopt._ext" else mod)
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


def test_the_extension_is_read_as_a_module():
    # the resolution above must see `from . import _ext` as the extension
    assert "fastopt._ext" in _graph()["fastopt._step"]
