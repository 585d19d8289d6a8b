/*
 * request.c — one function pair per request of rok.v1: rok_client_send_X
 * builds the protobuf message on the stack around the caller's data
 * (borrowed, never copied: the message lives only until it is packed into
 * the output buffer by client_send) and queues it; rok_client_X is send +
 * wait + a check that the reply is the expected kind.
 *
 * Argument checks here are the ones the library can make without the
 * daemon (NULL pointers, empty id lists); everything else — unknown kinds,
 * bad durations in a sleep spec — is the daemon's to refuse, with a typed
 * error.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client-private.h"

/* protobuf-c's message structs take non-const pointers; packing only reads
 * them, so the caller's const data can be lent for the call. */
#define REQUEST_BORROW(p) ((void *)(uintptr_t)(p))

static ProtobufCBinaryData request_bytes(const void *p, size_t n)
{
	ProtobufCBinaryData d = { n, REQUEST_BORROW(p) };

	return d;
}

static ProtobufCBinaryData request_str(const char *s)
{
	return request_bytes(s, s != NULL ? strlen(s) : 0);
}

/*
 * Fills m from spec.  *bufs gets the array behind m's args and env (free it
 * after packing).  0, -EINVAL or -ENOMEM.
 */
static int request_spec(const rok_spec *spec, Rok__V1__TaskSpec *m,
			ProtobufCBinaryData **bufs)
{
	size_t n;
	ProtobufCBinaryData *v;

	*bufs = NULL;
	if (spec == NULL || (spec->n_args > 0 && spec->args == NULL) ||
	    (spec->n_env > 0 && spec->env == NULL) ||
	    (spec->stdin_len > 0 && spec->stdin_data == NULL))
		return -EINVAL;
	if (spec->n_args > SIZE_MAX / 2 / sizeof(*v) ||
	    spec->n_env > SIZE_MAX / 2 / sizeof(*v))
		return -ENOMEM;
	n = spec->n_args + spec->n_env;
	v = n > 0 ? calloc(n, sizeof(*v)) : NULL;
	if (n > 0 && v == NULL)
		return -ENOMEM;
	rok__v1__task_spec__init(m);
	m->kind = request_str(spec->kind != NULL && spec->kind[0] != '\0' ?
			      spec->kind : "exec");
	for (size_t i = 0; i < spec->n_args; i++) {
		if (spec->args[i] == NULL) {
			free(v);
			return -EINVAL;
		}
		v[i] = request_str(spec->args[i]);
	}
	for (size_t i = 0; i < spec->n_env; i++) {
		if (spec->env[i] == NULL) {
			free(v);
			return -EINVAL;
		}
		v[spec->n_args + i] = request_str(spec->env[i]);
	}
	m->n_args = spec->n_args;
	m->args = v;
	m->n_env = spec->n_env;
	m->env = v != NULL ? v + spec->n_args : NULL;
	m->timeout_ms = spec->timeout_ms;
	m->cwd = request_str(spec->cwd);
	m->clean_env = spec->clean_env;
	m->stdin = request_bytes(spec->stdin_data, spec->stdin_len);
	m->retry = spec->retry;
	m->kill_grace_ms = spec->kill_grace_ms;
	m->group = request_str(spec->group);
	if (spec->priority < 0 || spec->priority > ROK_PRIORITY_LOW) {
		free(v);
		return -EINVAL;
	}
	m->priority = (Rok__V1__Priority)spec->priority;
	/* Borrowed for the call, as the strings: packing only reads them. */
	m->n_after = spec->n_after;
	m->after = (uint64_t *)(uintptr_t)spec->after;
	m->n_after_any = spec->n_after_any;
	m->after_any = (uint64_t *)(uintptr_t)spec->after_any;
	m->not_before_us = spec->not_before_us;
	m->retry_failed = spec->retry_failed;
	m->backoff_ms = spec->backoff_ms;
	m->cpus = spec->cpus;
	m->mem_mib = spec->mem_mib;
	m->time_limit_ms = spec->time_limit_ms;
	*bufs = v;
	return 0;
}

static int request_bad(rok_client *c, const char *what)
{
	return client_fail(c, -EINVAL, "%s", what);
}

int request_finish(rok_client *c, int rc, uint64_t req_id, int type,
		   rok_reply **out)
{
	rok_reply *r;

	*out = NULL;
	if (rc != 0)
		return rc;
	rc = rok_client_wait(c, req_id, &r);
	if (rc != 0)
		return rc;
	if (r->type != type) {
		rok_reply_free(r);
		return client_fail(c, -EPROTO, "the daemon answered with the "
				   "wrong kind of reply");
	}
	*out = r;
	return 0;
}

