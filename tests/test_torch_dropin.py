"""fastopt.torch.SGD/Adagrad/Adam/AdamW as drop-ins for torch.optim's.

Same signatures and defaults, same state_dict shape (checkpoints move both
ways), torch's results, clear errors for what fastopt cannot honour, and a
step that either applies to every group or changes nothing.
"""
import inspect
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_helpers import EXTRAS, same, snapshot  # noqa: E402

import fastopt.torch as ft  # noqa: E402  (after the importorskip)

NAMES = ["SGD", "Adagrad", "Adam", "AdamW"]
KW = {"SGD": dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
      "Adagrad": dict(lr=0.1, lr_decay=0.01, weight_decay=0.01,
                      initial_accumulator_value=0.1),
      "Adam": dict(lr=0.01, weight_decay=0.01, amsgrad=True),
      "AdamW": dict(lr=0.01, amsgrad=True)}


def params(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 3), (5,), (2, 3, 2), ()]
    return [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype)) for s in shapes]


def groups(ps):
    return [{"params": ps[:2]}, {"params": ps[2:], "lr": 0.02}]


def set_grads(ps, k):
    g = torch.Generator().manual_seed(1000 + k)
    for p in ps:
        p.grad = p.detach() * 0.5 + torch.randn(p.shape, generator=g, dtype=p.dtype)


def train(opt, ps, steps, start=0):
    for k in range(start, start + steps):
        set_grads(ps, k)
        opt.step()


# ---- the API -----------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_signature_is_torchs(name):
    """Every torch argument, same kind, same default; fastopt adds n_threads,
    flat and the mixed-precision options (keyword-only, after torch's)."""
    theirs = inspect.signature(getattr(torch.optim, name).__init__).parameters
    ours = dict(inspect.signature(getattr(ft, name).__init__).parameters)
    assert tuple(ours)[-len(EXTRAS):] == EXTRAS
    extras = [ours.pop(k) for k in EXTRAS]
    assert all(e.kind is inspect.Parameter.KEYWORD_ONLY for e in extras)
    assert [e.default for e in extras[1:]] == [False, False, None, "auto", 0]
    assert list(ours) == list(theirs)
    for k, p in theirs.items():
        assert ours[k].kind == p.kind, k
        assert ours[k].default == p.default, k


@pytest.mark.parametrize("name", NAMES)
def test_defaults_and_param_groups_match_torch(name):
    a, b = params(), params()
    oa = getattr(torch.optim, name)(groups(a))
    ob = getattr(ft, name)(groups(b))
    assert oa.defaults == ob.defaults
    for ga, gb in zip(oa.param_groups, ob.param_groups):
        assert {k: v for k, v in ga.items() if k != "params"} == \
               {k: v for k, v in gb.items() if k != "params"}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_state_dict_has_torchs_shape(name, dtype):
    a, b = params(dtype), params(dtype)
    oa = getattr(torch.optim, name)(groups(a), **KW[name])
    ob = getattr(ft, name)(groups(b), **KW[name])
    train(oa, a, 3)
    train(ob, b, 3)
    sa, sb = oa.state_dict(), ob.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for i in sa["state"]:
        assert sa["state"][i].keys() == sb["state"][i].keys()
        for k, va in sa["state"][i].items():
            vb = sb["state"][i][k]
            assert (va.dtype, va.shape) == (vb.dtype, vb.shape), (i, k)
            if k == "step":
                assert torch.equal(va, vb)


def _close(a, b, dtype):
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == torch.float64 else dict(rtol=1e-5,
                                                                          atol=1e-6)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.detach().numpy(), y.detach().numpy(), **tol)


