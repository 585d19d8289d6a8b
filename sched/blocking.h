/*
 * blocking.h — the blocking pool's hooks for the executor, and its fault
 * injection seam.  See blocking.c.
 */
#ifndef ROK_BLOCKING_H
#define ROK_BLOCKING_H

#include <pthread.h>
#include <stdbool.h>

/*
 * Called by rok_stop (executor lock held) while the workers still run, since
 * a finishing job wakes the tasks that join it: refuses new jobs and threads
 * with -ESHUTDOWN, waits until every queued and running job and every
 * rok_thread_spawn thread has finished, joins all those threads and frees
 * the pool's memory.  The pool stays closed until blocking_reopen().
 */
void blocking_shutdown(void);

/*
 * Called by rok_stop once the executor is STOPPING, which refuses new jobs
 * from then on: lets the next run use the pool again (its threads are
 * created as jobs come).
 */
void blocking_reopen(void);

/* True on a thread of the pool or of rok_thread_spawn, where rok_stop would
 * wait for itself. */
bool blocking_on_thread(void);

/*
 * Creates the pool's and rok_thread_spawn's OS threads: pthread_create with
 * default attributes unless a test replaces it to make creation fail.
 * Returns 0 or an errno value.  Set it only while no job is being spawned.
 */
extern int (*blocking_thread_create)(pthread_t *thread,
                                     void *(*start)(void *arg), void *arg);

#endif /* ROK_BLOCKING_H */
