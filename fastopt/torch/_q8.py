"""8-bit states in fastopt.torch: ``state_dtype="int8-blockwise"`` keeps
the rule's states of a float32 parameter of ``min_8bit_size`` elements or
more in bitsandbytes' 8-bit blockwise format (docs/semantics.md, "8-bit
states"): ``state[p][name]`` holds the uint8 codes (the parameter's shape)
and ``state[p][name + "_absmax"]`` the float32 absmax per block of 256;
smaller parameters, and those of a group with ``"state_dtype": "float32"``,
keep float32 states. Their creation, check and the
step's view of them (``fastopt.State8bit`` over the tensors' memory), and
the translation of bitsandbytes' state dicts (``state1``/``absmax1``/
``qmap1``..., nested under ``__bnb_optimizer_quant_state__`` as its
``state_dict`` saves them)."""
from __future__ import annotations

import numpy as np
import torch

from .. import _rules, _step
from .._q8 import BLOCK, State8bit, beyond, blocks, dynamic_map, group_keeps_8bit

#: state_dtype's name of 8-bit states, and the suffix of an absmax's key
Q8 = "int8-blockwise"
ABSMAX = "_absmax"
#: bitsandbytes' key of the nested 8-bit state in its state dicts
BNB_NESTED = "__bnb_optimizer_quant_state__"
#: the hyperparameters bitsandbytes' one-state optimizers keep in a group's
#: ``betas`` (Adagrad's are (0, 0)); rules without eps keep ``eps`` 0 there
BNB_BETAS = {"sgd_torch": ("momentum", "dampening"), "rmsprop_torch": ("alpha", "momentum"),
             "adagrad_torch": ()}


def unsigned(row: str, k: int) -> bool:
    """Is slot k of the rule row's states on the unsigned map?"""
    return bool(_rules.RULES[_rules.ID[row]].q8 >> k & 1)


def check_groups(f, opt) -> None:
    """Each group's ``state_dtype`` is valid (:func:`group_eight`) and an
    8-bit group's options use no more states than its rule has 8-bit forms
    of (the row's q8n), or raise (at construction; a step checks the
    groups it is given again)."""
    for gi, group in enumerate(opt.param_groups):
        if not group_eight(f, gi, group, opt._mixed.q8):
            continue
        fields, _ = opt._group_fields(opt._checked(f, group, gi))
        used = _rules.needs(_step.group_tuple(t=1, **fields))
        row = _rules.RULES[fields["rule"]]
        if used > row.q8n:
            raise ValueError(f"{f}: state_dtype='{Q8}': the options of param_groups[{gi}] "
                             f"{beyond(row, used)}")


def group_eight(f, gi, group, q8: bool) -> bool:
    """Does group gi keep 8-bit states (q8: the optimizer keeps them)? Its
    ``state_dtype`` as fastopt._q8.group_keeps_8bit takes it, torch.float32
    too (raises ValueError)."""
    dt = group.get("state_dtype")
    return group_keeps_8bit(f, f"param_groups[{gi}]", "float32" if dt is torch.float32 else dt,
                            q8)


def eight(mixed, p, group8: bool) -> bool:
    """Does parameter p of a group (8-bit or not: :func:`group_eight`) keep
    8-bit states under these options?"""
    return mixed.q8 and group8 and p.numel() >= mixed.min_8bit_size


def quantized(row, new: dict, names) -> dict:
    """The new states with each of the rule's (names) as 8-bit codes and
    absmax tensors (a fresh state of zeros, or its values quantized)."""
    out = dict(new)
    for k, name in enumerate(names):
        v = new.get(name)
        if not isinstance(v, torch.Tensor):
            continue
        n = v.numel()
        if not v.any():
            out[name] = torch.zeros(v.shape, dtype=torch.uint8)
            out[name + ABSMAX] = torch.zeros(blocks(n), dtype=torch.float32)
            continue
        s = State8bit.quantize(v.detach().to(torch.float32).numpy(), not unsigned(row, k))
        out[name] = torch.from_numpy(s.codes)
        out[name + ABSMAX] = torch.from_numpy(s.absmax)
    return out


def floats(st: dict, names) -> dict:
    """The rule's states a parameter holds in float where 8-bit ones are
    kept (made before the first step, as torch's Adagrad makes its sums),
    for the step to store them 8-bit (:func:`quantized`)."""
    return {n: st[n] for n in names if isinstance(st.get(n), torch.Tensor)
            and st[n].is_floating_point() and n + ABSMAX not in st}


