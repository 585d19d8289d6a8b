/*
 * conn.c — one client connection, on the reactor thread.
 *
 * A connection is a libevent bufferevent over the accepted socket.  Bytes
 * that arrive are cut into frames (proto/wire.h); a frame longer than
 * config.max_frame, or one that does not decode, closes the connection
 * without a reply (the stream cannot be trusted any more); one that would
 * decode into more than conn_decode_limit bytes is answered
 * RESOURCE_EXHAUSTED instead, and the connection goes on.  Each decoded
 * request goes to dispatch(); the loop owns the message and handlers borrow
 * it: it is decoded into an arena (arena.c) dropped after its dispatch,
 * with no malloc per field.  A small reply is packed on the stack, a
 * worker's in one allocation with its delivery.  Replies are queued on the
 * bufferevent's output; a client that lets more than config.max_output
 * bytes pile up is disconnected, and nobody else notices.  What all of a
 * uid's connections hold queued is counted too (quota.c, by a callback on
 * each output buffer, in steps: see conn_out_cb): past max_output_per_user,
 * a connection that adds to it while holding more than CONN_OUTPUT_SLACK is
 * closed, so that a client that does not read cannot multiply max_output by
 * its connections, while the uid's connections that read (their replies go
 * out at once) are left alone.
 *
 * Per uid (quota.c): a connection over max_connections_per_user is kept
 * only to answer its first request (the hello) RESOURCE_EXHAUSTED, then
 * closed once that is written; each wait counts against the uid's
 * max_waits_per_user as well as the connection's max_in_flight.
 *
 * Requests that wait run as runtime tasks on workers.  conn_begin_wait takes
 * a reference for each; their replies come back through reply_post, which
 * packs the reply on the worker and hands it over with reactor_call (a queue
 * plus a wake-up, see sched/reactor.h), where it is written if the
 * connection is still open, and the reference is dropped.  The reply to a
 * connection's only request in progress (a client waiting for its task, the
 * latency that matters) is written by the worker itself
 * (reply_post_direct): waking the reactor to write it cost a thread
 * crossing on the client's path.  The worker gives the wait back to the
 * uid and counts it answered; the reactor counts it off in_flight, with
 * its reference, the next time it looks at the connection
 * (conn_direct_settle), and is not woken for it.  A mutex per connection
 * (direct_lock) orders the worker's write with the reactor's: the reactor
 * opens the way (conn_direct_open) only when nothing is queued before the
 * reply and nothing else can come before it, and shuts it
 * (conn_direct_shut) before it writes or closes the socket itself, or
 * counts a new wait.  Waits on
 * tasks (waiter.c) are cancelled when their connection closes, so a client
 * that left holds nothing until its tasks end; the wait of a plain spawn
 * --wait, which its task answers (conn_answer_new), is given back at the
 * close, and the task runs on.  A connection is
 * freed when its last reference goes, always on a later loop turn than the
 * callback that closed it (tmux's rule), never inside its own callback.
 *
 * Streams (requests answered by many replies: logs, watch) are a property
 * of the connection, behind one interface (struct conn_stream in rokd.h):
 * a connection keeps a list of its streams and tells each when its output
 * has drained (send more) and, on a later loop turn, when it closed or the
 * daemon is stopping.  conn.c knows no command: only that interface, and
 * the pause mark (conn_stream_room) that keeps every stream's queued bytes
 * under max_output.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rok/blocking.h"
#include "arena.h"
#include "wire.h"
#include "reactor.h"
#include "rokd.h"

/* Connections over their uid's cap kept open at once to be told why. */
#define CONN_REFUSING_MAX 64

/* Queued bytes above which streams pause (and resume once drained). */
#define CONN_STREAM_HIGH (256u << 10)

struct conn {
	struct bufferevent *bev;
	int refs;
	uid_t uid;
	pid_t pid;
	uint64_t serial;          /* for log lines */
	unsigned in_flight;       /* waits not answered yet */
	size_t held;              /* spawns waiting for the journal */
	bool hello_done;
	bool refused;             /* over its uid's connection cap: answered
	                             at its first request, then closed */
	bool dead;                /* closed: no more reading or writing */
	bool draining;            /* shutdown: close once flushed and answered */
	bool user_over;           /* its uid is past max_output_per_user, as
	                             of its last step (conn_out_cb) */
	size_t out_counted;       /* its output as its uid's count has it:
	                             rounded down to CONN_OUTPUT_STEP */
	struct evbuffer_cb_entry *out_cb; /* counts its output for the uid */
	struct conn_stream *streams; /* its streams in progress */
	rok_task **waiters;       /* owned refs: its waits' runtime tasks,
	                             cancelled at its close (finished ones
	                             are swept out when the array is full) */
	size_t nwaiters, capwaiters;
	struct conn_answer **answers; /* owned refs: its waits answered by
	                             a task (conn_answer_new), given back at
	                             its close (claimed ones are swept out
	                             when the array is full) */
	size_t nanswers, capanswers;
	struct conn *prev, *next; /* on conns.head, later conns.freeing */
	int fd;                   /* the socket, for reply_post_direct */
	/* A worker's own write of a reply (reply_post_direct): */
	pthread_mutex_t direct_lock;
	_Atomic int direct;       /* CONN_DIRECT_*: changed under
	                             direct_lock, but for the reactor's
	                             SHUT to OPEN */
	const uint8_t *tail;      /* under direct_lock: what the socket did
	                             not take of a direct reply, in its
	                             delivery's frame (reply_deliver frees it
	                             once this is written or dropped) */
	size_t tail_len;
	_Atomic unsigned answered; /* waits a worker answered whole (and
	                             gave back to the uid's quota), still in
	                             in_flight and refs: conn_direct_settle */
};

