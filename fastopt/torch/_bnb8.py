"""bitsandbytes' 8-bit optimizers' names and arguments, on fastopt's step.

``bnb.optim.AdamW8bit(...)`` -> ``fastopt.torch.AdamW8bit(...)`` with the same
arguments and defaults: :class:`fastopt.torch.AdamW` (and Adam) with
``state_dtype="int8-blockwise"``, 8-bit states for parameters of
``min_8bit_size`` elements or more, in bitsandbytes' format and state-dict
layout (``load_state_dict`` takes bitsandbytes' state dicts,
:func:`to_bitsandbytes` gives one it loads). The update is torch's
(docs/semantics.md, "8-bit states", says where bitsandbytes' own kernels
place the weight decay and round otherwise).
"""
from __future__ import annotations

from ._q8 import to_bitsandbytes

__all__ = ["classes", "to_bitsandbytes"]


def _bnb_args(f, amsgrad, optim_bits, args, min_8bit_size, is_paged) -> int:
    """bitsandbytes' own arguments of its 8-bit Adam classes, checked;
    returns min_8bit_size."""
    if amsgrad:
        raise ValueError(f"{f}: amsgrad=True has no 8-bit form (bitsandbytes refuses it too)")
    if optim_bits not in (8, 32) or isinstance(optim_bits, bool):
        raise ValueError(f"{f}: optim_bits must be 32 (the default; the states are 8-bit "
                         f"either way) or 8, got {optim_bits!r}")
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


def classes(Adam, AdamW) -> dict:
    """{name: class} of the drop-ins named as bitsandbytes' (fastopt.torch
    passes its Adam and AdamW, which they extend)."""
    out = {}
    for base, name, wd, doc in (
            (Adam, "Adam8bit", 0, _ADAM8_DOC),
            (AdamW, "AdamW8bit", 1e-2, "``bitsandbytes.optim.AdamW8bit`` on fastopt's step: "
             ":class:`AdamW` (torch's decoupled decay, before the update) with 8-bit "
             "blockwise states. Arguments as :class:`Adam8bit`; weight_decay default 1e-2.")):
        out[name] = _eight_bit(base, name, wd, doc)
    return out


def _eight_bit(base, name, wd, doc):
    """base (Adam or AdamW) with bitsandbytes' constructor: its arguments,
    weight_decay default wd, 8-bit states."""
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd,
                 amsgrad=False, optim_bits=32, args=None, min_8bit_size=4096,
                 is_paged=False, *, n_threads=None):
        f = f"fastopt.torch.{type(self).__name__}"
        size = _bnb_args(f, amsgrad, optim_bits, args, min_8bit_size, is_paged)
        base.__init__(self, params, lr, betas, eps, weight_decay, n_threads=n_threads,
                      state_dtype="int8-blockwise")
        self._mixed = self._mixed._replace(min_8bit_size=size)
    cls = type(name, (base,), {"__init__": __init__, "__doc__": doc,
                               "__module__": "fastopt.torch"})
    cls.__init__.__qualname__ = f"{name}.__init__"
    return cls


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
    """
