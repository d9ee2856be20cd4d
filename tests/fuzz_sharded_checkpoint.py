"""Structural fuzzing of ShardedOptimizer checkpoint directories: a target of
tests/fuzz_api.py, as tests/fuzz_checkpoint.py is for the single-process
format.

Each input picks a small ShardedOptimizer (one rank, ``MPI.COMM_SELF``, in
this process), takes a real checkpoint of it (written by ``save``), may
re-split its rank file into the files of 2 or 3 old ranks (the format
records every rank's ranges, so a load at one rank reads across them), and
mutates the directory with choices decoded from the fuzzer's bytes:

- ``meta.json``: any value replaced (wrong types, huge, negative,
  fractional and non-finite numbers, other dtype strings, paths), keys
  dropped or added, list items dropped, duplicated or swapped; the raw
  bytes flipped, truncated, padded, made non-UTF-8 or deeply nested; the
  file made sparse beyond the size a header may have;
- rank files: truncated, extended, flipped, made sparse and huge, deleted,
  or replaced by a FIFO, a directory or a symlink (to /dev/zero, to a FIFO,
  to another rank's file);
- ``LATEST``: garbage, a missing or escaping version name, a FIFO, a
  directory, a symlink to /dev/zero; the version directory deleted or
  replaced by a file.

The oracle:

- ``load`` raises nothing but CheckpointError (any other exception, a crash
  or a hang is a finding), and reads the directory without changing it;
- after a rejection the optimizer is unchanged (parameters, shard states,
  step count, hyperparameters);
- a load that succeeds leaves a consistent optimizer: a step count in the
  format's bounds, its own state arrays (same shapes and dtypes), and a next
  step that runs;
- the process's peak RSS never grows by more than a small multiple of the
  optimizer's own state plus a fixed allowance.
"""
from __future__ import annotations

import json
import os
import shutil
import zlib

import numpy as np
from fuzz_checkpoint import RSS_ALLOWANCE_KIB, _maxrss

BLOCK = 1 << 22                 # the format's CRC block (fastopt/distributed/_checkpoint.py)
MAX_META = 1 << 26              # the largest meta.json a load reads
VERSION = "ckpt-00000002-0123abcd"
HOSTILE = [10**30, 2**63, 2**62, 2**31, -1, 0, 1, 1.5, float("nan"), float("inf"), "3",
           None, True, [], {}, [[0, 2**40]], [[-1, 2]], [[2, 1]], "<f2", "|O", ">f8", "<f4",
           "rank-00000.bin", "rank-00001.bin", "../LATEST", "/dev/zero", "x" * 5000,
           [0] * 50, "fastopt.optim", "OnnxAdam"]
LATEST = [b"", b"ckpt-00000002-0123abce\n", b"../../etc\n", b"ckpt-1-2\n", b"\xff\xfe\n",
          VERSION.encode() + b" " * 4000, b"ckpt-00000002-0123abcd/../x\n",
          b"ckpt-99999999999999999999-0123abcd\n"]
_TEMPLATES: dict = {}


def _make(cls, shapes, dtypes):
    from mpi4py import MPI

    from fastopt.distributed import ShardedOptimizer

    params = [np.linspace(-1, 1, int(np.prod(s))).astype(_DTYPES[d]).reshape(s)
              for s, d in zip(shapes, dtypes)]
    # AdamW: 8-bit states (of the float32 tensors of 4096 elements or more),
    # master weights of its bfloat16 parameters
    kw = {"state_dtype": "int8-blockwise"} if cls.__name__ == "AdamW" else {}
    if "bfloat16" in dtypes:
        kw["master_weights"] = True
    return ShardedOptimizer(cls, params, lr=0.01, bucket_bytes=64, comm=MPI.COMM_SELF, **kw)


def _bf16():
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


_DTYPES = {"float32": np.float32, "float64": np.float64, "bfloat16": _bf16()}


def _grads(opt, k):
    return [np.asarray(np.cos(k * p.astype(np.float64) + 1)).astype(p.dtype)
            for p in opt.params]


