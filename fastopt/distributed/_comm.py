"""Collective decisions: errors agreed on by every rank, threads per rank.

The rule of this package: every collective is entered by every rank or by
none. A rank that finds an error (bad input, unreadable file) does not
raise at once; it first tells the others (one small Allreduce), and then
every rank raises the same error, naming the rank that found it: of the same
type when every rank can rebuild it from its message (a built-in exception,
CheckpointError), else of its nearest base class that can be. Only then
can no rank wait forever in a collective that another rank skipped.
"""
from __future__ import annotations

import builtins
import os

import numpy as np

from fastopt import _dtypes
from fastopt.optim import CheckpointError

_KINDS = {f"{c.__module__}.{c.__qualname__}": c for c in (CheckpointError,)}


def _kind_names(err) -> list:
    """The qualified names of err's class and its bases, most derived first."""
    return [f"{c.__module__}.{c.__qualname__}" for c in type(err).__mro__
            if issubclass(c, Exception)]


def _rebuild(names, msg):
    """The exception to raise everywhere: of the first class in ``names``
    that every rank can rebuild from a message (a built-in exception or
    fastopt's CheckpointError), so the type is kept whenever it can be;
    RuntimeError if none can. Returns (exception, whether the type is kept)."""
    for k, name in enumerate(names):
        module, _, qual = name.rpartition(".")
        cls = _KINDS.get(name) or (getattr(builtins, qual, None) if module == "builtins"
                                   else None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(msg), k == 0
            except Exception:  # noqa: BLE001 - needs other arguments (UnicodeDecodeError)
                continue
    return RuntimeError(msg), False


def mpi():
    """The mpi4py MPI module, or an ImportError that says how to get it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("fastopt.distributed needs mpi4py and an MPI library: "
                          "python -m pip install \".[mpi]\" in a clone of fastopt "
                          "(mpi4py + mpich)") from exc
    return MPI


def raise_agreed(comm, err, *, flagged=None) -> None:
    """Raise the same exception on every rank if any rank has one.

    ``err`` is this rank's exception or None. ``flagged`` (optional) says that
    the caller already knows, from its own collective, whether any rank has
    one; otherwise one Allreduce finds out. Costs nothing more when no rank
    has an error.
    """
    if comm.Get_size() == 1:
        if err is not None:
            raise err
        return
    if flagged is None:
        MPI = mpi()
        flag = np.array([0.0 if err is None else 1.0])
        comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
        flagged = bool(flag[0])
    if not flagged:
        return
    infos = comm.allgather(None if err is None else (_kind_names(err), str(err)))
    rank, (names, msg) = next((r, i) for r, i in enumerate(infos) if i is not None)
    msg = f"{msg} [found on rank {rank} of {comm.Get_size()}; every rank raises this]"
    out, kept = _rebuild(names, msg)
    if not kept:        # say what it was
        out = _rebuild(names, f"{names[0].rpartition('.')[2]}: {msg}")[0]
    if err is not None:
        raise out from err
    raise out


def default_n_threads(comm):
    """Threads per rank: the node's cores divided by the ranks on the node.

    Collective (it splits ``comm`` by shared memory). None (fastopt's own
    default) when OMP_NUM_THREADS is set: the user has chosen.
    """
    MPI = mpi()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        on_node = local.Get_size()
    finally:
        local.Free()
    if os.environ.get("OMP_NUM_THREADS"):
        return None, on_node
    return max(1, (os.cpu_count() or 1) // on_node), on_node


def mpi_type(dtype):
    MPI = mpi()
    return _dtypes.mpi_type(MPI, dtype)
