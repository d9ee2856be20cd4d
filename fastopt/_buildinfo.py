"""Build facts: how the C core was compiled (:func:`config`, :func:`show_config`)."""
from __future__ import annotations

import sys

from . import _ext

__version__ = "0.1.0"   # as [project] version in pyproject.toml


def config() -> dict:
    """The build facts shown by :func:`show_config`, as a dict."""
    import platform  # here: `import fastopt` need not load it

    info = _ext.build_info()
    tuning = _ext.tuning()
    return {
        "openmp": _ext.have_openmp(),
        "compiler": info["compiler"],
        "cflags": info["cflags"],
        "isa_paths": info["isa_paths"],
        "isa_active": info["isa_active"],
        "max_threads": _ext.max_threads(),
        "num_procs": _ext.num_procs(),
        "serial_bytes": tuning["serial_bytes"],
        "chunk_bytes": tuning["chunk_bytes"],
        "python": sys.version.split()[0],
        "machine": platform.machine(),
    }


def show_config(file=None) -> None:
    """Print how the C core was built: OpenMP, compiler, flags, threads."""
    import numpy as np

    c = config()
    lines = [
        f"fastopt {__version__}",
        f"  OpenMP:        {'on' if c['openmp'] else 'OFF (serial build)'}",
        f"  compiler:      {c['compiler']}",
        f"  flags:         {c['cflags']}",
        f"  ISA paths:     {c['isa_paths']}; this CPU runs {c['isa_active']}",
        f"  threads:       {c['max_threads']} by default, {c['num_procs']} cores",
        f"  serial below:  {c['serial_bytes']} bytes per call; chunks of "
        f"{c['chunk_bytes']} bytes",
        f"  numpy:         {np.__version__}",
        f"  python:        {c['python']} ({c['machine']})",
    ]
    print("\n".join(lines), file=file)