@pytest.mark.parametrize("direction", ["torch->fastopt", "fastopt->torch"])
@pytest.mark.parametrize("name", NAMES)
def test_checkpoints_move_both_ways(name, direction):
    """Train 4 steps with one, save, resume with the other: as torch throughout."""
    ref = params()
    oref = getattr(torch.optim, name)(groups(ref), **KW[name])
    train(oref, ref, 8)
    first, second = ((torch.optim, ft) if direction == "torch->fastopt"
                     else (ft, torch.optim))
    a = params()
    oa = getattr(first, name)(groups(a), **KW[name])
    train(oa, a, 4)
    buf = io.BytesIO()
    torch.save(oa.state_dict(), buf)
    buf.seek(0)
    b = [torch.nn.Parameter(p.detach().clone()) for p in a]
    ob = getattr(second, name)(groups(b), **KW[name])
    ob.load_state_dict(torch.load(buf))
    train(ob, b, 4, start=4)
    _close(ref, b, torch.float64)


def test_lr_scheduler_and_closure():
    a, b = params(), params()
    oa, ob = torch.optim.AdamW(groups(a), lr=0.01), ft.AdamW(groups(b), lr=0.01)
    sa = torch.optim.lr_scheduler.StepLR(oa, step_size=3, gamma=0.5)
    sb = torch.optim.lr_scheduler.StepLR(ob, step_size=3, gamma=0.5)
    for k in range(10):
        for ps, opt, sched in ((a, oa, sa), (b, ob, sb)):
            def closure(ps=ps, k=k):
                set_grads(ps, k)
                return torch.tensor(float(k))
            assert opt.step(closure).item() == k
            sched.step()
    assert ob.param_groups[1]["lr"] == pytest.approx(0.02 / 8)
    _close(a, b, torch.float64)


def test_onnx_adapters_keep_their_names():
    assert ft.Adagrad is not ft.OnnxAdagrad and ft.Adam is not ft.OnnxAdam
    ps = params()
    set_grads(ps, 0)
    ft.OnnxAdam(ps, lr=0.1, alpha=0.8).step()


# ---- what torch does that is easy to get wrong -----------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_maximize_does_not_write_the_gradient(name):
    a, b = params(), params()
    oa = getattr(torch.optim, name)(a, maximize=True, **KW[name])
    ob = getattr(ft, name)(b, maximize=True, **KW[name])
    for k in range(3):
        set_grads(a, k)
        set_grads(b, k)
        before = [p.grad.clone() for p in b]
        oa.step()
        ob.step()
        assert all(torch.equal(p.grad, g) for p, g in zip(b, before))
    _close(a, b, torch.float64)


@pytest.mark.parametrize("name", NAMES)
def test_parameter_without_gradient_keeps_its_state_and_count(name):
    a, b = params(), params()
    oa = getattr(torch.optim, name)(groups(a), **KW[name])
    ob = getattr(ft, name)(groups(b), **KW[name])
    for k in range(6):
        for ps, opt in ((a, oa), (b, ob)):
            set_grads(ps, k)
            if k < 3:
                ps[1].grad = None
            opt.step()
    _close(a, b, torch.float64)
    if name != "SGD":
        assert ob.state[b[1]]["step"].item() == 3 and ob.state[b[0]]["step"].item() == 6


def test_adagrad_later_groups_start_from_the_default_accumulator():
    """torch fills the 'sum' of a group added later with the optimizer's
    default initial_accumulator_value (not the group's)."""
    a, b = params(), params()
    oa = torch.optim.Adagrad(a[:2], lr=0.1, initial_accumulator_value=0.5)
    ob = ft.Adagrad(b[:2], lr=0.1, initial_accumulator_value=0.5)
    oa.add_param_group({"params": a[2:], "initial_accumulator_value": 2.0})
    ob.add_param_group({"params": b[2:], "initial_accumulator_value": 2.0})
    assert len(ob.state) == 2     # built with the optimizer, as torch's
    train(oa, a, 3)
    train(ob, b, 3)
    _close(a, b, torch.float64)


def test_adagrad_share_memory():
    a, b = params(), params()
    oa, ob = torch.optim.Adagrad(a, lr=0.1), ft.Adagrad(b, lr=0.1)
    train(oa, a, 2)
    train(ob, b, 2)
    oa.share_memory()
    ob.share_memory()
    assert all(ob.state[p]["sum"].is_shared() for p in b)
    train(oa, a, 2, start=2)
    train(ob, b, 2, start=2)
    _close(a, b, torch.float64)


