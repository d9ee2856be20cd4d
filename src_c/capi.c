/*
 * The published C API (docs/embedding.md): the checking front door of the
 * core for C, C++, Cython, ctypes and numba consumers, and the static table
 * of its entry points that fastopt._ext puts into a capsule.
 *
 * Each entry checks everything it can cheaply (struct sizes, reserved
 * fields, counts, types, NULL and misaligned pointers, written buffers that
 * overlap) before the core runs, and on failure names the argument in the
 * result (where, field, index) and returns a negative code with nothing
 * written. Then it calls the very core function the Python API calls
 * (fo_step, fo_global_norm, fo_clip_grads, fo_agc, fo_agc_momentum), so
 * the bits are the same. No Python here; nothing prints or sets errno.
 */
#define FASTOPT_CAPI_IMPLEMENTATION
#include "../fastopt/include/fastopt/fastopt_capi.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "capi.h"
#include "fastopt.h"

#ifndef FASTOPT_VERSION
#define FASTOPT_VERSION "unknown"
#endif

/* The published numbers are the core's (the generator reads them from the
 * core's headers; this is the compiler's check of that). */
#define FO_X_RULE(N, S, T, A, Q, QN) \
    _Static_assert(FASTOPT_RULE_##N == FO_RULE_##N, "capi: rule " #N);
FO_RULE_TABLE(FO_X_RULE)
#undef FO_X_RULE
#define FO_X_DTYPE(N, C, S) \
    _Static_assert(FASTOPT_##N == FO_##N, "capi: dtype " #N);
FO_DTYPE_TABLE(FO_X_DTYPE)
#undef FO_X_DTYPE
_Static_assert(FASTOPT_NESTEROV == FO_STEP_NESTEROV && FASTOPT_AMSGRAD == FO_STEP_AMSGRAD
               && FASTOPT_MAXIMIZE == FO_STEP_MAXIMIZE
               && FASTOPT_CENTERED == FO_STEP_CENTERED, "capi: flags");
_Static_assert(FASTOPT_OK == FO_OK && FASTOPT_ENOMEM == FO_ENOMEM
               && FASTOPT_EINVAL == FO_EINVAL, "capi: codes");

/* The public group's room for a rule's further hyperparameters: fixed for
 * the major version, at least the core's. */
#define PUBLIC_EXTRA ((int)(sizeof(((fastopt_group *)0)->extra) / sizeof(double)))
_Static_assert(sizeof(((fastopt_group *)0)->extra) / sizeof(double) >= FO_STEP_EXTRA,
               "capi: fastopt_group.extra is shorter than the core's extra values");

/* ---- results and struct prefixes ------------------------------------------ */

/* 1 if res may be written (NULL: the caller wants no report). */
static int res_usable(const fastopt_result *res)
{
    return res != NULL && res->size >= sizeof(fastopt_result);
}

static void res_begin(fastopt_result *res)
{
    if (!res_usable(res))
        return;
    res->finite = 1;
    res->applied = 0;
    res->error_where = FASTOPT_WHERE_CALL;
    res->error_field = FASTOPT_FIELD_NONE;
    res->error_index = -1;
    res->norm = NAN;
}

static int fail(fastopt_result *res, int rc, int where, int field, int64_t index)
{
    if (res_usable(res)) {
        res->error_where = where;
        res->error_field = field;
        res->error_index = index;
    }
    return rc;
}

/* A caller's struct of `size` bytes read as the library's `have`: shorter is
 * invalid; longer (a newer minor version's fields) is unsupported unless
 * the extra bytes are 0. */
static int prefix_check(const void *p, uint32_t size, size_t have)
{
    if (size < have)
        return FASTOPT_EINVAL;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = have; i < size; i++)
        if (b[i] != 0)
            return FASTOPT_EUNSUPPORTED;
    return FASTOPT_OK;
}

/* A pointer to n values of `size` bytes: non-NULL when n > 0, aligned. */
static int ptr_ok(const void *p, int64_t n, int size)
{
    if (p == NULL)
        return n == 0;
    return size > 0 && (uintptr_t)p % (uintptr_t)size == 0;
}

/* The first written range that overlaps another one, as its index; -1 if
 * none; -2 out of memory. ext: 2*m (start, end) byte addresses. */
static int64_t first_overlap(const int64_t *ext, const unsigned char *is_out, int64_t m)
{
    if (m < 2)
        return -1;
    if (m > INT64_MAX / 64)
        return -2;
    int64_t *scratch = (int64_t *)malloc((size_t)(6 * m + 1) * sizeof(int64_t));
    if (scratch == NULL)
        return -2;
    int64_t norder = -1, i = -1, j = -1;
    int found = fo_find_overlap(ext, is_out, m, scratch, scratch + 5 * m + 1, &norder,
                                &i, &j);
    free(scratch);
    if (!found)
        return -1;
    return is_out[j] ? (i > j ? i : j) : i;
}

static void range(int64_t *ext, const void *p, int64_t n, int size)
{
    ext[0] = (int64_t)(uintptr_t)p;
    ext[1] = p == NULL ? ext[0] : ext[0] + n * size;
}

/* ---- the step ---------------------------------------------------------------- */

#define PTRS 6   /* x, g, s1, s2, s3, w */
static const int32_t ptr_field[PTRS] = {FASTOPT_FIELD_X, FASTOPT_FIELD_G, FASTOPT_FIELD_S1,
                                        FASTOPT_FIELD_S2, FASTOPT_FIELD_S3, FASTOPT_FIELD_W};

static int opts_in(const fastopt_opts *po, fo_step_opts *o, fastopt_result *res)
{
#define OPT_FAIL(rc, f) return fail(res, rc, FASTOPT_WHERE_OPTS, FASTOPT_FIELD_##f, -1)
    if (po == NULL)
        OPT_FAIL(FASTOPT_EINVAL, NONE);
    int rc = prefix_check(po, po->size, sizeof(fastopt_opts));
    if (rc != FASTOPT_OK)
        OPT_FAIL(rc, SIZE);
    if (po->reserved != 0)
        OPT_FAIL(FASTOPT_EUNSUPPORTED, FLAGS);
    if (!(po->grad_scale > 0.0) || !isfinite(po->grad_scale))
        OPT_FAIL(FASTOPT_EINVAL, GRAD_SCALE);
    if (po->clip < FO_CLIP_NONE || po->clip > FO_CLIP_OPTAX)
        OPT_FAIL(FASTOPT_EINVAL, CLIP);
    if (po->clip != FO_CLIP_NONE && !(po->max_norm > 0.0))
        OPT_FAIL(FASTOPT_EINVAL, MAX_NORM);
    if (!(po->clip_value >= 0.0))
        OPT_FAIL(FASTOPT_EINVAL, CLIP_VALUE);
    if (po->norm_type != FO_NORM_2 && po->norm_type != FO_NORM_INF)
        OPT_FAIL(FASTOPT_EINVAL, NORM_TYPE);
    if (po->measure < FO_MEASURE_NEEDED || po->measure > FO_MEASURE_GIVEN
            || (po->measure == FO_MEASURE_GIVEN && po->check_finite))
        OPT_FAIL(FASTOPT_EINVAL, MEASURE);
#undef OPT_FAIL
    memset(o, 0, sizeof *o);
    o->grad_scale = po->grad_scale;
    o->max_norm = po->max_norm;
    o->clip_value = po->clip_value;
    o->clip = po->clip;
    o->norm_type = po->norm_type;
    o->check_finite = po->check_finite != 0;
    o->measure = po->measure;
    o->norm = po->norm;
    return FASTOPT_OK;
}

static int group_in(const fastopt_group *pg, int64_t j, fo_step_group *g, fastopt_result *res)
{
#define GRP_FAIL(rc, f) return fail(res, rc, FASTOPT_WHERE_GROUP, FASTOPT_FIELD_##f, j)
    int rc = prefix_check(pg, pg->size, sizeof(fastopt_group));
    if (rc != FASTOPT_OK)
        GRP_FAIL(rc, SIZE);
    /* the published flags only (the rounding of bfloat16 states since 1.1) */
    if (pg->reserved != 0 || (pg->flags & ~(FASTOPT_NESTEROV | FASTOPT_AMSGRAD
                                            | FASTOPT_MAXIMIZE | FASTOPT_CENTERED
                                            | FASTOPT_ROUND_NEAREST
                                            | FASTOPT_ROUND_STOCHASTIC)) != 0)
        GRP_FAIL(FASTOPT_EUNSUPPORTED, FLAGS);
    if ((pg->flags & FASTOPT_ROUND_NEAREST) && (pg->flags & FASTOPT_ROUND_STOCHASTIC))
        GRP_FAIL(FASTOPT_EINVAL, FLAGS);             /* one rounding or the other */
    fo_rule_facts facts = fo_rule_info(pg->rule);
    if (facts.name == NULL)
        GRP_FAIL(FASTOPT_EINVAL, RULE);
    if (pg->t < facts.t0)
        GRP_FAIL(FASTOPT_EINVAL, T);
    memset(g, 0, sizeof *g);
    g->rule = pg->rule;
    g->flags = pg->flags;
    g->t = pg->t;
    g->lr = pg->lr;
    g->alpha = pg->alpha;
    g->beta = pg->beta;
    g->eps = pg->eps;
    g->decay = pg->decay;
    g->decay_post = pg->decay_post;
    g->lr_decay = pg->lr_decay;
    for (int i = 0; i < PUBLIC_EXTRA; i++) {
        if (i < FO_STEP_EXTRA)
            g->extra[i] = pg->extra[i];
        else if (pg->extra[i] != 0.0)     /* a value no rule of this runtime reads */
            GRP_FAIL(FASTOPT_EUNSUPPORTED, HYPER);
    }
    if (!fo_step_group_ok(g))
        GRP_FAIL(FASTOPT_EINVAL, HYPER);
#undef GRP_FAIL
    return FASTOPT_OK;
}

/* The bytes of a tensor of version 1.0 and of 1.1 (the states' storage and key). */
#define TENSOR_1_0 offsetof(fastopt_tensor, states)
#define TENSOR_1_1 (offsetof(fastopt_tensor, key) + sizeof(uint64_t))

/* Check caller tensor k and convert it; ext/is_out get its PTRS ranges. */
static int tensor_in(const fastopt_tensor *pt, int64_t k, const fo_step_group *gs, int64_t ng,
                     fo_step_tensor *t, int64_t *ext, unsigned char *is_out,
                     fastopt_result *res)
{
#define TEN_FAIL(rc, f) return fail(res, rc, FASTOPT_WHERE_TENSOR, f, k)
    /* version 1.0's tensor ends at `states` (own-type states); 1.1's at
     * `key`. A size between the two would cover fields that are not read,
     * and one not a multiple of the struct's alignment misplaces the next
     * element of a list: both are refused. */
    int rc = (pt->size != TENSOR_1_0 && pt->size < TENSOR_1_1)
             || pt->size % _Alignof(fastopt_tensor) != 0 ? FASTOPT_EINVAL
             : prefix_check(pt, pt->size > sizeof *pt ? pt->size : sizeof *pt, sizeof *pt);
    if (rc != FASTOPT_OK)
        TEN_FAIL(rc, FASTOPT_FIELD_SIZE);
    int32_t states = pt->size >= TENSOR_1_1 ? pt->states : FASTOPT_STATES_OWN;
    uint64_t key = pt->size >= TENSOR_1_1 ? pt->key : 0;
    if (pt->size >= TENSOR_1_1 && pt->reserved != 0)
        TEN_FAIL(FASTOPT_EUNSUPPORTED, FASTOPT_FIELD_FLAGS);
    if (pt->flags != 0)
        TEN_FAIL(FASTOPT_EUNSUPPORTED, FASTOPT_FIELD_FLAGS);
    if (pt->n < 0 || pt->n > INT64_MAX / 8)
        TEN_FAIL(FASTOPT_EINVAL, FASTOPT_FIELD_N);
    if (fo_dtype_name(pt->dtype) == NULL || fo_grad_pair(pt->dtype) < 0)   /* (Q8: codes) */
        TEN_FAIL(FASTOPT_EINVAL, FASTOPT_FIELD_DTYPE);
    if (fo_pair(pt->dtype, pt->gdtype) < 0)
        TEN_FAIL(FASTOPT_EINVAL, FASTOPT_FIELD_GDTYPE);
    if (pt->w != NULL && !fo_copy_ok(pt->dtype, pt->wdtype))
        TEN_FAIL(FASTOPT_EINVAL, FASTOPT_FIELD_WDTYPE);
    if (pt->group < 0 || pt->group >= ng)
        TEN_FAIL(FASTOPT_EINVAL, FASTOPT_FIELD_GROUP);
    /* bfloat16 states: a storage row of tables.h */
    int32_t sdtype = states == FASTOPT_STATES_OWN ? pt->dtype : FO_BF16;
    if ((states != FASTOPT_STATES_OWN && states != FASTOPT_STATES_BF16)
            || fo_spair(pt->dtype, pt->gdtype, sdtype) < 0)
        TEN_FAIL(FASTOPT_EINVAL, FASTOPT_FIELD_STATES);
    const void *p[PTRS] = {pt->x, pt->g, pt->s1, pt->s2, pt->s3, pt->w};
    int xs = fo_dtype_size(pt->dtype), ss = fo_dtype_size(sdtype);
    int size[PTRS] = {xs, fo_dtype_size(pt->gdtype), ss, ss, ss,
                      pt->w != NULL ? fo_dtype_size(pt->wdtype) : 1};
    for (int r = 0; r < PTRS; r++) {
        int needed = r < 2;          /* the states: the rule's check below */
        if (!ptr_ok(p[r], needed ? pt->n : 0, size[r]))
            TEN_FAIL(FASTOPT_EINVAL, ptr_field[r]);
        range(ext + 2 * r, pt->n > 0 ? p[r] : NULL, pt->n, size[r]);
        is_out[r] = r != 1;
    }
    *t = (fo_step_tensor){pt->x, pt->g, pt->s1, pt->s2, pt->s3, pt->w, pt->n, pt->dtype,
                          pt->group, pt->gdtype, pt->w != NULL ? pt->wdtype : 0,
                          sdtype, key};
    if (!fo_step_states_ok(t, &gs[pt->group]))   /* the first missing state */
        TEN_FAIL(FASTOPT_EINVAL, t->s1 == NULL ? FASTOPT_FIELD_S1
                                 : t->s2 == NULL ? FASTOPT_FIELD_S2 : FASTOPT_FIELD_S3);
#undef TEN_FAIL
    return FASTOPT_OK;
}

/* The work arrays of a step over nt tensors and ng groups (one block). */
typedef struct step_work {
    fo_step_tensor *ts;
    fo_step_group *gs;
    int64_t *ext;
    unsigned char *is_out;
} step_work;

static int work_alloc(step_work *w, int64_t nt, int64_t ng)
{
    memset(w, 0, sizeof *w);
    if (nt > INT64_MAX / 1024 || ng > INT64_MAX / 1024)
        return FASTOPT_ENOMEM;
    size_t a = (size_t)(nt > 0 ? nt : 1), b = (size_t)(ng > 0 ? ng : 1);
    w->ts = (fo_step_tensor *)malloc(a * sizeof(fo_step_tensor));
    w->gs = (fo_step_group *)malloc(b * sizeof(fo_step_group));
    w->ext = (int64_t *)malloc(a * 2 * PTRS * sizeof(int64_t));
    w->is_out = (unsigned char *)malloc(a * PTRS);
    if (w->ts == NULL || w->gs == NULL || w->ext == NULL || w->is_out == NULL)
        return FASTOPT_ENOMEM;
    return FASTOPT_OK;
}

static void work_free(step_work *w)
{
    free(w->ts);
    free(w->gs);
    free(w->ext);
    free(w->is_out);
}

/* Check and convert every argument of a step into w. */
static int step_in(const fastopt_tensor *ts, int64_t nt, const fastopt_group *gs, int64_t ng,
                   const fastopt_opts *po, fo_step_opts *o, step_work *w,
                   fastopt_result *res)
{
    int rc = opts_in(po, o, res);
    if (rc != FASTOPT_OK)
        return rc;
    /* a list's stride: the caller's size of its struct (its first element's) */
    uint32_t gstride = ng > 0 ? gs->size : 0;
    for (int64_t j = 0; j < ng; j++) {
        const fastopt_group *pg =
            (const fastopt_group *)((const char *)gs + (size_t)j * gstride);
        if (pg->size != gstride)
            return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_GROUP, FASTOPT_FIELD_SIZE, j);
        if ((rc = group_in(pg, j, &w->gs[j], res)) != FASTOPT_OK)
            return rc;
    }
    uint32_t stride = nt > 0 ? ts->size : 0;
    for (int64_t k = 0; k < nt; k++) {
        const fastopt_tensor *pt =
            (const fastopt_tensor *)((const char *)ts + (size_t)k * stride);
        if (pt->size != stride)
            return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_TENSOR, FASTOPT_FIELD_SIZE, k);
        rc = tensor_in(pt, k, w->gs, ng, &w->ts[k], w->ext + 2 * PTRS * k,
                       w->is_out + PTRS * k, res);
        if (rc != FASTOPT_OK)
            return rc;
    }
    int64_t r = first_overlap(w->ext, w->is_out, PTRS * nt);
    if (r == -2)
        return FASTOPT_ENOMEM;
    if (r >= 0)
        return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_TENSOR, ptr_field[r % PTRS], r / PTRS);
    return FASTOPT_OK;
}

