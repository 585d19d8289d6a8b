/*
 * rokctl-watch.c — `rokctl watch [-g GROUP] [ID...]`: prints one line per
 * task event as the daemon pushes it (rok.proto, WatchRequest), and the
 * join progress line that rokctl-join.c shows on a terminal.
 *
 * A line is "ID STATE" (an end adds the exit code or the reason); with
 * --json, one object per line: {"event":"state","id":..,"state":"..",
 * "time_us":..,"snapshot":..} (an end adds "exit_code", "signal",
 * "reason"), {"event":"snapshot_done"} and {"event":"lagged","dropped":N}.
 * Without --json the snapshot's end is silent and a lag is reported on
 * standard error.  Each line is flushed as it is written, so a pipe sees
 * events as they happen.
 *
 * With ids it exits once every one has ended, by their outcome as join
 * does (0 all succeeded, 1 one did not); without, it runs until the daemon
 * stops (0) or the connection breaks (4).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "rokctl.h"

static const struct rokctl_opt watch_opts[] = {
	{ KEY_GROUP, 'g', "group", "GROUP",
	  "only the tasks of GROUP (without ids)" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static void watch_print(struct rokctl *ctx, const rok_reply *r)
{
	const rok_task_info *t = r->n_tasks == 1 ? &r->tasks[0] : NULL;

	if (ctx->json) {
		struct json_obj o;

		json_begin(&o, stdout);
		if (r->snapshot_done) {
			json_str(&o, "event", "snapshot_done");
		} else if (r->lagged > 0) {
			json_str(&o, "event", "lagged");
			json_u64(&o, "dropped", r->lagged);
		} else {
			json_str(&o, "event", "state");
			json_u64(&o, "id", r->id);
			json_str(&o, "state", rok_state_name(r->state));
			json_u64(&o, "time_us", r->time_us);
			json_bool(&o, "snapshot", r->snapshot);
			if (t != NULL && t->error.code == 0) {
				json_i64_or_null(&o, "exit_code",
						 t->has_exit_code,
						 t->exit_code);
				json_i64_or_null(&o, "signal", t->has_signal,
						 t->signal);
				json_bytes_or_null(&o, "reason", t->reason.data,
						   t->reason.len);
			}
		}
		json_end(&o);
	} else if (r->lagged > 0) {
		rokctl_err(ctx, 0, "lagged: %llu events dropped; a fresh "
			   "snapshot follows", (unsigned long long)r->lagged);
		return;
	} else if (!r->snapshot_done) {
		printf("%llu %s", (unsigned long long)r->id,
		       rok_state_name(r->state));
		if (t != NULL && t->error.code == 0 && t->has_exit_code)
			printf(" exit %d", t->exit_code);
		else if (t != NULL && t->error.code == 0 && t->has_signal)
			printf(" signal %d", t->signal);
		if (t != NULL && t->error.code == 0 && t->reason.len > 0) {
			fputs(": ", stdout);
			print_escaped(stdout, t->reason.data, t->reason.len, 0);
		}
		putchar('\n');
	}
	fflush(stdout);
}

static int watch_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	uint64_t *ids = NULL, rid;
	rok_reply *r = NULL;
	int rc, outcome = ROKCTL_EXIT_OK;

	if (a->seen[KEY_GROUP] && a->argc > 0)
		return rokctl_usage(ctx, "-g and task ids do not go together");
	rc = rokctl_open_ids(ctx, a, &ids, NULL);
	if (rc != ROKCTL_EXIT_OK)
		goto out;
	rok_client_set_timeout(ctx->client, 0);   /* as long as it lasts */
	rc = rok_client_send_watch(ctx->client, ids, (size_t)a->argc,
				   a->val[KEY_GROUP], NULL, 0, &rid);
	if (rc != 0) {
		rc = rokctl_fail(ctx, rc);
		goto out;
	}
	for (;;) {
		rc = rok_client_wait(ctx->client, rid, &r);
		if (rc != 0) {
			rc = rokctl_fail(ctx, rc);
			goto out;
		}
		if (r->type != ROK_REPLY_WATCH) {
			rc = rokctl_err(ctx, ROKCTL_EXIT_UNREACHABLE, "the "
					"daemon answered with the wrong kind "
					"of reply");
			goto out;
		}
		if (r->end)
			break;
		watch_print(ctx, r);
		if (r->n_tasks == 1 && rok_state_finished(r->state)) {
			int o = print_outcome(r->tasks, 1);
			if (o > outcome)
				outcome = o;
		}
		rok_reply_free(r);
		r = NULL;
	}
	rc = a->argc > 0 ? outcome : ROKCTL_EXIT_OK;
out:
	rok_reply_free(r);
	free(ids);
	return rc;
}

const struct rokctl_cmd rokctl_cmd_watch = {
	.name = "watch",
	.operands = "[ID...]",
	.synopsis = "[-g GROUP] [ID...]",
	.summary = "Print task events as they happen",
	.details =
		"Prints one line per task state change as the daemon pushes it\n"
		"(with --json, one object per line): first the current state of\n"
		"the tasks (the given ids; else every queued or running task of\n"
		"yours, or of GROUP), then each change.  With ids, exits once all\n"
		"have ended, by their outcome as join does; without, runs until\n"
		"the daemon stops.\n",
	.opts = watch_opts,
	.min_args = 0,
	.max_args = -1,
	.exec = watch_exec,
};

int watch_progress_join(struct rokctl *ctx, const uint64_t *ids, size_t n,
			rok_reply **out)
{
	uint64_t jid, wid;
	size_t done = 0, failed = 0;
	rok_reply *r;
	int rc;

	*out = NULL;
	rc = rok_client_send_join(ctx->client, ids, n, 0, &jid);
	if (rc != 0)
		return rc;
	/*
	 * The watch of the same ids ends once all have ended, when the join
	 * is answered too (rok_client_wait keeps its reply meanwhile).  The
	 * progress is a nicety: a watch the daemon refuses (an id that is
	 * not ours, which join reports) only leaves the line out.
	 */
	if (rok_client_send_watch(ctx->client, ids, n, NULL, NULL, 0,
				  &wid) == 0) {
		while (rok_client_wait(ctx->client, wid, &r) == 0) {
			bool end = r->end;

			if (r->n_tasks == 1 && rok_state_finished(r->state)) {
				done++;
				if (r->state != ROK_TASK_SUCCEEDED)
					failed++;
				fprintf(stderr, "\r%zu/%zu done, %zu failed",
					done, n, failed);
				fflush(stderr);
			}
			rok_reply_free(r);
			if (end)
				break;
		}
	}
	if (done > 0)
		fputs("\r\033[K", stderr);   /* the line goes before results */
	rc = rok_client_wait(ctx->client, jid, out);
	if (rc == 0 && (*out)->type != ROK_REPLY_JOIN) {
		rok_reply_free(*out);
		*out = NULL;
		return -EPROTO;
	}
	return rc;
}
