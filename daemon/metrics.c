/*
 * metrics.c — the daemon's counters and latency histograms, and the one
 * function that gathers every number into a StatsReply, which `rokctl
 * stats` gets over the socket and metrics-http.c turns into the
 * Prometheus text format (with proto/promtext.c, which rokctl uses too).
 *
 * Who writes.  Workers observe spawn->start and run times as tasks start
 * and end (tasktab.c), the journal thread its commit times (journal.c),
 * exec output the bytes it stores (exec-output.c); the reactor thread
 * reads everything for a stats request or a scrape.
 *
 * Every counter is a 64-bit atomic, added to and read with relaxed order.
 * Relaxed is enough: each counter stands alone (nothing is published with
 * it, no reader infers anything about other memory from it), and a
 * monitoring snapshot may mix values a moment apart.  The snapshot is made
 * consistent where the format needs it: a histogram's total is the sum of
 * the buckets as read, never a separate counter, so the +Inf bucket always
 * equals the count.  Shared counters rather than per-thread ones: an
 * observation is two atomic adds per task start or end, right after the
 * task table's mutex that the same code takes anyway (and per journal
 * commit, on one thread), so per-thread slots would save nothing
 * measurable and cost a registry of threads.
 *
 * Per-group totals: one entry per group name a task was ever created in,
 * kept as long as rokd runs (a counter never goes down, nor vanishes with
 * `group rm`), at most METRICS_GROUPS_MAX names so that adding and removing
 * groups cannot grow it without bound.  A task finds its entry once, at
 * creation (tasktab keeps the pointer); default's needs no lookup.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rok/blocking.h"
#include "rokd.h"

/* Upper bounds in microseconds, shared by the three histograms: from a
 * fast commit or start (50 us) to a long task (1 h). */
static const uint64_t metrics_bounds[METRICS_NBOUNDS] = {
	50, 100, 250, 500,
	1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
	1000000, 2500000, 5000000, 10000000, 30000000,
	60000000, 300000000, 900000000, 3600000000,
};

struct metrics_hist {
	_Atomic uint64_t counts[METRICS_NBOUNDS + 1];
	_Atomic uint64_t sum_us;
};

static struct {
	struct metrics_hist hist[METRICS_NHIST];
	_Atomic uint64_t entered[RT_NSTATES];
	_Atomic uint64_t output_bytes;
} metrics;

void metrics_observe(int h, int64_t us)
{
	uint64_t v = us > 0 ? (uint64_t)us : 0;
	size_t i = 0;

	if (h < 0 || h >= METRICS_NHIST)
		return;
	while (i < METRICS_NBOUNDS && v > metrics_bounds[i])
		i++;
	atomic_fetch_add_explicit(&metrics.hist[h].counts[i], 1,
	                          memory_order_relaxed);
	atomic_fetch_add_explicit(&metrics.hist[h].sum_us, v,
	                          memory_order_relaxed);
}

struct metrics_group {
	struct metrics_group *next;
	_Atomic uint64_t entered[RT_NSTATES];
	char name[GROUP_NAME_MAX + 1];
};

static struct metrics_group metrics_default = { .name = "default" };
static struct {
	pthread_mutex_t lock;
	struct metrics_group *head;   /* newest first; default last */
	size_t n;
} mgroups = { PTHREAD_MUTEX_INITIALIZER, &metrics_default, 1 };

struct metrics_group *metrics_group(const char *name)
{
	struct metrics_group *g;

	if (name == NULL || strcmp(name, "default") == 0)
		return &metrics_default;
	pthread_mutex_lock(&mgroups.lock);
	for (g = mgroups.head; g != NULL; g = g->next)
		if (strcmp(g->name, name) == 0)
			break;
	if (g == NULL && mgroups.n < METRICS_GROUPS_MAX &&
	    strlen(name) <= GROUP_NAME_MAX &&
	    (g = calloc(1, sizeof(*g))) != NULL) {
		snprintf(g->name, sizeof(g->name), "%s", name);
		g->next = mgroups.head;
		mgroups.head = g;
		mgroups.n++;
	}
	pthread_mutex_unlock(&mgroups.lock);
	return g;
}

void metrics_task_state(struct metrics_group *g, int state)
{
	if (state <= 0 || state >= RT_NSTATES)
		return;
	atomic_fetch_add_explicit(&metrics.entered[state], 1,
	                          memory_order_relaxed);
	if (g != NULL)
		atomic_fetch_add_explicit(&g->entered[state], 1,
		                          memory_order_relaxed);
}

/* Points m's reply at every group's totals, in one allocation (none on
 * ENOMEM: the rest is still worth sending). */
