"""fastopt.torch's prepared step (fastopt/torch/_prep.py).

After a full step, the next steps re-check only what torch lets change
between steps. Each test runs two optimizers side by side on equal copies:
``a`` as users do (the prepared step after the first), ``b`` always on the
full route, and asserts that ``a`` took the prepared step where it should
and that both wrote the same bytes (or raised the same error, ``a`` then
unchanged), including after every edit torch allows between steps.
"""
import math

import pytest

torch = pytest.importorskip("torch")
from torch_helpers import count_calls, same, snapshot  # noqa: E402

import fastopt.torch as ft  # noqa: E402
import fastopt.torch._prep as tp  # noqa: E402  (after the importorskip)

KW = {"SGD": dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
      "SGD0": dict(lr=0.05),                      # no momentum: no state
      "Adagrad": dict(lr=0.1, lr_decay=0.01, weight_decay=0.01),
      "Adam": dict(lr=0.01, weight_decay=0.01, amsgrad=True),
      "AdamW": dict(lr=0.01, maximize=True),
      "OnnxMomentum": dict(lr=0.05, norm_coefficient=0.01),
      "OnnxAdagrad": dict(lr=0.1, decay_factor=0.01),
      "OnnxAdam": dict(lr=0.01, norm_coefficient=0.01)}
SHAPES = [(4, 3), (5,), (2, 3, 2), (), (0, 3)]


@pytest.fixture
def ran(monkeypatch):
    """The number of steps the prepared plan applied or skipped (not declined)."""
    return count_calls(monkeypatch, tp.Prepared, "run")


def make(name, dtype=torch.float64, shapes=SHAPES):
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype)) for s in shapes]
    cls = getattr(ft, "SGD" if name == "SGD0" else name)
    return ps, cls([{"params": ps[:2]}, {"params": ps[2:], "lr": 0.02}], **KW[name])


class Pair:
    """Optimizer a (prepared) and b (full route only) on equal parameters."""

    def __init__(self, name, dtype=torch.float64, shapes=SHAPES):
        self.pa, self.a = make(name, dtype, shapes)
        self.pb, self.b = make(name, dtype, shapes)
        self.k = 0

    def grads(self, nonfinite=False):
        g = torch.Generator().manual_seed(1000 + self.k)
        self.k += 1
        for pa, pb in zip(self.pa, self.pb):
            v = pa.detach() * 0.5 + torch.randn(pa.shape, generator=g, dtype=pa.dtype)
            if nonfinite and v.dim() == 1:
                v[0] = math.inf
            pa.grad, pb.grad = v.clone(), v.clone()

    def step(self, **kw):
        """Both steps; the same outcome (result or error type) asserted."""
        before = snapshot(self.a, self.pa)
        try:
            self.a.step(**kw)
        except (TypeError, ValueError) as exc:
            same(snapshot(self.a, self.pa), before)      # nothing written
            with pytest.raises(type(exc)):
                full_step(self.b, **kw)
            return exc
        full_step(self.b, **kw)
        same(snapshot(self.a, self.pa), snapshot(self.b, self.pb))
        assert len(self.a.state) == len(self.b.state)   # no entry added
        assert self.a.last_step == self.b.last_step or (
            math.isnan(self.a.last_step.norm) and math.isnan(self.b.last_step.norm))
        return None

    def run(self, steps):
        """steps x (new gradients, both step, the same outcome, no error)."""
        for _ in range(steps):
            self.grads()
            assert self.step() is None
        return self

    def both(self, edit):
        edit(self.a, self.pa)
        edit(self.b, self.pb)


def full_step(opt, **kw):
    """opt.step on the full route (no prepared plan built or used)."""
    opt._prep = None
    build = tp.build
    tp.build = lambda *args: None
    try:
        opt.step(**kw)
    finally:
        tp.build = build


# ---- the prepared step is taken, and writes what the full route writes ------------

