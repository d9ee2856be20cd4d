"""Argument checking: the one place that raises for user input.

The fast paths in the extension (``_ext``) accept only calls that are
already in the exact form the C code needs and decline everything else
without writing. ``_dispatch`` then calls the checkers here: each raises a
TypeError (wrong type) or ValueError (wrong value) that names the function,
the argument and the tensor index, and the tensor checkers *normalise* the
call (contiguous native copies of awkward layouts, materialised broadcast
gradients) so it can go through the fast path, with the copies written back
afterwards. Nothing is written to any array before every check has passed.

One checker per concept: lr, t, real, mode, layout, clipping, n_threads,
array (check_array), the tensors of an update (tensors), of a clip
(agc_tensors), and overlaps (sharing_pairs, _overlaps).

Labels: the tensor checkers name arrays by role ("x", "g", "v", "h") and
index, as in ``g[3]``. A caller with its own names (``fastopt.optim``: say
``grads[3]``, ``params[1]``) passes ``labels``, a dict from role to either a
name (used instead of the role, the index appended for lists) or a sequence
with the full label of every tensor (for a call over a subset of tensors).
"""
from __future__ import annotations

import math
import numbers
import operator
import sys

import numpy as np

try:  # NumPy >= 2.0
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # pragma: no cover - NumPy 1.x
    _byte_bounds = np.byte_bounds  # noqa: NPY201 (the NumPy 1.x name)

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
MAX_THREADS = 1024   # as MAX_THREADS in _accept.pxi
_LAYOUTS = ("oi", "io")
_T_MAX = 2**63


def _type_name(obj) -> str:
    return type(obj).__name__


def _hint(obj) -> str:
    """Advice for a common wrong type: a torch tensor."""
    if type(obj).__module__.split(".")[0] == "torch":
        return ("; call .numpy() on it (a CPU tensor shares its memory), or use "
                "fastopt.torch for torch tensors")
    return ""


def _masked(obj) -> bool:
    ma = sys.modules.get("numpy.ma")   # no masked array exists before it loads
    return ma is not None and isinstance(obj, ma.MaskedArray)


def check_array(fname: str, label: str, a, verb: str = "updates") -> None:
    """A numpy.ndarray of float32 or float64 (any byte order), not a masked
    array (fastopt would update its masked elements too). verb: what
    fastopt does to such arrays, for the message ("works on" for read ones)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{fname}: {label} must be a numpy.ndarray, got "
                        f"{_type_name(a)}{_hint(a)}")
    if _masked(a):
        raise TypeError(
            f"{fname}: {label} is a numpy.ma.MaskedArray; fastopt would update its "
            f"masked elements too. Pass {label}.data (the whole array) or a "
            f"plain array of the elements to update")
    if a.dtype.newbyteorder("=") not in _FLOATS:
        raise TypeError(
            f"{fname}: {label} has dtype {a.dtype}; fastopt {verb} float32 or "
            f"float64 arrays")


# ---------------------------------------------------------------- scalars

def _to_float(value) -> float:
    """float(value), with integers too large for a double as +-inf (so the
    finiteness checks reject them with their own message)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _one_element(fname: str, name: str, value, kinds: str, what: str, word: str):
    """value, or the item of a one-element array of a dtype kind in kinds
    (another array raises: ``name must be what or a one-element word array``)."""
    if not isinstance(value, np.ndarray):
        return value
    if value.size != 1 or value.dtype.kind not in kinds:
        raise TypeError(
            f"{fname}: {name} must be {what} or a one-element {word} array"
            f", got an array of shape {value.shape} and dtype {value.dtype}")
    return value.reshape(()).item()


def check_lr(fname: str, lr, name: str = "lr") -> float:
    """A finite learning rate >= 0, from a real number or a one-element array."""
    lr = _one_element(fname, name, lr, "fiu", "a real number", "real")
    if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, numbers.Real):
        raise TypeError(f"{fname}: {name} must be a real number, got {_type_name(lr)}")
    value = _to_float(lr)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{fname}: {name} must be a finite number >= 0, got {value!r}")
    return value


