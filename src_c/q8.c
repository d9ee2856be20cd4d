/*
 * 8-bit blockwise states (bitsandbytes' format; docs/semantics.md, "8-bit
 * states"): a state is cut into blocks of FO_Q8_BLOCK elements, each block
 * keeps a float32 absmax and each element a uint8 code into a 256-entry
 * map, its value map[code] * absmax. step_apart.inc widens one block into
 * a float tile before the rule and stores the tile back after it: the new
 * absmax is the tile's largest magnitude, each code the map's nearest
 * entry to value / absmax. fastopt/_reference/bnb8.py is the same in NumPy.
 */
#include "step.h"

/* The AVX-512F search and widening (q8_codes_simd, q8_widen_simd) where the
 * CPU has it, and the codes by a bucket lookup and the widening in byte
 * permutes (q8_codes_vbmi, q8_widen_vbmi) where it also has AVX-512BW and
 * VBMI, in the builds that clone FO_KERNEL for AVX-512F (step.h;
 * fo_isa_paths lists these paths); FO_NO_CLONES keeps the portable loops
 * alone, FO_Q8_SEARCH the search where the lookup would run (for the
 * tests). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && !defined(FO_NO_CLONES)
#define Q8_SIMD 1
#include <immintrin.h>
#endif

/* The two maps and their midpoints (bitsandbytes' words, checked by
 * tests/test_q8.py). */
#include "q8_maps.inc"

/* The map of states on the signed (0) or unsigned (1) map, for the tests
 * and the checkpoints' check; NULL for another kind. */
const float *fo_q8_map(int32_t kind)
{
    return kind == 0 || kind == 1 ? q8_maps[kind] : NULL;
}

FO_KERNEL static void q8_widen(int64_t n, const uint8_t *restrict c, float a,
                               const float *restrict map, float *restrict out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = map[c[i]] * a;
}

#ifdef Q8_SIMD
static int q8_simd;     /* the CPU has AVX-512F (set with the tables at load) */
static int q8_vbmi;     /* and AVX-512BW and VBMI (byte permutes) */
static void q8_widen_simd(int64_t n, const uint8_t *c, float a, int kind, float *out);
static void q8_widen_vbmi(int64_t n, const uint8_t *c, float a, int kind, float *out);
static int q8_bytes[2];   /* q8_codes_vbmi's buckets of map kind were built */
static void q8_codes_simd(int64_t n, const float *v, float a, int kind, uint8_t *c);
static void q8_codes_vbmi(int64_t n, const float *v, float a, int kind, uint8_t *c);
static void q8_build_planes(void);
static int q8_build_bytes(int kind);
#endif

void step_q8_widen(int32_t kind, int64_t n, const uint8_t *c, float absmax, float *out)
{
#ifdef Q8_SIMD
    if (q8_vbmi) {
        q8_widen_vbmi(n, c, absmax, kind, out);
        return;
    }
    if (q8_simd) {
        q8_widen_simd(n, c, absmax, kind, out);
        return;
    }
#endif
    q8_widen(n, c, absmax, q8_maps[kind], out);
}

/* The block's absmax: the largest |v|, NaN if one is NaN (in the bits of
 * |v|, which order as the floats do and put every NaN above inf, so the
 * loop is an integer maximum, which vectorizes). */
FO_KERNEL static float q8_absmax(int64_t n, const float *restrict v)
{
    uint32_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &v[i], 4);
        b &= 0x7FFFFFFFu;
        m = b > m ? b : m;
    }
    if (m > 0x7F800000u)
        return NAN;
    float a;
    memcpy(&a, &m, 4);
    return a;
}

/*
 * The search, as two table reads: the bits of a quotient x (sign, exponent
 * and the top Q8_M bits of the mantissa) index a bucket of magnitudes, so
 * narrow that no bucket holds two midpoints of either map (a row per
 * binade from 2**-23, where the smallest midpoint is 1.6e-7, to 0.5;
 * below, one row for [0, 2**-23); above, one for [1, inf)). A bucket keeps
 * how many midpoints lie below it and the one inside it (INFINITY if
 * none): x's count is the one plus whether x exceeds the other, exactly
 * the count of midpoints below x. Built from q8_mids when the library is
 * loaded; the base counts are 32-bit so that the search loop vectorizes.
 */
