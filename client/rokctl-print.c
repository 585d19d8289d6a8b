/*
 * rokctl-print.c — how rokctl shows tasks and counters: an aligned table
 * for people, one JSON object per line with --json (DESIGN §3).
 *
 * Human table: ID STATE KIND EXIT TIME GROUP PRIO VALUE.  EXIT is the
 * exit code, a signal name (SIGKILL) or "-"; TIME is how long the task ran
 * (so far); GROUP and PRIO its group and priority class ("-": an older
 * daemon's); a queued task shows why it waits in brackets as its VALUE;
 * VALUE is the result with control characters and invalid UTF-8 escaped,
 * since it is bytes from a program and the terminal must not interpret it;
 * a task without a value shows its failure reason in brackets; an exec
 * task whose output the daemon capped says "[output truncated]".
 *
 * JSON object per task: id, state, kind, exit_code (number or null),
 * signal (number or null), value (+ value_base64 when value is not valid
 * UTF-8, see json.c), output_truncated, reason (string or null), uid,
 * retries, run (1: the first), spawned_us / started_us / finished_us (µs
 * since the epoch, or null), args, group, priority (its class's name),
 * waiting (why a queued task waits, or null), not_before_us (a queued task
 * that waits for a time; absent otherwise).  A queued task's VALUE column
 * shows why it waits in brackets.  An id the daemon could not look up gives
 * {"id":N,"error":"not_found","message":"..."} instead.
 */
#include <string.h>
#include <sys/time.h>

#include "json.h"
#include "rokctl.h"

/* Signal numbers are the same on every Linux architecture for these. */
static const char *print_signame(int sig)
{
	static const struct { int n; const char *name; } tab[] = {
		{ 1, "SIGHUP" }, { 2, "SIGINT" }, { 3, "SIGQUIT" },
		{ 4, "SIGILL" }, { 5, "SIGTRAP" }, { 6, "SIGABRT" },
		{ 7, "SIGBUS" }, { 8, "SIGFPE" }, { 9, "SIGKILL" },
		{ 10, "SIGUSR1" }, { 11, "SIGSEGV" }, { 12, "SIGUSR2" },
		{ 13, "SIGPIPE" }, { 14, "SIGALRM" }, { 15, "SIGTERM" },
		{ 24, "SIGXCPU" }, { 25, "SIGXFSZ" },
	};

	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		if (tab[i].n == sig)
			return tab[i].name;
	}
	return NULL;
}

void print_escaped(FILE *f, const void *data, size_t len, size_t max)
{
	const uint8_t *s = data;
	size_t i = 0, shown = 0;

	while (i < len) {
		uint32_t cp;
		size_t n = json_utf8_len(s + i, len - i, &cp);

		if (max > 0 && shown >= max) {
			fputs("...", f);
			return;
		}
		shown++;
		if (n == 0) {
			fprintf(f, "\\x%02x", s[i]);
			i++;
			continue;
		}
		if (cp == '\n')
			fputs("\\n", f);
		else if (cp == '\t')
			fputs("\\t", f);
		else if (cp == '\r')
			fputs("\\r", f);
		else if (cp == '\\')
			fputs("\\\\", f);
		else if (cp < 0x20 || cp == 0x7f)
			fprintf(f, "\\x%02x", (unsigned)cp);
		else if (cp >= 0x80 && cp < 0xa0)   /* C1 controls */
			fprintf(f, "\\u%04x", (unsigned)cp);
		else
			fwrite(s + i, 1, n, f);
		i += n;
	}
}

static uint64_t print_now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

/* The cells of one row that need formatting. */
struct print_row {
	char id[24], exit[16], time[32];
	const char *state;
	const char *kind;
	const char *group;
	const char *prio;
};

