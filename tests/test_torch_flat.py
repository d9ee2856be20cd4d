"""fastopt.torch's flat layout (``flat=True``, fastopt/torch/_flat.py).

Each test runs a flat optimizer beside the same optimizer without the
layout (and, where it says so, fastopt.optim over NumPy copies) on equal
parameters, and asserts that the flat one took the flat step where it
should, fell back to the checked route where something moved, and that
both wrote the same bits either way.
"""
import copy
import io
import mmap
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_helpers import count_calls, same, snapshot  # noqa: E402

import fastopt.optim as fo  # noqa: E402
import fastopt.torch as ft  # noqa: E402  (after the importorskip)
import fastopt.torch._flat as tf  # noqa: E402

KW = {"SGD": dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
      "SGD0": dict(lr=0.05),                              # no momentum: no state
      "Adagrad": dict(lr=0.1, lr_decay=0.01, weight_decay=0.01,
                      initial_accumulator_value=0.1),
      "Adam": dict(lr=0.01, weight_decay=0.01, amsgrad=True),
      "AdamW": dict(lr=0.01, maximize=True),
      "RMSprop": dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.01),
      "Adamax": dict(lr=0.02, weight_decay=0.01),
      "Adadelta": dict(lr=0.5, weight_decay=0.01),
      "RAdam": dict(lr=0.01, weight_decay=0.01, decoupled_weight_decay=True),
      "Lion": dict(lr=0.01, weight_decay=0.01),
      "NAdam": dict(lr=0.01, weight_decay=0.01, momentum_decay=0.01)}
NAMES = list(KW)
# awkward sizes: empty, one element, 0-d, not multiples of 8, one over a block
SHAPES = [(0,), (1,), (), (7,), (4, 3), (0, 3), (33,), (1025,), (5, 1, 3)]


@pytest.fixture
def flat_steps(monkeypatch):
    """How many steps took the flat route."""
    return count_calls(monkeypatch, tf.FlatLayout, "_apply")


def make_params(shapes=SHAPES, dtypes=(torch.float64,), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtypes[i % len(dtypes)]))
            for i, s in enumerate(shapes)]


def groups(ps):
    """Three groups with their own hyperparameters."""
    return [{"params": ps[:3]}, {"params": ps[3:6], "lr": 0.03},
            {"params": ps[6:], "lr": 0.002, "weight_decay": 0.1}]


def build(name, ps, flat, n_threads=None):
    cls = getattr(ft, "SGD" if name == "SGD0" else name)
    return cls(groups(ps), **KW[name], n_threads=n_threads, flat=flat)


def grads(k, ps):
    g = torch.Generator().manual_seed(1000 + k)
    return [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in ps]


def give(ps, gs):
    """Set the gradients as a backward pass would: into an existing .grad
    in place, else a new tensor."""
    for p, g in zip(ps, gs):
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)


class Pair:
    """A flat optimizer (a) and the same without the layout (b)."""

    def __init__(self, name, dtypes=(torch.float64,), shapes=SHAPES, n_threads=None):
        self.pa = make_params(shapes, dtypes)
        self.pb = make_params(shapes, dtypes)
        self.a = build(name, self.pa, True, n_threads)
        self.b = build(name, self.pb, False, n_threads)
        self.k = 0

    def step(self, skip=(), **options):
        gs = grads(self.k, self.pa)
        self.k += 1
        for ps in (self.pa, self.pb):
            give([p for i, p in enumerate(ps) if i not in skip],
                 [g for i, g in enumerate(gs) if i not in skip])
        ia = self.a.step(**options)
        ib = self.b.step(**options)
        assert ia == ib
        self.same()
        return self.a.last_step, self.b.last_step

    def zero(self, set_to_none=None):
        self.a.zero_grad(set_to_none)
        self.b.zero_grad(True if set_to_none is None else set_to_none)

    def same(self):
        same(snapshot(self.a, self.pa), snapshot(self.b, self.pb))


def train(pair, steps):
    for _ in range(steps):
        pair.step()
        pair.zero(False)


