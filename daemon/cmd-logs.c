/*
 * cmd-logs.c — `logs [-f] ID`: streams a task's captured output to a
 * client, pushed as it is written.  Reactor thread.
 *
 * A follower is one logs request in progress: a connection, the request
 * id, the task, and how far into the task's output file it has sent.  It
 * is the one request answered by several Responses (rok.proto,
 * LogsRequest): LogsReply chunks while there is output, then one final
 * LogsReply with end set (without follow: at the end of the file; with
 * follow: once the task has ended and everything it wrote was sent).  The
 * stream counts as one request in flight (conn_begin_wait) from start to
 * end, and as one of its uid's streams (max_followers_per_user, held by
 * conn_stream_add); the final reply goes through reply_post, which ends
 * that wait.
 *
 * Flow control: a follower is a stream of its connection (conn.c's
 * interface): it sends only while conn_stream_room holds, and resumes when
 * the connection tells it the output drained.  So a client that does not
 * read holds at most the pause mark + one reply of memory per stream.
 * Replies are kept under a quarter of max_output and under max_frame, so
 * streams do not trip conn.c's max_output; only a reply of one large
 * record (up to EXEC_REC_MAX) can exceed a max_output set below four
 * times that.
 *
 * Wake-ups: while any follower exists, logs subscribes to the task events
 * (events.c): output appended to a task, its end, and the refusal of a
 * spawn by the journal (EVENTS_GONE): a follower of an id whose spawn was
 * not committed yet when it came ends NOT_FOUND then, as it would have
 * had the id been unknown when it came (as a watch does).
 * Each pumps that task's followers (every follower for EVENTS_ANY_TASK,
 * which stands for output events events.c dropped).  A new follower
 * subscribes first and then reads the file and the task's state (events.c
 * says why that order misses nothing).
 *
 * The file is read on the reactor thread (pread of the page cache, at most
 * logs_batch() bytes per reply); records cut short at the end of the file
 * (being written) are left for the next pump.  A file removed while a
 * follower holds it (the next run of a retried task starts afresh, or a
 * prune) is let go when its removal's output event comes (or an
 * EVENTS_ANY_TASK, which may stand for one), whether or not the client
 * reads: its blocks no longer count against anyone
 * (max_kept_output_per_user) and must not stay taken.  The follower goes
 * on from the start of the file now under the name: the new run's
 * output, or none; the first reply from it says which run that is
 * (LogsReply.run).  Only such events look at the file's links: an fstat
 * at every pump cost a system call per output event.
 *
 * The journal is not read on the reactor thread: a task no longer in
 * memory (finished long ago, or before a restart) is looked up, and its
 * final TaskInfo read, in the blocking pool (conn_offload), which answers
 * an error itself or hands the stream back to this thread; the offload's
 * wait is the stream's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec.h"
#include "reactor.h"
#include "rokd.h"

#define LOGS_BATCH (EXEC_REC_MAX + EXEC_REC_HDR)
#define LOGS_CHUNKS 64               /* records per reply, at most */

/* Bytes of records per reply (a reply holds at least one record). */
static size_t logs_batch(void)
{
	size_t b = LOGS_BATCH;

	if (config.max_output / 4 < b)
		b = config.max_output / 4;
	if (config.max_frame > 1024 && config.max_frame - 1024 < b)
		b = config.max_frame - 1024;   /* room for the framing */
	return b;
}

struct follower {
	struct conn_stream stream;   /* first: conn.c hands it back */
	struct conn *conn;
	uint64_t req_id, task_id;
	bool follow;
	int fd;                      /* the output file; -1: not open yet */
	off_t off;                   /* next record to send */
	bool later_run;              /* the file it held was removed: what it
	                                opens next is a later run's */
	uint32_t run;                /* the run announced with the next
	                                chunks (LogsReply.run), or 0 */
	bool has_final;              /* final: the journal's, for the end */
	TaskInfo final;
	struct follower *prev, *next;
};

