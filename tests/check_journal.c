/*
 * check_journal.c — the journal's modules in-process: opening and refusing
 * databases (journal-schema.c), group commit and its completions
 * (journal.c), finished rows that never change, prune (journal-prune.c),
 * recovery (journal-recover.c) and the rules by which it kills what an
 * interrupted exec run left (exec-orphans.c).  rokd from the outside —
 * restarts, kill -9, full disks, injected faults — is tests/journal.test
 * and tests/crash.test.
 *
 * Each test runs in its own forked process (Check's default) with a fresh
 * state directory, so the daemon's globals (config, task table, journal)
 * start clean every time.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"
#include "journal.h"
#include "reactor.h"
#include "testutil.h"

static char jdir[64];

/* A fresh state directory and default settings; rokd's own order. */
static void jsetup(void)
{
	snprintf(jdir, sizeof(jdir), "/tmp/check_journal.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(jdir));
	log_init(0);
	config_defaults(&config);
	free(config.state_dir);
	config.state_dir = strdup(jdir);
	config.durability_full = false;   /* tests need no fsync */
	ck_assert_int_eq(tasktab_init(), 0);
}

/* The test's directory goes at the end of a test that passed (a failing
 * one leaves it for inspection). */
static void jcleanup(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", jdir);
	ck_assert_int_eq(system(cmd), 0);
}

static void jpath(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", jdir, name);
}

/* Now, in µs since the epoch: finish times the retention (30 days by
 * default) leaves alone. */
static uint64_t jnow_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static int64_t jquery(const char *sql)
{
	char path[128];
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t v = -1;

	jpath(path, sizeof(path), "journal.db");
	ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
	                 SQLITE_OK);
	ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

/* Writes n bytes of content to STATE/journal.db. */
static void jwrite(const void *p, size_t n)
{
	char path[128];

	jpath(path, sizeof(path), "journal.db");
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
	close(fd);
}

static size_t jread_file(void *buf, size_t len)
{
	char path[128];

	jpath(path, sizeof(path), "journal.db");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ssize_t n = read(fd, buf, len);
	close(fd);
	ck_assert_int_ge(n, 0);
	return (size_t)n;
}

/* Opens STATE/journal.db: 0 or -1 with the message in err. */
static int jopen(char *err, size_t len)
{
	char path[128];
	sqlite3 *db;

	jpath(path, sizeof(path), "journal.db");
	int rc = journal_schema_open(path, false, &db, err, len);
	if (rc == 0)
		sqlite3_close(db);
	return rc;
}

START_TEST(schema_new_and_reopen)
{
	char err[512];

	jsetup();
	ck_assert_int_eq(jopen(err, sizeof(err)), 0);
	ck_assert_int_eq(jquery("PRAGMA application_id"), JOURNAL_APPLICATION_ID);
	ck_assert_int_eq(jquery("PRAGMA user_version"), JOURNAL_SCHEMA_VERSION);
	ck_assert_int_eq(jquery("SELECT value FROM meta WHERE key = 'max_id'"), 0);
	ck_assert_int_eq(jopen(err, sizeof(err)), 0);   /* ours: accepted */
	/* An empty file is a new database too. */
	jwrite("", 0);
	ck_assert_int_eq(jopen(err, sizeof(err)), 0);
	ck_assert_int_eq(jquery("PRAGMA user_version"), JOURNAL_SCHEMA_VERSION);
	jcleanup();
}
END_TEST

START_TEST(schema_refuses_unchanged)
{
	char err[512], before[8192], after[8192];
	uint8_t junk[8192];

	jsetup();
	/* Not a database: random bytes. */
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 131 + 7);
	jwrite(junk, sizeof(junk));
	ck_assert_int_eq(jopen(err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "not an SQLite database"));
	ck_assert_uint_eq(jread_file(after, sizeof(after)), sizeof(junk));
	ck_assert_int_eq(memcmp(after, junk, sizeof(junk)), 0);

	/* Another program's database. */
	char path[128];
	sqlite3 *db;
	jpath(path, sizeof(path), "journal.db");
	unlink(path);
	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db, "CREATE TABLE t (x); INSERT INTO t "
	                              "VALUES (1)", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	size_t n = jread_file(before, sizeof(before));
	ck_assert_int_eq(jopen(err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "another program"));
	ck_assert_uint_eq(jread_file(after, sizeof(after)), n);
	ck_assert_int_eq(memcmp(before, after, n), 0);

	/* A rok journal from a newer rokd. */
	unlink(path);
	ck_assert_int_eq(jopen(err, sizeof(err)), 0);
	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db, "PRAGMA journal_mode = DELETE; "
	                              "PRAGMA user_version = 99", NULL, NULL,
	                              NULL), SQLITE_OK);
	sqlite3_close(db);
	n = jread_file(before, sizeof(before));
	ck_assert_int_eq(jopen(err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "newer than this rokd"));
	ck_assert_uint_eq(jread_file(after, sizeof(after)), n);
	ck_assert_int_eq(memcmp(before, after, n), 0);

	/* A negative version, which no rokd writes (it once indexed the
	 * migration steps with it: found by tests/fuzz/fuzz_journal.c). */
	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db, "PRAGMA user_version = -1", NULL,
	                              NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	n = jread_file(before, sizeof(before));
	ck_assert_int_eq(jopen(err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "no rokd writes"));
	ck_assert_uint_eq(jread_file(after, sizeof(after)), n);
	ck_assert_int_eq(memcmp(before, after, n), 0);
	jcleanup();
}
END_TEST

