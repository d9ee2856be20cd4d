"""In-place Momentum, Adagrad and Adam: the ONNX ai.onnx.preview.training rules.

Each function tries the C fast path first (one C call over every tensor,
checked at C speed); a call it declines is checked in full by
``_validation`` (which raises on bad input before anything is written) and,
if valid, normalised and run through the same C call.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

from . import _core
from . import _validation as _v
from ._agc_api import momentum_agc as _momentum_agc

ArrayOrList = Union[np.ndarray, Sequence[np.ndarray]]


def _run_slow(fname, fast, x, g, states, scalars):
    prep = _v.tensors(fname, x, g, states)
    args = [prep.args("x"), prep.args("g")] + [prep.args(name) for name in states]
    if not fast(*args, *scalars):
        raise RuntimeError(f"{fname}: internal error: a normalised call was declined")
    prep.finish()


def momentum(x: ArrayOrList, g: ArrayOrList, v: ArrayOrList, *, lr, t: int,
             alpha: float = 0.9, beta: float = 1.0, norm_coefficient: float = 0.0,
             mode: str = "standard", n_threads: Optional[int] = None,
             clipping=None, clip_eps: float = 1e-3, layout: str = "oi") -> None:
    """ONNX Momentum (standard or Nesterov), in place.

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
        bit for bit to ``agc`` on a copy of g followed by ``momentum``.
        A per-tensor list may hold None to exclude a tensor. None (the
        default) means no clipping, and then clip_eps and layout are unused.
    clip_eps : float, default 1e-3
        AGC's floor of the parameter norm (``eps`` of :func:`fastopt.agc`).
    layout : {"oi", "io"}, default "oi"
        AGC's unit layout (see :func:`fastopt.unitwise_norm`).

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
    >>> fastopt.momentum(x, np.full(3, 0.5, np.float32), v, lr=0.1, t=0)
    >>> x
    array([0.95, 0.95, 0.95], dtype=float32)
    """
    if clipping is not None:
        return _momentum_agc(x, g, v, lr=lr, t=t, alpha=alpha, beta=beta,
                             norm_coefficient=norm_coefficient, mode=mode,
                             n_threads=n_threads, clipping=clipping,
                             clip_eps=clip_eps, layout=layout)
    if _core.momentum(x, g, v, lr, t, alpha, beta, norm_coefficient, mode, n_threads):
        return
    f = "fastopt.momentum"
    scalars = (_v.check_lr(f, lr), _v.check_t(f, t), _v.check_real(f, "alpha", alpha),
               _v.check_real(f, "beta", beta),
               _v.check_real(f, "norm_coefficient", norm_coefficient),
               _v.check_mode(f, mode), _v.check_n_threads(f, n_threads))
    _run_slow(f, _core.momentum, x, g, {"v": v}, scalars)


def adagrad(x: ArrayOrList, g: ArrayOrList, h: ArrayOrList, *, lr, t: int,
            decay_factor: float = 0.0, epsilon: float = 1e-6,
            norm_coefficient: float = 0.0, n_threads: Optional[int] = None) -> None:
    """ONNX Adagrad, in place.

    For each tensor, with ``g_r = norm_coefficient * x + g``::

        r = lr / (1 + t * decay_factor)
        h = h + g_r * g_r
        x = x - r * g_r / (sqrt(h) + epsilon)

    Parameters
    ----------
    x, g : ndarray or list/tuple of ndarray
        Parameters (updated in place) and gradients (only read), as in
        :func:`momentum`.
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
    n_threads : int, optional
        As in :func:`momentum`.

    Raises
    ------
    TypeError, ValueError
        On bad input; nothing is modified then.

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> x = np.ones(2); h = np.zeros(2)
    >>> fastopt.adagrad(x, np.array([3.0, -4.0]), h, lr=0.5, t=0, epsilon=0.0)
    >>> x, h
    (array([0.5, 1.5]), array([ 9., 16.]))
    """
    if _core.adagrad(x, g, h, lr, t, decay_factor, epsilon, norm_coefficient, n_threads):
        return
    f = "fastopt.adagrad"
    scalars = (_v.check_lr(f, lr), _v.check_t(f, t),
               _v.check_real(f, "decay_factor", decay_factor, low=0.0),
               _v.check_real(f, "epsilon", epsilon, low=0.0),
               _v.check_real(f, "norm_coefficient", norm_coefficient),
               _v.check_n_threads(f, n_threads))
    _run_slow(f, _core.adagrad, x, g, {"h": h}, scalars)


def adam(x: ArrayOrList, g: ArrayOrList, v: ArrayOrList, h: ArrayOrList, *, lr,
         t: int, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 1e-6,
         norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0,
         n_threads: Optional[int] = None) -> None:
    """ONNX Adam, in place.

    For each tensor, with ``g_r = norm_coefficient * x + g``::

        v = alpha * v + (1 - alpha) * g_r
        h = beta * h + (1 - beta) * g_r * g_r
        r = lr * sqrt(1 - beta**t) / (1 - alpha**t)   if t > 0 else lr
        x = (1 - norm_coefficient_post) * (x - r * v / (sqrt(h) + epsilon))

    Parameters
    ----------
    x, g : ndarray or list/tuple of ndarray
        Parameters (updated in place) and gradients (only read), as in
        :func:`momentum`.
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
    n_threads : int, optional
        As in :func:`momentum`.

    Raises
    ------
    TypeError, ValueError
        On bad input; nothing is modified then.

    Examples
    --------
    >>> import numpy as np, fastopt
    >>> x = np.zeros(2); v = np.zeros(2); h = np.zeros(2)
    >>> fastopt.adam(x, np.array([1.0, -1.0]), v, h, lr=0.1, t=1, epsilon=0.0)
    >>> x.round(6)
    array([-0.1,  0.1])
    """
    if _core.adam(x, g, v, h, lr, t, alpha, beta, epsilon, norm_coefficient,
                  norm_coefficient_post, n_threads):
        return
    f = "fastopt.adam"
    t_ = _v.check_t(f, t)
    scalars = (_v.check_lr(f, lr), t_,
               _v.check_real(f, "alpha", alpha, low=0.0, high=1.0, high_open=t_ > 0),
               _v.check_real(f, "beta", beta, low=0.0, high=1.0),
               _v.check_real(f, "epsilon", epsilon, low=0.0),
               _v.check_real(f, "norm_coefficient", norm_coefficient),
               _v.check_real(f, "norm_coefficient_post", norm_coefficient_post),
               _v.check_n_threads(f, n_threads))
    _run_slow(f, _core.adam, x, g, {"v": v, "h": h}, scalars)
