"""fastopt.torch's step runs torch's step hooks and profiler range as
torch.optim's own step does (fastopt/torch/_hooks.py)."""
import pytest

torch = pytest.importorskip("torch")

from torch.optim import optimizer as _topt  # noqa: E402

import fastopt.torch as ft  # noqa: E402
from fastopt.torch import _hooks  # noqa: E402


def _model(seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.nn.Parameter(torch.randn(5, 3, generator=g)),
          torch.nn.Parameter(torch.randn(7, generator=g))]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    return ps


def _log_hooks(opt, log):
    """Every kind of hook on opt and globally, each noting what it saw."""
    handles = [
        _topt.register_optimizer_step_pre_hook(
            lambda o, a, k: log.append(("global pre", o is opt, a[0] is opt, dict(k)))),
        opt.register_step_pre_hook(
            lambda o, a, k: log.append(("pre", o is opt, len(a), dict(k)))),
        opt.register_step_post_hook(
            lambda o, a, k: log.append(("post", o is opt, len(a), dict(k)))),
        _topt.register_optimizer_step_post_hook(
            lambda o, a, k: log.append(("global post", o is opt, len(a), dict(k)))),
    ]
    return handles


@pytest.mark.parametrize("flat", [False, True])
def test_the_hooks_run_as_torch_runs_them(flat):
    logs = []
    for opt in (torch.optim.AdamW(_model(), lr=0.1),
                ft.AdamW(_model(), lr=0.1, flat=flat)):
        log = []
        handles = _log_hooks(opt, log)
        try:
            opt.step()
            opt.step(closure=None)
        finally:
            for h in handles:
                h.remove()
        opt.step()          # removed: nothing more is noted
        logs.append(log)
    assert logs[0] == logs[1]
    assert [e[0] for e in logs[1][:4]] == ["global pre", "pre", "post", "global post"]
    assert all(e[1] for e in logs[1])


def test_a_pre_hook_may_replace_the_arguments():
    ps, ref = _model(), _model()
    calls = []

    def closure():
        calls.append(1)
        return torch.tensor(3.0)

    opt = ft.SGD(ps, lr=0.5)
    opt.register_step_pre_hook(lambda o, a, k: (a, {"closure": closure}))
    loss = opt.step()
    assert calls == [1] and float(loss) == 3.0
    torch.optim.SGD(ref, lr=0.5).step()
    assert all(torch.equal(p, r) for p, r in zip(ps, ref))


def test_a_pre_hook_returning_something_else_is_an_error():
    opt = ft.SGD(_model(), lr=0.5)
    before = [p.detach().clone() for p in opt.param_groups[0]["params"]]
    opt.register_step_pre_hook(lambda o, a, k: 7)
    with pytest.raises(RuntimeError, match="must return None or a tuple"):
        opt.step()
    assert all(torch.equal(p, b) for p, b in zip(opt.param_groups[0]["params"], before))


@pytest.mark.parametrize("flat", [False, True])
def test_the_step_is_a_named_range_under_the_profiler(flat):
    opt = ft.AdamW(_model(), lr=0.1, flat=flat)
    opt.step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        opt.step()
    names = {e.name for e in prof.events()}
    assert "Optimizer.step#AdamW.step" in names


@pytest.mark.skipif(not _hooks._OURS, reason="this torch wraps the step its own way")
def test_torch_does_not_wrap_the_step_again():
    opt = ft.Adam(_model(), lr=0.1)
    step = type(opt).step
    assert step.hooked is True
    assert step.__code__ is _hooks.hooked(lambda self: None).__code__


@pytest.mark.skipif(not _hooks._OURS, reason="this torch wraps the step its own way")
def test_no_profiler_range_is_opened_unless_a_profiler_records(monkeypatch):
    opened = []
    real = torch.autograd.profiler.record_function

    def counting(name, *a, **k):
        opened.append(name)
        return real(name, *a, **k)

    monkeypatch.setattr(torch.autograd.profiler, "record_function", counting)
    opt = ft.SGD(_model(), lr=0.1)
    opt.step()
    assert opened == []
    with torch.autograd.profiler.profile():         # the legacy profiler
        opt.step()
    assert opened == ["Optimizer.step#SGD.step"]


def test_post_hooks_see_the_replaced_arguments_and_the_step_code_runs():
    opt = ft.SGD(_model(), lr=0.5)
    seen, code = [], []
    opt.register_step_pre_hook(lambda o, a, k: (a, {"closure": lambda: 1.0}))
    opt.register_step_post_hook(lambda o, a, k: seen.append(dict(k)))
    opt._optimizer_step_code = lambda: code.append(1)
    assert opt.step() == 1.0
    assert [list(k) for k in seen] == [["closure"]] and code == [1]


def test_an_error_in_the_step_skips_the_post_hooks():
    opt = ft.SGD(_model(), lr=0.5)
    posts = []
    opt.register_step_post_hook(lambda o, a, k: posts.append(1))
    with pytest.raises(ZeroDivisionError):
        opt.step(closure=lambda: 1 / 0)
    assert posts == []


@pytest.mark.parametrize("flat", [False, True])
def test_a_subclass_overriding_step_runs_the_hooks_once(flat):
    class Mine(ft.AdamW):
        def step(self, closure=None):
            return super().step(closure)

    ps, ref = _model(), _model()
    opt = Mine(ps, lr=0.1, flat=flat)
    calls = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    opt.step()
    assert calls == ["pre", "post"]
    ft.AdamW(ref, lr=0.1).step()
    assert all(torch.equal(p, r) for p, r in zip(ps, ref))


def test_a_class_step_wrapped_by_the_user_still_runs_the_hooks(monkeypatch):
    """A wrapper made with functools.wraps copies the 'hooked' mark, so
    torch wraps nothing; the step inside still runs the hooks, once."""
    import functools
    inner = ft.SGD.step
    timed = []

    @functools.wraps(inner)
    def wrapper(self, *a, **k):
        timed.append(1)
        return inner(self, *a, **k)

    monkeypatch.setattr(ft.SGD, "step", wrapper)
    opt = ft.SGD(_model(), lr=0.5)
    calls = []
    opt.register_step_post_hook(lambda o, a, k: calls.append(1))
    opt.step()
    assert calls == [1] and timed == [1]


def test_hooks_run_once_after_a_pickle_round_trip_and_under_a_scheduler():
    import pickle
    opt = pickle.loads(pickle.dumps(ft.SGD(_model(), lr=0.5)))
    calls = []
    opt.register_step_post_hook(lambda o, a, k: calls.append(1))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.step()
    sched.step()
    assert calls == [1] and opt.param_groups[0]["lr"] == 0.25
