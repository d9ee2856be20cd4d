/*
 * Private to the step files (step.c: checks, coefficients and the update
 * pass; step_norm.c: the norm pass): what both halves share. Not part of
 * the C API (that is fastopt.h).
 */
#ifndef FO_STEP_H
#define FO_STEP_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fastopt.h"
#include "half.h"
#include "rules.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && !defined(FO_NO_CLONES) && __GNUC__ >= 12
/* x86-64-v3 is AVX2 with FMA (GCC 12 dispatches on it): the fused
 * multiply-adds of torch's rules (FO_FMA) vectorize there; the baseline
 * clone calls the C library's fma, which rounds the same, once. */
#define FO_KERNEL __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
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

/* One gradient as the norm pass sees it. */
typedef struct {
    const void *g;
    int64_t n;
    int64_t b0;      /* index of its first block among all blocks */
    int32_t dtype;   /* its element type */
    int32_t pair;    /* the storage pair it is read in (FO_PAIR_TABLE) */
} step_grad;

static inline int64_t step_nblocks(int64_t n)
{
    return (n + FO_STEP_BLOCK - 1) / FO_STEP_BLOCK;
}

/* Append gradient (g, n, dtype), read in storage pair `pair`, as gr: its
 * first block is *nb; count its blocks into *nb and its bytes into
 * *bytes. */
static inline void step_grad_add(step_grad *gr, const void *g, int64_t n,
                                 int32_t dtype, int32_t pair, int64_t *nb,
                                 int64_t *bytes)
{
    gr->g = g;
    gr->n = n;
    gr->dtype = dtype;
    gr->pair = pair;
    gr->b0 = *nb;
    *nb += step_nblocks(n);
    *bytes += n * fo_dtype_size(dtype);
}

/* The elementwise driver's view of a tensor. */
static inline void step_view(fo_tensor *v, void *x, const void *g, void *s1,
                             void *s2, int64_t n, int32_t dtype)
{
    v->x = x;
    v->g = g;
    v->s1 = s1;
    v->s2 = s2;
    v->n = n;
    v->dtype = dtype;
    v->quantum = 0;
}

/* Does pass 1 run for these options (else no gradient is read before the
 * update)? */
static inline int step_runs_pass1(const fo_step_opts *o)
{
    return o->measure != FO_MEASURE_GIVEN
        && (o->check_finite || o->clip != FO_CLIP_NONE || o->measure);
}

#if defined(__GNUC__)
#define STEP_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#else
#define STEP_LOAD(p) (*(p))
#endif

/* Do tensor k's guards hold (fastopt.h, fo_step_guard; o NULL: none)? Each
 * word is read once; relaxed, as the caller's other threads may write it. */
static inline int step_guards_hold(const fo_step_opts *o, int64_t k)
{
    if (o == NULL || o->guards == NULL)
        return 1;
    const fo_step_guard *g = o->guards + k * o->guards_per_tensor;
    for (int64_t r = 0; r < o->guards_per_tensor; r++, g++) {
        if ((g->w[0] != NULL && STEP_LOAD(g->w[0]) != g->want[0])
                || (g->w[1] != NULL && STEP_LOAD(g->w[1]) != g->want[1])
                || (g->flags != NULL && (STEP_LOAD(g->flags) & g->mask) != g->mask))
            return 0;
    }
    return 1;
}

static inline void step_result_init(fo_step_result *res)
{
    res->norm = NAN;
    res->finite = 1;
    res->applied = 0;
}

/*
 * 1/s if s is a power of two whose inverse the type (f32: float) holds
 * exactly (not 0, not inf: below 2**-1023 the inverse overflows double
 * too); else 0. Multiplying by it gives the very bits
 * of dividing by s (both are the correctly rounded g * 2**-k), and a
 * multiplication is several times cheaper than a division in a vector loop.
 */
static inline double step_exact_inverse(double s, int f32)
{
    int e;
    if (!(s > 0.0) || !isfinite(s) || frexp(s, &e) != 0.5)
        return 0.0;
    double inv = 1.0 / s;
    if (!isfinite(inv))
        return 0.0;
    if (f32) {
        float sf = (float)s, invf = (float)inv;
        if (!isfinite(sf) || invf == 0.0f || !isfinite(invf) || (double)invf != inv)
            return 0.0;
    }
    return inv;
}

/* The lanes la[0..FO_STEP_LANES) of the norm pass (step_norm.inc) and of
 * LAMB's and LARS's trust pass (step_rules_trust.inc) closed by the halving
 * tree: one fixed order for every block. */
