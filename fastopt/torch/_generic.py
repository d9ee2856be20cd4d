"""The fastopt.torch drop-in of every rule of fastopt._rules.TORCH_RULES,
built from its table row: torch's constructor (names, defaults, order,
keyword-only marks), state names and step count."""
from __future__ import annotations

import numpy as np
import torch

from .. import _rules, _step
from .. import _validation as _v
from ._base import _FastoptOptimizer, _step_tensor, _zeros


class _RuleDropin(_FastoptOptimizer):
    """The shared body of the table's drop-ins (_RULE: the row)."""

    _RULE: _rules.TorchRule

    def _group(self, h):
        return self._RULE.fields(h), self._RULE.slots(h)

    def _new_states(self, p, st, names, h):
        # a parameter with state gets only the states an option asks for
        # (needs: RMSprop's buffer and average); one that every step keeps
        # is missing (a truncated checkpoint): the state check says so
        fresh = {n: _zeros(p) for n in names if n not in st
                 and (not st or n in self._RULE.needs)}
        if st:
            return fresh
        carry = self._RULE.carry
        first = {"step": _step_tensor()}
        if carry is not None:
            first[carry.name] = _step_tensor(carry.start)
        return {**first, **fresh}

    def load_state_dict(self, state_dict) -> None:
        """torch's load_state_dict; a carried scalar (NAdam's mu_product) that
        torch's own load cast to a 16-bit model's dtype is taken in float32,
        the step's type for it."""
        super().load_state_dict(state_dict)
        carry = self._RULE.carry
        for st in self.state.values() if carry is not None else ():
            v = st.get(carry.name)
            if isinstance(v, torch.Tensor) and v.dtype in (torch.bfloat16, torch.float16):
                st[carry.name] = v.to(torch.float32)

    def _carried(self, f, where, full):
        carry = self._RULE.carry
        return None if carry is None else _carried(f, where, full, carry.name)

    def _group_at(self, fields, h, t, held):
        if held is None:
            return _step.group_tuple(t=t, **fields), None
        extra, after = self._RULE.carry.advance(h, t, held)
        return _step.group_tuple(t=t, extra=extra, **fields), after


#: the mixed-precision options every drop-in takes after flat (_mixed.check)
_MIXED_ARGS = ("master_weights", "state_dtype", "state_rounding", "seed")


def _carried(f, where, st, name):
    """A carried scalar of the state st (NAdam's mu_product): a one-element
    float32 or float64 CPU tensor, finite and in [0, 1]; returns (the tensor,
    its value as a NumPy scalar of its type) or raises."""
    lab = f"state[{name!r}] of {where}"
    v = st.get(name)
    if v is None:
        raise ValueError(f"{f}: {lab} is missing")
    if not isinstance(v, torch.Tensor) or v.numel() != 1 or v.dtype not in (
            torch.float32, torch.float64) or v.device.type != "cpu":
        raise TypeError(f"{f}: {lab} must be a one-element float32 or float64 CPU tensor, "
                        f"got {v!r}")
    value = v.item()
    _v.check_real(f, lab, value, low=0.0, high=1.0)
    return v, (np.float32 if v.dtype == torch.float32 else np.float64)(value)


def _init(self, params, a):
    _FastoptOptimizer.__init__(self, params, {k: a[k] for k in
                                              (arg.name for arg in self._RULE.args)},
                               a["n_threads"], a["flat"],
                               tuple(a[k] for k in _MIXED_ARGS))


def _doc(rule) -> str:
    # a rule torch.optim has not (Lion, AdEMAMix) is named by its summary alone
    head = f"torch.optim.{rule.cls}: " if hasattr(torch.optim, rule.cls) else ""
    lines = [f"{head}{rule.summary}; the update of",
             f":func:`fastopt.{rule.name}`.", "", "Parameters", "----------",
             "params : iterable of Tensor or dict"]
    for arg in rule.args:
        if arg.check is not None:
            lines += [f"{arg.name} : {_rules.doc_type(arg)}, default {arg.default!r}"]
    unsupported = [a.name for a in rule.args if a.check is None]
    lines += [", ".join(unsupported), "    torch's; only their defaults are supported.",
              "n_threads : int, optional",
              "flat : bool, default False",
              "    Parameters, gradients and states in fastopt's flat buffers: a step",
              "    is one C call after a short check (see the module, \"The flat",
              "    layout\").",
              "master_weights, state_dtype, state_rounding, seed",
              "    Mixed precision: bfloat16/float16 parameters through float32",
              ("    masters (else updated in their own type), bfloat16 states (see"
               if _rules.RULES[_rules.ID[rule.row]].own16 else
               "    masters, bfloat16 states (see"),
              "    the module, \"Mixed precision\").",
              "", "Notes", "-----",
              f"State, as torch's: ``'step'`` (a float scalar tensor) and "
              f"{', '.join(f'``{s!r}``' for s in rule.states)} as the group's",
              "hyperparameters ask for them, created from zeros on a parameter's",
              "first update (and when a hyperparameter asks for one later)."]
    if rule.per_tensor:
        lines += ["Each tensor's update is scaled by its own trust ratio, so with",
                  "``flat=True`` its steps take the prepared route over the parameters",
                  "(one C call, never over the joined buffers)."]
    if rule.carry is not None:
        c = rule.carry.name
        lines += [f"``{c!r}`` too ({rule.carry.doc}): a scalar tensor of torch's",
                  "default float type, multiplied in its own dtype (with ``flat=True``",
                  "a view of a buffer beside the step counts)."]
    return "\n    ".join(lines)


def make_class(rule: _rules.TorchRule) -> type:
    """fastopt.torch.<rule.cls>."""
    params = ["self", "params", *_rules.torch_params(rule, "D")]
    params += ["n_threads=None", "flat=False"] if "*" in params else [
        "*", "n_threads=None", "flat=False"]
    params += ["master_weights=False", "state_dtype=None", "state_rounding='auto'", "seed=0"]
    init = _rules.define("__init__", params, "init(self, params, locals())",
                         {"D": {a.name: a.default for a in rule.args}, "init": _init},
                         "fastopt.torch")
    cls = type(rule.cls, (_RuleDropin,), {
        "__init__": init, "__doc__": _doc(rule), "__module__": "fastopt.torch",
        "_RULE": rule, "_ROW": rule.row, "_SPEC": _rules.spec(rule),
        "_FLAT_CALL": not rule.per_tensor})
    init.__qualname__ = f"{rule.cls}.__init__"
    return cls


#: class name -> class, for every rule of the table
CLASSES = {r.cls: make_class(r) for r in _rules.TORCH_RULES}
