/*
 * journal-prune.c — retention: deleting finished tasks from the journal,
 * with their output files.
 *
 * Journal thread only (it owns the write connection), between batches: a
 * prune is queued like any event (journal_prune), and the thread also
 * applies rokd.conf's keep_finished / keep_finished_per_user /
 * keep_finished_for every minute.  Rows
 * go in chunks of JOURNAL_PRUNE_CHUNK, each chunk its own transaction, so a
 * large prune never makes one huge transaction; a chunk's output files are
 * unlinked after it committed (a crash in between leaves an orphan file,
 * never a row whose output is gone).  Only finished rows are touched:
 * queued and running tasks are never pruned.  Each chunk first raises
 * meta.max_id to the largest id in the table, so pruning the newest task
 * cannot make its id be handed out again; spawns do not write max_id (a
 * second page per commit on the acknowledgement path), since the
 * largest id handed out is max(meta.max_id, the largest row) until a
 * prune deletes rows.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "exec.h"
#include "journal.h"

#define JOURNAL_PRUNE_CHUNK 1000

/* The id below which finished tasks are beyond the `keep` newest: 0 when
 * there are not that many. */
static int journal_prune_cutoff(sqlite3 *db, uint64_t keep, uint64_t *cut)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, "SELECT id FROM tasks WHERE state >= 3 "
	                            "ORDER BY id DESC LIMIT 1 OFFSET ?1", -1,
	                            &st, NULL);

	*cut = 0;
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int64(st, 1, keep > INT64_MAX ? INT64_MAX
	                                          : (sqlite3_int64)keep);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		*cut = (uint64_t)sqlite3_column_int64(st, 0) + 1;
	sqlite3_finalize(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/*
 * Deletes, a chunk per transaction, the rows `sel` names: its ?1 is the id
 * to continue after (it returns ids in increasing order, at most
 * JOURNAL_PRUNE_CHUNK), its other parameters are bound by the caller.
 * Adds the count to *total; SQLITE_OK or the error.
 */
static int journal_prune_chunks(sqlite3 *db, sqlite3_stmt *sel,
                                sqlite3_stmt *del, int64_t *total)
{
	uint64_t after = 0, ids[JOURNAL_PRUNE_CHUNK];
	int rc;

	for (;;) {
		size_t n = 0;
		sqlite3_bind_int64(sel, 1, (sqlite3_int64)after);
		while (n < JOURNAL_PRUNE_CHUNK &&
		       (rc = sqlite3_step(sel)) == SQLITE_ROW)
			ids[n++] = (uint64_t)sqlite3_column_int64(sel, 0);
		sqlite3_reset(sel);
		if (n < JOURNAL_PRUNE_CHUNK && rc != SQLITE_DONE)
			return rc;
		if (n == 0)
			return SQLITE_OK;
		rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(db, "UPDATE meta SET value = (SELECT "
			                  "max(id) FROM tasks) WHERE key = "
			                  "'max_id' AND value < (SELECT max(id) "
			                  "FROM tasks)", NULL, NULL, NULL);
		for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
			sqlite3_bind_int64(del, 1, (sqlite3_int64)ids[i]);
			rc = sqlite3_step(del);
			sqlite3_reset(del);
			if (rc == SQLITE_DONE)
				rc = SQLITE_OK;
		}
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
		if (rc != SQLITE_OK) {
			if (!sqlite3_get_autocommit(db))
				(void)sqlite3_exec(db, "ROLLBACK", NULL, NULL,
				                   NULL);
			return rc;
		}
		for (size_t i = 0; i < n; i++) {
			tasktab_forget(ids[i]);
			exec_out_forget(ids[i]);
		}
		*total += (int64_t)n;
		after = ids[n - 1];
		if (n < JOURNAL_PRUNE_CHUNK)
			return SQLITE_OK;
	}
}

int64_t journal_prune_run(sqlite3 *db, uint64_t before_us, uint64_t keep,
                          uint64_t keep_per_user)
{
	sqlite3_stmt *sel = NULL, *del = NULL;
	uint64_t cut = 0;
	int64_t total = 0;
	int rc;

	if (keep != UINT64_MAX &&
	    (rc = journal_prune_cutoff(db, keep, &cut)) != SQLITE_OK)
		goto fail;
	rc = sqlite3_prepare_v2(db, "DELETE FROM tasks WHERE id = ?1", -1,
	                        &del, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	if (cut != 0 || before_us != 0) {
		rc = sqlite3_prepare_v2(db, "SELECT id FROM tasks WHERE id > ?1 "
		                        "AND state >= 3 AND (id < ?2 OR "
		                        "finished_us < ?3) ORDER BY id LIMIT ?4",
		                        -1, &sel, NULL);
		if (rc != SQLITE_OK)
			goto fail;
		sqlite3_bind_int64(sel, 2, (sqlite3_int64)cut);
		sqlite3_bind_int64(sel, 3, (sqlite3_int64)before_us);
		sqlite3_bind_int(sel, 4, JOURNAL_PRUNE_CHUNK);
		if ((rc = journal_prune_chunks(db, sel, del, &total)) !=
		    SQLITE_OK)
			goto fail;
		sqlite3_finalize(sel);
		sel = NULL;
	}
	/*
	 * Per uid: a user's finished tasks beyond its keep_per_user newest,
	 * so that one user's flood prunes that user's results, not
	 * everyone's.  A scan of the finished rows: retention runs once a
	 * minute, off the hot path.
	 */
	if (keep_per_user != UINT64_MAX) {
		rc = sqlite3_prepare_v2(db, "SELECT id FROM (SELECT id, "
		                        "row_number() OVER (PARTITION BY uid "
		                        "ORDER BY id DESC) AS n FROM tasks "
		                        "WHERE state >= 3) WHERE n > ?2 AND "
		                        "id > ?1 ORDER BY id LIMIT ?3", -1,
		                        &sel, NULL);
		if (rc != SQLITE_OK)
			goto fail;
		sqlite3_bind_int64(sel, 2, keep_per_user > INT64_MAX
		                           ? INT64_MAX
		                           : (sqlite3_int64)keep_per_user);
		sqlite3_bind_int(sel, 3, JOURNAL_PRUNE_CHUNK);
		if ((rc = journal_prune_chunks(db, sel, del, &total)) !=
		    SQLITE_OK)
			goto fail;
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(del);
	return total;
fail:
	log_warnx("prune: %s", sqlite3_errstr(rc));
	sqlite3_finalize(sel);
	sqlite3_finalize(del);
	return (rc & 0xff) == SQLITE_FULL ? -ENOSPC : -EIO;
}

void journal_prune_retention(sqlite3 *db)
{
	uint64_t before = 0;
	/* The journal thread: see CONFIG_LIMIT. */
	int64_t for_ns = CONFIG_LIMIT(keep_finished_for_ns);

	if (for_ns > 0) {
		struct timeval tv;
		gettimeofday(&tv, NULL);
		uint64_t now = (uint64_t)tv.tv_sec * 1000000 +
		               (uint64_t)tv.tv_usec;
		uint64_t age = (uint64_t)(for_ns / 1000);
		before = now > age ? now - age : 0;
	}
	int64_t n = journal_prune_run(db, before, CONFIG_LIMIT(keep_finished),
	                              CONFIG_LIMIT(keep_finished_per_user));
	if (n > 0)
		log_info("journal: pruned %lld finished tasks (retention)",
		         (long long)n);
}
