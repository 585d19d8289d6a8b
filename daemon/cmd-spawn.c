/*
 * cmd-spawn.c — spawn one task; with wait, answer when it has finished.
 * Reactor thread.  The acknowledgement waits for the journal (journal.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "rokd.h"
#include "waiter.h"

int cmd_create_task(struct conn *c, const TaskSpec *spec, struct rtask **out,
                    char *err, size_t len)
{
	const struct kind *k;

	*out = NULL;
	if (spec == NULL) {
		snprintf(err, len, "a task spec is required");
		return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	}
	if ((k = kind_find(spec->kind.data, spec->kind.len)) == NULL) {
		snprintf(err, len, "unknown task kind \"%.*s\"",
		         (int)(spec->kind.len > 64 ? 64 : spec->kind.len),
		         spec->kind.data != NULL ? (const char *)spec->kind.data
		                                 : "");
		return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	}
	if (kind_check(k, spec, err, len) < 0)
		return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	if (gate_needed(spec) && gate_check(spec, conn_uid(c), err, len) < 0)
		return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	int e = tasktab_create(conn_uid(c), k, spec, out);
	if (e == -EAGAIN) {
		snprintf(err, len, "too many queued tasks (limit %llu)",
		         (unsigned long long)config.max_queued);
		return ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED;
	}
	if (e == -EDQUOT || e == -EUSERS || e == -ENOSPC) {
		quota_explain(conn_uid(c), e == -EDQUOT ? QUOTA_QUEUED
		              : e == -EUSERS ? QUOTA_RUNNING
		              : QUOTA_TASK_BYTES, err, len);
		return ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED;
	}
	if (e < 0) {
		snprintf(err, len, "out of memory");
		return ROK__V1__ERROR_CODE__INTERNAL;
	}
	return 0;
}

/*
 * A spawn waiting for its journal commit.  A spawn with wait counts as a
 * wait on the connection (conn_begin_wait, bounded by max_in_flight) from
 * the start, so that once its task is durable and started nothing can
 * refuse it any more: the task itself (no time limit) or a waiter (a time
 * limit) takes the wait over and answers.  A plain spawn is held
 * (conn_hold) until it is answered.  Either keeps the connection alive.
 * The task's answer goes through a conn_answer: if the client leaves
 * first, its connection gives the wait back at the close (conn.c), and
 * the task runs on, as a waiter's tasks do.
 */
struct spawn_pending {
	struct conn *conn;
	uint64_t req_id;
	struct rtask *rec;
	bool wait;
	uint64_t wait_timeout_ms;
	bool gated;                 /* waits in the gate (gate_needed) */
	struct conn_answer *answer; /* owned, for a spawn answered by its
	                               task (spawn_answered_by_task) */
	size_t spec_len;
	uint8_t spec[];             /* packed TaskSpec */
};

/* A gated task's wait is a waiter's on its final outcome, across runs. */
static bool spawn_answered_by_task(const struct spawn_pending *p)
{
	return p->wait && p->wait_timeout_ms == 0 && !p->gated;
}

/*
 * Reactor thread, for a spawn answered here (an error) rather than by its
 * task: true if p->conn is still the caller's to answer; false if its
 * close gave the wait back already (then p->conn may be gone).
 */
static bool spawn_claim(struct spawn_pending *p)
{
	if (p->answer == NULL)
		return true;
	bool mine = conn_answer_claim(p->answer) != NULL;
	conn_answer_unref(p->answer);
	p->answer = NULL;
	return mine;
}

/* Lets the connection go when the spawn was answered here. */
static void spawn_let_go(const struct spawn_pending *p)
{
	if (p->wait)
		conn_end_wait(p->conn);
	else
		conn_release(p->conn);
}

/*
 * Reactor thread, after the commit (err 0) or its failure; for a spawn
 * answered by its task, after a commit also the journal thread (see
 * journal_spawn_any): that branch touches nothing of the reactor's.
 */
