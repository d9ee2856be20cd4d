"""Optimizer checkpoints: the state dict, its complete check before anything
is restored, and the atomic ``.npz`` file written by ``save`` and read by
``load``.

``load`` treats the file as hostile (fastopt._npz): the file size, the zip
directory and every entry's .npy header are checked against this optimizer
before any state data is read, no entry is decompressed beyond its expected
size, and every number in the JSON header is bounded. Functions of the
optimizer ``opt``; its methods (:meth:`state_dict`, :meth:`load_state_dict`,
:meth:`save`, :meth:`load`) call them.
"""
from __future__ import annotations

import json
import os
import secrets
import stat
import struct
import time
import zipfile
import zlib

import numpy as np

from .. import _interrupt, _npz, _q8
from . import _states
from ._checks import as_bool, native
from ._states import Q8
from ._states import apart as _apart  # states stored apart: raw words + a header tag
from ._states import unsigned as _unsigned

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: an open file cannot be removed anyway
    fcntl = None

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
_PARAM_PREFIX = "params."     # params.<i>: the parameters, when saved with them
_STEPS_LIMIT = 2**63            # the update count T is an int64 (ONNX)
_META_MAX_CHARS = 1 << 20       # the JSON header (~200 characters per group)
_ENTRY_SLACK = 16 << 10         # bytes of zip and .npy headers per entry, at most
_STALE_AFTER = 1.0              # seconds: a younger .tmp file may be a save just starting


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into this optimizer.

    Raised for a file that is not a fastopt checkpoint (not an npz, truncated,
    corrupt, missing or unexpected entries) and for one that does not match
    the optimizer (another optimizer's file, other groups, other shapes or
    dtypes). The optimizer is left unchanged."""


# --------------------------------------------------------------- state dict

def state_dict(opt, f) -> dict:
    """See :meth:`fastopt.optim.OnnxMomentum.state_dict`; the groups' values
    as their check gives them (the file holds what a load takes)."""
    checked = [opt._check_group(f, g, f"param_groups[{gi}]")
               for gi, g in enumerate(opt.param_groups)]
    return {
        "format": _FORMAT,
        "version": _VERSION,
        "optimizer": type(opt).__name__,
        "steps": opt._steps,
        "param_groups": [dict({k: c[k] for k in opt._HYPER}, n_params=len(g["params"]))
                         for g, c in zip(opt.param_groups, checked)],
        "state": {name: [_copy(a) for a in arrays] for name, arrays in opt.state.items()},
    }


def _copy(a):    # an array's, or an 8-bit state's codes and absmax
    return _q8.State8bit(a.codes.copy(), a.absmax.copy(), a.signed) if isinstance(
        a, _q8.State8bit) else np.array(a, copy=True)


def saved_by(cls, name) -> bool:
    """Does a checkpoint's ``optimizer`` entry name class ``cls`` (its name,
    or one it had before, ``_OLD_NAMES``, whose files it still reads)?"""
    return name == cls.__name__ or name in getattr(cls, "_OLD_NAMES", ())


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
    if not saved_by(type(opt), sd["optimizer"]):
        raise CheckpointError(f"{f}: the checkpoint was saved by "
                              f"fastopt.optim.{sd['optimizer']}, not {name}")
    steps = sd["steps"]
    t0 = opt._T0        # the next update count, steps + t0, must be an int64
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) \
            or not 0 <= steps < _STEPS_LIMIT - t0:
        shown = f"an integer of {int(steps).bit_length()} bits" if isinstance(
            steps, int) and steps.bit_length() > 256 else repr(steps)
        bound = f"2**63 - {t0} (the update count, steps + {t0}, is an int64)" if t0 \
            else "2**63"
        raise CheckpointError(f"{f}: the checkpoint's step count must be an integer "
                              f">= 0 and < {bound}, got {shown}")
    return int(steps)


def with_added(cls, saved: dict) -> dict:
    """A saved group's hyperparameters with those that optimizer class cls
    added since (its _ADDED) at the value such a checkpoint ran with."""
    return {**{k: v for k, v in cls._ADDED.items() if k not in saved}, **saved}


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
        if set(with_added(type(opt), saved)) != keys:
            raise CheckpointError(
                f"{f}: the checkpoint's {where} has keys {sorted(saved)}, expected "
                f"{sorted(keys)}")
        saved = with_added(type(opt), saved)
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
        for i, (a, p, eight) in enumerate(zip(arrays, params, _states.eights(opt))):
            if eight:
                _check_eight(opt, f, sname, i, p, a)
                continue
            if not isinstance(a, np.ndarray):
                raise CheckpointError(f"{f}: the checkpoint's state {sname!r} of "
                                      f"params[{i}] is not an array")
            _state_spec(f, sname, i, p, dtype=opt._state_dtype if _apart(opt) else None)(a)


def _check_eight(opt, f, sname, i, p, a) -> None:
    """An 8-bit state of a state dict: a State8bit on its slot's map, codes
    and absmax of the parameter's sizes."""
    what = f"state {sname!r} of params[{i}]"
    if not isinstance(a, _q8.State8bit):
        raise CheckpointError(f"{f}: the checkpoint's {what} is not an 8-bit state "
                              f"(fastopt.State8bit); this optimizer keeps 8-bit states "
                              f"(state_dtype='{Q8}')")
    if bool(a.signed) == _unsigned(opt, sname):
        raise CheckpointError(f"{f}: the checkpoint's {what} is on the other map than "
                              f"its state's")
    for arr, spec in ((a.codes, _codes_spec(f, what, p)),
                      (a.absmax, _absmax_spec(f, what, p))):
        if not isinstance(arr, np.ndarray):
            raise CheckpointError(f"{f}: the checkpoint's {what} holds a "
                                  f"{type(arr).__name__}, not arrays")
        spec(arr)
    if (a.absmax < 0).any():        # a magnitude: no step writes a negative one
        raise CheckpointError(f"{f}: the checkpoint's {what} holds a negative absmax")


