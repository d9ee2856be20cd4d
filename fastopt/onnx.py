"""ONNX forms of the three updates, and a fast backend for onnx.reference.

The ONNX ``ai.onnx.preview.training`` operators are functional: a node takes
``R, T, X_1..X_n, G_1..G_n, <states>`` and returns new tensors. This module
gives the same contract on top of fastopt's in-place kernels:

- :func:`momentum`, :func:`adagrad`, :func:`adam` (the ONNX operators, as
  the module's name says; the in-place forms are
  :func:`fastopt.onnx_momentum` and its siblings) take the inputs in ONNX
  order, never modify them, and return the ONNX outputs as a tuple (every
  new X, then every new state, in input order). All tensors of a call
  go through ONE multi-tensor fastopt call on fresh copies. The outputs of
  one dtype are non-overlapping, 64-byte-aligned views into one new buffer
  (it is freed when the last of them is).
- :func:`reference_ops` returns ``onnx.reference`` OpRun classes, so
  ``ReferenceEvaluator(model, new_ops=fastopt.onnx.reference_ops())`` runs a
  training graph's optimizer nodes with fastopt's kernels.

Only :func:`reference_ops` needs the ``onnx`` package; it is imported there,
lazily, so the functional forms work without it.

Differences from the ONNX reference implementation, all deliberate: each
output keeps its X's dtype (the reference returns float32 from multi-tensor
Adam and float64 from float32 Adam with T > 0); a wrong input count, a
negative T or an unknown Momentum ``mode`` raise instead of being sliced,
treated as T = 0, or run as Nesterov.
"""
import functools

import numpy as np

from . import _dtypes, _ops
from . import _validation as _v

__all__ = ["momentum", "adagrad", "adam", "reference_ops", "DOMAIN"]

#: The ONNX domain of the three operators.
DOMAIN = "ai.onnx.preview.training"


def _split(fname: str, inputs: tuple, groups: int, names: str) -> list:
    """Split the variadic ONNX inputs into `groups` equal lists."""
    k = len(inputs)
    if k == 0 or k % groups:
        raise ValueError(
            f"{fname}: got {k} tensor inputs after R and T; expected a non-zero "
            f"multiple of {groups} ({names}: all X first, then all G, then the "
            f"states, one of each per parameter)")
    n = k // groups
    return [list(inputs[i * n:(i + 1) * n]) for i in range(groups)]


_ALIGN = 64  # bytes: each output starts on a cache line, like the C driver's chunks


