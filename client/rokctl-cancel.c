/*
 * rokctl-cancel.c — `rokctl cancel ID...`: asks the daemon to cancel the
 * tasks.  Cancellation is cooperative, so this returns at once; `join`
 * shows when a task has ended.  Prints nothing for an accepted id (with
 * --json: {"id":N,"cancel":"requested"}); exit status 3 if an id was
 * unknown or not ours.
 */
#include <stdlib.h>

#include "json.h"
#include "rokctl.h"

static const struct rokctl_opt cancel_opts[] = {
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static int cancel_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	uint64_t *ids = NULL;
	rok_reply *r = NULL;
	int rc;

	rc = rokctl_open_ids(ctx, a, &ids, NULL);
	if (rc != ROKCTL_EXIT_OK)
		goto out;
	rc = rok_client_cancel(ctx->client, ids, (size_t)a->argc, &r);
	if (rc != 0) {
		rc = rokctl_fail(ctx, rc);
		goto out;
	}
	for (size_t i = 0; i < (size_t)a->argc; i++) {
		const rok_error *e = i < r->n_results ? &r->results[i] : NULL;
		struct json_obj o;

		if (e == NULL) {
			rc = rokctl_err(ctx, ROKCTL_EXIT_UNREACHABLE, "task %llu: "
					"no answer from the daemon",
					(unsigned long long)ids[i]);
			continue;
		}
		if (e->code != 0 && rc < ROKCTL_EXIT_REFUSED)
			rc = ROKCTL_EXIT_REFUSED;
		if (ctx->json) {
			json_begin(&o, stdout);
			json_u64(&o, "id", ids[i]);
			if (e->code == 0) {
				json_str(&o, "cancel", "requested");
			} else {
				json_str(&o, "error", rok_error_name(e->code));
				json_bytes(&o, "message", e->message.data,
					   e->message.len);
			}
			json_end(&o);
		} else if (e->code != 0) {
			fflush(stdout);
			fprintf(stderr, "%s: cancel: task %llu: ", ctx->prog,
				(unsigned long long)ids[i]);
			if (e->message.len > 0) {
				print_escaped(stderr, e->message.data,
					      e->message.len, 0);
				fputc(' ', stderr);
			}
			fprintf(stderr, "(%s)\n", rok_error_name(e->code));
		}
	}
out:
	rok_reply_free(r);
	free(ids);
	return rc;
}

const struct rokctl_cmd rokctl_cmd_cancel = {
	.name = "cancel",
	.operands = "ID...",
	.synopsis = "ID...",
	.summary = "Request cancellation of tasks",
	.opts = cancel_opts,
	.min_args = 1,
	.max_args = -1,
	.exec = cancel_exec,
};
