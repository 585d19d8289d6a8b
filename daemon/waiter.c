/*
 * waiter.c — the requests that wait: join, race, select and spawn --wait.
 *
 * Each is a runtime task (the daemon is the first user of its library): it
 * awaits the tasks' handles with librok's join, race and timeouts, then
 * builds its reply on the worker and posts it to the reactor thread.  The
 * connection is kept alive meanwhile by the reference conn_begin_wait took;
 * a waiting client never holds up a worker, the reactor or anyone else.
 * A join's, a race's or a spawn --wait-timeout's wait is cancelled when
 * its connection closes (conn_add_waiter); a select's, and a race's with
 * cancel_rest, go on, to cancel the losers.  (A plain spawn --wait has no
 * wait of its own: its task answers as it ends, and the connection gives
 * that wait back if it closes first, conn_answer_new.)
 *
 * Task ids are looked up when the wait starts, on the waiter's worker (a
 * task no longer in memory is read from the journal, which must not hold
 * up the reactor thread): a task that already finished has no handle and
 * counts as done; an unknown id or another user's task is reported in the
 * reply (join) or fails the request (race).  Past the lookup a wait keeps
 * a handle only for each running task; an id that was missing or finished
 * costs its 8 bytes, kept for the reply.  A join's reply is built within
 * the frame limit (RESOURCE_EXHAUSTED once past it).
 *
 * An id whose spawn is not committed yet (a record, unfinished, with no
 * runtime task: status shows it queued, a watch watches it as the task it
 * will be) is neither finished nor running: the lookup is tried again,
 * after a sleep from 1 ms doubling up to 32 ms, until the journal has
 * answered its spawn (a handle, or NOT_FOUND once refused) or the
 * deadline passes.  Commits take milliseconds; a locked journal makes a
 * spawn wait up to its busy timeout, a few hundred polls at most.  A try
 * again skips the ids found finished (or, for a join, missing, though
 * handed out) before: each may be a journal read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rok/combine.h"
#include "rokd.h"
#include "waiter.h"

struct waiter {
	struct conn *conn;
	uint64_t req_id;
	uid_t uid;
	int mode;                  /* WAIT_* */
	size_t n;
	uint64_t *ids;             /* n, owned */
	size_t *index;             /* n, owned: ids[i] is the request's
	                              index[i]-th; NULL: the i-th */
	int64_t deadline;          /* rok_now() time; 0: none */
	bool cancel_rest;
	bool timed_out;
	size_t i, winner;
	void *v;
	int err;
	rok_join_timeout_op jt;
	rok_join_op join;
	rok_race_op race;
	rok_sleep_op sleep;
	int64_t retry_ns;          /* next sleep before a lookup again */
	int64_t retry_at;          /* the end of this one */
	uint64_t *done;            /* bit i: ids[i] finished or an error
	                              (join), not looked up again; owned,
	                              or &done_small */
	uint64_t done_small;
	rok_task **live;           /* nlive, owned refs: the tasks running */
	size_t *live_index;        /* nlive: live[k] is ids[live_index[k]] */
	size_t nlive;
	bool ids_given;            /* QUOTA_WAIT_IDS given back */
};

/* Gives back f's ids (QUOTA_WAIT_IDS), once. */
static void waiter_give_ids(struct waiter *f)
{
	if (f->ids_given)
		return;
	f->ids_given = true;
	(void)quota_add(f->uid, QUOTA_WAIT_IDS, -(int64_t)f->n);
}

/* The wait's answer.  Its ids are given back first: the client may ask
 * again as soon as it reads the reply, before the wait's task ends. */
static void waiter_post_error(struct waiter *f, ErrorCode code,
                              const char *msg)
{
	waiter_give_ids(f);
	reply_post_error(f->conn, f->req_id, code, msg);
}

static void waiter_post(struct waiter *f, const Response *resp)
{
	waiter_give_ids(f);
	reply_post_direct(f->conn, resp);
}

/* Frees f's arrays and gives back its ids if its answer has not. */
static void waiter_free(struct waiter *f)
{
	waiter_give_ids(f);
	for (size_t i = 0; i < f->nlive; i++)
		rok_task_unref(f->live[i]);
	free(f->ids);
	free(f->index);
	if (f->done != &f->done_small)
		free(f->done);
	free(f->live);
	free(f->live_index);
}

