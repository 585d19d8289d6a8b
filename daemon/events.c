/*
 * events.c — task events: the task table publishes, streams subscribe.
 *
 * The task table (tasktab.c) publishes every state change of a task
 * (queued or running: EVENTS_STATE; an end: EVENTS_END, apart so that
 * logs hears only of those; a refused spawn dropped: EVENTS_GONE) and
 * exec-output.c every append to a task's
 * output; the streams that push to clients (cmd-logs.c, cmd-watch.c)
 * subscribe.  So the task layer knows no reply and the stream commands
 * know no kind: both know this file only.
 *
 * Publishing runs on any thread (the workers that run tasks, the reactor
 * or journal thread that completes their spawn's commit) and costs one
 * atomic load while nobody subscribes to that kind of event: the noop hot
 * path pays nothing more.  With a
 * subscriber, the event is copied, with its reactor_call node (one
 * allocation), and queued with reactor_call_in, whose queue keeps the
 * order of calls: the changes of one task are published by
 * whoever runs it, one after the other, so its events arrive in order.
 * Subscribers run on the reactor thread and must not block.
 *
 * The order that makes subscribing race-free: a publisher makes its change
 * visible (under the table's lock, or by writing the file) and then loads
 * the count; a subscriber increments the count and then reads the table
 * or the file.  Both sequentially consistent: either the publisher sees
 * the subscriber and tells it, or the subscriber sees the change.  A
 * subscriber may hear of a change it has already seen; cmd-watch.c drops
 * those by the table's change counter (events_ev.seq).
 *
 * Memory while the reactor lags behind the publishers: state changes and
 * ends are bounded by the tasks (a few per run, and tasks are bounded by
 * max_queued; their spawns go through the reactor too), but output is
 * not: a task writing a byte at a time makes one event per read of its
 * pipe, up to max_task_output of them, on every worker at once, while the
 * reactor pumps each to its followers.  So at most EVENTS_OUTPUT_MAX
 * output events are queued at once; past that one event of
 * EVENTS_ANY_TASK stands for those dropped (its subscriber rereads every
 * task's output), and while it is queued further ones are dropped.  Its
 * flag, `output_missed`, is cleared by an exchange before the subscriber
 * runs: a publisher that saw it set (and dropped its event) wrote its
 * output before the exchange that read its value, so the subscriber reads
 * that output; one that sees it clear queues again.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "reactor.h"
#include "rokd.h"

#define EVENTS_KINDS 4
#define EVENTS_SUBS 4             /* logs, watch: room to spare */

static struct {
	struct {
		events_fn *fn;
		unsigned count[EVENTS_KINDS];   /* reactor thread only */
	} subs[EVENTS_SUBS];
	_Atomic unsigned want[EVENTS_KINDS];    /* read by any thread */
	_Atomic unsigned output_queued;   /* EVENTS_OUTPUT events queued */
	_Atomic bool output_missed;       /* an EVENTS_ANY_TASK is queued */
} events;

static int events_index(unsigned kind)
{
	return kind == EVENTS_STATE ? 0 : kind == EVENTS_END ? 1
	       : kind == EVENTS_OUTPUT ? 2 : 3;
}

bool events_wanted(unsigned kind)
{
	/* seq_cst: pairs with the increment in events_subscribe (top). */
	return atomic_load(&events.want[events_index(kind)]) != 0;
}

int events_subscribe(events_fn *fn, unsigned kinds)
{
	int free_slot = -1, at = -1;

	for (int i = 0; i < EVENTS_SUBS; i++) {
		if (events.subs[i].fn == fn)
			at = i;
		else if (free_slot < 0 && events.subs[i].fn == NULL)
			free_slot = i;
	}
	if (at < 0) {
		if (free_slot < 0)
			return -ENOMEM;   /* a fixed table: a programming error */
		at = free_slot;
		events.subs[at].fn = fn;
	}
	for (unsigned k = 0; k < EVENTS_KINDS; k++) {
		if (!(kinds & (1u << k)))
			continue;
		events.subs[at].count[k]++;
		atomic_fetch_add(&events.want[k], 1);   /* before the reads */
	}
	return 0;
}

void events_unsubscribe(events_fn *fn, unsigned kinds)
{
	for (int i = 0; i < EVENTS_SUBS; i++) {
		if (events.subs[i].fn != fn)
			continue;
		for (unsigned k = 0; k < EVENTS_KINDS; k++) {
			if (!(kinds & (1u << k)) || events.subs[i].count[k] == 0)
				continue;
			events.subs[i].count[k]--;
			atomic_fetch_sub(&events.want[k], 1);
		}
		return;
	}
}

/* A published event on its way to the reactor thread. */
struct events_msg {
	struct reactor_call call;
	struct events_ev ev;
};

static void events_deliver_cb(void *arg)
{
	struct events_msg *m = arg;
	struct events_ev *ev = &m->ev;
	int k = events_index(ev->kind);

	if (ev->kind == EVENTS_OUTPUT) {
		/* seq_cst, before the subscribers read: see the top. */
		if (ev->id == EVENTS_ANY_TASK)
			(void)atomic_exchange(&events.output_missed, false);
		atomic_fetch_sub_explicit(&events.output_queued, 1,
		                          memory_order_relaxed);
	}

	for (int i = 0; i < EVENTS_SUBS; i++)
		if (events.subs[i].fn != NULL && events.subs[i].count[k] > 0)
			events.subs[i].fn(ev);
	free(m);
}

/* An output event: whether to queue it, as itself or (*any) as one for
 * every task; counted in output_queued if so. */
static bool events_output_admit(bool *any)
{
	/* Relaxed: a bound, not an order (output_missed gives that). */
	if (atomic_fetch_add_explicit(&events.output_queued, 1,
	                              memory_order_relaxed) < EVENTS_OUTPUT_MAX)
		return true;
	if (!atomic_exchange(&events.output_missed, true)) {
		*any = true;
		return true;
	}
	atomic_fetch_sub_explicit(&events.output_queued, 1,
	                          memory_order_relaxed);
	return false;   /* the EVENTS_ANY_TASK queued will stand for it */
}

void events_publish(const struct events_ev *ev)
{
	bool output = ev->kind == EVENTS_OUTPUT, any = false;

	if (!events_wanted(ev->kind))
		return;
	if (output && !events_output_admit(&any))
		return;
	struct events_msg *m = malloc(sizeof(*m));
	int err = -ENOMEM;
	if (m != NULL) {
		m->ev = *ev;
		if (any)
			m->ev.id = EVENTS_ANY_TASK;
		err = reactor_call_in(&m->call, events_deliver_cb, m);
	}
	if (err < 0) {
		if (err == -ENOMEM)
			log_warnx("out of memory for an event of task %llu; "
			          "its watchers miss it",
			          (unsigned long long)ev->id);
		else if (err != -ESHUTDOWN)
			log_errno(err, "could not publish an event of task %llu",
			          (unsigned long long)ev->id);
		free(m);
		if (output)
			atomic_fetch_sub_explicit(&events.output_queued, 1,
			                          memory_order_relaxed);
		if (any)
			atomic_store(&events.output_missed, false);
	}
}