/* The tables of schema version 1, spelled out (a released step never
 * changes): the tasks table without its closing parenthesis, for the
 * columns of later steps; the meta table. */
#define J1_TASKS                                                          \
	"CREATE TABLE tasks ("                                            \
	" id INTEGER PRIMARY KEY, uid INTEGER NOT NULL,"                  \
	" kind TEXT NOT NULL, spec BLOB NOT NULL,"                        \
	" state INTEGER NOT NULL, spawned_us INTEGER NOT NULL,"           \
	" started_us INTEGER NOT NULL DEFAULT 0,"                         \
	" finished_us INTEGER NOT NULL DEFAULT 0, value BLOB,"            \
	" exit_code INTEGER, signal INTEGER, reason TEXT,"                \
	" output_truncated INTEGER NOT NULL DEFAULT 0,"                   \
	" retries INTEGER NOT NULL DEFAULT 0,"                            \
	" cancel_requested INTEGER NOT NULL DEFAULT 0"
#define J1_META                                                           \
	"CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)" \
	" WITHOUT ROWID;"

/*
 * A journal written by a rokd of schema version 1 (the tasks table before
 * step 2) gains the pgid and pg_start columns (step 2), then run and
 * next_us (step 3), then the groups table and the grp column (step 4),
 * slurm_job (step 5), the groups' partition (step 6) and queued_us
 * (step 7: 0, not known), in one open, keeps its rows, and says version 7.
 * (tests/when.test migrates a version-2 journal written by the release
 * before step 3, tests/requeue.test one of version 6 that rokd then
 * recovers.)
 */
START_TEST(schema_migrates_1_to_4)
{
	char path[128], err[512];
	sqlite3 *db;

	jsetup();
	jpath(path, sizeof(path), "journal.db");
	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db,
		J1_TASKS ");"
		J1_META
		"INSERT INTO meta VALUES ('max_id', 7);"
		"INSERT INTO tasks (id, uid, kind, spec, state, spawned_us)"
		" VALUES (7, 0, 'exec', x'', 2, 1);"
		"PRAGMA application_id = 0x524f4b4a; PRAGMA user_version = 1",
		NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	ck_assert_int_eq(JOURNAL_SCHEMA_VERSION, 7);
	ck_assert_int_eq(jopen(err, sizeof(err)), 0);
	ck_assert_int_eq(jquery("PRAGMA user_version"), 7);
	ck_assert_int_eq(jquery("SELECT count(*) FROM groups"), 0);
	ck_assert_int_eq(jquery("SELECT grp IS NULL FROM tasks WHERE id = 7"), 1);
	ck_assert_int_eq(jquery("SELECT count(*) FROM pragma_table_info('tasks')"
	                        " WHERE name IN ('pgid', 'pg_start')"), 2);
	ck_assert_int_eq(jquery("SELECT run = 1 AND next_us = 0 FROM tasks "
	                        "WHERE id = 7"), 1);
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 7"),
	                 RT_RUNNING);
	ck_assert_int_eq(jquery("SELECT pgid IS NULL AND pg_start IS NULL "
	                        "FROM tasks WHERE id = 7"), 1);
	ck_assert_int_eq(jquery("SELECT slurm_job IS NULL FROM tasks "
	                        "WHERE id = 7"), 1);
	ck_assert_int_eq(jquery("SELECT value FROM meta WHERE key = 'max_id'"), 7);
	ck_assert_int_eq(jquery("SELECT count(*) FROM pragma_table_info("
	                        "'groups') WHERE name = 'partition'"), 1);
	ck_assert_int_eq(jquery("SELECT queued_us FROM tasks WHERE id = 7"), 0);
	/* Migrated once: a second open finds version 7 and changes nothing. */
	ck_assert_int_eq(jopen(err, sizeof(err)), 0);
	ck_assert_int_eq(jquery("PRAGMA user_version"), 7);
	jcleanup();
}
END_TEST