static void res_from(fastopt_result *res, const fo_step_result *r)
{
    if (!res_usable(res))
        return;
    res->norm = r->norm;
    res->finite = r->finite;
    res->applied = r->applied;
}

static int capi_step(const fastopt_tensor *ts, int64_t nt, const fastopt_group *gs,
                     int64_t ng, const fastopt_opts *po, fastopt_result *res, int n_threads)
{
    if (res != NULL && res->size < sizeof(fastopt_result))
        return FASTOPT_EINVAL;
    res_begin(res);
    if (nt < 0 || ng < 0 || (nt > 0 && ts == NULL) || (ng > 0 && gs == NULL))
        return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_CALL, FASTOPT_FIELD_COUNT, -1);
    step_work w;
    fo_step_opts o;
    int rc = work_alloc(&w, nt, ng);
    if (rc == FASTOPT_OK)
        rc = step_in(ts, nt, gs, ng, po, &o, &w, res);
    if (rc == FASTOPT_OK) {
        fo_step_result r;
        rc = fo_step(w.ts, nt, w.gs, ng, &o, &r, n_threads);
        res_from(res, &r);
    }
    work_free(&w);
    return rc;
}

/* One tensor of a float type: the list call over a list of one. */
static int capi_step_one(void *x, const void *g, void *s1, void *s2, void *s3, int64_t n,
                         int32_t dtype, const fastopt_group *group, const fastopt_opts *o,
                         fastopt_result *res, int n_threads)
{
    fastopt_tensor t;
    memset(&t, 0, sizeof t);
    t.size = sizeof t;
    t.x = x;
    t.g = g;
    t.s1 = s1;
    t.s2 = s2;
    t.s3 = s3;
    t.n = n;
    t.dtype = t.gdtype = dtype;
    return capi_step(&t, 1, group, group != NULL, o, res, n_threads);
}

