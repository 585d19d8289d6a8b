/*
 * task.c — the life of a task: spawn, poll, wake, cancel, join, free.
 *
 * The state word (task.h) moves through
 *
 *	SCHEDULED -> RUNNING -> idle (waiting)      -> SCHEDULED ...
 *	                     -> RUNNING|NOTIFIED    -> SCHEDULED (woken mid-poll)
 *	                     -> COMPLETE            (a reference is left)
 *	                     -> freed               (none is: task_complete)
 *
 * A wake sets SCHEDULED on an idle task and queues it, sets NOTIFIED on a
 * running one (its worker re-queues it when the poll returns) and does
 * nothing otherwise, so a task is in at most one queue at a time.  Each
 * transition is one CAS or fetch on the word (COMPLETE: two, with the
 * join lock).
 *
 * Orderings: a task changes hands through queues whose push is a release
 * and whose pop is an acquire, and through the state word, whose updates at
 * the end of a poll and in wakes are acq_rel; so the thread that polls a
 * task next sees everything the previous poll and the waker wrote.  The
 * COMPLETE store is a release that publishes the value to joiners, who read
 * the state with acquire.
 *
 * Joiners park on the task's own wait list, guarded by the TASK_JOIN_LOCK
 * bit of the state word (joins are rare next to wakes, so a bit beats a
 * lock word in every frame).  The list is in the body, which the finishing
 * thread frees: in one hold of the lock it takes the whole list, stores the
 * value in place of the body pointer and sets COMPLETE, so a joiner that
 * locks later sees COMPLETE and never looks for the body; then it wakes the
 * list's joiners without the lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "spin.h"
#include "task.h"
#include "waitq.h"
#include "worker.h"

static void task_free(rok_task *t)
{
	atomic_store_explicit(&t->state, 0, memory_order_relaxed);
	frame_free(&executor_tls.cache, t, FRAME_RECORD_CLASS);
}

/* A record and a body of `size` frame bytes, linked; NULL when out of
 * memory.  The state is the caller's to set. */
static rok_task *task_alloc(struct frame_cache *c, size_t size)
{
	uint8_t rcls, bcls;
	rok_task *t = frame_alloc(c, sizeof(*t), &rcls);

	if (t == NULL)
		return NULL;
	struct task_body *b = frame_alloc(c, sizeof(*b) + size, &bcls);
	if (b == NULL) {
		frame_free(c, t, rcls);
		return NULL;
	}
	t->u.body = b;
	t->id = executor_next_id();
	b->next = NULL;
	b->joiners = NULL;
	b->pc = 0;
	b->home = TASK_HOME_ANY;
	b->size_class = bcls;
	b->flags = 0;
	return t;
}

rok_task *rok_task_ref(rok_task *t)
{
	/* Relaxed: a new reference is made from an existing one, which
	 * already keeps the task alive (as for shared_ptr). */
	atomic_fetch_add_explicit(&t->state, TASK_REF_ONE,
	                          memory_order_relaxed);
	return t;
}

void rok_task_unref(rok_task *t)
{
	if (t == NULL)
		return;
	/* acq_rel: the last owner must see every other owner's writes before
	 * freeing, and each owner's writes must be released to it. */
	uint64_t s = atomic_fetch_sub_explicit(&t->state, TASK_REF_ONE,
	                                       memory_order_acq_rel);
	if ((s >> TASK_REF_SHIFT) == 1)
		task_free(t);
}

void task_schedule(rok_task *t, bool from_self)
{
	struct worker *me = executor_tls.worker;
	uint16_t home = task_body(t)->home;

	if (home != TASK_HOME_ANY) {
		if (me != NULL && worker_owns(me, t) &&
		    worker_push_own(me, t) == 0)
			return;
		worker_push_remote(atomic_load_explicit(
			&executor.workers[home], memory_order_relaxed), t);
		return;
	}
	if (me != NULL) {
		worker_push_local(me, t, from_self);
		return;
	}
	injector_push(&executor.injector, t);
	executor_notify();
}

