/*
 * The whole optimizer step in one call: unscale, non-finite
 * check, global norm, clip by the global norm (torch or optax convention),
 * clip by value, maximize and the update rule of every tensor, each tensor
 * with its own group's hyperparameters. See fastopt.h for the API,
 * step_coefs.inc for each rule's coefficients and step.inc for the kernels.
 *
 * Plan of fo_step:
 *   0. check every tensor, group and option and derive every coefficient
 *      (nothing written before this succeeds);
 *   1. pass 1 (only if the step checks finiteness, clips or measures): the
 *      fixed-order norm of step_norm.c (step_measure);
 *   2. the trust pass (only if a group scales by a trust ratio: LAMB,
 *      LARS): each such tensor's |x| and |w| in a fixed order, nothing
 *      written (step_trust);
 *   3. pass 2: the update, through the core's elementwise driver
 *      (fo_run_elementwise); each piece turns g into u tile by tile in a
 *      stack buffer (g is never written) and runs the rule on the tile.
 */
#include "pool.h"
#include "step.h"

/* Elements of the stack tile of transformed gradients (pass 2). */
#define STEP_TILE 1024
/* Pieces of at most this many elements skip the vector loops (pass 2). */
#define STEP_SMALL 8
/* step_piece's head (the elements before x's first cache line) goes apart
 * in pieces at least this many times its length (step.inc) */
#define STEP_PEEL 16

/* The head of a piece of n elements of `size` bytes at x (step.inc's
 * step_piece, step_apart.inc's step_piece_apart): how many come before x's
 * first 64-byte boundary, or 0 where x is not element-aligned or the piece
 * too short to repay a call apart. */
static inline int64_t step_head(const void *x, size_t size, int64_t n)
{
    uintptr_t at = (uintptr_t)x;
    int64_t head = (int64_t)((-at & 63) / size);
    return head > 0 && at % size == 0 && n >= STEP_PEEL * head ? head : 0;
}

/* Gradient transform flags (step.inc step_transform). */
#define STEP_TF_DIV 1
#define STEP_TF_MUL 2
#define STEP_TF_DIVMUL 4
#define STEP_TF_CLAMP 8
#define STEP_TF_NEG 16

#include "step_coefs.inc"

/* Step-wide transform scalars: grad_scale, torch coef, norm, max_norm, cv,
 * and the exact inverse of grad_scale in that type (0 if it has none). */
typedef struct {
    double d[6];
    float f[6];
} step_coefs;

typedef struct {
    const fo_step_tensor *ts;
    const fo_tensor *base;    /* the view handed to fo_run_elementwise */
    const step_gcoef *gc;
    step_coefs k;
    int tf;
} step_plan;

/* How many states (s1 on) a group uses: torch SGD without momentum none,
 * torch Adam(W) the third only with amsgrad, torch RMSprop its buffer and
 * average only with momentum and centring (packed after s1), every other
 * rule all of its row's (tables.h). fastopt/_rules.py needs() is its twin. */
static int step_states_needed(const fo_step_group *g)
{
    switch (g->rule) {
    case FO_RULE_SGD_TORCH:
        return g->alpha != 0.0;
    case FO_RULE_ADAM_TORCH:
    case FO_RULE_ADAMW_TORCH:
        return 2 + ((g->flags & FO_STEP_AMSGRAD) != 0);
    case FO_RULE_RMSPROP_TORCH:
        return 1 + (g->beta != 0.0) + ((g->flags & FO_STEP_CENTERED) != 0);
    default:
        return fo_rule_info(g->rule).states;
    }
}

/* ---- kernel instantiation ------------------------------------------------- */

/*
 * A value's storage type (what is in memory) is apart from its compute type
 * FO_T in step.inc: FO_SX, FO_SG and FO_SS are the parameters', gradients'
 * and states' storage, FO_LDX/G/S widen a stored value to FO_T and
 * FO_STX/G/S round an FO_T to storage. Every element type of the table is
 * instantiated here (types.inc: float32 and float64 store what they
 * compute). The tiled path (step_piece_tiled) feeds the rule transformed
 * gradients of type FO_T: a type stored apart from its compute type needs
 * the rules instantiated for such a tile too.
 */
#define FO_TEMPLATE "step.inc"
#include "types.inc"
#undef FO_TEMPLATE

#define FO_TEMPLATE "step.inc"
#include "types_own16.inc"
#undef FO_TEMPLATE
#include "step_apart.inc"

