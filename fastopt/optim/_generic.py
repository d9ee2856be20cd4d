"""The fastopt.optim class of every rule of fastopt._rules.TORCH_RULES,
built from its table row: torch's hyperparameter names and defaults, every
group fused into the one step."""
from __future__ import annotations

import numpy as np

from .. import _rules, _step
from .. import _validation as _v
from . import _checks as _c
from ._base import _Optimizer


def _unsupported(*args, **kwargs):   # every group of these optimizers is fused
    raise RuntimeError("fastopt.optim: internal error: a table rule's group was not fused")


class _RuleOptimizer(_Optimizer):
    """The shared body of the table's optimizers (_RULE: the row)."""

    _KERNEL = staticmethod(_unsupported)
    _T0 = 1
    _RULE: _rules.TorchRule

    def _check_extra(self, f, group, where):
        for name in self._slots(group):
            if name not in self._STATES:
                key = next((k for k in _rules.spec(self._RULE) if k in self._RULE.needs[name]),
                           name)
                label = key if where == "params" else f"{where}['{key}']"
                raise ValueError(f"{f}: {label} was turned on after the optimizer was "
                                 f"built (its state {name!r} was not allocated); pass it "
                                 f"when building the optimizer")

    def _slots(self, group) -> tuple:
        return self._RULE.slots(group)

    def _kwargs(self, group):
        carry = self._RULE.carry
        names = [*_rules.spec(self._RULE), *((carry.name,) if carry is not None else ())]
        return {k: group[k] for k in names if k != "lr"}

    def _carried(self, kw):
        """The C group's extra values and the carried scalar after this step
        (kept in float32, torch's scalar type under its default dtype)."""
        carry = self._RULE.carry
        return carry.advance(kw, kw["t"], np.float32(kw[carry.name]))

    def _group_tuple(self, kw):
        extra = {} if self._RULE.carry is None else {"extra": self._carried(kw)[0]}
        return _step.group_tuple(t=kw["t"], **self._RULE.fields(kw), **extra)

    def _step_fused(self, f, grads, per, groups, o, given, kws) -> bool:
        applied = _Optimizer._step_fused(self, f, grads, per, groups, o, given, kws)
        carry = self._RULE.carry
        if applied and carry is not None:      # the carried scalar of every group
            for group, kw in zip(self.param_groups, kws):
                group[carry.name] = float(self._carried(kw)[1])
        return applied


def _carried_check():
    """The checker of a carried scalar kept in a parameter group (a value
    in [0, 1], as every Carry's)."""
    def check(fname, label, value):
        return _v.check_real(fname, label, value, low=0.0, high=1.0)
    return check


def _states_of(rule, hyper, params) -> tuple:
    """Every state some group will use (allocated when the optimizer is
    built), in the row's order. Values are not checked yet: one that makes
    the slot rule fail counts as asking for every state (the checks that
    follow raise for it)."""
    groups = params if isinstance(params, (list, tuple)) else [params]
    dicts = [dict(hyper, **g) for g in groups if isinstance(g, dict)] or [hyper]
    used = set()
    for h in dicts + [hyper]:
        try:
            used.update(rule.slots(h))
        except Exception:  # noqa: BLE001 - an invalid value: the checks raise
            used.update(rule.states)
    return tuple(n for n in rule.states if n in used)


def _init(self, params, a):
    rule = self._RULE
    hyper = {k: a[k] for k in _rules.spec(rule)}
    if a["schedule"] is not None and hyper["lr"] == _rules.defaults(rule)["lr"]:
        hyper["lr"] = None              # the schedule supplies the rate
    if rule.carry is not None:
        hyper[rule.carry.name] = rule.carry.start
    self._STATES = _states_of(rule, hyper, params)
    _Optimizer.__init__(self, params, dict(hyper, schedule=a["schedule"]),
                        contiguous_state=a["contiguous_state"],
                        broadcast_grads=a["broadcast_grads"], n_threads=a["n_threads"],
                        master_weights=a["master_weights"], state_dtype=a["state_dtype"],
                        state_rounding=a["state_rounding"], seed=a["seed"])


def _doc(rule) -> str:
    lines = [f"{rule.summary}, one C call per step.", "",
             "Per parameter, with u the gradient (unscaled and clipped if asked,",
             "negated for maximize)::", ""]
    lines += ["    " + ln for ln in rule.formula.splitlines()]
    lines += ["", "Parameters", "----------", "params : list of ndarray, or list of dict",
              "    As in :class:`Momentum`: arrays updated in place, or parameter",
              "    groups with per-group hyperparameters."]
    for arg in rule.args:
        if arg.check is not None:
            lines += [f"{arg.name} : {_rules.doc_type(arg)}, default {arg.default!r}",
                      f"    {arg.doc}"]
    lines += ["schedule, contiguous_state, broadcast_grads, n_threads, master_weights,",
              "state_dtype, state_rounding, seed",
              "    As in :class:`Momentum`.", "", "Notes", "-----",
              f"States, as torch names them: {', '.join(repr(s) for s in rule.states)};",
              "the ones no group uses are not allocated, and a group may not turn one",
              "on after the optimizer is built. :meth:`step` takes the step options",
              "of :class:`AdamW`."]
    if rule.carry is not None:
        c = rule.carry.name
        lines += ["", f"Each parameter group keeps ``{c!r}`` ({rule.carry.doc}),",
                  "as a float32 value (torch's scalar type under its default dtype),",
                  "updated by every applied step and saved with the group in",
                  "checkpoints; torch keeps the same value in every parameter's state."]
    return "\n    ".join(lines)


def make_class(rule: _rules.TorchRule) -> type:
    """fastopt.optim.<rule.cls>."""
    params = ["self", "params"] + [f"{k}=D[{k!r}]" for k in _rules.defaults(rule)]
    params += ["schedule=None", "*", "contiguous_state=False", "broadcast_grads=False",
               "n_threads=None", "master_weights=False", "state_dtype=None",
               "state_rounding='auto'", "seed=0"]
    init = _rules.define("__init__", params, "init(self, params, locals())",
                         {"D": _rules.defaults(rule), "init": _init}, "fastopt.optim")
    hyper = _c.from_spec(_rules.spec(rule))
    if rule.carry is not None:
        hyper[rule.carry.name] = _carried_check()
    cls = type(rule.cls, (_RuleOptimizer,), {
        "__init__": init, "__doc__": _doc(rule), "__module__": "fastopt.optim",
        "_RULE": rule, "_HYPER": hyper})
    init.__qualname__ = f"{rule.cls}.__init__"
    return cls


#: class name -> class, for every rule of the table
CLASSES = {r.cls: make_class(r) for r in _rules.TORCH_RULES}