/* Who may write to a connection's socket (see reply_post_direct). */
enum {
	CONN_DIRECT_SHUT,         /* the reactor alone */
	CONN_DIRECT_OPEN,         /* a worker's reply, under direct_lock */
	CONN_DIRECT_TAIL,         /* the reactor, after the tail (NULL: it
	                             was lost, the stream is broken) */
};

static void conn_direct_shut(struct conn *c);

static struct {
	struct conn *head;
	_Atomic unsigned count;   /* read by the main thread at shutdown */
	unsigned refusing;        /* refused connections not yet closed */
	uint64_t serial;
	bool shutting_down;
	struct conn *closed;      /* closed, still referenced */
	struct conn *freeing;     /* unreferenced, free on a later loop turn */
} conns;

/* Queued bytes a connection may hold whatever its uid holds elsewhere. */
#define CONN_OUTPUT_SLACK (64u << 10)
/* The unit in which a connection's output is counted for its uid (see
 * conn_out_cb): a power of 2, and at most CONN_OUTPUT_SLACK, so that a
 * connection holding more than the slack has been counted (and told
 * whether its uid is over) at least once. */
#define CONN_OUTPUT_STEP (64u << 10)

static void conn_read_cb(struct bufferevent *bev, void *arg);
static void conn_write_cb(struct bufferevent *bev, void *arg);
static void conn_event_cb(struct bufferevent *bev, short what, void *arg);

unsigned conn_count(void)
{
	return conns.count;
}

uid_t conn_uid(const struct conn *c)
{
	return c->uid;
}

bool conn_closed(const struct conn *c)
{
	return c->dead;
}

size_t conn_output_len(const struct conn *c)
{
	return c->dead ? 0 : evbuffer_get_length(bufferevent_get_output(c->bev));
}

bool conn_hello_done(const struct conn *c)
{
	return c->hello_done;
}

void conn_set_hello_done(struct conn *c)
{
	c->hello_done = true;
}

void conn_ref(struct conn *c)
{
	c->refs++;
}

/* Puts c at the head of a connection list: conns.head while it is open,
 * conns.closed once closed, conns.freeing once also unreferenced
 * (prev/next serve all three). */
static void conn_link(struct conn **head, struct conn *c)
{
	c->prev = NULL;
	c->next = *head;
	if (*head != NULL)
		(*head)->prev = c;
	*head = c;
}

static void conn_unlink(struct conn **head, struct conn *c)
{
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		*head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
}

static void conn_free(struct conn *c)
{
	/* A worker that answered c's last wait counts it (answered) before
	 * it lets go of the lock: wait for it to be done with c. */
	pthread_mutex_lock(&c->direct_lock);
	pthread_mutex_unlock(&c->direct_lock);
	pthread_mutex_destroy(&c->direct_lock);
	free(c);
}

static void conn_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)what;
	conn_unlink(&conns.freeing, c);
	conn_free(c);
}

void conn_unref(struct conn *c)
{
	if (--c->refs > 0)
		return;
	/*
	 * Freed on a later loop turn: the caller may be inside a callback
	 * that still looks at `c`.  Closed (its last reference was the
	 * connection's own), so prev/next are free to list it on `freeing`:
	 * a turn the reactor no longer takes (the daemon stopping) leaves it
	 * there for conn_free_leftovers.
	 */
	conn_unlink(&conns.closed, c);
	conn_link(&conns.freeing, c);
	if (event_base_once(reactor_base(), -1, EV_TIMEOUT, conn_free_cb, c,
	                    NULL) != 0)
		log_warnx("connection %llu: could not defer its free to the "
		          "loop; freed at stop",
		          (unsigned long long)c->serial);
}

/*
 * The reactor thread has ended, so nothing can give back the references
 * still held: a reply posted in the reactor's last turn (a stream ended
 * by a close the client made just before the stop) is refused, and the
 * wait's reference with it.  Those connections are freed here too.
 */
void conn_free_leftovers(void)
{
	struct conn **lists[] = { &conns.freeing, &conns.closed };

	for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
		while (*lists[i] != NULL) {
			struct conn *c = *lists[i];
			*lists[i] = c->next;
			conn_free(c);
		}
}

bool conn_stream_room(const struct conn *c)
{
	uint64_t high = config.max_output / 2 < CONN_STREAM_HIGH
	                ? config.max_output / 2 : CONN_STREAM_HIGH;

	return !c->dead && conn_output_len(c) < high;
}

bool conn_stream_add(struct conn *c, struct conn_stream *s,
                     const struct conn_stream_ops *ops, uint64_t req_id)
{
	conn_direct_shut(c);   /* its frames are the reactor's */
	if (c->dead) {
		reply_post_error(c, req_id, ROK__V1__ERROR_CODE__UNAVAILABLE,
		                 "connection closed");
		return false;
	}
	if (!quota_take(c->uid, QUOTA_FOLLOWERS)) {
		char msg[160];
		quota_explain(c->uid, QUOTA_FOLLOWERS, msg, sizeof(msg));
		reply_post_error(c, req_id,
		                 ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED, msg);
		return false;
	}
	s->ops = ops;
	s->conn = c;
	s->prev = NULL;
	s->next = c->streams;
	if (c->streams != NULL)
		c->streams->prev = s;
	c->streams = s;
	return true;
}

void conn_stream_remove(struct conn_stream *s)
{
	struct conn *c = s->conn;

	if (s->prev != NULL)
		s->prev->next = s->next;
	else
		c->streams = s->next;
	if (s->next != NULL)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
	quota_give(c->uid, QUOTA_FOLLOWERS);
}

/* A later loop turn than a close or a shutdown: tells each stream, which
 * may free itself now (it is inside none of its own callbacks). */
