/*
 * check_timer.c — sleeps (SPEC A3): never early, in order, cancellable,
 * measured from the first poll, and fired by busy and idle workers alike.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "testutil.h"

struct sleeper {
	int64_t ns, start, woke;
	rok_sleep_op sleep;
};

static rok_poll sleeper_poll(rok_cx *cx, void *frame)
{
	struct sleeper *f = frame;

	ROK_BEGIN(cx);
	f->start = rok_now();
	ROK_AWAIT(cx, rok_sleep(cx, &f->sleep, f->ns));
	f->woke = rok_now();
	ROK_RETURN(cx, f->woke - f->start >= f->ns);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(never_early)
{
	long n = test_scale(2000);
	rok_task **t = calloc((size_t)n, sizeof(*t));

	ck_assert_ptr_nonnull(t);
	for (long i = 0; i < n; i++) {
		struct sleeper s = { .ns = ROK_US(1 + (i * 7919) % 20000) };
		ck_assert_int_eq(rok_spawn(&t[i], sleeper_poll, &s, sizeof(s)), 0);
	}
	for (long i = 0; i < n; i++) {
		void *ok;
		ck_assert_int_eq(rok_task_wait(t[i], &ok), 0);
		ck_assert_msg(ok != NULL, "sleep %ld woke early", i);
		rok_task_unref(t[i]);
	}
	free(t);
}
END_TEST

START_TEST(zero_and_past)
{
	struct sleeper s = { .ns = 0 };

	ck_assert_ptr_nonnull(test_spawn_wait(sleeper_poll, &s, sizeof(s)));
	s.ns = -5;
	ck_assert_ptr_nonnull(test_spawn_wait(sleeper_poll, &s, sizeof(s)));
}
END_TEST

/* Far deadlines (past several wheel levels) still come back in order. */
struct until {
	int64_t deadline;
	rok_sleep_op sleep;
};

static rok_poll until_poll(rok_cx *cx, void *frame)
{
	struct until *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_sleep_until(cx, &f->sleep, f->deadline));
	ROK_RETURN(cx, rok_now() >= f->deadline);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(sleep_until_levels)
{
	int64_t base = rok_now();
	int64_t offs[] = { 0, ROK_US(70), ROK_MS(3), ROK_MS(40), ROK_MS(300) };
	rok_task *t[5];

	for (int i = 0; i < 5; i++) {
		struct until u = { .deadline = base + offs[i] };
		ck_assert_int_eq(rok_spawn(&t[i], until_poll, &u, sizeof(u)), 0);
	}
	for (int i = 0; i < 5; i++) {
		void *ok;
		ck_assert_int_eq(rok_task_wait(t[i], &ok), 0);
		ck_assert_ptr_nonnull(ok);
		rok_task_unref(t[i]);
	}
}
END_TEST

/*
 * Timers fire in deadline order even on one worker kept busy by a task
 * that yields forever.  The sleepers are spawned latest deadline first, so
 * the order comes from the wheel, not from the queue.
 *
 * That holds for timers that sit in the wheel together: one registered
 * after an earlier deadline passed may rightly fire after a later one that
 * was due already.  So the deadlines are absolute, `margin` after a common
 * base, and each sleeper notes when its registration was done; a round in
 * which the last registration came after the first deadline (a loaded
 * machine kept the worker away) proves nothing and is run again with twice
 * the margin.
 */
#define ORDERED_N      20
#define ORDERED_ROUNDS 12          /* margins 4 ms .. 8 s */

static int order[ORDERED_N];
static int64_t registered[ORDERED_N];
/* order_n hands out slots of order[]; order_done counts the slots written.
 * A sleeper writes its slot, then adds to order_done with release; the
 * test thread's acquire load of the final count therefore sees every slot
 * (each RMW continues the release sequence of the ones before it). */
static _Atomic int order_n, order_done;
static _Atomic int stop_spinning;

struct ordered {
	int idx;
	bool armed;
	int64_t deadline;
	rok_sleep_op sleep;
};

/* rok_sleep_until, noting the time just after the first poll armed the
 * timer (or found it due: then the time is past the deadline). */
static rok_poll ordered_sleep(rok_cx *cx, struct ordered *f)
{
	rok_poll p = rok_sleep_until(cx, &f->sleep, f->deadline);

	if (!f->armed) {
		f->armed = true;
		registered[f->idx] = rok_now();
	}
	return p;
}

static rok_poll ordered_poll(rok_cx *cx, void *frame)
{
	struct ordered *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, ordered_sleep(cx, f));
	order[atomic_fetch_add_explicit(&order_n, 1, memory_order_relaxed)] =
		f->idx;
	atomic_fetch_add_explicit(&order_done, 1, memory_order_release);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static rok_poll spinner_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	while (!atomic_load(&stop_spinning))
		ROK_YIELD(cx);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct spawn_all {
	int64_t base;
	rok_task *spinner;
};

