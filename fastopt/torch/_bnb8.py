"""bitsandbytes' 8-bit optimizers' names and arguments, on fastopt's step.

``bnb.optim.AdamW8bit(...)`` -> ``fastopt.torch.AdamW8bit(...)`` with the same
arguments and defaults, and so for ``Adam8bit``, ``SGD8bit``, ``Adagrad8bit``,
``RMSprop8bit`` and ``Lion8bit``: fastopt.torch's drop-in of the rule with
``state_dtype="int8-blockwise"``, 8-bit states for parameters of
``min_8bit_size`` elements or more, in bitsandbytes' format and state-dict
layout (``load_state_dict`` takes bitsandbytes' state dicts,
:func:`to_bitsandbytes` gives one it loads). The update is torch's;
``Adam8bit`` and ``AdamW8bit`` take ``decay_mode="bnb"`` for the weight
decay where bitsandbytes' CUDA kernels apply it (docs/semantics.md, "8-bit
states", says where its kernels place the decay and round otherwise).
"""
from __future__ import annotations

from .. import _step
from ._q8 import to_bitsandbytes

__all__ = ["NAMES", "classes", "to_bitsandbytes"]


def _bnb_args(f, optim_bits, args, min_8bit_size, is_paged=False, amsgrad=False) -> int:
    """bitsandbytes' own arguments of its 8-bit classes, checked; returns
    min_8bit_size."""
    if amsgrad:
        raise ValueError(f"{f}: amsgrad=True has no 8-bit form (bitsandbytes refuses it too)")
    if optim_bits not in (8, 32) or isinstance(optim_bits, bool):
        raise ValueError(f"{f}: optim_bits must be 8 or 32 (the states are 8-bit either "
                         f"way), got {optim_bits!r}")
    if args is not None:
        raise ValueError(f"{f}: args (bitsandbytes' config object) is not supported; pass "
                         f"the arguments themselves")
    if isinstance(min_8bit_size, bool) or not isinstance(min_8bit_size, int) \
            or min_8bit_size < 0:
        raise ValueError(f"{f}: min_8bit_size must be an int >= 0, got {min_8bit_size!r}")
    if is_paged is not False:
        raise ValueError(f"{f}: is_paged=True (paged CUDA memory) is not supported on CPU; "
                         f"leave it False")
    return min_8bit_size


def classes(base: dict) -> dict:
    """{name: class} of the drop-ins named as bitsandbytes' (NAMES); base
    maps the name of each fastopt.torch class they extend to it."""
    return {name: _eight_bit(base[name[:-4]], name, init, doc)
            for name, (init, doc) in _INITS.items()}


def _eight_bit(base, name, init, doc):
    """base with bitsandbytes' constructor init (and, for Adam's, the
    decay_mode hyperparameter)."""
    init.__qualname__ = f"{name}.__init__"
    more = {}
    if name.startswith("Adam"):
        more = {"_SPEC": {**base._SPEC, "decay_mode": "decay_mode"}, "_group": _group}
    return type(name, (base,), {"__init__": init, "__doc__": doc, "_BASE": base,
                                "__module__": "fastopt.torch", **more})


def _group(self, h):
    """Adam's C group, with bitsandbytes' decay order where decay_mode is
    "bnb" (decoupled, after the update, for its Adam and AdamW alike)."""
    fields, names = self._BASE._group(self, h)
    return dict(fields, flags=fields["flags"] | _step.DECAY_MODES[h["decay_mode"]]), names


def _f(self) -> str:
    return f"fastopt.torch.{type(self).__name__}"


def _build(self, size, *a, **k):
    """The base's constructor with 8-bit states; min_8bit_size size."""
    self._BASE.__init__(self, *a, state_dtype="int8-blockwise", **k)
    self._mixed = self._mixed._replace(min_8bit_size=size)


# bitsandbytes' constructors: its names, order and defaults. Each checks its
# own arguments and builds the base with 8-bit states.

def _adam(wd):
    def init(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd,
             amsgrad=False, optim_bits=32, args=None, min_8bit_size=4096, is_paged=False,
             *, n_threads=None, decay_mode="torch"):
        size = _bnb_args(_f(self), optim_bits, args, min_8bit_size, is_paged, amsgrad)
        self._more_defaults = {"decay_mode": decay_mode}
        _build(self, size, params, lr, betas, eps, weight_decay, n_threads=n_threads)
    return init


def _sgd(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False,
         args=None, min_8bit_size=4096, *, n_threads=None):
    size = _bnb_args(_f(self), 32, args, min_8bit_size)
    _build(self, size, params, lr, momentum, dampening, weight_decay, nesterov,
           n_threads=n_threads)


