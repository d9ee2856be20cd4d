"""Rejected calls of fastopt.agc, unitwise_norm and the fused clipping: the
error, and nothing modified.
"""
import numpy as np
import pytest
from agc_cases import make, snapshot

import fastopt


def _agc_case(**kw):
    xs = [np.ones((3, 4), np.float32), np.ones((5,), np.float64)]
    gs = [np.full((3, 4), 0.5, np.float32), np.full((5,), 0.5)]
    return xs, gs, kw


def _bad_agc_cases():
    ro = np.full((5,), 0.5)
    ro.flags.writeable = False
    x0 = np.ones((3, 4), np.float32)
    shared = np.full((3, 4), 0.5, np.float32)
    zero_stride = np.lib.stride_tricks.as_strided(np.full(4, 0.5, np.float32), (3, 4), (0, 4),
                                                  writeable=True)
    return [
        # (xs, gs, kwargs, exception, match)
        (*_agc_case(layout="OI"), ValueError, r"fastopt.agc: layout must be 'oi'.*got 'OI'"),
        (*_agc_case(layout=1), TypeError, r"layout must be a str, got int"),
        (*_agc_case(clipping=0.0), ValueError, r"clipping must be > 0.0, got 0.0"),
        (*_agc_case(clipping=-1), ValueError, r"clipping must be > 0.0, got -1.0"),
        (*_agc_case(clipping=float("inf")), ValueError, r"clipping must be finite"),
        (*_agc_case(clipping=None), TypeError, r"clipping must be a real number > 0 or a list"),
        (*_agc_case(clipping=[0.01]), ValueError,
         r"clipping has 1 entries but x has 2 tensors; give one value per tensor"),
        (*_agc_case(clipping=[0.01, 0.02, 0.03]), ValueError, r"clipping has 3 entries"),
        (*_agc_case(clipping=[0.01, -0.5]), ValueError, r"clipping\[1\] must be > 0.0"),
        (*_agc_case(clipping=[0.01, float("nan")]), ValueError, r"clipping\[1\] must be finite"),
        (*_agc_case(clipping=[0.01, "0.1"]), TypeError,
         r"clipping\[1\] must be a real number, got str"),
        (*_agc_case(eps=0.0), ValueError, r"eps must be > 0.0, got 0.0"),
        (*_agc_case(eps=-1e-3), ValueError, r"eps must be > 0.0"),
        (*_agc_case(eps=float("nan")), ValueError, r"eps must be finite"),
        (*_agc_case(n_threads=0), ValueError, r"n_threads must be a positive int"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32), ro], {}, ValueError,
         r"fastopt.agc: g\[1\] is read-only; it is clipped in place"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32), np.full((1,), 0.5)], {},
         ValueError, r"g\[1\] has shape \(1,\) but x\[1\] has shape \(5,\)"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32), np.full(5, 0.5, np.float32)], {},
         TypeError, r"g\[1\] has dtype float32 but x\[1\] has float64; the gradient must match"),
        ([x0, np.ones(5, np.int64)], [np.full((3, 4), 0.5, np.float32), np.ones(5, np.int64)],
         {}, TypeError, r"x\[1\] has dtype int64; fastopt works on float32 or float64"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32), [0.5] * 5], {}, TypeError,
         r"g\[1\] must be a numpy.ndarray, got a list of numbers; convert it with "
         r"np.asarray"),
        ([x0, np.ones(5)], [np.full((3, 4), 0.5, np.float32)], {}, ValueError,
         r"g has 1 tensors but x has 2"),
        ([x0, np.ones(5)], np.full((3, 4), 0.5, np.float32), {}, TypeError,
         r"g is a single array but x is a list of 2"),
        ([], [], {}, ValueError, r"fastopt.agc: x is an empty list"),
        ([shared, np.ones(5)], [shared, np.full(5, 0.5)], {}, ValueError,
         r"g\[0\] shares memory with x\[0\]; the gradient is clipped in place"),
        ([x0, np.ones((3, 4), np.float32)], [shared, shared], {}, ValueError,
         r"g\[0\] and g\[1\] share memory|g\[1\] and g\[0\] share memory"),
        ([x0, np.ones(5)], [zero_stride, np.full(5, 0.5)], {}, ValueError,
         r"g\[0\] has elements that share memory \(a broadcast or as_strided view\); "
         r"a clipped array needs memory of its own"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_agc_cases())))
