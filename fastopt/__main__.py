"""Command line: ``python -m fastopt {demo,bench,schedule,config} ...``."""
from __future__ import annotations

import sys

USAGE = """usage: python -m fastopt COMMAND [ARGS]

commands:
  demo       time the updates on ResNet-50's parameters against the NumPy
             formula, then train a small MLP on scikit-learn's digits
             (pip install ".[demo]"); --quick for a short run
  bench      ns/element, GB/s and ratios to NumPy and to a bandwidth probe
             for the standard workloads; --plot out.png (matplotlib)
  schedule   print (and --plot) a learning-rate schedule:
             schedule NAME --param k=v ... --steps N [--plot out.png]
  config     show how the C core was built
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        from . import _demo
        return _demo.main(rest)
    if cmd == "bench":
        from . import _bench
        return _bench.main(rest)
    if cmd == "schedule":
        from . import schedules
        return schedules.main(rest)
    if cmd == "config":
        from . import show_config
        show_config()
        return 0
    print(f"python -m fastopt: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
