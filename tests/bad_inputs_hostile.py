"""Rejected inputs: hostile checkpoint files and huge integers.

Part of the catalogue of tests/bad_inputs_cases.py (tests/test_bad_inputs.py
checks each case and renders tests/BAD_INPUTS.md). Checkpoint files are
built in a scratch directory; messages name it ``<tmp>`` (the test replaces
the real directory by that token before comparing).
"""
from __future__ import annotations

import atexit
import bz2
import io
import os
import shutil
import tempfile
import zipfile
import zlib

import numpy as np
from bad_inputs_cases import Case, arr, opt_call
from npz_hostile import bomb_member, member, npy_header, raw_zip

F32, F64 = np.float32, np.float64
CKPT_DIR = tempfile.mkdtemp(prefix="fastopt-bad-inputs-")
atexit.register(shutil.rmtree, CKPT_DIR, ignore_errors=True)      # (every run made one)
TOKEN = "<tmp>"

try:
    from fastopt.optim import CheckpointError
except ImportError:  # pragma: no cover - before fastopt.optim existed
    CheckpointError = ValueError


def _saved():
    """The members of a checkpoint of opt_call's Momentum (params (3,) f32, (2, 3) f64)."""
    from fastopt import optim

    opt = optim.OnnxMomentum([arr(), arr((2, 3), F64)], lr=0.1)
    opt.step([arr(fill=0.5), arr((2, 3), F64, 0.5)])
    path = os.path.join(CKPT_DIR, "template.npz")
    opt.save(path)
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def _npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def _meta_text(members, old, new) -> bytes:
    text = dict(members)["meta.npy"][128:].decode("utf-32-le").rstrip("\x00")
    assert old in text, (old, text)
    return _npy(np.array(text.replace(old, new)))


def ckpt(name, change):
    """Arguments for Momentum.load on a fresh optimizer and a file made by
    ``change(members) -> list of zip member dicts``."""
    def build():
        path = os.path.join(CKPT_DIR, name)
        with open(path, "wb") as fh:
            fh.write(raw_zip(change(_saved())))
        return opt_call("OnnxMomentum", "load", path)()
    return build


def _replace(key, new):
    def change(members):
        return [new(members) if n == key else member(n, p) for n, p in members]
    return change


def _meta(old, new):
    return _replace("meta.npy", lambda m: member("meta.npy", _meta_text(m, old, new)))


def _bzip2(members):
    return [{"name": n, "data": bz2.compress(p), "method": 12, "crc": zlib.crc32(p),
             "usize": len(p), "flags": 0} for n, p in members]


def _big_steps_state_dict():
    from fastopt import optim

    sd = optim.OnnxMomentum([arr(), arr((2, 3), F64)], lr=0.1).state_dict()
    sd["steps"] = 10**30
    return sd


def _adam_last_steps_state_dict():
    """steps = 2**63 - 1: Adam's next update count (steps + 1) is beyond int64."""
    from fastopt import optim

    sd = optim.OnnxAdam([arr(), arr((2, 3), F64)], lr=0.1).state_dict()
    sd["steps"] = 2**63 - 1
    return sd


def _fifo(name):
    """Arguments for Momentum.load of a FIFO (refused without waiting for a writer)."""
    def build():
        path = os.path.join(CKPT_DIR, name)
        if not os.path.exists(path):
            os.mkfifo(path)
        return opt_call("OnnxMomentum", "load", path)()
    return build


OL = "fastopt.optim.OnnxMomentum.load: "
UNREADABLE = (OL + "'" + TOKEN + "/{}' is not a readable fastopt checkpoint (truncated, "
              "corrupt or not an .npz file): ")
IN = " (file '" + TOKEN + "/{}')"

