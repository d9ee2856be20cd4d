/*
 * Memory-bandwidth ceiling probe: the least work that moves the same bytes
 * as an optimizer update. "3r2w" reads three arrays and writes two (Momentum
 * and Adagrad: x, g, state); "4r3w" reads four and writes three (Adam);
 * "read" reads two or four and writes none (the first pass of LAMB and
 * LARS, which only reduces: on one core a pass that only reads streams
 * its arrays no faster than one that also writes some back, so its floor
 * is measured, not scaled from the others by bytes; bench/RESULTS.md).
 * Plain OpenMP loops with one static split (serial below 65536 elements,
 * where a parallel region costs more than it saves): no per-tensor work.
 * These are the only OpenMP regions left in src_c/, on purpose: the probe
 * is a ceiling for an idle machine, not a driver (it runs no user call), and
 * it must build alone, without pool.c (see below).
 * A multi-tensor workload is probed as ONE buffer of the same total size,
 * which is the ideal a multi-tensor optimizer can approach.
 *
 * The benchmarks (bench/conftest.py) compile this file on their own with
 * -O3 -fopenmp (and -march=native: the ceiling may use every ISA the machine
 * has); the package also builds it, with its portable flags, into the tool
 * extension fastopt._cli._probe (which declares these prototypes) so
 * `fastopt bench` can report the same ratio. It is not part of the library:
 * fastopt.h does not declare it.
 */
#include <stdint.h>

#define PROBE(T, SUF)                                                          \
void fo_probe_3r2w_##SUF(int64_t n, T *restrict x, const T *restrict g,        \
                         T *restrict v, int n_threads)                         \
{                                                                              \
    _Pragma("omp parallel for num_threads(n_threads) schedule(static) if(n_threads > 1 && n >= 65536)") \
    for (int64_t i = 0; i < n; i++) {                                          \
        T a = v[i] + g[i];                                                     \
        v[i] = a;                                                              \
        x[i] = x[i] - a;                                                       \
    }                                                                          \
}                                                                              \
void fo_probe_4r3w_##SUF(int64_t n, T *restrict x, const T *restrict g,        \
                         T *restrict v, T *restrict h, int n_threads)          \
{                                                                              \
    _Pragma("omp parallel for num_threads(n_threads) schedule(static) if(n_threads > 1 && n >= 65536)") \
    for (int64_t i = 0; i < n; i++) {                                          \
        T a = v[i] + g[i];                                                     \
        T b = h[i] + g[i];                                                     \
        v[i] = a;                                                              \
        h[i] = b;                                                              \
        x[i] = x[i] - a * b;                                                   \
    }                                                                          \
}

PROBE(float, f32)
PROBE(double, f64)

/* The read-only probe: the words of k (2 or 4) arrays of n words each,
 * read side by side and folded by exclusive-or (integer work the compiler
 * vectorizes; the result keeps the reads from being dropped). */
uint32_t fo_probe_read(int64_t n, const uint32_t *const *a, int k, int n_threads)
{
    const uint32_t *restrict a0 = a[0], *restrict a1 = a[1];
    const uint32_t *restrict a2 = k == 4 ? a[2] : a[0], *restrict a3 = k == 4 ? a[3] : a[1];
    uint32_t acc = 0;
    if (k == 4) {
        _Pragma("omp parallel for num_threads(n_threads) schedule(static) reduction(^:acc) if(n_threads > 1 && n >= 65536)")
        for (int64_t i = 0; i < n; i++)
            acc ^= a0[i] ^ a1[i] ^ a2[i] ^ a3[i];
    } else {
        _Pragma("omp parallel for num_threads(n_threads) schedule(static) reduction(^:acc) if(n_threads > 1 && n >= 65536)")
        for (int64_t i = 0; i < n; i++)
            acc ^= a0[i] ^ a1[i];
    }
    return acc;
}
