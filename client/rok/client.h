/*
 * client.h — librokclient, the C client of rokd: the library rokctl, the
 * load generator and C programs use to talk to the daemon over its Unix
 * socket (protocol rok.v1, see proto/rok.proto).  Installed as
 * <rok/client.h>; `pkg-config --cflags --libs rokclient`.
 *
 * A rok_client is one connection.  It opens with the hello exchange
 * (protocol version ROK_PROTOCOL_VERSION; a daemon that speaks another
 * version is refused with -EPROTONOSUPPORT), then carries requests:
 *
 *   - synchronous calls (rok_client_spawn, _join, _race, ...) send one
 *     request and wait for its reply;
 *   - pipelined calls (rok_client_send_*) queue a request, give back its
 *     request id and return at once; rok_client_recv() then hands over the
 *     replies in the order they arrive, which need not be the order sent.
 *
 * Both may be mixed: a synchronous call that meets replies to earlier
 * pipelined requests keeps them for rok_client_recv().
 *
 * Errors.  Every function that can fail returns 0 (or a count) on success,
 * a negative errno value for a local or transport failure, or a positive
 * rok_error_code when the daemon answered with a typed error.  The code and
 * a message for people are then available from rok_client_last_error().
 * Transport errors that leave the byte stream unusable (the daemon closed
 * the connection, a malformed or oversized reply) are sticky: every later
 * call fails with the same error; free the client and connect again.
 * Commonly seen negative values:
 *   -ENOENT, -ECONNREFUSED, -EACCES  connect: no daemon at that path
 *   -EPROTONOSUPPORT  hello: the daemon speaks another protocol version
 *   -ECONNRESET       the daemon closed the connection (maybe mid-reply)
 *   -EPROTO           a reply did not decode or did not match its request
 *   -EMSGSIZE         a request is larger than the daemon accepts (refused
 *                     before anything was sent; the connection stays usable)
 *                     or a reply is larger than ROK_CLIENT_MAX_REPLY
 *   -ETIMEDOUT        the client-side timeout (rok_client_set_timeout) passed
 *   -EINVAL           a bad argument (empty id list, NULL pointers)
 * The library never prints, never exits, never raises SIGPIPE, and opens
 * every descriptor with close-on-exec.
 *
 * Threads: a rok_client belongs to one thread at a time; the library keeps
 * no global state, so different clients may be used on different threads.
 *
 * Ownership: a function that returns a new object through a `**out`
 * parameter gives it to the caller (free it with the matching _free
 * function); pointers inside a rok_reply belong to the reply.  On failure
 * every out parameter is zeroed / NULL.
 */
#ifndef ROK_CLIENT_H
#define ROK_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The protocol version this library speaks (Hello.protocol_version). */
#define ROK_PROTOCOL_VERSION 1

/* Largest reply frame the client accepts (64 MiB). */
#define ROK_CLIENT_MAX_REPLY (64u << 20)

/* ---- typed errors (rok.v1.ErrorCode) -------------------------------- */

enum rok_error_code {
	ROK_E_OK = 0,
	ROK_E_NOT_FOUND = 1,          /* no task with that id */
	ROK_E_PERMISSION_DENIED = 2,  /* the task belongs to another user */
	ROK_E_INVALID_ARGUMENT = 3,   /* malformed request, unknown kind */
	ROK_E_RESOURCE_EXHAUSTED = 4, /* a daemon limit was hit */
	ROK_E_TIMED_OUT = 5,          /* the request's own timeout passed */
	ROK_E_CANCELLED = 6,          /* the request was cancelled (shutdown) */
	ROK_E_UNAVAILABLE = 7,        /* the daemon cannot serve it now */
	ROK_E_INTERNAL = 8,           /* a daemon bug or system error */
};

/*
 * "not_found", "permission_denied", ... for a code above (static
 * strings); "error_N" for a code this library does not know (a newer
 * daemon), in a thread-local buffer valid until the next such call.
 */
const char *rok_error_name(int code);

/* ---- tasks ------------------------------------------------------------ */