@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(KW))
def test_prepared_steps_equal_the_full_route(name, dtype, ran):
    s = Pair(name, dtype)
    options = [{}, {}, {"grad_scale": 4.0}, {"max_grad_norm": 0.5},
               {"max_grad_norm": 2.0, "norm_type": math.inf, "clip_convention": "optax"},
               {"skip_if_nonfinite": True}, {}]
    for kw in options:
        s.grads()
        assert s.step(**kw) is None
    assert ran[0] == len(options) - 1          # every step after the first
    s.grads(nonfinite=True)                    # skipped: nothing written, no count
    before = snapshot(s.a, s.pa)
    s.step(skip_if_nonfinite=True)
    assert not s.a.last_step.applied and ran[0] == len(options)
    same(snapshot(s.a, s.pa), before)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_prepared_step_same_bits_for_every_thread_count(n_threads, ran):
    s = Pair("AdamW", torch.float32)
    s.a.n_threads = n_threads
    for _ in range(4):
        s.grads()
        s.step(max_grad_norm=1.0)
    assert ran[0] == 3


def test_a_rejected_gradient_keeps_the_plan_a_new_structure_drops_it(ran):
    s = Pair("AdamW").run(2)
    plan = s.a._prep
    s.grads()
    s.both(EDITS["gradient wrong dtype"])
    assert isinstance(s.step(), TypeError)
    assert s.a._prep is plan                    # the next step may be fine
    s.grads()
    s.both(EDITS["gradient not contiguous"])    # declined, the full route runs it
    assert s.step() is None and s.a._prep is plan
    s.grads()
    s.step()
    assert ran[0] == 2
    s.both(lambda o, ps: o.add_param_group({"params": [torch.nn.Parameter(
        torch.ones(3, dtype=torch.float64))]}))
    s.grads()
    s.step()
    assert s.a._prep is not plan and ran[0] == 2


# ---- every edit torch allows between steps ---------------------------------------

def _state(o, ps, i=0):
    return o.state[ps[i]]


def _counts(o, ps, value):
    for p in ps:
        o.state[p]["step"].fill_(value)


def _swap_states(o):
    """opt.state with the same state dicts in the same order, the first two
    under each other's keys."""
    items = list(o.state.items())
    (k0, v0), (k1, v1) = items[:2]
    o.state.clear()
    o.state.update([(k1, v0), (k0, v1)] + items[2:])


def _no_grad(fn):
    with torch.no_grad():
        fn()


def _set_grad(i, fn):
    def edit(o, ps):
        ps[i].grad_dtype = None     # torch 2.13 then takes a gradient of any dtype
        ps[i].grad = fn(ps[i].grad, ps)
    return edit


