"""Thread control and build information."""
from __future__ import annotations

import contextlib
import platform
import sys

from . import _core
from ._validation import check_n_threads


@contextlib.contextmanager
def set_num_threads(n_threads):
    """Context manager: the thread count for fastopt calls made inside it.

    Parameters
    ----------
    n_threads : int or None
        A positive count, -1 for all cores, or None for OpenMP's default
        (OMP_NUM_THREADS, threadpoolctl). An explicit ``n_threads=`` argument
        of a call still wins. The setting is per Python thread (and per
        asyncio context), so it never leaks into other threads.

    Examples
    --------
    >>> import fastopt
    >>> with fastopt.set_num_threads(1):
    ...     fastopt.get_num_threads()
    1
    """
    n = check_n_threads("fastopt.set_num_threads", n_threads)
    token = _core.default_n_threads.set(n)
    try:
        yield
    finally:
        _core.default_n_threads.reset(token)


def get_num_threads() -> int:
    """The number of threads a call with ``n_threads=None`` would use now."""
    n = _core.default_n_threads.get()
    if n is None:
        return _core.max_threads()
    return _core.num_procs() if n == -1 else n


def config() -> dict:
    """The build facts shown by :func:`show_config`, as a dict."""
    info = _core.build_info()
    return {
        "openmp": _core.have_openmp(),
        "compiler": info["compiler"],
        "cflags": info["cflags"],
        "isa_paths": info["isa_paths"],
        "isa_active": info["isa_active"],
        "max_threads": _core.max_threads(),
        "num_procs": _core.num_procs(),
        "serial_bytes": _core.tuning()["serial_bytes"],
        "chunk_bytes": _core.tuning()["chunk_bytes"],
        "python": sys.version.split()[0],
        "machine": platform.machine(),
    }


def show_config(file=None) -> None:
    """Print how the C core was built: OpenMP, compiler, flags, threads."""
    import numpy as np

    from . import __version__

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
