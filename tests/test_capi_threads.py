"""The C API's thread contract (docs/embedding.md): a host that measures the
global norm once, passes it in (FASTOPT_MEASURE_GIVEN) and steps slices of
its tensors from its own threads with n_threads=1 gets the bits of one call
over everything. ctypes releases the GIL for each call."""
import ctypes as ct
import threading

import numpy as np
from capi_helpers import RULE, C, F, S, grad_lists, new, opts, result, tensor

SIZES = [5, 4096, 333, 70_001, 1, 0, 12_345, 2048, 9, 100_000]


def _model(seed):
    rng = np.random.default_rng(seed)
    out = []
    for k, n in enumerate(SIZES):
        dt = np.float32 if k % 3 else np.float64
        x, g = (rng.standard_normal(n).astype(dt) for _ in range(2))
        m, v = np.zeros_like(x), np.zeros_like(x)
        out.append((x, g, m, v))
    return out


def _group():
    return new("fastopt_group", rule=RULE["adamw_torch"], t=3, lr=1e-2, alpha=0.9,
               beta=0.999, eps=1e-8, decay=0.01)


def _clip(**kw):
    return opts(grad_scale=4.0, clip=C["FASTOPT_CLIP_TORCH"], max_norm=0.5, **kw)


def _call(records, o, n_threads):
    ts = (S["fastopt_tensor"] * max(1, len(records)))(*records)
    gs = (S["fastopt_group"] * 1)(_group())
    res = result()
    rc = F["step"](ts, len(records), gs, 1, ct.byref(o), ct.byref(res), n_threads)
    assert rc == 0 and res.applied == 1
    return res


def _slices(model):
    """The host's work items: every tensor, the largest cut in two halves
    (a slice of elements is a tensor of its own: the update is elementwise)."""
    items = []
    for x, g, m, v in model:
        if x.size < 50_000:
            items.append(tensor(x, g, m, v))
            continue
        h = x.size // 2
        items += [tensor(x[:h], g[:h], m[:h], v[:h]), tensor(x[h:], g[h:], m[h:], v[h:])]
    return items


def test_host_threads_over_slices_equal_one_call():
    one, host = _model(1), _model(1)
    res = _call([tensor(*t) for t in one], _clip(), 2)

    ptrs, ns, dts = grad_lists([t[1] for t in host])
    measured = result()
    assert F["global_norm"](ptrs, ns, dts, len(host), 4.0, C["FASTOPT_NORM_2"],
                            ct.byref(measured), 1) == 0
    assert measured.norm == res.norm
    items = _slices(host)
    given = _clip(measure=C["FASTOPT_MEASURE_GIVEN"], norm=measured.norm)
    barrier = threading.Barrier(4)

    def run(part):
        barrier.wait()
        _call(part, given, 1)

    threads = [threading.Thread(target=run, args=(items[i::4],)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for a, b in zip(one, host):
        for p, q in zip(a, b):
            assert p.tobytes() == q.tobytes()


def test_sum_of_squares_adds_up_over_slices():
    """FASTOPT_NORM_SUMSQ per slice, added by the host in slice order, is the
    root's square to rounding (the partial sums a distributed host adds)."""
    model = _model(2)
    gs = [t[1] for t in model]
    total = result()
    assert F["global_norm"](*grad_lists(gs), len(gs), 1.0, C["FASTOPT_NORM_SUMSQ"],
                            ct.byref(total), 1) == 0
    parts = []
    for i in range(0, len(gs), 3):
        r = result()
        assert F["global_norm"](*grad_lists(gs[i:i + 3]), len(gs[i:i + 3]), 1.0,
                                C["FASTOPT_NORM_SUMSQ"], ct.byref(r), 1) == 0
        parts.append(r.norm)
    np.testing.assert_allclose(sum(parts), total.norm, rtol=1e-12)
