"""fastopt.torch's flat layout (``flat=True`` on the torch drop-ins).

At construction every parameter that requires grad moves into memory that
fastopt allocates: per parameter group and dtype (float32, float64, or a
16-bit type the rule updates in its own type, with states rounded to
nearest: stochastic rounding keys each tensor apart) one *segment*, which is
one contiguous buffer of its parameters (each parameter's ``.data`` becomes
a view of it, packed in the group's order without gaps) and one of their
gradients (a ``.grad`` already there is copied into its view and becomes
it; autograd accumulates into an existing ``.grad`` in place). The states
the step creates move into per-segment buffers of their own, and their
entries in ``opt.state`` become views of them (``'step'``: a 0-d view of
the segment's count buffer; NAdam's ``'mu_product'`` likewise of a buffer of
its own). A buffer of 2 MiB or more is an anonymous private mapping aligned
to 2 MiB and advised ``MADV_HUGEPAGE`` (Linux
transparent huge pages, in "madvise" or "always" mode); a smaller one is
64-byte aligned NumPy memory.

While the layout holds, a step is one C call (``_ext.step``) with one
work entry per segment (per run of parameters whose counts and carried
scalars agree, where they differ). Per parameter it checks only that the layout holds
(``FlatCheck`` in fastopt/torch/_flatcheck.pyx): the parameter is where the
layout put it (data address, dtype, shape and strides), its gradient is
the layout's view (the same object, with its address, dtype, shape and
strides), its state dict holds the same objects, the layout's views with
theirs, and every buffer keeps its address; and once per step that ``opt.state`` holds
the same state dicts, that every group's hyperparameters pass their checks
and need the same states, that a parameter outside the layout has no
gradient, and that each count is a whole number and each carried scalar
lies in [0, 1]. Otherwise the step takes
the checked route (fastopt/torch/_base.py), over the same memory: both give
the same bits. A step that measures the global norm (``max_grad_norm``,
``skip_if_nonfinite``) measures it over each parameter's gradient, in the
checked route's order and blocks, and hands it to the update.
"""
from __future__ import annotations

import math
import mmap

import numpy as np
import torch

from .. import _ext, _step
from . import _compiled, _flatcheck, _mixed

_HUGE = 2 << 20         # a transparent huge page
_ALIGN = 64
# advise huge pages for large buffers (bench/bench_torch.py turns it off for
# one optimizer, to measure what the pages give)
HUGE_PAGES = True
# the float types of counts and carried scalars; buffers also of the 16-bit
# types a rule updates in their own type (bfloat16 as ml_dtypes' in NumPy)
_FLOATS = {torch.float32: np.dtype(np.float32), torch.float64: np.dtype(np.float64)}
_NP = {**_FLOATS, **_mixed.HALF}
# torch's getters of what the check reads, called directly where a tensor's
# type overrides none of them (FlatCheck)
_READS = ("grad", "dtype", "shape", "data_ptr")
_TB = torch._C.TensorBase
DIRECT = _flatcheck.flat_accessors(*(_TB.__dict__.get(n) for n in _READS))


def _probes():
    """Tensors for _flatcheck.learn_fields: four dtypes, six of each, each on
    a storage of its own, at a storage offset and of a shape no other probe
    has. Made with the dtypes interleaved, in two orders: a word that tells
    the dtypes apart by chance (a slice of a pointer, which follows the
    order of allocation) is then not one place for every probe."""
    dtypes = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    out = []
    for r, order in enumerate((dtypes, dtypes[::-1])):
        for j in range(3):
            for k, dtype in enumerate(order):
                shape = ((3 + k + 4 * r, 5, 7), (11 + k + 4 * r, 13), (17 + 19 * k + 80 * r,))[j]
                off = 101 + 37 * len(out)
                out.append(torch.empty(off + math.prod(shape), dtype=dtype)[off:].view(shape))
    return out


def _grad_probes():
    """For _flatcheck.learn_grad_fields: parameters of four dtypes, two of
    each, every one with a gradient of its own; and as many tensors made
    alike that require no gradient (nor are views, which keep an autograd
    record too)."""
    out, bare = [], []
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        for n in (3, 5):
            p = torch.nn.Parameter(torch.zeros(n, dtype=dtype))
            p.grad = torch.zeros(n, dtype=dtype)
            out.append(p)
            bare.append(torch.zeros(n, dtype=dtype))
    return out, bare


