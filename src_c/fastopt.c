/*
 * fastopt C core: the multi-tensor elementwise driver, Momentum's
 * coefficients, the overlap check and the build's ISA facts. The update
 * rules are in step.c / step.inc. See fastopt.h for the API.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "fastopt.h"
#include "pool.h"

/* ---- instruction sets ------------------------------------------------- */

/*
 * Runtime ISA dispatch: the update loops (step.h's FO_KERNEL) are built for
 * several ISAs with GCC's target_clones and one is picked at load time (an
 * ifunc), so the extension needs no -march flag. Only where the toolchain
 * supports ifuncs (GCC, x86-64 Linux); FO_NO_CLONES turns it off.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && !defined(FO_NO_CLONES) && __GNUC__ >= 12
#define FO_ISA_PATHS "x86-64 baseline, AVX2+FMA (x86-64-v3), AVX-512F (runtime dispatch); " \
    "bfloat16 parameters in their own type, Adam's bfloat16 states: x86-64-v4 where the " \
    "CPU has it; " \
    "8-bit states coded and widened by byte permutes: AVX-512 VBMI where the CPU has it"
#define FO_ISA_MID_FEATURE "x86-64-v3"       /* FO_KERNEL's middle clone */
#define FO_ISA_MID_NAME "AVX2+FMA (x86-64-v3)"
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && !defined(FO_NO_CLONES)
#define FO_ISA_PATHS "x86-64 baseline, AVX2, AVX-512F (runtime dispatch); " \
    "8-bit states coded and widened by byte permutes: AVX-512 VBMI where the CPU has it"
#define FO_ISA_MID_FEATURE "avx2"
#define FO_ISA_MID_NAME "AVX2"
#else
#define FO_ISA_PATHS "compiler default target only"
#endif

const char *fo_isa_paths(void) { return FO_ISA_PATHS; }

const char *fo_isa_active(void)
{
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && !defined(FO_NO_CLONES)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return "AVX-512F";
    if (__builtin_cpu_supports(FO_ISA_MID_FEATURE))
        return FO_ISA_MID_NAME;
    return "x86-64 baseline";
#else
    return "compiler default target";
#endif
}

/* ---- tuning ------------------------------------------------------------- */

/*
 * Below fo_serial_bytes() of parameters in one call (pool.c) the update
 * runs on the calling thread alone. Above it, the concatenated tensors are split into chunks of at most
 * FO_CHUNK_BYTES (at least FO_CHUNKS_PER_THREAD per thread), claimed one at
 * a time by the caller and the pool's threads (pool.c), so a thread slowed
 * or descheduled by a noisy neighbour leaves its share to the others. Both
 * were chosen by measurement: see docs/threads.md and bench/RESULTS.md.
 */
#ifndef FO_CHUNK_BYTES
#define FO_CHUNK_BYTES ((int64_t)256 * 1024)
#endif
#define FO_CHUNKS_PER_THREAD 4
#define FO_ALIGN 64

int64_t fo_chunk_bytes(void) { return FO_CHUNK_BYTES; }
int fo_chunks_per_thread(void) { return FO_CHUNKS_PER_THREAD; }

int fo_have_openmp(void)
{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* The thread-count default: OpenMP's (OMP_NUM_THREADS, omp_set_num_threads,
 * hence threadpoolctl), although the threads are fastopt's own (pool.c). */
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
    return fo_dtype_size(t->dtype);
}

/*
 * Move a byte position p of the concatenation down to the nearest 64-byte
 * aligned address inside the tensor that contains it (or to that tensor's
 * start), or, for a tensor with a quantum, to a multiple of it. Monotonic in p, so adjacent chunks agree on their shared boundary.
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
    if (ts[lo].quantum > 1) {
        int64_t q = ts[lo].quantum * elsize(&ts[lo]);
        return pre[lo] + (p - pre[lo]) / q * q;
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

/* One call split into nchunks near-equal byte ranges (a pool task each). */
typedef struct {
    const fo_tensor *ts;
    const int64_t *pre;
    int64_t nt, q, r;
    fo_piece_fn fn;
    const void *coef;
} run_job;