def skip_once(pair, skip):
    """A step without gradients for the parameters skip (they keep their
    counts), then one where those get new gradient tensors (the checked
    route), then zero_grad puts every view back."""
    pair.zero(True)
    pair.step(skip=skip)
    pair.zero(False)
    pair.step()
    pair.zero(False)


def both_refuse(pair, match):
    """The flat optimizer's step raises what the other one raises."""
    errors = []
    for opt in (pair.a, pair.b):
        with pytest.raises(ValueError, match=match) as e:
            opt.step()
        errors.append(str(e.value))
    assert errors[0] == errors[1]


# ---- the flat step gives the same bits ----------------------------------------------

@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("name", NAMES)
def test_flat_steps_equal_the_checked_route(name, n_threads, flat_steps):
    """Awkward shapes, three groups, float32 and float64 mixed in each."""
    pair = Pair(name, (torch.float32, torch.float64), n_threads=n_threads)
    assert pair.a.flat and not pair.b.flat
    train(pair, 6)
    # step 1 creates the states, zero_grad then puts the gradients in place
    assert flat_steps[0] == 5


@pytest.mark.parametrize("name", NAMES)
def test_a_16_bit_model_steps_flat_in_its_own_type(name, flat_steps):
    """bfloat16 and float16 parameters beside float32 ones, each updated in
    its own type with states rounded to nearest, as torch does: the same
    bits as the checked route, with global-norm clipping too."""
    pair = Pair(name, (torch.bfloat16, torch.float16, torch.float32))
    assert {s.dtype for s in pair.a._flat.segments} == {
        torch.bfloat16, torch.float16, torch.float32}
    train(pair, 4)
    assert flat_steps[0] == 3
    a, b = pair.step(max_grad_norm=0.5)
    assert a == b and a.norm > 0 and flat_steps[0] == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_flat_adamw_equals_fastopt_optim(dtype, flat_steps):
    shapes = [(0,), (1,), (7,), (33,), (1025,)]
    ps = make_params(shapes, (dtype,))
    xs = [p.detach().numpy().copy() for p in ps]
    opt = ft.AdamW(ps, lr=0.01, weight_decay=0.05, flat=True)
    ref = fo.AdamW(xs, lr=0.01, weight_decay=0.05)
    for k in range(5):
        gs = grads(k, ps)
        give(ps, gs)
        opt.step()
        opt.zero_grad()
        ref.step([g.numpy() for g in gs])
        for p, x in zip(ps, xs):
            np.testing.assert_array_equal(p.detach().numpy(), x)
    assert flat_steps[0] == 4


def test_a_model_trains_through_backward(flat_steps):
    """autograd accumulates into the gradient views in place."""
    torch.manual_seed(0)
    ma = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    mb = copy.deepcopy(ma)
    oa = ft.AdamW(ma.parameters(), lr=0.01, flat=True)
    ob = ft.AdamW(mb.parameters(), lr=0.01)
    x = torch.randn(11, 5, generator=torch.Generator().manual_seed(1))
    for _ in range(5):
        for m, o in ((ma, oa), (mb, ob)):
            o.zero_grad()
            m(x).square().sum().backward()
            o.step()
        for u, v in zip(ma.parameters(), mb.parameters()):
            assert torch.equal(u, v)
    assert flat_steps[0] == 4
    assert all(p.grad is not None for p in ma.parameters())


def test_parameters_share_fastopts_buffers():
    ps = make_params([(3, 4), (5,), (2,)], (torch.float32, torch.float64))
    ps.append(torch.nn.Parameter(torch.ones(3), requires_grad=False))
    values = [p.detach().clone() for p in ps]
    ps[1].grad = torch.full((5,), 2.0, dtype=torch.float64)
    opt = ft.SGD(ps, lr=0.1, flat=True)
    for p, v in zip(ps, values):
        assert torch.equal(p, v) and p.is_contiguous()
    f32 = [s for s in opt._flat.segments if s.dtype is torch.float32][0]
    assert ps[0].data_ptr() == f32.x.data_ptr()
    assert ps[2].untyped_storage().data_ptr() == f32.x.untyped_storage().data_ptr()
    assert torch.equal(ps[1].grad, torch.full((5,), 2.0, dtype=torch.float64))
    assert ps[1].grad.untyped_storage().data_ptr() != ps[1].untyped_storage().data_ptr()
    assert ps[3].untyped_storage().data_ptr() != f32.x.untyped_storage().data_ptr()


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"),
                    reason="huge pages are advised on Linux")
