"""Argument checking: the checkers of arrays and of the scalars every entry shares.

The fast paths in the extension (``_ext``) accept only calls that are
already in the exact form the C code needs and decline everything else
without writing. ``_dispatch`` then calls the checkers here: each raises a
TypeError (wrong type) or ValueError (wrong value) that names the function,
the argument and the tensor index, and the tensor checkers *normalise* the
call (contiguous native copies of awkward layouts, materialised broadcast
gradients) so it can go through the fast path, with the copies written back
afterwards. Nothing is written to any array before every check has passed.

One checker per concept: lr, t, real, mode, layout, clipping, n_threads,
array (check_array), an array written in place (check_written), a gradient,
state or copy against its parameter (_check_role), the tensors of any call
(tensors), overlaps (sharing_pairs, _overlaps, _clip_overlaps: in
``fastopt._overlaps``, re-exported here), and one normaliser (_normalise).

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

from . import _dtypes
from ._overlaps import (  # noqa: F401 (the overlap checks are part of this module's API)
    _clip_overlaps,
    _extent,
    _overlaps,
    _same_view,
    _self_overlapping,
    _sharing_read,
    sharing_pairs,
)

_FLOATS = _dtypes.NUMPY
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


def _numbers(obj) -> bool:
    """A number (NumPy scalars included) or a flat list/tuple of numbers."""
    if isinstance(obj, (list, tuple)):
        return len(obj) > 0 and all(_numbers(o) for o in obj if not isinstance(o, (list, tuple))) \
            and not any(isinstance(o, (list, tuple)) for o in obj)
    return isinstance(obj, (int, float, np.number)) and not isinstance(obj, bool)


def _got(obj) -> str:
    """What an array argument got instead, with advice: a NumPy scalar's type
    name (float32) would read like a dtype complaint, and a number or a list
    of numbers only needs np.asarray."""
    if isinstance(obj, np.generic):
        what = f"a NumPy {type(obj).__name__} scalar, not an array"
    elif isinstance(obj, (list, tuple)) and _numbers(obj):
        what = f"a {type(obj).__name__} of numbers"
    else:
        what = _type_name(obj)
    if _numbers(obj):
        return (f"{what}; convert it with np.asarray(..., dtype=...) to an array of its "
                f"parameter's dtype")
    return what + _hint(obj)


def _masked(obj) -> bool:
    ma = sys.modules.get("numpy.ma")   # no masked array exists before it loads
    return ma is not None and isinstance(obj, ma.MaskedArray)


def check_array(fname: str, label: str, a, verb: str = "updates",
                types: tuple = _FLOATS) -> None:
    """A numpy.ndarray of one of ``types`` (default: float32 or float64;
    any byte order), not a masked array (fastopt would update its masked
    elements too). verb: what fastopt does to such arrays, for the message
    ("works on" for read ones)."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{fname}: {label} must be a numpy.ndarray, got {_got(a)}")
    if _masked(a):
        raise TypeError(
            f"{fname}: {label} is a numpy.ma.MaskedArray; fastopt would update its "
            f"masked elements too. Pass {label}.data (the whole array) or a "
            f"plain array of the elements to update")
    if not _native_in(a.dtype, types):
        raise TypeError(
            f"{fname}: {label} has dtype {a.dtype}; fastopt {verb} "
            f"{_dtypes.phrase(types)} arrays")


def _native_in(dtype: np.dtype, types: tuple) -> bool:
    """Is dtype, in native byte order, one of types? (A structured or
    subarray dtype never is, whatever its size.)"""
    return dtype.fields is None and dtype.subdtype is None and dtype.newbyteorder("=") in types


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
    if type(lr) is float:           # the common case, without the checks of type
        value = lr
    else:
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
    if type(value) is float:        # the common case, without the checks of type
        v = value
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fname}: {name} must be a real number, got {_type_name(value)}")
    else:
        v = _to_float(value)
    if not math.isfinite(v):
        raise ValueError(f"{fname}: {name} must be finite, got {v!r}")
    if low is not None and (v <= low if low_open else v < low):
        raise ValueError(f"{fname}: {name} must be {'>' if low_open else '>='} {low}, got {v!r}")
    if high is not None and (v >= high if high_open else v > high):
        raise ValueError(f"{fname}: {name} must be {'<' if high_open else '<='} {high}, got {v!r}")
    return v


