/*
 * fastopt C core: kernel instantiation, the multi-tensor driver and the
 * overlap check. See fastopt.h for the API.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fastopt.h"

/* ---- kernel instantiation (one body, two types) ------------------------ */

#define FO_T float
#define FO_NAME(op) op##_f32
#define FO_SQRT sqrtf
#include "kernels.inc"
#undef FO_T
#undef FO_NAME
#undef FO_SQRT

#define FO_T double
#define FO_NAME(op) op##_f64
#define FO_SQRT sqrt
#include "kernels.inc"
#undef FO_T
#undef FO_NAME
#undef FO_SQRT

/* ---- tuning ------------------------------------------------------------- */

/*
 * Below FO_SERIAL_BYTES of parameters in one call the update runs on the
 * calling thread without entering an OpenMP region (a region costs ~1 us
 * even when it does nothing). Above it, the concatenated tensors are split
 * into chunks of about FO_CHUNK_BYTES (at least one per thread) handed out
 * dynamically, so a thread slowed by a noisy neighbour does not hold the
 * others up. Both were chosen by measurement: see bench/RESULTS.md.
 */
#ifndef FO_SERIAL_BYTES
#define FO_SERIAL_BYTES ((int64_t)256 * 1024)
#endif
#ifndef FO_CHUNK_BYTES
#define FO_CHUNK_BYTES ((int64_t)1024 * 1024)
#endif
#define FO_ALIGN 64

int64_t fo_serial_bytes(void) { return FO_SERIAL_BYTES; }
int64_t fo_chunk_bytes(void) { return FO_CHUNK_BYTES; }

int fo_have_openmp(void)
{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

int fo_max_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int fo_num_procs(void)
{
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

/* ---- the multi-tensor driver ------------------------------------------- */

/* Update elements [lo, hi) of one tensor with precomputed coefficients. */
typedef void (*fo_piece_fn)(const fo_tensor *t, int64_t lo, int64_t hi,
                            const void *coef);

static inline int64_t elsize(const fo_tensor *t)
{
    return t->dtype == FO_F64 ? 8 : 4;
}

/*
 * Move a byte position p of the concatenation down to the nearest 64-byte
 * aligned address inside the tensor that contains it (or to that tensor's
 * start). Monotonic in p, so adjacent chunks agree on their shared boundary.
 */
static int64_t align_boundary(const fo_tensor *ts, const int64_t *pre,
                              int64_t nt, int64_t p)
{
    if (p <= 0 || p >= pre[nt])
        return p <= 0 ? 0 : pre[nt];
    int64_t lo = 0, hi = nt;            /* largest k with pre[k] <= p */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pre[mid] <= p) lo = mid; else hi = mid;
    }
    uintptr_t base = (uintptr_t)ts[lo].x;
    uintptr_t at = (base + (uintptr_t)(p - pre[lo])) & ~(uintptr_t)(FO_ALIGN - 1);
    return pre[lo] + (at < base ? 0 : (int64_t)(at - base));
}

/* Run the bytes [b0, b1) of the concatenation, tensor piece by piece. */
static void run_range(const fo_tensor *ts, const int64_t *pre, int64_t nt,
                      int64_t b0, int64_t b1, fo_piece_fn fn, const void *coef)
{
    if (b0 >= b1)
        return;
    int64_t k = 0, hi = nt;              /* largest k with pre[k] <= b0 */
    while (hi - k > 1) {
        int64_t mid = k + (hi - k) / 2;
        if (pre[mid] <= b0) k = mid; else hi = mid;
    }
    for (; b0 < b1 && k < nt; k++) {
        int64_t end = pre[k + 1] < b1 ? pre[k + 1] : b1;
        if (end > b0) {
            int64_t es = elsize(&ts[k]);
            fn(&ts[k], (b0 - pre[k]) / es, (end - pre[k]) / es, coef);
        }
        b0 = end;
    }
}

