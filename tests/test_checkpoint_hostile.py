"""Hostile checkpoint files and leftovers: fastopt.optim load/save.

Regression tests for the defects a review found, through the public API:

- a 1 MiB file whose state entry declares shape (2**27,) float64 made load()
  allocate 1 GiB before raising; now the headers are checked against the
  optimizer before any data is read (peak RSS measured in a subprocess);
- a ``meta`` entry that is not an .npy stream escaped as AttributeError;
- a step count of 10**30 (anything >= 2**63) loaded, then every step failed;
- saves killed midway left ``*.tmp`` files that nothing removed.

After every rejection the optimizer is unchanged.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
import zipfile

import numpy as np
import pytest
from npz_hostile import bomb_member, member, raw_zip

from fastopt import optim
from fastopt.optim import CheckpointError

HERE = os.path.dirname(os.path.abspath(__file__))


def trained(cls=optim.OnnxMomentum, shapes=((10,), (3, 4))):
    params = [np.linspace(-1, 1, int(np.prod(s))).reshape(s) for s in shapes]
    opt = cls(params, lr=0.1)
    for k in range(3):
        opt.step([np.cos(p * (k + 1)) for p in params])
    return opt


def state(opt):
    sd = opt.state_dict()
    return (sd["steps"], json.dumps(sd["param_groups"]),
            {n: [a.tobytes() for a in arrs] for n, arrs in sd["state"].items()})


def members_of(path):
    """The members of a saved checkpoint, as (name, payload) pairs."""
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def rebuild(path, replace):
    """Rewrite a checkpoint with some members replaced (name -> member dict
    or payload bytes); the other members are kept byte for byte."""
    out = []
    for name, payload in members_of(path):
        new = replace.get(name, payload)
        out.append(new if isinstance(new, dict) else member(name, new))
    path.write_bytes(raw_zip(out))


def rejected(opt, path, match):
    before = state(opt)
    with pytest.raises(CheckpointError, match=match):
        opt.load(path)
    assert state(opt) == before


def raw_meta(text: str) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array(text))
    return buf.getvalue()


# ---------------------------------------------------------- decompression bomb

def test_bomb_entry_is_rejected_by_its_header(tmp_path):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    rebuild(path, {"state.v.0.npy": bomb_member("state.v.0.npy", crc=False)})
    assert path.stat().st_size < 2 << 20
    rejected(opt, path, r"state 'v' of params\[0\] has shape \(134217728,\) but params\[0\] "
                        r"has shape \(10,\)")


BOMB_CHILD = r"""
import resource, sys
sys.path.insert(0, {here!r})
import numpy as np
from pathlib import Path
from fastopt import optim
from npz_hostile import bomb_member, member, raw_zip
import zipfile
path = Path(sys.argv[1])
x = np.zeros(10)
opt = optim.OnnxMomentum([x], lr=0.1)
opt.save(path)
with zipfile.ZipFile(path) as z:
    keep = [(i.filename, z.read(i.filename)) for i in z.infolist()]
parts = [bomb_member(n, crc=False) if n == "state.v.0.npy" else member(n, p) for n, p in keep]
path.write_bytes(raw_zip(parts))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    opt.load(path)
except optim.CheckpointError as exc:
    print("rejected", type(exc).__name__)
