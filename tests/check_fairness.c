/*
 * check_fairness.c -- the scheduler cannot be starved (SPEC A2, A9
 * yield_now).
 *
 * yielder: a task that yields until it is cancelled shares its worker with
 *   1,000 short tasks that each yield a few times; they all finish, then the
 *   yielder is cancelled and ends with -ECANCELED.  The short tasks are
 *   spawned from the test thread (through the global injector) or from a
 *   task inside the pool (through the local queues, LIFO slot included).
 * flood: a worker kept busy by self-respawning tasks (each spawns its own
 *   successor with rok_spawn, forever) still runs a task submitted from
 *   outside the pool; that task sets the flag that stops the chains.
 * remote_wakeup: spawns from outside the pool, one after the other, keep
 *   landing while the worker runs dry and parks; none is left unrun (20,000
 *   rounds, fewer if they take more than 5 s: a loaded machine).
 * yield_order: with one worker, N tasks that log each step and yield in
 *   between produce a round-robin log: a yielding task goes behind every
 *   other ready task.  (A run during which the monitor lent the worker's
 *   queue to a helper thread is repeated: two threads make another order.)
 *
 * lifo_long_poll: a task spawned into the LIFO slot by a task that then
 *   polls for long (computing, not blocked: no hand-off) runs on the other,
 *   idle worker; the long poll ends only once it has.
 *
 * yielder and flood run with 1 and 2 workers, each with the LIFO slot on
 * and off (ROK_LIFO=0); remote_wakeup with 1 and 2 workers; yield_order
 * with 2 and 3 tasks, the LIFO slot on and off.  Tasks never
 * call ck_assert: they count surprises in check_fairness_bad.  Nothing here
 * asserts a time; a starved task shows up as a tcase timeout (or, where a
 * loop can notice, a message after a generous deadline).
 */
#include <check.h>
#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "testutil.h"

#define CHECK_FAIRNESS_SHORT      1000    /* short tasks beside the yielder */
#define CHECK_FAIRNESS_SHORT_YIELDS 3
#define CHECK_FAIRNESS_CHAINS     4       /* self-respawning chains */
#define CHECK_FAIRNESS_FLOODED    20000   /* links before the remote spawn (scaled) */
#define CHECK_FAIRNESS_STEPS      200     /* yield_order steps per task */
#define CHECK_FAIRNESS_MAX_ORDER  3       /* tasks in yield_order */
#define CHECK_FAIRNESS_ATTEMPTS   10      /* yield_order runs without hand-off */

/* Unexpected events inside tasks; asserted zero by the test thread. */
static _Atomic unsigned long check_fairness_bad;

static void check_fairness_surprise(void)
{
	atomic_fetch_add_explicit(&check_fairness_bad, 1, memory_order_relaxed);
}

/* _i % 4 of the yielder and flood tests: workers and the LIFO slot.  Also
 * resets the globals, for CK_FORK=no runs. */
static void check_fairness_config(int i)
{
	atomic_store(&check_fairness_bad, 0);
	test_workers(i % 2 == 0 ? 1 : 2);
	setenv("ROK_LIFO", (i / 2) % 2 == 0 ? "1" : "0", 1);
}

/* ---- yielder ---------------------------------------------------------- */

static _Atomic unsigned long check_fairness_yields;
static _Atomic int check_fairness_cleaned;
static rok_task *check_fairness_short[CHECK_FAIRNESS_SHORT];

/* Yields until cancelled, counting its turns; never returns a value. */
struct check_fairness_yielder { int unused; };

static rok_poll check_fairness_yielder_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	for (;;) {
		atomic_fetch_add_explicit(&check_fairness_yields, 1,
		                          memory_order_relaxed);
		ROK_YIELD(cx);
	}
	ROK_CLEANUP(cx);
	atomic_fetch_add(&check_fairness_cleaned, 1);
	ROK_END(cx);
}

/* Yields a few times, then returns its index + 1. */
struct check_fairness_shorty {
	uintptr_t index;
	int i;
};

