/*
 * Adaptive gradient clipping (AGC, NFNet; docs/semantics.md section 3),
 * standalone (fo_agc) and fused into the Momentum pass (fo_agc_momentum).
 * See the AGC section of fastopt.h for the API and agc.inc for the numerics.
 *
 * Work plan of one call (jobs of the thread pool, pool.c, or the calling
 * thread alone below the serial threshold), tensors taken in groups of
 * consecutive tensors (agc_group):
 *   phase 1  one-pass items: runs of short rows (norms of a row computed
 *            while the row before it is clipped/updated) and plain-momentum
 *            chunks of excluded tensors; then pass 1 (block sums) of the
 *            group's two-pass tensors: rows too long to stay in cache, and
 *            strided units (a column of a row-major matrix: the "io" layout
 *            of a C-ordered array, or "oi" of an F-ordered one);
 *   phase 2  per two-pass tensor: factors from the block sums;
 *   phase 3  pass 2 of the two-pass tensors: the clip/update.
 * Phases 2 and 3 (and their barriers) are skipped for a group without
 * two-pass tensors; a group holds at most ~FO_AGC_GROUP_BYTES of two-pass
 * data so that pass 2 reads it from the last-level cache.
 * Every unit is reduced in an order fixed by its shape alone, so how the
 * items are split and which thread runs them never changes a bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fastopt.h"
#include "pool.h"
#include "rules.h"

/* ---- constants ------------------------------------------------------------ */

#define FO_AGC_SUB 256          /* elements of a sub-block (lane sums) */
#define FO_AGC_BLOCK 4096       /* elements of a block of a row (partials) */
#define FO_AGC_ROWBLOCK 256     /* rows of a block of a column (partials) */
#define FO_AGC_ROWSUB 8         /* rows of a group of a column (FO_ACC sums) */
#define FO_AGC_COLCHUNK 1024    /* max columns of one pass-1 item */
#define FO_AGC_SCRATCH 1024     /* elements of the per-thread scaled-g buffer */
/* Rows of at most this many bytes (per array) take the one-pass route. */
#define FO_AGC_ONEPASS_BYTES ((int64_t)128 * 1024)
/* Bytes of x and g of the two-pass tensors of one group (see agc_group). */
#define FO_AGC_GROUP_BYTES ((int64_t)8 * 1024 * 1024)
/* Floor of the gradient norm in the factor (NFNet, optax, timm). */
#define FO_AGC_DIV_EPS 1e-6

/* ---- shared helpers -------------------------------------------------------- */

/*
 * The AGC decision for one unit, from the sums of squares of its parameter
 * (sx) and gradient (sg) values:
 *     p_norm   = max(sqrt(sx), eps)
 *     max_norm = clipping * p_norm
 *     factor   = max_norm / max(sqrt(sg), 1e-6)   if sqrt(sg) > max_norm
 *                1                                 otherwise
 * in double. NaN norms propagate as in NumPy's maximum: a NaN p_norm or
 * g_norm makes the comparison false, so such a unit is left alone.
 * The factor is <= 1 whenever it is used.
 */
static inline double agc_factor(double sx, double sg, double clipping,
                                double eps)
{
    double pn = sqrt(sx);
    if (pn < eps)
        pn = eps;
    double max_norm = clipping * pn;
    double gn = sqrt(sg);
    if (!(gn > max_norm))
        return 1.0;
    return max_norm / (gn > FO_AGC_DIV_EPS ? gn : FO_AGC_DIV_EPS);
}

/* Momentum coefficients, derived exactly as fastopt.c's fo_momentum does
 * (double, then rounded to float for float32 tensors). */
typedef fo_momentum_coef agc_mom;   /* fastopt.c derives it (fo_momentum_coefs) */

/* Workspace of one two-pass tensor. */
typedef struct {
    double *px, *pg;   /* block sums of x and g */
    void *fac;         /* one factor per unit, in the tensor's type */
    int64_t nb;        /* blocks per row (rows) or row blocks (columns) */
    int any;           /* some unit is clipped */
    int two_pass;
} agc_ws;

/* ---- kernel instantiation -------------------------------------------------- */