static void waiter_reply_join(struct waiter *f)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__JoinReply jr = ROK__V1__JOIN_REPLY__INIT;
	Rok__V1__SpawnReply sr = ROK__V1__SPAWN_REPLY__INIT;
	TaskInfo **ptrs = tasktab_infos_new(f->n);

	if (ptrs == NULL) {
		waiter_post_error(f, ROK__V1__ERROR_CODE__INTERNAL,
		                  "out of memory");
		return;
	}
	/* Built within the frame limit: no copies past it. */
	if (tasktab_infos_fill(f->ids, f->n, f->uid, ptrs,
	                       tasktab_reply_budget()) < f->n) {
		waiter_post_error(f, ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
		                  "reply larger than the frame limit: ask for "
		                  "fewer tasks");
		tasktab_infos_free(ptrs, f->n);
		return;
	}
	resp.id = f->req_id;
	if (f->mode == WAIT_SPAWN) {
		sr.id = f->ids[0];
		sr.task = ptrs[0];
		resp.body_case = ROK__V1__RESPONSE__BODY_SPAWN;
		resp.spawn = &sr;
	} else {
		jr.n_tasks = f->n;
		jr.tasks = ptrs;
		resp.body_case = ROK__V1__RESPONSE__BODY_JOIN;
		resp.join = &jr;
	}
	waiter_post(f, &resp);
	tasktab_infos_free(ptrs, f->n);
}

static void waiter_reply_race(struct waiter *f)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__RaceReply rr = ROK__V1__RACE_REPLY__INIT;
	Rok__V1__SelectReply sr = ROK__V1__SELECT_REPLY__INIT;
	TaskInfo info;

	tasktab_info(f->ids[f->winner], f->uid, &info);
	resp.id = f->req_id;
	if (f->mode == WAIT_SELECT) {
		sr.index = (uint32_t)f->winner;
		sr.winner = &info;
		sr.n_ids = f->n;
		sr.ids = f->ids;
		resp.body_case = ROK__V1__RESPONSE__BODY_SELECT;
		resp.select = &sr;
	} else {
		rr.index = (uint32_t)(f->index != NULL ? f->index[f->winner]
		                                       : f->winner);
		rr.winner = &info;
		resp.body_case = ROK__V1__RESPONSE__BODY_RACE;
		resp.race = &rr;
	}
	waiter_post(f, &resp);
	tasktab_info_free(&info);
}

/*
 * Awaits the race of the live handles, or the deadline.  An op of its own
 * so that one await covers both, honouring the releasing contract.
 */
static rok_poll waiter_race_or_deadline(rok_cx *cx, struct waiter *f)
{
	/* Losers are cancelled through the task table (waiter_poll), not by
	 * the race: an exec task must first kill its process group. */
	const unsigned flags = 0;

	if (cx->releasing) {
		(void)rok_race(cx, &f->race, f->live, f->nlive, flags,
		               &f->winner, &f->v, &f->err);
		if (f->deadline != 0)
			(void)rok_sleep_until(cx, &f->sleep, f->deadline);
		return ROK_PENDING;
	}
	if (rok_race(cx, &f->race, f->live, f->nlive, flags, &f->winner, &f->v,
	             &f->err) == ROK_READY) {
		f->winner = f->live_index[f->winner];
		if (f->deadline != 0) {
			cx->releasing = true;   /* drop the timer */
			(void)rok_sleep_until(cx, &f->sleep, f->deadline);
			cx->releasing = false;
		}
		return ROK_READY;
	}
	if (f->deadline != 0 &&
	    rok_sleep_until(cx, &f->sleep, f->deadline) == ROK_READY) {
		cx->releasing = true;   /* drop the race's registrations */
		(void)rok_race(cx, &f->race, f->live, f->nlive, flags,
		               &f->winner, &f->v, &f->err);
		cx->releasing = false;
		f->timed_out = true;
		return ROK_READY;
	}
	return ROK_PENDING;
}

/* Cancels task i as a cancel request would (an exec task gets SIGTERM,
 * then SIGKILL after its grace, before it ends). */
static void waiter_cancel(struct waiter *f, size_t i)
{
	(void)tasktab_cancel(f->ids[i], f->uid);
}

static void waiter_cancel_all(struct waiter *f)
{
	for (size_t k = 0; k < f->nlive; k++)
		waiter_cancel(f, f->live_index[k]);
}

/*
 * Worker: looks the ids up (a task no longer in memory is read from the
 * journal, which is why this is not done on the reactor thread).  0;
 * 1 if an id's spawn is not committed yet (no handle kept: to be tried
 * again); or the request was answered with the error: race and select
 * need every task to be the caller's.
 */