/*
 * main between the merges of issue 10's two halves wrote schema version 2
 * with the groups table created outside the numbered steps (by group.c,
 * "CREATE TABLE IF NOT EXISTS"): step 4 finds it there and keeps it and its
 * rows, instead of refusing the journal ("table groups already exists").
 */
START_TEST(schema_migrates_2_with_groups)
{
	char path[128], err[512];
	sqlite3 *db;

	jsetup();
	jpath(path, sizeof(path), "journal.db");
	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db,
		J1_TASKS ", pgid INTEGER, pg_start INTEGER);"
		J1_META
		"INSERT INTO meta VALUES ('max_id', 3);"
		"INSERT INTO tasks (id, uid, kind, spec, state, spawned_us)"
		" VALUES (3, 0, 'exec', x'', 1, 1);"
		"CREATE TABLE IF NOT EXISTS groups (name TEXT PRIMARY KEY,"
		" parallel INTEGER NOT NULL, policy INTEGER NOT NULL,"
		" weights TEXT NOT NULL, backend TEXT NOT NULL,"
		" paused INTEGER NOT NULL) WITHOUT ROWID;"
		"INSERT INTO groups VALUES ('build', 2, 1, '50,30,15,5', 'local',"
		" 0);"
		"PRAGMA application_id = 0x524f4b4a; PRAGMA user_version = 2",
		NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	ck_assert_int_eq(jopen(err, sizeof(err)), 0);
	ck_assert_int_eq(jquery("PRAGMA user_version"), JOURNAL_SCHEMA_VERSION);
	ck_assert_int_eq(jquery("SELECT parallel FROM groups WHERE name = "
	                        "'build'"), 2);
	/* Step 6: the row has a partition now, none. */
	ck_assert_int_eq(jquery("SELECT partition = '' FROM groups WHERE "
	                        "name = 'build'"), 1);
	ck_assert_int_eq(jquery("SELECT run = 1 AND next_us = 0 FROM tasks "
	                        "WHERE id = 3"), 1);
	jcleanup();
}
END_TEST

/* ---- the journal thread ---------------------------------------------- */

static sem_t jdone;
static _Atomic int jdone_err = 1;

static void jdone_cb(void *arg, int err, const char *msg)
{
	(void)arg;
	(void)msg;
	atomic_store(&jdone_err, err);
	sem_post(&jdone);
}

static void jstart(void)
{
	char err[512];

	jsetup();
	ck_assert_int_eq(sem_init(&jdone, 0, 0), 0);
	ck_assert_int_eq(journal_open(err, sizeof(err)), 0);
	ck_assert_int_eq(rok_start(), 0);
	ck_assert_int_eq(journal_recover(err, sizeof(err)), 0);
	ck_assert_int_eq(journal_start(), 0);
}

/* Journals a spawn of `kind` with id `id`; jdone is posted at its
 * commit. */
static void jspawn_send(uint64_t id, const char *kind, uint32_t retry)
{
	TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	uint8_t buf[256];

	spec.kind.data = (uint8_t *)(uintptr_t)kind;
	spec.kind.len = strlen(kind);
	spec.retry = retry;
	struct journal_spawn_item it = {
		.id = id, .uid = 0, .kind = kind, .spec = buf,
		.spec_len = rok__v1__task_spec__pack(&spec, buf),
		.spawned_us = 1,
	};
	ck_assert_int_eq(journal_spawn(&it, 1, jdone_cb, NULL), 0);
}

/* Journals a spawn of `kind` with id `id` and waits for its commit. */
static void jspawn(uint64_t id, const char *kind, uint32_t retry)
{
	jspawn_send(id, kind, retry);
	ck_assert_int_eq(sem_wait(&jdone), 0);
	ck_assert_int_eq(atomic_load(&jdone_err), 0);
}

static _Atomic int jdone_on_reactor = -1;