/* FO_LANES must be 8 or 16 (the tree in agc_sub is written out for those). */
#define FO_T float
#define FO_ACC float
#define FO_ACC_NARROW 1         /* float sums: checked, redone in double if unsafe */
#define FO_LANES 16
#define FO_NAME(op) op##_F32
#define FO_C(c, field) ((c)->field##_f)
#include "agc.inc"            /* #undefs its parameters at its end */

#define FO_T double
#define FO_ACC double
#define FO_ACC_NARROW 0
#define FO_LANES 8
#define FO_NAME(op) op##_F64
#define FO_C(c, field) ((c)->field)
#include "agc.inc"            /* #undefs its parameters at its end */

/* ---- the work list ---------------------------------------------------------- */

enum {
    IT_ROWS,        /* a, b: rows (one-pass) */
    IT_PLAIN,       /* a, b: elements (excluded tensor, fused only) */
    IT_LONG_NORM,   /* a, b: blocks */
    IT_COL_NORM,    /* a: row block; b: column block index */
    IT_FINISH,      /* per tensor */
    IT_LONG_UPDATE, /* a, b: elements */
    IT_COL_UPDATE   /* a, b: rows */
};

typedef struct {
    int32_t kind;
    int32_t pad_;
    int64_t k;      /* tensor */
    int64_t a, b;
} agc_item;

typedef struct {
    const fo_agc_tensor *ts;
    agc_ws *ws;
    double eps;
    const agc_mom *mom;    /* NULL: fo_agc (clip g in place) */
    int64_t col_width;     /* columns per IT_COL_NORM item */
} agc_plan;

static inline int64_t agc_elsize(const fo_agc_tensor *t)
{
    return fo_dtype_size(t->dtype);
}

static void agc_run_item(const agc_plan *p, const agc_item *it)
{
    const fo_agc_tensor *t = &p->ts[it->k];
    agc_ws *w = &p->ws[it->k];
    int f32 = t->dtype == FO_F32;
    switch (it->kind) {
    case IT_ROWS:
        if (f32) agc_rows_F32(t, it->a, it->b, p->eps, p->mom);
        else agc_rows_F64(t, it->a, it->b, p->eps, p->mom);
        break;
    case IT_PLAIN:
        if (f32) agc_plain_F32(t, it->a, it->b, p->mom);
        else agc_plain_F64(t, it->a, it->b, p->mom);
        break;
    case IT_LONG_NORM:
        if (f32) agc_long_norm_F32(t, w, it->a, it->b);
        else agc_long_norm_F64(t, w, it->a, it->b);
        break;
    case IT_COL_NORM: {
        int64_t j0 = it->b * p->col_width, j1 = j0 + p->col_width;
        if (j1 > t->n_units)
            j1 = t->n_units;
        if (f32) agc_col_norm_F32(t, w, it->a, j0, j1);
        else agc_col_norm_F64(t, w, it->a, j0, j1);
        break;
    }
    case IT_FINISH:
        if (f32) agc_finish_F32(t, w, p->eps);
        else agc_finish_F64(t, w, p->eps);
        break;
    case IT_LONG_UPDATE:
        if (f32) agc_long_update_F32(t, w, it->a, it->b, p->mom);
        else agc_long_update_F64(t, w, it->a, it->b, p->mom);
        break;
    case IT_COL_UPDATE:
        if (f32) agc_col_update_F32(t, w, it->a, it->b, p->mom);
        else agc_col_update_F64(t, w, it->a, it->b, p->mom);
        break;
    default:
        break;
    }
}

/* Append items covering [0, n) in pieces of `step` (>= 1). */
static int64_t agc_split(agc_item *out, int32_t kind, int64_t k, int64_t n,
                         int64_t step)
{
    int64_t m = 0;
    for (int64_t a = 0; a < n; a += step, m++) {
        if (out != NULL) {
            out[m].kind = kind;
            out[m].pad_ = 0;
            out[m].k = k;
            out[m].a = a;
            out[m].b = a + step < n ? a + step : n;
        }
    }
    return m;
}

static inline int64_t agc_max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t agc_ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/*
 * The items of tensor k (out pointers NULL: count only): one-pass items and
 * pass-1 items into l1, its finishing item into l2, pass-2 items into l3.
 * Adds the counts to *c1, *c2, *c3.
 */
