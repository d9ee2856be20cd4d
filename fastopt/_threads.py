"""Thread control: the thread count of fastopt calls.

``default_n_threads`` is the ContextVar behind :func:`set_num_threads`. It
belongs to the extension (``fastopt._ext.default_n_threads``), whose fast
paths read it on every call with ``n_threads=None``; this module sets it.
"""
from __future__ import annotations

import contextlib

from . import _ext
from ._validation import check_n_threads

default_n_threads = _ext.default_n_threads


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
    token = default_n_threads.set(n)
    try:
        yield
    finally:
        default_n_threads.reset(token)


def get_num_threads() -> int:
    """The number of threads a call with ``n_threads=None`` would use now."""
    n = default_n_threads.get()
    if n is None:
        return _ext.max_threads()
    return _ext.num_procs() if n == -1 else n