#define Q8_M 7
#define Q8_E0 104                           /* the biased exponent of 2**-23 */
#define Q8_ROWS 25
#define Q8_HALF (Q8_ROWS << Q8_M)           /* buckets of one sign */
static float q8_bmid[2][2 * Q8_HALF];
static int32_t q8_bbase[2][2 * Q8_HALF];

/* The buckets of map kind: bucket j of sign s, row r and mantissa bits f
 * holds magnitudes [lo, hi), that is x in [lo, hi) (s 0) or (-hi, -lo]. */
static void q8_build(int kind)
{
    const float *mid = q8_mids[kind];
    for (int j = 0; j < 2 * Q8_HALF; j++) {
        int s = j >= Q8_HALF, r = (j % Q8_HALF) >> Q8_M, f = j & ((1 << Q8_M) - 1);
        double lo = r == 0 ? 0.0 : r == Q8_ROWS - 1 ? 1.0
                  : ldexp(1.0 + f / (double)(1 << Q8_M), r - 24);
        double hi = r == 0 ? 0x1p-23 : r == Q8_ROWS - 1 ? INFINITY
                  : ldexp(1.0 + (f + 1) / (double)(1 << Q8_M), r - 24);
        int32_t below = 0;
        float in = INFINITY;
        for (int k = 0; k < 255; k++) {
            double m = mid[k];
            if (s ? m <= -hi : m < lo)
                below++;
            else if (s ? m <= -lo : m < hi)
                in = mid[k];
        }
        q8_bbase[kind][j] = below;
        q8_bmid[kind][j] = in;
    }
}

#ifdef Q8_SIMD
/* The midpoints by level of an 8-level binary search over the codes, for
 * q8_codes_simd: level l (0..7) has 2**l pivots, pivot p (the l bits found
 * so far) being midpoint j = (2p + 1) * 2**(7 - l) - 1, moved one float
 * down where j is odd: x above it is x at or above midpoint j, so that a
 * tie goes up to the even code j + 1 (and down to j where j is even) with
 * no test of its own. They rise as the midpoints do (or stay level: a
 * midpoint's float below may be the previous midpoint), so the count of
 * pivots below x is still found by halving. In rows of 16 floats (a
 * register's width): level 0 in row 0, levels 1 to 4 in rows 1 to 4, level
 * 5 in rows 5-6, level 6 in rows 7-10, level 7 in rows 11-18. Levels 5 to 7
 * are read at once, by the 5 bits found by level 4 (q8_codes_vec): their
 * pivots in tables of 32, one for each value of the bits past level 4
 * (level 6: rows 7-8 where level 5 went left, 9-10 where it went right). */
static const int q8_lv_row[8] = {0, 1, 2, 3, 4, 5, 7, 11};
static float q8_lv[2][19][16] __attribute__((aligned(64)));
#endif

__attribute__((constructor)) static void q8_build_both(void)
{
    q8_build(0);
    q8_build(1);
#ifdef Q8_SIMD
    q8_build_planes();
    for (int kind = 0; kind < 2; kind++)
        q8_bytes[kind] = q8_build_bytes(kind);
#ifdef FO_Q8_SEARCH
    q8_bytes[0] = q8_bytes[1] = 0;
#endif
    for (int kind = 0; kind < 2; kind++)
        for (int l = 0; l < 8; l++)
            for (int p = 0; p < 1 << l; p++) {
                int j = (2 * p + 1) * (1 << (7 - l)) - 1;
                float m = q8_mids[kind][j];
                int low = l < 5 ? 0 : p & ((1 << (l - 5)) - 1);   /* bits past level 4 */
                int at = q8_lv_row[l] * 16 + low * 32 + (p >> (l < 5 ? 0 : l - 5));
                q8_lv[kind][at / 16][at % 16] = j & 1 ? nextafterf(m, -INFINITY) : m;
            }
    __builtin_cpu_init();
    q8_simd = __builtin_cpu_supports("avx512f");
    q8_vbmi = q8_simd && __builtin_cpu_supports("avx512bw")
              && __builtin_cpu_supports("avx512vbmi");
#endif
}