enum rok_state {
	ROK_TASK_UNSPECIFIED = 0,
	ROK_TASK_QUEUED = 1,
	ROK_TASK_RUNNING = 2,
	ROK_TASK_SUCCEEDED = 3,
	ROK_TASK_FAILED = 4,
	ROK_TASK_CANCELLED = 5,
	ROK_TASK_TIMED_OUT = 6,
	ROK_TASK_INTERRUPTED = 7,
};

/*
 * "queued", "running", "succeeded", "failed", "cancelled", "timed_out",
 * "interrupted" (the names of rokctl --json); "unspecified" for 0 and
 * "unknown" for a state this library does not know.  Static, never NULL.
 */
const char *rok_state_name(int state);

/* The state named `name` (as above), or -EINVAL. */
int rok_state_parse(const char *name);

/* True for the states a task ends in (succeeded and after). */
bool rok_state_finished(int state);

/* Bytes from the wire.  data is never NULL and is NUL-terminated (data[len]
 * == 0), but may contain NULs itself: use len. */
typedef struct rok_bytes {
	const uint8_t *data;
	size_t len;
} rok_bytes;

/* A typed error: code (enum rok_error_code) and message. */
typedef struct rok_error {
	int code;
	rok_bytes message;
} rok_error;

/* Everything the daemon reported about one task (rok.v1.TaskInfo). */
typedef struct rok_task_info {
	uint64_t id;
	int state;                 /* enum rok_state */
	rok_bytes kind;
	uint32_t uid;              /* who spawned it */
	rok_bytes value;           /* the result (echo: the text; exec: output) */
	bool has_exit_code;        /* exec: exited normally */
	int exit_code;
	bool has_signal;           /* exec: killed by a signal */
	int signal;
	uint64_t spawned_us;       /* wall clock, µs since the epoch; 0: not yet */
	uint64_t started_us;
	uint64_t finished_us;
	bool output_truncated;
	rok_bytes reason;          /* why it failed, for people; may be empty */
	rok_error error;           /* code != 0: this id could not be looked up
				    * (NOT_FOUND, PERMISSION_DENIED); only id is
				    * meaningful then */
	size_t n_args;
	const rok_bytes *args;     /* as spawned */
	uint32_t retries;          /* times run again because rokd stopped
				    * while it ran (at most the spec's retry) */
	rok_bytes group;           /* its group ("default"; empty from an
				    * older daemon) */
	int priority;              /* enum rok_priority */
	rok_bytes waiting;         /* queued: why it has not started (for
				    * people); empty otherwise */
	uint32_t run;              /* which run (1: the first; retry_failed) */
	uint64_t not_before_us;    /* queued: not started before this time */
} rok_task_info;

/* Priority classes (rok.v1.Priority); 0 means normal. */
enum rok_priority {
	ROK_PRIORITY_UNSPECIFIED = 0,
	ROK_PRIORITY_URGENT = 1,
	ROK_PRIORITY_HIGH = 2,
	ROK_PRIORITY_NORMAL = 3,
	ROK_PRIORITY_LOW = 4,
};

/* "urgent", "high", "normal" (also for 0), "low"; "unknown" otherwise.
 * Static, never NULL. */
const char *rok_priority_name(int priority);
/* The priority named `name`, or -EINVAL. */
int rok_priority_parse(const char *name);

/* Group policies (rok.v1.GroupPolicy). */
enum rok_group_policy {
	ROK_POLICY_UNSPECIFIED = 0,
	ROK_POLICY_STRICT = 1,
	ROK_POLICY_WEIGHTED = 2,
};

/* "strict", "weighted", "unspecified", "unknown"; static. */
const char *rok_policy_name(int policy);
int rok_policy_parse(const char *name);

/* A group (rok.v1.GroupInfo in a group reply, GroupStats in stats). */
typedef struct rok_group {
	rok_bytes name;
	uint32_t parallel;         /* 0: no limit */
	int policy;                /* enum rok_group_policy */
	rok_bytes backend;         /* group replies: "local" or "slurm" */
	bool paused;
	uint32_t weights[4];       /* group replies: urgent, high, normal, low */
	uint32_t running;          /* stats: exec tasks holding its slots */
	uint64_t queued[4];        /* stats: queued tasks by class */
	rok_bytes partition;       /* group replies: slurm partition; empty:
	                              the cluster's default */
} rok_group;