def test_large_buffers_sit_on_huge_page_boundaries():
    big, small = tf.buffer(600_000, torch.float32), tf.buffer(10, torch.float64)
    assert big[0].data_ptr() % (2 << 20) == 0 and small[0].data_ptr() % 64 == 0
    assert not big[0].any() and not small[0].any()


# ---- what moves sends the step to the checked route ----------------------------------

@pytest.mark.parametrize("name", ["AdamW", "SGD"])
def test_set_to_none_then_the_views_come_back(name, flat_steps):
    pair = Pair(name)
    train(pair, 3)
    n = flat_steps[0]
    pair.zero(True)
    assert all(p.grad is None for p in pair.pa)
    pair.step()                     # new gradient tensors: the checked route
    assert flat_steps[0] == n
    pair.zero(False)                # the views are back
    assert all(p.grad.data_ptr() == v.data_ptr() or p.numel() == 0
               for s in pair.a._flat.segments for p, v in zip(s.params, s.gviews))
    pair.step()
    assert flat_steps[0] == n + 1


def test_zero_grad_keeps_the_views_and_none():
    ps = make_params()
    give(ps[1:], grads(0, ps[1:]))
    opt = ft.Adam(ps, flat=True)    # the gradients there move in
    held = [p.grad for p in ps]
    opt.zero_grad()
    assert ps[0].grad is None       # as torch's set_to_none=False
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in ps[1:])
    assert all(p.grad is g for p, g in zip(ps[1:], held[1:]))      # views, kept


def test_parameters_skipped_by_a_step_keep_their_counts(flat_steps):
    """Counts that differ within a segment: one C call, a work entry per run."""
    pair = Pair("Adam", (torch.float32, torch.float64))
    train(pair, 2)
    skip_once(pair, {1, 4, 5})
    n = flat_steps[0]
    train(pair, 3)
    assert flat_steps[0] == n + 3
    counts = {pair.a.state[p]["step"].item() for p in pair.pa}
    assert counts == {6.0, 7.0}


def test_nadam_carries_its_product_in_the_layout(flat_steps):
    """NAdam's mu_product sits in a buffer per segment beside the counts. A
    step that skips parameters leaves theirs behind, and the flat step then
    runs one work entry per run of equal counts and products (products set
    apart at equal counts too); a step not applied keeps them; a product
    edited out of [0, 1] declines to the checked route, which refuses it as
    the optimizer without the layout."""
    pair = Pair("NAdam", (torch.float32, torch.float64))
    train(pair, 2)
    p0 = pair.pa[0]
    seg = next(s for s in pair.a._flat.segments if any(q is p0 for q in s.params))
    assert pair.a.state[p0]["mu_product"] is seg.carried[2][0]
    skip_once(pair, {1, 4, 5})
    n = flat_steps[0]
    train(pair, 3)
    assert flat_steps[0] == n + 3
    assert len({pair.a.state[p]["mu_product"].item() for p in pair.pa}) == 2
    pair.pa[7].grad[0] = pair.pb[7].grad[0] = float("nan")
    before = snapshot(pair.a, pair.pa)
    pair.a.step(skip_if_nonfinite=True)
    pair.b.step(skip_if_nonfinite=True)
    assert not pair.a.last_step.applied and flat_steps[0] == n + 4
    same(before, snapshot(pair.a, pair.pa))
    pair.same()
    pair.zero(False)
    for opt, ps in ((pair.a, pair.pa), (pair.b, pair.pb)):     # apart at equal counts
        opt.state[ps[2]]["mu_product"].fill_(0.5)
    pair.step()
    pair.zero(False)
    assert flat_steps[0] == n + 5
    for opt, ps in ((pair.a, pair.pa), (pair.b, pair.pb)):
        opt.state[ps[3]]["mu_product"].fill_(1.5)
    both_refuse(pair, "mu_product")
    assert flat_steps[0] == n + 5
    pair.same()


