/*
 * fastopt's parallel driver: a small pthread pool shared by every
 * multi-tensor driver (fastopt.c, agc.c). See pool.h for the interface and
 * docs/threads.md for the policy and the measurements behind it.
 *
 * Why not `#pragma omp parallel`: an OpenMP region splits work between a
 * team fixed at its start and ends in a barrier that waits for EVERY team
 * thread. On a machine where another process holds a core, one team thread
 * is often descheduled; the barrier then waits for it for one scheduler
 * slice (4-12 ms measured here, against 0.2 ms for the whole update), and
 * threads spinning at the barrier take the core the other process needs.
 * Here instead:
 *   - the calling thread starts on the tasks at once; pool threads claim
 *     tasks one at a time from one atomic word as they arrive, so a thread
 *     that is not running owns no task and the caller does its share;
 *   - the caller then waits only for tasks that were claimed (they are
 *     running), never for a thread that has not started;
 *   - idle pool threads spin briefly (FO_SPIN_NS, or OMP_WAIT_POLICY) and
 *     then sleep on a futex (a condition variable off Linux);
 *   - every call measures whether the pool helped (the caller's own CPU
 *     time per task, times the task count, against the wall time); a size
 *     class where it did not goes serial for a while (doubling, up to
 *     FO_BACKOFF_MAX_NS), then tries again;
 *   - while other tasks leave no core free for a pool thread (runnable
 *     tasks in /proc/loadavg), calls below FO_BUSY_POOL_BYTES stay serial: a
 *     pool thread that claims a chunk there is often preempted before
 *     finishing it, and the caller would wait for it (bench/RESULTS.md).
 *
 * Global state (the pool and counters: threads outlive a call), reached
 * through fo_pool_threads / fo_pool_run / fo_get_thread_stats. One calling
 * thread uses the pool at a time; another that finds it busy runs serially
 * (it has a core of its own anyway). After fork() the child starts with no
 * pool threads and re-creates them on demand; at exit the threads are
 * stopped and joined.
 *
 * Serial builds (no OpenMP: the build's thread test) run serially only.
 */
#include <stdint.h>
#include <stdlib.h>

#include "fastopt.h"
#include "pool.h"

/* Calls under FO_SERIAL_BYTES run on the calling thread (docs/threads.md). */
#ifndef FO_SERIAL_BYTES
#define FO_SERIAL_BYTES ((int64_t)256 * 1024)
#endif
int64_t fo_serial_bytes(void) { return FO_SERIAL_BYTES; }

#ifdef _OPENMP
#define FO_THREADED 1
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#define FO_FUTEX 1
#endif
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FO_PAUSE() _mm_pause()
#else
#define FO_PAUSE() ((void)0)
#endif
#endif

/* ---- tuning (see docs/threads.md for the measurements) ------------------ */

#define FO_POOL_MAX 64                 /* threads in one call, caller included */
#ifndef FO_SPIN_NS
#define FO_SPIN_NS 50000               /* idle pool thread spins, then sleeps */
#endif
#define FO_WAIT_SPIN_NS 200000         /* caller spins for claimed tasks */
#define FO_GAIN_MIN 1.15               /* below this speed-up a call "lost" */
#define FO_GAIN_MIN_BIG 1.0            /* ... a call of FO_BUSY_POOL_BYTES+ */
#define FO_GAIN_COLD 0.9               /* ... a call that woke its workers */
#define FO_BACKOFF_MIN_NS 2000000LL    /* first serial period after a loss */
#define FO_BACKOFF_MAX_NS 1000000000LL /* longest one (1 s) */
#define FO_CLASSES 64                  /* size classes: floor(log2(bytes)) */
/* Calls this big use the pool even on a busy machine (fo_machine_busy; the
 * measured gain still decides): a stall of a slice is a few % of such a
 * call, and a second thread that gets part of a core still shortens it
 * (measured at load 10-15: p50 0.65-0.91 x serial for 1x5e7 and ResNet-50,
 * p99 0.71-1.25 x). */
#define FO_BUSY_POOL_BYTES ((int64_t)16 * 1024 * 1024)
/* Never more threads than 64 KiB pieces of work. */
#define FO_MIN_THREAD_BYTES ((int64_t)64 * 1024)

/* ---- statistics (every build) -------------------------------------------- */