/* Group operations (rok.v1.GroupRequest.Op). */
enum rok_group_op {
	ROK_GROUP_LIST = 0,
	ROK_GROUP_ADD = 1,
	ROK_GROUP_SET = 2,
	ROK_GROUP_RM = 3,
	ROK_GROUP_PAUSE = 4,
	ROK_GROUP_RESUME = 5,
};

/* What a group operation sets; zero-initialise.  Strings borrowed. */
typedef struct rok_group_spec {
	const char *name;
	bool has_parallel;
	uint32_t parallel;
	int policy;                /* 0: unchanged (add: strict) */
	const char *backend;       /* NULL: unchanged (add: "local") */
	bool has_weights;
	uint32_t weights[4];
	const char *partition;     /* NULL: unchanged (add: none); "": none */
} rok_group_spec;

/*
 * What to spawn (rok.v1.TaskSpec).  Strings are borrowed for the call only.
 * Zero-initialise and fill what you need.
 */
typedef struct rok_spec {
	const char *kind;          /* NULL or "": "exec" */
	const char *const *args;   /* exec: argv; sleep: {"5s"}; echo: {"text"} */
	size_t n_args;
	uint64_t timeout_ms;       /* the task's own timeout; 0: none */
	const char *cwd;           /* exec: working directory; NULL: the daemon's */
	const char *const *env;    /* exec: "NAME=value" entries */
	size_t n_env;
	bool clean_env;            /* exec: start from a minimal environment */
	const void *stdin_data;    /* exec: bytes fed to standard input */
	size_t stdin_len;
	uint32_t retry;            /* re-runs after a daemon crash */
	uint64_t kill_grace_ms;    /* exec: SIGTERM→SIGKILL delay; 0: default */
	const char *group;         /* NULL or "": the group default */
	int priority;              /* enum rok_priority; 0: normal */
	const uint64_t *after;     /* start once all these succeeded */
	size_t n_after;
	const uint64_t *after_any; /* start once all these ended */
	size_t n_after_any;
	uint64_t not_before_us;    /* wall clock, µs since the epoch; 0: now */
	uint32_t retry_failed;     /* more runs after a failure */
	uint64_t backoff_ms;       /* before retry k: backoff_ms * 2^(k-1) */
	/* An exec task of a slurm group: its job's resources; 0: Slurm's
	 * default. */
	uint32_t cpus;
	uint64_t mem_mib;
	uint64_t time_limit_ms;    /* Slurm's limit, whole minutes (up) */
} rok_spec;

/*
 * A latency histogram (rok.v1.Histogram): counts[i] observations at most
 * bounds_us[i] (and above the bound before), counts[n_bounds] those above
 * the last bound; count is their sum.  Not cumulative.
 */
#define ROK_HISTOGRAM_MAX 32
typedef struct rok_histogram {
	size_t n_bounds;           /* 0: the daemon sent none */
	uint64_t bounds_us[ROK_HISTOGRAM_MAX];
	uint64_t counts[ROK_HISTOGRAM_MAX + 1];
	uint64_t count;
	uint64_t sum_us;
} rok_histogram;

/* The daemon's counters (rok.v1.StatsReply). */
typedef struct rok_daemon_stats {
	uint32_t workers;
	uint64_t steals, parks, polls, injector_depth;
	uint64_t queued, running, succeeded, failed, cancelled, timed_out,
		 interrupted;
	int64_t registrations;
	uint32_t blocking_threads;
	uint32_t connections;
	uint64_t uptime_ms;
	uint64_t handoffs;
	/* Tasks that entered each state since rokd started, indexed by
	 * enum rok_state (ROK_TASK_QUEUED: created; ROK_TASK_RUNNING: runs
	 * started); never going down, unlike queued .. interrupted above. */
	uint64_t tasks_total[8];
	rok_histogram spawn_to_start;   /* spawn accepted -> run started */
	rok_histogram run_time;         /* run started -> finished */
	rok_histogram journal_commit;   /* one journal transaction */
	uint64_t output_bytes;          /* exec task output stored */
} rok_daemon_stats;

