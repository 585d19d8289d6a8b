/*
 * rokctl-race.c — `rokctl race [-t TIMEOUT] [--cancel-rest] ID...`: waits
 * for the first of the tasks to finish and prints it (with --json, with
 * its position among the ids as "index").  Exit status by the winner's
 * outcome (0 succeeded, 1 not); 3 if the daemon refused; 5 on TIMEOUT.
 */
#include <stdlib.h>

#include "rokctl.h"

static const struct rokctl_opt race_opts[] = {
	{ KEY_TIMEOUT, 't', "timeout", "TIMEOUT",
	  "give up waiting after DURATION (the tasks keep running)" },
	{ KEY_CANCEL_REST, 0, "cancel-rest", NULL,
	  "cancel the other tasks once one finished" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static int race_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	struct print_table tab = { 0 };
	uint64_t *ids = NULL, ms;
	rok_reply *r = NULL;
	int rc;

	rc = rokctl_open_ids(ctx, a, &ids, &ms);
	if (rc != ROKCTL_EXIT_OK)
		goto out;
	rc = rok_client_race(ctx->client, ids, (size_t)a->argc, ms,
			     a->seen[KEY_CANCEL_REST], &r);
	if (rc == ROK_E_TIMED_OUT) {
		rc = rokctl_err(ctx, ROKCTL_EXIT_TIMEOUT, "none finished "
				"within %s", a->val[KEY_TIMEOUT]);
		goto out;
	}
	if (rc != 0) {
		rc = rokctl_fail(ctx, rc);
		goto out;
	}
	print_tasks(ctx, &tab, r->tasks, r->n_tasks, (long)r->index);
	rc = print_outcome(r->tasks, r->n_tasks);
out:
	rok_reply_free(r);
	free(ids);
	return rc;
}

const struct rokctl_cmd rokctl_cmd_race = {
	.name = "race",
	.operands = "ID...",
	.synopsis = "[-t TIMEOUT] [--cancel-rest] ID...",
	.summary = "Wait for the first task to finish",
	.opts = race_opts,
	.min_args = 1,
	.max_args = -1,
	.exec = race_exec,
};
