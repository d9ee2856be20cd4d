"""fastopt's Momentum, Adagrad and Adam as ``torch.optim.Optimizer`` subclasses.

For CPU float32/float64 parameters: each step passes NumPy views of the
parameters, their gradients and the state tensors (``Tensor.numpy()`` shares
memory, so nothing is copied) to one fastopt C call per parameter group,
which updates them in place. A torch CPU training loop switches with one
line::

    import fastopt.torch
    # opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    opt = fastopt.torch.Momentum(model.parameters(), lr=0.1, alpha=0.9, norm_coefficient=1e-4)

Everything else is torch's Optimizer: ``zero_grad``, parameter groups,
``add_param_group``, ``state_dict``/``load_state_dict`` and the
``torch.optim.lr_scheduler`` schedulers (they edit ``group["lr"]``).

The hyperparameters are fastopt's (ONNX) names; the torch equivalents
(SEMANTICS.md section 2):

============================  =========================================
torch.optim                   fastopt.torch
============================  =========================================
SGD momentum / dampening      Momentum alpha / beta = 1 - dampening
SGD weight_decay / nesterov   Momentum norm_coefficient / nesterov
Adagrad lr_decay / eps        Adagrad decay_factor / epsilon
Adagrad weight_decay          Adagrad norm_coefficient
Adam betas / weight_decay     Adam (alpha, beta) / norm_coefficient
============================  =========================================

Momentum and Adagrad then give torch's results (up to rounding). Adam
differs from torch.optim.Adam unless ``epsilon=0``: ONNX adds epsilon before
the bias correction (ONNX eps = torch eps * sqrt(1 - beta**t)), and
``norm_coefficient_post`` decays after the step, unlike AdamW's decoupled
decay before it.

The update count T is kept per parameter (``state["step"]``, the number of
updates applied to it), as torch does: a parameter without a gradient in a
step is skipped and keeps its count. T is ``step`` for Momentum and Adagrad
and ``step + 1`` for Adam; parameters of a group that share T (normally all
of them) are updated by one C call.

This module imports torch; ``import fastopt`` alone never does.
"""
from __future__ import annotations

if __name__ == "torch":  # pragma: no cover - run with fastopt/ itself on sys.path
    raise ImportError(
        "fastopt/torch.py was imported as the top-level module 'torch', because the "
        "fastopt package directory is on sys.path (e.g. a script run from inside "
        "it). Run from elsewhere, or with `python -m`.")

try:
    import torch  # the real PyTorch: imports are absolute
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("fastopt.torch needs PyTorch (CPU build is enough), which is not "
                      "installed") from exc

from . import _ops
from . import _validation as _v

__all__ = ["Momentum", "Adagrad", "Adam"]

_DTYPES = (torch.float32, torch.float64)


class _FastoptOptimizer(torch.optim.Optimizer):
    _KERNEL = None
    _STATES: tuple = ()
    _T0 = 0

    def __init__(self, params, defaults, n_threads):
        name = f"fastopt.torch.{type(self).__name__}"
        self.n_threads = _v.check_n_threads(name, n_threads)
        super().__init__(params, defaults)

    # name -> "lr", "bool" or check_real bounds; the kernel's keyword arguments
    _SPEC: dict = {}
    _NOT_KERNEL: tuple = ()

    def _initial(self, hyper) -> float:
        return 0.0

    def _checked(self, f, group, gi) -> dict:
        """The group's hyperparameters, checked (they may have been edited)."""
        try:
            return _hyper(f, **{k: (group[k], kind) for k, kind in self._SPEC.items()})
        except (TypeError, ValueError) as exc:
            if gi is None:
                raise
            raise type(exc)(f"{exc} (in param_groups[{gi}])") from None

    def _check_param(self, f, gi, i, p):
        where = f"param_groups[{gi}]['params'][{i}]"
        if p.device.type != "cpu":
            raise ValueError(f"{f}: {where} is on {p.device}; fastopt updates CPU tensors")
        if p.dtype not in _DTYPES:
            raise TypeError(f"{f}: {where} has dtype {p.dtype}; fastopt updates float32 or "
                            f"float64 tensors")
        g = p.grad
        if g.is_sparse or g.layout != torch.strided:
            raise TypeError(f"{f}: {where} has a sparse gradient; fastopt needs dense ones")
        if g.dtype != p.dtype:
            raise TypeError(f"{f}: the gradient of {where} has dtype {g.dtype} but the "
                            f"parameter has {p.dtype}")
        if g.shape != p.shape:
            raise ValueError(f"{f}: the gradient of {where} has shape {tuple(g.shape)} but "
                             f"the parameter has {tuple(p.shape)}")
        if g.device != p.device:
            raise ValueError(f"{f}: the gradient of {where} is on {g.device}")

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient.

        Parameters
        ----------
        closure : callable, optional
            Re-evaluates the model and returns the loss (run with grad
            enabled before the update), as in torch.optim.

        Returns
        -------
        The closure's loss, or None.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        f = f"fastopt.torch.{type(self).__name__}.step"
        calls = []
        # check every parameter first: a bad one anywhere leaves all untouched
        for gi, group in enumerate(self.param_groups):
            hyper = self._checked(f, group, gi)
            buckets: dict = {}
            for i, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                self._check_param(f, gi, i, p)
                st = self.state[p]
                t = st.get("step", 0) + self._T0
                b = buckets.setdefault(t, [[], [], [[] for _ in self._STATES], []])
                b[0].append(p)
                b[1].append(p.grad)
                b[3].append(st)
            calls.append((hyper, buckets))
        kernel = type(self)._KERNEL
        for hyper, buckets in calls:
            kw = {k: v for k, v in hyper.items() if k not in self._NOT_KERNEL}
            if "nesterov" in kw:
                kw["mode"] = "nesterov" if kw.pop("nesterov") else "standard"
            for t, (ps, gs, _, sts) in buckets.items():
                for p, st in zip(ps, sts):
                    if "step" not in st:  # lazy state, as torch.optim does
                        st["step"] = 0
                        fill = self._initial(hyper)
                        for name in self._STATES:
                            s = torch.zeros_like(p, memory_format=torch.preserve_format)
                            if fill:
                                s.fill_(fill)
                            st[name] = s
                xs = [p.detach().numpy() for p in ps]
                gs_np = [g.detach().resolve_neg().numpy() for g in gs]
                states = [[st[name].numpy() for st in sts] for name in self._STATES]
                kernel(xs, gs_np, *states, t=t, n_threads=self.n_threads, **kw)
                for st in sts:
                    st["step"] += 1
        return loss