/* What the daemon said in its hello reply. */
typedef struct rok_server_info {
	uint32_t protocol_version;
	const char *software_version;   /* e.g. "rokd 0.1.0"; never NULL */
	uint32_t uid;                   /* the uid the daemon sees for us */
	uint32_t max_frame;             /* largest request frame it accepts */
	uint32_t max_in_flight;         /* requests it lets one connection have
					 * pending; 0: not said */
} rok_server_info;

/* ---- replies ---------------------------------------------------------- */

enum rok_reply_type {
	ROK_REPLY_NONE = 0,        /* an error reply without a body */
	ROK_REPLY_HELLO,
	ROK_REPLY_SPAWN,
	ROK_REPLY_JOIN,
	ROK_REPLY_RACE,
	ROK_REPLY_SELECT,
	ROK_REPLY_CANCEL,
	ROK_REPLY_STATUS,
	ROK_REPLY_LIST,
	ROK_REPLY_STATS,
	ROK_REPLY_PING,
	ROK_REPLY_LOGS,
	ROK_REPLY_PRUNE,
	ROK_REPLY_GROUP,
	ROK_REPLY_WATCH,
};

/* A piece of a task's output (rok.v1.LogChunk). */
#define ROK_STDOUT 1
#define ROK_STDERR 2
typedef struct rok_log_chunk {
	int stream;                /* ROK_STDOUT or ROK_STDERR */
	rok_bytes data;
} rok_log_chunk;

/*
 * One decoded reply.  Which fields are set depends on `type`:
 *   SPAWN   id; with wait, tasks[0] is the finished task (n_tasks 1)
 *   JOIN, STATUS   tasks, in request order
 *   LIST    tasks, more
 *   RACE    index, tasks[0] is the winner
 *   SELECT  index, tasks[0] is the winner, ids (one per spec)
 *   CANCEL  results (one per id, code 0 / NOT_FOUND / PERMISSION_DENIED)
 *   STATS   stats, groups (running and queued per class), and
 *           prometheus: the same in the Prometheus text format (as rokd's
 *           metrics_listen serves it)
 *   PING    payload
 *   PRUNE   pruned
 *   GROUP   groups (list: all; others: the group as it is now)
 *   HELLO   server
 *   LOGS    chunks (output, in the order the task wrote it); end: the
 *           last reply of the stream, with tasks[0] the task as it is then;
 *           run: not 0 when the chunks begin the output of a run started
 *           after the chunks before them (the run, as rok_task_info
 *           counts; see rok.proto, LogsReply)
 *   WATCH   one event: id moved to state at time_us (snapshot: part of a
 *           snapshot); in an end state tasks[0] is the finished task.
 *           Markers (id 0): snapshot_done, lagged (N events dropped, a
 *           fresh snapshot follows), end (the last reply of the stream)
 * error.code != 0 means the daemon refused the request (the body may then
 * be absent).  Everything pointed to belongs to the reply.
 */
typedef struct rok_reply {
	uint64_t req_id;           /* the request this answers */
	int type;                  /* enum rok_reply_type */
	rok_error error;
	uint64_t id;
	size_t index;
	size_t n_tasks;
	rok_task_info *tasks;
	bool more;
	size_t n_ids;
	const uint64_t *ids;
	size_t n_results;
	const rok_error *results;
	rok_daemon_stats stats;
	rok_bytes prometheus;      /* STATS: NUL-terminated text */
	rok_bytes payload;
	rok_server_info server;
	size_t n_chunks;
	const rok_log_chunk *chunks;
	bool end;
	uint64_t pruned;           /* PRUNE: tasks deleted */
	size_t n_groups;           /* GROUP, STATS */
	const rok_group *groups;
	int state;                 /* WATCH: the task's new state */
	uint64_t time_us;          /* WATCH: when it changed (wall clock) */
	bool snapshot;             /* WATCH: part of a snapshot */
	bool snapshot_done;        /* WATCH: the snapshot is complete */
	uint64_t lagged;           /* WATCH: events dropped (we lagged) */
	uint32_t run;              /* LOGS: a new run's output begins */
} rok_reply;

/* Frees a reply and everything in it.  NULL is fine. */
void rok_reply_free(rok_reply *r);

/* ---- connections ------------------------------------------------------ */

typedef struct rok_client rok_client;

