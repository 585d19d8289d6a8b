/*
 * kind.c — running a task of some kind.
 *
 * Every daemon task is one runtime task, the runner, whose frame holds the
 * record it reports to and the kind's own frame.  The runner marks the
 * record running at its first poll, awaits the kind's body as a rok_future
 * (under rok_timeout when the spec has a timeout), and in its cleanup
 * section, which runs exactly once however the task ends, hands the kind's
 * outcome (or "cancelled", "timed out") to the record.  A kind only writes
 * its body and says how it ended; cancellation and timeouts come for free.
 *
 * A kind whose tasks hold a process (kind->slot: exec) first takes a slot
 * of the task's group: kind_spawn queues a ticket (queue.c) and the runner
 * awaits its grant before the task counts as running; a cancel while it
 * waits ends it as cancelled, as before any start.
 *
 * Built-in kinds live in kind-builtin.c; the table below names them all.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rok/combine.h"
#include "rokd.h"

static const struct kind *const kinds[] = {
	&kind_noop,
	&kind_sleep,
	&kind_echo,
	&kind_exec,
};

#define KIND_FRAME_MAX 256

struct runner {
	struct rtask *rec;
	struct qticket *ticket;     /* its group's slot (kind->slot); owned */
	rok_chan_op grant_op;
	struct conn_answer *reply;  /* owned; NULL: nobody to answer */
	const struct kind *kind;
	int64_t timeout_ns;
	rok_future fut;
	rok_timeout_op to;
	void *val;
	int err;
	_Alignas(16) unsigned char body[KIND_FRAME_MAX];
};

const struct kind *kind_find(const uint8_t *name, size_t len)
{
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strlen(kinds[i]->name) == len &&
		    memcmp(kinds[i]->name, name, len) == 0)
			return kinds[i];
	return NULL;
}

static rok_poll runner_poll(rok_cx *cx, void *frame)
{
	struct runner *f = frame;

	ROK_BEGIN(cx);
	/* A task that holds a slot waits for it queued (queue.c). */
	if (f->ticket != NULL)
		ROK_AWAIT(cx, queue_await(cx, f->ticket, &f->grant_op));
	if (!f->kind->own_running)
		tasktab_running(f->rec);
	rok_future_init(&f->fut, f->kind->poll, f->body);
	if (f->timeout_ns > 0 && !f->kind->own_timeout)
		ROK_AWAIT(cx, rok_timeout(cx, &f->to, f->timeout_ns, &f->fut,
		                          &f->val, &f->err));
	else
		ROK_AWAIT(cx, rok_future_await(cx, &f->fut, &f->val));
	ROK_CLEANUP(cx);
	{
		struct rt_outcome o = { .state = RT_SUCCEEDED };
		int how = ROK_LEFT_BY_CANCEL(cx) ? RT_CANCELLED
		          : f->err == -ETIMEDOUT ? RT_TIMED_OUT
		                                 : RT_SUCCEEDED;
		f->kind->finish(f->body, how, &o);
		if (how != RT_SUCCEEDED)
			o.state = how;
		uint64_t id = tasktab_id(f->rec);
		/* f->rec may go from here on.  A gated task, which may run
		 * again, never has a reply here (its waiter answers). */
		bool ended = tasktab_finish(f->rec, &o);
		/* After the finish: its slot is free once it is seen ended
		 * (or queued again for a retry, which takes a new ticket). */
		queue_leave(f->ticket);
		if (ended && f->reply != NULL)
			tasktab_reply(id, f->reply);
		else
			conn_answer_unref(f->reply);
	}
	ROK_END(cx);
}

int kind_check(const struct kind *k, const TaskSpec *spec, char *err,
               size_t len)
{
	if (duration_check_ms(spec->timeout_ms, "timeout_ms", err, len) < 0 ||
	    duration_check_ms(spec->kill_grace_ms, "kill_grace_ms", err,
	                      len) < 0)
		return -1;
	if ((unsigned)spec->priority > ROK__V1__PRIORITY__PRIORITY_LOW) {
		snprintf(err, len, "unknown priority %d (urgent, high, normal, "
		         "low)", (int)spec->priority);
		return -1;
	}
	if (spec->group.len > 0 &&
	    (!group_name_ok(spec->group.data, spec->group.len) ||
	     !queue_group_exists(spec->group.data, spec->group.len))) {
		snprintf(err, len, "unknown group \"%.*s\" (see rokctl group "
		         "list)", (int)(spec->group.len > GROUP_NAME_MAX
		                        ? GROUP_NAME_MAX : spec->group.len),
		         (const char *)spec->group.data);
		return -1;
	}
	bool slurm = k == &kind_exec && queue_group_slurm(spec);
	if (!slurm && (spec->cpus != 0 || spec->mem_mib != 0 ||
	               spec->time_limit_ms != 0)) {
		snprintf(err, len, "--cpus, --mem and --time are for exec tasks "
		         "of a group whose backend is slurm");
		return -1;
	}
	if (slurm && (spec->stdin.len > 0 || spec->clean_env)) {
		snprintf(err, len, "a Slurm task takes no %s", spec->stdin.len > 0
		         ? "stdin" : "--clean-env");
		return -1;
	}
	if (spec->cpus > 4096 || spec->mem_mib > (1ull << 30) ||
	    duration_check_ms(spec->time_limit_ms, "time_limit_ms", err,
	                      len) < 0) {
		if (spec->cpus > 4096 || spec->mem_mib > (1ull << 30))
			snprintf(err, len, "cpus (at most 4096) or mem_mib (at "
			         "most 2^30) too large");
		return -1;
	}
	return k->check(spec, err, len);
}

int kind_spawn(struct rtask *r, const struct kind *k, const TaskSpec *spec,
               struct conn_answer *reply, rok_task **handle,
               struct qticket **ticket)
{
	struct runner f = {
		.rec = r,
		.reply = reply,
		.kind = k,
		.timeout_ns = duration_ns(spec->timeout_ms),
	};

	_Static_assert(sizeof(f.body) >= KIND_FRAME_MAX, "kind frame");
	/* An exec task of a slurm group is a batch job (slurm.c), as the
	 * group is at each run's start.  The record's kind too: its cancel
	 * hook is the one called with the run's control. */
	if (k == &kind_exec || k == &kind_slurm) {
		const struct kind *want = queue_group_slurm(spec) ? &kind_slurm
		                                                 : &kind_exec;
		if (want != k)
			tasktab_set_kind(r, want);
		f.kind = k = want;
	}
	if (k->frame_size > sizeof(f.body))
		return -EINVAL;
	/* Into its group's queue now, on the starting thread: the queue
	 * sees tasks in the order they are started, each with the time its
	 * run entered it (kept across a restart). */
	int err = k->slot ? queue_submit(spec, tasktab_uid(r),
	                                 tasktab_queue_entry(r), &f.ticket)
	                  : 0;
	if (err < 0)
		return err;
	k->init(f.body, r, spec);
	/* Only the used part of the body is copied into the task's frame. */
	err = rok_spawn(handle, runner_poll, &f,
	                offsetof(struct runner, body) + k->frame_size);
	if (err < 0) {
		struct rt_outcome o;
		k->finish(f.body, RT_FAILED, &o);   /* frees what init took */
		queue_leave(f.ticket);
		f.ticket = NULL;
	}
	*ticket = f.ticket;
	return err;
}