static rok_poll check_fairness_shorty_poll(rok_cx *cx, void *frame)
{
	struct check_fairness_shorty *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < CHECK_FAIRNESS_SHORT_YIELDS; f->i++)
		ROK_YIELD(cx);
	ROK_RETURN(cx, f->index + 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* From inside the pool: spawns the short tasks into the local queues. */
static rok_poll check_fairness_spawner_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	for (uintptr_t i = 0; i < CHECK_FAIRNESS_SHORT; i++) {
		struct check_fairness_shorty s = { .index = i };
		if (rok_spawn(&check_fairness_short[i],
		              check_fairness_shorty_poll, &s, sizeof(s)) != 0)
			check_fairness_surprise();
	}
	return ROK_READY;
}

/*
 * _i % 4: workers and LIFO (check_fairness_config); _i / 4: 0 spawns the
 * short tasks from the test thread, 1 from a task in the pool.
 */
START_TEST(test_fairness_yielder)
{
	struct check_fairness_yielder yf = { 0 };
	rok_task *y;
	void *v;

	check_fairness_config(_i % 4);
	atomic_store(&check_fairness_yields, 0);
	atomic_store(&check_fairness_cleaned, 0);
	ck_assert_int_eq(rok_spawn(&y, check_fairness_yielder_poll, &yf,
	                           sizeof(yf)), 0);
	/* The yielder owns its worker before anything else arrives. */
	while (atomic_load(&check_fairness_yields) < 2)
		sched_yield();

	if (_i / 4 == 0) {
		for (uintptr_t i = 0; i < CHECK_FAIRNESS_SHORT; i++) {
			struct check_fairness_shorty s = { .index = i };
			if (rok_spawn(&check_fairness_short[i],
			              check_fairness_shorty_poll, &s,
			              sizeof(s)) != 0)
				ck_abort_msg("spawn %ju failed", (uintmax_t)i);
		}
	} else {
		test_spawn_wait(check_fairness_spawner_poll, NULL, 0);
		ck_assert_uint_eq(atomic_load(&check_fairness_bad), 0);
	}
	for (uintptr_t i = 0; i < CHECK_FAIRNESS_SHORT; i++) {
		/* A test, not ck_assert: that would write a mark point per
		 * success to Check's message channel. */
		int err = rok_task_wait(check_fairness_short[i], &v);
		if (err != 0 || (uintptr_t)v != i + 1)
			ck_abort_msg("short task %ju: %d, value %ju",
			             (uintmax_t)i, err, (uintmax_t)(uintptr_t)v);
		rok_task_unref(check_fairness_short[i]);
	}

	/* The yielder ran all along and is still running. */
	ck_assert(!rok_task_is_finished(y));
	ck_assert_int_eq(atomic_load(&check_fairness_cleaned), 0);
	rok_task_cancel(y);
	ck_assert(rok_task_is_cancelled(y));
	ck_assert_int_eq(rok_task_wait(y, &v), -ECANCELED);
	ck_assert_ptr_null(v);
	ck_assert(rok_task_is_finished(y));
	ck_assert_int_eq(atomic_load(&check_fairness_cleaned), 1);
	rok_task_unref(y);
	ck_assert_uint_eq(atomic_load(&check_fairness_bad), 0);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- flood ------------------------------------------------------------ */

static _Atomic int check_fairness_stop_flag;
static _Atomic unsigned long check_fairness_links;
static _Atomic int check_fairness_live_chains;
static unsigned long check_fairness_flooded_at; /* test_scale(FLOODED) */
static sem_t check_fairness_flooded;    /* posted once, after that many links */
static sem_t check_fairness_stopped;    /* posted when the last chain ends */

/* One link of a chain: spawns the next link unless the flag is set. */
struct check_fairness_link { uintptr_t chain; };

static rok_poll check_fairness_link_poll(rok_cx *cx, void *frame)
{
	struct check_fairness_link *f = frame;

	(void)cx;
	/* Acquire: pairs with the setter's release; nothing is published
	 * through it, but the chain must not miss the flag for long. */
	if (atomic_load_explicit(&check_fairness_stop_flag,
	                         memory_order_acquire)) {
		if (atomic_fetch_sub(&check_fairness_live_chains, 1) == 1)
			sem_post(&check_fairness_stopped);
		return ROK_READY;
	}
	if (atomic_fetch_add_explicit(&check_fairness_links, 1,
	                              memory_order_relaxed) ==
	    check_fairness_flooded_at)
		sem_post(&check_fairness_flooded);
	if (rok_spawn(NULL, check_fairness_link_poll, f, sizeof(*f)) != 0) {
		/* The chain is broken: count it as ended, loudly. */
		check_fairness_surprise();
		if (atomic_fetch_sub(&check_fairness_live_chains, 1) == 1)
			sem_post(&check_fairness_stopped);
	}
	return ROK_READY;
}

/* Inside the pool: starts the chains, so their links are local work. */
static rok_poll check_fairness_flooder_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	for (uintptr_t c = 0; c < CHECK_FAIRNESS_CHAINS; c++) {
		struct check_fairness_link l = { .chain = c };
		if (rok_spawn(NULL, check_fairness_link_poll, &l,
		              sizeof(l)) != 0) {
			check_fairness_surprise();
			atomic_fetch_sub(&check_fairness_live_chains, 1);
		}
	}
	return ROK_READY;
}