static void jdone_where_cb(void *arg, int err, const char *msg)
{
	atomic_store(&jdone_on_reactor, reactor_on_thread() ? 1 : 0);
	jdone_cb(arg, err, msg);
}

static void jbarrier_cb(void *arg)
{
	sem_post(arg);
}

/*
 * journal_spawn_any: the callback runs on the journal thread right after
 * the commit; once detached (journal_detach, rokd's last step before
 * rok_stop) the commit is still made but no callback runs anywhere: the
 * journal thread would rok_spawn across rok_stop or after it (starting
 * the runtime again), as would a reactor_call, for a freed connection.
 */
START_TEST(spawn_any_then_detach)
{
	TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	uint8_t buf[256];

	jstart();
	spec.kind.data = (uint8_t *)"noop";
	spec.kind.len = 4;
	for (uint64_t id = 1; id <= 3; id++) {
		struct journal_spawn_item it = {
			.id = id, .uid = 0, .kind = "noop", .spec = buf,
			.spec_len = rok__v1__task_spec__pack(&spec, buf),
			.spawned_us = 1,
		};
		if (id == 2)
			journal_detach();
		ck_assert_int_eq(id == 3 ? journal_spawn(&it, 1, jdone_cb, NULL)
		                         : journal_spawn_any(&it, 1,
		                                             jdone_where_cb,
		                                             NULL), 0);
		if (id > 1)
			continue;
		ck_assert_int_eq(sem_wait(&jdone), 0);
		ck_assert_int_eq(atomic_load(&jdone_err), 0);
		ck_assert_int_eq(atomic_load(&jdone_on_reactor), 0);
	}
	journal_stop();   /* writes what is queued, answers nothing */
	ck_assert_int_eq(jquery("SELECT count(*) FROM tasks"), 3);
	/* The runtime runs on here: a callback handed to the reactor would
	 * run before this call (the calls are run in order), and one run by
	 * the journal thread has run before journal_stop joined it. */
	sem_t barrier;
	ck_assert_int_eq(sem_init(&barrier, 0, 0), 0);
	ck_assert_int_eq(reactor_call(jbarrier_cb, &barrier), 0);
	ck_assert_int_eq(sem_wait(&barrier), 0);
	ck_assert_int_eq(sem_trywait(&jdone), -1);
	jcleanup();
}
END_TEST

/*
 * journal_read_ids by group: none (every row), "default" (rows without a
 * group and those spawned in "default" by name) and a named group (its
 * rows only, through the index by group), in id order from `after`.
 */
START_TEST(read_ids_by_group)
{
	static const char *const grp[] = { NULL, "a", "default", "b", "a" };
	TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	uint8_t buf[256];
	uint64_t ids[8];

	jstart();
	spec.kind.data = (uint8_t *)"noop";
	spec.kind.len = 4;
	for (size_t i = 0; i < sizeof(grp) / sizeof(grp[0]); i++) {
		struct journal_spawn_item it = {
			.id = i + 1, .uid = 0, .kind = "noop", .spec = buf,
			.spec_len = rok__v1__task_spec__pack(&spec, buf),
			.spawned_us = 1,
			.group = (const uint8_t *)grp[i],
			.group_len = grp[i] != NULL ? strlen(grp[i]) : 0,
		};
		ck_assert_int_eq(journal_spawn(&it, 1, jdone_cb, NULL), 0);
		ck_assert_int_eq(sem_wait(&jdone), 0);
		ck_assert_int_eq(atomic_load(&jdone_err), 0);
	}
	ck_assert_int_eq(journal_read_ids(0, 0, NULL, 0, 8, ids), 5);
	ck_assert_int_eq(journal_read_ids(0, 0, "default", 0, 8, ids), 2);
	ck_assert_uint_eq(ids[0], 1);
	ck_assert_uint_eq(ids[1], 3);
	ck_assert_int_eq(journal_read_ids(0, 0, "a", 0, 8, ids), 2);
	ck_assert_uint_eq(ids[0], 2);
	ck_assert_uint_eq(ids[1], 5);
	ck_assert_int_eq(journal_read_ids(0, 0, "a", 2, 8, ids), 1);
	ck_assert_uint_eq(ids[0], 5);
	ck_assert_int_eq(journal_read_ids(0, RT_QUEUED, "b", 0, 8, ids), 1);
	ck_assert_uint_eq(ids[0], 4);
	ck_assert_int_eq(journal_read_ids(0, RT_RUNNING, "b", 0, 8, ids), 0);
	ck_assert_int_eq(journal_read_ids(0, 0, "c", 0, 8, ids), 0);
	journal_stop();
	jcleanup();
}
END_TEST