/*
 * A new, unconnected client; `name` (e.g. "rokctl 0.1.0", copied; NULL:
 * "librokclient VERSION") is sent in the hello.  NULL when out of memory.
 */
rok_client *rok_client_new(const char *name);

/* Closes the connection and frees everything.  NULL is fine. */
void rok_client_free(rok_client *c);

/*
 * Connects to the daemon's socket at `path` (NULL: rok_socket_path()) and
 * performs the hello exchange.  Blocking, bounded by the client timeout.
 * Returns 0, -errno, or a positive code if the daemon refused the hello.
 * A client connects once; on failure free it and make a new one.
 */
int rok_client_connect(rok_client *c, const char *path);

/*
 * Like rok_client_connect, on a descriptor that is already connected (a
 * socketpair, an fd handed over by a supervisor).  Takes the fd: it is
 * closed by rok_client_free, also when this call fails.  It is switched to
 * non-blocking, close-on-exec mode.
 */
int rok_client_connect_fd(rok_client *c, int fd);

/* The socket path connected to ("" for connect_fd); never NULL. */
const char *rok_client_path(const rok_client *c);

/* The daemon's hello reply; NULL before a successful connect. */
const rok_server_info *rok_client_server(const rok_client *c);

/*
 * Bounds how long connect and every synchronous call may wait, in ms; 0
 * (the default): no bound.  A synchronous call that gives up returns
 * -ETIMEDOUT; its reply, if it comes later, is dropped.  Requests that
 * wait on purpose (join, race, spawn with wait) should rather carry their
 * own timeout, which the daemon enforces and answers with ROK_E_TIMED_OUT.
 */
void rok_client_set_timeout(rok_client *c, int timeout_ms);

/*
 * The error of the last call on c that failed: a positive rok_error_code
 * or a negative errno, 0 if none failed yet.  If message is not NULL it is
 * set to a description for people (the daemon's message, or the library's
 * with the errno text), valid until the next failing call or free.
 */
int rok_client_last_error(const rok_client *c, const char **message);

/* The socket's descriptor, for poll() in an event loop (POLLIN: replies
 * may be waiting; call rok_client_recv with timeout 0).  -1 if none. */
int rok_client_fd(const rok_client *c);

/* Requests sent (or queued) whose reply has not been received yet. */
size_t rok_client_in_flight(const rok_client *c);

/* ---- synchronous calls ----------------------------------------------- */

/* Spawns a task and returns its id without waiting for it. */
int rok_client_spawn(rok_client *c, const rok_spec *spec, uint64_t *id);

/*
 * Spawns a task and waits until it has finished; *out gets the reply
 * (tasks[0] is the finished task).  timeout_ms (0: none) bounds the wait:
 * ROK_E_TIMED_OUT then, and the task keeps running.
 */
int rok_client_spawn_wait(rok_client *c, const rok_spec *spec,
			  uint64_t timeout_ms, rok_reply **out);

/*
 * Waits for all the tasks (join), the first (race; cancel_rest cancels the
 * others), or spawns every spec and takes the first to finish (select, the
 * others are cancelled).  timeout_ms 0: none; ROK_E_TIMED_OUT when it
 * passes (join and race leave the tasks running).  Per-id lookup errors of
 * join and status are reported in tasks[i].error, not as the call's result.
 */
int rok_client_join(rok_client *c, const uint64_t *ids, size_t n,
		    uint64_t timeout_ms, rok_reply **out);
int rok_client_race(rok_client *c, const uint64_t *ids, size_t n,
		    uint64_t timeout_ms, bool cancel_rest, rok_reply **out);
int rok_client_select(rok_client *c, const rok_spec *specs, size_t n,
		      uint64_t timeout_ms, rok_reply **out);

/* Requests cancellation (cooperative); per-id outcome in (*out)->results. */
int rok_client_cancel(rok_client *c, const uint64_t *ids, size_t n,
		      rok_reply **out);

/* The current state of each task, in request order. */
int rok_client_status(rok_client *c, const uint64_t *ids, size_t n,
		      rok_reply **out);

/*
 * One page of the tasks visible to the caller with an id above after_id,
 * in increasing id order, optionally only those in `state` (0: any); at
 * most `limit` (0: the daemon's default).  (*out)->more says whether
 * another page follows: pass the last id seen as after_id for it.
 */
