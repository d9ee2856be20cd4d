"""fastopt.torch's prepared step: what a full step (``fastopt.torch._base``) checked
once, re-checked per step only where torch lets it change.

A full step checks every hyperparameter, parameter, gradient, state and
step count through torch calls (several microseconds a parameter; figures in
bench/RESULTS.md) and builds NumPy views. After one, :func:`build` keeps its work list as a
``_ext.StepPlan`` (the parameters' and states' views, checked once in C:
dtypes, layouts, no written array overlapping another) beside, per
parameter, the objects and facts the plan relied on. Per step,
:meth:`Prepared.run` then re-checks only what torch allows to change
between steps, with the fewest torch calls that decide it:

- the structure: as many groups, each group's dict and ``params`` list the
  same objects; ``opt.state`` the same (parameter, state dict) pairs, in
  order, compared by identity without hashing a tensor (``add_param_group``,
  ``load_state_dict`` and edits of the lists or of ``opt.state`` decline);
- every group's hyperparameters, checked in full (a scheduler edits lr
  every step) and needing the same states;
- every gradient: present exactly where it was (a parameter's first
  gradient makes states), a ``torch.Tensor`` (no subclass: its attributes
  could be anyone's answers), strided, on the CPU, of the parameter's dtype
  and shape, contiguous, no negative bit; it goes to C as its data address
  (``StepPlan.run_pointers``, which tests its alignment and its overlap
  with every written array: an aliasing gradient declines), and its
  storage is held through the C call (``set_()`` or ``.data =`` from
  another thread cannot free what C reads);
- every written tensor (the parameter, its states, its master): the same
  object in ``opt.state``, the same data address, shape and dtype, still contiguous
  (a state re-typed in place through ``.data`` declines, and the full step
  refuses it). The plan holds the storages it writes, so an
  address that still matches is that memory (``p.data = ...`` twice cannot
  bring an address back); a storage moved by ``share_memory_()`` frees its
  old address, but a tensor found there later must still have the shape
  and contiguity checked here, so its own storage covers what is written;
- every step count: the same 0-d tensor at the same address, of the same
  dtype (read and advanced through its NumPy view), or a Python int; a
  whole number in [0, 2**53 - 1), so that the count after the step is one a
  state dict holds; the counts of one C group (its own t) equal;
- every carried scalar (NAdam's ``mu_product``): the same 0-d float tensor at
  the same address, of the same dtype, its value in [0, 1] and the same
  across its C group (read, and written after an applied step, through its
  NumPy view).

Anything else declines with nothing written (None), and the full step
runs, raises, or rebuilds the plan. A declined gradient or count value
keeps the plan (the next step may be fine); anything the plan holds
changed drops it. The plan is built only over torch's own classes
(``Tensor``, ``Parameter``), C-order memory and plain dict states.

When a step has two errors, the prepared step
may report another one than the full step (it checks every group's
hyperparameters before any gradient); nothing is written either way.
"""
from __future__ import annotations

import collections

import torch

from .. import _dtypes, _ext, _step
from .._dtypes import torch_dtypes
from . import _compiled, _mixed

_STRIDED = torch.strided
_TENSOR = torch.Tensor
_DTYPES = torch_dtypes(torch)
_PARAM_TYPES = (torch.Tensor, torch.nn.Parameter)
_CARRIED = (torch.float32, torch.float64)


class Prepared:
    """A full step's work list kept for the next steps (see the module)."""

    __slots__ = ("groups", "names", "plan", "nk", "k_gi", "storages", "snap", "stale")

    def __init__(self, plan, groups, names, nk, k_gi, storages, snap):
        self.snap = snap            # opt.state's (parameter, state dict) pairs
        self.groups = groups        # per group: (dict, params list, records)
        self.names = names          # per group: the state names it needs
        self.plan = plan
        self.nk = nk                # C groups: one per (group, step count)
        self.k_gi = k_gi            # C group -> its parameter group
        # every written storage, held (see the module; torch 2.13's NumPy
        # views in the plan pin them too, which this does not rely on)
        self.storages = storages
        self.stale = False          # the structure changed: build anew

    def run(self, opt, f, opts):
        """The step through the plan: its StepInfo, or None (nothing written)."""
        pgs = opt.param_groups
        if len(pgs) != len(self.groups):
            self.stale = True
            return None
        fields, hypers = [], []
        for gi, (group, (gdict, plist, _)) in enumerate(zip(pgs, self.groups)):
            if group is not gdict or group["params"] is not plist:
                self.stale = True
                return None
            h = opt._checked(f, group, gi)
            fl, names = opt._group_fields(h)
            if names != self.names[gi]:
                self.stale = True
                return None
            fields.append(fl)
            hypers.append(h)
        if not _compiled.torch_state_same(opt.state, self.snap):
            self.stale = True
            return None
        got = _compiled.torch_gather(self.groups, opt._COUNTS, opt._T_ADD, self.nk, _STRIDED,
                                     _TENSOR)
        if type(got) is int:        # 1: what the plan holds changed; 0: this step's input
            if got == 1:
                self.stale = True
            return None
        ptrs, ts, pins, counts, held, carried = got
        made = [opt._group_at(fields[self.k_gi[k]], hypers[self.k_gi[k]], ts[k], held[k])
                for k in range(self.nk)]
        groups = tuple(m[0] for m in made)
        out = self.plan.run_pointers(ptrs, groups, opts.grad_scale, opts.max_norm,
                                     opts.clip_value, opts.clip, opts.norm_type,
                                     opts.check_finite, opt.n_threads)
        del pins        # the gradients' storages, held until the C call returned
        if out is None:
            return None
        info = _step.StepInfo(*out)
        if info.applied:
            _compiled.torch_advance(counts)
            if carried:
                _compiled.torch_carry(carried, [m[1] for m in made])
        return info


