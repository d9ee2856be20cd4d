/*
 * fastopt C API.
 *
 * Plain C99: no Python, no NumPy. Every function takes plain pointers and
 * 64-bit signed lengths and returns 0 or a negative error code; nothing here
 * aborts or prints. The one global state is the thread pool (pool.c: created
 * on first use, fork-safe, joined at exit) and its machine-load sample.
 *
 * Update rules (tables.h): ONNX ai.onnx.preview.training Momentum, Adagrad
 * and Adam, and torch.optim's SGD, Adagrad, Adam and AdamW (see
 * docs/semantics.md), each run by fo_step; fo_momentum, fo_adagrad and
 * fo_adam are the ONNX operators over the same update pass. Every array is contiguous, aligned to
 * its element size and in native byte order; the caller (fastopt/_ext.pyx)
 * guarantees that, and that no output overlaps another array of the call.
 * fastopt/_cfastopt.pxd mirrors this header line for line: change both.
 */
#ifndef FASTOPT_H
#define FASTOPT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes. */
#define FO_OK 0
#define FO_ENOMEM (-1)
#define FO_EINVAL (-2)
#define FO_ESTALE (-3)   /* fo_step: a guard (fo_step_guard) no longer holds */

/* Element types of a tensor (FO_F32, FO_F64) and the update rules
 * (FO_RULE_*): generated from the tables. */
#include "tables.h"

/* Momentum modes. */
#define FO_STANDARD 0
#define FO_NESTEROV 1

/*
 * One tensor of a multi-tensor update: the parameter x (updated in place),
 * its gradient g (only read; same number of elements), and its states
 * s1 (Momentum V, Adagrad H, Adam V) and s2 (Adam H; NULL otherwise).
 * All four point at n contiguous elements of type dtype.
 */
typedef struct fo_tensor {
    void *x;
    const void *g;
    void *s1;
    void *s2;
    int64_t n;
    int32_t dtype;   /* an element type of FO_DTYPE_TABLE (tables.h) */
    int32_t quantum; /* > 1: the driver cuts it at multiples of this many
                        elements (a block of 8-bit states); else anywhere */
} fo_tensor;

/*
 * Scalar arguments, as the ONNX operators define them. The drivers derive
 * the per-step coefficients (b, r, R_adj, ...) from them once per call, in
 * double precision, then round them to float for float32 tensors.
 */
typedef struct fo_momentum_args {
    double lr, alpha, beta, norm_coefficient;
    int64_t t;
    int32_t mode;    /* FO_STANDARD or FO_NESTEROV */
} fo_momentum_args;

/*
 * Momentum's per-call coefficients, derived once from fo_momentum_args in
 * double and rounded to float for float32 tensors: b = beta if t > 0 else 1
 * (the first update ignores beta). fo_momentum_coefs returns FO_EINVAL for
 * a negative t or an unknown mode. Shared by fo_momentum and the fused AGC
 * driver, so both update with the very same numbers.
 */
typedef struct fo_momentum_coef {
    double lr, alpha, b, nc;
    float lr_f, alpha_f, b_f, nc_f;
    int nesterov;
} fo_momentum_coef;

int fo_momentum_coefs(const fo_momentum_args *a, fo_momentum_coef *c);

typedef struct fo_adagrad_args {
    double lr, decay_factor, epsilon, norm_coefficient;
    int64_t t;
} fo_adagrad_args;

typedef struct fo_adam_args {
    double lr, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post;
    int64_t t;
} fo_adam_args;

/*
 * Multi-tensor drivers: update every tensor of ts[0..nt) in one call.
 * n_threads is the most threads the call may use: n_threads <= 1, a total
 * below the serial threshold, or a size class where recent calls found the
 * thread pool no faster (pool.c) runs serially on the calling thread;
 * otherwise the concatenation of all tensors is split into 64-byte-aligned
 * chunks that the caller and the pool's threads claim one at a time.
 * Results are bit-identical for every n_threads (the updates are elementwise).
 * Return FO_OK, FO_EINVAL (bad dtype/mode/negative n) or FO_ENOMEM.
 */
int fo_momentum(const fo_tensor *ts, int64_t nt, const fo_momentum_args *a,
                int n_threads);
