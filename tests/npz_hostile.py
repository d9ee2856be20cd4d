"""Builders of hostile .npz files for the reader and checkpoint tests.

Everything is written by hand (struct), so a test can lie in any field: the
.npy header, the zip sizes, the CRC, the names, the compression method.
Nothing here allocates more than the file it builds.
"""
from __future__ import annotations

import struct
import zlib

MAGIC = b"\x93NUMPY"


def npy_header(shape, descr="<f8", fortran=False, version=(1, 0), text=None) -> bytes:
    """Magic + header of an .npy stream, padded as numpy pads it; ``text``
    replaces the dict literal verbatim."""
    if text is None:
        text = f"{{'descr': {descr!r}, 'fortran_order': {fortran}, 'shape': {tuple(shape)!r}, }}"
    body = text.encode("latin1")
    lenfmt = "<H" if version[0] == 1 else "<I"
    pre = len(MAGIC) + 2 + struct.calcsize(lenfmt)
    pad = (-(pre + len(body) + 1)) % 64
    body += b" " * pad + b"\n"
    return MAGIC + bytes(version) + struct.pack(lenfmt, len(body)) + body


def member(name, payload: bytes, *, method=0, crc=None, usize=None, flags=0,
           compressed=None):
    """One zip member. ``payload`` is the uncompressed content (used for the
    CRC and size unless given); ``compressed`` the bytes actually stored."""
    if compressed is None:
        compressed = payload if method == 0 else deflate(payload)
    return {"name": name, "data": compressed, "method": method,
            "crc": zlib.crc32(payload) if crc is None else crc,
            "usize": len(payload) if usize is None else usize, "flags": flags}


def deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def raw_zip(members) -> bytes:
    """A plain (non-zip64) archive of the given members, duplicates allowed."""
    out, central = bytearray(), bytearray()
    for m in members:
        name = m["name"].encode()
        offset = len(out)
        fields = (20, m["flags"], m["method"], 0, 0x21, m["crc"] & 0xFFFFFFFF,
                  len(m["data"]), m["usize"])
        out += struct.pack("<IHHHHHIII", 0x04034B50, *fields) + struct.pack("<HH", len(name), 0)
        out += name + m["data"]
        central += struct.pack("<IH", 0x02014B50, 20) + struct.pack("<HHHHHIII", *fields)
        central += struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0, offset) + name
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members),
                       len(central), cd_offset, 0)
    return bytes(out)


def zeros_bomb(n_bytes: int, prefix: bytes = b"", crc: bool = True):
    """(deflate stream, crc32, size) of ``prefix`` followed by ``n_bytes``
    zeros, built from one compressed 1 MiB block repeated (each block starts
    after a full flush, so the blocks are identical): ~1 KiB per MiB."""
    block = 1 << 20
    assert n_bytes % block == 0
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    zeros = bytes(block)
    blk = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    blk2 = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    assert blk == blk2
    stream = head + blk * (n_bytes // block) + c.flush()
    value = zlib.crc32(prefix)
    for _ in range(n_bytes // block if crc else 0):
        value = zlib.crc32(zeros, value)
    return stream, value, len(prefix) + n_bytes


def bomb_member(name, shape=(2 ** 27,), descr="<f8", n_bytes=None, declare=None,
                crc=True):
    """A deflated entry whose header declares ``shape``/``descr`` followed by
    ``n_bytes`` zeros (default: exactly what the header declares). ``declare``
    overrides the zip's uncompressed size; ``crc=False`` skips computing the
    true CRC (the entry then fails its CRC check if it is ever read)."""
    import numpy as np

    head = npy_header(shape, descr)
    if n_bytes is None:
        n_bytes = int(np.prod(shape)) * np.dtype(descr).itemsize
    stream, crc, size = zeros_bomb(n_bytes, head, crc)
    return {"name": name, "data": stream, "method": 8, "crc": crc,
            "usize": size if declare is None else declare, "flags": 0}


class CountingFile:
    """A file wrapper that counts the bytes read through it."""

    def __init__(self, fh):
        self.fh = fh
        self.bytes_read = 0

    def read(self, n=-1):
        data = self.fh.read(n)
        self.bytes_read += len(data)
        return data

    def __getattr__(self, name):
        return getattr(self.fh, name)
