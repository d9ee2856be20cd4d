"""One naming scheme in every module: a function or class named after a
torch optimizer has torch's arguments, defaults and update; the ONNX forms
say ONNX in their names; the former names warn and still work."""
import inspect
import warnings

import numpy as np
import pytest

import fastopt
import fastopt.optim

TORCH_NAMES = ["SGD", "Adagrad", "Adam", "AdamW", "RMSprop"]
# torch's switches for its own implementations, not hyperparameters of the update
SWITCHES = {"foreach", "fused", "capturable", "differentiable"}
# what only says how to fill a state the caller of a function allocates
FUNCTION_SKIPS = {"initial_accumulator_value"}


def _torch_hyper(name, skip=()):
    torch = pytest.importorskip("torch")
    sig = inspect.signature(getattr(torch.optim, name))
    return [(p.name, p.default) for p in sig.parameters.values()
            if p.name != "params" and p.name not in SWITCHES and p.name not in skip]


def _leading(sig, names):
    """The parameters of sig named in ``names``, in sig's order, and the
    position of the last one among all of sig's parameters."""
    ps = list(sig.parameters.values())
    picked = [(p.name, p.default) for p in ps if p.name in names]
    last = max((i for i, p in enumerate(ps) if p.name in names), default=-1)
    return picked, ps, last


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_fastopt_torch_class_has_torchs_signature_then_extras(name):
    torch = pytest.importorskip("torch")
    import fastopt.torch

    ours = list(inspect.signature(getattr(fastopt.torch, name)).parameters.values())
    theirs = list(inspect.signature(getattr(torch.optim, name)).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours[:len(theirs)]] == [
        (p.name, p.kind, p.default) for p in theirs]
    assert all(p.default is not inspect.Parameter.empty for p in ours[len(theirs):])


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_fastopt_optim_class_has_torchs_hyperparameters_then_extras(name):
    want = _torch_hyper(name)
    sig = inspect.signature(getattr(fastopt.optim, name))
    got, ps, last = _leading(sig, {n for n, _ in want})
    assert got == want
    assert ps[0].name == "params"
    assert last == len(want)          # torch's come first, right after params


@pytest.mark.parametrize("name", TORCH_NAMES)
def test_public_function_has_torchs_hyperparameters_then_extras(name):
    want = _torch_hyper(name, skip=FUNCTION_SKIPS)
    fn = getattr(fastopt, name.lower())
    sig = inspect.signature(fn)
    got, ps, last = _leading(sig, {n for n, _ in want})
    assert got == want
    first = next(i for i, p in enumerate(ps) if p.kind is inspect.Parameter.KEYWORD_ONLY)
    assert last == first + len(want) - 1   # torch's come first after the tensor lists


def test_onnx_forms_say_onnx():
    for fn in (fastopt.onnx_momentum, fastopt.onnx_adagrad, fastopt.onnx_adam):
        assert fn.__name__.startswith("onnx_") and fn.__doc__.startswith("ONNX")
    for cls in (fastopt.optim.OnnxMomentum, fastopt.optim.OnnxAdagrad,
                fastopt.optim.OnnxAdam):
        assert "ONNX" in cls.__doc__.split("\n")[0]
    assert "t=0" in fastopt.onnx_adam.__doc__


def test_adam_is_torchs_and_onnx_adam_keeps_the_onnx_step():
    g = np.array([1.0, -1.0])
    x = np.zeros(2)
    fastopt.adam(x, g, np.zeros(2), np.zeros(2), lr=0.1, step=1)
    y = np.zeros(2)
    fastopt.onnx_adam(y, g, np.zeros(2), np.zeros(2), lr=0.1, t=1)
    # torch adds eps 1e-8 after the bias correction, ONNX 1e-6 before it
    assert np.allclose(x, [-0.1, 0.1], atol=1e-7) and np.allclose(y, [-0.1, 0.1], atol=1e-5)
    assert not np.array_equal(x, y)


def _torch_step(name, kw, x, g, steps=3):
    torch = pytest.importorskip("torch")
    p = torch.tensor(x.copy(), requires_grad=True)
    opt = getattr(torch.optim, name)([p], **kw)
    for _ in range(steps):
        p.grad = torch.tensor(g)
        opt.step()
    return p.detach().numpy()


@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=1e-2, nesterov=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1)),
    ("Adam", dict(lr=0.01, weight_decay=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.01, decoupled_weight_decay=True)),
])
def test_fastopt_optim_torch_named_class_steps_as_torch(name, kw):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(17)
    g = rng.standard_normal(17)
    want = _torch_step(name, kw, x, g)
    p = x.copy()
    opt = getattr(fastopt.optim, name)([p], **kw)
    for _ in range(3):
        opt.step([g])
    np.testing.assert_allclose(p, want, rtol=1e-12, atol=1e-12)


OLD = [
    (fastopt, "momentum", "onnx_momentum"),
    (fastopt, "sgd_torch", "sgd"),
    (fastopt, "adagrad_torch", "adagrad"),
    (fastopt, "adam_torch", "adam"),
    (fastopt.optim, "Momentum", "OnnxMomentum"),
    (fastopt.optim, "AdamTorch", "Adam"),
]


@pytest.mark.parametrize("module,old,new", OLD, ids=[o for _, o, _ in OLD])
def test_former_name_warns_and_is_the_new_object(module, old, new):
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated.*{new}"):
        obj = getattr(module, old)
    assert obj is getattr(module, new)


def test_former_function_name_still_updates():
    x = np.ones(3, np.float32)
    v = np.zeros_like(x)
    with pytest.warns(DeprecationWarning):
        fn = fastopt.momentum
    fn(x, np.full(3, 0.5, np.float32), v, lr=0.1, t=0)
    assert np.array_equal(x, np.full(3, 0.95, np.float32))


def test_former_torch_momentum_name_warns():
    pytest.importorskip("torch")
    import fastopt.torch

    with pytest.warns(DeprecationWarning, match="OnnxMomentum"):
        assert fastopt.torch.Momentum is fastopt.torch.OnnxMomentum


def test_checkpoint_saved_under_a_former_name_still_loads():
    a = [np.ones(3)]
    opt = fastopt.optim.OnnxAdam(a, lr=0.1)
    opt.step([np.full(3, 0.5)])
    sd = opt.state_dict()
    sd["optimizer"] = "Adam"          # as the class was called before
    b = [np.ones(3)]
    again = fastopt.optim.OnnxAdam(b, lr=0.1)
    again.load_state_dict(sd)
    assert again.steps == 1


def test_new_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in ("sgd", "adagrad", "adam", "adamw", "rmsprop", "onnx_momentum",
                  "onnx_adagrad", "onnx_adam"):
            getattr(fastopt, n)
        for n in fastopt.optim.__all__:
            getattr(fastopt.optim, n)