def check_t(fname: str, t, name: str = "t") -> int:
    """The update count T: an integer in [0, 2**63), or a one-element int array."""
    t = _one_element(fname, name, t, "iu", "an integer", "integer")
    if isinstance(t, (bool, np.bool_)):
        raise TypeError(f"{fname}: {name} must be an integer, got bool")
    try:
        value = operator.index(t)
    except TypeError:
        raise TypeError(f"{fname}: {name} must be an integer, got {_type_name(t)}") from None
    if value < 0:
        raise ValueError(f"{fname}: {name} must be >= 0 (it counts updates), got {value}")
    if value >= _T_MAX:
        raise ValueError(f"{fname}: {name} must be < 2**63 (ONNX T is int64), got {value}")
    return value


def check_real(fname: str, name: str, value, *, low=None, low_open=False,
               high=None, high_open=False) -> float:
    """A finite real hyperparameter, optionally within [low, high] bounds."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fname}: {name} must be a real number, got {_type_name(value)}")
    v = _to_float(value)
    if not math.isfinite(v):
        raise ValueError(f"{fname}: {name} must be finite, got {v!r}")
    if low is not None and (v <= low if low_open else v < low):
        raise ValueError(f"{fname}: {name} must be {'>' if low_open else '>='} {low}, got {v!r}")
    if high is not None and (v >= high if high_open else v > high):
        raise ValueError(f"{fname}: {name} must be {'<' if high_open else '<='} {high}, got {v!r}")
    return v


def check_mode(fname: str, mode) -> str:
    if not isinstance(mode, str):
        raise TypeError(f"{fname}: mode must be a str, got {_type_name(mode)}")
    if mode not in ("standard", "nesterov"):
        raise ValueError(f"{fname}: mode must be 'standard' or 'nesterov', got {mode!r}")
    return mode


def check_layout(fname: str, layout, name: str = "layout") -> str:
    """AGC's unit layout: "oi" (PyTorch) or "io" (JAX/Haiku)."""
    if not isinstance(layout, str):
        raise TypeError(f"{fname}: {name} must be a str, got {_type_name(layout)}")
    if layout not in _LAYOUTS:
        raise ValueError(
            f"{fname}: {name} must be 'oi' (PyTorch: OI, OIHW; the unit is "
            f"everything but the first axis) or 'io' (JAX/Haiku: IO, HWIO; "
            f"everything but the last axis), got {layout!r}")
    return layout


def check_clipping(fname: str, clipping, n: int):
    """A finite clipping > 0 for all tensors, or a list/tuple of n entries,
    each a finite clipping > 0 or None (that tensor is not clipped)."""
    if isinstance(clipping, (list, tuple)):
        if len(clipping) != n:
            raise ValueError(
                f"{fname}: clipping has {len(clipping)} entries but x has {n} "
                f"tensor{'s' if n != 1 else ''}; give one value per tensor "
                f"(None excludes a tensor from clipping)")
        return [None if c is None else
                check_real(fname, f"clipping[{i}]", c, low=0.0, low_open=True)
                for i, c in enumerate(clipping)]
    if clipping is None:
        raise TypeError(
            f"{fname}: clipping must be a real number > 0 or a list/tuple with "
            f"one entry per tensor (None excludes a tensor), got NoneType")
    return check_real(fname, "clipping", clipping, low=0.0, low_open=True)


def check_n_threads(fname: str, n_threads):
    """None (the default), -1 (all cores) or a positive int."""
    if n_threads is None:
        return None
    if isinstance(n_threads, (bool, np.bool_)):
        raise TypeError(f"{fname}: n_threads must be an int or None, got bool")
    try:
        n = operator.index(n_threads)
    except TypeError:
        raise TypeError(
            f"{fname}: n_threads must be an int or None, got {_type_name(n_threads)}") from None
    if n == 0 or n < -1 or n > MAX_THREADS:
        raise ValueError(
            f"{fname}: n_threads must be a positive int up to {MAX_THREADS}, -1 (all "
            f"cores) or None (the default), got {n}")
    return n


# ---------------------------------------------------------------- tensors

