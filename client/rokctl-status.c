/*
 * rokctl-status.c — `rokctl status ID...`: the current state of each task,
 * without waiting.  Exit status 0 whatever the states are (use join to
 * test an outcome), 3 if an id was unknown or not ours.
 */
#include <stdlib.h>

#include "rokctl.h"

static const struct rokctl_opt status_opts[] = {
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static int status_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	struct print_table tab = { 0 };
	uint64_t *ids = NULL;
	rok_reply *r = NULL;
	int rc;

	rc = rokctl_open_ids(ctx, a, &ids, NULL);
	if (rc != ROKCTL_EXIT_OK)
		goto out;
	rc = rok_client_status(ctx->client, ids, (size_t)a->argc, &r);
	if (rc != 0) {
		rc = rokctl_fail(ctx, rc);
		goto out;
	}
	print_tasks(ctx, &tab, r->tasks, r->n_tasks, -1);
	for (size_t i = 0; i < r->n_tasks; i++) {
		if (r->tasks[i].error.code != 0)
			rc = ROKCTL_EXIT_REFUSED;
	}
out:
	rok_reply_free(r);
	free(ids);
	return rc;
}

const struct rokctl_cmd rokctl_cmd_status = {
	.name = "status",
	.operands = "ID...",
	.synopsis = "ID...",
	.summary = "Show the current state of tasks",
	.opts = status_opts,
	.min_args = 1,
	.max_args = -1,
	.exec = status_exec,
};
