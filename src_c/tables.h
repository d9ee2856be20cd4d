/*
 * The tables of the C core: one row per update rule of fo_step and one per
 * element type. Everything that counts or names rules or types is generated
 * from these rows (the FO_RULE_* and FO_F32/FO_F64 ids, FO_N_RULES,
 * FO_N_DTYPES, fo_rule_info, fo_dtype_size, fo_dtype_name); fastopt/_rules.py and
 * fastopt/_dtypes.py are the Python tables, and tests/test_tables.py asserts
 * that both languages agree. Included by fastopt.h.
 */
#ifndef FASTOPT_TABLES_H
#define FASTOPT_TABLES_H

#include <stdint.h>

/*
 * Update rules, in id order: X(NAME, STATES, T0, OWN16, Q8, Q8N). NAME
 * makes FO_RULE_NAME; STATES is the most state arrays (s1..s3) the rule
 * uses; T0 the smallest count t a group of the rule may have (ONNX counts
 * from 0, torch from 1; torch SGD's t is its steps before this one); OWN16
 * 1 if bfloat16/float16 parameters may be updated in their own type (a
 * row of FO_SPAIR_TABLE with 16-bit parameters), 0 if not (LAMB and LARS:
 * their trust pass reads float parameters); every rule's states may be
 * stored apart from float32 parameters (bfloat16, and 8-bit as Q8 says);
 * Q8 -1 if its states cannot be 8-bit blockwise, else the slots on the
 * unsigned map (bit k: s(k+1); the others on the signed map), as
 * bitsandbytes keeps them: Adam's second moment unsigned, every one-state
 * rule's buffer signed; Q8N how many of its states (s1 on, as a group
 * packs them) have an 8-bit form, 0 with Q8 -1: a group whose options use
 * more (amsgrad's maximum, RMSprop's momentum buffer or centred average)
 * cannot have 8-bit states (the step declines it).
 */
#define FO_RULE_TABLE(X) \
    X(MOMENTUM, 1, 0, 1, -1, 0)       /* ONNX Momentum      s1 = V */ \
    X(ADAGRAD, 1, 0, 1, -1, 0)        /* ONNX Adagrad       s1 = H */ \
    X(ADAM, 2, 0, 1, -1, 0)           /* ONNX Adam          s1 = V, s2 = H */ \
    X(SGD_TORCH, 1, 0, 1, 0, 1)       /* torch SGD          s1 = momentum buffer */ \
    X(ADAGRAD_TORCH, 1, 1, 1, 0, 1)   /* torch Adagrad      s1 = sum */ \
    X(ADAM_TORCH, 3, 1, 1, 2, 2)      /* torch Adam         s1 = exp_avg, s2 = exp_avg_sq, */ \
    X(ADAMW_TORCH, 3, 1, 1, 2, 2)     /* torch AdamW           s3 = max_exp_avg_sq (amsgrad) */ \
    X(RMSPROP_TORCH, 3, 1, 1, 0, 1)   /* torch RMSprop      s1 = square_avg, then momentum_buffer \
                                   (momentum > 0), then grad_avg (centered) */ \
    X(ADAMAX_TORCH, 2, 1, 1, -1, 0)   /* torch Adamax       s1 = exp_avg, s2 = exp_inf */ \
    X(ADADELTA_TORCH, 2, 1, 1, -1, 0) /* torch Adadelta     s1 = square_avg, s2 = acc_delta */ \
    X(RADAM_TORCH, 2, 1, 1, -1, 0)    /* torch RAdam        s1 = exp_avg, s2 = exp_avg_sq */ \
    X(LION, 1, 1, 1, 0, 1)            /* Lion (optax, bitsandbytes)  s1 = exp_avg */ \
    X(NADAM_TORCH, 2, 1, 1, -1, 0)    /* torch NAdam        s1 = exp_avg, s2 = exp_avg_sq */ \
    X(ADEMAMIX, 3, 1, 1, -1, 0)       /* AdEMAMix (optax)   s1 = exp_avg_fast, s2 = exp_avg_slow, \
                                   s3 = exp_avg_sq */ \
    X(LAMB, 2, 1, 0, 2, 2)            /* LAMB (optax)       s1 = exp_avg, s2 = exp_avg_sq */ \
    X(LARS, 1, 1, 0, 0, 1)            /* LARS (optax)       s1 = momentum_buffer */

