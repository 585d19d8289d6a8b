/*
 * rokd.h — the daemon's private header: every module's interface, grouped
 * by file.  Threads: "reactor" is librok's reactor thread, which runs the
 * whole front end (sockets, parsing, dispatch, replies); "worker" is any
 * runtime worker, which runs task kinds and the requests that wait; "main"
 * is the thread in main(), which only starts, waits for signals and stops.
 */
#ifndef ROKD_H
#define ROKD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rok.pb-c.h"
#include "rok/rok.h"

#define ROKD_VERSION "0.1.0"
#define ROKD_PROTOCOL 1

typedef Rok__V1__Request Request;
typedef Rok__V1__Response Response;
typedef Rok__V1__TaskInfo TaskInfo;
typedef Rok__V1__TaskSpec TaskSpec;
typedef Rok__V1__ErrorCode ErrorCode;

/* ---- log.c: stderr, one line per event (any thread) ------------------- */
void log_init(int verbosity);
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_errno(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2),
                                                  noreturn));

/* ---- notify.c: systemd notifications (sd_notify protocol) ------------ */
/* Main thread, before any other thread: reads and unsets NOTIFY_SOCKET,
 * WATCHDOG_USEC, WATCHDOG_PID.  0, or -errno for an unusable
 * NOTIFY_SOCKET (then every send is a no-op).  A second call starts over. */
int notify_init(void);
bool notify_enabled(void);
/* WATCHDOG=1 period in ns (half WATCHDOG_USEC); 0: no watchdog. */
int64_t notify_watchdog_interval(void);
/* Any thread: one message, never blocking.  0 (also when there is no
 * NOTIFY_SOCKET) or -errno. */
int notify_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* After rok_start: spawns the runtime task that sends WATCHDOG=1 and
 * STATUS= (rok_stop ends it).  0 or -errno from rok_spawn. */
int notify_start(void);

/* ---- config.c: settings (main thread; limits reloaded: CONFIG_LIMIT) -- */
struct config {
	char *socket_path;
	char *state_dir;
	unsigned workers;           /* 0: the runtime's default */
	uint32_t max_frame;         /* bytes per frame, both directions */
	uint32_t max_in_flight;     /* unanswered requests per connection */
	uint64_t max_output;        /* bytes queued for one client */
	uint64_t max_queued;        /* tasks queued, all clients */
	uint64_t max_finished;      /* finished tasks kept for join/status */
	unsigned max_connections;
	uint32_t max_ids;           /* task ids (or specs) in one request */
	/* per uid (quota.c) */
	uint32_t max_connections_per_user;
	uint32_t max_waits_per_user;
	uint64_t max_wait_ids_per_user;  /* task ids named by its waits */
	uint32_t max_followers_per_user; /* logs and watch streams */
	uint64_t max_output_per_user;    /* bytes queued, all its clients */
	uint64_t max_queued_per_user;       /* tasks not started yet */
	uint64_t max_running_per_user;      /* queued + running, at spawn */
	uint64_t max_finished_per_user;     /* finished kept in memory */
	uint64_t max_task_bytes_per_user;   /* their args and values */
	uint64_t keep_finished_per_user;    /* finished kept in the journal */
	uint32_t watch_lag_max;     /* events a watcher may fall behind */
	char *socket_group;         /* root: group that may connect */
	bool root;                  /* running as root */
	/* exec tasks */
	uint64_t max_task_output;   /* bytes of output kept per task */
	/* Bytes of the state file system that output leaves free: it is
	 * no longer kept within 1 MiB of them (exec-output.c); 0: no mark;
	 * CONFIG_KEEP_FREE_AUTO: exec-output.c decides. */
	uint64_t output_keep_free;
	/* Bytes of output files a uid's tasks may hold on disk together
	 * (quota.c, exec-output.c); CONFIG_KEPT_AUTO: a quarter of the
	 * state file system. */
	uint64_t max_kept_output_per_user;
	uint64_t kill_grace_ms;     /* SIGTERM to SIGKILL, default */
	/* journal */
	bool durability_full;       /* durability = full (else normal) */
	bool durability_off;        /* durability = off: no journal at all */
	bool journal_shared;        /* journal_lock = shared: see journal_vfs */
	uint64_t keep_finished;     /* finished tasks kept in the journal */
	int64_t keep_finished_for_ns; /* and for how long; 0: no age limit */
	/* scheduling (group.c, queue.c; read at start only) */
	struct group_conf *groups;  /* group.NAME.KEY lines, ngroups of them */
	size_t ngroups;
	int64_t aging_ns;           /* strict: a class up per interval; 0: off */
	int nice[4];                /* exec children, by class: urgent..low */
	char *metrics_listen;       /* HOST:PORT for /metrics; NULL: off */
	/* slurm groups (slurm*.c; read at start only) */
	uint64_t slurm_poll_interval_ms; /* one squeue per interval */
	char *slurm_output_dir;     /* jobs' stdout/stderr; NULL: state_dir/slurm */
};

extern struct config config;

/*
 * The limits SIGHUP reloads are stored on the reactor thread (rokd.c,
 * rokd_reload_apply), with relaxed atomic stores: the reactor reads them
 * plainly; any other thread reads them with CONFIG_LIMIT.  Relaxed: each
 * limit stands alone, nothing else is published with it, and a reader
 * that sees the old value a moment longer is fine.
 */
#define CONFIG_LIMIT(field) __atomic_load_n(&config.field, __ATOMIC_RELAXED)
/* output_keep_free's default: 5 % of the file system, at most 256 MiB. */
#define CONFIG_KEEP_FREE_AUTO UINT64_MAX
/* max_kept_output_per_user's default: a quarter of the file system. */
#define CONFIG_KEPT_AUTO UINT64_MAX

