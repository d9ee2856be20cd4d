"""Collective decisions: errors agreed on by every rank, threads per rank.

The rule of this package: every collective is entered by every rank or by
none. A rank that finds an error (bad input, unreadable file) does not
raise at once; it first tells the others (one small Allreduce), and then
every rank raises the same error, naming the rank that found it. Only then
can no rank wait forever in a collective that another rank skipped.
"""
from __future__ import annotations

import os

import numpy as np

from fastopt import _dtypes
from fastopt.optim import CheckpointError

_KINDS = {"TypeError": TypeError, "ValueError": ValueError,
          "CheckpointError": CheckpointError, "FileNotFoundError": FileNotFoundError,
          "PermissionError": PermissionError,
          "OSError": OSError, "RuntimeError": RuntimeError}


def mpi():
    """The mpi4py MPI module, or an ImportError that says how to get it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("fastopt.distributed needs mpi4py and an MPI library: "
                          "pip install 'fastopt[mpi]' (mpi4py + mpich)") from exc
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
    infos = comm.allgather(None if err is None else (type(err).__name__, str(err)))
    rank, (kind, msg) = next((r, i) for r, i in enumerate(infos) if i is not None)
    cls = _KINDS.get(kind, RuntimeError)
    if kind not in _KINDS:
        msg = f"{kind}: {msg}"
    out = cls(f"{msg} [found on rank {rank} of {comm.Get_size()}; every rank raises this]")
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
