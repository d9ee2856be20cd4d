"""Kept for the modules that import it by this name (tests/fuzz_api.py ...).

The references and their checks live in fastopt._reference (``tracked``: the
update rules with an error bound; ``agc``: unit norms and clipping); the
array placement and snapshot helpers in tests/layouts.py. New code imports
those directly.
"""
from layouts import Placed, layout_names, place, snapshot, unchanged  # noqa: F401

from fastopt._reference.agc import (  # noqa: F401
    check_agc,
    check_unitwise_norm,
    norm_error,
    unit_axes,
    unit_norms,
)
from fastopt._reference.agc import unit_norms as unit_norms64  # noqa: F401
from fastopt._reference.tracked import (  # noqa: F401
    FLOATS,
    REFS,
    STATES,
    Arith,
    Tracked,
    check_close,
)
from fastopt._reference.tracked import adagrad as adagrad_ref  # noqa: F401
from fastopt._reference.tracked import adam as adam_ref  # noqa: F401
from fastopt._reference.tracked import momentum as momentum_ref  # noqa: F401