static void conn_streams_end_cb(void *arg)
{
	struct conn *c = arg;

	for (struct conn_stream *s = c->streams, *next; s != NULL; s = next) {
		next = s->next;   /* a callback removes only s */
		if (c->dead)
			s->ops->closed(s);
		else if (s->ops->shutdown != NULL)
			s->ops->shutdown(s);
	}
	conn_unref(c);
}

static void conn_streams_end(struct conn *c)
{
	if (c->streams == NULL)
		return;
	/* reactor_call, not event_base_once: its calls run even when the
	 * reactor stops right after (a close at the daemon's stop), so no
	 * stream is left holding its connection. */
	conn_ref(c);
	int err = reactor_call(conn_streams_end_cb, c);
	if (err < 0) {
		log_errno(err, "connection %llu: could not end its streams",
		          (unsigned long long)c->serial);
		conn_unref(c);
	}
}

/*
 * Nobody is left to read the replies of its waits: they are cancelled
 * rather than held (with their ids and handles) until their tasks end.
 * Each answers as it leaves; the reply is dropped at delivery, which
 * gives back the wait's reference.
 */
static void conn_waiters_cancel(struct conn *c)
{
	for (size_t i = 0; i < c->nwaiters; i++) {
		rok_task_cancel(c->waiters[i]);
		rok_task_unref(c->waiters[i]);
	}
	free(c->waiters);
	c->waiters = NULL;
	c->nwaiters = c->capwaiters = 0;
}

bool conn_add_waiter(struct conn *c, rok_task *t)
{
	if (c->dead) {
		rok_task_cancel(t);
		rok_task_unref(t);
		return true;
	}
	if (c->nwaiters == c->capwaiters) {
		size_t m = 0;
		for (size_t i = 0; i < c->nwaiters; i++) {
			if (rok_task_is_finished(c->waiters[i]))
				rok_task_unref(c->waiters[i]);
			else
				c->waiters[m++] = c->waiters[i];
		}
		c->nwaiters = m;
		/* Grown only when still over half full after a sweep, so
		 * sweeps cost O(1) per wait and the array stays within
		 * twice the waits left unfinished (max_in_flight bounds the
		 * unanswered ones). */
		if (c->capwaiters == 0 || m > c->capwaiters / 2) {
			size_t cap = c->capwaiters != 0 ? c->capwaiters * 2 : 8;
			rok_task **w = realloc(c->waiters, cap * sizeof(*w));
			if (w != NULL) {
				c->waiters = w;
				c->capwaiters = cap;
			}
		}
		if (c->nwaiters == c->capwaiters)
			return false;
	}
	c->waiters[c->nwaiters++] = t;
	return true;
}

/*
 * A wait answered by whoever claims it first: the task of a plain spawn
 * --wait, as it ends (kind.c), or the connection, as it closes.  Two
 * references (the connection's, the answerer's); `claimed` decides, once,
 * which side ends the wait.
 */
struct conn_answer {
	atomic_int refs;
	atomic_bool claimed;
	struct conn *conn;        /* valid until claimed */
	uint64_t req_id;
};

/* Sweeps claimed answers out of c's array, growing it when still over
 * half full (as conn_add_waiter does): false if there is no room. */
static bool conn_answers_room(struct conn *c)
{
	if (c->nanswers < c->capanswers)
		return true;
	size_t m = 0;
	for (size_t i = 0; i < c->nanswers; i++) {
		if (atomic_load(&c->answers[i]->claimed))
			conn_answer_unref(c->answers[i]);
		else
			c->answers[m++] = c->answers[i];
	}
	c->nanswers = m;
	if (c->capanswers == 0 || m > c->capanswers / 2) {
		size_t cap = c->capanswers != 0 ? c->capanswers * 2 : 8;
		struct conn_answer **a = realloc(c->answers, cap * sizeof(*a));
		if (a != NULL) {
			c->answers = a;
			c->capanswers = cap;
		}
	}
	return c->nanswers < c->capanswers;
}

struct conn_answer *conn_answer_new(struct conn *c, uint64_t req_id)
{
	struct conn_answer *a;

	if (c->dead || !conn_answers_room(c) ||
	    (a = malloc(sizeof(*a))) == NULL)
		return NULL;
	atomic_init(&a->refs, 2);
	atomic_init(&a->claimed, false);
	a->conn = c;
	a->req_id = req_id;
	c->answers[c->nanswers++] = a;
	return a;
}

struct conn *conn_answer_claim(struct conn_answer *a)
{
	return atomic_exchange(&a->claimed, true) ? NULL : a->conn;
}

uint64_t conn_answer_req_id(const struct conn_answer *a)
{
	return a->req_id;
}

void conn_answer_unref(struct conn_answer *a)
{
	if (a != NULL && atomic_fetch_sub(&a->refs, 1) == 1)
		free(a);
}

/* Nobody is left to read what the tasks of its plain spawn --waits will
 * answer: the waits (quota, in-flight count, reference) are given back
 * now, and those tasks run on, answering nobody. */
static void conn_answers_give_back(struct conn *c)
{
	for (size_t i = 0; i < c->nanswers; i++) {
		if (conn_answer_claim(c->answers[i]) != NULL)
			conn_end_wait(c);   /* not the last reference: the
			                       connection's own is held */
		conn_answer_unref(c->answers[i]);
	}
	free(c->answers);
	c->answers = NULL;
	c->nanswers = c->capanswers = 0;
}

static void conn_close(struct conn *c, const char *why);

/*
 * Reactor thread, before it writes to c's socket or closes it: from now
 * on no worker writes to it, and what a worker's reply left unsent goes
 * out first.  A lost tail breaks the stream: c is closed.  No worker waits
 * for the lock meanwhile: none writes unless the way is open.
 */
