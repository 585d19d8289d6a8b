/*
 * cmd-select.c — spawn every spec; the first to finish wins and the others
 * are cancelled.  All specs are checked before any is spawned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "rokd.h"
#include "waiter.h"

/* A select waiting for its journal commit: every spec is journaled in one
 * batch, and the tasks start together once it committed. */
struct select_pending {
	struct conn *conn;
	uint64_t req_id;
	uint64_t timeout_ms;
	size_t n;
	struct {
		struct rtask *rec;
		uint8_t *spec;          /* packed */
		size_t spec_len;
		bool gated;             /* gate_needed */
	} task[];
};

/* Drops the records (never started nor acknowledged) and p. */
static void select_drop(struct select_pending *p)
{
	for (size_t i = 0; i < p->n; i++) {
		tasktab_discard(p->task[i].rec);
		free(p->task[i].spec);
	}
	free(p);
}

/* Reactor thread, after the commit (err 0) or its failure. */
static void select_done(void *arg, int err, const char *msg)
{
	struct select_pending *p = arg;
	struct conn *c = p->conn;

	if (err < 0) {
		conn_send_error(c, p->req_id, ROK__V1__ERROR_CODE__UNAVAILABLE,
		                "%s; no task was spawned", msg);
		select_drop(p);
		conn_end_wait(c);
		return;
	}
	uint64_t *ids = malloc(p->n * sizeof(*ids));
	for (size_t i = 0; i < p->n; i++) {
		/* Before the start: a record that fails may be evicted. */
		if (ids != NULL)
			ids[i] = tasktab_id(p->task[i].rec);
		if (p->task[i].gated)
			(void)gate_submit_packed(p->task[i].rec,
			                         p->task[i].spec,
			                         p->task[i].spec_len);
		else
			(void)tasktab_start_packed(p->task[i].rec,
			                           p->task[i].spec,
			                           p->task[i].spec_len, NULL);
		free(p->task[i].spec);
	}
	/* The waiter takes over the wait begun in cmd_select: with the tasks
	 * running, the in-flight limit must not refuse it now. */
	if (ids == NULL) {
		conn_send_error(c, p->req_id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		conn_end_wait(c);
	} else if (waiter_start(c, p->req_id, WAIT_SELECT, ids, NULL, p->n,
	                        p->timeout_ms, true, true) < 0) {
		/* Answered with the error: nobody waits for the winner, so
		 * no task of this select may run on. */
		for (size_t i = 0; i < p->n; i++)
			(void)tasktab_cancel(ids[i], conn_uid(c));
	}
	free(ids);
	free(p);
}

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
	if (duration_check_ms(s->timeout_ms, "timeout_ms", err,
	                      sizeof(err)) < 0) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
		                "%s", err);
		return;
	}
	if (!idlist_check(c, req->id, n, "task specs"))
		return;
	/* Each dependency may cost a journal read on this thread, at the
	 * check and again at the commit: max_ids bounds the whole request,
	 * as it does one spawn's, not each spec. */
	size_t ndeps = 0, max = config.max_ids;
	for (size_t i = 0; i < n; i++) {
		const TaskSpec *spec = s->specs[i];
		if (spec == NULL)
			continue;
		if (spec->n_after > max - ndeps ||
		    spec->n_after_any > max - ndeps - spec->n_after) {
			conn_send_error(c, req->id,
			                ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
			                "too many dependencies in one select (the "
			                "specs' after and after_any together; the "
			                "limit is max_ids = %zu)", max);
			return;
		}
		ndeps += spec->n_after + spec->n_after_any;
	}
	for (size_t i = 0; i < n; i++) {
		const TaskSpec *spec = s->specs[i];
		const struct kind *k = spec != NULL
		        ? kind_find(spec->kind.data, spec->kind.len) : NULL;
		if (k == NULL || kind_check(k, spec, err, sizeof(err)) < 0) {
			conn_send_error(c, req->id,
			                ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
			                "spec %zu: %s", i,
			                k == NULL ? "unknown task kind" : err);
			return;
		}
	}
	struct select_pending *p = calloc(1, sizeof(*p) +
	                                  n * sizeof(p->task[0]));
	struct journal_spawn_item *items = calloc(n, sizeof(*items));
	if (p == NULL || items == NULL) {
		free(p);
		free(items);
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return;
	}
	if (!conn_begin_wait(c, req->id)) {
		free(p);
		free(items);
		return;   /* answered */
	}
	p->conn = c;
	p->req_id = req->id;
	p->timeout_ms = s->timeout_ms;
	p->n = n;
	for (size_t i = 0; i < n; i++) {
		int code = cmd_create_task(c, s->specs[i], &p->task[i].rec, err,
		                           sizeof(err));
		size_t len = code == 0 ? rok__v1__task_spec__get_packed_size(
		                                 s->specs[i]) : 0;
		if (code == 0 && (p->task[i].spec = malloc(len + 1)) == NULL) {
			tasktab_discard(p->task[i].rec);
			code = ROK__V1__ERROR_CODE__INTERNAL;
			snprintf(err, sizeof(err), "out of memory");
		}
		if (code != 0) {
			/* Nothing was started: those created are dropped. */
			p->n = i;
			select_drop(p);
			free(items);
			conn_send_error(c, req->id, (ErrorCode)code,
			                "spec %zu: %s", i, err);
			conn_end_wait(c);
			return;
		}
		p->task[i].spec_len = rok__v1__task_spec__pack(s->specs[i],
		                                               p->task[i].spec);
		p->task[i].gated = gate_needed(s->specs[i]);
		items[i] = (struct journal_spawn_item){
			.id = tasktab_id(p->task[i].rec), .uid = conn_uid(c),
			.kind = kind_find(s->specs[i]->kind.data,
			                  s->specs[i]->kind.len)->name,
			.spec = p->task[i].spec, .spec_len = p->task[i].spec_len,
			.spawned_us = tasktab_spawned_us(p->task[i].rec),
			.group = s->specs[i]->group.data,
			.group_len = s->specs[i]->group.len,
			.queued_us = tasktab_queued_us(p->task[i].rec),
		};
	}
	int e = journal_spawn(items, n, select_done, p);
	free(items);
	if (e < 0) {
		select_drop(p);
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__UNAVAILABLE,
		                "journal: %s", strerror(-e));
		conn_end_wait(c);
	}
}
