/*
 * cmd-race.c — wait for the first of the listed tasks to finish (at most
 * max_ids of them; the reply names one, by its index in the request).
 */
#include "rokd.h"
#include "waiter.h"

void cmd_race(struct conn *c, const Request *req)
{
	const Rok__V1__RaceRequest *r = req->race;

	if (r->n_ids == 0) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "race needs at least one task id");
		return;
	}
	if (!idlist_check(c, req->id, r->n_ids, "task ids"))
		return;
	(void)waiter_start(c, req->id, WAIT_RACE, r->ids, r->n_ids,
	                   r->timeout_ms, r->cancel_rest, false);
}