static void conn_direct_shut(struct conn *c)
{
	/* Acquire: a worker's write and counts happen before ours (its
	 * release). */
	if (atomic_load_explicit(&c->direct, memory_order_acquire) ==
	    CONN_DIRECT_SHUT)
		return;
	pthread_mutex_lock(&c->direct_lock);
	bool lost = false;
	if (atomic_load_explicit(&c->direct, memory_order_relaxed) ==
	    CONN_DIRECT_TAIL) {
		/* Copied under the lock: the tail lives in a delivery its
		 * worker frees if it cannot hand it over. */
		lost = c->tail == NULL ||
		       (!c->dead && evbuffer_add(bufferevent_get_output(c->bev),
		                                 c->tail, c->tail_len) != 0);
		c->tail = NULL;
		c->tail_len = 0;
	}
	atomic_store_explicit(&c->direct, CONN_DIRECT_SHUT,
	                      memory_order_relaxed);
	pthread_mutex_unlock(&c->direct_lock);
	if (lost)
		conn_close(c, "out of memory for a reply");
}

/*
 * Reactor thread: counts off the waits that workers answered whole
 * themselves (reply_write), with their references, here rather than in a
 * reactor_call each: the reactor is not woken for them.  c stays
 * referenced by the conn's own reference (or the caller's).
 */
static void conn_direct_settle(struct conn *c)
{
	/* Relaxed: a count; what a worker did to c before its increment
	 * is ordered by direct_lock or conn_direct_shut's acquire.  Read
	 * first: the exchange is a locked instruction. */
	if (atomic_load_explicit(&c->answered, memory_order_relaxed) == 0)
		return;
	unsigned k = atomic_exchange_explicit(&c->answered, 0,
	                                      memory_order_relaxed);
	c->in_flight -= k;
	c->refs -= (int)k;   /* the conn's own, or the caller's, is left */
}

/*
 * Reactor thread: lets a worker write the reply to c's only request in
 * progress itself, when nothing is queued before it and nothing else can
 * come: no stream, no spawn waiting for the journal.  OPEN is a
 * permission, not a count (a worker may have answered that request since
 * the settle above): only the worker of a counted wait writes, and every
 * new wait, hold, stream and write of the reactor shuts the way first.
 */
static void conn_direct_open(struct conn *c)
{
	conn_direct_settle(c);
	if (c->dead || c->draining || c->held > 0 || c->in_flight != 1 ||
	    c->streams != NULL ||
	    evbuffer_get_length(bufferevent_get_output(c->bev)) > 0 ||
	    atomic_load_explicit(&c->direct, memory_order_relaxed) !=
	            CONN_DIRECT_SHUT)
		return;
	/* No lock: a worker writes only once it sees OPEN, under the lock,
	 * and the tail is NULL in SHUT.  Release: what this thread wrote
	 * before goes out before a worker's reply (its acquire). */
	atomic_store_explicit(&c->direct, CONN_DIRECT_OPEN,
	                      memory_order_release);
}

static void conn_close(struct conn *c, const char *why)
{
	if (c->dead)
		return;
	c->dead = true;
	conn_direct_shut(c);        /* before the socket is closed */
	conn_direct_settle(c);
	if (why != NULL)
		log_debug("connection %llu (uid %u): closed: %s",
		          (unsigned long long)c->serial, (unsigned)c->uid, why);
	struct evbuffer *out = bufferevent_get_output(c->bev);
	if (c->out_cb != NULL) {
		/* Freeing the buffer runs no callback: what it counted is
		 * given back here. */
		(void)evbuffer_remove_cb_entry(out, c->out_cb);
		if (c->out_counted > 0)
			(void)quota_add(c->uid, QUOTA_OUTPUT,
			                -(int64_t)c->out_counted);
		c->out_counted = 0;
	}
	bufferevent_free(c->bev);   /* closes the socket */
	c->bev = NULL;
	conn_unlink(&conns.head, c);
	conn_link(&conns.closed, c);
	conns.count--;
	if (c->refused)
		conns.refusing--;
	else
		quota_give(c->uid, QUOTA_CONNECTIONS);
	conn_streams_end(c);        /* its streams end, on a later turn */
	conn_waiters_cancel(c);
	conn_answers_give_back(c);
	conn_unref(c);              /* the connection's own reference */
}

/*
 * Every change of a connection's output: its uid's count follows, in
 * steps.  The uid is counted the connection's queued bytes rounded down to
 * a multiple of CONN_OUTPUT_STEP, so the quota's lock is taken only when
 * the queue crosses a multiple: never while it stays under 64 KiB, as the
 * queue of a client that reads its replies does (pipelined or not), where
 * counting each change took it for every reply queued and every write
 * that drained some.  What that costs the cap:
 *
 * - The uid's count is short of what its connections hold by less than
 *   CONN_OUTPUT_STEP per connection.  Together with the slack each
 *   connection has anyway (CONN_OUTPUT_SLACK: one holding that much is
 *   never closed), the uid's connections hold at most max_output_per_user
 *   + 64 KiB per connection + one reply, as before.
 * - A connection learns that its uid is over the cap (user_over) at its
 *   own steps, not at each reply: once the uid is over, a connection
 *   holding more than CONN_OUTPUT_SLACK is closed when it is sent more, at
 *   the latest when its queue crosses its next multiple of 64 KiB (within
 *   the 64 KiB per connection above).  conn_queue checks the uid's count
 *   again before closing, so a connection is not closed on a stale word
 *   after its uid went back under the cap.
 */
