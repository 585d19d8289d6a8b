/*
 * rok/mutex.h — an async mutex for tasks (SPEC A9, A11).
 *
 * A task that finds the mutex locked parks (its worker runs other tasks)
 * instead of blocking its thread, so a critical section may contain awaits.
 * Waiters get the lock in FIFO order: unlock hands it straight to the oldest
 * waiter, and a task arriving meanwhile cannot barge in.
 *
 * Cancellation: waiting for the lock is a cancellation point and a cancel
 * wakes the waiter, which leaves without the lock.  A lock handed to a
 * waiter is never lost nor leaked (A11): if the waiter's next poll completes
 * the lock operation it keeps the lock even when cancelled, leaves at its
 * next await, and its cleanup section must unlock; if its wait is released
 * instead (see rok.h: cx->releasing) after the lock was handed to it, the
 * release hands the lock on to the next waiter, or unlocks.
 *
 * The mutex is caller storage: ROK_MUTEX_INIT or rok_mutex_init(); it needs
 * no teardown once unlocked with no waiters.  Any thread may try_lock and
 * unlock; only tasks await rok_mutex_lock.  The lock is not owned by a task:
 * any holder of the lock (a task or another thread) may unlock it.
 */
#ifndef ROK_MUTEX_H
#define ROK_MUTEX_H

#include "rok.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rok_mutex {
	_Atomic uint32_t guard;     /* private: spinlock over the fields below */
	bool locked;                /* private */
	rok_waiter *waiters;        /* private: FIFO of parked lock ops */
} rok_mutex;

#define ROK_MUTEX_INIT { 0, false, NULL }

void rok_mutex_init(rok_mutex *m);

/* A lock operation's state, in the frame.  Start it zeroed. */
typedef struct rok_mutex_op {
	rok_waiter w;
	bool queued;                /* private: parked, may be handed the lock */
} rok_mutex_op;

/* Await it: ready once the caller holds the lock.  Use
 * ROK_AWAIT(cx, rok_mutex_lock(cx, &f->op, &m)). */
rok_poll rok_mutex_lock(rok_cx *cx, rok_mutex_op *op, rok_mutex *m);

/* 0 with the lock taken, or -EBUSY. */
int rok_mutex_try_lock(rok_mutex *m);

/* Releases the lock, handing it to the oldest waiter if there is one.
 * 0, or -EPERM if the mutex was not locked. */
int rok_mutex_unlock(rok_mutex *m);

/* True while locked (a snapshot, for diagnostics and tests). */
bool rok_mutex_is_locked(rok_mutex *m);

#ifdef __cplusplus
}
#endif

#endif /* ROK_MUTEX_H */
