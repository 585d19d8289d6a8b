/*
 * cmd-select.c — spawn every spec; the first to finish wins and the others
 * are cancelled.  All specs are checked before any is spawned.
 */
#include <stdlib.h>

#include "rokd.h"
#include "waiter.h"

void cmd_select(struct conn *c, const Request *req)
{
	const Rok__V1__SelectRequest *s = req->select;
	char err[160];
	size_t n = s->n_specs;

	if (n == 0) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "select needs at least one task spec");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const TaskSpec *spec = s->specs[i];
		const struct kind *k = spec != NULL
		        ? kind_find(spec->kind.data, spec->kind.len) : NULL;
		if (k == NULL || k->check(spec, err, sizeof(err)) < 0) {
			conn_send_error(c, req->id,
			                ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
			                "spec %zu: %s", i,
			                k == NULL ? "unknown task kind" : err);
			return;
		}
	}
	uint64_t *ids = malloc(n * sizeof(*ids));
	if (ids == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct rtask *r;
		int code = cmd_create_task(c, s->specs[i], &r, err, sizeof(err));
		if (code != 0) {
			/* Those created already run on, as spawned tasks. */
			for (size_t k = 0; k < i; k++)
				(void)tasktab_cancel(ids[k], conn_uid(c));
			conn_send_error(c, req->id, (ErrorCode)code,
			                "spec %zu: %s", i, err);
			free(ids);
			return;
		}
		ids[i] = tasktab_id(r);
		(void)tasktab_start(r, s->specs[i], NULL);
	}
	(void)waiter_start(c, req->id, WAIT_SELECT, ids, n, s->timeout_ms, true);
	free(ids);
}