def _adagrad(self, params, lr=1e-2, lr_decay=0, weight_decay=0,
             initial_accumulator_value=0, eps=1e-10, optim_bits=8, args=None,
             min_8bit_size=4096, *, n_threads=None):
    size = _bnb_args(_f(self), optim_bits, args, min_8bit_size)
    _build(self, size, params, lr, lr_decay, weight_decay, initial_accumulator_value, eps,
           n_threads=n_threads)


def _rmsprop(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
             centered=False, args=None, min_8bit_size=4096, *, n_threads=None):
    size = _bnb_args(_f(self), 32, args, min_8bit_size)
    _build(self, size, params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
           momentum=momentum, centered=centered, n_threads=n_threads)


def _lion(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0, args=None,
          min_8bit_size=4096, is_paged=False, *, n_threads=None):
    size = _bnb_args(_f(self), 32, args, min_8bit_size, is_paged)
    _build(self, size, params, lr=lr, betas=betas, weight_decay=weight_decay,
           n_threads=n_threads)


_ADAM8_DOC = """``bitsandbytes.optim.Adam8bit`` on fastopt's step: :class:`Adam`
    (torch's L2 weight decay) with 8-bit blockwise states.

    Parameters
    ----------
    params, lr, betas, eps, weight_decay
        As bitsandbytes' (and torch's); defaults 1e-3, (0.9, 0.999), 1e-8, 0.
    amsgrad : False
        True raises ValueError (no 8-bit form), as in bitsandbytes.
    optim_bits : 32, args : None, is_paged : False
        bitsandbytes' arguments, taken at these values (8-bit states either
        way; ``optim_bits=8`` too).
    min_8bit_size : int, default 4096
        Parameters with fewer elements keep float32 states.
    n_threads : int, optional
    decay_mode : {"torch", "bnb"}, default "torch"
        Per group: "torch" is torch's Adam (above); "bnb" is bitsandbytes'
        CUDA kernels' rule for its Adam and AdamW alike, the weight decay
        decoupled and applied after the update (``x = (x + update) * (1 -
        lr * weight_decay)``; its CPU path applies it before, as torch's
        AdamW). As :func:`fastopt.adamw`.
    """


def _doc(what, args, more=""):
    return (f"``bitsandbytes.optim.{what[0]}`` on fastopt's step: :class:`{what[1]}` "
            f"with 8-bit blockwise states.\n\n    Parameters\n    ----------\n"
            f"    {args}\n        As bitsandbytes' (and torch's), with their defaults."
            f"{more}\n    args : None\n        bitsandbytes' config object; not supported."
            f"\n    min_8bit_size : int, default 4096\n        Parameters with fewer "
            f"elements keep float32 states.\n    n_threads : int, optional\n    ")


_INITS = {
    "Adam8bit": (_adam(0), _ADAM8_DOC),
    "AdamW8bit": (_adam(1e-2), "``bitsandbytes.optim.AdamW8bit`` on fastopt's step: "
                  ":class:`AdamW` (torch's decoupled decay, before the update; after it "
                  "with ``decay_mode=\"bnb\"``) with 8-bit blockwise states. Arguments as "
                  ":class:`Adam8bit`; weight_decay default 1e-2."),
    "SGD8bit": (_sgd, _doc(
        ("SGD8bit", "SGD"), "params, lr, momentum, dampening, weight_decay, nesterov",
        "\n        dampening and nesterov act as in torch (bitsandbytes' kernel ignores "
        "them);\n        momentum=0 is plain SGD with no state (bitsandbytes refuses it).")),
    "Adagrad8bit": (_adagrad, _doc(
        ("Adagrad8bit", "Adagrad"),
        "params, lr, lr_decay, weight_decay, initial_accumulator_value, eps",
        "\n        lr_decay and initial_accumulator_value act as in torch (bitsandbytes\n"
        "        refuses any but 0).\n    optim_bits : 8\n        Taken at 8 or 32 "
        "(8-bit states either way).")),
    "RMSprop8bit": (_rmsprop, _doc(
        ("RMSprop8bit", "RMSprop"), "params, lr, alpha, eps, weight_decay, momentum, centered",
        "\n        momentum other than 0 and centered=True raise ValueError: their\n"
        "        states have no 8-bit form (bitsandbytes refuses centered and\n"
        "        ignores momentum).")),
    "Lion8bit": (_lion, _doc(
        ("Lion8bit", "Lion"), "params, lr, betas, weight_decay",
        "\n    is_paged : False\n        True (paged CUDA memory) raises ValueError.")),
}

#: the classes named as bitsandbytes' (fastopt.torch exports them)
NAMES = tuple(_INITS)
