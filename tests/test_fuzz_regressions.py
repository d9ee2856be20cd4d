"""Regressions for bugs the API fuzzer (tests/fuzz_api.py) found."""
from __future__ import annotations

import numpy as np
import pytest

import fastopt


def test_optimizer_with_an_empty_parameter_group_steps_every_other_group():
    # A group with "params": [] used to reach the kernel as an empty list,
    # which raised *after* the earlier groups had been updated.
    optim = pytest.importorskip("fastopt.optim")
    for cls in (optim.Momentum, optim.Adagrad, optim.Adam):
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
    with pytest.raises(ValueError, match="conf must be a mapping"):
        schedules.angel(conf, 0.1)
    with pytest.raises(ValueError, match="conf must be a mapping"):
        schedules.angel_on_batch(conf)


def test_fastopt_still_imports():
    assert callable(fastopt.momentum)


@pytest.mark.parametrize("container", [list, tuple])
def test_adam_none_second_state_in_a_list_is_rejected_not_dereferenced(container):
    # fastopt.adam([x], [g], [v], [None]) used to pass the fast path with a
    # NULL h pointer and crash (segfault) in the C kernel.
    x = np.ones(5, np.float32)
    g = np.full(5, 0.5, np.float32)
    v = np.zeros(5, np.float32)
    with pytest.raises(TypeError, match=r"h\[0\] must be a numpy.ndarray, got NoneType"):
        fastopt.adam(container([x]), container([g]), container([v]), container([None]),
                     lr=0.1, t=1)
    assert (x == 1).all() and (v == 0).all()
    xs = [np.ones(3, np.float64), np.ones(4, np.float32)]
    with pytest.raises(TypeError, match=r"h\[1\] must be a numpy.ndarray, got NoneType"):
        fastopt.adam(xs, [a.copy() for a in xs], [np.zeros_like(a) for a in xs],
                     [np.zeros_like(xs[0]), None], lr=0.1, t=1)
    assert all((a == 1).all() for a in xs)