def test_nadam_products_apart_at_equal_counts(flat_steps):
    pair = Pair("NAdam")
    train(pair, 2)
    for opt, ps in ((pair.a, pair.pa), (pair.b, pair.pb)):
        opt.state[ps[2]]["mu_product"].fill_(0.5)
    n = flat_steps[0]
    train(pair, 2)
    assert flat_steps[0] == n + 2


def test_nadam_products_out_of_range_or_apart_within_a_count_run(flat_steps):
    """Every product of a segment equal but outside [0, 1] declines (the
    checked route refuses it); products apart inside a run of counts that
    does not start at the segment's first parameter cut that run there."""
    pair = Pair("NAdam")
    train(pair, 2)
    skip_once(pair, {0})                # parameter 0 keeps its count: runs [0, 1), [1, 3)
    for opt, ps in ((pair.a, pair.pa), (pair.b, pair.pb)):
        opt.state[ps[2]]["mu_product"].fill_(0.5)
    n = flat_steps[0]
    train(pair, 2)
    assert flat_steps[0] == n + 2
    for edit in (1.5, float("nan")):
        for skipped in (True, False):   # counts apart in the segment, or all equal
            pair = Pair("NAdam")
            train(pair, 2)
            if skipped:
                skip_once(pair, {3})
            n = flat_steps[0]
            for opt, ps in ((pair.a, pair.pa), (pair.b, pair.pb)):
                for p in ps[3:6]:       # every product of group 1's segment
                    opt.state[p]["mu_product"].fill_(edit)
            both_refuse(pair, "mu_product")
            assert flat_steps[0] == n
            pair.same()


def test_nadam_resumes_the_flat_step_after_loading_products_of_another_dtype(flat_steps):
    """torch's load_state_dict casts mu_product to a float64 parameter's
    dtype: the segment's buffer of float32 products is made anew."""
    pair = Pair("NAdam")
    train(pair, 2)
    sd = pair.b.state_dict()
    for opt in (pair.a, pair.b):
        opt.load_state_dict(copy.deepcopy(sd))
    assert pair.a.state[pair.pa[0]]["mu_product"].dtype == torch.float64
    n = flat_steps[0]
    train(pair, 2)
    assert flat_steps[0] == n + 2
    assert pair.a._flat.segments[0].carried[0].dtype == torch.float64


@pytest.mark.parametrize("name", ["AdamW", "NAdam"])
def test_a_flat_16_bit_model_resumes_from_its_checkpoint(name, flat_steps):
    pair = Pair(name, (torch.bfloat16, torch.float16, torch.float32))
    train(pair, 2)
    qa = [p.detach().clone().requires_grad_() for p in pair.pa]
    c = build(name, qa, True)
    c.load_state_dict(copy.deepcopy(pair.a.state_dict()))
    for k in range(3):
        gs = grads(70 + k, qa)
        for ps, opt in ((pair.pa, pair.a), (qa, c)):
            give(ps, gs)
            opt.step()
            opt.zero_grad(set_to_none=False)
        same(snapshot(c, qa), snapshot(pair.a, pair.pa))
    assert c._flat.rec is not None
    assert {s.dtype for s in c._flat.segments} == {torch.bfloat16, torch.float16, torch.float32}


def test_16_bit_parameters_through_add_param_group(flat_steps):
    pair = Pair("AdamW", (torch.float32,))
    train(pair, 2)
    for ps, opt in ((pair.pa, pair.a), (pair.pb, pair.b)):
        more = make_params([(6,), (2, 2)], (torch.bfloat16,), seed=5)
        ps += more
        opt.add_param_group({"params": more, "lr": 0.2})
    assert pair.a._flat.segments[-1].dtype == torch.bfloat16
    n = flat_steps[0]
    train(pair, 3)
    assert flat_steps[0] == n + 2
    h = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="flat=True rounds 16-bit states to nearest"):
        ft.SGD([torch.nn.Parameter(torch.ones(2)), h], lr=0.1, flat=True,
               state_rounding="stochastic")
    t = torch.arange(6.0).reshape(3, 2).to(torch.bfloat16)
    q = torch.nn.Parameter(t.t())               # not contiguous: the layout makes it so
    ft.SGD([q], lr=0.1, flat=True)
    assert q.is_contiguous() and torch.equal(q, t.t())