START_TEST(commit_then_complete)
{
	jstart();
	jspawn(1, "noop", 0);
	/* The callback ran after COMMIT: another connection sees the row. */
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 1"),
	                 RT_QUEUED);
	/* A spawn's row is its id's record: max_id waits for a prune
	 * (prune_keeps_max_id). */
	ck_assert_int_eq(jquery("SELECT value FROM meta WHERE key = 'max_id'"), 0);
	jspawn(2, "noop", 0);
	uint64_t t = jnow_us();
	journal_started(1, t);
	struct journal_finish f = { .id = 1, .state = RT_SUCCEEDED,
	                            .started_us = t, .finished_us = t + 1,
	                            .value = (const uint8_t *)"v",
	                            .value_len = 1 };
	journal_finished(&f);
	/* A second finish of the same task must not change the row. */
	f.state = RT_FAILED;
	f.finished_us = t + 2;
	journal_finished(&f);
	journal_started(2, 11);
	jspawn(3, "noop", 0);   /* the FIFO: committed after the above */
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 1"),
	                 RT_SUCCEEDED);
	ck_assert_int_eq(jquery("SELECT finished_us FROM tasks WHERE id = 1"),
	                 (int64_t)t + 1);
	ck_assert_int_eq(jquery("SELECT started_us FROM tasks WHERE id = 1"),
	                 (int64_t)t);
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 2"),
	                 RT_RUNNING);
	journal_cancel_requested(2);
	journal_stop();   /* writes what is queued */
	ck_assert_int_eq(jquery("SELECT cancel_requested FROM tasks WHERE "
	                        "id = 2"), 1);
	jcleanup();
}
END_TEST

/*
 * The process group of a run: recorded on an unfinished row, forgotten at
 * a new start (a retry) and when journal_exec_gone says the group is gone,
 * and never written to a finished row.
 */
START_TEST(exec_group_rows)
{
	jstart();
	jspawn(1, "exec", 0);
	journal_started(1, 5);
	journal_exec_started(1, 4242, 77);
	jspawn(2, "noop", 0);   /* the FIFO: committed after the above */
	ck_assert_int_eq(jquery("SELECT pgid FROM tasks WHERE id = 1"), 4242);
	ck_assert_int_eq(jquery("SELECT pg_start FROM tasks WHERE id = 1"), 77);
	/* A retry's start forgets the group of the run before. */
	journal_started(1, 6);
	jspawn(3, "noop", 0);
	ck_assert_int_eq(jquery("SELECT pgid IS NULL AND pg_start IS NULL "
	                        "FROM tasks WHERE id = 1"), 1);
	journal_exec_started(1, 4243, 78);
	journal_exec_gone(1);
	jspawn(4, "noop", 0);
	ck_assert_int_eq(jquery("SELECT pgid IS NULL AND pg_start IS NULL "
	                        "FROM tasks WHERE id = 1"), 1);
	/* Finished: a late group record changes nothing. */
	journal_exec_started(1, 4244, 79);
	struct journal_finish f = { .id = 1, .state = RT_SUCCEEDED,
	                            .started_us = 6, .finished_us = jnow_us() };
	journal_finished(&f);
	journal_exec_started(1, 4245, 80);
	journal_started(1, 9);
	jspawn(5, "noop", 0);
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 1"),
	                 RT_SUCCEEDED);
	ck_assert_int_eq(jquery("SELECT started_us FROM tasks WHERE id = 1"), 6);
	ck_assert_int_ne(jquery("SELECT coalesce(pgid, 0) FROM tasks WHERE "
	                        "id = 1"), 4245);
	/* A start, its group and its finish in one go: the row says finished. */
	jspawn(6, "exec", 0);
	journal_started(6, 5);
	journal_exec_started(6, 4246, 81);
	f.id = 6;
	journal_finished(&f);
	journal_stop();
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 6"),
	                 RT_SUCCEEDED);
	jcleanup();
}
END_TEST

/*
 * When a run entered its group's queue: a spawn's insert carries it (a
 * task that queues at once), journal_queued records a release by the gate,
 * a retry's requeue forgets it, and a finished row keeps what it had.
 */