static struct {
	struct follower *head;       /* every follower, for the events */
} logs;

#define LOGS_EVENTS (EVENTS_END | EVENTS_OUTPUT | EVENTS_GONE)

static void logs_event_cb(const struct events_ev *ev);

static void logs_remove(struct follower *f)
{
	if (f->prev != NULL)
		f->prev->next = f->next;
	else
		logs.head = f->next;
	if (f->next != NULL)
		f->next->prev = f->prev;
	conn_stream_remove(&f->stream);   /* and its QUOTA_FOLLOWERS */
	events_unsubscribe(logs_event_cb, LOGS_EVENTS);
	if (f->fd >= 0)
		close(f->fd);
	if (f->has_final)
		tasktab_info_free(&f->final);
	free(f);
}

/* Sends the last reply (ending the wait) and forgets f. */
static void logs_end(struct follower *f)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__LogsReply lr = ROK__V1__LOGS_REPLY__INIT;
	TaskInfo info;

	if (f->has_final) {
		info = f->final;   /* taken over */
		f->has_final = false;
	} else {
		tasktab_info(f->task_id, conn_uid(f->conn), &info);
	}
	lr.end = true;
	lr.task = &info;
	resp.id = f->req_id;
	resp.body_case = ROK__V1__RESPONSE__BODY_LOGS;
	resp.logs = &lr;
	reply_post(f->conn, &resp);   /* delivered after every chunk sent */
	tasktab_info_free(&info);
	logs_remove(f);
}

/* Ends f with NOT_FOUND: its id never was a task (as cmd-watch.c's). */
static void logs_gone(struct follower *f)
{
	char msg[96];

	snprintf(msg, sizeof(msg), "task %llu: no such task (its spawn was "
	         "refused)", (unsigned long long)f->task_id);
	reply_post_error(f->conn, f->req_id, ROK__V1__ERROR_CODE__NOT_FOUND,
	                 msg);
	logs_remove(f);
}

/*
 * Sends one reply of whole records from the file: 1 if it sent one, 0 at
 * the end of what is there, -1 if the file is unreadable.
 */
static int logs_send_batch(struct follower *f)
{
	static uint8_t buf[LOGS_BATCH * 2];
	Rok__V1__LogChunk chunks[LOGS_CHUNKS], *ptrs[LOGS_CHUNKS];
	size_t n = 0, at = 0;

	if (f->fd < 0) {
		char path[4096];
		exec_output_path(f->task_id, path, sizeof(path));
		/* Which run's file it opens: the one the task table names
		 * both before and after the open, since a run's start
		 * unlinks the file and then says so (exec_out_forget).  If
		 * a run started in between, its output (or the end) pumps
		 * again.  A record gone meanwhile (0) is a task that has
		 * finished: the file is its last run's, the one read first
		 * (0 too if the record was gone already: no note then). */
		uint32_t run = f->later_run ? tasktab_output_run(f->task_id)
		                            : 0;
		f->fd = open(path, O_RDONLY | O_CLOEXEC);
		if (f->fd < 0)
			return errno == ENOENT ? 0 : -1;
		if (f->later_run) {
			uint32_t again = tasktab_output_run(f->task_id);
			if (again != 0 && again != run) {
				close(f->fd);
				f->fd = -1;
				return 0;
			}
			f->later_run = false;
			f->run = run;
		}
	}
	ssize_t got = pread(f->fd, buf, sizeof(buf), f->off);
	if (got < 0)
		return -1;
	while (n < LOGS_CHUNKS && (size_t)got - at >= EXEC_REC_HDR) {
		const uint8_t *h = buf + at;
		size_t len = (size_t)h[1] << 24 | (size_t)h[2] << 16 |
		             (size_t)h[3] << 8 | h[4];
		if (len > EXEC_REC_MAX || (h[0] != EXEC_STDOUT &&
		                           h[0] != EXEC_STDERR))
			return -1;   /* not a file we wrote */
		if ((size_t)got - at - EXEC_REC_HDR < len)
			break;       /* being written, or past this batch */
		if (n > 0 && at + EXEC_REC_HDR + len > logs_batch())
			break;       /* keep one reply under the limits */
		rok__v1__log_chunk__init(&chunks[n]);
		chunks[n].stream = h[0];
		chunks[n].data.data = (uint8_t *)h + EXEC_REC_HDR;
		chunks[n].data.len = len;
		ptrs[n] = &chunks[n];
		n++;
		at += EXEC_REC_HDR + len;
	}
	if (n == 0)
		return 0;
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__LogsReply lr = ROK__V1__LOGS_REPLY__INIT;
	lr.chunks = ptrs;
	lr.n_chunks = n;
	lr.run = f->run;
	f->run = 0;
	resp.id = f->req_id;
	resp.body_case = ROK__V1__RESPONSE__BODY_LOGS;
	resp.logs = &lr;
	f->off += (off_t)at;
	conn_send(f->conn, &resp);
	return 1;
}

