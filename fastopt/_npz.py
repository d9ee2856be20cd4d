"""A reader for .npz files that treats the file as hostile.

``numpy.load`` trusts an archive's headers: an entry that declares shape
``(2**27,)`` is allocated and decompressed in full (1 GiB from a 1 MiB file)
before anyone can compare it with what was expected, an entry that is not an
``.npy`` stream comes back as ``bytes``, and a version-2 header may announce
up to 4 GiB of header text, which is read before its length is checked.

This module reads an archive in two passes and never trusts a size it has not
checked:

1. the zip directory: member names (no duplicates, every one ``<key>.npy``),
   compression methods (stored or deflated only: bzip2 and lzma cannot be
   decompressed with a bound on the output), and optionally the file size;
2. per entry, only the ``.npy`` magic and header (its length bounded before
   it is read, the dict literal parsed with :func:`ast.literal_eval`, the
   dtype never an object, structured or sub-array dtype) which the caller
   checks against what it expects (a :class:`Spec` or a callback);
3. only then the data: exactly the expected number of bytes, read in bounded
   chunks into one preallocated array, followed by a check that the entry
   ends there (the zip CRC is verified at that point).

Every problem raises :class:`NpzError` (a ValueError), whose message names
the entry; callers turn it into their own error type. Numbers read from a
JSON text go through :func:`loads_json`, which bounds them.
"""
from __future__ import annotations

import ast
import errno
import json
import math
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Optional, Union

import numpy as np
from numpy.lib import format as _npyformat

__all__ = ["Header", "NpzError", "NpzReader", "Spec", "check_names", "loads_json", "read_npz"]

MAGIC = b"\x93NUMPY"
MAX_HEADER = 4096          # bytes of header text; numpy writes ~128 (a 64-byte multiple)
CHUNK = 1 << 20            # bytes decompressed per read of an entry's data
INT_BOUND = 2 ** 63        # |int| in a JSON text (an int64 holds every count we write)

# What zipfile, zlib and struct can raise on a damaged archive (an unknown
# method: NotImplementedError; a flipped "encrypted" bit: RuntimeError;
# corrupt sizes: struct.error / OverflowError / ValueError).
_ZIP_ERRORS = (OSError, EOFError, ValueError, KeyError, TypeError, IndexError,
               zipfile.BadZipFile, UnicodeError, NotImplementedError, RuntimeError,
               zlib.error, struct.error, OverflowError, MemoryError)


class NpzError(ValueError):
    """An .npz file that is damaged, hostile or not what the caller expects."""


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def open_regular(path):
    """``open(path, "rb")`` for a regular file only, else NpzError. The open
    is non-blocking, so a FIFO (which would block until a writer came) or a
    device is refused at once; the file is switched to blocking reads after
    the check."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise NpzError(f"{os.fsdecode(path)!r} is not a regular file ({kind})")
        if flags & getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True)
class Header:
    """What an entry's ``.npy`` header declares (checked before any data)."""

    key: str
    shape: tuple
    dtype: np.dtype
    fortran_order: bool
    offset: int            # bytes of magic + header before the data

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def describe(self) -> str:
        order = ", Fortran order" if self.fortran_order else ""
        return f"shape {self.shape} dtype {self.dtype}{order}"


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype


@dataclass(frozen=True)
class Spec:
    """An expected entry: exact shape, dtype (either byte order) and, unless
    None, memory order (True: Fortran)."""

    shape: tuple
    dtype: np.dtype
    fortran_order: Optional[bool] = None

    def __call__(self, h: Header) -> None:
        want = np.dtype(self.dtype)
        if tuple(h.shape) != tuple(self.shape) or _native(h.dtype) != _native(want):
            raise NpzError(f"entry {h.key!r} declares shape {h.shape} dtype {h.dtype}; "
                           f"expected shape {tuple(self.shape)} dtype {want}")
        if self.fortran_order is not None and h.fortran_order != self.fortran_order:
            got, want_o = ("Fortran", "C") if h.fortran_order else ("C", "Fortran")
            raise NpzError(f"entry {h.key!r} is stored in {got} order; expected {want_o} "
                           f"order")


Expect = Union[Spec, Callable[[Header], None]]


def _read_exact(stream, n: int, key: str, part: str) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise NpzError(f"entry {key!r} is truncated in its {part} ({len(data)} of {n} "
                       f"bytes)")
    return data


