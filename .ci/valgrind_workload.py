"""A short run of every fastopt code path, for .ci/valgrind.sh (memcheck).

Fast path (C- and F-contiguous, single and lists, more tensors than the
Cython stack buffer holds, mixed dtypes, 0-d and empty), the copying path
(strided, misaligned, byte-swapped, broadcast g, an exact g/x alias), the
OpenMP driver (above the serial threshold, n_threads 2 and 3), and the error
paths (a bad tensor at the end of a list).
"""
import numpy as np

import fastopt

F32, F64 = np.float32, np.float64
serial = fastopt._ext.tuning()["serial_bytes"]


def mk(shape, dt, fill, order="C"):
    return np.full(shape, fill, dt, order=order)


def each_op(xs, gs, make_state, **kw):
    fastopt.onnx_momentum(xs, gs, make_state(), lr=0.01, t=1, **kw)
    fastopt.onnx_momentum(xs, gs, make_state(), lr=0.01, t=0, mode="nesterov", **kw)
    fastopt.onnx_adagrad(xs, gs, make_state(), lr=0.01, t=2, decay_factor=0.1, **kw)
    fastopt.onnx_adam(xs, gs, make_state(), make_state(), lr=0.01, t=3, **kw)


def like(xs):
    if isinstance(xs, list):
        return lambda: [np.zeros_like(a) for a in xs]
    return lambda: np.zeros_like(xs)


# fast path
for n in (0, 1, 3, 17, 33, 1025):
    for dt in (F32, F64):
        x = mk((n,), dt, 1.0)
        each_op(x, mk((n,), dt, 0.5), like(x))
x = mk((), F64, 1.0)
each_op(x, mk((), F64, 0.5), like(x))
x = mk((5, 7), F32, 1.0, "F")
each_op(x, mk((5, 7), F32, 0.5, "F"), like(x))
xs = [mk((i % 5 * 7 + 1,), F32 if i % 2 else F64, 1.0) for i in range(20)]   # heap buffers
gs = [mk(a.shape, a.dtype, 0.5) for a in xs]
each_op(xs, gs, like(xs), n_threads=1)