static void print_row(const rok_task_info *t, struct print_row *r, uint64_t now)
{
	const char *sig;

	snprintf(r->id, sizeof(r->id), "%llu", (unsigned long long)t->id);
	r->state = rok_state_name(t->state);
	r->kind = t->kind.len > 0 ? (const char *)t->kind.data : "-";
	r->group = t->group.len > 0 ? (const char *)t->group.data : "-";
	r->prio = rok_priority_name(t->priority);
	if (t->has_exit_code)
		snprintf(r->exit, sizeof(r->exit), "%d", t->exit_code);
	else if (t->has_signal && (sig = print_signame(t->signal)) != NULL)
		snprintf(r->exit, sizeof(r->exit), "%s", sig);
	else if (t->has_signal)
		snprintf(r->exit, sizeof(r->exit), "SIG%d", t->signal);
	else
		snprintf(r->exit, sizeof(r->exit), "-");
	if (t->started_us != 0) {
		uint64_t end = t->finished_us != 0 ? t->finished_us : now;

		rok_duration_format(end > t->started_us ?
				    (end - t->started_us) / 1000 : 0,
				    r->time, sizeof(r->time));
	} else {
		snprintf(r->time, sizeof(r->time), "-");
	}
}

static int print_width(const char *s, int min)
{
	int n = (int)strlen(s);

	return n > min ? n : min;
}

static void print_task_error(struct rokctl *ctx, const rok_task_info *t)
{
	if (ctx->json) {
		struct json_obj o;

		json_begin(&o, stdout);
		json_u64(&o, "id", t->id);
		json_str(&o, "error", rok_error_name(t->error.code));
		json_bytes(&o, "message", t->error.message.data,
			   t->error.message.len);
		json_end(&o);
		return;
	}
	fflush(stdout);
	fprintf(stderr, "%s: %s: task %llu: ", ctx->prog, ctx->cmd->name,
		(unsigned long long)t->id);
	if (t->error.message.len > 0) {
		print_escaped(stderr, t->error.message.data,
			      t->error.message.len, 0);
		fputc(' ', stderr);
	}
	fprintf(stderr, "(%s)\n", rok_error_name(t->error.code));
}

static void print_json_task(const rok_task_info *t, long index)
{
	struct json_obj o;

	json_begin(&o, stdout);
	json_u64(&o, "id", t->id);
	json_str(&o, "state", rok_state_name(t->state));
	json_bytes(&o, "kind", t->kind.data, t->kind.len);
	json_i64_or_null(&o, "exit_code", t->has_exit_code, t->exit_code);
	json_i64_or_null(&o, "signal", t->has_signal, t->signal);
	json_bytes(&o, "value", t->value.data, t->value.len);
	json_bool(&o, "output_truncated", t->output_truncated);
	json_bytes_or_null(&o, "reason", t->reason.data, t->reason.len);
	json_u64(&o, "uid", t->uid);
	json_u64(&o, "retries", t->retries);
	json_u64(&o, "run", t->run > 0 ? t->run : 1);
	if (t->not_before_us != 0)
		json_u64(&o, "not_before_us", t->not_before_us);
	const struct { const char *key; uint64_t v; } times[] = {
		{ "spawned_us", t->spawned_us },
		{ "started_us", t->started_us },
		{ "finished_us", t->finished_us },
	};
	for (size_t i = 0; i < 3; i++) {
		if (times[i].v != 0)
			json_u64(&o, times[i].key, times[i].v);
		else
			json_null(&o, times[i].key);
	}
	json_key(&o, "args");
	putc('[', stdout);
	for (size_t i = 0; i < t->n_args; i++) {
		if (i > 0)
			putc(',', stdout);
		json_string(stdout, t->args[i].data, t->args[i].len);
	}
	putc(']', stdout);
	json_bytes_or_null(&o, "group", t->group.data, t->group.len);
	json_str(&o, "priority", rok_priority_name(t->priority));
	json_bytes_or_null(&o, "waiting", t->waiting.data, t->waiting.len);
	if (index >= 0)
		json_i64(&o, "index", index);
	json_end(&o);
}

