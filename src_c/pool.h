/*
 * fastopt's parallel driver (pool.c), shared by every multi-tensor driver.
 * Internal to the C core: the public facts (thread statistics) are in
 * fastopt.h.
 *
 * A call is split by its driver into ntasks independent tasks (pieces of
 * elementwise work, or AGC work items of one phase). fo_pool_run runs them
 * all before it returns: the calling thread starts on them at once, and up
 * to nth - 1 pool threads claim tasks from a shared counter as they arrive.
 * A pool thread that the OS has not scheduled yet owns no task, so the
 * caller never waits for it; it waits only for tasks a thread has actually
 * claimed. Which thread runs a task never changes a result.
 */
#ifndef FASTOPT_POOL_H
#define FASTOPT_POOL_H

#include <stdint.h>

/* Run task i of a call (i in [0, ntasks)). */
typedef void (*fo_task_fn)(void *ctx, int64_t i);

/*
 * How many threads (1 = the serial path, no pool) a call moving `bytes`
 * bytes of parameters should use, given the caller's n_threads (the most it
 * may use): 1 below the serial threshold, with n_threads <= 1, in a serial
 * build, or while recent calls of this size class found the parallel path
 * no faster than serial (contention; see pool.c). Also records the decision
 * for fo_thread_stats.
 */
int fo_pool_threads(int64_t bytes, int n_threads);

/*
 * Run tasks [0, ntasks) of fn on up to nth threads, the caller included.
 * nth <= 1 (or a pool already in use by another calling thread) runs them
 * in order on the calling thread. `bytes` is the call's size (the size class
 * whose contention record the call updates). Never fails: if pool threads
 * cannot be started, the caller runs every task itself.
 */
void fo_pool_run(int nth, int64_t ntasks, fo_task_fn fn, void *ctx,
                 int64_t bytes);

/*
 * Nonzero while other runnable tasks leave less than half a core free
 * besides the caller's (Linux, /proc/loadavg, sampled at most every 100 ms;
 * machine_load.c). `awake` is how many of the caller's own pool threads are
 * running (not counted).
 */
int fo_machine_busy(int awake);

#endif /* FASTOPT_POOL_H */