void config_defaults(struct config *c);
/* Reads `key = value` lines; 0, or -1 with a message in err. */
int config_load(struct config *c, const char *path, char *err, size_t len);
void config_free(struct config *c);

/*
 * The longest duration rokd takes, from a client (any *_ms field, the sleep
 * kind's argument) or from rokd.conf: 87600h, ten years.  Longer is refused
 * (INVALID_ARGUMENT), so that deadline arithmetic never wraps; 0 still means
 * "none" where a field says so.
 */
#define DURATION_MAX_MS ((uint64_t)87600 * 3600 * 1000)
#define DURATION_MAX_TEXT "87600h"

/* Parses "250ms", "5s", "2m", "1h" (and sums like "1m30s") into ns: 0,
 * -EINVAL, or -ERANGE past DURATION_MAX_MS. */
int duration_parse(const char *s, size_t len, int64_t *ns);
/* A duration field of a request: 0, or -1 with "<what> ... is longer than
 * 87600h" in err. */
int duration_check_ms(uint64_t ms, const char *what, char *err, size_t len);
/* ms in ns, saturated at INT64_MAX: for specs checked by an older rokd and
 * read back from the journal, which may hold any value. */
int64_t duration_ns(uint64_t ms);

/* ---- group.c: rokd.conf's group keys (main thread) ------------------ */
#define GROUP_NAME_MAX 64           /* [A-Za-z0-9_-]{1,64} */
#define GROUP_PARALLEL_MAX 1000000
#define GROUP_COUNT_MAX 1024        /* groups (rokd.conf, group add) */
bool group_name_ok(const uint8_t *s, size_t len);
/* `group.NAME.KEY` and `nice_CLASS` keys: 0, or -1 with a message. */
int group_config_set(struct config *c, const char *key, const char *v,
                     char *err, size_t len);
/* "strict", "weighted": QPOLICY_*, or -1. */
int group_policy_parse(const char *v);

/* ---- queue.c: groups' slots and priority classes (any thread) --------- */
/*
 * Every task of a kind with `slot` (exec) is started through queue_submit
 * (kind_spawn calls it), in the order tasks are started, on any thread:
 * the ticket it gives is granted a slot of the task's group now or later.
 * The task's runner awaits the grant (queue_await) before it runs, and
 * gives the ticket back with queue_leave once the task has ended (after
 * tasktab_finish) or was cancelled while it waited.  See queue.c.
 * A gate that holds tasks back (dependencies, delayed starts) opens by
 * calling tasktab_start (or tasktab_start_packed) for the task, from any
 * thread that holds no lock of the task table or the queue: the task then
 * enters its group's queue in the order the gate opened.
 */
struct qticket;
/* Main thread, after journal_open, before the recovery: the groups of
 * rokd.conf and of the journal.  0, or -1 with a message. */
int queue_init(char *err, size_t len);
void queue_free(void);
/* Queues a ticket for a task that entered its queue at queued_us (wall
 * clock, tasktab_queue_entry: now, or earlier for one whose wait began
 * before a restart; aging counts that wait).  -ENOENT: no such group (or
 * being removed); -ENOMEM. */
int queue_submit(const TaskSpec *spec, uid_t uid, uint64_t queued_us,
                 struct qticket **out);
rok_poll queue_await(rok_cx *cx, struct qticket *t, rok_chan_op *op);
void queue_leave(struct qticket *t);
/* Why t's task waits, for people ("" when it does not). */
void queue_waiting(const struct qticket *t, char *buf, size_t len);
/* Whether a group of that name (empty: default) exists. */
bool queue_group_exists(const uint8_t *name, size_t len);
/* Whether the spec's group (empty: default) runs its tasks on Slurm. */
bool queue_group_slurm(const TaskSpec *spec);
/* The Slurm partition of the spec's group into buf ("": the default). */
void queue_group_partition(const TaskSpec *spec, char *buf, size_t len);
/* A spec's Priority as a class (QCLS_*, urgent 0 .. low 3), back, named. */
int queue_class(int wire);
int queue_wire_priority(int cls);
const char *queue_class_name(int cls);
/* The nice increment of a spec's class (config nice_CLASS). */
int queue_nice(const TaskSpec *spec);
/* Every group's stats / infos (one in name_len > 0), in one allocation
 * freed with free(): the count, or -1 on ENOMEM. */
ssize_t queue_group_stats(Rok__V1__GroupStats ***out);
ssize_t queue_group_infos(const char *name, size_t name_len,
                          Rok__V1__GroupInfo ***out);

/* ---- quota.c: what each uid holds, against per-uid caps (any thread) -- */
enum {
	QUOTA_CONNECTIONS,          /* max_connections_per_user */
	QUOTA_WAITS,                /* max_waits_per_user */
	QUOTA_WAIT_IDS,             /* max_wait_ids_per_user */
	QUOTA_FOLLOWERS,            /* max_followers_per_user */
	QUOTA_OUTPUT,               /* max_output_per_user (bytes) */
	QUOTA_KEPT,                 /* max_kept_output_per_user (bytes) */
	QUOTA_NKINDS,
	/* Counted by tasktab.c under its own lock (not with quota_take);
	 * here for quota_explain. */
	QUOTA_QUEUED = QUOTA_NKINDS,    /* max_queued_per_user */
	QUOTA_RUNNING,                  /* max_running_per_user */
	QUOTA_TASK_BYTES,               /* max_task_bytes_per_user */
	QUOTA_NALL,
};
/* Takes one of `kind` for uid: true, or false when uid holds its cap. */
bool quota_take(uid_t uid, int kind);
/* Gives back one taken with quota_take. */
void quota_give(uid_t uid, int kind);
/* Adds delta (negative: gives back) to what uid holds of a kind counted
 * in bytes; whether uid then holds more than its cap. */
