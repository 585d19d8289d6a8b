/*
 * mutex.c — the async mutex (rok/mutex.h).
 *
 * State: `locked` and a FIFO wait list, under a spinlock (the mutex's
 * `guard` word, used as a struct spin).  Unlock never clears `locked` while
 * someone waits: it takes the oldest waiter off the list (waitq_take marks
 * its node WOKEN) and that waiter owns the lock from then on, before it is
 * even polled.  So WOKEN on a lock op's node means exactly "the lock was
 * handed to you"; nothing else wakes such a node (a cancel wakes the task,
 * not the node).
 *
 * The woken owner then does one of two things:
 *   - its poll calls rok_mutex_lock, which sees WOKEN and returns ready:
 *     it has the lock (even if it was cancelled meanwhile: A11's value-kept
 *     rule; its cleanup unlocks);
 *   - its await is abandoned, and rok_mutex_lock is called with
 *     cx->releasing: mutex_release finds the node no longer queued, so the
 *     lock is its own, and passes it on like an unlock.
 * Either way exactly one party holds the lock.
 *
 * Lock order: the guard is never held while waking a task or taking
 * another lock; wakes happen after unlocking it.  Any thread.
 */
#include <errno.h>
#include <stddef.h>

#include "rok/mutex.h"
#include "spin.h"
#include "task.h"
#include "waitq.h"

_Static_assert(sizeof(struct spin) == sizeof(uint32_t),
               "rok_mutex.guard must hold a struct spin");

static struct spin *mutex_guard(rok_mutex *m)
{
	return (struct spin *)(void *)&m->guard;
}

void rok_mutex_init(rok_mutex *m)
{
	atomic_init(&m->guard, 0);
	m->locked = false;
	m->waiters = NULL;
}

/* Guard held.  Passes the lock to the oldest waiter or unlocks; returns
 * the task to wake (after dropping the guard), or NULL.  Every waiter here
 * belongs to a task (nothing links a thread's node), so NULL from
 * waitq_take means the list was empty. */
static rok_task *mutex_pass_locked(rok_mutex *m)
{
	rok_task *next = waitq_take(&m->waiters);

	if (next == NULL)
		m->locked = false;
	return next;
}

static void mutex_wake(rok_task *t)
{
	if (t != NULL)
		task_wake_by_val(t);
}

/* A lock op is abandoned.  Still queued: unlink it.  Already woken: the
 * lock was handed to it, so hand it on. */
static void mutex_release(rok_waiter *w)
{
	rok_mutex *m = w->queue;
	rok_task *next = NULL;

	spin_lock(mutex_guard(m));
	if (!waitq_unlink(&m->waiters, w))
		next = mutex_pass_locked(m);
	spin_unlock(mutex_guard(m));
	mutex_wake(next);
}

rok_poll rok_mutex_lock(rok_cx *cx, rok_mutex_op *op, rok_mutex *m)
{
	if (cx->releasing) {
		(void)waitq_begin(cx, &op->w);   /* calls mutex_release */
		op->queued = false;
		return ROK_PENDING;
	}
	if (waitq_begin(cx, &op->w))
		return ROK_PENDING;              /* still parked */
	if (op->queued) {
		op->queued = false;              /* woken: handed the lock */
		return ROK_READY;
	}
	spin_lock(mutex_guard(m));
	if (!m->locked) {
		m->locked = true;
		spin_unlock(mutex_guard(m));
		return ROK_READY;
	}
	waitq_link(&m->waiters, &op->w, cx, mutex_release, m);
	op->queued = true;
	spin_unlock(mutex_guard(m));
	return ROK_PENDING;
}

int rok_mutex_try_lock(rok_mutex *m)
{
	int err = -EBUSY;

	spin_lock(mutex_guard(m));
	if (!m->locked) {
		m->locked = true;
		err = 0;
	}
	spin_unlock(mutex_guard(m));
	return err;
}

int rok_mutex_unlock(rok_mutex *m)
{
	rok_task *next = NULL;
	int err = 0;

	spin_lock(mutex_guard(m));
	if (m->locked)
		next = mutex_pass_locked(m);
	else
		err = -EPERM;
	spin_unlock(mutex_guard(m));
	mutex_wake(next);
	return err;
}

bool rok_mutex_is_locked(rok_mutex *m)
{
	spin_lock(mutex_guard(m));
	bool locked = m->locked;
	spin_unlock(mutex_guard(m));
	return locked;
}