# OpenMP driver
big = serial // 4 + 4099
xs = [mk((big,), F32, 1.0), mk((1000,), F64, 1.0), mk((big // 3,), F64, 1.0)[1:]]
gs = [mk(a.shape, a.dtype, 0.5) for a in xs]
for nt in (2, 3):
    each_op(xs, gs, like(xs), n_threads=nt)

# copying path
base = np.ones(2 * 101, F32)
x = base[::2]
each_op(x, mk((101,), F32, 0.5), like(x))
buf = np.zeros(8 * 50 + 3, np.uint8)
x = np.ndarray((50,), F64, buffer=buf, offset=3)
x[...] = 1.0
each_op(x, np.ones((50,), F64), like(x))
x = mk((4, 6), ">f4", 1.0)
each_op(x, mk((6,), ">f4", 0.5), lambda: np.zeros((4, 6), ">f4"))
x = mk((4, 6), F64, 1.0)
each_op(x, x, like(x))                                 # g is x
each_op(x, np.broadcast_to(np.float64(0.5), x.shape), like(x))

# AGC: standalone, unit norms, fused with momentum (both layouts, rows and
# columns, one tensor above the serial threshold, an excluded tensor)
if hasattr(fastopt, "agc"):
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal(s).astype(dt) for s, dt in
          (((64, 3, 3, 3), F32), ((10, 7), F64), ((300, 301), F32), ((5,), F32), ((), F64))]
    for layout in ("oi", "io"):
        for nt in (1, 2):
            gs = [rng.standard_normal(w.shape).astype(w.dtype) for w in ws]
            fastopt.agc(ws, gs, clipping=[0.01, None, 0.1, 0.5, 0.01], layout=layout,
                        n_threads=nt)
            for w in ws:
                fastopt.unitwise_norm(w, layout=layout)
            vs = [np.zeros_like(w) for w in ws]
            fastopt.onnx_momentum(ws, gs, vs, lr=0.01, t=1, clipping=0.01, layout=layout,
                             n_threads=nt)
    fastopt.onnx_momentum(ws[1].T, ws[1].T.copy(), np.zeros((7, 10)), lr=0.1, t=0,
                     clipping=0.1)                     # copying path
    g_big = np.full((2, 4), 1e20, F32)
    fastopt.agc(np.ones((2, 4), F32), g_big, clipping=0.01)   # float32 range fallback

# error paths: a bad tensor at the end
xs = [mk((3,), F32, 1.0) for _ in range(12)]
gs = [mk((3,), F32, 0.5) for _ in range(12)]
vs = [mk((3,), F32, 0.0) for _ in range(11)] + [mk((4,), F32, 0.0)]
for call in (lambda: fastopt.onnx_momentum(xs, gs, vs, lr=0.1, t=1),
             lambda: fastopt.onnx_adam(xs, gs, vs, vs, lr=0.1, t=1),
             lambda: fastopt.onnx_adagrad(xs[0], gs[0], xs[0], lr=0.1, t=1),
             lambda: fastopt.onnx_momentum(xs[0], gs[0], vs[0], lr=float("nan"), t=1)):
    try:
        call()
    except (TypeError, ValueError):
        pass
    else:
        raise SystemExit("expected an error")
assert all((a == 1.0).all() for a in xs)

# the published C API (src_c/capi.c) through its capsule: a list long enough
# for the sorted overlap sweep, the gradient lists, AGC, and an error
import ctypes as ct  # noqa: E402

import fastopt.capi as capi  # noqa: E402

S, F = capi.ctypes_structs(), capi.ctypes_functions()


def rec(name, **kw):
    r = S[name](**kw)
    r.size = ct.sizeof(S[name])
    return r


arrs = [[mk((n,), F32, f) for f in (1.0, 0.5, 0.0, 0.0)] for n in (0, 1, 33, 1025) * 5]
ts = (S["fastopt_tensor"] * len(arrs))(*[
    rec("fastopt_tensor", x=a[0].ctypes.data, g=a[1].ctypes.data, s1=a[2].ctypes.data,
        s2=a[3].ctypes.data, n=a[0].size) for a in arrs])
grp = rec("fastopt_group", rule=capi.manifest()["constants"]["FASTOPT_RULE_ADAM_TORCH"], t=1,
          lr=0.1, alpha=0.9, beta=0.999, eps=1e-8)
opts, res = rec("fastopt_opts", grad_scale=2.0, clip=1, max_norm=0.5), rec("fastopt_result")
assert F["step"](ts, len(arrs), ct.byref(grp), 1, ct.byref(opts), ct.byref(res), 2) == 0
ptrs = (ct.c_void_p * len(arrs))(*[a[1].ctypes.data for a in arrs])
ns = (ct.c_int64 * len(arrs))(*[a[1].size for a in arrs])
dts = (ct.c_int32 * len(arrs))()
assert F["global_norm"](ptrs, ns, dts, len(arrs), 1.0, 2, ct.byref(res), 2) == 0
assert F["clip_grads"](ptrs, ns, dts, len(arrs), ct.byref(opts), ct.byref(res), 2) == 0
x2, g2 = mk((4, 8), F32, 1.0), mk((4, 8), F32, 3.0)
agc = (S["fastopt_agc_tensor"] * 1)(rec("fastopt_agc_tensor", x=x2.ctypes.data,
                                        g=g2.ctypes.data, n_units=4, unit_len=8,
                                        clipping=0.01))
assert F["agc"](agc, 1, 1e-3, ct.byref(res), 1) == 0
ts[5].s1 = ts[7].x                                   # overlap: nothing written
assert F["step"](ts, len(arrs), ct.byref(grp), 1, ct.byref(opts), ct.byref(res), 1) == -2
print("valgrind workload: done")