def view(f, where, row, k, p, name, st: dict) -> State8bit:
    """The step's State8bit over p's 8-bit state ``name`` (slot k): its codes
    and absmax tensors' memory, checked (TypeError/ValueError naming the
    entry; nothing is written)."""
    if not p.is_contiguous():
        raise ValueError(f"{f}: {where} is not contiguous (channels_last, or a transposed "
                         f"view?); 8-bit states are kept for contiguous parameters: make "
                         f"it contiguous, or give its group state_dtype='float32'")
    codes, absmax = st.get(name), st.get(name + ABSMAX)
    for key, t, dtype, shape in ((name, codes, torch.uint8, tuple(p.shape)),
                                 (name + ABSMAX, absmax, torch.float32, (blocks(p.numel()),))):
        what = f"state[{key!r}] of {where}"
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{f}: {what} must be a tensor (8-bit states: "
                            f"state_dtype='{Q8}'), got {type(t).__name__}")
        if t.dtype != dtype or tuple(t.shape) != shape:
            raise ValueError(f"{f}: {what} has dtype {t.dtype} and shape {tuple(t.shape)}; "
                             f"this optimizer keeps it as {dtype} of shape {shape}")
        if t.device.type != "cpu" or not t.is_contiguous() or t.requires_grad:
            raise ValueError(f"{f}: {what} must be a contiguous CPU tensor without grad")
    return State8bit(codes.numpy(), absmax.numpy(), not unsigned(row, k))


def from_bitsandbytes(opt, state_dict):
    """bitsandbytes' layout of a state dict (its 8-bit optimizers' keys
    ``state1``, ``state2``, ``absmax1``, ``absmax2``, ``qmap1``, ``qmap2``, the
    8-bit ones nested under ``__bnb_optimizer_quant_state__``) as this
    optimizer's keys, and a group's ``betas`` as the hyperparameters they
    hold; a state dict without them is returned as it is. A map other than
    bitsandbytes' dynamic one raises ValueError."""
    if not isinstance(state_dict, dict) or not isinstance(state_dict.get("state"), dict):
        return state_dict
    groups = state_dict.get("param_groups")
    if isinstance(groups, list):
        groups = [_group_from_bnb(opt, g) if isinstance(g, dict) else g for g in groups]
        state_dict = {**state_dict, "param_groups": groups}
    states = state_dict["state"]
    if not any(isinstance(s, dict) and ("state1" in s or BNB_NESTED in s)
               for s in states.values()):
        return state_dict
    f = f"fastopt.torch.{type(opt).__name__}.load_state_dict"
    names_at = _names(opt, f, groups if isinstance(groups, list) else None)
    out = {}
    for i, s in states.items():
        if not isinstance(s, dict) or not isinstance(s.get(BNB_NESTED, {}), dict):
            raise TypeError(f"{f}: state {i!r} must be a dict, and its {BNB_NESTED!r} one "
                            f"too (bitsandbytes' layout)")
        s = dict(s)
        s.update(s.pop(BNB_NESTED, {}))
        new = {k: v for k, v in s.items() if not k.startswith(("state", "absmax", "qmap"))}
        names = names_at[i] if isinstance(i, int) and 0 <= i < len(names_at) else ()
        for k, name in enumerate(names):
            j = k + 1
            if f"state{j}" in s:
                new[name] = s[f"state{j}"]
            if f"absmax{j}" in s:
                new[name + ABSMAX] = s[f"absmax{j}"]
            q = s.get(f"qmap{j}")
            if q is not None and not isinstance(q, torch.Tensor):
                raise TypeError(f"{f}: state {i}'s qmap{j} must be a tensor (bitsandbytes' "
                                f"map), got {type(q).__name__}")
            if q is not None and (q.dtype != torch.float32 or not np.array_equal(
                    q.detach().cpu().reshape(-1).numpy().view(np.uint32),
                    dynamic_map(not unsigned(opt._ROW, k)).view(np.uint32))):
                raise ValueError(f"{f}: state {i}'s qmap{j} is not bitsandbytes' dynamic "
                                 f"map, the only map fastopt's 8-bit states use")
        if isinstance(new.get("step"), (int, float)):      # bitsandbytes counts in an int
            new["step"] = torch.tensor(float(new["step"]))
        out[i] = new
    return {**state_dict, "state": out}