static void conn_out_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info,
                        void *arg)
{
	struct conn *c = arg;
	size_t counted = evbuffer_get_length(buf) &
	                 ~(size_t)(CONN_OUTPUT_STEP - 1);

	(void)info;
	if (counted == c->out_counted)
		return;
	/* Both are bounded by what one buffer can hold (size_t, far below
	 * INT64_MAX). */
	int64_t delta = (int64_t)counted - (int64_t)c->out_counted;
	c->out_counted = counted;
	c->user_over = quota_add(c->uid, QUOTA_OUTPUT, delta);
}

void conn_accept(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
		log_warn("SO_PEERCRED");
		close(fd);
		return;
	}
	/* A daemon of an ordinary user serves that user alone. */
	if (!config.root && cred.uid != geteuid()) {
		log_warnx("refused a connection from uid %u (pid %d)",
		          (unsigned)cred.uid, (int)cred.pid);
		close(fd);
		return;
	}
	if (conns.count >= config.max_connections || conns.shutting_down) {
		log_warnx("refused a connection from uid %u: %s",
		          (unsigned)cred.uid,
		          conns.shutting_down ? "shutting down"
		                              : "too many connections");
		close(fd);
		return;
	}
	/*
	 * Over its uid's cap, a connection is kept just long enough to answer
	 * its first request (the hello) with the reason; a few such at once
	 * (CONN_REFUSING_MAX): past that, closed without a word, so that
	 * refusals cannot fill the global limit either.
	 */
	bool refused = !quota_take(cred.uid, QUOTA_CONNECTIONS);
	if (refused && conns.refusing >= CONN_REFUSING_MAX) {
		log_warnx("refused a connection from uid %u: over its "
		          "connection cap", (unsigned)cred.uid);
		close(fd);
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (c == NULL) {
		log_warnx("out of memory for a connection");
		if (!refused)
			quota_give(cred.uid, QUOTA_CONNECTIONS);
		close(fd);
		return;
	}
	c->bev = bufferevent_socket_new(reactor_base(), fd,
	                                BEV_OPT_CLOSE_ON_FREE);
	if (c->bev == NULL) {
		log_warnx("bufferevent_socket_new failed");
		if (!refused)
			quota_give(cred.uid, QUOTA_CONNECTIONS);
		close(fd);
		free(c);
		return;
	}
	if (pthread_mutex_init(&c->direct_lock, NULL) != 0) {
		log_warnx("pthread_mutex_init failed");
		if (!refused)
			quota_give(cred.uid, QUOTA_CONNECTIONS);
		bufferevent_free(c->bev);   /* closes fd */
		free(c);
		return;
	}
	c->fd = fd;
	atomic_init(&c->direct, CONN_DIRECT_SHUT);
	atomic_init(&c->answered, 0);
	c->refs = 1;
	c->refused = refused;
	if (refused)
		conns.refusing++;
	c->uid = cred.uid;
	c->pid = cred.pid;
	c->serial = ++conns.serial;
	conn_link(&conns.head, c);
	conns.count++;
	bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	c->out_cb = evbuffer_add_cb(bufferevent_get_output(c->bev),
	                            conn_out_cb, c);
	if (c->out_cb == NULL)
		conn_close(c, "evbuffer_add_cb failed");
	else if (bufferevent_enable(c->bev, EV_READ | EV_WRITE) != 0)
		conn_close(c, "bufferevent_enable failed");
	log_debug("connection %llu: uid %u pid %d",
	          (unsigned long long)c->serial, (unsigned)c->uid, (int)c->pid);
}

/* Closes a draining connection once it owes nothing more. */
static void conn_maybe_finish(struct conn *c)
{
	if (!c->draining || c->dead || c->in_flight > 0 || c->held > 0)
		return;
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_close(c, "shutdown");
}

/* Answers the first request of a connection over its uid's cap, and
 * closes it once the answer is written. */
static void conn_refuse(struct conn *c, uint64_t req_id)
{
	char msg[160];

	quota_explain(c->uid, QUOTA_CONNECTIONS, msg, sizeof(msg));
	log_warnx("refused a connection from uid %u: %s", (unsigned)c->uid,
	          msg);
	conn_send_error(c, req_id, ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
	                "%s", msg);
	if (c->dead)
		return;
	c->draining = true;
	bufferevent_disable(c->bev, EV_READ);
	conn_maybe_finish(c);
}

/* Reactor thread only: the arena requests are decoded into (arena.c).  A
 * request lives from its unpack to the end of its dispatch: handlers
 * borrow it. */
static struct {
	alignas(max_align_t) uint8_t buf[32u << 10];
	struct arena a;
	bool ready;
} conn_arena;

/*
 * Bytes a request may decode into beyond the arena's block.  Decoded, an
 * empty sub-message of 2 bytes becomes a struct of a few hundred (a
 * TaskSpec: 240 + its pointer): 524,276 empty specs in a 1 MiB frame made
 * 167 MB.  A one-byte argument (3 bytes on the wire) costs some 80 as
 * counted (its 16-byte slot, protobuf-c's scan record, the arena's
 * accounting): 32 times the frame, plus room for max_ids specs however
 * small the frame (select's cap), fits what a request within the limits
 * needs.
 */
static size_t conn_decode_limit(void)
{
	return (size_t)config.max_frame * 32 + (size_t)config.max_ids * 512;
}

/* The request id of a frame that could not be decoded, if it comes first
 * as usual (field 1, a varint), for its error reply; else 0. */
