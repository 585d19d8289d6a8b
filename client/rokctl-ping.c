/*
 * rokctl-ping.c — `rokctl ping`: connects (hello), makes one round trip and
 * prints who answered and how fast.  Exit status 0 if the daemon answers,
 * 4 if it cannot be reached: a readiness probe for scripts.
 */
#include <string.h>
#include <time.h>

#include "json.h"
#include "rokctl.h"

static const struct rokctl_opt ping_opts[] = {
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static int ping_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	static const char payload[] = "rokctl ping";
	const rok_server_info *srv;
	struct timespec t0, t1;
	uint64_t us;
	int rc;

	(void)a;
	rc = rokctl_connect(ctx);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = rok_client_ping(ctx->client, payload, sizeof(payload) - 1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc != 0)
		return rokctl_fail(ctx, rc);
	us = (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000 +
			(t1.tv_nsec - t0.tv_nsec) / 1000);
	srv = rok_client_server(ctx->client);
	if (ctx->json) {
		struct json_obj o;

		json_begin(&o, stdout);
		json_str(&o, "socket", rok_client_path(ctx->client));
		json_str(&o, "daemon", srv->software_version);
		json_u64(&o, "protocol_version", srv->protocol_version);
		json_u64(&o, "uid", srv->uid);
		json_u64(&o, "max_frame", srv->max_frame);
		json_u64(&o, "max_in_flight", srv->max_in_flight);
		json_u64(&o, "rtt_us", us);
		json_end(&o);
	} else {
		printf("pong from ");
		print_escaped(stdout, srv->software_version,
			      strlen(srv->software_version), 0);
		printf(" at %s (protocol %u, uid %u): %llu.%03llu ms\n",
		       rok_client_path(ctx->client), srv->protocol_version,
		       srv->uid, (unsigned long long)(us / 1000),
		       (unsigned long long)(us % 1000));
	}
	return ROKCTL_EXIT_OK;
}

const struct rokctl_cmd rokctl_cmd_ping = {
	.name = "ping",
	.operands = "",
	.synopsis = "",
	.summary = "Check that the daemon answers",
	.opts = ping_opts,
	.min_args = 0,
	.max_args = 0,
	.exec = ping_exec,
};
