"""Plain NumPy evaluation of the whole optimizer step.

The order inside one step (``docs/semantics.md``)::

    u = g / grad_scale                  unscale, in the gradient's dtype
    finite = all(isfinite(u))           skip the whole step if asked and not
    norm  = global norm of every u      2 or inf, accumulated in double
    u = u * coef  (torch)               clip by the global norm, or
    u = (u / norm) * max_norm (optax)
    u = clip(u, -clip_value, clip_value)
    u = -u                              maximize
    the update rule with u as the gradient (weight decay inside the rule)

Every function evaluates in the dtype of its arrays (float64 is the exact
formula; float32 is the same expression in float32 with the scalar
coefficients derived in double and rounded once), in the very order the C
step driver (src_c/step.c) uses, so the two agree bit for bit. The global
norm, too, is summed in the driver's fixed order (:func:`global_norm`).
Nothing here modifies its arguments.

The rules that are not ONNX follow torch 2.13's single-tensor code
(``torch.optim.SGD``, ``Adagrad``, ``Adam``, ``AdamW`` with the CPU default
``foreach=False``) operation by operation. torch evaluates ``a + alpha*b``
with a fused multiply-add in its vector loops; SGD's reference does the
same (:func:`fastopt._reference.fma.fma`), so fastopt's SGD equals torch's
bit for bit, and the other rules agree with torch to an ulp or so.
"""
from __future__ import annotations

import math

import numpy as np

from .fma import fma as _fma
from .ops import adagrad as _onnx_adagrad
from .ops import adam as _onnx_adam
from .ops import momentum as _onnx_momentum

#: Elements of a block of the norm reduction (each block is summed alone).
BLOCK = 4096
#: Independent double accumulators inside a block (element i -> lane i % LANES).
LANES = 32
#: torch's clip_grad_norm_ adds this to the norm before dividing.
TORCH_CLIP_EPS = 1e-6

def _quiet(fn):
    """Evaluate with NumPy's floating-point warnings off: NaN and Inf are
    values the step handles, not errors."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)
    return wrapper


RULES = ("momentum", "adagrad", "adam", "sgd_torch", "adagrad_torch",
         "adam_torch", "adamw_torch")


def _c(a):
    """The scalar type of array a (rounding of a double coefficient)."""
    return a.dtype.type


def _lerp(c, a, b, w):
    """torch's a.lerp_(b, w) in a's type c: a + w*(b - a) for |w| < 0.5, else
    b - (b - a)*(1 - w), with 1 - w taken in that type."""
    if abs(w) < 0.5:
        return a + c(w) * (b - a)
    return b - (b - a) * (c(1.0) - c(w))


@_quiet
def unscale(g, grad_scale=1.0):
    """``g / grad_scale`` in g's dtype (a scale of 1 divides by nothing)."""
    g = np.asarray(g)
    return g.copy() if grad_scale == 1.0 else g / _c(g)(grad_scale)