static void agc_emit(const agc_plan *p, int64_t k, int64_t chunk,
                     agc_item *l1, agc_item *l2, agc_item *l3,
                     int64_t *c1, int64_t *c2, int64_t *c3)
{
    const fo_agc_tensor *t = &p->ts[k];
    const agc_ws *w = &p->ws[k];
    int64_t n = t->n_units * t->unit_len, es = agc_elsize(t);
    int64_t elems = agc_max64(chunk / es, 16);
    if (n == 0)
        return;
    if (t->clipping == 0.0) {           /* excluded */
        if (p->mom != NULL)
            *c1 += agc_split(l1, IT_PLAIN, k, n, elems);
        return;
    }
    if (!w->two_pass) {
        *c1 += agc_split(l1, IT_ROWS, k, t->n_units,
                         agc_max64(elems / t->unit_len, 1));
        return;
    }
    *c2 += agc_split(l2, IT_FINISH, k, 1, 1);
    if (t->kind == FO_AGC_ROWS) {
        *c1 += agc_split(l1, IT_LONG_NORM, k, t->n_units * w->nb,
                         agc_max64(elems / FO_AGC_BLOCK, 1));
        *c3 += agc_split(l3, IT_LONG_UPDATE, k, n, elems);
    } else {
        int64_t ncb = agc_ceil_div(t->n_units, p->col_width), m = 0;
        for (int64_t rb = 0; rb < w->nb; rb++) {
            int64_t mm = agc_split(l1 ? l1 + m : NULL, IT_COL_NORM, k, ncb, 1);
            if (l1 != NULL)
                for (int64_t i = m; i < m + mm; i++) {
                    l1[i].b = l1[i].a;      /* column block */
                    l1[i].a = rb;
                }
            m += mm;
        }
        *c1 += m;
        *c3 += agc_split(l3, IT_COL_UPDATE, k, t->unit_len,
                         agc_max64(elems / t->n_units, 1));
    }
}

/*
 * A group of consecutive tensors, run as: phase 1 (one-pass items, then
 * the pass-1 items of its two-pass tensors), phase 2 (their factors),
 * phase 3 (their pass 2). A group is closed once its two-pass tensors hold
 * FO_AGC_GROUP_BYTES of x and g, so that pass 2 finds them in the
 * last-level cache instead of reading them from memory a second time.
 */
typedef struct {
    int64_t start, n1, n2, n3;
} agc_group;

/* Plan the groups and their items; returns the number of groups or -1 on
 * allocation failure. *items_out and *groups_out are malloc'ed. */
static int64_t agc_build(const agc_plan *p, int64_t nt, int64_t chunk,
                         agc_item **items_out, agc_group **groups_out)
{
    int64_t *gid = (int64_t *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(int64_t));
    agc_group *groups = (agc_group *)calloc((size_t)(nt + 1), sizeof(agc_group));
    if (gid == NULL || groups == NULL) {
        free(gid);
        free(groups);
        return -1;
    }
    int64_t ng = 0, bytes = 0, total = 0;
    for (int64_t k = 0; k < nt; k++) {
        agc_group *G = &groups[ng];
        gid[k] = ng;
        agc_emit(p, k, chunk, NULL, NULL, NULL, &G->n1, &G->n2, &G->n3);
        if (p->ws[k].two_pass) {
            bytes += 2 * p->ts[k].n_units * p->ts[k].unit_len * agc_elsize(&p->ts[k]);
            if (bytes >= FO_AGC_GROUP_BYTES) {
                ng++;
                bytes = 0;
            }
        }
    }
    if (ng == 0 || groups[ng].n1 + groups[ng].n2 + groups[ng].n3 > 0)
        ng++;
    for (int64_t q = 0; q < ng; q++) {
        groups[q].start = total;
        total += groups[q].n1 + groups[q].n2 + groups[q].n3;
    }
    agc_item *items = (agc_item *)malloc((size_t)(total > 0 ? total : 1)
                                         * sizeof(agc_item));
    if (items == NULL) {
        free(gid);
        free(groups);
        return -1;
    }
    /* fill: per group, one-pass tensors first, then the two-pass ones */
    int64_t *pos = (int64_t *)calloc((size_t)(3 * ng), sizeof(int64_t));
    if (pos == NULL) {
        free(items);
        free(gid);
        free(groups);
        return -1;
    }
    for (int two = 0; two < 2; two++)
        for (int64_t k = 0; k < nt; k++) {
            if (p->ws[k].two_pass != two)
                continue;
            const agc_group *G = &groups[gid[k]];
            int64_t *c = pos + 3 * gid[k];
            agc_item *l1 = items + G->start;
            agc_emit(p, k, chunk, l1 + c[0], l1 + G->n1 + c[1],
                     l1 + G->n1 + G->n2 + c[2], &c[0], &c[1], &c[2]);
        }
    free(pos);
    free(gid);
    *items_out = items;
    *groups_out = groups;
    return ng;
}

