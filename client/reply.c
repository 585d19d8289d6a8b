/*
 * reply.c — turns a decoded rok.v1.Response into a rok_reply, the
 * library's own type, so that <rok/client.h> exposes no protobuf-c types
 * and a reply outlives the protobuf message it came from.  Also the names
 * of error codes and task states.
 *
 * A reply and everything it points to (tasks, byte strings, arrays) live in
 * one arena of chunks owned by the reply: rok_reply_free releases them all
 * at once.  Every byte string is copied with a terminating NUL so callers
 * may print text fields with %s; the length stays authoritative.
 *
 * Nothing here trusts the daemon beyond what protobuf-c checked: counts
 * come from the decoded message (already bounded by the frame size), and a
 * missing sub-message is read as an empty one.
 */
#include <errno.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client-private.h"
#include "promtext.h"

struct reply_chunk {
	struct reply_chunk *next;
	size_t used, cap;
	max_align_t data[];
};

/* The allocation behind a rok_reply: the reply, then its arena. */
struct reply_box {
	rok_reply r;
	struct reply_chunk *chunks;
	int err;                  /* -ENOMEM once an allocation failed */
};
_Static_assert(offsetof(struct reply_box, r) == 0,
	       "rok_reply_free finds the box from the reply");

static const uint8_t reply_empty[1];

#define REPLY_CHUNK 4096

static void *reply_alloc(struct reply_box *b, size_t n)
{
	struct reply_chunk *ch = b->chunks;
	const size_t align = alignof(max_align_t);

	if (b->err != 0)
		return NULL;
	if (n > SIZE_MAX - align) {
		b->err = -ENOMEM;
		return NULL;
	}
	n = (n + align - 1) & ~(align - 1);
	if (ch == NULL || ch->cap - ch->used < n) {
		size_t cap = n > REPLY_CHUNK ? n : REPLY_CHUNK;

		if (cap > SIZE_MAX - sizeof(*ch)) {
			b->err = -ENOMEM;
			return NULL;
		}
		ch = malloc(sizeof(*ch) + cap);
		if (ch == NULL) {
			b->err = -ENOMEM;
			return NULL;
		}
		ch->used = 0;
		ch->cap = cap;
		ch->next = b->chunks;
		b->chunks = ch;
	}
	void *p = (unsigned char *)ch->data + ch->used;

	ch->used += n;
	return p;
}

/* An array of n elements of `size` bytes, zeroed; NULL for n == 0. */
static void *reply_array(struct reply_box *b, size_t n, size_t size)
{
	void *p;

	if (n == 0)
		return NULL;
	if (n > SIZE_MAX / size) {
		b->err = -ENOMEM;
		return NULL;
	}
	p = reply_alloc(b, n * size);
	if (p != NULL)
		memset(p, 0, n * size);
	return p;
}

static rok_bytes reply_bytes(struct reply_box *b, ProtobufCBinaryData d)
{
	rok_bytes out = { reply_empty, 0 };
	uint8_t *p;

	if (d.len == 0 || d.data == NULL)
		return out;
	if (d.len == SIZE_MAX) {
		b->err = -ENOMEM;
		return out;
	}
	p = reply_alloc(b, d.len + 1);
	if (p == NULL)
		return out;
	memcpy(p, d.data, d.len);
	p[d.len] = 0;
	out.data = p;
	out.len = d.len;
	return out;
}

static void reply_error(struct reply_box *b, const Rok__V1__Error *m,
			rok_error *out)
{
	out->code = m != NULL ? (int)m->code : 0;
	out->message = m != NULL ? reply_bytes(b, m->message) :
		       (rok_bytes){ reply_empty, 0 };
}

static void reply_task(struct reply_box *b, const Rok__V1__TaskInfo *m,
		       rok_task_info *t)
{
	static const Rok__V1__TaskInfo none = ROK__V1__TASK_INFO__INIT;
	rok_bytes *args;

	if (m == NULL)
		m = &none;
	t->id = m->id;
	t->state = (int)m->state;
	t->kind = reply_bytes(b, m->kind);
	t->uid = m->uid;
	t->value = reply_bytes(b, m->value);
	t->has_exit_code = m->has_exit_code;
	t->exit_code = m->exit_code;
	t->has_signal = m->has_signal;
	t->signal = m->signal;
	t->spawned_us = m->spawned_us;
	t->started_us = m->started_us;
	t->finished_us = m->finished_us;
	t->output_truncated = m->output_truncated;
	t->retries = m->retries;
	t->waiting = reply_bytes(b, m->waiting);
	t->run = m->run;
	t->not_before_us = m->not_before_us;
	t->reason = reply_bytes(b, m->reason);
	t->group = reply_bytes(b, m->group);
	t->priority = (int)m->priority;
	t->waiting = reply_bytes(b, m->waiting);
	reply_error(b, m->error, &t->error);
	args = reply_array(b, m->n_args, sizeof(*args));
	for (size_t i = 0; args != NULL && i < m->n_args; i++)
		args[i] = reply_bytes(b, m->args[i]);
	t->args = args;
	t->n_args = args != NULL ? m->n_args : 0;
}

