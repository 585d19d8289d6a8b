/*
 * check_blocking.c — the blocking pool and 1:1 threads: where jobs run,
 * when they start, their order, how the pool grows and shrinks, what
 * cancellation leaves them, and how rok_stop waits for them.
 *
 * Threads meet through semaphores, never through sleeps; the only test that
 * waits on the clock is the one whose subject is the idle timeout.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

#include "blocking.h"
#include "rok/blocking.h"
#include "testutil.h"

static void sem_take(sem_t *s)
{
	while (sem_wait(s) != 0)
		ck_assert_int_eq(errno, EINTR);
}

static void *wait_value(rok_task *t)
{
	void *v = NULL;

	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	return v;
}

/* Polls cond() for up to `ms` milliseconds: for states reached by threads
 * the test cannot hear from (a pool thread going idle or exiting). */
static bool eventually(bool (*cond)(void *), void *arg, long ms)
{
	int64_t end = rok_now() + ROK_MS(ms);

	while (!cond(arg)) {
		if (rok_now() > end)
			return false;
		test_sleep_ms(1);
	}
	return true;
}

static bool threads_are(void *arg)
{
	return rok_blocking_threads() == (unsigned)(uintptr_t)arg;
}

static bool idle_are(void *arg)
{
	return rok_blocking_idle() == (unsigned)(uintptr_t)arg;
}

/* ---- where fn runs, and its value ------------------------------------- */

/* The task records the threads it ran on into a shared struct. */
static struct {
	pthread_t task_before, task_after, fn;
	int task_workers, fn_workers;
	bool fn_signals_blocked;
} seen;

static void *seen_fn(void *arg)
{
	sigset_t mask;

	seen.fn = pthread_self();
	seen.fn_workers = rok_workers();
	seen.fn_signals_blocked =
		pthread_sigmask(SIG_BLOCK, NULL, &mask) == 0 &&
		sigismember(&mask, SIGINT) == 1 &&
		sigismember(&mask, SIGTERM) == 1;
	return arg;
}

struct recorder {
	rok_task *job;
	void *v;
	rok_join_op join;
};

static rok_poll recorder_poll(rok_cx *cx, void *frame)
{
	struct recorder *f = frame;

	ROK_BEGIN(cx);
	seen.task_before = pthread_self();
	seen.task_workers = rok_workers();
	if (rok_spawn_blocking(&f->job, seen_fn, (void *)99) < 0)
		ROK_RETURN(cx, -1);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->job, &f->v));
	seen.task_after = pthread_self();
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	rok_task_unref(f->job);
	ROK_END(cx);
}

static void *plus_one_fn(void *arg)
{
	return (void *)((intptr_t)arg + 1);
}

/* The value comes back through rok_join in a task and rok_task_wait
 * outside; fn runs on a thread that is no worker, outside the executor. */
