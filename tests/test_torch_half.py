"""bfloat16 and float16 parameters in fastopt.torch without master weights:
updated in their own type, torch's way (states of the parameter's dtype,
the arithmetic in float32, each stored value rounded to nearest).

The contract: one step is the float32 drop-in's step on the parameter and
its states widened, with the new parameter and states rounded to nearest
(bit for bit, every rule whose states may be stored apart), which is what
torch's fused CPU kernels compute. Against torch itself: Adam, AdamW and
Adagrad are within torch's own spread (its fused step against its
for-loop); SGD, whose fused 16-bit kernel does not store every update, is
torch's float32 step on the widened values rounded after each step, bit
for bit.
"""
import copy
import io

import pytest

torch = pytest.importorskip("torch")
from torch_helpers import count_calls, randn_list, same, snapshot  # noqa: E402

import fastopt.torch as ft  # noqa: E402  (after the importorskip)
import fastopt.torch._prep as tp  # noqa: E402

HALVES = [torch.bfloat16, torch.float16]
# every drop-in whose rule may keep its states apart, with its flags on
RULES = {"SGD": dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01,
                     maximize=True),
         "Adagrad": dict(lr=0.1, weight_decay=0.01, initial_accumulator_value=0.25,
                         lr_decay=0.01),
         "Adam": dict(lr=0.01, weight_decay=0.01, amsgrad=True),
         "AdamW": dict(lr=0.01, maximize=True),
         "RMSprop": dict(lr=0.01, momentum=0.5, centered=True),
         "Adamax": dict(lr=0.01, weight_decay=0.01),
         "Adadelta": dict(lr=0.5, weight_decay=0.01),
         "RAdam": dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.01),
         "NAdam": dict(lr=0.01, momentum_decay=0.004),
         "Lion": dict(lr=0.01, weight_decay=0.1),
         "AdEMAMix": dict(lr=0.01)}
SHAPES = [(6, 5), (7,), (3, 2, 4), (3000,)]     # (3000,): whole tiles and a part


def values(seed=0):
    return randn_list(SHAPES, seed)


def grads(k):
    return randn_list(SHAPES, 100 + k)


def _round(opt, params, half):
    """Every float32 parameter and floating state of opt rounded to half
    and widened again, in place (the count stays as it is)."""
    for p in params:
        p.data.copy_(p.detach().to(half).float())
        for k, v in opt.state[p].items():
            if k != "step" and isinstance(v, torch.Tensor) and v.shape == p.shape:
                v.copy_(v.to(half).float())


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("name", sorted(RULES))
def test_a_step_is_the_float32_step_rounded(name, half, monkeypatch):
    """Each step equals the float32 drop-in's on the widened parameter and
    states, with the results rounded to nearest: parameters and every
    state, bit for bit. The steps after the first take the prepared step."""
    ran = count_calls(monkeypatch, tp.Prepared, "run")      # applied, not declined
    pair = _pair(name, half)
    for k in range(5):
        _step_rounded(pair, half, k)
    assert ran[0] == 8          # both optimizers' steps after their first: prepared


def _pair(name, half):
    """(model of half, its float32 twin, their drop-ins `name`)."""
    model = [torch.nn.Parameter(v.to(half)) for v in values()]
    ref = [torch.nn.Parameter(p.detach().float()) for p in model]
    return model, ref, getattr(ft, name)(model, **RULES[name]), \
        getattr(ft, name)(ref, **RULES[name])


def _step_rounded(pair, half, k, scale=1, **options):
    """One step of both with gradients k (times scale), the twin's results
    rounded to half; then parameters and states equal bit for bit."""
    model, ref, opt, opt_ref = pair
    for p, r, g in zip(model, ref, grads(k)):
        p.grad = (g * scale).to(half)
        r.grad = p.grad.float()
    opt.step(**options)
    opt_ref.step(**options)
    _round(opt_ref, ref, half)
    for p, r in zip(model, ref):
        assert p.dtype == half
        assert torch.equal(p.detach().float(), r.detach())
        for key, v in opt.state[p].items():
            w = opt_ref.state[r][key]
            if key == "step" or v.shape != p.shape:
                assert torch.equal(v, w)
            else:
                assert v.dtype == half and torch.equal(v.float(), w), key


