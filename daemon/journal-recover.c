/*
 * journal-recover.c — replaying the journal when rokd starts.
 *
 * Main thread, after the runtime started and before the journal thread and
 * the socket: nothing else touches the database or the task table yet.
 * In one transaction:
 *   - an unfinished task whose cancellation was requested is cancelled;
 *   - a task that was running (its process, if any, died with rokd) runs
 *     again if its spec allows a retry not used yet (retries counts them),
 *     else it becomes interrupted, with the reason;
 * Before that, the process groups of the runs that rokd's death
 * interrupted (running rows with a pgid, cancelled ones included) go to
 * exec_orphans_kill, which kills what is left of them, unless the machine
 * rebooted since (meta.boot, this boot's id, is written at every start):
 * then nothing can be left, and the ids may name anything.
 * A running task of a slurm group is queued again instead, its retries
 * untouched: its job ran on, and the task adopts it (slurm.c).
 * Then every queued task (those just given a retry included) is put back
 * into the task table with its id, uid and spec and started, in the order
 * its run had entered its group's queue and with that time (aging goes on
 * counting, the time rokd was down included); a run that was running keeps
 * its entry too, and so goes before those that waited behind it.  Finished
 * tasks stay in the journal only: status, join and list read them from
 * there (journal-read.c).  New ids continue above the largest id ever
 * handed out: meta.max_id (raised by each prune before it deletes rows) or
 * the largest row, whichever is larger.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "exec.h"
#include "journal.h"

static uint64_t journal_recover_now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

static int journal_recover_int(sqlite3 *db, const char *sql, int64_t *v)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	*v = 0;
	if (rc != SQLITE_OK)
		return rc;
	if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		*v = sqlite3_column_int64(st, 0);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

/* Running tasks: retried, interrupted, or (slurm) queued again.  Counts
 * into *retried, *lost. */