int fo_adagrad(const fo_tensor *ts, int64_t nt, const fo_adagrad_args *a,
               int n_threads);
int fo_adam(const fo_tensor *ts, int64_t nt, const fo_adam_args *a,
            int n_threads);

/*
 * Overlap check for the fast path. ext holds 2*m int64 values (start, end)
 * of byte ranges (addresses); is_out[i] != 0 marks a range that is written.
 * Empty ranges are ignored. Returns 1 and stores one intersecting pair (at
 * least one of them written) in *i, *j, or 0 if no written range intersects
 * any other range. Pairwise for up to 16 ranges; otherwise the ranges are
 * put in order of start and swept once.
 *
 * order (room for m) and *norder carry the sorted order from one call to the
 * next: if order[0..*norder) still sorts the current ranges (checked in one
 * pass), no sort is done; otherwise the ranges are sorted (a natural merge
 * sort: fast when each role's arrays come in address order) and order and
 * *norder are updated. Pass *norder = -1 for no hint. scratch must hold
 * 5*m + 1 int64 values.
 */
int fo_find_overlap(const int64_t *ext, const unsigned char *is_out,
                    int64_t m, int64_t *scratch, int64_t *order,
                    int64_t *norder, int64_t *i, int64_t *j);

/* Build facts and thread control. */
const char *fo_isa_paths(void);   /* kernel clones built in */
const char *fo_isa_active(void);  /* the clone this CPU runs */
int fo_have_openmp(void);
int fo_max_threads(void);   /* omp_get_max_threads(), 1 without OpenMP */
int fo_num_procs(void);     /* omp_get_num_procs(), 1 without OpenMP */

/* Tuning constants (bytes of x), exposed for tests and show_config. */
int64_t fo_serial_bytes(void);
int64_t fo_chunk_bytes(void);
int fo_chunks_per_thread(void);     /* the fewest chunks a thread gets in a call */

/*
 * Facts about the parallel driver (pool.c), for tests and `fastopt bench`.
 * Counters are process-wide, summed over every calling thread; the "last"
 * fields describe the latest driver call of any thread.
 */
typedef struct fo_thread_stats {
    int64_t serial_calls;    /* driver calls that ran on the calling thread only */
    int64_t parallel_calls;  /* driver calls that entered the thread pool */
    int64_t backoffs;        /* pooled calls found no faster than serial: their
                                size class then ran serially for a while */
    int64_t last_bytes;      /* bytes of parameters of the latest call */
    int32_t last_threads;    /* threads it was allowed (1: the serial path) */
    int32_t last_joined;     /* threads that ran part of it (caller included) */
} fo_thread_stats;

void fo_get_thread_stats(fo_thread_stats *out);
int fo_pool_size(void);          /* pool threads alive in this process */
int64_t fo_pool_spin_ns(void);   /* how long an idle pool thread spins */

#ifdef __cplusplus
}
#endif

#endif /* FASTOPT_H */

/* ======================================================================== */
/*
 * Adaptive gradient clipping (AGC, NFNet; docs/semantics.md),
 * implemented in agc.c / agc.inc. For each unit of a parameter x and its
 * gradient g:
 *     p_norm   = max(||x_unit||, eps)
 *     max_norm = clipping * p_norm
 *     g_unit  *= max_norm / max(||g_unit||, 1e-6)    if ||g_unit|| > max_norm
 * Norms are computed in double in an order fixed by the shape alone
 * (bit-identical for every n_threads); the factor is rounded to the
 * tensor's type and applied as one multiplication in that type.
 */
#ifndef FASTOPT_AGC_H
#define FASTOPT_AGC_H

