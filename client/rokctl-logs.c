/*
 * rokctl-logs.c — `rokctl logs [-f] ID`: writes a task's output (its value,
 * exactly as the daemon holds it, no escaping) to standard output.
 *
 * Protocol v1 has no log stream: an exec task's captured output is its
 * TaskInfo.value.  So `logs` is a status request, and `logs -f` alternates
 * a join with a short timeout (which returns the moment the task ends)
 * with a status request, writing whatever the value grew by.  A daemon
 * that fills the value only when the task ends shows it at the end; one
 * that updates it while the task runs is followed live.  When a later
 * protocol adds a log request, this is the file that changes.
 *
 * Exit status: 0; with -f, the task's outcome as join reports it; 3 if the
 * id is unknown or not ours.
 */
#include <stdlib.h>

#include "rokctl.h"

/* How long each join of -f waits before looking at the output again. */
#define LOGS_POLL_MS 1000

static const struct rokctl_opt logs_opts[] = {
	{ KEY_FOLLOW, 'f', "follow", NULL,
	  "keep writing output until the task ends" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

/* Writes the part of t's value past *done; notes a truncated output. */
static void logs_write(struct rokctl *ctx, const rok_task_info *t, size_t *done)
{
	if (t->value.len > *done) {
		fwrite(t->value.data + *done, 1, t->value.len - *done, stdout);
		*done = t->value.len;
		fflush(stdout);
	}
	if (t->output_truncated && rok_state_finished(t->state))
		rokctl_err(ctx, 0, "task %llu: the daemon kept only part of "
			   "its output", (unsigned long long)t->id);
}

/* Fetches one task's status into *out; an exit status. */
static int logs_status(struct rokctl *ctx, uint64_t id, rok_reply **out)
{
	int rc = rok_client_status(ctx->client, &id, 1, out);

	if (rc != 0)
		return rokctl_fail(ctx, rc);
	if ((*out)->n_tasks != 1)
		return rokctl_err(ctx, ROKCTL_EXIT_UNREACHABLE, "the daemon "
				  "answered with %zu tasks", (*out)->n_tasks);
	if ((*out)->tasks[0].error.code != 0) {
		struct print_table tab = { 0 };

		print_tasks(ctx, &tab, (*out)->tasks, 1, -1);
		return ROKCTL_EXIT_REFUSED;
	}
	return ROKCTL_EXIT_OK;
}

static int logs_follow(struct rokctl *ctx, uint64_t id)
{
	size_t done = 0;
	rok_reply *r = NULL;
	int rc;

	for (;;) {
		rok_client_set_timeout(ctx->client, 0);
		rc = rok_client_join(ctx->client, &id, 1, LOGS_POLL_MS, &r);
		if (rc == 0) {
			if (r->n_tasks != 1) {
				rc = rokctl_err(ctx, ROKCTL_EXIT_UNREACHABLE,
						"the daemon answered with %zu "
						"tasks", r->n_tasks);
			} else if (r->tasks[0].error.code != 0) {
				struct print_table tab = { 0 };

				print_tasks(ctx, &tab, r->tasks, 1, -1);
				rc = ROKCTL_EXIT_REFUSED;
			} else if (ctx->json) {
				struct print_table tab = { 0 };

				print_tasks(ctx, &tab, r->tasks, 1, -1);
				rc = print_outcome(r->tasks, 1);
			} else {
				logs_write(ctx, &r->tasks[0], &done);
				rc = print_outcome(r->tasks, 1);
			}
			rok_reply_free(r);
			return rc;
		}
		if (rc != ROK_E_TIMED_OUT)
			return rokctl_fail(ctx, rc);
		if (ctx->json)
			continue;   /* one object at the end */
		rok_client_set_timeout(ctx->client, ROKCTL_CALL_TIMEOUT_MS);
		rc = logs_status(ctx, id, &r);
		if (rc == ROKCTL_EXIT_OK)
			logs_write(ctx, &r->tasks[0], &done);
		rok_reply_free(r);
		r = NULL;
		if (rc != ROKCTL_EXIT_OK)
			return rc;
	}
}

static int logs_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	struct print_table tab = { 0 };
	uint64_t *ids = NULL;
	rok_reply *r = NULL;
	size_t done = 0;
	int rc;

	rc = rokctl_ids(ctx, a, &ids);
	if (rc == ROKCTL_EXIT_OK)
		rc = rokctl_connect(ctx);
	if (rc != ROKCTL_EXIT_OK)
		goto out;
	if (a->seen[KEY_FOLLOW]) {
		rc = logs_follow(ctx, ids[0]);
		goto out;
	}
	rc = logs_status(ctx, ids[0], &r);
	if (rc != ROKCTL_EXIT_OK)
		goto out;
	if (ctx->json) {
		print_tasks(ctx, &tab, r->tasks, 1, -1);
		goto out;
	}
	logs_write(ctx, &r->tasks[0], &done);
	if (!rok_state_finished(r->tasks[0].state))
		rokctl_err(ctx, 0, "task %llu is %s; its output may be "
			   "incomplete (-f follows it to the end)",
			   (unsigned long long)ids[0],
			   rok_state_name(r->tasks[0].state));
out:
	rok_reply_free(r);
	free(ids);
	return rc;
}

const struct rokctl_cmd rokctl_cmd_logs = {
	.name = "logs",
	.operands = "ID",
	.synopsis = "[-f] ID",
	.summary = "Write a task's output",
	.details =
		"The output is the task's value as the daemon keeps it, written\n"
		"unchanged.  With -f, rokctl waits for the task to end, writing\n"
		"the output as it grows if the daemon reports it while running.\n",
	.opts = logs_opts,
	.min_args = 1,
	.max_args = 1,
	.exec = logs_exec,
};