def _group_from_bnb(opt, g: dict) -> dict:
    """One of bitsandbytes' groups with this rule's hyperparameters under
    their own names (BNB_BETAS; bitsandbytes' betas win over the names'
    values, which a state dict made by :func:`to_bitsandbytes` holds too).
    Another group has no betas, or not of these rows, and is kept."""
    names = BNB_BETAS.get(opt._ROW)
    g = dict(g)
    if names is not None and "betas" in g:
        betas = g.pop("betas")
        if isinstance(betas, (tuple, list)):
            g.update(zip(names, betas))
    if "eps" not in opt.defaults:
        g.pop("eps", None)
    return g


def _group_to_bnb(opt, g: dict) -> dict:
    names = BNB_BETAS.get(opt._ROW)
    g = dict(g)
    if names is not None:
        g["betas"] = tuple(g[k] for k in names) or (0.0, 0.0)
    g.setdefault("eps", 0.0)
    return g


def to_bitsandbytes(opt) -> dict:
    """opt's state dict in bitsandbytes' layout (``state1``/``state2``; for
    8-bit states also ``absmax1``/``absmax2`` and the maps ``qmap1``/
    ``qmap2``, nested under ``__bnb_optimizer_quant_state__`` as
    bitsandbytes' own ``state_dict`` nests them; the count an int, 1 for
    SGD, which keeps none; each group with bitsandbytes' ``betas`` and ``eps`` too), for its
    optimizers' ``load_state_dict``. LAMB and LARS are refused: they are
    optax's rules, and bitsandbytes' optimizers of those names clip the
    update instead (LARS's trace also holds steps scaled by -lr)."""
    if getattr(opt, "_ROW", None) in ("lamb", "lars"):
        raise ValueError(f"fastopt.torch.to_bitsandbytes: {type(opt).__name__} is optax's "
                         f"rule; bitsandbytes' {type(opt).__name__}8bit follows another "
                         f"(it clips the update by max_unorm), so its state would be "
                         f"misread there")
    sd = opt.state_dict()
    names_at = _names(opt, "fastopt.torch.to_bitsandbytes")
    out = {}
    for i, s in sd["state"].items():
        names = names_at[i]
        new = {k: v for k, v in s.items()
               if k not in names and not (k.endswith(ABSMAX) and k[:-len(ABSMAX)] in names)}
        nested = {}
        for k, name in enumerate(names):
            j = k + 1
            if name not in s:
                continue
            if name + ABSMAX in s:
                nested[f"state{j}"] = s[name]
                nested[f"absmax{j}"] = s[name + ABSMAX]
                nested[f"qmap{j}"] = torch.from_numpy(dynamic_map(not unsigned(opt._ROW, k)))
            else:
                new[f"state{j}"] = s[name]
        if nested:
            new[BNB_NESTED] = nested
        if isinstance(new.get("step"), torch.Tensor):
            new["step"] = int(new["step"].item())
        elif "step" not in new:     # torch's SGD keeps no count; bitsandbytes' reads
            new["step"] = 1         # it only to start its buffer at its first step
        out[i] = new
    return {**sd, "state": out, "param_groups": [_group_to_bnb(opt, g)
                                                  for g in sd["param_groups"]]}