def check_warmup(fname: str, name: str, value):
    """A warmup length: None (no warmup) or a whole number of steps in
    [1, 2**53)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fname}: {name} must be None or a whole number of steps, got "
                        f"{_type_name(value)}")
    if not 1 <= value < 2**53:
        raise ValueError(f"{fname}: {name} must be >= 1 and < 2**53 (steps), got {value!r}")
    return int(value)


def check_bool(fname: str, name: str, value) -> bool:
    """A flag: True or False (NumPy's bool too), nothing else."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fname}: {name} must be True or False, got {_type_name(value)}")
    return bool(value)


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
    __slots__ = ("single", "roles", "writeback", "held")

    def __init__(self, single: bool, roles: dict):
        self.single = single
        self.roles = roles      # role ("x", "g", a state) -> list of arrays
        self.writeback: list = []
        self.held: list = []    # the caller's arrays, alive while their views are used

    def args(self) -> tuple:
        """The arrays to pass to the fast path, one argument per role (an
        array, or a tuple of them)."""
        return tuple(seq[0] if self.single else tuple(seq) for seq in self.roles.values())

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
            if _numbers(obj):
                raise TypeError(
                    f"{fname}: {name} is a {type(obj).__name__} of numbers but {x_name} is "
                    f"an array; pass np.asarray({name}, dtype={x_name}.dtype)")
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
        f"got {_got(obj)}")


def _lists(fname: str, arrays: dict, labels):
    """The role -> list form of a call's arrays (the first role leads: the
    others follow its container and length), its tensor count, whether the
    lead was a single array, and the labeler."""
    name = labeler(labels, True).name
    lead, *rest = arrays
    xs, single = _as_list(fname, name(lead), arrays[lead], x_single=None, n=None)
    lists = {lead: xs}
    for role in rest:
        lists[role] = _as_list(fname, name(role), arrays[role], x_single=single,
                               n=len(xs), x_name=name(lead))[0]
    return lists, len(xs), single, labeler(labels, single)


def _doing(role: str) -> str:
    """What fastopt does to a written array of a role, for messages."""
    return "clipped" if role == "g" else "updated"


def check_written(fname: str, lab: str, a, doing: str = "updated") -> None:
    """An array written in place (``doing``: "updated", or "clipped" for a
    gradient): writeable, and with memory of its own for every element."""
    if not a.flags.writeable:
        raise ValueError(f"{fname}: {lab} is read-only; it is {doing} in place")
    if _self_overlapping(a):
        raise ValueError(
            f"{fname}: {lab} has elements that share memory (a broadcast or "
            f"as_strided view); {'an' if doing[0] in 'aeiou' else 'a'} {doing} array "
            f"needs memory of its own for every element")


