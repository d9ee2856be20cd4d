"""Run every ```python block of a Markdown file (the README), each as written,
in a fresh namespace, and fail on the first exception.

    python .ci/run_snippets.py README.md

The docs/ pages are doctested by Sphinx; the README shows plain code meant to be
copied, so it is executed instead. A block that needs an optional library
(torch) is skipped when that library is not installed, and says so.
"""
import importlib.util
import re
import sys

FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
OPTIONAL = ("torch", "optax", "sklearn")


def main(path):
    text = open(path, encoding="utf-8").read()
    blocks = FENCE.findall(text)
    if not blocks:
        print(f"{path}: no python blocks")
        return 1
    for i, code in enumerate(blocks, 1):
        missing = [m for m in OPTIONAL
                   if re.search(rf"^\s*import {m}\b", code, re.M)
                   and importlib.util.find_spec(m) is None]
        if missing:
            print(f"{path}: block {i} skipped ({', '.join(missing)} not installed)")
            continue
        exec(compile(code, f"{path}, python block {i}", "exec"), {"__name__": "__main__"})
        print(f"{path}: block {i} ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
