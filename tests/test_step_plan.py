"""The prepared step (fastopt/_plan.pxi): the optimizer checks its
parameters and states once, and per step re-checks only the gradients and
the flags. Every gradient change after prepared steps (a new array, another
dtype, shape, layout, byte order or alignment, a gradient reshaped in place,
one that aliases a parameter or a state) is caught before anything is
written: a bad one raises with no byte of any parameter, state or counter
changed; an awkward but valid one takes the fully checked route and gives
the bits of an optimizer that never prepared. And the remembered step of
opt.step (when only the gradients changed, _fused.fast) yields to the full
route on any other change: hyperparameters, schedules, options, threads, a
checkpoint restored, a parameter list replaced."""
import numpy as np
import pytest

import fastopt.optim as fo

SIZES = (5, 1, 32, 33, 1000)


def _pair(cls=fo.AdamW, dtype=np.float32, groups=False, **kw):
    """Two optimizers on equal parameters: the first prepares, the second
    always takes the full route."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(n).astype(dtype) for n in SIZES]
    ys = [x.copy() for x in xs]
    if groups:
        opt = cls([{"params": xs[:2]}, {"params": xs[2:], "lr": 0.02}], lr=0.01, **kw)
        twin = cls([{"params": ys[:2]}, {"params": ys[2:], "lr": 0.02}], lr=0.01, **kw)
    else:
        opt, twin = cls(xs, lr=0.01, **kw), cls(ys, lr=0.01, **kw)
    return opt, twin, xs, ys


def _full_route(twin):
    twin._plan_all = (twin._plan_all or (None,))[:1] + (None,)


def _grads(rng, xs, dtype=None):
    return [rng.standard_normal(x.shape).astype(dtype or x.dtype) for x in xs]


def _step_both(opt, twin, gs, gs_twin=None, **kw):
    a = opt.step(gs, **kw)
    _full_route(twin)
    b = twin.step(gs if gs_twin is None else gs_twin, **kw)
    assert a == b
    assert opt.last_grad_norm == twin.last_grad_norm or (
        np.isnan(opt.last_grad_norm) and np.isnan(twin.last_grad_norm))


def _same(opt, twin, xs, ys):
    for a, b in zip(xs, ys):
        assert a.tobytes() == b.tobytes()
    for k, v in opt.state.items():
        for a, b in zip(v, twin.state[k]):
            assert a.tobytes() == b.tobytes()
    assert opt.steps == twin.steps


def _snapshot(opt, xs):
    return ([x.tobytes() for x in xs],
            {k: [a.tobytes() for a in v] for k, v in opt.state.items()}, opt.steps)


WARM = {"grad_scale": 8.0, "skip_if_nonfinite": True, "max_grad_norm": 1.0}


def _warm(opt, twin, rng, xs, steps=2):
    gs = _grads(rng, xs)
    for _ in range(steps):     # the same gradient arrays: the pointer cache is warm
        _step_both(opt, twin, gs, **WARM)
    assert opt._plan_all[1] is not None
    assert opt._fast is not None          # the next step takes the remembered call
    return gs


def _unaligned(g):
    buf = np.zeros(g.nbytes + 1, np.uint8)
    out = buf[1:].view(g.dtype)
    out[...] = g
    assert not out.flags.aligned
    return out


def _set(i, make):
    def change(gs, xs, opt):
        gs[i] = make(gs[i], xs, opt)
    return change


AWKWARD = {   # valid gradients the prepared step declines: the full route copies
    "strided": _set(4, lambda g, xs, opt: np.repeat(g, 2)[::2]),
    "byteswapped": _set(4, lambda g, xs, opt: g.astype(g.dtype.newbyteorder())),
    "unaligned": _set(4, lambda g, xs, opt: _unaligned(g)),
    "aliases_its_param": _set(4, lambda g, xs, opt: xs[4]),
    "view_of_a_state": _set(4, lambda g, xs, opt: opt.state["exp_avg"][4]),
    "readonly": _set(4, lambda g, xs, opt: _readonly(g)),
    "broadcast": _set(4, lambda g, xs, opt: np.broadcast_to(np.float32(0.25), g.shape)),
    "subclass": _set(4, lambda g, xs, opt: g.view(type("Sub", (np.ndarray,), {}))),
    "fortran_2d_param_order": _set(1, lambda g, xs, opt: np.asfortranarray(g)),
    "new_arrays": lambda gs, xs, opt: gs.__setitem__(slice(None), [g.copy() for g in gs]),
}


def _readonly(g):
    g = g.copy()
    g.flags.writeable = False       # a gradient is only read: accepted
    return g


@pytest.mark.parametrize("change", sorted(AWKWARD))
@pytest.mark.parametrize("groups", [False, True])
def test_changed_gradient_matches_the_full_route(change, groups):
    opt, twin, xs, ys = _pair(groups=groups)
    rng = np.random.default_rng(1)
    gs = _warm(opt, twin, rng, xs)
    gs, gs_twin = list(gs), list(gs)
    AWKWARD[change](gs, xs, opt)          # each over its own optimizer's arrays
    AWKWARD[change](gs_twin, ys, twin)
    _step_both(opt, twin, gs, gs_twin, grad_scale=8.0, skip_if_nonfinite=True,
               max_grad_norm=1.0)
    _same(opt, twin, xs, ys)
    # and back to plain gradients: prepared again, still the same bits
    _step_both(opt, twin, _grads(rng, xs), max_grad_norm=1.0)
    _same(opt, twin, xs, ys)


BAD = {   # gradients no route accepts: raise, nothing written
    "float64": (lambda g: g.astype(np.float64), TypeError),
    "int32": (lambda g: g.astype(np.int32), TypeError),
    "longer": (lambda g: np.resize(g, g.size + 1), ValueError),
    "2d": (lambda g: g.reshape(g.size, 1)[:, :1].reshape(-1, 1), ValueError),
    "list": (lambda g: g.tolist(), TypeError),
    "scalar_string": (lambda g: "g", TypeError),
}


@pytest.mark.parametrize("change", sorted(BAD))
@pytest.mark.parametrize("position", [0, 4])
def test_bad_gradient_after_prepared_steps_writes_nothing(change, position):
    opt, twin, xs, _ = _pair()
    rng = np.random.default_rng(2)
    gs = list(_warm(opt, twin, rng, xs))
    before = _snapshot(opt, xs)
    make, exc = BAD[change]
    gs[position] = make(gs[position])
    with pytest.raises(exc):
        opt.step(gs, grad_scale=8.0, skip_if_nonfinite=True, max_grad_norm=1.0)
    assert _snapshot(opt, xs) == before


@pytest.mark.parametrize("where", ["param", "state"])
def test_gradient_partly_over_written_memory_writes_nothing(where):
    """A gradient over part of another parameter or of a state (the full
    route rejects a partial overlap): caught although its slot's previous
    array had passed."""
    opt, twin, xs, _ = _pair()
    rng = np.random.default_rng(8)
    gs = list(_warm(opt, twin, rng, xs))
    before = _snapshot(opt, xs)
    if where == "param":
        gs[2] = xs[3][1:]
    else:
        gs[0] = opt.state["exp_avg_sq"][4][3:8]
    with pytest.raises(ValueError, match="overlaps"):
        opt.step(gs, **WARM)
    assert _snapshot(opt, xs) == before


def test_gradient_reshaped_in_place_is_caught():
    """The same gradient object, its shape changed in place: the shape is
    re-read every step."""
    opt, twin, xs, _ = _pair()
    rng = np.random.default_rng(3)
    gs = list(_warm(opt, twin, rng, xs))
    before = _snapshot(opt, xs)
    gs[4].shape = (10, 100)
    with pytest.raises(ValueError):
        opt.step(gs, **WARM)
    assert _snapshot(opt, xs) == before


def test_gradient_moved_onto_a_parameter_after_its_pointer_was_cached():
    """A gradient slot whose earlier array passed the overlap test, now an
    array over a parameter's memory: a new pointer is searched again (the
    full route then reads the parameter before writing it)."""
    opt, twin, xs, ys = _pair()
    rng = np.random.default_rng(4)
    gs = list(_warm(opt, twin, rng, xs))
    gs_twin = list(gs)
    gs[2], gs_twin[2] = xs[2], ys[2]
    _step_both(opt, twin, gs, gs_twin, **WARM)
    _same(opt, twin, xs, ys)


@pytest.mark.parametrize("form", ["list", "tuple", "per_group"])
def test_gradient_containers(form):
    opt, twin, xs, ys = _pair(groups=True)
    rng = np.random.default_rng(6)
    for _ in range(3):
        gs = _grads(rng, xs)
        if form == "tuple":
            gs = tuple(gs)
        elif form == "per_group":
            gs = [gs[:2], gs[2:]]
        _step_both(opt, twin, gs, grad_scale=2.0, max_grad_norm=0.5)
    assert opt._plan_all[1] is not None
    _same(opt, twin, xs, ys)


def test_nonfinite_skip_on_the_prepared_route_writes_nothing():
    opt, twin, xs, _ = _pair()
    rng = np.random.default_rng(7)
    gs = list(_warm(opt, twin, rng, xs))
    before = _snapshot(opt, xs)
    gs[1] = np.array([np.inf], np.float32)
    assert not opt.step(gs, grad_scale=8.0, skip_if_nonfinite=True, max_grad_norm=1.0)
    assert _snapshot(opt, xs) == before


EDITS = {   # between prepared steps: each must take effect (the remembered step yields)
    "lr": lambda opt: opt.param_groups[1].__setitem__("lr", 0.05),
    "betas": lambda opt: opt.param_groups[0].__setitem__("betas", (0.8, 0.99)),
    "weight_decay": lambda opt: opt.param_groups[1].__setitem__("weight_decay", 0.5),
    "maximize": lambda opt: opt.param_groups[0].__setitem__("maximize", True),
    "schedule": lambda opt: opt.param_groups[1].update(lr=None, schedule=lambda s: 0.1 / (s + 1)),
    "n_threads": lambda opt: setattr(opt, "n_threads", 2),
    "nothing": lambda opt: None,
}
OPTIONS = [   # step options, changing from step to step
    {"grad_scale": 8.0, "skip_if_nonfinite": True, "max_grad_norm": 1.0},
    {"grad_scale": 8, "skip_if_nonfinite": True, "max_grad_norm": 1.0},
    {"max_grad_norm": 0.5, "norm_type": float("inf")},
    {"max_grad_norm": 0.5, "clip_convention": "optax"},
    {},
]


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_edits_between_prepared_steps_take_effect(edit):
    opt, twin, xs, ys = _pair(groups=True)
    rng = np.random.default_rng(9)
    for k in range(12):
        if k == 5:
            EDITS[edit](opt)
            EDITS[edit](twin)
        _step_both(opt, twin, _grads(rng, xs), **OPTIONS[(k // 2) % len(OPTIONS)])
        _same(opt, twin, xs, ys)
        assert opt.last_lr == twin.last_lr


def test_checkpoint_between_prepared_steps():
    opt, twin, xs, ys = _pair()
    rng = np.random.default_rng(10)
    gs = _warm(opt, twin, rng, xs, steps=3)
    snap, snap_twin = opt.state_dict(), twin.state_dict()
    saved = [x.copy() for x in xs]
    _step_both(opt, twin, gs, **WARM)
    opt.load_state_dict(snap)             # back one step: the step count too
    twin.load_state_dict(snap_twin)
    for x, y, s in zip(xs, ys, saved):
        x[...] = s
        y[...] = s
    for _ in range(3):
        _step_both(opt, twin, _grads(rng, xs), grad_scale=8.0, max_grad_norm=1.0)
    _same(opt, twin, xs, ys)


def test_params_list_replaced_after_prepared_steps_raises():
    opt, twin, xs, _ = _pair()
    rng = np.random.default_rng(11)
    gs = _warm(opt, twin, rng, xs)
    before = _snapshot(opt, xs)
    opt.param_groups[0]["params"] = list(xs)
    with pytest.raises(ValueError, match="was replaced"):
        opt.step(gs, **WARM)
    assert _snapshot(opt, xs) == before


def test_amsgrad_turned_on_after_prepared_steps_raises():
    opt, twin, xs, _ = _pair()
    rng = np.random.default_rng(12)
    gs = _warm(opt, twin, rng, xs)
    before = _snapshot(opt, xs)
    opt.param_groups[0]["amsgrad"] = True
    with pytest.raises(ValueError, match="amsgrad"):
        opt.step(gs, **WARM)
    assert _snapshot(opt, xs) == before


@pytest.mark.parametrize("bad", [{"grad_scale": 0.0}, {"max_grad_norm": -1.0},
                                 {"norm_type": 3.0}, {"grad_scale": "8"}])
def test_bad_options_after_prepared_steps_raise(bad):
    opt, twin, xs, _ = _pair()
    rng = np.random.default_rng(13)
    gs = _warm(opt, twin, rng, xs)
    before = _snapshot(opt, xs)
    with pytest.raises((TypeError, ValueError)):
        opt.step(gs, **bad)
    assert _snapshot(opt, xs) == before


def test_second_thread_declines_while_a_step_runs():
    """Two threads stepping one optimizer: while one runs fo_step from the
    plan (GIL released), the plan declines another thread's step (its
    records, the gradients' pointers among them, are the running step's),
    which takes the fully checked route with its own work list."""
    import threading
    rng = np.random.default_rng(10)
    xs = [rng.standard_normal(n).astype(np.float32) for n in (1 << 20, 3, 1 << 19)]
    opt = fo.AdamW(xs, lr=0.01, n_threads=1)
    gs = _grads(rng, xs)
    for _ in range(3):
        opt.step(gs, **WARM)
    plan, rec = opt._plan_all[1], opt._fast
    (head, tail), args = rec[2][0], rec[4]
    assert not plan.busy
    gt = tuple(gs)
    worker = threading.Thread(target=plan._drive, args=(400, gt))
    worker.start()
    try:
        while not plan.busy and worker.is_alive():
            pass
        other = _grads(rng, xs)
        assert plan.run(other, (head + (opt._steps + 1,) + tail,), *args, None) is None
        assert opt.step(other, **WARM) is True       # the full route
        assert plan.busy and worker.is_alive()       # both ran inside the drive
    finally:
        worker.join()
    assert not plan.busy
    assert plan.run(other, (head + (opt._steps + 1,) + tail,), *args, None) is not None


def test_run_pointers_takes_addresses_and_still_tests_overlap():
    """StepPlan.run_pointers (fastopt.torch's prepared step): gradients as
    data addresses; the step equals run() with the arrays, and an address
    inside a written array, zero, negative or not an int declines."""
    from fastopt import _ext, _step
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(n) for n in (3, 70)]
    ys = [x.copy() for x in xs]
    gs = [rng.standard_normal(x.shape) for x in xs]
    grp = (_step.group_tuple(_step.RULES["sgd_torch"], t=1, lr=0.1),)
    opts = (1.0, 0.0, 0.0, 0, 0, False, None)
    plan = _ext.StepPlan.make(tuple(xs), (None,) * 2, (None,) * 2, (None,) * 2, (0, 0), 1)
    twin = _ext.StepPlan.make(tuple(ys), (None,) * 2, (None,) * 2, (None,) * 2, (0, 0), 1)
    addrs = tuple(g.ctypes.data for g in gs)
    assert plan.run_pointers(addrs, grp, *opts)[0] is twin.run(tuple(gs), grp, *opts)[0]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(xs, ys))
    before = [x.copy() for x in xs]
    spare = np.zeros(70 * 8 + 8, np.uint8)          # room for a misaligned gradient
    for bad in [(addrs[0], xs[1].ctypes.data + 8), (addrs[0], xs[0].ctypes.data),
                (addrs[0], spare.ctypes.data + 1),
                (0, addrs[1]), (-8, addrs[1]), (addrs[0], float(addrs[1])),
                (addrs[0],)]:
        assert plan.run_pointers(bad, grp, *opts) is None, bad
    assert all(a.tobytes() == b.tobytes() for a, b in zip(xs, before))
