/*
 * cmd-hello.c — the version exchange that opens every connection.
 */
#include <string.h>

#include "rokd.h"

void cmd_hello(struct conn *c, const Request *req)
{
	const Rok__V1__Hello *h = req->hello;
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__HelloReply hr = ROK__V1__HELLO_REPLY__INIT;
	static const char version[] = "rokd " ROKD_VERSION;

	if (h->protocol_version != ROKD_PROTOCOL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "protocol version %u is not supported; this "
		                "daemon speaks version %u",
		                h->protocol_version, ROKD_PROTOCOL);
		return;
	}
	hr.protocol_version = ROKD_PROTOCOL;
	hr.software_version.data = (uint8_t *)(uintptr_t)version;
	hr.software_version.len = strlen(version);
	hr.uid = (uint32_t)conn_uid(c);
	hr.max_frame = config.max_frame;
	hr.max_in_flight = config.max_in_flight;
	resp.id = req->id;
	resp.body_case = ROK__V1__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	conn_set_hello_done(c);
	conn_send(c, &resp);
}