/* ---- checks and coefficients ---------------------------------------------- */

static FO_INLINE int step_rule_coefs(const fo_step_group *g, step_gcoef *c);

/* Check one group and derive its coefficients. */
static FO_INLINE int step_group_coefs(const fo_step_group *g, step_gcoef *c)
{
    fo_rule_facts facts = fo_rule_info(g->rule);
    if (facts.name == NULL || (g->flags & ~FO_STEP_FLAGS) != 0 || g->t < facts.t0
            || (g->flags & FO_STEP_ROUND_NEAREST && g->flags & FO_STEP_ROUND_STOCHASTIC)
            || (g->flags & FO_STEP_DECAY_AFTER && g->rule != FO_RULE_ADAMW_TORCH
                && g->rule != FO_RULE_ADAM_TORCH))
        return FO_EINVAL;
    c->srmask = step_round_mask(g);
    c->q8u = step_q8_unsigned(g);
    c->t = g->t;
    return step_rule_coefs(g, c);
}

static FO_INLINE int step_rule_coefs(const fo_step_group *g, step_gcoef *c)
{
    c->rule = g->rule;
    c->tf = g->flags & FO_STEP_MAXIMIZE ? STEP_TF_NEG : 0;
    c->nesterov = (g->flags & FO_STEP_NESTEROV) != 0;
    c->first = g->t == 0;
    c->adflags = 0;
    c->trust_at = -1;
    double t = (double)g->t;
    switch (g->rule) {
    case FO_RULE_MOMENTUM: {
        fo_momentum_args a = {g->lr, g->alpha, g->beta, g->decay, g->t,
                              c->nesterov ? FO_NESTEROV : FO_STANDARD};
        fo_momentum_coef mc;
        if (fo_momentum_coefs(&a, &mc) != FO_OK)
            return FO_EINVAL;
        double d[4] = {mc.lr, mc.alpha, mc.b, mc.nc};
        float f[4] = {mc.lr_f, mc.alpha_f, mc.b_f, mc.nc_f};
        for (int i = 0; i < 4; i++) {
            c->d[i] = d[i];
            c->f[i] = f[i];
        }
        return FO_OK;
    }
    case FO_RULE_ADAGRAD:
    case FO_RULE_ADAGRAD_TORCH:     /* torch's step counts from 1, ONNX's T from 0 */
        c->d[0] = g->lr / (1.0 + (g->rule == FO_RULE_ADAGRAD ? t : t - 1.0) * g->lr_decay);
        c->d[1] = g->eps;
        c->d[2] = g->decay;
        step_round(c, 3);
        c->adflags = g->rule == FO_RULE_ADAGRAD || g->decay != 0.0 ? STEP_AGF_NC : 0;
        return FO_OK;
    case FO_RULE_ADAM:              /* as fo_adam derives them */
        c->d[0] = g->t > 0
            ? g->lr * sqrt(1.0 - pow(g->beta, t)) / (1.0 - pow(g->alpha, t)) : g->lr;
        c->d[1] = g->alpha;
        c->d[2] = 1.0 - g->alpha;
        c->d[3] = g->beta;
        c->d[4] = 1.0 - g->beta;
        c->d[5] = g->eps;
        c->d[6] = g->decay;
        c->d[7] = 1.0 - g->decay_post;
        step_round(c, 8);
        return FO_OK;
    case FO_RULE_SGD_TORCH:
        c->d[0] = g->lr;
        c->d[1] = g->alpha;
        c->d[2] = 1.0 - g->beta;
        c->d[3] = g->decay;
        step_round(c, 4);
        c->adflags = (g->decay != 0.0 ? STEP_SGDF_WD : 0) | (g->alpha != 0.0 ? STEP_SGDF_MOM : 0);
        return FO_OK;
    case FO_RULE_RMSPROP_TORCH:
        return step_rmsprop_coefs(g, c);
    case FO_RULE_ADAMAX_TORCH:
        return step_adamax_coefs(g, c);
    case FO_RULE_ADADELTA_TORCH:
        return step_adadelta_coefs(g, c);
    case FO_RULE_RADAM_TORCH:
        return step_radam_coefs(g, c);
    case FO_RULE_LION:
        return step_lion_coefs(g, c);
    case FO_RULE_NADAM_TORCH:
        return step_nadam_coefs(g, c);
    case FO_RULE_ADEMAMIX:
        return step_ademamix_coefs(g, c);
    case FO_RULE_LAMB:
        return step_lamb_coefs(g, c);
    case FO_RULE_LARS:
        return step_lars_coefs(g, c);
    default:                        /* torch Adam / AdamW */
        return step_adam_torch_coefs(g, c);
    }
}

