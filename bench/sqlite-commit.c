/*
 * sqlite-commit — the physical limit of one durable acknowledgement: N
 * single-row INSERTs, each its own transaction, into a WAL database with
 * synchronous=FULL (what rokd's journal does at durability = full), timed
 * one by one.  bench/latency runs it on the same file system as rokd's
 * state directory so the two figures can be compared in one run.
 *
 * GAP_US, when given, is slept before each commit (outside its timing):
 * commits paced as a service's are, one per request round trip, with the
 * CPU idle in between, which on a virtual machine makes the fsync itself
 * slower than back to back.
 *
 *	sqlite-commit DBFILE [N [GAP_US]]
 *
 * prints: n=N p50_us=.. p99_us=.. max_us=..
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

static int64_t sc_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int sc_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static void sc_die(sqlite3 *db, const char *what)
{
	fprintf(stderr, "sqlite-commit: %s: %s\n", what,
	        db != NULL ? sqlite3_errmsg(db) : "out of memory");
	exit(1);
}

int main(int argc, char **argv)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *ins = NULL;
	long n = argc > 2 ? strtol(argv[2], NULL, 10) : 2000;
	long gap = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
	int64_t *lat;

	if (argc < 2 || argc > 4 || n < 1 || n > 10000000 || gap < 0 ||
	    gap > 1000000) {
		fprintf(stderr, "usage: sqlite-commit DBFILE [N (1..10000000) "
		        "[GAP_US (0..1000000)]]\n");
		return 2;
	}
	lat = malloc((size_t)n * sizeof(*lat));
	if (lat == NULL)
		sc_die(NULL, "malloc");
	if (sqlite3_open(argv[1], &db) != SQLITE_OK)
		sc_die(db, "open");
	if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
	                 "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY,"
	                 " state INTEGER, payload BLOB)", NULL, NULL, NULL)
	    != SQLITE_OK)
		sc_die(db, "schema");
	if (sqlite3_prepare_v2(db, "INSERT INTO t(state, payload) VALUES(?, ?)",
	                       -1, &ins, NULL) != SQLITE_OK)
		sc_die(db, "prepare");
	/* The first 100 commits are not timed: the WAL file is created and
	 * grown then, as rokd's is before its first acknowledgement. */
	for (long i = -100; i < n; i++) {
		if (gap > 0 && usleep((useconds_t)gap) != 0) {
			perror("sqlite-commit: usleep");
			return 1;
		}
		int64_t t0 = sc_now();

		sqlite3_bind_int(ins, 1, 1);
		sqlite3_bind_blob(ins, 2, "noop", 4, SQLITE_STATIC);
		if (sqlite3_step(ins) != SQLITE_DONE)
			sc_die(db, "insert");
		sqlite3_reset(ins);
		if (i >= 0)
			lat[i] = sc_now() - t0;
	}
	sqlite3_finalize(ins);
	sqlite3_close(db);
	qsort(lat, (size_t)n, sizeof(*lat), sc_cmp);
	printf("n=%ld p50_us=%.1f p99_us=%.1f max_us=%.1f\n", n,
	       (double)lat[n / 2] / 1e3, (double)lat[n * 99 / 100] / 1e3,
	       (double)lat[n - 1] / 1e3);
	free(lat);
	return 0;
}
