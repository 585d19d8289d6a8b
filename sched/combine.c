/*
 * combine.c — combinators over tasks and futures: join_all, race, select,
 * timeout, join_timeout (SPEC A9, A10).
 *
 * Everything here is built from the awaitable operations that already exist
 * (rok_join_err, rok_sleep, rok_future_await) and owns no wait list of its
 * own: each registration is the waiter of one of those operations, kept in
 * the caller's op struct (or, for race, in an array hung off it).  Dropping
 * a registration is always done the one way the awaitable contract allows:
 * calling the operation again with a copy of the context that has
 * `releasing` set.  For a future that is the same call that cancels it:
 * rok_future_await, released, polls a started future once more in cancelled
 * state, so it leaves at its await, drops its own registrations and runs its
 * cleanup, while a future that never started is left alone.
 *
 * All functions run on the thread polling the awaiting task; the tasks
 * awaited may finish on any thread (their wait lists take care of that).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rok/combine.h"

/* A copy of `cx` for dropping registrations (see the note at the top). */
static rok_cx combine_releasing(const rok_cx *cx)
{
	rok_cx rel = *cx;

	rel.releasing = true;
	return rel;
}

/* ---- join_all --------------------------------------------------------- */

rok_poll rok_join_all(rok_cx *cx, rok_join_all_op *op, rok_task *const *tasks,
                      size_t n, void **results, int *errs)
{
	if (cx->releasing) {
		if (op->next < n)
			(void)rok_join_err(cx, &op->join, tasks[op->next], NULL,
			                   NULL);
		op->next = 0;
		return ROK_PENDING;
	}
	for (; op->next < n; op->next++) {
		size_t i = op->next;
		void *value;
		int err = 0;
		/* Without errs, a plain await of each: see rok_join. */
		if (rok_join_err(cx, &op->join, tasks[i], &value,
		                 errs != NULL ? &err : NULL) == ROK_PENDING)
			return ROK_PENDING;
		if (results != NULL)
			results[i] = value;
		if (errs != NULL)
			errs[i] = err;
	}
	op->next = 0;   /* ready: the op may be used again */
	return ROK_READY;
}

/* ---- race ------------------------------------------------------------- */

/* Drops every registration of the race and frees the array. */
static void race_release(const rok_cx *cx, rok_race_op *op,
                         rok_task *const *tasks, size_t n)
{
	rok_cx rel = combine_releasing(cx);

	for (size_t i = 0; i < n; i++)
		(void)rok_join_err(&rel, &op->joins[i], tasks[i], NULL, NULL);
	free(op->joins);
	op->joins = NULL;
}

static void race_cancel(rok_task *const *tasks, size_t n, size_t except)
{
	for (size_t i = 0; i < n; i++)
		if (i != except)
			rok_task_cancel(tasks[i]);
}

rok_poll rok_race(rok_cx *cx, rok_race_op *op, rok_task *const *tasks,
                  size_t n, unsigned flags, size_t *index, void **result,
                  int *err)
{
	void *value = NULL;
	int e = 0;

	if (cx->releasing) {
		if (op->joins != NULL) {
			race_release(cx, op, tasks, n);
			if (flags & ROK_RACE_CANCEL_LOSERS)
				race_cancel(tasks, n, SIZE_MAX);
		}
		return ROK_PENDING;
	}
	if (n == 0 || (flags & ~ROK_RACE_CANCEL_LOSERS) != 0) {
		e = -EINVAL;
		goto fail;
	}
	if (op->joins == NULL) {
		op->joins = calloc(n, sizeof(*op->joins));
		if (op->joins == NULL) {
			e = -ENOMEM;
			goto fail;
		}
	}
	/* A join whose waiter is still queued returns at once; one that was
	 * woken (its task finished) or never linked looks at the task, and
	 * links the waiter if the task is still running. */
	size_t win;
	for (win = 0; win < n; win++)
		if (rok_join_err(cx, &op->joins[win], tasks[win], &value, &e) ==
		    ROK_READY)
			break;
	if (win == n)
		return ROK_PENDING;
	race_release(cx, op, tasks, n);
	if (flags & ROK_RACE_CANCEL_LOSERS)
		race_cancel(tasks, n, win);
	*index = win;
	if (result != NULL)
		*result = value;
	*err = e;
	return ROK_READY;

fail:
	*index = SIZE_MAX;
	if (result != NULL)
		*result = NULL;
	*err = e;
	return ROK_READY;
}

/* ---- select ----------------------------------------------------------- */