static void run_chunk(void *vj, int64_t c)
{
    const run_job *j = (const run_job *)vj;
    int64_t p0 = c * j->q + (c < j->r ? c : j->r);
    int64_t p1 = (c + 1) * j->q + (c + 1 < j->r ? c + 1 : j->r);
    run_range(j->ts, j->pre, j->nt, align_boundary(j->ts, j->pre, j->nt, p0),
              align_boundary(j->ts, j->pre, j->nt, p1), j->fn, j->coef);
}

static int run(const fo_tensor *ts, int64_t nt, fo_piece_fn fn,
               const void *coef, int n_threads)
{
    int64_t total = 0;
    for (int64_t k = 0; k < nt; k++) {
        if (ts[k].n < 0 || fo_dtype_size(ts[k].dtype) == 0)
            return FO_EINVAL;
        total += ts[k].n * elsize(&ts[k]);
    }
    int nth = fo_pool_threads(total, n_threads);
    if (nth > 1) {
        int64_t *pre = (int64_t *)malloc((size_t)(nt + 1) * sizeof(int64_t));
        if (pre == NULL)
            return FO_ENOMEM;
        pre[0] = 0;
        for (int64_t k = 0; k < nt; k++)
            pre[k + 1] = pre[k] + ts[k].n * elsize(&ts[k]);
        int64_t nchunks = (total + FO_CHUNK_BYTES - 1) / FO_CHUNK_BYTES;
        if (nchunks < (int64_t)FO_CHUNKS_PER_THREAD * nth)
            nchunks = (int64_t)FO_CHUNKS_PER_THREAD * nth;
        run_job j = {ts, pre, nt, total / nchunks, total % nchunks, fn, coef};
        fo_pool_run(nth, nchunks, run_chunk, &j, total);
        free(pre);
        return FO_OK;
    }
    for (int64_t k = 0; k < nt; k++)
        if (ts[k].n > 0)
            fn(&ts[k], 0, ts[k].n, coef);
    return FO_OK;
}

/* ---- Momentum's coefficients (fo_step and the fused AGC driver) -------- */

int fo_momentum_coefs(const fo_momentum_args *a, fo_momentum_coef *c)
{
    if (a->t < 0 || (a->mode != FO_STANDARD && a->mode != FO_NESTEROV))
        return FO_EINVAL;
    c->lr = a->lr;
    c->alpha = a->alpha;
    c->b = a->t > 0 ? a->beta : 1.0;     /* the first update ignores beta */
    c->nc = a->norm_coefficient;
    c->lr_f = (float)c->lr;
    c->alpha_f = (float)c->alpha;
    c->b_f = (float)c->b;
    c->nc_f = (float)c->nc;
    c->nesterov = a->mode == FO_NESTEROV;
    return FO_OK;
}

/* ---- overlap check ------------------------------------------------------ */

typedef struct { uint64_t key; int64_t idx; } fo_item;

/* Sort the non-empty ranges a[0..cnt) by start (natural merge sort). The
 * caller lists ranges role by role (all x, all g, all states), and each
 * role's arrays are usually allocated in increasing or decreasing address
 * order, so there are few runs and few passes. Returns the sorted array
 * (a or b). */
static fo_item *sort_ranges(fo_item *a, fo_item *b, int64_t cnt, int64_t *run)
{
    int64_t nrun = 0;
    for (int64_t s = 0; s < cnt;) {
        int64_t e = s + 1;
        if (e < cnt && a[e].key < a[s].key) {            /* descending run */
            while (e < cnt && a[e].key < a[e - 1].key)
                e++;
            for (int64_t p = s, q = e - 1; p < q; p++, q--) {
                fo_item tmp = a[p]; a[p] = a[q]; a[q] = tmp;
            }
        } else {
            while (e < cnt && a[e].key >= a[e - 1].key)
                e++;
        }
        run[nrun++] = s;
        s = e;
    }
    run[nrun] = cnt;
    while (nrun > 1) {
        int64_t out = 0;
        for (int64_t r = 0; r < nrun; r += 2) {
            int64_t p = run[r], pe = run[r + 1 < nrun ? r + 1 : nrun];
            int64_t q = pe, qe = r + 1 < nrun ? run[r + 2] : pe, o = p;
            while (p < pe && q < qe)
                b[o++] = a[q].key < a[p].key ? a[q++] : a[p++];
            while (p < pe) b[o++] = a[p++];
            while (q < qe) b[o++] = a[q++];
            run[out++] = run[r];
        }
        run[out] = cnt;
        nrun = out;
        fo_item *tmp = a; a = b; b = tmp;
    }
    return a;
}

