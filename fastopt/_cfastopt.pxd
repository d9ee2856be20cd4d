# cython: language_level=3
# Declarations of src_c/fastopt.h, in the header's order, block for block
# (as PyWavelets' c_wt.pxd mirrors wt.h): change both together. The
# comments of each block live in the header; only declarations here.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t


cdef extern from "fastopt.h" nogil:
    # Error codes.
    int FO_OK
    int FO_ENOMEM
    int FO_EINVAL
    int FO_ESTALE

    # Element types of a tensor and the update rules (tables.h).
    int FO_F32
    int FO_F64
    int FO_Q8
    int FO_N_DTYPES
    int FO_N_RULES
    int fo_dtype_size(int dtype)
    int fo_pair(int32_t xt, int32_t gt)
    int fo_grad_pair(int32_t gt)
    int fo_copy_ok(int32_t xt, int32_t wt)
    int fo_spair(int32_t xt, int32_t gt, int32_t st)
    ctypedef struct fo_rule_facts:
        const char *name
        int32_t states
        int32_t t0
        int32_t own16
        int32_t q8
        int32_t q8n
    fo_rule_facts fo_rule_info(int32_t rule)
    const char *fo_dtype_name(int32_t dtype)

    # Momentum modes.
    int FO_STANDARD
    int FO_NESTEROV

    # One tensor of a multi-tensor update.
    ctypedef struct fo_tensor:
        void *x
        const void *g
        void *s1
        void *s2
        int64_t n
        int32_t dtype
        int32_t quantum

    # Scalar arguments, as the ONNX operators define them.
    ctypedef struct fo_momentum_args:
        double lr, alpha, beta, norm_coefficient
        int64_t t
        int32_t mode

    # Momentum's per-call coefficients.
    ctypedef struct fo_momentum_coef:
        double lr, alpha, b, nc
        float lr_f, alpha_f, b_f, nc_f
        int nesterov

    int fo_momentum_coefs(const fo_momentum_args *a, fo_momentum_coef *c)

    ctypedef struct fo_adagrad_args:
        double lr, decay_factor, epsilon, norm_coefficient
        int64_t t

    ctypedef struct fo_adam_args:
        double lr, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post
        int64_t t

    # Multi-tensor drivers.
    int fo_momentum(const fo_tensor *ts, int64_t nt, const fo_momentum_args *a,
                    int n_threads)
    int fo_adagrad(const fo_tensor *ts, int64_t nt, const fo_adagrad_args *a,
                   int n_threads)
    int fo_adam(const fo_tensor *ts, int64_t nt, const fo_adam_args *a,
                int n_threads)

    # Overlap check for the fast path.
    int fo_find_overlap(const int64_t *ext, const unsigned char *is_out,
                        int64_t m, int64_t *scratch, int64_t *order,
                        int64_t *norder, int64_t *i, int64_t *j)

    # Build facts and thread control.
    const char *fo_isa_paths()
    const char *fo_isa_active()
    int fo_have_openmp()
    int fo_max_threads()
    int fo_num_procs()

    # Tuning constants (bytes of x), exposed for tests and show_config.
    int64_t fo_serial_bytes()
    int64_t fo_chunk_bytes()

    # Facts about the parallel driver (pool.c), for tests and `fastopt bench`.
    ctypedef struct fo_thread_stats:
        int64_t serial_calls
        int64_t parallel_calls
        int64_t backoffs
        int64_t last_bytes
        int32_t last_threads
        int32_t last_joined

    void fo_get_thread_stats(fo_thread_stats *out)
    int fo_pool_size()
    int64_t fo_pool_spin_ns()

    # ---- Adaptive gradient clipping (AGC) ----

    # How the n_units * unit_len contiguous elements of a tensor form units.
    int FO_AGC_ROWS
    int FO_AGC_COLS

    # One tensor of an AGC call.
    ctypedef struct fo_agc_tensor:
        void *x
        void *g
        void *v
        int64_t n_units
        int64_t unit_len
        double clipping
        int32_t dtype
        int32_t kind

    int fo_agc(const fo_agc_tensor *ts, int64_t nt, double eps, int n_threads)
    int fo_agc_momentum(const fo_agc_tensor *ts, int64_t nt, double eps,
                        const fo_momentum_args *a, int n_threads)

    int fo_agc_unit_sumsq(const void *x, int32_t dtype, int64_t n_units,
                          int64_t unit_len, int32_t kind, double *out)

    # ---- the whole optimizer step (step.c) ----

    int FO_STEP_BLOCK
    int FO_STEP_LANES

    # Update rules: FO_RULE_* (tables.h), fo_rule_info above.

    # Group flags.
    int FO_STEP_NESTEROV
    int FO_STEP_AMSGRAD
    int FO_STEP_MAXIMIZE
    int FO_STEP_CENTERED
    uint64_t FO_KEY_STEP
    int FO_Q8_BLOCK
    int FO_STEP_ROUND_NEAREST
    int FO_STEP_ROUND_STOCHASTIC
    int FO_STEP_DECAY_AFTER
    int FO_STEP_FLAGS
    int FO_STEP_EXTRA

    # Clipping by the global norm.
    int FO_CLIP_NONE
    int FO_CLIP_TORCH
    int FO_CLIP_OPTAX
    # Norm types.
    int FO_NORM_2
    int FO_NORM_INF
    int FO_NORM_SUMSQ

    # Hyperparameters of one group.
    ctypedef struct fo_step_group:
        int32_t rule
        int32_t flags
        int64_t t
        double lr, alpha, beta, eps, decay, decay_post, lr_decay
        double extra[5]     # FO_STEP_EXTRA

    # One tensor of a step.
    ctypedef struct fo_step_tensor:
        void *x
        const void *g
        void *s1
        void *s2
        void *s3
        void *w
        int64_t n
        int32_t dtype
        int32_t group
        int32_t gdtype
        int32_t wdtype
        int32_t sdtype
        uint64_t key
        float *absmax[3]

    # Step-wide options.
    int FO_MEASURE_NEEDED
    int FO_MEASURE_ALWAYS
    int FO_MEASURE_GIVEN
    # A condition on the caller's memory, checked before anything is written.
    ctypedef struct fo_step_guard:
        const void *const *w[2]
        const void *want[2]
        const int32_t *flags
        int32_t mask
        int32_t pad_

    ctypedef struct fo_step_opts:
        double grad_scale
        double max_norm
        double clip_value
        int32_t clip
        int32_t norm_type
        int32_t check_finite
        int32_t measure
        double norm
        const fo_step_guard *guards
        int64_t guards_per_tensor
        double *trust_out
        const double *trust_in
        int64_t trust_len

    # What a step found.
    ctypedef struct fo_step_result:
        double norm
        int32_t finite
        int32_t applied

    int fo_step(const fo_step_tensor *ts, int64_t nt, const fo_step_group *gs,
                int64_t ng, const fo_step_opts *o, fo_step_result *res,
                int n_threads)

    # Gradient lists.
    int fo_global_norm(const void *const *gs, const int64_t *ns,
                       const int32_t *dtypes, int64_t nt, double grad_scale,
                       int32_t norm_type, fo_step_result *res, int n_threads)
    int fo_clip_grads(void *const *gs, const int64_t *ns, const int32_t *dtypes,
                      int64_t nt, const fo_step_opts *o, fo_step_result *res,
                      int n_threads)

    # The core's elementwise parallel driver, shared with step.c.
    int fo_run_elementwise(const fo_tensor *ts, int64_t nt,
                           void (*fn)(const fo_tensor *, int64_t, int64_t,
                                      const void *) noexcept nogil,
                           const void *ctx, int n_threads)


cdef extern from "step.h" nogil:
    # the kernels' own 16-bit conversions and stochastic rounding (for the tests)
    int fo_convert(const void *src, int32_t st, void *dst, int32_t dt, int64_t n)
    int fo_round_stochastic(const float *v, uint16_t *s, int64_t n, uint64_t h, uint64_t i0)
    # the 8-bit states' maps and the storing of one block (the tests, checkpoints)
    const float *fo_q8_map(int32_t kind)
    int fo_q8_store(const float *v, int64_t n, int32_t kind, uint8_t *c, float *absmax)