# where torch keeps the facts the check compares, or None (see _flatcheck)
FIELDS = _flatcheck.learn_fields(_probes())
# and which gradient a parameter holds, or None
GRAD_FIELDS = _flatcheck.learn_grad_fields(*_grad_probes()) if FIELDS is not None else None


def _raw(nbytes):
    """nbytes of zeroed, aligned memory as a NumPy uint8 array (see the module)."""
    if HUGE_PAGES and nbytes >= _HUGE and hasattr(mmap, "MADV_HUGEPAGE"):
        size = -(-nbytes // _HUGE) * _HUGE + _HUGE     # room to align to 2 MiB
        try:
            mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, ValueError):
            mm = None
        if mm is not None:
            raw = np.frombuffer(mm, np.uint8)
            off = -raw.ctypes.data % _HUGE
            try:
                mm.madvise(mmap.MADV_HUGEPAGE, off, size - off)
            except OSError:
                pass            # not offered here: 4 KiB pages
            return raw[off:off + nbytes]
    raw = np.zeros(nbytes + _ALIGN, np.uint8)
    off = -raw.ctypes.data % _ALIGN
    return raw[off:off + nbytes]


def buffer(n, dtype):
    """n zeros of torch dtype in fastopt's memory: (1-D tensor, its NumPy array)."""
    raw = _raw(n * _NP[dtype].itemsize)
    arr = raw.view(_NP[dtype])
    if dtype is torch.bfloat16:         # (torch.from_numpy takes no ml_dtypes type)
        return torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16), arr
    return torch.from_numpy(arr), arr


def _movable(s, p):
    """Can state tensor s move into p's place in a state buffer (a tensor
    the checked route accepts: p's dtype and shape, CPU, plain strided)?"""
    return (isinstance(s, torch.Tensor) and s.layout is torch.strided and s.is_cpu
            and s.dtype is p.dtype and s.shape == p.shape and not s.is_neg()
            and not s.is_conj() and not s.requires_grad)


def _scalar_tensor(c):
    return (type(c) is torch.Tensor and c.dim() == 0 and c.dtype in _FLOATS and c.is_cpu
            and not c.requires_grad)


def _movable_count(c):
    return _scalar_tensor(c) and _whole(c.item())


def _movable_carried(c):
    """A carried scalar (NAdam's mu_product) the checked route accepts."""
    return _scalar_tensor(c) and 0.0 <= c.item() <= 1.0


def _placed(v, at):
    """Is the view v where at is (not re-pointed through .data or set_)?"""
    return v.data_ptr() == at.data_ptr() and v.shape == at.shape and v.dtype is at.dtype


def _whole(v):
    return math.isfinite(v) and v == int(v) and 0 <= v < 2**53


