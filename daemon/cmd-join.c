/*
 * cmd-join.c — wait for every listed task.
 */
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
	(void)waiter_start(c, req->id, WAIT_JOIN, j->ids, j->n_ids,
	                   j->timeout_ms, false, false);
}