static int run(const fo_tensor *ts, int64_t nt, fo_piece_fn fn,
               const void *coef, int n_threads)
{
    int64_t total = 0;
    for (int64_t k = 0; k < nt; k++) {
        if (ts[k].n < 0 || (ts[k].dtype != FO_F32 && ts[k].dtype != FO_F64))
            return FO_EINVAL;
        total += ts[k].n * elsize(&ts[k]);
    }
#ifdef _OPENMP
    if (n_threads > 1 && total >= FO_SERIAL_BYTES) {
        int64_t *pre = (int64_t *)malloc((size_t)(nt + 1) * sizeof(int64_t));
        if (pre == NULL)
            return FO_ENOMEM;
        pre[0] = 0;
        for (int64_t k = 0; k < nt; k++)
            pre[k + 1] = pre[k] + ts[k].n * elsize(&ts[k]);
        int64_t nchunks = (total + FO_CHUNK_BYTES - 1) / FO_CHUNK_BYTES;
        if (nchunks < n_threads)
            nchunks = n_threads;
        int64_t q = total / nchunks, r = total % nchunks;
        #pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) \
            default(none) shared(ts, pre, nt, fn, coef, nchunks, q, r)
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t p0 = c * q + (c < r ? c : r);
            int64_t p1 = (c + 1) * q + (c + 1 < r ? c + 1 : r);
            run_range(ts, pre, nt, align_boundary(ts, pre, nt, p0),
                      align_boundary(ts, pre, nt, p1), fn, coef);
        }
        free(pre);
        return FO_OK;
    }
#else
    (void)n_threads;
#endif
    for (int64_t k = 0; k < nt; k++)
        if (ts[k].n > 0)
            fn(&ts[k], 0, ts[k].n, coef);
    return FO_OK;
}

/* ---- Momentum ----------------------------------------------------------- */

typedef struct {
    double lr, alpha, b, nc;
    float lr_f, alpha_f, b_f, nc_f;
    int nesterov;
} momentum_coef;

static void momentum_piece(const fo_tensor *t, int64_t lo, int64_t hi,
                           const void *vc)
{
    const momentum_coef *c = (const momentum_coef *)vc;
    if (t->dtype == FO_F32)
        fo_momentum_f32(hi - lo, (float *)t->x + lo, (const float *)t->g + lo,
                        (float *)t->s1 + lo, c->lr_f, c->alpha_f, c->b_f,
                        c->nc_f, c->nesterov);
    else
        fo_momentum_f64(hi - lo, (double *)t->x + lo, (const double *)t->g + lo,
                        (double *)t->s1 + lo, c->lr, c->alpha, c->b, c->nc,
                        c->nesterov);
}

int fo_momentum(const fo_tensor *ts, int64_t nt, const fo_momentum_args *a,
                int n_threads)
{
    if (a->t < 0 || (a->mode != FO_STANDARD && a->mode != FO_NESTEROV))
        return FO_EINVAL;
    momentum_coef c;
    c.lr = a->lr;
    c.alpha = a->alpha;
    c.b = a->t > 0 ? a->beta : 1.0;     /* the first update ignores beta */
    c.nc = a->norm_coefficient;
    c.lr_f = (float)c.lr;
    c.alpha_f = (float)c.alpha;
    c.b_f = (float)c.b;
    c.nc_f = (float)c.nc;
    c.nesterov = a->mode == FO_NESTEROV;
    return run(ts, nt, momentum_piece, &c, n_threads);
}

/* ---- Adagrad ------------------------------------------------------------ */

typedef struct {
    double r, eps, nc;
    float r_f, eps_f, nc_f;
} adagrad_coef;

static void adagrad_piece(const fo_tensor *t, int64_t lo, int64_t hi,
                          const void *vc)
{
    const adagrad_coef *c = (const adagrad_coef *)vc;
    if (t->dtype == FO_F32)
        fo_adagrad_f32(hi - lo, (float *)t->x + lo, (const float *)t->g + lo,
                       (float *)t->s1 + lo, c->r_f, c->eps_f, c->nc_f);
    else
        fo_adagrad_f64(hi - lo, (double *)t->x + lo, (const double *)t->g + lo,
                       (double *)t->s1 + lo, c->r, c->eps, c->nc);
}

int fo_adagrad(const fo_tensor *ts, int64_t nt, const fo_adagrad_args *a,
               int n_threads)
{
    if (a->t < 0)
        return FO_EINVAL;
    adagrad_coef c;
    c.r = a->lr / (1.0 + (double)a->t * a->decay_factor);
    c.eps = a->epsilon;
    c.nc = a->norm_coefficient;
    c.r_f = (float)c.r;
    c.eps_f = (float)c.eps;
    c.nc_f = (float)c.nc;
    return run(ts, nt, adagrad_piece, &c, n_threads);
}

/* ---- Adam --------------------------------------------------------------- */

typedef struct {
    double radj, alpha, oma, beta, omb, eps, nc, post;
    float radj_f, alpha_f, oma_f, beta_f, omb_f, eps_f, nc_f, post_f;
} adam_coef;

