"""fastopt: in-place optimizer updates on NumPy arrays at memory speed.

One naming scheme holds in every module (docs/mappings.md): a function or
class named after a torch optimizer computes torch's update with torch's
argument names and defaults; the ONNX forms say ONNX in their names.

The whole training step in one C call, as torch.optim computes it:
:func:`sgd`, :func:`adagrad`, :func:`adam`, :func:`adamw` and
:func:`rmsprop`, with loss-scale unscaling, a non-finite check and clipping
by the global norm fused in (``grad_scale=``, ``skip_if_nonfinite=``,
``max_grad_norm=``); :func:`global_norm` and :func:`clip_grads` on their own.

The three update rules of the ONNX ``ai.onnx.preview.training`` domain,
exactly as specified (their names, their T convention), over one tensor or
many tensors in one C call: :func:`onnx_momentum` (standard and Nesterov),
:func:`onnx_adagrad`, :func:`onnx_adam`; plus adaptive gradient clipping
(NFNet): :func:`agc`, :func:`unitwise_norm`, and fused AGC-SGD through
``onnx_momentum(..., clipping=...)``.

Thread control: :func:`set_num_threads`, :func:`get_num_threads`;
build facts: :func:`show_config`. The submodules ``optim``, ``schedules``,
``onnx`` and ``torch`` load on first use.
"""


def _no_extension(exc):
    """The ImportError for a missing or broken compiled extension, saying
    what to do (a source checkout has no built extension of its own)."""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    what = (f"fastopt's compiled extension fastopt._ext could not be imported "
            f"({exc}). ")
    if os.path.exists(os.path.join(root, "setup.py")) and os.path.isdir(
            os.path.join(root, "src_c")):
        return ImportError(
            what + f"This fastopt is the source checkout at {root}, which has no "
            f"built extension: Python found it first because it runs from that "
            f"directory (as `python -m fastopt` does there). Either run the "
            f"installed `fastopt` command (fastopt demo, fastopt bench, ...) or "
            f"run Python from another directory, to use the installed package; or "
            f"build the checkout in place: `python setup.py build_ext --inplace` "
            f"(needs a C compiler, Cython>=3 and numpy>=2).")
    return ImportError(
        what + "Reinstall it: `python -m pip install --force-reinstall fastopt`, "
        "or `python -m pip install .` from a source checkout (needs a C compiler, "
        "Cython>=3 and numpy>=2 at build time).")


try:
    from . import _ext  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on the install
    raise _no_extension(_exc) from _exc

from ._buildinfo import __version__, config, show_config  # noqa: E402
from ._ops import agc, onnx_adagrad, onnx_adam, onnx_momentum, unitwise_norm  # noqa: E402
from ._q8 import State8bit  # noqa: E402
from ._step import StepInfo  # noqa: E402
from ._threads import get_num_threads, set_num_threads  # noqa: E402
from ._torchform import RULE_FUNCTIONS as _RULE_FUNCTIONS  # noqa: E402
from ._torchform import (  # noqa: E402
    adagrad,
    adam,
    adamw,
    clip_grads,
    global_norm,
    sgd,
)
from .capi import get_include  # noqa: E402

# the rules of the table (fastopt._rules.TORCH_RULES): rmsprop, ...
globals().update(_RULE_FUNCTIONS)

# Loaded on first attribute access (PEP 562): `import fastopt` stays cheap.
_LAZY = ("onnx", "optim", "schedules", "torch")


# Old names, kept for one release: each warns and returns its new name's object.
_DEPRECATED = {
    "momentum": ("onnx_momentum", "the ONNX Momentum update; torch.optim.SGD's is "
                 "fastopt.sgd"),
    "sgd_torch": ("sgd", "fastopt.sgd takes the same arguments"),
    "adagrad_torch": ("adagrad", "fastopt.adagrad takes the same arguments"),
    "adam_torch": ("adam", "fastopt.adam takes the same arguments"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    if name in _DEPRECATED:
        from ._deprecated import resolve

        return resolve(__name__, globals(), _DEPRECATED, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "sgd", "adagrad", "adam", "adamw", *_RULE_FUNCTIONS, "global_norm", "clip_grads",
    "onnx_momentum", "onnx_adagrad", "onnx_adam", "agc", "unitwise_norm",
    "onnx", "optim", "schedules",
    "StepInfo", "State8bit",
    "set_num_threads", "get_num_threads", "show_config", "config",
    "get_include", "__version__",
]
