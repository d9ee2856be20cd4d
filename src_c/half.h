/*
 * The 16-bit storage types and their conversions to and from float:
 * bfloat16 (1 sign, 8 exponent, 7 fraction bits: float's top half) and
 * IEEE binary16 (1, 5, 10), each held as the uint16_t of its bits.
 *
 * Widening is exact. Rounding a float is to nearest, ties to even, as IEEE
 * and NumPy/ml_dtypes' astype round: subnormal results are kept (never
 * flushed), values past the largest finite one become inf of their sign,
 * and a NaN stays a NaN of its sign, the one NumPy (float16) and ml_dtypes
 * (bfloat16) make of it. Every function is branch-free integer and float
 * arithmetic on one value, so a loop over an array of them vectorizes with
 * the plain SSE2/AVX instructions of the kernels' target clones (no
 * conversion instruction that flushes subnormals is involved).
 * tests/test_half.py compares every one of the 2**32 float inputs and the
 * 2**16 16-bit inputs with NumPy's and ml_dtypes' conversions.
 */
#ifndef FASTOPT_HALF_H
#define FASTOPT_HALF_H

#include <stdint.h>
#include <string.h>

static inline uint32_t fo_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fo_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bfloat16 -> float: the bits are float's top half. */
static inline float fo_bf16_to_f32(uint16_t h)
{
    return fo_bits_f32((uint32_t)h << 16);
}

/* float -> bfloat16. Adding 0x7fff plus the kept half's lowest bit to the
 * bits rounds the dropped half to nearest, ties to the even kept half; a
 * carry into the exponent is the correct next binade (or inf past the
 * largest finite value). A NaN becomes the quiet NaN 0x7fc0 with its sign
 * (ml_dtypes' choice: the payload is dropped). */
static inline uint16_t fo_f32_to_bf16(float f)
{
    uint32_t u = fo_f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* float -> bfloat16, rounded stochastically with the 16 random bits r
 * (< 2**16): adding them to the dropped half carries into the kept half
 * with probability (dropped half) / 2**16, so the expected result is f
 * itself (on the magnitude: the sign is apart); a carry past the largest
 * finite value gives inf. A NaN becomes the quiet NaN fo_f32_to_bf16 makes. */
static inline uint16_t fo_f32_to_bf16_sr(float f, uint32_t r)
{
    uint32_t u = fo_f32_bits(f);
    uint32_t nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : (u + r) >> 16);
}

/* The stochastic rounding's generator (docs/semantics.md): a counter-based
 * hash, so an element's bits depend only on its key, step, slot and index,
 * never on the thread that rounds it. fo_mix64 is SplitMix64's finalizer,
 * fo_mix32 Wellons' "lowbias32" (each a bijection). */
static inline uint64_t fo_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint32_t fo_mix32_body(uint32_t x)    /* all of fo_mix32 but its last step */
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    return x;
}

static inline uint32_t fo_mix32(uint32_t x)
{
    x = fo_mix32_body(x);
    return x ^ (x >> 16);
}

/* The stream of state slot `slot` (0..2) of a tensor with key `key` at
 * step t: h = mix64(key + mix64(4*t + slot)); element i's 16 bits are
 * mix32(lo32(i) ^ lo32(h) ^ mix32(hi32(i) ^ hi32(h))) >> 16. */
static inline uint64_t fo_sr_stream(uint64_t key, int64_t t, int slot)
{
    return fo_mix64(key + fo_mix64(((uint64_t)t << 2) + (uint64_t)slot));
}

/* The stream's constant for the indices whose high half is hi, and the
 * bits of the index whose low half is lo under it: the loops over a run of
 * indices that share their high half (half.c, types_own16.inc) take the
 * constant once and draw in 32-bit arithmetic, which vectorizes. */
static inline uint32_t fo_sr_const(uint64_t h, uint32_t hi)
{
    return (uint32_t)h ^ fo_mix32(hi ^ (uint32_t)(h >> 32));
}

/* (mix32's last step, x ^= x >> 16, leaves the top 16 bits as they are:
 * they are taken before it, two operations a draw fewer; GCC does not see
 * that the step is idle there.) */
static inline uint32_t fo_sr_draw(uint32_t c, uint32_t lo)
{
    return fo_mix32_body(lo ^ c) >> 16;
}

static inline uint32_t fo_sr_bits(uint64_t h, uint64_t i)
{
    return fo_sr_draw(fo_sr_const(h, (uint32_t)(i >> 32)), (uint32_t)i);
}

/* binary16 -> float, exactly. A normal value moves its exponent from bias
 * 15 to bias 127; a subnormal one is its 10-bit fraction times 2**-24
 * (an exact integer conversion and an exact scaling); inf and NaN keep
 * their fraction bits. */
static inline float fo_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t e = em & 0x7c00u;
    uint32_t normal = (em << 13) + ((uint32_t)(127 - 15) << 23);
    uint32_t special = 0x7f800000u | ((em & 0x03ffu) << 13);
    uint32_t sub = fo_f32_bits((float)(int32_t)(em & 0x03ffu) * 0x1p-24f);
    uint32_t is_special = 0u - (uint32_t)(e == 0x7c00u);   /* all ones or zero: */
    uint32_t is_sub = 0u - (uint32_t)(e == 0);              /* selects by masks */
    uint32_t mag = (special & is_special) | (sub & is_sub) | (normal & ~(is_special | is_sub));
    return fo_bits_f32(sign | mag);
}

/* float -> binary16. |f| >= 65520 rounds past 65504, to inf; a result
 * below 2**-14 is a subnormal, whose rounding the float adder does: adding
 * 0.5 puts the value's 2**-24 units in the low fraction bits, rounded to
 * nearest even; a normal one is rounded on its bits as fo_f32_to_bf16
 * does (13 dropped bits), after its exponent moves from bias 127 to bias
 * 15. A NaN keeps its sign and its top 10 fraction bits, quiet or
 * signalling as it was (NumPy's choice), and a signalling NaN whose kept
 * bits are all 0 gets the lowest one set, so that it stays a NaN. */
static inline uint16_t fo_f32_to_f16(float f)
{
    uint32_t u = fo_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t sub = fo_f32_bits(fo_bits_f32(a) + 0.5f) - fo_f32_bits(0.5f);
    uint32_t normal = (a - ((uint32_t)(127 - 15) << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    uint32_t nan = 0x7c00u | ((a >> 13) & 0x03ffu);
    nan |= (uint32_t)((nan & 0x03ffu) == 0);
    uint32_t is_nan = 0u - (uint32_t)(a > 0x7f800000u);       /* masks, as above */
    uint32_t is_inf = (0u - (uint32_t)(a >= 0x477ff000u)) & ~is_nan;
    uint32_t is_sub = 0u - (uint32_t)(a < 0x38800000u);
    uint32_t mag = (nan & is_nan) | (0x7c00u & is_inf) | (sub & is_sub)
                 | (normal & ~(is_nan | is_inf | is_sub));
    return (uint16_t)(sign | mag);
}

#endif
