/*
 * fuzz_journal.c — a libFuzzer target over opening and recovering a
 * damaged journal (daemon/journal-schema.c, journal-recover.c, and what
 * reads rows back: journal-read.c, journal-prune.c, the journal thread).
 *
 * Each input is the bytes of STATE_DIR/journal.db (no WAL beside it).  The
 * harness does what rokd does at start: journal_open, journal_recover,
 * journal_start, then lists every task (rows read back through
 * journal-read.c), lets the tasks recovery started take their first polls
 * and cancels them (fuzz_tasks_settle), and stops the journal.  Whatever
 * the file holds, opening and recovery either succeed or fail with a
 * sentence for people; they must not crash, hang, or leak.  The runtime
 * runs for the whole process; the task table and the journal are made
 * anew for every input.
 *
 * Nothing here may touch the machine: exec tasks fail (exec_init is not
 * called), and exec-orphans.c is not linked: the stubs below give a fixed
 * boot id (so rows whose groups would be looked for reach that code) and
 * kill nothing, whatever pgid a row names.
 *
 * Seeds: with FUZZ_JOURNAL_SEEDS=DIR in the environment, the harness writes
 * journals into DIR and exits instead (scripts/fuzz does that first): a
 * journal made by this code through the journal's own API, with tasks in
 * every state, and copies of it changed at the SQL level (wrong types,
 * NULLs, values at the edges, a missing table, old and future schema
 * versions).  They follow the schema as it is at every run.
 */
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "fuzz_tasks.h"
#include "journal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* "rokfuzz1", top bit clear as exec_orphans_boot_id promises. */
#define FUZZ_BOOT 0x726f6b66757a7a31ull

static char fuzz_dir[64];

/* ---- exec-orphans.c, stubbed ------------------------------------------- */

int exec_orphans_stat(pid_t pid, pid_t *pgrp, uint64_t *start_ticks)
{
	(void)pid;
	*pgrp = 0;
	*start_ticks = 0;
	return -ENOSYS;
}

int exec_orphans_boot_id(uint64_t *id)
{
	*id = FUZZ_BOOT;
	return 0;
}

/* Every group "killed", none really: journal_recover_note runs too. */
size_t exec_orphans_kill(struct exec_orphans_group *g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		g[i].killed = true;
	return n;
}

/* ---- files ---------------------------------------------------------------- */

static void fuzz_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", fuzz_dir, name);
}

/* Removes the journal's files (output files, if any, stay: harmless). */
static void fuzz_clean(void)
{
	static const char *const names[] = {
		"journal.db", "journal.db-wal", "journal.db-shm",
		"journal.db-journal",
	};
	char path[128];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		fuzz_path(path, sizeof(path), names[i]);
		unlink(path);
	}
}

static void fuzz_cleanup(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_dir);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_journal: could not remove %s\n", fuzz_dir);
}

static void fuzz_write(const char *path, const uint8_t *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		abort();
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			abort();
		p += w;
		n -= (size_t)w;
	}
	close(fd);
}

/* ---- one run of rokd's start ------------------------------------------- */

/* A refusal must say why, in a terminated sentence. */
static void fuzz_check_err(const char *err, size_t len)
{
	if (memchr(err, '\0', len) == NULL || err[0] == '\0')
		abort();
}

