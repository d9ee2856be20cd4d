"""Structural fuzzing of checkpoint files: a target of tests/fuzz_api.py.

Each input builds a small optimizer, takes a real checkpoint of it (written
by ``save``), and mutates the file's structure with choices decoded from the
fuzzer's bytes: zip members dropped, duplicated, renamed, reordered,
recompressed, flagged encrypted, their sizes and CRCs lying; .npy headers
with other magic, versions, header lengths, dtypes (object, structured,
byte-swapped, strings), shapes (huge, negative, other) and orders; payloads
truncated, extended or replaced by deflate bombs declaring up to 2**27
elements; the JSON header with huge, negative, fractional and non-finite
numbers, deep nesting, missing keys; and raw byte flips and truncations of
the archive. The oracle:

- ``load`` raises nothing but CheckpointError (any other exception, a crash
  or a hang is a finding);
- after a rejection the optimizer is unchanged (states, step count,
  hyperparameters);
- a load that succeeds leaves a consistent optimizer (steps < 2**63);
- the process's peak RSS never grows by more than a small multiple of the
  optimizer's own state plus a fixed allowance (a bomb must not be
  allocated).
"""
from __future__ import annotations

import io
import json
import os
import zipfile
import zlib

import numpy as np
from npz_hostile import deflate, npy_header, raw_zip, zeros_bomb

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None

RSS_ALLOWANCE_KIB = 48 * 1024     # zipfile, the mutated file, numpy temporaries
_TEMPLATES: dict = {}

DESCRS = ["<f8", "<f4", ">f8", ">f4", "|O", "<i8", "|V8", "<U3", "|b1", "<c16",
          [("a", "<f8")], "(2,)<f8", "<f2", 42, "zz"]
NUMBERS = ["1" + "0" * 30, str(2**63), str(2**63 - 1), "-1", "1.5", "NaN", "Infinity",
           "-Infinity", "1e999", "1e30", '"3"', "null", "[]", "{}", "true", "0"]
NAMES = ["meta.npy", "state.v.0.npy", "state.h.0.npy", "state.v.9.npy", "x.npy", "meta",
         "", "a/b.npy", "META.NPY", "state.v.0.npy.npy", ".npy"]


def _new(cls, params, eight):
    """The optimizer of a case: 8-bit states (state_dtype "int8-blockwise")
    or its parameters' own."""
    return cls(params, lr=0.01, **({"state_dtype": "int8-blockwise"} if eight else {}))


def _template(cls, shapes, dtype, tmpdir, eight=False):
    """A real checkpoint (its members) of a small stepped optimizer."""
    key = (cls.__name__, shapes, dtype, eight)
    if key not in _TEMPLATES:
        params = [np.linspace(-1, 1, int(np.prod(s)), dtype=dtype).reshape(s) for s in shapes]
        opt = _new(cls, params, eight)
        opt.step([np.asarray(np.cos(p)) for p in params])
        path = os.path.join(tmpdir, "template.npz")
        opt.save(path)
        with zipfile.ZipFile(path) as z:
            _TEMPLATES[key] = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    return _TEMPLATES[key]


def _state(opt):
    sd = opt.state_dict()
    return (sd["steps"], repr(sd["param_groups"]),
            [b.tobytes() for arrs in sd["state"].values() for a in arrs
             for b in ((a.codes, a.absmax) if hasattr(a, "codes") else (a,))])


def _entry(name, payload):
    return {"name": name, "payload": payload, "method": 0, "flags": 0, "crc": None,
            "usize": None, "stored": None}


