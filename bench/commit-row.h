/*
 * commit-row.h — the one durable commit that sqlite-commit and
 * commit-echo both time, kept in one place so that bench/latency's rows
 * compare the same work: a single-row INSERT, its own transaction, into a
 * WAL database with synchronous=FULL (what rokd's journal does at
 * durability = full).  Also their clock and their summary line.  Each
 * function ends the process with a message on failure: these are
 * benchmarks, a failed step has no result to report.
 */
#ifndef ROK_BENCH_COMMIT_ROW_H
#define ROK_BENCH_COMMIT_ROW_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <sqlite3.h>

/*
 * Commits made before any is timed: enough for sqlite's automatic
 * checkpoint (at 1,000 WAL frames, about one a commit here) to restart the
 * WAL, so that the timed commits overwrite blocks already written, as in
 * any process that has committed for a while.  Appending to the WAL
 * allocates blocks, and each fsync then writes metadata too: up to twice
 * the latency.  rokd writes its WAL's blocks ahead at start
 * (journal_schema_wal_prefill), so its commits are like these from the
 * first one.
 */
#define COMMIT_ROW_WARMUP 1100

struct commit_row {
	const char *prog;	/* for messages */
	sqlite3 *db;
	sqlite3_stmt *ins;
};

static inline int64_t commit_row_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void commit_row_die(const struct commit_row *cr,
                                  const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", cr->prog, what,
	        cr->db != NULL ? sqlite3_errmsg(cr->db) : "out of memory");
	exit(1);
}

static inline void commit_row_open(struct commit_row *cr, const char *prog,
                                   const char *path)
{
	cr->prog = prog;
	cr->db = NULL;
	cr->ins = NULL;
	if (sqlite3_open(path, &cr->db) != SQLITE_OK)
		commit_row_die(cr, path);
	if (sqlite3_exec(cr->db, "PRAGMA journal_mode=WAL; "
	                 "PRAGMA synchronous=FULL; "
	                 "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY,"
	                 " state INTEGER, payload BLOB)", NULL, NULL, NULL)
	    != SQLITE_OK)
		commit_row_die(cr, "schema");
	if (sqlite3_prepare_v2(cr->db, "INSERT INTO t(state, payload) "
	                       "VALUES(?, ?)", -1, &cr->ins, NULL) != SQLITE_OK)
		commit_row_die(cr, "prepare");
}

static inline void commit_row_commit(const struct commit_row *cr)
{
	if (sqlite3_bind_int(cr->ins, 1, 1) != SQLITE_OK ||
	    sqlite3_bind_blob(cr->ins, 2, "noop", 4, SQLITE_STATIC) != SQLITE_OK ||
	    sqlite3_step(cr->ins) != SQLITE_DONE)
		commit_row_die(cr, "insert");
	sqlite3_reset(cr->ins);
}

static inline void commit_row_close(struct commit_row *cr)
{
	sqlite3_finalize(cr->ins);
	if (sqlite3_close(cr->db) != SQLITE_OK)
		commit_row_die(cr, "close");
	cr->db = NULL;
}

static inline int commit_row_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Sorts lat (n > 0 times in ns) and prints the programs' one line:
 * n=N p50_us=.. p99_us=.. max_us=.. */
static inline void commit_row_report(int64_t *lat, long n)
{
	qsort(lat, (size_t)n, sizeof(*lat), commit_row_cmp);
	printf("n=%ld p50_us=%.1f p99_us=%.1f max_us=%.1f\n", n,
	       (double)lat[n / 2] / 1e3, (double)lat[n * 99 / 100] / 1e3,
	       (double)lat[n - 1] / 1e3);
}

#endif
