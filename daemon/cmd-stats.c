/*
 * cmd-stats.c — the runtime's and the daemon's counters (metrics.c
 * gathers them).
 */
#include "rokd.h"

void cmd_stats(struct conn *c, const Request *req)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	struct metrics_reply m;

	metrics_reply_fill(&m);
	resp.id = req->id;
	resp.body_case = ROK__V1__RESPONSE__BODY_STATS;
	resp.stats = &m.sr;
	conn_send(c, &resp);
	metrics_reply_free(&m);
}
