/*
 * rokctl-join.c — `rokctl join [-t TIMEOUT] ID...`: waits until every task
 * has finished and prints each, in the order given.  Exit status: 0 if
 * all succeeded, 1 if one did not, 3 if an id was unknown or not ours,
 * 5 if TIMEOUT passed first (the tasks keep running; nothing is printed).
 * With several ids and standard error a terminal, it shows "37/100 done,
 * 2 failed" there as they end (rokctl-watch.c); not in a pipe or a log.
 */
#include <stdlib.h>
#include <unistd.h>

#include "rokctl.h"

static const struct rokctl_opt join_opts[] = {
	{ KEY_TIMEOUT, 't', "timeout", "TIMEOUT",
	  "give up waiting after DURATION (the tasks keep running)" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static int join_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	struct print_table tab = { 0 };
	uint64_t *ids = NULL, ms;
	rok_reply *r = NULL;
	int rc;

	rc = rokctl_open_ids(ctx, a, &ids, &ms);
	if (rc != ROKCTL_EXIT_OK)
		goto out;
	/* Many ids, no timeout, a person at a terminal: progress on stderr
	 * (a timed join would outlive a watch of tasks still running). */
	if (a->argc > 1 && ms == 0 && !ctx->json && isatty(STDERR_FILENO))
		rc = watch_progress_join(ctx, ids, (size_t)a->argc, &r);
	else
		rc = rok_client_join(ctx->client, ids, (size_t)a->argc, ms,
				     &r);
	if (rc == ROK_E_TIMED_OUT) {
		rc = rokctl_err(ctx, ROKCTL_EXIT_TIMEOUT, "not all finished "
				"within %s", a->val[KEY_TIMEOUT]);
		goto out;
	}
	if (rc != 0) {
		rc = rokctl_fail(ctx, rc);
		goto out;
	}
	print_tasks(ctx, &tab, r->tasks, r->n_tasks, -1);
	rc = print_outcome(r->tasks, r->n_tasks);
	if (r->n_tasks != (size_t)a->argc && rc < ROKCTL_EXIT_UNREACHABLE)
		rc = rokctl_err(ctx, ROKCTL_EXIT_UNREACHABLE, "asked for %d "
				"tasks, the daemon answered %zu", a->argc,
				r->n_tasks);
out:
	rok_reply_free(r);
	free(ids);
	return rc;
}

const struct rokctl_cmd rokctl_cmd_join = {
	.name = "join",
	.operands = "ID...",
	.synopsis = "[-t TIMEOUT] ID...",
	.summary = "Wait for tasks and print their results",
	.opts = join_opts,
	.min_args = 1,
	.max_args = -1,
	.exec = join_exec,
};
