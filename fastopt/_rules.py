"""The update rules of the whole step: one row each, in the C table's order.

This is the Python side of ``src_c/tables.h``'s ``FO_RULE_TABLE`` (the C
id of a rule is its row's index here; ``tests/test_tables.py`` asserts that
the rows agree with what the compiled core reports). Everything in Python
that names a rule, numbers it or counts its states reads it from here.

A row: the rule's name, the names of its states s1..s3 (for messages; the
most a group of the rule may use), the smallest step count t its groups
may have, whether 16-bit parameters may be updated in their own type, and
its 8-bit states (the slots on the unsigned map, and how many of its
states, as a group packs them, have an 8-bit form: a group whose options
use more cannot have 8-bit states). A rule of TORCH_RULES also carries here, once for every front
end, its hyperparameters (torch's names, bounds and defaults) and the
mapping from them to its C group (its TorchRule row).
"""
from __future__ import annotations

from typing import NamedTuple


class Rule(NamedTuple):
    name: str
    states: tuple
    t0: int
    own16: bool = True      # 16-bit parameters may be updated in their own type
    q8: int = -1            # -1: no 8-bit states; else its slots on the unsigned map
    q8n: int = 0            # how many of its states (s1 on) have an 8-bit form


# group flags (fo_step_group.flags)
NESTEROV, AMSGRAD, MAXIMIZE, CENTERED = 1, 2, 4, 8

