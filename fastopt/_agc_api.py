"""Adaptive gradient clipping (AGC, from NFNet), standalone and fused.

Public functions: :func:`unitwise_norm`, :func:`agc`, and the fused path of
:func:`fastopt.momentum` (its ``clipping=`` argument), which lands in
:func:`momentum_agc` here. Same layering as the core: try the C fast path
(``_agc``), which declines anything unusual without writing; then check
everything (raising TypeError/ValueError that name the function, the
argument and the tensor index), normalise awkward layouts through contiguous
copies, and run the same C call.

For each unit (output unit) of a parameter x and its gradient g::

    p_norm   = max(||x_unit||, eps)
    max_norm = clipping * p_norm
    g_unit   = g_unit * (max_norm / max(||g_unit||, 1e-6))   if ||g_unit|| > max_norm

A unit is everything but the first axis for ``layout="oi"`` (PyTorch: OI,
OIHW, OIDHW) and everything but the last axis for ``layout="io"``
(JAX/Haiku: IO, HWIO, DHWIO); a tensor that is a scalar or a vector once its
length-1 axes are squeezed away is one unit.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from . import _ext as _agc
from . import _validation as _v

ArrayOrList = Union[np.ndarray, Sequence[np.ndarray]]
Clipping = Union[float, Sequence[Optional[float]]]

_LAYOUTS = ("oi", "io")


# ------------------------------------------------------------------ checks

def check_layout(fname: str, layout) -> str:
    if not isinstance(layout, str):
        raise TypeError(f"{fname}: layout must be a str, got {_v._type_name(layout)}")
    if layout not in _LAYOUTS:
        raise ValueError(
            f"{fname}: layout must be 'oi' (PyTorch: OI, OIHW; the unit is "
            f"everything but the first axis) or 'io' (JAX/Haiku: IO, HWIO; "
            f"everything but the last axis), got {layout!r}")
    return layout


def check_eps(fname: str, name: str, eps) -> float:
    return _v.check_real(fname, name, eps, low=0.0, low_open=True)


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
                _v.check_real(fname, f"clipping[{i}]", c, low=0.0, low_open=True)
                for i, c in enumerate(clipping)]
    if clipping is None:
        raise TypeError(
            f"{fname}: clipping must be a real number > 0 or a list/tuple with "
            f"one entry per tensor (None excludes a tensor), got NoneType")
    return _v.check_real(fname, "clipping", clipping, low=0.0, low_open=True)


def _n_tensors(x) -> int:
    return len(x) if isinstance(x, (list, tuple)) else 1


def _check_float_array(fname: str, label: str, a) -> None:
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{fname}: {label} must be a numpy.ndarray, got {_v._type_name(a)}")
    if a.dtype.newbyteorder("=") not in _v._FLOATS:
        raise TypeError(f"{fname}: {label} has dtype {a.dtype}; fastopt works on "
                        f"float32 or float64 arrays")


def _fast_layout(a: np.ndarray) -> Optional[str]:
    """'C' or 'F' if a can go to C as it is, else None."""
    if not (a.dtype.isnative and a.flags.aligned):
        return None
    return "C" if a.flags.c_contiguous else "F" if a.flags.f_contiguous else None


class _AgcPrepared:
    """An agc() call normalised for the fast path, plus copies to write back."""

    def __init__(self, single):
        self.single = single
        self.x: list = []
        self.g: list = []
        self.writeback: list = []

    def args(self, name):
        seq = self.x if name == "x" else self.g
        return seq[0] if self.single else seq

    def finish(self):
        for dst, src in self.writeback:
            dst[...] = src


def _agc_tensors(fname: str, x, g) -> _AgcPrepared:
    """Check the tensors of an agc() call: x only read (read-only is fine),
    g clipped in place (writeable, exactly x's shape and dtype, sharing no
    memory with any x or other g). Nothing is written here."""
    xs, single = _v._as_list(fname, "x", x, x_single=None, n=None)
    n = len(xs)
    gs, _ = _v._as_list(fname, "g", g, x_single=single, n=n)

    def label(name, i):
        return name if single else f"{name}[{i}]"

    items = []
    for i in range(n):
        xi, gi = xs[i], gs[i]
        _check_float_array(fname, label("x", i), xi)
        if not isinstance(gi, np.ndarray):
            raise TypeError(f"{fname}: {label('g', i)} must be a numpy.ndarray, "
                            f"got {_v._type_name(gi)}")
        if gi.dtype.newbyteorder("=") != xi.dtype.newbyteorder("="):
            raise TypeError(
                f"{fname}: {label('g', i)} has dtype {gi.dtype} but {label('x', i)} "
                f"has {xi.dtype}; the gradient must match its parameter")
        if gi.shape != xi.shape:
            raise ValueError(
                f"{fname}: {label('g', i)} has shape {gi.shape} but {label('x', i)} "
                f"has shape {xi.shape}; the gradient is clipped in place, so it "
                f"must have its parameter's shape")
        if not gi.flags.writeable:
            raise ValueError(f"{fname}: {label('g', i)} is read-only; it is "
                             f"clipped in place")
        items.append((label("x", i), xi, False))
        items.append((label("g", i), gi, True))
    _check_overlaps(fname, items)

    prep = _AgcPrepared(single)
    for xi, gi in zip(xs, gs):
        order = _fast_layout(xi)
        if order is None:
            order = "C"
            xi = np.array(xi, dtype=xi.dtype.newbyteorder("="), order="C")
        flag = "c_contiguous" if order == "C" else "f_contiguous"
        if not (gi.dtype.isnative and gi.flags.aligned and getattr(gi.flags, flag)):
            copy = np.array(gi, dtype=gi.dtype.newbyteorder("="), order=order)
            prep.writeback.append((gi, copy))
            gi = copy
        prep.x.append(xi)
        prep.g.append(gi)
    return prep


def _check_overlaps(fname: str, items) -> None:
    """items: (label, array, is_written). Raise if a written array shares
    memory with any other array of the call."""
    for j, k in _v.sharing_pairs(items):
        (la, _, oa), (lb, _, ob) = items[j], items[k]
        if oa and ob:
            raise ValueError(
                f"{fname}: {la} and {lb} share memory; every gradient is "
                f"clipped in place and must have memory of its own")
        gl, xl = (la, lb) if oa else (lb, la)
        raise ValueError(
            f"{fname}: {gl} shares memory with {xl}; the gradient is clipped "
            f"in place while the parameter is read, so pass a copy of one")


# ------------------------------------------------------------------ public

def unitwise_norm(x: np.ndarray, *, layout: str = "oi") -> np.ndarray:
    """The L2 norm of every unit of ``x``, as AGC uses it.

    Parameters
    ----------
    x : ndarray
        A float32 or float64 array of any shape and memory layout (only read).
    layout : {"oi", "io"}, default "oi"
        ``"oi"`` (PyTorch: OI, OIHW, OIDHW): a unit is ``x[i, ...]``, the norm
        is over every axis but the first. ``"io"`` (JAX/Haiku: IO, HWIO,
        DHWIO): a unit is ``x[..., j]``, the norm is over every axis but the
        last. A tensor that is a scalar or a vector after squeezing its
        length-1 axes is a single unit (the whole-tensor norm).

    Returns
    -------
    ndarray
        The norms in ``x``'s dtype, with the reduced axes kept as length 1 so
        the result broadcasts against ``x``: shape ``(x.shape[0], 1, ..., 1)``
        for "oi", ``(1, ..., 1, x.shape[-1])`` for "io", all ones for a
        single unit.

    Notes
    -----
    Sums of squares are accumulated in an order fixed by the shape
    (independent of the thread count): float64 data in double throughout;
    float32 data in float32 within blocks of at most 256 squares (a block
    whose sum would overflow or underflow float32 is redone in double) and
    in double above that. The norm is rounded to ``x``'s dtype once.

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> fastopt.unitwise_norm(np.array([[3.0, 4.0], [0.0, 1.0]]))
    array([[5.],
           [1.]])
    >>> fastopt.unitwise_norm(np.array([[3.0, 4.0], [0.0, 1.0]]), layout="io")
    array([[3.        , 4.12310563]])
    """
    f = "fastopt.unitwise_norm"
    _check_float_array(f, "x", x)
    lay = check_layout(f, layout)
    nd = x.ndim
    if sum(d != 1 for d in x.shape) <= 1:
        shape = (1,) * nd
    elif lay == "oi":
        shape = (x.shape[0],) + (1,) * (nd - 1)
    else:
        shape = (1,) * (nd - 1) + (x.shape[-1],)
    dtype = x.dtype.newbyteorder("=")
    if x.size == 0:
        return np.zeros(shape, dtype)
    if _fast_layout(x) is None:
        x = np.array(x, dtype=dtype, order="C")
    norms = _agc.unit_norms(x, lay).reshape(shape)
    with np.errstate(over="ignore"):  # a norm beyond float32's range is inf, silently
        return norms.astype(dtype)


def agc(x: ArrayOrList, g: ArrayOrList, *, clipping: Clipping = 0.01,
        eps: float = 1e-3, layout: str = "oi",
        n_threads: Optional[int] = None) -> None:
    """Adaptive gradient clipping (NFNet), in place on ``g``.

    For every unit (see :func:`unitwise_norm`) of each parameter and its
    gradient::

        max_norm = clipping * max(||x_unit||, eps)
        g_unit  *= max_norm / max(||g_unit||, 1e-6)    where ||g_unit|| > max_norm

    Units at or below the threshold are left exactly as they are.

    Parameters
    ----------
    x : ndarray or list/tuple of ndarray
        Parameters (float32 or float64), only read (read-only arrays are
        fine). A list clips many tensors in one C call; they may mix float32
        and float64.
    g : ndarray or list/tuple of ndarray
        Gradients, clipped in place: each writeable, of exactly its
        parameter's shape and dtype, sharing no memory with any parameter or
        other gradient.
    clipping : float or list/tuple of (float or None), default 0.01
        The clipping ratio (> 0; 0.01 is NFNet-F0's), for all tensors or one
        per tensor, where None excludes a tensor (NFNet and timm exclude the
        final classifier).
    eps : float, default 1e-3
        Floor of the parameter norm (> 0), so zero-initialised parameters
        still get updates.
    layout : {"oi", "io"}, default "oi"
        PyTorch's (unit = everything but the first axis) or JAX/Haiku's
        (everything but the last axis).
    n_threads : int, optional
        As in :func:`fastopt.momentum`. Results are bit-identical for every
        thread count: each unit is reduced in an order fixed by its shape.

    Raises
    ------
    TypeError, ValueError
        On bad input, naming the argument and tensor index. Nothing is
        modified when an error is raised.

    Notes
    -----
    Norms are accumulated in double; the factor is rounded to the tensor's
    dtype and applied as one multiplication in that dtype.

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> x = np.array([[3.0, 4.0], [3.0, 4.0]]); g = np.array([[0.3, 0.4], [0.03, 0.04]])
    >>> fastopt.agc(x, g, clipping=0.1)
    >>> g
    array([[0.3 , 0.4 ],
           [0.03, 0.04]])
    >>> fastopt.agc(x, g, clipping=0.05)
    >>> g
    array([[0.15, 0.2 ],
           [0.03, 0.04]])
    """
    if _agc.agc(x, g, clipping, eps, layout, n_threads):
        return
    f = "fastopt.agc"
    clip = check_clipping(f, clipping, _n_tensors(x))
    eps_ = check_eps(f, "eps", eps)
    lay = check_layout(f, layout)
    nth = _v.check_n_threads(f, n_threads)
    prep = _agc_tensors(f, x, g)
    if not _agc.agc(prep.args("x"), prep.args("g"), clip, eps_, lay, nth):
        raise RuntimeError(f"{f}: internal error: a normalised call was declined")
    prep.finish()


def momentum_agc(x, g, v, *, lr, t, alpha, beta, norm_coefficient, mode,
                 n_threads, clipping, clip_eps, layout) -> None:
    """``fastopt.momentum(..., clipping=...)``: AGC-SGD (NFNet's SGD_AGC).

    The gradient is AGC-clipped first (not written back: g is only read),
    then ``norm_coefficient * x`` is added and the ONNX Momentum update runs,
    all in one pass over memory where the layout allows. Equal bit for bit
    to ``agc`` on a copy of g followed by ``momentum``. Tensors whose
    clipping is None get the plain momentum update.
    """
    if _agc.agc_momentum(x, g, v, lr, t, alpha, beta, norm_coefficient, mode,
                         clipping, clip_eps, layout, n_threads):
        return
    f = "fastopt.momentum"
    scalars = (_v.check_lr(f, lr), _v.check_t(f, t), _v.check_real(f, "alpha", alpha),
               _v.check_real(f, "beta", beta),
               _v.check_real(f, "norm_coefficient", norm_coefficient),
               _v.check_mode(f, mode))
    clip = check_clipping(f, clipping, _n_tensors(x))
    eps_ = check_eps(f, "clip_eps", clip_eps)
    lay = check_layout(f, layout)
    nth = _v.check_n_threads(f, n_threads)
    prep = _v.tensors(f, x, g, {"v": v})
    if not _agc.agc_momentum(prep.args("x"), prep.args("g"), prep.args("v"),
                             *scalars, clip, eps_, lay, nth):
        raise RuntimeError(f"{f}: internal error: a normalised call was declined")
    prep.finish()