static int capi_step_f32(float *x, const float *g, float *s1, float *s2, float *s3,
                         int64_t n, const fastopt_group *group, const fastopt_opts *o,
                         fastopt_result *res, int n_threads)
{
    return capi_step_one(x, g, s1, s2, s3, n, FO_F32, group, o, res, n_threads);
}

static int capi_step_f64(double *x, const double *g, double *s1, double *s2, double *s3,
                         int64_t n, const fastopt_group *group, const fastopt_opts *o,
                         fastopt_result *res, int n_threads)
{
    return capi_step_one(x, g, s1, s2, s3, n, FO_F64, group, o, res, n_threads);
}

/* ---- gradient lists ------------------------------------------------------------ */

/* Check a gradient list (ext: its ranges, all written when `out`); the
 * first overlap of written ranges is reported. */
static int grads_in(const void *const *gs, const int64_t *ns, const int32_t *dtypes,
                    int64_t nt, int out, fastopt_result *res)
{
    if (nt < 0 || (nt > 0 && (gs == NULL || ns == NULL || dtypes == NULL)))
        return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_CALL, FASTOPT_FIELD_COUNT, -1);
    for (int64_t k = 0; k < nt; k++) {
        if (fo_grad_pair(dtypes[k]) < 0)
            return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_TENSOR, FASTOPT_FIELD_DTYPE, k);
        if (ns[k] < 0 || ns[k] > INT64_MAX / 8)
            return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_TENSOR, FASTOPT_FIELD_N, k);
        if (!ptr_ok(gs[k], ns[k], fo_dtype_size(dtypes[k])))
            return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_TENSOR, FASTOPT_FIELD_G, k);
    }
    if (!out || nt < 2)
        return FASTOPT_OK;
    if (nt > INT64_MAX / 64)
        return FASTOPT_ENOMEM;
    int64_t *ext = (int64_t *)malloc((size_t)nt * 2 * sizeof(int64_t));
    unsigned char *is_out = (unsigned char *)malloc((size_t)nt);
    int64_t r = -2;
    if (ext != NULL && is_out != NULL) {
        for (int64_t k = 0; k < nt; k++) {
            range(ext + 2 * k, ns[k] > 0 ? gs[k] : NULL, ns[k], fo_dtype_size(dtypes[k]));
            is_out[k] = 1;
        }
        r = first_overlap(ext, is_out, nt);
    }
    free(ext);
    free(is_out);
    if (r == -2)
        return FASTOPT_ENOMEM;
    if (r >= 0)
        return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_TENSOR, FASTOPT_FIELD_G, r);
    return FASTOPT_OK;
}