/* The state after a wake of a task in state s; *sched: it must be queued. */
static uint64_t task_woken_state(uint64_t s, bool *sched)
{
	*sched = false;
	if (s & (TASK_COMPLETE | TASK_SCHEDULED))
		return s;
	if (s & TASK_RUNNING)
		return s | TASK_NOTIFIED;
	*sched = true;
	return s | TASK_SCHEDULED;
}

/*
 * A task its sleep's timer woke: on the firing pool worker's `timed`
 * deque, run ahead of its other work and stolen first (worker.c), so a
 * backlog does not make the sleep late.  Helpers, guests, thread-per-core
 * workers and pinned tasks take the ordinary FIFO path.
 */
static void task_schedule_timed(rok_task *t)
{
	struct worker *me = executor_tls.worker;

	if (task_body(t)->home == TASK_HOME_ANY && me != NULL && !me->guest &&
	    !me->helper && !executor.thread_per_core) {
		worker_push_timed(me, t);
		return;
	}
	task_schedule(t, true);
}

enum { TASK_WAKE_LIFO, TASK_WAKE_TIMED };

static void task_wake_by_val_as(rok_task *t, int how)
{
	uint64_t s = atomic_load_explicit(&t->state, memory_order_relaxed);
	uint64_t n;
	bool sched;

	do {
		n = task_woken_state(s, &sched) - TASK_REF_ONE;
	} while (!atomic_compare_exchange_weak_explicit(
		&t->state, &s, n, memory_order_acq_rel, memory_order_relaxed));
	/* The runtime's reference covers the queued task. */
	if (sched && how == TASK_WAKE_TIMED)
		task_schedule_timed(t);
	else if (sched)
		task_schedule(t, false);
	else if ((n >> TASK_REF_SHIFT) == 0)
		task_free(t);
}

void task_wake_by_val(rok_task *t)
{
	task_wake_by_val_as(t, TASK_WAKE_LIFO);
}

void task_wake_by_val_timed(rok_task *t)
{
	task_wake_by_val_as(t, TASK_WAKE_TIMED);
}

int task_spawn(rok_task **out, rok_poll_fn poll, const void *frame,
               size_t size, uint16_t home, bool local, bool cancelled)
{
	struct executor_thread *me = &executor_tls;

	if (out != NULL)
		*out = NULL;
	if (poll == NULL || (size > 0 && frame == NULL) ||
	    size > SIZE_MAX / 2)
		return -EINVAL;
	rok_task *t = task_alloc(&me->cache, size);
	if (t == NULL)
		return -ENOMEM;
	struct task_body *b = task_body(t);
	b->poll = poll;
	b->home = home;
	/* Counted for block_on, which waits for these, and for the monitor,
	 * which hands off no worker that has any (SPEC A6).  Not the tasks a
	 * thread-per-core worker spawns: pinned to the worker, not its thread,
	 * they may go on on another thread (SPEC A7). */
	if (local) {
		b->flags |= TASK_F_PINNED;
		worker_set_pinned(me->worker, 1);
	}
	if (size > 0)
		memcpy(task_frame(t), frame, size);
	uint64_t s = TASK_SCHEDULED | (out != NULL ? 2 : 1) * TASK_REF_ONE;
	if (cancelled)
		s |= TASK_CANCELLED;   /* spawned during the drain at stop */
	/* Relaxed: the queue push that follows publishes the task. */
	atomic_store_explicit(&t->state, s, memory_order_relaxed);
	if (out != NULL)
		*out = t;
	task_schedule(t, false);
	return 0;
}

/* ---- joiners ---------------------------------------------------------- */

static void task_join_lock(rok_task *t)
{
	uint64_t s = atomic_load_explicit(&t->state, memory_order_relaxed);

	for (;;) {
		if (s & TASK_JOIN_LOCK) {
			spin_pause();
			s = atomic_load_explicit(&t->state, memory_order_relaxed);
			continue;
		}
		/* Acquire: pairs with task_join_unlock's release. */
		if (atomic_compare_exchange_weak_explicit(
			&t->state, &s, s | TASK_JOIN_LOCK,
			memory_order_acquire, memory_order_relaxed))
			return;
	}
}

