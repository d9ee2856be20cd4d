"""Mixed precision in fastopt.torch: bfloat16/float16 parameters through
float32 masters (``master_weights=True``), bfloat16 states
(``state_dtype="bfloat16"``) and torch.amp.GradScaler's fused unscale.

The contract is the NumPy API's: a master's trajectory is bit for bit the
float32 step's on the gradients widened, the 16-bit parameter is its
master rounded as ``.to()`` rounds, and bfloat16 states are those of the
functional form with the same keys.
"""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch_helpers import count_calls, randn_list, same, snapshot  # noqa: E402

import fastopt  # noqa: E402
import fastopt.torch as ft  # noqa: E402  (after the importorskip)
import fastopt.torch._prep as tp  # noqa: E402

HALVES = [torch.bfloat16, torch.float16]
RULES = {"SGD": dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
         "Adagrad": dict(lr=0.1, weight_decay=0.01, initial_accumulator_value=0.1),
         "Adam": dict(lr=0.01, weight_decay=0.01, amsgrad=True),
         "AdamW": dict(lr=0.01),
         "RMSprop": dict(lr=0.01, momentum=0.5, centered=True),
         "Lion": dict(lr=0.01, weight_decay=0.1)}
SHAPES = [(6, 5), (7,), (3, 2, 4)]


@pytest.fixture
def ran(monkeypatch):
    """The number of steps the prepared plan applied or skipped (not declined)."""
    return count_calls(monkeypatch, tp.Prepared, "run")


def values(seed=0):
    return randn_list(SHAPES, seed)


def grads(k):
    return randn_list(SHAPES, 100 + k)


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("name", sorted(RULES))
def test_masters_step_as_float32_on_widened_gradients(name, half, ran):
    """The masters follow the float32 drop-in fed the 16-bit gradients
    widened, bit for bit; each 16-bit parameter is its master rounded;
    a float32 parameter among them is its own master. The steps after the
    first take the prepared step."""
    vs = values()
    model = [torch.nn.Parameter(v.to(half)) for v in vs[:2]] + [torch.nn.Parameter(vs[2])]
    ref = [torch.nn.Parameter(p.detach().float()) for p in model]
    opt = getattr(ft, name)(model, master_weights=True, **RULES[name])
    opt_ref = getattr(ft, name)(ref, **RULES[name])
    for k in range(4):
        for p, r, g in zip(model, ref, grads(k)):
            p.grad = g.to(p.dtype)
            r.grad = p.grad.float()
        opt.step()
        opt_ref.step()
        for p, r in zip(model[:2], ref):
            master = opt.state[p]["master_param"]
            assert master.dtype == torch.float32
            assert torch.equal(master, r.detach())
            assert p.dtype == half and torch.equal(p.detach(), r.detach().to(half))
        assert torch.equal(model[2].detach(), ref[2].detach())
        assert "master_param" not in opt.state[model[2]]
        for name_ in opt.state[model[0]]:
            if name_ not in ("master_param", "step"):
                assert opt.state[model[0]][name_].dtype == torch.float32
    assert ran[0] == 6          # both optimizers' steps after their first: prepared


@pytest.mark.parametrize("n_threads", [1, 3])
def test_bf16_states_are_the_functional_forms(n_threads, ran):
    """state_dtype='bfloat16' stores what fastopt.adamw stores with bfloat16
    states and the same seed (parameter k's key: seed + k * KEY_STEP)."""
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    model = [torch.nn.Parameter(v) for v in values()]
    xs = [p.detach().numpy().copy() for p in model]
    ms = [np.zeros(x.shape, bf16) for x in xs]
    vs = [np.zeros(x.shape, bf16) for x in xs]
    opt = ft.AdamW(model, lr=0.01, betas=(0.9, 0.999), state_dtype="bfloat16", seed=11,
                   n_threads=n_threads)
    for k in range(3):
        gs = grads(k)
        for p, g in zip(model, gs):
            p.grad = g
        opt.step()
        assert ran[0] == k                  # the steps after the first: prepared
        fastopt.adamw(xs, [g.numpy() for g in gs], ms, vs, step=k + 1, lr=0.01,
                      betas=(0.9, 0.999), seed=11, n_threads=n_threads)
        for p, x, m, v in zip(model, xs, ms, vs):
            st = opt.state[p]
            assert st["exp_avg"].dtype == torch.bfloat16
            np.testing.assert_array_equal(p.detach().numpy(), x)
            np.testing.assert_array_equal(st["exp_avg"].view(torch.int16).numpy(),
                                          m.view(np.int16))
            np.testing.assert_array_equal(st["exp_avg_sq"].view(torch.int16).numpy(),
                                          v.view(np.int16))


