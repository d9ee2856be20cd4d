"""fastopt.optim checkpoints that hold the parameters too (``save(path,
params=True)``): one atomic file resumes a run bit-exactly; a file whose
parameters do not fit the optimizer, or that cannot be restored completely,
is rejected with every parameter and state unchanged.
"""
import os
import zipfile

import numpy as np
import pytest
from npz_hostile import bomb_member, member, raw_zip
from optim_cases import OPTS, assert_same, make_grads, make_params, run, snapshot

from fastopt import optim
from fastopt.optim import CheckpointError


def _trained(cls=optim.OnnxAdam, **kw):
    params = make_params()
    opt = cls(params, lr=0.01, **kw)
    run(opt, params, 0, 3)
    return opt, params


def _rejected(opt, params, fn, match):
    before = snapshot(opt, params)
    with pytest.raises(CheckpointError, match=match):
        fn()
    assert_same(before, snapshot(opt, params))


def _rewrite(path, change):
    """Rewrite a checkpoint with ``change(entries)`` applied to its arrays."""
    with np.load(path) as z:
        entries = {k: z[k] for k in z.files}
    change(entries)
    np.savez(path, **entries)


@pytest.mark.parametrize("name", list(OPTS) + ["torch_adamw"])
def test_one_file_resumes_parameters_and_state_bit_exactly(name, tmp_path):
    if name == "torch_adamw":
        cls, kw = optim.AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True)
    else:
        cls, kw = OPTS[name][0], OPTS[name][1]
    params = make_params()
    opt = cls(params, **kw)
    run(opt, params, 0, 4)
    opt.save(tmp_path / "ckpt.npz", params=True)
    run(opt, params, 4, 3)                       # the run goes on ...

    other = make_params(seed=7)                  # ... a new process, other values
    opt2 = cls(other, **kw)
    run(opt2, other, 0, 1)
    opt2.load(tmp_path / "ckpt.npz")             # parameters and state from one file
    assert opt2.steps == 4
    run(opt2, other, 4, 3)
    assert_same(snapshot(opt, params), snapshot(opt2, other))
    assert sorted(os.listdir(tmp_path)) == ["ckpt.npz"]          # no temporary file


def test_the_parameters_are_entries_of_the_file_in_params_order(tmp_path):
    opt, params = _trained()
    opt.save(tmp_path / "c.npz", params=True)
    with np.load(tmp_path / "c.npz") as z:
        assert [k for k in z.files if k.startswith("params.")] == \
            [f"params.{i}" for i in range(len(params))]
        for i, p in enumerate(params):
            np.testing.assert_array_equal(z[f"params.{i}"], p, strict=True)


def test_without_params_the_file_holds_no_parameters(tmp_path):
    opt, params = _trained()
    opt.save(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz") as z:
        assert not [k for k in z.files if k.startswith("params")]
    _rejected(opt, params, lambda: opt.load(tmp_path / "c.npz", params=True),
              r"OnnxAdam\.load: the file holds no parameters \(it was saved without "
              r"params=True\)")


def test_load_params_false_restores_the_state_only(tmp_path):
    opt, params = _trained()
    opt.save(tmp_path / "c.npz", params=True)
    saved = snapshot(opt, params)
    run(opt, params, 3, 2)
    now = [p.copy() for p in params]
    opt.load(tmp_path / "c.npz", params=False)
    for p, q in zip(params, now):
        np.testing.assert_array_equal(p, q, strict=True)
    assert_same(([p.copy() for p in params], *saved[1:]), snapshot(opt, params))


@pytest.mark.parametrize("value", [[np.zeros(3)], "yes", 1, None])
def test_params_must_be_a_bool(value, tmp_path):
    opt, _ = _trained()
    with pytest.raises(TypeError, match=r"OnnxAdam\.save: params must be True or False, "
                                        r"got \w+"):
        opt.save(tmp_path / "c.npz", params=value)
    assert not os.listdir(tmp_path)
    opt.save(tmp_path / "c.npz")
    if value is not None:
        with pytest.raises(TypeError, match=r"OnnxAdam\.load: params must be True or False"):
            opt.load(tmp_path / "c.npz", params=value)


def test_save_with_parameters_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.npz"
    opt, params = _trained()
    opt.save(path, params=True)
    good = path.read_bytes()
    run(opt, params, 3, 1)

    def crash(fh, **arrays):
        assert "params.0" in arrays
        fh.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        opt.save(path, params=True)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["ckpt.npz"]


@pytest.mark.parametrize("case", ["shape", "dtype", "one missing", "extra", "state shape"])
def test_mismatched_parameters_are_rejected_with_nothing_changed(case, tmp_path):
    path = tmp_path / "c.npz"
    donor, _ = _trained()
    donor.save(path, params=True)
    match = {
        "shape": r"saved params\[2\] has shape \(3, 4\) but params\[2\] has shape \(2, 3, 2\)",
        "dtype": r"saved params\[1\] has dtype float32 but params\[1\] has float64",
        "one missing": r"no 'params.3' entry \(4 of the 5 parameters saved\)",
        "extra": r"unexpected entries \['params.5'\]",
        "state shape": r"state 'v' of params\[0\] has shape \(5,\)",
    }[case]

    def change(e):
        if case == "shape":
            e["params.2"] = e["params.0"]
        elif case == "dtype":
            e["params.1"] = e["params.1"].astype(np.float32)
        elif case == "one missing":
            del e["params.3"]
        elif case == "extra":
            e["params.5"] = e["params.0"]
        elif case == "state shape":             # the parameters fit, a state does not
            e["state.v.0"] = e["state.v.1"]
    _rewrite(path, change)
    opt, params = _trained()
    run(opt, params, 3, 1)                       # distinct from the donor
    _rejected(opt, params, lambda: opt.load(path), match)


def test_parameter_entry_is_checked_by_its_header_before_its_data(tmp_path):
    """An entry that declares 2**27 float64 values (1 GiB) in a small file is
    rejected by its header: the data (a failing CRC) is never read."""
    path = tmp_path / "c.npz"
    opt, params = _trained()
    opt.save(path, params=True)
    with zipfile.ZipFile(path) as z:
        keep = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    parts = [bomb_member(n, crc=False) if n == "params.1.npy" else member(n, p)
             for n, p in keep]
    path.write_bytes(raw_zip(parts))
    assert path.stat().st_size < 2 << 20
    run(opt, params, 3, 1)
    _rejected(opt, params, lambda: opt.load(path),
              r"saved params\[1\] has shape \(134217728,\) but params\[1\] has shape \(5,\)")


def test_read_only_parameter_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "c.npz"
    opt, params = _trained()
    opt.save(path, params=True)
    run(opt, params, 3, 1)
    params[4].flags.writeable = False            # the last one: nothing may be written first
    _rejected(opt, params, lambda: opt.load(path),
              r"params\[4\] is read-only; the checkpoint's parameters cannot be restored")
    opt.load(path, params=False)                 # the state alone still loads
    assert opt.steps == 3


def test_corrupt_parameter_data_is_rejected_with_nothing_changed(tmp_path):
    path = tmp_path / "c.npz"
    opt, params = _trained()
    opt.save(path, params=True)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("params.4.npy")
    pos = info.header_offset + 30 + len(info.filename) + len(info.extra) + 128
    data[pos] ^= 0xFF                            # a byte of the last entry's values
    path.write_bytes(bytes(data))
    run(opt, params, 3, 1)
    _rejected(opt, params, lambda: opt.load(path), "not a readable fastopt checkpoint")
    assert opt.step(make_grads(params, 9))       # and still steps
