/*
 * journal.h — the job journal: every spawn, start (with an exec run's
 * process group), finish and cancel request in <state_dir>/journal.db
 * (sqlite3, WAL), written by one thread with group commit.  See journal.c
 * (the thread), journal-schema.c (open, verify, migrate), journal-recover.c
 * (replay at start), journal-read.c (lookups of tasks no longer in memory)
 * and journal-prune.c (retention).
 */
#ifndef ROKD_JOURNAL_H
#define ROKD_JOURNAL_H

#include <sqlite3.h>

#include "rokd.h"

/* "ROKJ": PRAGMA application_id of a rok journal. */
#define JOURNAL_APPLICATION_ID 0x524f4b4a
/* PRAGMA user_version this rokd writes (the last migration step). */
#define JOURNAL_SCHEMA_VERSION 7

/* ---- journal-schema.c (main thread, before the journal thread runs) --- */
/*
 * Opens (creating if absent) the database at `path`, refuses a file that is
 * not a rok journal (not sqlite, another application's database, a newer
 * schema, a failing quick_check, a read-only file or directory) without
 * writing to it, applies the migrations it lacks in one transaction, and
 * sets WAL and the synchronous level.  *db gets the connection; 0, or -1
 * with a sentence for people in err.
 */
/* How long a connection to journal.db waits for another's lock. */
#define JOURNAL_BUSY_TIMEOUT_MS 5000

int journal_schema_open(const char *path, bool durable_full, sqlite3 **db,
                        char *err, size_t len);
/*
 * The sqlite VFS every connection to journal.db opens with.  By default
 * (journal_lock = exclusive) "unix-excl": the process locks the file once
 * and keeps sqlite's WAL index in its own memory, so a commit makes no
 * lock system call (six otherwise, on journal.db-shm: ~9 µs a commit
 * here) and no other process can open the journal while rokd runs.
 * journal_lock = shared: NULL, the default VFS (journal.db-shm, fcntl).
 */
const char *journal_vfs(void);
/* Runs one statement; SQLITE_OK or an sqlite error, message in err. */
int journal_schema_exec(sqlite3 *db, const char *sql, char *err, size_t len);
/*
 * Writes zeros into db's WAL file (journal_open, at durability = full),
 * past its end, up to the size of `frames` frames, and syncs them: what
 * the WAL grows to between two checkpoints is then blocks already
 * written, which a commit overwrites.  An append allocates blocks instead, and the
 * commit's fsync then writes the file system's metadata too: on this
 * project's ext4 machines 3 to 4 device writes a commit instead of 2, and
 * up to twice the latency, for the first ~1,000 frames after every start
 * (a clean stop deletes the WAL).  Zeros are never frames to sqlite (a
 * frame of page 0 is invalid, as is a header without its magic number),
 * so recovery stops where they begin.  posix_fallocate would not do: its
 * unwritten extents change metadata when first written, as appends do.
 * Done under the write lock (BEGIN IMMEDIATE, which may wait for another
 * process's), and only when it takes at most half of the space free; a
 * failure takes the zeros back.  Not writing ahead is logged, and the
 * journal works as before.  0; -1 with a sentence in err only if the
 * write lock could not be let go.
 */
int journal_schema_wal_prefill(sqlite3 *db, const char *path, int frames,
                               char *err, size_t len);

/* ---- journal.c --------------------------------------------------------- */
/* Main thread: opens <state_dir>/journal.db (see journal_schema_open);
 * 0, or -1 with a message in err. */
int journal_open(char *err, size_t len);
/* Main thread, after recovery: starts the journal thread. */
int journal_start(void);
/*
 * Main thread, right before rok_stop: from here on the journal thread
 * answers nothing (it runs no spawn or prune callback and hands none to
 * the reactor; the reactor's own inline commits answer until rok_stop): a
 * reactor_call or rok_spawn after rok_stop would start the runtime again,
 * for connections freed by then.  Queued work is still written.  Returns
 * once the thread is not answering a batch.
 */
void journal_detach(void);
/* Main thread, at the very end: writes what is queued, stops the thread,
 * closes the database. */
void journal_stop(void);
/* The write connection, for the main thread before journal_start (the
 * recovery) and for the journal thread after. */
sqlite3 *journal_db(void);

/* One task of a spawn, as journal_spawn copies it. */
struct journal_spawn_item {
	uint64_t id;
	uid_t uid;
	const char *kind;           /* borrowed for the call: copied */
	const uint8_t *spec;        /* the packed TaskSpec, idem */
	size_t spec_len;
	uint64_t spawned_us;
	const uint8_t *group;       /* its TaskSpec.group, idem; len 0: none */
	size_t group_len;
	/* When it entered its group's queue (tasktab_queued_us): a task
	 * with nothing to wait for enters at its spawn, and its insert
	 * records that, with no update of its own; 0: it waits in the gate
	 * first (journal_queued records its entry). */
	uint64_t queued_us;
};

/*
 * Any thread.  Queues the n records of one request; they are committed in
 * one transaction (the same batch), after which done(arg, 0, NULL) runs on
 * the reactor thread, or done(arg, -errno, message) if the commit failed
 * (nothing of them is in the journal then).  Returns 0, or -ENOMEM /
 * -ESHUTDOWN, and then done never runs.
 */
typedef void journal_done_fn(void *arg, int err, const char *msg);
int journal_spawn(const struct journal_spawn_item *items, size_t n,
                  journal_done_fn *done, void *arg);
/*
 * Like journal_spawn, but after a commit done(arg, 0, NULL) may run on the
 * journal thread, for a callback that touches nothing of the reactor's
 * (only locked or any-thread state: the task table, rok_spawn, reply_post).
 * A failure is still completed on the reactor thread.  It saves the
 * reactor's wake-up between the commit and the start of a task that
 * answers by itself.
 */