def _trajectory(make, half, steps=40, n=3000):
    g = torch.Generator().manual_seed(5)
    p = torch.nn.Parameter(torch.randn(n, generator=g).to(half))
    opt = make([p])
    for _ in range(steps):
        p.grad = torch.randn(n, generator=g).to(half)
        opt.step()
    return p.detach().float()


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("name, kw", [
    ("Adam", dict(lr=0.01, weight_decay=0.01)),
    ("Adam", dict(lr=0.01, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.05, weight_decay=0.01))])
def test_within_torchs_own_spread(name, kw, half):
    """After 40 steps on a 16-bit parameter, fastopt is as close to torch's
    fused step as torch's for-loop is."""
    ours = _trajectory(lambda ps: getattr(ft, name)(ps, **kw), half)
    loop = _trajectory(lambda ps: getattr(torch.optim, name)(ps, foreach=False, **kw), half)
    fused = _trajectory(lambda ps: getattr(torch.optim, name)(ps, fused=True, **kw), half)
    spread = (fused - loop).nan_to_num(posinf=1e9, neginf=1e9).abs().max()
    assert (ours - fused).abs().max() <= spread
    assert (ours != fused).sum() <= (loop != fused).sum()
    if name != "Adagrad":       # one rounding of the same float32 arithmetic: at most
        assert (ours != fused).sum() <= 30      # an element in 100 apart (here: none)


class _Rounded(torch.optim.SGD):
    """torch's float32 SGD on 16-bit values: each step widens the
    parameter and its buffer, steps, and rounds both to nearest (what
    torch's fused 16-bit kernel means to compute)."""

    def __init__(self, params, half, **kw):
        self.half = half
        self.wide = [torch.nn.Parameter(p.detach().float()) for p in params]
        self.real = list(params)
        super().__init__(self.wide, foreach=False, **kw)

    def step(self):
        for w, p in zip(self.wide, self.real):
            w.grad = p.grad.float()
        super().step()
        for w, p in zip(self.wide, self.real):
            w.data.copy_(w.detach().to(self.half).float())
            buf = self.state[w].get("momentum_buffer")
            if buf is not None:
                buf.copy_(buf.to(self.half).float())
            p.data.copy_(w.detach().to(self.half))


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("kw", [dict(lr=0.05, momentum=0.9, nesterov=True),
                                dict(lr=0.05, momentum=0.9, dampening=0.5, weight_decay=0.01),
                                dict(lr=0.05, weight_decay=0.01, maximize=True)])
def test_sgd_is_torchs_float32_step_rounded(kw, half):
    """torch's fused 16-bit SGD kernel does not store every update (40
    steps end up to 1.2 away from its for-loop) and its for-loop rounds
    after each operation; fastopt.torch.SGD is torch's float32 SGD on the
    widened values, rounded to nearest after each step, bit for bit."""
    ours = _trajectory(lambda ps: ft.SGD(ps, **kw), half)
    ref = _trajectory(lambda ps: _Rounded(ps, half, **kw), half)
    assert torch.equal(ours, ref)


@pytest.mark.parametrize("half", HALVES)
def test_bits_do_not_depend_on_the_thread_count(half):
    """A tensor of 3e5 elements split over 1, 2 and 3 threads: the same bits."""
    out = []
    for nth in (1, 2, 3):
        g = torch.Generator().manual_seed(1)
        p = torch.nn.Parameter(torch.randn(300_000, generator=g).to(half))
        opt = ft.AdamW([p], lr=0.01, n_threads=nth)
        for _ in range(3):
            p.grad = torch.randn(300_000, generator=g).to(half)
            opt.step()
        out.append((p.detach().clone(), opt.state[p]["exp_avg"].clone(),
                    opt.state[p]["exp_avg_sq"].clone()))
    for got in out[1:]:
        for a, b in zip(got, out[0]):
            assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["Adam", "NAdam"])