RULES = (
    Rule("momentum", ("v",), 0),
    Rule("adagrad", ("h",), 0),
    Rule("adam", ("v", "h"), 0),
    Rule("sgd_torch", ("momentum_buffer",), 0, q8=0, q8n=1),
    Rule("adagrad_torch", ("sum",), 1, q8=0, q8n=1),
    Rule("adam_torch", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"), 1, q8=2, q8n=2),
    Rule("adamw_torch", ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"), 1, q8=2, q8n=2),
    Rule("rmsprop_torch", ("square_avg", "momentum_buffer", "grad_avg"), 1, q8=0, q8n=1),
    Rule("adamax_torch", ("exp_avg", "exp_inf"), 1),
    Rule("adadelta_torch", ("square_avg", "acc_delta"), 1),
    Rule("radam_torch", ("exp_avg", "exp_avg_sq"), 1),
    Rule("lion", ("exp_avg",), 1, q8=0, q8n=1),
    Rule("nadam_torch", ("exp_avg", "exp_avg_sq"), 1),
    Rule("ademamix", ("exp_avg_fast", "exp_avg_slow", "exp_avg_sq"), 1),
    # their trust pass reads float parameters: no 16-bit ones in their own type
    Rule("lamb", ("exp_avg", "exp_avg_sq"), 1, own16=False, q8=2, q8n=2),
    Rule("lars", ("momentum_buffer",), 1, own16=False, q8=0, q8n=1),
)

#: name -> C id
ID = {r.name: i for i, r in enumerate(RULES)}


def needs(group: tuple) -> int:
    """How many states a group (in the fast path's tuple form: rule, flags,
    t, lr, alpha, beta, ...) uses: torch SGD without momentum none, torch
    Adam(W) the third only with amsgrad, torch RMSprop its buffer and
    average only with momentum and centring, every other rule all of its
    row's (src_c/step.c step_states_needed is its twin)."""
    rule, flags = group[0], group[1]
    if rule == ID["sgd_torch"]:
        return 1 if group[4] != 0.0 else 0
    if rule in (ID["adam_torch"], ID["adamw_torch"]):
        return 3 if flags & AMSGRAD else 2
    if rule == ID["rmsprop_torch"]:
        return 1 + (group[5] != 0.0) + bool(flags & CENTERED)
    return len(RULES[rule].states)


# ---- rules described once for every front end ---------------------------------
# A rule added as a TorchRule row gets its public function (fastopt.<name>),
# its fastopt.optim class and its fastopt.torch drop-in from the generic
# builders (fastopt/_torchform.py, fastopt/optim/_generic.py,
# fastopt/torch/_generic.py); what else it needs (its C body and
# coefficients, its table rows, its NumPy reference) is the checklist
# "Adding a rule" in docs/architecture.md.

class Arg(NamedTuple):
    """One of torch's constructor arguments: its name and default, and its
    check: "lr", "bool", "betas" (a pair, each in [0, 1)), "betas3" (three
    of them), "warmup" (None or a whole number of steps >= 1), the bounds of
    a real number (check_real's keywords), or None for a torch flag fastopt
    supports only at its default."""
    name: str
    default: object
    check: object
    doc: str = ""


#: how the docstrings name each check kind's type
_DOC_TYPES = {"bool": "bool", "betas": "(float, float)", "betas3": "(float, float, float)",
              "warmup": "int or None"}


def doc_type(arg: Arg) -> str:
    """The type of an argument, as a numpydoc parameter line names it."""
    return _DOC_TYPES.get(arg.check, "float") if isinstance(arg.check, str) else "float"


class Carry(NamedTuple):
    """A scalar a rule carries from step to step beside its state arrays
    (torch keeps it in each parameter's state, fastopt.optim in each
    parameter group). ``advance(h, t, value)``: for the checked
    hyperparameters h, the step count t and the value before the step (a
    NumPy float32 or float64 scalar: its type is the rounding torch's
    scalar tensor has), the C group's ``extra`` values and the value after
    the step (of the same type), which is kept only if the step applied.
    Its value lies in [0, 1] (the front ends check it)."""
    name: str
    start: float
    advance: object
    doc: str


class TorchRule(NamedTuple):
    name: str            # the public function: fastopt.<name>
    cls: str             # the class in fastopt.optim and fastopt.torch
    row: str             # its RULES row
    args: tuple          # Arg rows, in torch's constructor order (after params)
    states: tuple        # torch's state names, in slot order when all are used
    needs: dict          # state -> the condition that asks for it (for messages)
    slots: object        # checked hyperparameters -> the states used, packed
    fields: object       # checked hyperparameters -> the C group's fields (no t)
    summary: str
    formula: str
    keyword_from: str = ""   # torch's first keyword-only argument, if any
    counted: bool = False    # the update reads torch's step count (bias correction)
    carry: Carry | None = None   # a scalar state beside the arrays (NAdam's mu_product)
    per_tensor: bool = False     # reads a norm of each whole tensor (a trust ratio): a
    #                              shard cuts it at the norm's blocks, a flat buffer never joins it


def _rmsprop_slots(h) -> tuple:
    return (("square_avg",) + (("momentum_buffer",) if h["momentum"] != 0 else ())
            + (("grad_avg",) if h["centered"] else ()))


def _rmsprop_fields(h) -> dict:
    return {"rule": ID["rmsprop_torch"], "lr": h["lr"], "alpha": h["alpha"],
            "beta": h["momentum"], "eps": h["eps"], "decay": h["weight_decay"],
            "flags": (CENTERED if h["centered"] else 0) | (MAXIMIZE if h["maximize"] else 0)}


_NONNEG = {"low": 0.0}

RMSPROP = TorchRule(
    name="rmsprop", cls="RMSprop", row="rmsprop_torch",
    args=(Arg("lr", 1e-2, "lr", "Learning rate (>= 0)."),
          Arg("alpha", 0.99, _NONNEG, "Smoothing constant (>= 0)."),
          Arg("eps", 1e-8, _NONNEG, "Added to the root of the average (>= 0)."),
          Arg("weight_decay", 0.0, _NONNEG, "L2 penalty added to the gradient (>= 0)."),
          Arg("momentum", 0.0, _NONNEG, "Momentum of the update (>= 0)."),
          Arg("centered", False, "bool", "Normalise by the variance estimate."),
          Arg("capturable", False, None), Arg("foreach", None, None),
          Arg("maximize", False, "bool", "Maximise the objective."),
          Arg("differentiable", False, None)),
    states=("square_avg", "momentum_buffer", "grad_avg"),
    needs={"momentum_buffer": "momentum > 0", "grad_avg": "centered=True"},
    slots=_rmsprop_slots, fields=_rmsprop_fields,
    summary="RMSprop as torch.optim.RMSprop computes it",
    formula="""u_r = u + weight_decay * x                    # weight_decay != 0
sq = sq * alpha + ((1 - alpha) * u_r) * u_r
ga = ga + (1 - alpha) * (u_r - ga)            # centered (torch's lerp_)
avg = sqrt(sq - ga * ga) + eps                # centered; else sqrt(sq) + eps
buf = buf * momentum + u_r / avg              # momentum > 0
x = x - lr * buf                              # momentum > 0; else
x = x + (-lr * u_r) / avg""")

def _adamax_fields(h) -> dict:
    b1, b2 = h["betas"]
    return {"rule": ID["adamax_torch"], "lr": h["lr"], "alpha": b1, "beta": b2,
            "eps": h["eps"], "decay": h["weight_decay"],
            "flags": MAXIMIZE if h["maximize"] else 0}


ADAMAX = TorchRule(
    name="adamax", cls="Adamax", row="adamax_torch",
    args=(Arg("lr", 2e-3, "lr", "Learning rate (>= 0)."),
          Arg("betas", (0.9, 0.999), "betas",
              "Decay rates of the first moment and of the infinity norm, each in [0, 1)."),
          Arg("eps", 1e-8, _NONNEG, "Added to the gradient's magnitude (>= 0)."),
          Arg("weight_decay", 0.0, _NONNEG, "L2 penalty added to the gradient (>= 0)."),
          Arg("foreach", None, None),
          Arg("maximize", False, "bool", "Maximise the objective."),
          Arg("differentiable", False, None), Arg("capturable", False, None)),
    states=("exp_avg", "exp_inf"), needs={},
    slots=lambda h: ("exp_avg", "exp_inf"), fields=_adamax_fields,
    summary="Adamax as torch.optim.Adamax computes it",
    formula="""u_r = u + weight_decay * x                    # weight_decay != 0
m = m + (1 - beta1) * (u_r - m)               # torch's lerp_
v = maximum(v * beta2, |u_r| + eps)           # NaN if either is NaN
x = x + (-lr / (1 - beta1**step) * m) / v""",
    keyword_from="maximize", counted=True)


def _adadelta_fields(h) -> dict:
    return {"rule": ID["adadelta_torch"], "lr": h["lr"], "alpha": h["rho"],
            "eps": h["eps"], "decay": h["weight_decay"],
            "flags": MAXIMIZE if h["maximize"] else 0}


ADADELTA = TorchRule(
    name="adadelta", cls="Adadelta", row="adadelta_torch",
    args=(Arg("lr", 1.0, "lr", "Scale of the update (>= 0)."),
          Arg("rho", 0.9, {"low": 0.0, "high": 1.0},
              "Decay rate of both running averages, in [0, 1]."),
          Arg("eps", 1e-6, _NONNEG, "Added under both square roots (>= 0)."),
          Arg("weight_decay", 0.0, _NONNEG, "L2 penalty added to the gradient (>= 0)."),
          Arg("foreach", None, None),
          Arg("capturable", False, None),
          Arg("maximize", False, "bool", "Maximise the objective."),
          Arg("differentiable", False, None)),
    states=("square_avg", "acc_delta"), needs={},
    slots=lambda h: ("square_avg", "acc_delta"), fields=_adadelta_fields,
    summary="Adadelta as torch.optim.Adadelta computes it",
    formula="""u_r = u + weight_decay * x                    # weight_decay != 0
sq = sq * rho + ((1 - rho) * u_r) * u_r
d = (sqrt(acc + eps) / sqrt(sq + eps)) * u_r
acc = acc * rho + ((1 - rho) * d) * d
x = x + (-lr) * d""",
    keyword_from="capturable")


def _radam_fields(h) -> dict:
    b1, b2 = h["betas"]
    wd, dec = h["weight_decay"], h["decoupled_weight_decay"]
    return {"rule": ID["radam_torch"], "lr": h["lr"], "alpha": b1, "beta": b2,
            "eps": h["eps"], "decay": 0.0 if dec else wd, "decay_post": wd if dec else 0.0,
            "flags": MAXIMIZE if h["maximize"] else 0}


RADAM = TorchRule(
    name="radam", cls="RAdam", row="radam_torch",
    args=(Arg("lr", 1e-3, "lr", "Learning rate (>= 0)."),
          Arg("betas", (0.9, 0.999), "betas",
              "Decay rates of the first and second moments, each in [0, 1)."),
          Arg("eps", 1e-8, _NONNEG, "Added to the root of the second moment (>= 0)."),
          Arg("weight_decay", 0.0, _NONNEG, "Weight decay (>= 0)."),
          Arg("decoupled_weight_decay", False, "bool",
              "Decay the parameters (x * (1 - lr * weight_decay)) instead of adding "
              "weight_decay * x to the gradient."),
          Arg("foreach", None, None),
          Arg("maximize", False, "bool", "Maximise the objective."),
          Arg("capturable", False, None), Arg("differentiable", False, None)),
    states=("exp_avg", "exp_avg_sq"), needs={},
    slots=lambda h: ("exp_avg", "exp_avg_sq"), fields=_radam_fields,
    summary="RAdam as torch.optim.RAdam computes it",
    formula="""x = x * (1 - lr * weight_decay)                # decoupled_weight_decay
u_r = u + weight_decay * x                    # weight_decay != 0, not decoupled
m = m + (1 - beta1) * (u_r - m)               # torch's lerp_
v = v * beta2 + ((1 - beta2) * u_r) * u_r
rho_inf = 2 / (1 - beta2) - 1;  rho_t = rho_inf - 2 step beta2**step / (1 - beta2**step)
mh = m / (1 - beta1**step)
a = (1 / (sqrt(v) + eps)) * (1 - beta2**step)**0.5     # torch's scalar / tensor
x = x - ((mh * lr) * a) * r                   # rho_t > 5; else
x = x - mh * lr
  (r = sqrt((rho_t-4)(rho_t-2) rho_inf / ((rho_inf-4)(rho_inf-2) rho_t)))""",
    keyword_from="foreach", counted=True)


def _lion_fields(h) -> dict:
    b1, b2 = h["betas"]
    return {"rule": ID["lion"], "lr": h["lr"], "alpha": b1, "beta": b2,
            "decay": h["weight_decay"], "flags": MAXIMIZE if h["maximize"] else 0}


LION = TorchRule(
    name="lion", cls="Lion", row="lion",
    args=(Arg("lr", 1e-4, "lr", "Learning rate (>= 0)."),
          Arg("betas", (0.9, 0.99), "betas",
              "The interpolation weight of the update's sign (beta1) and the decay "
              "rate of the moment (beta2), each in [0, 1)."),
          Arg("weight_decay", 0.0, _NONNEG,
              "Decoupled weight decay: x * (1 - lr * weight_decay) first (>= 0)."),
          Arg("maximize", False, "bool", "Maximise the objective.")),
    states=("exp_avg",), needs={},
    slots=lambda h: ("exp_avg",), fields=_lion_fields,
    summary="Lion (optax's lion, bitsandbytes' Lion; not in torch.optim)",
    formula="""x = x * (1 - lr * weight_decay)
d = m * beta1 + (1 - beta1) * u
x = x + sign(d) * (-lr)                       # sign(+-0) = +-0, sign(NaN) = NaN
m = m * beta2 + (1 - beta2) * u""",
    keyword_from="maximize")

def _nadam_fields(h) -> dict:
    b1, b2 = h["betas"]
    wd, dec = h["weight_decay"], h["decoupled_weight_decay"]
    return {"rule": ID["nadam_torch"], "lr": h["lr"], "alpha": b1, "beta": b2,
            "eps": h["eps"], "decay": 0.0 if dec else wd, "decay_post": wd if dec else 0.0,
            "flags": MAXIMIZE if h["maximize"] else 0}


def _nadam_advance(h, t, product):
    """torch's momentum cache: mu_t and mu_{t+1} from the step in double,
    and mu_product *= mu_t in the product's own type (torch multiplies its
    scalar tensor by the Python float, rounded to the tensor's type)."""
    b1, md = h["betas"][0], h["momentum_decay"]
    mu = b1 * (1.0 - 0.5 * 0.96 ** (t * md))
    mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * md))
    kind = type(product)
    after = kind(product) * kind(mu)
    return (mu, mu_next, float(after)), after


