"""Regressions for bugs the API fuzzer (tests/fuzz_api.py) found."""
from __future__ import annotations

import numpy as np
import pytest

import fastopt


def test_optimizer_with_an_empty_parameter_group_steps_every_other_group():
    # A group with "params": [] used to reach the kernel as an empty list,
    # which raised *after* the earlier groups had been updated.
    optim = pytest.importorskip("fastopt.optim")
    for cls in (optim.OnnxMomentum, optim.OnnxAdagrad, optim.OnnxAdam):
        p = np.ones(3, np.float32)
        q = np.ones(2, np.float64)
        opt = cls([{"params": [p]}, {"params": []}, {"params": [q]}], lr=0.1)
        assert opt.step([np.full(3, 0.5, np.float32), np.full(2, 0.5)])
        assert opt.steps == 1
        assert (p < 1).all() and (q < 1).all()
        ref_p, ref_q = np.ones(3, np.float32), np.ones(2)
        ref = cls([ref_p, ref_q], lr=0.1)
        ref.step([np.full(3, 0.5, np.float32), np.full(2, 0.5)])
        assert p.tobytes() == ref_p.tobytes() and q.tobytes() == ref_q.tobytes()


@pytest.mark.parametrize("conf", [None, [], "ml.opt.decay.class.name"])
def test_angel_rejects_a_conf_that_is_not_a_mapping(conf):
    schedules = pytest.importorskip("fastopt.schedules")
    with pytest.raises(TypeError, match="conf must be a mapping"):
        schedules.angel(conf, 0.1)
    with pytest.raises(TypeError, match="conf must be a mapping"):
        schedules.angel_on_batch(conf)


def test_fastopt_still_imports():
    assert callable(fastopt.onnx_momentum)


@pytest.mark.parametrize("container", [list, tuple])
def test_adam_none_second_state_in_a_list_is_rejected_not_dereferenced(container):
    # fastopt.onnx_adam([x], [g], [v], [None]) used to pass the fast path with a
    # NULL h pointer and crash (segfault) in the C kernel.
    x = np.ones(5, np.float32)
    g = np.full(5, 0.5, np.float32)
    v = np.zeros(5, np.float32)
    with pytest.raises(TypeError, match=r"h\[0\] must be a numpy.ndarray, got NoneType"):
        fastopt.onnx_adam(container([x]), container([g]), container([v]), container([None]),
                     lr=0.1, t=1)
    assert (x == 1).all() and (v == 0).all()
    xs = [np.ones(3, np.float64), np.ones(4, np.float32)]
    with pytest.raises(TypeError, match=r"h\[1\] must be a numpy.ndarray, got NoneType"):
        fastopt.onnx_adam(xs, [a.copy() for a in xs], [np.zeros_like(a) for a in xs],
                     [np.zeros_like(xs[0]), None], lr=0.1, t=1)
    assert all((a == 1).all() for a in xs)


@pytest.mark.parametrize("layout", ["oi", "io"])
@pytest.mark.parametrize("value", [2e19, 1e30, 1e-20, 1e-30])
def test_agc_norms_of_float32_right_over_the_whole_range(layout, value):
    # float32 squares were summed in float32: beyond ~1.8e19 a square
    # overflowed (norm inf, and AGC then *zeroed* the gradient instead of
    # clipping it), below ~1e-19 it underflowed (norm 0).
    if not hasattr(fastopt, "agc"):
        pytest.skip("fastopt.agc not merged yet")
    shape = (3, 64) if layout == "oi" else (64, 3)
    x = np.full(shape, value, np.float32)
    ref = np.sqrt((x.astype(np.float64) ** 2).sum(axis=1 if layout == "oi" else 0,
                                                 keepdims=True))
    np.testing.assert_allclose(fastopt.unitwise_norm(x, layout=layout), ref, rtol=1e-6)
    g = np.full(shape, value, np.float32)
    p = np.ones(shape, np.float32)
    fastopt.agc(p, g, clipping=0.01, layout=layout)
    # large units clipped to max_norm = 0.01 * ||p_unit|| = 0.01 * 8 (not
    # zeroed); small ones left alone
    want = min(value * 8.0, 0.08)
    np.testing.assert_allclose(np.linalg.norm(g.astype(np.float64),
                                              axis=1 if layout == "oi" else 0), want,
                               rtol=1e-5)


def test_unitwise_norm_beyond_float32_range_is_inf_without_a_warning():
    # the float64 norm of float32 data can exceed float32's range; rounding it
    # used to emit "RuntimeWarning: overflow encountered in cast"
    if not hasattr(fastopt, "unitwise_norm"):
        pytest.skip("fastopt.agc not merged yet")
    x = np.full((2, 4), 3e38, np.float32)
    out = fastopt.unitwise_norm(x)            # filterwarnings=error: a warning fails
    assert out.dtype == np.float32 and np.isinf(out).all()


def _damaged_checkpoints(path):
    """(description, bytes) of checkpoints damaged in ways zipfile reports
    with exceptions other than BadZipFile."""
    import io
    import zipfile

    with open(path, "rb") as fh:
        data = fh.read()
    out = []
    # an unknown compression method in the first local header (offset 8)
    d = bytearray(data)
    d[8:10] = (99).to_bytes(2, "little")
    i = data.find(b"PK\x01\x02")                 # and in the central directory (offset 10)
    if i >= 0:
        d[i + 10:i + 12] = (99).to_bytes(2, "little")
    out.append(("unknown compression method", bytes(d)))
    # the "encrypted" flag bit set
    d = bytearray(data)
    d[6] |= 1
    if i >= 0:
        d[i + 8] |= 1
    out.append(("encrypted flag", bytes(d)))
    # a deflate-compressed archive with its compressed data damaged
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    d = bytearray(buf.getvalue())
    j = d.find(b"PK\x03\x04")
    start = j + 30 + int.from_bytes(d[j + 26:j + 28], "little") + \
        int.from_bytes(d[j + 28:j + 30], "little")
    for k in range(start, start + 8):
        d[k] ^= 0xFF
    out.append(("corrupt deflate data", bytes(d)))
    return out


def test_damaged_checkpoint_raises_checkpoint_error(tmp_path):
    # zipfile raised NotImplementedError / RuntimeError / zlib.error through
    # Optimizer.load instead of CheckpointError (found by the fuzzer)
    optim = pytest.importorskip("fastopt.optim")
    p = np.ones(5, np.float32)
    opt = optim.OnnxAdam([p], lr=0.1)
    opt.step([np.full(5, 0.5, np.float32)])
    path = str(tmp_path / "ckpt.npz")
    opt.save(path)
    before = [a.tobytes() for a in opt.state["v"] + opt.state["h"]], opt.steps
    for what, data in _damaged_checkpoints(path):
        bad = tmp_path / "bad.npz"
        bad.write_bytes(data)
        with pytest.raises(optim.CheckpointError, match="not a readable fastopt checkpoint"):
            opt.load(str(bad))
        assert ([a.tobytes() for a in opt.state["v"] + opt.state["h"]], opt.steps) == before, what