class Prepared:
    """A call normalised for the fast path, plus the copies to write back
    (a plain class: dataclasses would cost `import fastopt` ~1 ms)."""
    __slots__ = ("single", "roles", "writeback")

    def __init__(self, single: bool, roles: dict):
        self.single = single
        self.roles = roles      # role ("x", "g", a state) -> list of arrays
        self.writeback: list = []

    def args(self) -> tuple:
        """The arrays to pass to the fast path, one argument per role."""
        return tuple(seq[0] if self.single else seq for seq in self.roles.values())

    def finish(self) -> None:
        """Copy the updated scratch arrays back into the user's arrays."""
        for dst, src in self.writeback:
            dst[...] = src


def labeler(labels, single: bool):
    """label(role, i): how messages name tensor i of a role (see the module
    docstring for ``labels``)."""
    labels = labels or {}

    def label(role, i):
        name = labels.get(role, role)
        if not isinstance(name, str):
            return name[i]
        return name if single else f"{name}[{i}]"

    def name(role):
        n = labels.get(role, role)
        return n if isinstance(n, str) else role
    label.name = name
    return label


def _as_list(fname: str, name: str, obj, *, x_single: bool | None, n: int | None,
             x_name: str = "x"):
    """Return (list_of_items, single). Checks the container, not the items."""
    if isinstance(obj, np.ndarray):
        if x_single is False:
            raise TypeError(
                f"{fname}: {name} is a single array but {x_name} is a list of {n}; "
                f"pass {name} as a list of the same length")
        return [obj], True
    if isinstance(obj, (list, tuple)):
        if x_single is True:
            raise TypeError(
                f"{fname}: {name} is a {type(obj).__name__} but {x_name} is a single "
                f"array; pass {name} as a single array too")
        if len(obj) == 0:
            raise ValueError(f"{fname}: {name} is an empty {type(obj).__name__}; "
                             f"give at least one tensor")
        if n is not None and len(obj) != n:
            raise ValueError(
                f"{fname}: {name} has {len(obj)} tensors but {x_name} has {n}; "
                f"every list must have one entry per parameter")
        return list(obj), False
    raise TypeError(
        f"{fname}: {name} must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
        f"got {_type_name(obj)}{_hint(obj)}")


def _lists(fname: str, arrays: dict, labels):
    """The role -> list form of a call's arrays, its tensor count, whether x
    was a single array, and the labeler."""
    name = labeler(labels, True).name
    xs, single = _as_list(fname, name("x"), arrays["x"], x_single=None, n=None)
    lists = {"x": xs}
    for role, obj in arrays.items():
        if role != "x":
            lists[role] = _as_list(fname, name(role), obj, x_single=single, n=len(xs),
                                   x_name=name("x"))[0]
    return lists, len(xs), single, labeler(labels, single)


def _extent(a: np.ndarray):
    if a.size == 0:
        return None
    return _byte_bounds(a)


def _self_overlapping(a: np.ndarray) -> bool:
    """Whether two elements of a may share memory (a broadcast or as_strided
    view). Sufficient test: in order of stride size, every stride must clear
    the extent spanned by the smaller ones. (Exotic interleaved layouts that
    pass numpy's exact test but fail this one are rejected too.)"""
    if a.size <= 1 or a.flags.c_contiguous or a.flags.f_contiguous:
        return False
    dims = sorted((abs(s), n) for s, n in zip(a.strides, a.shape) if n > 1)
    extent = a.itemsize
    for stride, n in dims:
        if stride < extent:
            return True
        extent = stride * (n - 1) + extent
    return False


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.shape == b.shape and a.strides == b.strides
            and a.dtype.itemsize == b.dtype.itemsize)


def sharing_pairs(items):
    """items: (label, array, is_output). Yield (j, k), indices into items, for
    every pair that shares memory with at least one of the two written, found
    by a sweep over byte ranges sorted by start (exact np.shares_memory only
    where the ranges intersect)."""
    ranges = []
    for k, (_, a, _) in enumerate(items):
        ext = _extent(a)
        if ext is not None:
            ranges.append((ext[0], ext[1], k))
    ranges.sort()
    active = []
    for lo, hi, k in ranges:
        active = [(h, j) for h, j in active if h > lo]
        for _, j in active:
            if (items[j][2] or items[k][2]) and np.shares_memory(items[j][1], items[k][1]):
                yield j, k
        active.append((hi, k))