@_quiet
def _block_sumsq(u):
    """Sum of squares of one block, in double, in the driver's lane order."""
    a = np.zeros(-(-u.size // LANES) * LANES)
    a[:u.size] = u
    a = a.reshape(-1, LANES)
    lanes = np.add.reduce(a * a, axis=0)          # row after row, in order
    w = LANES // 2
    while w >= 1:                                 # the halving tree
        lanes[:w] += lanes[w:2 * w]
        w //= 2
    return float(lanes[0])


@_quiet
def global_norm(grads, *, grad_scale=1.0, norm_type=2.0):
    """Global norm of the unscaled gradients, exactly as the C driver sums it.

    Returns ``(norm, finite)``: ``norm`` is a Python float (2-norm: the square
    root of the sum of squares in double over blocks of :data:`BLOCK`
    elements of each gradient, in tensor then block order; inf-norm: the
    largest magnitude, NaN if any value is NaN), ``finite`` says whether every
    unscaled value is finite.
    """
    total = 0.0
    finite = True
    nan = False
    for g in grads:
        u = unscale(np.ravel(g), grad_scale)   # logical (C) order, whatever the layout
        finite = finite and bool(np.all(np.isfinite(u)))
        if norm_type == 2.0:
            ud = u.astype(np.float64)
            for b in range(0, u.size, BLOCK):
                total += _block_sumsq(ud[b:b + BLOCK])
        elif u.size:
            nan = nan or bool(np.isnan(u).any())
            total = max(total, float(np.max(np.abs(u.astype(np.float64)))))
    if norm_type == 2.0:
        return math.sqrt(total), finite
    if norm_type != math.inf:
        raise ValueError("norm_type must be 2.0 or inf")
    return (math.nan if nan else total), finite


def clip_coefficient(norm, max_norm):
    """torch's clip_grad_norm_ factor: min(1, max_norm / (norm + 1e-6)),
    NaN when the norm is NaN."""
    c = max_norm / (norm + TORCH_CLIP_EPS)
    return min(c, 1.0)


@_quiet
def transform(g, *, grad_scale=1.0, norm=None, max_norm=None,
              convention="torch", clip_value=None, maximize=False):
    """The gradient the update rule sees (g itself is not modified)."""
    u = unscale(g, grad_scale)
    c = _c(u)
    if max_norm is not None:
        if convention == "torch":
            coef = clip_coefficient(norm, max_norm)
            if coef != 1.0:
                u = u * c(coef)
        elif not norm < max_norm:                 # optax: NaN norms clip too
            u = (u / c(norm)) * c(max_norm)
    if clip_value is not None:
        u = np.clip(u, c(-clip_value), c(clip_value))
    return -u if maximize else u


# ---- torch-form rules ------------------------------------------------------

@_quiet
def sgd_torch(x, g, buf, *, lr, momentum=0.0, dampening=0.0, weight_decay=0.0,
              nesterov=False, first=True):
    """torch.optim.SGD, one step (g already negated if maximize), each
    ``a + s*b`` a fused multiply-add as in torch's kernels.

    ``first`` means no momentum buffer yet (torch then copies the gradient).
    Returns (x_new, buf_new); buf is returned unchanged without momentum.
    """
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    if weight_decay != 0.0:
        g = _fma(c(weight_decay), x, g)
    if momentum != 0.0:
        if first:
            buf = g.copy()
        else:
            buf = _fma(c(1.0 - dampening), g, np.asarray(buf, dtype=x.dtype) * c(momentum))
        g = _fma(c(momentum), buf, g) if nesterov else buf
    return _fma(c(-lr), g, x), (None if buf is None else np.array(buf))


@_quiet
def adagrad_torch(x, g, h, *, lr, step, lr_decay=0.0, weight_decay=0.0,
                  eps=1e-10):
    """torch.optim.Adagrad, one step; ``step`` is torch's 1-based count
    after its increment. Returns (x_new, h_new)."""
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    if weight_decay != 0.0:
        g = g + c(weight_decay) * x
    clr = lr / (1.0 + (step - 1) * lr_decay)
    h = np.asarray(h, dtype=x.dtype) + g * g
    std = np.sqrt(h) + c(eps)
    return x + (c(-clr) * g) / std, h


def _adam_moments(x, g, m, v, lr, beta1, beta2, weight_decay, decoupled):
    """The part torch's Adam, AdamW and RAdam share: the weight decay
    (decoupled: x scaled first; else added to g), m by torch's lerp_ and v
    by mul_ and addcmul_. Returns (x, the rounding function, m, v)."""
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    if weight_decay != 0.0:
        if decoupled:
            x = x * c(1.0 - lr * weight_decay)
        else:
            g = g + c(weight_decay) * x
    m = _lerp(c, np.asarray(m, dtype=x.dtype), g, 1.0 - beta1)
    v = np.asarray(v, dtype=x.dtype) * c(beta2) + (c(1.0 - beta2) * g) * g
    return x, c, m, v


@_quiet
def adam_torch(x, g, m, v, vmax=None, *, lr, step, beta1=0.9, beta2=0.999,
               eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False,
               decay_after=False):
    """torch.optim.Adam (decoupled=False) or AdamW (decoupled=True), one step;
    decay_after makes the decay decoupled, scaling x by ``1 - lr * weight_decay``
    after the update (bitsandbytes' CUDA order, for its Adam and AdamW alike).
    ``step`` is torch's 1-based count after its increment. Returns (x_new,
    m_new, v_new, vmax_new); vmax_new is None without amsgrad.
    """
    after = decay_after and weight_decay != 0.0
    x, c, m, v = _adam_moments(x, g, m, v, lr, beta1, beta2, 0.0 if after else weight_decay,
                               decoupled or decay_after)
    if amsgrad:
        vmax = np.asarray(vmax, dtype=x.dtype)
        vmax = np.where(vmax > v, vmax, v)
        d = vmax
    else:
        vmax, d = None, v
    bc2_sqrt = (1.0 - beta2 ** step) ** 0.5
    step_size = lr / (1.0 - beta1 ** step)
    denom = np.sqrt(d) / c(bc2_sqrt) + c(eps)
    x = x + (c(-step_size) * m) / denom
    return (x * c(1.0 - lr * weight_decay) if after else x), m, v, vmax


@_quiet
def rmsprop_torch(x, g, sq, buf=None, ga=None, *, lr, alpha=0.99, eps=1e-8,
                  weight_decay=0.0, momentum=0.0, centered=False):
    """torch.optim.RMSprop, one step (g already negated if maximize), its
    operations in torch's order, each rounded to x's dtype. Returns
    (x_new, sq_new, buf_new, ga_new); buf_new / ga_new are None when unused.
    """
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    if weight_decay != 0.0:
        g = g + c(weight_decay) * x
    sq = np.asarray(sq, dtype=x.dtype) * c(alpha) + (c(1.0 - alpha) * g) * g
    var = sq
    if centered:
        ga = _lerp(c, np.asarray(ga, dtype=x.dtype), g, 1.0 - alpha)
        var = sq + (-ga) * ga
    else:
        ga = None
    avg = np.sqrt(var) + c(eps)
    if momentum != 0.0:
        buf = np.asarray(buf, dtype=x.dtype) * c(momentum) + g / avg
        return x + c(-lr) * buf, sq, buf, ga
    return x + (c(-lr) * g) / avg, sq, None, ga


@_quiet
def adamax_torch(x, g, m, u, *, lr, step, beta1=0.9, beta2=0.999, eps=1e-8,
                 weight_decay=0.0):
    """torch.optim.Adamax, one step (g already negated if maximize), in
    torch's order, each operation rounded to x's dtype; ``step`` is torch's
    count after its increment. Returns (x_new, m_new, u_new)."""
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    if weight_decay != 0.0:
        g = g + c(weight_decay) * x
    m = _lerp(c, np.asarray(m, dtype=x.dtype), g, 1.0 - beta1)
    u = np.maximum(np.asarray(u, dtype=x.dtype) * c(beta2), np.abs(g) + c(eps))
    clr = lr / (1.0 - beta1 ** step)
    return x + (c(-clr) * m) / u, m, u


@_quiet
def adadelta_torch(x, g, sq, acc, *, lr, rho=0.9, eps=1e-6, weight_decay=0.0):
    """torch.optim.Adadelta, one step (g already negated if maximize), in
    torch's order, each operation rounded to x's dtype. Returns (x_new,
    sq_new, acc_new)."""
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    if weight_decay != 0.0:
        g = g + c(weight_decay) * x
    sq = np.asarray(sq, dtype=x.dtype) * c(rho) + (c(1.0 - rho) * g) * g
    std = np.sqrt(sq + c(eps))
    acc = np.asarray(acc, dtype=x.dtype)
    d = (np.sqrt(acc + c(eps)) / std) * g
    acc = acc * c(rho) + (c(1.0 - rho) * d) * d
    return x + c(-lr) * d, sq, acc


@_quiet
def radam_torch(x, g, m, v, *, lr, step, beta1=0.9, beta2=0.999, eps=1e-8,
                weight_decay=0.0, decoupled=False):
    """torch.optim.RAdam, one step (g already negated if maximize), in
    torch's order, each operation rounded to x's dtype; the rectification
    in double from ``step`` (torch's count after its increment), as torch.
    Returns (x_new, m_new, v_new)."""
    x, c, m, v = _adam_moments(x, g, m, v, lr, beta1, beta2, weight_decay, decoupled)
    bc1, bc2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
    mh = m / c(bc1)
    rho_inf = 2.0 / (1.0 - beta2) - 1.0
    rho_t = rho_inf - 2.0 * step * (beta2 ** step) / bc2
    if rho_t > 5.0:
        rect = ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
                / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t)) ** 0.5
        # torch's Python scalar / tensor: the reciprocal, then the product
        adaptive = (c(1.0) / (np.sqrt(v) + c(eps))) * c(bc2 ** 0.5)
        return x - ((mh * c(lr)) * adaptive) * c(rect), m, v
    return x - mh * c(lr), m, v