static void reply_tasks(struct reply_box *b, Rok__V1__TaskInfo *const *v,
			size_t n)
{
	rok_task_info *t = reply_array(b, n, sizeof(*t));

	for (size_t i = 0; t != NULL && i < n; i++)
		reply_task(b, v[i], &t[i]);
	b->r.tasks = t;
	b->r.n_tasks = t != NULL ? n : 0;
}

static void reply_ids(struct reply_box *b, const uint64_t *v, size_t n)
{
	uint64_t *ids = reply_array(b, n, sizeof(*ids));

	if (ids != NULL)
		memcpy(ids, v, n * sizeof(*ids));
	b->r.ids = ids;
	b->r.n_ids = ids != NULL ? n : 0;
}

/* A histogram as far as it fits (the daemon's bucket count is its own). */
static void reply_hist(const Rok__V1__Histogram *m, rok_histogram *h)
{
	size_t nb, nc;

	memset(h, 0, sizeof(*h));
	if (m == NULL || m->n_bounds_us == 0)
		return;
	nb = m->n_bounds_us < ROK_HISTOGRAM_MAX ? m->n_bounds_us
						: ROK_HISTOGRAM_MAX;
	h->n_bounds = nb;
	memcpy(h->bounds_us, m->bounds_us, nb * sizeof(h->bounds_us[0]));
	/* Buckets past those kept (and past the bounds) go to overflow. */
	nc = m->n_counts;
	for (size_t i = 0; i < nc; i++) {
		h->counts[i < nb ? i : nb] += m->counts[i];
		h->count += m->counts[i];
	}
	h->sum_us = m->sum_us;
}

static void reply_stats(const Rok__V1__StatsReply *m, rok_daemon_stats *s)
{
	s->workers = m->workers;
	s->steals = m->steals;
	s->parks = m->parks;
	s->polls = m->polls;
	s->injector_depth = m->injector_depth;
	s->queued = m->queued;
	s->running = m->running;
	s->succeeded = m->succeeded;
	s->failed = m->failed;
	s->cancelled = m->cancelled;
	s->timed_out = m->timed_out;
	s->interrupted = m->interrupted;
	s->registrations = m->registrations;
	s->blocking_threads = m->blocking_threads;
	s->connections = m->connections;
	s->uptime_ms = m->uptime_ms;
	s->handoffs = m->handoffs;
	for (size_t i = 0; i < m->n_tasks_total && i < 8; i++)
		s->tasks_total[i] = m->tasks_total[i];
	reply_hist(m->spawn_to_start, &s->spawn_to_start);
	reply_hist(m->run_time, &s->run_time);
	reply_hist(m->journal_commit, &s->journal_commit);
	s->output_bytes = m->output_bytes;
}

/* The Prometheus text of a stats reply (proto/promtext.c), in the arena. */
static void reply_prometheus(struct reply_box *b, const Rok__V1__StatsReply *m)
{
	char *text;
	size_t len;

	if (promtext_format(m, &text, &len) < 0) {
		b->err = -ENOMEM;
		return;
	}
	b->r.prometheus = reply_bytes(b, (ProtobufCBinaryData){
		.len = len, .data = (uint8_t *)text });
	free(text);
}

static void reply_groups(struct reply_box *b, Rok__V1__GroupInfo *const *gi,
			 size_t ngi, Rok__V1__GroupStats *const *gs,
			 size_t ngs)
{
	size_t n = gi != NULL ? ngi : ngs;
	rok_group *g = reply_array(b, n, sizeof(*g));

	for (size_t i = 0; g != NULL && i < n; i++) {
		if (gi != NULL) {
			g[i].name = reply_bytes(b, gi[i]->name);
			g[i].parallel = gi[i]->parallel;
			g[i].policy = (int)gi[i]->policy;
			g[i].backend = reply_bytes(b, gi[i]->backend);
			g[i].partition = reply_bytes(b, gi[i]->partition);
			g[i].paused = gi[i]->paused;
			for (size_t k = 0; k < 4 && k < gi[i]->n_weights; k++)
				g[i].weights[k] = gi[i]->weights[k];
		} else {
			g[i].name = reply_bytes(b, gs[i]->name);
			g[i].parallel = gs[i]->parallel;
			g[i].policy = (int)gs[i]->policy;
			g[i].backend = (rok_bytes){ reply_empty, 0 };
			g[i].partition = (rok_bytes){ reply_empty, 0 };
			g[i].paused = gs[i]->paused;
			g[i].running = gs[i]->running;
			for (size_t k = 0; k < 4 && k < gs[i]->n_queued; k++)
				g[i].queued[k] = gs[i]->queued[k];
		}
	}
	b->r.groups = g;
	b->r.n_groups = g != NULL ? n : 0;
}