static int journal_recover_running(sqlite3 *db, uint64_t now,
                                   unsigned *retried, unsigned *lost)
{
	sqlite3_stmt *sel, *upd;
	int rc = sqlite3_prepare_v2(db, "SELECT id, spec, retries FROM tasks "
	                            "WHERE state = 2", -1, &sel, NULL);

	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_prepare_v2(db, "UPDATE tasks SET state = ?2, retries = ?3, "
	                        "started_us = CASE WHEN ?2 = 1 THEN 0 ELSE started_us END, "
	                        /* a queued row has no group: the run's
	                         * group was dealt with before this */
	                        "pgid = CASE WHEN ?2 = 1 THEN NULL ELSE pgid END, "
	                        "pg_start = CASE WHEN ?2 = 1 THEN NULL "
	                        "ELSE pg_start END, "
	                        "finished_us = ?4, reason = ?5 "
	                        "WHERE id = ?1", -1, &upd, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_finalize(sel);
		return rc;
	}
	while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(sel, 0);
		int64_t retries = sqlite3_column_int64(sel, 2);
		TaskSpec *spec = rok__v1__task_spec__unpack(
			NULL, (size_t)sqlite3_column_bytes(sel, 1),
			sqlite3_column_blob(sel, 1));
		bool again = spec != NULL && retries < (int64_t)spec->retry;
		/* A Slurm job runs on without rokd: queued again, not
		 * retried, its task adopts it (slurm.c). */
		bool slurm = spec != NULL && spec->kind.len == 4 &&
		             memcmp(spec->kind.data, "exec", 4) == 0 &&
		             queue_group_slurm(spec);
		rok__v1__task_spec__free_unpacked(spec, NULL);
		sqlite3_bind_int64(upd, 1, id);
		if (slurm) {
			sqlite3_bind_int(upd, 2, RT_QUEUED);
			sqlite3_bind_int64(upd, 3, retries);
			sqlite3_bind_int64(upd, 4, 0);
			sqlite3_bind_null(upd, 5);
		} else if (again) {
			sqlite3_bind_int(upd, 2, RT_QUEUED);
			sqlite3_bind_int64(upd, 3, retries + 1);
			sqlite3_bind_int64(upd, 4, 0);
			sqlite3_bind_null(upd, 5);
			(*retried)++;
		} else {
			sqlite3_bind_int(upd, 2, RT_INTERRUPTED);
			sqlite3_bind_int64(upd, 3, retries);
			sqlite3_bind_int64(upd, 4, (sqlite3_int64)now);
			sqlite3_bind_text(upd, 5, spec == NULL
			        ? "rokd stopped while it ran; its spec is "
			          "unreadable, so it was not run again"
			        : "rokd stopped while it ran (crash, kill or "
			          "shutdown); no retry left", -1, SQLITE_STATIC);
			(*lost)++;
		}
		int rc2 = sqlite3_step(upd);
		sqlite3_reset(upd);
		if (rc2 != SQLITE_DONE) {
			rc = rc2;
			break;
		}
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(upd);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* A queued task restored, to be started in its place in the queues. */
struct journal_recover_q {
	int64_t rowid;              /* the row checked: ids of a damaged
	                               journal may repeat */
	uint64_t queued_us;         /* 0: not in a queue yet */
	struct rtask *r;
	bool started;
};

static int journal_recover_q_cmp(const void *pa, const void *pb)
{
	const struct journal_recover_q *a = pa, *b = pb;

	return a->rowid < b->rowid ? -1 : a->rowid > b->rowid;
}

static int journal_recover_q_by_rowid(const void *key, const void *elem)
{
	int64_t rowid = *(const int64_t *)key;
	const struct journal_recover_q *q = elem;

	return rowid < q->rowid ? -1 : rowid > q->rowid;
}

/* True if one of spec's dependencies is restored and has not ended: a
 * row that says the task entered its queue all the same is wrong (a
 * hand-edited journal), and the gate is to hold it. */
static bool journal_recover_deps_pending(const TaskSpec *spec)
{
	for (size_t i = 0; i < spec->n_after + spec->n_after_any; i++) {
		uint64_t dep = i < spec->n_after
		               ? spec->after[i] : spec->after_any[i - spec->n_after];
		int st = tasktab_dep_state(dep);
		if (st == RT_QUEUED || st == RT_RUNNING)
			return true;
	}
	return false;
}

/* Starts a restored task from its row (packed spec, next_us in sel's
 * columns 1 and 2). */
static void journal_recover_start(const struct journal_recover_q *q,
                                  sqlite3_stmt *sel)
{
	const void *blob = sqlite3_column_blob(sel, 1);
	size_t len = (size_t)sqlite3_column_bytes(sel, 1);
	TaskSpec *spec = rok__v1__task_spec__unpack(NULL, len, blob);

	if (spec == NULL) {   /* it unpacked a moment ago: memory */
		struct rt_outcome o = { .state = RT_FAILED };
		snprintf(o.reason, sizeof(o.reason), "could not start after a "
		         "restart: out of memory");
		tasktab_finish(q->r, &o);
		return;
	}
	bool entered = q->queued_us != 0;
	if (gate_needed(spec) && entered &&
	    journal_recover_deps_pending(spec)) {
		tasktab_forget_queue_entry(q->r);
		entered = false;
	}
	if (gate_needed(spec) && entered) {
		/* Its run had left the gate (its dependencies had ended, its
		 * time had come): into its queue now, in its place, not
		 * through the gate again (whose release may come on another
		 * thread, later). */
		if (gate_submit_started(q->r, blob, len) == 0)
			(void)tasktab_start(q->r, spec, NULL);
	} else if (gate_needed(spec)) {
		/* Its dependencies (restored already, or finished in the
		 * journal), start time, run number and backoff deadline as
		 * they were; the row's packed spec as it is (gate_submit
		 * copies it). */
		(void)gate_submit(q->r, spec, blob, len,
		                  (uint64_t)sqlite3_column_int64(sel, 2));
	} else {
		(void)tasktab_start(q->r, spec, NULL);
	}
	rok__v1__task_spec__free_unpacked(spec, NULL);
}

/*
 * Queued tasks back into the table, then started; *adopted: those with a
 * journaled Slurm job.  The records go in in id order (the table's list
 * of records is in id order), none started yet; then they start in the
 * order their runs had entered their queues (queued_us; the id between
 * equals), each with that time, so that a group grants its slots as it
 * would have without the restart and aging goes on counting.  Then those
 * that had not entered one (0: waiting in the gate, or released by it
 * without the update committed, or a row of before the column; or a time
 * to come, which no clock that only moves forward wrote), in id
 * order: those the gate releases now enter their queues now, behind the
 * others; one of before the column that never waited in the gate counts
 * from its spawn (tasktab_restore).  A dependency is restored before
 * any task starts, so a dependent finds it whatever the order.
 * What the order can still change: a task queued at once is recorded
 * with its spawn time, taken before its commit, and enters its queue
 * after that commit, so a gate release between the two (within one
 * commit's latency) comes back behind it; times from before a step back
 * of the wall clock sort as they say, not as they happened; and one after
 * now (a bigger step back) counts as none: such a task goes through the
 * gate again (its start time, if any, counted again), or, never gated,
 * counts from its spawn.
 */
static int journal_recover_queued(sqlite3 *db, uint64_t now,
                                  unsigned *requeued, unsigned *bad,
                                  unsigned *adopted)
{
	struct journal_recover_q *q = NULL;
	size_t n = 0, cap = 0;
	sqlite3_stmt *sel;
	int rc = sqlite3_prepare_v2(db, "SELECT id, uid, spec, spawned_us, "
	                            "retries, run, slurm_job, queued_us, rowid "
	                            "FROM "
	                            "tasks WHERE state = 1 ORDER BY id", -1,
	                            &sel, NULL);

	if (rc != SQLITE_OK)
		return rc;
	while ((rc = sqlite3_step(sel)) == SQLITE_ROW) {
		uint64_t id = (uint64_t)sqlite3_column_int64(sel, 0);
		TaskSpec *spec = rok__v1__task_spec__unpack(
			NULL, (size_t)sqlite3_column_bytes(sel, 2),
			sqlite3_column_blob(sel, 2));
		const struct kind *k = spec != NULL
		        ? kind_find(spec->kind.data, spec->kind.len) : NULL;
		char why[160] = "";
		if (k == NULL)
			snprintf(why, sizeof(why), "cannot run it again after a "
			         "restart: %s", spec == NULL ? "unreadable spec"
			         : "unknown task kind");
		else if (k->check(spec, why, sizeof(why)) == 0)
			why[0] = '\0';   /* a failing check left its message */
		/* No rokd writes a time before 0 or after now: such a spawn
		 * time is taken as now (it is subtracted from later times),
		 * such a queue entry as none. */
		int64_t spawned = sqlite3_column_int64(sel, 3);
		if (spawned < 0 || (uint64_t)spawned > now)
			spawned = (int64_t)now;
		int64_t queued = sqlite3_column_int64(sel, 7);
		if (queued < 0 || (uint64_t)queued > now)
			queued = 0;
		if (why[0] == '\0' && n == cap) {
			size_t c = cap > 0 ? 2 * cap : 256;
			struct journal_recover_q *m = realloc(q, c * sizeof(*q));
			if (m == NULL) {
				rok__v1__task_spec__free_unpacked(spec, NULL);
				rc = SQLITE_NOMEM;
				break;
			}
			q = m;
			cap = c;
		}
		struct rtask *r;
		int err = tasktab_restore(id,
		        (uid_t)sqlite3_column_int64(sel, 1), k != NULL ? k
		        : &kind_noop, spec != NULL ? spec
		        : &(TaskSpec)ROK__V1__TASK_SPEC__INIT,
		        (uint64_t)spawned, (uint64_t)queued,
		        (uint32_t)sqlite3_column_int64(sel, 4),
		        (uint32_t)sqlite3_column_int64(sel, 5), &r);
		rok__v1__task_spec__free_unpacked(spec, NULL);
		if (err < 0) {
			rc = SQLITE_NOMEM;
			break;
		}
		if (why[0] != '\0') {
			struct rt_outcome o = { .state = RT_FAILED };
			snprintf(o.reason, sizeof(o.reason), "%s", why);
			tasktab_finish(r, &o);
			(*bad)++;
			continue;
		}
		int64_t job = sqlite3_column_int64(sel, 6);
		if (job > 0 && job <= UINT32_MAX) {
			/* Running or still pending in Slurm (queued for rok):
			 * its run (as the record has it) adopts it (slurm.c). */
			slurm_note_job(id, tasktab_run(r), (uint32_t)job);
			(*adopted)++;
		}
		q[n++] = (struct journal_recover_q){
			.rowid = sqlite3_column_int64(sel, 8),
			.queued_us = (uint64_t)queued, .r = r,
		};
	}
	sqlite3_finalize(sel);
	/* One ordered pass, the order of the comment above (a query per row
	 * would take and drop the read lock each time: twice the start-up
	 * time with a large backlog).  Each row is matched to its record by
	 * rowid, so that it is the very row checked above (a damaged
	 * journal's ids may repeat or be negative: matching by id started a
	 * record with another row's spec, or missed and left records never
	 * started). */
	if (n > 1)
		qsort(q, n, sizeof(*q), journal_recover_q_cmp);
	if (rc == SQLITE_DONE)
		rc = sqlite3_prepare_v2(db, "SELECT rowid, spec, next_us, CASE "
		                        "WHEN queued_us > 0 AND queued_us <= ?1 "
		                        "THEN queued_us ELSE 0 END AS q FROM "
		                        "tasks WHERE state = 1 ORDER BY q = 0, q, "
		                        "id, rowid",
		                        -1, &sel, NULL);
	else
		sel = NULL;
	/* On an error the recovery fails (rokd does not start): what is
	 * restored and not started yet ends below, its row untouched. */
	size_t started = 0;
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(sel, 1, (sqlite3_int64)now);
		int step;
		while ((step = sqlite3_step(sel)) == SQLITE_ROW) {
			int64_t rowid = sqlite3_column_int64(sel, 0);
			struct journal_recover_q *e = n == 0 ? NULL
			        : bsearch(&rowid, q, n, sizeof(*q),
			                  journal_recover_q_by_rowid);
			if (e == NULL || e->started)
				continue;   /* failed above: not to start */
			e->started = true;
			journal_recover_start(e, sel);
			started++;
		}
		if (step != SQLITE_DONE)
			rc = step;
		else if (started != n)
			rc = SQLITE_CORRUPT;   /* a row went between the reads */
		*requeued += (unsigned)started;
	}
	/* The recovery fails; none of its tasks is left queued with no run
	 * (nothing would end it: a cancel only marks it). */
	for (size_t i = 0; rc != SQLITE_OK && i < n; i++) {
		if (q[i].started)
			continue;
		struct rt_outcome o = { .state = RT_FAILED };
		snprintf(o.reason, sizeof(o.reason), "could not start after a "
		         "restart: the journal's recovery failed");
		tasktab_finish(q[i].r, &o);
	}
	sqlite3_finalize(sel);
	free(q);
	return rc;
}

