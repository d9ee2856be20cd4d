"""Rejected calls of fastopt.onnx_momentum / adagrad / adam: the error type and
message, and nothing modified.
"""
import threading

import numpy as np
import public_names
import pytest

import fastopt


def snapshot(*objs):
    out = []
    for o in objs:
        if isinstance(o, np.ndarray):
            out.append((o, o.tobytes()))
        elif isinstance(o, (list, tuple)):
            out.extend(snapshot(*o))
    return out


def f32(*shape, fill=1.0):
    return np.full(shape, fill, np.float32)


def bad_cases():
    """(op, args, kwargs, exception, message regex)."""
    ro = f32(3)
    ro.flags.writeable = False
    base = f32(10)
    buf = f32(8)
    cases = [
        ("momentum", (ro, f32(3), f32(3)), {}, ValueError,
         r"fastopt.onnx_momentum: x is read-only"),
        ("momentum", (f32(3), f32(3), ro), {}, ValueError, r"v is read-only"),
        ("adam", ([f32(2), f32(3)], [f32(2), f32(3)], [f32(2), f32(3)], [f32(2), ro]), {},
         ValueError, r"fastopt.onnx_adam: h\[1\] is read-only"),
        ("momentum", (np.ones(3, np.int64), f32(3), f32(3)), {}, TypeError, r"x has dtype int64"),
        ("momentum", (np.ones(3, bool), f32(3), f32(3)), {}, TypeError, r"x has dtype bool"),
        ("momentum", (np.ones(3, np.float16),) * 3, {}, TypeError, r"x has dtype float16"),
        ("momentum", (np.ones(3, np.complex64),) * 3, {}, TypeError, r"x has dtype complex64"),
        ("momentum", (np.ones(3, object),) * 3, {}, TypeError, r"x has dtype object"),
        ("momentum", (f32(3), np.ones(3), f32(3)), {}, TypeError,
         r"g has dtype float64 but x has float32"),
        ("adagrad", ([f32(3), np.ones(2)], [f32(3), np.ones(2)], [f32(3), f32(2)]), {},
         TypeError, r"fastopt.onnx_adagrad: h\[1\] has dtype float32 but x\[1\] has float64"),
        ("momentum", (f32(3), f32(3), f32(4)), {}, ValueError,
         r"v has shape \(4,\) but x has shape \(3,\)"),
        ("momentum", (f32(3, 2), f32(2, 3), f32(3, 2)), {}, ValueError,
         r"g with shape \(2, 3\) cannot be broadcast to x's shape \(3, 2\)"),
        ("momentum", (f32(3), f32(2, 3), f32(3)), {}, ValueError, r"cannot be broadcast"),
        ("momentum", ([f32(3)], [f32(3), f32(3)], [f32(3)]), {}, ValueError,
         r"g has 2 tensors but x has 1"),
        ("momentum", ([], [], []), {}, ValueError, r"x is an empty list"),
        ("momentum", (f32(3), [f32(3)], f32(3)), {}, TypeError,
         r"g is a list but x is a single array"),
        ("momentum", ([f32(3)], f32(3), [f32(3)]), {}, TypeError,
         r"g is a single array but x is a list"),
        ("momentum", (f32(3), f32(3), f32(3)), {"t": -1}, ValueError, r"t must be >= 0"),
        ("momentum", (f32(3), f32(3), f32(3)), {"t": 1.0}, TypeError, r"t must be an integer"),
        ("momentum", (f32(3), f32(3), f32(3)), {"t": True}, TypeError, r"t must be an integer"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": -0.1}, ValueError,
         r"lr must be a finite number >= 0"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": float("nan")}, ValueError, r"lr must be"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": float("inf")}, ValueError, r"lr must be"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": "0.1"}, TypeError, r"lr must be a real"),
        ("momentum", (f32(3), f32(3), f32(3)), {"lr": np.ones(2)}, TypeError,
         r"lr must be a real number or a one-element"),
        ("momentum", (f32(3), f32(3), f32(3)), {"mode": "Nesterov"}, ValueError,
         r"mode must be 'standard' or 'nesterov'"),
        ("momentum", (f32(3), f32(3), f32(3)), {"alpha": float("nan")}, ValueError,
         r"alpha must be finite"),
        ("momentum", (f32(3), f32(3), f32(3)), {"n_threads": 0}, ValueError, r"n_threads must be"),
        ("momentum", (f32(3), f32(3), f32(3)), {"n_threads": 1.5}, TypeError, r"n_threads must be"),
        ("adagrad", (f32(3), f32(3), f32(3)), {"epsilon": -1e-8}, ValueError,
         r"epsilon must be >= 0"),
        ("adagrad", (f32(3), f32(3), f32(3)), {"decay_factor": -1.0}, ValueError,
         r"decay_factor must be >= 0"),
        ("adam", (f32(3),) * 4, {"alpha": 1.0, "t": 2}, ValueError, r"alpha must be < 1"),
        ("adam", (f32(3),) * 4, {"beta": 1.5}, ValueError, r"beta must be <= 1"),
        ("momentum", (base[:5], f32(5), base[3:8]), {}, ValueError,
         r"x and v share memory"),
        ("momentum", (base[:5], f32(5), base[:5]), {}, ValueError, r"x and v share memory"),
        ("momentum", ([buf[:4], buf[:4]], [f32(4), f32(4)], [f32(4), f32(4)]), {}, ValueError,
         r"x\[0\] and x\[1\] share memory"),
        ("momentum", (buf[:4], buf[2:6], f32(4)), {}, ValueError,
         r"g partially overlaps x"),
        ("momentum", ([f32(4), f32(4)], [f32(4), buf[1:5]], [buf[:4], f32(4)]), {}, ValueError,
         r"g\[1\] partially overlaps v\[0\]"),
        ("momentum", ([1.0, 2.0], [1.0, 2.0], [0.0, 0.0]), {}, TypeError,
         r"x\[0\] must be a numpy.ndarray, got float"),
        ("momentum", (f32(3), "g", f32(3)), {}, TypeError, r"g must be a numpy.ndarray"),
        ("momentum", (3.0, f32(3), f32(3)), {}, TypeError, r"x must be a numpy.ndarray"),
        ("adam", (f32(3), f32(3), f32(3), None), {}, TypeError, r"h must be a numpy.ndarray"),
    ]
    # a bad tensor at the end of a long list: the index is named, nothing written
    n = 50
    xs = [f32(7) for _ in range(n)]
    gs = [f32(7) for _ in range(n)]
    vs = [f32(7) for _ in range(n - 1)] + [f32(6)]
    cases.append(("momentum", (xs, gs, vs), {}, ValueError,
                  r"v\[49\] has shape \(6,\) but x\[49\] has shape \(7,\)"))
    return cases


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c[4][:40])
def test_bad_input_raises_and_modifies_nothing(case):
    op, args, kw, exc, msg = case
    kw = dict({"lr": 0.1, "t": 1}, **kw)
    snap = snapshot(*args)
    with pytest.raises(exc, match=msg):
        public_names.op(op)(*args, **kw)
    for arr, data in snap:
        assert arr.tobytes() == data