bool quota_add(uid_t uid, int kind, int64_t delta);
/* Adds delta bytes to what uid holds of a kind if it stays within the
 * cap: QUOTA_ADDED; else adds nothing and says QUOTA_FULL_NEWS the first
 * time since uid last held less than its cap, QUOTA_FULL after. */
enum { QUOTA_ADDED, QUOTA_FULL_NEWS, QUOTA_FULL };
int quota_add_within(uid_t uid, int kind, uint64_t delta);
/* Whether uid holds more than its cap of a kind counted in bytes. */
bool quota_over(uid_t uid, int kind);
uint64_t quota_cap(int kind);
/*
 * Offloaded requests (conn_offload) of one uid in the blocking pool at
 * once: more would let one user's queued journal reads delay everyone
 * else's (the pool is FIFO).  A fixed constant, not a rokd.conf key: two
 * keep one user's pipelined requests overlapping while another user's
 * request waits behind at most two of them.
 */
#define QUOTA_JOBS_RUNNING 2
/* One offloaded request, linked into its uid's queue (first member). */
struct quota_job {
	struct quota_job *next;
};
/* Any thread: true if uid may run j now (counted as running: end it with
 * quota_job_next or quota_job_cancel); false if j was queued behind the
 * uid's running ones, to be handed out by quota_job_next. */
bool quota_job_queue(uid_t uid, struct quota_job *j);
/* Any thread, when one of uid's running jobs ends: the next queued job,
 * which takes its place as running, or NULL (one running fewer). */
struct quota_job *quota_job_next(uid_t uid);
/* Gives back the running place of a job that could not be started. */
void quota_job_cancel(uid_t uid);
/* "too many connections for uid U (the limit is KEY = N)" into buf. */
void quota_explain(uid_t uid, int kind, char *buf, size_t len);

/* ---- idlist.c: the id lists of requests (reactor thread) ------------- */
struct conn;
struct conn_answer;

/* Whether n ids (or specs: `what`) are within config.max_ids; if not,
 * answers INVALID_ARGUMENT and returns false. */
bool idlist_check(struct conn *c, uint64_t req_id, size_t n,
                  const char *what);
/* Copies ids to out (room for n) with each id once, in the order of its
 * first occurrence, and that occurrence's index to first[] unless it is
 * NULL: the count, or -1 out of memory. */
ssize_t idlist_dedup(const uint64_t *ids, size_t n, uint64_t *out,
                     size_t *first);

/* ---- tasktab.c: every task the daemon knows (any thread) -------------- */
enum {
	RT_QUEUED = ROK__V1__TASK_STATE__TASK_QUEUED,
	RT_RUNNING = ROK__V1__TASK_STATE__TASK_RUNNING,
	RT_SUCCEEDED = ROK__V1__TASK_STATE__TASK_SUCCEEDED,
	RT_FAILED = ROK__V1__TASK_STATE__TASK_FAILED,
	RT_CANCELLED = ROK__V1__TASK_STATE__TASK_CANCELLED,
	RT_TIMED_OUT = ROK__V1__TASK_STATE__TASK_TIMED_OUT,
	RT_INTERRUPTED = ROK__V1__TASK_STATE__TASK_INTERRUPTED,
	RT_NSTATES = 8,
};

struct kind;

/* The outcome a kind reports when it ends. */
struct rt_outcome {
	int state;                  /* RT_SUCCEEDED, RT_FAILED, ... */
	uint8_t *value;             /* malloc'd, taken by tasktab_finish */
	size_t value_len;
	bool has_exit_code, has_signal;
	int exit_code, signal;
	bool output_truncated;
	bool final;                 /* failed, but no retry_failed run: its
	                               outcome is unknown, and a retry could
	                               run the command twice */
	char reason[160];
};

struct rtask;

int  tasktab_init(void);
void tasktab_free(void);

/*
 * Creates a queued task for `uid` from `spec` (validated by the caller),
 * with a fresh id.  -EAGAIN when config.max_queued tasks are queued,
 * -EDQUOT when uid has max_queued_per_user queued, -EUSERS when it has
 * max_running_per_user queued and running, -ENOMEM.  The record is told
 * to no watcher (not even in a snapshot of all tasks) and not counted in
 * the metrics until it is started (tasktab_start, gate_submit), which the
 * caller does once the journal committed its spawn: so one whose spawn
 * the journal refuses (tasktab_discard) never seems to start.
 */
int tasktab_create(uid_t uid, const struct kind *k, const TaskSpec *spec,
                   struct rtask **out);

/* Starts the runtime task of a created record (reactor thread): 0, or
 * -errno, then the record is finished as failed.  0 also when it was
 * cancelled, or rokd began to stop, before it started: then it is
 * finished as cancelled (interrupted, at the stop) and never starts.
 * `reply` (NULL: none; else a spawn --wait without a wait timeout,
 * answered by the task itself as it ends, or now if it cannot start):
 * the reference is taken. */
int tasktab_start(struct rtask *r, const TaskSpec *spec,
                  struct conn_answer *reply);
/* The same from a packed spec (borrowed), as the journal holds it: one
 * that cannot be unpacked (out of memory) fails the record the same way. */
int tasktab_start_packed(struct rtask *r, const uint8_t *spec, size_t len,
                         struct conn_answer *reply);

uint64_t tasktab_id(const struct rtask *r);

