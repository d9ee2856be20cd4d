"""The update rules of the whole step: one row each, in the C table's order.

This is the Python side of ``src_c/tables.h``'s ``FO_RULE_TABLE`` (the C
id of a rule is its row's index here; ``tests/test_tables.py`` asserts that
the rows agree with what the compiled core reports). Everything in Python
that names a rule, numbers it or counts its states reads it from here.

A row: the rule's name, the names of its states s1..s3 (for messages; the
most a group of the rule may use), the smallest step count t its groups
may have. A rule added since the table began also carries here, once for
every front end, its hyperparameters (torch's names, bounds and defaults)
and the mapping from them to its C group (see RMSprop below).
"""
from __future__ import annotations

from typing import NamedTuple


class Rule(NamedTuple):
    name: str
    states: tuple
    t0: int


# group flags (fo_step_group.flags)
NESTEROV, AMSGRAD, MAXIMIZE, CENTERED = 1, 2, 4, 8

RULES = (
    Rule("momentum", ("v",), 0),
    Rule("adagrad", ("h",), 0),
    Rule("adam", ("v", "h"), 0),
    Rule("sgd_torch", ("momentum_buffer",), 0),
    Rule("adagrad_torch", ("sum",), 1),
    Rule("adam_torch", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"), 1),
    Rule("adamw_torch", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"), 1),
    Rule("rmsprop_torch", ("square_avg", "momentum_buffer", "grad_avg"), 1),
)

#: name -> C id
ID = {r.name: i for i, r in enumerate(RULES)}


def needs(group: tuple) -> int:
    """How many states a group (in the fast path's tuple form: rule, flags,
    t, lr, alpha, beta, ...) uses: torch SGD without momentum none, torch
    Adam(W) the third only with amsgrad, every other rule all of its row's."""
    rule, flags = group[0], group[1]
    if rule == ID["sgd_torch"]:
        return 1 if group[4] != 0.0 else 0
    if rule in (ID["adam_torch"], ID["adamw_torch"]):
        return 3 if flags & AMSGRAD else 2
    if rule == ID["rmsprop_torch"]:
        return 1 + (group[5] != 0.0) + bool(flags & CENTERED)
    return len(RULES[rule].states)


# ---- RMSprop: torch.optim.RMSprop ------------------------------------------------
# Hyperparameters as torch names them: the check of each ("lr", "bool", or
# the bounds of a real number) and torch's default.
RMSPROP_SPEC = {"lr": "lr", "alpha": {"low": 0.0}, "eps": {"low": 0.0},
                "weight_decay": {"low": 0.0}, "momentum": {"low": 0.0},
                "centered": "bool", "maximize": "bool"}
RMSPROP_DEFAULTS = {"lr": 1e-2, "alpha": 0.99, "eps": 1e-8, "weight_decay": 0.0,
                    "momentum": 0.0, "centered": False, "maximize": False}


def rmsprop_slots(momentum, centered) -> tuple:
    """The states a group uses, packed in slot order s1, s2, s3."""
    return (("square_avg",) + (("momentum_buffer",) if momentum != 0 else ())
            + (("grad_avg",) if centered else ()))


def rmsprop_fields(h: dict) -> dict:
    """A group's checked hyperparameters (RMSPROP_SPEC's names) as the
    fields of its C group (without t: torch's step count, unused by the
    rule)."""
    return {"rule": ID["rmsprop_torch"], "lr": h["lr"], "alpha": h["alpha"],
            "beta": h["momentum"], "eps": h["eps"], "decay": h["weight_decay"],
            "flags": (CENTERED if h["centered"] else 0) | (MAXIMIZE if h["maximize"] else 0)}