@_quiet
def lion(x, g, m, *, lr, beta1=0.9, beta2=0.99, weight_decay=0.0):
    """Lion, one step (g already negated if maximize), each operation
    rounded to x's dtype: the decoupled decay first, the sign of the
    interpolation (jnp.sign's: a zero keeps its sign, NaN stays NaN), the
    moment last. Returns (x_new, m_new)."""
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    m = np.asarray(m, dtype=x.dtype)
    x = x * c(1.0 - lr * weight_decay)
    d = m * c(beta1) + c(1.0 - beta1) * g
    s = np.where(d > 0, c(1.0), np.where(d < 0, c(-1.0), d))
    return x + s * c(-lr), m * c(beta2) + c(1.0 - beta2) * g


@_quiet
def nadam_torch(x, g, m, v, mu_product, *, lr, step, beta1=0.9, beta2=0.999, eps=1e-8,
                weight_decay=0.0, momentum_decay=4e-3, decoupled=False):
    """torch.optim.NAdam, one step (g already negated if maximize), in
    torch's order, each operation rounded to x's dtype. ``mu_product`` is
    torch's state before the step, a NumPy float32 or float64 scalar (the
    type of torch's scalar tensor): it is multiplied by mu_t in that type.
    Returns (x_new, m_new, v_new, mu_product_new)."""
    mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))
    mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * momentum_decay))
    kind = type(mu_product)
    product = kind(mu_product) * kind(mu)
    out = nadam_update(x, g, m, v, lr=lr, step=step, mu=mu, mu_next=mu_next,
                       product=float(product), beta1=beta1, beta2=beta2, eps=eps,
                       weight_decay=weight_decay, decoupled=decoupled)
    return (*out, product)