/* Cancels every started future but `keep` (SIZE_MAX: all of them). */
static void select_cancel(const rok_cx *cx, rok_future *futs, size_t n,
                          size_t keep)
{
	rok_cx rel = combine_releasing(cx);

	for (size_t i = 0; i < n; i++)
		if (i != keep)
			(void)rok_future_await(&rel, &futs[i], NULL);
}

rok_poll rok_select(rok_cx *cx, rok_select_op *op, rok_future *futs, size_t n,
                    size_t *index, void **result, int *err)
{
	void *value = NULL;

	if (cx->releasing) {
		select_cancel(cx, futs, n, SIZE_MAX);
		op->started = 0;
		return ROK_PENDING;
	}
	if (n == 0) {
		*index = SIZE_MAX;
		if (result != NULL)
			*result = NULL;
		*err = -EINVAL;
		return ROK_READY;
	}
	/*
	 * In cancelled state (the task was cancelled, or this select is itself
	 * a loser being cancelled) only the futures that started are polled:
	 * each runs to its end in this one poll, and one that completes its
	 * await keeps the value and may still win.  A future never polled
	 * stays that way.  Otherwise every future is polled, which starts it.
	 * The state is looked at before each future: one that leaves through
	 * cancellation without the task being cancelled (a plain rok_join of
	 * a task without a result) puts this poll in cancelled state, and the
	 * futures after it must not be started by it.
	 */
	size_t win;
	bool won = false;
	for (win = 0; win < (rok_cx_cancelled(cx) ? op->started : n); win++) {
		if (win >= op->started)
			op->started = win + 1;
		if (rok_future_await(cx, &futs[win], &value) == ROK_READY) {
			won = true;
			break;
		}
	}
	if (!won)
		return ROK_PENDING;
	select_cancel(cx, futs, n, win);
	op->started = 0;
	*index = win;
	if (result != NULL)
		*result = value;
	*err = 0;
	return ROK_READY;
}

/* ---- timeouts --------------------------------------------------------- */

/* Drops the timer (if armed) and readies the sleep for another use. */
static void combine_sleep_release(const rok_cx *cx, rok_sleep_op *sleep)
{
	rok_cx rel = combine_releasing(cx);

	(void)rok_sleep(&rel, sleep, 0);
	memset(sleep, 0, sizeof(*sleep));
}

rok_poll rok_timeout(rok_cx *cx, rok_timeout_op *op, int64_t ns, rok_future *f,
                     void **result, int *err)
{
	if (cx->releasing) {
		(void)rok_future_await(cx, f, NULL);   /* cancels it if started */
		combine_sleep_release(cx, &op->sleep);
		return ROK_PENDING;
	}
	if (rok_future_await(cx, f, result) == ROK_READY) {
		combine_sleep_release(cx, &op->sleep);
		*err = 0;
		return ROK_READY;
	}
	/* It left through cancellation: the task was cancelled, and the
	 * await macro, seeing so, calls us again to release the timer. */
	if (f->cancelled)
		return ROK_PENDING;
	if (rok_sleep(cx, &op->sleep, ns) == ROK_PENDING)
		return ROK_PENDING;
	memset(&op->sleep, 0, sizeof(op->sleep));

	/* Timed out: cancel the future.  One poll in cancelled state runs it
	 * to its end; if that poll completed its await and it then finished
	 * with a value, the value is kept (A11). */
	rok_cx rel = combine_releasing(cx);
	(void)rok_future_await(&rel, f, NULL);
	if (!f->cancelled && rok_future_await(cx, f, result) == ROK_READY) {
		*err = 0;
		return ROK_READY;
	}
	if (result != NULL)
		*result = NULL;
	*err = -ETIMEDOUT;
	return ROK_READY;
}

rok_poll rok_join_timeout(rok_cx *cx, rok_join_timeout_op *op, rok_task *t,
                          int64_t ns, void **result, int *err)
{
	if (cx->releasing) {
		(void)rok_join_err(cx, &op->join, t, NULL, NULL);
		combine_sleep_release(cx, &op->sleep);
		return ROK_PENDING;
	}
	if (rok_join_err(cx, &op->join, t, result, err) == ROK_READY) {
		combine_sleep_release(cx, &op->sleep);
		return ROK_READY;
	}
	if (rok_sleep(cx, &op->sleep, ns) == ROK_PENDING)
		return ROK_PENDING;
	memset(&op->sleep, 0, sizeof(op->sleep));
	rok_cx rel = combine_releasing(cx);
	(void)rok_join_err(&rel, &op->join, t, NULL, NULL);
	if (result != NULL)
		*result = NULL;
	*err = -ETIMEDOUT;
	return ROK_READY;
}