static void cmd_spawn_done(void *arg, int err, const char *msg)
{
	struct spawn_pending *p = arg;
	struct conn *c = p->conn;

	if (err < 0) {
		/* Never acknowledged, never started: it did not happen. */
		tasktab_discard(p->rec);
		if (spawn_claim(p)) {
			conn_send_error(c, p->req_id,
			                ROK__V1__ERROR_CODE__UNAVAILABLE,
			                "%s; the task was not spawned", msg);
			spawn_let_go(p);
		}
		free(p);
		return;
	}
	uint64_t id = tasktab_id(p->rec);   /* before it may finish */
	/* Watchers hear of it once it is started (see tasktab_create). */
	if (spawn_answered_by_task(p)) {
		/* The task answers when it ends (now if it cannot start),
		 * ending the wait begun, unless its connection closed first;
		 * it takes the answer. */
		(void)tasktab_start_packed(p->rec, p->spec, p->spec_len,
		                           p->answer);
		free(p);
		return;
	}
	/* A task that fails to start is recorded as failed: still an id. */
	if (p->gated)
		(void)gate_submit_packed(p->rec, p->spec, p->spec_len);
	else
		(void)tasktab_start_packed(p->rec, p->spec, p->spec_len, NULL);
	if (p->wait) {
		/* The waiter ends the wait begun in cmd_spawn. */
		(void)waiter_start(c, p->req_id, WAIT_SPAWN, &id, NULL, 1,
		                   p->wait_timeout_ms, false, true);
		free(p);
		return;
	}
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__SpawnReply sr = ROK__V1__SPAWN_REPLY__INIT;
	sr.id = id;
	resp.id = p->req_id;
	resp.body_case = ROK__V1__RESPONSE__BODY_SPAWN;
	resp.spawn = &sr;
	conn_send(c, &resp);
	conn_release(c);
	free(p);
}

/*
 * The record is created now (its id is taken), journaled, and only once
 * the journal committed it is the task started and the spawn answered
 * (cmd_spawn_done): an acknowledged spawn is never lost.
 */
void cmd_spawn(struct conn *c, const Request *req)
{
	const Rok__V1__SpawnRequest *sp = req->spawn;
	size_t len = sp->spec != NULL
	             ? rok__v1__task_spec__get_packed_size(sp->spec) : 0;
	struct spawn_pending *p = malloc(sizeof(*p) + len);
	char err[160];

	if (p == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	p->conn = c;
	p->req_id = req->id;
	p->answer = NULL;
	p->wait = sp->wait;
	p->wait_timeout_ms = sp->wait_timeout_ms;
	if (p->wait) {
		if (!conn_begin_wait(c, req->id)) {
			free(p);
			return;   /* answered: too many requests in flight */
		}
	} else {
		conn_hold(c);
	}
	int code;
	if (p->wait && duration_check_ms(p->wait_timeout_ms, "wait_timeout_ms",
	                                 err, sizeof(err)) < 0)
		code = ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	else
		code = cmd_create_task(c, sp->spec, &p->rec, err, sizeof(err));
	if (code != 0) {
		conn_send_error(c, req->id, (ErrorCode)code, "%s", err);
		spawn_let_go(p);
		free(p);
		return;
	}
	p->spec_len = rok__v1__task_spec__pack(sp->spec, p->spec);
	p->gated = gate_needed(sp->spec);
	if (spawn_answered_by_task(p) &&
	    (p->answer = conn_answer_new(c, req->id)) == NULL) {
		tasktab_discard(p->rec);
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		spawn_let_go(p);
		free(p);
		return;
	}
	struct journal_spawn_item item = {
		.id = tasktab_id(p->rec), .uid = conn_uid(c),
		.kind = kind_find(sp->spec->kind.data, sp->spec->kind.len)->name,
		.spec = p->spec, .spec_len = p->spec_len,
		.spawned_us = tasktab_spawned_us(p->rec),
		.group = sp->spec->group.data,
		.group_len = sp->spec->group.len,
		.queued_us = tasktab_queued_us(p->rec),
	};
	int e = spawn_answered_by_task(p)
	        ? journal_spawn_any(&item, 1, cmd_spawn_done, p)
	        : journal_spawn(&item, 1, cmd_spawn_done, p);
	if (e < 0) {
		tasktab_discard(p->rec);
		(void)spawn_claim(p);   /* c is open: this thread's to answer */
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__UNAVAILABLE,
		                "journal: %s", strerror(-e));
		spawn_let_go(p);
		free(p);
	}
}