#ifdef FO_THREADED
#define FO_ATOMIC _Atomic
#define ST_ADD(f, v) atomic_fetch_add_explicit(&S.f, (v), memory_order_relaxed)
#define ST_SET(f, v) atomic_store_explicit(&S.f, (v), memory_order_relaxed)
#define ST_GET(f) atomic_load_explicit(&S.f, memory_order_relaxed)
#else
#define FO_ATOMIC
#define ST_ADD(f, v) (S.f += (v))
#define ST_SET(f, v) (S.f = (v))
#define ST_GET(f) (S.f)
#endif

static struct {
    FO_ATOMIC int64_t serial_calls, parallel_calls, backoffs, last_bytes;
    FO_ATOMIC int32_t last_threads, last_joined;
} S;

void fo_get_thread_stats(fo_thread_stats *out)
{
    out->serial_calls = ST_GET(serial_calls);
    out->parallel_calls = ST_GET(parallel_calls);
    out->backoffs = ST_GET(backoffs);
    out->last_bytes = ST_GET(last_bytes);
    out->last_threads = ST_GET(last_threads);
    out->last_joined = ST_GET(last_joined);
}

static void run_serial(int64_t ntasks, fo_task_fn fn, void *ctx)
{
    for (int64_t i = 0; i < ntasks; i++)
        fn(ctx, i);
}

#ifndef FO_THREADED

int fo_pool_threads(int64_t bytes, int n_threads)
{
    (void)n_threads;
    ST_ADD(serial_calls, 1);
    ST_SET(last_bytes, bytes);
    ST_SET(last_threads, 1);
    ST_SET(last_joined, 1);
    return 1;
}

void fo_pool_run(int nth, int64_t ntasks, fo_task_fn fn, void *ctx,
                 int64_t bytes)
{
    (void)nth;
    (void)bytes;
    run_serial(ntasks, fn, ctx);
}

int fo_pool_size(void) { return 0; }
int64_t fo_pool_spin_ns(void) { return 0; }

#else /* FO_THREADED */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CPU time of the calling thread: unlike the wall clock it does not run on
 * while the thread is descheduled, so the serial-time estimate of a call
 * (record) is not inflated by a preemption. */
static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * One step of a spin: a pause for the first FO_SPIN_PAUSES steps (a wait
 * that ends within a microsecond or two), then sched_yield(): a spinning
 * thread then gives its core to any other runnable thread, e.g. the calling
 * thread when the scheduler put a woken pool thread on the caller's core, or
 * the other program of a busy machine.
 */
#define FO_SPIN_PAUSES 64
static inline void polite_pause(unsigned k)
{
    if (k < FO_SPIN_PAUSES)
        FO_PAUSE();
    else
        sched_yield();
}

/* ---- wait / wake on a 32-bit word ----------------------------------------- */

