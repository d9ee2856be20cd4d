/*
 * Facts of the rules and element types, generated from the rows of
 * tables.h (nothing here is kept by hand).
 */
#include <stddef.h>

#include "fastopt.h"

static const fo_rule_facts rule_rows[FO_N_RULES] = {
#define FO_X_RULE(name, states, t0) {#name, states, t0},
    FO_RULE_TABLE(FO_X_RULE)
#undef FO_X_RULE
};

static const char *const dtype_names[FO_N_DTYPES] = {
#define FO_X_DTYPE(name, ctype, size) #name,
    FO_DTYPE_TABLE(FO_X_DTYPE)
#undef FO_X_DTYPE
};

/* each row's SIZE is its C type's size */
#define FO_X_DTYPE(name, ctype, size) \
    _Static_assert(sizeof(ctype) == (size), "tables.h: " #name " SIZE");
FO_DTYPE_TABLE(FO_X_DTYPE)
#undef FO_X_DTYPE

fo_rule_facts fo_rule_info(int32_t rule)
{
    fo_rule_facts none = {NULL, 0, 0};
    return rule >= 0 && rule < FO_N_RULES ? rule_rows[rule] : none;
}

const char *fo_dtype_name(int32_t dtype)
{
    return dtype >= 0 && dtype < FO_N_DTYPES ? dtype_names[dtype] : NULL;
}
