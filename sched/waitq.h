/*
 * waitq.h — wait lists of rok_waiter nodes.  See waitq.c.
 */
#ifndef ROK_WAITQ_H
#define ROK_WAITQ_H

#include <stdatomic.h>
#include <stdbool.h>

#include "rok/rok.h"

enum {
	WAITQ_IDLE   = 0,   /* not linked anywhere */
	WAITQ_QUEUED = 1,   /* linked, waiting */
	WAITQ_WOKEN  = 2,   /* taken off the list by a waker */
};

/*
 * A wait list is a circular doubly linked list named by its head pointer:
 * head->prev is the tail, so linking at the tail and taking from the head
 * keep FIFO order.  The owner of the list (a channel, a task's joiners)
 * guards it with its own lock; every function here runs under that lock.
 */

/* Links `w` for the task being polled in `cx` (NULL: for the calling
 * thread, see waitq_block).  `release` unlinks it again, taking the lock. */
void waitq_link(rok_waiter **head, rok_waiter *w, rok_cx *cx,
                void (*release)(rok_waiter *w), void *queue);

/* Unlinks `w` if it is still queued; true if it was. */
bool waitq_unlink(rok_waiter **head, rok_waiter *w);

/*
 * Takes the oldest waiter, marks it woken and returns its task with a new
 * reference for the caller to pass to task_wake_by_val() (after dropping
 * the lock), or NULL if the list is empty.  A waiter with no task (a thread
 * blocked in rok_task_wait) is woken here through its futex word instead.
 */
rok_task *waitq_take(rok_waiter **head);

/*
 * For lists of another shape (the timer wheel's, timer.c), linked and
 * unlinked by their owner under its lock: the rest of what waitq_link,
 * waitq_unlink and waitq_take do.  waitq_enter makes `w` queued, before
 * it is linked; waitq_leave makes it idle again once a release unlinked
 * it; waitq_wake, once a waker unlinked it, returns what waitq_take does.
 */
void waitq_enter(rok_waiter *w, rok_cx *cx, void (*release)(rok_waiter *w),
                 void *queue);
void waitq_leave(rok_waiter *w);
rok_task *waitq_wake(rok_waiter *w);

/* Relaxed: every change to or from QUEUED of a node still on its list
 * holds the list's lock (task_complete wakes joiners only after taking the
 * list away, and task_join_release then unlinks nothing). */
static inline bool waitq_queued(const rok_waiter *w)
{
	return atomic_load_explicit(&w->state, memory_order_relaxed) ==
	       WAITQ_QUEUED;
}

/*
 * The start of every awaitable operation.  Returns true when the operation
 * must return ROK_PENDING at once: the await is being abandoned (and `w` was
 * released), or `w` is still queued.  Otherwise `w` is idle (it was never
 * linked or a waker took it off) and the operation proceeds.
 */
bool waitq_begin(rok_cx *cx, rok_waiter *w);

/* Blocks the calling (non-runtime) thread until `w` is woken. */
void waitq_block(rok_waiter *w);

#endif /* ROK_WAITQ_H */