@pytest.mark.parametrize("flat", [False, True])
def test_a_parameter_listed_twice_is_refused_when_given(flat):
    """torch warns of a tensor listed twice in a group and steps it twice;
    fastopt could never step it, so the constructor and add_param_group
    refuse it, adding no group."""
    a, b = params(), params()
    with pytest.raises(ValueError, match=r"fastopt.torch.SGD: param group 0 lists one "
                       r"tensor twice, as params\[0\] and params\[2\]"):
        ft.SGD([a[0], a[1], a[0]], lr=0.1, flat=flat)
    opt = ft.SGD(a, lr=0.1, flat=flat)
    with pytest.raises(ValueError, match=r"param group 1 lists one tensor twice"):
        opt.add_param_group({"params": iter([b[1], b[1]])})
    assert len(opt.param_groups) == 1
    opt.add_param_group({"params": iter(b)})
    assert all(x is y for x, y in zip(opt.param_groups[1]["params"], b, strict=True))
    with pytest.raises(TypeError, match="optimizer can only optimize Tensors"):
        ft.SGD([1, 1], lr=0.1, flat=flat)       # torch's own check, not the twice one


def test_amsgrad_turned_on_later_starts_from_zeros():
    ps = params()
    opt = ft.Adam(ps, lr=0.01)
    train(opt, ps, 2)
    opt.param_groups[0]["amsgrad"] = True
    train(opt, ps, 1, start=2)
    assert all(opt.state[p]["max_exp_avg_sq"].shape == p.shape for p in ps)


def test_last_step_reports_the_norm_and_clips_as_torch():
    a, b = params(), params()
    oa, ob = torch.optim.SGD(a, lr=0.1), ft.SGD(b, lr=0.1)
    set_grads(a, 0)
    set_grads(b, 0)
    norm = torch.nn.utils.clip_grad_norm_(a, 0.5)
    oa.step()
    ob.step(max_grad_norm=0.5)
    assert ob.last_step.norm == pytest.approx(norm.item(), rel=1e-14)
    _close(a, b, torch.float64)
    set_grads(b, 1)
    b[0].grad[0, 0] = float("nan")
    before = snapshot(ob, b)
    ob.step(skip_if_nonfinite=True)
    assert not ob.last_step.applied
    same(before, snapshot(ob, b))


# ---- refusals ---------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["foreach", "fused", "capturable", "differentiable"])
@pytest.mark.parametrize("name", NAMES)
def test_flags_fastopt_cannot_honour_are_refused(name, flag):
    if flag not in inspect.signature(getattr(ft, name).__init__).parameters:
        pytest.skip(f"torch.optim.{name} has no {flag}")
    with pytest.raises(ValueError, match=f"{flag}=True is not supported"):
        getattr(ft, name)(params(), **{flag: True})
    ps = params()
    opt = getattr(ft, name)(groups(ps))
    opt.param_groups[1][flag] = True
    set_grads(ps, 0)
    before = snapshot(opt, ps)
    with pytest.raises(ValueError, match=rf"{flag}=True .*\(in param_groups\[1\]\)"):
        opt.step()
    same(before, snapshot(opt, ps))


@pytest.mark.parametrize("name", NAMES)
def test_bad_parameters_and_gradients_are_refused(name):
    cases = [
        (torch.zeros(3, dtype=torch.complex64), None, TypeError, "complex"),
        (torch.zeros(3, dtype=torch.float8_e5m2), None, TypeError, "dtype torch.float8_e5m2"),
        (torch.zeros(3), torch.zeros(3, dtype=torch.float64), TypeError,
         "gradient of .* has dtype torch.float64"),
        (torch.zeros(3), torch.zeros(3).to_sparse(), TypeError, "sparse gradient"),
    ]   # (torch itself refuses a gradient of another shape)
    for p, g, exc, msg in cases:
        ok = params(torch.float32)
        bad = torch.nn.Parameter(p)
        opt = getattr(ft, name)([{"params": ok}, {"params": [bad]}])
        set_grads(ok, 0)
        if g is not None and g.dtype != p.dtype:
            bad.grad_dtype = None    # torch 2.13 allows it so
        bad.grad = torch.ones_like(p) if g is None else g
        before = snapshot(opt, ok)
        with pytest.raises(exc, match=msg):
            opt.step()
        same(before, snapshot(opt, ok))