/* Does tensor t have the states its group's rule needs? */
static int step_has_states(const fo_step_tensor *t, const fo_step_group *g)
{
    if (t->n == 0)
        return 1;
    if (t->x == NULL || t->g == NULL)
        return 0;
    int k = step_states_needed(g);
    return (k < 1 || t->s1 != NULL) && (k < 2 || t->s2 != NULL) && (k < 3 || t->s3 != NULL);
}

/* For the published API's error reports (capi.c): a tensor's states, and
 * one group, as fo_step checks them (1: valid). */
int fo_step_states_ok(const fo_step_tensor *t, const fo_step_group *g)
{
    return step_has_states(t, g);
}

int fo_step_group_ok(const fo_step_group *g)
{
    step_gcoef c;
    return step_group_coefs(g, &c) == FO_OK;
}

/* Does o's trust_len count what trust_out or trust_in holds (fastopt.h)? */
static int step_trust_len_ok(const fo_step_tensor *ts, int64_t nt, const step_gcoef *gc,
                             const fo_step_opts *o)
{
    if (o->trust_out == NULL && o->trust_in == NULL)
        return 1;
    int64_t want = 0;
    for (int64_t k = 0; k < nt; k++)
        if (gc[ts[k].group].trust_at >= 0)
            want += o->trust_out != NULL ? step_nblocks(ts[k].n) : 1;
    return (o->trust_out == NULL || o->trust_in == NULL) && 2 * want == o->trust_len;
}

static int step_check_opts(const fo_step_opts *o)
{
    if (!(o->grad_scale > 0.0) || !isfinite(o->grad_scale))
        return FO_EINVAL;
    if (o->clip < FO_CLIP_NONE || o->clip > FO_CLIP_OPTAX)
        return FO_EINVAL;
    if (o->clip != FO_CLIP_NONE && !(o->max_norm > 0.0))
        return FO_EINVAL;
    if (!(o->clip_value >= 0.0))
        return FO_EINVAL;
    if (o->norm_type != FO_NORM_2 && o->norm_type != FO_NORM_INF)
        return FO_EINVAL;
    if (o->measure < FO_MEASURE_NEEDED || o->measure > FO_MEASURE_GIVEN
            || (o->measure == FO_MEASURE_GIVEN && o->check_finite))
        return FO_EINVAL;
    if (o->guards_per_tensor < 0 || (o->guards != NULL && o->guards_per_tensor == 0))
        return FO_EINVAL;
    return FO_OK;
}

/* The guards pass 1 did not check: every tensor's if it did not run, else
 * those of the tensors without elements (no block); FO_OK or FO_ESTALE. */
static int step_guards_rest(const fo_step_opts *o, const step_grad *gr, int64_t nt)
{
    if (o->guards == NULL)
        return FO_OK;
    int all = !step_runs_pass1(o);
    for (int64_t k = 0; k < nt; k++)
        if ((all || gr[k].n == 0) && !step_guards_hold(o, k))
            return FO_ESTALE;
    return FO_OK;
}

/* The step-wide transform, once the norm is known. */
static void step_transform_plan(const fo_step_opts *o, double norm, step_plan *p)
{
    p->tf = 0;
    double *d = p->k.d;
    d[0] = o->grad_scale;
    d[1] = 1.0;
    d[2] = norm;
    d[3] = o->max_norm;
    d[4] = o->clip_value;
    if (o->grad_scale != 1.0)
        p->tf |= STEP_TF_DIV;
    if (o->clip == FO_CLIP_TORCH) {
        double c = o->max_norm / (norm + 1e-6);
        if (c > 1.0)
            c = 1.0;
        d[1] = c;
        if (c != 1.0)             /* c < 1, or NaN */
            p->tf |= STEP_TF_MUL;
    } else if (o->clip == FO_CLIP_OPTAX && !(norm < o->max_norm)) {
        p->tf |= STEP_TF_DIVMUL;
    }
    if (o->clip_value > 0.0)
        p->tf |= STEP_TF_CLAMP;
    for (int i = 0; i < 5; i++)
        p->k.f[i] = (float)d[i];
    d[5] = step_exact_inverse(o->grad_scale, 0);
    p->k.f[5] = (float)step_exact_inverse(o->grad_scale, 1);
}

