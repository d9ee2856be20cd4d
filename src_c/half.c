/*
 * The loops of the 16-bit conversions of half.h: the rounded copy a step
 * writes of its new float32 parameters (fo_step_tensor.w, called tile by
 * tile from step.inc), 16-bit states and parameters widened and rounded
 * back, the norm pass's sum of squares over 16-bit gradients widened in
 * registers, and fo_convert, the same loops for the tests.
 */
#include "step.h"

/* The AVX-512F loops (float32 -> bfloat16 to nearest and stochastic,
 * float16 -> float32, the norm pass's lanes over 16-bit gradients) where
 * the CPU has it, in the builds that clone FO_KERNEL for AVX-512F (step.h;
 * as q8.c's search): sixteen lanes of the same arithmetic as half.h's and
 * the portable loops', so the same bits; FO_NO_CLONES keeps the portable
 * loops. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && !defined(FO_NO_CLONES)
#define HALF_SIMD 1
#include <immintrin.h>

static int half_simd;   /* the CPU has AVX-512F (set at load) */

__attribute__((constructor)) static void half_detect(void)
{
    __builtin_cpu_init();
    half_simd = __builtin_cpu_supports("avx512f");
}

#define HALF_AVX512 __attribute__((target("avx512f")))

/* Sixteen floats' bits plus `add`, their top halves (fo_f32_to_bf16 with
 * add = 0x7fff + the kept half's lowest bit; fo_f32_to_bf16_sr with add =
 * the random bits), or the quiet NaN of their sign for a NaN. */
static inline HALF_AVX512 __m256i half_bf16(__m512i u, __m512i add)
{
    __m512i nan = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16),
                                                   _mm512_set1_epi32(0x8000)),
                                  _mm512_set1_epi32(0x7fc0));
    __mmask16 isnan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                              _mm512_set1_epi32(0x7f800000));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, add), 16);
    return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(isnan, r, nan));
}

/* float16 -> float by VCVTPH2PS, sixteen at a time: exact for every value
 * (a float16 subnormal is a normal float, and no flag of MXCSR bears on
 * it), but it quiets a signalling NaN; so the loop notes whether some value
 * had all exponent bits set (a NaN or an infinity), and then the run is
 * widened again by half.h's loop, which keeps a NaN's bits: the result is
 * fo_f16_to_f32's bit for bit, and a clean run pays one test. */
static HALF_AVX512 void half_widen_f16_simd(int64_t n, const uint16_t *h, float *out)
{
    const __m256i e = _mm256_set1_epi16(0x7c00);
    __m256i special = _mm256_setzero_si256();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(h + i));
        special = _mm256_or_si256(special, _mm256_cmpeq_epi16(_mm256_and_si256(v, e), e));
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(v));
    }
    for (int64_t k = _mm256_testz_si256(special, special) ? i : 0; k < n; k++)
        out[k] = fo_f16_to_f32(h[k]);
}

static HALF_AVX512 void half_copy_bf16_simd(int64_t n, const float *v, uint16_t *s)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_loadu_si512((const void *)(v + i));
        __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        _mm256_storeu_si256((__m256i *)(s + i),
                            half_bf16(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))));
    }
    for (; i < n; i++)
        s[i] = fo_f32_to_bf16(v[i]);
}

/* fo_sr_draw's bits on sixteen lanes: fo_mix32_body, then the top 16 */
static inline HALF_AVX512 __m512i half_draw(__m512i x)
{
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(0x7feb352d));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32((int)0x846ca68bu));
    return _mm512_srli_epi32(x, 16);
}

static HALF_AVX512 void half_sr_simd(uint32_t n, const float *v, uint16_t *s, uint32_t lo,
                                     uint32_t c)
{
    uint32_t k = 0;
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int)lo),
                                   _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                                     12, 13, 14, 15));
    const __m512i cc = _mm512_set1_epi32((int)c), sixteen = _mm512_set1_epi32(16);
    for (; n >= 16 && k <= n - 16; k += 16) {
        __m512i r = half_draw(_mm512_xor_si512(idx, cc));
        __m512i u = _mm512_loadu_si512((const void *)(v + k));
        _mm256_storeu_si256((__m256i *)(s + k), half_bf16(u, r));
        idx = _mm512_add_epi32(idx, sixteen);
    }
    for (; k < n; k++)
        s[k] = fo_f32_to_bf16_sr(v[k], fo_sr_draw(c, lo + k));
}