static rok_poll spawn_all_poll(rok_cx *cx, void *frame)
{
	struct spawn_all *f = frame;

	ROK_BEGIN(cx);
	ck_assert_int_eq(rok_spawn(&f->spinner, spinner_poll, NULL, 0), 0);
	for (int i = ORDERED_N - 1; i >= 0; i--) {
		struct ordered o = {
			.idx = i, .deadline = f->base + ROK_MS(2) * i,
		};
		ck_assert_int_eq(rok_spawn(NULL, ordered_poll, &o, sizeof(o)), 0);
	}
	ROK_RETURN(cx, f->spinner);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(in_order_under_busy_worker)
{
	int64_t margin = ROK_MS(4);
	int round = 0;

	test_workers(1);
	for (;; round++, margin *= 2) {
		ck_assert_msg(round < ORDERED_ROUNDS, "no round in which all %d "
		              "timers were armed before the first was due",
		              ORDERED_N);
		atomic_store(&order_n, 0);
		atomic_store(&order_done, 0);
		atomic_store(&stop_spinning, 0);
		struct spawn_all f = { .base = rok_now() + margin };
		rok_task *spinner = test_spawn_wait(spawn_all_poll, &f,
		                                    sizeof(f));
		while (atomic_load_explicit(&order_done, memory_order_acquire) <
		       ORDERED_N)
			sched_yield();
		atomic_store(&stop_spinning, 1);
		ck_assert_int_eq(rok_task_wait(spinner, NULL), 0);
		rok_task_unref(spinner);

		int64_t last = registered[0];
		for (int i = 1; i < ORDERED_N; i++)
			if (registered[i] > last)
				last = registered[i];
		if (last < f.base)   /* f.base: the first deadline */
			break;
	}
	for (int i = 0; i < ORDERED_N; i++)
		ck_assert_msg(order[i] == i, "round %d: timer %d fired as "
		              "number %d", round, order[i], i);
}
END_TEST

/* Cancelling a sleeper removes its timer at once. */
START_TEST(cancel_removes_timer)
{
	rok_task *t[16];
	int64_t base = rok_registrations();

	for (int i = 0; i < 16; i++) {
		struct sleeper s = { .ns = ROK_S(3600) };
		ck_assert_int_eq(rok_spawn(&t[i], sleeper_poll, &s, sizeof(s)), 0);
	}
	while (rok_registrations() < base + 16)
		sched_yield();
	for (int i = 0; i < 16; i++) {
		rok_task_cancel(t[i]);
		ck_assert_int_eq(rok_task_wait(t[i], NULL), -ECANCELED);
		rok_task_unref(t[i]);
	}
	ck_assert_int_eq(rok_registrations(), base);
}
END_TEST

/* The sleep counts from the first poll, not from the spawn: a task that
 * waits in the queue behind a busy worker still sleeps its full time. */
static rok_poll busy_poll(rok_cx *cx, void *frame)
{
	int64_t until = rok_now() + ROK_US(10);

	(void)cx;
	(void)frame;
	while (rok_now() < until)
		;   /* short: a long poll would be handed off */
	return ROK_READY;
}

static int64_t first_poll;

static rok_poll late_sleeper_poll(rok_cx *cx, void *frame)
{
	struct sleeper *f = frame;

	ROK_BEGIN(cx);
	first_poll = rok_now();
	ROK_AWAIT(cx, rok_sleep(cx, &f->sleep, f->ns));
	ROK_RETURN(cx, rok_now() - first_poll);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/*
 * Queues 3,000 busy tasks of 10 us and then the sleeper, all pinned to this
 * worker with spawn_local: a strict FIFO that no LIFO slot, injector check,
 * thief or helper reorders, so the sleeper's first poll comes 30 ms after
 * its spawn.  A sleep counted from the spawn would end at once.
 */
struct late_spawner {
	struct sleeper *s;
	rok_task *t;
	rok_join_op join;
	void *took;
};

static rok_poll late_spawner_poll(rok_cx *cx, void *frame)
{
	struct late_spawner *f = frame;

	ROK_BEGIN(cx);
	for (int i = 0; i < 3000; i++)
		ck_assert_int_eq(rok_spawn_local(NULL, busy_poll, NULL, 0), 0);
	f->s->start = rok_now();
	ck_assert_int_eq(rok_spawn_local(&f->t, late_sleeper_poll, f->s,
	                                 sizeof(*f->s)), 0);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->t, &f->took));
	ROK_RETURN(cx, f->took);
	ROK_CLEANUP(cx);
	rok_task_unref(f->t);
	ROK_END(cx);
}

START_TEST(measured_from_first_poll)
{
	struct sleeper s = { .ns = ROK_MS(20) };
	struct late_spawner f = { .s = &s };

	test_workers(1);
	void *took = test_spawn_wait(late_spawner_poll, &f, sizeof(f));
	ck_assert_int_ge(first_poll - s.start, ROK_MS(25));
	ck_assert_int_ge((int64_t)(intptr_t)took, ROK_MS(20));
}
END_TEST

/* An idle worker parks only until its next timer: a lone sleep on an idle
 * pool finishes (the futex timeout wakes it, nobody else does). */
START_TEST(idle_worker_wakes_for_timer)
{
	struct sleeper s = { .ns = ROK_MS(30) };

	test_workers(2);
	ck_assert_int_eq(rok_start(), 0);
	test_sleep_ms(20);   /* both workers are parked by now */
	ck_assert_ptr_nonnull(test_spawn_wait(sleeper_poll, &s, sizeof(s)));
}
END_TEST

static Suite *timer_suite(void)
{
	const struct test_case cases[] = {
		{ "never_early", never_early },
		{ "zero_and_past", zero_and_past },
		{ "until_levels", sleep_until_levels },
		{ "in_order_busy", in_order_under_busy_worker },
		{ "cancel_removes", cancel_removes_timer },
		{ "first_poll", measured_from_first_poll },
		{ "idle_wakes", idle_worker_wakes_for_timer },
	};

	return TEST_SUITE("timer", cases, 30);
}

int main(void)
{
	return test_run(timer_suite());
}
