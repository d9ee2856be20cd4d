"""Plain fastopt.optim checkpoints (.npz) read into a ShardedOptimizer.

The file goes through fastopt's hostile-file reader (fastopt._npz): its size
is bounded by what ``fastopt.optim``'s ``save`` can write for these
parameters, the header entry's size is checked before it is read, and every
state entry's header (shape, dtype) before any data; each rank then reads
only the entries its shard needs. With master weights the file's params.*
entries are the masters: those of 16-bit parameters are read, the others
(float32 and float64 parameters, their own masters and the user's to
restore) only checked.
"""
from __future__ import annotations

import zlib

import numpy as np

from fastopt import _npz, _q8
from fastopt.optim import CheckpointError, _states
from fastopt.optim import checkpoint as _ckpt

from . import _streams

META_KEY = "meta"
META_MAX_CHARS = 1 << 20        # fastopt.optim writes ~200 characters per group
ENTRY_SLACK = 16 << 10          # bytes of zip and .npy headers per entry, at most


def _max_bytes(opt) -> int:
    tensors = opt.layout.tensors
    # the states and, in a file saved with params=True, the parameters
    # (8-bit states: an absmax entry per state and tensor, and two maps)
    n_entries = 1 + (2 * len(opt._state_names) + 1) * len(tensors) + 2
    # (16-bit parameters' states and masters: float32)
    data = (len(opt._state_names) + 1) * sum(t.size * max(t.dtype.itemsize, 4)
                                             for t in tensors)
    return data + 4 * META_MAX_CHARS + ENTRY_SLACK * n_entries + (64 << 10)


def _meta_spec(f):
    def check(h):
        if h.shape != () or h.dtype.kind != "U" or h.dtype.itemsize > 4 * META_MAX_CHARS:
            raise CheckpointError(f"{f}: the file's {META_KEY!r} entry declares "
                                  f"{h.describe()}; it is not a fastopt.optim header")
    return check


def _read_meta(opt, f, r):
    tpl = opt._template
    if META_KEY not in r.keys:
        raise CheckpointError(f"{f}: the file has no {META_KEY!r} entry; it is not a "
                              f"fastopt.optim checkpoint")
    text = str(r.read(META_KEY, _meta_spec(f))[()])
    try:
        meta = _npz.loads_json(text, max_chars=META_MAX_CHARS)
    except _npz.NpzError as exc:
        raise CheckpointError(f"{f}: the file's {META_KEY!r} header is unreadable: "
                              f"{exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != tpl["format"] \
            or meta.get("version") != tpl["version"]:
        raise CheckpointError(f"{f}: the file is not a fastopt.optim checkpoint of "
                              f"version {tpl['version']}")
    if meta.get("optimizer") != tpl["optimizer"] and not _ckpt.saved_by(
            opt._probe_type, meta.get("optimizer")):
        raise CheckpointError(f"{f}: the checkpoint was saved by fastopt.optim."
                              f"{meta.get('optimizer')!s:.80}, not {tpl['optimizer']}")
    return text, meta


def read_plain(opt, f, path, check_steps, check_groups):
    """(steps, groups, {state: {(dtype, kind): this rank's packed stream}},
    fingerprint) of a plain checkpoint; the fingerprint (a CRC-32 of the
    header and of the zip CRCs of every entry) tells whether two ranks read
    the same file."""
    with _npz.NpzReader(path, max_bytes=_max_bytes(opt)) as r:
        text, meta = _read_meta(opt, f, r)
        steps = check_steps(opt, f, meta.get("steps"))
        groups = check_groups(opt, f, meta.get("param_groups"))
        _ckpt._words(opt, f, meta.get("state_dtype"))       # 8-bit, or the params' dtype
        _ckpt._check_block(opt, f, meta.get("q8_block"))
        specs = _state_specs(opt)
        has = any(k.startswith("params.") for k in r.keys)
        if has and not opt._mw:
            raise CheckpointError(f"{f}: the file holds the parameters too (saved with "
                                  f"params=True); a ShardedOptimizer restores the optimizer "
                                  f"state only: save it without params to load it here")
        if opt._mw and not has:
            raise CheckpointError(f"{f}: the file holds no parameters; with master_weights "
                                  f"a plain checkpoint holds the masters as its params.* "
                                  f"entries (fastopt.optim saves them so)")
        if opt._mw:                     # the masters: those of the 16-bit parameters are
            specs.update({f"params.{t.index}": _npz.Spec(      # read, the others checked
                t.shape, np.float32 if t.dtype in opt._half else t.dtype)
                for t in opt.layout.tensors})
        _npz.check_names([k for k in r.keys if k != META_KEY], specs)
        for key, spec in specs.items():          # every header, before any data
            r.header(key, spec)
        _ckpt._check_maps(f, {k: r.read(k, specs[k]) for k in specs if k.startswith("q8.")})
        packed = {s: _streams.pack(opt, _held(opt, lambda t, s=s: _read_state(
            opt, f, r, specs, s, t.index))) for s in opt._state_names}
        if opt._master_streams:         # those of the 16-bit parameters, read
            packed["master"] = _streams.pack(opt, _held(opt, lambda t: r.read(
                f"params.{t.index}", specs[f"params.{t.index}"]) if t.dtype in opt._half
                else None), opt._master_streams)
        crcs = repr(sorted((k, r.crc(k)) for k in r.keys))
    return steps, groups, packed, zlib.crc32(crcs.encode(), zlib.crc32(text.encode()))


def _held(opt, read) -> list:
    """Per inner piece, (its tensor's entry, ``read(tensor)``, and the
    piece's first element in it); a tensor's pieces are consecutive, so
    each entry is read once."""
    held, last = [], (None, None)
    for p in opt._inner_pieces:
        if last[0] is not p.tensor:
            last = (p.tensor, read(p.tensor))
        held.append((last[1], p.lo - p.tensor.offset))
    return held


def _state_specs(opt) -> dict:
    """The entries a plain checkpoint of opt holds, with their shapes and
    dtypes: per state and tensor its values, or its 8-bit codes and absmax
    (and then the two maps)."""
    specs = {}
    for s in opt._state_names:
        for t in opt.layout.tensors:
            key = f"state.{s}.{t.index}"
            if t.eight:
                specs[key] = _npz.Spec(t.shape, np.uint8)
                specs[key + ".absmax"] = _npz.Spec((_q8.blocks(t.size),), np.float32)
            else:
                specs[key] = _npz.Spec(t.shape, np.float32 if t.dtype in opt._half
                                       else t.dtype)
    if opt._q8:
        specs.update({f"q8.map.{k}": _npz.Spec((256,), np.float32)
                      for k in ("signed", "unsigned")})
    return specs


def _read_state(opt, f, r, specs, s, i):
    """State s of tensor i from the file: an array, or a State8bit (no step
    writes a negative absmax; these states skip checked_state_dict)."""
    key = f"state.{s}.{i}"
    a = r.read(key, specs[key])
    if key + ".absmax" not in specs:
        return a
    m = r.read(key + ".absmax", specs[key + ".absmax"])
    if (m < 0).any():
        raise CheckpointError(f"{f}: the checkpoint's {key} holds a negative absmax")
    return _q8.State8bit(a, m, not _states.unsigned(opt._cls, s))
