"""The published C API's errors, through the capsule's entry points (ctypes):
every return code is reachable, the result names the bad argument (where,
field, index), and nothing but the result is written."""
import ctypes as ct

import numpy as np
import pytest
from capi_helpers import (
    RULE,
    C,
    F,
    S,
    adam_arrays,
    adam_group,
    grad_lists,
    new,
    opts,
    result,
    step,
    tensor,
)

OK, ENOMEM, EINVAL, EUNSUP = (C["FASTOPT_" + k] for k in ("OK", "ENOMEM", "EINVAL",
                                                          "EUNSUPPORTED"))
W = {k[len("FASTOPT_WHERE_"):]: v for k, v in C.items() if k.startswith("FASTOPT_WHERE_")}
FIELD = {k[len("FASTOPT_FIELD_"):]: v for k, v in C.items() if k.startswith("FASTOPT_FIELD_")}


def _two_tensors():
    a, b = adam_arrays(40), adam_arrays(24, seed=1)
    return a, b, [tensor(*a), tensor(*b)]


def _unchanged(arrays, before):
    for a, b in zip(arrays, before):
        np.testing.assert_array_equal(a, b)


def _bad(field, mutate, code=EINVAL, where="TENSOR", index=1, group=None, o=None):
    a, b, ts = _two_tensors()
    gs = [adam_group()]
    if group is not None:
        gs = [adam_group(), group]
        ts[1].group = 1
    mutate(ts, a, b)
    arrays = list(a) + list(b)
    before = [x.copy() for x in arrays]
    rc, res = step(ts, gs, o)
    assert (rc, res.error_where, res.error_field) == (code, W[where], FIELD[field])
    assert res.error_index == index and res.applied == 0
    assert F["field_name"](res.error_field).decode() == field
    _unchanged(arrays, before)


