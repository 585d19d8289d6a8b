/*
 * check_slurm_watch.c — daemon/slurm-watch.c's table of watched jobs, fed
 * squeue output directly (the watcher thread is stopped first): each job
 * gets its own line's state wherever it sits in the table, after any mix
 * of adds and removes; removed and unknown ids stay unknown; a job two
 * outputs miss is gone; a job added twice keeps being watched until it
 * is removed twice.  Checked against plain arrays as models, with ids
 * that are consecutive, spread, or equal in their low bits.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slurm.h"
#include "testutil.h"

#define JOBS 20000

struct model {
	uint32_t id;
	bool watched;
};

/* "ID|STATE|EXIT|REASON|" lines for every job in m, and some of nobody's. */
static char *output_of(const struct model *m, size_t n)
{
	size_t len = (n + 2) * 64 + 1, off = 0;
	char *out = malloc(len);

	ck_assert_ptr_nonnull(out);
	off += (size_t)snprintf(out + off, len - off,
	                        "4000000001|RUNNING|0|None|\n"
	                        "77_3|RUNNING|0|None|\n");
	for (size_t i = 0; i < n; i++)
		off += (size_t)snprintf(out + off, len - off, "%u|%s|%zu|%s|\n",
		                        m[i].id, i % 2 ? "RUNNING" : "COMPLETED",
		                        i % 7, i % 3 ? "None" : "Priority");
	return out;
}

static void check_against(const struct model *m, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct slurm_jobstate js;
		slurm_watch_get(m[i].id, &js);
		/* Plain checks: a ck_assert each is a write to Check's pipe. */
		if (!m[i].watched ? js.state != SLURM_UNKNOWN
		    : js.state != (i % 2 ? SLURM_RUNNING : SLURM_COMPLETED) ||
		      js.status != (int)(i % 7) ||
		      strcmp(js.why, i % 3 ? "" : "Priority") != 0)
			ck_abort_msg("job %u (watched %d): state %d status %d "
			             "why '%s'", m[i].id, m[i].watched, js.state,
			             js.status, js.why);
	}
}

START_TEST(table_matches_a_model)
{
	struct model *m = calloc(JOBS, sizeof(*m));
	uint32_t rng = 12345;

	ck_assert_ptr_nonnull(m);
	slurm_watch_stop();   /* no thread: this test applies the outputs */
	/* Consecutive ids (as slurmctld hands them out), spread ones, and
	 * ones 65536 apart (equal in their low bits). */
	for (size_t i = 0; i < JOBS; i++) {
		if (i % 3 == 0)
			m[i].id = 2100000007u + (uint32_t)(i / 3) * 65536u;
		else if (i % 3 == 1)
			m[i].id = 1000 + (uint32_t)i;
		else
			m[i].id = (uint32_t)(i * 7919u % 2000000000u) + 3000000;
		m[i].watched = true;
		if (slurm_watch_add(m[i].id, (uid_t)(i % 5)) != 0)
			ck_abort_msg("add %u failed", m[i].id);
	}
	/* Removes in a scattered order, each moving the last entry. */
	for (size_t k = 0; k < JOBS / 2; k++) {
		rng = rng * 1103515245u + 12345u;
		size_t i = (rng >> 8) % JOBS;
		if (m[i].watched) {
			slurm_watch_remove(m[i].id);
			m[i].watched = false;
		}
	}
	char *out = output_of(m, JOBS);
	slurm_watch_apply(out);
	free(out);
	check_against(m, JOBS);
	/* Added back after their removal: unknown until the next output. */
	for (size_t i = 0; i < JOBS; i += 10)
		if (!m[i].watched) {
			ck_assert_int_eq(slurm_watch_add(m[i].id, 0), 0);
			m[i].watched = true;
		}
	out = output_of(m, JOBS);
	slurm_watch_apply(out);
	free(out);
	check_against(m, JOBS);
	/* Two outputs without them: gone. */
	char none[] = "";
	slurm_watch_apply(none);
	slurm_watch_apply(none);
	for (size_t i = 0; i < JOBS; i++) {
		struct slurm_jobstate js;
		slurm_watch_get(m[i].id, &js);
		if (js.state != (m[i].watched ? SLURM_GONE : SLURM_UNKNOWN))
			ck_abort_msg("job %u (watched %d): state %d after two "
			             "outputs without it", m[i].id, m[i].watched,
			             js.state);
	}
	slurm_watch_stop();
	free(m);
}
END_TEST

