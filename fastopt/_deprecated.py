"""Old public names kept for one release: each warns and gives its new name's
object. A module lists ``_DEPRECATED = {old: (new, why)}`` and its
``__getattr__`` calls :func:`resolve`."""
from __future__ import annotations

import warnings


def resolve(module: str, namespace: dict, table: dict, name: str):
    """The object ``name`` now stands for in ``module`` (whose globals are
    ``namespace``), after a DeprecationWarning pointing at the caller."""
    new, why = table[name]
    warnings.warn(f"{module}.{name} is deprecated and will be removed in the next release; "
                  f"use {module}.{new} ({why})", DeprecationWarning, stacklevel=3)
    return namespace[new]
