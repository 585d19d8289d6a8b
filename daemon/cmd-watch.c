/*
 * cmd-watch.c — `watch`: task events pushed to a client as they happen.
 * Reactor thread.
 *
 * A watcher is one watch request in progress (rok.proto, WatchRequest): a
 * stream of its connection (conn.c's interface) and a subscriber to the
 * task table's state changes (events.c).  It counts as one request in
 * flight (conn_begin_wait) and as one of its uid's streams
 * (max_followers_per_user, held by conn_stream_add, shared with logs).
 *
 * What it sends: first the snapshot, taken after subscribing, with the
 * table's change counter, closed by a marker, then the changes as events
 * bring them, through a FIFO of small entries (id, state, time).  An event
 * whose counter is not above the snapshot's is in the snapshot already and
 * is dropped, so a change is reported once.  With ids the snapshot is
 * taken whole (tasktab_snapshot) into the FIFO.  Without, it would be as
 * large as the uid's unfinished tasks (a quarter million by default, and
 * root's is everyone's), built on this thread under the table's lock:
 * one user's watches would stall every client.  So it is taken a step at
 * a time (tasktab_cursor_step, a bounded walk of the uid's own list of
 * unfinished tasks) whenever the connection has room, one step per loop
 * turn; what changes before the walk reaches it is left to its event,
 * which waits in the FIFO behind the marker.  An entry becomes a
 * WatchEvent only when the connection has room (conn_stream_room); an
 * end's TaskInfo is read then.  So a client that does not read holds the
 * pause mark of queued bytes plus its FIFO: the snapshot of ids (bounded
 * by max_ids), or a step of one without, and at most watch_lag_max
 * events.  One event more and the watcher lags: its FIFO is
 * dropped, later events are only counted, and once the connection has room
 * it sends "lagged: N", takes a fresh snapshot and goes on.
 *
 * With ids, every id's end is reported exactly once (a bit per id, kept
 * across fresh snapshots) and the stream ends once all have been, with an
 * end marker sent through reply_post (which ends the wait).  A snapshot
 * entry of an id no longer in memory (finished long ago) is sent with its
 * TaskInfo from the journal, which is not read on this thread: when an id
 * is not in memory (tasktab_lookup_mem), the ids are checked and those
 * TaskInfos read in the blocking pool (conn_offload, whose wait is the
 * stream's), which answers an error itself or hands the watcher back to
 * this thread.  (A task evicted between that check and its send is still
 * read here, by tasktab_info.)
 *
 * An id whose spawn is not committed yet is watched as the task it will
 * be; if the journal refuses that spawn, the record is dropped
 * (EVENTS_GONE) and the watch ends NOT_FOUND, as it would have had the id
 * been unknown when it came.
 *
 * Groups: a watch of a group (without ids) sees the tasks whose
 * TaskInfo.group is that group's name, "default" also those spawned without
 * one; a group that does not exist (yet, or any more) is no error, it
 * matches what is spawned into it.
 */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reactor.h"
#include "rokd.h"

#define WATCH_EVENTS (EVENTS_STATE | EVENTS_END | EVENTS_GONE)
#define WATCH_STEP 256   /* snapshot entries taken at once (a cursor) */

enum {
	WATCH_SNAP = 1u << 0,        /* part of a snapshot */
	WATCH_SNAP_DONE = 1u << 1,   /* the marker closing a snapshot */
};

struct watch_ent {
	uint64_t id;
	uint64_t time_us;
	int state;                   /* 0: not in memory, look it up */
	unsigned flags;
};