/* ---- spawn ---------------------------------------------------------- */

int rok_client_send_spawn(rok_client *c, const rok_spec *spec, bool wait,
			  uint64_t wait_timeout_ms, uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__SpawnRequest body = ROK__V1__SPAWN_REQUEST__INIT;
	Rok__V1__TaskSpec m;
	ProtobufCBinaryData *bufs;
	int rc;

	*req_id = 0;
	rc = request_spec(spec, &m, &bufs);
	if (rc < 0)
		return client_fail(c, rc, "spawn: bad task spec");
	body.spec = &m;
	body.wait = wait;
	body.wait_timeout_ms = wait ? wait_timeout_ms : 0;
	req.body_case = ROK__V1__REQUEST__BODY_SPAWN;
	req.spawn = &body;
	rc = client_send(c, &req, req_id);
	free(bufs);
	return rc;
}

int rok_client_spawn(rok_client *c, const rok_spec *spec, uint64_t *id)
{
	rok_reply *r;
	uint64_t rid;
	int rc = rok_client_send_spawn(c, spec, false, 0, &rid);

	*id = 0;
	rc = request_finish(c, rc, rid, ROK_REPLY_SPAWN, &r);
	if (r == NULL)   /* exactly when rc != 0; spelt so for gcc */
		return rc;
	*id = r->id;
	rok_reply_free(r);
	return 0;
}

int rok_client_spawn_wait(rok_client *c, const rok_spec *spec,
			  uint64_t timeout_ms, rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_spawn(c, spec, true, timeout_ms, &rid);

	rc = request_finish(c, rc, rid, ROK_REPLY_SPAWN, out);
	if (rc == 0 && (*out)->n_tasks != 1) {
		rok_reply_free(*out);
		*out = NULL;
		return client_fail(c, -EPROTO, "the daemon answered a waiting "
				   "spawn without the finished task");
	}
	return rc;
}

/* ---- join, race, select --------------------------------------------- */

int rok_client_send_join(rok_client *c, const uint64_t *ids, size_t n,
			 uint64_t timeout_ms, uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__JoinRequest body = ROK__V1__JOIN_REQUEST__INIT;

	*req_id = 0;
	if (n == 0 || ids == NULL)
		return request_bad(c, "join: no task ids");
	body.n_ids = n;
	body.ids = REQUEST_BORROW(ids);
	body.timeout_ms = timeout_ms;
	req.body_case = ROK__V1__REQUEST__BODY_JOIN;
	req.join = &body;
	return client_send(c, &req, req_id);
}

int rok_client_join(rok_client *c, const uint64_t *ids, size_t n,
		    uint64_t timeout_ms, rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_join(c, ids, n, timeout_ms, &rid);

	return request_finish(c, rc, rid, ROK_REPLY_JOIN, out);
}

int rok_client_send_race(rok_client *c, const uint64_t *ids, size_t n,
			 uint64_t timeout_ms, bool cancel_rest,
			 uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__RaceRequest body = ROK__V1__RACE_REQUEST__INIT;

	*req_id = 0;
	if (n == 0 || ids == NULL)
		return request_bad(c, "race: no task ids");
	body.n_ids = n;
	body.ids = REQUEST_BORROW(ids);
	body.timeout_ms = timeout_ms;
	body.cancel_rest = cancel_rest;
	req.body_case = ROK__V1__REQUEST__BODY_RACE;
	req.race = &body;
	return client_send(c, &req, req_id);
}

int rok_client_race(rok_client *c, const uint64_t *ids, size_t n,
		    uint64_t timeout_ms, bool cancel_rest, rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_race(c, ids, n, timeout_ms, cancel_rest, &rid);

	return request_finish(c, rc, rid, ROK_REPLY_RACE, out);
}

int rok_client_send_select(rok_client *c, const rok_spec *specs, size_t n,
			   uint64_t timeout_ms, uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__SelectRequest body = ROK__V1__SELECT_REQUEST__INIT;
	Rok__V1__TaskSpec *m, **pm;
	ProtobufCBinaryData **bufs;
	int rc = 0;

	*req_id = 0;
	if (n == 0 || specs == NULL)
		return request_bad(c, "select: no task specs");
	m = calloc(n, sizeof(*m));
	pm = calloc(n, sizeof(*pm));
	bufs = calloc(n, sizeof(*bufs));
	if (m == NULL || pm == NULL || bufs == NULL)
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = request_spec(&specs[i], &m[i], &bufs[i]);
		pm[i] = &m[i];
	}
	if (rc == 0) {
		body.n_specs = n;
		body.specs = pm;
		body.timeout_ms = timeout_ms;
		req.body_case = ROK__V1__REQUEST__BODY_SELECT;
		req.select = &body;
		rc = client_send(c, &req, req_id);
	} else {
		rc = client_fail(c, rc, "select: bad task spec");
	}
	for (size_t i = 0; bufs != NULL && i < n; i++)
		free(bufs[i]);
	free(bufs);
	free(pm);
	free(m);
	return rc;
}

