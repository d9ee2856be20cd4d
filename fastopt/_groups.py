"""Parameter groups and gradient lists as every optimizer front end takes
them (``fastopt.optim`` and ``fastopt.distributed``): one checker each, the
same messages in both."""
from __future__ import annotations

import numpy as np

from . import _dtypes
from . import _validation as _v


def group_params(f, group, where, n, dtypes=None):
    """The checked parameter list of one group; n parameters come before it;
    their dtypes those fastopt updates (or one of ``dtypes``)."""
    if "params" not in group:
        raise ValueError(f"{f}: {where} has no 'params' entry")
    ps = group["params"]
    if isinstance(ps, np.ndarray):
        ps = [ps]
    if not isinstance(ps, (list, tuple)):
        raise TypeError(f"{f}: {where}['params'] must be a list of arrays, got "
                        f"{type(ps).__name__}")
    ps = list(ps)
    for i, p in enumerate(ps):
        label = f"params[{n + i}]"
        if not isinstance(p, np.ndarray):
            raise TypeError(f"{f}: {label} must be a numpy.ndarray, got "
                            f"{type(p).__name__}")
        if p.dtype.newbyteorder("=") not in (dtypes or _dtypes.NUMPY):
            names = _dtypes.phrase(dtypes) if dtypes else _dtypes.NAMES
            raise TypeError(f"{f}: {label} has dtype {p.dtype}; fastopt updates "
                            f"{names} arrays")
        if not p.flags.writeable:
            raise ValueError(f"{f}: {label} is read-only; it is updated in place")
    return ps


def split_counts(f, grads, sizes):
    """grads -> one list per group of sizes[i] entries; grads is either one
    flat list (one entry per parameter) or one list per group. Raises in
    ``f``'s name when neither form fits."""
    if not isinstance(grads, (list, tuple)):
        raise TypeError(f"{f}: grads must be a list with one gradient per parameter "
                        f"(or one list per group), got {_v._got(grads)}")
    if _v._numbers(grads) and len(grads) != sum(sizes):
        raise TypeError(f"{f}: grads is a {type(grads).__name__} of numbers; give one "
                        f"gradient array per parameter (np.asarray(..., dtype=...) makes "
                        f"an array of its parameter's dtype)")
    if (len(grads) == len(sizes) and len(grads) > 0
            and all(isinstance(g, (list, tuple)) for g in grads)):
        for gi, (gg, n) in enumerate(zip(grads, sizes)):
            if _v._numbers(gg):
                raise TypeError(f"{f}: grads[{gi}] is a {type(gg).__name__} of numbers, "
                                f"not a gradient array; convert it with np.asarray(..., "
                                f"dtype=...) to an array of its parameter's dtype")
            if len(gg) != n:
                raise ValueError(f"{f}: grads[{gi}] has {len(gg)} gradients but "
                                 f"param_groups[{gi}] has {n} parameters")
        return [list(gg) for gg in grads]
    total = sum(sizes)
    if len(grads) != total:
        raise ValueError(f"{f}: grads has {len(grads)} entries but the optimizer has "
                         f"{total} parameters; give one gradient (or None) per parameter")
    out, k = [], 0
    for n in sizes:
        out.append(list(grads[k:k + n]))
        k += n
    return out