def test_checkpoint_round_trip_continues_bit_for_bit(name):
    """A state_dict through torch.save and back: the states keep their
    16-bit dtype (NAdam's carried mu_product its float32, which torch's
    load_state_dict would cast to the parameter's) and the next steps are
    those of the uninterrupted run."""
    def make(ps):
        return getattr(ft, name)(ps, **RULES[name])
    model = [torch.nn.Parameter(v.to(torch.bfloat16)) for v in values()]
    opt = make(model)
    for k in range(2):
        for p, g in zip(model, grads(k)):
            p.grad = g.to(torch.bfloat16)
        opt.step()
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    model2 = [torch.nn.Parameter(p.detach().clone()) for p in model]
    opt2 = make(model2)
    buf.seek(0)
    opt2.load_state_dict(torch.load(buf))
    for k in range(2, 4):
        for p, q, g in zip(model, model2, grads(k)):
            p.grad = g.to(torch.bfloat16)
            q.grad = p.grad.clone()
        opt.step()
        opt2.step()
    same(snapshot(opt, model), snapshot(opt2, model2))
    assert opt2.state[model2[0]]["exp_avg"].dtype == torch.bfloat16
    if name == "NAdam":
        assert opt2.state[model2[0]]["mu_product"].dtype == torch.float32


def test_step_options_on_a_float16_model():
    """An inf in a float16 gradient skips the step with nothing written; a
    scale divides the gradients inside the step (as dividing them first);
    a global-norm clip is the float32 step's clip of the widened gradients;
    a gradient that is not contiguous is read as its contiguous copy."""
    model = [torch.nn.Parameter(v.to(torch.float16)) for v in values()]
    opt = ft.AdamW(model, lr=0.01)
    for p, g in zip(model, grads(0)):
        p.grad = g.to(torch.float16)
    opt.step()
    before = snapshot(opt, model)
    model[1].grad[3] = float("inf")
    opt.step(skip_if_nonfinite=True)
    assert not opt.last_step.applied
    same(before, snapshot(opt, model))
    ref = [torch.nn.Parameter(p.detach().clone()) for p in model]
    opt_ref = ft.AdamW(ref, lr=0.01)
    opt_ref.load_state_dict(copy.deepcopy(opt.state_dict()))     # (not its tensors)
    for p, r, g in zip(model, ref, grads(1)):
        p.grad = (g * 8).to(torch.float16)
        r.grad = p.grad / 8
    opt.step(grad_scale=8.0)
    opt_ref.step()
    same(snapshot(opt, model), snapshot(opt_ref, ref))
    wide = [torch.nn.Parameter(p.detach().float()) for p in model]
    opt_wide = ft.AdamW(wide, lr=0.01)
    opt_wide.load_state_dict(copy.deepcopy(opt.state_dict()))
    for p, w, g in zip(model, wide, grads(2)):
        p.grad = (g * 3).to(torch.float16)
        w.grad = p.grad.float()
    opt.step(max_grad_norm=0.5)
    opt_wide.step(max_grad_norm=0.5)
    assert opt.last_step.norm == opt_wide.last_step.norm > 0.5
    _round(opt_wide, wide, torch.float16)
    for p, w in zip(model, wide):
        assert torch.equal(p.detach().float(), w.detach())
        assert torch.equal(opt.state[p]["exp_avg"].float(), opt_wide.state[w]["exp_avg"])
    p = torch.nn.Parameter(torch.ones(4, 3, dtype=torch.float16))
    q = torch.nn.Parameter(p.detach().clone())
    g = torch.randn(3, 4).to(torch.float16)
    p.grad, q.grad = g.t(), g.t().contiguous()
    o1, o2 = ft.Adam([p], lr=0.1), ft.Adam([q], lr=0.1)
    o1.step()
    o2.step()
    assert not p.grad.is_contiguous() and torch.equal(p, q)


