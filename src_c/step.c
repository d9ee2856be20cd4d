/*
 * The whole optimizer step in one call (issue 13): unscale, non-finite
 * check, global norm, clip by the global norm (torch or optax convention),
 * clip by value, maximize and the update rule of every tensor, each tensor
 * with its own group's hyperparameters. See the issue-13 section of
 * fastopt.h for the API and step.inc for the kernels.
 *
 * Plan of fo_step:
 *   0. check every tensor, group and option and derive every coefficient
 *      (nothing written before this succeeds);
 *   1. pass 1 (only if the step checks finiteness, clips or measures): each
 *      gradient is cut into blocks of FO_STEP_BLOCK elements; every block
 *      is reduced alone (serially, fixed lanes) into its own slot, blocks
 *      are handed to threads in any order, and the slots are added in
 *      tensor then block order afterwards: the norm does not depend on the
 *      thread count or on who ran what;
 *   2. pass 2: the update, through the core's elementwise driver
 *      (fo_run_elementwise); each piece turns g into u tile by tile in a
 *      stack buffer (g is never written) and runs the rule on the tile.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fastopt.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && !defined(FO_NO_CLONES)
#define FO_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FO_KERNEL
#endif
#if defined(__GNUC__)
#define FO_INLINE inline __attribute__((always_inline))
#else
#define FO_INLINE inline
#endif

/* Elements of the stack tile of transformed gradients (pass 2). */
#define STEP_TILE 1024
/* Blocks of one pass-1 work item (64 Ki elements). */
#define STEP_ITEM_BLOCKS 16

/* Gradient transform flags (step.inc step_transform). */
#define STEP_TF_DIV 1
#define STEP_TF_MUL 2
#define STEP_TF_DIVMUL 4
#define STEP_TF_CLAMP 8
#define STEP_TF_NEG 16

/* Torch Adam coefficients (fo_adam_torch's c[]) and flags. */
enum { STEP_AD_DMUL, STEP_AD_WD, STEP_AD_W, STEP_AD_OMW, STEP_AD_B2,
       STEP_AD_OMB2, STEP_AD_BC2S, STEP_AD_EPS, STEP_AD_NSS, STEP_AD_N };
#define STEP_ADF_L2 2
#define STEP_ADF_AMSGRAD 4
#define STEP_ADF_SMALLW 8

/* How a group's tensors of one type get their gradient in pass 2:
 * gm 0, 1, 2: fused, u = g, g*a, (g*a)*b (a, b already rounded to the
 * type); gm -1: through step_transform and a tile. */
typedef struct {
    int gm;
    double a, b;
} step_gfused;

/* A group's derived coefficients, in double and rounded to float. */
typedef struct {
    int rule, tf, nesterov, first, adflags;
    double d[STEP_AD_N];
    float f[STEP_AD_N];
    step_gfused fu_f, fu_d;
} step_gcoef;

/* Step-wide transform scalars: grad_scale, torch coef, norm, max_norm, cv,
 * and the exact inverse of grad_scale in that type (0 if it has none). */
typedef struct {
    double d[6];
    float f[6];
} step_coefs;

/*
 * 1/s if s is a power of two whose inverse the type (f32: float) holds
 * exactly (not 0, not inf); else 0. Multiplying by it gives the very bits
 * of dividing by s (both are the correctly rounded g * 2**-k), and a
 * multiplication is several times cheaper than a division in a vector loop.
 */
static double step_exact_inverse(double s, int f32)
{
    int e;
    if (!(s > 0.0) || !isfinite(s) || frexp(s, &e) != 0.5)
        return 0.0;
    double inv = 1.0 / s;
    if (f32) {
        float sf = (float)s, invf = (float)inv;
        if (!isfinite(sf) || invf == 0.0f || !isfinite(invf) || (double)invf != inv)
            return 0.0;
    }
    return inv;
}

typedef struct {
    const fo_step_tensor *ts;
    const fo_tensor *base;    /* the view handed to fo_run_elementwise */
    const step_gcoef *gc;
    step_coefs k;
    int tf;
} step_plan;

/* ---- kernel instantiation ------------------------------------------------- */

