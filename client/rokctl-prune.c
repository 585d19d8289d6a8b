/*
 * rokctl-prune.c — `rokctl prune [--older-than DURATION] [--keep N]`:
 * deletes finished tasks (with their output) from the daemon's journal now.
 * Without options the daemon applies its configured retention.  Prints
 * "pruned N" (--json: {"pruned":N}).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "rokctl.h"

static const struct rokctl_opt prune_opts[] = {
	{ KEY_OLDER_THAN, 0, "older-than", "DURATION",
	  "tasks that finished more than DURATION ago" },
	{ KEY_KEEP, 0, "keep", "N",
	  "all but the N most recent finished tasks" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static int prune_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	uint64_t older = 0, keep = 0, pruned;
	int rc;

	if (a->seen[KEY_OLDER_THAN]) {
		rc = rokctl_duration(ctx, a, KEY_OLDER_THAN, 0, &older);
		if (rc != ROKCTL_EXIT_OK)
			return rc;
		if (older == 0)
			return rokctl_usage(ctx, "--older-than wants a duration "
			                    "above 0");
	}
	if (a->seen[KEY_KEEP]) {
		const char *s = a->val[KEY_KEEP];
		char *end;
		errno = 0;
		keep = strtoull(s, &end, 10);
		if (errno != 0 || *end != '\0' || end == s || s[0] == '-')
			return rokctl_usage(ctx, "--keep wants a count, not "
			                    "'%s'", s);
	}
	rc = rokctl_connect(ctx);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	rc = rok_client_prune(ctx->client, older, a->seen[KEY_KEEP], keep,
	                      &pruned);
	if (rc != 0)
		return rokctl_fail(ctx, rc);
	if (ctx->json)
		printf("{\"pruned\":%" PRIu64 "}\n", pruned);
	else
		printf("pruned %" PRIu64 "\n", pruned);
	return ROKCTL_EXIT_OK;
}

const struct rokctl_cmd rokctl_cmd_prune = {
	.name = "prune",
	.operands = "",
	.synopsis = "[--older-than DURATION] [--keep N]",
	.summary = "Delete finished tasks from the journal",
	.details = "Deletes finished tasks, and their output files, from the\n"
	           "daemon's journal: those that finished more than DURATION\n"
	           "ago and those beyond the N most recent finished ones.\n"
	           "Without options, the daemon's retention (keep_finished,\n"
	           "keep_finished_for in rokd.conf) is applied now.  Queued\n"
	           "and running tasks are never pruned.  Root only, on a\n"
	           "system daemon.\n",
	.opts = prune_opts,
	.min_args = 0,
	.max_args = 0,
	.exec = prune_exec,
};
