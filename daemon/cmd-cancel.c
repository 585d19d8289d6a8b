/*
 * cmd-cancel.c — request cancellation of tasks; answers at once.
 */
#include <stdlib.h>

#include "rokd.h"

void cmd_cancel(struct conn *c, const Request *req)
{
	const Rok__V1__CancelRequest *cr = req->cancel;
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__CancelReply rep = ROK__V1__CANCEL_REPLY__INIT;
	size_t n = cr->n_ids;
	Rok__V1__Error *errs = calloc(n > 0 ? n : 1, sizeof(*errs));
	Rok__V1__Error **ptrs = calloc(n > 0 ? n : 1, sizeof(*ptrs));

	if (errs == NULL || ptrs == NULL) {
		free(errs);
		free(ptrs);
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		rok__v1__error__init(&errs[i]);
		errs[i].code = (ErrorCode)tasktab_cancel(cr->ids[i], conn_uid(c));
		ptrs[i] = &errs[i];
	}
	rep.n_results = n;
	rep.results = ptrs;
	resp.id = req->id;
	resp.body_case = ROK__V1__RESPONSE__BODY_CANCEL;
	resp.cancel = &rep;
	conn_send(c, &resp);
	free(errs);
	free(ptrs);
}