static void task_join_unlock(rok_task *t)
{
	/* Release: publishes the list changes to the next holder. */
	atomic_fetch_and_explicit(&t->state, ~(uint64_t)TASK_JOIN_LOCK,
	                          memory_order_release);
}

static void task_join_release(rok_waiter *w)
{
	rok_task *t = w->queue;

	task_join_lock(t);
	if (!(atomic_load_explicit(&t->state, memory_order_relaxed) &
	      TASK_COMPLETE)) {
		waitq_unlink(&task_body(t)->joiners, w);
		task_join_unlock(t);
		return;
	}
	task_join_unlock(t);
	/* task_complete took the list off the body and is waking its nodes
	 * without the lock: `w` is its until marked woken.  Acquire: pairs
	 * with waitq_take's release; nothing touches `w` after. */
	while (atomic_load_explicit(&w->state, memory_order_acquire) ==
	       WAITQ_QUEUED)
		spin_pause();
}

/* Links a joiner unless `t` finished; false if it did. */
static bool task_join_link(rok_task *t, rok_waiter *w, rok_cx *cx)
{
	task_join_lock(t);
	if (atomic_load_explicit(&t->state, memory_order_acquire) &
	    TASK_COMPLETE) {
		task_join_unlock(t);
		return false;
	}
	waitq_link(&task_body(t)->joiners, w, cx, task_join_release, t);
	task_join_unlock(t);
	return true;
}

int task_result(rok_task *t, void **result)
{
	/* Acquire: pairs with the release that set COMPLETE in
	 * task_complete. */
	uint64_t s = atomic_load_explicit(&t->state, memory_order_acquire);

	if (s & TASK_HAS_VALUE) {
		if (result != NULL)
			*result = t->u.result;
		return 0;
	}
	if (result != NULL)
		*result = NULL;
	return -ECANCELED;
}

rok_poll rok_join_err(rok_cx *cx, rok_join_op *op, rok_task *t, void **result,
                      int *err)
{
	rok_waiter *w = &op->w;

	if (waitq_begin(cx, w))
		return ROK_PENDING;
	if (!(atomic_load_explicit(&t->state, memory_order_acquire) &
	      TASK_COMPLETE) &&
	    task_join_link(t, w, cx))
		return ROK_PENDING;
	/*
	 * A blocking job's (or 1:1 thread's) value is discarded once the
	 * awaiting task is cancelled (SPEC A5, A11), even if the job ended
	 * between the cancel and this re-poll: the await macro, seeing the
	 * cancelled state, releases and leaves.  (A first poll in cancelled
	 * state never gets here.)  A task's value is kept, as any value an
	 * await completed with is.
	 */
	if ((atomic_load_explicit(&t->state, memory_order_relaxed) &
	     TASK_EXTERNAL) && rok_cx_cancelled(cx))
		return ROK_PENDING;
	int e = task_result(t, result);
	if (err != NULL) {
		*err = e;
	} else if (e < 0) {
		/*
		 * A plain await (no err to receive the CancellationError) of
		 * a task that ended without a result: SPEC A11 calls that a
		 * programming error, and as an uncaught CancellationError
		 * would, it ends the awaiting coroutine.  The await macro sees
		 * the cancelled state, releases (nothing is linked) and leaves
		 * through the cleanup; the task ends without a result in turn.
		 */
		cx->force_cancel = true;
		return ROK_PENDING;
	}
	return ROK_READY;
}

int rok_task_wait(rok_task *t, void **result)
{
	rok_waiter w = { .state = WAITQ_IDLE };

	if (executor_tls.worker != NULL)
		return -EDEADLK;
	if (!(atomic_load_explicit(&t->state, memory_order_acquire) &
	      TASK_COMPLETE) &&
	    task_join_link(t, &w, NULL))
		waitq_block(&w);
	return task_result(t, result);
}