def _fresh(fname: str, groups: list) -> list:
    """Native C-contiguous copies of the tensors to be updated.

    ``groups`` is a list of (role, arrays); returns the copies in the same
    structure. All copies of one dtype are views into ONE buffer, each
    starting on a 64-byte boundary: many separate allocations are freed and
    re-faulted by the allocator on every call (200 tensors of 1e4 float32:
    ~6 ms of page faults, against ~0.7 ms for one block), while one block
    is reused from the heap after the first call. The outputs then share
    that block as their base, so it is freed when the last of them is.
    """
    for role, arrays in groups:
        for i, a in enumerate(arrays):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{fname}: {role}[{i}] must be a numpy.ndarray, "
                                f"got {_v._got(a)}")
    floats = _dtypes.NUMPY
    total = {dt: 0 for dt in floats}
    places = []  # per group, per array: (dtype, start) or None
    for _, arrays in groups:
        row = []
        for a in arrays:
            dt = a.dtype.newbyteorder("=")
            if dt in floats:
                row.append((dt, total[dt]))
                step = _ALIGN // dt.itemsize
                total[dt] += -(-a.size // step) * step
            else:  # rejected with a clear message by the in-place call
                row.append(None)
        places.append(row)
    blocks = {}
    for dt, n in total.items():
        if n:
            buf = np.empty(n + _ALIGN // dt.itemsize, dtype=dt)
            shift = (-buf.ctypes.data % _ALIGN) // dt.itemsize
            blocks[dt] = buf[shift:shift + n]
    out = []
    for (_, arrays), row in zip(groups, places):
        copies = []
        for a, place in zip(arrays, row):
            if place is None or a.size == 0:
                copies.append(np.array(a, dtype=a.dtype.newbyteorder("="), order="C"))
                continue
            dt, start = place
            c = blocks[dt][start:start + a.size].reshape(a.shape)
            np.copyto(c, a, casting="equiv")
            copies.append(c)
        out.append(copies)
    return out


def _reals(fname: str, **attrs) -> dict:
    """Attributes as Python floats. ReferenceEvaluator passes np.float32
    scalars, which fastopt's C fast path declines (it takes Python floats
    only); converting here keeps ONNX calls on the fast path."""
    return {k: _v.check_real(fname, k, v) for k, v in attrs.items()}


def _call(fname: str, inner: str, fn, *args, **kwargs) -> None:
    """Run an in-place fastopt update, naming the ONNX form in any error."""
    try:
        fn(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        msg = str(exc)
        if msg.startswith(inner + ":"):
            msg = fname + msg[len(inner):]
        raise type(exc)(msg) from None


def _update(name: str, fn, R, T, inputs: tuple, states: str, extra=None, **reals) -> tuple:
    """One ONNX operator out of place: split the variadic inputs (X, G, then
    each state named in ``states``), check R and T, copy the tensors to be
    updated, run the in-place fastopt update ``fn`` on the copies and return
    them in ONNX order (all X, then each state)."""
    f = f"fastopt.onnx.{name}"
    roles = ["x", "g"] + list(states)
    xs, gs, *sts = _split(f, inputs, len(roles), ", ".join(r.upper() for r in roles))
    lr = _v.check_lr(f, R, "R")
    t = _v.check_t(f, T, "T")
    out = _fresh(f, [("x", xs)] + list(zip(states, sts)))
    _call(f, f"fastopt.onnx_{name}", fn, out[0], gs, *out[1:], lr=lr, t=t,
          **(extra or {}), **_reals(f, **reals))
    return tuple(a for arrays in out for a in arrays)


def momentum(R, T, *inputs, alpha, beta, mode, norm_coefficient):
    """ONNX Momentum (``ai.onnx.preview.training``, version 1), out of place.

    Parameters
    ----------
    R : float or one-element float array
        The learning rate (a 0-d tensor in ONNX).
    T : int or one-element int array
        The update count: 0 on the first update (beta is ignored then).
    *inputs : ndarray
        ``X_1..X_n, G_1..G_n, V_1..V_n``: parameters, gradients and momentum
        buffers. Each X may be float32 or float64 (mixed within a call); its
        G and V share its dtype; each G broadcasts to its X's shape.
    alpha, beta, norm_coefficient : float
        As in :func:`fastopt.onnx_momentum`. Required, as in the ONNX schema.
    mode : {"standard", "nesterov"}
        Required, as in the ONNX schema.

    Returns
    -------
    tuple of ndarray
        ``X_1_new..X_n_new, V_1_new..V_n_new``, each of its input's dtype
        and shape. The inputs are not modified.

    Raises
    ------
    TypeError, ValueError
        On bad input, e.g. a tensor count that is not a non-zero multiple
        of 3. Tensors are named by role and index (``x[1]`` is X_2).

    Examples
    --------
    >>> import numpy as np
    >>> from fastopt import onnx as fo_onnx
    >>> x = np.ones(2); g = np.full(2, 0.5); v = np.zeros(2)
    >>> fo_onnx.momentum(0.1, 0, x, g, v, alpha=0.9, beta=1.0,
    ...                  mode="standard", norm_coefficient=0.0)
    (array([0.95, 0.95]), array([0.5, 0.5]))
    """
    return _update("momentum", _ops.onnx_momentum, R, T, inputs, "v", {"mode": mode},
                   alpha=alpha, beta=beta, norm_coefficient=norm_coefficient)


def adagrad(R, T, *inputs, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0):
    """ONNX Adagrad (``ai.onnx.preview.training``, version 1), out of place.

    Parameters
    ----------
    R : float or one-element float array
        The learning rate.
    T : int or one-element int array
        The update count (0 on the first update); the rate is
        ``R / (1 + T * decay_factor)``.
    *inputs : ndarray
        ``X_1..X_n, G_1..G_n, H_1..H_n`` (H: accumulated squared gradients).
        Dtypes and broadcasting as in :func:`momentum`.
    decay_factor, epsilon, norm_coefficient : float
        As in :func:`fastopt.onnx_adagrad`; the defaults are the ONNX schema's.

    Returns
    -------
    tuple of ndarray
        ``X_1_new..X_n_new, H_1_new..H_n_new``. The inputs are not modified.

    Raises
    ------
    TypeError, ValueError
        On bad input, e.g. a tensor count that is not a non-zero multiple
        of 3.
    """
    return _update("adagrad", _ops.onnx_adagrad, R, T, inputs, "h",
                   decay_factor=decay_factor, epsilon=epsilon,
                   norm_coefficient=norm_coefficient)


def adam(R, T, *inputs, alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.0,
         norm_coefficient_post=0.0):
    """ONNX Adam (``ai.onnx.preview.training``, version 1), out of place.

    Parameters
    ----------
    R : float or one-element float array
        The learning rate.
    T : int or one-element int array
        The update count: T = 1 for a standard bias-corrected first update,
        T = 0 switches the bias correction off.
    *inputs : ndarray
        ``X_1..X_n, G_1..G_n, V_1..V_n, H_1..H_n`` (V, H: first and second
        moment estimates). Dtypes and broadcasting as in :func:`momentum`.
    alpha, beta, epsilon, norm_coefficient, norm_coefficient_post : float
        As in :func:`fastopt.onnx_adam`; the defaults are the ONNX schema's.

    Returns
    -------
    tuple of ndarray
        ``X_1_new..X_n_new, V_1_new..V_n_new, H_1_new..H_n_new``, each of its
        input's dtype (the ONNX reference casts multi-tensor outputs to
        float32; fastopt does not). The inputs are not modified.

    Raises
    ------
    TypeError, ValueError
        On bad input, e.g. a tensor count that is not a non-zero multiple
        of 4.
    """
    return _update("adam", _ops.onnx_adam, R, T, inputs, "vh", alpha=alpha, beta=beta,
                   epsilon=epsilon, norm_coefficient=norm_coefficient,
                   norm_coefficient_post=norm_coefficient_post)


@functools.lru_cache(maxsize=None)
def _op_classes() -> tuple:
    try:
        from onnx.reference.op_run import OpRun
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "fastopt.onnx.reference_ops() needs the onnx package with its "
            f"reference evaluator (onnx>=1.13): {exc}") from exc

    # ReferenceEvaluator looks a new op up by (op_domain, class name), so the
    # class names must be the ONNX operator names. The attribute defaults
    # come from the registered ONNX schema of the same name.
    class Momentum(OpRun):
        op_domain = DOMAIN

        def _run(self, R, T, *inputs, alpha=None, beta=None, mode=None,
                 norm_coefficient=None):
            return momentum(R, T, *inputs, alpha=alpha, beta=beta, mode=mode,
                            norm_coefficient=norm_coefficient)

    class Adagrad(OpRun):
        op_domain = DOMAIN

        def _run(self, R, T, *inputs, decay_factor=0.0, epsilon=1e-6,
                 norm_coefficient=0.0):
            return adagrad(R, T, *inputs, decay_factor=decay_factor,
                           epsilon=epsilon, norm_coefficient=norm_coefficient)

    class Adam(OpRun):
        op_domain = DOMAIN

        def _run(self, R, T, *inputs, alpha=0.9, beta=0.999, epsilon=1e-6,
                 norm_coefficient=0.0, norm_coefficient_post=0.0):
            return adam(R, T, *inputs, alpha=alpha, beta=beta, epsilon=epsilon,
                        norm_coefficient=norm_coefficient,
                        norm_coefficient_post=norm_coefficient_post)

    for cls in (Momentum, Adagrad, Adam):
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
        cls.__doc__ = (f"ONNX {cls.__name__} ({DOMAIN}) for onnx.reference, "
                       f"run by fastopt.onnx.{cls.__name__.lower()}.")
    return (Momentum, Adagrad, Adam)


def reference_ops() -> list:
    """OpRun classes running ONNX Momentum, Adagrad and Adam with fastopt.

    Pass them to ``onnx.reference.ReferenceEvaluator(model,
    new_ops=fastopt.onnx.reference_ops())``: every node of type Momentum,
    Adagrad or Adam in domain ``ai.onnx.preview.training`` then runs
    :func:`momentum`, :func:`adagrad` or :func:`adam` (one multi-tensor
    fastopt call per node) instead of the reference's per-tensor NumPy code.
    Needs the ``onnx`` package. Returns a new list of the same three
    classes on every call.

    Examples
    --------
    >>> from onnx.reference import ReferenceEvaluator      # doctest: +SKIP
    >>> import fastopt.onnx
    >>> sess = ReferenceEvaluator(model, new_ops=fastopt.onnx.reference_ops())  # doctest: +SKIP
    """
    return list(_op_classes())