BETAS = {"mixed float, tensor": lambda: (0.9, torch.tensor(0.99)),
         "mixed tensor, float": lambda: (torch.tensor(0.9), 0.99),
         "integers": lambda: (0, 0),
         "an integer and a float": lambda: (0, 0.99),
         "both tensors": lambda: (torch.tensor(0.9), torch.tensor(0.99)),
         "a list of floats": lambda: [0.9, 0.99],
         "numpy float64": lambda: (np.float64(0.9), np.float64(0.99))}


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
@pytest.mark.parametrize("betas", list(BETAS))
def test_betas_accepted_or_refused_as_torch_does(name, betas):
    """Mixed float/tensor pairs and integers are a ValueError in torch.optim's
    constructor; both floats or both one-element tensors are accepted."""
    def build(cls):
        try:
            cls(params(), betas=BETAS[betas]())
        except ValueError as exc:
            return exc
        return None
    theirs, ours = build(getattr(torch.optim, name)), build(getattr(ft, name))
    assert (theirs is None) == (ours is None), (theirs, ours)
    if ours is not None:
        assert str(ours).startswith(f"fastopt.torch.{name}: betas must be either both "
                                    f"floats or both Tensors")


def test_bad_hyperparameters_are_refused():
    ps = params()
    with pytest.raises(ValueError, match="lr must be a finite number >= 0"):
        ft.SGD(ps, lr=-1.0)
    with pytest.raises(ValueError, match="nesterov needs a momentum"):
        ft.SGD(ps, nesterov=True)
    with pytest.raises(ValueError, match=r"betas\[1\] must be < 1.0"):
        ft.Adam(ps, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="one-element tensor"):
        ft.AdamW(ps, lr=torch.tensor([1e-3, 1e-3]))
    opt = ft.AdamW(ps, lr=torch.tensor(1e-3))      # a one-element tensor is fine
    set_grads(ps, 0)
    opt.step()
    opt.param_groups[0]["eps"] = -1.0
    with pytest.raises(ValueError, match=r"eps must be >= 0.0, got -1.0 "
                                         r"\(in param_groups\[0\]\)"):
        opt.step()


# ---- one step for all groups: regressions ---------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_wrong_state_in_a_later_group_changes_nothing(name):
    """torch's load_state_dict does not check shapes: a state of the wrong
    shape in group 1 must make step() raise before group 0 is written (no
    byte of any parameter, state or step count changes)."""
    ps = params()
    opt = getattr(ft, name)(groups(ps), **KW[name])
    train(opt, ps, 2)
    sd = opt.state_dict()
    key = {"SGD": "momentum_buffer", "Adagrad": "sum"}.get(name, "exp_avg")
    sd["state"][3][key] = torch.zeros(7, dtype=torch.float64)  # ps[3] is in group 1
    opt.load_state_dict(sd)
    set_grads(ps, 2)
    before = snapshot(opt, ps)
    with pytest.raises(ValueError, match=rf"state\['{key}'\] of param_groups\[1\]"
                                         rf"\['params'\]\[1\] has shape \(7,\)"):
        opt.step()
    same(before, snapshot(opt, ps))


def test_wrong_state_in_a_later_group_changes_nothing_onnx():
    ps = params()
    opt = ft.OnnxMomentum(groups(ps), lr=0.1)
    train(opt, ps, 2)
    opt.state[ps[3]]["momentum_buffer"] = torch.zeros(7, dtype=torch.float64)
    set_grads(ps, 2)
    before = snapshot(opt, ps)
    with pytest.raises(ValueError, match="has shape"):
        opt.step()
    same(before, snapshot(opt, ps))


