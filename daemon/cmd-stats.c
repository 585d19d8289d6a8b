/*
 * cmd-stats.c — the runtime's and the daemon's counters.
 */
#include <stdlib.h>

#include "rok/blocking.h"
#include "rokd.h"

void cmd_stats(struct conn *c, const Request *req)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__StatsReply sr = ROK__V1__STATS_REPLY__INIT;
	struct rok_stats st;
	uint64_t counts[RT_NSTATES];

	rok_stats_get(&st);
	tasktab_counts(counts);
	sr.workers = st.workers;
	sr.steals = st.steals;
	sr.parks = st.parks;
	sr.polls = st.polls;
	sr.injector_depth = st.injector_depth;
	sr.registrations = st.registrations;
	sr.handoffs = st.handoffs;
	sr.queued = counts[RT_QUEUED];
	sr.running = counts[RT_RUNNING];
	sr.succeeded = counts[RT_SUCCEEDED];
	sr.failed = counts[RT_FAILED];
	sr.cancelled = counts[RT_CANCELLED];
	sr.timed_out = counts[RT_TIMED_OUT];
	sr.interrupted = counts[RT_INTERRUPTED];
	sr.blocking_threads = rok_blocking_threads();
	sr.connections = conn_count();
	sr.uptime_ms = (uint64_t)((rok_now() - rokd_started_ns) / 1000000);
	Rok__V1__GroupStats **groups;
	ssize_t ng = queue_group_stats(&groups);
	if (ng > 0) {   /* on ENOMEM the rest is still worth sending */
		sr.groups = groups;
		sr.n_groups = (size_t)ng;
	}
	resp.id = req->id;
	resp.body_case = ROK__V1__RESPONSE__BODY_STATS;
	resp.stats = &sr;
	conn_send(c, &resp);
	free(groups);
}