START_TEST(result_and_thread)
{
	struct recorder r = { 0 };
	rok_task *h;

	test_workers(2);
	/* From outside the runtime first, so that this thread, whose
	 * signals are not blocked, creates the pool's thread. */
	ck_assert_int_eq(rok_spawn_blocking(&h, seen_fn, (void *)6), 0);
	ck_assert_int_gt(rok_task_id(h), 0);
	ck_assert_int_eq((intptr_t)wait_value(h), 6);
	ck_assert(rok_task_is_finished(h));
	ck_assert(!rok_task_is_cancelled(h));
	ck_assert(seen.fn_signals_blocked);
	ck_assert(!pthread_equal(seen.fn, pthread_self()));
	rok_task_unref(h);

	ck_assert_int_eq((intptr_t)test_spawn_wait(recorder_poll, &r,
	                                           sizeof(r)), 99);
	ck_assert_int_eq(seen.task_workers, 2);
	ck_assert_int_eq(seen.fn_workers, 1);
	ck_assert(!pthread_equal(seen.fn, seen.task_before));
	ck_assert(!pthread_equal(seen.fn, seen.task_after));
	ck_assert(!pthread_equal(seen.fn, pthread_self()));
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- fn starts at the call -------------------------------------------- */

static void *post_fn(void *arg)
{
	sem_post(arg);
	return NULL;
}

START_TEST(starts_at_the_call)
{
	sem_t ran;
	rok_task *h;

	ck_assert_int_eq(sem_init(&ran, 0, 0), 0);
	/* Handle dropped at once, never awaited. */
	ck_assert_int_eq(rok_spawn_blocking(&h, post_fn, &ran), 0);
	rok_task_unref(h);
	sem_take(&ran);
	/* Detached. */
	ck_assert_int_eq(rok_spawn_blocking(NULL, post_fn, &ran), 0);
	sem_take(&ran);
	ck_assert_int_eq(rok_stop(), 0);
	sem_destroy(&ran);
}
END_TEST

/* ---- FIFO ------------------------------------------------------------- */

#define FIFO_JOBS 200

static sem_t fifo_gate;
static int fifo_order[FIFO_JOBS];
static _Atomic int fifo_n;

static void *fifo_fn(void *arg)
{
	intptr_t i = (intptr_t)arg;

	if (i == 0)
		sem_take(&fifo_gate);      /* the others queue up behind */
	fifo_order[atomic_fetch_add(&fifo_n, 1)] = (int)i;
	return NULL;
}

START_TEST(fifo_with_one_thread)
{
	rok_task *h[FIFO_JOBS];

	rok_blocking_set_limits(1, 0);
	ck_assert_int_eq(sem_init(&fifo_gate, 0, 0), 0);
	for (intptr_t i = 0; i < FIFO_JOBS; i++)
		ck_assert_int_eq(rok_spawn_blocking(&h[i], fifo_fn, (void *)i),
		                 0);
	ck_assert_uint_eq(rok_blocking_threads(), 1);
	sem_post(&fifo_gate);
	for (int i = 0; i < FIFO_JOBS; i++) {
		wait_value(h[i]);
		rok_task_unref(h[i]);
	}
	ck_assert_int_eq(atomic_load(&fifo_n), FIFO_JOBS);
	for (int i = 0; i < FIFO_JOBS; i++)
		ck_assert_int_eq(fifo_order[i], i);
	ck_assert_int_eq(rok_stop(), 0);
	sem_destroy(&fifo_gate);
}
END_TEST

/* ---- growth, one job per idle thread, the cap ------------------------- */

static sem_t started, release;
static _Atomic int running, most_running, finished;
static int start_order[64];
static _Atomic int start_n;

/* Counts itself running, reports its start, waits to be released. */
static void *held_fn(void *arg)
{
	int now = atomic_fetch_add(&running, 1) + 1;
	int most = atomic_load(&most_running);

	while (now > most &&
	       !atomic_compare_exchange_weak(&most_running, &most, now))
		;
	start_order[atomic_fetch_add(&start_n, 1)] = (int)(intptr_t)arg;
	sem_post(&started);
	sem_take(&release);
	atomic_fetch_sub(&running, 1);
	atomic_fetch_add(&finished, 1);
	return arg;
}

static void held_init(void)
{
	ck_assert_int_eq(sem_init(&started, 0, 0), 0);
	ck_assert_int_eq(sem_init(&release, 0, 0), 0);
}

START_TEST(grows_one_thread_per_job)
{
	enum { K = 8 };
	rok_task *h[K];

	held_init();
	for (intptr_t i = 0; i < K; i++)
		ck_assert_int_eq(rok_spawn_blocking(&h[i], held_fn, (void *)i),
		                 0);
	for (int i = 0; i < K; i++)
		sem_take(&started);
	/* All K run at once, each on its own thread. */
	ck_assert_uint_eq(rok_blocking_threads(), K);
	ck_assert_uint_eq(rok_blocking_idle(), 0);
	ck_assert_int_eq(atomic_load(&most_running), K);
	for (int i = 0; i < K; i++)
		sem_post(&release);
	for (int i = 0; i < K; i++) {
		ck_assert_int_eq((intptr_t)wait_value(h[i]), i);
		rok_task_unref(h[i]);
	}
	ck_assert(eventually(idle_are, (void *)(uintptr_t)K, 10000));

	/* K more jobs go to the K idle threads: no new thread. */
	for (intptr_t i = 0; i < K; i++)
		ck_assert_int_eq(rok_spawn_blocking(&h[i], held_fn, (void *)i),
		                 0);
	for (int i = 0; i < K; i++)
		sem_take(&started);
	ck_assert_uint_eq(rok_blocking_threads(), K);
	ck_assert_uint_eq(rok_blocking_idle(), 0);
	for (int i = 0; i < K; i++)
		sem_post(&release);
	for (int i = 0; i < K; i++)
		rok_task_unref(h[i]);
	ck_assert_int_eq(rok_stop(), 0);
	ck_assert_int_eq(atomic_load(&finished), 2 * K);
	ck_assert_uint_eq(rok_blocking_threads(), 0);
}
END_TEST

START_TEST(cap_queues_the_rest)
{
	enum { N = 5 };
	rok_task *h[N];

	held_init();
	rok_blocking_set_limits(2, 0);
	for (intptr_t i = 0; i < N; i++)
		ck_assert_int_eq(rok_spawn_blocking(&h[i], held_fn, (void *)i),
		                 0);
	sem_take(&started);
	sem_take(&started);
	ck_assert_uint_eq(rok_blocking_threads(), 2);
	/* Release them one by one: each release lets one queued job in. */
	for (int i = 0; i < N; i++) {
		sem_post(&release);
		if (i + 2 < N)
			sem_take(&started);
	}
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq((intptr_t)wait_value(h[i]), i);
		rok_task_unref(h[i]);
	}
	ck_assert_int_eq(atomic_load(&most_running), 2);
	ck_assert_uint_eq(rok_blocking_threads(), 2);
	/* The first two got a thread each; the queued ones started in
	 * submission order. */
	ck_assert_int_eq(start_order[0] + start_order[1], 1);
	ck_assert_int_eq(start_order[2], 2);
	ck_assert_int_eq(start_order[3], 3);
	ck_assert_int_eq(start_order[4], 4);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- shrinking -------------------------------------------------------- */

START_TEST(idle_threads_exit)
{
	enum { K = 3 };
	rok_task *h[K];

	held_init();
	rok_blocking_set_limits(0, ROK_MS(100));
	for (intptr_t i = 0; i < K; i++)
		ck_assert_int_eq(rok_spawn_blocking(&h[i], held_fn, (void *)i),
		                 0);
	for (int i = 0; i < K; i++)
		sem_take(&started);
	ck_assert_uint_eq(rok_blocking_threads(), K);
	for (int i = 0; i < K; i++)
		sem_post(&release);
	for (int i = 0; i < K; i++) {
		wait_value(h[i]);
		rok_task_unref(h[i]);
	}
	/* The subject is time: 100 ms idle, then each thread exits. */
	ck_assert(eventually(threads_are, (void *)0, 10000));
	ck_assert_uint_eq(rok_blocking_idle(), 0);

	/* The pool grows again from nothing. */
	ck_assert_int_eq(rok_spawn_blocking(&h[0], plus_one_fn, (void *)1), 0);
	ck_assert_int_eq((intptr_t)wait_value(h[0]), 2);
	rok_task_unref(h[0]);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* The same two limits from the environment. */
START_TEST(limits_from_the_environment)
{
	enum { N = 3 };
	rok_task *h[N];

	held_init();
	setenv("ROK_BLOCKING_MAX", "2", 1);
	setenv("ROK_BLOCKING_IDLE_MS", "50", 1);
	for (intptr_t i = 0; i < N; i++)
		ck_assert_int_eq(rok_spawn_blocking(&h[i], held_fn, (void *)i),
		                 0);
	sem_take(&started);
	sem_take(&started);
	ck_assert_uint_eq(rok_blocking_threads(), 2);
	for (int i = 0; i < N; i++)
		sem_post(&release);
	for (int i = 0; i < N; i++) {
		wait_value(h[i]);
		rok_task_unref(h[i]);
	}
	ck_assert_int_eq(atomic_load(&most_running), 2);
	ck_assert(eventually(threads_are, (void *)0, 10000));
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- cancellation ----------------------------------------------------- */

static _Atomic int side_effect;
static sem_t done;

static void *slow_fn(void *arg)
{
	sem_post(&started);
	sem_take(&release);
	atomic_fetch_add(&side_effect, 1);
	sem_post(&done);
	return arg;
}

struct canceller {
	rok_task *job;
	void *v;
	rok_join_op join;
};

static rok_poll canceller_poll(rok_cx *cx, void *frame)
{
	struct canceller *f = frame;

	ROK_BEGIN(cx);
	if (rok_spawn_blocking(&f->job, slow_fn, (void *)5) < 0)
		ROK_RETURN(cx, -1);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->job, &f->v));
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	rok_task_unref(f->job);       /* the job keeps running */
	ROK_END(cx);
}

START_TEST(cancelled_awaiter)
{
	struct canceller c = { 0 };
	rok_task *t;

	held_init();
	ck_assert_int_eq(sem_init(&done, 0, 0), 0);
	int64_t base = rok_registrations();
	ck_assert_int_eq(rok_spawn(&t, canceller_poll, &c, sizeof(c)), 0);
	sem_take(&started);
	rok_task_cancel(t);
	ck_assert_int_eq(rok_task_wait(t, NULL), -ECANCELED);
	rok_task_unref(t);
	/* The awaiter is gone and left no registration behind; fn is still
	 * blocked and has not had its effect. */
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(atomic_load(&side_effect), 0);
	sem_post(&release);
	sem_take(&done);
	ck_assert_int_eq(atomic_load(&side_effect), 1);
	ck_assert_int_eq(rok_stop(), 0);
	sem_destroy(&done);
}
END_TEST

/*
 * The job ends after the awaiter was cancelled but before its re-poll: the
 * awaiter still leaves at its join and the value is discarded (A5, A11).
 * One worker, held by a task that spins (runnable, so never handed off)
 * until the job has finished, so the re-poll comes after both.
 */
static _Atomic int hog_on, hog_release, canceller_body_after;

static rok_poll hog_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	atomic_store(&hog_on, 1);
	while (!atomic_load(&hog_release))
		sched_yield();
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static rok_poll counting_canceller_poll(rok_cx *cx, void *frame)
{
	struct canceller *f = frame;

	ROK_BEGIN(cx);
	if (rok_spawn_blocking(&f->job, slow_fn, (void *)5) < 0)
		ROK_RETURN(cx, -1);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->job, &f->v));
	atomic_fetch_add(&canceller_body_after, 1);
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	rok_task_unref(f->job);
	ROK_END(cx);
}