struct watcher {
	struct conn_stream stream;   /* first: conn.c hands it back */
	struct conn *conn;
	uid_t uid;                   /* the connection's */
	uint64_t req_id;
	uint64_t *ids;               /* sorted; NULL: all the uid's tasks */
	uint8_t *ended;              /* per id: its end was reported */
	TaskInfo *finals;            /* per id: the journal's, if read */
	uint8_t *has_final;
	bool need_journal;           /* an id is known to the journal only */
	size_t nids, left;           /* left: ids whose end is to come */
	unsigned states;             /* a bit per state; 0: every state */
	bool has_group;              /* only tasks of this group: */
	char group[GROUP_NAME_MAX + 1];
	uint64_t seq;                /* the snapshot's change counter */
	/* Without ids, the snapshot is taken a step at a time as the
	 * connection has room (tasktab_cursor_step), a step per turn of the
	 * reactor (resume, a timer of no delay): the entries of the step
	 * go out first, then (marker) the marker, then the FIFO. */
	struct tasktab_cursor *cur;
	struct event *resume;
	bool walking, marker;
	struct tasktab_snap *step;   /* WATCH_STEP entries */
	size_t soff, slen;
	struct watch_ent *q;         /* FIFO: q[qoff..qlen) */
	size_t qoff, qlen, qcap;
	size_t live;                 /* events (not snapshot) in the FIFO */
	bool lagging;
	uint64_t lagged;             /* events dropped since it lagged */
	struct watcher *prev, *next;
};

static struct {
	struct watcher *head;        /* every watcher, for the events */
} watch;

static void watch_event_cb(const struct events_ev *ev);

static bool watch_is_end(int state)
{
	return state == 0 || state >= RT_SUCCEEDED;
}

static int watch_cmp_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The index of id in w->ids, or -1 (also when w watches all). */
static ssize_t watch_find(const struct watcher *w, uint64_t id)
{
	if (w->ids == NULL)
		return -1;
	const uint64_t *p = bsearch(&id, w->ids, w->nids, sizeof(id),
	                            watch_cmp_id);
	return p != NULL ? p - w->ids : -1;
}

/* Whether an entry in `state` is wanted in the FIFO: it passes the state
 * filter, or it is the end of a named id (which ends the stream). */
static bool watch_wants(const struct watcher *w, int state, bool named)
{
	if (w->states == 0 || (w->states & (1u << state)))
		return true;
	return named && watch_is_end(state);
}

/* Frees w's memory (w is in no list). */
static void watch_discard(struct watcher *w)
{
	for (size_t k = 0; w->has_final != NULL && k < w->nids; k++)
		if (w->has_final[k])
			tasktab_info_free(&w->finals[k]);
	free(w->finals);
	free(w->has_final);
	free(w->ids);
	free(w->ended);
	free(w->q);
	if (w->resume != NULL)
		event_free(w->resume);
	tasktab_cursor_free(w->cur);
	free(w->step);
	free(w);
}

static void watch_free(struct watcher *w)
{
	if (w->prev != NULL)
		w->prev->next = w->next;
	else
		watch.head = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	conn_stream_remove(&w->stream);   /* and its QUOTA_FOLLOWERS */
	events_unsubscribe(watch_event_cb, WATCH_EVENTS);
	watch_discard(w);
}

/* Sends the end marker (ending the wait) and forgets w. */
static void watch_end(struct watcher *w)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__WatchEvent we = ROK__V1__WATCH_EVENT__INIT;

	we.end = true;
	resp.id = w->req_id;
	resp.body_case = ROK__V1__RESPONSE__BODY_WATCH;
	resp.watch = &we;
	reply_post(w->conn, &resp);   /* delivered after every event sent */
	watch_free(w);
}

static void watch_fail(struct watcher *w, const char *why)
{
	reply_post_error(w->conn, w->req_id, ROK__V1__ERROR_CODE__INTERNAL,
	                 why);
	watch_free(w);
}

/* Ends w with NOT_FOUND: task id, one of its ids, never was a task. */
static void watch_gone(struct watcher *w, uint64_t id)
{
	char msg[96];

	snprintf(msg, sizeof(msg), "task %llu: no such task (its spawn was "
	         "refused)", (unsigned long long)id);
	reply_post_error(w->conn, w->req_id, ROK__V1__ERROR_CODE__NOT_FOUND,
	                 msg);
	watch_free(w);
}