/* Items [i0, i1) of the plan as one pool job. */
typedef struct {
    const agc_plan *plan;
    agc_item *items;
    int64_t base;
} agc_job;

static void agc_task(void *vj, int64_t i)
{
    const agc_job *j = (const agc_job *)vj;
    agc_run_item(j->plan, &j->items[j->base + i]);
}

static void agc_segment(int nth, agc_job *j, int64_t i0, int64_t i1,
                        int64_t bytes)
{
    if (i1 <= i0)
        return;
    j->base = i0;
    fo_pool_run(nth, i1 - i0, agc_task, j, bytes);
}

/* Check every tensor; *total gets the call's bytes. Returns FO_OK or
 * FO_EINVAL, before anything is written. */
static int agc_check(const fo_agc_tensor *ts, int64_t nt, double eps,
                     int64_t *total)
{
    if (nt < 0 || !(eps > 0.0) || !isfinite(eps))
        return FO_EINVAL;
    *total = 0;
    for (int64_t k = 0; k < nt; k++) {
        const fo_agc_tensor *t = &ts[k];
        if (t->n_units < 0 || t->unit_len < 0
                || (t->dtype != FO_F32 && t->dtype != FO_F64)   /* AGC's types */
                || (t->kind != FO_AGC_ROWS && t->kind != FO_AGC_COLS)
                || !(t->clipping >= 0.0) || !isfinite(t->clipping))
            return FO_EINVAL;
        *total += t->n_units * t->unit_len * agc_elsize(t);
    }
    return FO_OK;
}

/* Which tensors need two passes, and their workspace (ws[k] zeroed on
 * entry). *mem_out gets the one block it lives in (NULL if none is needed).
 * Returns FO_OK or FO_ENOMEM. */
static int agc_workspace(const fo_agc_tensor *ts, int64_t nt, agc_ws *ws,
                         double **mem_out)
{
    int64_t ws_doubles = 0;
    for (int64_t k = 0; k < nt; k++) {
        const fo_agc_tensor *t = &ts[k];
        agc_ws *w = &ws[k];
        if (t->n_units * t->unit_len == 0 || t->clipping == 0.0)
            continue;
        if (t->kind == FO_AGC_ROWS) {
            if (t->unit_len * agc_elsize(t) <= FO_AGC_ONEPASS_BYTES)
                continue;
            w->nb = agc_ceil_div(t->unit_len, FO_AGC_BLOCK);
        } else {
            w->nb = agc_ceil_div(t->unit_len, FO_AGC_ROWBLOCK);
        }
        w->two_pass = 1;
        /* px, pg: n_units * nb each; fac: n_units slots of 8 bytes */
        ws_doubles += t->n_units * (2 * w->nb + 1);
    }
    *mem_out = NULL;
    if (ws_doubles == 0)
        return FO_OK;
    double *q = (double *)malloc((size_t)ws_doubles * sizeof(double));
    if (q == NULL)
        return FO_ENOMEM;
    *mem_out = q;
    for (int64_t k = 0; k < nt; k++) {
        agc_ws *w = &ws[k];
        if (!w->two_pass)
            continue;
        int64_t nu = ts[k].n_units;
        w->px = q;
        w->pg = q + nu * w->nb;
        w->fac = (void *)(q + 2 * nu * w->nb);
        q += nu * (2 * w->nb + 1);
    }
    return FO_OK;
}

