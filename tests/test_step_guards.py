"""The guards of the prepared step: a binding that checked its
written arrays once hands fo_step words of its own memory (an array's data
pointer, dtype object, flags) that must still hold; fo_step reads them in
pass 1 (on the pool's threads) or before pass 2 and, if one fails, returns
FO_ESTALE with nothing written. Through the C harness (tests/_step_ctypes.py)
and through fastopt.optim's StepPlan (fastopt/_plan.pxi): a written array
made read-only, re-typed or given an equal dtype object between steps."""
import _step_ctypes as cs
import numpy as np
import pytest
from test_step_c import BIG, THREADS, _case, _same, _step_raw
from test_step_plan import SIZES, WARM, _pair, _snapshot, _step_both, _warm

import fastopt.optim as fo
from fastopt.optim import _compiled


def _guards(words, flags, nt, which=None, per=1):
    """per guards per tensor over cells of words (int64, two per tensor) and
    flags (int32, one per tensor), all holding now; which (k, part): that
    tensor's last guard expects another value there ("w0", "w1" or
    "flags")."""
    gs = []
    for k in range(nt):
        gk = []
        for _ in range(per):
            gk.append(cs.Guard(words.ctypes.data + 16 * k, words.ctypes.data + 16 * k + 8,
                               int(words[2 * k]), int(words[2 * k + 1]),
                               flags.ctypes.data + 4 * k, int(flags[k]) & 0x5, 0))
        g = gk[-1]
        if which is not None and which[0] == k:
            if which[1] == "w0":
                g.want0 = int(words[2 * k]) + 8
            elif which[1] == "w1":
                g.want1 = int(words[2 * k + 1]) ^ 1
            else:
                g.mask = 0x2             # a bit the flags word does not have
        gs.append(gk)
    return gs


@pytest.fixture(scope="module")
def pooled(lib, tmp_path_factory):
    return cs.pooled_copy(lib, str(tmp_path_factory.mktemp("fo_step_pooled")))


@pytest.mark.parametrize("per", [1, 3])
@pytest.mark.parametrize("opts", [
    {}, {"max_norm": 1.0}, {"grad_scale": 1024.0, "check_finite": True},
    {"given_norm": 3.0, "max_norm": 1.0}])
def test_guards(pooled, opts, per):
    """fo_step_guard: holding guards change no bit of the step; one that
    fails anywhere (a tensor of pass 1's last block, one with no element,
    either word, the flags, the first or the last guard of a tensor)
    returns FO_ESTALE with nothing written, for every thread count, whether
    pass 1 runs (where it checks them; on the pool's threads from 2 on, as
    the counters show) or not."""
    rng = np.random.default_rng(21)
    sizes = [5, 0, *BIG, 1025, 3]
    case = _case(rng, ["adamw_torch", "sgd_torch"], sizes, scale=1024.0)
    nt = len(sizes)
    words = rng.integers(1, 2**40, 2 * nt).astype(np.int64)
    flags = np.full(nt, 0x5, np.int32)
    want = ([x.copy() for x in case[0]], [tuple(s.copy() for s in st) for st in case[2]])
    rc, _ = cs.step(pooled, want[0], case[1], want[1], case[3], case[4], **opts)
    assert rc == 0                      # unguarded: checked against the reference above
    pass1 = "given_norm" not in opts       # the harness measures by default
    for n in THREADS:
        xc = [x.copy() for x in case[0]]
        sc = [tuple(s.copy() for s in st) for st in case[2]]
        rc, res = cs.step(pooled, xc, case[1], sc, case[3], case[4], n_threads=n,
                          guards=_guards(words, flags, nt, per=per), **opts)
        assert rc == 0 and res.applied
        for a, b in zip(xc + [s for st in sc for s in st],
                        want[0] + [s for st in want[1] for s in st]):
            _same(a, b)
        for k in (0, 1, 2, nt - 1):
            for part in ("w0", "w1", "flags"):
                xc = [x.copy() for x in case[0]]
                sc = [tuple(s.copy() for s in st) for st in case[2]]
                before = cs.parallel_calls(pooled)
                rc, res = cs.step(pooled, xc, case[1], sc, case[3], case[4], n_threads=n,
                                  guards=_guards(words, flags, nt, (k, part), per),
                                  **opts)
                assert rc == -3 and not res.applied, (n, k, part)
                # pass 1 on the pool (nothing else runs when a guard fails)
                assert cs.parallel_calls(pooled) - before == (n > 1 and pass1)
                for a, b in zip(xc, case[0]):
                    _same(a, b)
                for a, b in zip(sc, case[2]):
                    for s, r in zip(a, b):
                        _same(s, r)


def test_guards_of_clip_grads_and_bad_count(lib):
    """fo_clip_grads honours the guards (gradient k's as tensor k's); a
    negative guards_per_tensor, or guards with 0 per tensor, is FO_EINVAL."""
    rng = np.random.default_rng(22)
    gs = [rng.standard_normal(n).astype(np.float32) for n in (7, BIG[0], 0)]
    words = np.arange(1, 7, dtype=np.int64)
    flags = np.full(3, 0x5, np.int32)
    for k in range(3):
        for with_norm in ({"max_norm": 0.5}, {"clip_value": 0.01}):
            got = [g.copy() for g in gs]
            rc, res = cs.clip_grads(lib, got, n_threads=2,
                                    guards=_guards(words, flags, 3, (k, "flags")),
                                    **with_norm)
            assert rc == -3 and not res.applied
            for a, b in zip(got, gs):
                _same(a, b)
    o = cs.opts_struct(max_norm=1.0, guards=_guards(words, flags, 3))
    for per in (-1, 0):
        o.guards_per_tensor = per
        case = _case(rng, ["sgd_torch"], [4, 5])
        x0 = [x.copy() for x in case[0]]
        rc, _ = _step_raw(lib, case, o)
        assert rc == -2
        for a, b in zip(case[0], x0):
            _same(a, b)