/* Answers a spawn --wait with the task as it is now (any thread), unless
 * its connection closed and gave the wait back; takes the reference. */
void tasktab_reply(uint64_t id, struct conn_answer *reply);

/* The worker side of a kind: marks the task running / finished. */
void tasktab_running(struct rtask *r);
/* A kind with own_running, while its started task still waits (queued):
 * why, for people (`waiting`; copied; NULL: none).  Any thread. */
void tasktab_set_why(struct rtask *r, const char *why);
/* Which run of r this is (1 = first): for its kind's init. */
uint32_t tasktab_run(const struct rtask *r);
/*
 * The end of a run.  A failed run (not cancelled nor timed out) of a gated
 * task with retry_failed runs left goes back to queued (run + 1) to wait
 * for its backoff (gate_retry): false then, and o->value was freed.  true:
 * the final outcome.
 */
bool tasktab_finish(struct rtask *r, struct rt_outcome *o);

/*
 * Looks `id` up for `uid` (root sees all).  On success *handle gets a new
 * reference to its runtime task (NULL once finished) and the result is 0;
 * else ROK__V1__ERROR_CODE__NOT_FOUND or __PERMISSION_DENIED.
 */
int tasktab_lookup(uint64_t id, uid_t uid, rok_task **handle);
/* The same answer from memory alone (no handle): true with *code set, or
 * false when only the journal knows (a task finished and no longer in
 * memory), which the reactor thread must not read. */
bool tasktab_lookup_mem(uint64_t id, uid_t uid, int *code);

/* Fills *info (and allocations it owns, freed by tasktab_info_free) for
 * `id` as `uid` sees it; a per-task error goes into info->error. */
void tasktab_info(uint64_t id, uid_t uid, TaskInfo *info);
void tasktab_info_free(TaskInfo *info);

/* n initialised infos behind an array of pointers to them (the shape a
 * reply's repeated field takes), or NULL; freed with what they hold. */
TaskInfo **tasktab_infos_new(size_t n);
/*
 * Fills infos[0..n) for ids[] as uid sees them (tasktab_info), stopping
 * as soon as their encoded size passes `budget` bytes: n, or the count
 * filled within the budget (the rest left empty), so no reply is ever
 * built much larger than the frame it must fit in.  Any thread; reads the
 * journal for ids no longer in memory, so never on the reactor thread.
 */
size_t tasktab_infos_fill(const uint64_t *ids, size_t n, uid_t uid,
                          TaskInfo **infos, size_t budget);
/* The bytes a reply of infos may take: max_frame less room for the rest
 * of the response. */
size_t tasktab_reply_budget(void);
void tasktab_infos_free(TaskInfo **infos, size_t n);

/* Requests cancellation: an ErrorCode.  A running task whose kind has a
 * cancel hook and has set a control (tasktab_set_ctl) gets the hook, called
 * under the table's lock (it must not block); any other gets
 * rok_task_cancel. */
int tasktab_cancel(uint64_t id, uid_t uid);

/* The worker side of a kind with a cancel hook: sets (ctl non-NULL) or
 * clears the control the hook gets.  Once cleared, the hook is not running
 * and will not run again for r. */
void tasktab_set_ctl(struct rtask *r, void *ctl);
/* kind_spawn: r runs as kind k (exec or slurm, by its group), before its
 * body can set a control. */
void tasktab_set_kind(struct rtask *r, const struct kind *k);

/* r's owner (the submitter's uid). */
uid_t tasktab_uid(const struct rtask *r);

/* Whether task `id` has finished (or is unknown): any thread. */
bool tasktab_finished(uint64_t id);

/* Run `run` of task `id` starts its output afresh: the earlier run's file
 * is gone (exec_out_forget).  Any thread. */
void tasktab_output_started(uint64_t id, uint32_t run);
/* The run whose output task `id`'s output file holds, as the last
 * tasktab_output_started said; 0 if none did since rokd started or the
 * task is not in memory: any thread. */
uint32_t tasktab_output_run(uint64_t id);

/* Visible tasks with id > after, in id order, of `group` only unless it
 * is NULL: up to limit, and no more than fit in `budget` encoded bytes;
 * *more set when there are more.  Returns how many were filled into
 * infos[].  Reads the journal: never on the reactor thread. */
size_t tasktab_list(uid_t uid, int state, const char *group, uint64_t after,
                    size_t limit,
                    size_t budget, TaskInfo **infos, bool *more);

/*
 * The journal's side (journal-*.c).  tasktab_set_next_id: ids continue
 * from `next` (recovery).  tasktab_restore: a queued record with a known
 * id, in its run `run`, whose run entered its group's queue at queued_us
 * (0: not yet; recovery; no max_queued check).  tasktab_discard:
 * drops a record that was never started nor acknowledged (its spawn could
 * not be journaled).
 * tasktab_forget: a finished task was pruned, it is gone from memory too.
 */
void tasktab_set_next_id(uint64_t next);
/* The id the next task will get (every id below it was handed out). */
uint64_t tasktab_next_id(void);
int tasktab_restore(uint64_t id, uid_t uid, const struct kind *k,
                    const TaskSpec *spec, uint64_t spawned_us,
                    uint64_t queued_us, uint32_t retries, uint32_t run,
                    struct rtask **out);
void tasktab_discard(struct rtask *r);
void tasktab_forget(uint64_t id);
uint64_t tasktab_spawned_us(const struct rtask *r);
/* The spawn's insert: when a new task enters its group's queue (its
 * spawn time), or 0 when it waits in the gate first. */
