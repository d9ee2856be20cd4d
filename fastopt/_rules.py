"""The update rules of the whole step: one row each, in the C table's order.

This is the Python side of ``src_c/tables.h``'s ``FO_RULE_TABLE`` (the C
id of a rule is its row's index here; ``tests/test_tables.py`` asserts that
the rows agree with what the compiled core reports). Everything in Python
that names a rule, numbers it or counts its states reads it from here.

A row: the rule's name, the names of its states s1..s3 (for messages; the
most a group of the rule may use), the smallest step count t its groups
may have, and which group flags it takes.
"""
from __future__ import annotations

from typing import NamedTuple


class Rule(NamedTuple):
    name: str
    states: tuple
    t0: int


# group flags (fo_step_group.flags)
NESTEROV, AMSGRAD, MAXIMIZE = 1, 2, 4

RULES = (
    Rule("momentum", ("v",), 0),
    Rule("adagrad", ("h",), 0),
    Rule("adam", ("v", "h"), 0),
    Rule("sgd_torch", ("momentum_buffer",), 0),
    Rule("adagrad_torch", ("sum",), 1),
    Rule("adam_torch", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"), 1),
    Rule("adamw_torch", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"), 1),
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
    return len(RULES[rule].states)
