/*
 * cmd-spawn.c — spawn one task; with wait, answer when it has finished.
 */
#include <errno.h>
#include <stdio.h>

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
	if (k->check(spec, err, len) < 0)
		return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	int e = tasktab_create(conn_uid(c), k, spec, out);
	if (e == -EAGAIN) {
		snprintf(err, len, "too many queued tasks (limit %llu)",
		         (unsigned long long)config.max_queued);
		return ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED;
	}
	if (e < 0) {
		snprintf(err, len, "out of memory");
		return ROK__V1__ERROR_CODE__INTERNAL;
	}
	return 0;
}

void cmd_spawn(struct conn *c, const Request *req)
{
	const Rok__V1__SpawnRequest *sp = req->spawn;
	/* Waiting with no time limit: the task answers when it ends, with no
	 * waiting task of its own.  The wait is counted before the task
	 * exists, so a refusal leaves nothing behind. */
	bool answered_by_task = sp->wait && sp->wait_timeout_ms == 0;
	struct rtask *r;
	char err[160];

	if (answered_by_task && !conn_begin_wait(c, req->id))
		return;   /* answered: too many requests in flight */
	int code = cmd_create_task(c, sp->spec, &r, err, sizeof(err));
	if (code != 0) {
		if (answered_by_task)
			reply_post_error(c, req->id, (ErrorCode)code, err);
		else
			conn_send_error(c, req->id, (ErrorCode)code, "%s", err);
		return;
	}
	uint64_t id = tasktab_id(r);
	if (answered_by_task) {
		struct rt_reply reply = { c, req->id };
		(void)tasktab_start(r, sp->spec, &reply);
		return;
	}
	/* A task that fails to start is recorded as failed: still an id. */
	(void)tasktab_start(r, sp->spec, NULL);
	if (sp->wait) {
		(void)waiter_start(c, req->id, WAIT_SPAWN, &id, 1,
		                   sp->wait_timeout_ms, false);
		return;
	}
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__SpawnReply sr = ROK__V1__SPAWN_REPLY__INIT;
	sr.id = id;
	resp.id = req->id;
	resp.body_case = ROK__V1__RESPONSE__BODY_SPAWN;
	resp.spawn = &sr;
	conn_send(c, &resp);
}