/*
 * Element types, in id order: X(NAME, CTYPE, SIZE). NAME makes FO_NAME;
 * CTYPE is the C type of a stored value, SIZE its bytes. The 16-bit types
 * are stored as their bits (half.h converts them). Q8 is a state's 8-bit
 * blockwise codes (q8.c), with a float32 absmax per FO_Q8_BLOCK elements
 * beside them (fo_step_tensor.absmax): states only.
 */
#define FO_DTYPE_TABLE(X) \
    X(F32, float, 4) \
    X(F64, double, 8) \
    X(BF16, uint16_t, 2) \
    X(F16, uint16_t, 2) \
    X(Q8, uint8_t, 1)

/*
 * The storage pairs the update pass is built for: X(NAME, XT, GT),
 * parameters and states of type XT (the compute type's precision) with
 * gradients of type GT; NAME names the pair's instance (types.inc) and
 * makes FO_PAIR_NAME. A step's tensor must be one of these pairs or a row
 * of FO_SPAIR_TABLE; a gradient alone (the norm, the clip) is computed in
 * its own type's pair, a 16-bit one in float's.
 */
#define FO_PAIR_TABLE(X) \
    X(F32, F32, F32) \
    X(F64, F64, F64) \
    X(F32_BF16, F32, BF16) \
    X(F32_F16, F32, F16) \
    X(F64_BF16, F64, BF16) \
    X(F64_F16, F64, F16)

/*
 * States stored apart from their parameters' compute type: X(NAME, XT, GT,
 * ST, PAIR), parameters of type XT, gradients of type GT and states of
 * type ST. A tile of the states is widened to float, the rules of the pair
 * PAIR (float with GT) update it, and it is rounded back as its group says
 * (step.c: to nearest, or, in bfloat16, stochastically); FO_SPAIR_NAME
 * follows the pairs' ids. The last rows are 16-bit parameters updated in
 * their own type (torch's way for a bfloat16 or float16 model without
 * master weights): parameters, gradients and states of one 16-bit type,
 * a tile of the parameters widened and rounded to nearest like the
 * states'; their float16 states round to nearest only. A rule whose row
 * has OWN16 0 takes no 16-bit parameters (its states may still be stored
 * apart from float32 ones).
 */
#define FO_SPAIR_TABLE(X) \
    X(F32_SBF16, F32, F32, BF16, F32) \
    X(F32_BF16_SBF16, F32, BF16, BF16, F32_BF16) \
    X(F32_F16_SBF16, F32, F16, BF16, F32_F16) \
    X(BF16_OWN, BF16, BF16, BF16, F32_BF16) \
    X(F16_OWN, F16, F16, F16, F32_F16) \
    X(F32_SQ8, F32, F32, Q8, F32) \
    X(F32_BF16_SQ8, F32, BF16, Q8, F32_BF16) \
    X(F32_F16_SQ8, F32, F16, Q8, F32_F16)

/*
 * Gradients alone (the global norm, the clip in place): X(GT, PAIR), a
 * gradient of type GT is computed in the pair PAIR: its own type's, a
 * 16-bit one's in float.
 */
#define FO_GRAD_TABLE(X) \
    X(F32, F32) \
    X(F64, F64) \
    X(BF16, F32_BF16) \
    X(F16, F32_F16)

/*
 * The types of the rounded copy of the new parameters a step may write
 * (fo_step_tensor.w): X(XT, WT), parameters of type XT copied as WT.
 */
#define FO_COPY_TABLE(X) \
    X(F32, BF16) \
    X(F32, F16)

enum {
#define FO_X_RULE(name, states, t0, own16, q8, q8n) FO_RULE_##name,
    FO_RULE_TABLE(FO_X_RULE)
#undef FO_X_RULE
    FO_N_RULES
};

enum {
#define FO_X_DTYPE(name, ctype, size) FO_##name,
    FO_DTYPE_TABLE(FO_X_DTYPE)
#undef FO_X_DTYPE
    FO_N_DTYPES
};

enum {
#define FO_X_PAIR(name, xt, gt) FO_PAIR_##name,
    FO_PAIR_TABLE(FO_X_PAIR)
#undef FO_X_PAIR
    FO_N_PAIRS,
    FO_SPAIR_BEFORE_ = FO_N_PAIRS - 1,
#define FO_X_SPAIR(name, xt, gt, st, pair) FO_SPAIR_##name,
    FO_SPAIR_TABLE(FO_X_SPAIR)
#undef FO_X_SPAIR
    FO_N_ALL_PAIRS
};

