/*
 * Whether other tasks leave no core free for a pool thread right now
 * (Linux): the number of runnable tasks (/proc/loadavg, 4th field), less
 * the calling thread and the pool threads that are awake, averaged over
 * samples at most FO_LOAD_SAMPLE_NS apart, against the cores left once the
 * caller has its own: busy when on average more than ncpu - 1.5 others run,
 * i.e. less than half a core is free. On such a machine a pool thread that
 * claims a chunk shares a core with another task, is likely to be preempted
 * before it finishes, and the caller then waits for it for a scheduler slice
 * or more; pool.c keeps such calls serial. (The first rule, "others fill
 * every core", let a 2-core machine with one busy process pool 1e6-element
 * calls: p99 4.3 ms against 1.2 ms serial.) Elsewhere (no /proc/loadavg)
 * the answer is always "no".
 */
#include <stdint.h>

#include "pool.h"

#ifdef _OPENMP
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* 100 ms. A sample is three system calls (~5 us here), but measured on the
 * project's VM (a paravirtualized guest) it costs the calls around it far
 * more: a loop alternating default and n_threads=1 Adam calls on 1e6
 * float32 with a NumPy step between, one busy process, every call serial:
 * sampled every 20 ms the default calls were 2-8 % slower at p50 (11-15 %
 * for those right after another call), every 100 ms or 2 s within 1 %
 * (bench/serial_gap.py; bench/RESULTS.md). The load that a pool
 * decision needs changes more slowly than that. */
#define FO_LOAD_SAMPLE_NS 100000000LL

static struct {
    _Atomic int64_t at;        /* time of the last sample (ns) */
    _Atomic int32_t milli;     /* average of others' runnable tasks, x1000 */
    _Atomic int32_t ncpu;
} L;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int others_runnable_x1000(int awake)
{
#ifdef __linux__
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0)
        return -1;
    buf[len] = '\0';
    double a1, a5, a15;
    int run = 0, tot = 0;
    if (sscanf(buf, "%lf %lf %lf %d/%d", &a1, &a5, &a15, &run, &tot) != 5)
        return -1;
    run -= 1 + awake;
    return (run > 0 ? run : 0) * 1000;
#else
    (void)awake;
    return -1;
#endif
}

int fo_machine_busy(int awake)
{
    int64_t t = mono_ns();
    int32_t ncpu = atomic_load_explicit(&L.ncpu, memory_order_relaxed);
    if (ncpu == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        ncpu = n > 0 ? (int32_t)n : 1;
        atomic_store_explicit(&L.ncpu, ncpu, memory_order_relaxed);
    }
    int64_t at = atomic_load_explicit(&L.at, memory_order_relaxed);
    int32_t m = atomic_load_explicit(&L.milli, memory_order_relaxed);
    if (t - at >= FO_LOAD_SAMPLE_NS
            && atomic_compare_exchange_strong(&L.at, &at, t)) {
        int x = others_runnable_x1000(awake);
        if (x >= 0) {
            m = at == 0 ? x : (m + x) / 2;
            atomic_store_explicit(&L.milli, m, memory_order_relaxed);
        }
    }
    return m > 1000 * ncpu - 1500;
}

#else

int fo_machine_busy(int awake)
{
    (void)awake;
    return 0;
}

#endif