@pytest.mark.parametrize("name", ["Adam", "NAdam"])
def test_checkpoint_keeps_masters_and_bf16_states(name):
    """A state_dict round trip (through torch.save) keeps the float32 masters,
    the bfloat16 states and a carried scalar (NAdam's mu_product), which
    torch's load_state_dict would cast to the parameter's dtype, also of a
    0-d parameter; the resumed run equals the uninterrupted one."""
    def make():
        model = [torch.nn.Parameter(v.to(torch.bfloat16)) for v in values()]
        model.append(torch.nn.Parameter(torch.tensor(0.5, dtype=torch.bfloat16)))
        return model, getattr(ft, name)(model, lr=0.01, master_weights=True,
                                        state_dtype="bfloat16", seed=5)
    def set_grads(ps, k):
        for p, g in zip(ps, grads(k) + [torch.tensor(0.25 * k - 0.3)]):
            p.grad = g.to(torch.bfloat16)

    model, opt = make()
    for k in range(2):
        set_grads(model, k)
        opt.step()
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    model2, opt2 = make()
    with torch.no_grad():
        for p, q in zip(model, model2):
            q.copy_(p)
    buf.seek(0)
    opt2.load_state_dict(torch.load(buf))
    for p, q in zip(model, model2):
        for key, v in opt.state[p].items():
            assert opt2.state[q][key].dtype == v.dtype
            assert torch.equal(opt2.state[q][key], v)
        assert opt2.state[q]["master_param"].dtype == torch.float32
        assert opt2.state[q]["exp_avg"].dtype == torch.bfloat16
    for k in range(2, 4):
        set_grads(model, k)
        set_grads(model2, k)
        opt.step()
        opt2.step()
    same(snapshot(opt, model), snapshot(opt2, model2))


EDITS = {"clamp_": lambda p: p.clamp_(-0.01, 0.01),
         "init": lambda p: torch.nn.init.zeros_(p),
         "copy_ (load_state_dict)": lambda p: p.copy_(torch.full_like(p, 0.25)),
         "data replaced": lambda p: setattr(p, "data", torch.full_like(p, -0.5))}


@pytest.mark.parametrize("edit", list(EDITS))
@pytest.mark.parametrize("half", HALVES)
def test_a_parameter_edited_between_steps_is_where_the_next_step_starts(edit, half):
    """Weight clipping, a re-initialised layer, weights loaded into the
    model: as with torch.optim, the step goes on from the edited weights
    (its master takes them), on the prepared route too."""
    p = torch.nn.Parameter(torch.randn(64, generator=torch.Generator().manual_seed(0))
                           .to(half))
    opt = ft.SGD([p], lr=0.1, master_weights=True)
    for k in range(3):
        p.grad = torch.randn(64, generator=torch.Generator().manual_seed(k)).to(half)
        opt.step()
    with torch.no_grad():
        EDITS[edit](p)
    edited = p.detach().clone()
    p.grad = torch.zeros(64, dtype=half)        # a step that moves nothing
    opt.step()
    assert torch.equal(p.detach(), edited)
    assert torch.equal(opt.state[p]["master_param"], edited.float())