static void reply_body(struct reply_box *b, const Rok__V1__Response *m)
{
	rok_reply *r = &b->r;

	switch (m->body_case) {
	case ROK__V1__RESPONSE__BODY_HELLO: {
		const Rok__V1__HelloReply *h = m->hello;

		r->type = ROK_REPLY_HELLO;
		r->server.protocol_version = h->protocol_version;
		r->server.software_version =
			(const char *)reply_bytes(b, h->software_version).data;
		r->server.uid = h->uid;
		r->server.max_frame = h->max_frame;
		r->server.max_in_flight = h->max_in_flight;
		break;
	}
	case ROK__V1__RESPONSE__BODY_SPAWN:
		r->type = ROK_REPLY_SPAWN;
		r->id = m->spawn->id;
		if (m->spawn->task != NULL)
			reply_tasks(b, &m->spawn->task, 1);
		break;
	case ROK__V1__RESPONSE__BODY_JOIN:
		r->type = ROK_REPLY_JOIN;
		reply_tasks(b, m->join->tasks, m->join->n_tasks);
		break;
	case ROK__V1__RESPONSE__BODY_RACE:
		r->type = ROK_REPLY_RACE;
		r->index = m->race->index;
		reply_tasks(b, &m->race->winner, 1);
		break;
	case ROK__V1__RESPONSE__BODY_SELECT:
		r->type = ROK_REPLY_SELECT;
		r->index = m->select->index;
		reply_tasks(b, &m->select->winner, 1);
		reply_ids(b, m->select->ids, m->select->n_ids);
		break;
	case ROK__V1__RESPONSE__BODY_CANCEL: {
		size_t n = m->cancel->n_results;
		rok_error *e = reply_array(b, n, sizeof(*e));

		r->type = ROK_REPLY_CANCEL;
		for (size_t i = 0; e != NULL && i < n; i++)
			reply_error(b, m->cancel->results[i], &e[i]);
		r->results = e;
		r->n_results = e != NULL ? n : 0;
		break;
	}
	case ROK__V1__RESPONSE__BODY_STATUS:
		r->type = ROK_REPLY_STATUS;
		reply_tasks(b, m->status->tasks, m->status->n_tasks);
		break;
	case ROK__V1__RESPONSE__BODY_LIST:
		r->type = ROK_REPLY_LIST;
		reply_tasks(b, m->list->tasks, m->list->n_tasks);
		r->more = m->list->more;
		break;
	case ROK__V1__RESPONSE__BODY_STATS:
		r->type = ROK_REPLY_STATS;
		reply_stats(m->stats, &r->stats);
		reply_prometheus(b, m->stats);
		reply_groups(b, NULL, 0, m->stats->groups, m->stats->n_groups);
		break;
	case ROK__V1__RESPONSE__BODY_GROUP:
		r->type = ROK_REPLY_GROUP;
		reply_groups(b, m->group->groups, m->group->n_groups, NULL, 0);
		break;
	case ROK__V1__RESPONSE__BODY_PING:
		r->type = ROK_REPLY_PING;
		r->payload = reply_bytes(b, m->ping->payload);
		break;
	case ROK__V1__RESPONSE__BODY_LOGS: {
		const Rok__V1__LogsReply *l = m->logs;
		size_t n = l->n_chunks;
		rok_log_chunk *ch = reply_array(b, n, sizeof(*ch));

		r->type = ROK_REPLY_LOGS;
		r->end = l->end;
		r->run = l->run;
		for (size_t i = 0; ch != NULL && i < n; i++) {
			ch[i].stream = (int)l->chunks[i]->stream;
			ch[i].data = reply_bytes(b, l->chunks[i]->data);
		}
		r->chunks = ch;
		r->n_chunks = ch != NULL ? n : 0;
		if (l->task != NULL)
			reply_tasks(b, &l->task, 1);
		break;
	}
	case ROK__V1__RESPONSE__BODY_WATCH: {
		const Rok__V1__WatchEvent *w = m->watch;

		r->type = ROK_REPLY_WATCH;
		r->id = w->id;
		r->state = (int)w->state;
		r->time_us = w->time_us;
		r->snapshot = w->snapshot;
		r->snapshot_done = w->snapshot_done;
		r->lagged = w->lagged;
		r->end = w->end;
		if (w->task != NULL)
			reply_tasks(b, &w->task, 1);
		break;
	}
	case ROK__V1__RESPONSE__BODY_PRUNE:
		r->type = ROK_REPLY_PRUNE;
		r->pruned = m->prune->pruned;
		break;
	default:   /* no body, or one newer than this library */
		r->type = ROK_REPLY_NONE;
		break;
	}
}