@_quiet
def nadam_update(x, g, m, v, *, lr, step, mu, mu_next, product, beta1, beta2, eps,
                 weight_decay, decoupled):
    """torch NAdam's update given its momentum cache (mu_t, mu_{t+1} and
    mu_product after this step's product): the two addcdiv_ values in
    double, as torch's Python floats. Returns (x_new, m_new, v_new)."""
    x, c, m, v = _adam_moments(x, g, m, v, lr, beta1, beta2, weight_decay, decoupled)
    gr = np.asarray(g, dtype=x.dtype)
    if weight_decay != 0.0 and not decoupled:
        gr = gr + c(weight_decay) * np.asarray(x)
    d = np.sqrt(v / c(1.0 - beta2 ** step)) + c(eps)
    x = x + (c(-lr * (1.0 - mu) / (1.0 - product)) * gr) / d
    return x + (c((-lr * mu_next) / (1.0 - product * mu_next)) * m) / d, m, v


def ademamix_schedules(step, *, alpha, beta1, beta3, alpha_warmup=None,
                       beta3_warmup=None):
    """AdEMAMix's alpha and beta3 at ``step`` (1-based): the paper's warmups
    as its authors' optax code writes them, at the 0-based count step - 1
    (optax calls a schedule with the count before the update). alpha rises
    linearly from 0; beta3 from beta1, its half-life ln(0.5)/ln(beta) - 1
    linearly. Evaluated as C's log and pow do (log 0 = -inf)."""
    s = float(step - 1)
    if alpha_warmup and s < alpha_warmup:
        alpha = (s / alpha_warmup) * alpha
    if beta3_warmup and s < beta3_warmup:
        a = s / beta3_warmup

        def half(b):   # log(0.5) / log(0) is -0 in C
            return (math.log(0.5) / math.log(b) if b > 0.0 else -0.0) - 1.0
        h = (1.0 - a) * half(beta1) + a * half(beta3) + 1.0
        beta3 = math.pow(0.5, 1.0 / h) if h != 0.0 else 0.0
    return alpha, beta3


