"""Optimizer checkpoints: the state dict, its complete check before anything
is restored, and the atomic ``.npz`` file written by ``save`` and read by
``load``.

Functions of the optimizer ``opt``; the optimizer's methods
(:meth:`state_dict`, :meth:`load_state_dict`, :meth:`save`, :meth:`load`)
call them.
"""
from __future__ import annotations

import json
import os
import secrets
import struct
import zipfile
import zlib

import numpy as np

from ._checks import native

__all__ = ["CheckpointError"]

# What reading a damaged .npz can raise, besides CheckpointError: zipfile
# raises NotImplementedError for an unknown compression method and
# RuntimeError for an "encrypted" entry (a flipped flag bit), zlib.error for
# corrupt deflate data, struct.error / OverflowError / MemoryError for
# corrupt sizes and headers.
_READ_ERRORS = (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile,
                UnicodeError, NotImplementedError, RuntimeError, zlib.error, struct.error,
                OverflowError, MemoryError)

_FORMAT = "fastopt.optim"
_VERSION = 1
_META_KEY = "meta"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into this optimizer.

    Raised for a file that is not a fastopt checkpoint (not an npz, truncated,
    corrupt, missing or unexpected entries) and for one that does not match
    the optimizer (another optimizer's file, other groups, other shapes or
    dtypes). The optimizer is left unchanged.
    """


# --------------------------------------------------------------- state dict

def state_dict(opt) -> dict:
    """See :meth:`fastopt.optim.Momentum.state_dict`."""
    return {
        "format": _FORMAT,
        "version": _VERSION,
        "optimizer": type(opt).__name__,
        "steps": opt._steps,
        "param_groups": [dict({k: g[k] for k in opt._HYPER}, n_params=len(g["params"]))
                         for g in opt.param_groups],
        "state": {name: [np.array(a, copy=True) for a in arrays]
                  for name, arrays in opt.state.items()},
    }


def _check_header(opt, f, sd) -> int:
    """The keys, format, version and optimizer of a state dict; its steps."""
    if not isinstance(sd, dict):
        raise CheckpointError(f"{f}: a state dict must be a dict, got {type(sd).__name__}")
    want = {"format", "version", "optimizer", "steps", "param_groups", "state"}
    missing = want - set(sd)
    if missing:
        raise CheckpointError(f"{f}: the checkpoint has no {sorted(missing)} entry; "
                              f"it is not a complete fastopt.optim state")
    extra = set(sd) - want
    if extra:
        raise CheckpointError(f"{f}: the checkpoint has unexpected entries {sorted(extra)}")
    if sd["format"] != _FORMAT:
        raise CheckpointError(f"{f}: not a fastopt.optim checkpoint (format "
                              f"{sd['format']!r})")
    if sd["version"] != _VERSION:
        raise CheckpointError(f"{f}: checkpoint format version {sd['version']!r}; this "
                              f"fastopt reads version {_VERSION}")
    name = type(opt).__name__
    if sd["optimizer"] != name:
        raise CheckpointError(f"{f}: the checkpoint was saved by "
                              f"fastopt.optim.{sd['optimizer']}, not {name}")
    steps = sd["steps"]
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) \
            or steps < 0:
        raise CheckpointError(f"{f}: the checkpoint's step count must be an integer "
                              f">= 0, got {steps!r}")
    return int(steps)


def _check_groups(opt, f, pgs) -> list:
    """The saved groups' hyperparameters, checked against the optimizer's groups."""
    if not isinstance(pgs, (list, tuple)) or len(pgs) != len(opt.param_groups):
        n = len(pgs) if isinstance(pgs, (list, tuple)) else pgs
        raise CheckpointError(f"{f}: the checkpoint has {n} parameter group(s), the "
                              f"optimizer {len(opt.param_groups)}")
    groups = []
    for gi, (saved, group) in enumerate(zip(pgs, opt.param_groups)):
        where = f"param_groups[{gi}]"
        if not isinstance(saved, dict):
            raise CheckpointError(f"{f}: the checkpoint's {where} is not a dict")
        keys = set(opt._HYPER) | {"n_params"}
        if set(saved) != keys:
            raise CheckpointError(
                f"{f}: the checkpoint's {where} has keys {sorted(saved)}, expected "
                f"{sorted(keys)}")
        if saved["n_params"] != len(group["params"]):
            raise CheckpointError(
                f"{f}: the checkpoint's {where} has {saved['n_params']} parameters, the "
                f"optimizer's {len(group['params'])}")
        merged = dict(group)
        merged.update({k: saved[k] for k in opt._HYPER})
        if merged["schedule"] is not None:
            merged["lr"] = None
        try:
            groups.append(opt._check_group(f, merged, where))
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{f}: the checkpoint's hyperparameters are invalid: "
                                  f"{exc}") from None
    return groups


def _check_state(opt, f, state) -> None:
    """The saved state arrays: one per parameter and state, same shape and dtype."""
    name = type(opt).__name__
    if not isinstance(state, dict) or set(state) != set(opt._STATES):
        got = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{f}: the checkpoint holds states {got}; "
                              f"{name} has {list(opt._STATES)}")
    params = opt.params
    for sname in opt._STATES:
        arrays = state[sname]
        if not isinstance(arrays, (list, tuple)) or len(arrays) != len(params):
            n = len(arrays) if isinstance(arrays, (list, tuple)) else "no list of"
            raise CheckpointError(f"{f}: the checkpoint has {n} {sname!r} arrays for "
                                  f"{len(params)} parameters")
        for i, (a, p) in enumerate(zip(arrays, params)):
            what = f"state {sname!r} of params[{i}]"
            if not isinstance(a, np.ndarray):
                raise CheckpointError(f"{f}: the checkpoint's {what} is not an array")
            if a.shape != p.shape:
                raise CheckpointError(f"{f}: the checkpoint's {what} has shape "
                                      f"{a.shape} but params[{i}] has shape {p.shape}")
            if native(a.dtype) != native(p.dtype):
                raise CheckpointError(f"{f}: the checkpoint's {what} has dtype "
                                      f"{a.dtype} but params[{i}] has {p.dtype}")


def checked_state_dict(opt, f, sd):
    """Validate a state dict completely; return (groups, steps, state)."""
    steps = _check_header(opt, f, sd)
    groups = _check_groups(opt, f, sd["param_groups"])
    _check_state(opt, f, sd["state"])
    return groups, steps, sd["state"]


def restore(opt, f, sd) -> None:
    """Check a state dict completely, then copy it into the optimizer."""
    groups, steps, state = checked_state_dict(opt, f, sd)
    # everything checked: commit
    for sname in opt._STATES:
        for dst, src in zip(opt.state[sname], state[sname]):
            np.copyto(dst, src)
    for group, new in zip(opt.param_groups, groups):
        for k in opt._HYPER:
            group[k] = new[k]
    opt._steps = steps


# --------------------------------------------------------------------- files

def _fsync_directory(directory) -> None:
    """Make a rename in directory durable."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)