def test_self_overlapping_outputs_are_rejected():
    buf = np.zeros(4)
    x = np.lib.stride_tricks.as_strided(buf, (3,), (0,), writeable=True)
    with pytest.raises(ValueError, match=r"x has elements that share memory"):
        fastopt.onnx_momentum(x, np.ones(3), np.zeros(3), lr=0.1, t=0)
    v = np.lib.stride_tricks.as_strided(buf, (2, 2), (8, 8), writeable=True)
    with pytest.raises(ValueError, match=r"v\[1\] has elements that share memory"):
        fastopt.onnx_momentum([np.ones(1), np.ones((2, 2))], [np.ones(1), np.ones((2, 2))],
                         [np.zeros(1), v], lr=0.1, t=0)
    assert not buf.any()
    # a strided view that does not overlap itself is fine
    y = np.zeros((4, 6))[::2, ::3]
    fastopt.onnx_momentum(y, np.ones((2, 2)), np.zeros((2, 2)), lr=1.0, t=0)
    assert (y == -1).all()


def test_huge_numbers_and_odd_types_raise_clear_errors():
    a = [f32(3), f32(3), f32(3)]
    with pytest.raises(ValueError, match="fastopt.onnx_momentum: lr must be a finite number"):
        fastopt.onnx_momentum(*a, lr=10**400, t=0)
    with pytest.raises(ValueError, match="fastopt.onnx_momentum: alpha must be finite"):
        fastopt.onnx_momentum(*a, lr=0.1, t=0, alpha=-10**400)
    with pytest.raises(TypeError, match="fastopt.onnx_momentum: mode must be a str"):
        fastopt.onnx_momentum(*a, lr=0.1, t=0, mode=np.array(["nesterov"]))
    with pytest.raises(ValueError, match="n_threads must be a positive int up to 1024"):
        fastopt.onnx_momentum(*a, lr=0.1, t=0, n_threads=5000)


def test_list_emptied_by_another_thread_during_the_call():
    """The C call runs without the GIL: the arrays of a list must stay
    referenced even if another thread empties the list meanwhile."""
    n = 4_000_000
    for _ in range(3):
        xs, gs, vs = [np.zeros(n, np.float32)], [np.ones(n, np.float32)], [np.zeros(n, np.float32)]
        started = threading.Event()

        def clear(started=started, xs=xs, vs=vs, gs=gs):
            started.wait()
            xs.clear()
            vs.clear()
            gs.clear()

        th = threading.Thread(target=clear)
        th.start()
        x0 = xs[0]
        refs = (xs, gs, vs)
        started.set()
        try:   # must not crash; if the lists were emptied first, a clear error
            fastopt.onnx_momentum(*refs, lr=0.5, t=0, n_threads=2)
        except (TypeError, ValueError) as exc:
            assert "empty" in str(exc) or "tensors but x has" in str(exc)
        th.join()
        assert x0[0] in (0.0, -0.5)


def test_missing_keywords_are_required():
    with pytest.raises(TypeError):
        fastopt.onnx_momentum(f32(2), f32(2), f32(2), lr=0.1)   # t is required
    with pytest.raises(TypeError):
        fastopt.onnx_momentum(f32(2), f32(2), f32(2), 0.1, 0)   # keyword-only