def test_a_step_that_raises_leaves_an_edited_parameters_master():
    """The masters are taken from edited parameters before the step's
    checks; a step that then raises puts them back (nothing changed), and
    the next one takes the edit."""
    p = torch.nn.Parameter(torch.randn(64, generator=torch.Generator().manual_seed(0))
                           .to(torch.bfloat16))
    opt = ft.SGD([p], lr=0.1, master_weights=True)
    p.grad = torch.ones(64, dtype=torch.bfloat16)
    opt.step()
    with torch.no_grad():
        p.clamp_(-0.01, 0.01)
    before = opt.state[p]["master_param"].clone()
    opt.param_groups[0]["lr"] = -1.0                       # refused
    with pytest.raises(ValueError, match="lr"):
        opt.step()
    assert torch.equal(opt.state[p]["master_param"], before)
    opt.param_groups[0]["lr"] = 0.1
    p.grad = torch.zeros(64, dtype=torch.bfloat16)
    edited = p.detach().clone()
    opt.step()
    assert torch.equal(p.detach(), edited)


def test_a_parameter_moved_with_its_values_keeps_its_master():
    """share_memory_() moves a parameter's memory, not its values: the
    master keeps its precision."""
    p = torch.nn.Parameter(torch.ones(8, dtype=torch.bfloat16))
    opt = ft.SGD([p], lr=1e-4, master_weights=True)
    for _ in range(3):
        p.grad = torch.ones(8, dtype=torch.bfloat16)
        opt.step()
    want = opt.state[p]["master_param"].clone()
    p.share_memory_()
    p.grad = torch.zeros(8, dtype=torch.bfloat16)
    opt.step()
    assert torch.equal(opt.state[p]["master_param"], want)


def test_masters_keep_their_precision_when_nothing_edits_the_parameter():
    """Updates below the 16-bit resolution accumulate in the master (it is
    not taken from the parameter each step), also across a state dict."""
    p = torch.nn.Parameter(torch.ones(8, dtype=torch.bfloat16))
    opt = ft.SGD([p], lr=1e-4, master_weights=True)
    want = torch.ones(8)
    for _ in range(10):
        p.grad = torch.ones(8, dtype=torch.bfloat16)
        opt.step()
        want = want - 1e-4 * 1.0        # in float32, as the step
    assert torch.equal(p.detach(), torch.ones(8, dtype=torch.bfloat16))  # below an ulp
    assert torch.equal(opt.state[p]["master_param"], want)
    sd = opt.state_dict()
    other = ft.SGD([p], lr=1e-4, master_weights=True)
    other.load_state_dict(sd)
    p.grad = torch.ones(8, dtype=torch.bfloat16)
    other.step()
    assert torch.equal(other.state[p]["master_param"], want - 1e-4)


def test_a_master_older_than_its_parameter_gives_way():
    """A master_param carried through an optimizer that did not keep it
    (fastopt without master weights, torch.optim) no longer rounds to the
    parameter: the weights win, not the stale master."""
    p = torch.nn.Parameter(torch.randn(100, generator=torch.Generator().manual_seed(0))
                           .to(torch.bfloat16))
    a = ft.SGD([p], lr=0.1, master_weights=True)
    for k in range(3):
        p.grad = torch.randn(100, generator=torch.Generator().manual_seed(k)).to(p.dtype)
        a.step()
    b = ft.SGD([p], lr=0.1)
    b.load_state_dict(a.state_dict())
    for k in range(3):
        p.grad = torch.randn(100, generator=torch.Generator().manual_seed(9 + k)).to(p.dtype)
        b.step()
    trained = p.detach().clone()
    c = ft.SGD([p], lr=0.1, master_weights=True)
    c.load_state_dict(b.state_dict())
    p.grad = torch.zeros(100, dtype=p.dtype)
    c.step()
    assert torch.equal(p.detach(), trained)


def test_prepared_step_declines_a_replaced_master():
    """The prepared step checks the master as it checks a state: one
    replaced (here by a float64 tensor) sends the step to the full route,
    which refuses it with nothing written."""
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = ft.Adam([p], lr=0.1, master_weights=True)
    for _ in range(2):
        p.grad = torch.ones(4, dtype=torch.bfloat16)
        opt.step()
    assert opt._prep is not None
    opt.state[p]["master_param"] = opt.state[p]["master_param"].clone()   # same dtype
    p.grad = torch.ones(4, dtype=torch.bfloat16)
    opt.step()                                      # declined, then the full route
    assert torch.equal(p.detach(), opt.state[p]["master_param"].to(torch.bfloat16))
    opt.state[p]["master_param"] = opt.state[p]["master_param"].double()
    before = snapshot(opt, [p])
    with pytest.raises(TypeError, match="master_param"):
        opt.step()
    same(before, snapshot(opt, [p]))


