"""fastopt._npz: an .npz reader that treats the file as hostile.

Every hostile archive is built by hand (tests/npz_hostile.py) so each field
can lie. The oracle: only NpzError escapes, nothing is read or allocated
beyond what the caller said it expects, and a clean archive reads back equal.
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from npz_hostile import CountingFile, bomb_member, member, npy_header, raw_zip

from fastopt import _npz
from fastopt._npz import NpzError, NpzReader, Spec, loads_json, read_npz

HERE = os.path.dirname(os.path.abspath(__file__))
F8 = np.dtype(np.float64)


def savez(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def meta_ok(h):
    if h.shape != () or h.dtype.kind != "U":
        raise NpzError(f"entry {h.key!r} is not a header")


EXPECT = {"meta": meta_ok, "x": Spec((5,), F8), "y": Spec((2, 3), np.float32)}


def clean() -> bytes:
    return savez(meta=np.array('{"steps": 3}'), x=np.arange(5.0),
                 y=np.arange(6, dtype=np.float32).reshape(2, 3))


def read(data: bytes, expect=EXPECT, **kw):
    return read_npz(io.BytesIO(data), expect, **kw)


# ------------------------------------------------------------ clean files

def test_clean_archive_reads_back_equal():
    out = read(clean())
    assert str(out["meta"][()]) == '{"steps": 3}'
    np.testing.assert_array_equal(out["x"], np.arange(5.0))
    np.testing.assert_array_equal(out["y"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert out["x"].flags.writeable and out["x"].dtype == F8


def test_fortran_and_byteswapped_entries_read_native():
    y = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    z = np.arange(4, dtype=">f4")
    out = read(savez(y=y, z=z), {"y": Spec((2, 3), F8, fortran_order=True),
                                 "z": Spec((4,), np.float32)})
    assert out["y"].flags.f_contiguous
    np.testing.assert_array_equal(out["y"], y)
    assert out["z"].dtype == np.dtype(np.float32) and out["z"].dtype.isnative
    np.testing.assert_array_equal(out["z"], z)


def test_compressed_archive_is_read():
    buf = io.BytesIO()
    np.savez_compressed(buf, x=np.arange(5.0))
    np.testing.assert_array_equal(read(buf.getvalue(), {"x": Spec((5,), F8)})["x"],
                                  np.arange(5.0))


def test_empty_and_zero_d_entries():
    out = read(savez(e=np.zeros((0, 3)), s=np.float32(2.5)),
               {"e": Spec((0, 3), F8), "s": Spec((), np.float32)})
    assert out["e"].shape == (0, 3) and out["s"][()] == np.float32(2.5)


# ------------------------------------------------------- decompression bombs

def test_bomb_shape_rejected_before_any_data_is_read():
    data = raw_zip([bomb_member("x.npy", crc=False)])   # 1 GiB of zeros declared (2**27,)
    assert len(data) < 2 << 20
    fh = CountingFile(io.BytesIO(data))
    with pytest.raises(NpzError, match=r"entry 'x' declares shape \(134217728,\) dtype "
                                       r"float64; expected shape \(5,\) dtype float64"):
        read_npz(fh, {"x": Spec((5,), F8)})
    assert fh.bytes_read < 64 << 10                   # the directory and one header


def test_bomb_under_a_matching_header_reads_only_the_expected_bytes():
    # the header says (5,) float64 and the zip says so too, but the deflate
    # stream holds 1 GiB: only the 168 declared bytes are ever decompressed
    m = bomb_member("x.npy", shape=(5,), n_bytes=1 << 30, crc=False)
    m["usize"] = 128 + 40
    fh = CountingFile(io.BytesIO(raw_zip([m])))
    with pytest.raises(NpzError, match="damaged: BadZipFile: Bad CRC-32"):
        read_npz(fh, {"x": Spec((5,), F8)})
    assert fh.bytes_read < 64 << 10


def test_zip_size_disagreeing_with_the_header_is_rejected():
    m = bomb_member("x.npy", shape=(5,), n_bytes=1 << 20, declare=1 << 30, crc=False)
    with pytest.raises(NpzError, match=r"entry 'x' holds 1073741824 bytes in the archive "
                                       r"but its header declares shape \(5,\) dtype float64 "
                                       r"\(168 bytes\)"):
        read(raw_zip([m]), {"x": Spec((5,), F8)})


BOMB_CHILD = r"""
import io, resource, sys
sys.path.insert(0, {here!r})
import numpy as np
from fastopt._npz import NpzError, Spec, read_npz
from npz_hostile import bomb_member, raw_zip
lying = bomb_member("x.npy", shape=(5,), n_bytes=1 << 30, crc=False)
lying["usize"] = 128 + 40
cases = [bomb_member("x.npy", crc=False),                       # declares (2**27,)
         lying,                                                 # declares (5,), holds 1 GiB
         bomb_member("x.npy", shape=(5,), n_bytes=1 << 30, crc=False,
                     declare=(1 << 30) + 128)]                  # zip size says 1 GiB
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
for m in cases:
    try:
        read_npz(io.BytesIO(raw_zip([m])), {{"x": Spec((5,), np.float64)}})
    except NpzError as exc:
        print("rejected:", exc)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("growth_kib", after - before)
