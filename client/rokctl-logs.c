/*
 * rokctl-logs.c — `rokctl logs [-f] ID`: writes a task's captured output,
 * its standard output to ours and its standard error to ours, in the order
 * the task wrote them.
 *
 * One logs request, answered by a stream of replies that the daemon pushes
 * as the task writes (rok.proto, LogsRequest): each reply's chunks are
 * written at once, and the last reply (end) carries the task.  With -f the
 * stream lasts until the task has ended, so there is no client timeout.
 * When a task run again after a failure starts its output afresh, the
 * reply that begins the new run's output says so (run), and a note on our
 * standard error marks the place, as other notes do: the output itself
 * stays byte for byte what the task wrote.
 * With --json, the output itself is not printed: one JSON object for the
 * task at the end, as `status` prints it.
 *
 * Exit status: 0; with -f, the task's outcome as join reports it; 3 if the
 * id is unknown or not ours.
 */
#include <stdlib.h>

#include "rokctl.h"

static const struct rokctl_opt logs_opts[] = {
	{ KEY_FOLLOW, 'f', "follow", NULL,
	  "keep writing output until the task ends" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

/* Writes one reply's chunks, after the note of a later run's start if
 * they begin one; an exit status. */
static int logs_write(struct rokctl *ctx, uint64_t id, const rok_reply *r)
{
	if (r->run > 0)
		rokctl_err(ctx, 0, "task %llu: run %u's output follows",
			   (unsigned long long)id, (unsigned)r->run);
	for (size_t i = 0; i < r->n_chunks; i++) {
		FILE *to = r->chunks[i].stream == ROK_STDERR ? stderr : stdout;

		if (fwrite(r->chunks[i].data.data, 1, r->chunks[i].data.len,
			   to) != r->chunks[i].data.len || fflush(to) != 0)
			return rokctl_err(ctx, ROKCTL_EXIT_TASK,
					  "cannot write the output");
	}
	return ROKCTL_EXIT_OK;
}

int logs_stream(struct rokctl *ctx, uint64_t id, bool follow)
{
	uint64_t rid;
	rok_reply *r = NULL;
	int rc;

	if (follow)
		rok_client_set_timeout(ctx->client, 0);
	rc = rok_client_send_logs(ctx->client, id, follow, &rid);
	if (rc != 0)
		return rokctl_fail(ctx, rc);
	for (;;) {
		rc = rok_client_wait(ctx->client, rid, &r);
		if (rc != 0)
			return rokctl_fail(ctx, rc);
		if (r->type != ROK_REPLY_LOGS) {
			rok_reply_free(r);
			return rokctl_err(ctx, ROKCTL_EXIT_UNREACHABLE,
					  "the daemon answered with the wrong "
					  "kind of reply");
		}
		if (!ctx->json &&
		    (rc = logs_write(ctx, id, r)) != ROKCTL_EXIT_OK) {
			rok_reply_free(r);
			return rc;
		}
		if (r->end)
			break;
		rok_reply_free(r);
	}
	rc = ROKCTL_EXIT_OK;
	if (r->n_tasks == 1) {
		const rok_task_info *t = &r->tasks[0];

		if (ctx->json) {
			struct print_table tab = { 0 };

			print_tasks(ctx, &tab, t, 1, -1);
		}
		if (t->output_truncated)
			rokctl_err(ctx, 0, "task %llu: the daemon kept only "
				   "part of its output (max_task_output, "
				   "max_kept_output_per_user, "
				   "output_keep_free)",
				   (unsigned long long)id);
		if (follow)
			rc = print_outcome(t, 1);
		else if (!rok_state_finished(t->state))
			rokctl_err(ctx, 0, "task %llu is %s; its output may be "
				   "incomplete (-f follows it to the end)",
				   (unsigned long long)id,
				   rok_state_name(t->state));
	}
	rok_reply_free(r);
	return rc;
}

static int logs_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	uint64_t *ids = NULL;
	int rc;

	rc = rokctl_open_ids(ctx, a, &ids, NULL);
	if (rc == ROKCTL_EXIT_OK)
		rc = logs_stream(ctx, ids[0], a->seen[KEY_FOLLOW]);
	free(ids);
	return rc;
}

const struct rokctl_cmd rokctl_cmd_logs = {
	.name = "logs",
	.operands = "ID",
	.synopsis = "[-f] ID",
	.summary = "Write a task's output",
	.details =
		"Writes the output the daemon captured for the task: its standard\n"
		"output to standard output and its standard error to standard\n"
		"error, in the order the task wrote them.  With -f, keeps writing\n"
		"as the task writes (the daemon pushes it) until the task ends,\n"
		"then exits by its outcome as join does.  A task run again after\n"
		"a failure (--retry-failed) starts its output afresh: a note on\n"
		"standard error says where a later run's output begins.\n",
	.opts = logs_opts,
	.min_args = 1,
	.max_args = 1,
	.exec = logs_exec,
};