/* Every task as root sees it, a page at a time (journal rows included). */
static void fuzz_list_all(void)
{
	enum { PAGE = 64 };
	uint64_t after = 0;
	bool more = true;

	for (int pages = 0; more && pages < 16; pages++) {
		TaskInfo **infos = tasktab_infos_new(PAGE);
		if (infos == NULL)
			return;
		size_t n = tasktab_list(0, 0, NULL, after, PAGE, SIZE_MAX, infos,
		                        &more);
		for (size_t i = 0; i < n; i++)
			after = infos[i]->id;
		tasktab_infos_free(infos, PAGE);
		more = more && n > 0;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[128], err[512];

	fuzz_clean();
	fuzz_path(path, sizeof(path), "journal.db");
	fuzz_write(path, data, size);
	if (tasktab_init() < 0)
		abort();
	memset(err, 0x55, sizeof(err));
	if (journal_open(err, sizeof(err)) < 0) {
		fuzz_check_err(err, sizeof(err));
	} else if (memset(err, 0x55, sizeof(err)),
	           journal_recover(err, sizeof(err)) < 0) {
		fuzz_check_err(err, sizeof(err));
	} else {
		if (journal_start() < 0)
			abort();
		fuzz_list_all();
	}
	fuzz_tasks_settle();
	journal_stop();
	tasktab_free();
	return 0;
}

/* ---- seeds ---------------------------------------------------------------- */

static sem_t fuzz_seed_sem;
static _Atomic int fuzz_seed_err;

static void fuzz_seed_done(void *arg, int err, const char *msg)
{
	(void)arg;
	(void)msg;
	atomic_store_explicit(&fuzz_seed_err, err, memory_order_relaxed);
	sem_post(&fuzz_seed_sem);   /* publishes the store to the waiter */
}

/* Journals the spawn of one task (kind, one arg or none) and waits for
 * its commit. */
static void fuzz_seed_spawn(uint64_t id, uid_t uid, const char *kind,
                            const char *arg, uint32_t retry)
{
	TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	ProtobufCBinaryData a = { arg != NULL ? strlen(arg) : 0,
	                          (uint8_t *)(uintptr_t)arg };
	uint8_t buf[512];

	spec.kind = (ProtobufCBinaryData){ strlen(kind),
	                                   (uint8_t *)(uintptr_t)kind };
	if (arg != NULL) {
		spec.args = &a;
		spec.n_args = 1;
	}
	spec.retry = retry;
	spec.timeout_ms = id * 1000;
	if (rok__v1__task_spec__get_packed_size(&spec) > sizeof(buf))
		abort();
	struct journal_spawn_item it = {
		.id = id, .uid = uid, .kind = kind, .spec = buf,
		.spec_len = rok__v1__task_spec__pack(&spec, buf),
		.spawned_us = 1700000000000000ull + id,
	};
	if (journal_spawn(&it, 1, fuzz_seed_done, NULL) != 0 ||
	    sem_wait(&fuzz_seed_sem) != 0 ||
	    atomic_load_explicit(&fuzz_seed_err, memory_order_relaxed) != 0)
		abort();
}

/* The base journal: tasks in every state, written by the journal thread
 * as rokd writes them; then recovery's meta.boot for the group rows. */
static void fuzz_seed_base(void)
{
	char err[512];
	uint64_t t = 1700000001000000ull;

	if (tasktab_init() < 0 || journal_open(err, sizeof(err)) < 0 ||
	    journal_recover(err, sizeof(err)) < 0 || journal_start() < 0) {
		fprintf(stderr, "fuzz_journal: seed: %s\n", err);
		exit(1);
	}
	fuzz_seed_spawn(1, 0, "echo", "value", 0);       /* succeeded */
	fuzz_seed_spawn(2, 1000, "exec", "/bin/false", 0); /* failed, exit 1 */
	fuzz_seed_spawn(3, 1000, "exec", "/bin/sleep", 3); /* killed: signal */
	fuzz_seed_spawn(4, 0, "sleep", "10ms", 0);       /* cancelled */
	fuzz_seed_spawn(5, 0, "sleep", "1h", 0);         /* timed out */
	fuzz_seed_spawn(6, 0, "sleep", "20ms", 2);       /* running, retry */
	fuzz_seed_spawn(7, 1000, "exec", "/bin/true", 0); /* running, group */
	fuzz_seed_spawn(8, 0, "sleep", "30ms", 0);       /* running, cancel */
	fuzz_seed_spawn(9, 0, "noop", NULL, 0);          /* queued */
	fuzz_seed_spawn(10, 1000, "echo", "queued", 1);  /* queued */
	fuzz_seed_spawn(11, 0, "bogus", NULL, 0);        /* queued, unknown */
	static const struct journal_finish fin[] = {
		{ .id = 1, .state = RT_SUCCEEDED, .value = (const uint8_t *)"value",
		  .value_len = 5 },
		{ .id = 2, .state = RT_FAILED, .has_exit_code = true,
		  .exit_code = 1, .reason = "exited with status 1" },
		{ .id = 3, .state = RT_FAILED, .has_signal = true, .signal = 9,
		  .reason = "killed by signal 9", .output_truncated = true },
		{ .id = 4, .state = RT_CANCELLED, .reason = "cancelled" },
		{ .id = 5, .state = RT_TIMED_OUT, .reason = "timed out" },
	};
	for (size_t i = 0; i < sizeof(fin) / sizeof(fin[0]); i++) {
		struct journal_finish f = fin[i];
		f.started_us = t + i;
		f.finished_us = t + i + 1;
		journal_started(f.id, f.started_us);
		journal_finished(&f);
	}
	for (uint64_t id = 6; id <= 8; id++)
		journal_started(id, t + id);
	journal_exec_started(7, 4194305, 12345);
	journal_cancel_requested(8);
	journal_stop();
	tasktab_free();
}

/* The SQL applied to a copy of the base journal for each changed seed. */
static const char *const fuzz_seed_sql[] = {
	"INSERT OR REPLACE INTO meta VALUES ('boot', 8245927530540464689)",
	"UPDATE tasks SET spec = 'garbage' WHERE state IN (1, 2)",
	"UPDATE tasks SET spec = x'' WHERE state IN (1, 2)",
	/* sleep 1440h100ms: a far timer filed at recovery */
	"UPDATE tasks SET spec = x'0a05736c656570120a31343430683130306d' "
	"WHERE id = 9",
	"UPDATE tasks SET spec = zeroblob(3000) WHERE id = 9",
	"UPDATE tasks SET state = 99 WHERE id = 1",
	"UPDATE tasks SET state = -1 WHERE id = 2",
	"UPDATE tasks SET state = 'running' WHERE id = 6",
	"UPDATE tasks SET state = 1",
	"UPDATE tasks SET state = 2, pgid = id + 1, pg_start = 1",
	"UPDATE tasks SET uid = -1",
	"UPDATE tasks SET uid = 4294967296 WHERE id = 9",
	"UPDATE tasks SET retries = 9223372036854775807",
	"UPDATE tasks SET retries = -1 WHERE id = 6",
	"UPDATE tasks SET id = 9223372036854775807 WHERE id = 9",
	"UPDATE tasks SET id = -5 WHERE id = 10",
	"UPDATE tasks SET id = 0 WHERE id = 9",
	"UPDATE meta SET value = 9223372036854775807 WHERE key = 'max_id'",
	"UPDATE meta SET value = -1 WHERE key = 'max_id'",
	"UPDATE meta SET value = 'many' WHERE key = 'max_id'",
	"DELETE FROM meta",
	"DROP TABLE meta",
	"DROP TABLE tasks",
	"UPDATE tasks SET value = zeroblob(20000) WHERE id = 1",
	"UPDATE tasks SET value = 'text', reason = x'00ff00', exit_code = 'x', "
	"signal = 1e300 WHERE id IN (1, 2, 3)",
	"UPDATE tasks SET reason = NULL, value = NULL, exit_code = NULL",
	"UPDATE tasks SET spawned_us = -1, started_us = -1, finished_us = -1",
	"UPDATE tasks SET finished_us = 9223372036854775807, spawned_us = "
	"9223372036854775807",
	"UPDATE tasks SET kind = 'bogus'",
	"UPDATE tasks SET kind = x'ff'",
	"UPDATE tasks SET cancel_requested = 'yes'",
	"UPDATE tasks SET pgid = 1, pg_start = -1 WHERE id = 7",
	"UPDATE tasks SET pgid = -1 WHERE id = 7",
	"UPDATE tasks SET pgid = 2147483648 WHERE id = 7",
	"UPDATE tasks SET pgid = 'abc' WHERE id = 7",
	"UPDATE tasks SET output_truncated = 2",
	"UPDATE tasks SET queued_us = -1",
	"UPDATE tasks SET queued_us = 9223372036854775807 WHERE id IN (1, 3)",
	"UPDATE tasks SET queued_us = 'soon', state = 1",
	"ALTER TABLE tasks DROP COLUMN pg_start; ALTER TABLE tasks DROP COLUMN "
	"pgid; PRAGMA user_version = 1",
	"PRAGMA user_version = 1",
	"PRAGMA user_version = 0",
	"PRAGMA user_version = 3",
	"PRAGMA user_version = -1",
	"PRAGMA application_id = 1",
	"CREATE TABLE extra (x); INSERT INTO extra VALUES (1)",
	"CREATE INDEX tasks_state ON tasks (state)",
};

static int fuzz_seed_copy(const char *from, const char *to)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	return system(cmd) == 0 ? 0 : -1;
}