class Segment:
    """The parameters of one group and dtype, and their buffers."""

    __slots__ = ("gi", "dtype", "params", "shapes", "offs", "x", "xn", "g", "gn",
                 "pptrs", "gviews", "gptrs", "states", "counts", "carried")

    def __init__(self, gi, dtype, params):
        self.gi, self.dtype, self.params = gi, dtype, tuple(params)
        self.shapes = tuple(p.shape for p in params)
        offs = [0]
        for p in params:
            offs.append(offs[-1] + p.numel())
        self.offs = tuple(offs)
        self.x, self.xn = buffer(offs[-1], dtype)
        self.g, self.gn = buffer(offs[-1], dtype)
        self.gviews = [self.view(self.g, i) for i in range(len(params))]
        self.gptrs = tuple(v.data_ptr() for v in self.gviews)
        self.pptrs = ()
        self.states = {}        # name -> (flat tensor, NumPy array, per-parameter views)
        self.counts = None      # (flat tensor, NumPy array, 0-d views)
        self.carried = None     # the same, of a carried scalar (NAdam's mu_product)

    def view(self, flat, i):
        """Parameter i's place in the flat tensor flat, in its shape."""
        return flat[self.offs[i]:self.offs[i + 1]].view(self.shapes[i])

    def move_in(self):
        """Copy every parameter (and a gradient it has, if the checked
        route would take it) into the buffers; their views replace them."""
        for i, p in enumerate(self.params):
            v = self.view(self.x, i)
            v.copy_(p.detach())
            p.data = v
            g = p.grad
            if (g is not None and g.layout is torch.strided and g.dtype is p.dtype
                    and g.shape == p.shape and g.is_cpu):
                self.gviews[i].copy_(g)
                p.grad = self.gviews[i]
        self.pptrs = tuple(p.data_ptr() for p in self.params)

    def buffers(self):
        """Every buffer: (flat tensor, NumPy array)."""
        bufs = [(self.x, self.xn), (self.g, self.gn), *(e[:2] for e in self.states.values())]
        return bufs + [e[:2] for e in (self.counts, self.carried) if e is not None]

    def in_place(self):
        """Does every buffer still hold the memory its NumPy array sees
        (``share_memory_()`` moves a storage)?"""
        return all(not a.size or t.data_ptr() == a.ctypes.data for t, a in self.buffers())

    def state(self, name):
        """The buffer of state ``name``, made on first use."""
        e = self.states.get(name)
        if e is None:
            t, a = buffer(self.offs[-1], self.dtype)
            e = self.states[name] = (t, a, [self.view(t, i) for i in range(len(self.params))])
        return e

    def adopt(self, i, st, names, counted, carry, seen, moves):
        """Plan moving parameter i's states (the dict st) into the buffers:
        every entry of names (and 'step' when counted, the scalar named
        carry unless it is None) is to become the layout's view, its values
        copied: (st, key, views, i, view, source) appended to moves
        (FlatLayout.arm copies them all at once). False if one cannot move
        (the checked route decides)."""
        p = self.params[i]
        for name in names:
            s = st.get(name)
            flat, _, views = self.state(name)
            v = self.view(flat, i)
            if s is views[i] and _placed(s, v):
                continue
            if not _movable(s, p) or id(s) in seen:
                return False
            seen.add(id(s))
            moves.append((st, name, views, i, v, s))
        if counted and not self._scalar("counts", i, st, "step", _movable_count, seen, moves):
            return False
        return carry is None or self._scalar("carried", i, st, carry, _movable_carried,
                                             seen, moves)

    def forget_unheld(self, by_id):
        """Drop a scalar buffer (counts, carried) that no parameter's state
        (by_id: id(parameter) -> state dict) holds a view of any more:
        load_state_dict replaced them all, maybe in another dtype (torch
        casts a carried scalar to its parameter's), and adopt makes the
        buffer anew in theirs."""
        for attr in ("counts", "carried"):
            e = getattr(self, attr)
            if e is None:
                continue
            mine = {id(v) for v in e[2]}
            if not any(isinstance(st, dict) and any(id(v) in mine for v in st.values())
                       for st in (by_id.get(id(p)) for p in self.params)):
                setattr(self, attr, None)

    def _scalar(self, attr, i, st, name, movable, seen, moves):
        """adopt's plan for parameter i's 0-d state st[name], kept in the
        segment's buffer attr ("counts" or "carried", made on first use in
        the scalar's dtype): True when it is there or planned, False when it
        cannot move (movable says which values may)."""
        c, e = st.get(name), getattr(self, attr)
        if e is not None and c is e[2][i] and _placed(c, e[0][i]):
            return True
        if not movable(c) or id(c) in seen:
            return False
        if e is None:
            t, a = buffer(len(self.params), c.dtype)
            e = (t, a, [t[k] for k in range(len(self.params))])
            setattr(self, attr, e)
        elif e[0].dtype is not c.dtype:
            return False
        seen.add(id(c))
        moves.append((st, name, e[2], i, e[0][i], c))
        return True


def _move(moves, segments):
    """Copy the planned states into their places, reading every source
    first when it lives in the layout's own memory (states swapped between
    parameters must not overwrite each other), and make the entries views."""
    mine = {t.untyped_storage().data_ptr() for s in segments for t, _ in s.buffers()}
    srcs = [s.clone() if s.untyped_storage().data_ptr() in mine else s
            for *_, s in moves]
    for (st, key, views, i, v, _), s in zip(moves, srcs):
        v.copy_(s)
        views[i] = st[key] = v


