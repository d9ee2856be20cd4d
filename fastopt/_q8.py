"""8-bit blockwise optimizer states (bitsandbytes' format): the state
object the functions take in place of a state array, and the checks of a
step that has some.

A state of n elements is cut into blocks of 256 consecutive elements in C
order (the last may be shorter). Each block keeps a float32 ``absmax``,
each element a uint8 code into one of two fixed 256-entry maps (the
"signed" one for first moments and one-state buffers, the "unsigned" one
for second moments); the element's value is ``map[code] * absmax``. A step
widens each block, runs the float32 rule unchanged, and stores the block
again: the new absmax is its largest magnitude and each code the nearest
map entry to ``value / absmax`` (docs/semantics.md, "8-bit states").

The rules that take them are the rows of ``fastopt._rules`` with ``q8 >= 0``
(which slots use the unsigned map); their functions (:func:`fastopt.adamw`,
:func:`fastopt.sgd`, ...) take a :class:`State8bit` wherever they take a state
array. A step that has one first offers their arrays as they are to the
one fast path (``_ext.step`` with the absmax arrays: :func:`unpack`), and
if it declines, is checked here in full (:func:`split`), nothing written
before, and offered again.
"""
from __future__ import annotations

import numpy as np

from . import _dtypes, _ext
from . import _validation as _v
from ._rules import RULES, needs

#: elements per block (one absmax each): FO_Q8_BLOCK (tests/test_tables.py)
BLOCK = 256
_F32 = np.dtype(np.float32)
_U8 = np.dtype(np.uint8)