/* Appends an entry: 0 or -ENOMEM. */
static int watch_push(struct watcher *w, const struct watch_ent *e)
{
	if (w->qlen == w->qcap && w->qoff > 0) {
		memmove(w->q, w->q + w->qoff,
		        (w->qlen - w->qoff) * sizeof(*w->q));
		w->qlen -= w->qoff;
		w->qoff = 0;
	}
	if (w->qlen == w->qcap) {
		size_t n = w->qcap > 0 ? w->qcap * 2 : 64;
		struct watch_ent *q = realloc(w->q, n * sizeof(*q));
		if (q == NULL)
			return -ENOMEM;
		w->q = q;
		w->qcap = n;
	}
	w->q[w->qlen++] = *e;
	return 0;
}

/* Replaces the FIFO by a fresh snapshot and its marker: 0 or -ENOMEM.
 * Without ids the snapshot is only started (watch_pump takes it). */
static int watch_snapshot(struct watcher *w)
{
	struct tasktab_snap *snap;
	w->qoff = w->qlen = w->live = 0;
	if (w->ids == NULL) {
		w->soff = w->slen = 0;
		w->walking = w->marker = true;
		return tasktab_cursor_start(w->cur, &w->seq);
	}
	ssize_t n = tasktab_snapshot(w->ids, w->nids, &snap, &w->seq);
	if (n < 0)
		return (int)n;
	for (ssize_t i = 0; i < n; i++) {
		ssize_t k = watch_find(w, snap[i].id);
		if (k >= 0 && w->ended[k])
			continue;   /* reported before a lag */
		if (!watch_wants(w, snap[i].state, k >= 0))
			continue;
		struct watch_ent e = {
			.id = snap[i].id, .time_us = snap[i].time_us,
			.state = snap[i].state, .flags = WATCH_SNAP,
		};
		if (watch_push(w, &e) < 0) {
			free(snap);
			return -ENOMEM;
		}
	}
	free(snap);
	return watch_push(w, &(struct watch_ent){ .flags = WATCH_SNAP_DONE });
}

static void watch_send_event(struct watcher *w, Rok__V1__WatchEvent *we)
{
	Response resp = ROK__V1__RESPONSE__INIT;

	resp.id = w->req_id;
	resp.body_case = ROK__V1__RESPONSE__BODY_WATCH;
	resp.watch = we;
	conn_send(w->conn, &resp);
}

/* Sends one entry (or skips it): true if that ended (freed) w. */
static bool watch_send(struct watcher *w, const struct watch_ent *e)
{
	Rok__V1__WatchEvent we = ROK__V1__WATCH_EVENT__INIT;
	TaskInfo info;

	if (e->flags & WATCH_SNAP_DONE) {
		we.snapshot_done = true;
		watch_send_event(w, &we);
		if (w->ids != NULL && w->left == 0) {
			watch_end(w);   /* every id had ended already */
			return true;
		}
		return false;
	}
	ssize_t k = watch_find(w, e->id);
	if (k >= 0 && w->ended[k])
		return false;   /* its end was reported */
	int state = e->state;
	we.time_us = e->time_us;
	bool ended = watch_is_end(state);
	bool own = false;   /* info filled here, freed here */
	if (ended) {
		TaskInfo *ti = &info;
		if (state == 0 && k >= 0 && w->has_final != NULL &&
		    w->has_final[k]) {
			ti = &w->finals[k];   /* read in the pool */
		} else {
			tasktab_info(e->id, w->uid, &info);
			own = true;
		}
		if (state == 0) {   /* not in memory: as the journal has it */
			state = (int)ti->state;
			we.time_us = ti->finished_us;
		}
		we.task = ti;
	}
	we.id = e->id;
	we.state = (Rok__V1__TaskState)state;
	we.snapshot = (e->flags & WATCH_SNAP) != 0;
	if (w->states == 0 || (state > 0 && state < RT_NSTATES &&
	                       (w->states & (1u << state))))
		watch_send_event(w, &we);
	if (own)
		tasktab_info_free(&info);
	if (k >= 0 && ended) {
		w->ended[k] = 1;
		/* A snapshot is sent whole, marker included. */
		if (--w->left == 0 && !(e->flags & WATCH_SNAP)) {
			watch_end(w);
			return true;
		}
	}
	return false;
}