START_TEST(cancelled_awaiter_job_ends_first)
{
	struct canceller c = { 0 };
	rok_task *t;
	void *v = (void *)1;

	test_workers(1);
	held_init();
	ck_assert_int_eq(sem_init(&done, 0, 0), 0);
	int64_t base = rok_registrations();
	ck_assert_int_eq(rok_spawn(&t, counting_canceller_poll, &c,
	                           sizeof(c)), 0);
	sem_take(&started);
	while (rok_registrations() == base)
		sched_yield();   /* the awaiter is linked to the job */
	ck_assert_int_eq(rok_spawn(NULL, hog_poll, NULL, 0), 0);
	while (!atomic_load(&hog_on))
		sched_yield();
	rok_task_cancel(t);   /* queued behind the hog */
	sem_post(&release);
	sem_take(&done);
	while (rok_registrations() != base)
		sched_yield();   /* the job completed and woke its joiner */
	atomic_store(&hog_release, 1);
	ck_assert_int_eq(rok_task_wait(t, &v), -ECANCELED);
	ck_assert_ptr_null(v);
	ck_assert_int_eq(atomic_load(&canceller_body_after), 0);
	ck_assert_int_eq(atomic_load(&side_effect), 1);
	rok_task_unref(t);
	ck_assert_int_eq(rok_stop(), 0);
	sem_destroy(&done);
}
END_TEST