START_TEST(queue_entry_rows)
{
	TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	uint8_t buf[256];

	jstart();
	spec.kind.data = (uint8_t *)"exec";
	spec.kind.len = 4;
	struct journal_spawn_item it = {
		.id = 1, .uid = 0, .kind = "exec", .spec = buf,
		.spec_len = rok__v1__task_spec__pack(&spec, buf),
		.spawned_us = 1234, .queued_us = 1234,
	};
	ck_assert_int_eq(journal_spawn(&it, 1, jdone_cb, NULL), 0);
	ck_assert_int_eq(sem_wait(&jdone), 0);
	ck_assert_int_eq(atomic_load(&jdone_err), 0);
	ck_assert_int_eq(jquery("SELECT queued_us FROM tasks WHERE id = 1"),
	                 1234);
	jspawn(2, "exec", 0);   /* waits in the gate: not queued yet */
	ck_assert_int_eq(jquery("SELECT queued_us FROM tasks WHERE id = 2"), 0);
	journal_queued(2, 5678);
	jspawn(3, "noop", 0);   /* the FIFO: committed after the above */
	ck_assert_int_eq(jquery("SELECT queued_us FROM tasks WHERE id = 2"),
	                 5678);
	journal_started(2, 5700);
	journal_requeued(2, 2, 9000);
	jspawn(4, "noop", 0);
	ck_assert_int_eq(jquery("SELECT queued_us = 0 AND run = 2 AND state = 1 "
	                        "FROM tasks WHERE id = 2"), 1);
	journal_queued(2, 9100);
	struct journal_finish f = { .id = 2, .state = RT_FAILED,
	                            .started_us = 9200,
	                            .finished_us = jnow_us() };
	journal_finished(&f);
	journal_queued(2, 9999);   /* late: the row is final */
	jspawn(5, "noop", 0);
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 2"),
	                 RT_FAILED);
	ck_assert_int_ne(jquery("SELECT queued_us FROM tasks WHERE id = 2"),
	                 9999);
	journal_stop();
	jcleanup();
}
END_TEST

/* A child that leads its own process group and sleeps until killed. */
static pid_t jleader(void)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		setpgid(0, 0);
		for (;;)
			pause();
	}
	/* Also from here: the group exists when this returns. */
	ck_assert_int_eq(setpgid(pid, pid), 0);
	return pid;
}

/*
 * exec_orphans_kill's rules on live groups: a leader that started at the
 * recorded time is ours (killed); one that started at another time holds
 * a reused id (left alone); a group with no process is nothing to do; the
 * group the caller itself runs in is never killed.
 */
START_TEST(orphans_rules)
{
	pid_t reused = jleader(), ours = jleader(), pgrp;
	uint64_t t_reused, t_ours;
	int status;

	jsetup();
	ck_assert_int_eq(exec_orphans_stat(reused, &pgrp, &t_reused), 0);
	ck_assert_int_eq(pgrp, reused);
	ck_assert_int_eq(exec_orphans_stat(ours, &pgrp, &t_ours), 0);
	ck_assert_int_eq(pgrp, ours);
	struct exec_orphans_group g[] = {
		{ .id = 1, .pgid = reused, .start_ticks = t_reused + 1 },
		{ .id = 2, .pgid = ours, .start_ticks = t_ours },
		{ .id = 3, .pgid = 4194305, .start_ticks = 1 },
	};
	ck_assert_uint_eq(exec_orphans_kill(g, 3), 1);
	for (size_t i = 0; i < 3; i++)
		ck_assert(g[i].killed == (g[i].id == 2));
	ck_assert_int_eq(waitpid(ours, &status, 0), ours);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	ck_assert_int_eq(waitpid(reused, &status, WNOHANG), 0);   /* alive */
	kill(reused, SIGKILL);
	ck_assert_int_eq(waitpid(reused, &status, 0), reused);

	/* In a child leading its own group: its own group matches every
	 * rule for a kill, and is spared. */
	pid_t self = fork();
	ck_assert_int_ge(self, 0);
	if (self == 0) {
		uint64_t t;
		setpgid(0, 0);
		if (exec_orphans_stat(getpid(), &pgrp, &t) != 0)
			_exit(2);
		struct exec_orphans_group mine = {
			.id = 4, .pgid = getpid(), .start_ticks = t };
		_exit(exec_orphans_kill(&mine, 1) == 0 && !mine.killed ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(self, &status, 0), self);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);

	uint64_t boot, boot2;
	ck_assert_int_eq(exec_orphans_boot_id(&boot), 0);
	ck_assert_int_eq(exec_orphans_boot_id(&boot2), 0);
	ck_assert_uint_ne(boot, 0);
	ck_assert_uint_eq(boot, boot2);
	ck_assert_uint_lt(boot, (uint64_t)INT64_MAX + 1);
	jcleanup();
}
END_TEST