def _template(cls, shapes, dtypes, tmpdir):
    """(meta, rank file bytes) of a real checkpoint of a stepped optimizer."""
    key = (cls.__name__, shapes, dtypes)
    if key not in _TEMPLATES:
        opt = _make(cls, shapes, dtypes)
        for k in range(2):
            opt.step(_grads(opt, k))
        path = os.path.join(tmpdir, "sharded-template")
        shutil.rmtree(path, ignore_errors=True)
        opt.save(path)
        with open(os.path.join(path, "LATEST")) as fh:
            vdir = os.path.join(path, fh.read().strip())
        with open(os.path.join(vdir, "meta.json")) as fh:
            meta = json.load(fh)
        with open(os.path.join(vdir, "rank-00000.bin"), "rb") as fh:
            _TEMPLATES[key] = (meta, fh.read())
    meta, data = _TEMPLATES[key]
    return json.loads(json.dumps(meta)), data


def _crcs(data):
    return [zlib.crc32(data[i:i + BLOCK]) for i in range(0, len(data), BLOCK)]


def _resplit(src, meta, data):
    """The one rank's file re-split into the files of w old ranks: rank q
    holds, for each state and dtype, the values of its ranges."""
    w = src.int(2, 3)
    segs, pos, cuts = {}, 0, {}
    for s in meta["states"]:
        for dt in meta["dtypes"]:
            ranges = meta["ranks"][0]["ranges"][dt]
            n = sum(hi - lo for lo, hi in ranges)
            size = n * np.dtype(dt).itemsize
            segs[s, dt] = data[pos:pos + size]
            pos += size
            if dt not in cuts:
                inner = sorted(src.int(0, n) for _ in range(w - 1))
                cuts[dt] = [0] + inner + [n]
    ranks, files = [], []
    for q in range(w):
        blob = b"".join(segs[s, dt][cuts[dt][q] * np.dtype(dt).itemsize:
                                    cuts[dt][q + 1] * np.dtype(dt).itemsize]
                        for s in meta["states"] for dt in meta["dtypes"])
        rng = {dt: [[cuts[dt][q], cuts[dt][q + 1]]] if cuts[dt][q] < cuts[dt][q + 1] else []
               for dt in meta["dtypes"]}
        ranks.append({"file": f"rank-{q:05d}.bin", "bytes": len(blob), "ranges": rng,
                      "crc": _crcs(blob)})
        files.append(blob)
    meta["world_size"], meta["ranks"] = w, ranks
    return files