/* The pair of parameters of type xt and gradients of type gt; -1 if the
 * update pass is not built for it. */
static inline int fo_pair(int32_t xt, int32_t gt)
{
    if ((uint32_t)xt >= FO_N_DTYPES || (uint32_t)gt >= FO_N_DTYPES)
        return -1;
    switch (xt * FO_N_DTYPES + gt) {     /* one jump, whatever the table's length */
#define FO_X_PAIR(N, X, G) case FO_##X * FO_N_DTYPES + FO_##G: return FO_PAIR_##N;
    FO_PAIR_TABLE(FO_X_PAIR)
#undef FO_X_PAIR
    default: return -1;
    }
}

/* The update's pair for parameters of type xt, gradients of type gt and
 * states of type st: fo_pair's when st is xt and it has one, else a row of
 * FO_SPAIR_TABLE; -1 if the update pass is not built for them. */
static inline int fo_spair(int32_t xt, int32_t gt, int32_t st)
{
    if (st == xt && fo_pair(xt, gt) >= 0)
        return fo_pair(xt, gt);
#define FO_X_SPAIR(N, X, G, S, P) \
    if (xt == FO_##X && gt == FO_##G && st == FO_##S) return FO_SPAIR_##N;
    FO_SPAIR_TABLE(FO_X_SPAIR)
#undef FO_X_SPAIR
    return -1;
}

/* The pair a gradient of type gt alone is computed in (FO_GRAD_TABLE);
 * -1 outside the table. */
static inline int fo_grad_pair(int32_t gt)
{
    switch (gt) {
#define FO_X_GRAD(G, P) case FO_##G: return FO_PAIR_##P;
    FO_GRAD_TABLE(FO_X_GRAD)
#undef FO_X_GRAD
    default: return -1;
    }
}

/* 1 if parameters of type xt may be copied as wt. */
static inline int fo_copy_ok(int32_t xt, int32_t wt)
{
#define FO_X_COPY(X, W) if (xt == FO_##X && wt == FO_##W) return 1;
    FO_COPY_TABLE(FO_X_COPY)
#undef FO_X_COPY
    return 0;
}

/* A rule's name and facts from its id (name NULL, the rest 0, for an id
 * outside the table). */
typedef struct fo_rule_facts {
    const char *name;   /* the row's NAME, e.g. "ADAM_TORCH" */
    int32_t states;     /* the most state arrays it uses */
    int32_t t0;         /* the smallest count t of its groups */
    int32_t own16;      /* 16-bit parameters may be updated in their own type */
    int32_t q8;         /* -1: no 8-bit states; else the unsigned map's slots */
    int32_t q8n;        /* how many of its states have an 8-bit form */
} fo_rule_facts;

static inline fo_rule_facts fo_rule_info(int32_t rule)
{
    fo_rule_facts f = {0, 0, 0, 0, -1, 0};
    switch (rule) {
#define FO_X_RULE(N, S, T, A, Q, QN) \
    case FO_RULE_##N: \
        f.name = #N; f.states = S; f.t0 = T; f.own16 = A; f.q8 = Q; f.q8n = QN; break;
    FO_RULE_TABLE(FO_X_RULE)
#undef FO_X_RULE
    default: break;
    }
    return f;
}

/* An element type's name ("F32"; NULL outside the table). */
static inline const char *fo_dtype_name(int32_t dtype)
{
    switch (dtype) {
#define FO_X_DTYPE(name, ctype, size) case FO_##name: return #name;
    FO_DTYPE_TABLE(FO_X_DTYPE)
#undef FO_X_DTYPE
    default: return 0;
    }
}

/* each row's SIZE is its C type's size */
#define FO_X_DTYPE(name, ctype, size) \
    _Static_assert(sizeof(ctype) == (size), "tables.h: " #name " SIZE");
FO_DTYPE_TABLE(FO_X_DTYPE)
#undef FO_X_DTYPE

/* Bytes of one stored value of an element type; 0 outside the table. */
static inline int fo_dtype_size(int dtype)
{
    switch (dtype) {
#define FO_X_DTYPE(name, ctype, size) case FO_##name: return size;
    FO_DTYPE_TABLE(FO_X_DTYPE)
#undef FO_X_DTYPE
    default: return 0;
    }
}

#endif
