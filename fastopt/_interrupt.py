"""A step is done whole or not at all, also under Ctrl-C.

Python raises KeyboardInterrupt (SIGINT under its default handler) at the
next bytecode it runs, which after a step's C call may be before the step's
bookkeeping (its count, the copies written back). :func:`whole` runs the part
of a step that writes with the default handler replaced by one that only
notes the signal, and raises the KeyboardInterrupt once that part has
returned or raised (docs/semantics.md, "Interrupted steps"). Off the main
thread, or under a handler of the caller's own, it changes nothing.
"""
from __future__ import annotations

import _signal
import threading

_SIGINT = _signal.SIGINT
_DEFAULT = _signal.default_int_handler


def whole(fn, *args):
    """fn(*args), a SIGINT arriving meanwhile raised as KeyboardInterrupt
    after it (its return value is then lost, its exception replaced)."""
    if (_signal.getsignal(_SIGINT) is not _DEFAULT
            or threading.main_thread().ident != threading.get_ident()):
        return fn(*args)
    caught = []
    _signal.signal(_SIGINT, lambda signum, frame: caught.append(signum))
    try:
        return fn(*args)
    finally:
        _signal.signal(_SIGINT, _DEFAULT)
        if caught:
            raise KeyboardInterrupt  # noqa: B012 (the step is done: now the interrupt)
