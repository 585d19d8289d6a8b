/*
 * dispatch.c — the table of request types.  Each type has its file
 * (cmd-NAME.c); the reactor thread calls dispatch() for every decoded
 * request, which borrows it: the connection frees it after.
 */
#include "rokd.h"

static const struct cmd cmds[] = {
	{ ROK__V1__REQUEST__BODY_HELLO, "hello", cmd_hello },
	{ ROK__V1__REQUEST__BODY_SPAWN, "spawn", cmd_spawn },
	{ ROK__V1__REQUEST__BODY_JOIN, "join", cmd_join },
	{ ROK__V1__REQUEST__BODY_RACE, "race", cmd_race },
	{ ROK__V1__REQUEST__BODY_SELECT, "select", cmd_select },
	{ ROK__V1__REQUEST__BODY_CANCEL, "cancel", cmd_cancel },
	{ ROK__V1__REQUEST__BODY_STATUS, "status", cmd_status },
	{ ROK__V1__REQUEST__BODY_LIST, "list", cmd_list },
	{ ROK__V1__REQUEST__BODY_STATS, "stats", cmd_stats },
	{ ROK__V1__REQUEST__BODY_PING, "ping", cmd_ping },
	{ ROK__V1__REQUEST__BODY_LOGS, "logs", cmd_logs },
	{ ROK__V1__REQUEST__BODY_PRUNE, "prune", cmd_prune },
	{ ROK__V1__REQUEST__BODY_GROUP, "group", cmd_group },
	{ ROK__V1__REQUEST__BODY_WATCH, "watch", cmd_watch },
};

void dispatch(struct conn *c, const Request *req)
{
	if (req->body_case != ROK__V1__REQUEST__BODY_HELLO &&
	    !conn_hello_done(c)) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "the first request must be hello");
		return;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (cmds[i].body == req->body_case) {
			cmds[i].exec(c, req);
			return;
		}
	}
	/* An empty request, or a type this daemon does not know (a newer
	 * client's). */
	conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
	                "unknown or empty request");
}
