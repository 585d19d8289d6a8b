/*
 * journal.c — the journal thread: a FIFO of events, group commit, failure
 * handling.
 *
 * Any thread queues events (spawn, queue entry, start, finish, cancel
 * request, prune) into one FIFO under a mutex and signals a condition
 * variable when the journal thread sleeps.  The journal thread, which alone
 * owns the write connection, takes everything queued at once and writes it
 * in one BEGIN ... COMMIT with prepared statements: while one commit waits
 * for its fsync, the next batch piles up, so one fsync covers all the
 * spawns of all clients that arrived meanwhile (group commit).  Only after
 * COMMIT returned OK are the batch's spawns completed: their callbacks run
 * on the reactor thread (one reactor_call per batch), which starts the
 * tasks and sends the acknowledgements.  A task therefore starts only once
 * its row is durable, and its start and finish events always come after
 * its insert in the FIFO.  A start followed by the finish of the same task
 * in one batch is written as the finish alone, and so is an exec start
 * (the process group of the run) or a queue entry followed by the finish:
 * recovery only looks at the group and queue entry of an unfinished
 * row.  Every UPDATE but the cancel flag's is guarded by state < 3, so a
 * finished row never changes again.
 *
 * When a commit fails (disk full, I/O error) the transaction is rolled back,
 * every spawn of the batch is completed with an error (never acknowledged;
 * its record is dropped by the callback), and the other events (start,
 * finish, cancel) are kept, in order, and written with the next batch: they
 * must not be lost, and they cannot block spawns forever, because a later
 * batch either commits them together with its spawns or fails the spawns
 * for the same reason (the disk is still broken).  While only such retries
 * are pending the thread waits 100 ms between attempts, so a dead disk does
 * not make it spin; a new event wakes it at once.  The retained events are
 * bounded by the tasks that were running when the disk broke: no spawn gets
 * through until a commit succeeds.
 *
 * Every event gets a number as it is queued (seq), and after each
 * successful commit journal.committed says that every event up to the
 * batch's last is on disk: a batch is the retained updates, older, and
 * then the whole FIFO, so commits come in that order.  The task table
 * keeps a finished record in memory until its finish is committed (its
 * row says queued or running until then) and hears of each commit that
 * wrote a finish (tasktab_journal_committed).
 *
 * Updates wait a little for the next spawn (the linger).  Nobody waits for
 * a start, finish, cancel flag, queue entry or process group to be durable
 * (a waiting spawn's result goes out as the task ends), but a batch of
 * them committed on its own costs an fsync that the next spawn, arriving a
 * few microseconds later, must wait behind: at one client doing
 * spawn-and-wait in a loop that doubled the latency (two commits per
 * request).  So a batch with no spawn or prune in it is held for up to
 * JOURNAL_LINGER_NS, and the first spawn (or prune, or the stop) to come
 * along is committed together with it at once.  Only the first update into
 * an empty queue wakes the thread; later ones ride along.  After a commit
 * that started tasks the thread lingers at once, before their updates
 * come, and an update that finds it lingering wakes nothing.  A spawn is
 * never held: the acknowledgement path commits as soon as the thread is
 * free.  The cost is a window of at most the linger in which a crash
 * forgets a finish that a client may already have heard of (it existed
 * before, as long as one commit: the task is run again or recorded
 * interrupted, as for a crash while it ran).
 *
 * A spawn while the thread sleeps, at durability = normal, is committed
 * on the reactor thread instead (journal_flush_ev_cb): waking the thread
 * and having it wake the reactor back cost two sleeping-thread wake-ups,
 * some 100 µs on a small VM, for a commit that does not wait for the disk
 * (tens of µs).  The spawn is queued without a signal and the commit runs
 * from an event made active on the reactor's loop, after every request
 * read in the same loop turn, so the spawns of all clients that came
 * together still share one commit.  While the reactor commits
 * (journal.inline_busy) it owns the write connection: the thread, woken
 * meanwhile by an update, waits for it before it touches the database.
 * The reactor never waits there: its commit does not wait for a lock
 * (the groups' connection may hold one; busy timeout 0), and sqlite's
 * automatic checkpoint, which copies the WAL into the database and at
 * durability = normal fsyncs both, is replaced by one the thread runs
 * (journal_wal_hook notes the WAL's size, the thread checkpoints, on a
 * connection of its own: the reactor may commit meanwhile).  The thread
 * keeps everything else: prunes, checkpoints, retries after a
 * failed commit (an inline commit that fails, busy included, hands its
 * batch back to the thread, rolled back, to be tried again there), the
 * stop, and at durability = full every commit (an fsync of the reactor
 * thread would stall every other client for its duration).  A prune,
 * which may delete hundreds of thousands of rows, yields between its
 * chunks (journal_prune_yield): the thread commits and answers what came
 * meanwhile, and ends the prune there when rokd stops.  Prunes run
 * outside journal_calls_begin, so a long one never holds journal_detach.
 *
 * At rokd's stop, journal_detach (right before rok_stop) ends the
 * answers: what is committed from then on is written but starts nothing
 * and answers nobody, since a reactor_call or a rok_spawn after rok_stop
 * would start the runtime again, for connections freed by then.
 *
 * durability = off: no journal.  Nothing is opened (the state directory's
 * lock is still taken: exec output lives there) and no thread runs; a
 * spawn's callback runs at once, inline on the reactor thread, updates
 * are dropped, prunes answer 0, and reads find nothing (journal-read.c
 * has no connection).  Tasks live in the task table only and a restart
 * forgets them all; rokd says so loudly at start.
 *
 * At durability = full the thread runs on the CPU where its commits end
 * soonest, if one clearly does (journal-cpu.c, cpuprobe.c): a disk whose
 * completions all interrupt one CPU wakes it fastest there.
 *
 * Lock order: journal.lock is a leaf (nothing else is taken under it).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/event_struct.h>

#include "group.h"
#include "journal.h"
#include "reactor.h"

/* How long a batch of updates alone waits for a spawn to share its
 * commit with (see above). */
#define JOURNAL_LINGER_NS 5000000L

/* WAL frames (pages) past which the thread checkpoints: sqlite's own
 * automatic checkpoint's default. */
#define JOURNAL_CHECKPOINT_FRAMES 1000

/* Spawns of a batch up to which the thread starts the tasks answered by
 * themselves (journal_spawn_any); a larger batch (many clients, or
 * pipelined ones) goes to the reactor, which starts them while this
 * thread commits the next batch: here the thread is the bottleneck. */
#define JOURNAL_DIRECT_MAX 8

enum {
	JEV_SPAWN,
	JEV_START,
	JEV_FINISH,
	JEV_CANCEL,
	JEV_PRUNE,
	JEV_EXEC,
	JEV_SLURM,                  /* u.ex.pgid: the Slurm job id */
	JEV_REQUEUE,
	JEV_QUEUED,
};

