"""The catalogue of rejected inputs, one entry per case (the entries live in
the package tests/bad_inputs/, a module per public area), shared by
tests/test_bad_inputs.py (which checks each exception, its exact message and
that no array changed) and tests/BAD_INPUTS.md (generated from this list:
`python tests/test_bad_inputs.py --write`).

Each case builds fresh arguments; earlier tensors of the long lists are valid
and in the fast path's form, so a fast path that wrote before declining, or a
slow path that wrote before raising, would show up as a changed array.
"""
from bad_inputs.agc import AGC_CASES  # noqa: F401
from bad_inputs.builders import LAST, LONG, Case, arr  # noqa: F401
from bad_inputs.ops import CASES  # noqa: F401
from bad_inputs.optim import OPTIM_CASES, opt_call  # noqa: F401
from bad_inputs.schedules import SCHEDULE_CASES  # noqa: F401