static void fuzz_seeds(const char *out)
{
	char base[128], path[4200], err[256];

	if (sem_init(&fuzz_seed_sem, 0, 0) != 0)
		abort();
	fuzz_seed_base();
	fuzz_path(base, sizeof(base), "journal.db");
	snprintf(path, sizeof(path), "%s/journal_base", out);
	if (fuzz_seed_copy(base, path) < 0)
		exit(1);
	/* A new, empty journal (what a first start writes). */
	fuzz_clean();
	if (tasktab_init() < 0 || journal_open(err, sizeof(err)) < 0)
		exit(1);
	journal_stop();
	tasktab_free();
	snprintf(path, sizeof(path), "%s/journal_new", out);
	if (fuzz_seed_copy(base, path) < 0)
		exit(1);
	for (size_t i = 0; i < sizeof(fuzz_seed_sql) / sizeof(fuzz_seed_sql[0]);
	     i++) {
		sqlite3 *db;
		char *msg = NULL;
		snprintf(path, sizeof(path), "%s/journal_sql_%02zu", out, i);
		snprintf(base, sizeof(base), "%s/journal_base", out);
		if (fuzz_seed_copy(base, path) < 0 ||
		    sqlite3_open(path, &db) != SQLITE_OK)
			exit(1);
		/* The checkpoint at close folds the WAL into the file. */
		if (sqlite3_exec(db, fuzz_seed_sql[i], NULL, NULL, &msg) !=
		    SQLITE_OK) {
			fprintf(stderr, "fuzz_journal: seed %zu: %s: %s\n", i,
			        fuzz_seed_sql[i], msg != NULL ? msg : "?");
			exit(1);
		}
		sqlite3_free(msg);
		if (sqlite3_close(db) != SQLITE_OK)
			exit(1);
	}
	/* Not a database at all, and an empty file. */
	snprintf(path, sizeof(path), "%s/journal_text", out);
	fuzz_write(path, (const uint8_t *)"not a journal\n", 14);
	snprintf(path, sizeof(path), "%s/journal_empty", out);
	fuzz_write(path, (const uint8_t *)"", 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_init(0);
	config_defaults(&config);
	config.durability_full = false;
	config.max_queued = 10000;
	config.max_finished = 10000;
	setenv("ROK_WORKERS", "2", 1);
	/* In memory where there is a /dev/shm: a journal per input. */
	snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/fuzz_journal.XXXXXX",
	         access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (mkdtemp(fuzz_dir) == NULL)
		abort();
	atexit(fuzz_cleanup);
	free(config.state_dir);
	config.state_dir = strdup(fuzz_dir);
	if (config.state_dir == NULL || rok_start() < 0)
		abort();
	const char *seeds = getenv("FUZZ_JOURNAL_SEEDS");
	if (seeds != NULL) {
		fuzz_seeds(seeds);
		exit(0);
	}
	return 0;
}
