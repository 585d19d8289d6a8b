/*
 * journal-schema.c — opening the journal database: recognise it, refuse
 * what is not ours, migrate forward, set WAL and durability.
 *
 * Main thread, once, before the journal thread starts.  The rules, in the
 * order they are checked, each refusing to start without writing a byte:
 *   - a non-empty file whose first 16 bytes are not the SQLite header is not
 *     a database (a corrupt or unrelated file);
 *   - PRAGMA application_id must be JOURNAL_APPLICATION_ID, or 0 with no
 *     tables at all (a new, empty database); anything else belongs to
 *     another program;
 *   - PRAGMA quick_check must say "ok";
 *   - PRAGMA user_version above JOURNAL_SCHEMA_VERSION was written by a
 *     newer rokd, whose format we cannot know; below 0 by no rokd;
 *   - the file and its directory must be writable (sqlite opens a read-only
 *     file read-only without an error, and WAL needs the directory).
 * Then the migration steps from user_version up to JOURNAL_SCHEMA_VERSION
 * run in one transaction, which also sets user_version and application_id:
 * a crash in the middle leaves the old version, never half of a new one.
 * Migrations only ever go forward; a step is never edited once released.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "journal.h"

/* Step i takes the schema from version i to i + 1. */
static const char *const journal_schema_steps[] = {
	/* 0 -> 1.  One row per task; the hot path writes a row at spawn and
	 * updates it at finish, by primary key: no secondary index.  spec is
	 * the packed rok.v1.TaskSpec, so recovery can run the task again.
	 * The largest id ever handed out is max(meta.max_id, the largest
	 * row): a prune raises max_id before it deletes rows. */
	"CREATE TABLE tasks ("
	" id INTEGER PRIMARY KEY,"
	" uid INTEGER NOT NULL,"
	" kind TEXT NOT NULL,"
	" spec BLOB NOT NULL,"
	" state INTEGER NOT NULL,"
	" spawned_us INTEGER NOT NULL,"
	" started_us INTEGER NOT NULL DEFAULT 0,"
	" finished_us INTEGER NOT NULL DEFAULT 0,"
	" value BLOB,"
	" exit_code INTEGER,"
	" signal INTEGER,"
	" reason TEXT,"
	" output_truncated INTEGER NOT NULL DEFAULT 0,"
	" retries INTEGER NOT NULL DEFAULT 0,"
	" cancel_requested INTEGER NOT NULL DEFAULT 0);"
	"CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"
	" WITHOUT ROWID;"
	"INSERT INTO meta VALUES ('max_id', 0);",
	/* 1 -> 2.  The process group of an exec task's run and its leader's
	 * start time (clock ticks since boot, /proc/<pid>/stat field 22),
	 * written once the child started: recovery kills what is left of
	 * the group of a run that rokd's death interrupted (exec-orphans.c).
	 * NULL: no child (yet), or another kind. */
	"ALTER TABLE tasks ADD COLUMN pgid INTEGER;"
	"ALTER TABLE tasks ADD COLUMN pg_start INTEGER;",
	/* 2 -> 3.  Retries after failures (TaskSpec.retry_failed): which run
	 * a task is in (1 = the first) and, while it waits for its backoff,
	 * the wall-clock time its next run may start (0: none).  The rest of
	 * what a task waits for (dependencies, not_before_us) is in its
	 * spec. */
	"ALTER TABLE tasks ADD COLUMN run INTEGER NOT NULL DEFAULT 1;"
	"ALTER TABLE tasks ADD COLUMN next_us INTEGER NOT NULL DEFAULT 0;",
	/* 3 -> 4.  The groups that a GroupRequest added or changed, each with
	 * all its settings (group.c): they outlive a restart (IF NOT EXISTS: a
	 * development build between issue 10's two merges made this very table
	 * outside the steps, at version 2).  A task's group (TaskSpec.group;
	 * NULL: default, as for every row before this step) for `rokctl list
	 * --group`, with the ids of each group in order. */
	"ALTER TABLE tasks ADD COLUMN grp TEXT;"
	"CREATE INDEX tasks_grp ON tasks (grp, id) WHERE grp IS NOT NULL;"
	"CREATE TABLE IF NOT EXISTS groups ("
	" name TEXT PRIMARY KEY,"
	" parallel INTEGER NOT NULL,"
	" policy INTEGER NOT NULL,"
	" weights TEXT NOT NULL,"
	" backend TEXT NOT NULL,"
	" paused INTEGER NOT NULL) WITHOUT ROWID;",
	/* 4 -> 5.  The Slurm job of a task of a slurm group (slurm.c), once
	 * submitted: for people, and a restart adopts the job (its name
	 * finds it) rather than submitting the task again.  NULL: none. */
	"ALTER TABLE tasks ADD COLUMN slurm_job INTEGER;",
	/* 5 -> 6.  A slurm group's partition (sbatch --partition; "": the
	 * cluster's default), with the group's other settings. */
	"ALTER TABLE groups ADD COLUMN partition TEXT NOT NULL DEFAULT '';",
	/* 6 -> 7.  When the task's current run entered its group's queue
	 * (wall clock, us; 0: not yet, it waits in the gate), so that a
	 * restart queues the tasks again in that order and with their
	 * waits, which aging counts (journal-recover.c).  A task spawned
	 * with nothing to wait for enters at its spawn (the insert writes
	 * spawned_us); one released by the gate, by an update; a retry
	 * clears it.  Rows of before this step have 0: the recovery takes
	 * spawned_us for those that never waited in the gate. */
	"ALTER TABLE tasks ADD COLUMN queued_us INTEGER NOT NULL DEFAULT 0;",
};

