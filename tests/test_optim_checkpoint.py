"""fastopt.optim checkpoints: bit-exact resume, state_dict round trips, and
mismatched, corrupt or missing files and state dicts rejected unchanged;
save is atomic.
"""
import os
import struct
import zipfile

import numpy as np
import pytest
from optim_cases import OPTS, assert_same, make_grads, make_params, run, snapshot

from fastopt import optim
from fastopt.optim import CheckpointError


@pytest.mark.parametrize("name", list(OPTS))
def test_resume_from_a_checkpoint_is_bit_exact(name, tmp_path):
    cls, kw, _, _, _ = OPTS[name]
    kw = dict(kw)
    del kw["lr"]
    from fastopt.schedules import WarmRestarts
    sched = WarmRestarts(0.05, 0.001, interval=3)
    params = make_params()
    opt = cls(params, schedule=sched, **kw)
    run(opt, params, 0, 5)
    saved_params = [p.copy() for p in params]
    opt.save(tmp_path / "ckpt.npz")
    run(opt, params, 5, 5)

    resumed = [p.copy() for p in saved_params]
    opt2 = cls(resumed, schedule=sched, contiguous_state=True, **kw)
    opt2.load(tmp_path / "ckpt.npz")
    assert opt2.steps == 5
    run(opt2, resumed, 5, 5)
    for x, y in zip(params, resumed):
        np.testing.assert_array_equal(x, y, strict=True)
    for s in opt.state:
        for x, y in zip(opt.state[s], opt2.state[s]):
            np.testing.assert_array_equal(x, y, strict=True)
    assert not [f for f in os.listdir(tmp_path) if f != "ckpt.npz"]  # no temp files


def test_state_dict_round_trip_and_hyperparameters():
    params = make_params()
    opt = optim.OnnxMomentum([{"params": params[:2], "norm_coefficient": 0.25},
                          {"params": params[2:], "lr": 0.2}], lr=0.1, nesterov=True)
    run(opt, params, 0, 2)
    sd = opt.state_dict()
    assert sd["optimizer"] == "OnnxMomentum" and sd["steps"] == 2
    assert sd["param_groups"][0]["norm_coefficient"] == 0.25
    other = optim.OnnxMomentum([{"params": [p.copy() for p in params[:2]]},
                            {"params": [p.copy() for p in params[2:]]}], lr=0.5)
    other.load_state_dict(sd)
    assert other.param_groups[0]["norm_coefficient"] == 0.25
    assert other.param_groups[0]["lr"] == 0.1 and other.param_groups[1]["lr"] == 0.2
    assert other.param_groups[1]["nesterov"] is True
    assert other.steps == opt.steps == 2
    for a, b in zip(opt.state["v"], other.state["v"]):
        np.testing.assert_array_equal(a, b, strict=True)
    # the snapshot holds copies: stepping on does not change it
    v0 = sd["state"]["v"][0].copy()
    opt.step(make_grads(params, 9))
    np.testing.assert_array_equal(sd["state"]["v"][0], v0)


def _trained(cls=optim.OnnxAdam, **kw):
    params = make_params()
    opt = cls(params, lr=0.01, **kw)
    run(opt, params, 0, 3)
    return opt, params


def _check_unchanged(opt, params, fn, match):
    before = snapshot(opt, params)
    with pytest.raises(CheckpointError, match=match):
        fn()
    assert_same(before, snapshot(opt, params))


def _rewrite(src, dst, change):
    with np.load(src) as z:
        entries = {k: z[k] for k in z.files}
    change(entries)
    np.savez(dst, **entries)


@pytest.mark.parametrize("case", ["shape", "dtype", "missing", "extra", "optimizer",
                                  "groups", "hyper", "meta"])