/* Lets go of f's file if it was removed (see the top).  The event that
 * says so may be late: f may have opened the file now under the name
 * already, which stays. */
static void logs_drop_removed(struct follower *f)
{
	struct stat st;

	if (f->fd < 0 || (fstat(f->fd, &st) == 0 && st.st_nlink > 0))
		return;
	close(f->fd);
	f->fd = -1;
	f->off = 0;
	f->later_run = true;
}

/* Sends what it can; ends f when it is done.  f may be freed. */
static void logs_pump(struct follower *f)
{
	if (conn_closed(f->conn)) {
		logs_end(f);   /* reply_post on a closed conn only ends the wait */
		return;
	}
	/* Looked at before reading: a task that has ended wrote everything. */
	bool finished = tasktab_finished(f->task_id);
	for (;;) {
		if (!conn_stream_room(f->conn))
			return;   /* logs_writable resumes */
		int rc = logs_send_batch(f);
		if (conn_closed(f->conn)) {
			logs_end(f);
			return;
		}
		if (rc < 0) {
			log_warnx("task %llu: its output file is unreadable",
			          (unsigned long long)f->task_id);
			logs_end(f);
			return;
		}
		if (rc == 0)
			break;
	}
	if (finished || !f->follow)
		logs_end(f);
}

static void logs_event_cb(const struct events_ev *ev)
{
	for (struct follower *f = logs.head, *next; f != NULL; f = next) {
		next = f->next;   /* logs_pump frees only f */
		if (ev->kind == EVENTS_GONE) {
			if (f->task_id == ev->id)
				logs_gone(f);
			continue;
		}
		bool any = ev->kind == EVENTS_OUTPUT &&
		           ev->id == EVENTS_ANY_TASK;
		if (f->task_id != ev->id && !any)
			continue;
		if (ev->kind == EVENTS_OUTPUT && (ev->removed || any))
			logs_drop_removed(f);
		logs_pump(f);
	}
}

static void logs_writable(struct conn_stream *s)
{
	logs_pump((struct follower *)(void *)s);
}

static void logs_closed(struct conn_stream *s)
{
	logs_end((struct follower *)(void *)s);   /* only ends the wait */
}

/* No shutdown hook: a stop cancels every task, which ends its followers. */
static const struct conn_stream_ops logs_ops = {
	.writable = logs_writable,
	.closed = logs_closed,
};

static const char *logs_why(int code)
{
	return code == ROK__V1__ERROR_CODE__PERMISSION_DENIED
	       ? "task belongs to another user" : "no such task";
}

/*
 * Starts the stream of a request counted as a wait already (its own
 * conn_begin_wait, or the offload's).  final: the journal's TaskInfo of a
 * task no longer in memory, taken over (freed here on failure), or NULL.
 */