def _npy(src, payload):
    """A mutated .npy payload: header and/or data."""
    k = src.int(0, 9)
    data = payload[128:] if len(payload) >= 128 else b""
    if k == 0:                                      # another dtype, same data
        return npy_header((len(data) // 8,), src.pick(DESCRS)) + data
    if k == 1:                                      # another shape
        shape = src.pick([(2**27,), (-1,), (0,), (2**62, 2**62), (3, 3), (), (1,) * 40,
                          (2**31,), (len(data) // 8 + 1,)])
        return npy_header(shape, src.pick(["<f8", "<f4"])) + data
    if k == 2:                                      # the other order
        return npy_header((len(data) // 8,), "<f8", fortran=True) + data
    if k == 3:                                      # another version
        return npy_header((len(data) // 8,), "<f8",
                          version=src.pick([(2, 0), (3, 0), (0, 0), (1, 1), (255, 255)])) + data
    if k == 4:                                      # a lying header length
        head = bytearray(payload[:10])
        head[8:10] = src.int(0, 65535).to_bytes(2, "little")
        return bytes(head) + payload[10:]
    if k == 5:                                      # a broken dict literal
        text = src.pick(["{", "[1]", "{'descr': '<f8'}", "1" * 9000,
                         "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }" + "(" * 50,
                         "__import__('os')"])
        return npy_header(None, text=text[:60000]) + data
    if k == 6:                                      # truncated / extended data
        cut = src.int(0, len(payload))
        return payload[:cut] if src.chance(2) else payload + src.raw(src.int(1, 64))
    if k == 7:                                      # not an .npy stream
        return src.raw(src.int(0, 64))
    if k == 8:
        return b"\x93NUMPY" + payload[6:] if src.chance(2) else b"\x93NUMPZ" + payload[6:]
    return payload


def _meta(src, payload):
    """A mutated JSON header (as an .npy unicode scalar, or not)."""
    if not payload.startswith(b"\x93NUMPY\x01\x00") or len(payload) < 128:
        return payload                          # an earlier mutation broke it
    text = payload[128:].decode("utf-32-le", errors="ignore").rstrip("\x00")
    k = src.int(0, 5)
    if k <= 2:
        key = src.pick(['"steps": ', '"version": ', '"lr": ', '"alpha": ', '"n_params": ',
                        '"epsilon": ', '"beta": '])
        at = text.find(key)
        if at >= 0:
            end = at + len(key)
            stop = min([i for i in (text.find(",", end), text.find("}", end)) if i >= 0]
                       or [len(text)])
            text = text[:end] + src.pick(NUMBERS) + text[stop:]
    elif k == 3:
        text = src.pick(["[" * 50000, "{}", "[]", '"x"', "", "{" + '"a": 1, ' * 3 + "}",
                         json.dumps({"format": "fastopt.optim", "version": 1})])
    elif k == 4:
        try:
            meta = json.loads(text)
        except (ValueError, RecursionError):    # an earlier mutation broke it
            meta = {}
        if not isinstance(meta, dict):
            meta = {}
        meta.pop(src.pick(list(meta) or ["x"]), None)
        text = json.dumps(meta)
    else:
        buf = io.BytesIO()
        np.save(buf, src.pick([np.zeros(3), np.array([text, text]), np.array(text.encode()),
                               np.array(text, dtype=f"<U{len(text) + 5000}")]))
        return buf.getvalue()
    buf = io.BytesIO()
    np.save(buf, np.array(text))
    return buf.getvalue()


_BOMBS: dict = {}


def _bomb(src, name):
    shape = src.pick([(2**27,), (2**24,), (2**27, 1)])
    n = 1 << 24 if src.chance(2) else 1 << 30
    if (shape, n) not in _BOMBS:
        _BOMBS[shape, n] = zeros_bomb(n, npy_header(shape), crc=False)
    stream, crc, size = _BOMBS[shape, n]
    e = _entry(name, b"")
    e.update(method=8, stored=stream, crc=crc, usize=size if src.chance(2) else
             src.pick([size, 128 + 80, 2**32 - 1, 0]))
    return e


def _mutate(src, entries):
    k = src.int(0, 11)
    i = src.int(0, len(entries) - 1) if entries else 0
    if not entries:
        entries.append(_entry(src.pick(NAMES), src.raw(32)))
    elif k == 0:
        del entries[i]
    elif k == 1:
        entries.append(dict(entries[i]))
    elif k == 2:
        entries[i]["name"] = src.pick(NAMES)
    elif k == 3:
        entries.reverse()
    elif k == 4:
        entries[i]["method"] = src.pick([8, 8, 12, 14, 99])
    elif k == 5:
        entries[i]["flags"] = src.pick([1, 8, 0x41])
    elif k == 6:
        entries[i]["crc"] = src.int(0, 2**32 - 1)
    elif k == 7:
        real = len(entries[i]["payload"])
        entries[i]["usize"] = src.pick([0, 1, max(0, real - 1), real + 1, 2**31, 2**32 - 1])
    elif k == 8:
        entries[i] = _bomb(src, entries[i]["name"])
    elif k in (9, 10):
        e = entries[i]
        e["payload"] = _meta(src, e["payload"]) if e["name"] == "meta.npy" and k == 9 \
            else _npy(src, e["payload"])
    else:
        entries.append(_entry(src.pick(NAMES), src.raw(src.int(0, 64))))


def _archive(entries):
    parts = []
    for e in entries:
        payload = e["payload"]
        stored = e["stored"]
        if stored is None:
            stored = deflate(payload) if e["method"] == 8 else payload
        crc = e["crc"] if e["crc"] is not None else zlib.crc32(payload)
        usize = e["usize"] if e["usize"] is not None else len(payload)
        parts.append({"name": e["name"], "data": stored, "method": e["method"],
                      "crc": crc, "usize": usize, "flags": e["flags"]})
    return raw_zip(parts)


def _maxrss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if resource else 0


def checkpoint_case(src, tmpdir) -> None:
    from fastopt import optim

    cls = src.pick([optim.OnnxMomentum, optim.OnnxAdagrad, optim.OnnxAdam, optim.AdamW])
    shapes = tuple(src.pick([(5,), (2, 3), (), (0,), (4, 1)]) for _ in range(src.int(1, 3)))
    dtype = src.pick([np.float32, np.float64])
    eight = cls is optim.AdamW and src.int(0, 1) == 1     # 8-bit states: one of 4100
    if eight:
        shapes, dtype = ((4100,),) + shapes, np.float32
    members = _template(cls, shapes, dtype, tmpdir, eight)
    entries = [_entry(n, p) for n, p in members]
    for _ in range(src.int(1, 4)):
        _mutate(src, entries)
    data = bytearray(_archive(entries))
    k = src.int(0, 5)
    if k == 0 and data:
        for _ in range(src.int(1, 4)):
            data[src.int(0, len(data) - 1)] ^= 1 << src.int(0, 7)
    elif k == 1 and data:
        del data[src.int(0, len(data) - 1):]
    elif k == 2:
        data += src.raw(src.int(1, 64))
    path = os.path.join(tmpdir, "fuzz.npz")
    with open(path, "wb") as fh:
        fh.write(bytes(data))
    del data, entries

    params = [np.linspace(-1, 1, int(np.prod(s)), dtype=dtype).reshape(s) for s in shapes]
    opt = _new(cls, params, eight)
    opt.step([np.asarray(np.sin(p)) for p in params])
    before = _state(opt)
    state_kib = sum(p.nbytes for p in params) * 2 // 1024
    rss0 = _maxrss()
    try:
        opt.load(path)
    except optim.CheckpointError:
        if _state(opt) != before:
            raise AssertionError("a rejected checkpoint changed the optimizer") from None
    else:
        if not 0 <= opt.steps < 2**63:
            raise AssertionError(f"a loaded checkpoint set steps={opt.steps}")
    grown = _maxrss() - rss0
    if grown > RSS_ALLOWANCE_KIB + 8 * state_kib:
        raise AssertionError(f"loading a {os.path.getsize(path)}-byte checkpoint raised the "
                             f"peak RSS by {grown} KiB")