/*
 * Can a group's tensors of one type take the fused path, and with which
 * factors? Unscale by a power of two (its exact inverse), torch clip (the
 * rounded coefficient) and maximize (the sign of the last factor) can; a
 * division by another scale, the optax clip and clip_value cannot.
 */
static void step_fuse(const step_plan *p, const step_gcoef *gc, int f32,
                      step_gfused *fu)
{
    int tf = p->tf | gc->tf;
    double inv = f32 ? (double)p->k.f[5] : p->k.d[5];
    fu->gm = -1;
    fu->a = fu->b = 1.0;
    if ((tf & (STEP_TF_DIVMUL | STEP_TF_CLAMP)) || ((tf & STEP_TF_DIV) && inv == 0.0))
        return;
    double fac[2];
    int nf = 0;
    if (tf & STEP_TF_DIV)
        fac[nf++] = inv;
    if (tf & STEP_TF_MUL)
        fac[nf++] = f32 ? (double)p->k.f[1] : p->k.d[1];
    if (tf & STEP_TF_NEG) {
        if (nf == 0)
            fac[nf++] = -1.0;
        else
            fac[nf - 1] = -fac[nf - 1];
    }
    fu->gm = nf;
    if (nf > 0)
        fu->a = fac[0];
    if (nf > 1)
        fu->b = fac[1];
}

/* ---- the step ---------------------------------------------------------------- */

/* Does t, bfloat16 parameters updated in their own type, take the pairs
 * that widen and round in registers (types_own16.inc)? On a CPU with
 * x86-64-v4, when every state rounds to nearest (a stochastic store needs
 * its element's index, which those loops do not carry) and no pass over x
 * follows the rule's (Adam's decay after the update would round x twice). */
#ifdef FO_OWN16_FUSED
static int step_own16_fused(const step_plan *p, const fo_step_tensor *t)
{
    const step_gcoef *gc = &p->gc[t->group];
    int adam = gc->rule == FO_RULE_ADAM_TORCH || gc->rule == FO_RULE_ADAMW_TORCH;
    return step_v4 && t->dtype == FO_BF16 && t->gdtype == FO_BF16 && t->sdtype == FO_BF16
           && gc->srmask == 0 && t->w == NULL && !(adam && gc->d[STEP_AD_DPOST] != 1.0);
}
#endif

#ifdef FO_OWN16_FUSED
/* Elements lo .. hi of t, float32 parameters with bfloat16 states, by the
 * pairs that widen and round the states in registers (types_own16.inc), if
 * it takes them: on a CPU with x86-64-v4, Adam's or AdamW's torch form
 * rounding its states as STEP_S16_MASK says, the piece's indices sharing
 * their high 32 bits (one stream constant a slot). Returns whether it did. */
static int step_s16_piece(const step_plan *p, const fo_step_tensor *t, int64_t lo,
                          int64_t hi)
{
    const step_gcoef *gc = &p->gc[t->group];
    if (!step_v4 || t->sdtype != FO_BF16 || (t->gdtype != FO_BF16 && t->gdtype != FO_F32)
        || (gc->rule != FO_RULE_ADAM_TORCH && gc->rule != FO_RULE_ADAMW_TORCH)
        || gc->srmask != STEP_S16_MASK || (lo >> 32) != ((hi - 1) >> 32))
        return 0;
    void *const s[3] = {t->s1, t->s2, t->s3};
    for (int k = 0; k < 3; k++) {
        uint64_t h = fo_sr_stream(t->key, gc->t, k);
        step_s16_at[k] = (const uint16_t *)s[k];
        step_s16_c[k] = fo_sr_const(h, (uint32_t)(lo >> 32));
    }
    if (t->gdtype == FO_BF16)
        step_piece_F32_S16F(p, t, lo, hi);
    else
        step_piece_F32_S16T(p, t, lo, hi);
    return 1;
}
#endif

static void step_piece_cb(const fo_tensor *t, int64_t lo, int64_t hi,
                          const void *ctx)
{
    const step_plan *p = (const step_plan *)ctx;
    const fo_step_tensor *st = &p->ts[t - p->base];
#ifdef FO_OWN16_FUSED
    if (st->dtype == FO_BF16 && step_own16_fused(p, st)) {
        step_piece_BF16_OWNF(p, st, lo, hi);
        return;
    }
    if (st->dtype == FO_F32 && st->sdtype == FO_BF16 && step_s16_piece(p, st, lo, hi))
        return;
#endif
    switch (fo_spair(st->dtype, st->gdtype, st->sdtype)) {
#define FO_X_PAIR(name, xt, gt) \
    case FO_PAIR_##name: step_piece_##name(p, st, lo, hi); break;
    FO_PAIR_TABLE(FO_X_PAIR)
#undef FO_X_PAIR
#define FO_X_SPAIR(name, xt, gt, st_, pair) \
    case FO_SPAIR_##name: step_piece_apart(p, st, lo, hi, step_tile_##name); break;
    FO_SPAIR_TABLE(FO_X_SPAIR)
#undef FO_X_SPAIR
    default: break;
    }
}