def _sharing_read(fname: str, items, why: str):
    """The pairs (j, k) of items (label, array, is_written) sharing memory
    of which one is only read; raise for two written ones sharing memory."""
    for j, k in sharing_pairs(items):
        if items[j][2] and items[k][2]:
            raise ValueError(f"{fname}: {items[j][0]} and {items[k][0]} share memory; {why}")
        yield j, k


def _overlaps(fname: str, items):
    """items: (label, array, is_output). Raise for any output sharing memory
    with another array, except a gradient that is exactly an output's view,
    which is returned (by index into items) to be copied first."""
    copy_g = set()
    for j, k in _sharing_read(fname, items, "every parameter and state must "
                              "have memory of its own"):
        (la, a, oa), (lb, b, _) = items[j], items[k]
        gk = j if not oa else k
        if _same_view(a, b):
            copy_g.add(gk)  # reading an exact alias is fine once copied
            continue
        gl, ol = (la, lb) if gk == j else (lb, la)
        raise ValueError(
            f"{fname}: {gl} partially overlaps {ol}, which is written; pass "
            f"a copy of the gradient")
    return copy_g


def _check_written(fname: str, lab: str, xlab: str, a, xi, what: str) -> None:
    """A written array of its parameter's shape with memory of its own."""
    if a.shape != xi.shape:
        raise ValueError(
            f"{fname}: {lab} has shape {a.shape} but {xlab} has shape {xi.shape}; "
            f"{what} must have its parameter's shape")
    if not a.flags.writeable:
        raise ValueError(f"{fname}: {lab} is read-only; it is updated in place")
    if _self_overlapping(a):
        raise ValueError(
            f"{fname}: {lab} has elements that share memory (a broadcast or "
            f"as_strided view); an updated array needs memory of its own for "
            f"every element")


def _check_role(fname, lab, xlab, a, xi, role, is_out) -> None:
    """Checks of one gradient or state against its parameter xi."""
    what = "the gradient" if role == "g" else "the state"
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{fname}: {lab} must be a numpy.ndarray, got "
                        f"{_type_name(a)}{_hint(a)}")
    if _masked(a):
        check_array(fname, lab, a)
    if a.dtype.newbyteorder("=") != xi.dtype.newbyteorder("="):
        raise TypeError(f"{fname}: {lab} has dtype {a.dtype} but {xlab} has "
                        f"{xi.dtype}; {what} must match its parameter")
    if is_out:
        _check_written(fname, lab, xlab, a, xi, what)
        return
    try:
        shape = np.broadcast_shapes(a.shape, xi.shape)
    except ValueError:
        shape = None
    if shape != xi.shape:
        raise ValueError(f"{fname}: {lab} with shape {a.shape} cannot be "
                         f"broadcast to {xlab}'s shape {xi.shape}")


def tensors(fname: str, arrays: dict, labels=None) -> Prepared:
    """Check every tensor of an update; return it normalised for the fast path.

    ``arrays`` maps each role to what the user passed: "x" (parameters,
    written), "g" (gradients, read, broadcastable), then the states ("v",
    "h": written, each of its parameter's shape). Raises TypeError/ValueError
    naming ``fname``, the argument and the tensor index (see ``labels`` in
    the module docstring); on error nothing has been written anywhere.
    """
    lists, n, single, label = _lists(fname, arrays, labels)
    states = [r for r in lists if r not in ("x", "g")]
    items = []   # (label, array, is_output) for the overlap check
    for i in range(n):
        xi, xlab = lists["x"][i], label("x", i)
        check_array(fname, xlab, xi)
        if not xi.flags.writeable:
            raise ValueError(f"{fname}: {xlab} is read-only; it is updated in place")
        if _self_overlapping(xi):
            raise ValueError(f"{fname}: {xlab} has elements that share memory "
                             f"(a broadcast or as_strided view); an updated array needs "
                             f"memory of its own for every element")
        items.append((xlab, xi, True))
        for role in ["g"] + states:
            a, lab = lists[role][i], label(role, i)
            _check_role(fname, lab, xlab, a, xi, role, role != "g")
            items.append((lab, a, role != "g"))
    return _normalise(lists, n, single, states, _overlaps(fname, items))