def test_agc_bad_input_raises_and_modifies_nothing(case):
    xs, gs, kw, exc, match = _bad_agc_cases()[case]
    arrays = [a for a in list(xs) + list(gs if isinstance(gs, list) else [gs])
              if isinstance(a, np.ndarray)]
    before = snapshot(*arrays)
    with pytest.raises(exc, match=match):
        fastopt.agc(xs, gs, **kw)
    assert snapshot(*arrays) == before


def _bad_fused_cases():
    return [
        (dict(layout="hwio"), ValueError, r"fastopt.onnx_momentum: layout must be 'oi'"),
        (dict(clip_eps=0.0), ValueError, r"fastopt.onnx_momentum: clip_eps must be > 0.0"),
        (dict(clip_eps=-1.0), ValueError, r"clip_eps must be > 0.0"),
        (dict(clipping=-0.01), ValueError, r"fastopt.onnx_momentum: clipping must be > 0.0"),
        (dict(clipping=0), ValueError, r"clipping must be > 0.0"),
        (dict(clipping=[0.01]), ValueError, r"clipping has 1 entries but x has 2 tensors"),
        (dict(clipping=[0.01, -1.0]), ValueError, r"clipping\[1\] must be > 0.0"),
        (dict(clipping=[0.01, True]), TypeError, r"clipping\[1\] must be a real number, got bool"),
        (dict(clipping="0.01"), TypeError, r"clipping must be a real number, got str"),
        (dict(lr=-1.0), ValueError, r"lr must be a finite number >= 0"),
        (dict(mode="nest"), ValueError, r"mode must be 'standard' or 'nesterov'"),
        (dict(v_shape=(4, 3)), ValueError,
         r"v\[0\] has shape \(4, 3\) but x\[0\] has shape \(3, 4\)"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_fused_cases())))
def test_fused_bad_input_raises_and_modifies_nothing(case):
    kw, exc, match = _bad_fused_cases()[case]
    kw = dict(kw)
    xs = [np.ones((3, 4), np.float32), np.ones((5,), np.float64)]
    gs = [np.full((3, 4), 0.5, np.float32), np.full((5,), 0.5)]
    vs = [np.zeros(kw.pop("v_shape", (3, 4)), np.float32), np.zeros(5)]
    call = dict(lr=0.1, t=1, clipping=0.01)
    call.update(kw)
    before = snapshot(*xs, *gs, *vs)
    with pytest.raises(exc, match=match):
        fastopt.onnx_momentum(xs, gs, vs, **call)
    assert snapshot(*xs, *gs, *vs) == before


def test_unitwise_norm_bad_input():
    with pytest.raises(TypeError,
                       match=r"fastopt.unitwise_norm: x must be a numpy.ndarray, got a list of "
                             r"numbers"):
        fastopt.unitwise_norm([1.0, 2.0])
    with pytest.raises(TypeError, match=r"x has dtype int64"):
        fastopt.unitwise_norm(np.ones(3, np.int64))
    with pytest.raises(ValueError, match=r"fastopt.unitwise_norm: layout must be 'oi'"):
        fastopt.unitwise_norm(np.ones(3), layout="xy")


def test_clipping_none_leaves_momentum_unchanged():
    # clipping=None is the plain update; clip_eps and layout are unused then
    x, g = make((4, 5), np.float32, "oi")
    v = np.zeros_like(x)
    x1, v1 = x.copy(), v.copy()
    fastopt.onnx_momentum(x1, g, v1, lr=0.1, t=0, clipping=None, layout="io", clip_eps=0.5)
    fastopt.onnx_momentum(x, g, v, lr=0.1, t=0)
    assert x1.tobytes() == x.tobytes() and v1.tobytes() == v.tobytes()