#ifdef FO_FUTEX
static void word_wait(_Atomic uint32_t *w, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void word_wake(_Atomic uint32_t *w, int n)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
#else
static pthread_mutex_t wait_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wait_cv = PTHREAD_COND_INITIALIZER;

static void word_wait(_Atomic uint32_t *w, uint32_t val)
{
    pthread_mutex_lock(&wait_mu);
    while (atomic_load(w) == val)
        pthread_cond_wait(&wait_cv, &wait_mu);
    pthread_mutex_unlock(&wait_mu);
}

static void word_wake(_Atomic uint32_t *w, int n)
{
    (void)w;
    (void)n;
    pthread_mutex_lock(&wait_mu);
    pthread_cond_broadcast(&wait_cv);
    pthread_mutex_unlock(&wait_mu);
}
#endif

/* ---- the pool --------------------------------------------------------------- */

/*
 * The job word: generation (24 bits) | chunk count (20) | next chunk (20).
 * A thread claims chunk i of generation g by one compare-and-swap of the
 * whole word, so it can never claim a chunk of a job that has ended (the
 * job ends only once every chunk is claimed and done) nor of a job it has
 * not seen published. A job of more than FO_MAX_CHUNKS tasks hands them
 * out in runs of `per` tasks.
 */
#define FO_MAX_CHUNKS ((int64_t)(1 << 20) - 1)
#define W_GEN(w) ((uint32_t)((w) >> 40))
#define W_N(w) ((int64_t)(((w) >> 20) & 0xFFFFF))
#define W_IDX(w) ((int64_t)((w) & 0xFFFFF))
#define W_MAKE(g, n) (((uint64_t)(g) << 40) | ((uint64_t)(n) << 20))

typedef struct {
    _Atomic uint32_t seq;       /* latest generation handed to this thread */
    _Atomic uint32_t sleeping;  /* 1 while in (or entering) word_wait */
    pthread_t tid;
} fo_worker;

static struct {
    _Atomic uint64_t word;
    _Atomic uint32_t done;           /* chunks finished in this job */
    _Atomic uint32_t caller_waiting;
    _Atomic int busy;                /* a calling thread owns the pool */
    _Atomic int quit;
    _Atomic int64_t spin_ns;
    /* the job: written by the owner before the word is published */
    fo_task_fn fn;
    void *ctx;
    int64_t ntasks, per;
    /* owner-only */
    uint32_t gen;
    int nworkers;
    fo_worker w[FO_POOL_MAX - 1];
} P;

/* Contention record per size class: serial until `until` (ns). */
static struct {
    _Atomic int64_t until, backoff;
} C[FO_CLASSES];

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

int fo_pool_size(void) { return P.nworkers; }
int64_t fo_pool_spin_ns(void)
{
    return atomic_load_explicit(&P.spin_ns, memory_order_relaxed);
}

static void run_chunk(int64_t c)
{
    int64_t i0 = c * P.per, i1 = i0 + P.per;
    if (i1 > P.ntasks)
        i1 = P.ntasks;
    for (int64_t i = i0; i < i1; i++)
        P.fn(P.ctx, i);
}

/* Claim and run chunks of generation g until none is left; returns how many
 * this thread ran. */
static int64_t take_chunks(uint32_t g)
{
    int64_t mine = 0;
    uint64_t w = atomic_load_explicit(&P.word, memory_order_acquire);
    for (;;) {
        if (W_GEN(w) != g || W_IDX(w) >= W_N(w))
            return mine;
        if (!atomic_compare_exchange_weak_explicit(&P.word, &w, w + 1,
                memory_order_acq_rel, memory_order_acquire))
            continue;                     /* w now holds the current word */
        run_chunk(W_IDX(w));
        mine++;
        uint32_t d = atomic_fetch_add(&P.done, 1) + 1;
        if ((int64_t)d == W_N(w) && atomic_load(&P.caller_waiting))
            word_wake(&P.done, 1);
        w = atomic_load_explicit(&P.word, memory_order_acquire);
    }
}

/* Wait until this thread is handed a generation other than `last`: spin for
 * the configured time, then sleep. */
static uint32_t await_job(fo_worker *me, uint32_t last)
{
    int64_t spin = atomic_load_explicit(&P.spin_ns, memory_order_relaxed);
    if (spin > 0) {
        int64_t t_end = now_ns() + spin;
        for (unsigned k = 1;; k++) {
            uint32_t s = atomic_load_explicit(&me->seq, memory_order_acquire);
            if (s != last)
                return s;
            polite_pause(k);
            if ((k & 15) == 0 && now_ns() > t_end)
                break;
        }
    }
    for (;;) {
        atomic_store(&me->sleeping, 1);
        uint32_t s = atomic_load(&me->seq);
        if (s == last)
            word_wait(&me->seq, last);
        atomic_store(&me->sleeping, 0);
        s = atomic_load_explicit(&me->seq, memory_order_acquire);
        if (s != last)
            return s;
    }
}

static void *worker_main(void *arg)
{
    fo_worker *me = (fo_worker *)arg;
    uint32_t last = atomic_load(&me->seq);
    for (;;) {
        last = await_job(me, last);
        if (atomic_load(&P.quit))
            return NULL;
        take_chunks(last & 0xFFFFFF);
    }
}

/* Stop and join the pool threads; the caller owns the pool. */
static void stop_workers(void)
{
    atomic_store(&P.quit, 1);
    for (int i = 0; i < P.nworkers; i++) {
        atomic_fetch_add(&P.w[i].seq, 1);
        word_wake(&P.w[i].seq, 1);
    }
    for (int i = 0; i < P.nworkers; i++)
        pthread_join(P.w[i].tid, NULL);
#ifndef FO_FUTEX
    pthread_mutex_init(&wait_mu, NULL);  /* a pool thread may have held it */
    pthread_cond_init(&wait_cv, NULL);
#endif
    P.nworkers = 0;
    atomic_store(&P.quit, 0);
}

static void at_exit(void)
{
    /* A thread may still be inside a call (a daemon Python thread): give it
     * a moment, else leave the threads to the process exit. */
    int64_t t_end = now_ns() + 100000000LL;
    int expect = 0;
    while (!atomic_compare_exchange_weak(&P.busy, &expect, 1)) {
        expect = 0;
        if (now_ns() > t_end)
            return;
        sched_yield();
    }
    stop_workers();
    atomic_store(&P.busy, 0);
}

/* In the child of fork(): only the forking thread exists. The contention
 * records start afresh (a new process, measured anew). */
static void after_fork_child(void)
{
    for (int c = 0; c < FO_CLASSES; c++) {
        atomic_store(&C[c].until, 0);
        atomic_store(&C[c].backoff, 0);
    }
    P.nworkers = 0;
    atomic_store(&P.quit, 0);
    atomic_store(&P.busy, 0);
    atomic_store(&P.word, 0);
}

static int env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v != NULL && strcasecmp(v, value) == 0;
}

