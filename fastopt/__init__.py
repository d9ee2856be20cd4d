"""fastopt: in-place optimizer updates on NumPy arrays at memory speed.

The three update rules of the ONNX ``ai.onnx.preview.training`` domain,
exactly as specified, over one tensor or many tensors in one C call:

- :func:`momentum` (standard and Nesterov)
- :func:`adagrad`
- :func:`adam`

plus adaptive gradient clipping (NFNet): :func:`agc`, :func:`unitwise_norm`,
and fused AGC-SGD through ``momentum(..., clipping=...)``.

Thread control: :func:`set_num_threads`, :func:`get_num_threads`;
build facts: :func:`show_config`.
"""
__version__ = "0.1.0"

try:
    from . import _ext  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "fastopt's compiled extension fastopt._ext could not be imported "
        f"({exc}). Build it with `pip install .` from the source checkout "
        "(or `python setup.py build_ext --inplace` for development); it needs "
        "a C compiler, Cython>=3 and numpy>=2 at build time."
    ) from exc

from ._buildinfo import config, show_config
from ._threads import get_num_threads, set_num_threads
from ._updates import adagrad, adam, momentum
from ._agc_api import agc, unitwise_norm
from . import onnx, optim, schedules  # noqa: E402  (none imports onnx/torch)

__all__ = [
    "momentum", "adagrad", "adam", "agc", "unitwise_norm", "onnx", "optim", "schedules",
    "set_num_threads", "get_num_threads", "show_config", "config",
    "__version__",
]