/*
 * The groups of the running rows into *out (malloc'd; *n of them), or
 * none when the journal was written in another boot.  SQLITE_OK or an
 * error.
 */
static int journal_recover_groups(sqlite3 *db, uint64_t boot,
                                  struct exec_orphans_group **out, size_t *n)
{
	sqlite3_stmt *st;
	int64_t last_boot, count;
	int rc;

	*out = NULL;
	*n = 0;
	if ((rc = journal_recover_int(db, "SELECT count(*) FROM tasks WHERE "
	                              "state = 2 AND pgid IS NOT NULL",
	                              &count)) != SQLITE_OK ||
	    (rc = journal_recover_int(db, "SELECT value FROM meta WHERE key = "
	                              "'boot'", &last_boot)) != SQLITE_OK)
		return rc;
	if (count == 0)
		return SQLITE_OK;
	if (boot == 0 || (uint64_t)last_boot != boot) {
		log_info("journal: %lld interrupted exec tasks ran %s: their "
		         "process groups are not looked for", (long long)count,
		         boot == 0 ? "in a boot this rokd cannot identify"
		                   : "before a reboot");
		return SQLITE_OK;
	}
	struct exec_orphans_group *g = calloc((size_t)count, sizeof(*g));
	if (g == NULL)
		return SQLITE_NOMEM;
	rc = sqlite3_prepare_v2(db, "SELECT id, pgid, pg_start FROM tasks "
	                        "WHERE state = 2 AND pgid IS NOT NULL", -1,
	                        &st, NULL);
	if (rc != SQLITE_OK) {
		free(g);
		return rc;
	}
	size_t k = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && k < (size_t)count) {
		int64_t pgid = sqlite3_column_int64(st, 1);
		if (pgid <= 1 || pgid > INT32_MAX)
			continue;   /* not a group we could have made */
		g[k].id = (uint64_t)sqlite3_column_int64(st, 0);
		g[k].pgid = (pid_t)pgid;
		g[k].start_ticks = (uint64_t)sqlite3_column_int64(st, 2);
		k++;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
		free(g);
		return rc;
	}
	*out = g;
	*n = k;
	return SQLITE_OK;
}