_Static_assert(sizeof(journal_schema_steps) / sizeof(journal_schema_steps[0])
               == JOURNAL_SCHEMA_VERSION, "one step per schema version");

int journal_schema_exec(sqlite3 *db, const char *sql, char *err, size_t len)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK)
		snprintf(err, len, "%s", msg != NULL ? msg : sqlite3_errstr(rc));
	sqlite3_free(msg);
	return rc;
}

/* One integer from a pragma or query: SQLITE_OK or an error. */
static int journal_schema_int(sqlite3 *db, const char *sql, int64_t *v)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	*v = 0;
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*v = sqlite3_column_int64(st, 0);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

/* sqlite's WAL format (wal.c): the file's header, each frame's. */
#define JOURNAL_WAL_HEADER 32
#define JOURNAL_WAL_FRAME_HEADER 24

/* With db's write transaction open: see journal.h. */
static void journal_schema_wal_zeros(sqlite3 *db, const char *path,
                                     int frames)
{
	static const char zeros[64 << 10];
	sqlite3_file *f = NULL;
	sqlite3_int64 size;
	int64_t page;
	struct statvfs fs;

	if (journal_schema_int(db, "PRAGMA page_size", &page) != SQLITE_OK ||
	    page < 512 || page > 65536 ||
	    sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER,
	                         &f) != SQLITE_OK ||
	    f == NULL || f->pMethods == NULL ||
	    f->pMethods->xFileSize(f, &size) != SQLITE_OK) {
		log_warnx("%s-wal: not written ahead (no page size or open "
		          "WAL): its first commits grow it", path);
		return;
	}
	int64_t want = JOURNAL_WAL_HEADER +
	               (int64_t)frames * (page + JOURNAL_WAL_FRAME_HEADER);
	if (size >= want)
		return;
	if (statvfs(path, &fs) != 0) {
		log_errno(errno, "%s-wal: not written ahead: statvfs", path);
		return;
	}
	/* f_bavail * f_frsize cannot overflow: a file system's size. */
	if ((uint64_t)fs.f_bavail * fs.f_frsize / 2 < (uint64_t)(want - size)) {
		log_warnx("%s-wal: not written ahead: %lld bytes would take more "
		          "than half of the space free: its first commits grow "
		          "it", path, (long long)(want - size));
		return;
	}
	int rc = SQLITE_OK;
	for (int64_t off = size; off < want && rc == SQLITE_OK;) {
		int n = want - off < (int64_t)sizeof(zeros)
		        ? (int)(want - off) : (int)sizeof(zeros);
		rc = f->pMethods->xWrite(f, zeros, n, off);
		off += n;
	}
	if (rc == SQLITE_OK)
		rc = f->pMethods->xSync(f, SQLITE_SYNC_NORMAL);
	if (rc != SQLITE_OK) {
		int trc = f->pMethods->xTruncate(f, size);
		log_warnx("%s-wal: could not write %lld bytes ahead (%s)%s: its "
		          "first commits grow it", path, (long long)(want - size),
		          sqlite3_errstr(rc), trc == SQLITE_OK ? ""
		          : "; the zeros written stay");
	}
}

int journal_schema_wal_prefill(sqlite3 *db, const char *path, int frames,
                               char *err, size_t len)
{
	char msg[256];

	/* The WAL's write lock: with journal_lock = shared another process
	 * could otherwise append frames where the zeros go. */
	if (journal_schema_exec(db, "BEGIN IMMEDIATE", msg, sizeof(msg)) !=
	    SQLITE_OK) {
		log_warnx("%s-wal: not written ahead (%s): its first commits "
		          "grow it", path, msg);
		return 0;
	}
	journal_schema_wal_zeros(db, path, frames);
	/* Nothing was written in the transaction: nothing to commit but
	 * the lock to let go. */
	if (journal_schema_exec(db, "COMMIT", msg, sizeof(msg)) != SQLITE_OK) {
		log_warnx("%s: the WAL written ahead: COMMIT: %s", path, msg);
		(void)journal_schema_exec(db, "ROLLBACK", msg, sizeof(msg));
	}
	if (!sqlite3_get_autocommit(db)) {
		snprintf(err, len, "%s: the write lock taken to write the WAL "
		         "ahead could not be let go: %s; refusing to start",
		         path, msg);
		return -1;
	}
	return 0;
}