def _codes_spec(f, what, p):
    def check(h):
        if h.shape != p.shape or native(h.dtype) != np.uint8:
            raise CheckpointError(f"{f}: the checkpoint's {what} has codes of shape "
                                  f"{h.shape} and dtype {h.dtype}; it needs uint8 of "
                                  f"shape {p.shape}")
    return check


def _absmax_spec(f, what, p):
    n = _q8.blocks(p.size)

    def check(h):
        if h.shape != (n,) or native(h.dtype) != np.float32:
            raise CheckpointError(f"{f}: the checkpoint's {what} has an absmax of shape "
                                  f"{h.shape} and dtype {h.dtype}; it needs float32 of "
                                  f"shape ({n},), one per block of {_q8.BLOCK}")
    return check


def checked_state_dict(opt, f, sd):
    """Validate a state dict completely; return (groups, steps, state)."""
    steps = _check_header(opt, f, sd)
    groups = _check_groups(opt, f, sd["param_groups"])
    _check_state(opt, f, sd["state"])
    return groups, steps, sd["state"]


def restore(opt, f, sd, params=None) -> None:
    """Check a state dict completely, then copy it into the optimizer, and
    ``params`` (checked arrays, one per parameter, or None) into the
    parameters."""
    groups, steps, state = checked_state_dict(opt, f, sd)
    if (bad := _states.read_only(opt, params is not None)) is not None:
        raise CheckpointError(f"{f}: {bad} is read-only; nothing was restored")
    # everything checked, where it goes too: commit
    if params is not None:
        for dst, src in zip(opt.params, params):
            np.copyto(dst, src)
    for sname in opt._STATES:
        for dst, src in zip(opt.state[sname], state[sname]):
            if isinstance(dst, _q8.State8bit):
                np.copyto(dst.codes, src.codes)
                np.copyto(dst.absmax, src.absmax)
            else:
                np.copyto(dst, src)
    for group, new in zip(opt.param_groups, groups):
        for k in opt._HYPER:
            group[k] = new[k]
    opt._steps = steps


# --------------------------------------------------------------------- files