/* The sweep over ranges in order of start: a written range must not start
 * before the furthest end seen so far, a read range not before the furthest
 * written end. With check set, order[] is only a hint: returns -1 as soon
 * as it does not sort the ranges (nothing concluded). */
static int sweep(const int64_t *ext, const unsigned char *is_out,
                 const int64_t *order, int64_t cnt, int64_t m, int check,
                 int64_t *oi, int64_t *oj)
{
    int64_t end_any = INT64_MIN, end_out = INT64_MIN, who_any = -1, who_out = -1;
    int64_t prev = INT64_MIN;
    for (int64_t s = 0; s < cnt; s++) {
        int64_t i = order[s];
        if (check && (i < 0 || i >= m))
            return -1;
        int64_t st = ext[2 * i], en = ext[2 * i + 1];
        if (check && (st >= en || st < prev))
            return -1;
        prev = st;
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

int fo_find_overlap(const int64_t *ext, const unsigned char *is_out,
                    int64_t m, int64_t *scratch, int64_t *order,
                    int64_t *norder, int64_t *oi, int64_t *oj)
{
    fo_item *a = (fo_item *)scratch, *b = (fo_item *)scratch + m;
    int64_t cnt = 0;
    for (int64_t i = 0; i < m; i++)
        cnt += ext[2 * i] < ext[2 * i + 1];
    if (cnt < 2)
        return 0;
    if (cnt <= 16) {              /* a few ranges: pairwise is cheapest */
        cnt = 0;
        for (int64_t i = 0; i < m; i++)
            if (ext[2 * i] < ext[2 * i + 1])
                a[cnt++].idx = i;
        for (int64_t s = 0; s < cnt; s++)
            for (int64_t u = s + 1; u < cnt; u++) {
                int64_t i = a[s].idx, j = a[u].idx;
                if ((is_out[i] || is_out[j]) && ext[2 * i] < ext[2 * j + 1]
                        && ext[2 * j] < ext[2 * i + 1]) {
                    *oi = i;
                    *oj = j;
                    return 1;
                }
            }
        return 0;
    }
    /* The previous call's order, if it still sorts these ranges: it lists
     * distinct indices, so cnt of them, each non-empty now and in order of
     * start, are a permutation of the current non-empty ranges. Verified
     * during the sweep itself (one pass in a training loop). */
    if (*norder == cnt) {
        int r = sweep(ext, is_out, order, cnt, m, 1, oi, oj);
        if (r >= 0)
            return r;
    }
    cnt = 0;
    for (int64_t i = 0; i < m; i++)
        if (ext[2 * i] < ext[2 * i + 1]) {
            a[cnt].idx = i;
            a[cnt++].key = (uint64_t)ext[2 * i];
        }
    fo_item *srt = sort_ranges(a, b, cnt, scratch + 4 * m);
    for (int64_t s = 0; s < cnt; s++)
        order[s] = srt[s].idx;
    *norder = cnt;
    return sweep(ext, is_out, order, cnt, m, 0, oi, oj);
}

/* ---- the elementwise driver, shared with step.c -------------- */

int fo_run_elementwise(const fo_tensor *ts, int64_t nt,
                       void (*fn)(const fo_tensor *, int64_t, int64_t,
                                  const void *),
                       const void *ctx, int n_threads)
{
    return run(ts, nt, fn, ctx, n_threads);
}