def blocks(n: int) -> int:
    """How many blocks (absmax values) a state of n elements has."""
    return -(-int(n) // BLOCK)


def dynamic_map(signed: bool) -> np.ndarray:
    """bitsandbytes' dynamic 8-bit map as the kernels hold it, float32[256]
    sorted ascending: signed (holds 0 at code 127 and 1.0 at 255, not
    -1.0) or unsigned (0 at code 0, 1.0 at 255). A new array each call."""
    return _ext.q8_map(0 if signed else 1)


class State8bit:
    """An optimizer state stored in 8 bits per element, blockwise
    (bitsandbytes' format): pass it wherever a function takes a state array.

    Parameters
    ----------
    codes : ndarray of uint8
        One code per element, the parameter's shape, C-contiguous.
    absmax : ndarray of float32
        One scale per block of 256 elements (C order), shape
        ``(ceil(size / 256),)``.
    signed : bool, default True
        Which map the codes index: the signed one (first moments, momentum
        buffers, Adagrad's sum and every one-state rule's buffer, as
        bitsandbytes keeps them) or the unsigned one (Adam's second moments).
        A step refuses a state on the other map than its slot's.

    Both arrays are updated in place by a step. ``State8bit.zeros(shape)``
    is a fresh state (every value 0), ``State8bit.quantize(values)`` stores
    given values, ``state.dequantize()`` reads them back as float32.
    """

    __slots__ = ("codes", "absmax", "signed")

    def __init__(self, codes, absmax, signed: bool = True):
        self.codes = codes
        self.absmax = absmax
        self.signed = signed

    @classmethod
    def zeros(cls, shape, signed: bool = True) -> "State8bit":
        """A state of the given shape whose every value is 0."""
        codes = np.zeros(shape, np.uint8)
        return cls(codes, np.zeros(blocks(codes.size), np.float32), signed)

    @classmethod
    def quantize(cls, values, signed: bool = True) -> "State8bit":
        """values (converted to float32, C order) stored as a step stores a
        state: per block the largest magnitude, per element the nearest
        code (ties to the even code; on the signed map a code of the other
        sign moves one towards the value)."""
        v = np.ascontiguousarray(values, np.float32)
        codes, absmax = _ext.q8_store(v, 0 if signed else 1)
        return cls(codes.reshape(v.shape), absmax, signed)

    def dequantize(self) -> np.ndarray:
        """The state's values, float32, the codes' shape: map[code] * absmax."""
        m = dynamic_map(self.signed)
        c = np.ascontiguousarray(self.codes).reshape(-1)
        scale = np.repeat(np.asarray(self.absmax, np.float32), BLOCK)[:c.size]
        return (m[c] * scale).reshape(np.shape(self.codes))

    @property
    def nbytes(self) -> int:
        """Bytes held: the codes and the absmax."""
        return int(self.codes.nbytes + self.absmax.nbytes)

    def __repr__(self):
        return (f"State8bit(shape={np.shape(self.codes)}, "
                f"signed={self.signed}, blocks={np.size(self.absmax)})")


# ---- a step with 8-bit states ----------------------------------------------------

def _where(group) -> str:
    """The rule's public name (fastopt.<name>)."""
    return RULES[group[0]].name.replace("_torch", "")


def _check_rule(f, group, k, label) -> int:
    """The unsigned-map slots of group's rule (its q8), or raise: a rule
    without 8-bit states, or options that use more states than the rule's
    q8n have an 8-bit form."""
    row = RULES[group[0]]
    if row.q8 < 0:
        takes = ", ".join(r.name.replace("_torch", "") for r in RULES if r.q8 >= 0)
        raise ValueError(f"{f}: {label} is an 8-bit state, but the rule {_where(group)} "
                         f"has none (8-bit states: {takes})")
    used = needs(group)
    if used > row.q8n:
        raise ValueError(f"{f}: {label} is an 8-bit state, but the options given "
                         f"{beyond(row, used)}")
    return row.q8


def group_keeps_8bit(f, where, value, q8: bool) -> bool:
    """Does a parameter group whose ``state_dtype`` is value keep 8-bit
    states, in an optimizer that keeps them (q8) or not? None or
    'int8-blockwise': as the optimizer; 'float32': no, its states are
    float32 (bitsandbytes' ``optim_bits=32`` override, as for embeddings).
    Another value, or one given to an optimizer without 8-bit states,
    raises ValueError (where: the group, e.g. "param_groups[1]")."""
    if value is None:
        return q8
    if not q8:
        raise ValueError(f"{f}: {where} sets 'state_dtype'; a group may keep float32 "
                         f"states only in an optimizer with state_dtype='int8-blockwise'")
    if isinstance(value, str) and value in ("float32", "int8-blockwise"):
        return value != "float32"
    raise ValueError(f"{f}: {where}['state_dtype'] must be 'int8-blockwise' or 'float32' "
                     f"(that group's states kept in float32), got {value!r}")


def beyond(row, used: int) -> str:
    """Options that use more states of rule row than have an 8-bit form,
    said (the end of an error message). The first q8n names are the ones
    with an 8-bit form: a rule that packs its states by options (RMSprop)
    packs from s1, and only its s1 has one."""
    have = ", ".join(row.states[:row.q8n])
    return (f"use {used} states of {row.name.replace('_torch', '')}, and only {have} "
            f"ha{'s' if row.q8n == 1 else 've'} an 8-bit form; use float32 states with "
            f"these options")


def _check_state(f, label, xlab, s, x, unsigned) -> None:
    if not isinstance(s.signed, (bool, np.bool_)):
        raise TypeError(f"{f}: {label}.signed must be a bool, got "
                        f"{type(s.signed).__name__}")
    for part, a, dt, shape in (("codes", s.codes, _U8, x.shape),
                               ("absmax", s.absmax, _F32, (blocks(x.size),))):
        lab = f"{label}.{part}"
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{f}: {lab} must be a numpy.ndarray, got {_v._got(a)}")
        if a.dtype != dt:
            raise TypeError(f"{f}: {lab} has dtype {a.dtype}; it must be {dt}")
        if a.shape != shape:
            what = f"{xlab}'s shape" if part == "codes" else \
                f"one value per block of {BLOCK} elements of {xlab}"
            raise ValueError(f"{f}: {lab} has shape {a.shape}; it must be {shape} ({what})")
        if not a.flags.c_contiguous or not a.flags.writeable or not a.flags.aligned:
            raise ValueError(f"{f}: {lab} must be a writeable, aligned, C-contiguous "
                             f"array (it is updated in place)")
    if bool(s.signed) == bool(unsigned):
        want = "unsigned" if unsigned else "signed"
        raise ValueError(f"{f}: {label} is on the {'signed' if s.signed else 'unsigned'} "
                         f"map, but this state is kept on the {want} map "
                         f"(State8bit(..., signed={not unsigned}))")


def _check_array(f, lab, a, x, types, what) -> None:
    _v.check_array(f, lab, a, "works on" if what == "g" else "updates", types)
    if a.dtype not in types:
        raise TypeError(f"{f}: {lab} has dtype {a.dtype}; in a step with 8-bit states it "
                        f"must be {_dtypes.phrase(types)} in native byte order")
    if x is not None and a.shape != x.shape:
        raise ValueError(f"{f}: {lab} has shape {a.shape} but its parameter has {x.shape}; "
                         f"a step with 8-bit states takes no broadcasting")
    if what != "g" and not (a.flags.c_contiguous and a.flags.writeable and a.flags.aligned):
        raise ValueError(f"{f}: {lab} must be a writeable, aligned, C-contiguous array "
                         f"in a step with 8-bit states (it is updated in place)")


def unpack(states, index, groups):
    """The cheap first try of a step whose states may be 8-bit: None if no
    state is a :class:`State8bit`; else (states, absmax) as :func:`split`
    returns them, taking each State8bit's arrays as they are (the fast
    path checks their types, sizes, layout and overlaps, and declines
    otherwise), or False when one is on the other map than its slot's or
    holds something else than arrays (then :func:`split` says what)."""
    if not any(isinstance(s, State8bit) for st in states for s in st):
        return None
    out = [list(st) for st in states]
    absmax = []
    for i, j in enumerate(index):
        row = [None, None, None]
        q8 = RULES[groups[j][0]].q8
        for k in range(3):
            s = out[k][i]
            if isinstance(s, State8bit):
                if q8 < 0 or s.signed is not (not q8 >> k & 1) \
                        or type(s.codes) is not np.ndarray:
                    return False
                out[k][i], row[k] = s.codes, s.absmax
        absmax.append(tuple(row))
    return out, tuple(absmax)


def split(f, xs, gs, states, index, groups, labels, copies=None):
    """If some state of the call is a :class:`State8bit`: check the whole
    call, the rounded copies (``copies``, None or per tensor an array or
    None) too (raising TypeError/ValueError naming the argument; nothing is
    written) and return (gs, states, absmax): the gradients (a copy in C
    order where one is not, or where one is an array the step writes), the
    states with each State8bit's codes in its place, and per tensor the
    three absmax arrays (None where none). Else None."""
    if not any(isinstance(s, State8bit) for st in states for s in st):
        return None
    names = labels() if callable(labels) else labels
    gs, states = list(gs), [list(st) for st in states]
    absmax = []
    items, grad_at = [], {}         # (label, array, written); item index -> tensor
    for i, x in enumerate(xs):
        group = groups[index[i]]
        xlab, glab = names["x"][i], names["g"][i]
        eight = [k for k in range(3) if isinstance(states[k][i], State8bit)]
        _check_array(f, xlab, x, None, _dtypes.NUMPY, "x")
        grads = _dtypes.GRADS_OF[x.dtype] if eight else _dtypes.GRADS_OF.get(x.dtype, ())
        _check_array(f, glab, gs[i], x, grads, "g")
        if not gs[i].flags.c_contiguous:
            gs[i] = np.ascontiguousarray(gs[i])
        grad_at[len(items) + 1] = i
        items += [(xlab, x, True), (glab, gs[i], False)]
        n = needs(group)
        row = [None, None, None]
        if eight:
            if x.dtype != _F32:
                raise TypeError(f"{f}: {names[f's{eight[0] + 1}'][i]} is an 8-bit state, "
                                f"but {xlab} has dtype {x.dtype}; 8-bit states are kept "
                                f"for float32 parameters")
            q8 = _check_rule(f, group, eight[0], names[f"s{eight[0] + 1}"][i])
        for k in range(3):
            if k >= n:
                states[k][i] = None
                continue
            s, lab = states[k][i], names[f"s{k + 1}"][i]
            if s is None:
                raise ValueError(f"{f}: {lab} is required by the rule {_where(group)}")
            if eight and not isinstance(s, State8bit):
                raise TypeError(f"{f}: {lab} is not a State8bit (got {_v._got(s)}), but the "
                                f"other states of {xlab} are 8-bit; a parameter's states are "
                                f"stored alike")
            if not eight:
                _check_array(f, lab, s, x, _dtypes.STATES_OF[x.dtype], "s")
                items.append((lab, s, True))
                continue
            _check_state(f, lab, xlab, s, x, q8 >> k & 1)
            # (an ndarray subclass, a np.memmap say, as a plain view of its
            # memory: the fast path takes exact arrays)
            states[k][i], row[k] = s.codes.view(np.ndarray), s.absmax.view(np.ndarray)
            items += [(lab + ".codes", s.codes, True), (lab + ".absmax", s.absmax, True)]
        absmax.append(tuple(row))
        w = None if copies is None else copies[i]
        if w is not None:       # as a step with float states checks it, and C order
            wlab = names["w"][i]
            _v._check_role(f, wlab, xlab, w, x, "w", True)
            if not w.flags.c_contiguous:
                raise ValueError(f"{f}: {wlab} must be C-contiguous in a step with 8-bit "
                                 f"states (it is written in place)")
            items.append((wlab, w, True))
    for k in _v._overlaps(f, items):     # a gradient that is a written array: read a copy
        gs[grad_at[k]] = gs[grad_at[k]].copy()
    return gs, states, tuple(absmax)