static uint64_t conn_frame_id(const uint8_t *p, size_t n)
{
	uint64_t id = 0;

	if (n < 2 || p[0] != 0x08)
		return 0;
	for (size_t i = 1; i < n && i <= 10; i++) {
		id |= (uint64_t)(p[i] & 0x7f) << (7 * (i - 1));
		if ((p[i] & 0x80) == 0)
			return id;
	}
	return 0;
}

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	if (!conn_arena.ready) {
		arena_init(&conn_arena.a, conn_arena.buf,
		           sizeof(conn_arena.buf), true);
		conn_arena.ready = true;
	}
	arena_set_limit(&conn_arena.a, conn_decode_limit());
	struct arena_mark mark = arena_mark(&conn_arena.a);
	conn_ref(c);   /* a handler may close it */
	while (!c->dead && !c->draining) {
		size_t have = evbuffer_get_length(in);
		uint8_t hdr[WIRE_HEADER];
		if (have < WIRE_HEADER)
			break;
		if (evbuffer_copyout(in, hdr, WIRE_HEADER) != WIRE_HEADER)
			break;
		uint32_t n = wire_get_header(hdr);
		if (n > config.max_frame) {
			conn_close(c, "frame over the size limit");
			break;
		}
		if (have - WIRE_HEADER < n)
			break;
		uint8_t *buf = evbuffer_pullup(in, (ssize_t)(WIRE_HEADER + n));
		if (buf == NULL) {
			conn_close(c, "out of memory");
			break;
		}
		Request *req = rok__v1__request__unpack(&conn_arena.a.pb, n,
		                                        buf + WIRE_HEADER);
		if (req == NULL && conn_arena.a.over) {
			/* Well framed, so the stream is still in step: the
			 * client is told and may go on. */
			uint64_t id = conn_frame_id(buf + WIRE_HEADER, n);
			evbuffer_drain(in, WIRE_HEADER + n);
			arena_release(&conn_arena.a, mark);
			if (c->refused)
				conn_refuse(c, id);
			else
				conn_send_error(c, id,
				        ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
				        "request too large once decoded (more "
				        "than %zu bytes): send fewer items",
				        conn_decode_limit());
			continue;
		}
		evbuffer_drain(in, WIRE_HEADER + n);
		if (req == NULL) {
			arena_release(&conn_arena.a, mark);
			conn_close(c, "undecodable frame");
			break;
		}
		if (c->refused)
			conn_refuse(c, req->id);
		else
			dispatch(c, req);
		/* Handlers only borrow the request: all of it goes at once. */
		arena_release(&conn_arena.a, mark);
	}
	conn_direct_open(c);
	conn_unref(c);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	(void)bev;
	/* Room again for its streams; each may end itself, and a send may
	 * close c (its streams are then told on a later turn). */
	conn_ref(c);
	for (struct conn_stream *s = c->streams, *next; s != NULL; s = next) {
		next = s->next;
		if (c->dead)
			break;
		s->ops->writable(s);
	}
	if (!c->dead)
		conn_maybe_finish(c);
	conn_direct_open(c);
	conn_unref(c);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	conn_close(arg, (what & BEV_EVENT_EOF) ? "end of stream"
	                                       : "socket error");
}

/*
 * Queues an encoded frame; closes a connection whose client does not read.
 *
 * The reply to a client's only request in progress, with nothing queued
 * before it, is written at once: the bufferevent would write it only once
 * epoll reports the socket writable, an epoll_ctl to watch for that, a
 * loop turn, and another epoll_ctl to stop watching, per reply (a waiting
 * client's latency).  A client with more requests in progress (pipelined)
 * gets its replies as before, many in one write per loop turn, not a
 * syscall (and a wake-up of the client) per reply; so does a connection
 * with a stream (logs -f, watch), whose frames come many a turn.  What
 * the socket does not take, and any error, is left to the bufferevent: it
 * writes the rest in order, and reports an error through conn_event_cb.
 * Not while
 * draining: the bufferevent's write callback is what closes a drained
 * connection, and a frame written here never reaches it.
 */
static void conn_queue(struct conn *c, const uint8_t *frame, size_t len)
{
	conn_direct_shut(c);
	if (c->dead)
		return;
	conn_direct_settle(c);   /* for in_flight below */
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (!c->draining && c->in_flight + c->held <= 1 &&
	    c->streams == NULL && evbuffer_get_length(out) == 0) {
		ssize_t n = send(bufferevent_getfd(c->bev), frame, len,
		                 MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			frame += n;
			len -= (size_t)n;
		}
		if (len == 0)
			return;
	}
	if (evbuffer_add(out, frame, len) != 0) {
		conn_close(c, "out of memory");
		return;
	}
	size_t queued = evbuffer_get_length(out);
	if (queued > config.max_output)
		conn_close(c, "client does not read its replies");
	else if (c->user_over && queued > CONN_OUTPUT_SLACK &&
	         (c->user_over = quota_over(c->uid, QUOTA_OUTPUT)))
		/* Checked again (rare: its uid was over at its last step),
		 * as others' replies may have gone out since. */
		conn_close(c, "client does not read its replies (its uid's "
		           "connections hold more than max_output_per_user)");
}

static void conn_error_init(Response *resp, Rok__V1__Error *e, uint64_t id,
                            ErrorCode code, const char *msg)
{
	rok__v1__response__init(resp);
	rok__v1__error__init(e);
	e->code = code;
	e->message.data = (uint8_t *)(uintptr_t)msg;
	e->message.len = strlen(msg);
	resp->id = id;
	resp->error = e;
}

/*
 * The response to pack for resp and its encoded size: resp, or, for a
 * reply larger than the frame limit (a join of many tasks with big
 * values), an error in *err (with *e): the client is entitled to refuse
 * such a frame.
 */
static const Response *conn_pack_size(const Response *resp, Response *err,
                                      Rok__V1__Error *e, size_t *n)
{
	*n = rok__v1__response__get_packed_size(resp);
	if (*n > config.max_frame) {
		conn_error_init(err, e, resp->id,
		                ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
		                "reply larger than the frame limit: ask for "
		                "fewer tasks");
		resp = err;
		*n = rok__v1__response__get_packed_size(resp);
	}
	return resp;
}