int rok_client_list(rok_client *c, int state, uint64_t after_id,
		    uint32_t limit, rok_reply **out);

/* The same list, only the tasks of `group` that the daemon holds in
 * memory (every queued and running one, the newest finished); a NULL
 * group is rok_client_list. */
int rok_client_list_group(rok_client *c, const char *group, int state,
			  uint64_t after_id, uint32_t limit, rok_reply **out);

int rok_client_stats(rok_client *c, rok_daemon_stats *out);
/* The stats reply itself: (*out)->stats, and (*out)->groups per group. */
int rok_client_stats_reply(rok_client *c, rok_reply **out);

/*
 * Lists (op ROK_GROUP_LIST, g may be NULL) or manages groups: *out's
 * groups is every group, or the one managed as it is now (none after
 * ROK_GROUP_RM).  Managing is for root and the daemon's own user.
 */
int rok_client_group(rok_client *c, int op, const rok_group_spec *g,
		     rok_reply **out);

/*
 * Deletes finished tasks (and their output) from the daemon's journal:
 * those finished more than older_than_ms ago (0: no age limit) and, if
 * keep_set, those beyond the `keep` most recent finished ones.  With
 * neither, the daemon applies its configured retention now.  *pruned
 * (may be NULL) gets the count.  Root only on a system daemon.
 */
int rok_client_prune(rok_client *c, uint64_t older_than_ms, bool keep_set,
		     uint64_t keep, uint64_t *pruned);

/* A round trip; the daemon must echo payload (n bytes, may be 0). */
int rok_client_ping(rok_client *c, const void *payload, size_t n);

/*
 * A task's captured output, as a stream: rok_client_send_logs sends the
 * request; then call rok_client_wait(c, req_id, &r) again and again, each
 * reply (type ROK_REPLY_LOGS) holding chunks of output in order, until one
 * has r->end set (tasks[0] is then the task).  With follow the stream
 * lasts until the task has ended (set the client timeout to 0 to wait that
 * long); without, until the output kept so far has been sent.  A typed
 * error (NOT_FOUND, PERMISSION_DENIED) also ends the stream.  The whole
 * stream counts as one request in flight.
 */
int rok_client_send_logs(rok_client *c, uint64_t task_id, bool follow,
			 uint64_t *req_id);

/*
 * Task events, as a stream (rok.v1.WatchRequest): the tasks `ids` (n of
 * them), else those of `group` (NULL or "": no group filter), else all the
 * caller's; `states` (n_states of them, enum rok_state; 0: all) keeps only
 * events into those states.  Then call rok_client_wait(c, req_id, &r)
 * again and again: first a snapshot (r->snapshot set on each, then one
 * reply with r->snapshot_done), then one reply per change as it happens.
 * A reply with r->lagged > 0 says that many events were dropped because we
 * read too slowly; a fresh snapshot follows.  With ids, a reply with
 * r->end ends the stream once every id has ended; without, it lasts until
 * the connection closes (or the daemon stops: end).  A typed error ends it
 * too.  Set the client timeout to 0 to wait that long.  The whole stream
 * counts as one request in flight.
 */
int rok_client_send_watch(rok_client *c, const uint64_t *ids, size_t n,
			  const char *group, const int *states,
			  size_t n_states, uint64_t *req_id);

/* ---- pipelining ------------------------------------------------------- */

/*
 * Each rok_client_send_* queues one request and sets *req_id to the id it
 * carries: ids are consecutive (1, 2, 3, ... in the order requests are
 * queued on the connection; the hello takes the first), so a load
 * generator may index its own tables by them.  They do not wait for the daemon; they
 * write what the socket takes at once and leave the rest for
 * rok_client_flush / rok_client_recv.  A request larger than the daemon's
 * max_frame fails with -EMSGSIZE and nothing is queued.
 */
int rok_client_send_spawn(rok_client *c, const rok_spec *spec, bool wait,
			  uint64_t wait_timeout_ms, uint64_t *req_id);
int rok_client_send_join(rok_client *c, const uint64_t *ids, size_t n,
			 uint64_t timeout_ms, uint64_t *req_id);