static sem_t jpruned;
static _Atomic int64_t jpruned_n = -1;

static void jprune_cb(void *arg, int64_t n, const char *msg)
{
	(void)arg;
	(void)msg;
	atomic_store(&jpruned_n, n);
	sem_post(&jpruned);
}

START_TEST(prune_keeps_max_id)
{
	char out[160];

	jstart();
	ck_assert_int_eq(sem_init(&jpruned, 0, 0), 0);
	snprintf(out, sizeof(out), "%s/output", jdir);
	ck_assert_int_eq(mkdir(out, 0700), 0);
	for (uint64_t id = 1; id <= 5; id++) {
		jspawn(id, "noop", 0);
		struct journal_finish f = { .id = id, .state = RT_SUCCEEDED,
		                            .finished_us = jnow_us() };
		if (id < 5)   /* 5 stays queued: never pruned */
			journal_finished(&f);
		snprintf(out, sizeof(out), "%s/output/%llu.log", jdir,
		         (unsigned long long)id);
		int fd = open(out, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		close(fd);
	}
	ck_assert_int_eq(journal_prune(0, 1, UINT64_MAX, jprune_cb, NULL), 0);
	ck_assert_int_eq(sem_wait(&jpruned), 0);
	ck_assert_int_eq(atomic_load(&jpruned_n), 3);   /* 1, 2, 3 */
	ck_assert_int_eq(jquery("SELECT count(*) FROM tasks"), 2);
	snprintf(out, sizeof(out), "%s/output/1.log", jdir);
	ck_assert_int_eq(access(out, F_OK), -1);
	snprintf(out, sizeof(out), "%s/output/4.log", jdir);
	ck_assert_int_eq(access(out, F_OK), 0);
	/* Pruning the newest finished task keeps its id used. */
	ck_assert_int_eq(journal_prune(0, 0, UINT64_MAX, jprune_cb, NULL), 0);
	ck_assert_int_eq(sem_wait(&jpruned), 0);
	ck_assert_int_eq(atomic_load(&jpruned_n), 1);
	ck_assert_int_eq(jquery("SELECT value FROM meta WHERE key = 'max_id'"), 5);
	journal_stop();
	jcleanup();
}
END_TEST

static void jspawn_on_reactor_cb(void *arg)
{
	jspawn_send(*(uint64_t *)arg, "noop", 0);
}

static off_t jdb_size(void)
{
	char path[128];
	struct stat st;

	jpath(path, sizeof(path), "journal.db");
	ck_assert_int_eq(stat(path, &st), 0);
	return st.st_size;
}

/*
 * At durability = normal a spawn on the reactor thread is committed there,
 * and the WAL checkpoint that sqlite would run after such a commit (a copy
 * and two fsyncs, stalling every client) is the journal thread's: it must
 * still happen.  Seen as the database file growing, which only a
 * checkpoint makes it do (every commit goes to the WAL).
 */
START_TEST(checkpoint_after_inline_commits)
{
	jstart();
	off_t before = jdb_size();
	/* One frame a commit at least: the WAL passes the checkpoint mark. */
	for (uint64_t id = 1; id <= 1200; id++) {
		ck_assert_int_eq(reactor_call(jspawn_on_reactor_cb, &id), 0);
		ck_assert_int_eq(sem_wait(&jdone), 0);
		ck_assert_int_eq(atomic_load(&jdone_err), 0);
	}
	double deadline = test_now() + test_timeout(20);
	while (jdb_size() == before) {
		ck_assert_msg(test_now() < deadline, "no checkpoint");
		usleep(1000);
	}
	journal_stop();
	jcleanup();
}
END_TEST

START_TEST(recover_states)
{
	char err[512];

	jstart();
	jspawn(1, "echo", 0);     /* finished */
	jspawn(2, "sleep", 0);    /* running, no retry: interrupted */
	jspawn(3, "sleep", 2);    /* running, retry: queued again */
	jspawn(4, "noop", 0);     /* queued: runs again */
	jspawn(5, "sleep", 0);    /* running, cancel requested: cancelled */
	struct journal_finish f = { .id = 1, .state = RT_SUCCEEDED,
	                            .finished_us = jnow_us() };
	journal_finished(&f);
	journal_started(2, 5);
	/* A group no process can be in (above the largest pid_max): the
	 * /proc scan finds nothing to kill. */
	journal_exec_started(2, 4194305, 1);
	journal_started(3, 5);
	journal_started(5, 5);
	journal_cancel_requested(5);
	jspawn(6, "noop", 0);
	journal_stop();
	/* ("sleep" without a duration fails its check when recovery runs
	 * it again: recorded failed, which this test does not look at.) */
	ck_assert_int_eq(jquery("SELECT count(*) FROM tasks"), 6);
	/* Recovery as at the next start (same process: the table is new). */
	tasktab_free();
	ck_assert_int_eq(tasktab_init(), 0);
	ck_assert_int_eq(journal_open(err, sizeof(err)), 0);
	ck_assert_int_eq(journal_recover(err, sizeof(err)), 0);
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 2"),
	                 RT_INTERRUPTED);
	ck_assert_int_eq(jquery("SELECT reason NOT LIKE '%killed%' FROM tasks "
	                        "WHERE id = 2"), 1);
	ck_assert_int_gt(jquery("SELECT value FROM meta WHERE key = 'boot'"), 0);
	ck_assert_int_eq(jquery("SELECT retries FROM tasks WHERE id = 3"), 1);
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 5"),
	                 RT_CANCELLED);
	ck_assert_int_eq(jquery("SELECT state FROM tasks WHERE id = 1"),
	                 RT_SUCCEEDED);
	/* The finished one is read back from the journal. */
	TaskInfo info;
	tasktab_info(1, 0, &info);
	ck_assert_ptr_null(info.error);
	ck_assert_int_eq(info.state, RT_SUCCEEDED);
	tasktab_info_free(&info);
	/* New ids continue above the largest. */
	TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	struct rtask *r;
	ck_assert_int_eq(tasktab_create(0, &kind_noop, &spec, &r), 0);
	ck_assert_uint_gt(tasktab_id(r), 6);
	tasktab_discard(r);
	ck_assert_int_eq(journal_start(), 0);
	journal_stop();
	jcleanup();
}
END_TEST

