"""Plain fastopt.optim checkpoints (.npz) read into a ShardedOptimizer.

The file goes through fastopt's hostile-file reader (fastopt._npz): its size
is bounded by what ``fastopt.optim``'s ``save`` can write for these
parameters, the header entry's size is checked before it is read, and every
state entry's header (shape, dtype) before any data; each rank then reads
only the entries its shard needs.
"""
from __future__ import annotations

import zlib

import numpy as np

from fastopt import _npz
from fastopt.optim import CheckpointError
from fastopt.optim import checkpoint as _ckpt

META_KEY = "meta"
META_MAX_CHARS = 1 << 20        # fastopt.optim writes ~200 characters per group
ENTRY_SLACK = 16 << 10          # bytes of zip and .npy headers per entry, at most


def _max_bytes(opt) -> int:
    tensors = opt.layout.tensors
    # the states and, in a file saved with params=True, the parameters
    n_entries = 1 + (len(opt._state_names) + 1) * len(tensors)
    data = (len(opt._state_names) + 1) * sum(t.size * t.dtype.itemsize for t in tensors)
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
    """(steps, groups, {state: {dtype: this rank's flat shard}}, fingerprint)
    of a plain checkpoint; the fingerprint (a CRC-32 of the header and of the
    zip CRCs of every entry) tells whether two ranks read the same file."""
    tensors = opt.layout.tensors
    with _npz.NpzReader(path, max_bytes=_max_bytes(opt)) as r:
        text, meta = _read_meta(opt, f, r)
        steps = check_steps(f, meta.get("steps"))
        groups = check_groups(opt, f, meta.get("param_groups"))
        specs = {f"state.{s}.{i}": _npz.Spec(t.shape, t.dtype)
                 for s in opt._state_names for i, t in enumerate(tensors)}
        if any(k.startswith("params.") for k in r.keys):
            raise CheckpointError(f"{f}: the file holds the parameters too (saved with "
                                  f"params=True); a ShardedOptimizer restores the optimizer "
                                  f"state only: save it without params to load it here")
        _npz.check_names([k for k in r.keys if k != META_KEY], specs)
        for key, spec in specs.items():          # every header, before any data
            r.header(key, spec)
        mine = sorted({p.tensor.index for p in opt._inner_pieces})
        packed = {s: {dt: np.empty(opt.layout.shard_length(dt, opt.rank), dt)
                      for dt in opt.layout.dtypes}
                  for s in opt._state_names}
        for s in opt._state_names:
            for i in mine:
                key = f"state.{s}.{i}"
                full = r.read(key, specs[key]).reshape(-1)
                for p in opt._inner_pieces:
                    if p.tensor.index == i:
                        rel = p.lo - p.tensor.offset
                        packed[s][p.tensor.dtype][p.shard_offset:p.shard_offset + p.hi
                                                  - p.lo] = full[rel:rel + p.hi - p.lo]
        crcs = repr(sorted((k, r.crc(k)) for k in r.keys))
    return steps, groups, packed, zlib.crc32(crcs.encode(), zlib.crc32(text.encode()))