static void logs_begin(struct conn *c, uint64_t req_id, uint64_t task_id,
                       bool follow, TaskInfo *final)
{
	struct follower *f = calloc(1, sizeof(*f));
	if (f == NULL) {
		reply_post_error(c, req_id, ROK__V1__ERROR_CODE__INTERNAL,
		                 "out of memory");
		goto fail;
	}
	if (!conn_stream_add(c, &f->stream, &logs_ops, req_id))
		goto fail;   /* answered: its uid has streams enough, or
		                c closed meanwhile */
	if (events_subscribe(logs_event_cb, LOGS_EVENTS) < 0) {
		conn_stream_remove(&f->stream);
		reply_post_error(c, req_id, ROK__V1__ERROR_CODE__INTERNAL,
		                 "out of memory");
		goto fail;
	}
	f->conn = c;
	f->req_id = req_id;
	f->task_id = task_id;
	f->follow = follow;
	f->fd = -1;
	if (final != NULL) {
		f->final = *final;
		f->has_final = true;
	}
	f->next = logs.head;
	if (logs.head != NULL)
		logs.head->prev = f;
	logs.head = f;
	logs_pump(f);   /* subscribed before reading: see the top */
	return;
fail:
	free(f);
	if (final != NULL)
		tasktab_info_free(final);
}

/* A logs request for a task no longer in memory, in the blocking pool. */
struct logs_job {
	struct conn *conn;
	uint64_t req_id, task_id;
	uid_t uid;
	bool follow;
	TaskInfo info;
};

/* Reactor thread: the journal said yes; the stream starts. */
static void logs_begin_cb(void *arg)
{
	struct logs_job *j = arg;

	logs_begin(j->conn, j->req_id, j->task_id, j->follow, &j->info);
	free(j);
}

/* Blocking pool: answers an error, or hands the stream to the reactor. */
static void *logs_lookup_run(void *arg)
{
	struct logs_job *j = arg;
	rok_task *handle;

	/* The answer of the lookup itself, which allocates nothing: no
	 * failure of an allocation can let another user's output through. */
	int code = tasktab_lookup(j->task_id, j->uid, &handle);
	rok_task_unref(handle);
	if (code != 0) {
		reply_post_error(j->conn, j->req_id, (ErrorCode)code,
		                 logs_why(code));
		free(j);
		return NULL;
	}
	tasktab_info(j->task_id, j->uid, &j->info);
	int err = reactor_call(logs_begin_cb, j);
	if (err < 0) {
		tasktab_info_free(&j->info);
		reply_post_error(j->conn, j->req_id,
		                 ROK__V1__ERROR_CODE__UNAVAILABLE,
		                 "rokd is stopping");
		free(j);
	}
	return NULL;
}

void cmd_logs(struct conn *c, const Request *req)
{
	const Rok__V1__LogsRequest *lr = req->logs;
	int code;

	if (!tasktab_lookup_mem(lr->task_id, conn_uid(c), &code)) {
		/* Only the journal knows: off this thread (see the top). */
		struct logs_job *j = calloc(1, sizeof(*j));
		if (j == NULL) {
			conn_send_error(c, req->id,
			                ROK__V1__ERROR_CODE__INTERNAL,
			                "out of memory");
			return;
		}
		j->conn = c;
		j->req_id = req->id;
		j->task_id = lr->task_id;
		j->uid = conn_uid(c);
		j->follow = lr->follow;
		if (conn_offload(c, req->id, logs_lookup_run, j) < 0)
			free(j);
		return;
	}
	if (code != 0) {
		conn_send_error(c, req->id, (ErrorCode)code, "%s",
		                logs_why(code));
		return;
	}
	if (!conn_begin_wait(c, req->id))
		return;   /* answered: too many requests in flight */
	logs_begin(c, req->id, lr->task_id, lr->follow, NULL);
}