/* The next snapshot entry without ids, into *e: false when the step is
 * used up, or nothing is left but the marker and the FIFO. */
static bool watch_snap_next(struct watcher *w, struct watch_ent *e)
{
	while (w->soff < w->slen) {
		const struct tasktab_snap *t = &w->step[w->soff++];
		if (!watch_wants(w, t->state, false))
			continue;
		*e = (struct watch_ent){
			.id = t->id, .time_us = t->time_us, .state = t->state,
			.flags = WATCH_SNAP,
		};
		return true;
	}
	return false;
}

/* Pumps w again on the next loop turn, after the other connections' I/O
 * (a timer of no delay fires after the next poll). */
static void watch_resume_later(struct watcher *w)
{
	static const struct timeval now = { 0, 0 };

	if (!evtimer_pending(w->resume, NULL) && evtimer_add(w->resume, &now) < 0)
		watch_fail(w, "cannot resume a snapshot");
}

/* Sends what the connection has room for.  w may be freed. */
static void watch_pump(struct watcher *w)
{
	bool stepped = false;

	while (conn_stream_room(w->conn)) {
		struct watch_ent e;
		if (w->lagging) {
			Rok__V1__WatchEvent we = ROK__V1__WATCH_EVENT__INIT;
			we.lagged = w->lagged;
			watch_send_event(w, &we);
			w->lagging = false;
			w->lagged = 0;
			if (watch_snapshot(w) < 0) {
				watch_fail(w, "out of memory for a snapshot");
				return;
			}
			continue;
		}
		if (watch_snap_next(w, &e)) {
			(void)watch_send(w, &e);   /* no ids: it never ends w */
			continue;
		}
		if (w->walking) {
			if (stepped) {
				/* The other connections' turn first. */
				watch_resume_later(w);
				return;
			}
			bool done;
			w->slen = tasktab_cursor_step(w->cur,
			                              w->has_group ? w->group
			                                           : NULL,
			                              w->step, WATCH_STEP, &done);
			w->soff = 0;
			w->walking = !done;
			stepped = true;
			continue;
		}
		if (w->marker) {
			w->marker = false;
			e = (struct watch_ent){ .flags = WATCH_SNAP_DONE };
		} else if (w->qoff < w->qlen) {
			e = w->q[w->qoff++];
			if (!(e.flags & (WATCH_SNAP | WATCH_SNAP_DONE)))
				w->live--;
		} else {
			return;
		}
		if (watch_send(w, &e))
			return;
	}
	/* Closed (it hears on a later turn) or full: writable resumes. */
}

static void watch_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	watch_pump(arg);
}

/* Queues an event for w, or counts it dropped once w lags. */
static void watch_queue(struct watcher *w, const struct events_ev *ev)
{
	if (w->lagging) {
		w->lagged++;
		return;
	}
	struct watch_ent e = {
		.id = ev->id, .time_us = ev->time_us, .state = ev->state,
	};
	uint32_t max = config.watch_lag_max > 0 ? config.watch_lag_max : 1;

	if (w->live >= max || watch_push(w, &e) < 0) {
		/* Too far behind (or out of memory): what is queued goes,
		 * a fresh snapshot will stand for it. */
		w->lagged = w->live + 1;
		w->lagging = true;
		w->qoff = w->qlen = w->live = 0;
		return;
	}
	w->live++;
}

static void watch_event_cb(const struct events_ev *ev)
{
	for (struct watcher *w = watch.head, *next; w != NULL; w = next) {
		next = w->next;   /* watch_pump frees only w */
		if (ev->seq <= w->seq || (w->uid != 0 && ev->uid != w->uid) ||
		    (w->has_group && w->ids == NULL &&
		     !tasktab_in_group(ev->group, w->group)))
			continue;
		ssize_t k = watch_find(w, ev->id);
		if (w->ids != NULL && k < 0)
			continue;
		if (ev->kind == EVENTS_GONE) {
			/* Watched while its spawn's commit was pending, then
			 * refused by the journal: it never was a task, and no
			 * end would ever come.  Nobody else saw it. */
			if (k >= 0)
				watch_gone(w, ev->id);
			continue;
		}
		if (!watch_wants(w, ev->state, k >= 0))
			continue;
		watch_queue(w, ev);
		/* A walk goes a step per turn, not a step per event. */
		if (w->walking)
			watch_resume_later(w);
		else
			watch_pump(w);
	}
}