@_quiet
def ademamix(x, g, m1, m2, nu, *, lr, step, beta1=0.9, beta2=0.999, beta3=0.9999,
             alpha=5.0, alpha_warmup=None, beta3_warmup=None, eps=1e-8, eps_root=0.0,
             weight_decay=0.0):
    """AdEMAMix as optax.contrib.ademamix computes it (then
    add_decayed_weights and the learning rate), one step (g already negated
    if maximize), each operation rounded to x's dtype, alpha and beta3 from
    :func:`ademamix_schedules`. Returns (x_new, m1_new, m2_new, nu_new)."""
    alpha, beta3 = ademamix_schedules(step, alpha=alpha, beta1=beta1, beta3=beta3,
                                      alpha_warmup=alpha_warmup, beta3_warmup=beta3_warmup)
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    m1 = c(1.0 - beta1) * g + c(beta1) * np.asarray(m1, dtype=x.dtype)
    m2 = c(1.0 - beta3) * g + c(beta3) * np.asarray(m2, dtype=x.dtype)
    nu = c(1.0 - beta2) * (g * g) + c(beta2) * np.asarray(nu, dtype=x.dtype)
    den = np.sqrt(nu / c(1.0 - beta2 ** step) + c(eps_root)) + c(eps)
    u = (m1 / c(1.0 - beta1 ** step) + c(alpha) * m2) / den
    if weight_decay != 0.0:
        u = u + c(weight_decay) * x
    return x + c(-lr) * u, m1, m2, nu


def _sumsq(a):
    """Sum of squares of an array, in double, as the trust pass sums it:
    blocks of :data:`BLOCK` in order, each in the norm pass's lanes."""
    a = np.ravel(a).astype(np.float64)
    total = 0.0
    for b in range(0, a.size, BLOCK):
        total += _block_sumsq(a[b:b + BLOCK])
    return total


def trust_ratio(x, w, *, coef=1.0, eps=0.0):
    """optax's scale_by_trust_ratio factor of one tensor, as the C trust pass
    computes it (norms in double, the driver's order): coef * |x| / (|w| +
    eps), 1 where |x| or |w| is 0; a Python float."""
    pn, un = math.sqrt(_sumsq(x)), math.sqrt(_sumsq(w))
    return 1.0 if pn == 0.0 or un == 0.0 else coef * pn / (un + eps)


@_quiet
def lamb(x, g, m, v, *, lr, step, beta1=0.9, beta2=0.999, eps=1e-6, eps_root=0.0,
         weight_decay=0.0, trust=True):
    """optax.lamb, one step (g already negated if maximize), each operation
    rounded to x's dtype, the trust ratio of :func:`trust_ratio` (rounded to
    x's dtype; 1 without ``trust``). Returns (x_new, m_new, v_new)."""
    x = np.array(x)
    c = _c(x)
    g = np.asarray(g, dtype=x.dtype)
    m = c(1.0 - beta1) * g + c(beta1) * np.asarray(m, dtype=x.dtype)
    v = c(1.0 - beta2) * (g * g) + c(beta2) * np.asarray(v, dtype=x.dtype)
    w = (m / c(1.0 - beta1 ** step)) / (np.sqrt(v / c(1.0 - beta2 ** step) + c(eps_root))
                                       + c(eps))
    if weight_decay != 0.0:
        w = w + c(weight_decay) * x
    r = trust_ratio(x, w) if trust else 1.0
    return x + c(-lr) * (w * c(r)), m, v


@_quiet
def lars(x, g, t, *, lr, momentum=0.9, weight_decay=0.0, trust_coefficient=0.001, eps=0.0,
         nesterov=False, trust=True):
    """optax.lars, one step (g already negated if maximize), each operation
    rounded to x's dtype, the trust ratio of :func:`trust_ratio`; t is the
    trace. Returns (x_new, t_new)."""
    x = np.array(x)
    c = _c(x)
    w = np.asarray(g, dtype=x.dtype)
    if weight_decay != 0.0:
        w = w + c(weight_decay) * x
    r = trust_ratio(x, w, coef=trust_coefficient, eps=eps) if trust else 1.0
    s = c(-lr) * (w * c(r))
    t = s + c(momentum) * np.asarray(t, dtype=x.dtype)
    return x + (s + c(momentum) * t if nesterov else t), t