class Record:
    """What a flat step checks and runs with (built by FlatLayout.arm)."""

    __slots__ = ("groups", "check", "direct", "names", "snap", "segments", "xs", "gs", "ss",
                 "counts", "carried", "gnorm")

    def __init__(self, groups, names, snap, segments):
        self.groups = groups        # per group: (params list, params tuple, records)
        types = {type(t) for _, params, recs in groups for p, rec in zip(params, recs)
                 if rec is not None
                 for t in (p, rec[0], *(v for v, a in rec[6] if a is not None))}
        self.direct = DIRECT and all(getattr(c, n, None) is _TB.__dict__[n]
                                     for c in types for n in _READS)
        self.check = _flatcheck.FlatCheck(
            groups, self.direct, tuple((t, a.ctypes.data) for s in segments
                                       for t, a in s.buffers() if a.size))
        self.names = names          # per group: the state names it needs
        self.snap = snap            # opt.state's (parameter, state dict) pairs
        self.segments = segments
        self.xs = tuple(s.xn for s in segments)
        self.gs = tuple(s.gn for s in segments)
        ss = [[s.state(n)[1] for n in names[s.gi]] + [None] * 3 for s in segments]
        self.ss = tuple(tuple(row[k] for row in ss) for k in range(3))
        self.counts = tuple(None if s.counts is None else s.counts[1] for s in segments)
        self.carried = tuple(None if s.carried is None else s.carried[1] for s in segments)
        # each gradient, in the checked route's order (the norm's)
        self.gnorm = tuple(_mixed.numpy_of(rec[0]).reshape(-1)
                           for _, _, recs in groups for rec in recs if rec is not None)