def _parse_header(key: str, stream) -> Header:
    """Read and check the magic and header of one entry; no data is read."""
    magic = stream.read(len(MAGIC) + 2)
    if len(magic) < len(MAGIC) + 2 or magic[:len(MAGIC)] != MAGIC:
        raise NpzError(f"entry {key!r} is not an .npy stream (bad magic "
                       f"{bytes(magic[:len(MAGIC)])!r})")
    version = (magic[-2], magic[-1])
    if version == (1, 0):
        fmt = "<H"
    elif version == (2, 0):
        fmt = "<I"
    else:  # 3.0 exists only for utf-8 field names (structured dtypes): never ours
        raise NpzError(f"entry {key!r} has .npy format version {version[0]}.{version[1]}; "
                       f"only 1.0 and 2.0 are read")
    (hlen,) = struct.unpack(fmt, _read_exact(stream, struct.calcsize(fmt), key,
                                             "header length"))
    if hlen > MAX_HEADER:
        raise NpzError(f"entry {key!r} declares a {hlen}-byte .npy header (at most "
                       f"{MAX_HEADER} are read)")
    raw = _read_exact(stream, hlen, key, "header")
    try:
        d = ast.literal_eval(raw.decode("latin1"))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as exc:
        raise NpzError(f"entry {key!r} has an unreadable .npy header: "
                       f"{type(exc).__name__}") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise NpzError(f"entry {key!r} has a malformed .npy header (not a dict of descr, "
                       f"fortran_order and shape)")
    shape, fortran = d["shape"], d["fortran_order"]
    if not isinstance(shape, tuple) or not all(type(n) is int and 0 <= n < INT_BOUND
                                               for n in shape):
        raise NpzError(f"entry {key!r} declares an invalid shape {shape!r:.80}")
    if type(fortran) is not bool:
        raise NpzError(f"entry {key!r} declares an invalid fortran_order {fortran!r:.80}")
    try:
        dtype = _npyformat.descr_to_dtype(d["descr"])
    except (TypeError, ValueError, KeyError, IndexError, OverflowError, MemoryError,
            RecursionError):
        raise NpzError(f"entry {key!r} declares an invalid dtype "
                       f"{d['descr']!r:.80}") from None
    if dtype.hasobject or dtype.names is not None or dtype.subdtype is not None \
            or dtype.kind == "V":
        raise NpzError(f"entry {key!r} declares dtype {dtype}; object, structured and "
                       f"sub-array dtypes are never read")
    return Header(key, shape, dtype, fortran, len(MAGIC) + 2 + struct.calcsize(fmt) + hlen)


