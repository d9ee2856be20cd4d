/*
 * Internal to step.c: what each rule's coefficients are. A group's
 * coefficients (step_gcoef) are worked out once per step in double and
 * rounded once to float (step_round), as torch rounds a Python scalar for
 * a float32 kernel; the kernels (step_rules.inc) read them by the indices
 * below. A torch-form rule's layout and its derivation live here; the ONNX
 * rules' are in step_group_coefs (step.c), as fo_momentum_coefs has them.
 */
#ifndef FASTOPT_STEP_COEFS_H
#define FASTOPT_STEP_COEFS_H

#include "step.h"

/* Torch RMSprop coefficients (c[]): alpha, 1 - alpha, eps, weight decay,
 * momentum, -lr, the lerp weight w = 1 - alpha and 1 - w. */
enum { STEP_RMS_A, STEP_RMS_OMA, STEP_RMS_EPS, STEP_RMS_WD, STEP_RMS_MOM,
       STEP_RMS_NLR, STEP_RMS_W, STEP_RMS_OMW, STEP_RMS_N };

/* Torch Adamax coefficients (c[]), as step_adamax_coefs derives them. */
enum { STEP_AMX_W, STEP_AMX_OMW, STEP_AMX_B2, STEP_AMX_EPS, STEP_AMX_WD,
       STEP_AMX_NCLR, STEP_AMX_N };

/* Torch Adadelta coefficients (c[]), as step_adadelta_coefs derives them. */
enum { STEP_ADL_RHO, STEP_ADL_OMR, STEP_ADL_EPS, STEP_ADL_WD, STEP_ADL_NLR, STEP_ADL_N };

/* Torch RAdam coefficients (c[]), as step_radam_coefs derives them. */
enum { STEP_RAD_W, STEP_RAD_OMW, STEP_RAD_B2, STEP_RAD_OMB2, STEP_RAD_EPS, STEP_RAD_WD,
       STEP_RAD_DMUL, STEP_RAD_BC1, STEP_RAD_LR, STEP_RAD_SBC2, STEP_RAD_RECT,
       STEP_RAD_N };

/* Lion's coefficients (c[]), as step_lion_coefs derives them. */
enum { STEP_LION_B1, STEP_LION_OMB1, STEP_LION_B2, STEP_LION_OMB2, STEP_LION_NLR,
       STEP_LION_DMUL, STEP_LION_N };

#define STEP_COEFS 12          /* the most coefficients of a rule (step_gcoef) */
_Static_assert(STEP_RMS_N <= STEP_COEFS && STEP_AMX_N <= STEP_COEFS && STEP_ADL_N
               <= STEP_COEFS && STEP_RAD_N <= STEP_COEFS && STEP_LION_N <= STEP_COEFS,
               "coefficients fit STEP_COEFS");

/* Torch Adam coefficients (fo_adam_torch's c[]) and flags. */
enum { STEP_AD_DMUL, STEP_AD_WD, STEP_AD_W, STEP_AD_OMW, STEP_AD_B2,
       STEP_AD_OMB2, STEP_AD_BC2S, STEP_AD_EPS, STEP_AD_NSS, STEP_AD_N };
#define STEP_ADF_L2 2
#define STEP_ADF_AMSGRAD 4
#define STEP_ADF_SMALLW 8
#define STEP_ADF_MOM 16          /* RMSprop: momentum > 0 */
#define STEP_ADF_CENTERED 32     /* RMSprop: centered */
#define STEP_ADF_RECT 64         /* RAdam: the variance is rectified (rho_t > 5) */
/* torch SGD's flags: which paths torch takes, decided by the double
 * coefficients (1e-300 is 0 in float32, yet torch keeps its buffer). */
#define STEP_SGDF_WD 1
#define STEP_SGDF_MOM 2
/* Adagrad's: add nc*x (ONNX always; torch only when weight_decay != 0, so an
 * infinite x does not make 0*x a NaN). */
#define STEP_AGF_NC 1