NADAM = TorchRule(
    name="nadam", cls="NAdam", row="nadam_torch",
    args=(Arg("lr", 2e-3, "lr", "Learning rate (>= 0)."),
          Arg("betas", (0.9, 0.999), "betas",
              "Decay rates of the first and second moments, each in [0, 1)."),
          Arg("eps", 1e-8, _NONNEG, "Added to the root of the second moment (>= 0)."),
          Arg("weight_decay", 0.0, _NONNEG, "Weight decay (>= 0)."),
          Arg("momentum_decay", 4e-3, _NONNEG,
              "How fast the momentum schedule mu_t approaches beta1 (>= 0)."),
          Arg("decoupled_weight_decay", False, "bool",
              "Decay the parameters (x * (1 - lr * weight_decay)) instead of adding "
              "weight_decay * x to the gradient."),
          Arg("foreach", None, None),
          Arg("maximize", False, "bool", "Maximise the objective."),
          Arg("capturable", False, None), Arg("differentiable", False, None)),
    states=("exp_avg", "exp_avg_sq"), needs={},
    slots=lambda h: ("exp_avg", "exp_avg_sq"), fields=_nadam_fields,
    summary="NAdam as torch.optim.NAdam computes it",
    formula="""x = x * (1 - lr * weight_decay)                # decoupled_weight_decay
u_r = u + weight_decay * x                    # weight_decay != 0, not decoupled
mu_t = beta1 * (1 - 0.5 * 0.96**(step * momentum_decay))    # and mu_{t+1}
mu_product = mu_product * mu_t                # in mu_product's own type
m = m + (1 - beta1) * (u_r - m)               # torch's lerp_
v = v * beta2 + ((1 - beta2) * u_r) * u_r
d = sqrt(v / (1 - beta2**step)) + eps
x = x + ((-lr * (1 - mu_t) / (1 - mu_product)) * u_r) / d
x = x + ((-lr * mu_{t+1} / (1 - mu_product * mu_{t+1})) * m) / d""",
    keyword_from="foreach", counted=True,
    carry=Carry("mu_product", 1.0, _nadam_advance,
                "the product of the momentum schedule, 1.0 before the first step"))


