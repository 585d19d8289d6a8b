/*
 * cmd-prune.c — delete finished tasks from the journal now (rokctl prune).
 * Reactor thread; the work runs on the journal thread between batches
 * (journal-prune.c), and the reply comes back here.
 */
#include <stdlib.h>
#include <sys/time.h>

#include "journal.h"
#include "rokd.h"

struct prune_pending {
	struct conn *conn;
	uint64_t req_id;
};

static void cmd_prune_done(void *arg, int64_t n, const char *msg)
{
	struct prune_pending *p = arg;

	if (n < 0) {
		conn_send_error(p->conn, p->req_id,
		                ROK__V1__ERROR_CODE__UNAVAILABLE, "prune: %s",
		                msg != NULL ? msg : "failed");
	} else {
		Response resp = ROK__V1__RESPONSE__INIT;
		Rok__V1__PruneReply pr = ROK__V1__PRUNE_REPLY__INIT;
		pr.pruned = (uint64_t)n;
		resp.id = p->req_id;
		resp.body_case = ROK__V1__RESPONSE__BODY_PRUNE;
		resp.prune = &pr;
		conn_send(p->conn, &resp);
	}
	conn_end_wait(p->conn);
	free(p);
}

void cmd_prune(struct conn *c, const Request *req)
{
	const Rok__V1__PruneRequest *pr = req->prune;
	uint64_t before = 0, keep = UINT64_MAX, keep_per_user = UINT64_MAX;

	/* A system daemon's retention is the administrator's business. */
	if (config.root && conn_uid(c) != 0) {
		conn_send_error(c, req->id,
		                ROK__V1__ERROR_CODE__PERMISSION_DENIED,
		                "only root may prune the journal");
		return;
	}
	uint64_t older_ms = pr->older_than_ms;
	if (older_ms == 0 && !pr->keep_set) {
		/* rokd.conf's retention, applied now */
		older_ms = (uint64_t)(config.keep_finished_for_ns / 1000000);
		keep = config.keep_finished;
		keep_per_user = config.keep_finished_per_user;
	} else if (pr->keep_set) {
		keep = pr->keep;
	}
	if (older_ms > 0) {
		struct timeval tv;
		gettimeofday(&tv, NULL);
		uint64_t now = (uint64_t)tv.tv_sec * 1000000 +
		               (uint64_t)tv.tv_usec;
		uint64_t age = older_ms > UINT64_MAX / 1000 ? UINT64_MAX
		               : older_ms * 1000;
		before = now > age ? now - age : 0;
		if (before == 0)
			before = 1;   /* older than the epoch: nothing */
	}
	struct prune_pending *p = malloc(sizeof(*p));
	if (p == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	if (!conn_begin_wait(c, req->id)) {
		free(p);
		return;
	}
	p->conn = c;
	p->req_id = req->id;
	if (journal_prune(before, keep, keep_per_user, cmd_prune_done, p) < 0) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__UNAVAILABLE,
		                "prune: the journal is stopping");
		conn_end_wait(c);
		free(p);
	}
}