void print_tasks(struct rokctl *ctx, struct print_table *tab,
		 const rok_task_info *t, size_t n, long index)
{
	static const char *const head[] = { "ID", "STATE", "KIND", "EXIT",
					    "TIME", "GROUP", "PRIO" };
	uint64_t now = print_now_us();
	struct print_row r;

	if (ctx->json) {
		for (size_t i = 0; i < n; i++) {
			if (t[i].error.code != 0)
				print_task_error(ctx, &t[i]);
			else
				print_json_task(&t[i], index);
		}
		return;
	}
	/* Widths only grow, so a table printed in pages stays aligned
	 * unless a later page has a wider cell. */
	for (int k = 0; k < 7; k++)
		tab->w[k] = print_width(head[k], tab->w[k]);
	for (size_t i = 0; i < n; i++) {
		if (t[i].error.code != 0)
			continue;
		print_row(&t[i], &r, now);
		tab->w[0] = print_width(r.id, tab->w[0]);
		tab->w[1] = print_width(r.state, tab->w[1]);
		tab->w[2] = print_width(r.kind, tab->w[2]);
		tab->w[3] = print_width(r.exit, tab->w[3]);
		tab->w[4] = print_width(r.time, tab->w[4]);
		tab->w[5] = print_width(r.group, tab->w[5]);
		tab->w[6] = print_width(r.prio, tab->w[6]);
	}
	for (size_t i = 0; i < n; i++) {
		if (t[i].error.code != 0) {
			print_task_error(ctx, &t[i]);
			continue;
		}
		if (!tab->header_done) {
			printf("%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %-*s  "
			       "VALUE\n",
			       tab->w[0], head[0], tab->w[1], head[1],
			       tab->w[2], head[2], tab->w[3], head[3],
			       tab->w[4], head[4], tab->w[5], head[5],
			       tab->w[6], head[6]);
			tab->header_done = true;
		}
		print_row(&t[i], &r, now);
		printf("%-*s  %-*s  ", tab->w[0], r.id, tab->w[1], r.state);
		print_escaped(stdout, r.kind, strlen(r.kind), 0);
		printf("%*s  %-*s  %-*s  ",
		       tab->w[2] - (int)strlen(r.kind), "", tab->w[3], r.exit,
		       tab->w[4], r.time);
		print_escaped(stdout, r.group, strlen(r.group), 0);
		printf("%*s  %-*s  ", tab->w[5] - (int)strlen(r.group), "",
		       tab->w[6], r.prio);
		if (t[i].value.len > 0) {
			print_escaped(stdout, t[i].value.data, t[i].value.len,
				      tab->truncate ? 40 : 0);
		} else if (t[i].waiting.len > 0) {
			putchar('[');
			print_escaped(stdout, t[i].waiting.data,
				      t[i].waiting.len, tab->truncate ? 40 : 0);
			putchar(']');
		} else if (t[i].reason.len > 0) {
			putchar('[');
			print_escaped(stdout, t[i].reason.data,
				      t[i].reason.len, tab->truncate ? 40 : 0);
			putchar(']');
		}
		if (t[i].output_truncated)
			fputs(t[i].value.len > 0 || t[i].reason.len > 0
			      ? " [output truncated]" : "[output truncated]",
			      stdout);
		putchar('\n');
	}
}

int print_outcome(const rok_task_info *t, size_t n)
{
	int rc = ROKCTL_EXIT_OK;

	for (size_t i = 0; i < n; i++) {
		if (t[i].error.code != 0)
			rc = ROKCTL_EXIT_REFUSED;
		else if (t[i].state != ROK_TASK_SUCCEEDED &&
			 rc < ROKCTL_EXIT_TASK)
			rc = ROKCTL_EXIT_TASK;
	}
	return rc;
}

size_t print_quantile_bucket(const rok_histogram *h,
			     const rok_histogram *before, unsigned q)
{
	uint64_t n = h->count - (before != NULL ? before->count : 0);
	/* Rounded up, at least 1: the q-th percent observation. */
	uint64_t want = n / 100 * q + (n % 100 * q + 99) / 100, seen = 0;

	if (want == 0)
		want = 1;
	for (size_t i = 0; i < h->n_bounds; i++) {
		seen += h->counts[i] - (before != NULL ? before->counts[i] : 0);
		if (seen >= want)
			return i;
	}
	return h->n_bounds;
}

/* The upper bound of the bucket holding quantile q (percent) of h, as
 * "<=250us", or ">LAST" past the last bound; "-" for no observation. */
