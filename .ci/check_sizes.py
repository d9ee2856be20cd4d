"""Size limits of the code base (docs/architecture.md, "Rules"): no module over
600 lines, no function over 80 lines in C, Cython or Python.

    python .ci/check_sizes.py            # from the repository root; exit 1 on a breach

A kernel table may be longer: mark its first line with ``size-exempt:`` and a
reason in a comment. Python functions are measured with ``ast``; Cython and C
by indentation and braces; a Python docstring does not count (a def/cdef line to the next line at its indent, a
C function from its opening line to its closing brace at column 0).
"""
from __future__ import annotations

import ast
import re
import subprocess
import sys

MAX_MODULE = 600
MAX_FUNCTION = 80
ROOTS = ("fastopt/", "src_c/")
SUFFIXES = (".py", ".pyx", ".pxi", ".pxd", ".c", ".h", ".inc")


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", *ROOTS], capture_output=True, text=True,
                         check=True).stdout.split()
    return [p for p in out if p.endswith(SUFFIXES)]


def python_functions(text: str):
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            doc = node.body[0]
            skip = 0           # a docstring is documentation, not logic
            if (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)):
                skip = doc.end_lineno - doc.lineno + 1
            yield node.name, first, node.end_lineno - skip


_CY_DEF = re.compile(r"^(\s*)(?:cpdef|cdef|def)\s+(?:[\w\[\]\*, .]+\s+)?\**(\w+)\s*\(")


def cython_functions(lines: list[str]):
    for i, line in enumerate(lines):
        m = _CY_DEF.match(line)
        if not m or line.rstrip().endswith(("nogil", "nogil:")) and "(" not in line:
            continue
        indent = len(m.group(1))
        end = i
        for j in range(i + 1, len(lines)):
            s = lines[j]
            if s.strip() and not s.lstrip().startswith("#"):
                if len(s) - len(s.lstrip()) <= indent:
                    break
                end = j
        if end > i:
            yield m.group(2), i + 1, end + 1


_C_START = re.compile(r"^[A-Za-z_][\w \*]*?\b(\w+)\s*\([^;]*$")


def c_functions(lines: list[str]):
    i = 0
    while i < len(lines):
        m = _C_START.match(lines[i])
        if m and not lines[i].startswith(("typedef", "#", "static const", "return")):
            j = i
            while j < len(lines) and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and "{" in lines[j]:
                k = j
                while k < len(lines) and lines[k].rstrip() != "}":
                    k += 1
                yield m.group(1), i + 1, k + 1
                i = k
        i += 1


def main() -> int:
    bad = []
    for path in tracked_files():
        text = open(path, encoding="utf-8").read()
        lines = text.splitlines()
        if len(lines) > MAX_MODULE:
            bad.append(f"{path}: {len(lines)} lines (limit {MAX_MODULE})")
        if path.endswith(".py"):
            funcs = python_functions(text)
        elif path.endswith((".pyx", ".pxi")):
            funcs = cython_functions(lines)
        elif path.endswith((".c", ".inc")):
            funcs = c_functions(lines)
        else:
            funcs = ()
        for name, a, b in funcs:
            if b - a + 1 > MAX_FUNCTION and "size-exempt:" not in lines[a - 1]:
                bad.append(f"{path}:{a}: {name} has {b - a + 1} lines (limit {MAX_FUNCTION})")
    for line in bad:
        print(line)
    print(f"check_sizes: {len(bad)} over the limits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
