/*
 * sqlite-commit — the physical limit of one durable acknowledgement: N
 * single-row INSERTs, each its own transaction, into a WAL database with
 * synchronous=FULL (what rokd's journal does at durability = full), timed
 * one by one after COMMIT_ROW_WARMUP untimed ones (see commit-row.h).
 * bench/latency runs it on the same file system as rokd's state
 * directory so the two figures can be compared in one run.
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
#include <unistd.h>

#include "commit-row.h"

int main(int argc, char **argv)
{
	struct commit_row cr;
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
	if (lat == NULL) {
		fprintf(stderr, "sqlite-commit: out of memory\n");
		return 1;
	}
	commit_row_open(&cr, "sqlite-commit", argv[1]);
	for (long i = -COMMIT_ROW_WARMUP; i < n; i++) {
		if (gap > 0 && usleep((useconds_t)gap) != 0) {
			perror("sqlite-commit: usleep");
			return 1;
		}
		int64_t t0 = commit_row_now();

		commit_row_commit(&cr);
		if (i >= 0)
			lat[i] = commit_row_now() - t0;
	}
	commit_row_close(&cr);
	commit_row_report(lat, n);
	free(lat);
	return 0;
}