# flat steps after each edit: the step right after it, then three more
EDITS = {"new grad": 3, "grad re-pointed": 3, "param moved": 0, "state replaced": 3,
         "state re-pointed": 3, "count re-pointed": 3, "state dict replaced": 3,
         "amsgrad": 3, "lr": 4, "grad None": 2, "params list replaced": 0,
         "params list without one": 0, "group replaced": 0}


@pytest.mark.parametrize("edit", list(EDITS))
def test_edits_between_steps(edit, flat_steps):
    """The edit declines the flat step; what the layout can take back (a
    gradient that zero_grad puts in place, states that move into the
    buffers), it does."""
    pair = Pair("Adam")
    pair.a.param_groups[0]["amsgrad"] = pair.b.param_groups[0]["amsgrad"] = False
    train(pair, 3)
    n = flat_steps[0]
    for ps, opt in ((pair.pa, pair.a), (pair.pb, pair.b)):
        if edit == "new grad":
            ps[4].grad = ps[4].grad.clone()
        elif edit == "grad re-pointed":
            ps[4].grad.data = ps[4].grad.data.clone()
        elif edit == "param moved":
            ps[3].data = ps[3].data.clone()
        elif edit == "state replaced":
            opt.state[ps[7]]["exp_avg"] = opt.state[ps[7]]["exp_avg"] * 2
        elif edit == "state re-pointed":
            opt.state[ps[7]]["exp_avg_sq"].data = opt.state[ps[7]]["exp_avg_sq"] * 3
        elif edit == "count re-pointed":
            opt.state[ps[6]]["step"].data = opt.state[ps[6]]["step"].clone()
        elif edit == "state dict replaced":
            opt.state[ps[7]] = {k: v.clone() for k, v in opt.state[ps[7]].items()}
        elif edit == "amsgrad":
            opt.param_groups[0]["amsgrad"] = True
        elif edit == "lr":
            opt.param_groups[1]["lr"] = 0.5
        elif edit == "grad None":
            ps[2].grad = None
        elif edit == "params list replaced":       # the same parameters, a new list
            opt.param_groups[1]["params"] = list(opt.param_groups[1]["params"])
        elif edit == "params list without one":    # ps[3] is no longer stepped
            opt.param_groups[1]["params"] = opt.param_groups[1]["params"][1:]
        elif edit == "group replaced":
            opt.param_groups[2] = dict(opt.param_groups[2], params=ps[6:])
    pair.step(skip={2} if edit == "grad None" else ())
    pair.zero(False)
    train(pair, 3)
    assert flat_steps[0] == n + EDITS[edit]


@pytest.mark.parametrize("value", [5, 2**64 - 1, 2**64, -2**63 - 1, 2**100])
def test_an_int_of_the_callers_in_a_state_dict(value, flat_steps):
    """A state dict may hold the caller's own entries; an int of any size
    there neither stops the flat step nor changes it."""
    pair = Pair("SGD")
    train(pair, 2)
    for ps, opt in ((pair.pa, pair.a), (pair.pb, pair.b)):
        opt.state[ps[4]]["mine"] = value
    n = flat_steps[0]
    train(pair, 3)
    assert flat_steps[0] > n
    assert pair.a.state[pair.pa[4]]["mine"] == value