static void stats_quantile(const rok_histogram *h, unsigned q, char *buf,
			   size_t len)
{
	size_t i;

	if (h->count == 0 || h->n_bounds == 0) {
		snprintf(buf, len, "-");
		return;
	}
	i = print_quantile_bucket(h, NULL, q);
	if (i < h->n_bounds)
		snprintf(buf, len, "<=%lluus",
			 (unsigned long long)h->bounds_us[i]);
	else
		snprintf(buf, len, ">%lluus",
			 (unsigned long long)h->bounds_us[h->n_bounds - 1]);
}

/* "NAME count N sum_us S p50 <=B p99 <=B" */
static void stats_hist_line(const char *name, const rok_histogram *h)
{
	char p50[32], p99[32];

	stats_quantile(h, 50, p50, sizeof(p50));
	stats_quantile(h, 99, p99, sizeof(p99));
	printf("%-17s count %llu sum_us %llu p50 %s p99 %s\n", name,
	       (unsigned long long)h->count, (unsigned long long)h->sum_us,
	       p50, p99);
}

/* "NAME": {"count", "sum_us", "bounds_us": [...], "counts": [...]}, counts
 * with one entry more than bounds_us (those above the last bound). */
static void stats_hist_json(struct json_obj *o, const char *name,
			    const rok_histogram *h)
{
	struct json_obj j;

	json_key(o, name);
	json_begin(&j, stdout);
	json_u64(&j, "count", h->count);
	json_u64(&j, "sum_us", h->sum_us);
	json_key(&j, "bounds_us");
	putc('[', stdout);
	for (size_t i = 0; i < h->n_bounds; i++)
		printf("%s%llu", i > 0 ? "," : "",
		       (unsigned long long)h->bounds_us[i]);
	putc(']', stdout);
	json_key(&j, "counts");
	putc('[', stdout);
	for (size_t i = 0; h->n_bounds > 0 && i <= h->n_bounds; i++)
		printf("%s%llu", i > 0 ? "," : "",
		       (unsigned long long)h->counts[i]);
	putc(']', stdout);
	fputc('}', stdout);
}

