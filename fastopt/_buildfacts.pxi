# Build facts (included by _ext.pyx): setup.py defines FASTOPT_BUILD_CFLAGS
# and FASTOPT_BUILD_COMPILER for every C file of the build.

cdef extern from *:
    """
    #ifndef FASTOPT_BUILD_CFLAGS
    #define FASTOPT_BUILD_CFLAGS "unknown"
    #endif
    #ifndef FASTOPT_BUILD_COMPILER
    #define FASTOPT_BUILD_COMPILER "unknown"
    #endif
    """
    const char *FASTOPT_BUILD_CFLAGS
    const char *FASTOPT_BUILD_COMPILER


def build_info():
    """Compiler, flags and ISA paths the extension was built with."""
    return {
        "compiler": FASTOPT_BUILD_COMPILER.decode(),
        "cflags": FASTOPT_BUILD_CFLAGS.decode(),
        "isa_paths": fo_isa_paths().decode(),
        "isa_active": fo_isa_active().decode(),
    }


def tables():
    """The C core's tables (src_c/tables.h), as the C code sees them: rules
    as (NAME, most states, smallest t, states may be stored apart) and
    element types as (NAME, bytes),
    each in id order; the storage pairs a step updates (parameters' type,
    gradients' type), the pair a gradient alone is read in, the types of a
    parameter's rounded copy, and the types its states may have (with
    gradients of its own type), as type names; and how many extra
    hyperparameters a group holds (FO_STEP_EXTRA). fastopt/_rules.py,
    fastopt/_dtypes.py and fastopt/_step.py must agree."""
    cdef fo_rule_facts r
    rules = []
    for i in range(FO_N_RULES):
        r = fo_rule_info(i)
        rules.append((r.name.decode(), r.states, r.t0, r.own16 != 0, r.q8, r.q8n))
    dtypes = [(fo_dtype_name(i).decode(), fo_dtype_size(i)) for i in range(FO_N_DTYPES)]
    names = [d[0] for d in dtypes]
    n = FO_N_DTYPES
    pairs = [(names[x], names[g]) for x in range(n) for g in range(n) if fo_pair(x, g) >= 0]
    copies = [(names[x], names[w]) for x in range(n) for w in range(n) if fo_copy_ok(x, w)]
    alone = {names[g]: fo_grad_pair(g) >= 0 for g in range(n)}
    states = [(names[x], names[s]) for x in range(n) for s in range(n)
              if fo_spair(x, x, s) >= 0]
    return {"rules": rules, "dtypes": dtypes, "pairs": pairs, "copies": copies,
            "grads": alone, "states": states, "step_extra": FO_STEP_EXTRA,
            "q8_block": FO_Q8_BLOCK,
            "key_step": FO_KEY_STEP, "round_nearest": FO_STEP_ROUND_NEAREST,
            "round_stochastic": FO_STEP_ROUND_STOCHASTIC, "decay_after": FO_STEP_DECAY_AFTER}


def convert(cnp.ndarray src, cnp.ndarray dst):
    """dst[...] = src through the kernels' own conversions (the tests compare
    them with NumPy's and ml_dtypes'): float32 to bfloat16/float16 rounded
    as a step's param_copies are, or bfloat16/float16 to float32 widened as
    a step reads gradients. Both C-contiguous and of one size."""
    cdef int st = _dtype_code(cnp.PyArray_TYPE(src)), dt = _dtype_code(cnp.PyArray_TYPE(dst))
    if not (src.flags.c_contiguous and dst.flags.c_contiguous and dst.flags.writeable
            and src.size == dst.size and st >= 0 and dt >= 0):
        raise ValueError("fastopt._ext.convert: two C-contiguous arrays of one size "
                         "and registered types, dst writeable")
    cdef void *sp = cnp.PyArray_DATA(src)
    cdef void *dp = cnp.PyArray_DATA(dst)
    cdef int64_t n = src.size
    cdef int rc
    with nogil:
        rc = fo_convert(sp, st, dp, dt, n)
    if rc != FO_OK:
        raise ValueError(f"fastopt._ext.convert: no conversion from {src.dtype} to "
                         f"{dst.dtype}")


def round_stochastic(cnp.ndarray src, cnp.ndarray dst, uint64_t h, uint64_t i0):
    """dst[...] = src (float32) rounded stochastically to bfloat16 (dst:
    their bits, uint16) as a step rounds a state slot of stream h whose
    first element has index i0 (the tests compare it with
    fastopt/_reference/half.py). Both C-contiguous and of one size."""
    if not (src.dtype == np.float32 and dst.dtype == np.uint16 and src.flags.c_contiguous
            and dst.flags.c_contiguous and dst.flags.writeable and src.size == dst.size):
        raise ValueError("fastopt._ext.round_stochastic: a C-contiguous float32 array and "
                         "a writeable C-contiguous uint16 array of its size")
    cdef const float *sp = <const float *>cnp.PyArray_DATA(src)
    cdef uint16_t *dp = <uint16_t *>cnp.PyArray_DATA(dst)
    cdef int64_t n = src.size
    with nogil:
        fo_round_stochastic(sp, dp, n, h, i0)


def q8_map(int kind):
    """The 8-bit states' map kind (0: signed, 1: unsigned) as the kernels
    hold it: float32[256] (the tests compare it with
    fastopt/_reference/bnb8.py; checkpoints compare theirs with it)."""
    cdef const float *m = fo_q8_map(kind)
    if m == NULL:
        raise ValueError(f"fastopt._ext.q8_map: kind is 0 or 1, got {kind}")
    out = np.empty(256, np.float32)
    cdef float[::1] o = out
    cdef int i
    for i in range(256):
        o[i] = m[i]
    return out


def q8_store(cnp.ndarray v, int kind):
    """(codes, absmax) of float32 values v (C-contiguous, flattened) stored
    on map kind as a step stores 8-bit states: uint8 codes of v's size and
    one float32 absmax per block of FO_Q8_BLOCK (fastopt.State8bit.quantize;
    the tests compare it with fastopt/_reference/bnb8.py)."""
    if not (v.dtype == np.float32 and v.flags.c_contiguous):
        raise ValueError(f"fastopt._ext.q8_store: v must be a C-contiguous float32 array, "
                         f"got {v.dtype}{'' if v.flags.c_contiguous else ', not C-contiguous'}")
    cdef int64_t n = v.size
    codes = np.zeros(n, np.uint8)
    absmax = np.zeros((n + FO_Q8_BLOCK - 1) // FO_Q8_BLOCK, np.float32)
    cdef const float *vp = <const float *>cnp.PyArray_DATA(v)
    cdef uint8_t *cp = <uint8_t *>cnp.PyArray_DATA(codes)
    cdef float *ap = <float *>cnp.PyArray_DATA(absmax)
    cdef int rc
    with nogil:
        rc = fo_q8_store(vp, n, kind, cp, ap)
    if rc != FO_OK:
        raise ValueError(f"fastopt._ext.q8_store: kind is 0 or 1, got {kind}")
    return codes, absmax
