/*
 * promtext.c — a StatsReply in the Prometheus text exposition format
 * (version 0.0.4).  The one formatter of rok's metrics: rokd serves its
 * output on /metrics (daemon/metrics-http.c) and librokclient hands it to
 * `rokctl stats --prometheus` (client/reply.c), so both print the same
 * names, labels and help for the same numbers.
 *
 * Library code (linked into rokd and librokclient): no logging, no global
 * state, any thread.  Everything comes from the reply; a field an older
 * daemon did not send is printed as 0, a histogram it did not send is left
 * out.
 *
 * Names follow Prometheus's conventions: counters end in _total, times are
 * in seconds (the histograms are kept in microseconds and printed as exact
 * decimals), every family has HELP and TYPE.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "promtext.h"

/* Label values of TaskState numbers (rokctl's --json names). */
static const char *const promtext_states[] = {
	NULL, "queued", "running", "succeeded", "failed", "cancelled",
	"timed_out", "interrupted",
};
#define PROMTEXT_NSTATES (sizeof(promtext_states) / sizeof(promtext_states[0]))

static void promtext_head(FILE *f, const char *name, const char *type,
                          const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Label values of the classes in GroupStats.queued, in its order. */
static const char *const promtext_classes[] = {
	"urgent", "high", "normal", "low",
};
#define PROMTEXT_NCLASSES 4

/* One sample of a per-group gauge.  Group names are [A-Za-z0-9_-] (rokd
 * refuses others): no label escaping. */
static void promtext_group_sample(FILE *f, const char *name,
                                  const Rok__V1__GroupStats *g, uint64_t v)
{
	fprintf(f, "%s{group=\"%.*s\"} %" PRIu64 "\n", name,
	        (int)g->name.len, (const char *)g->name.data, v);
}

static void promtext_group_series(FILE *f, const Rok__V1__StatsReply *s)
{
	promtext_head(f, "rok_queued", "gauge", "Exec tasks waiting for a "
	              "slot of their group, by priority class.");
	for (size_t i = 0; i < s->n_groups; i++) {
		const Rok__V1__GroupStats *g = s->groups[i];
		for (size_t c = 0; c < PROMTEXT_NCLASSES; c++)
			fprintf(f, "rok_queued{group=\"%.*s\",priority=\"%s\"} %"
			        PRIu64 "\n", (int)g->name.len,
			        (const char *)g->name.data, promtext_classes[c],
			        c < g->n_queued ? g->queued[c] : 0);
	}
	promtext_head(f, "rok_running", "gauge", "Exec tasks holding a slot "
	              "of their group.");
	for (size_t i = 0; i < s->n_groups; i++)
		promtext_group_sample(f, "rok_running", s->groups[i],
		                      s->groups[i]->running);
	promtext_head(f, "rok_group_parallel", "gauge", "Slots of each "
	              "group (0: no limit).");
	for (size_t i = 0; i < s->n_groups; i++)
		promtext_group_sample(f, "rok_group_parallel", s->groups[i],
		                      s->groups[i]->parallel);
	promtext_head(f, "rok_group_paused", "gauge", "1 while a group is "
	              "paused.");
	for (size_t i = 0; i < s->n_groups; i++)
		promtext_group_sample(f, "rok_group_paused", s->groups[i],
		                      s->groups[i]->paused ? 1 : 0);
}

/* Microseconds as exact decimal seconds: 2500 -> "0.0025". */
static void promtext_seconds(FILE *f, uint64_t us)
{
	char frac[8];
	int n = snprintf(frac, sizeof(frac), "%06" PRIu64, us % 1000000);

	while (n > 0 && frac[n - 1] == '0')
		frac[--n] = '\0';
	fprintf(f, "%" PRIu64 "%s%s", us / 1000000, n > 0 ? "." : "", frac);
}

static void promtext_hist(FILE *f, const char *name, const char *help,
                          const Rok__V1__Histogram *h)
{
	uint64_t cum = 0;

	if (h == NULL)
		return;
	promtext_head(f, name, "histogram", help);
	/* counts holds one more than bounds (the overflow); a reply that
	 * does not is printed as far as both go. */
	for (size_t i = 0; i < h->n_bounds_us && i < h->n_counts; i++) {
		cum += h->counts[i];
		fprintf(f, "%s_bucket{le=\"", name);
		promtext_seconds(f, h->bounds_us[i]);
		fprintf(f, "\"} %" PRIu64 "\n", cum);
	}
	for (size_t i = h->n_bounds_us; i < h->n_counts; i++)
		cum += h->counts[i];
	fprintf(f, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum ", name, cum,
	        name);
	promtext_seconds(f, h->sum_us);
	fprintf(f, "\n%s_count %" PRIu64 "\n", name, cum);
}

static void promtext_write(FILE *f, const Rok__V1__StatsReply *s)
{
	uint64_t now[PROMTEXT_NSTATES] = {
		0, s->queued, s->running, s->succeeded, s->failed,
		s->cancelled, s->timed_out, s->interrupted,
	};

	promtext_head(f, "rok_tasks_total", "counter", "Tasks that entered "
	              "each state since rokd started (queued: created; "
	              "running: runs started), by the group they were "
	              "spawned into.");
	/* A daemon without per-group totals: all in default. */
	if (s->n_group_totals == 0)
		for (size_t st = 1; st < PROMTEXT_NSTATES; st++)
			fprintf(f, "rok_tasks_total{state=\"%s\",group="
			        "\"default\"} %" PRIu64 "\n",
			        promtext_states[st],
			        st < s->n_tasks_total ? s->tasks_total[st] : 0);
	for (size_t i = 0; i < s->n_group_totals; i++) {
		const Rok__V1__GroupTotals *g = s->group_totals[i];
		for (size_t st = 1; st < PROMTEXT_NSTATES; st++)
			fprintf(f, "rok_tasks_total{state=\"%s\",group="
			        "\"%.*s\"} %" PRIu64 "\n", promtext_states[st],
			        (int)g->group.len, (const char *)g->group.data,
			        st < g->n_tasks_total ? g->tasks_total[st] : 0);
	}
	promtext_head(f, "rok_tasks", "gauge", "Tasks rokd holds in memory, "
	              "by state (finished ones until evicted).");
	for (size_t st = 1; st < PROMTEXT_NSTATES; st++)
		fprintf(f, "rok_tasks{state=\"%s\"} %" PRIu64 "\n",
		        promtext_states[st], now[st]);
	promtext_group_series(f, s);
	promtext_hist(f, "rok_spawn_to_start_seconds", "Time from a spawn's "
	              "acceptance to the start of its run.", s->spawn_to_start);
	promtext_hist(f, "rok_task_run_seconds", "Time from a run's start "
	              "to the task's end.", s->run_time);
	promtext_hist(f, "rok_journal_commit_seconds", "Time of one journal "
	              "transaction (a group commit, fsync included).",
	              s->journal_commit);
	const struct {
		const char *name, *type, *help;
		uint64_t v;
	} one[] = {
		{ "rok_output_bytes_total", "counter",
		  "Bytes of exec task output stored.", s->output_bytes },
		{ "rok_connections", "gauge", "Client connections open.",
		  s->connections },
		{ "rok_workers", "gauge", "Runtime worker threads.",
		  s->workers },
		{ "rok_blocking_threads", "gauge",
		  "Threads of the blocking pool.", s->blocking_threads },
		{ "rok_injector_depth", "gauge", "Runtime tasks waiting in "
		  "the global injector queue.", s->injector_depth },
		{ "rok_wake_registrations", "gauge", "Wake registrations held "
		  "by waiting runtime tasks.", s->registrations > 0
		  ? (uint64_t)s->registrations : 0 },
		{ "rok_polls_total", "counter", "Runtime task polls.",
		  s->polls },
		{ "rok_steals_total", "counter", "Runtime tasks stolen by an "
		  "idle worker.", s->steals },
		{ "rok_parks_total", "counter", "Times a worker went to sleep.",
		  s->parks },
		{ "rok_handoffs_total", "counter", "Helper workers started for "
		  "stuck ones.", s->handoffs },
	};
	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
		promtext_head(f, one[i].name, one[i].type, one[i].help);
		fprintf(f, "%s %" PRIu64 "\n", one[i].name, one[i].v);
	}
	promtext_head(f, "rok_uptime_seconds", "gauge", "Time since rokd "
	              "started serving.");
	fprintf(f, "rok_uptime_seconds ");
	promtext_seconds(f, s->uptime_ms * 1000);
	fputc('\n', f);
}

int promtext_format(const Rok__V1__StatsReply *s, char **out, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	*out = NULL;
	*len = 0;
	if (f == NULL)
		return -errno;
	promtext_write(f, s);
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	*len = n;
	return 0;
}