/* Item size: about a quarter of each thread's share, within bounds; and
 * the columns per pass-1 item of a strided tensor (a multiple of 16). */
static int64_t agc_item_bytes(agc_plan *plan, int64_t total, int nth)
{
    int64_t chunk = total / (4 * (int64_t)nth);
    if (chunk > fo_chunk_bytes())
        chunk = fo_chunk_bytes();
    if (chunk < 32 * 1024)
        chunk = 32 * 1024;
    plan->col_width = agc_max64((chunk / 4 / FO_AGC_ROWBLOCK + 15) / 16 * 16, 16);
    if (plan->col_width > FO_AGC_COLCHUNK)
        plan->col_width = FO_AGC_COLCHUNK;
    return chunk;
}

/* Run the groups' items. Phases are separated by a wait for every claimed
 * item: pass 1 before the factors, the factors before pass 2. Pass 2 of a
 * group and phase 1 of the next one are independent, so they form one job. */
static void agc_run_groups(int nth, const agc_plan *plan, agc_item *items,
                           const agc_group *groups, int64_t ng, int64_t total)
{
    agc_job job = {plan, items, 0};
    int64_t seg = 0;
    for (int64_t q = 0; q < ng; q++) {
        if (groups[q].n2 == 0)
            continue;
        int64_t s1 = groups[q].start + groups[q].n1, s2 = s1 + groups[q].n2;
        agc_segment(nth, &job, seg, s1, total);
        agc_segment(nth, &job, s1, s2, -1);     /* a few items: no record */
        seg = s2;
    }
    agc_segment(nth, &job, seg, groups[ng - 1].start + groups[ng - 1].n1
                + groups[ng - 1].n2 + groups[ng - 1].n3, total);
}

static int agc_drive(const fo_agc_tensor *ts, int64_t nt, double eps,
                     const agc_mom *mom, int n_threads)
{
    int64_t total;
    int rc = agc_check(ts, nt, eps, &total);
    if (rc != FO_OK)
        return rc;
    int nth = fo_pool_threads(total, n_threads);

    agc_ws *ws = (agc_ws *)calloc((size_t)(nt > 0 ? nt : 1), sizeof(agc_ws));
    if (ws == NULL)
        return FO_ENOMEM;
    double *mem = NULL;
    if (agc_workspace(ts, nt, ws, &mem) != FO_OK) {
        free(ws);
        return FO_ENOMEM;
    }
    agc_plan plan;
    plan.ts = ts;
    plan.ws = ws;
    plan.eps = eps;
    plan.mom = mom;
    int64_t chunk = agc_item_bytes(&plan, total, nth);

    agc_item *items = NULL;
    agc_group *groups = NULL;
    int64_t ng = agc_build(&plan, nt, chunk, &items, &groups);
    if (ng < 0) {
        free(mem);
        free(ws);
        return FO_ENOMEM;
    }
    agc_run_groups(nth, &plan, items, groups, ng, total);
    free(groups);
    free(items);
    free(mem);
    free(ws);
    return FO_OK;
}

/* ---- public entry points ------------------------------------------------------ */

int fo_agc(const fo_agc_tensor *ts, int64_t nt, double eps, int n_threads)
{
    return agc_drive(ts, nt, eps, NULL, n_threads);
}

int fo_agc_momentum(const fo_agc_tensor *ts, int64_t nt, double eps,
                    const fo_momentum_args *a, int n_threads)
{
    agc_mom c;
    int rc = fo_momentum_coefs(a, &c);
    return rc != FO_OK ? rc : agc_drive(ts, nt, eps, &c, n_threads);
}

int fo_agc_unit_sumsq(const void *x, int32_t dtype, int64_t n_units,
                      int64_t unit_len, int32_t kind, double *out)
{
    if (n_units < 0 || unit_len < 0
            || (kind != FO_AGC_ROWS && kind != FO_AGC_COLS))
        return FO_EINVAL;
    if (dtype == FO_F32)
        return agc_unit_sumsq_F32((const float *)x, n_units, unit_len, kind, out);
    if (dtype == FO_F64)
        return agc_unit_sumsq_F64((const double *)x, n_units, unit_len, kind, out);
    return FO_EINVAL;
}