/* durability = off: no journal thread, so every update is dropped at
 * once; one kept would sit in the queue until journal_stop (memory that
 * grows with each retry, start or finish while rokd runs).  Measured with
 * glibc's allocator (a sanitizer's replaces it: then nothing is seen). */
START_TEST(durability_off_keeps_no_update)
{
	char err[512];

	jsetup();
	config.durability_off = true;
	ck_assert_int_eq(journal_open(err, sizeof(err)), 0);
	ck_assert_int_eq(journal_start(), 0);
	size_t before = mallinfo2().uordblks;
	for (uint64_t id = 1; id <= 1000; id++) {
		struct journal_finish f = { .id = id, .state = RT_SUCCEEDED,
		                            .reason = "done" };
		journal_started(id, 1);
		journal_exec_started(id, 7, 1);
		journal_requeued(id, 2, 1);
		journal_queued(id, 1);
		journal_exec_gone(id);
		journal_cancel_requested(id);
		journal_finished(&f);
	}
	size_t after = mallinfo2().uordblks;
	ck_assert_msg(after <= before + 4096, "%zu bytes kept for 7000 "
	              "updates with durability = off", after - before);
	journal_stop();
	jcleanup();
}
END_TEST

static Suite *journal_suite(void)
{
	const struct test_case cases[] = {
		{ "schema_new_and_reopen", schema_new_and_reopen },
		{ "schema_refuses_unchanged", schema_refuses_unchanged },
		{ "schema_migrates_1_to_4", schema_migrates_1_to_4 },
		{ "schema_migrates_2_with_groups",
		  schema_migrates_2_with_groups },
		{ "commit_then_complete", commit_then_complete },
		{ "read_ids_by_group", read_ids_by_group },
		{ "spawn_any_then_detach", spawn_any_then_detach },
		{ "exec_group_rows", exec_group_rows },
		{ "queue_entry_rows", queue_entry_rows },
		{ "orphans_rules", orphans_rules },
		{ "prune_keeps_max_id", prune_keeps_max_id },
		{ "checkpoint_after_inline_commits",
		  checkpoint_after_inline_commits },
		{ "recover_states", recover_states },
		{ "durability_off_keeps_no_update",
		  durability_off_keeps_no_update },
	};
	return TEST_SUITE("journal", cases, 30);
}

int main(void)
{
	return test_run(journal_suite());
}
