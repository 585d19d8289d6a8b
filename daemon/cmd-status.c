/*
 * cmd-status.c — what is known of each listed task, now.
 *
 * The reactor thread checks the list (at most max_ids ids, each answered
 * once however often it is named) and hands the rest to the blocking pool:
 * a task no longer in memory is read from the journal, which must not hold
 * up the reactor.  The reply is built within the frame limit: a list whose
 * tasks do not fit in one frame is answered RESOURCE_EXHAUSTED as soon as
 * the limit is passed, before more copies are made.
 */
#include <stdlib.h>

#include "rokd.h"

struct status_job {
	struct conn *conn;
	uint64_t req_id;
	uid_t uid;
	size_t n;
	uint64_t ids[];
};

/* Blocking pool: answers the request and frees the job. */
static void *status_run(void *arg)
{
	struct status_job *j = arg;
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__StatusReply sr = ROK__V1__STATUS_REPLY__INIT;
	TaskInfo **infos = tasktab_infos_new(j->n);

	if (infos == NULL) {
		reply_post_error(j->conn, j->req_id,
		                 ROK__V1__ERROR_CODE__INTERNAL, "out of memory");
	} else if (tasktab_infos_fill(j->ids, j->n, j->uid, infos,
	                              tasktab_reply_budget()) < j->n) {
		reply_post_error(j->conn, j->req_id,
		                 ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
		                 "reply larger than the frame limit: ask for "
		                 "fewer tasks");
	} else {
		sr.n_tasks = j->n;
		sr.tasks = infos;
		resp.id = j->req_id;
		resp.body_case = ROK__V1__RESPONSE__BODY_STATUS;
		resp.status = &sr;
		reply_post(j->conn, &resp);
	}
	tasktab_infos_free(infos, j->n);
	free(j);
	return NULL;
}

void cmd_status(struct conn *c, const Request *req)
{
	const Rok__V1__StatusRequest *s = req->status;

	if (!idlist_check(c, req->id, s->n_ids, "task ids"))
		return;
	struct status_job *j = malloc(sizeof(*j) + s->n_ids * sizeof(j->ids[0]));
	ssize_t n = j != NULL ? idlist_dedup(s->ids, s->n_ids, j->ids, NULL) : -1;
	if (n < 0) {
		free(j);
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	j->conn = c;
	j->req_id = req->id;
	j->uid = conn_uid(c);
	j->n = (size_t)n;
	if (conn_offload(c, req->id, status_run, j) < 0)
		free(j);
}