def _check_role(fname, lab, xlab, a, xi, role, is_out, mixed=False) -> None:
    """One gradient (role "g"), state or rounded copy (role "w") of the
    parameter xi (labelled xlab): an ndarray of xi's dtype; with ``mixed``
    (the whole step and the gradient lists), a gradient of a type paired
    with xi's (16-bit gradients of float32/float64 parameters) and a copy
    of one of xi's copy types. Written (a state, a copy; a gradient AGC
    clips): exactly xi's shape, and check_written. Read (a gradient):
    broadcastable to xi's shape."""
    what = {"g": "the gradient", "w": "the copy"}.get(role, "the state")
    if not isinstance(a, np.ndarray) or _masked(a):
        check_array(fname, lab, a)
    x_type = xi.dtype.newbyteorder("=")
    if role == "w" or (mixed and role == "g"):
        table, of = ((_dtypes.COPIES_OF, "a rounded copy of") if role == "w"
                     else (_dtypes.GRADS_OF, "the gradient of"))
        _check_type(fname, lab, xlab, a, xi, table.get(x_type, ()), of)
    elif mixed and len(_dtypes.STATES_OF.get(x_type, ())) > 1:
        _check_type(fname, lab, xlab, a, xi, _dtypes.STATES_OF[x_type], "a state of")
    elif not _native_in(a.dtype, (x_type,)):
        raise TypeError(f"{fname}: {lab} has dtype {a.dtype} but {xlab} has "
                        f"{xi.dtype}; {what} must match its parameter")
    if is_out:
        if a.shape != xi.shape:
            why = f"{what} is clipped in place, so it" if role == "g" else what
            raise ValueError(
                f"{fname}: {lab} has shape {a.shape} but {xlab} has shape "
                f"{xi.shape}; {why} must have its parameter's shape")
        check_written(fname, lab, a, _doing(role))
        return
    try:
        shape = np.broadcast_shapes(a.shape, xi.shape)
    except ValueError:
        shape = None
    if shape != xi.shape:
        raise ValueError(f"{fname}: {lab} with shape {a.shape} cannot be "
                         f"broadcast to {xlab}'s shape {xi.shape}")


def _check_state_types(fname, lab, a, first) -> None:
    """The states of one tensor share one dtype (they are stored alike)."""
    if first is not None and a.dtype.newbyteorder("=") != first[1]:
        raise TypeError(f"{fname}: {lab} has dtype {a.dtype} but {first[0]} has "
                        f"{first[1]}; the states of a parameter must have one dtype")


def _check_type(fname, lab, xlab, a, xi, types, what) -> None:
    if not _native_in(a.dtype, types):
        can = f"must be {_dtypes.phrase(types)}" if types else "cannot be written (its " \
            "dtype has no 16-bit copy)"
        if what == "a state of" and a.dtype == np.float16:
            can += " (float16 states are refused: squared gradients underflow in them)"
        raise TypeError(f"{fname}: {lab} has dtype {a.dtype}; {what} {xlab} "
                        f"({xi.dtype}) {can}")


