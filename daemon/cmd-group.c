/*
 * cmd-group.c — list and manage groups (rokctl group ...).
 *
 * LIST is answered at once on the reactor thread, for everyone.  The other
 * operations are for root and the user rokd runs as; they are checked on
 * the reactor thread and carried out on the blocking pool, one at a time
 * (cmd_group_admin), because each writes the journal's groups table
 * (group_store: an fsync) before it changes the group in memory and
 * answers.  In steps, each under queue.c's lock: look the group up and
 * decide (RM marks it `removing`, so no task enters it meanwhile); for RM,
 * count the group's unfinished tasks in the task table (those waiting in
 * the gate hold no ticket yet) and refuse if there are any; write the
 * row; apply.  A write that fails changes nothing in memory.  A spawn
 * checked just before `removing` was set may still be started after the
 * rm: it fails then, "its group does not exist".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group.h"

static pthread_mutex_t cmd_group_admin = PTHREAD_MUTEX_INITIALIZER;

struct group_job {
	struct conn *conn;
	uint64_t req_id;
	int op;
	char name[GROUP_NAME_MAX + 1];
	struct group_settings set;  /* the request's fields */
};

/* Answers with the named group as it is now (none: an empty list). */
static void cmd_group_reply(struct conn *c, uint64_t req_id, const char *name,
                            bool on_reactor)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__GroupReply gr = ROK__V1__GROUP_REPLY__INIT;
	Rok__V1__GroupInfo **infos = NULL;
	/* "" (after RM): none; NULL: all. */
	ssize_t n = name != NULL && name[0] == '\0' ? 0
	            : queue_group_infos(name, name != NULL ? strlen(name) : 0,
	                                &infos);

	if (n < 0) {
		if (on_reactor)
			conn_send_error(c, req_id, ROK__V1__ERROR_CODE__INTERNAL,
			                "out of memory");
		else
			reply_post_error(c, req_id,
			                 ROK__V1__ERROR_CODE__INTERNAL,
			                 "out of memory");
		return;
	}
	gr.groups = infos;
	gr.n_groups = (size_t)n;
	resp.id = req_id;
	resp.body_case = ROK__V1__RESPONSE__BODY_GROUP;
	resp.group = &gr;
	if (on_reactor)
		conn_send(c, &resp);
	else
		reply_post(c, &resp);
	free(infos);
}

/* Overlays the fields set in `req` onto the full settings *s. */
static void cmd_group_overlay(struct group_settings *s,
                              const struct group_settings *req)
{
	if (req->has_parallel)
		s->parallel = req->parallel;
	if (req->has_policy)
		s->policy = req->policy;
	if (req->has_weights)
		memcpy(s->weights, req->weights, sizeof(s->weights));
	if (req->has_backend)
		memcpy(s->backend, req->backend, sizeof(s->backend));
	if (req->has_partition)
		memcpy(s->partition, req->partition, sizeof(s->partition));
	if (req->has_paused)
		s->paused = req->paused;
}

/* Under the lock: decides; 0, or an ErrorCode with a message. */
static int cmd_group_decide(struct group_job *j, struct group_settings *row,
                            char *err, size_t len)
{
	struct group *g = group_find(j->name, strlen(j->name));

	if (j->op == ROK__V1__GROUP_REQUEST__OP__ADD) {
		if (g != NULL) {
			snprintf(err, len, "group %s exists (change it with "
			         "group set)", j->name);
			return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
		}
		size_t n = 0;
		for (g = group_first(); g != NULL; g = g->next)
			n++;
		if (n >= GROUP_COUNT_MAX) {
			snprintf(err, len, "too many groups (%d at most)",
			         GROUP_COUNT_MAX);
			return ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED;
		}
		*row = (struct group_settings){
			.has_parallel = true, .has_policy = true,
			.has_weights = true, .has_backend = true,
			.has_paused = true, .has_partition = true,
			.policy = QPOLICY_STRICT,
		};
		memcpy(row->weights, qcore_default_weights,
		       sizeof(row->weights));
		snprintf(row->backend, sizeof(row->backend), "local");
		cmd_group_overlay(row, &j->set);
		return 0;
	}
	if (g == NULL || g->removing) {
		snprintf(err, len, "no group %s (see rokctl group list)",
		         j->name);
		return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	}
	if (j->op == ROK__V1__GROUP_REQUEST__OP__RM) {
		if (strcmp(g->name, "default") == 0) {
			snprintf(err, len, "the group default cannot be removed");
			return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
		}
		if (g->tickets > 0) {
			snprintf(err, len, "group %s has %llu queued or running "
			         "tasks: cancel them or let them end first",
			         j->name, (unsigned long long)g->tickets);
			return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
		}
		g->removing = true;
		return 0;
	}
	group_settings_of(g, row);
	cmd_group_overlay(row, &j->set);
	return 0;
}