struct jev {
	struct jev *next;
	int type;
	uint64_t id;
	uint64_t seq;                 /* its place in the FIFO (journal_push) */
	/* JEV_SPAWN: the last event of a request carries its callback. */
	journal_done_fn *done;
	void *arg;
	bool any_thread;              /* done may run on the journal thread */
	union {
		struct {
			uid_t uid;
			uint64_t spawned_us, queued_us;
			size_t spec_len, kind_len, group_len;
			uint8_t *spec, *kind, *group;  /* in this allocation */
		} sp;
		struct {
			uint64_t started_us;
		} st;
		struct {
			uint64_t queued_us;
		} qu;
		struct {
			uint32_t run;
			uint64_t next_us;
		} rq;
		struct {
			int64_t pgid;              /* 0: the group is gone */
			uint64_t start_ticks;
		} ex;
		struct {
			int state;
			uint64_t started_us, finished_us;
			uint8_t *value;                /* in this allocation */
			size_t value_len;
			char *reason;                  /* idem, or NULL */
			bool has_exit_code, has_signal, truncated;
			int exit_code, signal;
		} fi;
		struct {
			uint64_t before_us, keep, keep_per_user;
			journal_prune_fn *done;
			void *arg;
		} pr;
	} u;
};

enum {
	JST_INSERT,
	JST_START,
	JST_FINISH,
	JST_CANCEL,
	JST_EXEC,
	JST_SLURM,
	JST_REQUEUE,
	JST_QUEUED,
	JST_BEGIN,
	JST_COMMIT,
	JST_ROLLBACK,
	JST_COUNT,
};

static const char *const journal_sql[JST_COUNT] = {
	[JST_INSERT] = "INSERT INTO tasks (id, uid, kind, spec, state, "
	               "spawned_us, grp, queued_us) "
	               "VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7)",
	/* A finished row never changes again: state < 3 guards both. */
	/* A run's group is that of this run only: a retry's start forgets
	 * the group of the interrupted run. */
	[JST_START] = "UPDATE tasks SET state = 2, started_us = ?2, "
	              "pgid = NULL, pg_start = NULL "
	              "WHERE id = ?1 AND state < 3",
	[JST_FINISH] = "UPDATE tasks SET state = ?2, started_us = ?3, "
	               "finished_us = ?4, value = ?5, exit_code = ?6, "
	               "signal = ?7, reason = ?8, output_truncated = ?9 "
	               "WHERE id = ?1 AND state < 3",
	[JST_CANCEL] = "UPDATE tasks SET cancel_requested = 1 WHERE id = ?1 "
	               "AND state < 3",
	/* NULL binds (the group is gone) clear both. */
	[JST_EXEC] = "UPDATE tasks SET pgid = ?2, pg_start = ?3 "
	             "WHERE id = ?1 AND state < 3",
	[JST_SLURM] = "UPDATE tasks SET slurm_job = ?2 WHERE id = ?1",
	/* A failed run with retries left: queued again, its run's group
	 * and Slurm job gone (the run ended, its processes with it): the
	 * next run's job is a new one, never the failed one adopted. */
	[JST_REQUEUE] = "UPDATE tasks SET state = 1, run = ?2, next_us = ?3, "
	                "started_us = 0, pgid = NULL, pg_start = NULL, "
	                "slurm_job = NULL, queued_us = 0 "
	                "WHERE id = ?1 AND state < 3",
	/* The run left the gate for its group's queue (journal_queued). */
	[JST_QUEUED] = "UPDATE tasks SET queued_us = ?2 WHERE id = ?1 "
	               "AND state < 3",
	/* Prepared too: sqlite3_exec parsed them again on every commit,
	 * a few µs per batch on the acknowledgement path. */
	[JST_BEGIN] = "BEGIN",
	[JST_COMMIT] = "COMMIT",
	[JST_ROLLBACK] = "ROLLBACK",
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct jev *head, *tail;      /* queued; under lock */
	bool urgent;                  /* a spawn or prune queued; under lock */
	bool sleeping, stopping, running;
	bool lingering;               /* sleeping in journal_linger */
	bool prune_queued;            /* a prune queued; under lock */
	bool troubled;                /* the thread retries a failed commit;
	                                 under lock, set when it sleeps */
	bool inline_busy;             /* the reactor commits; under lock */
	bool inline_waited;           /* the thread waits for that; idem */
	/* The WAL is past JOURNAL_CHECKPOINT_FRAMES: set by whoever holds
	 * the write connection (journal_wal_hook), cleared by the thread
	 * before it checkpoints; read under lock or by the holder. */
	bool checkpoint_due;
	/* journal_detach was called: the thread runs no callback and hands
	 * nothing to the reactor any more.  in_calls: it is doing either
	 * (journal_calls_begin); both under lock, journal_detach_cond
	 * signalled when in_calls falls. */
	bool detached, in_calls;
	bool live;                    /* journal thread only: in_calls */
	/* Reactor thread only: an event made active (never added) to run
	 * journal_flush_ev_cb later in the same loop turn.  Static storage: it
	 * is never freed, and the base forgets it once it has run. */
	struct event flush;
	bool flush_ready;             /* flush assigned to the base */
	bool flush_queued;
	pthread_t thread;
	sqlite3 *db;
	sqlite3 *ckpt;                /* journal thread: checkpoints */
	sqlite3_stmt *st[JST_COUNT];
	struct jev *retained;         /* journal thread: failed, to retry */
	uint64_t pushed;              /* events queued so far; under lock */
	/* Every event whose seq is at most this is committed (see
	 * journal_committed). */
	_Atomic uint64_t committed;
	/* The holder of the write connection: the message of the last
	 * failed commit, taken before its rollback (which resets it). */
	char errmsg[160];
	char path[4096];
	int lock_fd;
} journal = {
	.lock_fd = -1,
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/* The journal thread's timed waits (the linger, the idle sleep) count on
 * the monotonic clock: a step of the wall clock must not stretch them. */
static pthread_once_t journal_cond_once = PTHREAD_ONCE_INIT;
/* journal_detach's wait (untimed; apart from journal.cond, whose single
 * signals are meant for the thread). */
static pthread_cond_t journal_detach_cond = PTHREAD_COND_INITIALIZER;

static void journal_cond_init(void)
{
	pthread_condattr_t a;

	if (pthread_condattr_init(&a) != 0 ||
	    pthread_condattr_setclock(&a, CLOCK_MONOTONIC) != 0 ||
	    pthread_cond_init(&journal.cond, &a) != 0)
		fatalx("journal: cannot make a condition variable");
	pthread_condattr_destroy(&a);
}

sqlite3 *journal_db(void)
{
	return journal.db;
}

/*
 * One rokd per state directory: a second one would hand out the same ids.
 * The lock (flock, independent of sqlite's own fcntl locks) is held from
 * journal_open to journal_stop.
 */
static int journal_lock(char *err, size_t len)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/rokd.lock", config.state_dir);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(err, len, "%s: %s: the journal cannot be kept; "
		         "refusing to start", path, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		snprintf(err, len, "%s: another rokd uses the state directory "
		         "%s (%s); refusing to start", path, config.state_dir,
		         strerror(errno));
		close(fd);
		return -1;
	}
	journal.lock_fd = fd;
	return 0;
}

/* After each commit on the write connection, by the committing thread:
 * replaces sqlite's automatic checkpoint (see the top of this file). */