"""


def test_bomb_peak_rss_stays_small():
    """1 MiB archives holding 1 GiB of deflated zeros, read in a fresh
    process: the peak resident set grows by far less than 1 GiB (the data is
    never decompressed in full nor allocated)."""
    proc = subprocess.run([sys.executable, "-c", BOMB_CHILD.format(here=HERE)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len([ln for ln in lines if ln.startswith("rejected:")]) == 3, proc.stdout
    growth = int(lines[-1].split()[1])
    assert growth < 64 * 1024, proc.stdout            # KiB: < 64 MiB for a 1 GiB bomb


# ---------------------------------------------------------- not .npy / .npz

def test_entry_that_is_not_an_npy_stream():
    data = raw_zip([member("meta.npy", b'{"format": "fastopt.optim"}')])
    with pytest.raises(NpzError, match=r"entry 'meta' is not an .npy stream \(bad magic "):
        read(data, {"meta": meta_ok})


def test_single_npy_file():
    with pytest.raises(NpzError, match=r"^the file holds a single .npy array, not an "
                                       r".npz archive$"):
        read(npy(np.zeros(3)), {"x": Spec((3,), F8)})


@pytest.mark.parametrize("data", [b"", b"PK", b"garbage" * 50, b"PK\x05\x06" + bytes(18)])
def test_not_a_zip(data):
    with pytest.raises(NpzError, match="not a readable .npz|has no entry"):
        read(data, {"x": Spec((3,), F8)})


def test_member_not_named_npy():
    data = raw_zip([member("x.npy", npy(np.zeros(3))), member("notes.txt", b"hi")])
    with pytest.raises(NpzError, match=r"^the archive holds 'notes.txt', which is not an "
                                       r".npy entry$"):
        read(data, {"x": Spec((3,), F8)})


def test_duplicate_names():
    a, b = npy(np.zeros(3)), npy(np.ones(3))
    data = raw_zip([member("x.npy", a), member("x.npy", b)])
    with pytest.raises(NpzError, match=r"^the archive holds entry 'x' twice$"):
        read(data, {"x": Spec((3,), F8)})


def test_missing_and_unexpected_entries():
    with pytest.raises(NpzError, match=r"^the archive has no entry 'z' \(1 of 4 expected"):
        read(clean(), dict(EXPECT, z=Spec((1,), F8)))
    with pytest.raises(NpzError, match=r"^the archive has unexpected entries \['y'\]$"):
        read(clean(), {k: EXPECT[k] for k in ("meta", "x")})


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_unbounded_compression_methods_rejected(method):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        z.writestr("x.npy", npy(np.zeros(3)))
    with pytest.raises(NpzError, match=rf"entry 'x' uses zip compression method {method}; "
                                       r"only stored and deflated are read"):
        read(buf.getvalue(), {"x": Spec((3,), F8)})


def test_encrypted_flag():
    data = raw_zip([member("x.npy", npy(np.zeros(3)), flags=1)])
    with pytest.raises(NpzError, match=r"^entry 'x' is encrypted$"):
        read(data, {"x": Spec((3,), F8)})


def test_max_bytes():
    with pytest.raises(NpzError, match=r"^the file has \d+ bytes; at most 100 are expected"):
        read(clean(), max_bytes=100)


# ----------------------------------------------------------- .npy headers

def expect_x(spec=None):
    return {"x": Spec((3,), F8) if spec is None else spec}


@pytest.mark.parametrize("header, message", [
    (npy_header((3,), "<f8", version=(3, 0)), r"format version 3.0; only 1.0 and 2.0"),
    (npy_header((3,), "<f8", version=(9, 9)), r"format version 9.9"),
    (b"\x93NUMPY\x02\x00" + (2 ** 32 - 1).to_bytes(4, "little"),
     r"declares a 4294967295-byte .npy header \(at most 4096"),
    (b"\x93NUMPY\x01\x00" + (60000).to_bytes(2, "little"), r"declares a 60000-byte"),
    (npy_header(None, text="{'descr': '<f8', 'fortran_order': False}"), r"malformed .npy"),
    (npy_header(None, text="[1, 2, 3]"), r"malformed .npy header"),
    (npy_header(None, text="{'descr': '<f8', 'fortran_order': False, 'shape': (3,), 'x': 1}"),
     r"malformed"),
    (npy_header(None, text="{'descr': '<f8'," + "(" * 300), r"unreadable .npy header"),
    (npy_header(None, text="__import__('os').system('true')"), r"unreadable .npy header"),
    (npy_header((-3,)), r"invalid shape \(-3,\)"),
    (npy_header((True,)), r"invalid shape \(True,\)"),
    (npy_header((3.0,)), r"invalid shape \(3.0,\)"),
    (npy_header(None, text="{'descr': '<f8', 'fortran_order': False, 'shape': 3}"),
     r"invalid shape 3"),
    (npy_header(None, text="{'descr': '<f8', 'fortran_order': 0, 'shape': (3,)}"),
     r"invalid fortran_order 0"),
    (npy_header((3,), "|O"), r"declares dtype object; object, structured and sub-array"),
    (npy_header((3,), [("a", "<f8")]), r"object, structured and sub-array dtypes are never"),
    (npy_header((3,), [("a", "|O")]), r"object, structured"),
    (npy_header((3,), "|V8"), r"object, structured"),
    (npy_header((3,), "<zz"), r"invalid dtype '<zz'"),
    (npy_header((3,), 42), r"invalid dtype 42"),
    (npy_header((3,), "<f4"), (r"declares shape \(3,\) dtype float32; expected shape "
                               r"\(3,\) dtype float64")),
    (npy_header((3, 1), "<f8"), r"declares shape \(3, 1\) dtype float64; expected shape"),
])
def test_bad_headers(header, message):
    payload = header + bytes(24)
    data = raw_zip([member("x.npy", payload)])
    with pytest.raises(NpzError, match=message):
        read(data, expect_x())


@pytest.mark.parametrize("payload, message", [
    (b"", r"^entry 'x' is not an .npy stream \(bad magic b''\)$"),
    (b"\x93NUM", r"^entry 'x' is not an .npy stream \(bad magic b'\\x93NUM'\)$"),
    (b"\x93NUMPY\x01", r"^entry 'x' is not an .npy stream"),
    (b"\x93NUMPY\x01\x00\x40", r"^entry 'x' is truncated in its header length \(1 of 2 "),
    (b"\x93NUMPY\x01\x00\x40\x00{'descr'",
     r"^entry 'x' is truncated in its header \(8 of 64 bytes\)$"),
])
def test_truncated_headers(payload, message):
    data = raw_zip([member("x.npy", payload)])
    with pytest.raises(NpzError, match=message):
        read(data, expect_x())


def test_wrong_order_rejected_when_the_caller_fixes_it():
    data = raw_zip([member("x.npy", npy_header((2, 2), fortran=True) + bytes(32))])
    with pytest.raises(NpzError, match=r"^entry 'x' is stored in Fortran order; expected C "
                                       r"order$"):
        read(data, expect_x(Spec((2, 2), F8, fortran_order=False)))
    assert read(data, expect_x(Spec((2, 2), F8)))["x"].shape == (2, 2)


def test_truncated_and_trailing_data():
    short = npy_header((3,)) + bytes(16)
    with pytest.raises(NpzError, match=r"holds 144 bytes in the archive but its header "
                                       r"declares shape \(3,\) dtype float64 \(152 bytes\)"):
        read(raw_zip([member("x.npy", short)]), expect_x())
    long_ = npy_header((3,)) + bytes(32)
    with pytest.raises(NpzError, match=r"holds 160 bytes"):
        read(raw_zip([member("x.npy", long_)]), expect_x())
    # the zip directory agrees with the header but the stored bytes stop early
    m = member("x.npy", npy_header((3,)) + bytes(24))
    m["data"] = m["data"][:-10]
    with pytest.raises(NpzError, match="damaged|truncated"):
        read(raw_zip([m]), expect_x())


def test_bad_crc():
    m = member("x.npy", npy_header((3,)) + bytes(24), crc=12345)
    with pytest.raises(NpzError, match=r"^entry 'x' is damaged: BadZipFile: Bad CRC-32"):
        read(raw_zip([m]), expect_x())


def test_every_prefix_of_an_archive_is_rejected_cleanly():
    data = clean()
    for cut in range(len(data)):
        with pytest.raises(NpzError):
            read(data[:cut])


def test_every_byte_flip_is_rejected_or_harmless():
    data = clean()
    want = read(data)
    for i in range(len(data)):
        for bit in (i % 8,):
            bad = bytearray(data)
            bad[i] ^= 1 << bit
            try:
                got = read(bytes(bad))
            except NpzError:
                continue
            for k in want:   # a flip the format ignores (a date, a pad byte ...)
                assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
                np.testing.assert_array_equal(got[k], want[k])


# ---------------------------------------------------------- numbers in JSON

@pytest.mark.parametrize("text, message", [
    ('{"steps": 1000000000000000000000000000000}', r"has 31 digits \(at most 19\)"),
    ('{"steps": 9223372036854775808}', r"out of range: 9223372036854775808"),
    ('{"steps": -9223372036854775808}', r"out of range"),
    ('{"lr": 1e999}', r"not finite: 1e999"),
    ('{"lr": -1e999}', r"not finite"),
    ('{"lr": NaN}', r"holds NaN; numbers must be finite"),
    ('{"lr": Infinity}', r"holds Infinity"),
    ('{"lr": -Infinity}', r"holds -Infinity"),
    ("[" * 100000 + "]" * 100000, r"nests too deeply"),
    ('{"a": ', r"not valid JSON"),
    ("x" * 2000, r"has 2000 characters \(at most 1000\)"),
])
def test_json_numbers_bounded(text, message):
    with pytest.raises(NpzError, match=message):
        loads_json(text, max_chars=1000 if len(text) == 2000 else 1 << 20)


def test_json_in_range():
    assert loads_json('{"steps": 9223372036854775807, "lr": 1e308, "n": -5}') == \
        {"steps": 2 ** 63 - 1, "lr": 1e308, "n": -5}
    with pytest.raises(NpzError, match="is bytes, not text"):
        loads_json(b"{}")


def test_reader_owns_and_closes_a_path(tmp_path):
    p = tmp_path / "a.npz"
    p.write_bytes(clean())
    with NpzReader(p) as r:
        assert set(r.keys) == {"meta", "x", "y"}
        assert r.header("x") == _npz.Header("x", (5,), F8, False, 128)
    with NpzReader(str(p)) as r, pytest.raises(NpzError, match="has no entry 'zz'"):
        r.read("zz", Spec((1,), F8))
