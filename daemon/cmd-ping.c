/*
 * cmd-ping.c — echoes its payload: liveness and round-trip measurement.
 */
#include "rokd.h"

void cmd_ping(struct conn *c, const Request *req)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__PingReply pr = ROK__V1__PING_REPLY__INIT;

	pr.payload = req->ping->payload;
	resp.id = req->id;
	resp.body_case = ROK__V1__RESPONSE__BODY_PING;
	resp.ping = &pr;
	conn_send(c, &resp);
}