def check_loaded(opt, state_dict) -> None:
    """The 8-bit states of a state dict (in this optimizer's keys) that
    load_state_dict is about to take, checked as a step checks them
    (:func:`view`: codes and absmax of the parameter's sizes), under the
    groups' ``state_dtype`` the dict brings; TypeError/ValueError, and
    nothing replaced, for one that the next step would refuse. A dict
    torch's own load_state_dict refuses (groups that do not match) is left
    to it. An optimizer without 8-bit states refuses any (torch would cast
    the codes to float moments)."""
    if not isinstance(state_dict, dict):
        return
    f = f"fastopt.torch.{type(opt).__name__}.load_state_dict"
    st, groups = state_dict.get("state"), state_dict.get("param_groups")
    if not opt._mixed.q8:
        for i, s in (st.items() if isinstance(st, dict) else ()):
            coded = _coded(s, s) if isinstance(s, dict) else []
            if coded:
                fix = (f": build it with state_dtype='{Q8}'" if opt._ROW in _rules.ID
                       and _rules.RULES[_rules.ID[opt._ROW]].q8 >= 0 else
                       f" ({type(opt).__name__} has no 8-bit form)")
                raise ValueError(f"{f}: state {i!r} holds 8-bit states ({coded[0]!r}); this "
                                 f"optimizer keeps float states{fix}")
        return
    if not isinstance(st, dict) or not isinstance(groups, list) or len(groups) != len(
            opt.param_groups) or not all(isinstance(g, dict) for g in groups):
        return
    names_at = _names(opt, f, groups)
    pos = 0
    for gi, (g, mine) in enumerate(zip(groups, opt.param_groups)):
        ids = g.get("params", ())
        if not isinstance(ids, (list, tuple)) or len(ids) != len(mine["params"]):
            return
        group8 = group_eight(f, gi, g, True)
        for i, p in zip(ids, mine["params"]):
            s, names = st.get(i), names_at[pos]
            pos += 1
            if not isinstance(s, dict):
                continue
            where = f"state {i!r} (param_groups[{gi}]['params'])"
            if not eight(opt._mixed, p, group8):
                coded = _coded(s, names)
                if coded:       # (a step would refuse them: codes for float states)
                    why = ("its group's state_dtype is 'float32'" if not group8 else
                           f"its {p.numel()} elements are under min_8bit_size="
                           f"{opt._mixed.min_8bit_size}: build it with the min_8bit_size "
                           f"the states were saved with")
                    raise ValueError(f"{f}: {where} holds 8-bit states ({coded[0]!r}), and "
                                     f"this optimizer keeps that parameter's states in "
                                     f"float32 ({why})")
                continue
            fl = floats(s, names)
            for k, name in enumerate(names):
                if name not in fl and (name in s or name + ABSMAX in s):
                    view(f, where, opt._ROW, k, p, name, s)
                    if (s[name + ABSMAX] < 0).any():     # no step writes one
                        raise ValueError(f"{f}: state[{name + ABSMAX!r}] of {where} holds a "
                                         f"negative value")


def _coded(s: dict, names) -> list:
    """The entries among names that state s holds as 8-bit codes."""
    return [n for n in names if isinstance(n, str) and not n.endswith(ABSMAX) and (
        n + ABSMAX in s or (isinstance(s.get(n), torch.Tensor) and s[n].dtype == torch.uint8))]


def saved_codes(opt, state_dict) -> dict:
    """Before torch's load_state_dict casts every state tensor of a float
    parameter to its dtype: (parameter position, key) -> the saved uint8
    codes (8-bit states), to put back after it (:func:`restore_codes`)."""
    if not opt._mixed.q8 or not isinstance(state_dict, dict):
        return {}
    saved_ids = [i for g in state_dict.get("param_groups", ()) for i in g.get("params", ())]
    st = state_dict.get("state", {})
    return {(pos, k): v for pos, i in enumerate(saved_ids)
            for k, v in (st.get(i) or {}).items()
            if isinstance(v, torch.Tensor) and v.dtype == torch.uint8}


def restore_codes(opt, saved: dict) -> None:
    """After torch's load_state_dict: the saved codes again as uint8, copies
    (torch's cast made new tensors of them), and their absmax copied too
    (torch kept the loaded float32 tensor), so that a step never writes
    one half of a state another optimizer or dict still holds."""
    params = [p for g in opt.param_groups for p in g["params"]]
    for (pos, k), v in saved.items():
        st = opt.state[params[pos]]
        st[k] = v.detach().to(device=params[pos].device, copy=True)
        if isinstance(st.get(k + ABSMAX), torch.Tensor):
            st[k + ABSMAX] = st[k + ABSMAX].detach().clone()


def _names(opt, f, groups=None) -> list:
    """Per parameter (in state-dict order), its group's rule state names,
    in slot order, under the hyperparameters of ``groups`` (a state dict's,
    about to replace the optimizer's) where given, else the optimizer's
    own; TypeError/ValueError (from f) for hyperparameters a step refuses."""
    out = []
    for gi, group in enumerate(opt.param_groups):
        if groups is not None and gi < len(groups) and isinstance(groups[gi], dict):
            # (as load_state_dict leaves it: the defaults under the saved keys)
            group = {**opt.defaults, **groups[gi], "params": group["params"]}
        names = opt._group_fields(opt._checked(f, group, gi))[1]
        out += [names] * len(group["params"])
    return out


__all__ = ["Q8", "ABSMAX", "BLOCK", "from_bitsandbytes", "to_bitsandbytes"]
