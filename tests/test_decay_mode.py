"""decay_mode: where AdamW's decoupled weight decay multiplies the
parameter. "torch" (the default) before the update, as torch.optim.AdamW;
"bnb" after it, as bitsandbytes' CUDA kernels do for its Adam and AdamW
alike (docs/semantics.md, "8-bit states"). The update itself is the same;
tests/test_step_api.py checks the functions against the NumPy reference,
test_q8*.py and test_torch_q8.py with 8-bit states."""
import copy
import json
import zipfile

import numpy as np
import pytest

import fastopt
import fastopt.optim as fo

F32 = np.float32


def _data(seed=0, n=3000):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n).astype(F32), rng.standard_normal(n).astype(F32)


def test_bnb_decays_after_the_update():
    """With everything else zero the update is plain: the two orders differ
    by exactly lr * wd * update, and "bnb" is (x + update) * (1 - lr * wd)."""
    x0, g = (a.astype(np.float64) for a in _data())
    out = {}
    for mode in ("torch", "bnb"):
        x = x0.copy()
        fastopt.adamw(x, g, np.zeros_like(x), np.zeros_like(x), step=1, lr=0.1,
                      weight_decay=0.5, decay_mode=mode)
        out[mode] = x
    plain = x0.copy()
    fastopt.adamw(plain, g, np.zeros_like(x0), np.zeros_like(x0), step=1, lr=0.1,
                  weight_decay=0.0)
    update = plain - x0
    np.testing.assert_allclose(out["bnb"], (x0 + update) * (1 - 0.05), rtol=1e-15)
    np.testing.assert_allclose(out["torch"], x0 * (1 - 0.05) + update, rtol=1e-15)
    assert not np.array_equal(out["torch"], out["bnb"])