# ---- the whole step ----------------------------------------------------------

def _table_rule(rule, x, u, s1, s2, s3, hp):
    """rule_update for the table's newer rules (None for another rule)."""
    if rule == "lion":
        xn, m = lion(x, u, s1, lr=hp["lr"], beta1=hp["alpha"], beta2=hp["beta"],
                     weight_decay=hp["decay"])
        return xn, (m, s2, s3)
    if rule == "nadam_torch":
        mu, mu_next, product = hp["extra"][:3]
        xn, m, v2 = nadam_update(x, u, s1, s2, lr=hp["lr"], step=hp["t"], mu=mu,
                                 mu_next=mu_next, product=product, beta1=hp["alpha"],
                                 beta2=hp["beta"], eps=hp["eps"],
                                 weight_decay=hp["decay"] or hp.get("decay_post", 0.0),
                                 decoupled=hp.get("decay_post", 0.0) != 0.0)
        return xn, (m, v2, s3)
    if rule == "radam_torch":
        xn, m, v2 = radam_torch(x, u, s1, s2, lr=hp["lr"], step=hp["t"], beta1=hp["alpha"],
                                beta2=hp["beta"], eps=hp["eps"],
                                weight_decay=hp["decay"] or hp.get("decay_post", 0.0),
                                decoupled=hp.get("decay_post", 0.0) != 0.0)
        return xn, (m, v2, s3)
    if rule == "adadelta_torch":
        xn, sq, acc = adadelta_torch(x, u, s1, s2, lr=hp["lr"], rho=hp["alpha"],
                                     eps=hp["eps"], weight_decay=hp["decay"])
        return xn, (sq, acc, s3)
    if rule == "adamax_torch":
        xn, m, u2 = adamax_torch(x, u, s1, s2, lr=hp["lr"], step=hp["t"], beta1=hp["alpha"],
                                 beta2=hp["beta"], eps=hp["eps"], weight_decay=hp["decay"])
        return xn, (m, u2, s3)
    if rule == "ademamix":
        e = hp["extra"]
        xn, m1, m2, nu = ademamix(x, u, s1, s2, s3, lr=hp["lr"], step=hp["t"],
                                  beta1=hp["alpha"], beta2=hp["beta"], beta3=e[0],
                                  alpha=e[1], alpha_warmup=e[2] or None,
                                  beta3_warmup=e[3] or None, eps_root=e[4], eps=hp["eps"],
                                  weight_decay=hp["decay"])
        return xn, (m1, m2, nu)
    if rule == "lamb":
        xn, m, v2 = lamb(x, u, s1, s2, lr=hp["lr"], step=hp["t"], beta1=hp["alpha"],
                         beta2=hp["beta"], eps=hp["eps"], eps_root=hp["extra"][0],
                         weight_decay=hp["decay"], trust=hp["extra"][1] != 0.0)
        return xn, (m, v2, s3)
    if rule == "lars":
        xn, t = lars(x, u, s1, lr=hp["lr"], momentum=hp["alpha"], weight_decay=hp["decay"],
                     trust_coefficient=hp["extra"][0], eps=hp["eps"],
                     nesterov=bool(hp.get("nesterov")), trust=hp["extra"][1] != 0.0)
        return xn, (t, s2, s3)
    return None