/* The file's first bytes: 0 if it is absent, empty or starts like sqlite,
 * else -1 with a message. */
static int journal_schema_header(const char *path, char *err, size_t len)
{
	static const char magic[16] = "SQLite format 3";
	char buf[16];
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	ssize_t n = read(fd, buf, sizeof(buf));
	int e = errno;
	close(fd);
	if (n < 0) {
		snprintf(err, len, "%s: %s", path, strerror(e));
		return -1;
	}
	if (n == 0)
		return 0;
	if (n < (ssize_t)sizeof(buf) || memcmp(buf, magic, sizeof(buf)) != 0) {
		snprintf(err, len, "%s is not an SQLite database (corrupt, or "
		         "another program's file); refusing to touch it: move "
		         "it away or restore it", path);
		return -1;
	}
	return 0;
}

static int journal_schema_check(sqlite3 *db, const char *path, char *err,
                                size_t len)
{
	int64_t app, ver, tables;
	sqlite3_stmt *st;
	int rc;

	if ((rc = journal_schema_int(db, "PRAGMA application_id", &app)) ||
	    (rc = journal_schema_int(db, "SELECT count(*) FROM sqlite_master",
	                             &tables)) ||
	    (rc = journal_schema_int(db, "PRAGMA user_version", &ver))) {
		/* journal_lock = exclusive locks the file at the first read
		 * (shared waits out the busy timeout first). */
		if ((rc & 0xff) == SQLITE_BUSY) {
			snprintf(err, len, "%s: cannot take the journal's lock: "
			         "%s (another process uses the file); refusing "
			         "to start", path, sqlite3_errmsg(db));
			return -1;
		}
		snprintf(err, len, "%s: cannot read it as a database: %s "
		         "(corrupt?); refusing to start, the file is left as it "
		         "is", path, sqlite3_errmsg(db));
		return -1;
	}
	if (app != JOURNAL_APPLICATION_ID && !(app == 0 && tables == 0)) {
		snprintf(err, len, "%s is another program's SQLite database "
		         "(application_id 0x%08llx, %lld tables), not a rok "
		         "journal; refusing to touch it", path,
		         (unsigned long long)(uint32_t)app, (long long)tables);
		return -1;
	}
	if (ver < 0) {   /* it indexes the migration steps */
		snprintf(err, len, "%s has journal schema version %lld, which "
		         "no rokd writes (corrupt?); refusing to start, the "
		         "file is left as it is", path, (long long)ver);
		return -1;
	}
	if (ver > JOURNAL_SCHEMA_VERSION) {
		snprintf(err, len, "%s has journal schema version %lld, newer "
		         "than this rokd knows (%d): run the newer rokd, or "
		         "restore a backup", path, (long long)ver,
		         JOURNAL_SCHEMA_VERSION);
		return -1;
	}
	rc = sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	bool ok = rc == SQLITE_ROW &&
	          strcmp((const char *)sqlite3_column_text(st, 0), "ok") == 0;
	char what[200];
	snprintf(what, sizeof(what), "%s",
	         rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0)
	                          : sqlite3_errmsg(db));
	sqlite3_finalize(st);
	if (!ok) {
		snprintf(err, len, "%s failed its integrity check (%s); "
		         "refusing to start, the file is left as it is", path,
		         what);
		return -1;
	}
	return 0;
}

