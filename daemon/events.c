/*
 * events.c — task events: the task table publishes, streams subscribe.
 *
 * The task table (tasktab.c) publishes every state change of a task
 * (queued or running: EVENTS_STATE; an end: EVENTS_END, apart so that
 * logs hears only of those) and exec-output.c every append to a task's
 * output; the streams that push to clients (cmd-logs.c, cmd-watch.c)
 * subscribe.  So the task layer knows no reply and the stream commands
 * know no kind: both know this file only.
 *
 * Publishing runs on any thread (the workers that run tasks, the reactor
 * that creates them) and costs one atomic load while nobody subscribes to
 * that kind of event: the noop hot path pays nothing more.  With a
 * subscriber, the event is copied and queued with reactor_call, whose
 * queue keeps the order of calls: the changes of one task are published by
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
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "reactor.h"
#include "rokd.h"

#define EVENTS_KINDS 3
#define EVENTS_SUBS 4             /* logs, watch: room to spare */

static struct {
	struct {
		events_fn *fn;
		unsigned count[EVENTS_KINDS];   /* reactor thread only */
	} subs[EVENTS_SUBS];
	_Atomic unsigned want[EVENTS_KINDS];    /* read by any thread */
} events;

static int events_index(unsigned kind)
{
	return kind == EVENTS_STATE ? 0 : kind == EVENTS_END ? 1 : 2;
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

static void events_deliver_cb(void *arg)
{
	struct events_ev *ev = arg;
	int k = events_index(ev->kind);

	for (int i = 0; i < EVENTS_SUBS; i++)
		if (events.subs[i].fn != NULL && events.subs[i].count[k] > 0)
			events.subs[i].fn(ev);
	free(ev);
}

void events_publish(const struct events_ev *ev)
{
	if (!events_wanted(ev->kind))
		return;
	struct events_ev *copy = malloc(sizeof(*copy));
	if (copy == NULL) {
		log_warnx("out of memory for an event of task %llu; its "
		          "watchers miss it", (unsigned long long)ev->id);
		return;
	}
	*copy = *ev;
	int err = reactor_call(events_deliver_cb, copy);
	if (err < 0) {
		if (err != -ESHUTDOWN)
			log_errno(err, "could not publish an event of task %llu",
			          (unsigned long long)ev->id);
		free(copy);
	}
}