/* Submitted from outside the pool: stops the chains. */
static rok_poll check_fairness_setter_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	/* Release: see check_fairness_link_poll. */
	atomic_store_explicit(&check_fairness_stop_flag, 1,
	                      memory_order_release);
	return ROK_READY;
}

static void check_fairness_sem_wait(sem_t *s)
{
	while (sem_wait(s) != 0)
		ck_assert_int_eq(errno, EINTR);
}

START_TEST(test_fairness_flood)
{
	rok_task *t;
	void *v = (void *)1;

	check_fairness_config(_i);
	atomic_store(&check_fairness_stop_flag, 0);
	atomic_store(&check_fairness_links, 0);
	check_fairness_flooded_at = (unsigned long)test_scale(
		CHECK_FAIRNESS_FLOODED);
	ck_assert_int_eq(sem_init(&check_fairness_flooded, 0, 0), 0);
	ck_assert_int_eq(sem_init(&check_fairness_stopped, 0, 0), 0);
	atomic_store(&check_fairness_live_chains, CHECK_FAIRNESS_CHAINS);

	ck_assert_int_eq(rok_spawn(NULL, check_fairness_flooder_poll, NULL, 0),
	                 0);
	check_fairness_sem_wait(&check_fairness_flooded);

	/* A remote submission: into the global injector, while every worker
	 * always has local work.  It must run, or this wait never returns. */
	ck_assert_int_eq(rok_spawn(&t, check_fairness_setter_poll, NULL, 0), 0);
	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	ck_assert_ptr_null(v);
	rok_task_unref(t);

	check_fairness_sem_wait(&check_fairness_stopped);
	ck_assert_int_eq(atomic_load(&check_fairness_live_chains), 0);
	ck_assert_uint_eq(atomic_load(&check_fairness_bad), 0);
	ck_assert_int_eq(rok_stop(), 0);
	sem_destroy(&check_fairness_flooded);
	sem_destroy(&check_fairness_stopped);
}
END_TEST

/* ---- remote_wakeup ---------------------------------------------------- */

static rok_poll check_fairness_noop_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	return ROK_READY;
}

static double check_fairness_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * The other side of the flood test: a remote submission to a worker that is
 * running dry and going to sleep must wake it (SPEC A2: parking must not
 * lose wake-ups).  The test thread spawns a no-op, spins until it finished
 * and spawns the next at once, so spawns keep landing while the worker is
 * on its way to park.  With one worker nobody else is searching who could
 * pick the task up.  _i: 1 or 2 workers.
 *
 * A round costs a few microseconds on an idle machine, but on a loaded one
 * each wake-up waits for a CPU (6 ms a round was seen with a load of 15 on
 * 2 cores, and 20,000 rounds overran the tcase timeout): the rounds stop
 * early once their time budget is spent (test_more_rounds).
 */