static int journal_wal_hook(void *arg, sqlite3 *db, const char *name,
                            int frames)
{
	(void)arg;
	(void)db;
	(void)name;
	if (frames >= JOURNAL_CHECKPOINT_FRAMES)
		journal.checkpoint_due = true;
	return SQLITE_OK;
}

/* Journal thread: copies the WAL into the database without waiting for
 * readers or the writer (what sqlite's automatic checkpoint does). */
static void journal_checkpoint(void)
{
	int rc = sqlite3_wal_checkpoint_v2(journal.ckpt, NULL,
	                                   SQLITE_CHECKPOINT_PASSIVE, NULL,
	                                   NULL);

	if (rc != SQLITE_OK && rc != SQLITE_BUSY)
		log_warnx("journal: checkpoint: %s",
		          sqlite3_errmsg(journal.ckpt));
}

int journal_open(char *err, size_t len)
{
	pthread_once(&journal_cond_once, journal_cond_init);
	journal.stopping = false;
	journal.detached = false;
	journal.checkpoint_due = false;
	/* The reactor's base is a new one each time the runtime starts. */
	journal.flush_ready = journal.flush_queued = false;
	if (journal_lock(err, len) < 0)
		return -1;
	if (config.durability_off) {
		log_warnx("durability = off: NO JOURNAL.  Tasks live in memory "
		          "only: a restart or a crash of rokd forgets every "
		          "task, queued, running or finished, and ids start "
		          "again at 1");
		return 0;
	}
	if (snprintf(journal.path, sizeof(journal.path), "%s/journal.db",
	             config.state_dir) >= (int)sizeof(journal.path)) {
		snprintf(err, len, "state directory path too long");
		return -1;
	}
	if (journal_schema_open(journal.path, config.durability_full,
	                        &journal.db, err, len) < 0)
		return -1;
	sqlite3_wal_hook(journal.db, journal_wal_hook, NULL);
	/* At normal, commits do not sync: appends cost them nothing. */
	if (config.durability_full &&
	    journal_schema_wal_prefill(journal.db, journal.path,
	                               JOURNAL_CHECKPOINT_FRAMES, err, len) < 0)
		return -1;
	/* A connection checkpoints only once it has read the file (and seen
	 * WAL mode): one statement does that. */
	if (sqlite3_open_v2(journal.path, &journal.ckpt, SQLITE_OPEN_READWRITE |
	                    SQLITE_OPEN_NOMUTEX, journal_vfs()) != SQLITE_OK ||
	    sqlite3_busy_timeout(journal.ckpt, JOURNAL_BUSY_TIMEOUT_MS) !=
	            SQLITE_OK ||
	    sqlite3_exec(journal.ckpt, "SELECT 1 FROM meta LIMIT 1", NULL,
	                 NULL, NULL) != SQLITE_OK) {
		snprintf(err, len, "%s: %s", journal.path,
		         journal.ckpt != NULL ? sqlite3_errmsg(journal.ckpt)
		                              : "out of memory");
		return -1;
	}
	for (int i = 0; i < JST_COUNT; i++) {
		if (sqlite3_prepare_v3(journal.db, journal_sql[i], -1,
		                       SQLITE_PREPARE_PERSISTENT, &journal.st[i],
		                       NULL) != SQLITE_OK) {
			snprintf(err, len, "%s: %s", journal.path,
			         sqlite3_errmsg(journal.db));
			return -1;
		}
	}
	return journal_read_open(journal.path, err, len);
}

/* ---- queueing (any thread) ---------------------------------------------- */

static void journal_flush_ev_cb(evutil_socket_t fd, short what, void *arg);

/*
 * Appends a chain first..last, numbering its events: the seq of `last`,
 * or 0 when stopped.  Wakes the thread for
 * a spawn or a prune (urgent), or for the first update into an empty
 * queue (which starts the linger); an update behind others waits for
 * their commit.  With `inline_ok` (a spawn on the reactor thread at
 * durability = normal), a sleeping thread is left asleep and the commit
 * is queued for the reactor (journal_flush_ev_cb).
 */
static uint64_t journal_push(struct jev *first, struct jev *last,
                             bool inline_ok)
{
	bool urgent = first->type == JEV_SPAWN || first->type == JEV_PRUNE;

	pthread_mutex_lock(&journal.lock);
	if (journal.stopping && !journal.running) {
		pthread_mutex_unlock(&journal.lock);
		return 0;
	}
	for (struct jev *e = first; e != NULL; e = e->next)
		e->seq = ++journal.pushed;
	uint64_t seq = last->seq;
	bool was_empty = journal.head == NULL;
	if (journal.tail != NULL)
		journal.tail->next = first;
	else
		journal.head = first;
	journal.tail = last;
	journal.urgent |= urgent;
	journal.prune_queued |= first->type == JEV_PRUNE;
	bool wake = journal.sleeping &&
	            (urgent || (was_empty && !journal.lingering));
	bool hold = wake && inline_ok && !journal.troubled &&
	            !journal.prune_queued && !journal.stopping;
	pthread_mutex_unlock(&journal.lock);
	/* Queued after unlocking: journal.lock is a leaf. */
	if (hold && !journal.flush_queued) {
		/* After the events already active in this loop turn (the
		 * other connections' requests read with this one), without
		 * the eventfd round trip of a reactor_call. */
		if (!journal.flush_ready) {
			if (event_assign(&journal.flush, reactor_base(), -1, 0,
			                 journal_flush_ev_cb, NULL) == 0)
				journal.flush_ready = true;
		}
		if (journal.flush_ready) {
			event_active(&journal.flush, EV_TIMEOUT, 0);
			journal.flush_queued = true;
		} else {
			hold = false;   /* the thread takes it */
		}
	}
	wake &= !hold;
	/* Signalled after unlocking: a thread woken under our lock would
	 * only block on it again (a second futex round trip per spawn).
	 * The cond is static, and the waiter rechecks the queue under the
	 * lock, so a late signal is at worst a spurious wake-up. */
	if (wake)
		pthread_cond_signal(&journal.cond);
	return seq;
}

static void journal_free_chain(struct jev *e)
{
	while (e != NULL) {
		struct jev *next = e->next;
		free(e);
		e = next;
	}
}

