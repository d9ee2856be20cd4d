"""Argument checking: the one place that raises for user input.

The fast path in ``_core`` accepts only calls that are already in the exact
form the C kernels need and declines everything else without writing. The
functions here then run the full checks, raise a TypeError/ValueError that
names the function, the argument and the tensor index, or *normalise* the
call (contiguous native copies of awkward layouts, materialised broadcast
gradients) so it can go through the fast path, with the copies written back
afterwards. Nothing is written to any array before every check has passed.
"""
from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass, field

import numpy as np

try:  # NumPy >= 2.0
    from numpy.lib.array_utils import byte_bounds as _byte_bounds
except ImportError:  # pragma: no cover - NumPy 1.x
    _byte_bounds = np.byte_bounds

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
MAX_THREADS = 1024   # as _core.MAX_THREADS
_T_MAX = 2**63


def _type_name(obj) -> str:
    return type(obj).__name__


# ---------------------------------------------------------------- scalars

def _to_float(value) -> float:
    """float(value), with integers too large for a double as +-inf (so the
    finiteness checks reject them with their own message)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_lr(fname: str, lr, name: str = "lr") -> float:
    """A finite learning rate >= 0, from a real number or a one-element array."""
    if isinstance(lr, np.ndarray):
        if lr.size != 1 or lr.dtype.kind not in "fiu":
            raise TypeError(
                f"{fname}: {name} must be a real number or a one-element real "
                f"array, got an array of shape {lr.shape} and dtype {lr.dtype}")
        lr = lr.reshape(()).item()
    if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, numbers.Real):
        raise TypeError(f"{fname}: {name} must be a real number, got {_type_name(lr)}")
    value = _to_float(lr)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{fname}: {name} must be a finite number >= 0, got {value!r}")
    return value


def check_t(fname: str, t, name: str = "t") -> int:
    """The update count T: an integer in [0, 2**63), or a one-element int array."""
    if isinstance(t, np.ndarray):
        if t.size != 1 or t.dtype.kind not in "iu":
            raise TypeError(
                f"{fname}: {name} must be an integer or a one-element integer "
                f"array, got an array of shape {t.shape} and dtype {t.dtype}")
        t = t.reshape(()).item()
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

@dataclass
class Prepared:
    """A call normalised for the fast path, plus the copies to write back."""
    single: bool
    x: list
    g: list
    states: dict
    writeback: list = field(default_factory=list)

    def args(self, name: str):
        """The argument to pass to _core for one role ("x", "g", a state)."""
        seq = self.x if name == "x" else self.g if name == "g" else self.states[name]
        return seq[0] if self.single else seq

    def finish(self) -> None:
        """Copy the updated scratch arrays back into the user's arrays."""
        for dst, src in self.writeback:
            dst[...] = src


def _as_list(fname: str, name: str, obj, *, x_single: bool | None, n: int | None):
    """Return (list_of_items, single). Checks the container, not the items."""
    if isinstance(obj, np.ndarray):
        if x_single is False:
            raise TypeError(
                f"{fname}: {name} is a single array but x is a list of {n}; "
                f"pass {name} as a list of the same length")
        return [obj], True
    if isinstance(obj, (list, tuple)):
        if x_single is True:
            raise TypeError(
                f"{fname}: {name} is a {type(obj).__name__} but x is a single array; "
                f"pass {name} as a single array too")
        if len(obj) == 0:
            raise ValueError(f"{fname}: {name} is an empty {type(obj).__name__}; "
                             f"give at least one tensor")
        if n is not None and len(obj) != n:
            raise ValueError(
                f"{fname}: {name} has {len(obj)} tensors but x has {n}; "
                f"every list must have one entry per parameter")
        return list(obj), False
    raise TypeError(
        f"{fname}: {name} must be a numpy.ndarray or a list/tuple of numpy.ndarray, "
        f"got {_type_name(obj)}")


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


def _overlaps(fname: str, items):
    """items: (label, array, is_output). Raise for any output sharing memory
    with another array, except a gradient that is exactly an output's view,
    which is returned (by index into items) to be copied first."""
    copy_g = set()
    for j, k in sharing_pairs(items):
        (la, a, oa), (lb, b, ob) = items[j], items[k]
        if oa and ob:
            raise ValueError(
                f"{fname}: {la} and {lb} share memory; every parameter and "
                f"state must have memory of its own")
        gk = j if not oa else k
        if _same_view(a, b):
            copy_g.add(gk)  # reading an exact alias is fine once copied
            continue
        gl, ol = (la, lb) if gk == j else (lb, la)
        raise ValueError(
            f"{fname}: {gl} partially overlaps {ol}, which is written; pass "
            f"a copy of the gradient")
    return copy_g