/* Cancelling the handle itself does not stop fn, nor drop its value. */
START_TEST(cancelled_handle)
{
	rok_task *h;

	held_init();
	ck_assert_int_eq(sem_init(&done, 0, 0), 0);
	ck_assert_int_eq(rok_spawn_blocking(&h, slow_fn, (void *)8), 0);
	sem_take(&started);
	rok_task_cancel(h);
	ck_assert(!rok_task_is_finished(h));
	sem_post(&release);
	ck_assert_int_eq((intptr_t)wait_value(h), 8);
	ck_assert(rok_task_is_cancelled(h));
	ck_assert_int_eq(atomic_load(&side_effect), 1);
	rok_task_unref(h);
	ck_assert_int_eq(rok_stop(), 0);
	sem_destroy(&done);
}
END_TEST

/* ---- rok_thread_spawn ------------------------------------------------- */

static pthread_t os_thread;

static void *os_fn(void *arg)
{
	os_thread = pthread_self();
	return (void *)((intptr_t)arg * 2);
}

struct os_joiner {
	rok_task *th;
	void *v;
	rok_join_op join;
};

static pthread_t os_joiner_thread;

static rok_poll os_joiner_poll(rok_cx *cx, void *frame)
{
	struct os_joiner *f = frame;

	ROK_BEGIN(cx);
	os_joiner_thread = pthread_self();
	if (rok_thread_spawn(&f->th, os_fn, (void *)21) < 0)
		ROK_RETURN(cx, -1);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->th, &f->v));
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	rok_task_unref(f->th);
	ROK_END(cx);
}

