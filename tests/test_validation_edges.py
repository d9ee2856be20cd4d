"""Inputs a NumPy API should refuse clearly, the callers' labels of
fastopt._dispatch, and the package's import behaviour (lazy submodules, what
a missing extension says)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from _subprocess import run_python

import fastopt
from fastopt import _dispatch, _ext, _ops


def f32(*shape, fill=1.0):
    return np.full(shape, fill, np.float32)


def masked(*shape):
    return np.ma.array(f32(*shape), mask=np.arange(np.prod(shape)).reshape(shape) % 2 == 0)


MASKED_CALLS = {
    "momentum x": lambda m: fastopt.onnx_momentum(m, f32(4), f32(4, fill=0), lr=0.1, t=0),
    "momentum g": lambda m: fastopt.onnx_momentum(f32(4), m, f32(4, fill=0), lr=0.1, t=0),
    "momentum v": lambda m: fastopt.onnx_momentum(f32(4), f32(4), m, lr=0.1, t=0),
    "momentum x[1]": lambda m: fastopt.onnx_momentum([f32(4), m], [f32(4), f32(4)],
                                                [f32(4, fill=0), f32(4, fill=0)],
                                                lr=0.1, t=0),
    "adam h": lambda m: fastopt.onnx_adam(f32(4), f32(4), f32(4, fill=0), m, lr=0.1, t=1),
    "adagrad x": lambda m: fastopt.onnx_adagrad(m, f32(4), f32(4, fill=0), lr=0.1, t=0),
    "clipped momentum x": lambda m: fastopt.onnx_momentum(m, f32(4), f32(4, fill=0), lr=0.1,
                                                     t=0, clipping=0.01),
    "agc x": lambda m: fastopt.agc(m, f32(4, fill=100.0), clipping=0.01),
    "agc g": lambda m: fastopt.agc(f32(4), m, clipping=0.01),
    "unitwise_norm x": lambda m: fastopt.unitwise_norm(m),
}


@pytest.mark.parametrize("where", list(MASKED_CALLS))
def test_masked_arrays_are_rejected_untouched(where):
    m = masked(4)
    data, mask = m.data.copy(), m.mask.copy()
    label = where.split()[-1]
    with pytest.raises(TypeError, match=rf"{label.replace('[', '.').replace(']', '.')} "
                                        rf"is a numpy\.ma\.MaskedArray; fastopt would "
                                        rf"update its masked elements too"):
        MASKED_CALLS[where](m)
    np.testing.assert_array_equal(m.data, data)
    np.testing.assert_array_equal(m.mask, mask)


def test_the_fast_path_declines_masked_arrays_but_takes_other_subclasses():
    m = masked(4)
    mom = (0.1, 0, 0.9, 1.0, 0.0, "standard", None)
    assert _ext.momentum((m, f32(4), f32(4, fill=0)), mom) is False
    assert _ext.agc((f32(4), m), (0.01, 1e-3, "oi", None)) is False
    np.testing.assert_array_equal(m.data, f32(4))

    class Sub(np.ndarray):
        pass

    x = f32(4).view(Sub)
    assert _ext.momentum((x, f32(4), f32(4, fill=0)), mom) is True
    np.testing.assert_allclose(np.asarray(x), 0.9)


TORCH_HINT = r"call \.numpy\(\) on it .*or use fastopt\.torch"


@pytest.mark.parametrize("where", ["x", "g", "x[1]", "agc x"])
def test_a_torch_tensor_gets_a_hint(where):
    torch = pytest.importorskip("torch")
    t = torch.ones(4)
    a = [f32(4), f32(4)]
    z = [f32(4, fill=0), f32(4, fill=0)]
    if where == "x":
        call = lambda: fastopt.onnx_momentum(t, f32(4), f32(4, fill=0), lr=0.1, t=0)  # noqa: E731
        msg = r"fastopt\.onnx_momentum: x must be a numpy\.ndarray or a list/tuple of "
    elif where == "g":
        call = lambda: fastopt.onnx_momentum(f32(4), t, f32(4, fill=0), lr=0.1, t=0)  # noqa: E731
        msg = r"fastopt\.onnx_momentum: g must be a numpy\.ndarray or a list/tuple of "
    elif where == "x[1]":
        call = lambda: fastopt.onnx_adam([a[0], t], a, z, [z[0].copy(), z[1].copy()],  # noqa: E731
                                    lr=0.1, t=1)
        msg = r"fastopt\.onnx_adam: x\[1\] must be a numpy\.ndarray, got Tensor"
    else:
        call = lambda: fastopt.agc(t, f32(4), clipping=0.01)  # noqa: E731
        msg = r"fastopt\.agc: x must be a numpy\.ndarray or a list/tuple of "
    with pytest.raises(TypeError, match=msg + ".*" + TORCH_HINT):
        call()
    assert torch.equal(t, torch.ones(4))


def test_dispatch_names_tensors_with_the_callers_labels():
    xs = [f32(3), f32(2)]
    gs = [f32(3), np.ones(2, np.float64)]
    vs = [f32(3, fill=0), f32(2, fill=0)]
    scalars = (0.1, 0, 0.9, 1.0, 0.0, "standard", None)
    with pytest.raises(TypeError, match=r"^Opt\.step: grads\[7\] has dtype float64 but "
                                        r"params\[7\] has float32"):
        _dispatch.run(_ops.MOMENTUM, (xs, gs, vs), scalars, fname="Opt.step",
                      labels={"x": ["params[2]", "params[7]"],
                              "g": ["grads[2]", "grads[7]"]})
    with pytest.raises(ValueError, match=r"^Opt\.step: buf\[1\] has shape \(3,\) but "
                                         r"w\[1\] has shape \(2,\)"):
        _dispatch.run(_ops.MOMENTUM, (xs, [f32(3), f32(2)], [vs[0], f32(3)]), scalars,
                      fname="Opt.step", labels={"x": "w", "v": "buf"})
    np.testing.assert_array_equal(xs[0], f32(3))


def test_import_is_lazy_and_complete(tmp_path):
    code = ("import sys, fastopt\n"
            "lazy = ('optim', 'schedules', 'onnx', 'torch')\n"
            "assert not [m for m in lazy if 'fastopt.' + m in sys.modules]\n"
            "assert set(lazy) <= set(dir(fastopt))\n"
            "assert fastopt.optim.OnnxMomentum and fastopt.schedules and fastopt.onnx\n"
            "assert 'fastopt.optim' in sys.modules\n"
            "try:\n    fastopt.no_such_name\nexcept AttributeError as e:\n"
            "    print('ok', e)\n")
    r = run_python(["-c", code], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "has no attribute 'no_such_name'" in r.stdout


def test_a_checkout_without_the_extension_says_what_to_do(tmp_path):
    src = os.path.dirname(os.path.abspath(fastopt.__file__))
    shutil.copytree(src, tmp_path / "fastopt",
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "src_c").mkdir()
    r = subprocess.run([sys.executable, "-c", "import fastopt"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=""))
    assert r.returncode != 0
    msg = r.stderr.strip().splitlines()[-1]
    assert "ImportError: fastopt's compiled extension fastopt._ext" in msg
    assert "source checkout" in msg and "installed `fastopt` command" in msg
    assert "another directory" in msg and "build_ext --inplace" in msg


def test_ops_call_runs_with_keywords_and_the_callers_labels():
    x, v = f32(3), f32(3, fill=0)
    _ops.call("momentum", (x, f32(3), v), dict(lr=0.5, t=0))
    np.testing.assert_allclose(x, 0.5)
    with pytest.raises(ValueError, match=r"^Opt\.step: grads\[4\] with shape \(2,\) cannot "
                                         r"be broadcast to params\[4\]'s shape \(3,\)"):
        _ops.call("momentum", ([x], [f32(2)], [v]), dict(lr=0.5, t=0, clipping=0.1),
                  fname="Opt.step", labels={"x": ["params[4]"], "g": ["grads[4]"]})
    with pytest.raises(TypeError, match="unexpected keyword"):
        _ops.call("adam", (x, f32(3), v, f32(3)), dict(lr=0.1, t=1, gamma=2))