EDITS = {
    "param new memory": lambda o, ps: setattr(ps[0], "data", ps[0].data * 1.0),
    "param reshaped in place": lambda o, ps: setattr(ps[0], "data", ps[0].data.view(12)),
    "param re-typed in place": lambda o, ps: setattr(     # same address and shape
        ps[0], "data", ps[0].data.view(torch.complex64)),
    "param transposed in place": lambda o, ps: _no_grad(ps[0].t_),
    "param replaced by another on its memory": lambda o, ps: o.param_groups[0][
        "params"].__setitem__(0, torch.nn.Parameter(ps[0].data)),
    "param expanded in place": lambda o, ps: setattr(     # same address and shape
        ps[0], "data", ps[0].data[:1].expand(4, 3)),
    "state expanded in place": lambda o, ps: setattr(
        _state(o, ps)["exp_avg"], "data", _state(o, ps)["exp_avg"].data[:1].expand(4, 3)),
    "late param reshaped in place": lambda o, ps: setattr(ps[0], "data",
                                                          ps[0].data.view(12)),
    "late param re-typed in place": lambda o, ps: setattr(
        ps[0], "data", ps[0].data.view(torch.complex64)),
    "state replaced": lambda o, ps: _state(o, ps).update(
        exp_avg=torch.full((4, 3), 0.5, dtype=torch.float64)),
    "state dict replaced": lambda o, ps: o.state.__setitem__(
        ps[0], {k: v.clone() for k, v in _state(o, ps).items()}),
    "state new memory": lambda o, ps: setattr(
        _state(o, ps)["exp_avg_sq"], "data", _state(o, ps)["exp_avg_sq"] * 2.0),
    "state resized in place": lambda o, ps: _state(o, ps)["exp_avg"].resize_(2),
    "state removed": lambda o, ps: _state(o, ps, 2).pop("exp_avg"),
    "one count edited in place": lambda o, ps: _state(o, ps, 1)["step"].fill_(10),
    "counts edited in place": lambda o, ps: _counts(o, ps, 10),
    "count replaced": lambda o, ps: _state(o, ps, 1).update(step=torch.tensor(7.0)),
    "count new memory": lambda o, ps: setattr(_state(o, ps, 1)["step"], "data",
                                              torch.tensor(10.0)),
    "counts float64": lambda o, ps: [o.state[p].update(step=torch.tensor(
        float(o.state[p]["step"]), dtype=torch.float64)) for p in ps],
    "count an int": lambda o, ps: _state(o, ps, 1).update(step=5),
    "counts NaN": lambda o, ps: _counts(o, ps, math.nan),
    "counts not whole": lambda o, ps: _counts(o, ps, 2.5),
    "counts negative": lambda o, ps: _counts(o, ps, -1.0),
    "counts 2**53": lambda o, ps: _counts(o, ps, 2.0 ** 53),
    "count negative int": lambda o, ps: _state(o, ps, 1).update(step=-1),
    "all state lost": lambda o, ps: o.state.clear(),
    "state entries swapped": lambda o, ps: _swap_states(o),
    "state a UserDict": lambda o, ps: setattr(o, "state", __import__(
        "collections").UserDict(o.state)),
    "state_dict round trip": lambda o, ps: o.load_state_dict(o.state_dict()),
    "lr edited": lambda o, ps: o.param_groups[1].update(lr=0.5),
    "betas edited to bad": lambda o, ps: o.param_groups[1].update(betas=(1.5, 0.9)),
    "amsgrad turned on": lambda o, ps: o.param_groups[0].update(amsgrad=True),
    "params list appended": lambda o, ps: o.param_groups[1]["params"].append(
        torch.nn.Parameter(torch.ones(2, dtype=torch.float64))),
    "params list reordered": lambda o, ps: o.param_groups[0]["params"].reverse(),
    "group list replaced": lambda o, ps: setattr(o, "param_groups",
                                                 list(o.param_groups)),
    "group appended by hand": lambda o, ps: o.param_groups.append(dict(
        o.param_groups[0], params=[torch.nn.Parameter(torch.ones(2, dtype=torch.float64))])),
    "group replaced by hand": lambda o, ps: o.param_groups.__setitem__(
        1, dict(o.param_groups[1], params=ps[2:3])),
    "gradient removed": _set_grad(1, lambda g, ps: None),
    "gradient resized in place": lambda o, ps: ps[1].grad.resize_(4),
    "gradient wrong dtype": _set_grad(1, lambda g, ps: g.float()),
    "gradient not contiguous": _set_grad(0, lambda g, ps: g.t().contiguous().t()),
    "gradient a negative view": _set_grad(0, lambda g, ps: torch._neg_view(-g)),
    "gradient needs grad": _set_grad(1, lambda g, ps: g.clone().requires_grad_()),
    "gradient a subclass": _set_grad(1, lambda g, ps: torch.nn.Parameter(g.clone())),
    "gradient sparse": _set_grad(1, lambda g, ps: g.to_sparse()),
    "gradient is its parameter": _set_grad(0, lambda g, ps: ps[0].detach()),
    "gradient misaligned": _set_grad(1, lambda g, ps: torch.frombuffer(
        bytearray(41), dtype=torch.float64, offset=1, count=5).copy_(g)),
    "gradient is another's state": lambda o, ps: setattr(
        ps[1], "grad", _state(o, ps, 2)["exp_avg"].view(-1)[:5]),
    "gradient a view of a flat buffer": lambda o, ps: [setattr(p, "grad", v.view_as(
        p)) for p, v in zip(ps, torch.cat([p.grad.reshape(-1) for p in ps]).split(
            [p.numel() for p in ps]))],
}


# after these edits the optimizer is not prepared again (left to the full step)
FULL_ROUTE_ONLY = {"state a UserDict"}


