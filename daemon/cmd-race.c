/*
 * cmd-race.c — wait for the first of the listed tasks to finish (at most
 * max_ids of them; the reply names one, by its index in the request).
 * Each task is waited for once, however often it is named; the index of a
 * winner named several times is its first.
 */
#include <stdlib.h>

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
	uint64_t *ids = malloc(r->n_ids * sizeof(*ids));
	size_t *first = malloc(r->n_ids * sizeof(*first));
	ssize_t n = ids != NULL && first != NULL
	                    ? idlist_dedup(r->ids, r->n_ids, ids, first) : -1;
	if (n < 0)
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
	else
		(void)waiter_start(c, req->id, WAIT_RACE, ids, first,
		                   (size_t)n, r->timeout_ms, r->cancel_rest,
		                   false);
	free(ids);
	free(first);
}