#ifdef __cplusplus
extern "C" {
#endif

/* How the n_units * unit_len contiguous elements of a tensor form units. */
#define FO_AGC_ROWS 0   /* unit u: elements [u*unit_len, (u+1)*unit_len) */
#define FO_AGC_COLS 1   /* unit u: elements u + r*n_units, r in [0, unit_len) */

/*
 * One tensor of an AGC call. clipping > 0 clips the tensor; clipping == 0
 * excludes it (fo_agc leaves it alone, fo_agc_momentum gives it a plain
 * momentum update). x is only read by fo_agc; g is only read by
 * fo_agc_momentum; v is used by fo_agc_momentum only (NULL otherwise).
 * The caller guarantees the arrays are aligned, native and that no written
 * array overlaps another array of the call.
 */
typedef struct fo_agc_tensor {
    void *x;
    void *g;
    void *v;
    int64_t n_units;
    int64_t unit_len;
    double clipping;
    int32_t dtype;   /* FO_F32 or FO_F64 (AGC's types; others: FO_EINVAL) */
    int32_t kind;    /* FO_AGC_ROWS or FO_AGC_COLS */
} fo_agc_tensor;

/*
 * fo_agc clips every g in place. fo_agc_momentum runs ONNX Momentum (as
 * fo_momentum) with each gradient replaced by its AGC-clipped value, without
 * writing g; the result equals fo_agc on a copy of g followed by
 * fo_momentum, bit for bit. Rows short enough to stay in cache are done in
 * one pass (both norms, then the clip/update of the row); long rows and
 * strided units take two passes. One OpenMP region per call (none below
 * the serial threshold). Return FO_OK, FO_EINVAL (eps <= 0, clipping < 0
 * or not finite, bad dtype/kind/t/mode) or FO_ENOMEM.
 */
int fo_agc(const fo_agc_tensor *ts, int64_t nt, double eps, int n_threads);
int fo_agc_momentum(const fo_agc_tensor *ts, int64_t nt, double eps,
                    const fo_momentum_args *a, int n_threads);

/*
 * Serial: out[u] = the sum of squares of unit u of one tensor x, in the same
 * order fo_agc uses (sqrt(out[u]) is the unit norm). Returns FO_OK,
 * FO_EINVAL or FO_ENOMEM.
 */
int fo_agc_unit_sumsq(const void *x, int32_t dtype, int64_t n_units,
                      int64_t unit_len, int32_t kind, double *out);

#ifdef __cplusplus
}
#endif

#endif /* FASTOPT_AGC_H */

/* ======================================================================== */
/*
 * The whole optimizer step in one call (step.c / step.inc).
 *
 * Order inside one step, every gradient of the step taken together:
 *   u = g / grad_scale                 (in g's type; g itself is only read)
 *   non-finite check                   (optionally skip: nothing written)
 *   norm = global norm of every u      (2: sum of squares in double; inf)
 *   clip by the global norm            torch: u *= min(1, max_norm/(norm+1e-6))
 *                                      optax: u = (u / norm) * max_norm
 *                                             where !(norm < max_norm)
 *   u = clamp(u, -clip_value, clip_value)
 *   u = -u                             (maximize)
 *   the tensor's rule with u as its gradient.
 * Coefficients are derived in double once per group and rounded to float
 * for float32 tensors. The norm is reduced in a fixed order that does not
 * depend on n_threads: each gradient is cut into blocks of FO_STEP_BLOCK
 * elements, a block is summed in FO_STEP_LANES double lanes (element i into
 * lane i % FO_STEP_LANES, in order) closed by a halving tree, and the block
 * sums are added in tensor order, then block order. At most two passes over
 * memory: pass 1 reads the gradients (norm, finiteness) when the step needs
 * it; pass 2 is the update, which applies unscale and clip on the fly.
 */
#ifndef FASTOPT_STEP_H
#define FASTOPT_STEP_H

