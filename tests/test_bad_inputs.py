"""Every rejected input of the catalogue (tests/bad_inputs_cases.py): the
exception type, its exact message, and that no array -- nor the array a view
was taken from -- changed by a single byte. tests/BAD_INPUTS.md is generated
from the same list; a test checks it is in sync.

Regenerate the document after changing the cases:

    python tests/test_bad_inputs.py --write
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from bad_inputs_cases import AGC_CASES, LAST, LONG, OPTIM_CASES, SCHEDULE_CASES
from bad_inputs_cases import CASES as CORE_CASES

import fastopt

CASES = list(CORE_CASES)
if hasattr(fastopt, "agc"):
    CASES += AGC_CASES
try:
    import fastopt.schedules  # noqa: F401
    CASES += SCHEDULE_CASES
except ImportError:  # pragma: no cover - before fastopt.schedules existed
    pass
try:
    import fastopt.optim  # noqa: F401
    CASES += OPTIM_CASES
except ImportError:  # pragma: no cover - before fastopt.optim existed
    pass
from bad_inputs_hostile import HOSTILE_CASES, normalise  # noqa: E402

CASES += HOSTILE_CASES
from bad_inputs_guards import ELSEWHERE, GUARD_CASES  # noqa: E402

CASES += GUARD_CASES
from hardening_ref import snapshot, unchanged  # noqa: E402

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "BAD_INPUTS.md")


def describe(case) -> str:
    return case.what.replace("{L}", str(LAST)).replace("{N}", str(LONG))


def invoke(case):
    args, kwargs, fn = case.call()
    snap = snapshot((args, kwargs))
    with pytest.raises(case.exc) as info:
        if case.func == "set_num_threads":
            with fn(*args, **kwargs):
                pass
        else:
            fn(*args, **kwargs)
    return info.value, snap


@pytest.mark.parametrize("case", CASES, ids=[f"{c.func}-{describe(c)}" for c in CASES])
def test_rejected_with_message_and_nothing_modified(case):
    err, snap = invoke(case)
    assert type(err) is case.exc
    assert normalise(str(err)) == case.message
    changed = unchanged(snap)
    assert not changed, f"{len(changed)} arrays changed although the call was rejected"


def test_catalogue_covers_every_public_function():
    funcs = {c.func for c in CASES}
    assert {"onnx_momentum", "onnx_adagrad", "onnx_adam", "set_num_threads"} <= funcs
    if hasattr(fastopt, "schedules"):
        assert {"schedules.angel", "schedules.Exponential"} <= funcs
    if hasattr(fastopt, "agc"):
        assert {"agc", "unitwise_norm"} <= funcs
    if hasattr(fastopt, "optim"):
        assert {"optim.OnnxAdam", "optim.OnnxMomentum.step"} <= funcs


def test_a_rejected_call_leaves_nothing_behind():
    # after every rejection, the same process still updates correctly
    for case in CASES:
        try:
            invoke(case)
        except pytest.skip.Exception:   # an optional dependency is missing
            continue
    x = np.ones(5, np.float32)
    v = np.zeros(5, np.float32)
    fastopt.onnx_momentum(x, np.full(5, 2.0, np.float32), v, lr=0.5, t=0)
    np.testing.assert_array_equal(x, np.zeros(5, np.float32))
    assert fastopt.get_num_threads() >= 1


# ------------------------------------------------------------- the document

def render() -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    lines = [
        "# Rejected inputs",
        "",
        "Every input fastopt rejects, with the exception and its exact message. "
        "Generated from `tests/bad_inputs_cases.py` by `python tests/test_bad_inputs.py "
        "--write`; `tests/test_bad_inputs.py` checks every row: the exception type, the "
        "message word for word, and that no array (nor the array a view was taken from) "
        "changed by a single byte. In the long-list rows the first "
        f"{LONG - 1} tensors are valid and would have taken the fast path, yet none of "
        "them is touched.",
        "",
        "| # | function | bad input | exception | message |",
        "|---|---|---|---|---|",
    ]
    for i, c in enumerate(CASES, 1):
        lines.append(f"| {i} | `{c.func}` | {esc(describe(c))} | {c.exc.__name__} | "
                     f"`{esc(c.message)}` |")
    lines += [
        "",
        "## Rejections the table cannot hold",
        "",
        "Cases that need several MPI ranks, a second thread or the command line; each "
        "has its own test.",
        "",
        "| bad input | result | test |",
        "|---|---|---|",
    ]
    for what, result, test in ELSEWHERE:
        lines.append(f"| {esc(what)} | {esc(result)} | `{esc(test)}` |")
    return "\n".join(lines) + "\n"


def test_document_in_sync():
    with open(DOC, encoding="utf-8") as f:
        assert f.read() == render(), (
            "tests/BAD_INPUTS.md is out of date: run python tests/test_bad_inputs.py --write")


if __name__ == "__main__":
    if "--write" in sys.argv:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(render())
        print(f"wrote {DOC} ({len(CASES)} cases)")
    else:
        print(render())