class FlatLayout:
    """The flat layout of one optimizer (see the module)."""

    def __init__(self):
        self.segments = []
        self.groups = []    # per group: (params list, params tuple, (segment, index) or None)
        self.rec = None     # the Record of the flat step, or None
        self.dirty = True   # something changed that arm could now accept

    def add_group(self, gi, plist):
        """Lay out param_groups[gi] (checked by the caller): its parameters
        that require grad move into new segments, one per dtype."""
        by_dtype, where = {}, []
        for p in plist:
            if not p.requires_grad:
                where.append(None)
                continue
            ps = by_dtype.setdefault(p.dtype, [])
            where.append((p.dtype, len(ps)))
            ps.append(p)
        segs = {dt: Segment(gi, dt, ps) for dt, ps in by_dtype.items()}
        for seg in segs.values():
            seg.move_in()
        self.segments += segs.values()
        self.groups.append((plist, tuple(plist),
                            tuple(None if w is None else (segs[w[0]], w[1]) for w in where)))
        self.rec, self.dirty = None, True

    def changed(self):
        """Something the record relies on may have changed: re-arm."""
        self.rec, self.dirty = None, True

    def arm(self, opt):
        """Move the states into the buffers and build the Record; None
        while the layout does not hold (a state missing, a parameter moved)."""
        pgs = opt.param_groups
        if len(pgs) != len(self.groups) or not all(s.in_place() for s in self.segments):
            return None
        by_id = {id(k): v for k, v in opt.state.items()}    # no tensor hashed
        carry = _carry_name(opt)
        for seg in self.segments:
            seg.forget_unheld(by_id)
        groups, names_of, seen, moves = [], [], set(), []
        for gi, (group, (plist, params, where)) in enumerate(zip(pgs, self.groups)):
            if group.get("params") is not plist or len(plist) != len(params) or any(
                    a is not b for a, b in zip(plist, params)):
                return None
            try:
                names = opt._group(opt._checked("", group, gi))[1]
            except (TypeError, ValueError):
                return None
            recs = []
            for p, loc in zip(params, where):
                if loc is None:
                    recs.append(None)
                    continue
                seg, i = loc
                if (p.data_ptr() != seg.pptrs[i] or p.shape != seg.shapes[i]
                        or p.dtype is not seg.dtype or not p.is_contiguous()):
                    return None
                st = by_id.get(id(p))
                if st is None and (names or opt._COUNTS):
                    return None
                if st is not None and (type(st) is not dict or not seg.adopt(
                        i, st, names, opt._COUNTS, carry, seen, moves)):
                    return None
                recs.append((seg, i, st))
            groups.append((plist, params, recs))
            names_of.append(names)
        _move(moves, self.segments)
        for k, (plist, params, recs) in enumerate(groups):
            groups[k] = (plist, params, tuple(
                None if r is None else (r[0].gviews[r[1]], r[0].pptrs[r[1]],
                                        r[0].gptrs[r[1]], r[0].shapes[r[1]], r[0].dtype,
                                        r[2], _values(r[2], names_of[k], opt._COUNTS, carry))
                for r in recs))
        return Record(tuple(groups), tuple(names_of), tuple(opt.state.items()),
                      tuple(self.segments))

    def run(self, opt, f, opts):
        """The flat step: its StepInfo, or None (nothing written) when the
        layout does not hold; raises what the checked route would for a
        bad hyperparameter."""
        rec = self.rec
        if rec is None:
            if not self.dirty:
                return None
            self.dirty = False
            rec = self.rec = self.arm(opt)
            if rec is None:
                return None
        pgs = opt.param_groups
        if len(pgs) != len(rec.groups):
            self.changed()
            return None
        fields, hs = [], []
        for gi, group in enumerate(pgs):
            # a group given another params list (model surgery) holds what
            # the layout does not know: the check walks the old list
            if group.get("params") is not rec.groups[gi][0]:
                self.changed()
                return None
            h = opt._checked(f, group, gi)
            fl, names = opt._group_fields(h)     # (with a 16-bit model's rounding)
            if names != rec.names[gi]:
                self.changed()
                return None
            fields.append(fl)
            hs.append(h)
        if not _compiled.torch_state_same(opt.state, rec.snap):
            self.changed()
            return None
        code = rec.check.check()
        if code:
            if code == 2:
                self.changed()
            return None
        ts = _compiled.flat_counts(rec.counts)
        if ts is None:
            return None
        add = opt._T_ADD if opt._COUNTS else 1
        held = [_held(c) for c in rec.carried]
        if all(type(t) is int for t in ts) and all(h is not _APART for h in held):
            groups, after = [], []
            for s, t, c, v in zip(rec.segments, ts, rec.carried, held):
                group, later = opt._group_at(fields[s.gi], hs[s.gi], t + add, v)
                groups.append(group)
                if c is not None:
                    after.append((c, later))
            return self._apply(opt, rec, (rec.xs, rec.gs, *rec.ss), tuple(groups), opts, after)
        work = _runs(opt, rec, ts, fields, hs, add)
        if work is None:
            return None
        arrays, groups, after = work
        return self._apply(opt, rec, arrays, groups, opts, after)

    def _apply(self, opt, rec, arrays, groups, opts, after):
        """The C call of run (arrays: xs, gs, s1..s3, one entry per group
        of groups) and, if it applied, the counts advanced and each
        (carried scalars' array, value after) of after written."""
        nth, norm, finite = opt.n_threads, math.nan, True
        if opts.check_finite or opts.clip:
            got = _ext.global_norm(rec.gnorm, opts.grad_scale, opts.norm_type, nth)
            if got is None:
                return None
            norm, finite = got
            if opts.check_finite and not finite:
                return _step.StepInfo(False, norm, False)
        out = _ext.step(*arrays, tuple(range(len(groups))), groups,
                        opts.grad_scale, opts.max_norm, opts.clip_value, opts.clip,
                        opts.norm_type, False, nth, norm, half_params=opt._mixed.own_half)
        if out is None:
            return None
        info = _step.StepInfo(out[0], norm if norm == norm else out[1],
                              finite and out[2])
        if info.applied:
            for c in rec.counts:
                if c is not None:
                    np.add(c, 1, out=c)
            for c, v in after:
                c.fill(v)
        return info

    def zero_grad(self, opt):
        """Zero every gradient buffer; a gradient that is not the layout's
        view becomes it (zeroed); None stays None. The parameters outside
        the layout as torch's zero_grad(set_to_none=False)."""
        moved = False
        for seg in self.segments:
            for i in _flatcheck.flat_unbound(seg.params, tuple(seg.gviews), seg.gptrs):
                v = seg.gviews[i]
                if v.data_ptr() != seg.gptrs[i] or v.shape != seg.shapes[i] \
                        or v.dtype is not seg.dtype:
                    v = seg.gviews[i] = seg.view(seg.g, i)
                p = seg.params[i]
                try:
                    p.grad = v
                except RuntimeError:        # the parameter moved: torch's way
                    _zero(p)
                moved = True
            seg.gn.fill(0)
        laid = None
        for gi, group in enumerate(opt.param_groups):
            plist = group["params"]
            if gi < len(self.groups) and plist is self.groups[gi][0] and len(plist) == len(
                    self.groups[gi][1]) and all(a is b for a, b in zip(plist, self.groups[gi][1])):
                rest = [p for p, w in zip(plist, self.groups[gi][2]) if w is None]
            else:                       # the list was edited: every parameter not laid out
                if laid is None:
                    laid = {id(p) for seg in self.segments for p in seg.params}
                rest = [p for p in plist if id(p) not in laid]
            for p in rest:
                if p.grad is not None:
                    _zero(p)
        if moved:
            self.changed()


