/*
 * Internal: the update rules' loops (step.inc) for the C files that run a
 * rule outside fo_step. One body per rule serves every caller.
 */
#ifndef FO_RULES_H
#define FO_RULES_H

#include <stdint.h>

/* Momentum on n contiguous elements, c = {lr, alpha, b, nc} (the
 * coefficients of fo_momentum_coefs, in the array's type), nesterov 0 or 1:
 * the fused AGC driver's update after its clip. */
void fo_rule_momentum_F32(int64_t n, float *x, const float *g, float *v,
                          const float *c, int nesterov);
void fo_rule_momentum_F64(int64_t n, double *x, const double *g, double *v,
                          const double *c, int nesterov);

#endif