def test_refusals_write_nothing():
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    p.grad = torch.ones(4, dtype=torch.bfloat16)
    q = torch.nn.Parameter(torch.ones(4))
    q.grad = torch.ones(4)
    opt = ft.LARS([q, p], lr=0.1)
    before = snapshot(opt, [q, p])
    with pytest.raises(TypeError, match=r"LARS.step: param_groups\[0\]\['params'\]\[1\] "
                       r"has dtype torch.bfloat16.*master_weights=True"):
        opt.step()
    same(before, snapshot(opt, [q, p]))
    # a master replaced by one of another dtype: refused, nothing written
    opt = ft.AdamW([q, p], lr=0.1, master_weights=True)
    opt.step()
    opt.state[p]["master_param"] = opt.state[p]["master_param"].double()
    before = snapshot(opt, [q, p])
    with pytest.raises(TypeError, match=r"state\['master_param'\] of param_groups\[0\]"
                       r"\['params'\]\[1\] has dtype torch.float64; the optimizer keeps "
                       r"it in torch.float32"):
        opt.step()
    same(before, snapshot(opt, [q, p]))
    with pytest.raises(ValueError, match="flat=True does not combine with master_weights"):
        ft.SGD([q], master_weights=True, flat=True)
    with pytest.raises(ValueError, match="state_dtype must be None, 'float32', "
                       "'bfloat16'.*'int8-blockwise', got 'float16'"):
        ft.Adam([q], state_dtype="float16")
    b = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    b.grad = torch.ones(3, dtype=torch.bfloat16)
    opt = ft.LAMB([b], state_dtype="bfloat16")     # its trust pass reads float parameters
    with pytest.raises(TypeError, match=r"torch.bfloat16 ones through float32 masters "
                       r"\(pass master_weights=True\)"):
        opt.step()
    assert torch.equal(b.detach(), torch.ones(3, dtype=torch.bfloat16)) and not opt.state
    with pytest.raises(TypeError, match="master_weights must be True or False"):
        ft.Adam([q], master_weights=1)
    with pytest.raises(ValueError, match="state_rounding must be"):
        ft.Adam([q], state_dtype="bfloat16", state_rounding="up")
    d = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    d.grad = torch.ones(3, dtype=torch.float64)
    for dt in (torch.bfloat16, "float32"):
        opt = ft.Adam([d], state_dtype=dt)
        with pytest.raises(TypeError, match=r"Adam.step: param_groups\[0\]\['params'\]\[0\] "
                           r"has dtype torch.float64; state_dtype='(bfloat16|float32)' keeps "
                           r"the states of float32 parameters"):
            opt.step()
        assert torch.equal(d.detach(), torch.ones(3, dtype=torch.float64))
        assert not opt.state
    with pytest.raises(ValueError, match="flat=True does not combine"):
        ft.Adam([d], state_dtype="float32", flat=True)
    h = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match=r"has dtype torch.bfloat16; flat=True lays out "
                       r"float32 or float64 parameters, or 16-bit ones of the rules"):
        ft.LAMB([h], flat=True)
    with pytest.raises(ValueError, match=r"has dtype torch.bfloat16; flat=True rounds 16-bit "
                       r"states to nearest"):
        ft.SGD([h], flat=True, state_rounding="stochastic")
    assert torch.equal(h.detach(), torch.ones(3, dtype=torch.bfloat16))