def _ademamix_fields(h) -> dict:
    b1, b2, b3 = h["betas"]
    return {"rule": ID["ademamix"], "lr": h["lr"], "alpha": b1, "beta": b2,
            "eps": h["eps"], "decay": h["weight_decay"],
            "extra": (b3, h["alpha"], h["alpha_warmup"] or 0, h["beta3_warmup"] or 0,
                      h["eps_root"]),
            "flags": MAXIMIZE if h["maximize"] else 0}


ADEMAMIX = TorchRule(
    name="ademamix", cls="AdEMAMix", row="ademamix",
    args=(Arg("lr", 1e-3, "lr", "Learning rate (>= 0)."),
          Arg("betas", (0.9, 0.999, 0.9999), "betas3",
              "Decay rates of the fast moment, the second moment and the slow moment "
              "(beta1, beta2, beta3), each in [0, 1)."),
          Arg("alpha", 5.0, _NONNEG, "Weight of the slow moment (>= 0)."),
          Arg("alpha_warmup", None, "warmup",
              "Steps over which alpha rises linearly from 0 (None: no warmup)."),
          Arg("beta3_warmup", None, "warmup",
              "Steps over which beta3 rises from beta1, its half-life linearly "
              "(None: no warmup)."),
          Arg("eps", 1e-8, _NONNEG, "Added to the root of the second moment (>= 0)."),
          Arg("weight_decay", 0.0, _NONNEG,
              "Decoupled weight decay: weight_decay * x joins the update (>= 0)."),
          Arg("eps_root", 0.0, _NONNEG, "Added under the root (>= 0)."),
          Arg("maximize", False, "bool", "Maximise the objective.")),
    states=("exp_avg_fast", "exp_avg_slow", "exp_avg_sq"), needs={},
    slots=lambda h: ("exp_avg_fast", "exp_avg_slow", "exp_avg_sq"),
    fields=_ademamix_fields,
    summary="AdEMAMix (optax.contrib.ademamix; bitsandbytes' AdEMAMix names)",
    formula="""s = step - 1;  a = s / alpha_warmup;  b = s / beta3_warmup
alpha_s = a * alpha                           # s < alpha_warmup; else alpha
beta3_s = 0.5**(1 / (h + 1)),  h = (1 - b) * f(beta1) + b * f(beta3),
          f(beta) = ln(0.5) / ln(beta) - 1    # s < beta3_warmup; else beta3
m1 = (1 - beta1) * u + beta1 * m1
m2 = (1 - beta3_s) * u + beta3_s * m2
nu = (1 - beta2) * (u * u) + beta2 * nu
w = (m1 / (1 - beta1**step) + alpha_s * m2) / (sqrt(nu / (1 - beta2**step) + eps_root) + eps)
w = w + weight_decay * x                      # weight_decay != 0
x = x + (-lr) * w""",
    keyword_from="maximize", counted=True)

