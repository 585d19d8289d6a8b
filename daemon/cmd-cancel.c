/*
 * cmd-cancel.c — request cancellation of tasks; answers at once.
 *
 * At most max_ids ids; one result per id, in order.  Run on the blocking
 * pool: an id no longer in memory is looked up in the journal (to tell
 * "no such task" from "another user's"), which must not hold up the
 * reactor thread.
 */
#include <stdlib.h>
#include <string.h>

#include "rokd.h"

struct cancel_job {
	struct conn *conn;
	uint64_t req_id;
	uid_t uid;
	size_t n;
	uint64_t ids[];
};

/* Blocking pool: answers the request and frees the job. */
static void *cancel_run(void *arg)
{
	struct cancel_job *j = arg;
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__CancelReply rep = ROK__V1__CANCEL_REPLY__INIT;
	size_t n = j->n;
	Rok__V1__Error *errs = calloc(n > 0 ? n : 1, sizeof(*errs));
	Rok__V1__Error **ptrs = calloc(n > 0 ? n : 1, sizeof(*ptrs));

	if (errs == NULL || ptrs == NULL) {
		reply_post_error(j->conn, j->req_id,
		                 ROK__V1__ERROR_CODE__INTERNAL, "out of memory");
	} else {
		for (size_t i = 0; i < n; i++) {
			rok__v1__error__init(&errs[i]);
			errs[i].code = (ErrorCode)tasktab_cancel(j->ids[i],
			                                         j->uid);
			ptrs[i] = &errs[i];
		}
		rep.n_results = n;
		rep.results = ptrs;
		resp.id = j->req_id;
		resp.body_case = ROK__V1__RESPONSE__BODY_CANCEL;
		resp.cancel = &rep;
		reply_post(j->conn, &resp);
	}
	free(errs);
	free(ptrs);
	free(j);
	return NULL;
}

void cmd_cancel(struct conn *c, const Request *req)
{
	const Rok__V1__CancelRequest *cr = req->cancel;

	if (!idlist_check(c, req->id, cr->n_ids, "task ids"))
		return;
	struct cancel_job *j = malloc(sizeof(*j) + cr->n_ids * sizeof(j->ids[0]));
	if (j == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	j->conn = c;
	j->req_id = req->id;
	j->uid = conn_uid(c);
	j->n = cr->n_ids;
	if (cr->n_ids > 0)
		memcpy(j->ids, cr->ids, cr->n_ids * sizeof(j->ids[0]));
	if (conn_offload(c, req->id, cancel_run, j) < 0)
		free(j);
}