START_TEST(thread_spawn)
{
	struct os_joiner j = { 0 };
	rok_task *h;

	test_workers(2);
	ck_assert_int_eq((intptr_t)test_spawn_wait(os_joiner_poll, &j,
	                                           sizeof(j)), 42);
	ck_assert(!pthread_equal(os_thread, os_joiner_thread));
	ck_assert(!pthread_equal(os_thread, pthread_self()));
	ck_assert_uint_eq(rok_blocking_threads(), 0);   /* not a pool thread */

	/* From outside the runtime too. */
	ck_assert_int_eq(rok_thread_spawn(&h, os_fn, (void *)4), 0);
	ck_assert_int_eq((intptr_t)wait_value(h), 8);
	rok_task_unref(h);
	ck_assert(!pthread_equal(os_thread, pthread_self()));

	/* Detached: rok_stop still waits for it. */
	ck_assert_int_eq(sem_init(&started, 0, 0), 0);
	ck_assert_int_eq(rok_thread_spawn(NULL, post_fn, &started), 0);
	sem_take(&started);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- stress ----------------------------------------------------------- */

/*
 * Threads and tasks spawn jobs at once, in bursts with pauses of about the
 * idle time (1 ms) in between, against a small cap, so that hand-offs race
 * with threads timing out, exiting and being created again: every job runs
 * exactly once and every value comes back.  (The pauses shape the load;
 * nothing waits on them.)
 */
#define STRESS_SPAWNERS 4
#define STRESS_BURST    50

static _Atomic uint8_t *stress_seen;
static long stress_per;

static void *stress_fn(void *arg)
{
	intptr_t i = (intptr_t)arg;

	atomic_fetch_add(&stress_seen[i], 1);
	if (i % 7 == 0)
		sched_yield();
	return (void *)(i * 3);
}

static void *stress_thread(void *arg)
{
	long base = (long)(intptr_t)arg, bad = 0;
	rok_task *h[STRESS_BURST];

	for (long i = 0; i < stress_per; i += STRESS_BURST) {
		for (long j = 0; j < STRESS_BURST; j++)
			if (rok_spawn_blocking(&h[j], stress_fn,
			                       (void *)(intptr_t)(base + i + j)))
				return (void *)-1;
		for (long j = 0; j < STRESS_BURST; j++) {
			void *v = NULL;
			if (rok_task_wait(h[j], &v) != 0 ||
			    (intptr_t)v != (base + i + j) * 3)
				bad++;
			rok_task_unref(h[j]);
		}
		test_sleep_ms(1);
	}
	return (void *)(intptr_t)bad;
}

struct stress_task {
	long base, i, j, bad;
	rok_task *h[STRESS_BURST];
	void *v;
	rok_join_op join;
	rok_sleep_op sleep;
};

static rok_poll stress_task_poll(rok_cx *cx, void *frame)
{
	struct stress_task *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < stress_per; f->i += STRESS_BURST) {
		for (f->j = 0; f->j < STRESS_BURST; f->j++)
			if (rok_spawn_blocking(&f->h[f->j], stress_fn,
			                       (void *)(intptr_t)(f->base + f->i +
			                                          f->j)))
				ROK_RETURN(cx, -1);
		for (f->j = 0; f->j < STRESS_BURST; f->j++) {
			ROK_AWAIT(cx, rok_join(cx, &f->join, f->h[f->j],
			                       &f->v));
			if ((intptr_t)f->v != (f->base + f->i + f->j) * 3)
				f->bad++;
			rok_task_unref(f->h[f->j]);
			f->h[f->j] = NULL;
		}
		ROK_AWAIT(cx, rok_sleep(cx, &f->sleep, ROK_MS(1)));
	}
	ROK_RETURN(cx, f->bad);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(stress_many_spawners)
{
	pthread_t th[STRESS_SPAWNERS];
	rok_task *t[STRESS_SPAWNERS];

	test_workers(2);
	stress_per = test_scale(2000) / STRESS_BURST * STRESS_BURST;
	if (stress_per == 0)
		stress_per = STRESS_BURST;
	long total = 2 * STRESS_SPAWNERS * stress_per;
	stress_seen = calloc((size_t)total, sizeof(*stress_seen));
	ck_assert_ptr_nonnull(stress_seen);
	rok_blocking_set_limits(3, ROK_MS(1));
	for (int k = 0; k < STRESS_SPAWNERS; k++) {
		struct stress_task f = { .base = (STRESS_SPAWNERS + k) *
		                                 stress_per };
		ck_assert_int_eq(pthread_create(&th[k], NULL, stress_thread,
		                                (void *)(intptr_t)(k *
		                                                   stress_per)),
		                 0);
		ck_assert_int_eq(rok_spawn(&t[k], stress_task_poll, &f,
		                           sizeof(f)), 0);
	}
	for (int k = 0; k < STRESS_SPAWNERS; k++) {
		void *bad;
		pthread_join(th[k], &bad);
		ck_assert_int_eq((intptr_t)bad, 0);
		ck_assert_int_eq((intptr_t)wait_value(t[k]), 0);
		rok_task_unref(t[k]);
	}
	for (long i = 0; i < total; i++)
		ck_assert_msg(atomic_load(&stress_seen[i]) == 1,
		              "job %ld ran %d times", i,
		              atomic_load(&stress_seen[i]));
	ck_assert_uint_le(rok_blocking_threads(), 3);
	ck_assert_int_eq(rok_stop(), 0);
	free(stress_seen);
}
END_TEST

/* ---- rok_stop --------------------------------------------------------- */

static _Atomic int effect_at_stop = -1;

static void *stopper(void *arg)
{
	(void)arg;
	int err = rok_stop();
	atomic_store(&effect_at_stop, atomic_load(&side_effect));
	return (void *)(intptr_t)err;
}

static void *noop_fn(void *arg)
{
	return arg;
}

START_TEST(stop_waits_then_restart)
{
	pthread_t th;
	rok_task *h;
	void *err;

	held_init();
	ck_assert_int_eq(sem_init(&done, 0, 0), 0);
	ck_assert_int_eq(rok_spawn_blocking(NULL, slow_fn, NULL), 0);
	sem_take(&started);
	ck_assert_int_eq(pthread_create(&th, NULL, stopper, NULL), 0);
	/* The pool refuses jobs once rok_stop is waiting for ours. */
	int64_t end = rok_now() + ROK_S(10);
	int r;
	while ((r = rok_spawn_blocking(NULL, noop_fn, NULL)) == 0 &&
	       rok_now() < end)
		sched_yield();
	ck_assert_int_eq(r, -ESHUTDOWN);
	ck_assert_int_eq(rok_thread_spawn(NULL, noop_fn, NULL), -ESHUTDOWN);
	ck_assert_int_eq(atomic_load(&effect_at_stop), -1);
	sem_post(&release);
	pthread_join(th, &err);
	ck_assert_int_eq((intptr_t)err, 0);
	/* rok_stop returned only after the job's effect. */
	ck_assert_int_eq(atomic_load(&effect_at_stop), 1);
	ck_assert_uint_eq(rok_blocking_threads(), 0);

	/* A later start (here: the spawn) brings the pool back. */
	ck_assert_int_eq(rok_spawn_blocking(&h, noop_fn, (void *)3), 0);
	ck_assert_int_eq((intptr_t)wait_value(h), 3);
	rok_task_unref(h);
	ck_assert_int_eq(rok_thread_spawn(&h, noop_fn, (void *)4), 0);
	ck_assert_int_eq((intptr_t)wait_value(h), 4);
	rok_task_unref(h);
	ck_assert_int_eq(rok_stop(), 0);
	ck_assert_int_eq(rok_start(), 0);
	ck_assert_int_eq(rok_spawn_blocking(&h, noop_fn, (void *)5), 0);
	ck_assert_int_eq((intptr_t)wait_value(h), 5);
	rok_task_unref(h);
	ck_assert_int_eq(rok_stop(), 0);
	sem_destroy(&done);
}
END_TEST

/* rok_stop from a job would wait for itself. */
static void *stop_fn(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)rok_stop();
}

