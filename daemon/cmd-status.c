/*
 * cmd-status.c — what is known of each listed task, now.
 */
#include "rokd.h"

void cmd_status(struct conn *c, const Request *req)
{
	const Rok__V1__StatusRequest *s = req->status;
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__StatusReply sr = ROK__V1__STATUS_REPLY__INIT;
	size_t n = s->n_ids;
	TaskInfo **infos = tasktab_infos_new(n);

	if (infos == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++)
		tasktab_info(s->ids[i], conn_uid(c), infos[i]);
	sr.n_tasks = n;
	sr.tasks = infos;
	resp.id = req->id;
	resp.body_case = ROK__V1__RESPONSE__BODY_STATUS;
	resp.status = &sr;
	conn_send(c, &resp);
	tasktab_infos_free(infos, n);
}