def _count_record(opt, st):
    """How a parameter's count is read per step: None for a Python int (or
    no count), (tensor, address, dtype, view) for a 0-d CPU float tensor;
    False when neither (the full step alone handles it)."""
    if not opt._COUNTS:
        return None
    c = st.get("step")
    if type(c) is int:
        return None
    if (type(c) is _TENSOR and c.dim() == 0 and c.dtype in _DTYPES and c.is_cpu
            and c.layout is _STRIDED and not c.is_neg() and not c.requires_grad):
        return (c, c.data_ptr(), c.dtype, c.numpy())
    return False


def _record(opt, p, names, k):
    """The record of parameter p (see torch_gather, fastopt/torch/_compiled.pyx) and
    the storages it writes, or None when the plan cannot hold p (a subclass
    whose attributes a __torch_function__ could answer, memory not in C
    order, a state dict that is not a dict, a count of another kind)."""
    st = opt.state.get(p)       # (not opt.state[p]: that would add an entry)
    if st is None and not names and not opt._COUNTS:
        st = {}                 # SGD without momentum: no state at all
    if (type(p) not in _PARAM_TYPES or not p.is_contiguous() or type(st) is not dict
            or any(type(st.get(name)) is not _TENSOR for name in names)):
        return None
    cnt = _count_record(opt, st)
    if cnt is False:
        return None
    sts = tuple((name, st[name], st[name].data_ptr(), st[name].dtype) for name in names)
    if not all(s.is_contiguous() for _, s, _, _ in sts):
        return None
    storages = [p.untyped_storage()] + [s.untyped_storage() for _, s, _, _ in sts]
    rec = (p, st, p.shape, p.dtype, p.data_ptr(), sts, cnt, k)
    carry = getattr(getattr(opt, "_RULE", None), "carry", None)
    if carry is not None:       # its scalar, read and written through a 0-d view
        c = st.get(carry.name)
        if not (type(c) is _TENSOR and c.dim() == 0 and c.dtype in _CARRIED and c.is_cpu
                and c.layout is _STRIDED and not c.is_neg() and not c.requires_grad):
            return None
        rec += ((carry.name, c, c.data_ptr(), c.dtype, c.numpy()),)
        storages.append(c.untyped_storage())
    return rec, storages


def build(opt, args, names_of, counted, extra):
    """After a full step whose work list was args (xs, gs, states, index,
    groups; tensor j updates counted[j] with the states names_of[j]) and
    extra (its copies and seed, fastopt/torch/_mixed.py): the Prepared plan
    for the next steps, or None when the plan cannot hold it (the full step
    then runs every time). A parameter stepped through a master is planned
    with the master as its x and itself as its copy; the master is checked
    per step as a state is."""
    xs, _, (s1, s2, s3), index, cgroups = args
    if type(opt.state) is not collections.defaultdict and type(opt.state) is not dict:
        return None             # (torch's own kind; another mapping: the full step)
    copies = extra.get("copies")
    plan = _ext.StepPlan.make(tuple(xs), tuple(s1), tuple(s2), tuple(s3), tuple(index),
                              len(cgroups), None if copies is None else tuple(copies),
                              extra.get("seed", 0), extra.get("half_params", False))
    if plan is None:
        return None
    if copies is not None and not plan.pointer_types(tuple(
            _dtypes.CODE[x.dtype.newbyteorder("=") if w is None else w.dtype]
            for x, w in zip(xs, copies))):
        return None             # (a master's gradient has its parameter's type)
    groups, names, storages, k_gi = [], [], [], [None] * len(cgroups)
    j, n = 0, len(counted)
    for gi, group in enumerate(opt.param_groups):
        plist, recs = group["params"], []
        gnames = None
        for p in plist:
            if p.grad is None:
                recs.append((p,))
                continue
            if j >= n or counted[j] is not p:
                return None
            checked = names_of[j]
            if copies is not None and copies[j] is not None:
                checked += (_mixed.MASTER,)
            got = _record(opt, p, checked, index[j])
            if got is None:
                return None
            recs.append(got[0])
            storages += got[1]
            k_gi[index[j]] = gi
            gnames = names_of[j]
            j += 1
        groups.append((group, plist, tuple(recs)))
        names.append(gnames if gnames is not None else opt._group_fields(
            opt._checked("", group, gi))[1])
    if j != n:
        return None
    return Prepared(plan, tuple(groups), tuple(names), len(cgroups), tuple(k_gi),
                    storages, tuple(opt.state.items()))
