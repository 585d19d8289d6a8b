/*
 * rok/par.h — data parallelism on the runtime's workers: a parallel loop
 * and a fork-join scope (SPEC A9 "par for_each / scope").
 *
 * These are blocking calls, not awaitable operations: they return when every
 * item has run.  The work is spread over the executor's own workers (helper
 * tasks, no threads of their own) and the calling thread helps: it runs
 * items itself while others are in flight, and the items that nobody else
 * picked up.  So a call from inside a task, even on the only worker
 * (ROK_WORKERS=1) and even nested inside an item, cannot deadlock: at worst
 * the caller runs everything.  Called from a task it holds that task's
 * worker for the duration, like any blocking call (it is not a
 * cancellation point).
 *
 * Items are plain functions: they must not await.  They may themselves call
 * rok_par_for_each / rok_par_scope.  Any thread.
 */
#ifndef ROK_PAR_H
#define ROK_PAR_H

#include "rok.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Runs fn(i, arg) once for every i in [0, n), in parallel and in no
 * particular order, and returns when all have returned.  The calling thread
 * runs at least the first batch of indices itself.  Returns 0, -EINVAL for a
 * NULL fn, or -ENOMEM (then fn never ran).
 */
int rok_par_for_each(size_t n, void (*fn)(size_t i, void *arg), void *arg);

typedef struct rok_scope rok_scope;

/*
 * Runs body(s, arg) on the calling thread; body (and every job) may add jobs
 * with rok_scope_spawn.  Returns once body and every job spawned into the
 * scope have returned; while waiting, the caller runs queued jobs itself.
 * Returns 0, -EINVAL for a NULL body, or -ENOMEM (then body never ran).
 * `s` is valid until rok_par_scope returns.
 */
int rok_par_scope(void (*body)(rok_scope *s, void *arg), void *arg);

/*
 * Queues fn(s, arg) to run in the scope, on any worker or on the thread
 * waiting for the scope.  Callable from body and from jobs of the same
 * scope, from any thread.  Never fails: when memory is short the job runs
 * at once on the calling thread.
 */
void rok_scope_spawn(rok_scope *s, void (*fn)(rok_scope *s, void *arg),
                     void *arg);

#ifdef __cplusplus
}
#endif

#endif /* ROK_PAR_H */