/* Blocking pool: carries a managing request out and answers it. */
static void *cmd_group_run(void *arg)
{
	struct group_job *j = arg;
	struct group_settings row;
	char err[256];
	int code;

	pthread_mutex_lock(&cmd_group_admin);
	queue_lock();
	code = cmd_group_decide(j, &row, err, sizeof(err));
	queue_unlock();
	bool rm = j->op == ROK__V1__GROUP_REQUEST__OP__RM;
	bool marked = code == 0 && rm;   /* decided: `removing` set */
	/* Tasks of the group still in the gate hold no ticket yet; with
	 * `removing` set no new one is accepted (kind_check), so this
	 * count after it sees them all. */
	uint64_t gated = marked ? tasktab_group_unfinished(j->name) : 0;
	if (gated > 0) {
		snprintf(err, sizeof(err), "group %s has %llu queued or running "
		         "tasks: cancel them or let them end first", j->name,
		         (unsigned long long)gated);
		code = ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	} else if (code == 0 && group_store(j->name, rm ? NULL : &row, err,
	                                    sizeof(err)) < 0) {
		code = ROK__V1__ERROR_CODE__UNAVAILABLE;
	}
	if (marked && code != 0) {   /* not removed after all */
		queue_lock();
		group_find(j->name, strlen(j->name))->removing = false;
		queue_unlock();
	}
	if (code == 0) {
		queue_lock();
		struct group *g = group_find(j->name, strlen(j->name));
		if (rm) {
			group_remove(g);
		} else {
			if (g == NULL)
				g = group_add(j->name, strlen(j->name));
			if (g != NULL) {
				group_apply(g, &row);
				queue_run_locked(g);
			} else {
				code = ROK__V1__ERROR_CODE__INTERNAL;
				snprintf(err, sizeof(err), "out of memory (the "
				         "group is in the journal: it exists "
				         "after a restart)");
			}
		}
		queue_unlock();
	}
	pthread_mutex_unlock(&cmd_group_admin);
	if (code != 0)
		reply_post_error(j->conn, j->req_id, (ErrorCode)code, err);
	else
		cmd_group_reply(j->conn, j->req_id, rm ? "" : j->name, false);
	free(j);
	return NULL;
}

/* The request's settings into j: 0, or -1 with a message. */
static int cmd_group_settings(const Rok__V1__GroupRequest *gr,
                              struct group_job *j, char *err, size_t len)
{
	struct group_settings *s = &j->set;

	if (gr->op == ROK__V1__GROUP_REQUEST__OP__PAUSE ||
	    gr->op == ROK__V1__GROUP_REQUEST__OP__RESUME) {
		s->has_paused = true;
		s->paused = gr->op == ROK__V1__GROUP_REQUEST__OP__PAUSE;
		return 0;
	}
	if (gr->op == ROK__V1__GROUP_REQUEST__OP__RM)
		return 0;
	s->has_parallel = gr->has_parallel;
	s->parallel = gr->parallel;
	s->has_policy = gr->policy != ROK__V1__GROUP_POLICY__GROUP_POLICY_UNSPECIFIED;
	s->policy = (int)gr->policy;
	if (gr->backend.len > 0) {
		if (gr->backend.len >= sizeof(s->backend)) {
			snprintf(err, len, "unknown backend (local)");
			return -1;
		}
		memcpy(s->backend, gr->backend.data, gr->backend.len);
		s->has_backend = true;
	}
	if (gr->has_partition) {
		if (gr->partition.len >= sizeof(s->partition) ||
		    memchr(gr->partition.data, '\0', gr->partition.len) != NULL) {
			snprintf(err, len, "partition: at most %d of A-Z a-z "
			         "0-9 _ . - ,", GROUP_PARTITION_MAX - 1);
			return -1;
		}
		if (gr->partition.len > 0)
			memcpy(s->partition, gr->partition.data,
			       gr->partition.len);
		s->has_partition = true;
	}
	if (gr->n_weights > 0) {
		if (gr->n_weights != QCLS_N) {
			snprintf(err, len, "weights: four of them, urgent, high, "
			         "normal, low");
			return -1;
		}
		for (int c = 0; c < QCLS_N; c++)
			s->weights[c] = gr->weights[c];
		s->has_weights = true;
	}
	return group_settings_check(s, err, len);
}

void cmd_group(struct conn *c, const Request *req)
{
	const Rok__V1__GroupRequest *gr = req->group;
	char err[256];

	if (gr->op == ROK__V1__GROUP_REQUEST__OP__LIST) {
		cmd_group_reply(c, req->id, NULL, true);
		return;
	}
	if ((unsigned)gr->op > ROK__V1__GROUP_REQUEST__OP__RESUME) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "unknown group operation %d", (int)gr->op);
		return;
	}
	uid_t uid = conn_uid(c);
	if (uid != 0 && uid != geteuid()) {
		conn_send_error(c, req->id,
		                ROK__V1__ERROR_CODE__PERMISSION_DENIED,
		                "only root or the user rokd runs as (uid %u) may "
		                "manage groups", (unsigned)geteuid());
		return;
	}
	if (!group_name_ok(gr->name.data, gr->name.len)) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "a group name is 1..%d letters, digits, _ and -",
		                GROUP_NAME_MAX);
		return;
	}
	struct group_job *j = calloc(1, sizeof(*j));
	if (j == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	j->conn = c;
	j->req_id = req->id;
	j->op = (int)gr->op;
	memcpy(j->name, gr->name.data, gr->name.len);
	if (cmd_group_settings(gr, j, err, sizeof(err)) < 0) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "%s", err);
		free(j);
		return;
	}
	if (conn_offload(c, req->id, cmd_group_run, j) < 0)
		free(j);
}