/* Packs resp (of packed size n, from conn_pack_size) as a frame into buf,
 * which has room for WIRE_HEADER + n bytes; returns the frame's length. */
static size_t conn_pack(const Response *resp, size_t n, uint8_t *buf)
{
	wire_put_header(buf, (uint32_t)n);
	rok__v1__response__pack(resp, buf + WIRE_HEADER);
	return WIRE_HEADER + n;
}

/* Frames up to this size are packed on the stack: most replies are a
 * spawn's or a ping's, a few dozen bytes, and a malloc + free each was
 * pure churn. */
#define CONN_SEND_STACK 512

void conn_send(struct conn *c, const Response *resp)
{
	uint8_t stack[CONN_SEND_STACK];
	Response err;
	Rok__V1__Error e;
	size_t n;

	if (c->dead)
		return;
	resp = conn_pack_size(resp, &err, &e, &n);
	uint8_t *buf = n <= sizeof(stack) - WIRE_HEADER ? stack
	               : malloc(WIRE_HEADER + n);
	if (buf == NULL) {
		conn_close(c, "out of memory");
		return;
	}
	conn_queue(c, buf, conn_pack(resp, n, buf));
	if (buf != stack)
		free(buf);
}

void conn_send_error(struct conn *c, uint64_t id, ErrorCode code,
                     const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	Response resp;
	Rok__V1__Error e;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	conn_error_init(&resp, &e, id, code, msg);
	conn_send(c, &resp);
}

bool conn_begin_wait(struct conn *c, uint64_t id)
{
	/* A worker that wrote a reply itself may not be counted off yet,
	 * though its client read the reply and asks again: once the way is
	 * shut it is (it counts before it lets go). */
	conn_direct_shut(c);
	if (c->dead)
		return false;   /* its tail was lost: nobody to answer */
	conn_direct_settle(c);
	if (c->in_flight >= config.max_in_flight) {
		conn_send_error(c, id, ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
		                "too many requests in flight (limit %u)",
		                config.max_in_flight);
		return false;
	}
	if (!quota_take(c->uid, QUOTA_WAITS)) {
		char msg[160];
		quota_explain(c->uid, QUOTA_WAITS, msg, sizeof(msg));
		conn_send_error(c, id, ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
		                "%s", msg);
		return false;
	}
	c->in_flight++;
	conn_ref(c);
	return true;
}

void conn_end_wait(struct conn *c)
{
	quota_give(c->uid, QUOTA_WAITS);
	c->in_flight--;
	conn_maybe_finish(c);
	conn_direct_open(c);
	conn_unref(c);
}

/* An offloaded request, queued per uid (quota_job_queue). */
struct offload {
	struct quota_job link;    /* first: quota.c links it */
	uid_t uid;
	void *(*fn)(void *);
	void *arg;
};

/* Blocking pool: runs o, then the uid's queued jobs one after another
 * while there are some, so a uid never has more than QUOTA_JOBS_RUNNING
 * jobs in the pool.  A job whose connection was closed meanwhile still
 * runs (as one already in the pool would): it holds a reference, and its
 * reply is dropped at delivery. */
static void *offload_run(void *arg)
{
	struct offload *o = arg;
	uid_t uid = o->uid;

	while (o != NULL) {
		o->fn(o->arg);
		free(o);
		o = (struct offload *)quota_job_next(uid);
	}
	return NULL;
}

int conn_offload(struct conn *c, uint64_t req_id, void *(*fn)(void *),
                 void *arg)
{
	struct offload *o = malloc(sizeof(*o));

	if (o == NULL) {
		conn_send_error(c, req_id, ROK__V1__ERROR_CODE__INTERNAL,
		                "out of memory");
		return -ENOMEM;
	}
	if (!conn_begin_wait(c, req_id)) {
		free(o);
		return -EAGAIN;   /* answered */
	}
	o->uid = c->uid;
	o->fn = fn;
	o->arg = arg;
	if (!quota_job_queue(c->uid, &o->link))
		return 0;         /* a running job of the uid will start it */
	int err = rok_spawn_blocking(NULL, offload_run, o);
	if (err < 0) {
		/* Only the reactor thread queues, and it found a free place:
		 * nothing was queued behind this job. */
		quota_job_cancel(c->uid);
		free(o);
		conn_send_error(c, req_id, ROK__V1__ERROR_CODE__UNAVAILABLE,
		                "cannot start the request: %s", strerror(-err));
		conn_end_wait(c);
	}
	return err;
}

void conn_hold(struct conn *c)
{
	conn_direct_shut(c);   /* its answer is the reactor's */
	c->held++;
	conn_ref(c);
}

void conn_release(struct conn *c)
{
	c->held--;
	conn_maybe_finish(c);
	conn_direct_open(c);
	conn_unref(c);
}

struct delivery {
	struct reactor_call call; /* no allocation that could fail once
	                           a reply is written in part */
	struct conn *conn;
	size_t len;
	uint8_t *frame;         /* after it, in the same allocation; NULL:
	                           there was no memory for it */
	bool sent;              /* written in part by reply_post_direct:
	                           the rest is c's tail */
	bool given;             /* the wait given back to the uid */
};

static void reply_deliver(void *arg)
{
	struct delivery *d = arg;
	struct conn *c = d->conn;

	if (d->sent)
		conn_direct_shut(c);   /* its tail: then d may go */
	else if (!c->dead && d->frame != NULL)
		conn_queue(c, d->frame, d->len);
	else if (!c->dead)
		conn_close(c, "out of memory for a reply");
	if (!d->given)
		quota_give(c->uid, QUOTA_WAITS);
	c->in_flight--;
	conn_maybe_finish(c);
	conn_direct_open(c);
	conn_unref(c);
	free(d);
}