int rok_client_select(rok_client *c, const rok_spec *specs, size_t n,
		      uint64_t timeout_ms, rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_select(c, specs, n, timeout_ms, &rid);

	return request_finish(c, rc, rid, ROK_REPLY_SELECT, out);
}

/* ---- cancel, status, list ------------------------------------------- */

int rok_client_send_cancel(rok_client *c, const uint64_t *ids, size_t n,
			   uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__CancelRequest body = ROK__V1__CANCEL_REQUEST__INIT;

	*req_id = 0;
	if (n == 0 || ids == NULL)
		return request_bad(c, "cancel: no task ids");
	body.n_ids = n;
	body.ids = REQUEST_BORROW(ids);
	req.body_case = ROK__V1__REQUEST__BODY_CANCEL;
	req.cancel = &body;
	return client_send(c, &req, req_id);
}

int rok_client_cancel(rok_client *c, const uint64_t *ids, size_t n,
		      rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_cancel(c, ids, n, &rid);

	return request_finish(c, rc, rid, ROK_REPLY_CANCEL, out);
}

int rok_client_send_status(rok_client *c, const uint64_t *ids, size_t n,
			   uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__StatusRequest body = ROK__V1__STATUS_REQUEST__INIT;

	*req_id = 0;
	if (n == 0 || ids == NULL)
		return request_bad(c, "status: no task ids");
	body.n_ids = n;
	body.ids = REQUEST_BORROW(ids);
	req.body_case = ROK__V1__REQUEST__BODY_STATUS;
	req.status = &body;
	return client_send(c, &req, req_id);
}

int rok_client_status(rok_client *c, const uint64_t *ids, size_t n,
		      rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_status(c, ids, n, &rid);

	return request_finish(c, rc, rid, ROK_REPLY_STATUS, out);
}

int rok_client_send_logs(rok_client *c, uint64_t task_id, bool follow,
			 uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__LogsRequest body = ROK__V1__LOGS_REQUEST__INIT;

	*req_id = 0;
	body.task_id = task_id;
	body.follow = follow;
	req.body_case = ROK__V1__REQUEST__BODY_LOGS;
	req.logs = &body;
	return client_send(c, &req, req_id);
}

int rok_client_send_watch(rok_client *c, const uint64_t *ids, size_t n,
			  const char *group, const int *states,
			  size_t n_states, uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__WatchRequest body = ROK__V1__WATCH_REQUEST__INIT;
	Rok__V1__TaskState st[16];

	*req_id = 0;
	if (n_states > sizeof(st) / sizeof(st[0]))
		return -EINVAL;   /* there are fewer states than that */
	for (size_t i = 0; i < n_states; i++)
		st[i] = (Rok__V1__TaskState)states[i];
	body.n_ids = n;
	body.ids = REQUEST_BORROW(ids);
	if (group != NULL)
		body.group = request_bytes(group, strlen(group));
	body.n_states = n_states;
	body.states = st;
	req.body_case = ROK__V1__REQUEST__BODY_WATCH;
	req.watch = &body;
	return client_send(c, &req, req_id);
}

int rok_client_send_list(rok_client *c, int state, uint64_t after_id,
			 uint32_t limit, uint64_t *req_id)
{
	return rok_client_send_list_group(c, NULL, state, after_id, limit,
					  req_id);
}

int rok_client_list(rok_client *c, int state, uint64_t after_id,
		    uint32_t limit, rok_reply **out)
{
	return rok_client_list_group(c, NULL, state, after_id, limit, out);
}

int rok_client_send_list_group(rok_client *c, const char *group, int state,
			       uint64_t after_id, uint32_t limit,
			       uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__ListRequest body = ROK__V1__LIST_REQUEST__INIT;

	*req_id = 0;
	if (state < 0)
		return request_bad(c, "list: bad state");
	body.state = (Rok__V1__TaskState)state;
	body.after_id = after_id;
	body.limit = limit;
	body.group = request_str(group);
	req.body_case = ROK__V1__REQUEST__BODY_LIST;
	req.list = &body;
	return client_send(c, &req, req_id);
}