static int journal_spawn_chain(const struct journal_spawn_item *items,
                               size_t n, journal_done_fn *done, void *arg,
                               bool any_thread)
{
	struct jev *first = NULL, *last = NULL;

	if (n == 0)
		return -EINVAL;
	if (config.durability_off) {
		done(arg, 0, NULL);   /* nothing to wait for */
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		size_t slen = items[i].spec_len, klen = strlen(items[i].kind);
		size_t glen = items[i].group_len;
		struct jev *e = calloc(1, sizeof(*e) + slen + klen + glen + 1);
		if (e == NULL) {
			journal_free_chain(first);
			return -ENOMEM;
		}
		e->type = JEV_SPAWN;
		e->id = items[i].id;
		e->u.sp.uid = items[i].uid;
		e->u.sp.spawned_us = items[i].spawned_us;
		e->u.sp.queued_us = items[i].queued_us;
		e->u.sp.spec = (uint8_t *)(e + 1);
		e->u.sp.spec_len = slen;
		if (slen > 0)
			memcpy(e->u.sp.spec, items[i].spec, slen);
		e->u.sp.kind = e->u.sp.spec + slen;
		e->u.sp.kind_len = klen;
		memcpy(e->u.sp.kind, items[i].kind, klen);
		e->u.sp.group = e->u.sp.kind + klen;
		e->u.sp.group_len = glen;
		if (glen > 0)
			memcpy(e->u.sp.group, items[i].group, glen);
		if (last != NULL)
			last->next = e;
		else
			first = e;
		last = e;
	}
	if (last == NULL)
		return -EINVAL;
	last->done = done;
	last->arg = arg;
	last->any_thread = any_thread;
	if (journal_push(first, last, !config.durability_full &&
	                 reactor_on_thread()) == 0) {
		journal_free_chain(first);
		return -ESHUTDOWN;
	}
	return 0;
}

int journal_spawn(const struct journal_spawn_item *items, size_t n,
                  journal_done_fn *done, void *arg)
{
	return journal_spawn_chain(items, n, done, arg, false);
}

int journal_spawn_any(const struct journal_spawn_item *items, size_t n,
                      journal_done_fn *done, void *arg)
{
	return journal_spawn_chain(items, n, done, arg, true);
}

/*
 * A new update of task `id` with `extra` bytes after it, or NULL: none is
 * kept with durability = off, and out of memory `what` (of the task) is
 * said to be not recorded, unless NULL (an update that matters only if
 * rokd dies before the task ends).
 */
static struct jev *journal_update_new(int type, uint64_t id, size_t extra,
                                      const char *what)
{
	if (config.durability_off)
		return NULL;
	struct jev *e = calloc(1, sizeof(*e) + extra);
	if (e == NULL) {
		if (what != NULL)
			log_warnx("journal: out of memory; task %llu's %s is "
			          "not recorded", (unsigned long long)id, what);
		return NULL;
	}
	e->type = type;
	e->id = id;
	return e;
}

/* The update's seq, or 0 when the journal stopped (e is freed then). */
static uint64_t journal_push_one(struct jev *e)
{
	uint64_t seq = journal_push(e, e, false);

	if (seq == 0) {
		log_warnx("journal stopped: task %llu's update is not recorded",
		          (unsigned long long)e->id);
		free(e);
	}
	return seq;
}

void journal_started(uint64_t id, uint64_t started_us)
{
	struct jev *e = journal_update_new(JEV_START, id, 0, "start");

	if (e == NULL)
		return;
	e->u.st.started_us = started_us;
	journal_push_one(e);
}

static void journal_exec(int type, uint64_t id, int64_t pgid,
                         uint64_t start_ticks)
{
	/* Only matters if rokd dies while the task runs: then its leftover
	 * processes (or its Slurm job) are not looked for. */
	struct jev *e = journal_update_new(type, id, 0, type == JEV_SLURM
	                                   ? "Slurm job id" : "process group");

	if (e == NULL)
		return;
	e->u.ex.pgid = pgid;
	e->u.ex.start_ticks = start_ticks;
	journal_push_one(e);
}

void journal_slurm_job(uint64_t id, uint32_t jobid)
{
	journal_exec(JEV_SLURM, id, jobid, 0);
}

void journal_exec_started(uint64_t id, pid_t pgid, uint64_t start_ticks)
{
	journal_exec(JEV_EXEC, id, pgid, start_ticks);
}

void journal_exec_gone(uint64_t id)
{
	journal_exec(JEV_EXEC, id, 0, 0);
}

uint64_t journal_finished(const struct journal_finish *f)
{
	size_t rlen = f->reason != NULL ? strlen(f->reason) + 1 : 0;
	struct jev *e = journal_update_new(JEV_FINISH, f->id,
	                                   f->value_len + rlen, "result");

	if (e == NULL)
		return 0;
	e->u.fi.state = f->state;
	e->u.fi.started_us = f->started_us;
	e->u.fi.finished_us = f->finished_us;
	if (f->value != NULL) {
		e->u.fi.value = (uint8_t *)(e + 1);
		e->u.fi.value_len = f->value_len;
		if (f->value_len > 0)
			memcpy(e->u.fi.value, f->value, f->value_len);
	}
	if (f->reason != NULL) {
		e->u.fi.reason = (char *)(e + 1) + f->value_len;
		memcpy(e->u.fi.reason, f->reason, rlen);
	}
	e->u.fi.has_exit_code = f->has_exit_code;
	e->u.fi.exit_code = f->exit_code;
	e->u.fi.has_signal = f->has_signal;
	e->u.fi.signal = f->signal;
	e->u.fi.truncated = f->output_truncated;
	return journal_push_one(e);
}

uint64_t journal_committed(void)
{
	/* Pairs with the release in journal_done: a reader that sees an
	 * update committed and then reads the journal (through tasktab's
	 * lock) comes after the COMMIT that wrote it. */
	return atomic_load_explicit(&journal.committed, memory_order_acquire);
}

void journal_requeued(uint64_t id, uint32_t run, uint64_t next_us)
{
	struct jev *e = journal_update_new(JEV_REQUEUE, id, 0, "retry");

	if (e == NULL)
		return;
	e->u.rq.run = run;
	e->u.rq.next_us = next_us;
	journal_push_one(e);
}

void journal_queued(uint64_t id, uint64_t queued_us)
{
	/* Only matters if rokd dies before the task starts. */
	struct jev *e = journal_update_new(JEV_QUEUED, id, 0, NULL);

	if (e == NULL)
		return;
	e->u.qu.queued_us = queued_us;
	journal_push_one(e);
}

void journal_cancel_requested(uint64_t id)
{
	/* Only matters if rokd dies before the task ends. */
	struct jev *e = journal_update_new(JEV_CANCEL, id, 0, NULL);

	if (e != NULL)
		journal_push_one(e);
}