/* Read once: OMP_WAIT_POLICY (passive: no spin; active: 2 ms) and
 * OMP_DYNAMIC (explicitly false: no adaptation, every call above the serial
 * threshold uses its n_threads). */
static int adapt = 1;
static pthread_once_t policy_once = PTHREAD_ONCE_INIT;

static void policy_init(void)
{
    int64_t spin = FO_SPIN_NS;
    if (env_is("OMP_WAIT_POLICY", "passive"))
        spin = 0;
    else if (env_is("OMP_WAIT_POLICY", "active"))
        spin = 2000000;
    atomic_store(&P.spin_ns, spin);
    adapt = !env_is("OMP_DYNAMIC", "false");
}

static void pool_init(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
    atexit(at_exit);
}

/* Make sure `want` pool threads exist (the caller owns the pool); returns how
 * many do. Pool threads block every signal (Python handles them in the main
 * thread). */
static int ensure_workers(int want)
{
    if (want > FO_POOL_MAX - 1)
        want = FO_POOL_MAX - 1;
    if (P.nworkers >= want)
        return P.nworkers;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    while (P.nworkers < want) {
        fo_worker *w = &P.w[P.nworkers];
        atomic_store(&w->seq, P.gen);
        atomic_store(&w->sleeping, 0);
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0)
            break;
        P.nworkers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return P.nworkers;
}

static int size_class(int64_t bytes)
{
    int c = 0;
    while (bytes > 1 && c < FO_CLASSES - 1) {
        bytes >>= 1;
        c++;
    }
    return c;
}

/* Other runnable tasks leave no core free for a worker (machine_load.c). */
static int machine_busy(void)
{
    int awake = 0;
    for (int i = 0; i < P.nworkers; i++)
        awake += !atomic_load_explicit(&P.w[i].sleeping, memory_order_relaxed);
    return fo_machine_busy(awake);
}

int fo_pool_threads(int64_t bytes, int n_threads)
{
    int nth = n_threads;
    if (bytes < fo_serial_bytes())
        nth = 1;
    if (nth > 1 && nth > bytes / FO_MIN_THREAD_BYTES)
        nth = (int)(bytes / FO_MIN_THREAD_BYTES);
    if (nth > FO_POOL_MAX)
        nth = FO_POOL_MAX;
    pthread_once(&policy_once, policy_init);
    if (nth > 1 && adapt) {
        int64_t until = atomic_load_explicit(&C[size_class(bytes)].until,
                                             memory_order_relaxed);
        if ((until != 0 && now_ns() < until)
                || (bytes < FO_BUSY_POOL_BYTES && machine_busy()))
            nth = 1;
    }
    if (nth < 1)
        nth = 1;
    ST_ADD(serial_calls, nth == 1);
    ST_ADD(parallel_calls, nth > 1);
    ST_SET(last_bytes, bytes);
    ST_SET(last_threads, nth);
    ST_SET(last_joined, 1);
    return nth;
}

/* After a pooled call: did the pool pay? own_ns / own is the caller's CPU
 * time per chunk, so own_ns * n / own estimates the serial time of the call
 * (an over-estimate when threads share memory bandwidth: lenient). A call
 * whose wall time is not FO_GAIN_MIN times shorter sends its size class to
 * the serial path for a while. */