def tensors(fname: str, arrays: dict, labels=None, written=None, needs=None,
            mixed: bool = False) -> Prepared:
    """Check every tensor of a call; return it normalised for the fast path.

    ``arrays`` maps each role to what the user passed, the leading role
    first: "x" (the parameters), or "g" for a call on gradients alone; then
    "g" (the gradients) and the states ("v", "h", or "s1".."s3" for the
    whole step), each of the lead's shape. ``written``: the roles written in
    place (default: every role but "g"; AGC clips "g" and only reads "x");
    a read gradient may broadcast. ``needs``: None (every role for every
    tensor) or, per tensor, how many of the roles after "x" and "g" it has
    (the whole step: 0-3 states by rule); a needed one that is None raises,
    the others are passed on as None. ``mixed`` (the whole step, the
    gradient lists): gradients may have a 16-bit type paired with their
    parameter's, and role "w" (after the states; None per tensor: no copy)
    holds rounded copies of the new parameters. Raises TypeError/ValueError
    naming ``fname``, the argument and the tensor index (see ``labels`` in
    the module docstring); on error nothing has been written anywhere.
    """
    lists, n, single, label = _lists(fname, arrays, labels)
    lead, *rest = lists
    copies = "w" in rest
    if copies:
        rest.remove("w")
    written = [r for r in lists if r != "g"] if written is None else written
    lead_types = _dtypes.GRADS if mixed and lead == "g" else _FLOATS
    items, where = [], []   # (label, array, is_written) for the overlap check; (role, i)
    apart = set()           # the tensors whose states are stored apart
    held = []               # the caller's arrays, replaced by views of our own (_own)
    for i in range(n):
        xi, xlab = lists[lead][i], label(lead, i)
        check_array(fname, xlab, xi, "updates" if lead in written else "works on",
                    lead_types)
        held.append(xi)
        xi = lists[lead][i] = _own(xi)
        if lead in written:
            check_written(fname, xlab, xi, _doing(lead))
        items.append((xlab, xi, lead in written))
        where.append((lead, i))
        have = len(rest) if needs is None else 1 + needs[i]
        first_state = None                 # (label, dtype) of the tensor's first state
        for role in rest[have:]:
            lists[role][i] = None          # a state the tensor's rule does not use
        for role in rest[:have]:
            a, lab = lists[role][i], label(role, i)
            if a is None and needs is not None:
                raise ValueError(f"{fname}: {lab} is missing; the rule needs it")
            if isinstance(a, np.ndarray) and not _masked(a):
                held.append(a)
                a = lists[role][i] = _own(a)
            _check_role(fname, lab, xlab, a, xi, role, role in written, mixed)
            if mixed and role != "g" and a is not None:
                _check_state_types(fname, lab, a, first_state)
                first_state = first_state or (lab, a.dtype.newbyteorder("="))
                if first_state[1] != xi.dtype.newbyteorder("="):
                    apart.add(i)           # states stored apart: C order (see _normalise)
            items.append((lab, a, role in written))
            where.append((role, i))
        if copies and lists["w"][i] is not None:
            a, lab = lists["w"][i], label("w", i)
            if isinstance(a, np.ndarray) and not _masked(a):
                held.append(a)
                a = lists["w"][i] = _own(a)
            _check_role(fname, lab, xlab, a, xi, "w", True)
            items.append((lab, a, True))
            where.append(("w", i))
    if "g" in written:
        _clip_overlaps(fname, items)
        copy = set()
    else:
        copy = {where[k] for k in _overlaps(fname, items)}
    prep = _normalise(lists, single, written, copy, apart)
    prep.held = held
    return prep


def _own(a: np.ndarray) -> np.ndarray:
    """A plain view of a that nobody else holds: its shape, dtype and flags
    stay as checked while the call runs, copies and writes back, whatever
    another thread does to a meanwhile (the same memory is written, as the
    fast path writes an array another thread freezes during its C work)."""
    return a.view(np.ndarray)


def _normalise(lists, single, written, copy, apart=()) -> Prepared:
    """Every check passed: the fast-path form of a call. Copies only here:
    each array not native, aligned and contiguous in its lead's order (a
    broadcast gradient, or one in ``copy``, a written array's alias) goes
    through a scratch copy, written back afterwards if its role is written.
    A tensor in ``apart`` (states stored apart, whose stochastic rounding
    numbers the elements in C order) goes in C order."""
    prep = Prepared(single, {r: [] for r in lists})
    lead = next(iter(lists))
    for i, xi in enumerate(lists[lead]):
        # the lead's own memory order when it can go to C as it is (so AGC's
        # unit norms are reduced in the order fastopt.agc uses for the same
        # x), else C; only the arrays not already in that form are copied.
        # Gradients alone (global_norm, clip_grads) always go in C order: the
        # global norm sums each gradient in its logical order.
        order = "C" if lead == "g" or i in apart else _fast_layout(xi) or "C"
        flag = "c_contiguous" if order == "C" else "f_contiguous"
        for role, seq in lists.items():
            a = seq[i]
            if a is not None and ((role, i) in copy or a.shape != xi.shape
                                  or not (a.dtype.isnative and a.flags.aligned
                                          and getattr(a.flags, flag))):
                c = np.array(np.broadcast_to(a, xi.shape),
                             dtype=a.dtype.newbyteorder("="), order=order)
                if role in written:
                    prep.writeback.append((a, c))
                a = c
            prep.roles[role].append(a)
    return prep


def _fast_layout(a: np.ndarray):
    """'C' or 'F' if a can go to C as it is, else None."""
    if not (a.dtype.isnative and a.flags.aligned):
        return None
    return "C" if a.flags.c_contiguous else "F" if a.flags.f_contiguous else None