int journal_prune(uint64_t before_us, uint64_t keep, uint64_t keep_per_user,
                  journal_prune_fn *done, void *arg)
{
	struct jev *e;

	if (config.durability_off) {
		done(arg, 0, NULL);   /* no journal: nothing to delete */
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return -ENOMEM;
	e->type = JEV_PRUNE;
	e->u.pr.before_us = before_us;
	e->u.pr.keep = keep;
	e->u.pr.keep_per_user = keep_per_user;
	e->u.pr.done = done;
	e->u.pr.arg = arg;
	if (journal_push(e, e, false) == 0) {
		free(e);
		return -ESHUTDOWN;
	}
	return 0;
}

/* ---- completions (reactor thread) ---------------------------------------- */

struct journal_completion {
	size_t n;
	int err;
	char msg[200];
	struct {
		journal_done_fn *done;
		void *arg;
	} cb[];
};

static void journal_complete_cb(void *arg)
{
	struct journal_completion *c = arg;

	for (size_t i = 0; i < c->n; i++)
		c->cb[i].done(c->cb[i].arg, c->err, c->err ? c->msg : NULL);
	free(c);
}

struct journal_pruned {
	journal_prune_fn *done;
	void *arg;
	int64_t n;
};

static void journal_pruned_cb(void *arg)
{
	struct journal_pruned *p = arg;

	p->done(p->arg, p->n, p->n < 0 ? strerror((int)-p->n) : NULL);
	free(p);
}

/* ---- the journal thread ------------------------------------------------- */

/* Open-addressing set of the ids finished in a batch, to skip their
 * starts.  The slots are kept from batch to batch (journal thread only):
 * allocating a large zeroed array per batch cost more than the set saved. */
struct journal_idset {
	uint64_t *slot;
	size_t mask;
};

static struct journal_idset journal_fin;
static size_t journal_fin_cap;

static void journal_idset_init(struct journal_idset *s, const struct jev *b)
{
	size_t n = 0, cap = 16;

	for (const struct jev *e = b; e != NULL; e = e->next)
		n += e->type == JEV_FINISH;
	s->slot = NULL;
	s->mask = 0;
	if (n == 0)
		return;
	while (cap < 2 * n)
		cap *= 2;
	if (cap > journal_fin_cap) {
		uint64_t *p = realloc(journal_fin.slot, cap * sizeof(*p));
		if (p == NULL)
			return;   /* no coalescing: correct, only slower */
		journal_fin.slot = p;
		journal_fin_cap = cap;
	}
	s->slot = journal_fin.slot;
	s->mask = cap - 1;
	memset(s->slot, 0, cap * sizeof(*s->slot));
	for (const struct jev *e = b; e != NULL; e = e->next) {
		if (e->type != JEV_FINISH)
			continue;
		size_t i = (size_t)(e->id * 0x9e3779b97f4a7c15ull >> 20) & s->mask;
		while (s->slot[i] != 0 && s->slot[i] != e->id)
			i = (i + 1) & s->mask;
		s->slot[i] = e->id;
	}
}

static bool journal_idset_has(const struct journal_idset *s, uint64_t id)
{
	if (s->slot == NULL)
		return false;
	size_t i = (size_t)(id * 0x9e3779b97f4a7c15ull >> 20) & s->mask;
	while (s->slot[i] != 0) {
		if (s->slot[i] == id)
			return true;
		i = (i + 1) & s->mask;
	}
	return false;
}

/* Runs a bound statement and resets it: SQLITE_OK or the error. */
static int journal_step(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int journal_write(const struct jev *e, const struct journal_idset *fin)
{
	sqlite3_stmt *st;

	switch (e->type) {
	case JEV_SPAWN:
		st = journal.st[JST_INSERT];
		sqlite3_bind_int64(st, 1, (sqlite3_int64)e->id);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)e->u.sp.uid);
		sqlite3_bind_text(st, 3, (const char *)e->u.sp.kind,
		                  (int)e->u.sp.kind_len, SQLITE_STATIC);
		sqlite3_bind_blob(st, 4, e->u.sp.spec, (int)e->u.sp.spec_len,
		                  SQLITE_STATIC);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)e->u.sp.spawned_us);
		if (e->u.sp.group_len > 0)
			sqlite3_bind_text(st, 6, (const char *)e->u.sp.group,
			                  (int)e->u.sp.group_len, SQLITE_STATIC);
		else
			sqlite3_bind_null(st, 6);
		sqlite3_bind_int64(st, 7, (sqlite3_int64)e->u.sp.queued_us);
		return journal_step(st);
	case JEV_START:
		if (journal_idset_has(fin, e->id))
			return SQLITE_OK;   /* its finish says it all */
		st = journal.st[JST_START];
		sqlite3_bind_int64(st, 1, (sqlite3_int64)e->id);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)e->u.st.started_us);
		return journal_step(st);
	case JEV_FINISH:
		st = journal.st[JST_FINISH];
		sqlite3_bind_int64(st, 1, (sqlite3_int64)e->id);
		sqlite3_bind_int(st, 2, e->u.fi.state);
		sqlite3_bind_int64(st, 3, (sqlite3_int64)e->u.fi.started_us);
		sqlite3_bind_int64(st, 4, (sqlite3_int64)e->u.fi.finished_us);
		if (e->u.fi.value != NULL)
			sqlite3_bind_blob(st, 5, e->u.fi.value,
			                  (int)e->u.fi.value_len, SQLITE_STATIC);
		if (e->u.fi.has_exit_code)
			sqlite3_bind_int(st, 6, e->u.fi.exit_code);
		if (e->u.fi.has_signal)
			sqlite3_bind_int(st, 7, e->u.fi.signal);
		if (e->u.fi.reason != NULL)
			sqlite3_bind_text(st, 8, e->u.fi.reason, -1,
			                  SQLITE_STATIC);
		sqlite3_bind_int(st, 9, e->u.fi.truncated);
		return journal_step(st);
	case JEV_EXEC:
		if (journal_idset_has(fin, e->id))
			return SQLITE_OK;   /* finished: no group to look for */
		st = journal.st[JST_EXEC];
		sqlite3_bind_int64(st, 1, (sqlite3_int64)e->id);
		if (e->u.ex.pgid > 0) {
			sqlite3_bind_int64(st, 2, e->u.ex.pgid);
			sqlite3_bind_int64(st, 3,
			                   (sqlite3_int64)e->u.ex.start_ticks);
		}
		return journal_step(st);
	case JEV_SLURM:
		st = journal.st[JST_SLURM];
		sqlite3_bind_int64(st, 1, (sqlite3_int64)e->id);
		sqlite3_bind_int64(st, 2, e->u.ex.pgid);
		return journal_step(st);
	case JEV_REQUEUE:
		st = journal.st[JST_REQUEUE];
		sqlite3_bind_int64(st, 1, (sqlite3_int64)e->id);
		sqlite3_bind_int64(st, 2, e->u.rq.run);
		sqlite3_bind_int64(st, 3, (sqlite3_int64)e->u.rq.next_us);
		return journal_step(st);
	case JEV_QUEUED:
		if (journal_idset_has(fin, e->id))
			return SQLITE_OK;   /* finished: nothing to queue again */
		st = journal.st[JST_QUEUED];
		sqlite3_bind_int64(st, 1, (sqlite3_int64)e->id);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)e->u.qu.queued_us);
		return journal_step(st);
	case JEV_CANCEL:
		st = journal.st[JST_CANCEL];
		sqlite3_bind_int64(st, 1, (sqlite3_int64)e->id);
		return journal_step(st);
	default:
		return SQLITE_OK;   /* prunes run after the commit */
	}
}

/* A message for a failed commit, for the client and the log. */
static void journal_errmsg(int rc, char *buf, size_t len)
{
	int primary = rc & 0xff;

	snprintf(buf, len, "journal: %s", primary == SQLITE_FULL
	         ? "disk full" : primary == SQLITE_IOERR ? "I/O error"
	         : primary == SQLITE_READONLY ? "database became read-only"
	         : journal.errmsg[0] != '\0' ? journal.errmsg
	         : sqlite3_errstr(rc));
}