static void record(int64_t bytes, int64_t n, int64_t own, int64_t own_ns,
                   int64_t wall_ns, int cold)
{
    if (bytes < 0 || own <= 0 || wall_ns <= 0)
        return;    /* not to be recorded, or the caller ran nothing */
    double gain = (double)own_ns * (double)n / (double)own / (double)wall_ns;
    int c = size_class(bytes);
    int64_t b = atomic_load_explicit(&C[c].backoff, memory_order_relaxed);
    /* A call that had to wake (or create) its workers is not a fair trial:
     * a worker that arrives late claims few chunks and the call is about
     * serial (gain ~1), which says nothing of the next call, whose workers
     * are then awake. Such a call counts as a loss only when it was clearly
     * slower than serial (a worker claimed a chunk and was preempted), so
     * that a loop whose calls come after a pause (a training step after the
     * forward and backward passes) does not talk itself into the serial
     * path; measured: the first pooled call of a process (gain 1.00) sent
     * the second pass of a ResNet-50 step serial, 19 ms against 13. */
    if (cold && gain < FO_GAIN_MIN && gain >= FO_GAIN_COLD)
        return;
    /* A big call (16 MiB+) loses only when it was slower than serial: a
     * stall costs a few % of it, and a second thread that gets part of a
     * core still shortens it (1x5e7 under a matmul load: default / torch
     * fused 0.69-0.91 x over six runs, against 0.82-1.09 x with 1.15). */
    if (gain >= (bytes >= FO_BUSY_POOL_BYTES ? FO_GAIN_MIN_BIG : FO_GAIN_MIN)) {
        /* a win halves the next serial period: after a run of losses it
         * takes a few wins to trust the threads again */
        atomic_store_explicit(&C[c].backoff, b / 2 >= FO_BACKOFF_MIN_NS ? b / 2 : 0,
                              memory_order_relaxed);
        atomic_store_explicit(&C[c].until, 0, memory_order_relaxed);
        return;
    }
    b = b == 0 ? FO_BACKOFF_MIN_NS : 2 * b;
    if (b > FO_BACKOFF_MAX_NS)
        b = FO_BACKOFF_MAX_NS;
    atomic_store_explicit(&C[c].backoff, b, memory_order_relaxed);
    atomic_store_explicit(&C[c].until, now_ns() + b, memory_order_relaxed);
    ST_ADD(backoffs, 1);
}

/* The caller's side of a pooled job: publish, work, wait for claimed chunks. */
static void pooled(int nth, int64_t ntasks, fo_task_fn fn, void *ctx,
                   int64_t bytes, int fresh)
{
    int64_t per = (ntasks + FO_MAX_CHUNKS - 1) / FO_MAX_CHUNKS;
    int64_t n = (ntasks + per - 1) / per;
    P.fn = fn;
    P.ctx = ctx;
    P.ntasks = ntasks;
    P.per = per;
    P.gen = (P.gen + 1) & 0xFFFFFF;
    uint32_t g = P.gen;
    atomic_store(&P.done, 0);
    atomic_store(&P.caller_waiting, 0);
    int64_t t0 = now_ns(), cpu0 = cpu_ns();
    atomic_store_explicit(&P.word, W_MAKE(g, n), memory_order_release);
    int cold = fresh;
    for (int i = 0; i < nth - 1; i++) {
        atomic_store(&P.w[i].seq, g);
        if (atomic_load(&P.w[i].sleeping)) {
            word_wake(&P.w[i].seq, 1);
            cold = 1;
        }
    }
    int64_t own = take_chunks(g);
    int64_t own_ns = cpu_ns() - cpu0;
    /* Every chunk is claimed; wait for those other threads are running. */
    int64_t t_end = now_ns() + FO_WAIT_SPIN_NS;
    unsigned k = 0;
    uint32_t d;
    while ((int64_t)(d = atomic_load(&P.done)) < n) {
        polite_pause(++k);
        if ((k & 15) == 0 && now_ns() > t_end) {
            atomic_store(&P.caller_waiting, 1);
            while ((int64_t)(d = atomic_load(&P.done)) < n)
                word_wait(&P.done, d);
            break;
        }
    }
    int64_t wall = now_ns() - t0;
    ST_SET(last_joined, (int32_t)(own < n ? 2 : 1));
    record(bytes, n, own, own_ns, wall, cold);
}

void fo_pool_run(int nth, int64_t ntasks, fo_task_fn fn, void *ctx,
                 int64_t bytes)
{
    int expect = 0;
    if (nth <= 1 || ntasks <= 1
            || !atomic_compare_exchange_strong(&P.busy, &expect, 1)) {
        run_serial(ntasks, fn, ctx);
        return;
    }
    pthread_once(&pool_once, pool_init);
    int before = P.nworkers;
    int have = ensure_workers(nth - 1);
    if (nth > have + 1)
        nth = have + 1;
    if (nth <= 1)
        run_serial(ntasks, fn, ctx);
    else      /* fresh: a worker was just created for this call */
        pooled(nth, ntasks, fn, ctx, bytes, have > before);
    atomic_store(&P.busy, 0);
}

#endif /* FO_THREADED */