/* ---- polling ---------------------------------------------------------- */

void task_run(rok_task *t)
{
	struct executor_thread *me = &executor_tls;
	struct task_body *b = task_body(t);
	void *result = NULL;
	rok_cx cx = {
		.task = t, .pc = &b->pc, .result = &result,
	};

	/* SCHEDULED -> RUNNING.  Acquire: with the queue's acquire pop, the
	 * poll sees the waker's and the previous poll's writes. */
	atomic_fetch_xor_explicit(&t->state, TASK_SCHEDULED | TASK_RUNNING,
	                          memory_order_acquire);
	me->current = t;
	rok_poll r = b->poll(&cx, task_frame(t));
	me->current = NULL;

	uint64_t s = atomic_load_explicit(&t->state, memory_order_relaxed);
	uint64_t n;
	if (r == ROK_PENDING) {
		do {
			if (s & TASK_NOTIFIED)
				n = (s & ~(uint64_t)(TASK_RUNNING | TASK_NOTIFIED)) |
				    TASK_SCHEDULED;
			else
				n = s & ~(uint64_t)TASK_RUNNING;
			/* Release: publishes this poll's frame writes to the
			 * waker that reads the idle state; acquire: a NOTIFIED
			 * waker's writes are seen by the next poll. */
		} while (!atomic_compare_exchange_weak_explicit(
			&t->state, &s, n, memory_order_acq_rel,
			memory_order_relaxed));
		if (n & TASK_SCHEDULED)
			task_schedule(t, true);
		return;
	}

	if ((b->flags & TASK_F_PINNED) && me->worker != NULL &&
	    atomic_load_explicit(&me->worker->pinned_live,
	                         memory_order_relaxed) > 0)
		worker_set_pinned(me->worker, -1);
	task_complete(t, result, !cx.cancelled_exit);
}

/* Joiners taken off the list before the first of them is woken. */
#define TASK_WAKE_BATCH 64

void task_complete(rok_task *t, void *result, bool has_value)
{
	struct task_body *b = task_body(t);
	rok_task *w;

	/*
	 * Only the runtime's reference left: no handle, and no waker between
	 * taking our waiter off a list and waking us.  A reference is only
	 * ever made from another, so nobody can look at `t` again.  The count
	 * is exact here: a waker adds its reference (relaxed) before marking
	 * the waiter WOKEN (release), and our cleanup abandoned every waiter
	 * either after reading WOKEN with acquire or under the list's lock
	 * (waitq.c, and the release functions); any new kind of wait must do
	 * the same.  Acquire: every other reference's drop (acq_rel) happens
	 * before the frees.
	 */
	if ((atomic_load_explicit(&t->state, memory_order_acquire) >>
	     TASK_REF_SHIFT) == 1) {
		frame_free(&executor_tls.cache, b, b->size_class);
		task_free(t);
		return;
	}
	task_join_lock(t);
	rok_waiter *joiners = b->joiners;
	t->u.result = has_value ? result : NULL;
	uint64_t s = atomic_load_explicit(&t->state, memory_order_relaxed);
	uint64_t c;
	do {
		/* Also drops the runtime's reference. */
		c = ((s & ~(uint64_t)(TASK_RUNNING | TASK_NOTIFIED |
		                      TASK_JOIN_LOCK)) |
		     TASK_COMPLETE | (has_value ? TASK_HAS_VALUE : 0)) -
		    TASK_REF_ONE;
		/* Release: publishes the value to joiners, and unlocks;
		 * acq_rel as any unref (rok_task_unref). */
	} while (!atomic_compare_exchange_weak_explicit(
		&t->state, &s, c, memory_order_acq_rel, memory_order_relaxed));
	/* `t` may be freed by its last handle from here on.  The list is
	 * this thread's alone now; a cancelled joiner waits for its node to
	 * be taken (task_join_release), so the nodes are taken a batch at a
	 * time before any wake.  A thread waiting in rok_task_wait is woken
	 * inside waitq_take (NULL). */
	while (joiners != NULL) {
		rok_task *batch[TASK_WAKE_BATCH];
		size_t k = 0;
		while (joiners != NULL && k < TASK_WAKE_BATCH)
			if ((w = waitq_take(&joiners)) != NULL)
				batch[k++] = w;
		for (size_t i = 0; i < k; i++)
			task_wake_by_val(batch[i]);
	}
	frame_free(&executor_tls.cache, b, b->size_class);
	if ((c >> TASK_REF_SHIFT) == 0)
		task_free(t);
}

