"""The ``fastopt`` command line: the ``fastopt`` console script
(``fastopt = "fastopt._cli:main"``), also behind ``python -m fastopt``.

One module per command: ``demo.py``, ``bench.py`` (with the standard
``workloads.py``), ``schedule.py``; ``config`` prints :func:`fastopt.show_config`.
Each command's module is imported only when it runs.
"""
from __future__ import annotations

import sys

USAGE = """usage: fastopt COMMAND [ARGS]
       fastopt --version

commands:
  demo       time the updates on ResNet-50's parameters against the NumPy
             formula, then train a small MLP on scikit-learn's digits
             (pip install ".[demo]"); --quick for a short run
  bench      ns/element, GB/s and ratios to NumPy and to the memory-bandwidth
             ceiling for the standard workloads; --plot out.png (matplotlib)
  schedule   print (and --plot) a learning-rate schedule:
             schedule NAME --param k=v ... --steps N [--plot out.png]
  config     show how the C core was built
  distributed-demo
             under mpiexec: train the digits MLP with sharded Adam
             (fastopt.distributed), per-rank state memory and accuracy:
             mpiexec -n 2 fastopt distributed-demo (pip install ".[mpi,demo]")

Each command's --help lists its options.
"""


def _config(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print("usage: fastopt config\n\nshow how the C core was built")
        return 0
    from .. import show_config

    show_config()
    return 0


def _command(name: str):
    """The ``main(argv) -> int`` of a command, or None for an unknown name."""
    if name == "config":
        return _config
    if name == "demo":
        from . import demo as module
    elif name == "bench":
        from . import bench as module
    elif name == "schedule":
        from . import schedule as module
    elif name == "distributed-demo":
        from ..distributed import demo as module
    else:
        return None
    return module.main


def main(argv: list[str] | None = None) -> int:
    """Run ``fastopt COMMAND [ARGS]``; return the exit status.

    ``argv`` defaults to ``sys.argv[1:]``. With no command (or ``-h``,
    ``--help``, ``help``) the usage is printed: status 0 when asked for,
    2 when the command is missing; an unknown command also gives 2.
    ``--version`` (or ``-V``) prints ``fastopt`` and its version.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] in ("--version", "-V"):
        from .. import __version__

        print(f"fastopt {__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    run = _command(cmd)
    if run is None:
        print(f"fastopt: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)