/*
 * The codes of v / a: the count of midpoints below it (the buckets above),
 * moved up one at an exact midpoint with an odd count (a tie goes to the
 * even code). NaN counts none: code 0. On the signed map a code of the
 * other sign than v moves one towards v, modulo 256 (bitsandbytes' sign
 * fix: a tiny negative first moment stays negative); the signed map's
 * negative codes are 0..126. Three loops, so that each vectorizes (GCC
 * does not mix the bytes' stores with the floats' loads in one): the
 * search into 32-bit counts, the fix on the values' bits, the narrowing.
 */
FO_KERNEL static void q8_codes(int64_t n, const float *restrict v, float a, int kind,
                               uint8_t *restrict c)
{
    const float *restrict bmid = q8_bmid[kind];
    const int32_t *restrict bbase = q8_bbase[kind];
    int32_t t[FO_Q8_BLOCK];
    int32_t b[FO_Q8_BLOCK];
    for (int64_t i = 0; i < n; i++) {
        float x = v[i] / a;
        int32_t bx;
        memcpy(&bx, &x, sizeof bx);
        int32_t row = ((bx >> 23) & 0xFF) - (Q8_E0 - 1);
        row = row < 0 ? 0 : row > Q8_ROWS - 1 ? Q8_ROWS - 1 : row;
        int32_t j = (bx < 0 ? Q8_HALF : 0) + (row << Q8_M)
                    + ((bx >> (23 - Q8_M)) & ((1 << Q8_M) - 1));
        float m = bmid[j];
        int32_t k = bbase[j] + (m < x ? 1 : 0);
        k += m == x && m != INFINITY ? (k & 1) : 0;     /* (INFINITY: no midpoint) */
        t[i] = x == x ? k : 0;
    }
    if (kind == 0) {
        memcpy(b, v, (size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) {
            int32_t mag = b[i] & 0x7FFFFFFF, neg = b[i] < 0;
            int32_t pos = !neg & (mag != 0) & (mag <= 0x7F800000);      /* v > 0 */
            int32_t other = (t[i] < 127) != neg;
            t[i] += other ? (pos ? 1 : -1) : 0;
        }
    }
    for (int64_t i = 0; i < n; i++)
        c[i] = (uint8_t)(t[i] & 255);
}

#ifdef Q8_SIMD
/*
 * q8_codes and q8_widen with AVX-512F intrinsics, bit for bit the same
 * (tests/test_q8.py compares a build without them). Why intrinsics: both
 * loops read a table at a per-element index, and GCC turns that into
 * sixteen scalar loads a vector (its cost model declines the gather
 * instruction, which measured slower than the search below: bench/RESULTS.md,
 * "Settings chosen by measurement"); these tables fit in registers, where one
 * permute reads 16 or 32 entries for 16 elements.
 */
#define Q8_TARGET __attribute__((target("avx512f")))
#define Q8_UNROLL 8     /* searches interleaved: 8 measured fastest of 2 to 16 (a block's
                           16 vectors in two rounds; bench/RESULTS.md, "Settings
                           chosen by measurement") */
#define Q8_PX2(r, p, k) _mm512_permutex2var_ps(r[k], p, r[(k) + 1])
#define Q8_BIT(p, b) _mm512_test_epi32_mask(p, _mm512_set1_epi32(b))

/* r[k] = map[16k .. 16k + 15]; entry idx (0..255) of each lane. */
Q8_TARGET static inline __m512 q8_pick256(const __m512 *r, __m512i idx)
{
    __mmask16 b5 = Q8_BIT(idx, 32), b6 = Q8_BIT(idx, 64), b7 = Q8_BIT(idx, 128);
    __m512 q0 = _mm512_mask_blend_ps(b5, Q8_PX2(r, idx, 0), Q8_PX2(r, idx, 2));
    __m512 q1 = _mm512_mask_blend_ps(b5, Q8_PX2(r, idx, 4), Q8_PX2(r, idx, 6));
    __m512 q2 = _mm512_mask_blend_ps(b5, Q8_PX2(r, idx, 8), Q8_PX2(r, idx, 10));
    __m512 q3 = _mm512_mask_blend_ps(b5, Q8_PX2(r, idx, 12), Q8_PX2(r, idx, 14));
    return _mm512_mask_blend_ps(b7, _mm512_mask_blend_ps(b6, q0, q1),
                                _mm512_mask_blend_ps(b6, q2, q3));
}

Q8_TARGET static void q8_widen_simd(int64_t n, const uint8_t *c, float a, int kind, float *out)
{
    __m512 r[16];
    for (int k = 0; k < 16; k++)
        r[k] = _mm512_loadu_ps(q8_maps[kind] + 16 * k);
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 live = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m128i b;
        if (n - i >= 16) {
            b = _mm_loadu_si128((const __m128i *)(c + i));
        } else {                /* a byte-masked load needs AVX-512BW */
            uint8_t part[16] = {0};
            memcpy(part, c + i, (size_t)(n - i));
            b = _mm_loadu_si128((const __m128i *)part);
        }
        __m512i idx = _mm512_cvtepu8_epi32(b);
        __m512 w = _mm512_mul_ps(q8_pick256(r, idx), va);
        if (n - i >= 16)        /* a masked store is slow on some CPUs (AMD Zen 5) */
            _mm512_storeu_ps(out + i, w);
        else
            _mm512_mask_storeu_ps(out + i, live, w);
    }
}