static void watch_writable(struct conn_stream *s)
{
	watch_pump((struct watcher *)(void *)s);
}

static void watch_closed(struct conn_stream *s)
{
	watch_end((struct watcher *)(void *)s);   /* only ends the wait */
}

static const struct conn_stream_ops watch_ops = {
	.writable = watch_writable,
	.closed = watch_closed,
	.shutdown = watch_closed,   /* a stream of all tasks never ends */
};

/* Checks and copies the request's ids into w (sorted, each once): 0, or
 * an ErrorCode answered already. */
static int watch_set_ids(struct conn *c, const Request *req,
                         struct watcher *w)
{
	const Rok__V1__WatchRequest *wr = req->watch;

	if (!idlist_check(c, req->id, wr->n_ids, "task ids"))
		return ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
	w->ids = malloc(wr->n_ids * sizeof(*w->ids));
	ssize_t n = w->ids != NULL
	            ? idlist_dedup(wr->ids, wr->n_ids, w->ids, NULL) : -1;
	w->ended = n >= 0 ? calloc((size_t)n, 1) : NULL;
	if (n < 0 || w->ended == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return ROK__V1__ERROR_CODE__INTERNAL;
	}
	w->nids = w->left = (size_t)n;
	qsort(w->ids, w->nids, sizeof(*w->ids), watch_cmp_id);
	for (size_t i = 0; i < w->nids; i++) {
		int code;
		/* The lookup's own answer, which allocates nothing (as in
		 * cmd_logs): another user's task is never watched. */
		if (!tasktab_lookup_mem(w->ids[i], conn_uid(c), &code)) {
			w->need_journal = true;   /* checked in the pool */
			continue;
		}
		if (code != 0) {
			conn_send_error(c, req->id, (ErrorCode)code,
			                "task %llu: %s",
			                (unsigned long long)w->ids[i],
			                code == ROK__V1__ERROR_CODE__PERMISSION_DENIED
			                        ? "belongs to another user"
			                        : "no such task");
			return code;
		}
	}
	return 0;
}

/* Checks the request into a new watcher (not listed yet), or answers it
 * and returns NULL. */
static struct watcher *watch_new(struct conn *c, const Request *req)
{
	const Rok__V1__WatchRequest *wr = req->watch;
	struct watcher *w = calloc(1, sizeof(*w));