/* Sixteen 16-bit gradients widened in registers (exact: a bfloat16 is the
 * top half of its float; VCVTPH2PS only quiets a signalling NaN, and a sum
 * with a NaN is not finite whatever its bits) and unscaled in float as the
 * norm pass's FO_U: `mode` 1 divides by s, 2 multiplies (a constant after
 * inlining). */
static inline HALF_AVX512 __attribute__((always_inline)) __m512 half_u16(
        const uint16_t *g, int f16, __m512 s, const int mode)
{
    __m256i h = _mm256_loadu_si256((const __m256i *)g);
    __m512 u = f16 ? _mm512_cvtph_ps(h)
                   : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return mode == 1 ? _mm512_div_ps(u, s) : mode == 2 ? _mm512_mul_ps(u, s) : u;
}

/* The norm pass's 32 lanes (step_norm.inc, step_sumsq_body: element i into
 * lane i % 32, p = (double)u, lane += p * p, in order) over the whole
 * groups of 32 of g[0..m), in four registers of eight lanes: the same
 * operations on the same values in the same order, so the same bits.
 * Returns the elements done. */
static inline HALF_AVX512 __attribute__((always_inline)) int64_t half_lanes16(
        int64_t m, const uint16_t *g, int f16, float s, const int mode, double *la)
{
    __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    const __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 32 <= m; i += 32) {
        __m512 u0 = half_u16(g + i, f16, sv, mode), u1 = half_u16(g + i + 16, f16, sv, mode);
        __m512d p0 = _mm512_cvtps_pd(_mm512_castps512_ps256(u0));
        __m512d p1 = _mm512_cvtps_pd(_mm256_castpd_ps(
            _mm512_extractf64x4_pd(_mm512_castps_pd(u0), 1)));
        __m512d p2 = _mm512_cvtps_pd(_mm512_castps512_ps256(u1));
        __m512d p3 = _mm512_cvtps_pd(_mm256_castpd_ps(
            _mm512_extractf64x4_pd(_mm512_castps_pd(u1), 1)));
        a0 = _mm512_add_pd(a0, _mm512_mul_pd(p0, p0));
        a1 = _mm512_add_pd(a1, _mm512_mul_pd(p1, p1));
        a2 = _mm512_add_pd(a2, _mm512_mul_pd(p2, p2));
        a3 = _mm512_add_pd(a3, _mm512_mul_pd(p3, p3));
    }
    _mm512_storeu_pd(la, a0);
    _mm512_storeu_pd(la + 8, a1);
    _mm512_storeu_pd(la + 16, a2);
    _mm512_storeu_pd(la + 24, a3);
    return i;
}

static HALF_AVX512 int64_t half_sumsq16_simd(int64_t m, const uint16_t *g, int f16,
                                            float s, int mode, double *la)
{
    return mode == 1 ? half_lanes16(m, g, f16, s, 1, la)
         : mode == 2 ? half_lanes16(m, g, f16, s, 2, la)
                     : half_lanes16(m, g, f16, s, 0, la);
}
#endif

/* One loop per direction and type. */
#define STEP_CONVERT(name, S, D, f) \
    FO_KERNEL static void name(int64_t n, const S *restrict a, D *restrict b) \
    { \
        for (int64_t i = 0; i < n; i++) \
            b[i] = f(a[i]); \
    }
STEP_CONVERT(step_copy_bf16, float, uint16_t, fo_f32_to_bf16)
STEP_CONVERT(step_copy_f16, float, uint16_t, fo_f32_to_f16)
STEP_CONVERT(step_widen_bf16, uint16_t, float, fo_bf16_to_f32)
STEP_CONVERT(step_widen_f16, uint16_t, float, fo_f16_to_f32)
#undef STEP_CONVERT

int step_f16_hw(void)
{
#ifdef HALF_SIMD
    return half_simd;
#else
    return 0;
#endif
}

/* float16 -> float: the AVX-512F loop, or the portable one (every float16
 * widening of the kernels: gradient tiles, states, 16-bit parameters) */
void step_widen_f16_hw(int64_t n, const uint16_t *h, float *out)
{
#ifdef HALF_SIMD
    if (half_simd) {
        half_widen_f16_simd(n, h, out);
        return;
    }
#endif
    step_widen_f16(n, h, out);
}