def _runs_again(opt, twin, gs, plan, xs, ys):
    """A step after the change is undone runs on the same plan, not stale,
    with the bits of the twin that always takes the full route."""
    _step_both(opt, twin, gs, **WARM)
    assert opt._plan_all[1] is plan and not plan.stale
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("what", ["param", "state"])
def test_readonly_after_prepared_steps_writes_nothing(what, threads):
    """A written array made read-only fails its guard in fo_step (on the
    pool's threads with 2): nothing written, the full route raises, twice;
    made writeable again, the same plan runs again (its guards renewed)."""
    opt, twin, xs, ys = _pair(n_threads=threads)
    rng = np.random.default_rng(5)
    gs = _warm(opt, twin, rng, xs)
    plan = opt._plan_all[1]
    before = _snapshot(opt, xs)
    arr = xs[3] if what == "param" else opt.state["exp_avg_sq"][3]
    arr.flags.writeable = False
    for _ in range(2):
        with pytest.raises(ValueError):
            opt.step(gs, **WARM)
        assert plan.stale
    arr.flags.writeable = True
    assert _snapshot(opt, xs) == before
    _step_both(opt, twin, gs, **WARM)       # prepared again: the same plan
    assert opt._plan_all[1] is plan and not plan.stale
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(x, y)


def _remembered(opt, gs):
    """opt.step's remembered call alone (None: it declined)."""
    return _compiled.remembered_step(opt, gs, WARM["grad_scale"],
                                     WARM["skip_if_nonfinite"], WARM["max_grad_norm"], 2.0,
                                     "torch")


@pytest.mark.parametrize("threads", [1, 2])
def test_dtype_object_replaced_by_an_equal_one(threads):
    """A parameter's dtype object replaced by another of the same element
    type (here one with metadata) fails the plan's guard (it compares the
    object): the remembered call declines with nothing written and the plan
    stale; yet the plan's own test passes, so the step runs on the same
    plan, its guards renewed, with the bits of the full route."""
    opt, twin, xs, ys = _pair(n_threads=threads)
    rng = np.random.default_rng(6)
    gs = _warm(opt, twin, rng, xs)
    plan = opt._plan_all[1]
    xs[2].dtype = np.dtype(np.float32, metadata={"units": "m"})
    before = _snapshot(opt, xs)
    assert _remembered(opt, gs) is None and plan.stale
    assert _snapshot(opt, xs) == before
    for _ in range(2):
        _step_both(opt, twin, gs, **WARM)
        assert opt._plan_all[1] is plan and not plan.stale
    for x, y in zip(xs, ys):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("what", ["param", "state"])
def test_retyped_after_prepared_steps_writes_nothing(what):
    """A written array viewed as another type of the same size (float32 as
    int32) fails its guard and the plan's own test: the step raises with
    nothing written, and runs on the same plan once the type is back."""
    opt, twin, xs, ys = _pair()
    rng = np.random.default_rng(7)
    gs = _warm(opt, twin, rng, xs)
    plan = opt._plan_all[1]
    arr = xs[1] if what == "param" else opt.state["exp_avg"][1]
    before = _snapshot(opt, xs)
    arr.dtype = np.int32
    with pytest.raises((TypeError, ValueError)):
        opt.step(gs, **WARM)
    assert plan.stale
    arr.dtype = np.float32
    assert _snapshot(opt, xs) == before
    _runs_again(opt, twin, gs, plan, xs, ys)


def test_guards_with_fewer_states_in_one_group():
    """AdamW with amsgrad in one group only: the other group's tensors have
    one state fewer (an empty guard in the plan). A read-only max state, or
    a read-only parameter of the other group, is caught with nothing
    written."""
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal(n).astype(np.float32) for n in SIZES]
    ys = [x.copy() for x in xs]

    def make(ps):
        return fo.AdamW([{"params": ps[:2], "amsgrad": True}, {"params": ps[2:]}], lr=0.01)

    opt, twin = make(xs), make(ys)
    gs = _warm(opt, twin, rng, xs)
    plan = opt._plan_all[1]
    for arr in (opt.state["max_exp_avg_sq"][1], xs[4]):
        before = _snapshot(opt, xs)
        arr.flags.writeable = False
        with pytest.raises(ValueError):
            opt.step(gs, **WARM)
        arr.flags.writeable = True
        assert _snapshot(opt, xs) == before
    _runs_again(opt, twin, gs, plan, xs, ys)


def test_benchmark_driver_checks_the_written_arrays():
    """StepPlan._drive (benchmarks: fo_step with no guards) refuses a plan
    whose parameter was made read-only since its last step, writing
    nothing."""
    opt, twin, xs, _ = _pair()
    gs = _warm(opt, twin, np.random.default_rng(9), xs)
    plan = opt._plan_all[1]
    plan._drive(1, tuple(gs))
    xs[0].flags.writeable = False
    before = _snapshot(opt, xs)
    with pytest.raises(ValueError):
        plan._drive(1, tuple(gs))
    assert _snapshot(opt, xs) == before