def _hyper(fname, **checks):
    """Validate constructor hyperparameters with fastopt's checks."""
    out = {}
    for k, (v, kind) in checks.items():
        if kind == "lr":
            out[k] = _v.check_lr(fname, v, name=k)
        elif kind == "bool":
            # merge-note: one check_bool in _validation for this and
            # fastopt.optim._checks.as_bool (which also takes numpy.bool_)
            if not isinstance(v, bool):
                raise TypeError(f"{fname}: {k} must be True or False, got {type(v).__name__}")
            out[k] = v
        else:
            out[k] = _v.check_real(fname, k, v, **kind)
    return out


class Momentum(_FastoptOptimizer):
    """ONNX Momentum (torch.optim.SGD with momentum) on CPU tensors.

    Parameters
    ----------
    params : iterable of Tensor or dict
        Parameters or parameter groups, as for any torch optimizer.
    lr : float
    alpha : float, default 0.9
        torch ``momentum``.
    beta : float, default 1.0
        torch ``1 - dampening`` (ignored on a parameter's first update).
    norm_coefficient : float, default 0.0
        torch ``weight_decay``.
    nesterov : bool, default False
    n_threads : int, optional
        Threads for the kernels (None: fastopt's current default).
    """

    _KERNEL = staticmethod(_ops.momentum)
    _STATES = ("momentum_buffer",)
    _T0 = 0
    _SPEC = {"lr": "lr", "alpha": {}, "beta": {}, "norm_coefficient": {}, "nesterov": "bool"}

    def __init__(self, params, lr, alpha=0.9, beta=1.0, norm_coefficient=0.0,
                 nesterov=False, *, n_threads=None):
        d = dict(lr=lr, alpha=alpha, beta=beta, norm_coefficient=norm_coefficient,
                 nesterov=nesterov)
        super().__init__(params, self._checked("fastopt.torch.Momentum", d, None), n_threads)


class Adagrad(_FastoptOptimizer):
    """ONNX Adagrad (torch.optim.Adagrad) on CPU tensors.

    Parameters
    ----------
    params : iterable of Tensor or dict
    lr : float
    decay_factor : float, default 0.0
        torch ``lr_decay``.
    epsilon : float, default 1e-6
        torch ``eps`` (whose default is 1e-10).
    norm_coefficient : float, default 0.0
        torch ``weight_decay``.
    initial_accumulator_value : float, default 0.0
    n_threads : int, optional
    """

    _KERNEL = staticmethod(_ops.adagrad)
    _STATES = ("sum",)
    _T0 = 0
    _SPEC = {"lr": "lr", "decay_factor": {"low": 0.0}, "epsilon": {"low": 0.0},
             "norm_coefficient": {}, "initial_accumulator_value": {"low": 0.0}}
    _NOT_KERNEL = ("initial_accumulator_value",)

    def __init__(self, params, lr, decay_factor=0.0, epsilon=1e-6, norm_coefficient=0.0,
                 initial_accumulator_value=0.0, *, n_threads=None):
        d = dict(lr=lr, decay_factor=decay_factor, epsilon=epsilon,
                 norm_coefficient=norm_coefficient,
                 initial_accumulator_value=initial_accumulator_value)
        super().__init__(params, self._checked("fastopt.torch.Adagrad", d, None), n_threads)

    def _initial(self, hyper):
        return hyper["initial_accumulator_value"]


class Adam(_FastoptOptimizer):
    """ONNX Adam on CPU tensors (T = 1 on a parameter's first update).

    Equals torch.optim.Adam(betas=(alpha, beta), eps=0, weight_decay=
    norm_coefficient) when ``epsilon=0`` and ``norm_coefficient_post=0``; see
    the module docstring for why it differs otherwise.

    Parameters
    ----------
    params : iterable of Tensor or dict
    lr : float
    alpha, beta : float, default 0.9 and 0.999
    epsilon : float, default 1e-6
    norm_coefficient : float, default 0.0
    norm_coefficient_post : float, default 0.0
    n_threads : int, optional
    """

    _KERNEL = staticmethod(_ops.adam)
    _STATES = ("exp_avg", "exp_avg_sq")
    _T0 = 1
    _SPEC = {"lr": "lr", "alpha": {"low": 0.0, "high": 1.0, "high_open": True},
             "beta": {"low": 0.0, "high": 1.0}, "epsilon": {"low": 0.0},
             "norm_coefficient": {}, "norm_coefficient_post": {}}

    def __init__(self, params, lr, alpha=0.9, beta=0.999, epsilon=1e-6,
                 norm_coefficient=0.0, norm_coefficient_post=0.0, *, n_threads=None):
        d = dict(lr=lr, alpha=alpha, beta=beta, epsilon=epsilon,
                 norm_coefficient=norm_coefficient,
                 norm_coefficient_post=norm_coefficient_post)
        super().__init__(params, self._checked("fastopt.torch.Adam", d, None), n_threads)