@_quiet
def rule_update(rule, x, u, states, hp):
    """Apply one rule to one tensor with the transformed gradient u.

    ``states`` is a tuple (s1, s2, s3); ``hp`` a dict of the group's
    hyperparameters with the C struct's names (lr, alpha, beta, eps, decay,
    decay_post, lr_decay, t, nesterov, amsgrad, decay_after). Returns (x_new,
    states_new).
    """
    s1, s2, s3 = (tuple(states) + (None, None, None))[:3]
    dt = x.dtype
    if rule == "momentum":
        xn, vn = _onnx_momentum(x, u, s1, lr=hp["lr"], t=hp["t"], alpha=hp["alpha"],
                                beta=hp["beta"], norm_coefficient=hp["decay"],
                                mode="nesterov" if hp.get("nesterov") else "standard",
                                dtype=dt)
        return xn, (vn, s2, s3)
    if rule == "adagrad":
        xn, hn = _onnx_adagrad(x, u, s1, lr=hp["lr"], t=hp["t"],
                               decay_factor=hp["lr_decay"], epsilon=hp["eps"],
                               norm_coefficient=hp["decay"], dtype=dt)
        return xn, (hn, s2, s3)
    if rule == "adam":
        xn, vn, hn = _onnx_adam(x, u, s1, s2, lr=hp["lr"], t=hp["t"], alpha=hp["alpha"],
                                beta=hp["beta"], epsilon=hp["eps"],
                                norm_coefficient=hp["decay"],
                                norm_coefficient_post=hp["decay_post"], dtype=dt)
        return xn, (vn, hn, s3)
    if rule == "sgd_torch":
        xn, b = sgd_torch(x, u, s1, lr=hp["lr"], momentum=hp["alpha"],
                          dampening=hp["beta"], weight_decay=hp["decay"],
                          nesterov=bool(hp.get("nesterov")), first=hp["t"] == 0)
        return xn, (b, s2, s3)
    if rule == "adagrad_torch":
        xn, hn = adagrad_torch(x, u, s1, lr=hp["lr"], step=hp["t"],
                               lr_decay=hp["lr_decay"], weight_decay=hp["decay"],
                               eps=hp["eps"])
        return xn, (hn, s2, s3)
    if rule in ("adam_torch", "adamw_torch"):
        xn, m, v, vm = adam_torch(x, u, s1, s2, s3, lr=hp["lr"], step=hp["t"],
                                  beta1=hp["alpha"], beta2=hp["beta"], eps=hp["eps"],
                                  weight_decay=hp["decay"],
                                  amsgrad=bool(hp.get("amsgrad")),
                                  decoupled=rule == "adamw_torch",
                                  decay_after=bool(hp.get("decay_after")))
        return xn, (m, v, vm if vm is not None else s3)
    out = _table_rule(rule, x, u, s1, s2, s3, hp)
    if out is not None:
        return out
    if rule == "rmsprop_torch":          # states packed: sq, then buf, then ga
        mom, cen = hp["beta"] != 0.0, bool(hp.get("centered"))
        xn, sq, b, ga = rmsprop_torch(x, u, s1, s2 if mom else None,
                                      (s3 if mom else s2) if cen else None, lr=hp["lr"],
                                      alpha=hp["alpha"], eps=hp["eps"],
                                      weight_decay=hp["decay"], momentum=hp["beta"],
                                      centered=cen)
        packed = [sq] + ([b] if mom else []) + ([ga] if cen else [])
        return xn, tuple(packed + [None] * (3 - len(packed)))
    raise ValueError(f"unknown rule {rule!r}")


@_quiet
def step(xs, gs, states, groups, index, *, grad_scale=1.0, check_finite=False,
         max_norm=None, norm_type=2.0, convention="torch", clip_value=None):
    """The whole step over every tensor, as fo_step computes it.

    xs, gs: lists of arrays; states[k]: tuple (s1, s2, s3) of tensor k;
    groups: list of dicts (``rule`` plus the hyperparameters of
    :func:`rule_update`, ``maximize``); index[k]: tensor k's group.
    Returns (applied, norm, xs_new, states_new); when the step is skipped
    (check_finite and some unscaled gradient is not finite), xs_new and
    states_new are copies of the inputs.
    """
    norm, finite = global_norm(gs, grad_scale=grad_scale, norm_type=norm_type)
    if check_finite and not finite:
        return (False, norm, [np.array(x) for x in xs],
                [tuple(None if s is None else np.array(s) for s in st) for st in states])
    xs_new, st_new = [], []
    for x, g, st, k in zip(xs, gs, states, index):
        hp = groups[k]
        u = transform(np.asarray(g, dtype=np.asarray(x).dtype), grad_scale=grad_scale,
                      norm=norm, max_norm=max_norm, convention=convention,
                      clip_value=clip_value, maximize=bool(hp.get("maximize")))
        xn, sn = rule_update(hp["rule"], np.asarray(x), u, st, hp)
        xs_new.append(xn)
        st_new.append(sn)
    return True, norm, xs_new, st_new
