/*
 * check_handoff.c — blocking detection (SPEC A6): a worker stuck in a
 * blocking call does not stall the tasks queued behind it.
 *
 * The tests block workers in read() on pipes that the test thread writes
 * only after the other tasks finished, and queue those tasks only once
 * every blocker is inside its read(), so without a hand-off they would
 * deadlock; with it they complete.  Nothing here depends on timing except
 * the "not handed off" case, which watches for a while that nothing happens.
 */
#include <pthread.h>
#include <errno.h>
#include <stdatomic.h>
#include <unistd.h>

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

/* A worker with spawn_local tasks pinned to it is not handed off. */
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
	ck_assert_int_eq(pipe(fds), 0);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct pinner f = { .fd = fds[0], .ch = ch };
	ck_assert_int_eq(rok_spawn(&t, pinner_poll, &f, sizeof(f)), 0);
	while (!atomic_load(&pinned_ready))
		sched_yield();
	test_sleep_ms(50);   /* many monitor periods: watch nothing happen */
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

static Suite *handoff_suite(void)
{
	const struct test_case cases[] = {
		{ "blocked_workers", blocked_workers_hand_off },
		{ "stuck_timers", stuck_worker_timers_fire },
		{ "pinned_not_handed_off", pinned_worker_not_handed_off },
		{ "stop_with_helper", stop_with_helper },
	};

	return TEST_SUITE("handoff", cases, 30);
}

int main(void)
{
	return test_run(handoff_suite());
}