def _remove_stale(directory, base) -> None:
    """Remove ``.<base>.<12 hex digits>.tmp`` files in ``directory``: what
    saves of the same path left when they were killed. A file a live save
    still writes is locked (or, without fcntl, cannot be removed while open)
    and is left alone, as is one younger than _STALE_AFTER seconds."""
    prefix = f".{base}."
    try:
        names = os.listdir(directory)
    except OSError:
        return
    now = time.time()
    for name in names:
        token = name[len(prefix):-len(".tmp")]
        if not (name.startswith(prefix) and name.endswith(".tmp") and len(token) == 12
                and all(c in "0123456789abcdef" for c in token)):
            continue
        full = os.path.join(directory, name)
        try:
            st = os.lstat(full)     # a FIFO, link or device of that name is not ours
            if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < _STALE_AFTER:
                continue
            if fcntl is None:
                os.unlink(full)
                continue
            fd = os.open(full, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # fails while a save holds it
            os.unlink(full)
        except OSError:
            pass
        finally:
            os.close(fd)


def save(opt, path, params=False) -> None:
    """Write opt's state dict (and, with ``params``, the parameters, as
    ``params.<i>`` entries) to path as an uncompressed .npz, atomically;
    first remove what killed saves of the same path left behind."""
    params = as_bool(f"{opt._fname()}.save", "params", params)
    sd = state_dict(opt, f"{opt._fname()}.save")
    meta = {k: sd[k] for k in ("format", "version", "optimizer", "steps", "param_groups")}
    if _apart(opt):                 # the tag of the raw words below
        meta["state_dtype"] = opt._state_dtype.name
    if opt._q8:                     # codes, absmax, the block and the maps
        meta["state_dtype"] = Q8
        meta["q8_block"] = _q8.BLOCK
    arrays = {_META_KEY: np.array(json.dumps(meta))}
    for sname, arrs in sd["state"].items():
        for i, a in enumerate(arrs):
            if isinstance(a, _q8.State8bit):
                arrays[f"state.{sname}.{i}"] = a.codes
                arrays[f"state.{sname}.{i}.absmax"] = a.absmax
            else:
                arrays[f"state.{sname}.{i}"] = a.view(np.uint16) if _apart(opt) else a
    if opt._q8:
        for kind in ("signed", "unsigned"):
            arrays[f"q8.map.{kind}"] = _q8.dynamic_map(kind == "signed")
    if params:
        for i, p in enumerate(opt.params):
            arrays[f"{_PARAM_PREFIX}{i}"] = p
    path = _npz.save_target(f"{opt._fname()}.save", path)
    directory = os.path.dirname(os.path.abspath(path))
    _remove_stale(directory, os.path.basename(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:      # name the path given, not the temporary file
        raise type(exc)(exc.errno, f"{opt._fname()}.save: {exc.strerror}", path) from None
    try:
        if fcntl is not None:   # held until the rename: this file is not stale
            fcntl.flock(fd, fcntl.LOCK_EX)
        # whole: a SIGINT is raised once written, not dropped in a finalizer
        _interrupt.whole(_write_npz, fd, arrays)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if not isinstance(exc, KeyboardInterrupt) and _interrupted(exc):
            raise KeyboardInterrupt from exc    # not the error of the writer's cleanup
        raise
    finally:
        os.close(fd)
    _npz.fsync_directory(directory)


def _write_npz(fd, arrays) -> None:
    """The arrays as an .npz into a duplicate of fd, flushed to the disk (run whole:
    a KeyboardInterrupt could land in a finalizer the zip writer runs, such as
    ZipFile.__del__, where Python prints it and drops it)."""
    with os.fdopen(os.dup(fd), "wb") as fh:
        np.savez(fh, **arrays)
        fh.flush()
        os.fsync(fh.fileno())


def _interrupted(exc) -> bool:
    """Was exc raised while a KeyboardInterrupt unwound? (np.savez's zip writer,
    stopped by Ctrl-C at an entry's end, raises ValueError from its cleanup.)"""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


def load(opt, f, path, params=None) -> None:
    """Restore a checkpoint file written by :func:`save` into opt; its
    parameters too if the file holds them and ``params`` is not False
    (``params=True``: the file must hold them)."""
    if params is not None:
        params = as_bool(f, "params", params)
    path = os.fspath(path)
    try:
        fh = _npz.open_regular(path)    # a FIFO would block the open forever
    except _npz.NpzError as exc:
        raise CheckpointError(f"{f}: {exc}; a checkpoint is an .npz file") from None
    with fh:
        try:
            sd, saved_params = read_npz(opt, f, fh, params)
        except CheckpointError as exc:
            raise CheckpointError(f"{exc} (file {path!r})") from None
        except (_npz.NpzError, *_READ_ERRORS) as exc:
            what = "" if isinstance(exc, _npz.NpzError) else f"{type(exc).__name__}: "
            raise CheckpointError(
                f"{f}: {path!r} is not a readable fastopt checkpoint (truncated, "
                f"corrupt or not an .npz file): {what}{exc}") from None
    try:
        restore(opt, f, sd, saved_params)
    except CheckpointError as exc:
        raise CheckpointError(f"{exc} (file {path!r})") from None


def _max_file_bytes(opt) -> int:
    """The largest file :func:`save` can write for opt, parameters included
    (a generous bound)."""
    per = 2 * len(opt._STATES) + 1 if opt._q8 else len(opt._STATES) + 1  # 8-bit: absmax
    n_entries = 1 + per * len(opt.params) + (2 if opt._q8 else 0)          # and the maps
    data = (len(opt._STATES) + 1) * sum(p.nbytes for p in opt.params)
    return data + 4 * _META_MAX_CHARS + _ENTRY_SLACK * n_entries + (64 << 10)


def _meta_spec(f):
    def check(h):
        if h.shape != () or h.dtype.kind != "U" or h.dtype.itemsize > 4 * _META_MAX_CHARS:
            raise CheckpointError(f"{f}: the file's {_META_KEY!r} entry is not a "
                                  f"fastopt.optim header")
    return check


def _state_spec(f, sname, i, p, what=None, dtype=None):
    """The header check of state ``sname`` of parameter ``i`` (before its data);
    ``what`` names the entry otherwise (the saved parameter itself). The
    entry has p's dtype, or ``dtype`` (states stored apart: as the optimizer
    keeps them, or their raw words in a file)."""
    what = what or f"state {sname!r} of params[{i}]"

    def check(h):
        if h.shape != p.shape:
            raise CheckpointError(f"{f}: the checkpoint's {what} has shape "
                                  f"{h.shape} but params[{i}] has shape {p.shape}")
        if dtype is not None and native(h.dtype) != native(dtype):
            raise CheckpointError(f"{f}: the checkpoint's {what} has dtype {h.dtype} "
                                  f"but the optimizer keeps it as {dtype} (state_dtype)")
        if dtype is None and native(h.dtype) != native(p.dtype):
            raise CheckpointError(f"{f}: the checkpoint's {what} has dtype "
                                  f"{h.dtype} but params[{i}] has {p.dtype}")
    return check


def _read_meta(opt, f, r) -> dict:
    if _META_KEY not in r.keys:
        raise CheckpointError(f"{f}: the file has no {_META_KEY!r} entry; it is not "
                              f"a fastopt.optim checkpoint")
    text = str(r.read(_META_KEY, _meta_spec(f))[()])
    try:
        meta = _npz.loads_json(text, max_chars=_META_MAX_CHARS)
    except _npz.NpzError as exc:
        raise CheckpointError(f"{f}: the file's header is unreadable: {exc}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{f}: the file's header is not a JSON object")
    if meta.get("format") == _FORMAT and not saved_by(type(opt), meta.get("optimizer")):
        # say which optimizer wrote it before complaining about its entries
        raise CheckpointError(f"{f}: the checkpoint was saved by "
                              f"fastopt.optim.{meta.get('optimizer')!s:.80}, not "
                              f"{type(opt).__name__}")
    return meta


def _param_specs(opt, f, names, want) -> dict:
    """The header checks of the file's saved parameters, by entry name:
    every parameter or none (``want=True``: every one); empty when the
    file holds none or ``want`` is False."""
    keys = [f"{_PARAM_PREFIX}{i}" for i in range(len(opt.params))]
    present = [k for k in keys if k in names]
    if want and not present:
        raise CheckpointError(f"{f}: the file holds no parameters (it was saved without "
                              f"params=True)")
    if present and len(present) != len(keys):
        absent = next(k for k in keys if k not in names)
        raise CheckpointError(f"{f}: the file has no {absent!r} entry ({len(present)} of "
                              f"the {len(keys)} parameters saved)")
    if not present or want is False:
        return {}
    for i, p in enumerate(opt.params):        # restoring must not stop halfway
        if not p.flags.writeable:
            raise CheckpointError(f"{f}: params[{i}] is read-only; the checkpoint's "
                                  f"parameters cannot be restored into it (load with "
                                  f"params=False to restore the optimizer state only)")
    return {k: _state_spec(f, None, i, p, what=f"saved params[{i}]")
            for i, (k, p) in enumerate(zip(keys, opt.params))}


def _words(opt, f, tag):
    """The dtype of a file's state entries when the optimizer stores its
    states apart (their raw 16-bit words: uint16), else None; the header's
    ``state_dtype`` tag must say the same as the optimizer's."""
    mine = Q8 if opt._q8 else opt._state_dtype.name if _apart(opt) else None
    if tag != mine:
        def says(d):
            return "states of their parameters' dtype" if d is None else f"{d!s:.40} states"
        raise CheckpointError(f"{f}: the checkpoint holds {says(tag)}; this "
                              f"optimizer keeps {says(mine)} (state_dtype)")
    return np.dtype(np.uint16) if mine and mine != Q8 else None


def read_npz(opt, f, fh, params=None) -> tuple:
    """(the state dict, the saved parameters or None) held by an open .npz
    checkpoint file. Every entry's header is checked against opt before any
    data is read; raises CheckpointError or fastopt._npz.NpzError. The
    parameters are read if the file holds them, unless ``params`` is False
    (True: the file must hold them)."""
    with _npz.NpzReader(fh, max_bytes=_max_file_bytes(opt)) as r:
        meta = _read_meta(opt, f, r)
        words = _words(opt, f, meta.pop("state_dtype", None))
        _check_block(opt, f, meta.pop("q8_block", None))
        names = set(r.keys)
        n = len(opt.params)
        specs = _map_specs(opt, f, names)
        for sname in opt._STATES:
            keys = [f"state.{sname}.{i}" for i in range(n)]
            absent = [k for k in keys if k not in names]
            if absent:
                raise CheckpointError(
                    f"{f}: the file has no {absent[0]!r} entry ({len(absent)} of the "
                    f"{n} {sname!r} arrays missing)")
            for i, (key, p, eight) in enumerate(zip(keys, opt.params, _states.eights(opt))):
                if eight:
                    what = f"state {sname!r} of params[{i}]"
                    specs[key] = _codes_spec(f, what, p)
                    specs[key + ".absmax"] = _absmax_spec(f, what, p)
                    if key + ".absmax" not in names:
                        raise CheckpointError(f"{f}: the file has no {key + '.absmax'!r} "
                                              f"entry (the absmax of an 8-bit state)")
                else:
                    specs[key] = _state_spec(f, sname, i, p, dtype=words)
        pspecs = _param_specs(opt, f, names, params)
        skipped = {k for k in names if k.startswith(_PARAM_PREFIX)} if params is False \
            else set()
        extra = names - set(specs) - set(pspecs) - skipped - {_META_KEY}
        if extra:
            raise CheckpointError(f"{f}: the file has unexpected entries "
                                  f"{sorted(extra)[:5]}; it was written for other "
                                  f"parameters or by another program")
        for key, spec in {**specs, **pspecs}.items():     # every header, before any data
            r.header(key, spec)
        _check_maps(f, {k: r.read(k, specs[k]) for k in specs if k.startswith("q8.map.")})
        state = {sname: [_read_state(opt, r, specs, sname, i) for i in range(n)]
                 for sname in opt._STATES}
        if words is not None:       # the raw words as the optimizer's states
            state = {k: [a.view(opt._state_dtype) for a in v] for k, v in state.items()}
        saved = [r.read(k, spec) for k, spec in pspecs.items()] or None
    sd = dict(meta)
    sd["state"] = state
    return sd, saved


def _read_state(opt, r, specs, sname, i):
    """State sname of params[i] from the file: an array, or an 8-bit state
    of its codes and absmax entries."""
    key = f"state.{sname}.{i}"
    a = r.read(key, specs[key])
    if key + ".absmax" not in specs:
        return a
    return _q8.State8bit(a, r.read(key + ".absmax", specs[key + ".absmax"]),
                         not _unsigned(opt, sname))


def _check_block(opt, f, block) -> None:
    """The header's block size of 8-bit states: the int 256, given exactly when they are kept."""
    want = _q8.BLOCK if opt._q8 else None
    if block is not want and (type(block) is not int or block != want):
        raise CheckpointError(f"{f}: the checkpoint's 8-bit block size is {block!r:.40}; "
                              f"fastopt's 8-bit states use blocks of {_q8.BLOCK}")


def _map_specs(opt, f, names) -> dict:
    """The header checks of the file's two 8-bit maps (when the optimizer
    keeps 8-bit states; float32[256] each)."""
    if not opt._q8:
        return {}
    out = {}
    for kind in ("signed", "unsigned"):
        key = f"q8.map.{kind}"
        if key not in names:
            raise CheckpointError(f"{f}: the file has no {key!r} entry (the map of its "
                                  f"8-bit states)")

        def check(h, key=key):
            if h.shape != (256,) or native(h.dtype) != np.float32:
                raise CheckpointError(f"{f}: the checkpoint's {key} has shape {h.shape} and "
                                      f"dtype {h.dtype}; a map is float32[256]")
        out[key] = check
    return out


def _check_maps(f, maps) -> None:
    """The file's maps must be bitsandbytes' dynamic maps, the ones the
    kernels hold (a map that is not sorted is said so first)."""
    for key, m in maps.items():
        if not (np.diff(m.astype(np.float64)) > 0).all():
            raise CheckpointError(f"{f}: the checkpoint's {key} is not increasing; it is "
                                  f"not a map of 8-bit codes")
        mine = _q8.dynamic_map(key.endswith(".signed"))
        if not np.array_equal(m.view(np.uint32), mine.view(np.uint32)):
            raise CheckpointError(f"{f}: the checkpoint's {key} differs from bitsandbytes' "
                                  f"dynamic map, the only map fastopt's 8-bit states use")