def test_mismatched_checkpoint_file_is_rejected(case, tmp_path):
    src = tmp_path / "ok.npz"
    donor, _ = _trained()
    donor.save(src)
    opt, params = _trained()
    opt.param_groups[0]["lr"] = 0.5   # distinct from the donor's
    bad = tmp_path / "bad.npz"
    match = {
        "shape": r"state 'v' of params\[2\] has shape \(3, 4\) but params\[2\] has shape",
        "dtype": r"state 'h' of params\[1\] has dtype float32 but params\[1\] has float64",
        "missing": r"no 'state.h.4' entry",
        "extra": r"unexpected entries \['state.x.0'\]",
        "optimizer": r"saved by fastopt.optim.OnnxMomentum, not OnnxAdam",
        "groups": r"checkpoint has 2 parameter group\(s\), the optimizer 1",
        "hyper": r"hyperparameters are invalid.*\['alpha'\] must be < 1.0",
        "meta": r"no 'meta' entry",
    }[case]
    if case == "optimizer":
        p = make_params()
        m = optim.OnnxMomentum(p, lr=0.1)
        run(m, p, 0, 1)
        m.save(bad)
    elif case == "groups":
        p = make_params()
        optim.OnnxAdam([{"params": p[:1]}, {"params": p[1:]}], lr=0.1).save(bad)
    else:
        def change(e):
            import json
            if case == "shape":
                e["state.v.2"] = e["state.v.0"]
            elif case == "dtype":
                e["state.h.1"] = e["state.h.1"].astype(np.float32)
            elif case == "missing":
                del e["state.h.4"]
            elif case == "extra":
                e["state.x.0"] = e["state.v.0"]
            elif case == "hyper":
                meta = json.loads(str(e["meta"][()]))
                meta["param_groups"][0]["alpha"] = 1.5
                e["meta"] = np.array(json.dumps(meta))
            elif case == "meta":
                del e["meta"]
        _rewrite(src, bad, change)
    _check_unchanged(opt, params, lambda: opt.load(bad), match)


@pytest.mark.parametrize("case", ["truncated", "garbage", "text", "npy", "empty", "flipped"])
def test_corrupt_checkpoint_file_is_rejected(case, tmp_path):
    src = tmp_path / "ok.npz"
    donor, _ = _trained()
    donor.save(src)
    data = src.read_bytes()
    bad = tmp_path / "bad.npz"
    if case == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif case == "garbage":
        bad.write_bytes(bytes(range(256)) * 10)
    elif case == "text":
        bad.write_text("this is not a checkpoint\n")
    elif case == "npy":
        with bad.open("wb") as fh:
            np.save(fh, np.zeros(3))
    elif case == "empty":
        bad.write_bytes(b"")
    elif case == "flipped":  # a byte of array data changed: the zip CRC catches it
        with zipfile.ZipFile(src) as z:
            h = z.getinfo("state.v.0.npy").header_offset
        name_len, extra_len = struct.unpack("<HH", data[h + 26:h + 30])
        pos = h + 30 + name_len + extra_len + 128 + 8   # past the .npy header
        bad.write_bytes(data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1:])
    opt, params = _trained()
    _check_unchanged(opt, params, lambda: opt.load(bad),
                     "not a readable fastopt checkpoint|not an .npz|single .npy")


def test_missing_checkpoint_file_is_file_not_found(tmp_path):
    opt, _ = _trained()
    with pytest.raises(FileNotFoundError):
        opt.load(tmp_path / "nope.npz")


def test_save_into_a_missing_directory_names_the_path_given(tmp_path):
    """The error names the file asked for, not the temporary file beside it."""
    opt, _ = _trained()
    target = tmp_path / "no-such-dir" / "ckpt.npz"
    with pytest.raises(FileNotFoundError, match=r"\.save: No such file or directory") as err:
        opt.save(target)
    assert err.value.filename == str(target)
    assert ".tmp" not in str(err.value) and str(target) in str(err.value)
    assert not (tmp_path / "no-such-dir").exists()


@pytest.mark.parametrize("case", ["not a dict", "missing", "format", "steps", "state",
                                  "count", "array"])
