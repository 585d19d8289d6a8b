/*
 * cmd-list.c — the caller's tasks in id order, one page at a time.
 *
 * A page holds up to the request's limit (LIST_PAGE_MAX at most) and no
 * more than fits in one frame: `more` tells the client to ask again from
 * the last id it got.  The page is built on the blocking pool, since tasks
 * no longer in memory are read from the journal.
 */
#include <stdlib.h>
#include <string.h>

#include "rokd.h"

#define LIST_PAGE_DEFAULT 1000
#define LIST_PAGE_MAX 10000

struct list_job {
	struct conn *conn;
	uint64_t req_id;
	uid_t uid;
	int state;
	uint64_t after;
	size_t limit;
	size_t group_len;           /* 0: any group */
	char group[GROUP_NAME_MAX + 1];
};

/* Blocking pool: answers the request and frees the job. */
static void *list_run(void *arg)
{
	struct list_job *j = arg;
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__ListReply lr = ROK__V1__LIST_REPLY__INIT;
	TaskInfo **infos = tasktab_infos_new(j->limit);
	bool more;

	if (infos == NULL) {
		reply_post_error(j->conn, j->req_id,
		                 ROK__V1__ERROR_CODE__INTERNAL, "out of memory");
		free(j);
		return NULL;
	}
	size_t n = tasktab_list(j->uid, j->state,
	                        j->group_len > 0 ? j->group : NULL, j->after,
	                        j->limit, tasktab_reply_budget(), infos, &more);
	if (n == 0 && more) {
		/* Not even one task fits: paging cannot get past it. */
		reply_post_error(j->conn, j->req_id,
		                 ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
		                 "the next task is larger than the frame "
		                 "limit; see it with status");
	} else {
		lr.n_tasks = n;
		lr.tasks = infos;
		lr.more = more;
		resp.id = j->req_id;
		resp.body_case = ROK__V1__RESPONSE__BODY_LIST;
		resp.list = &lr;
		reply_post(j->conn, &resp);
	}
	tasktab_infos_free(infos, j->limit);
	free(j);
	return NULL;
}

void cmd_list(struct conn *c, const Request *req)
{
	const Rok__V1__ListRequest *l = req->list;
	struct list_job *j;

	if ((unsigned)l->state >= RT_NSTATES) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "unknown task state %d", (int)l->state);
		return;
	}
	if (l->group.len > 0 && !group_name_ok(l->group.data, l->group.len)) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "not a group name");
		return;
	}
	if ((j = malloc(sizeof(*j))) == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	*j = (struct list_job){
		.conn = c, .req_id = req->id, .uid = conn_uid(c),
		.state = (int)l->state, .after = l->after_id,
		.limit = l->limit == 0 ? LIST_PAGE_DEFAULT
		         : l->limit > LIST_PAGE_MAX ? LIST_PAGE_MAX : l->limit,
		.group_len = l->group.len,
	};
	if (l->group.len > 0)
		memcpy(j->group, l->group.data, l->group.len);
	if (conn_offload(c, req->id, list_run, j) < 0)
		free(j);
}
