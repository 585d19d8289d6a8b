/*
 * fuzz_tasks.c — what the in-process fuzz targets do with the tasks an
 * input started, so that every input runs them and leaves none behind.
 *
 * A spawn is acknowledged once its task is in the runtime, which is before
 * the runner's first poll: a harness that moved on at the acknowledgement
 * would let a sleep of 1440h or a huge timeout go unpolled (its timer never
 * filed) until some later input, or never.  fuzz_tasks_settle waits, with a
 * bound, until no task is queued (every task took its first poll: the
 * runner marks it running there), then cancels every unfinished task and
 * waits until all have ended, so the next input starts from a table with no
 * live task and an input's effects stay its own (a crash reproduces from
 * that input alone).  A task that never ends after its cancel is a hang,
 * which libFuzzer's -timeout reports.
 *
 * Any thread but the reactor's and the workers' (it sleeps).
 */
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "fuzz_tasks.h"
#include "rokd.h"

/* Sleeps 100 µs: the tasks run on the workers meanwhile. */
static void fuzz_tasks_nap(void)
{
	struct timespec ts = { 0, 100000 };

	nanosleep(&ts, NULL);
}

static uint64_t fuzz_tasks_count(int state)
{
	uint64_t counts[RT_NSTATES];

	tasktab_counts(counts);
	return counts[state];
}

/* Cancels the unfinished tasks in `state`, a page at a time. */
static void fuzz_tasks_cancel(int state)
{
	enum { PAGE = 256 };
	uint64_t after = 0;
	bool more = true;

	while (more) {
		TaskInfo **infos = tasktab_infos_new(PAGE);
		if (infos == NULL)
			return;   /* the caller's loop tries again */
		size_t n = tasktab_list(0, state, NULL, after, PAGE, SIZE_MAX,
		                        infos, &more);
		for (size_t i = 0; i < n; i++) {
			(void)tasktab_cancel(infos[i]->id, 0);
			after = infos[i]->id;
		}
		tasktab_infos_free(infos, PAGE);
		more = more && n > 0;
	}
}

void fuzz_tasks_settle(void)
{
	/* First polls: 2 s is far more than a first poll takes; past it
	 * the input goes on (a worker may be stuck: -timeout tells). */
	for (int i = 0; i < 20000 && fuzz_tasks_count(RT_QUEUED) > 0; i++)
		fuzz_tasks_nap();
	while (fuzz_tasks_count(RT_QUEUED) + fuzz_tasks_count(RT_RUNNING) > 0) {
		fuzz_tasks_cancel(RT_QUEUED);
		fuzz_tasks_cancel(RT_RUNNING);
		for (int i = 0; i < 1000 && fuzz_tasks_count(RT_QUEUED) +
		                fuzz_tasks_count(RT_RUNNING) > 0; i++)
			fuzz_tasks_nap();
	}
}