def test_a_parameter_outside_the_layout_with_a_gradient(flat_steps):
    ps = make_params([(3,), (4,)])
    ps.append(torch.nn.Parameter(torch.ones(2), requires_grad=False))
    qs = [p.detach().clone().requires_grad_(p.requires_grad) for p in ps]
    a = ft.SGD(ps, lr=0.1, flat=True)
    b = ft.SGD(qs, lr=0.1)
    for k in range(3):
        gs = grads(k, ps)
        give(ps, gs)
        give(qs, gs)
        a.step()
        b.step()
        a.zero_grad()
        b.zero_grad(set_to_none=False)
        for p, q in zip(ps, qs):
            assert torch.equal(p, q)
    assert flat_steps[0] == 0           # the third parameter has a gradient


def test_step_options(flat_steps):
    pair = Pair("AdamW", (torch.float32, torch.float64))
    train(pair, 2)
    n = flat_steps[0]
    a, b = pair.step(max_grad_norm=0.5)
    assert a == b and a.norm > 0
    pair.zero(False)
    a, b = pair.step(max_grad_norm=1.0, norm_type="inf", grad_scale=4.0,
                     clip_convention="optax")
    assert a == b
    pair.zero(False)
    a, b = pair.step(skip_if_nonfinite=True, grad_scale=2.0)
    assert a == b and a.applied
    pair.zero(False)
    assert flat_steps[0] == n + 3
    pair.pa[7].grad[0] = pair.pb[7].grad[0] = float("nan")
    before = snapshot(pair.a, pair.pa)
    assert pair.a.step(skip_if_nonfinite=True) is None
    pair.b.step(skip_if_nonfinite=True)
    a, b = pair.a.last_step, pair.b.last_step
    assert (a.applied, a.finite) == (b.applied, b.finite) == (False, False)
    assert np.isnan(a.norm) and np.isnan(b.norm)
    same(before, snapshot(pair.a, pair.pa))
    pair.same()


def test_a_bad_hyperparameter_raises_as_the_checked_route():
    pair = Pair("AdamW")
    train(pair, 3)
    before = snapshot(pair.a, pair.pa)
    for opt in (pair.a, pair.b):
        opt.param_groups[1]["lr"] = -1.0
    with pytest.raises(ValueError) as ea:
        pair.a.step()
    with pytest.raises(ValueError) as eb:
        pair.b.step()
    assert str(ea.value) == str(eb.value)
    same(before, snapshot(pair.a, pair.pa))


# ---- groups, checkpoints ----------------------------------------------------------------

def test_add_param_group(flat_steps):
    pair = Pair("AdamW", shapes=SHAPES[:4])
    train(pair, 2)
    for ps, opt in ((pair.pa, pair.a), (pair.pb, pair.b)):
        more = make_params([(6,), (2, 2)], (torch.float32,), seed=5)
        ps += more
        opt.add_param_group({"params": iter(more), "lr": 0.2})
    assert pair.pa[-1].data_ptr() == pair.a._flat.segments[-1].x[6:].data_ptr()
    n = flat_steps[0]
    train(pair, 3)
    assert flat_steps[0] == n + 2


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trips(name, flat_steps):
    """flat -> torch.optim -> flat, through torch.save: the same bits; and a
    flat optimizer resumes a non-flat one's checkpoint. (NAdam's on float32
    only: torch's load_state_dict casts every floating state but 'step' to
    its parameter's dtype, so a float64 parameter's float32 mu_product comes
    back float64 and rounds otherwise after, flat or not.)"""
    dtypes = (torch.float32,) if name == "NAdam" else (torch.float32, torch.float64)
    pair = Pair(name, dtypes)
    train(pair, 3)
    buf = io.BytesIO()
    torch.save(pair.a.state_dict(), buf)
    buf.seek(0)
    # torch's own class; Lion, which torch.optim has not, through the non-flat drop-in
    cls = torch.optim.SGD if name == "SGD0" else getattr(torch.optim, name, None) or getattr(
        ft, name)
    tp = make_params(SHAPES, dtypes)
    topt = cls(groups(tp), **KW[name])
    topt.load_state_dict(torch.load(buf))
    back = io.BytesIO()
    torch.save(topt.state_dict(), back)
    back.seek(0)
    qa = [p.detach().clone().requires_grad_() for p in pair.pa]
    c = build(name, qa, True)
    c.load_state_dict(torch.load(back))
    qb = [p.detach().clone().requires_grad_() for p in pair.pb]
    d = build(name, qb, True)
    d.load_state_dict(copy.deepcopy(pair.b.state_dict()))
    n = flat_steps[0]
    for k in range(3):
        gs = grads(50 + k, qa)
        for ps, opt in ((pair.pa, pair.a), (pair.pb, pair.b), (qa, c), (qb, d)):
            give(ps, gs)
            opt.step()
            opt.zero_grad(set_to_none=False)
        same(snapshot(c, qa), snapshot(pair.a, pair.pa))
        same(snapshot(d, qb), snapshot(pair.b, pair.pb))
        pair.same()
    # a: every step; c and d: their first gradients are new tensors
    assert flat_steps[0] == n + 3 + 2 + 2