static inline double step_lanes_close(double *la)
{
#if FO_STEP_LANES == 32
    for (int l = 0; l < 16; l++)
        la[l] += la[l + 16];
#endif
    for (int l = 0; l < 8; l++)
        la[l] += la[l + 8];
    for (int l = 0; l < 4; l++)
        la[l] += la[l + 4];
    for (int l = 0; l < 2; l++)
        la[l] += la[l + 2];
    return la[0] + la[1];
}

/* The rounded copy of n new float32 parameters x into w, of type wt (a
 * row of FO_COPY_TABLE): half.c. */
void step_copy_out(int32_t wt, int64_t n, const float *x, void *w);

/* half.c: n 16-bit values of type st (FO_BF16 or FO_F16) widened to float
 * exactly (states and parameters stored apart, the norm pass's gradient
 * blocks). States are rounded back to nearest, or, in bfloat16,
 * stochastically (element k with the bits of index i0 + k in the stream
 * h: half.h, fo_sr_bits). */
void step_widen16(int32_t st, int64_t n, const uint16_t *s, float *out);
/* float16 gradients widened by the CPU's conversion instruction, where
 * step_f16_hw() says the CPU and the build have it (else the rule widens
 * them in its loop): exact, a NaN keeping its bits as fo_f16_to_f32 keeps
 * them. */
int step_f16_hw(void);
void step_widen_f16_hw(int64_t n, const uint16_t *h, float *out);
/* The norm pass's FO_STEP_LANES lanes over 16-bit gradients of type st
 * (step_norm.inc, step_sumsq_body, in float as FO_U with s and mode) by
 * half.c's AVX-512F loop, which widens in registers: la[] as that body
 * leaves it after the returned count of elements (a multiple of the
 * lanes; 0, la[] zero, where the CPU or the build has no such loop). */
int64_t step_sumsq16_lanes(int32_t st, int64_t m, const uint16_t *g, float s, int mode,
                           double *la);
void step_states_nearest(int32_t st, int64_t n, const float *v, uint16_t *s);
void step_states_stochastic(int64_t n, const float *v, uint16_t *s, uint64_t h,
                            uint64_t i0);

/* The kernels' own conversions over n contiguous values, for the tests:
 * float32 to a copy type (FO_COPY_TABLE) rounded as fo_step's copies are,
 * or a 16-bit type to float32 widened as fo_step reads gradients. FO_OK,
 * or FO_EINVAL for another pair of types or n < 0. */
int fo_convert(const void *src, int32_t st, void *dst, int32_t dt, int64_t n);

/* q8.c: 8-bit blockwise states, one block of n <= FO_Q8_BLOCK elements
 * on map kind 0 (signed) or 1 (unsigned): widened from codes c and the
 * block's absmax, or stored as codes of the returned new absmax. */
void step_q8_widen(int32_t kind, int64_t n, const uint8_t *c, float absmax, float *out);
float step_q8_store(int32_t kind, int64_t n, const float *v, uint8_t *c);

/* For the tests and the front ends: map kind's 256 values (NULL for
 * another kind), and n values stored block by block as a step stores
 * them, codes c and one absmax per FO_Q8_BLOCK (FO_OK, or FO_EINVAL for
 * another kind or n < 0). */
const float *fo_q8_map(int32_t kind);
int fo_q8_store(const float *v, int64_t n, int32_t kind, uint8_t *c, float *absmax);

/* For the tests: n float32 values v rounded stochastically to bfloat16
 * states s as a step rounds a slot of stream h whose first element has
 * index i0 (step_states_stochastic). FO_OK, or FO_EINVAL for n < 0. */
int fo_round_stochastic(const float *v, uint16_t *s, int64_t n, uint64_t h, uint64_t i0);

/* step_norm.c: check a gradient list and fill gr (and view, if not NULL,
 * with x = g and no states); FO_OK or FO_EINVAL. */
int step_grad_list(const void *const *gs, const int64_t *ns,
                   const int32_t *dtypes, int64_t nt, step_grad *gr,
                   fo_tensor *view, int64_t *nb, int64_t *bytes);

/* step_norm.c: the norm pass as the options ask (none, given, measured):
 * *norm and res->norm / res->finite. FO_OK, FO_ENOMEM, or FO_ESTALE when
 * a guard of a tensor with elements fails (pass 1 checks tensor k's guards
 * with its first block; the caller checks the others). The caller skips
 * the update when o->check_finite and !res->finite. */
int step_measure(const fo_step_opts *o, const step_grad *gr, int64_t nt,
                 int64_t nb, int64_t bytes, fo_step_result *res,
                 int n_threads, double *norm);

#endif