static void step_clip_cb(const fo_tensor *t, int64_t lo, int64_t hi,
                         const void *ctx)
{
    const step_plan *p = (const step_plan *)ctx;
    switch (t->dtype) {
#define FO_X_GRAD(gt, pair) \
    case FO_##gt: \
        step_clip_piece_##pair(p, (void *)((char *)t->x + lo * fo_dtype_size(FO_##gt)), \
                               hi - lo); \
        break;
    FO_GRAD_TABLE(FO_X_GRAD)
#undef FO_X_GRAD
    default: break;
    }
}

#include "step_trust.inc"

/*
 * Plan the transform once the norm is known and run it over view: the
 * update of every tensor of ts (with its group's coefficients gc), or, with
 * ts NULL, the gradient transform alone in place (fo_clip_grads).
 */
static int step_apply(const fo_step_tensor *ts, const fo_tensor *view,
                      int64_t nt, step_gcoef *gc, int64_t ng,
                      const fo_step_opts *o, double norm,
                      fo_step_result *res, int n_threads)
{
    step_plan p;
    p.ts = ts;
    p.base = view;
    p.gc = gc;
    step_transform_plan(o, norm, &p);
    for (int64_t j = 0; j < ng; j++) {
        step_fuse(&p, &gc[j], 1, &gc[j].fu_f);
        step_fuse(&p, &gc[j], 0, &gc[j].fu_d);
    }
    int rc = FO_OK, trust = 0;
    for (int64_t j = 0; j < ng; j++)
        trust |= gc[j].trust_at >= 0;
    if (ts != NULL && o->trust_out != NULL)     /* the trust pass alone: nothing written */
        return trust ? step_trust_sums(&p, nt, n_threads, o->trust_out) : FO_OK;
    if (ts != NULL && trust)
        rc = step_apply_trust(&p, o, view, nt, ng, n_threads);
    else if (ts != NULL)
        rc = fo_run_elementwise(view, nt, step_piece_cb, &p, n_threads);
    else if (p.tf != 0)
        rc = fo_run_elementwise(view, nt, step_clip_cb, &p, n_threads);
    if (rc == FO_OK)
        res->applied = 1;
    return rc;
}

int fo_step(const fo_step_tensor *ts, int64_t nt, const fo_step_group *gs,
            int64_t ng, const fo_step_opts *o, fo_step_result *res,
            int n_threads)
{
    step_result_init(res);
    if (nt < 0 || ng < 0 || step_check_opts(o) != FO_OK)
        return FO_EINVAL;
    step_gcoef *gc = (step_gcoef *)malloc((size_t)(ng > 0 ? ng : 1) * sizeof(step_gcoef));
    step_grad *gr = (step_grad *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(step_grad));
    fo_tensor *view = (fo_tensor *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(fo_tensor));
    int rc = FO_ENOMEM;
    if (gc == NULL || gr == NULL || view == NULL)
        goto out;
    rc = FO_EINVAL;
    int64_t nb = 0, bytes = 0;
    for (int64_t k = 0; k < nt; k++) {     /* check each tensor, build the views */
        const fo_step_tensor *t = &ts[k];
        int pair = step_grad_pair(t);
        if (pair < 0 || t->n < 0 || (t->w != NULL && !fo_copy_ok(t->dtype, t->wdtype))
                || t->group < 0 || t->group >= ng || !step_has_states(t, &gs[t->group])
                || !step_states_ok(t, &gs[t->group]))
            goto out;
        step_grad_add(&gr[k], t->g, t->n, t->gdtype, pair, &nb, &bytes);
        step_view(&view[k], t->x, t->g, t->s1, t->s2, t->n, t->dtype);
        view[k].quantum = t->sdtype == FO_Q8 ? FO_Q8_BLOCK : 0;
    }
    for (int64_t j = 0; j < ng; j++)
        if (step_group_coefs(&gs[j], &gc[j]) != FO_OK)
            goto out;
    if (!step_trust_len_ok(ts, nt, gc, o))
        goto out;
    double norm;
    rc = step_measure(o, gr, nt, nb, bytes, res, n_threads, &norm);
    if (rc == FO_OK)
        rc = step_guards_rest(o, gr, nt);
    if (rc != FO_OK || (o->check_finite && !res->finite))
        goto out;                    /* stale or skipped: nothing written */
    rc = step_apply(ts, view, nt, gc, ng, o, norm, res, n_threads);
out:
    free(gc);
    free(gr);
    free(view);
    return rc;
}