def test_load_state_dict_moves_states_into_the_buffers(flat_steps):
    pair = Pair("AdamW")
    train(pair, 2)
    sd = pair.b.state_dict()
    pair.a.load_state_dict(copy.deepcopy(sd))
    n = flat_steps[0]
    pair.step()
    assert flat_steps[0] == n + 1
    seg = pair.a._flat.segments[0]
    v = pair.a.state[seg.params[0]]["exp_avg"]
    assert v.untyped_storage().data_ptr() == seg.states["exp_avg"][0].untyped_storage().data_ptr()


# ---- refused before anything moves ------------------------------------------------------

def test_bad_flat_argument():
    ps = make_params()
    with pytest.raises(TypeError, match=r"fastopt.torch.AdamW: flat must be True or False"):
        ft.AdamW(ps, flat=1)


def test_refused_parameters_leave_everything_where_it_was():
    ps = make_params([(3,), (4,)])
    ps.append(torch.nn.Parameter(torch.ones(2, dtype=torch.float16)))
    where = [p.data_ptr() for p in ps]
    with pytest.raises(TypeError, match=r"param_groups\[0\]\['params'\]\[2\] has dtype "
                                        r"torch.float16"):
        ft.LAMB(ps, lr=0.1, flat=True)      # (LAMB updates no 16-bit type in its own)
    assert [p.data_ptr() for p in ps] == where
    base = torch.zeros(10)
    a, b = torch.nn.Parameter(base[:6]), torch.nn.Parameter(base[4:])
    with pytest.raises(ValueError, match=r"with flat=True, .* shares memory with"):
        ft.SGD([a, b], lr=0.1, flat=True)
    opt = ft.LAMB([torch.nn.Parameter(torch.ones(2))], lr=0.1, flat=True)
    with pytest.raises(TypeError, match=r"add_param_group: param_groups\[1\]\['params'\]\[0\]"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(2).half())]})
    assert len(opt.param_groups) == 1 and len(opt._flat.segments) == 1


class _CountingParameter(torch.nn.Parameter):
    """A parameter type whose data_ptr is its own (Python) method."""

    reads = 0

    def data_ptr(self):
        type(self).reads += 1
        return super().data_ptr()


def test_a_parameter_type_that_overrides_what_the_check_reads(flat_steps):
    """The check calls torch's getters directly only where no type
    overrides them; here it reads through the override."""
    ps = [_CountingParameter(torch.randn(5, dtype=torch.float64)) for _ in range(3)]
    qs = [p.detach().clone().requires_grad_() for p in ps]
    a = ft.AdamW(ps, lr=0.1, flat=True)
    b = ft.AdamW(qs, lr=0.1)
    for k in range(4):
        gs = grads(k, ps)
        for xs, opt in ((ps, a), (qs, b)):
            give(xs, gs)
            opt.step()
            opt.zero_grad(set_to_none=False)
        for p, q in zip(ps, qs):
            assert torch.equal(p, q)
    assert flat_steps[0] == 3
    assert tf.DIRECT and not a._flat.rec.direct
    _CountingParameter.reads = 0
    a.step()
    assert _CountingParameter.reads >= len(ps)


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_of_a_flat_optimizer_is_flat_over_its_own_buffers(flat_steps, how):
    """A deepcopy or an unpickled copy keeps flat=True: its copied
    parameters move into buffers of their own (the original's stay where
    they are), and it steps them by the flat route to the original's bits."""
    import pickle
    pair = Pair("AdamW")
    train(pair, 2)
    c = copy.deepcopy(pair.a) if how == "deepcopy" else pickle.loads(pickle.dumps(pair.a))
    assert c.flat
    qs = [p for g in c.param_groups for p in g["params"]]
    assert all(q.data_ptr() != p.data_ptr() for q, p in zip(qs, pair.pa) if p.numel())
    before = flat_steps[0]
    for k in range(2, 5):
        gs = grads(k, qs)
        for ps in (qs, pair.pa):
            give(ps, gs)
        c.step()
        pair.a.step()
        for o in (c, pair.a):
            o.zero_grad()
        same(snapshot(c, qs), snapshot(pair.a, pair.pa))
    assert flat_steps[0] - before >= 5     # the original's three and the copy's from its second


