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
 * which the next start removes, never a row whose output is gone), and
 * their bytes given back to their uids' max_kept_output_per_user.
 * Between chunks the prune yields (journal_prune_yield): what was queued
 * meanwhile is committed and answered, so spawns wait for one chunk, not
 * for the whole prune, and rokd's stop ends the prune there (the next one
 * does the rest).  Each
 * chunk's query resumes after the last id it returned, so a prune reads
 * the rows it passes once, not once per chunk.  Per uid, one pass over
 * the finished rows, newest first and itself in chunks, finds each uid's
 * cutoff (its keep_per_user-th newest); then one pass, oldest first up to
 * the highest cutoff, deletes each row below its uid's cutoff whose uid
 * has more than keep_per_user (there is no index on uid: the hot path
 * writes none).
 * Only finished rows are touched:
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
 * Deletes the n rows ids (of tasks run as uids) in one transaction, then
 * forgets them and their output files; adds n to *total.  SQLITE_OK or
 * the error (rolled back).
 */
static int journal_prune_delete(sqlite3 *db, sqlite3_stmt *del,
                                const uint64_t *ids, const uid_t *uids,
                                size_t n, int64_t *total)
{
	int rc = sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);

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
			(void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		tasktab_forget(ids[i]);
		exec_out_forget(ids[i], uids[i], 0);
	}
	*total += (int64_t)n;
	return SQLITE_OK;
}

/*
 * Deletes, a chunk per transaction, the rows `sel` names: its ?1 is the id
 * to continue after (it returns ids and uids in increasing order of id, at
 * most JOURNAL_PRUNE_CHUNK), its other parameters are bound by the
 * caller.
 * Adds the count to *total; SQLITE_OK, SQLITE_INTERRUPT when rokd stops
 * between two chunks, or the error.
 */
static int journal_prune_chunks(sqlite3 *db, sqlite3_stmt *sel,
                                sqlite3_stmt *del, int64_t *total)
{
	uint64_t after = 0, ids[JOURNAL_PRUNE_CHUNK];
	uid_t uids[JOURNAL_PRUNE_CHUNK];
	int rc;

	for (;;) {
		size_t n = 0;
		sqlite3_bind_int64(sel, 1, (sqlite3_int64)after);
		while (n < JOURNAL_PRUNE_CHUNK &&
		       (rc = sqlite3_step(sel)) == SQLITE_ROW) {
			ids[n] = (uint64_t)sqlite3_column_int64(sel, 0);
			uids[n++] = (uid_t)sqlite3_column_int64(sel, 1);
		}
		sqlite3_reset(sel);
		if (n < JOURNAL_PRUNE_CHUNK && rc != SQLITE_DONE)
			return rc;
		if (n == 0)
			return SQLITE_OK;
		if ((rc = journal_prune_delete(db, del, ids, uids, n,
		                               total)) != SQLITE_OK)
			return rc;
		after = ids[n - 1];
		if (n < JOURNAL_PRUNE_CHUNK)
			return SQLITE_OK;
		if (!journal_prune_yield())
			return SQLITE_INTERRUPT;
	}
}

/* A uid's finished rows seen so far, newest first, and the id of its
 * keep-th newest (0: fewer seen). */
struct journal_prune_user {
	int64_t uid;
	uint64_t seen, cut;
	bool used;
};

/* Open addressing on uid; the table never holds more than half its slots. */
struct journal_prune_users {
	struct journal_prune_user *slot;
	size_t mask, n;
};

static size_t journal_prune_hash(int64_t uid)
{
	/* murmur3's finalizer: every bit of the uid in the low ones. */
	uint64_t h = (uint64_t)uid;

	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (size_t)h;
}

/* The entry of uid, added if new; NULL when out of memory. */
static struct journal_prune_user *journal_prune_user(
	struct journal_prune_users *us, int64_t uid)
{
	size_t i;