def _carry_name(opt):
    """The name of the scalar opt's rule carries (NAdam's mu_product), or None."""
    carry = getattr(getattr(opt, "_RULE", None), "carry", None)
    return None if carry is None else carry.name


_APART = object()


def _held(c):
    """The carried value of a segment (c: its buffer of the scalar, or
    None): None without one, _APART unless every parameter's is the same
    value in [0, 1], else that value, a NumPy scalar of the buffer's type."""
    if c is None:
        return None
    lo, hi = c.min(), c.max()
    return c[0] if 0.0 <= lo and hi <= 1.0 and lo == hi else _APART


def _values(st, names, counted, carry=None):
    """A state dict's values in order, for FlatCheck: (value, its address)
    for the layout's views (the entries of names, 'step' if counted, and
    carry if it is not None), (value, None) for anything else in it."""
    if st is None:
        return ()
    mine = set(names) | ({"step"} if counted else set()) | ({carry} if carry else set())
    return tuple((v, v.data_ptr() if k in mine else None) for k, v in st.items())


def _runs(opt, rec, ts, fields, hs, add):
    """The work list of a step whose counts (or carried scalars) differ
    within a segment (a parameter that a step skipped keeps its own): one
    entry per run of equal counts and carried values, as (arrays, groups,
    after) for FlatLayout._apply; None (decline) when a carried value is
    not in [0, 1]. ts: flat_counts' answer; hs: the groups' checked
    hyperparameters."""
    arrays, groups, after = [[] for _ in range(5)], [], []
    for k, (seg, t) in enumerate(zip(rec.segments, ts)):
        car = rec.carried[k]
        for i0, i1, c in ((0, len(seg.params), t),) if type(t) is int else t:
            cuts = [i0, i1] if car is None else [
                i0, *(i0 + 1 + np.flatnonzero(car[i0 + 1:i1] != car[i0:i1 - 1])), i1]
            for j0, j1 in zip(cuts, cuts[1:]):
                held = None if car is None else car[j0]
                if held is not None and not 0.0 <= held <= 1.0:
                    return None
                a, b = seg.offs[j0], seg.offs[j1]
                for row, arr in zip(arrays, (rec.xs[k], rec.gs[k], *(s[k] for s in rec.ss))):
                    row.append(None if arr is None else arr[a:b])
                group, later = opt._group_at(fields[seg.gi], hs[seg.gi], c + add, held)
                groups.append(group)
                if car is not None:
                    after.append((car[j0:j1], later))
    return tuple(tuple(row) for row in arrays), tuple(groups), after


def _zero(p):
    """torch's zero_grad(set_to_none=False) of one parameter."""
    g = p.grad
    if g.grad_fn is not None:
        g.detach_()
    else:
        g.requires_grad_(False)
    g.zero_()
