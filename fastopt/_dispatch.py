"""The acceptance rule of every in-place op, written once: :func:`run`.

1. Try the C fast path (``fastopt._ext``): it runs the call if every argument
   is already in the form the C code needs, else declines (returns False)
   without writing anything. It never raises for user input.
2. On decline, check the call in full through ``fastopt._validation`` (the
   only place that raises for user input: TypeError for a wrong type,
   ValueError for a wrong value, naming the function, argument and index).
3. Normalise it (contiguous native copies, materialised broadcasts).
4. Run the normalised call through the same fast path.
5. Write the copies back into the caller's arrays.

An op is a row of a small table (:class:`Op`, the rows live in
``fastopt._ops``): the fast path, the names of its array arguments (roles),
how its scalars are checked and which tensor checker applies.

Labels: :func:`run` takes the caller's function name and labels, so a caller
with its own vocabulary gets messages in it; e.g. ``fastopt.optim`` can pass
``fname="fastopt.optim.Momentum.step"`` and
``labels={"x": ["params[1]", "params[3]"], "g": ["grads[1]", "grads[3]"]}``
(a dict from role to a name, or to one full label per tensor; see
``fastopt._validation``) and errors read ``... grads[3] has dtype ...``.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from . import _validation as _v


class Op(NamedTuple):
    """One in-place op.

    fname : the public name used in messages ("fastopt.momentum").
    fast : the extension's fast path, called as ``fast(arrays, scalars)``
        (two tuples; it returns True when done, False to decline).
    roles : names of the array arguments, in order ("x", "g", "v", ...).
    check : ``check(fname, arrays, scalars) -> scalars``: every scalar checked
        (raises), returned in the fast path's order and form.
    clips_g : the op writes g and only reads x (``agc``), so its tensors are
        checked by ``_validation.agc_tensors`` instead of ``tensors``.
    """
    fname: str
    fast: Callable
    roles: tuple
    check: Callable
    clips_g: bool = False


def run(op: Op, arrays: tuple, scalars: tuple, fname: Optional[str] = None,
        labels: Optional[dict] = None) -> None:
    """Run ``op`` in place on ``arrays`` (one argument per role) with
    ``scalars`` (in the fast path's order): fast path, or check, normalise,
    run and write back. ``fname`` and ``labels`` name things in error
    messages (default: the op's public name and its role names)."""
    if op.fast(arrays, scalars):
        return
    f = fname or op.fname
    checked = op.check(f, arrays, scalars)
    named = dict(zip(op.roles, arrays))
    prepare = _v.agc_tensors if op.clips_g else _v.tensors
    prep = prepare(f, named, labels)
    if not op.fast(prep.args(), tuple(checked)):
        raise RuntimeError(f"{f}: internal error: a normalised call was declined")
    prep.finish()