def _resplit_8bit(src, meta, data, opt):
    """As _resplit, for a checkpoint with 8-bit states (or masters): the cuts
    fall where no block of them is split, and each section of the file (a
    state's stream: values, codes or absmax; masters) is re-split as the
    format maps the
    ranks' ranges onto it (fastopt.distributed._layout.Layout.in_stream)."""
    from fastopt.distributed._checkpoint import sections

    L, w = opt.layout, src.int(2, 3)
    cuts = {}
    for dt, d in L.dtypes.items():
        inner = []
        for _ in range(w - 1):
            c = src.int(0, d.length)
            t = L.block_cut(dt, c)
            inner.append(c if t is None else t.offset + (c - t.offset) // 256 * 256)
        cuts[dt] = [0] + sorted(inner) + [d.length]
    segs, pos = {}, 0
    for key in sections(opt):
        st = key[1]
        n = sum(b - a for a, b in L.in_stream(st, [(0, L.dtypes[st.dtype].length)]))
        segs[key] = np.frombuffer(data[pos:pos + n * st.store.itemsize], st.store)
        pos += n * st.store.itemsize
    ranks, files = [], []
    for q in range(w):
        mine = {dt: [(c[q], c[q + 1])] if c[q] < c[q + 1] else [] for dt, c in cuts.items()}
        blob = b"".join(segs[k][a:b].tobytes() for k in sections(opt)
                        for a, b in L.in_stream(k[1], mine[k[1].dtype]))
        ranks.append({"file": f"rank-{q:05d}.bin", "bytes": len(blob), "ranges": {
            dt.str: [list(r) for r in rs] for dt, rs in mine.items()}, "crc": _crcs(blob)})
        files.append(blob)
    meta["world_size"], meta["ranks"] = w, ranks
    return files


def _slots(obj, out):
    """Every (container, key) of a JSON value."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) \
        if isinstance(obj, list) else ()
    for k, v in items:
        out.append((obj, k))
        _slots(v, out)
    return out


def _mutate_meta(src, meta):
    slots = _slots(meta, [])
    if not slots:
        return
    obj, k = src.pick(slots)
    how = src.int(0, 5)
    if how <= 2:
        obj[k] = src.pick(HOSTILE)
    elif how == 3 and isinstance(obj, dict):
        del obj[k]
    elif how == 3:
        obj.pop(k)
    elif how == 4 and isinstance(obj, dict):
        obj[src.pick(["extra", "steps2", "crc"])] = src.pick(HOSTILE)
    elif isinstance(obj, list) and obj:
        j = src.int(0, len(obj) - 1)
        if src.chance(2):
            obj[k], obj[j] = obj[j], obj[k]
        else:
            obj.append(obj[j])


def _meta_bytes(src, meta):
    text = json.dumps(meta).encode()
    k = src.int(0, 9)
    if k == 0 and text:
        text = text[:src.int(0, len(text) - 1)]
    elif k == 1 and text:
        b = bytearray(text)
        for _ in range(src.int(1, 4)):
            b[src.int(0, len(b) - 1)] ^= 1 << src.int(0, 7)
        text = bytes(b)
    elif k == 2:
        text = text + b" " * src.pick([1, 1 << 16, 1 << 20])
    elif k == 3:
        text = src.pick([b"[" * 100000, b"{" * 5000, b"\xff\xfe" + text, b"null", b"[]",
                         b'{"format": "fastopt.distributed"}', b"1e999999", text + text])
    return text


def _write(path, meta_bytes, files):
    shutil.rmtree(path, ignore_errors=True)
    vdir = os.path.join(path, VERSION)
    os.makedirs(vdir)
    with open(os.path.join(vdir, "meta.json"), "wb") as fh:
        fh.write(meta_bytes)
    for q, blob in enumerate(files):
        with open(os.path.join(vdir, f"rank-{q:05d}.bin"), "wb") as fh:
            fh.write(blob)
    with open(os.path.join(path, "LATEST"), "wb") as fh:
        fh.write(VERSION.encode() + b"\n")
    return vdir


def _replace(src, target, path):
    """Replace a file of the checkpoint by another kind of object."""
    if os.path.isdir(target) and not os.path.islink(target):
        shutil.rmtree(target)
    elif os.path.lexists(target):
        os.remove(target)
    k = src.int(0, 5)
    if k == 0:
        return                                          # deleted
    if k == 1 and hasattr(os, "mkfifo"):
        os.mkfifo(target)
    elif k == 2:
        os.mkdir(target)
    elif k == 3 and os.path.exists("/dev/zero"):
        os.symlink("/dev/zero", target)
    elif k == 4 and hasattr(os, "mkfifo"):
        fifo = os.path.join(path, ".fifo")
        os.mkfifo(fifo)
        os.symlink(fifo, target)
    else:
        other = os.path.join(path, VERSION, "rank-00000.bin")
        os.symlink(other, target) if os.path.exists(other) else open(target, "wb").close()


def _mutate_files(src, path, vdir, n_files):
    k = src.int(0, 7)
    rank = os.path.join(vdir, f"rank-{src.int(0, max(n_files - 1, 0)):05d}.bin")
    if k == 0 and os.path.exists(rank):
        with open(rank, "r+b") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.truncate(src.pick([0, max(size - 1, 0), size + 1, size // 2, 1 << 40]))
    elif k == 1 and os.path.getsize(rank) > 0:
        with open(rank, "r+b") as fh:
            at = src.int(0, os.path.getsize(rank) - 1)
            fh.seek(at)
            b = fh.read(1)
            fh.seek(at)
            fh.write(bytes([b[0] ^ (1 << src.int(0, 7))]))
    elif k == 2:
        _replace(src, rank, path)
    elif k == 3:
        with open(os.path.join(path, "LATEST"), "wb") as fh:
            fh.write(src.pick(LATEST))
    elif k == 4:
        _replace(src, os.path.join(path, "LATEST"), path)
    elif k == 5:
        _replace(src, os.path.join(vdir, "meta.json"), path)
    elif k == 6:
        with open(os.path.join(vdir, "meta.json"), "r+b") as fh:
            fh.truncate(MAX_META + src.int(1, 1 << 20))       # sparse: no disk used
    elif k == 7:
        shutil.rmtree(vdir)
        if src.chance(2):
            open(vdir, "wb").close()


def _arrays(opt):
    """Every state array of the shard (an 8-bit state's codes and absmax),
    and the masters of its 16-bit pieces."""
    masters = [m for m, c in zip(opt.inner.params, opt.inner._copies or ()) if c is not None]
    return [b for arrs in opt.inner.state.values() for a in arrs
            for b in ((a.codes, a.absmax) if hasattr(a, "codes") else (a,))] + masters


def _state(opt):
    return (opt.steps, repr(opt.param_groups),
            [p.tobytes() for p in opt.params], [a.tobytes() for a in _arrays(opt)])


def _listing(path):
    out = []
    for root, dirs, files in os.walk(path):
        for name in sorted(dirs + files):
            p = os.path.join(root, name)
            st = os.lstat(p)
            out.append((p, st.st_mode, st.st_size, st.st_mtime_ns))
    return out


def sharded_case(src, tmpdir) -> None:
    from fastopt import optim

    cls = src.pick([optim.OnnxMomentum, optim.OnnxAdagrad, optim.OnnxAdam, optim.AdamW])
    n = src.int(1, 3)
    shapes = tuple(src.pick([(5,), (2, 3), (), (4, 1), (40,)]) for _ in range(n))
    dtypes = tuple(src.pick(["float32", "float64"]) for _ in range(n))
    if cls is optim.AdamW:          # a tensor with 8-bit states in 17 blocks, and
        dtypes = tuple(src.pick(["float32", "bfloat16"]) for _ in range(n))   # masters
        shapes, dtypes = shapes + ((4100,),), dtypes + ("float32",)
    meta, data = _template(cls, shapes, dtypes, tmpdir)
    opt = _make(cls, shapes, dtypes)
    if not src.chance(3):
        files = [data]
    elif "q8" in meta or "masters" in meta:
        files = _resplit_8bit(src, meta, data, opt)
    else:
        files = _resplit(src, meta, data)
    for _ in range(src.int(0, 3)):
        _mutate_meta(src, meta)
    path = os.path.join(tmpdir, "sharded")
    vdir = _write(path, _meta_bytes(src, meta), files)
    if src.chance(2):
        _mutate_files(src, path, vdir, len(files))
    del meta, data, files

    opt.step(_grads(opt, 5))
    before, on_disk = _state(opt), _listing(path)
    shapes_before = [(a.shape, a.dtype) for a in _arrays(opt)]
    state_kib = sum(p.nbytes for p in opt.params) * 3 // 1024
    rss0 = _maxrss()
    try:
        opt.load(path)
    except optim.CheckpointError:
        if _state(opt) != before:
            raise AssertionError("a rejected checkpoint changed the optimizer") from None
    else:
        if not 0 <= opt.steps < 2**63 - opt._cls._T0:
            raise AssertionError(f"a loaded checkpoint set steps={opt.steps}")
        after = [(a.shape, a.dtype) for a in _arrays(opt)]
        if after != shapes_before:
            raise AssertionError("a loaded checkpoint changed the states' shapes or dtypes")
        opt.step(_grads(opt, 6))            # a consistent optimizer steps on
    grown = _maxrss() - rss0
    if grown > RSS_ALLOWANCE_KIB + 8 * state_kib:
        raise AssertionError(f"loading a sharded checkpoint raised the peak RSS by "
                             f"{grown} KiB")
    if _listing(path) != on_disk:
        raise AssertionError("a load changed the checkpoint directory")