START_TEST(job_added_twice)
{
	struct slurm_jobstate js;
	char out[] = "42|RUNNING|0|None|\n";

	slurm_watch_stop();
	ck_assert_int_eq(slurm_watch_add(42, 0), 0);
	ck_assert_int_eq(slurm_watch_add(42, 0), 0);
	slurm_watch_apply(out);
	slurm_watch_remove(42);
	slurm_watch_get(42, &js);
	ck_assert_int_eq(js.state, SLURM_RUNNING);
	slurm_watch_remove(42);
	slurm_watch_get(42, &js);
	ck_assert_int_eq(js.state, SLURM_UNKNOWN);
	slurm_watch_stop();
}
END_TEST

/*
 * Random adds (up to three of one id), removes and full outputs over a
 * few ids at a time, so that the table stays small (128 to 512 slots)
 * and probe runs often wrap past its end; after each output every id
 * must be seen exactly when the model still watches it.
 */
START_TEST(random_ops_match_a_model)
{
	enum { IDS = 60 };
	static const uint32_t strides[] = { 1, 128, 65536, 2654435761u };
	int count[IDS];
	uint32_t rng = 777;
	char *out = malloc(IDS * 64 + 1);

	ck_assert_ptr_nonnull(out);
	for (int round = 0; round < 200; round++) {
		uint32_t stride = strides[round % 4], base = 1 + round;
		slurm_watch_stop();   /* empty, no thread */
		memset(count, 0, sizeof(count));
		for (int op = 0; op < 2000; op++) {
			rng = rng * 1103515245u + 12345u;
			int k = (int)((rng >> 8) % IDS), what = (int)(rng >> 24) % 10;
			uint32_t id = base + (uint32_t)k * stride;
			if (what < 5 && count[k] < 3) {
				if (slurm_watch_add(id, 0) != 0)
					ck_abort_msg("add %u failed", id);
				count[k]++;
			} else if (what < 9) {
				slurm_watch_remove(id);
				if (count[k] > 0)
					count[k]--;
			} else {
				size_t off = 0;
				for (int j = 0; j < IDS; j++)
					off += (size_t)snprintf(out + off, 64,
					        "%u|RUNNING|%d|None|\n",
					        base + (uint32_t)j * stride, op & 63);
				slurm_watch_apply(out);
				/* Plain checks: a ck_assert per id is a write
				 * to Check's pipe. */
				for (int j = 0; j < IDS; j++) {
					struct slurm_jobstate js;
					uint32_t jid = base + (uint32_t)j * stride;
					slurm_watch_get(jid, &js);
					int want = count[j] > 0 ? SLURM_RUNNING
					                        : SLURM_UNKNOWN;
					if (js.state != want ||
					    (want == SLURM_RUNNING &&
					     js.status != (op & 63)))
						ck_abort_msg("round %d op %d: job %u "
						             "state %d status %d, "
						             "watched %d times", round,
						             op, jid, js.state,
						             js.status, count[j]);
				}
			}
		}
	}
	slurm_watch_stop();
	free(out);
}
END_TEST

static Suite *slurm_watch_suite(void)
{
	Suite *s = suite_create("slurm_watch");
	TCase *tc = tcase_create("table");

	tcase_add_test(tc, table_matches_a_model);
	tcase_add_test(tc, job_added_twice);
	tcase_add_test(tc, random_ops_match_a_model);
	/* A bound for a hang, not a time limit: the random test takes 2 s
	 * under ASan on an idle machine, past Check's default 4 s on a
	 * loaded one (CI run w1). */
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return test_run(slurm_watch_suite());
}
