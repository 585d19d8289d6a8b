/*
 * rok/blocking.h — running blocking code next to the runtime: the blocking
 * pool (rok_spawn_blocking) and 1:1 OS threads (rok_thread_spawn).
 *
 * A worker must never block: a blocking call (a disk read, a DNS lookup, a
 * lock held by a slow thread) stalls every task queued behind it.  Such code
 * runs on a thread of the blocking pool instead, and the task that needs its
 * result awaits the handle like any other task:
 *
 *	static void *load(void *path) { ... read(2) ...; return buf; }
 *
 *	ROK_BEGIN(cx);
 *	if (rok_spawn_blocking(&f->job, load, f->path) < 0)
 *		ROK_RETURN(cx, NULL);
 *	ROK_AWAIT(cx, rok_join(cx, &f->join, f->job, &f->buf));
 *	...
 *	ROK_CLEANUP(cx);
 *	rok_task_unref(f->job);
 *	ROK_END(cx);
 *
 * The handle is an ordinary task handle: rok_join, rok_task_wait,
 * rok_task_is_finished and rok_task_id work on it, and its value is what fn
 * returned.  fn is never interrupted: cancelling the task that awaits it
 * lets fn run to its end, its side effects happen and its value is simply
 * not looked at (SPEC A5, A11), even when fn ended between the cancel and
 * the awaiter's next poll: the awaiter leaves at its join.  A job has no cancellation point, so
 * cancelling its handle only makes rok_task_is_cancelled true: it still
 * ends with fn's value, like a task cancelled after its last await.
 *
 * Every function here may be called from any thread: a task, a blocking job,
 * or a thread outside the runtime.  fn runs with every signal blocked and
 * outside the executor (rok_workers() is 1 there); it may spawn tasks, wait
 * for them with rok_task_wait, or spawn more blocking jobs (jobs that wait
 * for jobs queued behind them, with the pool at its cap, wait forever).
 *
 * rok_stop waits for every job and thread started here to finish (called
 * from one of them, it returns -EDEADLK).  While it waits, fn must not call
 * what takes the executor's lock, which rok_stop holds: rok_start,
 * rok_block_on, rok_stats_get, rok_registrations.
 */
#ifndef ROK_ROK_BLOCKING_H
#define ROK_ROK_BLOCKING_H

#include <stdint.h>

#include "rok/rok.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Runs fn(arg) on a thread of the blocking pool, never on a worker.  fn
 * starts at the call, not when the handle is first awaited: jobs join a
 * FIFO queue and a thread is sent for each at once, an idle one or, with
 * none idle and the pool below its cap, a new one (in a burst, each thread
 * that comes sends for the next); at the cap a job waits for a thread to
 * finish.  With `out` non-NULL, *out receives a handle; with NULL the job
 * is detached (it runs all the same).  Starts the executor if it is not
 * running.  Returns 0, -EINVAL (fn NULL, or a bad ROK_BLOCKING_* variable),
 * -ENOMEM, -ESHUTDOWN while the runtime is stopping, or the error of
 * pthread_create when no pool thread exists to take the job (then fn never
 * runs, and jobs queued behind that thread meanwhile end without a value).
 */
int rok_spawn_blocking(rok_task **out, void *(*fn)(void *arg), void *arg);

/*
 * Runs fn(arg) on a new OS thread of its own (1:1, not from the pool); the
 * handle is awaited like a task's.  rok_stop waits for the thread to finish
 * and joins it.  Returns 0, -EINVAL, -ENOMEM, -ESHUTDOWN, or the error of
 * pthread_create.
 */
int rok_thread_spawn(rok_task **out, void *(*fn)(void *arg), void *arg);

/*
 * Sets the pool's cap on threads (default 512, or ROK_BLOCKING_MAX) and how
 * long an idle pool thread waits for a job before it exits, in nanoseconds
 * (default 10 s, or ROK_BLOCKING_IDLE_MS milliseconds).  0 (or a negative
 * time) keeps a value.  The values last for the process, across rok_stop
 * and rok_start.  A lower cap takes effect as running jobs finish; a new
 * idle time as threads next go idle.
 */
void rok_blocking_set_limits(unsigned max_threads, int64_t idle_ns);

/* Pool threads alive now, busy or idle (threads being created included). */
unsigned rok_blocking_threads(void);

/* Pool threads waiting for a job now. */
unsigned rok_blocking_idle(void);

#ifdef __cplusplus
}
#endif

#endif /* ROK_ROK_BLOCKING_H */