	if (w == NULL) {
		conn_send_error(c, req->id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return NULL;
	}
	for (size_t i = 0; i < wr->n_states; i++) {
		int st = (int)wr->states[i];

		if (st <= 0 || st >= RT_NSTATES) {
			conn_send_error(c, req->id,
			                ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
			                "unknown task state %d",
			                (int)wr->states[i]);
			goto fail;
		}
		w->states |= 1u << st;
	}
	if (wr->n_ids > 0 && watch_set_ids(c, req, w) != 0)
		goto fail;
	if (wr->group.len > 0 && wr->n_ids == 0) {
		if (!group_name_ok(wr->group.data, wr->group.len)) {
			conn_send_error(c, req->id,
			                ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
			                "bad group name (1 to %d of A-Z a-z 0-9 "
			                "_ -)", GROUP_NAME_MAX);
			goto fail;
		}
		memcpy(w->group, wr->group.data, wr->group.len);
		w->group[wr->group.len] = '\0';
		w->has_group = true;
	}
	return w;
fail:
	watch_discard(w);
	return NULL;
}

/* Starts w, a request counted as a wait already (its own conn_begin_wait,
 * or the offload's). */
static void watch_start(struct watcher *w)
{
	struct conn *c = w->conn;

	if (w->ids == NULL &&
	    ((w->cur = tasktab_cursor_new(w->uid)) == NULL ||
	     (w->step = malloc(WATCH_STEP * sizeof(*w->step))) == NULL ||
	     (w->resume = evtimer_new(reactor_base(), watch_resume_cb,
	                              w)) == NULL)) {
		reply_post_error(c, w->req_id, ROK__V1__ERROR_CODE__INTERNAL,
		                 "out of memory for a snapshot");
		watch_discard(w);
		return;
	}
	/* Refused on a connection closed while the pool read (its streams
	 * were told already): only the wait ends. */
	if (!conn_stream_add(c, &w->stream, &watch_ops, w->req_id)) {
		watch_discard(w);   /* answered */
		return;
	}
	/* Subscribed before the snapshot: see events.c.  (Only a full
	 * subscriber table, a programming error, fails.) */
	if (events_subscribe(watch_event_cb, WATCH_EVENTS) < 0) {
		conn_stream_remove(&w->stream);
		reply_post_error(c, w->req_id, ROK__V1__ERROR_CODE__INTERNAL,
		                 "out of memory");
		watch_discard(w);
		return;
	}
	w->next = watch.head;
	if (watch.head != NULL)
		watch.head->prev = w;
	watch.head = w;
	if (watch_snapshot(w) < 0) {
		watch_fail(w, "out of memory for a snapshot");
		return;
	}
	watch_pump(w);
}

static void watch_start_cb(void *arg)
{
	watch_start(arg);
}

/* Blocking pool: checks the ids against the journal too and reads the
 * TaskInfo of those no longer in memory; answers an error, or hands w
 * back to the reactor thread. */
static void *watch_lookup_run(void *arg)
{
	struct watcher *w = arg;

	w->finals = calloc(w->nids, sizeof(*w->finals));
	w->has_final = calloc(w->nids, 1);
	if (w->finals == NULL || w->has_final == NULL) {
		reply_post_error(w->conn, w->req_id,
		                 ROK__V1__ERROR_CODE__INTERNAL, "out of memory");
		watch_discard(w);
		return NULL;
	}
	for (size_t k = 0; k < w->nids; k++) {
		rok_task *handle;
		int mcode;
		bool mem = tasktab_lookup_mem(w->ids[k], w->uid, &mcode);
		int code = tasktab_lookup(w->ids[k], w->uid, &handle);
		rok_task_unref(handle);
		if (code != 0) {
			char msg[96];
			snprintf(msg, sizeof(msg), "task %llu: %s",
			         (unsigned long long)w->ids[k],
			         code == ROK__V1__ERROR_CODE__PERMISSION_DENIED
			                 ? "belongs to another user"
			                 : "no such task");
			reply_post_error(w->conn, w->req_id, (ErrorCode)code,
			                 msg);
			watch_discard(w);
			return NULL;
		}
		if (!mem) {   /* finished: what the journal has is final */
			rok__v1__task_info__init(&w->finals[k]);
			tasktab_info(w->ids[k], w->uid, &w->finals[k]);
			w->has_final[k] = 1;
		}
	}
	if (reactor_call(watch_start_cb, w) < 0) {
		reply_post_error(w->conn, w->req_id,
		                 ROK__V1__ERROR_CODE__UNAVAILABLE,
		                 "rokd is stopping");
		watch_discard(w);
	}
	return NULL;
}

void cmd_watch(struct conn *c, const Request *req)
{
	struct watcher *w = watch_new(c, req);

	if (w == NULL)
		return;
	w->conn = c;
	w->uid = conn_uid(c);
	w->req_id = req->id;
	if (w->need_journal) {
		/* Only the journal knows some ids: off this thread. */
		if (conn_offload(c, req->id, watch_lookup_run, w) < 0)
			watch_discard(w);
		return;
	}
	if (!conn_begin_wait(c, req->id)) {
		watch_discard(w);
		return;   /* answered: too many requests in flight */
	}
	watch_start(w);
}