print("growth_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_bomb_peak_rss_stays_small(tmp_path):
    proc = subprocess.run([sys.executable, "-c", BOMB_CHILD.format(here=HERE),
                           str(tmp_path / "b.npz")], cwd=tmp_path,  # not the checkout root
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rejected CheckpointError" in proc.stdout
    growth = int(proc.stdout.split("growth_kib")[1])
    assert growth < 64 * 1024, proc.stdout       # KiB; it was ~1 GiB


def test_size_lying_entry_is_rejected_without_reading_it(tmp_path):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    lie = bomb_member("state.v.0.npy", shape=(10,), n_bytes=1 << 30, crc=False)
    rebuild(path, {"state.v.0.npy": lie})
    rejected(opt, path, r"not a readable fastopt checkpoint .*entry 'state.v.0' holds "
                        r"1073741952 bytes in the archive but its header declares shape "
                        r"\(10,\) dtype float64 \(208 bytes\)")


def test_file_larger_than_any_checkpoint_of_this_optimizer(tmp_path):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    big = [(n, p) for n, p in members_of(path)] + [("zz.npy", bytes(8 << 20))]
    path.write_bytes(raw_zip([member(n, p) for n, p in big]))
    rejected(opt, path, r"the file has \d+ bytes; at most \d+ are expected")


# ------------------------------------------------------------- bad errors

def test_meta_that_is_not_an_npy_stream(tmp_path):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    rebuild(path, {"meta.npy": b'{"format": "fastopt.optim", "version": 1}'})
    rejected(opt, path, r"is not a readable fastopt checkpoint \(truncated, corrupt or not "
                        r"an .npz file\): entry 'meta' is not an .npy stream \(bad magic "
                        r"b'\{\"form'\)")


@pytest.mark.parametrize("meta, match", [
    (np.zeros(3), r"the file's 'meta' entry is not a fastopt.optim header"),
    (np.array(["a", "b"]), r"'meta' entry is not a fastopt.optim header"),
    (np.array("x" * ((1 << 20) + 1)), r"'meta' entry is not a fastopt.optim header"),
    (np.array("[1, 2]"), r"the file's header is not a JSON object"),
    (np.array("{"), r"the file's header is unreadable: the header is not valid JSON"),
    (np.array("[" * 100000), r"the file's header is unreadable: the header nests too"),
])
def test_bad_meta_entries(tmp_path, meta, match):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    buf = io.BytesIO()
    np.save(buf, meta)
    rebuild(path, {"meta.npy": buf.getvalue()})
    rejected(opt, path, match)


def saved_meta(path):
    with np.load(path) as z:
        return json.loads(str(z["meta"][()]))


@pytest.mark.parametrize("steps, match", [
    ("1000000000000000000000000000000", r"a number in the header has 31 digits"),
    ("9223372036854775808", r"a number in the header is out of range: 9223372036854775808"),
    ("1e30", r"step count must be an integer >= 0 and < 2\*\*63, got 1e\+30"),
    ("-1", r"step count must be an integer >= 0 and < 2\*\*63, got -1"),
    ("NaN", r"the header holds NaN"),
])
def test_steps_bounded(tmp_path, steps, match):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    text = json.dumps(saved_meta(path)).replace('"steps": 3', f'"steps": {steps}')
    rebuild(path, {"meta.npy": raw_meta(text)})
    rejected(opt, path, match)


def test_largest_step_count_loads(tmp_path):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    text = json.dumps(saved_meta(path)).replace('"steps": 3', f'"steps": {2**63 - 1}')
    rebuild(path, {"meta.npy": raw_meta(text)})
    opt.load(path)
    assert opt.steps == 2**63 - 1


@pytest.mark.parametrize("steps", [10**30, 2**63])
def test_state_dict_steps_bounded(steps):
    opt = trained()
    sd = opt.state_dict()
    sd["steps"] = steps
    before = state(opt)
    with pytest.raises(CheckpointError, match=rf"step count must be an integer >= 0 and "
                                              rf"< 2\*\*63, got {steps}"):
        opt.load_state_dict(sd)
    assert state(opt) == before


@pytest.mark.parametrize("value, match", [
    ("Infinity", r"the header holds Infinity"),
    ("1e999", r"a number in the header is not finite: 1e999"),
])
def test_hyperparameter_numbers_bounded(tmp_path, value, match):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    text = json.dumps(saved_meta(path)).replace('"lr": 0.1', f'"lr": {value}')
    rebuild(path, {"meta.npy": raw_meta(text)})
    rejected(opt, path, match)


@pytest.mark.parametrize("descr, match", [
    ("|O", r"declares dtype object; object, structured and sub-array dtypes are never"),
    ("<f4", r"state 'v' of params\[0\] has dtype float32 but params\[0\] has float64"),
])
def test_state_entry_dtype(tmp_path, descr, match):
    from npz_hostile import npy_header

    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    itemsize = 8 if descr == "|O" else 4
    rebuild(path, {"state.v.0.npy": npy_header((10,), descr) + bytes(10 * itemsize)})
    rejected(opt, path, match)


def test_duplicate_entry(tmp_path):
    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    parts = members_of(path)
    path.write_bytes(raw_zip([member(n, p) for n, p in parts + parts[1:2]]))
    rejected(opt, path, r"the archive holds entry '[\w.]+' twice")


# ------------------------------------------------------------------ leftovers

def test_save_removes_stale_tmp_files_of_the_same_path(tmp_path):
    path = tmp_path / "ckpt.npz"
    stale = [tmp_path / f".ckpt.npz.{h}.tmp" for h in ("0123456789ab", "ba9876543210")]
    others = [tmp_path / ".other.npz.0123456789ab.tmp", tmp_path / ".ckpt.npz.notmine.tmp",
              tmp_path / "ckpt.npz.tmp"]
    old = time.time() - 3600
    for p in stale + others:
        p.write_bytes(b"PK\x03\x04 half a zip")
        os.utime(p, (old, old))
    opt = trained()
    opt.save(path)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in others)
    fresh = trained()
    fresh.load(path)
    assert state(fresh) == state(opt)


def test_save_leaves_a_tmp_file_another_saver_holds(tmp_path):
    fcntl = pytest.importorskip("fcntl")
    path = tmp_path / "ckpt.npz"
    busy = tmp_path / ".ckpt.npz.00000000abcd.tmp"
    busy.write_bytes(b"being written")
    old = time.time() - 3600
    os.utime(busy, (old, old))
    with open(busy, "rb") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)          # a live save in another process
        trained().save(path)
        assert busy.exists()
    trained().save(path)                        # released (that saver died): removed
    assert not busy.exists()