/*
 * The widening of 64 codes at a time by byte permutes (AVX-512 VBMI): each
 * of a map entry's four bytes is read from a 256-byte plane of the map
 * (two 128-byte permutes, the code's top bit picking one), and the four
 * planes are interleaved into floats. The interleave works within 16-byte
 * lanes, so the codes are first reordered (q8_vbmi_order) for the floats
 * to come out in order. Fewer instructions a code than q8_widen_simd's
 * permutes of whole floats; bit for bit the same (the bytes are the map's).
 */
#define Q8_VBMI_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi")))
static uint8_t q8_planes[2][4][256] __attribute__((aligned(64)));
static uint8_t q8_vbmi_order[64] __attribute__((aligned(64)));

static void q8_build_planes(void)
{
    for (int kind = 0; kind < 2; kind++)
        for (int k = 0; k < 256; k++) {
            uint32_t b;
            memcpy(&b, &q8_maps[kind][k], 4);
            for (int j = 0; j < 4; j++)
                q8_planes[kind][j][k] = (uint8_t)(b >> (8 * j));
        }
    /* float 16q + 4L + j of the output comes from byte 16L + 4q + j */
    for (int q = 0; q < 4; q++)
        for (int l = 0; l < 4; l++)
            for (int j = 0; j < 4; j++)
                q8_vbmi_order[16 * l + 4 * q + j] = (uint8_t)(16 * q + 4 * l + j);
}