START_TEST(stop_from_a_job)
{
	rok_task *h;

	ck_assert_int_eq(rok_spawn_blocking(&h, stop_fn, NULL), 0);
	ck_assert_int_eq((intptr_t)wait_value(h), -EDEADLK);
	rok_task_unref(h);
	ck_assert_int_eq(rok_thread_spawn(&h, stop_fn, NULL), 0);
	ck_assert_int_eq((intptr_t)wait_value(h), -EDEADLK);
	rok_task_unref(h);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- errors ----------------------------------------------------------- */

static _Atomic int create_calls;

static int failing_create(pthread_t *thread, void *(*start)(void *),
                          void *arg)
{
	(void)thread;
	(void)start;
	(void)arg;
	atomic_fetch_add(&create_calls, 1);
	return EAGAIN;
}

static _Atomic int counted;

static void *count_fn(void *arg)
{
	atomic_fetch_add(&counted, 1);
	return arg;
}

static int (*real_create)(pthread_t *, void *(*)(void *), void *);

/* No thread at all: the spawn fails and fn never runs. */
START_TEST(thread_creation_fails)
{
	rok_task *h = (rok_task *)1;

	ck_assert_int_eq(rok_start(), 0);
	real_create = blocking_thread_create;
	blocking_thread_create = failing_create;
	ck_assert_int_eq(rok_spawn_blocking(&h, count_fn, NULL), -EAGAIN);
	ck_assert_ptr_null(h);
	h = (rok_task *)1;
	ck_assert_int_eq(rok_thread_spawn(&h, count_fn, NULL), -EAGAIN);
	ck_assert_ptr_null(h);
	ck_assert_int_eq(atomic_load(&create_calls), 2);
	ck_assert_uint_eq(rok_blocking_threads(), 0);
	blocking_thread_create = real_create;
	ck_assert_int_eq(rok_spawn_blocking(&h, count_fn, (void *)1), 0);
	ck_assert_int_eq((intptr_t)wait_value(h), 1);
	rok_task_unref(h);
	ck_assert_int_eq(atomic_load(&counted), 1);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* A busy thread exists: the job waits for it instead. */
START_TEST(thread_creation_fails_with_a_thread)
{
	rok_task *held, *h;

	held_init();
	real_create = blocking_thread_create;
	ck_assert_int_eq(rok_spawn_blocking(&held, held_fn, (void *)1), 0);
	sem_take(&started);
	blocking_thread_create = failing_create;
	ck_assert_int_eq(rok_spawn_blocking(&h, count_fn, (void *)2), 0);
	ck_assert_int_eq(atomic_load(&create_calls), 1);
	ck_assert_uint_eq(rok_blocking_threads(), 1);
	blocking_thread_create = real_create;
	sem_post(&release);
	ck_assert_int_eq((intptr_t)wait_value(held), 1);
	ck_assert_int_eq((intptr_t)wait_value(h), 2);
	ck_assert_int_eq(atomic_load(&counted), 1);
	rok_task_unref(held);
	rok_task_unref(h);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* With the cap at 1, a job queued behind the one thread being created has
 * nobody to run it when the creation fails: it ends without a value. */
static sem_t in_create, go_on;

static int slow_failing_create(pthread_t *thread, void *(*start)(void *),
                               void *arg)
{
	sem_post(&in_create);
	sem_take(&go_on);
	return failing_create(thread, start, arg);
}

static void *spawn_counted(void *arg)
{
	rok_task **h = arg;

	return (void *)(intptr_t)rok_spawn_blocking(h, count_fn, NULL);
}

START_TEST(thread_creation_fails_with_jobs_queued)
{
	rok_task *first, *queued;
	pthread_t th;
	void *err;

	ck_assert_int_eq(sem_init(&in_create, 0, 0), 0);
	ck_assert_int_eq(sem_init(&go_on, 0, 0), 0);
	ck_assert_int_eq(rok_start(), 0);
	rok_blocking_set_limits(1, 0);
	real_create = blocking_thread_create;
	blocking_thread_create = slow_failing_create;
	ck_assert_int_eq(pthread_create(&th, NULL, spawn_counted, &first), 0);
	sem_take(&in_create);
	/* The pool is at its cap with a thread on the way: this one queues. */
	ck_assert_int_eq(rok_spawn_blocking(&queued, count_fn, NULL), 0);
	sem_post(&go_on);
	pthread_join(th, &err);
	ck_assert_int_eq((intptr_t)err, -EAGAIN);
	ck_assert_ptr_null(first);
	ck_assert_int_eq(rok_task_wait(queued, NULL), -ECANCELED);
	rok_task_unref(queued);
	ck_assert_int_eq(atomic_load(&counted), 0);
	ck_assert_uint_eq(rok_blocking_threads(), 0);
	blocking_thread_create = real_create;
	ck_assert_int_eq(rok_spawn_blocking(&queued, count_fn, (void *)1), 0);
	ck_assert_int_eq((intptr_t)wait_value(queued), 1);
	rok_task_unref(queued);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

START_TEST(bad_arguments)
{
	rok_task *h = (rok_task *)1;

	ck_assert_int_eq(rok_spawn_blocking(&h, NULL, NULL), -EINVAL);
	ck_assert_ptr_null(h);
	h = (rok_task *)1;
	ck_assert_int_eq(rok_thread_spawn(&h, NULL, NULL), -EINVAL);
	ck_assert_ptr_null(h);
	ck_assert_int_eq(rok_stop(), 0);
	setenv("ROK_BLOCKING_MAX", "0", 1);
	ck_assert_int_eq(rok_spawn_blocking(&h, noop_fn, NULL), -EINVAL);
	ck_assert_ptr_null(h);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

static Suite *blocking_suite(void)
{
	const struct test_case cases[] = {
		{ "result_and_thread", result_and_thread },
		{ "starts_at_the_call", starts_at_the_call },
		{ "fifo_with_one_thread", fifo_with_one_thread },
		{ "grows_one_thread_per_job", grows_one_thread_per_job },
		{ "cap_queues_the_rest", cap_queues_the_rest },
		{ "idle_threads_exit", idle_threads_exit },
		{ "limits_from_the_environment", limits_from_the_environment },
		{ "cancelled_awaiter", cancelled_awaiter },
		{ "cancelled_awaiter_job_ends_first",
		  cancelled_awaiter_job_ends_first },
		{ "cancelled_handle", cancelled_handle },
		{ "thread_spawn", thread_spawn },
		{ "stress_many_spawners", stress_many_spawners },
		{ "stop_waits_then_restart", stop_waits_then_restart },
		{ "stop_from_a_job", stop_from_a_job },
		{ "thread_creation_fails", thread_creation_fails },
		{ "thread_creation_fails_with_a_thread",
		  thread_creation_fails_with_a_thread },
		{ "thread_creation_fails_with_jobs_queued",
		  thread_creation_fails_with_jobs_queued },
		{ "bad_arguments", bad_arguments },
	};

	return TEST_SUITE("blocking", cases, 30);
}

int main(void)
{
	return test_run(blocking_suite());
}
