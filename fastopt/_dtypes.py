"""The element types fastopt stores: one row each, in the C table's order.

The Python side of ``src_c/tables.h``'s ``FO_DTYPE_TABLE`` (the C code of
a type is its row's index; ``tests/test_tables.py`` asserts the rows agree
with the compiled core). A row names the type as NumPy, torch and MPI do,
so every front end takes the list of types it accepts from here.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _ext


class DType(NamedTuple):
    name: str          # the C row's NAME
    numpy: np.dtype    # native byte order
    torch: str         # the torch.dtype attribute name
    mpi: str           # the mpi4py datatype attribute name


DTYPES = (
    DType("F32", np.dtype(np.float32), "float32", "FLOAT"),
    DType("F64", np.dtype(np.float64), "float64", "DOUBLE"),
)

#: the NumPy dtypes (native byte order) fastopt updates
NUMPY = tuple(d.numpy for d in DTYPES)
#: NumPy dtype (native) -> C code
CODE = {d.numpy: i for i, d in enumerate(DTYPES)}
#: a phrase for messages: "float32 or float64"
NAMES = " or ".join(str(d.numpy) for d in DTYPES)

# the compiled fast paths take exactly these types
for _code, _d in enumerate(DTYPES):
    _ext.register_dtype(_d.numpy, _code)


def torch_dtypes(torch) -> tuple:
    """The torch dtypes fastopt updates (torch passed in: this module does
    not import it)."""
    return tuple(getattr(torch, d.torch) for d in DTYPES)


def mpi_type(MPI, dtype):
    """The MPI datatype of a NumPy dtype fastopt stores."""
    return getattr(MPI, DTYPES[CODE[np.dtype(dtype).newbyteorder("=")]].mpi)