@pytest.mark.parametrize("kind", ["plain", "amsgrad+maximize", "bf16 states", "8-bit"])
def test_bnb_makes_adam_decay_as_adamw(kind):
    """Adam's group with the flag is AdamW's, whatever else the step does."""
    import ml_dtypes
    x0, g = _data(1, 5000)
    got = []
    for fn in (fastopt.adam, fastopt.adamw):
        x = x0.copy()
        if kind == "bf16 states":
            m, v = (np.zeros(x.shape, ml_dtypes.bfloat16) for _ in range(2))
        elif kind == "8-bit":
            m, v = fastopt.State8bit.zeros(x.shape), fastopt.State8bit.zeros(x.shape, False)
        else:
            m, v = np.zeros_like(x0), np.abs(x0) * 0.1
        amsgrad = kind == "amsgrad+maximize"
        vmax = [np.abs(x0) * 0.2] if amsgrad else None
        for t in (1, 2):
            fn(x, g, m, v, step=t, lr=1e-2, weight_decay=0.3, decay_mode="bnb",
               amsgrad=amsgrad, maximize=amsgrad, max_exp_avg_sqs=vmax, seed=3)
        got.append([x] + [b for s in (m, v) for b in (
            (s.codes, s.absmax) if kind == "8-bit" else (s,))] + (vmax or []))
    for a, b in zip(*got):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def test_the_core_takes_the_flag_for_adam_and_adamw_only():
    """The flag is one fact of the core: on Adam's group (its L2 form) it
    makes the decay decoupled and after the update, the same bits as
    AdamW's group with it; another rule's group declines with nothing
    written."""
    from fastopt import _ext, _rules, _step
    x0, g = _data(7, 600)
    tail = (1.0, 0.0, 0.0, 0, 0, False, 1)
    got = {}
    for rule, ok in (("adamw_torch", True), ("adam_torch", True), ("sgd_torch", False)):
        grp = _step.group_tuple(_rules.ID[rule], t=1, lr=0.1, alpha=0.9, beta=0.999,
                                eps=1e-8, decay=0.5, flags=_step.DECAY_MODES["bnb"])
        x, m, v = x0.copy(), np.zeros_like(x0), np.zeros_like(x0)
        out = _ext.step((x,), (g,), (m,), (v,), (None,), (0,), (grp,), *tail)
        assert (out is not None) == ok
        assert (x != x0).all() if ok else (x == x0).all() and not m.any()
        got[rule] = (x, m, v)
    for a, b in zip(got["adam_torch"], got["adamw_torch"]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", ["after", "BNB", None, 1])
def test_a_bad_decay_mode_raises_and_writes_nothing(bad):
    x0, g = _data(2)
    x, m, v = x0.copy(), np.zeros_like(x0), np.zeros_like(x0)
    with pytest.raises(ValueError, match=r"fastopt.adamw: decay_mode must be 'torch'"):
        fastopt.adamw(x, g, m, v, step=1, decay_mode=bad)
    np.testing.assert_array_equal(x, x0)
    assert not m.any() and not v.any()
    opt = fo.AdamW([x], lr=0.1)
    opt.param_groups[0]["decay_mode"] = bad
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['decay_mode'\] must be"):
        opt.step([g])
    np.testing.assert_array_equal(x, x0)


def test_optim_groups_take_their_own_decay_mode_and_checkpoints_keep_it(tmp_path):
    (a0, ga), (b0, gb) = _data(3), _data(4)
    a, b = a0.copy(), b0.copy()
    opt = fo.AdamW([{"params": [a]}, {"params": [b], "decay_mode": "bnb"}], lr=0.1,
                   weight_decay=0.5)
    opt.step([ga, gb])
    for x, x0, g, mode in ((a, a0, ga, "torch"), (b, b0, gb, "bnb")):
        want = x0.copy()
        fastopt.adamw(want, g, np.zeros_like(x0), np.zeros_like(x0), step=1, lr=0.1,
                      weight_decay=0.5, decay_mode=mode)
        np.testing.assert_array_equal(x, want)
    opt.save(tmp_path / "ck")
    again = fo.AdamW([{"params": [a.copy()]}, {"params": [b.copy()]}], lr=0.1,
                     weight_decay=0.5)
    again.load(tmp_path / "ck")
    assert [g["decay_mode"] for g in again.param_groups] == ["torch", "bnb"]


def test_a_state_dict_written_before_decay_mode_existed_loads_as_torch():
    x0, g = _data(5)
    opt = fo.AdamW([x0.copy()], lr=0.1, decay_mode="bnb")
    opt.step([g])
    sd = copy.deepcopy(opt.state_dict())
    del sd["param_groups"][0]["decay_mode"]
    fresh = fo.AdamW([x0.copy()], lr=0.1, decay_mode="bnb")
    fresh.load_state_dict(sd)
    assert fresh.param_groups[0]["decay_mode"] == "torch"


def _without(src, dst, key):
    """Copy checkpoint src to dst with key taken out of its groups (as written
    before decay_mode existed, for that key)."""
    with zipfile.ZipFile(src) as z:
        arrays = {n[:-4]: np.load(z.open(n)) for n in z.namelist()}
    meta = json.loads(str(arrays["meta"][()]))
    for g in meta["param_groups"]:
        del g[key]
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(dst, **arrays)


def test_a_checkpoint_written_before_decay_mode_existed_loads_as_torch(tmp_path):
    """In fastopt.optim and in a ShardedOptimizer (which reads the same file);
    a file missing another key is still refused, naming the keys it has."""
    x0, g = _data(6)
    opt = fo.AdamW([x0.copy()], lr=0.1)
    opt.step([g])
    opt.save(tmp_path / "new.npz")
    _without(tmp_path / "new.npz", tmp_path / "old.npz", "decay_mode")
    fresh = fo.AdamW([opt.params[0].copy()], lr=0.1, decay_mode="bnb")
    fresh.load(tmp_path / "old.npz")
    assert fresh.param_groups[0]["decay_mode"] == "torch"
    fresh.step([g])
    opt.step([g])
    np.testing.assert_array_equal(fresh.params[0], opt.params[0])
    pytest.importorskip("mpi4py")
    from mpi4py import MPI

    from fastopt.distributed import ShardedOptimizer
    sharded = ShardedOptimizer(fo.AdamW, [x0.copy()], lr=0.1, decay_mode="bnb",
                               comm=MPI.COMM_SELF)
    sharded.load(tmp_path / "old.npz")
    assert sharded.param_groups[0]["decay_mode"] == "torch"
    _without(tmp_path / "old.npz", tmp_path / "bad.npz", "eps")
    with pytest.raises(fastopt.optim.CheckpointError, match=r"has keys \['amsgrad', 'betas', "
                       r"'lr', 'maximize', 'n_params', 'weight_decay'\], expected"):
        fresh.load(tmp_path / "bad.npz")


def test_torch_8bit_classes_take_decay_mode_and_keep_it_through_state_dicts():
    torch = pytest.importorskip("torch")
    import fastopt.torch as ft
    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match="fastopt.torch.AdamW8bit: decay_mode must be"):
        ft.AdamW8bit([p], decay_mode="after")
    opt = ft.AdamW8bit([p], decay_mode="bnb")
    opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
    assert [g["decay_mode"] for g in opt.param_groups] == ["bnb", "bnb"]
    sd = opt.state_dict()
    for g in sd["param_groups"]:
        del g["decay_mode"]                     # as bitsandbytes' state dicts have none
    opt.load_state_dict(sd)
    assert [g["decay_mode"] for g in opt.param_groups] == ["bnb", "bnb"]