def tensors(fname: str, x, g, states: dict) -> Prepared:
    """Check every tensor of a call; return it normalised for the fast path.

    ``states`` maps each state's argument name ("v", "h") to what the user
    passed. Raises TypeError/ValueError naming ``fname``, the argument and
    the tensor index; on error nothing has been written anywhere.
    """
    xs, single = _as_list(fname, "x", x, x_single=None, n=None)
    n = len(xs)
    gs, _ = _as_list(fname, "g", g, x_single=single, n=n)
    ss = {name: _as_list(fname, name, s, x_single=single, n=n)[0]
          for name, s in states.items()}

    def label(name, i):
        return name if single else f"{name}[{i}]"

    items = []   # (label, array, is_output) for the overlap check
    for i in range(n):
        xi = xs[i]
        if not isinstance(xi, np.ndarray):
            raise TypeError(f"{fname}: {label('x', i)} must be a numpy.ndarray, "
                            f"got {_type_name(xi)}")
        if xi.dtype.newbyteorder("=") not in _FLOATS:
            raise TypeError(
                f"{fname}: {label('x', i)} has dtype {xi.dtype}; fastopt updates "
                f"float32 or float64 arrays")
        if not xi.flags.writeable:
            raise ValueError(f"{fname}: {label('x', i)} is read-only; it is "
                             f"updated in place")
        if _self_overlapping(xi):
            raise ValueError(f"{fname}: {label('x', i)} has elements that share memory "
                             f"(a broadcast or as_strided view); an updated array needs "
                             f"memory of its own for every element")
        items.append((label("x", i), xi, True))
        role = [("g", gs[i], False)] + [(name, s[i], True) for name, s in ss.items()]
        for name, a, is_out in role:
            what = "the gradient" if name == "g" else "the state"
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{fname}: {label(name, i)} must be a "
                                f"numpy.ndarray, got {_type_name(a)}")
            if a.dtype.newbyteorder("=") != xi.dtype.newbyteorder("="):
                raise TypeError(
                    f"{fname}: {label(name, i)} has dtype {a.dtype} but "
                    f"{label('x', i)} has {xi.dtype}; {what} must match its parameter")
            if is_out:
                if a.shape != xi.shape:
                    raise ValueError(
                        f"{fname}: {label(name, i)} has shape {a.shape} but "
                        f"{label('x', i)} has shape {xi.shape}; {what} must have "
                        f"its parameter's shape")
                if not a.flags.writeable:
                    raise ValueError(f"{fname}: {label(name, i)} is read-only; "
                                     f"it is updated in place")
                if _self_overlapping(a):
                    raise ValueError(
                        f"{fname}: {label(name, i)} has elements that share memory (a "
                        f"broadcast or as_strided view); an updated array needs memory "
                        f"of its own for every element")
            else:
                try:
                    shape = np.broadcast_shapes(a.shape, xi.shape)
                except ValueError:
                    shape = None
                if shape != xi.shape:
                    raise ValueError(
                        f"{fname}: {label(name, i)} with shape {a.shape} cannot be "
                        f"broadcast to {label('x', i)}'s shape {xi.shape}")
            items.append((label(name, i), a, is_out))

    copy_g = _overlaps(fname, items)

    # Every check passed: build the fast-path form. Copies only from here on.
    prep = Prepared(single, [], [], {name: [] for name in ss})
    per = 2 + len(ss)
    for i in range(n):
        xi, gi = xs[i], gs[i]
        outs = [xi] + [ss[name][i] for name in ss]
        order = "C" if xi.flags.c_contiguous else "F" if xi.flags.f_contiguous else None
        flag = "c_contiguous" if order == "C" else "f_contiguous"
        fast_outs = order is not None and all(
            a.dtype.isnative and a.flags.aligned and getattr(a.flags, flag) for a in outs)
        if not fast_outs:
            order = "C"
            flag = "c_contiguous"
            copies = [np.array(a, dtype=a.dtype.newbyteorder("="), order="C") for a in outs]
            prep.writeback.extend(zip(outs, copies))
            outs = copies
        prep.x.append(outs[0])
        for name, a in zip(ss, outs[1:]):
            prep.states[name].append(a)
        g_ok = (i * per + 1 not in copy_g and gi.shape == xi.shape and gi.dtype.isnative
                and gi.flags.aligned and getattr(gi.flags, flag))
        if not g_ok:
            gi = np.array(np.broadcast_to(gi, xi.shape), dtype=gi.dtype.newbyteorder("="),
                          order=order)
        prep.g.append(gi)
    return prep