@pytest.mark.parametrize("name", NAMES + ["OnnxMomentum"])
def test_gradient_aliasing_an_earlier_groups_parameter_is_read_first(name):
    """A gradient of group 1 that is a parameter of group 0: fastopt reads it
    as it was when step() was called, i.e. torch.optim's result with that
    gradient's value (torch.optim itself, group after group, would read
    the parameter group 0 just updated)."""
    kw = KW.get(name, dict(lr=0.05, alpha=0.9))
    ref = params()
    oref = getattr(torch.optim, name if name in NAMES else "SGD")(
        groups(ref), **(KW[name] if name in NAMES else dict(lr=0.05, momentum=0.9)))
    b = params()
    ob = getattr(ft, name)(groups(b), **kw)
    for k in range(3):
        set_grads(ref, k)
        set_grads(b, k)
        ref[2].grad = torch.zeros_like(ref[2])
        b[2].grad = torch.zeros_like(b[2])
        ref[3].grad = ref[1].detach()[0].clone()   # the value at call time
        b[3].grad = b[1].detach()[0]               # a view of group 0's parameter
        oref.step()
        ob.step()
    _close(ref, b, torch.float64)


@pytest.mark.parametrize("name", NAMES)
def test_works_under_grad_scaler(name):
    """torch.amp.GradScaler unscales, skips the step with an inf and calls
    step(): the same with either optimizer; and fastopt's own fused
    step(grad_scale=, skip_if_nonfinite=True) with the scaler's scales gives
    the same result without the scaler's passes."""
    runs, scales = [], []
    for make in (getattr(torch.optim, name), getattr(ft, name), None):
        ps = params(torch.float32)
        opt = (make or getattr(ft, name))(groups(ps), **KW[name])
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
        for k in range(8):
            if make is not None:
                scaler.scale(torch.ones(()))       # the scaler starts lazily
                scales.append(scaler.get_scale())
            scale = scales[k] if make is None else scales[-1]
            set_grads(ps, k)
            for p in ps:
                p.grad *= scale                    # as backward of a scaled loss
            if k == 4:
                ps[0].grad[0, 0] = float("inf")
            if make is None:
                opt.step(grad_scale=scale, skip_if_nonfinite=True)
                assert opt.last_step.applied == (k != 4)
            else:
                scaler.step(opt)
                scaler.update()
        runs.append(ps)
    assert scales[:8] == scales[8:] and len(set(scales)) == 2   # grew, then halved
    _close(runs[0], runs[1], torch.float32)
    _close(runs[0], runs[2], torch.float32)


@pytest.mark.parametrize("name", NAMES)
def test_tensors_given_new_memory_between_steps(name):
    """fastopt keeps NumPy views of parameters, states and step counts from
    one step to the next; `.data = ...` on any of them is seen."""
    a, b = params(), params()
    oa = getattr(torch.optim, name)(groups(a), **KW[name])
    ob = getattr(ft, name)(groups(b), **KW[name])
    for k in range(6):
        if k == 3:
            for ps, opt in ((a, oa), (b, ob)):
                ps[0].data = ps[0].data.clone().t().contiguous().t()  # new memory
                st = opt.state[ps[1]]
                for key, v in st.items():
                    st[key].data = v.data.clone()
        for ps, opt in ((a, oa), (b, ob)):
            set_grads(ps, k)
            opt.step()
    _close(a, b, torch.float64)
    key = {"SGD": "momentum_buffer", "Adagrad": "sum"}.get(name, "exp_avg")
    ob.state[b[2]][key].data = torch.zeros(7, dtype=torch.float64)
    set_grads(b, 6)
    before = snapshot(ob, b)
    with pytest.raises(ValueError, match=r"has shape \(7,\)"):
        ob.step()
    same(before, snapshot(ob, b))


@pytest.mark.parametrize("name", NAMES + ["OnnxAdam"])
def test_pickle_and_deepcopy(name):
    import copy
    import pickle
    ps = params()
    opt = getattr(ft, name)(groups(ps), n_threads=1, **KW.get(name, {"lr": 0.01}))
    train(opt, ps, 2)
    for clone in (pickle.loads(pickle.dumps(opt)), copy.deepcopy(opt)):
        assert clone.n_threads == 1
        qs = [p for g in clone.param_groups for p in g["params"]]
        train(clone, qs, 2, start=2)
    train(opt, ps, 2, start=2)
    _close(ps, qs, torch.float64)