/* How a group's tensors of one type get their gradient in pass 2:
 * gm 0, 1, 2: fused, u = g, g*a, (g*a)*b (a, b already rounded to the
 * type); gm -1: through step_transform and a tile. */
typedef struct {
    int gm;
    double a, b;
} step_gfused;

/* A group's derived coefficients, in double and rounded to float. */
typedef struct {
    int rule, tf, nesterov, first, adflags;
    double d[STEP_COEFS];
    float f[STEP_COEFS];
    step_gfused fu_f, fu_d;
} step_gcoef;

static void step_round(step_gcoef *c, int n)
{
    for (int i = 0; i < n; i++)
        c->f[i] = (float)c->d[i];
}

/* torch.optim.RMSprop's coefficients; scalars reach torch's float kernels
 * rounded once from double, 1 - w (lerp's) computed in the tensor's type. */
static int step_rmsprop_coefs(const fo_step_group *g, step_gcoef *c)
{
    double w = 1.0 - g->alpha;
    c->d[STEP_RMS_A] = g->alpha;
    c->d[STEP_RMS_OMA] = 1.0 - g->alpha;
    c->d[STEP_RMS_EPS] = g->eps;
    c->d[STEP_RMS_WD] = g->decay;
    c->d[STEP_RMS_MOM] = g->beta;
    c->d[STEP_RMS_NLR] = -g->lr;
    c->d[STEP_RMS_W] = w;
    c->d[STEP_RMS_OMW] = 1.0 - w;
    step_round(c, STEP_RMS_N);
    c->f[STEP_RMS_OMW] = 1.0f - (float)w;
    c->adflags = (g->decay != 0.0 ? STEP_ADF_L2 : 0)
                 | (fabs(w) < 0.5 ? STEP_ADF_SMALLW : 0)
                 | (g->beta != 0.0 ? STEP_ADF_MOM : 0)
                 | (g->flags & FO_STEP_CENTERED ? STEP_ADF_CENTERED : 0);
    return FO_OK;
}

/* torch.optim.Adamax's: the lerp weight w = 1 - beta1 and 1 - w (in the
 * tensor's type), beta2, eps, weight decay, -lr / (1 - beta1**step). */
static int step_adamax_coefs(const fo_step_group *g, step_gcoef *c)
{
    double w = 1.0 - g->alpha;
    c->d[STEP_AMX_W] = w;
    c->d[STEP_AMX_OMW] = 1.0 - w;
    c->d[STEP_AMX_B2] = g->beta;
    c->d[STEP_AMX_EPS] = g->eps;
    c->d[STEP_AMX_WD] = g->decay;
    c->d[STEP_AMX_NCLR] = -(g->lr / (1.0 - pow(g->alpha, (double)g->t)));
    step_round(c, STEP_AMX_N);
    c->f[STEP_AMX_OMW] = 1.0f - (float)w;
    c->adflags = (g->decay != 0.0 ? STEP_ADF_L2 : 0) | (fabs(w) < 0.5 ? STEP_ADF_SMALLW : 0);
    return FO_OK;
}

/* torch.optim.Adadelta's: rho, 1 - rho (torch's addcmul value, a double
 * rounded to the tensor's type), eps, weight decay, -lr. */
static int step_adadelta_coefs(const fo_step_group *g, step_gcoef *c)
{
    c->d[STEP_ADL_RHO] = g->alpha;
    c->d[STEP_ADL_OMR] = 1.0 - g->alpha;
    c->d[STEP_ADL_EPS] = g->eps;
    c->d[STEP_ADL_WD] = g->decay;
    c->d[STEP_ADL_NLR] = -g->lr;
    step_round(c, STEP_ADL_N);
    c->adflags = g->decay != 0.0 ? STEP_ADF_L2 : 0;
    return FO_OK;
}

/* torch.optim.RAdam's (decay_post: the decoupled decay, a multiplier of x);
 * the rectification in double from the step, as torch, rectified if rho_t > 5. */
