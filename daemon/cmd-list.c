/*
 * cmd-list.c — the caller's tasks in id order, one page at a time.
 */
#include "rokd.h"

#define LIST_PAGE_DEFAULT 1000
#define LIST_PAGE_MAX 10000

void cmd_list(struct conn *c, const Request *req)
{
	const Rok__V1__ListRequest *l = req->list;
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__ListReply lr = ROK__V1__LIST_REPLY__INIT;
	size_t limit = l->limit == 0 ? LIST_PAGE_DEFAULT
	               : l->limit > LIST_PAGE_MAX ? LIST_PAGE_MAX : l->limit;

	if ((unsigned)l->state >= RT_NSTATES) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "unknown task state %d", (int)l->state);
		return;
	}
	TaskInfo **infos = tasktab_infos_new(limit);
	if (infos == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	bool more;
	size_t n = tasktab_list(conn_uid(c), (int)l->state, l->after_id, limit,
	                        infos, &more);
	lr.n_tasks = n;
	lr.tasks = infos;
	lr.more = more;
	resp.id = req->id;
	resp.body_case = ROK__V1__RESPONSE__BODY_LIST;
	resp.list = &lr;
	conn_send(c, &resp);
	tasktab_infos_free(infos, limit);
}