@pytest.mark.parametrize("edit", list(EDITS))
def test_edits_between_steps(edit, ran):
    """After prepared steps, an edit (before the gradients are set, or
    after for "gradient" and "late" ones): the same outcome as the full
    route (an error leaving everything unchanged); after a step that
    applied, the steps after it too, and the last one prepared again."""
    s = Pair("AdamW").run(3)
    assert ran[0] == 2
    if edit.startswith(("gradient", "late")):
        s.grads()
        s.both(EDITS[edit])
    else:
        s.both(EDITS[edit])
        s.grads()
    if s.step() is not None:
        return
    s.run(2)
    before = ran[0]
    s.grads()
    assert s.step() is None
    if edit in FULL_ROUTE_ONLY:
        assert s.a._prep is None and ran[0] == before
    else:
        assert ran[0] == before + 1


@pytest.mark.parametrize("count", [-1, True, 2**53, 2.5, None])
def test_int_counts_checked_per_step(count, ran):
    """ONNX counts are Python ints, read per step by the prepared step."""
    s = Pair("OnnxAdam").run(3)
    good = _state(s.a, s.pa, 2)["step"]
    s.both(lambda o, ps: _state(o, ps, 2).update(step=count))
    s.grads()
    assert isinstance(s.step(), ValueError) and ran[0] == 2
    s.both(lambda o, ps: _state(o, ps, 2).update(step=good))
    s.run(2)
    # an int's value declines one step and the plan holds; another kind of
    # count drops the plan: one full step, then prepared again
    assert ran[0] == (4 if type(count) is int else 3)


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "OnnxAdam"])
def test_gradient_present_again_and_counts_apart(name, ran):
    """A parameter skipped for some steps (no gradient) keeps its count:
    counts of one group then differ, and each parameter gets its own t."""
    s = Pair(name)
    s.grads()
    s.step()
    for k in range(3):
        s.grads()
        if k < 2:
            s.both(lambda o, ps: setattr(ps[3], "grad", None))
        s.step()
    for _ in range(3):
        s.grads()
        s.step()
    assert ran[0] == 4     # the steps whose gradients were where the last step's were


@pytest.mark.parametrize("edit", ["param", "state"])
def test_square_tensor_transposed_in_place(edit, ran):
    """Same address and shape, other strides: not the memory the plan
    writes in C order (the full route then raises or writes the same)."""
    s = Pair("AdamW", shapes=[(3, 3), (4,)]).run(3)

    def transpose(o, ps):
        t = ps[0] if edit == "param" else o.state[ps[0]]["exp_avg"]
        _no_grad(t.t_)
    s.both(transpose)
    s.grads()
    # a gradient computed from the transposed parameter is transposed too (and
    # declines by itself); a contiguous one, as zero_grad(set_to_none=False)
    # keeps, leaves it to the parameter's own check
    s.both(lambda o, ps: setattr(ps[0], "grad", ps[0].grad.contiguous()))
    s.step()
    assert ran[0] == 2                  # the transposed tensor declined


def test_state_dict_of_a_dict_subclass_and_int_counts(ran):
    """OnnxAdam's counts are ints in the state dict; a state dict that is
    not a plain dict is left to the full route (it was written through as
    an array when its count advanced)."""
    import collections
    s = Pair("OnnxAdam").run(2)
    s.both(lambda o, ps: o.state.__setitem__(ps[0], collections.OrderedDict(
        o.state[ps[0]])))
    s.run(3)
    assert ran[0] == 1 and s.a._prep is None


def test_subclass_parameters_take_the_full_route(ran):
    """A parameter whose attributes a __torch_function__ answers is not
    prepared (its answers are not torch's)."""
    class Logged(torch.Tensor):
        pass
    ps = [torch.Tensor._make_subclass(Logged, torch.randn(3), True) for _ in range(2)]
    opt = ft.AdamW(ps, lr=0.01)
    for _ in range(3):
        for p in ps:
            p.grad = torch.ones(3)
        opt.step()
    assert opt._prep is None and ran[0] == 0
    assert all(float(opt.state[p]["step"]) == 3 for p in ps)


def test_gradient_storages_are_held_through_the_call():
    """The prepared step holds each gradient's storage, not just the tensor:
    set_() from another thread while C reads cannot free the memory."""
    from fastopt.torch import _compiled
    s = Pair("AdamW").run(2)
    prep = s.a._prep
    s.grads()
    ptrs, _, pins, *_ = _compiled.torch_gather(prep.groups, True, 1, prep.nk, torch.strided,
                                               torch.Tensor)
    for p in s.pa:
        p.grad.set_()
    assert [q.data_ptr() for q in pins if q.nbytes()] == [
        a for a, q in zip(ptrs, pins) if q.nbytes()]