/* Applies the missing steps in one transaction. */
static int journal_schema_migrate(sqlite3 *db, const char *path, char *err,
                                  size_t len)
{
	int64_t ver = -1, failed = -1;
	char msg[256], sql[128];

	if (journal_schema_exec(db, "BEGIN IMMEDIATE", msg, sizeof(msg))) {
		/* No version read yet: say what failed, not a version. */
		snprintf(err, len, "%s: cannot take the journal's write lock "
		         "(BEGIN IMMEDIATE) to check its schema version: %s; "
		         "refusing to start", path, msg);
		return -1;
	}
	if (journal_schema_int(db, "PRAGMA user_version", &ver) != SQLITE_OK) {
		snprintf(msg, sizeof(msg), "%s", sqlite3_errmsg(db));
		(void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		snprintf(err, len, "%s: cannot read the journal's schema "
		         "version: %s; refusing to start", path, msg);
		return -1;
	}
	if (ver == JOURNAL_SCHEMA_VERSION) {
		(void)journal_schema_exec(db, "COMMIT", msg, sizeof(msg));
		return 0;
	}
	for (int64_t v = ver; v < JOURNAL_SCHEMA_VERSION; v++)
		if (journal_schema_exec(db, journal_schema_steps[v], msg,
		                        sizeof(msg))) {
			failed = v;
			goto rollback;
		}
	snprintf(sql, sizeof(sql), "PRAGMA application_id = %d; "
	         "PRAGMA user_version = %d", JOURNAL_APPLICATION_ID,
	         JOURNAL_SCHEMA_VERSION);
	if (journal_schema_exec(db, sql, msg, sizeof(msg)) ||
	    journal_schema_exec(db, "COMMIT", msg, sizeof(msg)))
		goto rollback;
	return 0;
rollback:
	if (!sqlite3_get_autocommit(db))
		(void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	if (failed >= 0)
		snprintf(err, len, "%s: cannot migrate the journal from schema "
		         "version %lld to %d: step %lld -> %lld failed: %s; the "
		         "file is left at version %lld", path, (long long)ver,
		         JOURNAL_SCHEMA_VERSION, (long long)failed,
		         (long long)failed + 1, msg, (long long)ver);
	else
		snprintf(err, len, "%s: cannot migrate the journal from schema "
		         "version %lld to %d: %s", path, (long long)ver,
		         JOURNAL_SCHEMA_VERSION, msg);
	return -1;
}

const char *journal_vfs(void)
{
	return config.journal_shared ? NULL : "unix-excl";
}

int journal_schema_open(const char *path, bool durable_full, sqlite3 **out,
                        char *err, size_t len)
{
	sqlite3 *db = NULL;
	char msg[256], dir[4096];

	*out = NULL;
	if (journal_schema_header(path, err, len) < 0)
		return -1;
	/* WAL needs to create files beside the database. */
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash != NULL) {
		*slash = '\0';
		if (access(dir[0] != '\0' ? dir : "/", W_OK) != 0) {
			snprintf(err, len, "state directory %s is not writable "
			         "(%s): the journal cannot be kept; refusing to "
			         "start", dir, strerror(errno));
			return -1;
		}
	}
	int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE |
	                         SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
	                         journal_vfs());
	if (rc != SQLITE_OK) {
		snprintf(err, len, "%s: cannot open: %s", path,
		         db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		sqlite3_close(db);
		return -1;
	}
	sqlite3_extended_result_codes(db, 1);
	/* journal_lock = shared: another process may hold the write lock
	 * for a moment (a sqlite3 shell's write); the start waits for it as
	 * commits do.  Exclusive: whoever holds the file's lock keeps it, and
	 * waiting would only delay the refusal. */
	if (config.journal_shared &&
	    (rc = sqlite3_busy_timeout(db, JOURNAL_BUSY_TIMEOUT_MS)) !=
	    SQLITE_OK) {
		snprintf(err, len, "%s: busy timeout: %s", path,
		         sqlite3_errstr(rc));
		goto fail;
	}
	if (sqlite3_db_readonly(db, "main") == 1) {
		snprintf(err, len, "%s is read-only (file or file system): the "
		         "journal cannot be kept; refusing to start", path);
		goto fail;
	}
	if (journal_schema_check(db, path, err, len) < 0)
		goto fail;
	/* On a read-only mount the WAL switch is where writing first fails. */
	sqlite3_stmt *st;
	rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	bool wal = rc == SQLITE_ROW &&
	           strcmp((const char *)sqlite3_column_text(st, 0), "wal") == 0;
	snprintf(msg, sizeof(msg), "%s", wal ? "" : sqlite3_errmsg(db));
	sqlite3_finalize(st);
	if (!wal) {
		snprintf(err, len, "%s: cannot switch to WAL mode (%s); "
		         "read-only file system?  refusing to start", path, msg);
		goto fail;
	}
	if (journal_schema_migrate(db, path, err, len) < 0)
		goto fail;
	/*
	 * FULL: the WAL is fsynced at every commit, so an acknowledged spawn
	 * survives power loss.  NORMAL: fsynced at checkpoints only, which
	 * survives a crash of rokd but not of the machine.  The WAL is reset
	 * (not truncated) by checkpoints; journal_size_limit bounds what a
	 * burst leaves on disk.
	 */
	snprintf(dir, sizeof(dir), "PRAGMA synchronous = %s; "
	         "PRAGMA journal_size_limit = %d; PRAGMA busy_timeout = %d",
	         durable_full ? "FULL" : "NORMAL", 64 << 20,
	         JOURNAL_BUSY_TIMEOUT_MS);
	if (journal_schema_exec(db, dir, msg, sizeof(msg))) {
		snprintf(err, len, "%s: %s", path, msg);
		goto fail;
	}
	*out = db;
	return 0;
fail:
	sqlite3_close(db);
	return -1;
}