/* ---- the ONNX operators: one group, no gradient transform ---------------- */

static void step_plain_cb(const fo_tensor *t, int64_t lo, int64_t hi,
                          const void *ctx)
{
    const step_gcoef *gc = (const step_gcoef *)ctx;
    switch (fo_pair(t->dtype, t->dtype)) {
#define FO_X_PAIR(name, xt, gt) \
    case FO_PAIR_##name: step_plain_piece_##name(gc, t, lo, hi); break;
    FO_PAIR_TABLE(FO_X_PAIR)
#undef FO_X_PAIR
    default: break;
    }
}

/* The update pass of a step with one group and no transform, over the
 * caller's views (s1, s2 the rule's states): the same pieces, rule bodies
 * and coefficients as fo_step, without its allocations. */
static int step_plain(const fo_tensor *ts, int64_t nt, const fo_step_group *g,
                      int n_threads)
{
    step_gcoef gc;
    if (nt < 0 || step_group_coefs(g, &gc) != FO_OK)
        return FO_EINVAL;
    for (int64_t k = 0; k < nt; k++)      /* one type for all four arrays */
        if (fo_pair(ts[k].dtype, ts[k].dtype) < 0)
            return FO_EINVAL;
    return fo_run_elementwise(ts, nt, step_plain_cb, &gc, n_threads);
}

int fo_momentum(const fo_tensor *ts, int64_t nt, const fo_momentum_args *a,
                int n_threads)
{
    if (a->mode != FO_STANDARD && a->mode != FO_NESTEROV)
        return FO_EINVAL;
    fo_step_group g = {FO_RULE_MOMENTUM, a->mode == FO_NESTEROV ? FO_STEP_NESTEROV : 0,
                       a->t, a->lr, a->alpha, a->beta, 0.0, a->norm_coefficient, 0.0, 0.0};
    return step_plain(ts, nt, &g, n_threads);
}

int fo_adagrad(const fo_tensor *ts, int64_t nt, const fo_adagrad_args *a,
               int n_threads)
{
    fo_step_group g = {FO_RULE_ADAGRAD, 0, a->t, a->lr, 0.0, 0.0, a->epsilon,
                       a->norm_coefficient, 0.0, a->decay_factor};
    return step_plain(ts, nt, &g, n_threads);
}

int fo_adam(const fo_tensor *ts, int64_t nt, const fo_adam_args *a,
            int n_threads)
{
    fo_step_group g = {FO_RULE_ADAM, 0, a->t, a->lr, a->alpha, a->beta, a->epsilon,
                       a->norm_coefficient, a->norm_coefficient_post, 0.0};
    return step_plain(ts, nt, &g, n_threads);
}

int fo_clip_grads(void *const *gs, const int64_t *ns, const int32_t *dtypes,
                  int64_t nt, const fo_step_opts *o, fo_step_result *res,
                  int n_threads)
{
    step_result_init(res);
    if (nt < 0 || step_check_opts(o) != FO_OK)
        return FO_EINVAL;
    step_grad *gr = (step_grad *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(step_grad));
    fo_tensor *view = (fo_tensor *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(fo_tensor));
    int64_t nb, bytes;
    int rc = FO_ENOMEM;
    if (gr == NULL || view == NULL)
        goto out;
    rc = step_grad_list((const void *const *)gs, ns, dtypes, nt, gr, view, &nb, &bytes);
    if (rc != FO_OK)
        goto out;
    double norm;
    rc = step_measure(o, gr, nt, nb, bytes, res, n_threads, &norm);
    if (rc == FO_OK)
        rc = step_guards_rest(o, gr, nt);
    if (rc != FO_OK || (o->check_finite && !res->finite))
        goto out;
    rc = step_apply(NULL, view, nt, NULL, 0, o, norm, res, n_threads);
out:
    free(gr);
    free(view);
    return rc;
}
