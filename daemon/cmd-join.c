/*
 * cmd-join.c — wait for every listed task.  At most max_ids ids; each task
 * is waited for and reported once, however often it is named.
 */
#include <stdlib.h>

#include "rokd.h"
#include "waiter.h"

void cmd_join(struct conn *c, const Request *req)
{
	const Rok__V1__JoinRequest *j = req->join;

	if (j->n_ids == 0) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "join needs at least one task id");
		return;
	}
	if (!idlist_check(c, req->id, j->n_ids, "task ids"))
		return;
	uint64_t *ids = malloc(j->n_ids * sizeof(*ids));
	ssize_t n = ids != NULL ? idlist_dedup(j->ids, j->n_ids, ids, NULL) : -1;
	if (n < 0) {
		free(ids);
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	(void)waiter_start(c, req->id, WAIT_JOIN, ids, NULL, (size_t)n,
	                   j->timeout_ms, false, false);
	free(ids);
}