def _normalise(lists, n, single, states, copy_g) -> Prepared:
    """Every check passed: the fast-path form of an update. Copies only here."""
    prep = Prepared(single, {r: [] for r in lists})
    per = 2 + len(states)
    for i in range(n):
        xi, gi = lists["x"][i], lists["g"][i]
        # x's own memory order when x can go to C as it is (so AGC's unit
        # norms are reduced in the order fastopt.agc uses for the same x),
        # else C; only the arrays not already in that form are copied.
        order = _fast_layout(xi) or "C"
        flag = "c_contiguous" if order == "C" else "f_contiguous"
        for r in ["x"] + states:
            a = lists[r][i]
            if not (a.dtype.isnative and a.flags.aligned and getattr(a.flags, flag)):
                copy = np.array(a, dtype=a.dtype.newbyteorder("="), order=order)
                prep.writeback.append((a, copy))
                a = copy
            prep.roles[r].append(a)
        g_ok = (i * per + 1 not in copy_g and gi.shape == xi.shape and gi.dtype.isnative
                and gi.flags.aligned and getattr(gi.flags, flag))
        if not g_ok:
            gi = np.array(np.broadcast_to(gi, xi.shape), dtype=gi.dtype.newbyteorder("="),
                          order=order)
        prep.roles["g"].append(gi)
    return prep


def _fast_layout(a: np.ndarray):
    """'C' or 'F' if a can go to C as it is, else None."""
    if not (a.dtype.isnative and a.flags.aligned):
        return None
    return "C" if a.flags.c_contiguous else "F" if a.flags.f_contiguous else None


def agc_tensors(fname: str, arrays: dict, labels=None) -> Prepared:
    """Check the tensors of an agc() call: x only read (read-only is fine),
    g clipped in place (writeable, exactly x's shape and dtype, sharing no
    memory with any x or other g); return the call normalised. Nothing is
    written here."""
    lists, n, single, label = _lists(fname, arrays, labels)
    items = []
    for i in range(n):
        xi, gi, xlab, glab = lists["x"][i], lists["g"][i], label("x", i), label("g", i)
        check_array(fname, xlab, xi, "works on")
        if not isinstance(gi, np.ndarray) or _masked(gi):
            check_array(fname, glab, gi, "works on")
        if gi.dtype.newbyteorder("=") != xi.dtype.newbyteorder("="):
            raise TypeError(f"{fname}: {glab} has dtype {gi.dtype} but {xlab} has "
                            f"{xi.dtype}; the gradient must match its parameter")
        if gi.shape != xi.shape:
            raise ValueError(
                f"{fname}: {glab} has shape {gi.shape} but {xlab} has shape {xi.shape}; "
                f"the gradient is clipped in place, so it must have its parameter's shape")
        if not gi.flags.writeable:
            raise ValueError(f"{fname}: {glab} is read-only; it is clipped in place")
        items += [(xlab, xi, False), (glab, gi, True)]
    _clip_overlaps(fname, items)
    prep = Prepared(single, {"x": [], "g": []})
    for xi, gi in zip(lists["x"], lists["g"]):
        order = _fast_layout(xi)
        if order is None:
            order = "C"
            xi = np.array(xi, dtype=xi.dtype.newbyteorder("="), order="C")
        flag = "c_contiguous" if order == "C" else "f_contiguous"
        if not (gi.dtype.isnative and gi.flags.aligned and getattr(gi.flags, flag)):
            copy = np.array(gi, dtype=gi.dtype.newbyteorder("="), order=order)
            prep.writeback.append((gi, copy))
            gi = copy
        prep.roles["x"].append(xi)
        prep.roles["g"].append(gi)
    return prep


def _clip_overlaps(fname: str, items) -> None:
    """items: (label, array, is_written). Raise if a clipped gradient shares
    memory with any other array of the call."""
    for j, k in _sharing_read(fname, items, "every gradient is clipped in "
                              "place and must have memory of its own"):
        (la, _, oa), (lb, _, _) = items[j], items[k]
        gl, xl = (la, lb) if oa else (lb, la)
        raise ValueError(
            f"{fname}: {gl} shares memory with {xl}; the gradient is clipped "
            f"in place while the parameter is read, so pass a copy of one")