/* In the recovery transaction: the reasons of the rows whose groups were
 * killed say so; this boot becomes meta.boot. */
static int journal_recover_note(sqlite3 *db, uint64_t boot,
                                const struct exec_orphans_group *g, size_t n)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, "UPDATE tasks SET reason = reason || "
	                            "'; the processes it left were killed' "
	                            "WHERE id = ?1 AND reason IS NOT NULL",
	                            -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		if (!g[i].killed)
			continue;
		sqlite3_bind_int64(st, 1, (sqlite3_int64)g[i].id);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_OK || boot == 0)
		return rc;
	rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO meta VALUES "
	                        "('boot', ?1)", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)boot);
	rc = sqlite3_step(st);
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int journal_recover(char *err, size_t len)
{
	sqlite3 *db = journal_db();
	int64_t max_meta, max_row;
	unsigned retried = 0, lost = 0, requeued = 0, bad = 0, adopted = 0;
	char msg[256];
	uint64_t now = journal_recover_now_us();
	int rc;

	if (config.durability_off)
		return 0;   /* nothing was kept: ids start at 1 */

	if ((rc = journal_recover_int(db, "SELECT value FROM meta WHERE key = "
	                              "'max_id'", &max_meta)) != SQLITE_OK ||
	    (rc = journal_recover_int(db, "SELECT max(id) FROM tasks",
	                              &max_row)) != SQLITE_OK)
		goto fail;
	tasktab_set_next_id((uint64_t)(max_meta > max_row ? max_meta : max_row)
	                    + 1);
	slurm_set_first_new_id(tasktab_next_id());
	/*
	 * Before the tasks run again: a retry must not meet the processes of
	 * the run it replaces.  No boot id (no /proc?): nothing is looked
	 * for, and meta.boot stays as it was.
	 */
	uint64_t boot;
	if ((rc = exec_orphans_boot_id(&boot)) < 0)
		log_errno(rc, "journal: this boot's id (/proc/sys/kernel/"
		          "random/boot_id)");
	struct exec_orphans_group *groups;
	size_t ngroups;
	if ((rc = journal_recover_groups(db, boot, &groups, &ngroups)) !=
	    SQLITE_OK)
		goto fail;
	(void)exec_orphans_kill(groups, ngroups);
	if ((rc = journal_schema_exec(db, "BEGIN IMMEDIATE", msg, sizeof(msg)))) {
		free(groups);
		goto failed;
	}
	sqlite3_stmt *st;
	rc = sqlite3_prepare_v2(db, "UPDATE tasks SET state = 5, "
	                        "finished_us = ?1, reason = 'cancelled; rokd "
	                        "stopped before it ended' WHERE state IN (1, 2) "
	                        "AND cancel_requested != 0", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, (sqlite3_int64)now);
		rc = sqlite3_step(st);
		sqlite3_finalize(st);
		rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	}
	if (rc == SQLITE_OK)
		rc = journal_recover_running(db, now, &retried, &lost);
	if (rc == SQLITE_OK)
		rc = journal_recover_note(db, boot, groups, ngroups);
	free(groups);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		/* Taken first: on a full disk sqlite has rolled back by
		 * itself, and our ROLLBACK's own error would replace it. */
		snprintf(msg, sizeof(msg), "%s", sqlite3_errmsg(db));
		if (!sqlite3_get_autocommit(db))
			(void)sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		goto failed;
	}
	if ((rc = journal_recover_queued(db, now, &requeued, &bad, &adopted)) !=
	    SQLITE_OK)
		goto fail;
	if (retried + lost + requeued + bad > 0 || max_row > 0)
		log_info("journal: recovered: %u queued again (%u of them "
		         "retried after an interruption, %u Slurm jobs to "
		         "adopt), %u interrupted, %u could not run again; ids "
		         "continue after %lld", requeued, retried, adopted, lost,
		         bad,
		         (long long)(max_meta > max_row ? max_meta : max_row));
	return 0;
fail:
	snprintf(msg, sizeof(msg), "%s", sqlite3_errmsg(db));
failed:
	snprintf(err, len, "journal recovery failed: %s", msg);
	return -1;
}
