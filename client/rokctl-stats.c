/*
 * rokctl-stats.c — `rokctl stats`: the daemon's counters (workers, tasks
 * by state, scheduler counters), one "name value" line each, the
 * metrics' tasks_total and histograms (rokctl-print.c), then one
 * "group NAME running R/LIMIT queued U/H/N/L" line per group; or one JSON
 * object with --json (groups in "groups"); or with --prometheus the
 * Prometheus text format (the library formats it, as rokd does for
 * metrics_listen).
 */
#include "rokctl.h"

static const struct rokctl_opt stats_opts[] = {
	{ KEY_PROMETHEUS, 0, "prometheus", NULL,
	  "print every metric in the Prometheus text format" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static int stats_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	rok_reply *r;
	int rc;

	if (a->seen[KEY_PROMETHEUS] && ctx->json)
		return rokctl_usage(ctx, "--prometheus and --json exclude each "
				    "other");
	rc = rokctl_connect(ctx);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	rc = rok_client_stats_reply(ctx->client, &r);
	if (rc != 0)
		return rokctl_fail(ctx, rc);
	if (a->seen[KEY_PROMETHEUS])
		fwrite(r->prometheus.data, 1, r->prometheus.len, stdout);
	else
		print_stats(ctx, &r->stats, r->groups, r->n_groups);
	rok_reply_free(r);
	return ROKCTL_EXIT_OK;
}

const struct rokctl_cmd rokctl_cmd_stats = {
	.name = "stats",
	.operands = "",
	.synopsis = "[--prometheus]",
	.summary = "Show the daemon's counters",
	.opts = stats_opts,
	.min_args = 0,
	.max_args = 0,
	.exec = stats_exec,
};