#define FO_T float
#define FO_NAME(op) op##_f32
#define FO_SQRT sqrtf
#define FO_FABS fabsf
#define FO_MAXV FLT_MAX
#define FO_UINT uint32_t
#define FO_ABSMASK 0x7fffffffu
#define FO_INFBITS 0x7f800000u
#define FO_CF(c) ((c)->f)
#define FO_FU(c) (&(c)->fu_f)
#include "step.inc"
#undef FO_T
#undef FO_NAME
#undef FO_SQRT
#undef FO_FABS
#undef FO_MAXV
#undef FO_UINT
#undef FO_ABSMASK
#undef FO_INFBITS
#undef FO_CF
#undef FO_FU

#define FO_T double
#define FO_NAME(op) op##_f64
#define FO_SQRT sqrt
#define FO_FABS fabs
#define FO_MAXV DBL_MAX
#define FO_UINT uint64_t
#define FO_ABSMASK 0x7fffffffffffffffull
#define FO_INFBITS 0x7ff0000000000000ull
#define FO_CF(c) ((c)->d)
#define FO_FU(c) (&(c)->fu_d)
#include "step.inc"
#undef FO_T
#undef FO_NAME
#undef FO_SQRT
#undef FO_FABS
#undef FO_MAXV
#undef FO_UINT
#undef FO_ABSMASK
#undef FO_INFBITS
#undef FO_CF
#undef FO_FU

/* ---- pass 1: norm and finiteness ------------------------------------------ */

typedef struct {
    const void *g;
    int64_t n;
    int64_t b0;      /* index of its first block among all blocks */
    int32_t dtype;
    int32_t pad_;
} step_grad;

static inline int64_t step_nblocks(int64_t n)
{
    return (n + FO_STEP_BLOCK - 1) / FO_STEP_BLOCK;
}

static inline int step_run_block(const step_grad *gr, int64_t b, double scale,
                                 int norm_inf, double *part)
{
    int64_t o = b * FO_STEP_BLOCK;
    int64_t m = gr->n - o < FO_STEP_BLOCK ? gr->n - o : FO_STEP_BLOCK;
    int f32 = gr->dtype == FO_F32;
    double inv = scale != 1.0 ? step_exact_inverse(scale, f32) : 0.0;
    int mode = scale == 1.0 ? 0 : inv != 0.0 ? 2 : 1;
    double s = mode == 2 ? inv : scale;
    if (f32)
        return step_block_f32(m, (const float *)gr->g + o, (float)s, mode,
                              norm_inf, part);
    return step_block_f64(m, (const double *)gr->g + o, s, mode, norm_inf, part);
}

/*
 * Norm of gr[0..nt) (blocks numbered by gr[k].b0, nb in all; total bytes
 * given) into res->norm / res->finite. FO_OK or FO_ENOMEM.
 */