uint64_t tasktab_queued_us(const struct rtask *r);
/*
 * kind_spawn, on the thread that starts r's run, before its runner exists:
 * when the run entered its group's queue (wall clock, us).  The first call
 * of a run that waited in the gate says now, and records that in the
 * journal (journal_queued, no wait); a restored run keeps its time.
 */
uint64_t tasktab_queue_entry(struct rtask *r);
/* Recovery: a restored record's queue entry is not to be believed; its
 * run enters its queue when the gate lets it go. */
void tasktab_forget_queue_entry(struct rtask *r);

/*
 * For gate.c.  tasktab_dep_visible: whether id exists (in memory or the
 * journal, which it may read) and uid may see it: 0 or an ErrorCode.
 * tasktab_dep_state: a record's state in memory (0: pruned), or -1 when it
 * is not in memory (finished: see the journal).  tasktab_set_life: marks
 * it gated (gate_submit, first), with the handle joins get until the final
 * outcome (taken).  tasktab_set_wait: what `waiting` shows of a gated
 * record (a dependency, a start time).  tasktab_cancel_seen: whether a
 * client asked to cancel r (gate_submit, once its entry can be found).
 */
int tasktab_dep_visible(uint64_t id, uid_t uid);
int tasktab_dep_state(uint64_t id);
void tasktab_set_life(struct rtask *r, rok_task *life);
bool tasktab_cancel_seen(struct rtask *r);
void tasktab_set_wait(struct rtask *r, uint64_t dep, uint64_t not_before_us);

/*
 * The watch snapshot of ids (reactor thread), taken under the table's lock
 * with the change counter *seq: every change with a larger counter comes
 * after it.  One entry per id in order (state 0 for an id not in memory:
 * it has finished, look it up with tasktab_info), in a malloc'd array in
 * *out (NULL when n is 0): n, or -ENOMEM.
 */
struct tasktab_snap {
	uint64_t id;
	uint64_t time_us;
	int state;
};
ssize_t tasktab_snapshot(const uint64_t *ids, size_t n,
                         struct tasktab_snap **out, uint64_t *seq);
/*
 * The watch snapshot of all a uid's tasks (root: every task), taken in
 * steps (reactor thread).  tasktab_cursor_start (again for a fresh one)
 * sets *seq to the change counter: 0 or -ENOMEM.  Each
 * tasktab_cursor_step fills at most max entries of queued and running
 * tasks, of `group` only unless it is NULL, that have not changed since
 * that start (their changes come as events, numbered above *seq), and
 * walks a bounded number of records to do it; *done once none are left.
 */
struct tasktab_cursor;
struct tasktab_cursor *tasktab_cursor_new(uid_t uid);
int tasktab_cursor_start(struct tasktab_cursor *c, uint64_t *seq);
size_t tasktab_cursor_step(struct tasktab_cursor *c, const char *group,
                           struct tasktab_snap *out, size_t max, bool *done);
void tasktab_cursor_free(struct tasktab_cursor *c);
/* Whether a task of group `task_group` (NULL or "": spawned without one)
 * is in group `group`. */
bool tasktab_in_group(const char *task_group, const char *group);
/* Main thread: holds back the eviction of finished records while the
 * journal is recovered (hold), then evicts what is beyond the caps. */
void tasktab_hold_eviction(bool hold);
/* The journal committed finishes (journal.c, on the committing thread):
 * evicts the finished records that waited for that. */
void tasktab_journal_committed(void);
/* The queued and running tasks of `group`, those still waiting in the
 * gate (dependencies, a start time, a retry's backoff) included: group rm
 * refuses a group that has any.  Any thread; a walk of the table. */
uint64_t tasktab_group_unfinished(const char *group);

/* Tasks by state, for stats. */
void tasktab_counts(uint64_t counts[RT_NSTATES]);

/* Cancels every unfinished task (shutdown). */
void tasktab_cancel_all(void);

/*
 * gate.c: what a task waits for before it starts (dependencies, start
 * time, a retry's backoff).  Any thread unless said; see gate.c.
 */
/* More runs than this after failures are refused (TaskSpec.retry_failed). */
#define GATE_RETRY_MAX 1000
/* Whether a spec waits for anything (else it is started as it comes). */
bool gate_needed(const TaskSpec *spec);
/* Any thread: the bytes the gate keeps for a task of spec while it waits
 * and between its runs (its entry, dependency nodes and packed spec), at
 * most: counted against its uid's max_task_bytes_per_user (tasktab.c). */
size_t gate_cost(const TaskSpec *spec);
/* Reactor thread, at spawn: the spec's dependencies exist and are visible
 * to uid, its start time and retry settings within bounds; 0, or -1 with
 * a message in err (INVALID_ARGUMENT). */
int gate_check(const TaskSpec *spec, uid_t uid, char *err, size_t len);
/*
 * A committed (or recovered) task with gate_needed(spec): held until its
 * dependencies and time allow, then started; packed (borrowed) is kept for
 * every run; not_before_us: a recovered retry's backoff deadline, or 0.
 * A spawn --wait on it is a waiter's (waiter_start), whose handle
 * (tasktab_lookup) ends with the final outcome, across retries.  0, or
 * -ENOMEM (the task was failed).
 */
int gate_submit(struct rtask *r, const TaskSpec *spec, const uint8_t *packed,
                size_t len, uint64_t not_before_us);
int gate_submit_packed(struct rtask *r, const uint8_t *packed, size_t len);
/*
 * Main thread, recovery: a gated task whose run had left the gate (its
 * queue entry is in the journal) before rokd stopped: registered as
 * started, for its end and its retries, but not held; the caller starts
 * it (tasktab_start) at once, in its place in the queue.  0, or -ENOMEM
 * (the task was failed).
 */