def test_bad_state_dict_is_rejected(case):
    donor, _ = _trained()
    opt, params = _trained()
    sd = donor.state_dict()
    if case == "not a dict":
        sd = [sd]
    elif case == "missing":
        del sd["steps"]
    elif case == "format":
        sd["format"] = "torch"
    elif case == "steps":
        sd["steps"] = -1
    elif case == "state":
        del sd["state"]["h"]
    elif case == "count":
        sd["state"]["v"] = sd["state"]["v"][:3]
    elif case == "array":
        sd["state"]["v"][2] = sd["state"]["v"][2].tolist()
    _check_unchanged(opt, params, lambda: opt.load_state_dict(sd), "fastopt.optim.OnnxAdam")


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    opt, params = _trained()
    opt.save(path)
    good = path.read_bytes()
    run(opt, params, 3, 1)

    def crash(fh, **arrays):
        fh.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        opt.save(path)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["ckpt.npz"]
    monkeypatch.undo()
    opt.save(path)
    fresh, _ = _trained()
    fresh.load(path)
    assert fresh.steps == 4


def _adam_two(tmp_path, **kw):
    ps = [np.ones(4, np.float32), np.ones(3, np.float32)]
    opt = optim.Adam(ps, lr=0.1, **kw)
    g = [np.ones(4, np.float32), np.ones(3, np.float32)]
    opt.step(g)
    path = os.path.join(tmp_path, "ck.npz")
    opt.save(path, params=True)
    opt.step(g)
    return opt, ps, path


def test_a_read_only_destination_restores_nothing(tmp_path):
    """A state array made read-only since the save: load refuses before
    copying anything (parameters, states and the count stay)."""
    opt, ps, path = _adam_two(tmp_path)
    opt.state["exp_avg_sq"][1].flags.writeable = False
    before = snapshot(opt, ps)
    with pytest.raises(CheckpointError, match=r"Adam.load: state\['exp_avg_sq'\]\[1\] is "
                                              r"read-only; nothing was restored"):
        opt.load(path)
    assert_same(snapshot(opt, ps), before)


def test_master_weights_copies_read_only_restore_nothing(tmp_path):
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    model = [np.ones(4, bf16), np.ones(3, bf16)]
    opt = optim.AdamW(model, lr=0.1, master_weights=True)
    opt.step([np.ones(4, bf16), np.ones(3, bf16)])
    path = os.path.join(tmp_path, "ck.npz")
    opt.save(path)
    opt.step([np.ones(4, bf16), np.ones(3, bf16)])
    model[1].flags.writeable = False
    before = snapshot(opt, model)
    with pytest.raises(CheckpointError, match=r"the 16-bit params\[1\] is read-only"):
        opt.load(path)
    assert_same(snapshot(opt, model), before)


@pytest.mark.parametrize("key,value", [("maximize", 0), ("amsgrad", 1), ("lr", True),
                                       ("weight_decay", False)])
def test_a_value_equal_to_the_checked_one_but_of_another_type_is_checked(key, value,
                                                                          tmp_path):
    """0 == False: after a step with False, maximize=0 is checked (and
    refused) as on a fresh optimizer, by the step and by save."""
    opt, ps, path = _adam_two(tmp_path)
    opt.param_groups[0][key] = value
    before = snapshot(opt, ps)
    with pytest.raises(TypeError, match=key):
        opt.step([np.ones(4, np.float32), np.ones(3, np.float32)])
    with pytest.raises(TypeError, match=key):
        opt.save(path)
    assert_same(snapshot(opt, ps), before)


def test_numpy_scalar_hyperparameters_save_and_resume(tmp_path):
    opt, ps, path = _adam_two(tmp_path)
    opt.param_groups[0]["lr"] = np.float32(0.05)
    opt.param_groups[0]["betas"] = [np.float32(0.9), np.float64(0.99)]
    opt.step([np.ones(4, np.float32), np.ones(3, np.float32)])
    opt.save(path, params=True)
    other = optim.Adam([p.copy() for p in ps], lr=0.1)
    other.load(path, params=True)
    assert other.param_groups[0]["lr"] == float(np.float32(0.05))
    qs = [a for a in other._param_tuples[0]]
    for o in (opt, other):
        o.step([np.full(4, 0.5, np.float32), np.full(3, 0.5, np.float32)])
    for a, b in zip(ps, qs):
        np.testing.assert_array_equal(a, b)
    for k in opt.state:
        for a, b in zip(opt.state[k], other.state[k]):
            np.testing.assert_array_equal(a, b)