/*
 * Writes one batch in one transaction.  Returns SQLITE_OK, or the error
 * after rolling back.
 */
static int journal_commit(const struct jev *b, size_t *ndone)
{
	struct journal_idset fin;
	int rc;

	*ndone = 0;
	journal_idset_init(&fin, b);
	rc = journal_step(journal.st[JST_BEGIN]);
	for (const struct jev *e = b; rc == SQLITE_OK && e != NULL;
	     e = e->next) {
		rc = journal_write(e, &fin);
		*ndone += e->type == JEV_SPAWN && e->done != NULL;
	}
	if (rc == SQLITE_OK)
		rc = journal_step(journal.st[JST_COMMIT]);
	if (rc != SQLITE_OK) {
		/* Now: the rollback resets the connection's message (to
		 * "not an error"). */
		snprintf(journal.errmsg, sizeof(journal.errmsg), "%s",
		         sqlite3_errcode(journal.db) != SQLITE_OK
		         ? sqlite3_errmsg(journal.db) : sqlite3_errstr(rc));
		if (!sqlite3_get_autocommit(journal.db))
			(void)journal_step(journal.st[JST_ROLLBACK]);
	}
	return rc;
}

/*
 * Journal thread: before it answers a batch (journal_done, journal_fail).
 * False once journal_detach was called: rokd's stop is at rok_stop, after
 * which a reactor_call would start the runtime again (executor_ensure),
 * to run callbacks on connections freed by then.
 */
static bool journal_calls_begin(void)
{
	pthread_mutex_lock(&journal.lock);
	journal.live = journal.in_calls = !journal.detached;
	pthread_mutex_unlock(&journal.lock);
	return journal.live;
}

static void journal_calls_end(void)
{
	if (!journal.live)
		return;
	pthread_mutex_lock(&journal.lock);
	journal.live = journal.in_calls = false;
	pthread_cond_broadcast(&journal_detach_cond);
	pthread_mutex_unlock(&journal.lock);
}

/* Journal thread: reactor_call, refused (-ESHUTDOWN) once detached. */
static int journal_reactor_call(void (*fn)(void *arg), void *arg)
{
	return journal.live ? reactor_call(fn, arg) : -ESHUTDOWN;
}

/* Journal thread: has the reactor run completion c.  Refused once rokd
 * stops (detached): those clients are gone, which is no news. */
static void journal_hand_over(struct journal_completion *c)
{
	int rc = journal_reactor_call(journal_complete_cb, c);

	if (rc < 0) {
		if (rc != -ESHUTDOWN)
			log_errno(rc, "journal: cannot reach the reactor; %zu "
			          "spawns go unanswered", c->n);
		free(c);
	}
}

/* Hands the spawn callbacks of batch b to the reactor thread. */
static void journal_complete(const struct jev *b, int err, const char *msg)
{
	size_t n = 0;

	for (const struct jev *e = b; e != NULL; e = e->next)
		n += e->type == JEV_SPAWN && e->done != NULL;
	if (n == 0)
		return;
	struct journal_completion *c = malloc(sizeof(*c) + n * sizeof(c->cb[0]));
	if (c == NULL) {
		/* Rare enough: those clients never hear back. */
		log_warnx("journal: out of memory; %zu spawns go unanswered", n);
		return;
	}
	c->n = 0;
	c->err = err;
	snprintf(c->msg, sizeof(c->msg), "%s", msg != NULL ? msg : "");
	for (const struct jev *e = b; e != NULL; e = e->next) {
		if (e->type == JEV_SPAWN && e->done != NULL) {
			c->cb[c->n].done = e->done;
			c->cb[c->n++].arg = e->arg;
		}
	}
	journal_hand_over(c);
}

/*
 * Journal thread, outside journal_calls_begin: runs the prunes of chain b
 * (nothing else in it), answering each.  A prune may take long (it yields
 * to spawns between its chunks, journal_prune_yield): holding the calls
 * meanwhile would hold journal_detach, and so rokd's stop, back.
 */
static void journal_run_prunes(struct jev *b)
{
	for (struct jev *e = b; e != NULL; e = e->next) {
		struct journal_pruned *p = malloc(sizeof(*p));
		int64_t n = journal_prune_run(journal.db, e->u.pr.before_us,
		                              e->u.pr.keep,
		                              e->u.pr.keep_per_user);
		if (p == NULL) {
			log_warnx("journal: out of memory for a prune reply");
			continue;
		}
		p->done = e->u.pr.done;
		p->arg = e->u.pr.arg;
		p->n = n;
		(void)journal_calls_begin();
		if (journal_reactor_call(journal_pruned_cb, p) < 0)
			free(p);
		journal_calls_end();
	}
}

/*
 * After a commit: hands the spawn callbacks (ndone of them) to the reactor
 * (or, `here` on the reactor thread, runs them) and frees the batch in one
 * pass (a large batch is cold in the cache: every pass over it costs).
 * Returns the prunes it held, for the caller to run (journal_run_prunes)
 * and free; the reactor's batches hold none (journal_flush_ev_cb).  With
 * `direct` (the journal thread, not detached) the callbacks that may run
 * anywhere run at once.  Detached (journal_detach, before rok_stop)
 * nothing runs and nothing goes to the reactor: rok_spawn would race
 * rok_stop, or start the runtime again after it, as would a reactor_call,
 * and the connections are freed.
 */
static struct jev *journal_done(struct jev *b, size_t ndone, bool here,
                                bool direct)
{
	struct journal_completion *c = NULL;
	struct jev *prunes = NULL, **ptail = &prunes;
	uint64_t seq = 0;
	bool finishes = false;

	if (ndone > 0) {
		c = malloc(sizeof(*c) + ndone * sizeof(c->cb[0]));
		if (c == NULL)
			log_warnx("journal: out of memory; %zu spawns go "
			          "unanswered", ndone);
		else
			c->n = 0, c->err = 0, c->msg[0] = '\0';
	}
	while (b != NULL) {
		struct jev *next = b->next;
		/* A batch is everything queued before its last event: the
		 * retained updates (older) first, then the whole FIFO. */
		seq = b->seq;
		finishes |= b->type == JEV_FINISH;
		if (b->type == JEV_PRUNE) {
			b->next = NULL;
			*ptail = b;
			ptail = &b->next;
		} else if (b->type == JEV_SPAWN && b->done != NULL &&
		           b->any_thread && direct) {
			/* Its task starts from here: no reactor wake-up. */
			b->done(b->arg, 0, NULL);
			free(b);
		} else {
			if (c != NULL && b->type == JEV_SPAWN && b->done != NULL) {
				c->cb[c->n].done = b->done;
				c->cb[c->n++].arg = b->arg;
			}
			free(b);
		}
		b = next;
	}
	/* Publishes the COMMIT (journal_committed) before the records it
	 * makes evictable are looked at again.  A maximum: after an inline
	 * commit the thread may commit and publish a later batch before the
	 * reactor gets here. */
	uint64_t was = atomic_load_explicit(&journal.committed,
	                                    memory_order_relaxed);
	while (was < seq &&
	       !atomic_compare_exchange_weak_explicit(&journal.committed, &was,
	                                              seq, memory_order_release,
	                                              memory_order_relaxed))
		;
	if (finishes)
		tasktab_journal_committed();
	if (c != NULL && c->n == 0) {
		free(c);
	} else if (c != NULL && here) {
		journal_complete_cb(c);
	} else if (c != NULL) {
		journal_hand_over(c);
	}
	return prunes;
}