def test_header_that_numpy_cannot_tokenize(tmp_path):
    # numpy's own parser retries a bad header through tokenize, whose
    # TokenError escaped load() (found by the checkpoint fuzzer)
    from npz_hostile import npy_header

    path = tmp_path / "c.npz"
    opt = trained()
    opt.save(path)
    text = "{'descr': '<f8', 'fortran_order': False, 'shape': (10,), }" + "(" * 50
    rebuild(path, {"state.v.0.npy": npy_header(None, text=text) + bytes(80)})
    rejected(opt, path, r"entry 'state.v.0' has an unreadable .npy header: SyntaxError")


# ---------------------------------------------------------- FIFOs (no hang)

def _unblock_later(path, after=5.0):
    """If an open of the FIFO at path blocks (waiting for its other end),
    open that end after a while, so that the test fails instead of hanging.
    Returns an event to set when the call under test has returned."""
    done = threading.Event()

    def run():
        if done.wait(after):
            return
        for flags in (os.O_WRONLY | os.O_NONBLOCK, os.O_RDONLY | os.O_NONBLOCK):
            try:
                os.close(os.open(path, flags))
            except OSError:
                pass

    threading.Thread(target=run, daemon=True).start()
    return done


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


@needs_fifo
def test_load_of_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "ckpt.npz"
    os.mkfifo(fifo)
    opt = trained()
    done = _unblock_later(fifo)
    t0 = time.monotonic()
    try:
        rejected(opt, fifo, r"Momentum\.load: '.*ckpt\.npz' is not a regular file \(a "
                            r"FIFO\); a checkpoint is an \.npz file")
    finally:
        done.set()
    assert time.monotonic() - t0 < 4.0


@needs_fifo
def test_the_npz_reader_refuses_a_fifo_path(tmp_path):
    from fastopt import _npz

    fifo = tmp_path / "x.npz"
    os.mkfifo(fifo)
    done = _unblock_later(fifo)
    try:
        with pytest.raises(_npz.NpzError, match=r"x\.npz' is not a regular file \(a FIFO\)"):
            _npz.NpzReader(str(fifo))
    finally:
        done.set()


@needs_fifo
def test_save_leaves_a_fifo_named_like_a_stale_tmp_file_alone(tmp_path):
    path = tmp_path / "ckpt.npz"
    fifo = tmp_path / ".ckpt.npz.0123456789ab.tmp"
    os.mkfifo(fifo)
    old = time.time() - 3600
    os.utime(fifo, (old, old))
    opt = trained()
    done = _unblock_later(fifo)
    t0 = time.monotonic()
    try:
        opt.save(path)
    finally:
        done.set()
    assert time.monotonic() - t0 < 4.0
    assert fifo.is_fifo()
    fresh = trained()
    fresh.load(path)
    assert state(fresh) == state(opt)