int rok_client_list_group(rok_client *c, const char *group, int state,
			  uint64_t after_id, uint32_t limit, rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_list_group(c, group, state, after_id, limit,
					    &rid);

	return request_finish(c, rc, rid, ROK_REPLY_LIST, out);
}

/* ---- groups --------------------------------------------------------- */

int rok_client_send_group(rok_client *c, int op, const rok_group_spec *g,
			  uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__GroupRequest body = ROK__V1__GROUP_REQUEST__INIT;
	uint32_t w[4];

	*req_id = 0;
	if (op < ROK_GROUP_LIST || op > ROK_GROUP_RESUME)
		return request_bad(c, "group: bad operation");
	if (op != ROK_GROUP_LIST && (g == NULL || g->name == NULL))
		return request_bad(c, "group: no group name");
	body.op = (Rok__V1__GroupRequest__Op)op;
	if (g != NULL) {
		body.name = request_str(g->name);
		body.has_parallel = g->has_parallel;
		body.parallel = g->parallel;
		body.policy = (Rok__V1__GroupPolicy)g->policy;
		body.backend = request_str(g->backend);
		body.has_partition = g->partition != NULL;
		body.partition = request_str(g->partition);
		if (g->has_weights) {
			memcpy(w, g->weights, sizeof(w));
			body.weights = w;
			body.n_weights = 4;
		}
	}
	req.body_case = ROK__V1__REQUEST__BODY_GROUP;
	req.group = &body;
	return client_send(c, &req, req_id);
}

int rok_client_group(rok_client *c, int op, const rok_group_spec *g,
		     rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_group(c, op, g, &rid);

	return request_finish(c, rc, rid, ROK_REPLY_GROUP, out);
}

/* ---- stats, ping ---------------------------------------------------- */

int rok_client_send_stats(rok_client *c, uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__StatsRequest body = ROK__V1__STATS_REQUEST__INIT;

	req.body_case = ROK__V1__REQUEST__BODY_STATS;
	req.stats = &body;
	return client_send(c, &req, req_id);
}

int rok_client_stats_reply(rok_client *c, rok_reply **out)
{
	uint64_t rid;
	int rc = rok_client_send_stats(c, &rid);

	return request_finish(c, rc, rid, ROK_REPLY_STATS, out);
}

int rok_client_stats(rok_client *c, rok_daemon_stats *out)
{
	rok_reply *r;
	int rc = rok_client_stats_reply(c, &r);

	memset(out, 0, sizeof(*out));
	if (r == NULL)
		return rc;
	*out = r->stats;
	rok_reply_free(r);
	return 0;
}

int rok_client_send_prune(rok_client *c, uint64_t older_than_ms,
			  bool keep_set, uint64_t keep, uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__PruneRequest body = ROK__V1__PRUNE_REQUEST__INIT;

	body.older_than_ms = older_than_ms;
	body.keep_set = keep_set;
	body.keep = keep;
	req.body_case = ROK__V1__REQUEST__BODY_PRUNE;
	req.prune = &body;
	return client_send(c, &req, req_id);
}

int rok_client_prune(rok_client *c, uint64_t older_than_ms, bool keep_set,
		     uint64_t keep, uint64_t *pruned)
{
	rok_reply *r;
	uint64_t rid;
	int rc = rok_client_send_prune(c, older_than_ms, keep_set, keep, &rid);

	if (pruned != NULL)
		*pruned = 0;
	rc = request_finish(c, rc, rid, ROK_REPLY_PRUNE, &r);
	if (r == NULL)
		return rc;
	if (pruned != NULL)
		*pruned = r->pruned;
	rok_reply_free(r);
	return 0;
}

int rok_client_send_ping(rok_client *c, const void *payload, size_t n,
			 uint64_t *req_id)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__PingRequest body = ROK__V1__PING_REQUEST__INIT;

	*req_id = 0;
	if (n > 0 && payload == NULL)
		return request_bad(c, "ping: NULL payload");
	body.payload = request_bytes(payload, n);
	req.body_case = ROK__V1__REQUEST__BODY_PING;
	req.ping = &body;
	return client_send(c, &req, req_id);
}

int rok_client_ping(rok_client *c, const void *payload, size_t n)
{
	rok_reply *r;
	uint64_t rid;
	int rc = rok_client_send_ping(c, payload, n, &rid);

	rc = request_finish(c, rc, rid, ROK_REPLY_PING, &r);
	if (r == NULL)
		return rc;
	if (r->payload.len != n || (n > 0 && memcmp(r->payload.data,
						     payload, n) != 0))
		rc = client_fail(c, -EPROTO, "ping: the daemon echoed "
				 "another payload");
	rok_reply_free(r);
	return rc;
}
