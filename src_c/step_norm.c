/*
 * The norm pass of the whole step (pass 1 of fo_step, fo_global_norm):
 * each gradient is cut into blocks of FO_STEP_BLOCK elements; every block
 * is reduced alone (serially, fixed lanes) into its own slot, blocks are
 * handed to the pool's threads (pool.h) in any order, and the slots are
 * added in tensor then block order afterwards: the norm does not depend on
 * the thread count or on who ran what. The finiteness check rides along.
 */
#include "pool.h"
#include "step.h"

/* Blocks of one work item (64 Ki elements). */
#define STEP_ITEM_BLOCKS 16
/* Blocks whose results pass 1 keeps on the stack (9 KiB). */
#define STEP_STACK_BLOCKS 1024

/* How pass 1 reads gradients of one compute type: u = g (mode 0), g / s (1) or
 * g * s with s the exact inverse of a power-of-two grad_scale (2: the same
 * bits as dividing). Worked out once per pass, not per block. */
typedef struct {
    double s;
    int mode;
} step_unscale;

#define FO_TEMPLATE "step_norm.inc"
#include "types.inc"
#undef FO_TEMPLATE

static void step_unscale_init(step_unscale *u, double scale, int f32)
{
    double inv = scale != 1.0 ? step_exact_inverse(scale, f32) : 0.0;
    u->mode = scale == 1.0 ? 0 : inv != 0.0 ? 2 : 1;
    u->s = u->mode == 2 ? inv : scale;
}

static inline int step_run_block(const step_grad *gr, int64_t b,
                                 const step_unscale *us, int norm_inf,
                                 double *part)
{
    int64_t o = b * FO_STEP_BLOCK;
    int64_t m = gr->n - o < FO_STEP_BLOCK ? gr->n - o : FO_STEP_BLOCK;
    switch (gr->pair) {
#define FO_X_PAIR(name, xt, gt) \
    case FO_PAIR_##name: return step_run_block_##name(gr, o, m, us, norm_inf, part);
    FO_PAIR_TABLE(FO_X_PAIR)
#undef FO_X_PAIR
    default: return 1;
    }
}

/* bad[] of a block: 1 if some u is not finite; STEP_STALE (in its
 * tensor's first block) if a guard of the tensor failed. */
#define STEP_STALE 2

/* Pass 1 as pool tasks: item i covers up to STEP_ITEM_BLOCKS blocks of one
 * gradient, starting at block items[2i+1] of gradient items[2i]; every
 * block writes its own slot of part / bad, so who runs it changes nothing.
 * The item holding a tensor's first block checks the tensor's guards
 * there: their reads overlap the gradients' instead of running before. */
typedef struct {
    const fo_step_opts *o;  /* its guards (NULL: none) */
    const step_grad *gr;
    const int64_t *items;
    double *part;
    unsigned char *bad;
    step_unscale us[2];     /* by compute type (FO_WIDE): float, double */
    int norm_inf;
} step_norm_job;

static void step_norm_task(void *vj, int64_t it)
{
    const step_norm_job *j = (const step_norm_job *)vj;
    const step_grad *g = &j->gr[j->items[2 * it]];
    int64_t b = j->items[2 * it + 1];
    int64_t be = b + STEP_ITEM_BLOCKS;
    if (be > step_nblocks(g->n))
        be = step_nblocks(g->n);
    unsigned char stale = b == 0 && !step_guards_hold(j->o, j->items[2 * it])
                          ? STEP_STALE : 0;
    for (; b < be; b++, stale = 0)
        j->bad[g->b0 + b] = (unsigned char)(step_run_block(
            g, b, j->us, j->norm_inf, &j->part[g->b0 + b]) | stale);
}

/* Fill part[] and bad[] for every block of gr[0..nt): on the pool when
 * fo_pool_threads says so, else in order on the calling thread. */
static int step_blocks(const step_grad *gr, int64_t nt, int64_t bytes,
                       step_norm_job *j, int n_threads)
{
    int nth = fo_pool_threads(bytes, n_threads);
    if (nth <= 1) {
        for (int64_t k = 0; k < nt; k++)
            for (int64_t b = 0; b < step_nblocks(gr[k].n); b++)
                j->bad[gr[k].b0 + b] = (unsigned char)(step_run_block(
                    &gr[k], b, j->us, j->norm_inf, &j->part[gr[k].b0 + b])
                    | (b == 0 && !step_guards_hold(j->o, k) ? STEP_STALE : 0));
        return FO_OK;
    }
    int64_t ni = 0;
    for (int64_t k = 0; k < nt; k++)
        ni += (step_nblocks(gr[k].n) + STEP_ITEM_BLOCKS - 1) / STEP_ITEM_BLOCKS;
    int64_t *items = (int64_t *)malloc((size_t)(2 * ni + 1) * sizeof(int64_t));
    if (items == NULL)
        return FO_ENOMEM;
    ni = 0;
    for (int64_t k = 0; k < nt; k++)
        for (int64_t b = 0; b < step_nblocks(gr[k].n); b += STEP_ITEM_BLOCKS) {
            items[2 * ni] = k;
            items[2 * ni + 1] = b;
            ni++;
        }
    j->items = items;
    fo_pool_run(nth, ni, step_norm_task, j, bytes);
    free(items);
    return FO_OK;
}