def test_refusals_write_nothing():
    """16-bit parameters where the rule or the options cannot take them in
    their own type: a clear error, nothing written."""
    def check(make, err, match, dt=torch.bfloat16):
        p = torch.nn.Parameter(torch.ones(4, dtype=dt))
        p.grad = torch.ones(4, dtype=dt)
        q = torch.nn.Parameter(torch.ones(4))
        q.grad = torch.ones(4)
        opt = make([q, p])
        before = snapshot(opt, [q, p])
        with pytest.raises(err, match=match):
            opt.step()
        same(before, snapshot(opt, [q, p]))
    where = r"param_groups\[0\]\['params'\]\[1\]"
    check(lambda ps: ft.LAMB(ps), TypeError, rf"LAMB.step: {where} has dtype "
          r"torch.bfloat16; this optimizer updates float32 or float64 tensors, or "
          r"torch.bfloat16 ones through float32 masters \(pass master_weights=True\)")
    check(lambda ps: ft.OnnxAdam(ps, lr=0.1), TypeError, r"OnnxAdam.step: .*master_weights=True")
    check(lambda ps: ft.Adam(ps, state_rounding="stochastic"), ValueError,
          rf"Adam.step: {where} has dtype torch.float16, whose states round to nearest "
          r"only; state_rounding='stochastic' needs bfloat16 states", torch.float16)
    check(lambda ps: ft.Adam(ps, state_dtype="bfloat16"), TypeError,
          rf"{where} has dtype torch.float16; state_dtype='bfloat16' keeps the states of "
          r"float32 or bfloat16 parameters", torch.float16)
    check(lambda ps: ft.Adam(ps, state_dtype="float32"), TypeError,
          rf"{where} has dtype torch.bfloat16; state_dtype='float32' keeps")
    p = torch.nn.Parameter(torch.ones(4, 3, dtype=torch.bfloat16).t())
    p.grad = torch.ones(3, 4, dtype=torch.bfloat16)
    opt = ft.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match=r"\(torch.bfloat16\) is not contiguous"):
        opt.step()
    assert torch.equal(p.detach(), torch.ones(3, 4, dtype=torch.bfloat16))


def test_bfloat16_states_of_bfloat16_parameters_may_round_stochastically():
    """state_rounding='stochastic' on a bfloat16 model: its states round
    stochastically (a second moment at beta2 = 0.999 keeps decaying where
    nearest rounding holds it), the parameters to nearest."""
    def v_after(rounding):
        p = torch.nn.Parameter(torch.zeros(20000, dtype=torch.bfloat16))
        opt = ft.Adam([p], lr=0.0, betas=(0.9, 0.999), state_rounding=rounding, seed=3)
        p.grad = torch.ones_like(p)
        opt.step()
        p.grad = torch.zeros_like(p)
        for _ in range(50):
            opt.step()
        return opt.state[p]["exp_avg_sq"].float()
    near, sr = v_after("nearest"), v_after("stochastic")
    assert torch.all(near == near[0])              # stalled: no decay at all
    exact = 0.001 * 0.999 ** 50
    assert near[0] > exact * 1.04
    assert abs(sr.double().mean().item() / exact - 1) < 2e-3


def test_the_core_takes_16_bit_parameters_only_as_asked():
    """fastopt._ext.step, as the drop-ins call it: 16-bit parameters only
    with half_params=True, never for a rule with a trust pass (LAMB), and
    float16 states only for a group that rounds to nearest; a decline
    writes nothing."""
    import numpy as np

    from fastopt import _ext, _rules, _step
    nearest, none = _step.ROUNDING["nearest"], 0
    for dt, flags, rule, half, ok in [
            (np.float16, nearest, "adamw_torch", True, True),
            (np.float16, nearest, "adamw_torch", False, False),
            (np.float16, none, "adamw_torch", True, False),
            (np.float16, nearest, "lamb", True, False),
            (np.float32, nearest, "lamb", True, True)]:         # (the group itself is fine)
        x, g = np.ones(100, dt), np.full(100, 0.5, dt)
        m, v = np.zeros(100, dt), np.zeros(100, dt)
        grp = _step.group_tuple(_rules.ID[rule], t=1, lr=0.1, alpha=0.9, beta=0.999,
                                eps=1e-8, flags=flags)
        out = _ext.step((x,), (g,), (m,), (v,), (None,), (0,), (grp,), 1.0, 0.0, 0.0, 0, 0,
                        False, 1, half_params=half)
        assert (out is not None) == ok
        assert (x != 1).all() == ok and (m != 0).all() == ok and (v != 0).all() == ok


@pytest.mark.parametrize("options", [dict(max_grad_norm=0.5, clip_convention="optax"),
                                     dict(grad_scale=3.0),
                                     dict(grad_scale=3.0, max_grad_norm=0.5)])
@pytest.mark.parametrize("name", ["AdamW", "SGD", "RMSprop", "NAdam"])
def test_bfloat16_steps_with_step_options_are_the_float32_step_rounded(name, options):
    """The step options a bfloat16 model's loops take through a tile of
    transformed gradients (an optax clip, a scale that is not a power of
    two): still the float32 step on the widened values, rounded."""
    pair = _pair(name, torch.bfloat16)
    for k in range(4):
        _step_rounded(pair, torch.bfloat16, k, scale=3, **options)