/* Splits a failed batch: spawns and prunes are answered, the rest kept. */
static void journal_fail(struct jev *b, int rc)
{
	static time_t last_log;
	static unsigned long quiet;
	char msg[200];
	struct jev **keep = &journal.retained;
	struct timespec now;

	journal_errmsg(rc, msg, sizeof(msg));
	/* A dead disk fails every attempt (10 a second): one line per 10 s. */
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec - last_log >= 10 || last_log == 0) {
		log_warnx("%s (%s); the spawns of this batch are refused, the "
		          "task updates are kept for the next attempt (%lu "
		          "more failed commits not logged)", msg,
		          sqlite3_errstr(rc), quiet);
		last_log = now.tv_sec;
		quiet = 0;
	} else {
		quiet++;
	}
	journal_complete(b, -EIO, msg);
	while (*keep != NULL)
		keep = &(*keep)->next;
	while (b != NULL) {
		struct jev *next = b->next;
		b->next = NULL;
		if (b->type == JEV_SPAWN) {
			free(b);
		} else if (b->type == JEV_PRUNE) {
			struct journal_pruned *p = malloc(sizeof(*p));
			if (p != NULL) {
				*p = (struct journal_pruned){ b->u.pr.done,
				                              b->u.pr.arg, -EIO };
				if (journal_reactor_call(journal_pruned_cb,
				                         p) < 0)
					free(p);
			}
			free(b);
		} else {
			*keep = b;
			keep = &b->next;
		}
		b = next;
	}
}

/*
 * Reactor thread, queued by journal_push: commits what is queued here if
 * the thread still sleeps and has nothing of its own to do (else it is
 * woken to take it), and completes the batch's spawns at once.
 */
static void journal_flush_ev_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	journal.flush_queued = false;
	pthread_mutex_lock(&journal.lock);
	struct jev *b = journal.head;
	if (b == NULL || !journal.sleeping || journal.troubled ||
	    journal.prune_queued || journal.stopping) {
		/* Taken already, or the thread's to take: wake it if it
		 * sleeps (it does not while it commits, and it looks at the
		 * queue when done). */
		bool wake = b != NULL && journal.sleeping;
		pthread_mutex_unlock(&journal.lock);
		if (wake)
			pthread_cond_signal(&journal.cond);
		return;
	}
	journal.head = journal.tail = NULL;
	journal.urgent = false;
	journal.inline_busy = true;
	pthread_mutex_unlock(&journal.lock);

	size_t ndone;
	int64_t t0 = rok_now();
	/* Failing at once on a lock (the thread may wait for it) rather than
	 * sleeping here: every client waits for this thread. */
	sqlite3_busy_timeout(journal.db, 0);
	int rc = journal_commit(b, &ndone);
	sqlite3_busy_timeout(journal.db, JOURNAL_BUSY_TIMEOUT_MS);
	metrics_observe(METRICS_COMMIT, (rok_now() - t0) / 1000);

	pthread_mutex_lock(&journal.lock);
	journal.inline_busy = false;
	bool wake = journal.inline_waited || journal.checkpoint_due;
	if (rc != SQLITE_OK) {
		/* Rolled back: the thread tries again, and deals with a
		 * second failure as with any (journal_fail).  The batch is
		 * older than what came meanwhile: it goes first. */
		struct jev *t = b;
		while (t->next != NULL)
			t = t->next;
		t->next = journal.head;
		if (journal.head == NULL)
			journal.tail = t;
		journal.head = b;
		journal.urgent = true;
		wake = true;
		b = NULL;
	}
	pthread_mutex_unlock(&journal.lock);
	/* The thread waits for the connection (journal_wait_inline), a
	 * checkpoint, or, after a failure, for the batch; else it is not
	 * disturbed. */
	if (wake)
		pthread_cond_signal(&journal.cond);
	/* Never a prune here: a prune queued keeps the reactor out. */
	if (b != NULL)
		journal_free_chain(journal_done(b, ndone, true, false));
}

/* Lock held, journal thread: waits while the reactor commits. */
static void journal_wait_inline(void)
{
	while (journal.inline_busy) {
		journal.inline_waited = true;
		pthread_cond_wait(&journal.cond, &journal.lock);
	}
	journal.inline_waited = false;
}

/*
 * Lock held, updates alone queued: waits up to the linger for a spawn,
 * a prune or the stop to share their commit.
 */
static void journal_linger(void)
{
	struct timespec until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_nsec += JOURNAL_LINGER_NS;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	journal.sleeping = journal.lingering = true;
	journal.troubled = false;   /* not while failing */
	while (!journal.urgent && !journal.stopping &&
	       pthread_cond_timedwait(&journal.cond, &journal.lock,
	                              &until) == 0)
		;
	journal.sleeping = journal.lingering = false;
}

/*
 * Journal thread: writes batch b, the retained updates first (they are
 * older), and answers it, then runs the prunes it held.  Returns the
 * commit's result; *ndone: the spawns it answered.  `failing`: the last
 * commit failed (its recovery is logged).
 */
static int journal_write_batch(struct jev *b, size_t *ndone, bool failing)
{
	if (journal.retained != NULL) {
		struct jev *r = journal.retained;
		while (r->next != NULL)
			r = r->next;
		r->next = b;
		b = journal.retained;
		journal.retained = NULL;
	}
	int64_t t0 = rok_now();
	int rc = journal_commit(b, ndone);
	int64_t t1 = rok_now();
	metrics_observe(METRICS_COMMIT, (t1 - t0) / 1000);
	if (rc == SQLITE_OK) {
		if (failing)
			log_info("journal: writing again");
		/* Decided now, not when the batch was taken: rokd's stop may
		 * have reached rok_stop during the commit. */
		bool live = journal_calls_begin();
		struct jev *prunes = journal_done(b, *ndone, false, live &&
		                                  *ndone <= JOURNAL_DIRECT_MAX);
		journal_calls_end();
		/* After the answers: a move to another CPU delays none. */
		journal_cpu_commit(t1 - t0, t1);
		journal_run_prunes(prunes);
		journal_free_chain(prunes);
	} else {
		(void)journal_calls_begin();
		journal_fail(b, rc);
		journal_calls_end();
	}
	return rc;
}