	if (us->slot != NULL) {
		for (i = journal_prune_hash(uid) & us->mask; us->slot[i].used;
		     i = (i + 1) & us->mask)
			if (us->slot[i].uid == uid)
				return &us->slot[i];
	}
	if (us->slot == NULL || (us->n + 1) * 2 > us->mask + 1) {
		size_t cap = us->slot == NULL ? 16 : (us->mask + 1) * 2;
		struct journal_prune_user *s = calloc(cap, sizeof(*s));
		if (s == NULL)
			return NULL;
		for (size_t j = 0; us->slot != NULL && j <= us->mask; j++) {
			if (!us->slot[j].used)
				continue;
			for (i = journal_prune_hash(us->slot[j].uid) &
			         (cap - 1); s[i].used; i = (i + 1) & (cap - 1))
				;
			s[i] = us->slot[j];
		}
		free(us->slot);
		us->slot = s;
		us->mask = cap - 1;
	}
	for (i = journal_prune_hash(uid) & us->mask; us->slot[i].used;
	     i = (i + 1) & us->mask)
		;
	us->slot[i] = (struct journal_prune_user){ .uid = uid, .used = true };
	us->n++;
	return &us->slot[i];
}

/*
 * Finds each uid's cutoff: one pass over the finished rows, newest first,
 * JOURNAL_PRUNE_CHUNK at a time with a yield between.  A row that
 * finishes meanwhile (a newer id than the pass has reached) goes
 * uncounted: its uid keeps one row more, never one less.  SQLITE_OK, SQLITE_INTERRUPT (rokd
 * stops) or the error.
 */
static int journal_prune_count(sqlite3 *db, uint64_t keep,
                               struct journal_prune_users *us)
{
	sqlite3_stmt *st;
	int64_t before = INT64_MAX;
	int rc = sqlite3_prepare_v2(db, "SELECT id, uid FROM tasks WHERE "
	                            "id < ?1 AND state >= 3 ORDER BY id DESC "
	                            "LIMIT ?2", -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int(st, 2, JOURNAL_PRUNE_CHUNK);
	for (;;) {
		int n = 0;
		sqlite3_bind_int64(st, 1, before);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			struct journal_prune_user *u;
			before = sqlite3_column_int64(st, 0);
			n++;
			u = journal_prune_user(us, sqlite3_column_int64(st, 1));
			if (u == NULL) {
				rc = SQLITE_NOMEM;
				break;
			}
			if (++u->seen == keep)
				u->cut = (uint64_t)before;
		}
		sqlite3_reset(st);
		if (rc != SQLITE_DONE)
			break;
		rc = SQLITE_OK;
		if (n < JOURNAL_PRUNE_CHUNK)
			break;
		if (!journal_prune_yield()) {
			rc = SQLITE_INTERRUPT;
			break;
		}
	}
	sqlite3_finalize(st);
	return rc;
}

/*
 * Per uid: a user's finished tasks beyond its keep_per_user newest, so
 * that one user's flood prunes that user's results, not everyone's.
 * keep_per_user is not 0 (the caller deletes every finished row then).
 * After the count, one pass over the finished rows, oldest first, up to
 * the highest cutoff, JOURNAL_PRUNE_CHUNK rows read per chunk with a yield
 * between: a row goes if its uid has more than keep_per_user and it is
 * below that uid's cutoff.  Linear however many users are past their
 * quota (a scan per such user was quadratic in them).
 */
