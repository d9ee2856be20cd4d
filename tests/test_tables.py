"""The rule and element-type tables agree across languages: the rows the
compiled core reports (src_c/tables.h, read through the extension) are the
rows of fastopt/_rules.py and fastopt/_dtypes.py, in the same order."""
import numpy as np
import pytest

from fastopt import _dtypes, _ext, _rules, _step


def test_rules_agree_with_the_c_table():
    c = _ext.tables()["rules"]
    py = [(r.name.upper(), len(r.states), r.t0, r.own16, r.q8, r.q8n) for r in _rules.RULES]
    assert py == c


def test_a_group_holds_as_many_extra_values_as_the_c_group():
    assert _step.EXTRA == _ext.tables()["step_extra"]
    assert len(_step.group_tuple(0, t=1, lr=0.1)) == 10 + _step.EXTRA


def test_rule_ids_are_row_indices():
    assert [_rules.ID[r.name] for r in _rules.RULES] == list(range(len(_rules.RULES)))


def test_dtypes_agree_with_the_c_table():
    c = _ext.tables()["dtypes"]
    py = [(d.name, d.numpy.itemsize) for d in _dtypes.DTYPES]
    assert py == c
    assert all(d.numpy == d.numpy.newbyteorder("=") for d in _dtypes.DTYPES)
    import ml_dtypes
    assert _dtypes.CODE == {np.dtype(np.float32): 0, np.dtype(np.float64): 1,
                            np.dtype(ml_dtypes.bfloat16): 2, np.dtype(np.float16): 3,
                            np.dtype(np.uint8): 4}


def test_pairs_and_copies_agree_with_the_c_table():
    t = _ext.tables()
    assert t["pairs"] == sorted(_dtypes.PAIRS, key=lambda p: [
        [d.name for d in _dtypes.DTYPES].index(n) for n in p])
    assert sorted(t["copies"]) == sorted(_dtypes.COPIES)
    assert sorted(t["states"]) == sorted(_dtypes.STATES + _dtypes.Q8_STATES + tuple(
        (h, h) for h in _dtypes.OWN_HALF))
    from fastopt._reference import bnb8, half
    assert t["key_step"] == half.KEY_STEP == 0x9E3779B97F4A7C15
    from fastopt import _q8
    assert t["q8_block"] == _q8.BLOCK == bnb8.BLOCK == 256
    assert _step.ROUNDING == {"auto": 0, "nearest": t["round_nearest"],
                              "stochastic": t["round_stochastic"]}
    # every float type may be a gradient alone (the norm, the clip); 8-bit
    # codes are states only
    assert t["grads"] == {d.name: d.name != "Q8" for d in _dtypes.DTYPES}
    assert _dtypes.GRADS == tuple(d.numpy for d in _dtypes.DTYPES if d.name != "Q8")
    # the types fastopt updates are those paired with themselves
    assert _dtypes.NUMPY == (np.dtype(np.float32), np.dtype(np.float64))


def test_the_c_core_refuses_a_rule_outside_its_table():
    # a group whose rule id is one past the table's last row: declined by
    # the fast path (None), so nothing runs and nothing is written
    x = np.ones(4, np.float32)
    g = np.ones(4, np.float32)
    s = np.zeros(4, np.float32)
    group = _step.group_tuple(len(_rules.RULES), t=1, lr=0.1, alpha=0.9, beta=0.999,
                              eps=1e-8)
    out = _ext.step((x,), (g,), (s,), (s,), (s,), (0,), (group,), 1.0, 0.0, 0.0, 0, 0,
                    False, 1)
    assert out is None
    assert (x == 1).all() and (s == 0).all()
    # the same call with the table's last rule runs (the refusal is the rule's)
    last = (len(_rules.RULES) - 1,) + group[1:]
    s1, s2, s3 = (np.zeros(4, np.float32) for _ in range(3))
    assert _ext.step((x,), (g,), (s1,), (s2,), (s3,), (0,), (last,), 1.0, 0.0, 0.0, 0, 0,
                     False, 1) is not None


def test_the_fast_paths_take_exactly_the_python_rows():
    assert _ext.registered_dtypes() == {d.numpy.num: code
                                        for code, d in enumerate(_dtypes.DTYPES)}


def test_a_type_outside_the_c_table_cannot_be_registered():
    with pytest.raises(ValueError, match="no C element type"):
        _ext.register_dtype(np.int16, len(_dtypes.DTYPES))
    # as wide as its C type, in native order, and one code for good
    with pytest.raises(ValueError, match="is not C type 1"):
        _ext.register_dtype(np.int16, 1)
    with pytest.raises(ValueError, match="is not C type 0"):
        _ext.register_dtype(np.dtype(np.float32).newbyteorder(), 0)
    with pytest.raises(ValueError, match="is C type 3 already"):
        _ext.register_dtype(np.float16, 2)
    assert np.dtype(np.int16).num not in _ext.registered_dtypes()
    assert _ext.registered_dtypes() == {d.numpy.num: code
                                        for code, d in enumerate(_dtypes.DTYPES)}


@pytest.mark.parametrize("dtype", [np.int16, np.float16])
def test_a_type_the_update_does_not_take_declines_the_fast_path(dtype):
    # int16 has no row, float16 is a gradient's type, not a parameter's: the
    # fast path declines with nothing written (the slow path then raises
    # TypeError naming the dtype)
    x = np.ones(4, dtype)
    v = np.zeros(4, dtype)
    assert _ext.momentum((x, np.ones(4, dtype), v),
                         (0.1, 1, 0.9, 1.0, 0.0, "standard", 1)) is False
    assert (x == 1).all() and (v == 0).all()