CHECKPOINT_CASES = [
    Case("optim.OnnxMomentum.load", "a 1 MiB file whose state entry declares shape (2**27,) "
         "float64 (a deflate bomb of 1 GiB)",
         ckpt("bomb.npz", _replace("state.v.0.npy",
                                   lambda m: bomb_member("state.v.0.npy", crc=False))),
         CheckpointError,
         OL + "the checkpoint's state 'v' of params[0] has shape (134217728,) but params[0] "
              "has shape (3,)" + IN.format("bomb.npz")),
    Case("optim.OnnxMomentum.load", "an entry whose zip size (1 GiB) disagrees with its header",
         ckpt("lying.npz", _replace("state.v.0.npy", lambda m: bomb_member(
             "state.v.0.npy", shape=(3,), descr="<f4", n_bytes=1 << 30, crc=False))),
         CheckpointError,
         UNREADABLE.format("lying.npz") + "entry 'state.v.0' holds 1073741952 bytes in the "
         "archive but its header declares shape (3,) dtype float32 (140 bytes)"),
    Case("optim.OnnxMomentum.load", "the meta entry not an .npy stream",
         ckpt("meta.npz", _replace("meta.npy", lambda m: member("meta.npy", b'{"format"}'))),
         CheckpointError,
         UNREADABLE.format("meta.npz") + "entry 'meta' is not an .npy stream (bad magic "
         "b'{\"form')"),
    Case("optim.OnnxMomentum.load", "steps = 10**30 in the file",
         ckpt("steps30.npz", _meta('"steps": 1', '"steps": ' + str(10**30))), CheckpointError,
         OL + "the file's header is unreadable: a number in the header has 31 digits (at "
              "most 19)" + IN.format("steps30.npz")),
    Case("optim.OnnxMomentum.load", "steps = 2**63 in the file",
         ckpt("steps63.npz", _meta('"steps": 1', '"steps": ' + str(2**63))), CheckpointError,
         OL + "the file's header is unreadable: a number in the header is out of range: "
              "9223372036854775808" + IN.format("steps63.npz")),
    Case("optim.OnnxMomentum.load", "lr = NaN in the file",
         ckpt("nan.npz", _meta('"lr": 0.1', '"lr": NaN')), CheckpointError,
         OL + "the file's header is unreadable: the header holds NaN; numbers must be "
              "finite" + IN.format("nan.npz")),
    Case("optim.OnnxMomentum.load", "a state entry of dtype object",
         ckpt("object.npz", _replace("state.v.0.npy", lambda m: member(
             "state.v.0.npy", npy_header((3,), "|O") + bytes(24)))), CheckpointError,
         UNREADABLE.format("object.npz") + "entry 'state.v.0' declares dtype object; "
         "object, structured and sub-array dtypes are never read"),
    Case("optim.OnnxMomentum.load", "an entry twice",
         ckpt("twice.npz", lambda m: [member(n, p) for n, p in m + m[1:2]]), CheckpointError,
         UNREADABLE.format("twice.npz") + "the archive holds entry 'state.v.0' twice"),
    Case("optim.OnnxMomentum.load", "entries compressed with bzip2",
         ckpt("bzip2.npz", _bzip2), CheckpointError,
         UNREADABLE.format("bzip2.npz") + "entry 'meta' uses zip compression method 12; "
         "only stored and deflated are read"),
    Case("optim.OnnxMomentum.load", "an .npy header length of 2**32 - 1",
         ckpt("header.npz", _replace("state.v.0.npy", lambda m: member(
             "state.v.0.npy", b"\x93NUMPY\x02\x00\xff\xff\xff\xff" + bytes(64)))),
         CheckpointError,
         UNREADABLE.format("header.npz") + "entry 'state.v.0' declares a 4294967295-byte "
         ".npy header (at most 4096 are read)"),
    Case("optim.OnnxMomentum.load", "a file larger than any checkpoint of the optimizer",
         ckpt("large.npz", lambda m: [member(n, p) for n, p in m] +
              [member("pad.npy", bytes(8 << 20))]), CheckpointError,
         UNREADABLE.format("large.npz") + "the file has 8390488 bytes; at most 4341880 are "
         "expected"),
    Case("optim.OnnxMomentum.load_state_dict", "a step count of 10**30",
         opt_call("OnnxMomentum", "load_state_dict", _big_steps_state_dict), CheckpointError,
         "fastopt.optim.OnnxMomentum.load_state_dict: the checkpoint's step count must be an "
         "integer >= 0 and < 2**63, got 1000000000000000000000000000000"),
]


def sched(*args, **kwargs):
    return lambda: (args, kwargs)


P = "fastopt.schedules."
SCHEDULE_BIG_CASES = [
    Case("schedules.ConstantLearningRate", "eta = 10**400", sched(10**400), ValueError,
         P + "ConstantLearningRate: eta must be a finite number >= 0, got an integer of "
             "401 digits"),
    Case("schedules.StandardDecay", "alpha = 10**400", sched(1.0, alpha=10**400),
         ValueError, P + "StandardDecay: alpha must be a finite number >= 0, got an integer "
                         "of 401 digits"),
    Case("schedules.CorrectionDecay", "beta = 10**400 (must be < 1)",
         sched(1.0, beta=10**400), ValueError,
         P + "CorrectionDecay: beta must be a finite number in [0, 1), got an integer of 401 "
             "digits"),
    Case("schedules.InverseTime", "decay_rate = 10**500", sched(1.0, 10**500), ValueError,
         P + "InverseTime: decay_rate must be a finite number >= 0, got an integer of 501 "
             "digits"),
    Case("schedules.Exponential", "decay_rate = 2**1024", sched(1.0, 10, 2**1024),
         ValueError, P + "Exponential: decay_rate must be a finite number > 0, got an integer "
                         "of 309 digits"),
    Case("schedules.CosineDecay", "exponent = 10**400", sched(1.0, 10, exponent=10**400),
         ValueError, P + "CosineDecay: exponent must be a finite number > 0, got an integer "
                         "of 401 digits"),
    Case("schedules.WarmupCosineDecay", "peak_value = 10**400",
         sched(0.0, 10**400, 1, 10), ValueError,
         P + "WarmupCosineDecay: peak_value must be a finite number >= 0, got an integer of "
             "401 digits"),
    Case("schedules.Polynomial", "transition_steps = -10**400",
         sched(1.0, 0.0, 1.0, -10**400), ValueError,
         P + "Polynomial: transition_steps must be an integer >= 1, got an integer of 401 "
             "digits"),
]

# Values just past a bound that an earlier check let through (kept last, so
# that a new row does not renumber the others).
EDGE_CASES = [
    Case("optim.OnnxAdam.load_state_dict", "a step count of 2**63 - 1 (Adam's update count "
         "is steps + 1)",
         opt_call("OnnxAdam", "load_state_dict", _adam_last_steps_state_dict), CheckpointError,
         "fastopt.optim.OnnxAdam.load_state_dict: the checkpoint's step count must be an "
         "integer >= 0 and < 2**63 - 1 (the update count, steps + 1, is an int64), got "
         "9223372036854775807"),
] + ([Case("optim.OnnxMomentum.load", "a FIFO (a load would wait for a writer forever)",
           _fifo("fifo.npz"), CheckpointError,
           OL + "'" + TOKEN + "/fifo.npz' is not a regular file (a FIFO); a checkpoint is "
           "an .npz file")] if hasattr(os, "mkfifo") else [])

HOSTILE_CASES = CHECKPOINT_CASES + SCHEDULE_BIG_CASES + EDGE_CASES


def normalise(message: str) -> str:
    """A message with the scratch directory replaced by ``<tmp>``."""
    return message.replace(CKPT_DIR, TOKEN)


__all__ = ["CKPT_DIR", "HOSTILE_CASES", "normalise"]