static int step_radam_coefs(const fo_step_group *g, step_gcoef *c)
{
    double t = (double)g->t, w = 1.0 - g->alpha, b2t = pow(g->beta, t);
    double bc2 = 1.0 - b2t, rho_inf = 2.0 / (1.0 - g->beta) - 1.0;
    double rho_t = rho_inf - 2.0 * t * b2t / bc2;
    int rect = rho_t > 5.0;
    c->d[STEP_RAD_W] = w;
    c->d[STEP_RAD_OMW] = 1.0 - w;
    c->d[STEP_RAD_B2] = g->beta;
    c->d[STEP_RAD_OMB2] = 1.0 - g->beta;
    c->d[STEP_RAD_EPS] = g->eps;
    c->d[STEP_RAD_WD] = g->decay;
    c->d[STEP_RAD_DMUL] = g->decay_post != 0.0 ? 1.0 - g->lr * g->decay_post : 1.0;
    c->d[STEP_RAD_BC1] = 1.0 - pow(g->alpha, t);
    c->d[STEP_RAD_LR] = g->lr;
    c->d[STEP_RAD_SBC2] = pow(bc2, 0.5);
    c->d[STEP_RAD_RECT] = rect ? pow((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
                                     / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t), 0.5)
                               : 0.0;
    step_round(c, STEP_RAD_N);
    c->f[STEP_RAD_OMW] = 1.0f - (float)w;
    c->adflags = (g->decay != 0.0 ? STEP_ADF_L2 : 0) | (fabs(w) < 0.5 ? STEP_ADF_SMALLW : 0)
                 | (rect ? STEP_ADF_RECT : 0);
    return FO_OK;
}

/* Lion's: beta1, 1 - beta1, beta2, 1 - beta2, -lr and the decoupled decay's
 * multiplier of x (1 - lr*wd), each rounded once to the tensor's type. */
static int step_lion_coefs(const fo_step_group *g, step_gcoef *c)
{
    c->d[STEP_LION_B1] = g->alpha;
    c->d[STEP_LION_OMB1] = 1.0 - g->alpha;
    c->d[STEP_LION_B2] = g->beta;
    c->d[STEP_LION_OMB2] = 1.0 - g->beta;
    c->d[STEP_LION_NLR] = -g->lr;
    c->d[STEP_LION_DMUL] = 1.0 - g->lr * g->decay;
    step_round(c, STEP_LION_N);
    return FO_OK;
}

/* torch.optim.Adam's and AdamW's (the decoupled decay as a multiplier of x). */
static int step_adam_torch_coefs(const fo_step_group *g, step_gcoef *c)
{
    double t = (double)g->t, w = 1.0 - g->alpha;
    /* AdamW's decay multiplies x (Adam's: 1, and x * 1 is x) */
    c->d[STEP_AD_DMUL] = g->rule == FO_RULE_ADAMW_TORCH ? 1.0 - g->lr * g->decay : 1.0;
    c->d[STEP_AD_WD] = g->decay;
    c->d[STEP_AD_W] = w;
    c->d[STEP_AD_OMW] = 1.0 - w;
    c->d[STEP_AD_B2] = g->beta;
    c->d[STEP_AD_OMB2] = 1.0 - g->beta;
    c->d[STEP_AD_BC2S] = pow(1.0 - pow(g->beta, t), 0.5);
    c->d[STEP_AD_EPS] = g->eps;
    c->d[STEP_AD_NSS] = -(g->lr / (1.0 - pow(g->alpha, t)));
    step_round(c, STEP_AD_N);
    c->f[STEP_AD_OMW] = 1.0f - (float)w;    /* torch: 1 - weight in float */
    int has_wd = g->decay != 0.0;
    c->adflags = (g->rule == FO_RULE_ADAM_TORCH && has_wd ? STEP_ADF_L2 : 0)
                 | (g->flags & FO_STEP_AMSGRAD ? STEP_ADF_AMSGRAD : 0)
                 | (fabs(w) < 0.5 ? STEP_ADF_SMALLW : 0);
    return FO_OK;
}

#endif