_TRUST_DOC = ("Scale each tensor's update by its trust ratio (False leaves the group out, "
              "as optax's masks leave out biases and norms).")


def _lamb_fields(h) -> dict:
    b1, b2 = h["betas"]
    return {"rule": ID["lamb"], "lr": h["lr"], "alpha": b1, "beta": b2, "eps": h["eps"],
            "decay": h["weight_decay"], "extra": (h["eps_root"], float(h["trust_ratio"])),
            "flags": MAXIMIZE if h["maximize"] else 0}


LAMB = TorchRule(
    name="lamb", cls="LAMB", row="lamb",
    args=(Arg("lr", 1e-3, "lr", "Learning rate (>= 0)."),
          Arg("betas", (0.9, 0.999), "betas",
              "Decay rates of the first and second moments, each in [0, 1)."),
          Arg("eps", 1e-6, _NONNEG, "Added to the root of the second moment (>= 0)."),
          Arg("eps_root", 0.0, _NONNEG, "Added under the root (>= 0)."),
          Arg("weight_decay", 0.0, _NONNEG,
              "weight_decay * x joins the update before the trust ratio (>= 0)."),
          Arg("trust_ratio", True, "bool", _TRUST_DOC),
          Arg("maximize", False, "bool", "Maximise the objective.")),
    states=("exp_avg", "exp_avg_sq"), needs={},
    slots=lambda h: ("exp_avg", "exp_avg_sq"), fields=_lamb_fields,
    summary="LAMB (optax.lamb)",
    formula="""m = (1 - beta1) * u + beta1 * m
v = (1 - beta2) * (u * u) + beta2 * v
w = (m / (1 - beta1**step)) / (sqrt(v / (1 - beta2**step) + eps_root) + eps)
w = w + weight_decay * x                      # weight_decay != 0
r = |x| / |w|  per tensor (1 if either is 0; trust_ratio=False: 1)
x = x + (-lr) * (w * r)""",
    keyword_from="maximize", counted=True, per_tensor=True)


