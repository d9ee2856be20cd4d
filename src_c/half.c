/*
 * The loops of the 16-bit conversions of half.h: the rounded copy a step
 * writes of its new float32 parameters (fo_step_tensor.w, called tile by
 * tile from step.inc), and fo_convert, the same loops for the tests.
 */
#include "step.h"

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

/* 16-bit values stored apart from the float32 they are computed in (step.c:
 * states, and 16-bit parameters updated in their own type): a tile
 * widened from type st (BF16 or F16), and rounded back to nearest or, for
 * bfloat16, stochastically, element k's bits those of index i0 + k in the
 * stream h (fo_sr_bits; the loop runs over pieces whose indices share
 * their high 32 bits, so that its body is 32-bit integer arithmetic, which
 * vectorizes). */
void step_states_widen(int32_t st, int64_t n, const uint16_t *s, float *out)
{
    if (st == FO_BF16)
        step_widen_bf16(n, s, out);
    else
        step_widen_f16(n, s, out);
}

void step_states_nearest(int32_t st, int64_t n, const float *v, uint16_t *s)
{
    if (st == FO_BF16)
        step_copy_bf16(n, v, s);
    else
        step_copy_f16(n, v, s);
}

FO_KERNEL static void step_sr_piece(int64_t n, const float *restrict v,
                                    uint16_t *restrict s, uint32_t lo, uint32_t c)
{
    for (int64_t k = 0; k < n; k++)
        s[k] = fo_f32_to_bf16_sr(v[k], fo_mix32((lo + (uint32_t)k) ^ c) >> 16);
}

void step_states_stochastic(int64_t n, const float *v, uint16_t *s, uint64_t h,
                            uint64_t i0)
{
    while (n > 0) {
        uint64_t room = ((i0 >> 32) + 1) * 0x100000000ull - i0;   /* to the next 2**32 */
        int64_t m = (uint64_t)n < room ? n : (int64_t)room;
        uint32_t c = (uint32_t)h ^ fo_mix32((uint32_t)(i0 >> 32) ^ (uint32_t)(h >> 32));
        step_sr_piece(m, v, s, (uint32_t)i0, c);
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
        step_copy_bf16(n, x, (uint16_t *)w);
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
        step_widen_f16(n, (const uint16_t *)src, (float *)dst);
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
