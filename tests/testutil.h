/*
 * testutil.h — what every Check test of librok shares: the suite runner,
 * the size divisor for sanitizer builds, the time budget of race-repeating
 * loops, and small task helpers.
 *
 * Each test runs in its own forked process (Check's default), so a test may
 * set ROK_WORKERS and friends before its first spawn starts the runtime.
 */
#ifndef ROK_TESTUTIL_H
#define ROK_TESTUTIL_H

#include <check.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "rok/rok.h"

/* Divisor for big counts: ROK_TEST_SCALE (sanitizer builds set it). */
static inline long test_scale(long n)
{
	const char *s = getenv("ROK_TEST_SCALE");
	long d = s != NULL ? atol(s) : 1;

	if (d < 1)
		d = 1;
	return n / d > 0 ? n / d : 1;
}

/* Timeout for a tcase, stretched under sanitizers. */
static inline int test_timeout(int seconds)
{
	return getenv("ROK_TEST_SCALE") != NULL ? seconds * 4 : seconds;
}

/* CLOCK_MONOTONIC in seconds. */
static inline double test_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds a loop that repeats a race may spend on its rounds. */
#define TEST_ROUNDS_BUDGET 5

/*
 * For a loop that repeats a race `rounds` times, started at test_now()
 * `start`: true while round `done` may start.  On a loaded machine each
 * round waits for CPUs (a wake-up, a park), and a fixed count overran the
 * tcase timeout; so rounds stop once TEST_ROUNDS_BUDGET seconds (stretched
 * under sanitizers) are spent, saying so.  Fewer tries, not weaker ones:
 * every round still checks all it checks.
 */
static inline bool test_more_rounds(const char *what, long done, long rounds,
                                    double start)
{
	if (done >= rounds)
		return false;
	if (done == 0 || test_now() - start < test_timeout(TEST_ROUNDS_BUDGET))
		return true;
	printf("%s: %ld of %ld rounds within the %d s budget\n", what, done,
	       rounds, test_timeout(TEST_ROUNDS_BUDGET));
	return false;
}

static inline void test_workers(int n)
{
	char buf[16];

	snprintf(buf, sizeof(buf), "%d", n);
	setenv("ROK_WORKERS", buf, 1);
}

/* Adds a TCase named `name` holding `fn`; loops > 0 makes it a loop test
 * over _i in [0, loops). */
static inline void test_add(Suite *s, const char *name, const TTest *fn,
                            int loops, int timeout)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, test_timeout(timeout));
	if (loops > 0)
		tcase_add_loop_test(tc, fn, 0, loops);
	else
		tcase_add_test(tc, fn);
	suite_add_tcase(s, tc);
}

/* One TCase per entry, each with the same timeout. */
struct test_case {
	const char *name;
	const TTest *fn;
};

static inline Suite *test_suite(const char *name,
                                const struct test_case *cases, size_t n,
                                int timeout)
{
	Suite *s = suite_create(name);

	for (size_t i = 0; i < n; i++)
		test_add(s, cases[i].name, cases[i].fn, 0, timeout);
	return s;
}

#define TEST_SUITE(name, cases, timeout) \
	test_suite(name, cases, sizeof(cases) / sizeof(cases[0]), timeout)

static inline int test_run(Suite *s)
{
	SRunner *sr = srunner_create(s);

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* CPU time (user + system) this process used so far, in seconds. */
static inline double test_cpu_seconds(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static inline void test_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Spawns and waits from the test's own thread; returns the value. */
static inline void *test_spawn_wait(rok_poll_fn poll, const void *frame,
                                    size_t size)
{
	rok_task *t;
	void *v = NULL;

	ck_assert_int_eq(rok_spawn(&t, poll, frame, size), 0);
	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	rok_task_unref(t);
	return v;
}

#endif /* ROK_TESTUTIL_H */