int reply_from_response(const Rok__V1__Response *m, rok_reply **out)
{
	struct reply_box *b = calloc(1, sizeof(*b));

	*out = NULL;
	if (b == NULL)
		return -ENOMEM;
	b->r.req_id = m->id;
	b->r.error.message = (rok_bytes){ reply_empty, 0 };
	b->r.payload = (rok_bytes){ reply_empty, 0 };
	b->r.prometheus = (rok_bytes){ reply_empty, 0 };
	b->r.server.software_version = (const char *)reply_empty;
	reply_error(b, m->error, &b->r.error);
	/* A typed error with code OK is no error; a body may still follow. */
	reply_body(b, m);
	if (b->err != 0) {
		int err = b->err;

		rok_reply_free(&b->r);
		return err;
	}
	*out = &b->r;
	return 0;
}

void rok_reply_free(rok_reply *r)
{
	struct reply_box *b;
	struct reply_chunk *ch, *next;

	if (r == NULL)
		return;
	b = (struct reply_box *)(void *)r;   /* r is its first member */
	for (ch = b->chunks; ch != NULL; ch = next) {
		next = ch->next;
		free(ch);
	}
	free(b);
}

/* ---- names ---------------------------------------------------------- */

#define REPLY_NAMES(a) (a), sizeof(a) / sizeof((a)[0])

/* names[v], or `other` for a value past the table. */
static const char *reply_name(const char *const *names, size_t n, int v,
			      const char *other)
{
	return v >= 0 && (size_t)v < n ? names[v] : other;
}

/* The value whose name is `name` (any case), index 0 (unspecified) left
 * out: the first match from 1, or -EINVAL. */
static int reply_parse(const char *const *names, size_t n, const char *name)
{
	for (size_t i = 1; i < n; i++)
		if (strcasecmp(name, names[i]) == 0)
			return (int)i;
	return -EINVAL;
}

static const char *const reply_error_names[] = {
	"ok", "not_found", "permission_denied", "invalid_argument",
	"resource_exhausted", "timed_out", "cancelled", "unavailable",
	"internal",
};

const char *rok_error_name(int code)
{
	static _Thread_local char buf[32];
	const char *s = reply_name(REPLY_NAMES(reply_error_names), code,
				   NULL);

	if (s != NULL)
		return s;
	snprintf(buf, sizeof(buf), "error_%d", code);
	return buf;
}

static const char *const reply_state_names[] = {
	"unspecified", "queued", "running", "succeeded", "failed",
	"cancelled", "timed_out", "interrupted",
};

const char *rok_state_name(int state)
{
	return reply_name(REPLY_NAMES(reply_state_names), state, "unknown");
}

int rok_state_parse(const char *name)
{
	return reply_parse(REPLY_NAMES(reply_state_names), name);
}

bool rok_state_finished(int state)
{
	return state >= ROK_TASK_SUCCEEDED;
}

/* ---- priorities and policies ----------------------------------------- */

/* "normal" twice: 0 (unspecified) means normal; parsing finds 3. */
static const char *const reply_priority_names[] = {
	"normal", "urgent", "high", "normal", "low",
};

const char *rok_priority_name(int priority)
{
	return reply_name(REPLY_NAMES(reply_priority_names), priority,
			  "unknown");
}

int rok_priority_parse(const char *name)
{
	return reply_parse(REPLY_NAMES(reply_priority_names), name);
}

static const char *const reply_policy_names[] = {
	"unspecified", "strict", "weighted",
};

const char *rok_policy_name(int policy)
{
	return reply_name(REPLY_NAMES(reply_policy_names), policy, "unknown");
}

int rok_policy_parse(const char *name)
{
	return reply_parse(REPLY_NAMES(reply_policy_names), name);
}
