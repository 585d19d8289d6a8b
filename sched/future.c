/*
 * future.c — coroutines polled inside another coroutine (rok_future).
 *
 * The future is polled with a context of its own (its resume point and
 * result slot) that shares the task and the cancelled state of the context
 * awaiting it.  So when the task is cancelled, the future's own await sees
 * it, drops its registration and runs the future's cleanup; only then does
 * rok_future_await report back, as pending, so that the awaiting coroutine's
 * macro leaves through its own cleanup.  select (later) builds on the same
 * mechanism, polling losers with force_cancel.
 */
#include "rok/rok.h"

enum {
	FUTURE_NEW = 0,
	FUTURE_STARTED = 1,
	FUTURE_DONE = 2,
};

void rok_future_init(rok_future *f, rok_poll_fn poll, void *frame)
{
	f->poll = poll;
	f->frame = frame;
	f->result = NULL;
	f->pc = 0;
	f->state = FUTURE_NEW;
	f->cancelled = false;
}

static rok_poll future_poll_once(rok_cx *cx, rok_future *f, bool cancel)
{
	rok_cx child = {
		.task = cx->task,
		.pc = &f->pc,
		.result = &f->result,
		.force_cancel = cx->force_cancel || cancel,
	};

	f->state = FUTURE_STARTED;
	if (f->poll(&child, f->frame) == ROK_PENDING)
		return ROK_PENDING;
	f->state = FUTURE_DONE;
	f->cancelled = child.cancelled_exit;
	return ROK_READY;
}

rok_poll rok_future_await(rok_cx *cx, rok_future *f, void **result)
{
	if (cx->releasing) {
		/* Abandoned while started: finish it in cancelled state. A
		 * cancelled coroutine leaves at its first await, so one poll
		 * runs it to its end. */
		if (f->state == FUTURE_STARTED)
			(void)future_poll_once(cx, f, true);
		return ROK_PENDING;
	}
	if (f->state != FUTURE_DONE &&
	    future_poll_once(cx, f, false) == ROK_PENDING)
		return ROK_PENDING;
	if (f->cancelled) {
		/* The awaiting macro leaves as well: the task was cancelled,
		 * or the future ended through a plain rok_join of a task
		 * without a result, which ends its awaiter too. */
		cx->force_cancel = true;
		return ROK_PENDING;
	}
	if (result != NULL)
		*result = f->result;
	return ROK_READY;
}