int64_t step_sumsq16_lanes(int32_t st, int64_t m, const uint16_t *g, float s, int mode,
                           double *la)
{
#if defined(HALF_SIMD) && FO_STEP_LANES == 32
    if (half_simd)
        return half_sumsq16_simd(m, g, st == FO_F16, s, mode, la);
#endif
    for (int l = 0; l < FO_STEP_LANES; l++)
        la[l] = 0.0;
    return 0;
}

/* 16-bit values stored apart from the float32 they are computed in (step.c:
 * states, and 16-bit parameters updated in their own type; the norm pass's
 * gradient blocks): a tile widened from type st (BF16 or F16), and rounded
 * back to nearest or, for bfloat16, stochastically, element k's bits those
 * of index i0 + k in the stream h (fo_sr_bits; the loop runs over pieces
 * whose indices share their high 32 bits, so that its body is 32-bit
 * integer arithmetic, which vectorizes). */
void step_widen16(int32_t st, int64_t n, const uint16_t *s, float *out)
{
    if (st == FO_BF16)
        step_widen_bf16(n, s, out);
    else
        step_widen_f16_hw(n, s, out);
}

/* float32 -> bfloat16 to nearest: the AVX-512F loop, or the portable one */
static void step_round_bf16(int64_t n, const float *v, uint16_t *s)
{
#ifdef HALF_SIMD
    if (half_simd) {
        half_copy_bf16_simd(n, v, s);
        return;
    }
#endif
    step_copy_bf16(n, v, s);
}

void step_states_nearest(int32_t st, int64_t n, const float *v, uint16_t *s)
{
    if (st == FO_BF16)
        step_round_bf16(n, v, s);
    else
        step_copy_f16(n, v, s);
}

/* n <= 2**31: the counter is 32-bit, as the index's low half it feeds, so
 * the vectorized loop keeps 32-bit lanes (a 64-bit counter cost a dozen
 * shuffles a vector to narrow). */
FO_KERNEL static void step_sr_piece(uint32_t n, const float *restrict v,
                                    uint16_t *restrict s, uint32_t lo, uint32_t c)
{
#ifdef HALF_SIMD
    if (half_simd) {
        half_sr_simd(n, v, s, lo, c);
        return;
    }
#endif
    for (uint32_t k = 0; k < n; k++)
        s[k] = fo_f32_to_bf16_sr(v[k], fo_sr_draw(c, lo + k));
}

void step_states_stochastic(int64_t n, const float *v, uint16_t *s, uint64_t h,
                            uint64_t i0)
{
    while (n > 0) {
        uint64_t room = ((i0 >> 32) + 1) * 0x100000000ull - i0;   /* to the next 2**32 */
        int64_t m = (uint64_t)n < room ? n : (int64_t)room;
        m = m < (1ll << 31) ? m : (1ll << 31);
        uint32_t c = fo_sr_const(h, (uint32_t)(i0 >> 32));
        step_sr_piece((uint32_t)m, v, s, (uint32_t)i0, c);
        v += m;
        s += m;
        n -= m;
        i0 += (uint64_t)m;
    }
}

/* The rounded copy as type wt, a row of FO_COPY_TABLE's float parameters. */
void step_copy_out(int32_t wt, int64_t n, const float *x, void *w)
{
    if (wt == FO_BF16)
        step_round_bf16(n, x, (uint16_t *)w);
    else
        step_copy_f16(n, x, (uint16_t *)w);
}

int fo_convert(const void *src, int32_t st, void *dst, int32_t dt, int64_t n)
{
    if (n < 0)
        return FO_EINVAL;
    if (st == FO_F32 && fo_copy_ok(FO_F32, dt))
        step_copy_out(dt, n, (const float *)src, dst);
    else if (dt == FO_F32 && st == FO_BF16)
        step_widen_bf16(n, (const uint16_t *)src, (float *)dst);
    else if (dt == FO_F32 && st == FO_F16)
        step_widen_f16_hw(n, (const uint16_t *)src, (float *)dst);
    else
        return FO_EINVAL;
    return FO_OK;
}

int fo_round_stochastic(const float *v, uint16_t *s, int64_t n, uint64_t h, uint64_t i0)
{
    if (n < 0)
        return FO_EINVAL;
    step_states_stochastic(n, v, s, h, i0);
    return FO_OK;
}