int task_new_external(rok_task **out, size_t size)
{
	*out = NULL;
	rok_task *t = task_alloc(&executor_tls.cache, size);
	if (t == NULL)
		return -ENOMEM;
	task_body(t)->poll = NULL;
	memset(task_frame(t), 0, size);
	/* RUNNING for good: wakes and cancels only mark it, never queue it.
	 * Relaxed: the caller publishes it with the handle. */
	atomic_store_explicit(&t->state,
	                      TASK_RUNNING | TASK_EXTERNAL | 2 * TASK_REF_ONE,
	                      memory_order_relaxed);
	*out = t;
	return 0;
}

/* ---- handles ---------------------------------------------------------- */

void rok_task_cancel(rok_task *t)
{
	uint64_t s = atomic_load_explicit(&t->state, memory_order_relaxed);
	bool sched;

	do {
		if (s & (TASK_COMPLETE | TASK_CANCELLED))
			return;
		/* Release: a cancel is seen by the poll that follows. */
	} while (!atomic_compare_exchange_weak_explicit(
		&t->state, &s, task_woken_state(s | TASK_CANCELLED, &sched),
		memory_order_acq_rel, memory_order_relaxed));
	if (sched)
		task_schedule(t, false);
}

bool task_cancel_for_stop(rok_task *t)
{
	uint64_t s = atomic_load_explicit(&t->state, memory_order_relaxed);

	if (s == 0 || (s & (TASK_COMPLETE | TASK_EXTERNAL)))
		return false;   /* free, finished, or ended by its own driver */
	rok_task_cancel(t);
	return true;
}

bool rok_task_is_cancelled(const rok_task *t)
{
	return atomic_load_explicit(&t->state, memory_order_relaxed) &
	       TASK_CANCELLED;
}

bool rok_task_is_finished(const rok_task *t)
{
	return atomic_load_explicit(&t->state, memory_order_acquire) &
	       TASK_COMPLETE;
}

uint64_t rok_task_id(const rok_task *t)
{
	return t->id;
}

uint64_t rok_id(void)
{
	rok_task *t = executor_tls.current;

	if (t == NULL) {
		fputs("rok_id() called outside a task\n", stderr);
		abort();
	}
	return t->id;
}

int rok_try_id(uint64_t *id)
{
	rok_task *t = executor_tls.current;

	if (t == NULL)
		return -ESRCH;
	*id = t->id;
	return 0;
}

/* ---- the await notation ----------------------------------------------- */

bool rok_cx_cancelled(const rok_cx *cx)
{
	return cx->force_cancel ||
	       (atomic_load_explicit(&cx->task->state, memory_order_relaxed) &
	        TASK_CANCELLED);
}

void rok__bad_pc(uint32_t pc)
{
	fprintf(stderr, "rok: task polled at bad resume point %u "
	        "(polled after it finished?)\n", pc);
	abort();
}

rok_poll rok_yield_now(rok_cx *cx)
{
	struct task_body *b = task_body(cx->task);

	if (b->flags & TASK_F_YIELDED) {
		b->flags &= (uint8_t)~TASK_F_YIELDED;
		return ROK_READY;
	}
	b->flags |= TASK_F_YIELDED;
	/* We are RUNNING: NOTIFIED makes task_run queue us at the back. */
	atomic_fetch_or_explicit(&cx->task->state, TASK_NOTIFIED,
	                         memory_order_relaxed);
	return ROK_PENDING;
}