def test_a_parameter_planned_without_gradient_replaced(ran):
    s = Pair("Adam")
    for k in range(4):
        s.grads()
        if k:
            s.both(lambda o, ps: setattr(ps[3], "grad", None))
        s.step()
    assert ran[0] == 2                  # ps[3] planned without a gradient
    s.grads()
    s.both(lambda o, ps: setattr(ps[3], "grad", None))
    s.both(lambda o, ps: o.param_groups[1]["params"].__setitem__(
        1, torch.nn.Parameter(torch.ones((), dtype=torch.float64))))
    assert s.step() is None and ran[0] == 2


def test_gather_refuses_params_lists_it_did_not_plan():
    """torch_gather indexes the params list through a copy of the list it
    was given: another list, a tuple or a longer one is 'build anew' (1)."""
    from fastopt.torch import _compiled
    s = Pair("AdamW").run(2)
    prep = s.a._prep
    (gd, pl, recs), rest = prep.groups[0], prep.groups[1:]
    extra = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    for plist in (tuple(pl), list(pl) + [extra], list(pl)[:1]):
        assert _compiled.torch_gather(((gd, plist, recs),) + rest, True, 1, prep.nk,
                                      torch.strided, torch.Tensor) == 1


@pytest.mark.parametrize("route", ["prepared", "full"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_a_state_retyped_in_place_is_refused_as_by_a_fresh_optimizer(route, dtype):
    """A state viewed through .data as an integer type of the same size (same
    address, shape and strides): the step raises the TypeError a fresh
    optimizer gives for that state, on the prepared and the full route, and
    writes nothing."""
    ps, opt = make("AdamW", dtype)
    for _ in range(3):
        for p in ps:
            p.grad = torch.ones_like(p)
        (full_step if route == "full" else lambda o: o.step())(opt)
    st = _state(opt, ps)
    as_int = torch.int64 if dtype == torch.float64 else torch.int32
    st["exp_avg"].data = st["exp_avg"].data.view(as_int)
    before = snapshot(opt, ps)
    msg = (r"state\['exp_avg'\] of param_groups\[0\]\['params'\]\[0\] has dtype "
           rf"{as_int} but the parameter has {dtype}")
    with pytest.raises(TypeError, match=msg):
        (full_step if route == "full" else lambda o: o.step())(opt)
    same(snapshot(opt, ps), before)
    fresh = make("AdamW", dtype)[1]
    fresh.state[fresh.param_groups[0]["params"][0]] = {
        k: v.clone() for k, v in st.items()}
    for p in fresh.param_groups[0]["params"] + fresh.param_groups[1]["params"]:
        p.grad = torch.ones_like(p)
    with pytest.raises(TypeError, match=msg):
        fresh.step()


# ---- the last count -------------------------------------------------------------

@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("count", ["tensor", "int"])
def test_the_last_step_leaves_a_count_that_loads_back_and_refuses_the_next(flat, count):
    """A state dict holds counts below 2**53 (whole numbers a float64
    holds): the step that would leave 2**53 is refused with nothing
    written, by the full, the prepared and the flat route alike."""
    ps = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2, 2))]
    opt = ft.Adam(ps, lr=0.1, flat=flat)
    for _ in range(2):                  # (the second step takes the prepared plan)
        for p in ps:
            p.grad = torch.ones_like(p)
        opt.step()
    for p in ps:
        opt.state[p]["step"] = (torch.tensor(2.0**53 - 2, dtype=torch.float64)
                                if count == "tensor" else 2**53 - 2)
    opt.step()
    assert all(float(opt.state[p]["step"]) == 2**53 - 1 for p in ps)
    before = snapshot(opt, ps)
    with pytest.raises(ValueError, match=r"fastopt\.torch\.Adam\.step: state\['step'\] of .* "
                                         r"is 9007199254740991; one more step"):
        opt.step()                      # (after a full step: the prepared route's check)
    same(snapshot(opt, ps), before)
    opt.load_state_dict(opt.state_dict())
