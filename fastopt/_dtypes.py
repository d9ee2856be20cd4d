"""The element types fastopt stores: one row each, in the C table's order.

The Python side of ``src_c/tables.h``'s ``FO_DTYPE_TABLE``, ``FO_PAIR_TABLE``,
``FO_SPAIR_TABLE`` and ``FO_COPY_TABLE`` (the C code of a type is its row's index;
``tests/test_tables.py`` asserts the rows agree with the compiled core). A
row names the type as NumPy, torch and MPI do, so every front end takes the
list of types it accepts from here.

bfloat16 is ``ml_dtypes.bfloat16`` (NumPy has no bfloat16 of its own; JAX
and TensorFlow use that one), found by its dtype, never by a type number;
without ml_dtypes installed the row has no NumPy dtype (``numpy`` None) and
bfloat16 arrays cannot reach fastopt. float16 is NumPy's own.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from . import _ext

try:
    import ml_dtypes as _ml_dtypes
except ImportError:  # pragma: no cover - ml_dtypes is a dependency
    _BF16 = None
else:
    _BF16 = np.dtype(_ml_dtypes.bfloat16)


class DType(NamedTuple):
    name: str                   # the C row's NAME
    numpy: Optional[np.dtype]   # native byte order (None: not importable here)
    torch: str                  # the torch.dtype attribute name
    mpi: str                    # the mpi4py datatype attribute name (16-bit: raw words)


DTYPES = (
    DType("F32", np.dtype(np.float32), "float32", "FLOAT"),
    DType("F64", np.dtype(np.float64), "float64", "DOUBLE"),
    DType("BF16", _BF16, "bfloat16", "UINT16_T"),
    DType("F16", np.dtype(np.float16), "float16", "UINT16_T"),
    DType("Q8", np.dtype(np.uint8), "uint8", "UINT8_T"),
)
_BY_NAME = {d.name: d for d in DTYPES}

#: (parameters' and states' type, gradients' type) a step updates: each
#: type with itself, and 16-bit gradients for float32/float64 parameters
PAIRS = (("F32", "F32"), ("F64", "F64"), ("F32", "BF16"), ("F32", "F16"),
         ("F64", "BF16"), ("F64", "F16"))
#: (parameters' type, type of their rounded copy) a step can write
COPIES = (("F32", "BF16"), ("F32", "F16"))
#: (parameters' type, their states' type) a step updates: each type's own,
#: and bfloat16 states of float32 parameters (FO_SPAIR_TABLE, stored apart)
STATES = (("F32", "F32"), ("F64", "F64"), ("F32", "BF16"))
#: (parameters' type, their states' type) of 8-bit blockwise states (codes
#: into a map, a float32 absmax per block: fastopt/_q8.py), which the
#: functions taking them check themselves
Q8_STATES = (("F32", "Q8"),)
#: 16-bit types a step also updates in their own type, with gradients and
#: states of it, computed in float32 (FO_SPAIR_TABLE's last rows): torch's
#: way for a bfloat16 or float16 model, taken by the torch drop-ins only
#: (``_ext.step(..., half_params=True)``); the NumPy front ends update
#: float32 and float64 parameters
OWN_HALF = ("BF16", "F16")

#: NumPy dtype (native) -> C code, for every type importable here
CODE = {d.numpy: i for i, d in enumerate(DTYPES) if d.numpy is not None}
#: the NumPy dtypes (native byte order) fastopt updates: parameters and states
NUMPY = tuple(_BY_NAME[x].numpy for x, g in PAIRS if x == g)
#: the NumPy dtypes a gradient may have (with parameters of a fitting type)
GRADS = tuple(dict.fromkeys(_BY_NAME[g].numpy for x, g in PAIRS
                            if _BY_NAME[g].numpy is not None))
#: a phrase for messages: "float32 or float64"
NAMES = " or ".join(str(d) for d in NUMPY)


def _numpy_pairs(table) -> dict:
    out: dict = {}
    for x, other in table:
        if _BY_NAME[other].numpy is not None:
            out.setdefault(_BY_NAME[x].numpy, []).append(_BY_NAME[other].numpy)
    return {k: tuple(v) for k, v in out.items()}


#: NumPy dtype of parameters -> the gradients' dtypes a step takes with them
GRADS_OF = _numpy_pairs(PAIRS)
#: NumPy dtype of parameters -> the dtypes of a rounded copy of them
COPIES_OF = _numpy_pairs(COPIES)
#: NumPy dtype of parameters -> the dtypes their states may have
STATES_OF = _numpy_pairs(STATES)

# the compiled fast paths take exactly these types
for _code, _d in enumerate(DTYPES):
    if _d.numpy is not None:
        _ext.register_dtype(_d.numpy, _code)


def phrase(dtypes) -> str:
    """"a, b or c" of the dtypes' names, for messages."""
    names = [str(d) for d in dtypes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def working_type(g, x) -> np.dtype:
    """The dtype of a gradient's scratch copy (AGC's route, which reads
    gradients of its parameter's type): x's for a 16-bit gradient of a
    float32/float64 parameter (widened exactly, so the copy holds the values
    a step reads), else the gradient's own in native order."""
    native = g.dtype.newbyteorder("=")
    if (native in GRADS and native not in NUMPY and isinstance(x, np.ndarray)
            and x.dtype.newbyteorder("=") in NUMPY):
        return x.dtype.newbyteorder("=")
    return native


def torch_dtypes(torch) -> tuple:
    """The torch dtypes fastopt updates (torch passed in: this module does
    not import it)."""
    return tuple(getattr(torch, _BY_NAME[x].torch) for x, g in PAIRS if x == g)


def mpi_type(MPI, dtype):
    """The MPI datatype of a NumPy dtype fastopt stores."""
    return getattr(MPI, DTYPES[CODE[np.dtype(dtype).newbyteorder("=")]].mpi)