class NpzReader:
    """An open .npz archive whose entries are read only after their headers
    have been checked.

    Parameters
    ----------
    file : str, os.PathLike or binary file object (seekable)
    max_bytes : int, optional
        Reject a file larger than this before parsing its zip directory (a
        caller that knows what it expects knows how large the file can be).
    """

    def __init__(self, file, *, max_bytes: Optional[int] = None):
        self._own = None
        if isinstance(file, (str, bytes, os.PathLike)):
            file = self._own = open_regular(file)
        try:
            self._open(file, max_bytes)
        except BaseException:
            self.close()
            raise

    def _open(self, fh, max_bytes):
        start = fh.tell()
        head = fh.read(len(MAGIC))
        fh.seek(start)
        if head == MAGIC:
            raise NpzError("the file holds a single .npy array, not an .npz archive")
        if max_bytes is not None:
            size = fh.seek(0, os.SEEK_END) - start
            fh.seek(start)
            if size > max_bytes:
                raise NpzError(f"the file has {size} bytes; at most {max_bytes} are "
                               f"expected")
        try:
            self._zip = zipfile.ZipFile(fh)
            infos = self._zip.infolist()
        except _ZIP_ERRORS as exc:
            raise NpzError(f"the file is not a readable .npz (zip) archive: "
                           f"{type(exc).__name__}: {exc}") from None
        self._infos = {}
        for info in infos:
            name = info.filename
            if not name.endswith(".npy") or len(name) == 4:
                raise NpzError(f"the archive holds {name!r:.80}, which is not an .npy entry")
            key = name[:-4]
            if key in self._infos:
                raise NpzError(f"the archive holds entry {key!r} twice")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise NpzError(f"entry {key!r} uses zip compression method "
                               f"{info.compress_type}; only stored and deflated are read")
            if info.flag_bits & 0x1:
                raise NpzError(f"entry {key!r} is encrypted")
            self._infos[key] = info

    @property
    def keys(self) -> tuple:
        """The entry names, without ``.npy``, in archive order."""
        return tuple(self._infos)

    def crc(self, key: str) -> int:
        """The CRC-32 the zip directory records for entry ``key`` (nothing is
        read: it tells two archives apart, it does not check the data)."""
        return self._infos[key].CRC

    def close(self) -> None:
        z = getattr(self, "_zip", None)
        if z is not None:
            z.close()
        if self._own is not None:
            self._own.close()
            self._own = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _member(self, key: str):
        info = self._infos.get(key)
        if info is None:
            raise NpzError(f"the archive has no entry {key!r}")
        try:
            return info, self._zip.open(info)
        except _ZIP_ERRORS as exc:
            raise NpzError(f"entry {key!r} cannot be opened: {type(exc).__name__}: "
                           f"{exc}") from None

    def header(self, key: str, expect: Optional[Expect] = None) -> Header:
        """Parse entry ``key``'s ``.npy`` header (reads a few hundred bytes),
        check it with ``expect`` (which raises :class:`NpzError` to reject
        it), then check that the zip entry's size is what the header says."""
        info, stream = self._member(key)
        with stream:
            try:
                h = _parse_header(key, stream)
            except _ZIP_ERRORS as exc:
                if isinstance(exc, NpzError):
                    raise
                raise NpzError(f"entry {key!r} is damaged: {type(exc).__name__}: "
                               f"{exc}") from None
        if expect is not None:
            expect(h)
        if h.offset + h.nbytes != info.file_size:
            raise NpzError(f"entry {key!r} holds {info.file_size} bytes in the archive but "
                           f"its header declares {h.describe()} ({h.offset + h.nbytes} "
                           f"bytes)")
        return h

    def read(self, key: str, expect: Expect) -> np.ndarray:
        """Check entry ``key``'s header with ``expect`` (which raises
        :class:`NpzError` to reject it), then read exactly its data."""
        h = self.header(key, expect)
        _, stream = self._member(key)
        with stream:
            try:
                return self._data(h, stream)
            except _ZIP_ERRORS as exc:
                if isinstance(exc, NpzError):
                    raise
                raise NpzError(f"entry {key!r} is damaged: {type(exc).__name__}: "
                               f"{exc}") from None

    @staticmethod
    def _data(h: Header, stream) -> np.ndarray:
        _read_exact(stream, h.offset, h.key, "header")
        flat = np.empty(math.prod(h.shape), dtype=h.dtype)
        buf = memoryview(flat.view(np.uint8).reshape(-1))
        pos, total = 0, h.nbytes
        while pos < total:
            chunk = stream.read(min(CHUNK, total - pos))
            if not chunk:
                raise NpzError(f"entry {h.key!r} is truncated ({pos} of {total} data "
                               f"bytes)")
            buf[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        if stream.read(1):
            raise NpzError(f"entry {h.key!r} has data after its {total} declared bytes")
        if h.dtype.byteorder not in "=|":
            flat = flat.byteswap().view(_native(h.dtype))
        return flat.reshape(h.shape, order="F" if h.fortran_order else "C")


def read_npz(file, expect: Mapping[str, Expect], *, max_bytes: Optional[int] = None) -> dict:
    """Read an .npz holding exactly the entries of ``expect``.

    Every entry's header is checked (``expect[key](header)``) before any
    entry's data is read. Missing or unexpected entries raise
    :class:`NpzError`.
    """
    with NpzReader(file, max_bytes=max_bytes) as r:
        check_names(r.keys, expect)
        for key in expect:
            r.header(key, expect[key])
        return {key: r.read(key, expect[key]) for key in expect}


def check_names(keys, expected) -> None:
    """Raise NpzError unless ``keys`` are exactly ``expected`` (any order)."""
    have, want = set(keys), set(expected)
    missing = [k for k in expected if k not in have]
    if missing:
        raise NpzError(f"the archive has no entry {missing[0]!r} ({len(missing)} of "
                       f"{len(want)} expected entries missing)")
    extra = sorted(have - want)
    if extra:
        raise NpzError(f"the archive has unexpected entries {extra[:5]}")


# ------------------------------------------------------------------ JSON

def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 19:  # before int(): no quadratic conversion
        raise NpzError(f"a number in the header has {len(text)} digits (at most 19)")
    value = int(text)
    if not -INT_BOUND < value < INT_BOUND:
        raise NpzError(f"a number in the header is out of range: {value}")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NpzError(f"a number in the header is not finite: {text[:40]}")
    return value


def _no_constant(name: str):
    raise NpzError(f"the header holds {name}; numbers must be finite")


def loads_json(text: str, *, max_chars: int = 1 << 20):
    """``json.loads`` with every number bounded: integers within
    ``(-2**63, 2**63)``, floats finite (no NaN/Infinity literals), the text at
    most ``max_chars`` long and nesting that cannot exhaust the stack."""
    if not isinstance(text, str):
        raise NpzError(f"the header is {type(text).__name__}, not text")
    if len(text) > max_chars:
        raise NpzError(f"the header has {len(text)} characters (at most {max_chars})")
    try:
        return json.loads(text, parse_int=_bounded_int, parse_float=_finite_float,
                          parse_constant=_no_constant)
    except RecursionError:
        raise NpzError("the header nests too deeply") from None
    except NpzError:
        raise
    except ValueError as exc:  # json.JSONDecodeError
        raise NpzError(f"the header is not valid JSON: {exc}") from None


def fsync_directory(directory) -> None:
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


def save_target(f, path) -> str:
    """Where an atomic save of path renames its file to: path, or, where
    path is a symbolic link, the file it points to (the link stays a link
    to the new checkpoint). An existing target that is not a regular file
    (a directory, a device such as /dev/full, a FIFO) raises
    IsADirectoryError or ValueError naming f: the rename would replace it."""
    path = os.fspath(path)
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, f"{f}: a directory is in the way", path)
    if not stat.S_ISREG(mode):
        raise ValueError(f"{f}: {path!r} exists and is not a regular file (a device, a "
                         f"FIFO, a socket); a checkpoint replaces only a file")
    return target
