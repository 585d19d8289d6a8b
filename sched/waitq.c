/*
 * waitq.c — wait lists: the one place where a task parks on something.
 *
 * A waiter node lives in the waiting task's frame, inside the state of the
 * operation it awaits, and is linked into the list of the object waited on.
 * The node's `state` is the hand-off between the two sides: the waker sets
 * WOKEN under the list's lock after taking a reference to the task, and the
 * task, when polled again, reads WOKEN (acquire) without the lock and knows
 * the node is no longer linked.  Every link and unlink is counted in the
 * runtime's registrations() total, so a test can see that an ended task left
 * nothing behind.
 */
#include <linux/futex.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "executor.h"
#include "task.h"
#include "waitq.h"

void waitq_enter(rok_waiter *w, rok_cx *cx, void (*release)(rok_waiter *w),
                 void *queue)
{
	w->task = cx != NULL ? cx->task : NULL;
	w->release = release;
	w->queue = queue;
	atomic_store_explicit(&w->state, WAITQ_QUEUED, memory_order_relaxed);
	executor_regs_add(1);
}

void waitq_leave(rok_waiter *w)
{
	executor_regs_add(-1);
	atomic_store_explicit(&w->state, WAITQ_IDLE, memory_order_relaxed);
}

rok_task *waitq_wake(rok_waiter *w)
{
	executor_regs_add(-1);
	rok_task *t = w->task;
	if (t == NULL) {
		/* Release: the thread in waitq_block reads WOKEN with acquire
		 * and then everything the waker wrote before.  The wake after
		 * the store may reach a futex word whose thread already left;
		 * futex users tolerate such spurious wake-ups. */
		atomic_store_explicit(&w->state, WAITQ_WOKEN,
		                      memory_order_release);
		syscall(SYS_futex, &w->state, FUTEX_WAKE_PRIVATE, 1, NULL,
		        NULL, 0);
		return NULL;
	}
	rok_task_ref(t);
	/* Release: the task, polled again, reads WOKEN with acquire and may
	 * then finish and free the frame holding `w`: nothing touches `w`
	 * after this store. */
	atomic_store_explicit(&w->state, WAITQ_WOKEN, memory_order_release);
	return t;
}

static void waitq_append(rok_waiter **head, rok_waiter *w)
{
	if (*head == NULL) {
		w->next = w->prev = w;
		*head = w;
	} else {
		rok_waiter *tail = (*head)->prev;
		tail->next = w;
		w->prev = tail;
		w->next = *head;
		(*head)->prev = w;
	}
}

void waitq_link(rok_waiter **head, rok_waiter *w, rok_cx *cx,
                void (*release)(rok_waiter *w), void *queue)
{
	waitq_enter(w, cx, release, queue);
	waitq_append(head, w);
}

static void waitq_remove(rok_waiter **head, rok_waiter *w)
{
	if (w->next == w) {
		*head = NULL;
	} else {
		w->prev->next = w->next;
		w->next->prev = w->prev;
		if (*head == w)
			*head = w->next;
	}
	w->next = w->prev = NULL;
}

bool waitq_unlink(rok_waiter **head, rok_waiter *w)
{
	if (!waitq_queued(w))
		return false;
	waitq_remove(head, w);
	waitq_leave(w);
	return true;
}

rok_task *waitq_take(rok_waiter **head)
{
	rok_waiter *w = *head;

	if (w == NULL)
		return NULL;
	waitq_remove(head, w);
	return waitq_wake(w);
}

bool waitq_begin(rok_cx *cx, rok_waiter *w)
{
	if (cx->releasing) {
		/* Queued, or woken since the poll that just pended: the release
		 * function unlinks it or passes the wake-up on. */
		if (atomic_load_explicit(&w->state, memory_order_relaxed) !=
		    WAITQ_IDLE)
			w->release(w);
		atomic_store_explicit(&w->state, WAITQ_IDLE,
		                      memory_order_relaxed);
		return true;
	}
	/* Acquire: pairs with waitq_take's release store of WOKEN. */
	if (atomic_load_explicit(&w->state, memory_order_acquire) ==
	    WAITQ_QUEUED)
		return true;
	atomic_store_explicit(&w->state, WAITQ_IDLE, memory_order_relaxed);
	return false;
}

void waitq_block(rok_waiter *w)
{
	/* Acquire: pairs with the release store of WOKEN in waitq_take. */
	while (atomic_load_explicit(&w->state, memory_order_acquire) ==
	       WAITQ_QUEUED)
		syscall(SYS_futex, &w->state, FUTEX_WAIT_PRIVATE, WAITQ_QUEUED,
		        NULL, NULL, 0);
}