static void metrics_group_totals(struct metrics_reply *m)
{
	pthread_mutex_lock(&mgroups.lock);
	size_t n = mgroups.n;
	struct {
		Rok__V1__GroupTotals msg;
		Rok__V1__GroupTotals *ptr;
		uint64_t totals[RT_NSTATES];
	} *a = calloc(n, sizeof(*a));
	Rok__V1__GroupTotals **ptrs = calloc(n, sizeof(*ptrs));
	size_t i = 0;
	for (struct metrics_group *g = mgroups.head;
	     a != NULL && ptrs != NULL && g != NULL; g = g->next, i++) {
		rok__v1__group_totals__init(&a[i].msg);
		a[i].msg.group.data = (uint8_t *)g->name;
		a[i].msg.group.len = strlen(g->name);
		for (int s = 0; s < RT_NSTATES; s++)
			a[i].totals[s] = atomic_load_explicit(
				&g->entered[s], memory_order_relaxed);
		a[i].msg.n_tasks_total = RT_NSTATES;
		a[i].msg.tasks_total = a[i].totals;
		ptrs[i] = &a[i].msg;
	}
	pthread_mutex_unlock(&mgroups.lock);
	if (a == NULL || ptrs == NULL) {
		free(a);
		free(ptrs);
		return;
	}
	/* The names stay: entries are never freed while rokd runs. */
	m->sr.group_totals = ptrs;
	m->sr.n_group_totals = i;
	m->group_totals = a;
}

void metrics_output(uint64_t n)
{
	atomic_fetch_add_explicit(&metrics.output_bytes, n,
	                          memory_order_relaxed);
}

static void metrics_hist_fill(struct metrics_reply *m, int h)
{
	Rok__V1__Histogram *out = &m->hist[h];

	rok__v1__histogram__init(out);
	for (size_t i = 0; i <= METRICS_NBOUNDS; i++)
		m->counts[h][i] = atomic_load_explicit(
			&metrics.hist[h].counts[i], memory_order_relaxed);
	out->n_bounds_us = METRICS_NBOUNDS;
	/* Packing only reads it; protobuf-c's field is not const. */
	out->bounds_us = (uint64_t *)(uintptr_t)metrics_bounds;
	out->n_counts = METRICS_NBOUNDS + 1;
	out->counts = m->counts[h];
	out->sum_us = atomic_load_explicit(&metrics.hist[h].sum_us,
	                                   memory_order_relaxed);
}

void metrics_reply_fill(struct metrics_reply *m)
{
	Rok__V1__StatsReply *sr = &m->sr;
	struct rok_stats st;
	uint64_t counts[RT_NSTATES];

	rok__v1__stats_reply__init(sr);
	rok_stats_get(&st);
	tasktab_counts(counts);
	sr->workers = st.workers;
	sr->steals = st.steals;
	sr->parks = st.parks;
	sr->polls = st.polls;
	sr->injector_depth = st.injector_depth;
	sr->registrations = st.registrations;
	sr->handoffs = st.handoffs;
	sr->queued = counts[RT_QUEUED];
	sr->running = counts[RT_RUNNING];
	sr->succeeded = counts[RT_SUCCEEDED];
	sr->failed = counts[RT_FAILED];
	sr->cancelled = counts[RT_CANCELLED];
	sr->timed_out = counts[RT_TIMED_OUT];
	sr->interrupted = counts[RT_INTERRUPTED];
	sr->blocking_threads = rok_blocking_threads();
	sr->connections = conn_count();
	sr->uptime_ms = (uint64_t)((rok_now() - rokd_started_ns) / 1000000);
	for (int s = 0; s < RT_NSTATES; s++)
		m->totals[s] = atomic_load_explicit(&metrics.entered[s],
		                                    memory_order_relaxed);
	sr->n_tasks_total = RT_NSTATES;
	sr->tasks_total = m->totals;
	for (int h = 0; h < METRICS_NHIST; h++)
		metrics_hist_fill(m, h);
	sr->spawn_to_start = &m->hist[METRICS_SPAWN_START];
	sr->run_time = &m->hist[METRICS_RUN_TIME];
	sr->journal_commit = &m->hist[METRICS_COMMIT];
	sr->output_bytes = atomic_load_explicit(&metrics.output_bytes,
	                                        memory_order_relaxed);
	m->group_totals = NULL;
	metrics_group_totals(m);
	m->groups = NULL;
	ssize_t ng = queue_group_stats(&m->groups);
	if (ng > 0) {   /* on ENOMEM the rest is still worth sending */
		sr->groups = m->groups;
		sr->n_groups = (size_t)ng;
	}
}

void metrics_reply_free(struct metrics_reply *m)
{
	free(m->groups);
	m->groups = NULL;
	free(m->group_totals);
	m->group_totals = NULL;
	free(m->sr.group_totals);
	m->sr.group_totals = NULL;
}