static int capi_global_norm(const void *const *gs, const int64_t *ns, const int32_t *dtypes,
                            int64_t nt, double grad_scale, int32_t norm_type,
                            fastopt_result *res, int n_threads)
{
    if (res != NULL && res->size < sizeof(fastopt_result))
        return FASTOPT_EINVAL;
    res_begin(res);
    int rc = grads_in(gs, ns, dtypes, nt, 0, res);
    if (rc != FASTOPT_OK)
        return rc;
    if (!(grad_scale > 0.0) || !isfinite(grad_scale))
        return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_CALL, FASTOPT_FIELD_GRAD_SCALE, -1);
    if (norm_type != FO_NORM_2 && norm_type != FO_NORM_INF && norm_type != FO_NORM_SUMSQ)
        return fail(res, FASTOPT_EINVAL, FASTOPT_WHERE_CALL, FASTOPT_FIELD_NORM_TYPE, -1);
    fo_step_result r;
    rc = fo_global_norm(gs, ns, dtypes, nt, grad_scale, norm_type, &r, n_threads);
    res_from(res, &r);
    return rc;
}

static int capi_clip_grads(void *const *gs, const int64_t *ns, const int32_t *dtypes,
                           int64_t nt, const fastopt_opts *po, fastopt_result *res,
                           int n_threads)
{
    if (res != NULL && res->size < sizeof(fastopt_result))
        return FASTOPT_EINVAL;
    res_begin(res);
    fo_step_opts o;
    int rc = opts_in(po, &o, res);
    if (rc == FASTOPT_OK)
        rc = grads_in((const void *const *)gs, ns, dtypes, nt, 1, res);
    if (rc != FASTOPT_OK)
        return rc;
    fo_step_result r;
    rc = fo_clip_grads(gs, ns, dtypes, nt, &o, &r, n_threads);
    res_from(res, &r);
    return rc;
}