/*
 * Norm of gr[0..nt) (blocks numbered by gr[k].b0, nb in all; total bytes
 * given) into res->norm / res->finite. FO_OK or FO_ENOMEM.
 */
static int step_pass1(const step_grad *gr, int64_t nt, int64_t nb,
                      int64_t bytes, const fo_step_opts *o, double scale,
                      int norm_type, fo_step_result *res, int n_threads)
{
    int norm_inf = norm_type == FO_NORM_INF;
    /* the block results: on the stack up to STEP_STACK_BLOCKS blocks (no
     * allocation for a step of many small tensors), else on the heap */
    double part_st[STEP_STACK_BLOCKS];
    unsigned char bad_st[STEP_STACK_BLOCKS];
    int heap = nb > STEP_STACK_BLOCKS;
    double *part = heap ? (double *)malloc((size_t)nb * sizeof(double)) : part_st;
    unsigned char *bad = heap ? (unsigned char *)malloc((size_t)nb) : bad_st;
    step_norm_job j = {o, gr, NULL, part, bad, {{0.0, 0}, {0.0, 0}}, norm_inf};
    step_unscale_init(&j.us[0], scale, 1);
    step_unscale_init(&j.us[1], scale, 0);
    int rc = part == NULL || bad == NULL ? FO_ENOMEM
             : step_blocks(gr, nt, bytes, &j, n_threads);
    if (rc == FO_OK) {
        double total = 0.0;
        int finite = 1, nan = 0, stale = 0;
        for (int64_t i = 0; i < nb; i++) {  /* fixed order: tensor, block */
            finite &= !(bad[i] & 1);
            stale |= bad[i] & STEP_STALE;
            if (!norm_inf)
                total += part[i];
            else if (part[i] != part[i])
                nan = 1;
            else if (part[i] > total)
                total = part[i];
        }
        res->norm = norm_inf ? (nan ? NAN : total)
                              : norm_type == FO_NORM_SUMSQ ? total : sqrt(total);
        res->finite = finite;
        if (stale)
            rc = FO_ESTALE;
    }
    if (heap) {
        free(part);
        free(bad);
    }
    return rc;
}

int step_measure(const fo_step_opts *o, const step_grad *gr, int64_t nt,
                 int64_t nb, int64_t bytes, fo_step_result *res,
                 int n_threads, double *norm)
{
    *norm = NAN;
    if (o->measure == FO_MEASURE_GIVEN) {
        *norm = res->norm = o->norm;
    } else if (step_runs_pass1(o)) {
        int rc = step_pass1(gr, nt, nb, bytes, o, o->grad_scale, o->norm_type,
                            res, n_threads);
        if (rc != FO_OK)
            return rc;
        *norm = res->norm;
    }
    return FO_OK;
}

/* ---- gradient lists ------------------------------------------------------------ */

/* Check a list and fill the pass-1 view (and the elementwise view). */
int step_grad_list(const void *const *gs, const int64_t *ns,
                   const int32_t *dtypes, int64_t nt, step_grad *gr,
                   fo_tensor *view, int64_t *nb, int64_t *bytes)
{
    *nb = 0;
    *bytes = 0;
    for (int64_t k = 0; k < nt; k++) {
        int pair = fo_grad_pair(dtypes[k]);
        if (pair < 0 || ns[k] < 0 || (ns[k] > 0 && gs[k] == NULL))
            return FO_EINVAL;
        step_grad_add(&gr[k], gs[k], ns[k], dtypes[k], pair, nb, bytes);
        if (view != NULL)
            step_view(&view[k], (void *)gs[k], gs[k], NULL, NULL, ns[k], dtypes[k]);
    }
    return FO_OK;
}

int fo_global_norm(const void *const *gs, const int64_t *ns,
                   const int32_t *dtypes, int64_t nt, double grad_scale,
                   int32_t norm_type, fo_step_result *res, int n_threads)
{
    step_result_init(res);
    if (nt < 0 || !(grad_scale > 0.0) || !isfinite(grad_scale)
            || (norm_type != FO_NORM_2 && norm_type != FO_NORM_INF
                && norm_type != FO_NORM_SUMSQ))
        return FO_EINVAL;
    step_grad *gr = (step_grad *)malloc((size_t)(nt > 0 ? nt : 1) * sizeof(step_grad));
    if (gr == NULL)
        return FO_ENOMEM;
    int64_t nb, bytes;
    int rc = step_grad_list(gs, ns, dtypes, nt, gr, NULL, &nb, &bytes);
    if (rc == FO_OK)            /* no options: no guards */
        rc = step_pass1(gr, nt, nb, bytes, NULL, grad_scale, norm_type, res,
                        n_threads);
    free(gr);
    return rc;
}