#ifdef __cplusplus
extern "C" {
#endif

#define FO_STEP_BLOCK 4096
#define FO_STEP_LANES 32   /* 16 or 32 */

/* Update rules: FO_RULE_* and fo_rule_info in tables.h. */

/* Group flags. */
#define FO_STEP_NESTEROV 1       /* Momentum, SGD */
#define FO_STEP_AMSGRAD 2        /* Adam(W) torch: s3 required */
#define FO_STEP_MAXIMIZE 4       /* every rule: the rule sees -u */
#define FO_STEP_CENTERED 8       /* RMSprop: the centered variance (grad_avg) */
/* How states stored apart (sdtype: bfloat16) are rounded back: by default
 * each state slot to nearest, but stochastically where nearest rounding
 * loses its updates (an accumulator; an average whose decay's complement
 * is below 2**-8, half a bfloat16 ulp); these force one way for all.
 * float16 states (of float16 parameters) need FO_STEP_ROUND_NEAREST. */
#define FO_STEP_ROUND_NEAREST 16
#define FO_STEP_ROUND_STOCHASTIC 32
/* AdamW torch and Adam torch: the decay is decoupled (Adam's too) and
 * multiplies x after the update instead of before it (bitsandbytes' CUDA
 * kernels' order, for its Adam and AdamW alike); the update is unchanged.
 * Another rule's group with it is invalid. */
#define FO_STEP_DECAY_AFTER 64
#define FO_STEP_FLAGS 127        /* every flag: a group's flags are within it */

/* Clipping by the global norm. */
#define FO_CLIP_NONE 0
#define FO_CLIP_TORCH 1
#define FO_CLIP_OPTAX 2
/* Norm types. */
#define FO_NORM_2 0
#define FO_NORM_INF 1
#define FO_NORM_SUMSQ 2          /* fo_global_norm only: the sum of squares, no root */

/* Room for the hyperparameters of a rule beyond the named fields. */
#define FO_STEP_EXTRA 5

/*
 * Hyperparameters of one group (tensors point at their group by index):
 *   rule           alpha      beta        eps   decay         decay_post  lr_decay      t
 *   MOMENTUM       alpha      beta        -     norm_coef.    -           -             T (>= 0)
 *   ADAGRAD        -          -           eps   norm_coef.    -           decay_factor  T (>= 0)
 *   ADAM           alpha      beta        eps   norm_coef.    norm_c_post -             T (>= 0)
 *   SGD_TORCH      momentum   dampening   -     weight_decay  -           -             steps before
 *                                                                                       (0: buffer = g)
 *   ADAGRAD_TORCH  -          -           eps   weight_decay  -           lr_decay      step (>= 1)
 *   ADAM(W)_TORCH  beta1      beta2       eps   weight_decay  -           -             step (>= 1)
 *   RMSPROP_TORCH  alpha      momentum    eps   weight_decay  -           -             step (>= 1)
 *   ADAMAX_TORCH   beta1      beta2       eps   weight_decay  -           -             step (>= 1)
 *   ADADELTA_TORCH rho        -           eps   weight_decay  -           -             step (>= 1)
 *   RADAM_TORCH    beta1      beta2       eps   weight_decay  decoupled   -             step (>= 1)
 *                  (decay: the L2 decay; decay_post: decoupled_weight_decay's)
 *   LION           beta1      beta2       -     weight_decay  -           -             (>= 1)
 *                  (decay: decoupled, x * (1 - lr*decay) before the update)
 *   NADAM_TORCH    beta1      beta2       eps   weight_decay  decoupled   -             step (>= 1)
 *                  extra: mu_t, mu_{t+1}, mu_product (state['mu_product'] after this
 *                  step's product: the caller keeps it and rounds it as torch)
 *   ADEMAMIX       beta1      beta2       eps   weight_decay  -           -             step (>= 1)
 *                  extra: beta3, alpha, alpha_warmup, beta3_warmup (0: none), eps_root
 *                  (decay: optax's add_decayed_weights, u + decay*x, before -lr)
 *   LAMB           beta1      beta2       eps   weight_decay  -           -             step (>= 1)
 *                  extra: eps_root, trust ratio on (1) or off (0)
 *   LARS           momentum   -           eps   weight_decay  -           -             (>= 1)
 *                  extra: trust_coefficient, trust ratio on (1) or off (0)
 *                  (LAMB, LARS: the update of each tensor is scaled by its trust
 *                  ratio coef * |x| / (|w| + eps), 1 where |x| or |w| is 0, from
 *                  fixed-order norms of a pass before the update)
 * SGD_TORCH with momentum 0 keeps no state (s1 may be NULL). The torch
 * rules follow torch.optim's single-tensor code operation by operation.
 */
typedef struct fo_step_group {
    int32_t rule;
    int32_t flags;
    int64_t t;
    double lr, alpha, beta, eps, decay, decay_post, lr_decay;
    double extra[FO_STEP_EXTRA];   /* the rules with more hyperparameters (above) */
} fo_step_group;

/* One tensor of a step: x updated in place, g only read, states s1..s3 as
 * the rule needs (NULL otherwise), n elements each; x of type dtype, g of
 * type gdtype (the pair (dtype, gdtype) a row of FO_PAIR_TABLE: the same
 * type, or 16-bit gradients for float or double parameters, widened
 * exactly as they are read), the states of type sdtype: dtype, or a row of
 * FO_SPAIR_TABLE (bfloat16 states of float parameters, widened as they are
 * read and rounded as the group's flags say; a stochastic rounding draws
 * its bits from key, the group's t, the state's slot and the element's
 * index: docs/semantics.md; or bfloat16/float16 parameters with gradients
 * and states of their type, computed in float and rounded to nearest, the
 * states as the flags say). w, if not NULL, receives the new x rounded to
 * type wdtype (a row of FO_COPY_TABLE) in the same pass, on an applied
 * step only. */
typedef struct fo_step_tensor {
    void *x;
    const void *g;
    void *s1;
    void *s2;
    void *s3;
    void *w;
    int64_t n;
    int32_t dtype;   /* an element type of FO_DTYPE_TABLE (tables.h) */
    int32_t group;   /* index into the groups */
    int32_t gdtype;  /* the gradient's element type */
    int32_t wdtype;  /* the copy's element type (with w) */
    int32_t sdtype;  /* the states' element type */
    uint64_t key;    /* the stochastic rounding's key (states apart) */
    float *absmax[3]; /* 8-bit states (sdtype FO_Q8): s1..s3's absmax, one
                         float per FO_Q8_BLOCK elements (else unused) */
} fo_step_tensor;

/* Elements of a block of 8-bit states (one absmax each; the last block of
 * a tensor may be shorter). */
#define FO_Q8_BLOCK 256

/* The keys fastopt's bindings give the tensors of a call: tensor i's is
 * seed + i * FO_KEY_STEP (mod 2**64; the golden ratio's 64 bits, as
 * SplitMix64 steps its counter). */
#define FO_KEY_STEP 0x9E3779B97F4A7C15ull

/* Step-wide options. grad_scale 1 unscales nothing; clip_value 0 means no
 * value clipping (else > 0); max_norm > 0 when clip != FO_CLIP_NONE.
 * measure: FO_MEASURE_NEEDED runs pass 1 only to check or clip,
 * FO_MEASURE_ALWAYS always (to report the norm), FO_MEASURE_GIVEN takes
 * `norm` as the global norm (measured by fo_global_norm on the same
 * gradients, e.g. to decide whether to step) and skips pass 1; then
 * check_finite must be 0. */
#define FO_MEASURE_NEEDED 0
#define FO_MEASURE_ALWAYS 1
#define FO_MEASURE_GIVEN 2

/*
 * A guard: a condition on the caller's own memory that fo_step checks
 * before it writes anything. The pointer-sized words at w[0] and w[1] must
 * hold want[0] and want[1], and the int at flags every bit of mask (a NULL
 * address is not checked). A binding that checked its objects once and
 * kept their pointers states here what must not have changed since (for an
 * array: its data pointer, its element type object, its writeable flag);
 * fo_step reads these words in pass 1, beside the gradients, and else
 * before pass 2, and returns FO_ESTALE with nothing written if one fails.
 * The words are only read: the caller keeps them valid through the call.
 */
typedef struct fo_step_guard {
    const void *const *w[2];
    const void *want[2];
    const int32_t *flags;
    int32_t mask;
    int32_t pad_;
} fo_step_guard;

typedef struct fo_step_opts {
    double grad_scale;
    double max_norm;
    double clip_value;
    int32_t clip;          /* FO_CLIP_* */
    int32_t norm_type;     /* FO_NORM_2 or FO_NORM_INF */
    int32_t check_finite;  /* skip the step if some u is not finite */
    int32_t measure;       /* FO_MEASURE_* */
    double norm;           /* with FO_MEASURE_GIVEN */
    /* guards[k * guards_per_tensor + r], r < guards_per_tensor: tensor k's
     * (NULL or 0: none) */
    const fo_step_guard *guards;
    int64_t guards_per_tensor;
    /* LAMB and LARS over a tensor split between callers (fastopt.distributed:
     * each process holds pieces cut at multiples of FO_STEP_BLOCK from the
     * tensor's start, so its blocks are the whole tensor's). trust_out, if
     * not NULL, receives the trust pass's block sums of every tensor whose
     * group scales by a trust ratio, in tensor order then block order, two
     * per block (sum of x*x, sum of w*w), and the step stops there:
     * nothing else written, res->applied 0. trust_in, if not NULL, gives
     * each such tensor's two sums (2 per trusted tensor, in tensor order):
     * the trust pass is skipped and the ratios come from them. Adding a
     * whole tensor's block sums in block order, from 0.0, gives its sums
     * as the trust pass adds them, so the ratio is the same bit for bit.
     * trust_len is the number of doubles trust_out has room for or
     * trust_in holds: anything else than the count above, or both given,
     * is FO_EINVAL, checked before pass 1. fo_step only (fo_clip_grads
     * ignores them). */
    double *trust_out;
    const double *trust_in;
    int64_t trust_len;
} fo_step_opts;

/* What a step found: the norm (NaN if not measured), whether every u was
 * finite (1 if not checked/measured) and whether the update was applied. */
typedef struct fo_step_result {
    double norm;
    int32_t finite;
    int32_t applied;
} fo_step_result;

/*
 * The whole step over ts[0..nt), groups gs[0..ng). Everything is checked
 * before anything is written: FO_EINVAL for a bad dtype, negative n, group
 * index, rule, flag, t, a missing state, grad_scale <= 0 or not finite,
 * max_norm <= 0 or NaN (when clipping), clip_value < 0 or NaN, unknown
 * clip or norm type; FO_ESTALE if a guard of o fails. A skipped step
 * (check_finite and some u not finite) returns FO_OK with res->applied = 0
 * and writes nothing. One parallel
 * region per pass (none below the serial threshold); every result is
 * bit-identical for every n_threads.
 */
int fo_step(const fo_step_tensor *ts, int64_t nt, const fo_step_group *gs,
            int64_t ng, const fo_step_opts *o, fo_step_result *res,
            int n_threads);

/* 1 if tensor t has the states group g's rule needs (fo_step's check), and
 * 1 if group g is valid; for the published API's error reports (capi.c). */
int fo_step_states_ok(const fo_step_tensor *t, const fo_step_group *g);
int fo_step_group_ok(const fo_step_group *g);

/*
 * Gradient lists (gs[k]: ns[k] elements of type dtypes[k]).
 * fo_global_norm: the global norm of the unscaled gradients (the norm of
 *   fo_step, bit for bit) and whether all were finite; nothing written.
 *   With FO_NORM_SUMSQ, the sum of squares before the root: the partial
 *   sum a distributed caller adds over ranks in rank order.
 * fo_clip_grads: in place, the gradient half of fo_step: unscale, clip by
 *   the global norm (o->clip), clip_value; with o->check_finite a
 *   non-finite list is left untouched (res->applied = 0); o's guards are
 *   checked as fo_step does (FO_ESTALE), gradient k's as tensor k's.
 * Both return FO_OK, FO_EINVAL or FO_ENOMEM (and fo_clip_grads FO_ESTALE).
 */
int fo_global_norm(const void *const *gs, const int64_t *ns,
                   const int32_t *dtypes, int64_t nt, double grad_scale,
                   int32_t norm_type, fo_step_result *res, int n_threads);
int fo_clip_grads(void *const *gs, const int64_t *ns, const int32_t *dtypes,
                  int64_t nt, const fo_step_opts *o, fo_step_result *res,
                  int n_threads);

/*
 * The core's elementwise parallel driver (fastopt.c), shared with step.c:
 * calls fn(&ts[k], lo, hi, ctx) on pieces covering every tensor once, in
 * one parallel region (none below the serial threshold). Only ts[k].x,
 * .n and .dtype are used to cut the pieces.
 */
int fo_run_elementwise(const fo_tensor *ts, int64_t nt,
                       void (*fn)(const fo_tensor *, int64_t, int64_t,
                                  const void *),
                       const void *ctx, int n_threads);

#ifdef __cplusplus
}
#endif

#endif /* FASTOPT_STEP_H */