def test_a_shallow_copy_of_a_flat_optimizer_leaves_the_original_flat(flat_steps):
    """copy.copy shares the original's parameters: the copy is not flat, and
    the original keeps its buffers and its flat route."""
    pair = Pair("AdamW")
    train(pair, 2)
    ptrs = [p.data_ptr() for p in pair.pa]
    c = copy.copy(pair.a)
    assert not c.flat and pair.a.flat
    assert [p.data_ptr() for p in pair.pa] == ptrs
    before = flat_steps[0]
    train(pair, 2)
    assert flat_steps[0] - before == 2


def test_share_memory_moves_the_states_off_the_flat_route(flat_steps):
    pair = Pair("Adagrad")
    train(pair, 3)
    n = flat_steps[0]
    pair.a.share_memory()
    pair.b.share_memory()
    train(pair, 3)
    assert flat_steps[0] == n
    assert all(pair.a.state[p]["sum"].is_shared() for p in pair.pa)


def test_states_swapped_between_parameters(flat_steps):
    """States exchanged between parameters move into the buffers without
    one overwriting the other."""
    pair = Pair("AdamW", shapes=[(7,), (7,), (3,), (3,)])
    train(pair, 3)
    for ps, opt in ((pair.pa, pair.a), (pair.pb, pair.b)):
        u, v = opt.state[ps[0]], opt.state[ps[1]]
        u["exp_avg_sq"], v["exp_avg_sq"] = v["exp_avg_sq"], u["exp_avg_sq"]
        w, x = opt.state[ps[2]], opt.state[ps[3]]
        w["step"], x["step"] = x["step"], w["step"]
        w["step"] += 1
    n = flat_steps[0]
    train(pair, 3)
    assert flat_steps[0] == n + 2


def test_a_segment_of_empty_parameters(flat_steps):
    pair = Pair("Adam", shapes=[(0,), (0, 3), (2,), (0,)])
    train(pair, 4)
    assert flat_steps[0] == 3


def test_memory_shared_with_a_parameter_that_stays():
    base = torch.zeros(4, 6)
    a = torch.nn.Parameter(base[:, ::2])                       # strided: spans the rows
    frozen = torch.nn.Parameter(base[2, 4:], requires_grad=False)  # shares base[2, 4]
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[0\] shares memory"):
        ft.SGD([a, frozen], lr=0.1, flat=True)
    b = torch.nn.Parameter(torch.zeros(2, 2), requires_grad=False)
    c = torch.nn.Parameter(b.detach()[0], requires_grad=False)    # neither moves
    ft.SGD([torch.nn.Parameter(torch.ones(3)), b, c], lr=0.1, flat=True)


def test_zero_grad_after_the_params_list_was_edited(flat_steps):
    ps = make_params([(3,), (4,)])
    opt = ft.SGD(ps, lr=0.1, flat=True)
    extra = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    opt.param_groups[0]["params"].append(extra)
    give(ps + [extra], grads(0, ps + [extra]))
    opt.step()
    opt.zero_grad()
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in ps + [extra])
    give(ps + [extra], grads(1, ps + [extra]))
    opt.step()
    assert flat_steps[0] == 0           # the list is not the one laid out