static int step_pass1(const step_grad *gr, int64_t nt, int64_t nb,
                      int64_t bytes, double scale, int norm_inf,
                      fo_step_result *res, int n_threads)
{
    double *part = (double *)malloc((size_t)(nb > 0 ? nb : 1) * sizeof(double));
    unsigned char *bad = (unsigned char *)malloc((size_t)(nb > 0 ? nb : 1));
    if (part == NULL || bad == NULL) {
        free(part);
        free(bad);
        return FO_ENOMEM;
    }
    int rc = FO_OK;
#ifdef _OPENMP
    if (n_threads > 1 && bytes >= fo_serial_bytes()) {
        int64_t ni = 0;
        for (int64_t k = 0; k < nt; k++)
            ni += (step_nblocks(gr[k].n) + STEP_ITEM_BLOCKS - 1) / STEP_ITEM_BLOCKS;
        int64_t *items = (int64_t *)malloc((size_t)(2 * ni + 1) * sizeof(int64_t));
        if (items == NULL) {
            rc = FO_ENOMEM;
            goto out;
        }
        ni = 0;
        for (int64_t k = 0; k < nt; k++)
            for (int64_t b = 0; b < step_nblocks(gr[k].n); b += STEP_ITEM_BLOCKS) {
                items[2 * ni] = k;
                items[2 * ni + 1] = b;
                ni++;
            }
        int nth = n_threads < ni ? n_threads : (int)ni;
        #pragma omp parallel for num_threads(nth) schedule(dynamic, 1) \
            default(none) shared(gr, items, ni, part, bad, scale, norm_inf)
        for (int64_t it = 0; it < ni; it++) {
            const step_grad *g = &gr[items[2 * it]];
            int64_t b = items[2 * it + 1];
            int64_t be = b + STEP_ITEM_BLOCKS;
            if (be > step_nblocks(g->n))
                be = step_nblocks(g->n);
            for (; b < be; b++)
                bad[g->b0 + b] = (unsigned char)step_run_block(g, b, scale, norm_inf,
                                                               &part[g->b0 + b]);
        }
        free(items);
    } else
#endif
    {
        (void)bytes;
        (void)n_threads;
        for (int64_t k = 0; k < nt; k++)
            for (int64_t b = 0; b < step_nblocks(gr[k].n); b++)
                bad[gr[k].b0 + b] = (unsigned char)step_run_block(
                    &gr[k], b, scale, norm_inf, &part[gr[k].b0 + b]);
    }
    double total = 0.0;
    int finite = 1, nan = 0;
    for (int64_t j = 0; j < nb; j++) {      /* fixed order: tensor, block */
        finite &= !bad[j];
        if (!norm_inf)
            total += part[j];
        else if (part[j] != part[j])
            nan = 1;
        else if (part[j] > total)
            total = part[j];
    }
    res->norm = norm_inf ? (nan ? NAN : total) : sqrt(total);
    res->finite = finite;
#ifdef _OPENMP
out:
#endif
    free(part);
    free(bad);
    return rc;
}

/* ---- checks and coefficients ---------------------------------------------- */

static void step_round(step_gcoef *c, int n)
{
    for (int i = 0; i < n; i++)
        c->f[i] = (float)c->d[i];
}

/* Check one group and derive its coefficients. */
static int step_group_coefs(const fo_step_group *g, step_gcoef *c)
{
    if (g->rule < FO_RULE_MOMENTUM || g->rule > FO_RULE_ADAMW_TORCH
            || (g->flags & ~7) != 0)
        return FO_EINVAL;
    int torch1 = g->rule == FO_RULE_ADAGRAD_TORCH || g->rule == FO_RULE_ADAM_TORCH
                 || g->rule == FO_RULE_ADAMW_TORCH;
    if (g->t < (torch1 ? 1 : 0))
        return FO_EINVAL;
    c->rule = g->rule;
    c->tf = g->flags & FO_STEP_MAXIMIZE ? STEP_TF_NEG : 0;
    c->nesterov = (g->flags & FO_STEP_NESTEROV) != 0;
    c->first = g->t == 0;
    c->adflags = 0;
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
        return FO_OK;
    default: {                      /* torch Adam / AdamW */
        double w = 1.0 - g->alpha;
        /* AdamW's decay multiplies x (Adam's: 1, and x * 1 is x) */
        c->d[STEP_AD_DMUL] = g->rule == FO_RULE_ADAMW_TORCH ? 1.0 - g->lr * g->decay : 1.0;
        c->d[STEP_AD_WD] = g->decay;
        c->d[STEP_AD_W] = w;
        c->d[STEP_AD_OMW] = 1.0 - w;
        c->d[STEP_AD_B2] = g->beta;
        c->d[STEP_AD_OMB2] = 1.0 - g->beta;
        c->d[STEP_AD_BC2S] = pow(1.0 - pow(g->beta, t), 0.5);
        c->d[STEP_AD_EPS] = g->eps;
        c->d[STEP_AD_NSS] = -(g->lr / (1.0 - pow(g->alpha, t)));
        step_round(c, STEP_AD_N);
        c->f[STEP_AD_OMW] = 1.0f - (float)w;    /* torch: 1 - weight in float */
        int has_wd = g->decay != 0.0;
        c->adflags = (g->rule == FO_RULE_ADAM_TORCH && has_wd ? STEP_ADF_L2 : 0)
                     | (g->flags & FO_STEP_AMSGRAD ? STEP_ADF_AMSGRAD : 0)
                     | (fabs(w) < 0.5 ? STEP_ADF_SMALLW : 0);
        return FO_OK;
    }
    }
}