static int journal_prune_per_user(sqlite3 *db, sqlite3_stmt *del,
                                  uint64_t keep_per_user, int64_t *total)
{
	struct journal_prune_users us = { NULL, 0, 0 };
	sqlite3_stmt *sel = NULL;
	uint64_t top = 0, after = 0, ids[JOURNAL_PRUNE_CHUNK];
	uid_t uids[JOURNAL_PRUNE_CHUNK];
	int rc = journal_prune_count(db, keep_per_user, &us);

	for (size_t i = 0; rc == SQLITE_OK && us.slot != NULL && i <= us.mask;
	     i++) {
		struct journal_prune_user *u = &us.slot[i];
		if (u->used && u->seen > keep_per_user && u->cut > top)
			top = u->cut;
	}
	if (rc == SQLITE_OK && top != 0)
		rc = sqlite3_prepare_v2(db, "SELECT id, uid FROM tasks WHERE "
		                        "id > ?1 AND id < ?2 AND state >= 3 "
		                        "ORDER BY id LIMIT ?3", -1, &sel, NULL);
	if (sel != NULL) {
		sqlite3_bind_int64(sel, 2, (sqlite3_int64)top);
		sqlite3_bind_int(sel, 3, JOURNAL_PRUNE_CHUNK);
	}
	while (rc == SQLITE_OK && sel != NULL) {
		size_t n = 0, read = 0;
		sqlite3_bind_int64(sel, 1, (sqlite3_int64)after);
		while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
			uint64_t id = (uint64_t)sqlite3_column_int64(sel, 0);
			struct journal_prune_user *u = journal_prune_user(
				&us, sqlite3_column_int64(sel, 1));
			after = id;
			read++;
			/* A uid first seen here finished after the count:
			 * it keeps its rows (u->cut is 0). */
			if (u == NULL) {
				rc = SQLITE_NOMEM;
				break;
			}
			if (u->seen > keep_per_user && id < u->cut) {
				ids[n] = id;
				uids[n++] = (uid_t)sqlite3_column_int64(sel, 1);
			}
		}
		sqlite3_reset(sel);
		if (rc != SQLITE_DONE)
			break;
		rc = n > 0 ? journal_prune_delete(db, del, ids, uids, n, total)
		           : SQLITE_OK;
		if (rc != SQLITE_OK || read < JOURNAL_PRUNE_CHUNK)
			break;
		if (!journal_prune_yield())
			rc = SQLITE_INTERRUPT;
	}
	sqlite3_finalize(sel);
	free(us.slot);
	return rc;
}

int64_t journal_prune_run(sqlite3 *db, uint64_t before_us, uint64_t keep,
                          uint64_t keep_per_user)
{
	sqlite3_stmt *sel = NULL, *del = NULL;
	uint64_t cut = 0;
	int64_t total = 0;
	int rc;

	/* A prune still queued, or come due, once rokd stops: the next
	 * start's does it. */
	if (!journal_prune_yield())
		return 0;
	if (keep_per_user == 0)
		keep = 0;   /* every finished row, whoever's */
	if (keep != UINT64_MAX &&
	    (rc = journal_prune_cutoff(db, keep, &cut)) != SQLITE_OK)
		goto fail;
	rc = sqlite3_prepare_v2(db, "DELETE FROM tasks WHERE id = ?1", -1,
	                        &del, NULL);
	if (rc != SQLITE_OK)
		goto fail;
	if (cut != 0 || before_us != 0) {
		rc = sqlite3_prepare_v2(db, "SELECT id, uid FROM tasks WHERE "
		                        "id > ?1 AND state >= 3 AND (id < ?2 "
		                        "OR finished_us < ?3) ORDER BY id "
		                        "LIMIT ?4",
		                        -1, &sel, NULL);
		if (rc != SQLITE_OK)
			goto fail;
		sqlite3_bind_int64(sel, 2, (sqlite3_int64)cut);
		sqlite3_bind_int64(sel, 3, (sqlite3_int64)before_us);
		sqlite3_bind_int(sel, 4, JOURNAL_PRUNE_CHUNK);
		rc = journal_prune_chunks(db, sel, del, &total);
		sqlite3_finalize(sel);
		sel = NULL;
		if (rc == SQLITE_INTERRUPT)
			goto stopped;
		if (rc != SQLITE_OK)
			goto fail;
	}
	if (keep_per_user != UINT64_MAX && keep_per_user != 0) {
		rc = journal_prune_per_user(db, del, keep_per_user, &total);
		if (rc == SQLITE_INTERRUPT)
			goto stopped;
		if (rc != SQLITE_OK)
			goto fail;
	}
	sqlite3_finalize(del);
	return total;
stopped:
	log_info("prune: rokd stops; %lld finished tasks pruned, the rest "
	         "left for the next prune", (long long)total);
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