int gate_submit_started(struct rtask *r, const uint8_t *packed, size_t len);
/* tasktab_finish, after a task's final outcome: its dependents resolve;
 * `gated`: its own entry goes.  Cheap when nothing depends on anything. */
void gate_ended(uint64_t id, int state, bool gated);
/* tasktab_finish: a failed run of id goes back to wait for its backoff. */
void gate_retry(uint64_t id, uint64_t not_before_us);
/* tasktab_cancel: a client cancelled gated task id; if it has not started,
 * it ends cancelled now and its `after` dependents with it. */
void gate_cancel(uint64_t id);
/* Shutdown (before tasktab_cancel_all): nothing leaves the gate any more;
 * waiting tasks stay queued in the journal. */
void gate_stop(void);
/* Main thread, after rok_stop. */
void gate_free(void);
/* ---- metrics.c: counters and histograms (any thread) ----------------- */
enum {
	METRICS_SPAWN_START,        /* spawn accepted -> run started */
	METRICS_RUN_TIME,           /* run started -> finished */
	METRICS_COMMIT,             /* one journal transaction */
	METRICS_NHIST,
};
#define METRICS_NBOUNDS 22          /* bucket bounds per histogram */

/* One observation of `us` microseconds (below 0: 0) in histogram h. */
void metrics_observe(int h, int64_t us);
/* The totals of the tasks of group `name` (NULL: default), to pass to
 * metrics_task_state; NULL past METRICS_GROUPS_MAX names (then only the
 * totals of all count them).  Takes a lock unless name is default. */
#define METRICS_GROUPS_MAX 4096
struct metrics_group;
struct metrics_group *metrics_group(const char *name);
/* A task of group g (may be NULL) entered `state` (RT_QUEUED: it was
 * created, or queued again for a retry). */
void metrics_task_state(struct metrics_group *g, int state);
/* n bytes of task output were stored. */
void metrics_output(uint64_t n);

/* A StatsReply with the storage its parts point into. */
struct metrics_reply {
	Rok__V1__StatsReply sr;
	Rok__V1__Histogram hist[METRICS_NHIST];
	uint64_t counts[METRICS_NHIST][METRICS_NBOUNDS + 1];
	uint64_t totals[RT_NSTATES];
	Rok__V1__GroupStats **groups;   /* queue_group_stats's */
	void *group_totals;             /* one allocation for them */
};
/* Reactor thread: fills m with every counter now (`rokctl stats`,
 * /metrics), and every group's; metrics_reply_free frees what it took. */
void metrics_reply_fill(struct metrics_reply *m);
void metrics_reply_free(struct metrics_reply *m);

/* ---- metrics-http.c: /metrics over HTTP (main, then reactor thread) --- */
/* Main thread, before the runtime starts: binds config.metrics_listen if
 * it is set.  0, or -1 with a message in err. */
int metrics_http_open(char *err, size_t len);
/* Starts serving on the reactor thread (nothing if not open): 0 or
 * -errno. */
int metrics_http_start(void);
/* Reactor thread (reactor_call), at stop: closes the port and the
 * connections. */
void metrics_http_stop(void);

/* ---- kind.c, kind-*.c: what a task does ------------------------------- */
struct kind {
	const char *name;
	/* Checks a spec; 0, or -1 with a message in err.  Reactor thread. */
	int (*check)(const TaskSpec *spec, char *err, size_t len);
	/* The kind's body, a rok_future polled inside the task that runs the
	 * record; its frame is `frame_size` bytes set up by init. */
	rok_poll_fn poll;
	size_t frame_size;
	void (*init)(void *frame, struct rtask *r, const TaskSpec *spec);
	/*
	 * Called exactly once when the task ends, however it ended: `how` is
	 * RT_SUCCEEDED for a normal end (the kind may set o->state to failed
	 * and fill in a value, exit code, reason), RT_CANCELLED or
	 * RT_TIMED_OUT otherwise.  Frees what init took.
	 */
	void (*finish)(void *frame, int how, struct rt_outcome *o);
	/*
	 * Optional.  Called instead of rok_task_cancel for a running task
	 * that registered a control with tasktab_set_ctl, under the task
	 * table's lock: it must not block.  The kind ends its body itself
	 * (exec: kills its process group first) and reports the outcome.
	 */
	void (*cancel)(void *ctl);
	/* The kind enforces spec->timeout_ms itself (and reports
	 * RT_TIMED_OUT); the runner does not wrap it in rok_timeout. */
	bool own_timeout;
	/* Its tasks hold resources (a process): each takes a slot of its
	 * group (queue.c) before it runs.  Else it starts at once. */
	bool slot;
	/* The kind marks its task running itself (tasktab_running), when
	 * its work really starts (a Slurm job: when Slurm runs it); until
	 * then the task shows queued, waiting for tasktab_set_why's reason. */
	bool own_running;
};

const struct kind *kind_find(const uint8_t *name, size_t len);
/* Checks a spec for kind k: its durations, then k->check.  0, or -1 with a
 * message in err.  Reactor thread. */
int kind_check(const struct kind *k, const TaskSpec *spec, char *err,
               size_t len);
/* Spawns the runtime task that runs record r: 0 or -errno.  *ticket: its
 * place in its group's queue (kind->slot; else NULL), owned by the runner,
 * which frees it after tasktab_finish: tasktab_start keeps it in r for the
 * `waiting` of its TaskInfo while r is unfinished.  `reply` (NULL: none)
 * is taken on success: the runner answers it as the task ends. */
int kind_spawn(struct rtask *r, const struct kind *k, const TaskSpec *spec,
               struct conn_answer *reply, rok_task **handle,
               struct qticket **ticket);

