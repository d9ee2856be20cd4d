"""Checkpoints of a ShardedOptimizer: sharded, atomic, loadable at any world size.

A checkpoint is a directory::

    path/LATEST                 the name of the current version (one line)
    path/ckpt-<steps>-<hex>/    one version
        meta.json               layout, step count, hyperparameters, CRCs
        rank-00000.bin ...      one file per rank: its shard of every state

Saving writes a new version in a hidden temporary directory, renames it into
place once every rank has written (and fsynced) its file, and only then
replaces ``LATEST`` (write to a temporary file, rename): a crash at any point
leaves ``LATEST`` naming a complete version. Older versions are then removed.

A rank file holds its *sections* (:func:`sections`): for each state (in the
optimizer's order) and each of its streams (``_layout.Stream``, in the
layout's order: per dtype, the values, then the codes and absmax of 8-bit
states), then, with master weights, the float32 masters of each 16-bit
dtype, the entries of the rank's ranges of the flat buffer, concatenated,
in native byte order. ``meta.json`` records every old rank's ranges (and,
with 8-bit states, their block, tensors and maps; with masters, their
dtypes), so a loader at any world size reads just the byte ranges it
needs. Files are treated as hostile: the header is checked completely and
every file's size before any data is read, and every block of 4 MiB read is
checked against its CRC-32.

A plain :mod:`fastopt.optim` checkpoint (an .npz written by ``save``) loads
too, and :func:`consolidate` writes one. Only regular files are opened (a
FIFO or a device is refused without blocking), and a load agrees across the
ranks on one checkpoint (a CRC-32 of its header) or fails on every rank.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import zlib

import numpy as np

from fastopt import _npz, _q8
from fastopt._npz import fsync_directory
from fastopt.optim import CheckpointError, _masters
from fastopt.optim import checkpoint as _ckpt

from . import _streams
from ._checks import CUT_KEYS, named_words
from ._comm import mpi, mpi_type, raise_agreed
from ._layout import Q8_BLOCK
from ._plain import read_plain

FORMAT = "fastopt.distributed"
VERSION = 1
BLOCK = 1 << 22
_MAX_META = 1 << 26


def _hyper_keys(opt):
    return [k for k in opt._template["param_groups"][0] if k != "n_params"]


def _plain(v):
    """A hyperparameter as JSON can hold it (NumPy scalars become Python's)."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _saved_groups(opt):
    keys = _hyper_keys(opt)
    return [dict({k: _plain(g[k]) for k in keys}, n_params=len(g["params"]))
            for g in opt.param_groups]


# ---------------------------------------------------------------- packing

def _pack(opt, name):
    """This rank's shard of state ``name`` (or "master", the float32
    masters of 16-bit tensors): (dtype, kind) -> one flat array per stream."""
    if name == "master":
        return _streams.pack(opt, _streams.masters(opt), opt._master_streams)
    arrays = opt.inner.state[name] if opt.inner is not None else ()
    return _streams.pack(opt, [(a, 0) for a in arrays])


def _unpacked(opt, packed):
    """{name: {(dtype, kind): flat shard}} -> {name: [state per inner parameter]}."""
    return {name: _streams.unpack(opt, name, packed[name]) for name in packed}


def sections(opt) -> list:
    """What a rank file holds, in order: (state name, stream) for each
    state and each of its streams, then ("master", stream) for each 16-bit
    dtype with float32 masters."""
    return ([(name, st) for name in opt._state_names for st in opt._streams]
            + [("master", st) for st in opt._master_streams])


def _q8_meta(opt):
    """What a header says of 8-bit states: the block, the tensors that
    keep them and the two maps (as the hex of their float32 words)."""
    return {"block": Q8_BLOCK, "tensors": [t.index for t in opt.layout.tensors if t.eight],
            "maps": {k: _q8.dynamic_map(k == "signed").tobytes().hex()
                     for k in ("signed", "unsigned")}}


# ------------------------------------------------------------------- save

def _write_rank_file(opt, tmp):
    fname = f"rank-{opt.rank:05d}.bin"
    crcs, size, crc, filled = [], 0, 0, 0     # running CRC of the current block
    with open(os.path.join(tmp, fname), "wb") as fh:
        packed = {}
        for name, st in sections(opt):
            if name not in packed:
                packed = {name: _pack(opt, name)}
            data = memoryview(packed[name][st.dtype, st.kind]).cast("B")
            fh.write(data)
            size += len(data)
            pos = 0
            while pos < len(data):
                take = min(BLOCK - filled, len(data) - pos)
                crc = zlib.crc32(data[pos:pos + take], crc)
                filled += take
                pos += take
                if filled == BLOCK:
                    crcs.append(crc)
                    crc, filled = 0, 0
        if filled:
            crcs.append(crc)
        fh.flush()
        os.fsync(fh.fileno())
    ranges = {dt.str: [list(r) for r in d.ranges(opt.rank)]
              for dt, d in opt.layout.dtypes.items()}
    return {"file": fname, "bytes": size, "ranges": ranges, "crc": crcs}


def save(self, path) -> None:
    """Write a checkpoint directory at ``path`` (collective; atomic as a whole).

    Every rank writes its shard; rank 0 writes ``meta.json`` and switches
    ``path/LATEST`` to the new version. The directory must be visible to
    every rank (a shared file system, or one machine).
    """
    comm = self.comm
    path = os.path.abspath(os.fspath(path))
    name = comm.bcast(f"ckpt-{self._steps:08d}-{secrets.token_hex(4)}"
                      if self.rank == 0 else None, root=0)
    tmp = os.path.join(path, f".{name}.tmp")
    err = None
    if self.rank == 0:
        try:
            os.makedirs(path, exist_ok=True)
            os.mkdir(tmp)
        except OSError as exc:
            err = exc
    raise_agreed(comm, err)
    info = None
    try:
        info = _write_rank_file(self, tmp)
    except Exception as exc:  # noqa: BLE001 - raised on every rank below
        err = OSError(f"fastopt.distributed.ShardedOptimizer.save: rank {self.rank} could "
                      f"not write its shard into {tmp!r}: {type(exc).__name__}: {exc}; the "
                      f"previous checkpoint stays the current one")
    infos = comm.gather(info, root=0)
    raise_agreed(comm, err)
    if self.rank == 0:
        try:
            _publish(self, path, tmp, name, infos)
        except Exception as exc:  # noqa: BLE001 - raised on every rank below
            err = exc
    raise_agreed(comm, err)


def _publish(opt, path, tmp, name, infos):
    meta = {
        "format": FORMAT, "version": VERSION, "optimizer": opt._template["optimizer"],
        "steps": opt._steps, "world_size": opt.world, "crc_block": BLOCK,
        "states": list(opt._state_names),
        "dtypes": [dt.str for dt in opt.layout.dtypes],
        "tensors": [[t.dtype.str, list(t.shape), t.group] for t in opt.layout.tensors],
        "param_groups": _saved_groups(opt),
        "ranks": infos,
    }
    if opt._q8:
        meta["q8"] = _q8_meta(opt)
    if opt._master_streams:
        meta["masters"] = [st.dtype.str for st in opt._master_streams]
    with open(os.path.join(tmp, "meta.json"), "w") as fh:
        json.dump(meta, fh)
        fh.flush()
        os.fsync(fh.fileno())
    fsync_directory(tmp)
    os.rename(tmp, os.path.join(path, name))
    latest_tmp = os.path.join(path, f".LATEST.{secrets.token_hex(4)}.tmp")
    with open(latest_tmp, "w") as fh:
        fh.write(name + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(latest_tmp, os.path.join(path, "LATEST"))
    fsync_directory(path)
    for entry in os.listdir(path):   # older versions and debris of crashed saves
        if entry != name and (entry.startswith("ckpt-") or
                              (entry.startswith(".ckpt-") and entry.endswith(".tmp"))):
            shutil.rmtree(os.path.join(path, entry), ignore_errors=True)


# ------------------------------------------------------------------- load

def load(self, path) -> None:
    """Restore a checkpoint (collective): a directory written by :meth:`save`
    at any world size, or a plain :mod:`fastopt.optim` .npz checkpoint.

    Everything is read and checked on every rank before anything changes;
    an error on any rank makes every rank raise it (CheckpointError for a
    damaged or mismatched checkpoint) and leaves the optimizer unchanged.
    """
    f = "fastopt.distributed.ShardedOptimizer.load"
    path = os.fspath(path)
    err = new = None
    try:
        if os.path.isdir(path):
            new = _read_sharded(self, f, path)
        else:
            new = read_plain(self, f, path, _check_steps, _check_groups)
    except Exception as exc:  # noqa: BLE001 - hostile files; raised on every rank below
        missing = isinstance(exc, FileNotFoundError) and not os.path.lexists(path)
        if not (missing or isinstance(exc, CheckpointError)):
            exc = CheckpointError(f"{f}: {path!r} is not a readable checkpoint: "
                                  f"{type(exc).__name__}: {exc}")
        err = exc
    _agree_on_version(self.comm, f, err, None if new is None else new[3])
    steps, groups, packed, _ = new
    masters = packed.pop("master", None)
    sd = mine = None
    try:                                # the inner state dict checked on every rank
        if self.inner is not None:      # before any rank writes (then: a collective)
            sd = dict(self._template, steps=steps, state=_unpacked(self, packed))
            sd["param_groups"] = []
            for gi, ig in enumerate(self.inner.param_groups):
                h = {k: ig[k] for k in _hyper_keys(self)}
                h.update({k: groups[gi][k] for k in h if k not in ("lr", "clipping")})
                sd["param_groups"].append(dict(h, n_params=len(ig["params"])))
            _ckpt.checked_state_dict(self.inner, f, sd)
            if masters is not None:
                mine = _streams.unpack(self, "master", masters)
    except Exception as exc:  # noqa: BLE001 - raised on every rank below
        err = exc if isinstance(exc, CheckpointError) else CheckpointError(
            f"{f}: {path!r} is not a readable checkpoint: {type(exc).__name__}: {exc}")
    raise_agreed(self.comm, err)
    if sd is not None:
        self.inner.load_state_dict(sd)
        if mine is not None:            # the 16-bit pieces rewritten from the masters
            for m, src in zip(self.inner.params, mine):
                if src is not None:
                    np.copyto(m, src)
            _masters.refresh(self.inner)
    if masters is not None:             # and gathered, as after a step
        self._allgather()
    for g, new_g in zip(self.param_groups, groups):
        g.update(new_g)
    self._steps = steps


def _agree_on_version(comm, f, err, fingerprint):
    """Raise on every rank if any rank failed, or if the ranks read different
    checkpoints (other paths, or LATEST switched by a save between their
    reads): one Allreduce of the error flag and the fingerprint."""
    if comm.Get_size() == 1:
        raise_agreed(comm, err)
        return
    fp = 0.0 if fingerprint is None else float(fingerprint)
    vec = np.array([0.0 if err is None else 1.0, fp, -fp])
    comm.Allreduce(mpi().IN_PLACE, vec, op=mpi().MAX)
    raise_agreed(comm, err, flagged=vec[0] > 0)
    if vec[1] != -vec[2]:
        raise CheckpointError(f"{f}: the ranks read different checkpoints (other paths, or "
                              f"a save switched LATEST while they read it); every rank "
                              f"must load the same one")


def _open(f, path):
    """A file of the checkpoint, opened for reading: regular files only (a
    FIFO or a device is refused at once, never waited on); a missing one is
    a CheckpointError (an incomplete or removed version)."""
    try:
        return _npz.open_regular(path)
    except _npz.NpzError as exc:
        raise CheckpointError(f"{f}: {exc}; a checkpoint holds regular files only") from None
    except FileNotFoundError:
        raise CheckpointError(f"{f}: the checkpoint has no {path!r} (an incomplete or "
                              f"removed version)") from None


def _check_groups(opt, f, saved):
    """Validate saved hyperparameters (through a probe of the optimizer's
    class) and return them normalised, the schedules kept."""
    keys = set(_hyper_keys(opt)) | {"n_params"}
    if not isinstance(saved, list) or len(saved) != len(opt.param_groups):
        raise CheckpointError(f"{f}: the checkpoint's parameter groups do not match the "
                              f"optimizer's {len(opt.param_groups)}")
    hypers = []
    for gi, (s, g) in enumerate(zip(saved, opt.param_groups)):
        if not isinstance(s, dict) or set(_ckpt.with_added(opt._cls, s)) != keys:
            raise CheckpointError(f"{f}: the checkpoint's param_groups[{gi}] has keys "
                                  f"{sorted(s) if isinstance(s, dict) else s!r}, expected "
                                  f"{sorted(keys)}")
        s = _ckpt.with_added(opt._cls, s)
        if s["n_params"] != len(g["params"]):
            raise CheckpointError(f"{f}: the checkpoint's param_groups[{gi}] has "
                                  f"{s['n_params']} parameters, the optimizer's "
                                  f"{len(g['params'])}")
        h = {k: v for k, v in g.items() if k != "params"}
        h.update({k: v for k, v in s.items() if k != "n_params"})
        if h.get("schedule") is not None:
            h["lr"] = None
        for k in CUT_KEYS:
            a, b = h.get(k), g.get(k)
            if (list(a) if isinstance(a, (list, tuple)) else a) != b:
                raise CheckpointError(f"{f}: the checkpoint's param_groups[{gi}]['{k}'] is "
                                      f"{a!r}, the optimizer's {b!r}; it fixes the shards")
        hypers.append(h)
    dts = [[v.dtype for v in ps] for ps in opt._group_params]
    try:
        probe = opt._probe(hypers, dts, n_threads=1)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{f}: the checkpoint's hyperparameters are invalid: "
                              f"{exc}") from None
    return [{k: v for k, v in pg.items() if k != "params"} for pg in probe.param_groups]


def _check_steps(opt, f, steps):    # fastopt.optim's bound: steps + T0 is an int64
    if type(steps) is not int or not 0 <= steps < 2**63 - opt._cls._T0:
        raise CheckpointError(f"{f}: the step count must be an integer >= 0 and < "
                              f"{2**63 - opt._cls._T0}, got {steps!r}")
    return steps


def _read_meta(f, vdir):
    mpath = os.path.join(vdir, "meta.json")
    with _open(f, mpath) as fh:
        # the size first: a larger file (e.g. sparse) is refused unread
        big = os.fstat(fh.fileno()).st_size > _MAX_META
        raw = b"" if big else fh.read(_MAX_META + 1)
    if big or len(raw) > _MAX_META:
        raise CheckpointError(f"{f}: {mpath!r} is larger than {_MAX_META} bytes")
    meta = json.loads(raw.decode("utf-8"))
    want = {"format", "version", "optimizer", "steps", "world_size", "crc_block", "states",
            "dtypes", "tensors", "param_groups", "ranks"}
    if not isinstance(meta, dict) or set(meta) - {"q8", "masters"} != want:
        raise CheckpointError(f"{f}: {mpath!r} is not a fastopt.distributed header")
    if meta["format"] != FORMAT or meta["version"] != VERSION:
        raise CheckpointError(f"{f}: {mpath!r} has format {meta['format']!r} version "
                              f"{meta['version']!r}; this fastopt reads {FORMAT} {VERSION}")
    return meta, zlib.crc32(raw)


def _read_sharded(opt, f, path):
    with _open(f, os.path.join(path, "LATEST")) as fh:
        name = fh.read(256).decode("ascii", "replace").strip()
    if not re.fullmatch(r"ckpt-\d{8,}-[0-9a-f]{8}", name):
        raise CheckpointError(f"{f}: {path!r}/LATEST names {name!r}, not a checkpoint version")
    vdir = os.path.join(path, name)
    meta, fingerprint = _read_meta(f, vdir)
    if meta["optimizer"] != opt._template["optimizer"] and not _ckpt.saved_by(
            opt._probe_type, meta["optimizer"]):
        raise CheckpointError(f"{f}: the checkpoint was saved by fastopt.optim."
                              f"{meta['optimizer']}, not {opt._template['optimizer']}")
    if meta["states"] != list(opt._state_names):
        raise CheckpointError(f"{f}: the checkpoint holds states {meta['states']!r}, the "
                              f"optimizer {list(opt._state_names)!r}")
    mine = [[t.dtype.str, list(t.shape), t.group] for t in opt.layout.tensors]
    if meta["tensors"] != mine:
        raise CheckpointError(f"{f}: the checkpoint was written for other parameters "
                              f"(count, shapes, dtypes or groups differ)")
    dts = list(opt.layout.dtypes)
    if meta["dtypes"] != [dt.str for dt in dts] or meta["crc_block"] != BLOCK:
        raise CheckpointError(f"{f}: the checkpoint's dtype list or block size is wrong")
    steps = _check_steps(opt, f, meta["steps"])
    groups = _check_groups(opt, f, meta["param_groups"])
    _check_kinds(f, meta, opt)
    files = _check_ranks(f, meta, opt, vdir)
    L = opt.layout
    packed: dict = {}
    for name_s, st in sections(opt):
        out = np.empty(_streams.length(opt, st, opt.rank), st.store)
        _fill(out, L.in_stream(st, L.dtypes[st.dtype].ranges(opt.rank)), files, (name_s, st))
        packed.setdefault(name_s, {})[st.dtype, st.kind] = out
    return steps, groups, packed, fingerprint


def _check_kinds(f, meta, opt):
    """The header's 8-bit states and masters must be the optimizer's: the
    same block, tensors and maps; masters of the same 16-bit dtypes."""
    says = {True: "8-bit states", False: "states of their parameters' dtype"}
    if opt._q8 != ("q8" in meta):
        raise CheckpointError(f"{f}: the checkpoint holds {says['q8' in meta]}; this "
                              f"optimizer keeps {says[opt._q8]} (state_dtype)")
    if opt._q8:
        theirs, mine = meta["q8"], _q8_meta(opt)
        if not isinstance(theirs, dict) or set(theirs) != set(mine):
            raise CheckpointError(f"{f}: the checkpoint's 'q8' entry is not a description "
                                  f"of 8-bit states")
        for k, what in (("block", "block size"), ("tensors", "tensors with 8-bit states"),
                        ("maps", "maps")):
            if theirs[k] != mine[k]:
                raise CheckpointError(f"{f}: the checkpoint's 8-bit states have other "
                                      f"{what} than this optimizer's ({theirs[k]!s:.60} "
                                      f"for {mine[k]!s:.60})")
    masters = [st.dtype.str for st in opt._master_streams] or None
    if meta.get("masters") != masters:
        theirs, mine = (("none" if m is None else f"those of {named_words(m)!s:.60}")
                        for m in (meta.get("masters"), masters))
        raise CheckpointError(f"{f}: the checkpoint holds float32 masters of 16-bit "
                              f"parameters: {theirs}; this optimizer keeps {mine} "
                              f"(master_weights)")


def _check_ranks(f, meta, opt, vdir):
    """Validate every rank entry and file size; return the readers. Each
    rank's ranges are checked and their cover of the buffers before they
    are mapped onto the streams."""
    w = meta["world_size"]
    ranks = meta["ranks"]
    if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 1 << 20 \
            or not isinstance(ranks, list) or len(ranks) != w:
        raise CheckpointError(f"{f}: the checkpoint's world size / rank list is invalid")
    L = opt.layout
    cover = {dt.str: [] for dt in L.dtypes}
    for q, r in enumerate(ranks):
        if not isinstance(r, dict) or set(r) != {"file", "bytes", "ranges", "crc"} \
                or r["file"] != f"rank-{q:05d}.bin" or not isinstance(r["ranges"], dict) \
                or set(r["ranges"]) != set(cover):
            raise CheckpointError(f"{f}: the checkpoint's entry of rank {q} is invalid")
        for dt, d in L.dtypes.items():
            rs = r["ranges"][dt.str]
            ok = isinstance(rs, list) and all(
                isinstance(x, list) and len(x) == 2 and all(
                    isinstance(v, int) and not isinstance(v, bool) for v in x)
                and 0 <= x[0] < x[1] <= d.length for x in rs)
            if not ok:
                raise CheckpointError(f"{f}: rank {q}'s ranges of {dt.name} are invalid")
            cover[dt.str] += [tuple(x) for x in rs]
    for dt, d in L.dtypes.items():
        pos = 0
        for lo, hi in sorted(cover[dt.str]):
            if lo != pos:
                raise CheckpointError(f"{f}: the ranks' ranges of {dt.name} do not cover "
                                      f"the parameters exactly once")
            pos = hi
        if pos != d.length:
            raise CheckpointError(f"{f}: the ranks' ranges of {dt.name} do not cover the "
                                  f"parameters")
    files = []
    for q, r in enumerate(ranks):
        ranges = {}
        for dt in L.dtypes:
            for lo, hi in r["ranges"][dt.str]:
                t = L.block_cut(dt, lo) or L.block_cut(dt, hi)
                if t is not None:
                    raise CheckpointError(f"{f}: rank {q}'s range [{lo}, {hi}) of {dt.name} "
                                          f"cuts a {Q8_BLOCK}-element block of params"
                                          f"[{t.index}]'s 8-bit states")
        for name, st in sections(opt):
            ranges[name, st] = L.in_stream(st, r["ranges"][st.dtype.str])
        total = sum(sum(b - a for a, b in ranges[k]) * k[1].store.itemsize for k in ranges)
        nblocks = -(-total // BLOCK)
        if r["bytes"] != total or not isinstance(r["crc"], list) or len(r["crc"]) != nblocks \
                or not all(isinstance(c, int) and 0 <= c < 1 << 32 for c in r["crc"]):
            raise CheckpointError(f"{f}: rank {q}'s size or checksums are inconsistent")
        files.append(_ShardFile(f, os.path.join(vdir, r["file"]), r, ranges))
    return files


class _ShardFile:
    """One old rank's file: its ranges and CRC-checked byte reads."""

    def __init__(self, f, fpath, entry, ranges):
        self.f, self.path, self.crc = f, fpath, entry["crc"]
        self.size = entry["bytes"]
        try:
            st = os.stat(fpath)
        except FileNotFoundError:
            raise CheckpointError(f"{f}: the checkpoint has no {fpath!r} (an incomplete or "
                                  f"removed version)") from None
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{f}: {fpath!r} is not a regular file; a checkpoint "
                                  f"holds regular files only")
        actual = st.st_size
        if actual != self.size:
            raise CheckpointError(f"{f}: {fpath!r} has {actual} bytes, the header says "
                                  f"{self.size} (truncated or replaced)")
        self.ranges = ranges              # section -> its ranges of the stream
        self.offset, off = {}, 0          # section -> its first byte in the file
        for key, rs in ranges.items():    # (in the file's order)
            self.offset[key] = off
            off += sum(b - a for a, b in rs) * key[1].store.itemsize
        self.cache = {}

    def block(self, k):
        b = self.cache.get(k)
        if b is None:
            with _open(self.f, self.path) as fh:
                fh.seek(k * BLOCK)
                b = fh.read(min(BLOCK, self.size - k * BLOCK))
            if zlib.crc32(b) != self.crc[k]:
                raise CheckpointError(f"{self.f}: {self.path!r} block {k} fails its CRC-32 "
                                      f"check (corrupt)")
            self.cache = {k: b}
        return b

    def read(self, lo, hi):
        out = bytearray()
        for k in range(lo // BLOCK, -(-hi // BLOCK)):
            b = self.block(k)
            out += b[max(lo - k * BLOCK, 0):min(hi - k * BLOCK, len(b))]
        return bytes(out)


def _fill(out, ranges, files, key):
    """Copy the new ranges of section key, (state, stream), concatenated
    into out, from the old files."""
    store = key[1].store
    size = store.itemsize
    pos = 0
    for a, b in ranges:
        for fl in files:
            base = fl.offset[key]
            pre = 0
            for lo, hi in fl.ranges[key]:
                x, y = max(a, lo), min(b, hi)
                if y > x:
                    data = fl.read(base + (pre + x - lo) * size, base + (pre + y - lo) * size)
                    out[pos + x - a:pos + y - a] = np.frombuffer(data, store)
                pre += hi - lo
        pos += b - a


# ------------------------------------------------------------ consolidate

def consolidate(self, path) -> None:
    """Write a plain :mod:`fastopt.optim` checkpoint of the whole state at
    ``path`` (collective; rank 0 gathers the states and writes the file, so
    it needs memory for the whole state, twice, for a moment)."""
    comm, w, L = self.comm, self.world, self.layout
    full: dict = {}
    packed: dict = {}
    for name, st in sections(self):
        if name not in packed:
            packed = {name: _pack(self, name)}
            full[name] = {}
        mine = packed[name][st.dtype, st.kind]
        counts = [_streams.length(self, st, q) for q in range(w)]
        displs = [sum(counts[:q]) for q in range(w)]
        recv = np.empty(sum(counts), st.store) if self.rank == 0 else None
        if w > 1:
            comm.Gatherv([mine, mpi_type(st.store)],
                         [recv, (counts, displs), mpi_type(st.store)] if self.rank == 0
                         else None, root=0)
        else:
            recv[:] = mine
        if self.rank == 0:
            flat = np.empty(sum(counts), st.store)
            for q in range(w):
                pos = displs[q]
                for lo, hi in L.in_stream(st, L.dtypes[st.dtype].ranges(q)):
                    flat[lo:hi] = recv[pos:pos + hi - lo]
                    pos += hi - lo
            full[name][st.dtype, st.kind] = flat
    err = None
    if self.rank == 0:
        try:
            _write_plain(self, path, full)
        except Exception as exc:  # noqa: BLE001 - raised on every rank below
            err = exc
    raise_agreed(comm, err)


def _write_plain(opt, path, full):
    groups = []
    for g in opt.param_groups:
        h = {k: v for k, v in g.items() if k != "params"}
        if h.get("schedule") is not None:
            h["lr"] = None
        groups.append(dict(h, params=list(g["params"])))
    kwargs = dict(opt._kwargs, n_threads=1)
    plain = opt._cls(groups, *opt._args, **kwargs)
    sd = dict(opt._template, steps=opt._steps, param_groups=_saved_groups(opt),
              state={name: _streams.whole(opt, name, full[name])
                     for name in opt._state_names})
    plain.load_state_dict(sd)
    for m, master in zip(plain.params, _streams.whole(opt, "master", full.get("master", {}))):
        if master is not None:          # (16-bit parameters: their float32 masters)
            np.copyto(m, master)
    plain.save(path)