def save(opt, path) -> None:
    """Write opt's state dict to path as an uncompressed .npz, atomically."""
    sd = state_dict(opt)
    meta = {k: sd[k] for k in ("format", "version", "optimizer", "steps", "param_groups")}
    arrays = {_META_KEY: np.array(json.dumps(meta))}
    for sname, arrs in sd["state"].items():
        for i, a in enumerate(arrs):
            arrays[f"state.{sname}.{i}"] = a
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


def load(opt, f, path) -> None:
    """Restore a checkpoint file written by :func:`save` into opt."""
    path = os.fspath(path)
    with open(path, "rb") as fh:
        try:
            sd = read_npz(opt, f, fh)
        except CheckpointError as exc:
            raise CheckpointError(f"{exc} (file {path!r})") from None
        except _READ_ERRORS as exc:
            raise CheckpointError(
                f"{f}: {path!r} is not a readable fastopt checkpoint (truncated, "
                f"corrupt or not an .npz file): {type(exc).__name__}: {exc}") from exc
    try:
        restore(opt, f, sd)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc} (file {path!r})") from None


def _read_meta(opt, f, z) -> dict:
    names = set(z.files)
    if _META_KEY not in names:
        raise CheckpointError(f"{f}: the file has no {_META_KEY!r} entry; it is not "
                              f"a fastopt.optim checkpoint")
    meta_arr = z[_META_KEY]
    if meta_arr.dtype.kind != "U" or meta_arr.shape != ():
        raise CheckpointError(f"{f}: the file's {_META_KEY!r} entry is not a "
                              f"fastopt.optim header")
    meta = json.loads(str(meta_arr[()]))
    if not isinstance(meta, dict):
        raise CheckpointError(f"{f}: the file's header is not a JSON object")
    if meta.get("format") == _FORMAT and meta.get("optimizer") != type(opt).__name__:
        # say which optimizer wrote it before complaining about its entries
        raise CheckpointError(f"{f}: the checkpoint was saved by "
                              f"fastopt.optim.{meta.get('optimizer')}, not "
                              f"{type(opt).__name__}")
    return meta


def read_npz(opt, f, fh) -> dict:
    """The state dict held by an open .npz checkpoint file (not yet checked
    against opt beyond its entries)."""
    z = np.load(fh, allow_pickle=False)
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise CheckpointError(f"{f}: the file holds a single .npy array, not an .npz "
                              f"checkpoint")
    with z:
        meta = _read_meta(opt, f, z)
        names = set(z.files)
        n = len(opt.params)
        state = {}
        expected = {_META_KEY}
        for sname in opt._STATES:
            keys = [f"state.{sname}.{i}" for i in range(n)]
            expected.update(keys)
            absent = [k for k in keys if k not in names]
            if absent:
                raise CheckpointError(
                    f"{f}: the file has no {absent[0]!r} entry ({len(absent)} of the "
                    f"{n} {sname!r} arrays missing)")
            state[sname] = [z[k] for k in keys]  # reads (and CRC-checks) each entry
        extra = names - expected
        if extra:
            raise CheckpointError(f"{f}: the file has unexpected entries "
                                  f"{sorted(extra)[:5]}; it was written for other "
                                  f"parameters or by another program")
    sd = dict(meta)
    sd["state"] = state
    return sd