def test_a_group_appended_or_removed_is_refused(tmp_path):
    opt, ps, path = _adam_two(tmp_path)
    before = snapshot(opt, ps)
    opt.param_groups.append(dict(opt.param_groups[0], params=(np.ones(5, np.float32),)))
    with pytest.raises(ValueError, match=r"param_groups has 2 groups; this optimizer was "
                                         r"built with 1"):
        opt.step([np.ones(4, np.float32), np.ones(3, np.float32)])
    opt.param_groups.pop()
    opt.param_groups.pop()
    with pytest.raises(ValueError, match="param_groups has 0 groups"):
        opt.step([np.ones(4, np.float32), np.ones(3, np.float32)])
    assert opt.param_groups == []
    np.testing.assert_array_equal(ps[0], before[0][0])
    np.testing.assert_array_equal(opt.state["exp_avg"][1], before[1]["exp_avg"][1])


def test_save_writes_through_a_link_and_refuses_what_is_not_a_file(tmp_path):
    import stat
    opt, ps, path = _adam_two(tmp_path)
    link = os.path.join(tmp_path, "latest.npz")
    os.symlink(path, link)
    opt.save(link)
    assert os.path.islink(link)
    other = optim.Adam([p.copy() for p in ps], lr=0.1)
    other.load(path)
    assert other.steps == opt.steps == 2
    fifo = os.path.join(tmp_path, "fifo")
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"Adam.save: .*fifo' exists and is not a regular "
                                         r"file"):
        opt.save(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(IsADirectoryError, match="Adam.save: a directory is in the way"):
        opt.save(tmp_path)


@pytest.mark.parametrize("kw", [{}, {"state_dtype": "bfloat16"}, {"state_dtype": "int8-blockwise"},
                                {"contiguous_state": True},
                                {"contiguous_state": True, "state_dtype": "int8-blockwise"}])
def test_copies_and_pickles_after_steps_go_on_alike(kw):
    """The prepared plans (C structures over the arrays) are not copied:
    a deep copy or a pickle of a stepped optimizer steps on as it does,
    and knows where its own arrays are."""
    import copy
    import pickle

    from fastopt.optim import _grads
    ps = [np.ones(5000, np.float32), np.ones(3, np.float32)]
    opt = optim.AdamW(ps, lr=0.1, **kw)
    g = [np.full(5000, 0.5, np.float32), np.full(3, -0.5, np.float32)]
    for _ in range(3):
        opt.step(g)
    others = [copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))]
    for o in [opt] + others:
        for _ in range(2):
            o.step(g)
    for o in others:
        assert o.params[0] is not opt.params[0]
        for a, b in zip(o.params, opt.params):
            np.testing.assert_array_equal(a, b)
        for want, got in zip(_grads.written_extents(o), o._extents):
            np.testing.assert_array_equal(want, got)
        for arena in o.arenas.values():     # the states are views of the copy's arenas
            assert all(np.shares_memory(s, arena) for s in o.state["exp_avg"]
                       if isinstance(s, np.ndarray) and s.dtype == arena.dtype)


def test_an_array_edited_into_a_group_after_remembered_steps():
    """betas edited to an array once steps are remembered: the step checks
    and takes it (the remembered route compares types before values)."""
    ps = [np.ones(4, np.float32)]
    opt = optim.Adam(ps, lr=0.1)
    ref = optim.Adam([np.ones(4, np.float32)], lr=0.1)
    g = [np.full(4, 0.5, np.float32)]
    for o in (opt, ref):
        for _ in range(3):
            o.step(g)
    opt.param_groups[0]["betas"] = np.array([0.8, 0.99])
    ref.param_groups[0]["betas"] = (0.8, 0.99)
    for o in (opt, ref):
        o.step(g)
    np.testing.assert_array_equal(opt.params[0], ref.params[0])
