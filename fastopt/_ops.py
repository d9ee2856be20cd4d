"""The public in-place operations: the ONNX updates onnx_momentum (with
``clipping=``: fused AGC-momentum), onnx_adagrad and onnx_adam, then agc and
unitwise_norm.

Each public function below is written once, here: its signature, its
docstring and, as its body, its slow path. ``@_ext.entry(...)`` puts a C
entry in front of it (fastopt/_entry.pxi, compiled into ``fastopt._ext``):
a call parses its arguments in C against this signature and runs the op's
fast path (one C call) when every argument is already in the form the C
code needs. Otherwise (a decline, a missing or unknown argument) the call
runs the Python body below, which hands it to ``fastopt._dispatch.run``
(check in full, normalise, run, write back) or to the whole step.

Each op is a row of the op table below (its fast path in ``fastopt._ext``,
its array roles, its scalar checks). The math is in docs/semantics.md.

AGC (NFNet), for each unit of a parameter x and its gradient g::

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

from . import _dtypes, _ext, _step
from . import _validation as _v
from ._dispatch import Op, accept, run
from ._step import StepInfo

ArrayOrList = Union[np.ndarray, Sequence[np.ndarray]]
Clipping = Union[float, Sequence[Optional[float]]]


def _n_tensors(x) -> int:
    return len(x) if isinstance(x, (list, tuple)) else 1


# ------------------------------------------------------ scalar checks per op
# Each returns the scalars in the fast path's order, checked in the order
# the messages have always come in (the first bad argument is reported).

def _momentum_scalars(f, arrays, s):
    lr, t, alpha, beta, nc, mode, nth = s
    return (_v.check_lr(f, lr), _v.check_t(f, t), _v.check_real(f, "alpha", alpha),
            _v.check_real(f, "beta", beta), _v.check_real(f, "norm_coefficient", nc),
            _v.check_mode(f, mode), _v.check_n_threads(f, nth))


def _momentum_clip_scalars(f, arrays, s):
    *mom, clipping, eps, layout, nth = s
    head = _momentum_scalars(f, arrays, (*mom, None))[:-1]
    return (*head, _v.check_clipping(f, clipping, _n_tensors(arrays[0])),
            _v.check_real(f, "clip_eps", eps, low=0.0, low_open=True),
            _v.check_layout(f, layout), _v.check_n_threads(f, nth))


def _adagrad_scalars(f, arrays, s):
    lr, t, decay, eps, nc, nth = s
    return (_v.check_lr(f, lr), _v.check_t(f, t),
            _v.check_real(f, "decay_factor", decay, low=0.0),
            _v.check_real(f, "epsilon", eps, low=0.0),
            _v.check_real(f, "norm_coefficient", nc), _v.check_n_threads(f, nth))


def _adam_scalars(f, arrays, s):
    lr, t, alpha, beta, eps, nc, post, nth = s
    lr_, t_ = _v.check_lr(f, lr), _v.check_t(f, t)
    return (lr_, t_,
            _v.check_real(f, "alpha", alpha, low=0.0, high=1.0, high_open=t_ > 0),
            _v.check_real(f, "beta", beta, low=0.0, high=1.0),
            _v.check_real(f, "epsilon", eps, low=0.0),
            _v.check_real(f, "norm_coefficient", nc),
            _v.check_real(f, "norm_coefficient_post", post), _v.check_n_threads(f, nth))


def _agc_scalars(f, arrays, s):
    clipping, eps, layout, nth = s
    return (_v.check_clipping(f, clipping, _n_tensors(arrays[0])),
            _v.check_real(f, "eps", eps, low=0.0, low_open=True),
            _v.check_layout(f, layout), _v.check_n_threads(f, nth))


# ---------------------------------------------------------------- op table
MOMENTUM = Op("fastopt.onnx_momentum", _ext.momentum, ("x", "g", "v"), _momentum_scalars)
MOMENTUM_CLIP = Op("fastopt.onnx_momentum", _ext.agc_momentum, ("x", "g", "v"),
                   _momentum_clip_scalars)
ADAGRAD = Op("fastopt.onnx_adagrad", _ext.adagrad, ("x", "g", "h"), _adagrad_scalars)
ADAM = Op("fastopt.onnx_adam", _ext.adam, ("x", "g", "v", "h"), _adam_scalars)
AGC = Op("fastopt.agc", _ext.agc, ("x", "g"), _agc_scalars, clips_g=True)


# ------------------------------------------------ the whole step's groups
# The checked scalars of an ONNX rule as the group of fastopt/_step.py.

def _momentum_group(c):
    return _step.group_tuple(_step.RULES["momentum"], t=c[1], lr=c[0], alpha=c[2],
                             beta=c[3], decay=c[4],
                             flags=_step.NESTEROV if c[5] == "nesterov" else 0)


def _adagrad_group(c):
    return _step.group_tuple(_step.RULES["adagrad"], t=c[1], lr=c[0], lr_decay=c[2],
                             eps=c[3], decay=c[4])


def _adam_group(c):
    return _step.group_tuple(_step.RULES["adam"], t=c[1], lr=c[0], alpha=c[2], beta=c[3],
                             eps=c[4], decay=c[5], decay_post=c[6])


def _arrays(a) -> tuple:
    return (a,) if isinstance(a, np.ndarray) else tuple(a) if isinstance(a, (list, tuple)) \
        else ()


def _half(x, g) -> bool:
    """Are some of the gradients g 16-bit, for float32/float64 parameters x
    (the pairs the whole step takes and the ONNX operators' driver not)?"""
    return (any(isinstance(a, np.ndarray) and a.dtype.newbyteorder("=") in _HALF
                for a in _arrays(g))
            and all(isinstance(a, np.ndarray) and a.dtype.newbyteorder("=") in _dtypes.NUMPY
                    for a in _arrays(x)))


_HALF = tuple(d for d in _dtypes.GRADS if d not in _dtypes.NUMPY)


def _own_type_states(f, roles, x, states) -> None:
    """The ONNX operators keep their states in their parameters' dtype
    (whichever route the call takes): a state of another dtype, such as the
    bfloat16 ones the torch-form functions store apart, raises TypeError."""
    xs = _arrays(x)
    for role, st in zip(roles, states):
        for i, (xi, a) in enumerate(zip(xs, _arrays(st))):
            if (isinstance(a, np.ndarray) and isinstance(xi, np.ndarray)
                    and a.dtype.newbyteorder("=") != xi.dtype.newbyteorder("=")):
                lab, xlab = ((role, "x") if isinstance(x, np.ndarray)
                             else (f"{role}[{i}]", f"x[{i}]"))
                raise TypeError(f"{f}: {lab} has dtype {a.dtype} but {xlab} has {xi.dtype}; "
                                f"the state must match its parameter")


def _onnx(op, arrays, scalars, steps):
    """An ONNX rule's call that its fast path declined: without step options
    through the dispatch (check, normalise, run); with them, or with 16-bit
    gradients (which the ONNX operators' own driver does not read), the
    whole step, returning its StepInfo (None without options)."""
    options = _step.step_options(*steps)
    x, g, *states = arrays
    if not options and not _half(x, g):   # the C entry has offered the call to the fast path
        accept(op, arrays, scalars)
        return None
    f = op.fname
    _own_type_states(f, op.roles[2:], x, states)
    if op is MOMENTUM_CLIP:
        group = _momentum_group(_momentum_scalars(f, (x,), scalars[:6] + scalars[-1:]))
        clipping, eps, layout, nth = scalars[6:]
        info = _agc_fused(f, x, g, states[0], group, clipping, eps, layout, nth, options)
    else:
        group = _GROUPS[op.fname](op.check(f, (x,), scalars))
        info = _step.onnx_fused(f, x, g, tuple(states), op.roles[2:], group, scalars[-1],
                                options)
    return info if options else None


_GROUPS = {MOMENTUM.fname: _momentum_group, ADAGRAD.fname: _adagrad_group,
           ADAM.fname: _adam_group}


def _agc_fused(f, x, g, v, group, clipping, clip_eps, layout, n_threads,
              options) -> StepInfo:
    """Momentum with AGC and the step options: unscale / check / clip the
    gradients into copies (the gradients passed in are not written; a
    16-bit one's copy widened exactly to its parameter's dtype, which AGC
    reads), then the fused AGC-momentum update on the copies."""
    o = _step.check_options(f, **options)
    gl = _step.as_list(g)
    xl = _step.as_list(x)
    copies = [np.array(a, dtype=_dtypes.working_type(a, xl[i] if i < len(xl) else None), order="C")
              if isinstance(a, np.ndarray) else a for i, a in enumerate(gl)]
    args = (o.grad_scale, o.max_norm, o.clip_value, o.clip, o.norm_type, o.check_finite,
            n_threads)
    out = _ext.clip_grads(tuple(copies), *args)
    if out is None:
        out = accept(_step.CLIP_GRADS, (tuple(copies),), args, f)
    info = StepInfo(*out)
    if info.applied:
        flags = group[1]
        onnx_momentum(x, copies[0] if isinstance(g, np.ndarray) else list(copies), v,
                      lr=group[3], t=group[2], alpha=group[4], beta=group[5],
                      norm_coefficient=group[7], mode="nesterov" if flags & _step.NESTEROV
                      else "standard", n_threads=n_threads, clipping=clipping,
                      clip_eps=clip_eps, layout=layout)
    return info


# ------------------------------------------------------------------ public
# The body of each @_ext.entry function is its slow path: the C entry has
# already offered the call to the fast path when the body runs.

@_ext.entry("momentum")
def onnx_momentum(x: ArrayOrList, g: ArrayOrList, v: ArrayOrList, *, lr, t: int,
                  alpha: float = 0.9, beta: float = 1.0, norm_coefficient: float = 0.0,
                  mode: str = "standard", n_threads: Optional[int] = None,
                  clipping=None, clip_eps: float = 1e-3, layout: str = "oi",
                  grad_scale=None, max_grad_norm=None, norm_type=2.0,
                  clip_convention: str = "torch", clip_value=None,
                  skip_if_nonfinite: bool = False) -> StepInfo | None:
    """ONNX Momentum (standard or Nesterov), in place: the ONNX operator's
    names and T convention (torch.optim.SGD's update is :func:`fastopt.sgd`).

    For each tensor, with ``g_r = norm_coefficient * x + g`` and
    ``b = beta if t > 0 else 1`` (the first update ignores beta)::

        v = alpha * v + b * g_r
        x = x - lr * v                      # mode="standard"
        x = x - lr * (g_r + alpha * v)      # mode="nesterov"

    Parameters
    ----------
    x : ndarray or list/tuple of ndarray
        Parameters (float32 or float64), updated in place. A list updates
        many tensors in one C call; they may mix float32 and float64.
    g : ndarray or list/tuple of ndarray
        Gradients, only read: each of its parameter's dtype and broadcastable
        to its shape.
    v : ndarray or list/tuple of ndarray
        Momentum buffers, updated in place: each of its parameter's dtype and
        shape (start from zeros).
    lr : float or one-element array
        The learning rate R, finite and >= 0.
    t : int
        The update count T: 0 on the first update (beta is ignored then),
        any t > 0 afterwards.
    alpha : float, default 0.9
        Momentum coefficient (torch.optim.SGD ``momentum``).
    beta : float, default 1.0
        Gradient coefficient after the first update (torch ``1 - dampening``).
    norm_coefficient : float, default 0.0
        L2 coefficient folded into the gradient (torch ``weight_decay``).
    mode : {"standard", "nesterov"}
    n_threads : int, optional
        None uses the current default (:func:`fastopt.set_num_threads`,
        OMP_NUM_THREADS, threadpoolctl); -1 all cores. Results are
        bit-identical for every thread count.
    clipping : float or list/tuple of (float or None), optional
        Adaptive gradient clipping (NFNet's SGD_AGC): when given, each
        gradient is first clipped as :func:`fastopt.agc` does (without
        writing g), then the update above runs, fused into one pass; equal
        bit for bit to ``agc`` on a copy of g followed by ``onnx_momentum``.
        A per-tensor list may hold None to exclude a tensor. None (the
        default) means no clipping, and then clip_eps and layout are unused.
    clip_eps : float, default 1e-3
        AGC's floor of the parameter norm (``eps`` of :func:`fastopt.agc`).
    layout : {"oi", "io"}, default "oi"
        AGC's unit layout (see :func:`fastopt.unitwise_norm`).
    grad_scale, max_grad_norm, norm_type, clip_convention, clip_value, skip_if_nonfinite
        The whole step's options, as in :func:`fastopt.adamw` (unscale,
        non-finite skip, clip by the global norm or by value, fused into the
        update; the gradients are not written). When any is given the call
        returns a :class:`~fastopt.StepInfo`, else None.

    Raises
    ------
    TypeError, ValueError
        On bad input, naming the argument and tensor index. Nothing is
        modified when an error is raised.

    Notes
    -----
    C- and F-contiguous aligned arrays in native byte order are updated
    directly. Other layouts (strided views, misaligned or byte-swapped
    arrays) and broadcast gradients are correct too, through contiguous
    scratch copies written back afterwards (slower).

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> x = np.ones(3, np.float32); v = np.zeros_like(x)
    >>> fastopt.onnx_momentum(x, np.full(3, 0.5, np.float32), v, lr=0.1, t=0)
    >>> x
    array([0.95, 0.95, 0.95], dtype=float32)
    """
    steps = (grad_scale, max_grad_norm, norm_type, clip_convention, clip_value,
             skip_if_nonfinite)
    if clipping is None:
        return _onnx(MOMENTUM, (x, g, v),
                     (lr, t, alpha, beta, norm_coefficient, mode, n_threads), steps)
    return _onnx(MOMENTUM_CLIP, (x, g, v), (lr, t, alpha, beta, norm_coefficient, mode,
                                            clipping, clip_eps, layout, n_threads), steps)


@_ext.entry("adagrad")
def onnx_adagrad(x: ArrayOrList, g: ArrayOrList, h: ArrayOrList, *, lr, t: int,
                 decay_factor: float = 0.0, epsilon: float = 1e-6,
                 norm_coefficient: float = 0.0, n_threads: Optional[int] = None,
                 grad_scale=None, max_grad_norm=None, norm_type=2.0,
                 clip_convention: str = "torch", clip_value=None,
                 skip_if_nonfinite: bool = False) -> StepInfo | None:
    """ONNX Adagrad, in place: the ONNX operator's names and T convention
    (torch.optim.Adagrad's update is :func:`fastopt.adagrad`).

    For each tensor, with ``g_r = norm_coefficient * x + g``::

        r = lr / (1 + t * decay_factor)
        h = h + g_r * g_r
        x = x - r * g_r / (sqrt(h) + epsilon)

    Parameters
    ----------
    x, g : ndarray or list/tuple of ndarray
        Parameters (updated in place) and gradients (only read), as in
        :func:`onnx_momentum`.
    h : ndarray or list/tuple of ndarray
        Accumulated squared gradients, updated in place, of each parameter's
        shape and dtype (torch's ``initial_accumulator_value`` is its fill).
    lr : float or one-element array
        The learning rate R, finite and >= 0.
    t : int
        The update count T (0 on the first update; torch's step - 1).
    decay_factor : float, default 0.0
        Inverse-time decay of the rate, >= 0 (torch ``lr_decay``).
    epsilon : float, default 1e-6
        Added to sqrt(h), >= 0. 1e-6 is the ONNX schema's default.
    norm_coefficient : float, default 0.0
        L2 coefficient (torch ``weight_decay``).
    n_threads, grad_scale, max_grad_norm, norm_type, clip_convention, clip_value, skip_if_nonfinite
        As in :func:`onnx_momentum` (the step options make the call return a
        :class:`~fastopt.StepInfo`).

    Raises
    ------
    TypeError, ValueError
        On bad input; nothing is modified then.

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> x = np.ones(2); h = np.zeros(2)
    >>> fastopt.onnx_adagrad(x, np.array([3.0, -4.0]), h, lr=0.5, t=0, epsilon=0.0)
    >>> x, h
    (array([0.5, 1.5]), array([ 9., 16.]))
    """
    return _onnx(ADAGRAD, (x, g, h), (lr, t, decay_factor, epsilon, norm_coefficient,
                                      n_threads),
                 (grad_scale, max_grad_norm, norm_type, clip_convention, clip_value,
                  skip_if_nonfinite))


@_ext.entry("adam")
def onnx_adam(x: ArrayOrList, g: ArrayOrList, v: ArrayOrList, h: ArrayOrList, *, lr,
              t: int, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 1e-6,
              norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0,
              n_threads: Optional[int] = None, grad_scale=None, max_grad_norm=None,
              norm_type=2.0, clip_convention: str = "torch", clip_value=None,
              skip_if_nonfinite: bool = False) -> StepInfo | None:
    """ONNX Adam, in place: the ONNX operator's names, its epsilon placement
    and its T convention (torch.optim.Adam's update is :func:`fastopt.adam`).

    ``t`` counts from 1: ``t=0`` skips the bias correction, which makes the
    first steps several times larger than torch's (``t=0`` is the ONNX
    operator's own choice, kept as specified).

    For each tensor, with ``g_r = norm_coefficient * x + g``::

        v = alpha * v + (1 - alpha) * g_r
        h = beta * h + (1 - beta) * g_r * g_r
        r = lr * sqrt(1 - beta**t) / (1 - alpha**t)   if t > 0 else lr
        x = (1 - norm_coefficient_post) * (x - r * v / (sqrt(h) + epsilon))

    Parameters
    ----------
    x, g : ndarray or list/tuple of ndarray
        Parameters (updated in place) and gradients (only read), as in
        :func:`onnx_momentum`.
    v, h : ndarray or list/tuple of ndarray
        First and second moment estimates, updated in place, of each
        parameter's shape and dtype (start from zeros).
    lr : float or one-element array
        The learning rate R, finite and >= 0.
    t : int
        The update count T. Use t = 1 for the first update (the usual
        bias-corrected Adam); t = 0 switches the correction off.
    alpha, beta : float, default 0.9 and 0.999
        Moment decay rates in [0, 1] (torch ``betas``); alpha < 1 when t > 0.
    epsilon : float, default 1e-6
        Added to sqrt(h), >= 0. Note ONNX adds it *before* the bias
        correction, unlike torch.optim.Adam.
    norm_coefficient : float, default 0.0
        L2 coefficient folded into the gradient.
    norm_coefficient_post : float, default 0.0
        Weight decay applied after the step: ``x *= 1 - norm_coefficient_post``.
    n_threads, grad_scale, max_grad_norm, norm_type, clip_convention, clip_value, skip_if_nonfinite
        See :func:`onnx_momentum`; given any step option, the call returns a
        :class:`~fastopt.StepInfo`.

    Raises
    ------
    TypeError, ValueError
        On bad input, naming the argument; then nothing is written.

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> x = np.zeros(2); v = np.zeros(2); h = np.zeros(2)
    >>> fastopt.onnx_adam(x, np.array([1.0, -1.0]), v, h, lr=0.1, t=1, epsilon=0.0)
    >>> x.round(6)
    array([-0.1,  0.1])
    """
    return _onnx(ADAM, (x, g, v, h), (lr, t, alpha, beta, epsilon, norm_coefficient,
                                      norm_coefficient_post, n_threads),
                 (grad_scale, max_grad_norm, norm_type, clip_convention, clip_value,
                  skip_if_nonfinite))


@_ext.entry("agc")
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
        As in :func:`fastopt.onnx_momentum`. Results are bit-identical for every
        thread count: each unit is reduced in an order fixed by its shape.

    Raises
    ------
    TypeError, ValueError
        On bad input, naming the argument and tensor index; g is left
        untouched then.

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
    accept(AGC, (x, g), (clipping, eps, layout, n_threads))   # after the C entry's offer


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
    _v.check_array(f, "x", x, "works on")
    x = _v._own(x)              # its shape and layout as checked, whatever another thread does
    lay = _v.check_layout(f, layout)
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
    if _v._fast_layout(x) is None:
        x = np.array(x, dtype=dtype, order="C")
    norms = _ext.unit_norms(x, lay).reshape(shape)
    with np.errstate(over="ignore"):  # a norm beyond float32's range is inf, silently
        return norms.astype(dtype)


# ------------------------------------------- calls with the caller's labels

_SCALAR_NAMES = {
    "momentum": ("lr", "t", "alpha", "beta", "norm_coefficient", "mode", "n_threads"),
    "momentum_clip": ("lr", "t", "alpha", "beta", "norm_coefficient", "mode",
                      "clipping", "clip_eps", "layout", "n_threads"),
    "adagrad": ("lr", "t", "decay_factor", "epsilon", "norm_coefficient", "n_threads"),
    "adam": ("lr", "t", "alpha", "beta", "epsilon", "norm_coefficient",
             "norm_coefficient_post", "n_threads"),
    "agc": ("clipping", "eps", "layout", "n_threads"),
}
_OPS = {"momentum": MOMENTUM, "momentum_clip": MOMENTUM_CLIP, "adagrad": ADAGRAD,
        "adam": ADAM, "agc": AGC}


def call(name: str, arrays: tuple, kw: dict, *, fname: Optional[str] = None,
         labels: Optional[dict] = None) -> None:
    """``fastopt.<name>(*arrays, **kw)``, with errors named by the caller:
    ``fname`` and ``labels`` as in :func:`fastopt._dispatch.run` (e.g.
    ``fastopt.optim`` passes its step's name and ``params[i]``/``grads[i]``)."""
    public = {"momentum": onnx_momentum, "adagrad": onnx_adagrad, "adam": onnx_adam,
              "agc": agc}[name]
    defaults = public.__wrapped__.__kwdefaults__
    unknown = set(kw) - set(defaults) - {"lr", "t"}
    if unknown:
        raise TypeError(f"{public.__name__}() got unexpected keyword arguments {unknown}")
    key = "momentum_clip" if name == "momentum" and kw.get("clipping") is not None else name
    try:
        scalars = tuple(kw[k] if k in kw else defaults[k] for k in _SCALAR_NAMES[key])
    except KeyError as exc:
        raise TypeError(f"{public.__name__}() missing keyword argument {exc}") from None
    run(_OPS[key], arrays, scalars, fname=fname, labels=labels)