int rok_client_send_race(rok_client *c, const uint64_t *ids, size_t n,
			 uint64_t timeout_ms, bool cancel_rest,
			 uint64_t *req_id);
int rok_client_send_select(rok_client *c, const rok_spec *specs, size_t n,
			   uint64_t timeout_ms, uint64_t *req_id);
int rok_client_send_cancel(rok_client *c, const uint64_t *ids, size_t n,
			   uint64_t *req_id);
int rok_client_send_status(rok_client *c, const uint64_t *ids, size_t n,
			   uint64_t *req_id);
int rok_client_send_list(rok_client *c, int state, uint64_t after_id,
			 uint32_t limit, uint64_t *req_id);
int rok_client_send_list_group(rok_client *c, const char *group, int state,
			       uint64_t after_id, uint32_t limit,
			       uint64_t *req_id);
int rok_client_send_stats(rok_client *c, uint64_t *req_id);
int rok_client_send_group(rok_client *c, int op, const rok_group_spec *g,
			  uint64_t *req_id);
int rok_client_send_prune(rok_client *c, uint64_t older_than_ms,
			  bool keep_set, uint64_t keep, uint64_t *req_id);
int rok_client_send_ping(rok_client *c, const void *payload, size_t n,
			 uint64_t *req_id);

/* Writes every queued request; blocks (bounded by the client timeout).
 * Replies that arrive meanwhile are kept for rok_client_recv. */
int rok_client_flush(rok_client *c);

/*
 * The next reply, whichever request it answers: *out gets it (free with
 * rok_reply_free).  Waits up to timeout_ms (-1: forever, 0: do not wait):
 * -EAGAIN when none arrived in time (it waits even with nothing in flight).
 * A reply carrying a typed error is still returned with 0; look at
 * (*out)->error.
 */
int rok_client_recv(rok_client *c, int timeout_ms, rok_reply **out);

/*
 * The reply to request req_id (an id a send_* call gave on c): waits for it
 * (bounded by the client timeout), keeping other replies for
 * rok_client_recv.  Returns 0, or the reply's
 * typed error (positive; *out is then NULL and the error is in
 * rok_client_last_error), or -errno.
 */
int rok_client_wait(rok_client *c, uint64_t req_id, rok_reply **out);

/* ---- helpers ---------------------------------------------------------- */

/*
 * The default socket path (DESIGN §3): $ROK_SOCKET if set and not empty;
 * else, for root (effective uid 0), /run/rok/rokd.sock; else
 * $XDG_RUNTIME_DIR/rok/rokd.sock if XDG_RUNTIME_DIR is an absolute path;
 * else /tmp/rok-UID/rokd.sock (UID the effective uid).  rokd must use the
 * same fallback, create /tmp/rok-UID with mode 0700, and the client
 * refuses to connect through it unless it is a directory owned by the user
 * and not accessible to others (rok_client_connect with path NULL).
 * Writes the path into buf; returns its length or -ENAMETOOLONG.
 */
int rok_socket_path(char *buf, size_t size);

/* The longest duration rokd accepts in any field or sleep argument:
 * 87600h (ten years).  A longer one is INVALID_ARGUMENT. */
#define ROK_DURATION_MAX_MS ((uint64_t)87600 * 3600 * 1000)

/*
 * Parses a duration: one or more NUMBER UNIT groups, UNIT one of ms, s, m,
 * h, NUMBER decimal with an optional fraction ("250ms", "5s", "1m30s",
 * "1.5h"); a lone "0" is zero.  The result must be a whole number of
 * milliseconds.  0 or -EINVAL (garbage, a missing unit, finer than 1 ms),
 * -ERANGE (longer than ROK_DURATION_MAX_MS).  *ms is 0 on failure.
 */
int rok_duration_parse(const char *s, uint64_t *ms);

/*
 * Writes ms as a duration rok_duration_parse reads back ("250ms", "1.5s",
 * "1m30s", "2h", "0s").  Returns the length (snprintf-like: the string is
 * cut if size is too small).
 */
int rok_duration_format(uint64_t ms, char *buf, size_t size);

/* "librokclient 0.1.0". */
const char *rok_client_version(void);

#ifdef __cplusplus
}
#endif

#endif /* ROK_CLIENT_H */