extern const struct kind kind_noop, kind_sleep, kind_echo, kind_exec;
/* slurm.c: an exec task of a slurm group (kind_spawn picks it). */
extern const struct kind kind_slurm;
/* Main thread, in recovery: ids from here on are new (slurm.c looks for
 * a job of an older id before submitting it). */
void slurm_set_first_new_id(uint64_t id);
/* Main thread, in recovery, before it starts task id again: the Slurm job
 * the journal has for its run `run` (adopted if Slurm still knows it, else
 * that run fails rather than run twice). */
void slurm_note_job(uint64_t id, uint32_t run, uint32_t jobid);

/* ---- exec.c, exec-*.c: the exec kind (child processes) ---------------- */
/* Main thread, before the runtime starts: output directory, /dev/null,
 * signal dispositions to undo in children.  0 or -errno. */
int exec_init(void);
/* exec-spawn.c: main thread, first thing (before rokd raises any limit,
 * and before any worker pins itself to a CPU): remembers rokd's resource
 * limits, which exec_init then restores in every child, and its CPU
 * affinity, which every spawner thread (and so every child) gets. */
void exec_limits_save(void);

/* exec-output.c: where task id's output is: "<state_dir>/output/<id>.log"
 * (".mem" with durability = off). */
void exec_output_path(uint64_t id, char *buf, size_t len);

/* ---- events.c: task events, published by the task table ------------- */
/*
 * The task table (state changes) and exec-output.c (output written)
 * publish; streams (cmd-logs.c, cmd-watch.c) subscribe.  Publishing is one
 * atomic load while nobody subscribes to that kind of event.
 */
enum {
	EVENTS_STATE = 1u << 0,     /* a task was queued or started */
	EVENTS_END = 1u << 1,       /* a task ended */
	EVENTS_OUTPUT = 1u << 2,    /* an exec task appended output */
	EVENTS_GONE = 1u << 3,      /* a spawn the journal refused: its id,
	                               seen while its commit was pending,
	                               never was a task (state 0) */
};
/* An EVENTS_OUTPUT event of this id stands for any task's: events.c
 * queues at most EVENTS_OUTPUT_MAX of them at once and, past that, one of
 * these for all it dropped. */
#define EVENTS_ANY_TASK 0
#define EVENTS_OUTPUT_MAX 4096u
struct events_ev {
	unsigned kind;              /* one of the above */
	uint64_t id;
	uid_t uid;                  /* the task's owner */
	int state;                  /* its state (RT_*) after the change */
	uint64_t time_us;           /* spawned, started or finished */
	uint64_t seq;               /* tasktab's change counter after it */
	char group[GROUP_NAME_MAX + 1]; /* STATE, END: its group; "": default */
	bool removed;               /* OUTPUT: its output file was removed */
};
/* Reactor thread, on a subscriber's behalf. */
typedef void events_fn(const struct events_ev *ev);
/* Reactor thread: fn gets every event of `kinds` from now on (counted:
 * as many unsubscribes as subscribes).  0, or -ENOMEM. */
int events_subscribe(events_fn *fn, unsigned kinds);
void events_unsubscribe(events_fn *fn, unsigned kinds);
/* Any thread, after the change is visible in the table (see events.c for
 * the order that makes this race-free): queues ev (copied) for the
 * subscribers on the reactor thread, in publication order. */
void events_publish(const struct events_ev *ev);
/* Whether anybody subscribes to `kind` (one sequentially consistent load). */
bool events_wanted(unsigned kind);

/* ---- conn.c: one client connection (reactor thread) ------------------- */
struct conn;

/* Takes an accepted socket; closes it on failure. */
void conn_accept(int fd);
void conn_ref(struct conn *c);
void conn_unref(struct conn *c);
/* Main thread, once the reactor thread has stopped (rok_stop): frees the
 * connections whose deferred free the loop did not run, and the closed
 * ones a refused reply left referenced. */
void conn_free_leftovers(void);
uid_t conn_uid(const struct conn *c);
bool conn_closed(const struct conn *c);
/* Bytes queued for the client, not yet written. */
size_t conn_output_len(const struct conn *c);
bool conn_hello_done(const struct conn *c);
void conn_set_hello_done(struct conn *c);

/*
 * Streams: requests answered by many replies (logs, watch), a property of
 * the connection.  The stream's owner embeds a conn_stream and adds it
 * after conn_begin_wait (so the connection outlives it); conn.c calls
 * `writable` when the output has drained (the stream may send while
 * conn_stream_room holds, and may remove and free itself, never another
 * stream), and on a later loop turn than the close `closed` (the stream
 * must remove itself and end its wait) or, at a daemon stop, `shutdown`
 * (NULL: the stream ends by itself soon, as logs -f does when its task is
 * cancelled).  Reactor thread.
 */
struct conn_stream;
struct conn_stream_ops {
	void (*writable)(struct conn_stream *s);
	void (*closed)(struct conn_stream *s);
	void (*shutdown)(struct conn_stream *s);
};
struct conn_stream {
	const struct conn_stream_ops *ops;
	struct conn *conn;
	struct conn_stream *prev, *next;
};
/* Adds s to c's streams, holding one of its uid's QUOTA_FOLLOWERS
 * (max_followers_per_user) until conn_stream_remove; false when that cap
 * is reached (or c is closed): then req_id is answered (reply_post_error,
 * which ends its wait) and s is not added. */
bool conn_stream_add(struct conn *c, struct conn_stream *s,
                     const struct conn_stream_ops *ops, uint64_t req_id);
