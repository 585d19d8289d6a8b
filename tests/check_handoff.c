/*
 * check_handoff.c — blocking detection (SPEC A6): a worker stuck in a
 * blocking call does not stall the tasks queued behind it.
 *
 * The tests block workers in read() on pipes that the test thread writes
 * only after the other tasks finished, and queue those tasks only once
 * every blocker is inside its read(), so without a hand-off they would
 * deadlock; with it they complete.  Nothing here depends on timing except
 * the "not handed off" case, which watches for a while that nothing happens.
 * The tpc cases do the same in thread-per-core mode (SPEC A7).
 */
#include <pthread.h>
#include <errno.h>
#include <stdatomic.h>
#include <unistd.h>

#include "monitor.h"
#include "testthreads.h"
#include "testutil.h"

static _Atomic long done;
static _Atomic int blocked;   /* blockers about to enter read() */

struct blocker {
	int fd;
	char c;
};

/* A blocking call inside a poll: not a cancellation point, not an await. */
static rok_poll blocker_poll(rok_cx *cx, void *frame)
{
	struct blocker *f = frame;

	ROK_BEGIN(cx);
	atomic_fetch_add(&blocked, 1);
	if (read(f->fd, &f->c, 1) != 1)
		ROK_RETURN(cx, -1);
	ROK_RETURN(cx, f->c);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static rok_poll count_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	ROK_YIELD(cx);
	atomic_fetch_add(&done, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(blocked_workers_hand_off)
{
	enum { B = 2 };
	long n = 1000;
	int fds[B][2];
	rok_task *b[B];
	struct rok_stats st;

	test_workers(2);
	ck_assert_int_eq(rok_start(), 0);
	int threads = test_thread_baseline();
	for (int i = 0; i < B; i++) {
		ck_assert_int_eq(pipe(fds[i]), 0);
		struct blocker f = { .fd = fds[i][0] };
		ck_assert_int_eq(rok_spawn(&b[i], blocker_poll, &f, sizeof(f)), 0);
	}
	/* Both workers stuck (a blocker queued behind the other is stolen by
	 * the idle worker, or by a helper): only a hand-off runs the rest. */
	while (atomic_load(&blocked) < B)
		sched_yield();
	for (long i = 0; i < n; i++)
		ck_assert_int_eq(rok_spawn(NULL, count_poll, NULL, 0), 0);
	while (atomic_load(&done) < n)
		sched_yield();
	for (int i = 0; i < B; i++) {
		void *v;
		ck_assert_int_eq(write(fds[i][1], "x", 1), 1);
		ck_assert_int_eq(rok_task_wait(b[i], &v), 0);
		ck_assert_int_eq((intptr_t)v, 'x');
		rok_task_unref(b[i]);
		close(fds[i][0]);
		close(fds[i][1]);
	}
	rok_stats_get(&st);
	ck_assert_uint_ge(st.handoffs, 1);
	/* The helpers retire once the workers are back. */
	while (test_thread_count() > threads)
		test_sleep_ms(1);
}
END_TEST

/* One worker: the stuck worker's timers still fire, through its helper. */
struct sleeper {
	rok_sleep_op sleep;
};

static rok_poll sleeper_poll(rok_cx *cx, void *frame)
{
	struct sleeper *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_sleep(cx, &f->sleep, ROK_MS(5)));
	atomic_fetch_add(&done, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct sleep_then_block {
	int fd;
	char c;
	rok_task *s;
	rok_join_op join;
};

static rok_poll sleep_then_block_poll(rok_cx *cx, void *frame)
{
	struct sleep_then_block *f = frame;
	struct sleeper s = { 0 };

	ROK_BEGIN(cx);
	/* Spawned here, so its timer lands in this worker's wheel. */
	ck_assert_int_eq(rok_spawn(&f->s, sleeper_poll, &s, sizeof(s)), 0);
	ROK_YIELD(cx);   /* let it arm its timer */
	ck_assert_int_eq(read(f->fd, &f->c, 1), 1);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->s, NULL));
	ROK_CLEANUP(cx);
	rok_task_unref(f->s);
	ROK_END(cx);
}

START_TEST(stuck_worker_timers_fire)
{
	int fds[2];
	rok_task *t;

	test_workers(1);
	ck_assert_int_eq(pipe(fds), 0);
	struct sleep_then_block f = { .fd = fds[0] };
	ck_assert_int_eq(rok_spawn(&t, sleep_then_block_poll, &f, sizeof(f)), 0);
	while (atomic_load(&done) < 1)
		sched_yield();
	ck_assert_int_eq(write(fds[1], "x", 1), 1);
	ck_assert_int_eq(rok_task_wait(t, NULL), 0);
	rok_task_unref(t);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* A worker with spawn_local tasks pinned to it is not handed off (SPEC A6),
 * in thread-per-core mode (loop 1) too, where its other tasks may be. */
struct pinner {
	int fd;
	char c;
	rok_chan *ch;
	rok_task *local;
};

struct local_waiter {
	rok_chan *ch;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll local_waiter_poll(rok_cx *cx, void *frame)
{
	struct local_waiter *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static _Atomic int pinned_ready;

static rok_poll pinner_poll(rok_cx *cx, void *frame)
{
	struct pinner *f = frame;
	struct local_waiter lw = { .ch = f->ch };

	ROK_BEGIN(cx);
	ck_assert_int_eq(rok_spawn_local(&f->local, local_waiter_poll, &lw,
	                                 sizeof(lw)), 0);
	ROK_YIELD(cx);
	atomic_store(&pinned_ready, 1);
	ck_assert_int_eq(read(f->fd, &f->c, 1), 1);
	ROK_CLEANUP(cx);
	rok_task_unref(f->local);
	ROK_END(cx);
}

START_TEST(pinned_worker_not_handed_off)
{
	int fds[2];
	rok_task *t;
	rok_chan *ch;
	struct rok_stats st;

	test_workers(1);
	ck_assert_int_eq(setenv("ROK_THREAD_PER_CORE", _i ? "1" : "0", 1), 0);
	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct pinner f = { .fd = fds[0], .ch = ch };
	ck_assert_int_eq(rok_spawn(&t, pinner_poll, &f, sizeof(f)), 0);
	while (!atomic_load(&pinned_ready))
		sched_yield();
	/* Several looks even 10 ms apart: watch nothing happen. */
	test_sleep_ms(100);
	rok_stats_get(&st);
	ck_assert_uint_eq(st.handoffs, 0);
	ck_assert_int_eq(write(fds[1], "x", 1), 1);
	ck_assert_int_eq(rok_task_wait(t, NULL), 0);
	rok_chan_close(ch);
	rok_task_unref(t);
	ck_assert_int_eq(rok_stop(), 0);
	rok_chan_free(ch, NULL);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/* Stop while a helper runs: everything is joined and freed. */
START_TEST(stop_with_helper)
{
	int fds[2];
	rok_task *b;

	test_workers(1);
	int threads = test_thread_baseline();
	ck_assert_int_eq(pipe(fds), 0);
	struct blocker f = { .fd = fds[0] };
	ck_assert_int_eq(rok_spawn(&b, blocker_poll, &f, sizeof(f)), 0);
	ck_assert_int_eq(rok_spawn(NULL, count_poll, NULL, 0), 0);
	while (atomic_load(&done) < 1)
		sched_yield();   /* ran on the helper */
	ck_assert_int_eq(write(fds[1], "x", 1), 1);
	ck_assert_int_eq(rok_task_wait(b, NULL), 0);
	rok_task_unref(b);
	ck_assert_int_eq(rok_stop(), 0);
	ck_assert_int_eq(test_threads_settled(threads), threads);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/*
 * The monitor's wake-up is not lost: a worker that wakes (and pokes) after
 * the monitor's last look at an idle pool, but before it sleeps, must still
 * wake it, or no hand-off ever happens again.  The hook runs in that window
 * and wakes the worker by spawning a task it waits for.
 */
static _Atomic int woke;

static rok_poll wake_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	atomic_store(&woke, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static void wake_in_window(void)
{
	static bool once;

	if (once)
		return;
	once = true;
	/* The worker that runs the task has left its park, poke included. */
	ck_assert_int_eq(rok_spawn(NULL, wake_poll, NULL, 0), 0);
	while (!atomic_load(&woke))
		sched_yield();
}

START_TEST(monitor_wakes_after_late_poke)
{
	int fds[2];
	rok_task *b;

	test_workers(1);
	monitor_sleep_hook = wake_in_window;
	ck_assert_int_eq(rok_start(), 0);
	while (!atomic_load(&woke))
		sched_yield();
	/* Without the poke's wake-up the monitor sleeps for good and this
	 * blocker stalls the count task behind it until the tcase times
	 * out. */
	ck_assert_int_eq(pipe(fds), 0);
	struct blocker f = { .fd = fds[0] };
	ck_assert_int_eq(rok_spawn(&b, blocker_poll, &f, sizeof(f)), 0);
	while (atomic_load(&blocked) < 1)
		sched_yield();
	ck_assert_int_eq(rok_spawn(NULL, count_poll, NULL, 0), 0);
	while (atomic_load(&done) < 1)
		sched_yield();   /* ran on a helper */
	ck_assert_int_eq(write(fds[1], "x", 1), 1);
	ck_assert_int_eq(rok_task_wait(b, NULL), 0);
	rok_task_unref(b);
	ck_assert_int_eq(rok_stop(), 0);
	close(fds[0]);
	close(fds[1]);
}
END_TEST

/*
 * Thread-per-core (SPEC A7, A6): a blocked worker's queue goes on on a
 * helper thread pinned to the same CPU.  The blocker spawns its children
 * (homed at its own worker, queued behind it) and blocks in read(); the test
 * adds remote spawns (half of them homed there, through the inbox) and
 * writes the pipe only once all have run.  Back from read(), on the stuck
 * thread while a helper may still run, it spawns more, and one spawn_local
 * task, which must run on that thread.  Every child runs exactly once, each
 * on a thread pinned like its worker's, and stop joins every thread.
 * Without the hand-off the children wait for the blocker, which waits for
 * them: the tcase times out.  With chain, the first child blocks too (on
 * the helper, with half the queue stolen behind it), and a second helper
 * runs both what the first holds and what the worker holds.
 */
enum { TPC_MAX = 4000 };

static _Atomic int tpc_runs[TPC_MAX];
static _Atomic long tpc_wrong_cpu;
static cpu_set_t tpc_cpus;   /* the blocker's thread's, before it blocks */

static bool tpc_on_worker_cpus(void)
{
	cpu_set_t mine;

	ck_assert_int_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
	return CPU_EQUAL(&mine, &tpc_cpus);
}

struct tpc_child {
	long i;
	bool local;   /* homed at the blocker's worker: check the CPUs */
};

static rok_poll tpc_child_poll(rok_cx *cx, void *frame)
{
	struct tpc_child *f = frame;

	ROK_BEGIN(cx);
	if (f->local && !tpc_on_worker_cpus())
		atomic_fetch_add(&tpc_wrong_cpu, 1);
	ROK_YIELD(cx);   /* re-queued by whichever thread runs it */
	if (f->local && !tpc_on_worker_cpus())
		atomic_fetch_add(&tpc_wrong_cpu, 1);
	atomic_fetch_add(&tpc_runs[f->i], 1);
	atomic_fetch_add(&done, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Spawned with rok_spawn_local by the stuck thread while a helper runs:
 * pinned to that thread, not merely to the worker. */
static _Atomic int tpc_local_done, tpc_local_wrong;

struct tpc_local {
	pthread_t want;
};

static rok_poll tpc_local_poll(rok_cx *cx, void *frame)
{
	struct tpc_local *f = frame;

	ROK_BEGIN(cx);
	if (!pthread_equal(pthread_self(), f->want))
		atomic_fetch_add(&tpc_local_wrong, 1);
	ROK_YIELD(cx);
	if (!pthread_equal(pthread_self(), f->want))
		atomic_fetch_add(&tpc_local_wrong, 1);
	atomic_store(&tpc_local_done, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct tpc_blocker {
	int fd, chain_fd;
	long n, late;
	char c;
};

static rok_task *tpc_chain;   /* the second blocker, or NULL */

static void tpc_spawn_children(long from, long to)
{
	for (long i = from; i < to; i++) {
		struct tpc_child c = { .i = i, .local = true };
		ck_assert_int_eq(rok_spawn(NULL, tpc_child_poll, &c, sizeof(c)),
		                 0);
	}
}

static rok_poll tpc_blocker_poll(rok_cx *cx, void *frame)
{
	struct tpc_blocker *f = frame;

	ROK_BEGIN(cx);
	ck_assert_int_eq(sched_getaffinity(0, sizeof(tpc_cpus), &tpc_cpus),
	                 0);
	if (f->chain_fd >= 0) {
		struct blocker b = { .fd = f->chain_fd };
		ck_assert_int_eq(rok_spawn(&tpc_chain, blocker_poll, &b,
		                           sizeof(b)), 0);
	}
	tpc_spawn_children(0, f->n);
	atomic_fetch_add(&blocked, 1);
	if (read(f->fd, &f->c, 1) != 1)
		ROK_RETURN(cx, -1);
	tpc_spawn_children(f->n, f->n + f->late);
	struct tpc_local l = { .want = pthread_self() };
	ck_assert_int_eq(rok_spawn_local(NULL, tpc_local_poll, &l, sizeof(l)),
	                 0);
	ROK_RETURN(cx, f->c);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(tpc_blocked_worker_hands_off)
{
	bool chain = _i == 1;
	long n = test_scale(1000), late = test_scale(1000),
	     remote = test_scale(1000), total = n + late + remote;
	int fds[2], chain_fds[2] = { -1, -1 };
	rok_task *b;
	void *v;
	struct rok_stats st;

	ck_assert_int_le(total, TPC_MAX);
	ck_assert_int_eq(setenv("ROK_THREAD_PER_CORE", "1", 1), 0);
	test_workers(2);
	int threads = test_thread_baseline();
	ck_assert_int_eq(pipe(fds), 0);
	if (chain)
		ck_assert_int_eq(pipe(chain_fds), 0);
	struct tpc_blocker f = { .fd = fds[0], .chain_fd = chain_fds[0],
	                         .n = n, .late = late };
	ck_assert_int_eq(rok_spawn(&b, tpc_blocker_poll, &f, sizeof(f)), 0);
	while (atomic_load(&blocked) < (chain ? 2 : 1))
		sched_yield();
	for (long i = n + late; i < total; i++) {
		struct tpc_child c = { .i = i };
		ck_assert_int_eq(rok_spawn(NULL, tpc_child_poll, &c, sizeof(c)),
		                 0);
	}
	while (atomic_load(&done) < n + remote)
		sched_yield();
	ck_assert_int_eq(write(fds[1], "x", 1), 1);
	ck_assert_int_eq(rok_task_wait(b, &v), 0);
	ck_assert_int_eq((intptr_t)v, 'x');
	if (chain) {
		ck_assert_int_eq(write(chain_fds[1], "y", 1), 1);
		ck_assert_int_eq(rok_task_wait(tpc_chain, &v), 0);
		ck_assert_int_eq((intptr_t)v, 'y');
		rok_task_unref(tpc_chain);
	}
	while (atomic_load(&done) < total || !atomic_load(&tpc_local_done))
		sched_yield();
	ck_assert_int_eq(atomic_load(&tpc_local_wrong), 0);
	for (long i = 0; i < total; i++)
		ck_assert_msg(atomic_load(&tpc_runs[i]) == 1,
		              "child %ld ran %d times", i,
		              atomic_load(&tpc_runs[i]));
	ck_assert_int_eq(atomic_load(&tpc_wrong_cpu), 0);
	rok_stats_get(&st);
	ck_assert_uint_ge(st.handoffs, chain ? 2 : 1);
	ck_assert_uint_eq(st.steals, 0);   /* between workers: none */
	rok_task_unref(b);
	ck_assert_int_eq(rok_stop(), 0);
	ck_assert_int_eq(test_threads_settled(threads), threads);
	ck_assert_int_eq(atomic_load(&done), total);
	close(fds[0]);
	close(fds[1]);
	if (chain) {
		close(chain_fds[0]);
		close(chain_fds[1]);
	}
}
END_TEST

static Suite *handoff_suite(void)
{
	const struct test_case cases[] = {
		{ "blocked_workers", blocked_workers_hand_off },
		{ "stuck_timers", stuck_worker_timers_fire },
		{ "stop_with_helper", stop_with_helper },
		{ "monitor_late_poke", monitor_wakes_after_late_poke },
	};

	Suite *s = TEST_SUITE("handoff", cases, 30);

	test_add(s, "pinned_not_handed_off", pinned_worker_not_handed_off, 2,
	         30);
	/* Loop 0: one blocked worker; 1: its helper blocks too. */
	test_add(s, "tpc", tpc_blocked_worker_hands_off, 2, 30);
	return s;
}

int main(void)
{
	return test_run(handoff_suite());
}