def _lars_fields(h) -> dict:
    return {"rule": ID["lars"], "lr": h["lr"], "alpha": h["momentum"], "eps": h["eps"],
            "decay": h["weight_decay"],
            "extra": (h["trust_coefficient"], float(h["trust_ratio"])),
            "flags": (NESTEROV if h["nesterov"] else 0) | (MAXIMIZE if h["maximize"] else 0)}


LARS = TorchRule(
    name="lars", cls="LARS", row="lars",
    args=(Arg("lr", 0.1, "lr", "Learning rate (>= 0)."),
          Arg("momentum", 0.9, _NONNEG, "Decay of the trace (>= 0)."),
          Arg("weight_decay", 0.0, _NONNEG,
              "weight_decay * x joins the gradient before the trust ratio (>= 0)."),
          Arg("trust_coefficient", 0.001, _NONNEG, "Scale of the trust ratio (>= 0)."),
          Arg("eps", 0.0, _NONNEG, "Added to the update's norm in the ratio (>= 0)."),
          Arg("nesterov", False, "bool", "Nesterov's form of the trace."),
          Arg("trust_ratio", True, "bool", _TRUST_DOC),
          Arg("maximize", False, "bool", "Maximise the objective.")),
    states=("momentum_buffer",), needs={},
    slots=lambda h: ("momentum_buffer",), fields=_lars_fields,
    summary="LARS (optax.lars)",
    formula="""w = u + weight_decay * x                      # weight_decay != 0
r = trust_coefficient * |x| / (|w| + eps)  per tensor (1 if |x| or |w| is 0;
                                              trust_ratio=False: 1)
s = (-lr) * (w * r);  t = s + momentum * t
x = x + (s + momentum * t  if nesterov  else  t)""",
    keyword_from="maximize", per_tensor=True)

#: every rule built by the generic front ends, in the order they are listed
TORCH_RULES = (RMSPROP, ADAMAX, ADADELTA, RADAM, LION, NADAM, ADEMAMIX, LAMB, LARS)


def define(name: str, params: list, call: str, namespace: dict, module: str):
    """A function ``name`` with the real signature ``params`` (a list of
    source strings: "x", "lr=D['lr']", "*", ...) whose body is ``return
    <call>``: generated once per rule, so calls are parsed by the
    interpreter as for any function and ``help()`` shows the signature."""
    src = f"def {name}({', '.join(params)}):\n    return {call}\n"
    ns = dict(namespace)
    exec(src, ns)    # noqa: S102 (source made here from the table's names)
    fn = ns[name]
    fn.__module__ = module
    return fn


def torch_params(rule: TorchRule, default_src: str) -> list:
    """torch's constructor parameters after params, as source strings whose
    defaults read ``<default_src>[name]``, with torch's keyword-only mark."""
    out = []
    for a in rule.args:
        if a.name == rule.keyword_from:
            out.append("*")
        out.append(f"{a.name}={default_src}[{a.name!r}]")
    return out


def spec(rule: TorchRule) -> dict:
    """The checked hyperparameters of a rule: name -> check kind."""
    return {a.name: a.check for a in rule.args if a.check is not None}


def defaults(rule: TorchRule) -> dict:
    """torch's defaults of the checked hyperparameters."""
    return {a.name: a.default for a in rule.args if a.check is not None}
