"""The acceptance rule of every entry point, written once: :func:`run` and
:func:`accept`.

1. Try the C fast path (``fastopt._ext``): it runs the call if every argument
   is already in the form the C code needs, else declines (returns False or
   None) without writing anything. It never raises for user input.
2. On decline, check the call in full through ``fastopt._validation`` (which
   raises for the call's arrays and scalars: TypeError for a wrong type,
   ValueError for a wrong value, naming the function, argument and index).
3. Normalise it (contiguous native copies, materialised broadcasts).
4. Run the normalised call through the same fast path.
5. Write the copies back into the caller's arrays (unless the call wrote
   nothing: a step skipped for a non-finite gradient). Steps 4 and 5 run
   whole: a KeyboardInterrupt arriving meanwhile is raised once the last
   copy is written back (``fastopt._interrupt``).

:func:`run` is steps 1-5; :func:`accept` is steps 2-5, for a caller that
made step 1 itself (the public ops, ``fastopt._step.run``, the gradient-list
functions of ``fastopt._torchform``: one C call before any Python work).

An entry point is a row of a small table (:class:`Op`): its fast path, the
names of its array arguments (roles), how its scalars are checked, which
arrays it writes. The rows: the in-place ops in ``fastopt._ops``; the whole
step (``STEP``: the torch-form functions, ``fastopt.optim``,
``fastopt.torch``), ``GLOBAL_NORM`` and ``CLIP_GRADS`` in ``fastopt._step``.

Labels: :func:`run` takes the caller's function name and labels, so a caller
with its own vocabulary gets messages in it; e.g. ``fastopt.optim`` can pass
``fname="fastopt.optim.OnnxMomentum.step"`` and
``labels={"x": ["params[1]", "params[3]"], "g": ["grads[1]", "grads[3]"]}``
(a dict from role to a name, or to one full label per tensor; see
``fastopt._validation``) and errors read ``... grads[3] has dtype ...``.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

from . import _interrupt
from . import _validation as _v


class Op(NamedTuple):
    """One entry point.

    fname : the public name used in messages ("fastopt.onnx_momentum").
    fast : the extension's fast path, called as ``fast(arrays, scalars)``
        (two tuples; it returns a true value when done, False or None to
        decline).
    roles : names of the array arguments, in order ("x", "g", "v", ...); the
        first leads (the others have its shape and container).
    check : ``check(fname, arrays, scalars) -> scalars``: every scalar checked
        (raises), returned in the fast path's order and form.
    clips_g : the op writes g and only reads x (``agc``, ``clip_grads``);
        otherwise it writes every role but g.
    wrote : ``wrote(result) -> bool``, whether a run wrote (so its copies
        are written back); None: always.
    needs : ``needs(scalars)`` -> per tensor, how many of the roles after x
        and g it has (the whole step's rules need 0-3 states); None: all.
    mixed : gradients may be of a 16-bit type paired with their parameter's,
        and a last role "w" may hold rounded copies of the new parameters
        (the whole step, the gradient lists).
    """
    fname: str
    fast: Callable
    roles: tuple
    check: Callable
    clips_g: bool = False
    wrote: Optional[Callable] = None
    needs: Optional[Callable] = None
    mixed: bool = False


def run(op: Op, arrays: tuple, scalars: tuple, fname: Optional[str] = None,
        labels: Optional[dict] = None) -> None:
    """Run ``op`` in place on ``arrays`` (one argument per role) with
    ``scalars`` (in the fast path's order): fast path, or check, normalise,
    run and write back. ``fname`` and ``labels`` name things in error
    messages (default: the op's public name and its role names)."""
    if op.fast(arrays, scalars):
        return
    accept(op, arrays, scalars, fname, labels)


def accept(op: Op, arrays: tuple, scalars: tuple, fname: Optional[str] = None,
           labels=None, precheck: Optional[Callable] = None):
    """A call ``op``'s fast path declined: check it in full (raises, nothing
    written), normalise it, run it, write the copies back; return the fast
    path's result. ``labels`` may be a callable returning the dict (built
    only here); ``precheck()``, a caller's own checks, runs after the
    scalars' and before the tensors'."""
    f = fname or op.fname
    checked = tuple(op.check(f, arrays, scalars))
    if precheck is not None:
        precheck()
    if callable(labels):
        labels = labels()
    written = ("g",) if op.clips_g else tuple(r for r in op.roles if r != "g")
    prep = _v.tensors(f, dict(zip(op.roles, arrays)), labels, written,
                      op.needs(checked) if op.needs is not None else None, op.mixed)
    return _interrupt.whole(_run_copies, op, prep, checked, f)


def _run_copies(op: Op, prep, checked: tuple, f: str):
    """Steps 4-5 of :func:`accept`, run whole (fastopt._interrupt): a
    KeyboardInterrupt meanwhile is raised once every copy is written back,
    never between two arrays."""
    out = op.fast(prep.args(), checked)
    if not out:
        raise RuntimeError(f"{f}: internal error: a normalised call was declined")
    if op.wrote is None or op.wrote(out):
        prep.finish()
    return out