static void adam_piece(const fo_tensor *t, int64_t lo, int64_t hi,
                       const void *vc)
{
    const adam_coef *c = (const adam_coef *)vc;
    if (t->dtype == FO_F32)
        fo_adam_f32(hi - lo, (float *)t->x + lo, (const float *)t->g + lo,
                    (float *)t->s1 + lo, (float *)t->s2 + lo, c->radj_f,
                    c->alpha_f, c->oma_f, c->beta_f, c->omb_f, c->eps_f,
                    c->nc_f, c->post_f);
    else
        fo_adam_f64(hi - lo, (double *)t->x + lo, (const double *)t->g + lo,
                    (double *)t->s1 + lo, (double *)t->s2 + lo, c->radj,
                    c->alpha, c->oma, c->beta, c->omb, c->eps, c->nc, c->post);
}

int fo_adam(const fo_tensor *ts, int64_t nt, const fo_adam_args *a,
            int n_threads)
{
    if (a->t < 0)
        return FO_EINVAL;
    adam_coef c;
    double t = (double)a->t;
    c.radj = a->t > 0
        ? a->lr * sqrt(1.0 - pow(a->beta, t)) / (1.0 - pow(a->alpha, t))
        : a->lr;
    c.alpha = a->alpha;
    c.oma = 1.0 - a->alpha;
    c.beta = a->beta;
    c.omb = 1.0 - a->beta;
    c.eps = a->epsilon;
    c.nc = a->norm_coefficient;
    c.post = 1.0 - a->norm_coefficient_post;
    c.radj_f = (float)c.radj;
    c.alpha_f = (float)c.alpha;
    c.oma_f = (float)c.oma;
    c.beta_f = (float)c.beta;
    c.omb_f = (float)c.omb;
    c.eps_f = (float)c.eps;
    c.nc_f = (float)c.nc;
    c.post_f = (float)c.post;
    return run(ts, nt, adam_piece, &c, n_threads);
}

/* ---- overlap check ------------------------------------------------------ */

int fo_find_overlap(const int64_t *ext, const unsigned char *is_out,
                    int64_t m, int64_t *scratch, int64_t *oi, int64_t *oj)
{
    int64_t *a = scratch, *b = scratch + m;
    uint64_t *key = (uint64_t *)(scratch + 2 * m);
    int64_t cnt = 0;
    int64_t lo = INT64_MAX;
    for (int64_t i = 0; i < m; i++)
        if (ext[2 * i] < ext[2 * i + 1]) {
            a[cnt++] = i;
            if (ext[2 * i] < lo)
                lo = ext[2 * i];
        }
    if (cnt < 2)
        return 0;
    if (cnt <= 16) {              /* a few ranges: pairwise is cheapest */
        for (int64_t s = 0; s < cnt; s++)
            for (int64_t u = s + 1; u < cnt; u++) {
                int64_t i = a[s], j = a[u];
                if ((is_out[i] || is_out[j]) && ext[2 * i] < ext[2 * j + 1]
                        && ext[2 * j] < ext[2 * i + 1]) {
                    *oi = i;
                    *oj = j;
                    return 1;
                }
            }
        return 0;
    }
    uint64_t maxkey = 0;
    for (int64_t s = 0; s < cnt; s++) {
        key[a[s]] = (uint64_t)(ext[2 * a[s]] - lo);
        if (key[a[s]] > maxkey)
            maxkey = key[a[s]];
    }
    /* LSD radix sort of the indices by start, 8 bits a pass, only as many
     * passes as the spread of the starts needs (stable, O(cnt) a pass). */
    for (int shift = 0; shift < 64 && (maxkey >> shift) != 0; shift += 8) {
        int64_t count[257];
        memset(count, 0, sizeof(count));
        for (int64_t s = 0; s < cnt; s++)
            count[((key[a[s]] >> shift) & 0xff) + 1]++;
        for (int d = 0; d < 256; d++)
            count[d + 1] += count[d];
        for (int64_t s = 0; s < cnt; s++)
            b[count[(key[a[s]] >> shift) & 0xff]++] = a[s];
        int64_t *tmp = a; a = b; b = tmp;
    }
    /* Sweep: a written range must not start before the furthest end seen so
     * far; a read range must not start before the furthest written end. */
    int64_t end_any = INT64_MIN, end_out = INT64_MIN, who_any = -1, who_out = -1;
    for (int64_t s = 0; s < cnt; s++) {
        int64_t i = a[s], st = ext[2 * i], en = ext[2 * i + 1];
        if (is_out[i] ? st < end_any : st < end_out) {
            *oi = is_out[i] ? who_any : who_out;
            *oj = i;
            return 1;
        }
        if (en > end_any) { end_any = en; who_any = i; }
        if (is_out[i] && en > end_out) { end_out = en; who_out = i; }
    }
    return 0;
}