def _scaled_run(make_opt, inf_at, unscale_first, steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 2)).double()
    opt = make_opt(model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    x = torch.randn(16, 5, dtype=torch.float64)
    out = []
    for k in range(steps):
        opt.zero_grad()
        loss = model(x).square().mean() * (float("inf") if k == inf_at else 1.0)
        scaler.scale(loss).backward()
        if unscale_first:                   # e.g. to clip: the step gets no scale
            scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        out.append(([p.detach().clone() for p in model.parameters()], scaler.get_scale()))
    return out


@pytest.mark.parametrize("unscale_first", [False, True])
def test_grad_scaler_unscales_in_the_step_and_skips_on_inf(unscale_first):
    """torch.amp.GradScaler hands fastopt its scale and found_inf (no
    separate unscale of the gradients unless the user asks for one); the
    trajectory is torch.optim's, and the step with an inf gradient is
    skipped by both."""
    ours = _scaled_run(lambda ps: ft.Adam(ps, lr=0.01), 2, unscale_first)
    theirs = _scaled_run(lambda ps: torch.optim.Adam(ps, lr=0.01), 2, unscale_first)
    for (a, sa), (b, sb) in zip(ours, theirs):
        assert sa == sb
        for u, v in zip(a, b):
            torch.testing.assert_close(u, v, rtol=1e-12, atol=1e-14)
    for u, v in zip(ours[1][0], ours[2][0]):
        assert torch.equal(u, v)            # the inf step wrote nothing
    assert ours[3][1] == ours[1][1] / 2     # and the scale backed off


def test_grad_scaler_scale_reaches_the_c_step():
    """The scale GradScaler sets is divided out by the C step itself (the
    gradients keep their scaled values)."""
    p = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    opt = ft.SGD([p], lr=1.0)
    p.grad = torch.full((3,), 8.0, dtype=torch.float64)
    opt.grad_scale = torch.tensor(4.0)
    opt.found_inf = torch.tensor(0.0)
    opt.step()
    assert torch.equal(p.detach(), torch.full((3,), -2.0, dtype=torch.float64))
    assert torch.equal(p.grad, torch.full((3,), 8.0, dtype=torch.float64))
    opt.found_inf = torch.tensor(1.0)
    opt.step()
    assert torch.equal(p.detach(), torch.full((3,), -2.0, dtype=torch.float64))
    assert not opt.last_step.applied
    with pytest.raises(ValueError, match="max_grad_norm"):   # checked, skip or not
        opt.step(max_grad_norm=-1.0)


def test_grad_scaler_with_float16_masters_clips_in_the_step():
    """A float16 model through masters under GradScaler, clipped by the step
    (torch's unscale_ refuses float16 gradients): the masters are the
    float32 drop-in's, fed the unscaled gradients and clipped alike."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(6, 4).half())
    ref = torch.nn.Parameter(w.detach().float())
    opt = ft.AdamW([w], lr=0.01, master_weights=True)
    opt_ref = ft.AdamW([ref], lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
    for k in range(3):
        scaler.scale(torch.ones(()))        # (the scaler starts on its first scale)
        g = torch.randn(6, 4, generator=torch.Generator().manual_seed(k))
        w.grad = (g * scaler.get_scale()).half()
        ref.grad = w.grad.float() / scaler.get_scale()
        scaler.step(opt, max_grad_norm=0.5)
        scaler.update()
        opt_ref.step(max_grad_norm=0.5)
        assert torch.equal(opt.state[w]["master_param"], ref.detach())


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("dtype, options", [
    (torch.float32, {}), (torch.float64, {}), (torch.float32, {"state_dtype": "float32"}),
    (torch.float32, {"state_dtype": "int8-blockwise"}),
    (torch.bfloat16, {"master_weights": True}), (torch.float16, {"master_weights": True})])
def test_state_rounding_without_16_bit_states_is_refused(rounding, dtype, options):
    """state_rounding rounds 16-bit states: an optimizer with none would
    ignore it, so it is refused; bfloat16 states or a bfloat16 model in its
    own type take it."""
    p = torch.nn.Parameter(torch.ones(5000, dtype=dtype))
    with pytest.raises(ValueError, match=rf"fastopt\.torch\.Adam: state_rounding='{rounding}' "
                                         r"rounds 16-bit states, and this optimizer keeps none"):
        ft.Adam([p], lr=0.1, state_rounding=rounding, **options)
    ft.Adam([p], lr=0.1, **options)
    if dtype in (torch.float32, torch.bfloat16) and "state_dtype" not in options:
        ft.Adam([p], lr=0.1, state_rounding=rounding, state_dtype="bfloat16", **options)
    ft.Adam([torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))], lr=0.1,
            state_rounding=rounding)