bool journal_prune_yield(void)
{
	struct jev *b = NULL, **btail = &b, *prunes = NULL, **ptail = &prunes;

	pthread_mutex_lock(&journal.lock);
	if (journal.stopping || journal.detached) {
		pthread_mutex_unlock(&journal.lock);
		return false;
	}
	/* The prunes stay queued, in order: they run after this one, not
	 * inside it. */
	struct jev *last = NULL;
	for (struct jev *e = journal.head, *next; e != NULL; e = next) {
		next = e->next;
		e->next = NULL;
		if (e->type == JEV_PRUNE) {
			*ptail = last = e;
			ptail = &e->next;
		} else {
			*btail = e;
			btail = &e->next;
		}
	}
	journal.head = prunes;
	journal.tail = last;
	journal.urgent = journal.prune_queued = prunes != NULL;
	bool ckpt = journal.checkpoint_due;
	journal.checkpoint_due = false;
	pthread_mutex_unlock(&journal.lock);

	/* A prune's chunks fill the WAL as any commits do. */
	if (ckpt)
		journal_checkpoint();
	if (b != NULL || journal.retained != NULL) {
		size_t ndone;
		(void)journal_write_batch(b, &ndone, false);
	}
	return true;
}

static void *journal_main(void *arg)
{
	struct timespec next_prune;
	bool failing = false;
	bool linger_next = false;   /* the last commit started tasks */

	(void)arg;
	(void)pthread_setname_np(pthread_self(), "rokd-journal");
	journal_cpu_start();
	clock_gettime(CLOCK_MONOTONIC, &next_prune);
	pthread_mutex_lock(&journal.lock);
	for (;;) {
		struct timespec now;
		journal_wait_inline();
		if (journal.checkpoint_due) {
			/* As if asleep: the reactor may commit meanwhile
			 * (unless this thread retries a failed commit). */
			journal.checkpoint_due = false;
			journal.sleeping = true;
			journal.troubled = failing || journal.retained != NULL;
			pthread_mutex_unlock(&journal.lock);
			journal_checkpoint();
			pthread_mutex_lock(&journal.lock);
			journal.sleeping = false;
			journal_wait_inline();
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec >= next_prune.tv_sec && journal.head == NULL &&
		    !failing) {
			pthread_mutex_unlock(&journal.lock);
			journal_prune_retention(journal.db);
			/* A commit of its yields may have failed. */
			failing = journal.retained != NULL;
			pthread_mutex_lock(&journal.lock);
			clock_gettime(CLOCK_MONOTONIC, &next_prune);
			next_prune.tv_sec += 60;
		}
		if (journal.head == NULL && journal.stopping &&
		    journal.retained == NULL)
			break;
		bool lingered = false;
		if (journal.head == NULL && !journal.stopping && linger_next &&
		    !failing && journal.retained == NULL) {
			/* The tasks the last commit started send their start
			 * and finish within microseconds: linger for them now,
			 * so that their pushes need not wake the thread (the
			 * first update into an empty queue of a thread asleep
			 * does, to start the linger). */
			linger_next = false;
			lingered = true;
			journal_linger();
			journal_wait_inline();
			if (journal.head == NULL && journal.retained == NULL)
				continue;
		} else if (journal.head == NULL && !journal.stopping) {
			/* Sleep until an event, the next periodic prune, or
			 * (while failing) the next retry. */
			struct timespec until;
			clock_gettime(CLOCK_MONOTONIC, &until);
			if (failing || journal.retained != NULL) {
				until.tv_nsec += 100000000;
				if (until.tv_nsec >= 1000000000) {
					until.tv_sec++;
					until.tv_nsec -= 1000000000;
				}
			} else {
				until.tv_sec += next_prune.tv_sec - now.tv_sec;
			}
			journal.sleeping = true;
			journal.troubled = failing || journal.retained != NULL;
			(void)pthread_cond_timedwait(&journal.cond, &journal.lock,
			                             &until);
			journal.sleeping = false;
			journal_wait_inline();
			if (journal.head == NULL && journal.retained == NULL)
				continue;
		}
		if (journal.head != NULL && !journal.urgent && !journal.stopping &&
		    !failing && !lingered)
			journal_linger();
		journal_wait_inline();
		/* The reactor may have committed it all meanwhile. */
		if (journal.head == NULL && journal.retained == NULL)
			continue;
		struct jev *b = journal.head;
		journal.head = journal.tail = NULL;
		journal.urgent = false;
		journal.prune_queued = false;
		pthread_mutex_unlock(&journal.lock);

		size_t ndone;
		int rc = journal_write_batch(b, &ndone, failing);
		if (rc == SQLITE_OK) {
			/* The prunes it ran may have yielded to a commit
			 * that failed: its updates are retained. */
			failing = journal.retained != NULL;
			linger_next = ndone > 0;
		} else {
			/* Retried every 100 ms while updates are retained; a
			 * batch of spawns alone was answered and is over. */
			failing = journal.retained != NULL;
			if (journal.stopping) {
				/* At stop, one more try is all we can give. */
				int rc2 = journal_commit(journal.retained,
				                         &ndone);
				if (rc2 != SQLITE_OK)
					log_warnx("journal: %s: task updates lost "
					          "at stop; recovery will see those "
					          "tasks as interrupted",
					          sqlite3_errstr(rc2));
				journal_free_chain(journal.retained);
				journal.retained = NULL;
			}
		}
		pthread_mutex_lock(&journal.lock);
	}
	pthread_mutex_unlock(&journal.lock);
	return NULL;
}

int journal_start(void)
{
	sigset_t all, old;

	if (config.durability_off)
		return 0;   /* no thread: nothing to write */

	/* Signals stay with the main thread's sigwait. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int err = pthread_create(&journal.thread, NULL, journal_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err != 0)
		return -err;
	journal.running = true;
	return 0;
}

void journal_detach(void)
{
	pthread_mutex_lock(&journal.lock);
	journal.detached = true;
	while (journal.in_calls)
		pthread_cond_wait(&journal_detach_cond, &journal.lock);
	pthread_mutex_unlock(&journal.lock);
}

void journal_stop(void)
{
	pthread_mutex_lock(&journal.lock);
	journal.stopping = true;
	pthread_cond_signal(&journal.cond);
	pthread_mutex_unlock(&journal.lock);
	if (journal.running)
		pthread_join(journal.thread, NULL);
	pthread_mutex_lock(&journal.lock);
	journal.running = false;
	struct jev *left = journal.head;
	journal.head = journal.tail = NULL;
	pthread_mutex_unlock(&journal.lock);
	journal_free_chain(left);
	for (int i = 0; i < JST_COUNT; i++) {
		sqlite3_finalize(journal.st[i]);
		journal.st[i] = NULL;
	}
	/* Every connection to journal.db closes before the state directory's
	 * lock goes: a rokd started next must not pass that lock and then
	 * find the journal still locked by this one (journal_lock =
	 * exclusive), or a final checkpoint still running. */
	group_store_close();
	journal_read_close();
	if (journal.ckpt != NULL) {
		(void)sqlite3_close(journal.ckpt);
		journal.ckpt = NULL;
	}
	free(journal_fin.slot);
	journal_fin.slot = NULL;
	journal_fin_cap = 0;
	if (journal.db != NULL) {
		/* A clean close checkpoints and removes the WAL. */
		if (sqlite3_close(journal.db) != SQLITE_OK)
			log_warnx("journal: close: %s",
			          sqlite3_errmsg(journal.db));
		journal.db = NULL;
	}
	if (journal.lock_fd >= 0) {
		close(journal.lock_fd);
		journal.lock_fd = -1;
	}
}