START_TEST(test_fairness_remote_wakeup)
{
	long rounds = test_scale(20000);
	double start = test_now();

	test_workers(_i == 0 ? 1 : 2);
	for (long i = 0; test_more_rounds("remote_wakeup", i, rounds, start);
	     i++) {
		double deadline = 0;
		rok_task *t;

		if (rok_spawn(&t, check_fairness_noop_poll, NULL, 0) != 0)
			ck_abort_msg("round %ld: spawn failed", i);
		for (unsigned long spin = 1; !rok_task_is_finished(t); spin++) {
			if (spin % 4096 != 0)
				continue;
			/* Slow: let a descheduled worker in, and give up
			 * after a while with a readable message. */
			sched_yield();
			if (deadline == 0)
				deadline = check_fairness_now() +
				           test_timeout(10);
			else if (check_fairness_now() > deadline)
				ck_abort_msg("round %ld: a task spawned from "
				             "outside never ran", i);
		}
		if (rok_task_wait(t, NULL) != 0)
			ck_abort_msg("round %ld: no value", i);
		rok_task_unref(t);
	}
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- yield_order ------------------------------------------------------ */

static _Atomic unsigned check_fairness_nlog;
static uint8_t check_fairness_log[CHECK_FAIRNESS_MAX_ORDER *
                                  CHECK_FAIRNESS_STEPS];

/* Logs its id at each step, yielding in between. */
struct check_fairness_stepper {
	uint8_t id;
	int step;
};

static rok_poll check_fairness_stepper_poll(rok_cx *cx, void *frame)
{
	struct check_fairness_stepper *f = frame;

	ROK_BEGIN(cx);
	for (f->step = 0; f->step < CHECK_FAIRNESS_STEPS; f->step++) {
		unsigned at = atomic_fetch_add(&check_fairness_nlog, 1);
		if (at < sizeof(check_fairness_log))
			check_fairness_log[at] = f->id;
		else
			check_fairness_surprise();
		ROK_YIELD(cx);
	}
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Spawns the steppers from inside the pool, then joins them. */
struct check_fairness_order {
	int n, i;
	rok_task *t[CHECK_FAIRNESS_MAX_ORDER];
	int err;
	rok_join_op join;
};

static rok_poll check_fairness_order_poll(rok_cx *cx, void *frame)
{
	struct check_fairness_order *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < f->n; f->i++) {
		struct check_fairness_stepper s = { .id = (uint8_t)f->i };
		if (rok_spawn(&f->t[f->i], check_fairness_stepper_poll, &s,
		              sizeof(s)) != 0)
			check_fairness_surprise();
	}
	for (f->i = 0; f->i < f->n; f->i++) {
		ROK_AWAIT(cx, rok_join_err(cx, &f->join, f->t[f->i], NULL,
		                           &f->err));
		if (f->err != 0)
			check_fairness_surprise();
	}
	ROK_CLEANUP(cx);
	for (int i = 0; i < f->n; i++)
		rok_task_unref(f->t[i]);
	ROK_END(cx);
}

/*
 * Runs the n steppers once on a fresh one-worker runtime; returns the
 * number of hand-offs (SPEC A6) the monitor made meanwhile.
 */
static uint64_t check_fairness_order_run(int n)
{
	struct check_fairness_order o = { .n = n };
	struct rok_stats st0, st1;

	atomic_store(&check_fairness_nlog, 0);
	memset(check_fairness_log, 0xff, sizeof(check_fairness_log));
	ck_assert_int_eq(rok_start(), 0);
	rok_stats_get(&st0);
	test_spawn_wait(check_fairness_order_poll, &o, sizeof(o));
	rok_stats_get(&st1);
	ck_assert_int_eq(rok_stop(), 0);
	return st1.handoffs - st0.handoffs;
}

/*
 * One worker, n = 2 or 3 tasks, LIFO slot on or off (_i: n = 2 + _i % 2,
 * LIFO off for _i >= 2).  Which task logs first depends on the queues; from
 * then on the log must be periodic: each task once per round, in the same
 * order every round.
 *
 * A monitor hand-off (SPEC A6: the worker looked stuck, because the OS
 * preempted it mid-poll on a loaded machine) lends the queue to a second
 * thread for a while, and then the order is legitimately different: such a
 * run proves nothing and is repeated, up to CHECK_FAIRNESS_ATTEMPTS times.
 */
START_TEST(test_fairness_yield_order)
{
	int n = 2 + _i % 2, attempt;
	unsigned total = (unsigned)n * CHECK_FAIRNESS_STEPS;

	atomic_store(&check_fairness_bad, 0);
	test_workers(1);
	setenv("ROK_LIFO", _i < 2 ? "1" : "0", 1);
	for (attempt = 0; attempt < CHECK_FAIRNESS_ATTEMPTS; attempt++)
		if (check_fairness_order_run(n) == 0)
			break;
	ck_assert_msg(attempt < CHECK_FAIRNESS_ATTEMPTS,
	              "every attempt was handed off to a helper thread");
	ck_assert_uint_eq(atomic_load(&check_fairness_bad), 0);
	ck_assert_uint_eq(atomic_load(&check_fairness_nlog), total);

	/* The first round holds every task once... */
	for (int a = 0; a < n; a++)
		for (int b = a + 1; b < n; b++)
			ck_assert_msg(check_fairness_log[a] !=
			              check_fairness_log[b],
			              "task %u ran twice in the first round",
			              check_fairness_log[a]);
	/* ...and every later round repeats it. */
	for (unsigned i = (unsigned)n; i < total; i++)
		if (check_fairness_log[i] != check_fairness_log[i - n])
			ck_abort_msg("step %u: task %u ran, want task %u "
			             "(a yielding task must go behind the "
			             "others)", i, check_fairness_log[i],
			             check_fairness_log[i - n]);
}
END_TEST

/* ---- suite ------------------------------------------------------------ */

/* ---- lifo_long_poll --------------------------------------------------- */

static _Atomic int check_fairness_lifo_ran;

static rok_poll check_fairness_lifo_child_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	atomic_store(&check_fairness_lifo_ran, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Spawns a child (into this worker's LIFO slot) and then, in the same
 * poll, waits for it: only another worker can run it. */
static rok_poll check_fairness_lifo_parent_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	if (rok_spawn(NULL, check_fairness_lifo_child_poll, NULL, 0) < 0)
		check_fairness_surprise();
	else
		while (!atomic_load(&check_fairness_lifo_ran))
			sched_yield();   /* runnable: not a blocked worker */
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(test_fairness_lifo_long_poll)
{
	rok_task *t;

	atomic_store(&check_fairness_bad, 0);
	test_workers(2);
	setenv("ROK_LIFO", "1", 1);
	ck_assert_int_eq(rok_spawn(&t, check_fairness_lifo_parent_poll, NULL,
	                           0), 0);
	ck_assert_int_eq(rok_task_wait(t, NULL), 0);
	ck_assert_int_eq(atomic_load(&check_fairness_lifo_ran), 1);
	ck_assert_uint_eq(atomic_load(&check_fairness_bad), 0);
	rok_task_unref(t);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

static Suite *check_fairness_suite(void)
{
	Suite *s = suite_create("fairness");

	test_add(s, "yielder", test_fairness_yielder, 8, 30);
	test_add(s, "flood", test_fairness_flood, 4, 30);
	test_add(s, "remote_wakeup", test_fairness_remote_wakeup, 2, 30);
	test_add(s, "yield_order", test_fairness_yield_order, 4, 30);
	test_add(s, "lifo_long_poll", test_fairness_lifo_long_poll, 0, 30);
	return s;
}

int main(void)
{
	return test_run(check_fairness_suite());
}