CASES = {
    "n": ("N", lambda ts, a, b: setattr(ts[1], "n", -1)),
    "dtype": ("DTYPE", lambda ts, a, b: setattr(ts[1], "dtype", 99)),
    # the 8-bit codes' type is a row of the table that no field of the C API takes
    "dtype_q8": ("DTYPE", lambda ts, a, b: setattr(ts[1], "dtype", C["FASTOPT_Q8"])),
    "gdtype_q8": ("GDTYPE", lambda ts, a, b: setattr(ts[1], "gdtype", C["FASTOPT_Q8"])),
    "gdtype": ("GDTYPE", lambda ts, a, b: setattr(ts[1], "gdtype", 1)),
    "wdtype": ("WDTYPE", lambda ts, a, b: (setattr(ts[1], "w", b[0].ctypes.data + 4),
                                           setattr(ts[1], "wdtype", 1))),
    "group": ("GROUP", lambda ts, a, b: setattr(ts[1], "group", 5)),
    "x_null": ("X", lambda ts, a, b: setattr(ts[1], "x", None)),
    "x_misaligned": ("X", lambda ts, a, b: setattr(ts[1], "x", b[0].ctypes.data + 1)),
    "state_null": ("S2", lambda ts, a, b: setattr(ts[1], "s2", None)),
    "overlap": ("S1", lambda ts, a, b: setattr(ts[1], "s1", a[0].ctypes.data + 8)),
    "size": ("SIZE", lambda ts, a, b: setattr(ts[1], "size", 8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_tensor_is_named_and_nothing_written(case):
    field, mutate = CASES[case]
    _bad(field, mutate)


def test_unknown_tensor_flag_is_unsupported():
    _bad("FLAGS", lambda ts, a, b: setattr(ts[1], "flags", 1), code=EUNSUP)


@pytest.mark.parametrize("field,change,code", [
    ("RULE", {"rule": 99}, EINVAL), ("T", {"t": 0}, EINVAL),
    ("FLAGS", {"flags": 1 << 20}, EUNSUP), ("FLAGS", {"reserved": 1}, EUNSUP),
])
def test_invalid_group_is_named(field, change, code):
    g = adam_group()
    for k, v in change.items():
        setattr(g, k, v)
    _bad(field, lambda ts, a, b: None, code=code, where="GROUP", group=g)


@pytest.mark.parametrize("field,change", [
    ("GRAD_SCALE", {"grad_scale": 0.0}), ("CLIP", {"clip": 7}),
    ("MAX_NORM", {"clip": 1, "max_norm": 0.0}), ("CLIP_VALUE", {"clip_value": -1.0}),
    ("NORM_TYPE", {"norm_type": 5}), ("MEASURE", {"measure": 2, "check_finite": 1}),
])
def test_invalid_option_is_named(field, change):
    _bad(field, lambda ts, a, b: None, where="OPTS", index=-1, o=opts(**change))


def test_a_newer_struct_is_unsupported_unless_its_tail_is_zero():
    class Longer(ct.Structure):
        _fields_ = [("base", S["fastopt_opts"]), ("extra", ct.c_int64)]
    o = Longer()
    o.base.size, o.base.grad_scale = ct.sizeof(Longer), 1.0
    x, g, m, v = adam_arrays(8)
    res = result()
    args = (x.ctypes.data_as(ct.POINTER(ct.c_float)), g.ctypes.data_as(ct.POINTER(ct.c_float)),
            m.ctypes.data_as(ct.POINTER(ct.c_float)), v.ctypes.data_as(ct.POINTER(ct.c_float)),
            None, x.size, ct.byref(adam_group()))
    oo = ct.cast(ct.byref(o), ct.POINTER(S["fastopt_opts"]))
    assert F["step_f32"](*args, oo, ct.byref(res), 1) == OK
    o.extra = 1
    before = x.copy()
    assert F["step_f32"](*args, oo, ct.byref(res), 1) == EUNSUP
    assert res.error_field == FIELD["SIZE"]
    _unchanged([x], [before])


def test_out_of_memory_is_reported():
    x, g, m, v = adam_arrays(8)
    ts = (S["fastopt_tensor"] * 1)(tensor(x, g, m, v))
    res = result()
    rc = F["step"](ts, 1 << 60, (S["fastopt_group"] * 1)(adam_group()), 1,
                   ct.byref(opts()), ct.byref(res), 1)
    assert rc == ENOMEM


def test_a_short_result_is_invalid_and_not_written():
    res = result()
    res.size, res.norm = 4, 123.0
    assert F["global_norm"](None, None, None, 0, 1.0, 0, ct.byref(res), 1) == EINVAL
    assert res.norm == 123.0


def test_gradient_lists():
    gs = [np.ones(16, np.float32), np.ones(16, np.float32)]
    ptrs, ns, dts = grad_lists(gs)
    res = result()
    assert F["global_norm"](ptrs, ns, dts, 2, 1.0, C["FASTOPT_NORM_SUMSQ"],
                            ct.byref(res), 1) == OK
    assert res.norm == 32.0
    dts[1] = 42
    assert F["global_norm"](ptrs, ns, dts, 2, 1.0, 0, ct.byref(res), 1) == EINVAL
    assert (res.error_field, res.error_index) == (FIELD["DTYPE"], 1)
    ptrs, ns, dts = grad_lists(gs)
    ptrs[1] = gs[0].ctypes.data + 4                  # two written gradients overlap
    before = gs[0].copy()
    o = opts(clip=C["FASTOPT_CLIP_TORCH"], max_norm=0.5)
    assert F["clip_grads"](ptrs, ns, dts, 2, ct.byref(o), ct.byref(res), 1) == EINVAL
    assert (res.error_field, res.error_index) == (FIELD["G"], 1)
    _unchanged([gs[0]], [before])
    assert F["global_norm"](ptrs, ns, dts, -1, 1.0, 0, ct.byref(res), 1) == EINVAL
    assert res.error_field == FIELD["COUNT"]


def _agc(x, g, v=None, **kw):
    return new("fastopt_agc_tensor", x=x.ctypes.data, g=g.ctypes.data,
               v=None if v is None else v.ctypes.data, n_units=x.shape[0],
               unit_len=x.size // x.shape[0], clipping=0.01, dtype=0, **kw)


def test_agc_errors():
    x, g = np.ones((4, 8), np.float32), np.full((4, 8), 3.0, np.float32)
    res = result()
    ts = (S["fastopt_agc_tensor"] * 1)(_agc(x, g, kind=3))
    before = g.copy()
    assert F["agc"](ts, 1, 1e-3, ct.byref(res), 1) == EINVAL
    assert res.error_field == FIELD["KIND"]
    assert F["agc"]((S["fastopt_agc_tensor"] * 1)(_agc(x, g)), 1, 0.0, ct.byref(res), 1) \
        == EINVAL and res.error_field == FIELD["EPS"]
    grp = new("fastopt_group", rule=RULE["adam_torch"], t=1, lr=0.1)
    assert F["agc_momentum"]((S["fastopt_agc_tensor"] * 1)(_agc(x, g, x)), 1, 1e-3,
                             ct.byref(grp), ct.byref(res), 1) == EINVAL
    assert res.error_field == FIELD["RULE"]
    grp.rule = RULE["momentum"]
    assert F["agc_momentum"]((S["fastopt_agc_tensor"] * 1)(_agc(x, g, x)), 1, 1e-3,
                             ct.byref(grp), ct.byref(res), 1) == EINVAL
    assert res.error_field == FIELD["V"]              # v is x: overlap
    _unchanged([g, x], [before, np.ones((4, 8), np.float32)])
    assert F["agc"]((S["fastopt_agc_tensor"] * 1)(_agc(x, g)), 1, 1e-3, ct.byref(res), 1) == OK
    assert res.applied == 1 and not np.array_equal(g, before)


def test_error_strings():
    for code in (OK, ENOMEM, EINVAL, EUNSUP):
        assert F["error_string"](code)
    assert F["error_string"](-99) == b"unknown return code"
    assert F["field_name"](10 ** 6) == b"?"


def _longer(name):
    return type("Longer", (ct.Structure,), {"_fields_": [("base", S[name]),
                                                        ("extra", ct.c_int64 * 2)]})


def test_lists_are_read_with_the_callers_stride():
    """Tensors and groups of a newer, longer struct (unknown tail zero) step
    as the same records of this version do."""
    runs = []
    for longer in (False, True):
        a, b, recs = _two_tensors()
        groups = [adam_group(), adam_group(lr=0.5)]
        recs[1].group = 1
        if longer:
            TL, GL = _longer("fastopt_tensor"), _longer("fastopt_group")
            ts, gs = (TL * 2)(), (GL * 2)()
            for arr, src, cls in ((ts, recs, TL), (gs, groups, GL)):
                for k, rec in enumerate(src):
                    arr[k].base = rec
                    arr[k].base.size = ct.sizeof(cls)
            res = result()
            rc = F["step"](ct.cast(ts, ct.POINTER(S["fastopt_tensor"])), 2,
                           ct.cast(gs, ct.POINTER(S["fastopt_group"])), 2,
                           ct.byref(opts()), ct.byref(res), 1)
        else:
            rc, res = step(recs, groups)
        assert rc == OK and res.applied == 1
        runs.append([arr.tobytes() for arr in list(a) + list(b)])
    assert runs[0] == runs[1]
