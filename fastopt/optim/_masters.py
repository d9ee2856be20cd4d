"""Master weights (``master_weights=True``): the optimizer updates float32
masters of the 16-bit parameters it was given and writes each new master,
rounded as ``astype`` rounds, into its 16-bit array in the same pass (the
whole step's ``param_copies``); float32/float64 parameters are their own
masters."""
from __future__ import annotations

import numpy as np

from .. import _dtypes

#: the 16-bit types a parameter may have under master weights: those float32
#: parameters are copied to
HALF = _dtypes.COPIES_OF.get(np.dtype(np.float32), ())


def _master(f, label, p, copies):
    if isinstance(p, np.ndarray) and _is_half(p.dtype):
        if not p.flags.writeable:
            raise ValueError(f"{f}: {label} is read-only; with master_weights=True it is "
                             f"rewritten from its float32 master every step")
        copies.append(p)
        return np.array(p, dtype=np.float32, order="F" if _f_only(p) else "C")
    if isinstance(p, np.ndarray) and not (p.dtype.fields is None
                                          and p.dtype.newbyteorder("=") in _dtypes.NUMPY):
        raise TypeError(f"{f}: {label} has dtype {p.dtype}; with master_weights=True "
                        f"fastopt updates {_dtypes.phrase(_dtypes.NUMPY)} arrays and keeps "
                        f"float32 masters of {_dtypes.phrase(HALF)} ones")
    copies.append(None)
    return p


def _is_half(dtype) -> bool:
    return dtype.fields is None and dtype.newbyteorder("=") in HALF


def _f_only(p) -> bool:
    return p.flags.f_contiguous and not p.flags.c_contiguous


def split(f, params):
    """(params with each 16-bit array replaced by a new float32 master of
    its values, in its layout; per parameter in group order, the 16-bit
    array or None). A params argument of another form is returned as it
    is (the optimizer's checks then say what is wrong with it)."""
    copies: list = []
    if not isinstance(params, (list, tuple)):
        return params, copies
    if params and all(isinstance(g, dict) for g in params):
        out, k = [], 0
        for g in params:
            ps = g.get("params")
            ps = [ps] if isinstance(ps, np.ndarray) else ps
            if isinstance(ps, (list, tuple)):
                g = dict(g, params=[_master(f, f"params[{k + i}]", p, copies)
                                    for i, p in enumerate(ps)])
                k += len(ps)
            out.append(g)
        return out, copies
    return [_master(f, f"params[{i}]", p, copies) for i, p in enumerate(params)], copies


def refresh(opt) -> None:
    """Rewrite every 16-bit parameter from its master (after a route that
    does not write them itself, and after a checkpoint is loaded)."""
    if opt._copies is None:
        return
    for m, c in zip(opt.params, opt._copies):
        if c is not None:
            np.copyto(c, m, casting="unsafe")


def copies_of(opt, where) -> tuple | None:
    """The param_copies of a work list whose tensors are params[where[j]]."""
    if opt._copies is None:
        return None
    return tuple(opt._copies[k] for k in where)