#include "capi_agc.inc"   /* fastopt_agc, fastopt_agc_momentum */

/* ---- facts and the table ----------------------------------------------------------- */

static const char *capi_version(void)
{
    return FASTOPT_VERSION;
}

static const char *capi_error_string(int code)
{
    switch (code) {
    case FASTOPT_OK: return "success";
    case FASTOPT_ENOMEM: return "out of memory";
    case FASTOPT_EINVAL: return "invalid argument (the result's error_where, "
                                "error_field and error_index name it)";
    case FASTOPT_EUNSUPPORTED: return "not supported by this fastopt (a retired call, "
                                      "an unknown flag or a newer struct's field)";
    default: return "unknown return code";
    }
}

static const char *const field_names[] = {FASTOPT_FIELD_NAMES};

static const char *capi_field_name(int field)
{
    if (field < 0 || field >= (int)(sizeof field_names / sizeof field_names[0]))
        return "?";
    return field_names[field];
}

static const char *capi_isa_active(void)
{
    return fo_isa_active();
}

static int capi_default_threads(void)
{
    return fo_max_threads();
}

static const fastopt_capi capi_table = {
    FASTOPT_CAPI_MAJOR, FASTOPT_CAPI_MINOR, sizeof(fastopt_capi),
    sizeof(fastopt_tensor), sizeof(fastopt_group), sizeof(fastopt_opts),
    sizeof(fastopt_result), sizeof(fastopt_agc_tensor),
    capi_version, capi_error_string, capi_field_name, capi_isa_active, capi_default_threads,
    capi_step, capi_step_f32, capi_step_f64, capi_global_norm, capi_clip_grads,
    capi_agc, capi_agc_momentum,
};

const void *fo_capi_table(void)
{
    return &capi_table;
}

const char *fo_capi_name(void)
{
    return FASTOPT_CAPI_NAME;
}