Q8_VBMI_TARGET static void q8_widen_vbmi(int64_t n, const uint8_t *c, float a, int kind,
                                         float *out)
{
    __m512i t[4][4];
    for (int j = 0; j < 4; j++)
        for (int h = 0; h < 4; h++)
            t[j][h] = _mm512_load_si512((const void *)(q8_planes[kind][j] + 64 * h));
    const __m512i order = _mm512_load_si512((const void *)q8_vbmi_order);
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i k = _mm512_permutexvar_epi8(order, _mm512_loadu_si512((const void *)(c + i)));
        __mmask64 top = _mm512_movepi8_mask(k);
        __m512i b[4];
        for (int j = 0; j < 4; j++)
            b[j] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t[j][0], k, t[j][1]),
                                          _mm512_permutex2var_epi8(t[j][2], k, t[j][3]));
        __m512i lo01 = _mm512_unpacklo_epi8(b[0], b[1]), hi01 = _mm512_unpackhi_epi8(b[0], b[1]);
        __m512i lo23 = _mm512_unpacklo_epi8(b[2], b[3]), hi23 = _mm512_unpackhi_epi8(b[2], b[3]);
        __m512i f[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                        _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
        for (int q = 0; q < 4; q++)
            _mm512_storeu_ps(out + i + 16 * q, _mm512_mul_ps(_mm512_castsi512_ps(f[q]), va));
    }
    if (i < n)
        q8_widen_simd(n - i, c + i, a, kind, out + i);
}

/* One level of the search for each of the U vectors: pivot q (of p[u])
 * against x[u]; the count p[u] doubles and takes "the pivot is below x" as
 * its low bit. NaN compares false: every step goes left, the count ends 0.
 * The U searches are interleaved, as each level waits for the one before
 * (permute, compare, add). */
#define Q8_LEVEL(q) do { \
        for (int u = 0; u < U; u++) { \
            __m512 q_ = (q); \
            __mmask16 lt_ = _mm512_cmp_ps_mask(q_, x[u], _CMP_LT_OQ); \
            p[u] = _mm512_add_epi32(p[u], p[u]); \
            p[u] = _mm512_mask_add_epi32(p[u], lt_, p[u], one); \
        } \
    } while (0)

/* The codes of U (1..Q8_UNROLL) vectors of 16 values from v, the last one
 * cut to the `left` values that remain; lv: the map's pivot rows (q8_lv).
 * Each permute reads its table from memory (a load the core issues beside
 * the arithmetic): with the 19 rows held in registers the compiler spilled
 * the searches' own vectors instead, which measured slower (bench/RESULTS.md,
 * "Settings chosen by measurement"). */