static int waiter_lookup(struct waiter *f)
{
	char msg[96];
	bool unsettled = false;

	for (size_t i = 0; i < f->n; i++) {
		/* Settled at an earlier try: a finished task stays finished,
		 * and such an id may cost a journal read. */
		if (f->done[i / 64] & (1ull << (i % 64)))
			continue;
		rok_task *h = NULL;
		int code = tasktab_lookup(f->ids[i], f->uid, &h);
		/* Neither running nor finished: its spawn is not committed
		 * (looked at after the lookup: a start between the two is
		 * seen at the next try). */
		if (code == 0 && h == NULL && !tasktab_finished(f->ids[i]))
			unsettled = true;
		else if (h == NULL && (code == 0 ||
		                       f->ids[i] < tasktab_next_id()))
			/* An id not handed out yet is missing now, and may
			 * be a task at the next try (it costs no journal
			 * read): not marked done. */
			f->done[i / 64] |= 1ull << (i % 64);
		if (code != 0 && f->mode != WAIT_JOIN &&
		    f->mode != WAIT_SPAWN) {
			snprintf(msg, sizeof(msg), "task %llu: %s",
			         (unsigned long long)f->ids[i],
			         code == ROK__V1__ERROR_CODE__NOT_FOUND
			                 ? "no such task"
			                 : "belongs to another user");
			if (f->mode == WAIT_SELECT)
				/* Nobody will wait for the winner: no task
				 * of this select may run on. */
				for (size_t k = 0; k < f->n; k++)
					(void)tasktab_cancel(f->ids[k], f->uid);
			waiter_post_error(f, (ErrorCode)code, msg);
			return -ENOENT;
		}
		if (h != NULL) {
			f->live[f->nlive] = h;
			f->live_index[f->nlive++] = i;
		}
	}
	if (unsettled) {
		for (size_t k = 0; k < f->nlive; k++)
			rok_task_unref(f->live[k]);
		f->nlive = 0;
		return 1;
	}
	/* Only the running tasks cost more than their id for the rest of
	 * the wait: a join naming thousands of unknown ids beside one
	 * running task keeps no handle slots for them. */
	if (f->nlive < f->n) {
		size_t m = f->nlive > 0 ? f->nlive : 1;
		rok_task **l = realloc(f->live, m * sizeof(*l));
		size_t *li = realloc(f->live_index, m * sizeof(*li));
		if (l != NULL)   /* else the larger block stays, as good */
			f->live = l;
		if (li != NULL)
			f->live_index = li;
	}
	return 0;
}

static rok_poll waiter_poll(rok_cx *cx, void *frame)
{
	struct waiter *f = frame;

	ROK_BEGIN(cx);
	if (f->done == NULL)
		f->done = &f->done_small;
	f->retry_ns = 1000000;
	for (;;) {
		int rc = waiter_lookup(f);
		if (rc < 0)
			ROK_RETURN(cx, 0);
		if (rc == 0)
			break;
		if (f->deadline != 0 && rok_now() >= f->deadline) {
			f->timed_out = true;
			break;
		}
		f->retry_at = rok_deadline(f->retry_ns);
		if (f->deadline != 0 && f->retry_at > f->deadline)
			f->retry_at = f->deadline;
		if (f->retry_ns < 32000000)
			f->retry_ns *= 2;
		ROK_AWAIT(cx, rok_sleep_until(cx, &f->sleep, f->retry_at));
	}
	if (f->timed_out) {
		if (f->mode == WAIT_SELECT)
			/* As at its deadline below: nobody waits for a
			 * winner, none of its tasks may run on. */
			for (size_t k = 0; k < f->n; k++)
				(void)tasktab_cancel(f->ids[k], f->uid);
		waiter_post_error(f, ROK__V1__ERROR_CODE__TIMED_OUT,
		                  f->mode == WAIT_SELECT
		                  ? "timed out; every task was cancelled"
		                  : "timed out; the tasks keep running");
		ROK_RETURN(cx, 0);
	}
	if (f->mode == WAIT_JOIN || f->mode == WAIT_SPAWN) {
		for (f->i = 0; f->i < f->nlive; f->i++) {
			if (f->deadline == 0) {
				/* A cancelled task is a result here too: the
				 * reply reads its status. */
				ROK_AWAIT(cx, rok_join_err(cx, &f->join,
				                           f->live[f->i],
				                           &f->v, &f->err));
				continue;
			}
			ROK_AWAIT(cx, rok_join_timeout(cx, &f->jt,
			                               f->live[f->i],
			                               f->deadline - rok_now(),
			                               &f->v, &f->err));
			if (f->err == -ETIMEDOUT) {
				f->timed_out = true;
				break;
			}
		}
		if (f->timed_out)
			waiter_post_error(f, ROK__V1__ERROR_CODE__TIMED_OUT,
			                  "timed out; the tasks keep running");
		else
			waiter_reply_join(f);
		ROK_RETURN(cx, 0);
	}

	/* race and select: a finished task wins at once, lowest index
	 * first; else race the running ones. */
	if (f->nlive < f->n) {
		/* ids not among the live ones are finished (race and select
		 * fail on a missing one): the lowest wins. */
		f->winner = f->nlive;
		for (size_t k = 0; k < f->nlive; k++)
			if (f->live_index[k] != k) {
				f->winner = k;
				break;
			}
	} else {
		ROK_AWAIT(cx, waiter_race_or_deadline(cx, f));
	}
	if (f->timed_out) {
		if (f->mode == WAIT_SELECT)
			waiter_cancel_all(f);
		waiter_post_error(f, ROK__V1__ERROR_CODE__TIMED_OUT,
		                  f->mode == WAIT_SELECT
		                  ? "timed out; every task was cancelled"
		                  : "timed out; the tasks keep running");
	} else {
		if (f->cancel_rest)
			for (size_t k = 0; k < f->nlive; k++)
				if (f->live_index[k] != f->winner)
					waiter_cancel(f, f->live_index[k]);
		waiter_reply_race(f);
	}
	ROK_CLEANUP(cx);
	if (ROK_LEFT_BY_CANCEL(cx))
		/* rok_stop, or its connection closed (conn_add_waiter):
		 * the reply is dropped at delivery then, giving back the
		 * wait's reference. */
		waiter_post_error(f, ROK__V1__ERROR_CODE__UNAVAILABLE,
		                  "the daemon is stopping");
	waiter_free(f);
	ROK_END(cx);
}