int journal_spawn_any(const struct journal_spawn_item *items, size_t n,
                      journal_done_fn *done, void *arg);

/* Any thread: state changes of a task whose spawn is in the journal.  A
 * write that fails stays queued and is tried again with the next batch. */
void journal_started(uint64_t id, uint64_t started_us);
struct journal_finish {
	uint64_t id;
	int state;
	uint64_t started_us, finished_us;
	const uint8_t *value;       /* borrowed: copied */
	size_t value_len;
	bool has_exit_code, has_signal;
	int exit_code, signal;
	const char *reason;         /* borrowed: copied; NULL: none */
	bool output_truncated;
};
/*
 * Returns the finish's place in the journal's FIFO: it is on disk once
 * journal_committed() reaches it; 0 when nothing will be written (no
 * journal, out of memory, stopped), so there is nothing to wait for.
 * After each commit that wrote a finish, tasktab_journal_committed runs
 * (on the committing thread, no journal lock held).
 */
uint64_t journal_finished(const struct journal_finish *f);
/* Any thread: every update queued with a seq up to this is committed. */
uint64_t journal_committed(void);
void journal_cancel_requested(uint64_t id);
/* A failed run of id with retries left: queued again as run `run`, not
 * before next_us (wall clock); its queue entry is forgotten (the run waits
 * in the gate again). */
void journal_requeued(uint64_t id, uint32_t run, uint64_t next_us);
/*
 * Any thread: the current run of task `id` entered its group's queue at
 * queued_us (wall clock), after waiting in the gate (or restored from a
 * row of an older rokd without it).  Nobody waits for it: it rides on the
 * next commit (the linger, or the next spawn's).  If rokd dies before
 * that, the row still says 0, and the next start takes the task through
 * the gate again: it enters its queue at that start, behind every task
 * whose entry was committed (a row of an older rokd that never waited in
 * the gate counts from its spawn again).
 */
void journal_queued(uint64_t id, uint64_t queued_us);
/*
 * Any thread: the child of exec task `id` started and leads process group
 * `pgid`, which it created at `start_ticks` (/proc/<pid>/stat field 22).
 * Recorded only while the row is unfinished; a fresh start of the task
 * (journal_started) clears it.  journal_exec_gone: the group was killed
 * and its leader reaped without the task's finish being journaled (a
 * clean stop), so the next start has no group to look for.
 */
void journal_exec_started(uint64_t id, pid_t pgid, uint64_t start_ticks);
void journal_exec_gone(uint64_t id);
/* Any thread: the Slurm job id of task id's run (slurm.c). */
void journal_slurm_job(uint64_t id, uint32_t jobid);

/*
 * Any thread: deletes finished tasks that finished before `before_us`
 * (0: no age limit) or are older than the `keep` most recent finished ones
 * (UINT64_MAX: no count limit) or than their uid's `keep_per_user` most
 * recent (UINT64_MAX: no such limit), with their output files, on the
 * journal thread; done(arg, pruned count or -errno, msg) runs on the
 * reactor thread.  0 or -ENOMEM / -ESHUTDOWN (done never runs then).
 */
typedef void journal_prune_fn(void *arg, int64_t n, const char *msg);
int journal_prune(uint64_t before_us, uint64_t keep, uint64_t keep_per_user,
                  journal_prune_fn *done, void *arg);

/*
 * Journal thread, between the chunks of a prune: commits and answers what
 * was queued meanwhile (prunes queued stay queued, to run after this one),
 * so that a long prune does not hold spawns back.  False once rokd stops
 * (journal_detach or journal_stop): the prune should end there.
 */
bool journal_prune_yield(void);

/* ---- journal-prune.c (journal thread) ---------------------------------- */
/* Deletes what journal_prune asked for: the count, or -errno. */
int64_t journal_prune_run(sqlite3 *db, uint64_t before_us, uint64_t keep,
                          uint64_t keep_per_user);
/* The retention of rokd.conf (keep_finished, keep_finished_per_user,
 * keep_finished_for) applied
 * now; called periodically by the journal thread. */
void journal_prune_retention(sqlite3 *db);

/* ---- journal-cpu.c (journal thread) ------------------------------------ */
/* At its start: at durability = full, begins trying its CPUs. */
void journal_cpu_start(void);
/* After each successful commit, which took took_ns, at now_ns (rok_now):
 * may move the thread to another CPU. */
void journal_cpu_commit(int64_t took_ns, int64_t now_ns);

/* ---- journal-recover.c (main thread, after rok_start) ------------------ */
/*
 * Replays the journal: queued tasks are queued again, running ones become
 * interrupted, or run again when their spec allows a retry; the id counter
 * continues above the largest id ever used.  0, or -1 with a message.
 */
int journal_recover(char *err, size_t len);

/* ---- journal-read.c (any thread; its own read-only connection) --------- */
int journal_read_open(const char *path, char *err, size_t len);
void journal_read_close(void);
/* Fills info from the journal for `id` as `uid` sees it: 0, or
 * ROK__V1__ERROR_CODE__NOT_FOUND / __PERMISSION_DENIED. */
int journal_read_info(uint64_t id, uid_t uid, TaskInfo *info);
/* The uid that task `id` runs as: 0, -ENOENT (no such row) or -EIO. */
int journal_read_owner(uint64_t id, uid_t *uid);
/* Ids of journaled tasks above `after`, visible to uid, in `state` (0:
 * any), of `group` (NULL: any; "default" takes in tasks without one), in
 * id order: up to `limit` into ids[]; the count, or -errno. */
int journal_read_ids(uid_t uid, int state, const char *group,
                     uint64_t after, size_t limit, uint64_t *ids);

#endif /* ROKD_JOURNAL_H */