#define Q8_ROW(k) _mm512_load_ps(lv[k])
#define Q8_PXL(p, k) _mm512_permutex2var_ps(Q8_ROW(k), p, Q8_ROW((k) + 1))
Q8_TARGET static inline __attribute__((always_inline)) void q8_codes_vec(
        const float (*lv)[16], __m512 va, int kind, const float *v, uint8_t *c,
        int64_t left, const int U)
{
    const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    __m512 vi[Q8_UNROLL], x[Q8_UNROLL];
    __m512i p[Q8_UNROLL];
    __mmask16 live[Q8_UNROLL];
    for (int u = 0; u < U; u++) {
        int64_t k = left - 16 * u;
        live[u] = k >= 16 ? 0xFFFF : (__mmask16)((1u << k) - 1);
        vi[u] = _mm512_maskz_loadu_ps(live[u], v + 16 * u);
        x[u] = _mm512_div_ps(vi[u], va);
        p[u] = zero;
    }
    Q8_LEVEL(_mm512_set1_ps(lv[0][0]));
    Q8_LEVEL(_mm512_permutexvar_ps(p[u], Q8_ROW(1)));
    Q8_LEVEL(_mm512_permutexvar_ps(p[u], Q8_ROW(2)));
    Q8_LEVEL(_mm512_permutexvar_ps(p[u], Q8_ROW(3)));
    Q8_LEVEL(_mm512_permutexvar_ps(p[u], Q8_ROW(4)));
    /* levels 5 to 7: their seven pivots for these 5 bits read at once (the
     * reads need not wait for levels 5 and 6), then picked as x falls */
    for (int u = 0; u < U; u++) {
        __m512 m5 = Q8_PXL(p[u], 5), m6a = Q8_PXL(p[u], 7), m6b = Q8_PXL(p[u], 9);
        __m512 m7a = Q8_PXL(p[u], 11), m7b = Q8_PXL(p[u], 13);
        __m512 m7c = Q8_PXL(p[u], 15), m7d = Q8_PXL(p[u], 17);
        __mmask16 lt5 = _mm512_cmp_ps_mask(m5, x[u], _CMP_LT_OQ);
        __mmask16 lt6 = _mm512_cmp_ps_mask(_mm512_mask_blend_ps(lt5, m6a, m6b), x[u],
                                           _CMP_LT_OQ);
        __m512 m7 = _mm512_mask_blend_ps(lt5, _mm512_mask_blend_ps(lt6, m7a, m7b),
                                         _mm512_mask_blend_ps(lt6, m7c, m7d));
        __mmask16 lt7 = _mm512_cmp_ps_mask(m7, x[u], _CMP_LT_OQ);
        p[u] = _mm512_slli_epi32(p[u], 3);
        p[u] = _mm512_mask_add_epi32(p[u], lt5, p[u], _mm512_set1_epi32(4));
        p[u] = _mm512_mask_add_epi32(p[u], lt6, p[u], _mm512_set1_epi32(2));
        p[u] = _mm512_mask_add_epi32(p[u], lt7, p[u], one);
    }
    for (int u = 0; u < U; u++) {
        __m512i k = p[u];
        if (kind == 0) {        /* the sign fix, as q8_codes: v > 0 is pos */
            __mmask16 neg = _mm512_cmplt_epi32_mask(_mm512_castps_si512(vi[u]), zero);
            __mmask16 pos = _mm512_cmp_ps_mask(vi[u], _mm512_setzero_ps(), _CMP_GT_OQ);
            __mmask16 other = _kxor_mask16(
                _mm512_cmplt_epi32_mask(k, _mm512_set1_epi32(127)), neg);
            k = _mm512_mask_add_epi32(k, other, k,
                                      _mm512_mask_blend_epi32(pos, _mm512_set1_epi32(-1), one));
        }
        /* narrowed in a register and stored whole: the narrowing store is
         * slow on some CPUs (AMD Zen 5) */
        __m128i k8 = _mm512_cvtepi32_epi8(k);
        if (live[u] == 0xFFFF)
            _mm_storeu_si128((__m128i *)(c + 16 * u), k8);
        else
            _mm512_mask_cvtepi32_storeu_epi8(c + 16 * u, live[u], k);
    }
}

Q8_TARGET static void q8_codes_simd(int64_t n, const float *v, float a, int kind, uint8_t *c)
{
    const float (*lv)[16] = q8_lv[kind];
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 * Q8_UNROLL <= n; i += 16 * Q8_UNROLL)
        q8_codes_vec(lv, va, kind, v + i, c + i, 16 * Q8_UNROLL, Q8_UNROLL);
    for (; i < n; i += 16)
        q8_codes_vec(lv, va, kind, v + i, c + i, n - i, 1);
}
#include "q8_bytes.inc"
#undef Q8_LEVEL
#undef Q8_ROW
#undef Q8_PXL
#undef Q8_PX2
#undef Q8_BIT
#undef Q8_TARGET
#endif

float step_q8_store(int32_t kind, int64_t n, const float *v, uint8_t *c)
{
    float a = q8_absmax(n, v);
#ifdef Q8_SIMD
    if (q8_vbmi && q8_bytes[kind]) {
        q8_codes_vbmi(n, v, a, kind, c);
        return a;
    }
    if (q8_simd) {
        q8_codes_simd(n, v, a, kind, c);
        return a;
    }
#endif
    q8_codes(n, v, a, kind, c);
    return a;
}

int fo_q8_store(const float *v, int64_t n, int32_t kind, uint8_t *c, float *absmax)
{
    if (n < 0 || fo_q8_map(kind) == NULL)
        return FO_EINVAL;
    for (int64_t o = 0; o < n; o += FO_Q8_BLOCK) {
        int64_t m = n - o < FO_Q8_BLOCK ? n - o : FO_Q8_BLOCK;
        absmax[o / FO_Q8_BLOCK] = step_q8_store(kind, m, v + o, c + o);
    }
    return FO_OK;
}
