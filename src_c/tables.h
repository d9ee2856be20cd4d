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
 * Update rules, in id order: X(NAME, STATES, T0). NAME makes FO_RULE_NAME;
 * STATES is the most state arrays (s1..s3) the rule uses; T0 the smallest
 * count t a group of the rule may have (ONNX counts from 0, torch from 1;
 * torch SGD's t is its steps before this one).
 */
#define FO_RULE_TABLE(X) \
    X(MOMENTUM, 1, 0)       /* ONNX Momentum      s1 = V */ \
    X(ADAGRAD, 1, 0)        /* ONNX Adagrad       s1 = H */ \
    X(ADAM, 2, 0)           /* ONNX Adam          s1 = V, s2 = H */ \
    X(SGD_TORCH, 1, 0)      /* torch SGD          s1 = momentum buffer */ \
    X(ADAGRAD_TORCH, 1, 1)  /* torch Adagrad      s1 = sum */ \
    X(ADAM_TORCH, 3, 1)     /* torch Adam         s1 = exp_avg, s2 = exp_avg_sq, */ \
    X(ADAMW_TORCH, 3, 1)    /* torch AdamW           s3 = max_exp_avg_sq (amsgrad) */ \
    X(RMSPROP_TORCH, 3, 1)  /* torch RMSprop      s1 = square_avg, then momentum_buffer \
                               (momentum > 0), then grad_avg (centered) */ \
    X(ADAMAX_TORCH, 2, 1)   /* torch Adamax       s1 = exp_avg, s2 = exp_inf */ \
    X(ADADELTA_TORCH, 2, 1) /* torch Adadelta     s1 = square_avg, s2 = acc_delta */ \
    X(RADAM_TORCH, 2, 1)    /* torch RAdam        s1 = exp_avg, s2 = exp_avg_sq */ \
    X(LION, 1, 1)           /* Lion (optax, bitsandbytes)  s1 = exp_avg */ \
    X(NADAM_TORCH, 2, 1)    /* torch NAdam        s1 = exp_avg, s2 = exp_avg_sq */ \
    X(ADEMAMIX, 3, 1)       /* AdEMAMix (optax)   s1 = exp_avg_fast, s2 = exp_avg_slow, \
                               s3 = exp_avg_sq */ \
    X(LAMB, 2, 1)           /* LAMB (optax)       s1 = exp_avg, s2 = exp_avg_sq */ \
    X(LARS, 1, 1)           /* LARS (optax)       s1 = momentum_buffer */

/*
 * Element types, in id order: X(NAME, CTYPE, SIZE). NAME makes FO_NAME;
 * CTYPE is the C type of a stored value, SIZE its bytes.
 */
#define FO_DTYPE_TABLE(X) \
    X(F32, float, 4) \
    X(F64, double, 8)

enum {
#define FO_X_RULE(name, states, t0) FO_RULE_##name,
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

/* A rule's name and facts from its id (name NULL, the rest 0, for an id
 * outside the table). */
typedef struct fo_rule_facts {
    const char *name;   /* the row's NAME, e.g. "ADAM_TORCH" */
    int32_t states;     /* the most state arrays it uses */
    int32_t t0;         /* the smallest count t of its groups */
} fo_rule_facts;

static inline fo_rule_facts fo_rule_info(int32_t rule)
{
    fo_rule_facts f = {0, 0, 0};
    switch (rule) {
#define FO_X_RULE(N, S, T) \
    case FO_RULE_##N: f.name = #N; f.states = S; f.t0 = T; break;
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