/* Does tensor t have the states its group's rule needs? */
static int step_has_states(const fo_step_tensor *t, const fo_step_group *g)
{
    if (t->n == 0)
        return 1;
    if (t->x == NULL || t->g == NULL)
        return 0;
    switch (g->rule) {
    case FO_RULE_ADAM:
        return t->s1 != NULL && t->s2 != NULL;
    case FO_RULE_SGD_TORCH:
        return g->alpha == 0.0 || t->s1 != NULL;
    case FO_RULE_ADAM_TORCH:
    case FO_RULE_ADAMW_TORCH:
        return t->s1 != NULL && t->s2 != NULL
               && (!(g->flags & FO_STEP_AMSGRAD) || t->s3 != NULL);
    default:
        return t->s1 != NULL;
    }
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

static void step_piece_cb(const fo_tensor *t, int64_t lo, int64_t hi,
                          const void *ctx)
{
    const step_plan *p = (const step_plan *)ctx;
    const fo_step_tensor *st = &p->ts[t - p->base];
    if (st->dtype == FO_F32)
        step_piece_f32(p, st, lo, hi);
    else
        step_piece_f64(p, st, lo, hi);
}

static void step_clip_cb(const fo_tensor *t, int64_t lo, int64_t hi,
                         const void *ctx)
{
    const step_plan *p = (const step_plan *)ctx;
    if (t->dtype == FO_F32)
        step_clip_piece_f32(p, (float *)t->x + lo, hi - lo);
    else
        step_clip_piece_f64(p, (double *)t->x + lo, hi - lo);
}

static inline int64_t step_elsize(int32_t dtype)
{
    return dtype == FO_F64 ? 8 : 4;
}

int fo_step(const fo_step_tensor *ts, int64_t nt, const fo_step_group *gs,
            int64_t ng, const fo_step_opts *o, fo_step_result *res,
            int n_threads)
{
    res->norm = NAN;
    res->finite = 1;
    res->applied = 0;
    if (nt < 0 || ng < 0 || step_check_opts(o) != FO_OK)
        return FO_EINVAL;
    for (int64_t k = 0; k < nt; k++) {
        const fo_step_tensor *t = &ts[k];
        if ((t->dtype != FO_F32 && t->dtype != FO_F64) || t->n < 0
                || t->group < 0 || t->group >= ng || !step_has_states(t, &gs[t->group]))
            return FO_EINVAL;
    }
    step_gcoef *gc = (step_gcoef *)malloc((size_t)(ng > 0 ? ng : 1) * sizeof(step_gcoef));
    step_grad *gr = (step_grad *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(step_grad));
    fo_tensor *view = (fo_tensor *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(fo_tensor));
    int rc = FO_ENOMEM;
    if (gc == NULL || gr == NULL || view == NULL)
        goto out;
    rc = FO_EINVAL;
    for (int64_t j = 0; j < ng; j++)
        if (step_group_coefs(&gs[j], &gc[j]) != FO_OK)
            goto out;
    int64_t nb = 0, bytes = 0;
    for (int64_t k = 0; k < nt; k++) {
        gr[k].g = ts[k].g;
        gr[k].n = ts[k].n;
        gr[k].dtype = ts[k].dtype;
        gr[k].b0 = nb;
        nb += step_nblocks(ts[k].n);
        bytes += ts[k].n * step_elsize(ts[k].dtype);
        view[k].x = ts[k].x;
        view[k].g = ts[k].g;
        view[k].s1 = ts[k].s1;
        view[k].s2 = ts[k].s2;
        view[k].n = ts[k].n;
        view[k].dtype = ts[k].dtype;
        view[k].pad_ = 0;
    }
    double norm = NAN;
    if (o->measure == FO_MEASURE_GIVEN) {
        norm = res->norm = o->norm;
    } else if (o->check_finite || o->clip != FO_CLIP_NONE || o->measure) {
        rc = step_pass1(gr, nt, nb, bytes, o->grad_scale,
                        o->norm_type == FO_NORM_INF, res, n_threads);
        if (rc != FO_OK)
            goto out;
        norm = res->norm;
        if (o->check_finite && !res->finite) {
            rc = FO_OK;              /* skipped: nothing written */
            goto out;
        }
    }
    step_plan p;
    p.ts = ts;
    p.base = view;
    p.gc = gc;
    step_transform_plan(o, norm, &p);
    for (int64_t j = 0; j < ng; j++) {
        step_fuse(&p, &gc[j], 1, &gc[j].fu_f);
        step_fuse(&p, &gc[j], 0, &gc[j].fu_d);
    }
    rc = fo_run_elementwise(view, nt, step_piece_cb, &p, n_threads);
    if (rc == FO_OK)
        res->applied = 1;
out:
    free(gc);
    free(gr);
    free(view);
    return rc;
}

/* ---- gradient lists ------------------------------------------------------------ */

/* Check a list and fill the pass-1 view (and the elementwise view). */
static int step_grad_list(const void *const *gs, const int64_t *ns,
                          const int32_t *dtypes, int64_t nt, step_grad *gr,
                          fo_tensor *view, int64_t *nb, int64_t *bytes)
{
    *nb = 0;
    *bytes = 0;
    for (int64_t k = 0; k < nt; k++) {
        if ((dtypes[k] != FO_F32 && dtypes[k] != FO_F64) || ns[k] < 0
                || (ns[k] > 0 && gs[k] == NULL))
            return FO_EINVAL;
        gr[k].g = gs[k];
        gr[k].n = ns[k];
        gr[k].dtype = dtypes[k];
        gr[k].b0 = *nb;
        *nb += step_nblocks(ns[k]);
        *bytes += ns[k] * step_elsize(dtypes[k]);
        if (view != NULL) {
            view[k].x = (void *)gs[k];
            view[k].g = gs[k];
            view[k].s1 = view[k].s2 = NULL;
            view[k].n = ns[k];
            view[k].dtype = dtypes[k];
            view[k].pad_ = 0;
        }
    }
    return FO_OK;
}

int fo_global_norm(const void *const *gs, const int64_t *ns,
                   const int32_t *dtypes, int64_t nt, double grad_scale,
                   int32_t norm_type, fo_step_result *res, int n_threads)
{
    res->norm = NAN;
    res->finite = 1;
    res->applied = 0;
    if (nt < 0 || !(grad_scale > 0.0) || !isfinite(grad_scale)
            || (norm_type != FO_NORM_2 && norm_type != FO_NORM_INF))
        return FO_EINVAL;
    step_grad *gr = (step_grad *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(step_grad));
    if (gr == NULL)
        return FO_ENOMEM;
    int64_t nb, bytes;
    int rc = step_grad_list(gs, ns, dtypes, nt, gr, NULL, &nb, &bytes);
    if (rc == FO_OK)
        rc = step_pass1(gr, nt, nb, bytes, grad_scale, norm_type == FO_NORM_INF,
                        res, n_threads);
    free(gr);
    return rc;
}

int fo_clip_grads(void *const *gs, const int64_t *ns, const int32_t *dtypes,
                  int64_t nt, const fo_step_opts *o, fo_step_result *res,
                  int n_threads)
{
    res->norm = NAN;
    res->finite = 1;
    res->applied = 0;
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
    double norm = NAN;
    if (o->measure == FO_MEASURE_GIVEN) {
        norm = res->norm = o->norm;
    } else if (o->check_finite || o->clip != FO_CLIP_NONE || o->measure) {
        rc = step_pass1(gr, nt, nb, bytes, o->grad_scale,
                        o->norm_type == FO_NORM_INF, res, n_threads);
        if (rc != FO_OK || (o->check_finite && !res->finite))
            goto out;
        norm = res->norm;
    }
    step_plan p;
    p.ts = NULL;
    p.base = view;
    p.gc = NULL;
    step_transform_plan(o, norm, &p);
    if (p.tf != 0)
        rc = fo_run_elementwise(view, nt, step_clip_cb, &p, n_threads);
    if (rc == FO_OK)
        res->applied = 1;
out:
    free(gr);
    free(view);
    return rc;
}