void conn_stream_remove(struct conn_stream *s);
/* Whether c is open with fewer queued bytes than the streams' pause mark
 * (half of max_output, at most 256 KiB): a stream sends only then. */
bool conn_stream_room(const struct conn *c);

/* Encodes and queues a response (reactor thread).  Closes the connection if
 * its client let too much output pile up. */
void conn_send(struct conn *c, const Response *resp);
void conn_send_error(struct conn *c, uint64_t id, ErrorCode code,
                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * A request that waits: counts it against the connection's in-flight limit
 * (false: over the limit, answered already) and keeps the connection alive
 * until reply_post delivers its answer.
 */
bool conn_begin_wait(struct conn *c, uint64_t id);
/* Reactor thread: ends a wait begun with conn_begin_wait without a reply
 * (the request was answered some other way). */
void conn_end_wait(struct conn *c);
/* Reactor thread: t (a reference the connection takes) is the runtime
 * task of one of c's waits; it is cancelled if c closes before it ends.
 * false (t still the caller's) when there is no memory to keep it. */
bool conn_add_waiter(struct conn *c, rok_task *t);
/*
 * Reactor thread: a plain spawn waiting for its journal commit keeps the
 * connection alive (and a stop waits for it) until conn_release.  Not
 * counted against max_in_flight: a plain spawn is no waiting request, and
 * max_queued bounds how many there can be (each holds a queued record).
 */
void conn_hold(struct conn *c);
void conn_release(struct conn *c);

/*
 * A wait answered by something other than a runtime wait: the task of a
 * plain spawn --wait answers it as it ends.  Reactor thread:
 * conn_answer_new makes one for the wait of request req_id, begun with
 * conn_begin_wait, and returns the answerer's reference (the connection
 * keeps its own); NULL: no memory, the wait stays the caller's.  If c
 * closes first, it gives the wait back then.  Any thread:
 * conn_answer_claim returns, once, the connection whose wait the caller
 * now ends (reply_post, or conn_end_wait on the reactor thread), or NULL
 * if the close did; conn_answer_unref drops a reference (NULL-safe).
 */
struct conn_answer;
struct conn_answer *conn_answer_new(struct conn *c, uint64_t req_id);
struct conn *conn_answer_claim(struct conn_answer *a);
uint64_t conn_answer_req_id(const struct conn_answer *a);
void conn_answer_unref(struct conn_answer *a);

/* Any thread: encodes resp now and delivers it on the reactor thread, ending
 * a wait begun with conn_begin_wait. */
void reply_post(struct conn *c, const Response *resp);
void reply_post_error(struct conn *c, uint64_t id, ErrorCode code,
                      const char *msg);
/* reply_post, written at once by the caller when the request is its
 * connection's only one in progress and nothing is queued before it (the
 * reactor's wake-up is off the client's path).  Only for a reply that need
 * not follow anything the caller handed the reactor for this connection
 * (a stream's chunks would be overtaken). */
void reply_post_direct(struct conn *c, const Response *resp);

/*
 * Reactor thread: runs fn(arg) on the blocking pool, for a request whose
 * work may read the journal (which must not hold up the reactor thread).
 * Counted as a wait (conn_begin_wait); fn must answer with reply_post.
 * At most QUOTA_JOBS_RUNNING per uid run at once; the uid's others wait
 * their turn in order (quota.c), still counted as waits.
 * On failure (over the in-flight limit, or no pool thread) the request
 * has been answered, fn never runs, and the caller frees arg.
 */
int conn_offload(struct conn *c, uint64_t req_id, void *(*fn)(void *),
                 void *arg);

unsigned conn_count(void);
/* Shutdown: stop reading requests, close every connection once its output
 * is flushed and its waits answered; *all_closed when none is left. */
void conn_shutdown(void);
bool conn_all_closed(void);      /* any thread */
void conn_close_all(void);

/* ---- server.c: the listening socket (main, then reactor thread) ------- */
/* Opens (or inherits from systemd) the listening socket: fd or -errno. */
int server_open(void);
/* Starts accepting on the reactor thread. */
int server_start(int fd);
/* Stops accepting and closes the socket (reactor thread via reactor_call). */
void server_stop(void);

/* ---- dispatch.c and cmd-*.c: requests (reactor thread) ---------------- */
struct cmd {
	Rok__V1__Request__BodyCase body;
	const char *name;
	void (*exec)(struct conn *c, const Request *req);
};

void dispatch(struct conn *c, const Request *req);

void cmd_hello(struct conn *c, const Request *req);
void cmd_ping(struct conn *c, const Request *req);
void cmd_spawn(struct conn *c, const Request *req);
void cmd_join(struct conn *c, const Request *req);
void cmd_race(struct conn *c, const Request *req);
void cmd_select(struct conn *c, const Request *req);
void cmd_cancel(struct conn *c, const Request *req);
void cmd_status(struct conn *c, const Request *req);
void cmd_list(struct conn *c, const Request *req);
void cmd_stats(struct conn *c, const Request *req);
void cmd_logs(struct conn *c, const Request *req);
void cmd_prune(struct conn *c, const Request *req);
void cmd_group(struct conn *c, const Request *req);
void cmd_watch(struct conn *c, const Request *req);

/* Validates a spec and creates its record: 0 or an ErrorCode with a message
 * in err.  Shared by spawn and select. */
int cmd_create_task(struct conn *c, const TaskSpec *spec, struct rtask **out,
                    char *err, size_t len);

/* When server_start ran (rok_now() time), for the uptime in stats. */
extern int64_t rokd_started_ns;
/* The umask rokd was started with (it runs with 077): its children get it
 * back. */
extern mode_t rokd_umask;

#endif /* ROKD_H */