/* Hands d to the reactor thread (reply_deliver); false (said) if it
 * could not, and d is still the caller's. */
static bool reply_hand_over(struct delivery *d)
{
	int err = reactor_call_in(&d->call, reply_deliver, d);
	if (err < 0) {
		if (err != -ESHUTDOWN)   /* at stop: the client is gone anyway */
			log_errno(err, "could not hand a reply to the reactor");
		return false;
	}
	return true;
}

/* The delivery of resp to c, packed; NULL (said) without memory. */
static struct delivery *reply_pack(struct conn *c, const Response *resp)
{
	Response too_big;
	Rok__V1__Error e;
	size_t n;

	resp = conn_pack_size(resp, &too_big, &e, &n);
	/* One allocation for the delivery and its frame (n is at most
	 * max_frame, itself bounded by the configuration). */
	struct delivery *d = malloc(sizeof(*d) + WIRE_HEADER + n);
	if (d != NULL) {
		d->frame = (uint8_t *)(d + 1);
		d->len = conn_pack(resp, n, d->frame);
	} else if ((d = malloc(sizeof(*d))) != NULL) {
		d->frame = NULL;    /* the connection is closed at delivery */
	} else {
		/* Rare enough to tolerate: the client's wait goes unanswered
		 * and the connection reference is lost. */
		log_warnx("out of memory for a reply; one client waits forever");
		return NULL;
	}
	d->conn = c;
	d->sent = false;
	d->given = false;
	return d;
}

void reply_post(struct conn *c, const Response *resp)
{
	struct delivery *d = reply_pack(c, resp);

	if (d != NULL && !reply_hand_over(d))
		free(d);
}

/* What reply_write did with a frame. */
enum reply_written {
	REPLY_NOT,         /* nothing: the reactor writes it, as any reply */
	REPLY_WHOLE,       /* all: the wait is answered (c->answered) */
	REPLY_PART,        /* some: the rest is c's tail, in the frame */
};

/*
 * Writes the frame itself if c lets workers (conn_direct_open).  All of
 * it: the wait is counted answered, for conn_direct_settle, with its
 * reference: the caller must not touch c any more.
 */
static enum reply_written reply_write(struct conn *c, const uint8_t *frame,
                                      size_t len)
{
	enum reply_written w = REPLY_NOT;

	pthread_mutex_lock(&c->direct_lock);
	/* Acquire: pairs with conn_direct_open's release. */
	if (atomic_load_explicit(&c->direct, memory_order_acquire) ==
	    CONN_DIRECT_OPEN) {
		ssize_t n = send(c->fd, frame, len, MSG_DONTWAIT |
		                 MSG_NOSIGNAL);
		int state = CONN_DIRECT_SHUT;
		if (n > 0 && (size_t)n == len) {
			/* Counted before the way is shut again: the client
			 * may ask again at once (conn_begin_wait). */
			atomic_fetch_add_explicit(&c->answered, 1,
			                          memory_order_relaxed);
			w = REPLY_WHOLE;
		} else if (n > 0) {
			/* A frame larger than the socket's buffer has room
			 * for: the reactor sends the rest before anything
			 * else. */
			state = CONN_DIRECT_TAIL;
			c->tail = frame + n;
			c->tail_len = len - (size_t)n;
			w = REPLY_PART;
		}
		/* Release: the counts above before the reactor's acquire. */
		atomic_store_explicit(&c->direct, state, memory_order_release);
	}
	pthread_mutex_unlock(&c->direct_lock);
	return w;
}

void reply_post_direct(struct conn *c, const Response *resp)
{
	struct delivery *d = reply_pack(c, resp);

	if (d == NULL)
		return;
	/* A hint, checked again under the lock: a pipelining client's
	 * replies do not take it. */
	if (d->frame == NULL ||
	    atomic_load_explicit(&c->direct, memory_order_relaxed) !=
	    CONN_DIRECT_OPEN) {
		if (!reply_hand_over(d))
			free(d);
		return;
	}
	/* Before the client can read the reply: it may ask again at once,
	 * on another connection too.  If the reply is not written after
	 * all, the uid counts one wait less for that long. */
	quota_give(c->uid, QUOTA_WAITS);
	d->given = true;
	enum reply_written w = reply_write(c, d->frame, d->len);
	if (w == REPLY_WHOLE) {
		free(d);
		return;
	}
	d->sent = w == REPLY_PART;
	if (reply_hand_over(d))
		return;
	if (d->sent) {
		/* Only at rokd's stop.  The tail goes with d: the stream is
		 * broken, and closed at the reactor's next look. */
		pthread_mutex_lock(&c->direct_lock);
		c->tail = NULL;
		pthread_mutex_unlock(&c->direct_lock);
	}
	free(d);
}

void reply_post_error(struct conn *c, uint64_t id, ErrorCode code,
                      const char *msg)
{
	Response resp;
	Rok__V1__Error e;

	conn_error_init(&resp, &e, id, code, msg);
	reply_post(c, &resp);
}

void conn_shutdown(void)
{
	conns.shutting_down = true;
	for (struct conn *c = conns.head, *next; c != NULL; c = next) {
		next = c->next;
		conn_direct_shut(c);
		if (c->dead)
			continue;
		conn_direct_settle(c);
		c->draining = true;
		bufferevent_disable(c->bev, EV_READ);
		conn_streams_end(c);   /* those that would never end */
		conn_maybe_finish(c);
	}
}

bool conn_all_closed(void)
{
	return conns.count == 0;
}

void conn_close_all(void)
{
	while (conns.head != NULL)
		conn_close(conns.head, "daemon stopping");
}