void print_stats(struct rokctl *ctx, const rok_daemon_stats *s,
		 const rok_group *groups, size_t n_groups)
{
	/* Tasks that entered each state since rokd started. */
	const int total_states[] = {
		ROK_TASK_QUEUED, ROK_TASK_RUNNING, ROK_TASK_SUCCEEDED,
		ROK_TASK_FAILED, ROK_TASK_CANCELLED, ROK_TASK_TIMED_OUT,
		ROK_TASK_INTERRUPTED,
	};
	const size_t ntotal = sizeof(total_states) / sizeof(total_states[0]);
	const struct { const char *name; uint64_t v; } u[] = {
		{ "workers", s->workers },
		{ "blocking_threads", s->blocking_threads },
		{ "connections", s->connections },
		{ "uptime_ms", s->uptime_ms },
		{ "queued", s->queued },
		{ "running", s->running },
		{ "succeeded", s->succeeded },
		{ "failed", s->failed },
		{ "cancelled", s->cancelled },
		{ "timed_out", s->timed_out },
		{ "interrupted", s->interrupted },
		{ "injector_depth", s->injector_depth },
		{ "polls", s->polls },
		{ "steals", s->steals },
		{ "parks", s->parks },
		{ "handoffs", s->handoffs },
		{ "output_bytes", s->output_bytes },
	};
	size_t n = sizeof(u) / sizeof(u[0]);

	if (ctx->json) {
		struct json_obj o;

		json_begin(&o, stdout);
		for (size_t i = 0; i < n; i++)
			json_u64(&o, u[i].name, u[i].v);
		json_i64(&o, "registrations", s->registrations);
		/* "tasks_total": {"queued": N, ...}: entered since start. */
		struct json_obj tt;
		json_key(&o, "tasks_total");
		json_begin(&tt, stdout);
		for (size_t i = 0; i < ntotal; i++)
			json_u64(&tt, rok_state_name(total_states[i]),
				 s->tasks_total[total_states[i]]);
		fputc('}', stdout);
		stats_hist_json(&o, "spawn_to_start", &s->spawn_to_start);
		stats_hist_json(&o, "run_time", &s->run_time);
		stats_hist_json(&o, "journal_commit", &s->journal_commit);
		/* "groups": [{"name", "parallel", "running", "queued":
		 * {"urgent": N, ...}, "paused", "policy"}, ...] */
		json_key(&o, "groups");
		putc('[', stdout);
		for (size_t i = 0; i < n_groups; i++) {
			struct json_obj g, q;

			if (i > 0)
				putc(',', stdout);
			json_begin(&g, stdout);
			json_bytes(&g, "name", groups[i].name.data,
				   groups[i].name.len);
			json_u64(&g, "parallel", groups[i].parallel);
			json_u64(&g, "running", groups[i].running);
			json_key(&g, "queued");
			json_begin(&q, stdout);
			for (int c = 0; c < 4; c++)
				json_u64(&q, rok_priority_name(c + 1),
					 groups[i].queued[c]);
			fputc('}', stdout);
			json_bool(&g, "paused", groups[i].paused);
			json_str(&g, "policy", rok_policy_name(groups[i].policy));
			fputc('}', stdout);
		}
		putc(']', stdout);
		json_end(&o);
		return;
	}
	for (size_t i = 0; i < n; i++)
		printf("%-17s %llu\n", u[i].name, (unsigned long long)u[i].v);
	printf("%-17s %lld\n", "registrations", (long long)s->registrations);
	/* tasks_total queued Q running R succeeded S ... (since start) */
	printf("%-17s", "tasks_total");
	for (size_t i = 0; i < ntotal; i++)
		printf(" %s %llu", rok_state_name(total_states[i]),
		       (unsigned long long)s->tasks_total[total_states[i]]);
	putchar('\n');
	stats_hist_line("spawn_to_start", &s->spawn_to_start);
	stats_hist_line("run_time", &s->run_time);
	stats_hist_line("journal_commit", &s->journal_commit);
	/* group NAME running R/LIMIT queued U/H/N/L (urgent/high/normal/low) */
	for (size_t i = 0; i < n_groups; i++) {
		const rok_group *g = &groups[i];
		char lim[16];

		if (g->parallel > 0)
			snprintf(lim, sizeof(lim), "%u", g->parallel);
		else
			snprintf(lim, sizeof(lim), "-");
		printf("group %s running %u/%s queued %llu/%llu/%llu/%llu%s\n",
		       (const char *)g->name.data, g->running, lim,
		       (unsigned long long)g->queued[0],
		       (unsigned long long)g->queued[1],
		       (unsigned long long)g->queued[2],
		       (unsigned long long)g->queued[3],
		       g->paused ? " paused" : "");
	}
}

void print_groups(struct rokctl *ctx, const rok_group *g, size_t n)
{
	if (!ctx->json)
		printf("%-16s %8s  %-8s  %-7s  %-6s  %-15s  %s\n", "NAME",
		       "PARALLEL", "POLICY", "BACKEND", "STATE", "WEIGHTS",
		       "PARTITION");
	for (size_t i = 0; i < n; i++) {
		char w[64];

		snprintf(w, sizeof(w), "%u,%u,%u,%u", g[i].weights[0],
			 g[i].weights[1], g[i].weights[2], g[i].weights[3]);
		if (ctx->json) {
			struct json_obj o;

			json_begin(&o, stdout);
			json_bytes(&o, "name", g[i].name.data, g[i].name.len);
			json_u64(&o, "parallel", g[i].parallel);
			json_str(&o, "policy", rok_policy_name(g[i].policy));
			json_bytes(&o, "backend", g[i].backend.data,
				   g[i].backend.len);
			json_bool(&o, "paused", g[i].paused);
			json_bytes(&o, "partition", g[i].partition.data,
				   g[i].partition.len);
			json_key(&o, "weights");
			printf("[%u,%u,%u,%u]", g[i].weights[0],
			       g[i].weights[1], g[i].weights[2],
			       g[i].weights[3]);
			json_end(&o);
			continue;
		}
		printf("%-16s %8u  %-8s  %-7s  %-6s  %-15s  %.*s\n",
		       (const char *)g[i].name.data, g[i].parallel,
		       rok_policy_name(g[i].policy),
		       (const char *)g[i].backend.data,
		       g[i].paused ? "paused" : "active", w,
		       g[i].partition.len > 0 ? (int)g[i].partition.len : 1,
		       g[i].partition.len > 0
		       ? (const char *)g[i].partition.data : "-");
	}
}