/* Answers a request whose wait could not start; ends a begun wait. */
static void waiter_refuse(struct conn *c, uint64_t req_id, bool begun,
                          ErrorCode code, const char *msg)
{
	if (begun)
		reply_post_error(c, req_id, code, msg);
	else
		conn_send_error(c, req_id, code, "%s", msg);
}

int waiter_start(struct conn *c, uint64_t req_id, int mode,
                 const uint64_t *ids, const size_t *index, size_t n,
                 uint64_t timeout_ms, bool cancel_rest, bool begun)
{
	struct waiter f = {
		.conn = c,
		.req_id = req_id,
		.uid = conn_uid(c),
		.mode = mode,
		.n = n,
		.cancel_rest = cancel_rest || mode == WAIT_SELECT,
	};
	char msg[192];

	if (duration_check_ms(timeout_ms, "timeout_ms", msg, sizeof(msg)) < 0) {
		waiter_refuse(c, req_id, begun,
		              ROK__V1__ERROR_CODE__INVALID_ARGUMENT, msg);
		return -EINVAL;
	}
	if (timeout_ms > 0)
		f.deadline = rok_deadline(duration_ns(timeout_ms));
	/* Its arrays take some 24 bytes an id until the wait's answer:
	 * bounded per uid, not only per request (max_ids) and in count of
	 * waits. */
	if (quota_add_within(f.uid, QUOTA_WAIT_IDS, n) != QUOTA_ADDED) {
		quota_explain(f.uid, QUOTA_WAIT_IDS, msg, sizeof(msg));
		waiter_refuse(c, req_id, begun,
		              ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED, msg);
		return -EAGAIN;
	}
	f.ids = malloc(n * sizeof(*f.ids));
	/* n <= 64 (almost every wait): the bits inside the frame.  The
	 * frame is copied into the task: the pointer is set there. */
	f.done = n > 64 ? calloc((n + 63) / 64, sizeof(*f.done)) : NULL;
	f.live = calloc(n, sizeof(*f.live));
	f.live_index = calloc(n, sizeof(*f.live_index));
	if (index != NULL && (f.index = malloc(n * sizeof(*f.index))) != NULL)
		memcpy(f.index, index, n * sizeof(*index));
	if (f.ids == NULL || (n > 64 && f.done == NULL) || f.live == NULL ||
	    f.live_index == NULL || (index != NULL && f.index == NULL)) {
		waiter_free(&f);
		waiter_refuse(c, req_id, begun, ROK__V1__ERROR_CODE__INTERNAL,
		              "out of memory");
		return -ENOMEM;
	}
	memcpy(f.ids, ids, n * sizeof(*ids));
	if (!begun && !conn_begin_wait(c, req_id)) {
		waiter_free(&f);
		return -EAGAIN;
	}
	/* A select's wait, and a race's with cancel_rest, stay when their
	 * client leaves: they cancel the losers once one task wins. */
	rok_task *t = NULL;
	int err = rok_spawn(!f.cancel_rest ? &t : NULL, waiter_poll, &f,
	                    sizeof(f));
	if (err < 0) {
		waiter_free(&f);
		reply_post_error(c, req_id, ROK__V1__ERROR_CODE__UNAVAILABLE,
		                 "cannot start the wait");
		return err;
	}
	if (t != NULL && !conn_add_waiter(c, t)) {
		/* It can no longer be cancelled at the close: it ends with
		 * its tasks, as every wait once did. */
		log_warnx("out of memory: a wait outlives its connection");
		rok_task_unref(t);
	}
	return 0;
}
