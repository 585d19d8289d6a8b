/*
 * check_timer.c — sleeps (SPEC A3): never early, in order, cancellable,
 * measured from the first poll, and fired by busy and idle workers alike.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "executor.h"
#include "testutil.h"
#include "timer.h"
#include "worker.h"

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

/*
 * A sleep that ends while its worker has a backlog runs ahead of the
 * backlog (worker.c, `timed`).  One worker: a root task spawns a sleeper
 * (1 ms), a task that computes (no yield) until the sleep is due, and
 * AHEAD_N counting tasks behind it.  The worker fires its wheel every 32
 * polls, so the sleeper must run within the first few dozen of the
 * counting tasks; queued behind them, as before, it ran last.  A round in
 * which the monitor lent the queue to a helper (another thread, another
 * order) is repeated.
 */
#define AHEAD_N 2000

static _Atomic long ahead_count;
static _Atomic int64_t ahead_deadline;     /* the sleeper's */

static rok_poll ahead_count_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	atomic_fetch_add_explicit(&ahead_count, 1, memory_order_relaxed);
	return ROK_READY;
}

struct ahead_sleeper {
	rok_sleep_op sleep;
};

static rok_poll ahead_sleeper_poll(rok_cx *cx, void *frame)
{
	struct ahead_sleeper *f = frame;

	ROK_BEGIN(cx);
	atomic_store(&ahead_deadline, rok_now() + ROK_MS(1));
	ROK_AWAIT(cx, rok_sleep_until(cx, &f->sleep,
	                              atomic_load(&ahead_deadline)));
	ROK_RETURN(cx, atomic_load_explicit(&ahead_count,
	                                    memory_order_relaxed));
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static rok_poll ahead_compute_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	/* Computes until the sleep is due and a tick more: the wheel's
	 * next look finds it. */
	while (rok_now() < atomic_load(&ahead_deadline) + ROK_US(200))
		;
	return ROK_READY;
}

static rok_poll ahead_root_poll(rok_cx *cx, void *frame)
{
	struct ahead_sleeper s = { 0 };
	rok_task *sleeper;

	(void)frame;
	ROK_BEGIN(cx);
	atomic_store(&ahead_deadline, INT64_MAX - ROK_MS(1));
	ck_assert_int_eq(rok_spawn(&sleeper, ahead_sleeper_poll, &s,
	                           sizeof(s)), 0);
	ck_assert_int_eq(rok_spawn(NULL, ahead_compute_poll, NULL, 0), 0);
	for (int i = 0; i < AHEAD_N; i++)
		ck_assert_int_eq(rok_spawn(NULL, ahead_count_poll, NULL, 0), 0);
	ROK_RETURN(cx, sleeper);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(woken_ahead_of_backlog)
{
	long pos = -1;

	test_workers(1);
	ck_assert_int_eq(rok_start(), 0);   /* rok_stats_get needs it */
	for (int round = 0; round < 20; round++) {
		struct rok_stats before, after;
		void *v;

		atomic_store(&ahead_count, 0);
		rok_stats_get(&before);
		rok_task *sleeper = test_spawn_wait(ahead_root_poll, NULL, 0);
		ck_assert_int_eq(rok_task_wait(sleeper, &v), 0);
		rok_task_unref(sleeper);
		while (atomic_load(&ahead_count) < AHEAD_N)
			sched_yield();
		rok_stats_get(&after);
		pos = (long)v;
		if (after.handoffs == before.handoffs)
			break;
	}
	ck_assert_msg(pos >= 0 && pos < AHEAD_N / 2, "the woken sleeper ran "
	              "after %ld of the %d tasks queued before it", pos,
	              AHEAD_N);
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

/*
 * Far and "never" deadlines, and the clock at the edges of the wheel.  The
 * wheel covers 2^52 ns in five levels; these tests move the clock itself
 * (timer_skew_clock) instead of waiting for it.  A sleeper records the
 * order in which it woke and whether it woke early.
 */
#define TIMER_TURN_NS ((int64_t)1 << 52)   /* the whole wheel: 52 days */

static _Atomic int fired[128];
static _Atomic int fired_n;     /* slots of fired[] taken */
static _Atomic int fired_done;  /* slots of fired[] written: what to wait
                                   for before reading them */
static _Atomic int fired_early;

struct far {
	int idx;
	int64_t deadline;
	rok_sleep_op sleep;
};

static rok_poll far_poll(rok_cx *cx, void *frame)
{
	struct far *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_sleep_until(cx, &f->sleep, f->deadline));
	if (rok_now() < f->deadline)
		atomic_store(&fired_early, 1);
	atomic_store(&fired[atomic_fetch_add(&fired_n, 1)], f->idx);
	atomic_fetch_add(&fired_done, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static rok_poll noop_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	return ROK_READY;
}

/* A worker parked before the clock moved sleeps on with its old timeout:
 * a task wakes it, and it looks at its timers when it runs out of work. */
static void far_poke(void)
{
	(void)test_spawn_wait(noop_poll, NULL, 0);
}

/* Moves the clock to `at` (not backwards) and pokes the worker. */
static void far_clock_to(int64_t at)
{
	int64_t now = rok_now();

	if (at > now)
		timer_skew_clock(at - now);
	far_poke();
}

static void far_wait_fired(int n)
{
	while (atomic_load(&fired_done) < n)
		sched_yield();
}

/* Spawns sleepers until deadline[i] in the order given by `spawn_order`,
 * and waits until every one is in the wheel. */
static void far_spawn(rok_task **t, const int64_t *deadline, int n,
                      const int *spawn_order)
{
	int64_t base = rok_registrations();

	for (int k = 0; k < n; k++) {
		int i = spawn_order[k];
		struct far f = { .idx = i, .deadline = deadline[i] };
		ck_assert_int_eq(rok_spawn(&t[i], far_poll, &f, sizeof(f)), 0);
	}
	while (rok_registrations() < base + n) {
		ck_assert_int_eq(atomic_load(&fired_n), 0);
		sched_yield();
	}
}

/* Reaps the n sleepers; none fired early. */
static void far_reap(rok_task **t, int n)
{
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(rok_task_wait(t[i], NULL), 0);
		rok_task_unref(t[i]);
	}
	ck_assert_int_eq(atomic_load(&fired_early), 0);
}

/* The one worker of test_workers(1), once started. */
static struct worker *far_worker(void)
{
	return atomic_load_explicit(&executor.workers[0], memory_order_relaxed);
}

/* Moves the clock to `at` and waits until worker w's wheel has looked at
 * it (fired what came due and moved down what its slots no longer hold). */
static void far_wheel_to(struct worker *w, int64_t at)
{
	far_clock_to(at);
	for (;;) {
		spin_lock(&w->timers.lock);
		uint64_t e = w->timers.elapsed;
		spin_unlock(&w->timers.lock);
		if (e >= (uint64_t)at >> 16)
			break;
		far_poke();
	}
}

/* The n sleepers fired in the order of their idx; reaps them. */
static void far_reap_in_order(rok_task **t, int n)
{
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(atomic_load(&fired[i]), i);
	far_reap(t, n);
}

/*
 * The clock crosses 2^52 ns (a multiple of the wheel's span, which
 * CLOCK_MONOTONIC passes after 52 days of uptime) while timers wait on both
 * sides of it: each level then sees its slot index wrap at once.  They fire
 * in order, none early.  Deadlines are an hour ahead when filed, so every
 * sleeper is in the wheel before the clock is moved to the first.
 */
START_TEST(wrap_at_wheel_span)
{
	enum { N = 20 };
	int64_t deadline[N];
	int spawn_order[N];
	rok_task *t[N];

	test_workers(1);
	timer_skew_clock(TIMER_TURN_NS - ROK_S(3600) - rok_now());
	ck_assert_int_eq(rok_start(), 0);   /* the wheel starts an hour before */
	for (int i = 0; i < N; i++) {
		deadline[i] = TIMER_TURN_NS - ROK_MS(30) + ROK_MS(3) * i;
		spawn_order[i] = (i * 7) % N;   /* 7 is prime to 20: a permutation */
	}
	far_spawn(t, deadline, N, spawn_order);
	far_clock_to(deadline[0] - ROK_MS(5));
	far_wait_fired(N);
	far_reap_in_order(t, N);
}
END_TEST

/*
 * Deadlines from 60 days (rokctl's `sleep 1440h`) to well over a year, past
 * the wheel's span and several turns of its top level, fire in order when
 * the clock gets there, and not before: moved to just after the 12th, the
 * clock fires exactly the first 12.  A sleep until INT64_MAX never fires,
 * and is cancelled at the end.
 */
START_TEST(far_in_order)
{
	enum { N = 24 };
	int64_t base, deadline[N];
	int spawn_order[N];
	rok_task *t[N], *never;

	test_workers(1);
	ck_assert_int_eq(rok_start(), 0);
	base = rok_now();
	for (int i = 0; i < N; i++) {
		deadline[i] = base + ROK_S(1440 * 3600) + ROK_S(17 * 86400) * i +
		              ROK_MS(i % 3);
		spawn_order[i] = (i * 5) % N;   /* 5 is prime to 24 */
	}
	struct far fn = { .idx = -1, .deadline = INT64_MAX };
	ck_assert_int_eq(rok_spawn(&never, far_poll, &fn, sizeof(fn)), 0);
	far_spawn(t, deadline, N, spawn_order);
	far_clock_to(deadline[11] + ROK_MS(1));
	far_wait_fired(12);
	far_clock_to(deadline[N - 1]);
	far_wait_fired(N);
	far_reap_in_order(t, N);
	rok_task_cancel(never);
	ck_assert_int_eq(rok_task_wait(never, NULL), -ECANCELED);
	rok_task_unref(never);
	ck_assert_int_eq(atomic_load(&fired_n), N);
}
END_TEST

/*
 * Against the obvious reference (a sorted array): random deadlines from a
 * second to years away, at every level and across turns of the top one,
 * and the clock moved forward in random steps to between two of them.
 * After each step exactly the deadlines passed have fired, in order: none
 * late, none early.  Deadlines are 2 s apart at least, so the real time
 * that passes meanwhile never reaches the next one.
 */
static uint64_t far_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static int far_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

START_TEST(far_random)
{
	enum { N = 48 };
	/* Spans of the offsets: a level's worth each, then past the wheel. */
	static const int64_t span[] = {
		ROK_S(60), ROK_S(3600), ROK_S(86400), ROK_S(20 * 86400),
		TIMER_TURN_NS, 2 * TIMER_TURN_NS, ROK_S(800 * 86400),
	};
	uint64_t x = 0x9e3779b97f4a7c15u + (uint64_t)_i;
	int64_t base, deadline[N];
	int spawn_order[N];
	rok_task *t[N];

	test_workers(1);
	/* Half the runs start the wheel just before a turn of 2^52 ns. */
	if (_i % 2)
		timer_skew_clock(TIMER_TURN_NS - ROK_S(3600) - rok_now());
	ck_assert_int_eq(rok_start(), 0);
	base = rok_now();
	for (int i = 0; i < N; i++) {
		int64_t sp = span[far_rand(&x) % (sizeof(span) / sizeof(span[0]))];
		deadline[i] = base + ROK_S(2) +
		              (int64_t)(far_rand(&x) % (uint64_t)sp);
		spawn_order[i] = i;
	}
	qsort(deadline, N, sizeof(deadline[0]), far_cmp);
	for (int i = 1; i < N; i++)
		if (deadline[i] < deadline[i - 1] + ROK_S(2))
			deadline[i] = deadline[i - 1] + ROK_S(2);
	for (int i = N - 1; i > 0; i--) {   /* Fisher-Yates */
		int j = (int)(far_rand(&x) % (uint64_t)(i + 1));
		int tmp = spawn_order[i];
		spawn_order[i] = spawn_order[j];
		spawn_order[j] = tmp;
	}
	far_spawn(t, deadline, N, spawn_order);
	for (int done = 0; done < N;) {
		int next = done + 1 + (int)(far_rand(&x) % 8);
		if (next > N)
			next = N;
		/* Between the last deadline to pass and the first to stay. */
		far_clock_to(next < N ? deadline[next - 1] +
		                                (deadline[next] -
		                                 deadline[next - 1]) / 2
		                      : deadline[N - 1] + ROK_MS(1));
		far_wait_fired(next);
		ck_assert_int_eq(atomic_load(&fired_n), next);
		done = next;
	}
	far_reap_in_order(t, N);
}
END_TEST

/*
 * Sleeps that overflow a deadline saturate to "never" instead of wrapping
 * into the past, and far timers cancel like near ones.  `ns` values: 60
 * days, just under INT64_MAX / 1e9 seconds (rokctl's verified `sleep
 * 9223372036s`), INT64_MAX; and sleeps until INT64_MAX and past 2^52.
 */
START_TEST(far_cancel)
{
	static const int64_t ns[] = {
		ROK_S(1440 * 3600), ROK_S(9223372036), INT64_MAX,
		INT64_MAX - 1, TIMER_TURN_NS,
	};
	enum { NS = sizeof(ns) / sizeof(ns[0]), N = NS + 3 };
	rok_task *t[N];
	int64_t base = rok_registrations();

	for (int i = 0; i < NS; i++) {
		struct sleeper s = { .ns = ns[i] };
		ck_assert_int_eq(rok_spawn(&t[i], sleeper_poll, &s, sizeof(s)), 0);
	}
	int64_t until[3] = { INT64_MAX, rok_now() + TIMER_TURN_NS,
	                     rok_deadline(INT64_MAX) };
	ck_assert(until[2] == INT64_MAX);
	for (int i = 0; i < 3; i++) {
		struct far f = { .idx = i, .deadline = until[i] };
		ck_assert_int_eq(rok_spawn(&t[NS + i], far_poll, &f, sizeof(f)),
		                 0);
	}
	while (rok_registrations() < base + N) {
		for (int i = 0; i < N; i++)
			ck_assert_msg(!rok_task_is_finished(t[i]),
			              "sleep %d ended at once", i);
		sched_yield();
	}
	for (int i = 0; i < N; i++) {
		rok_task_cancel(t[i]);
		ck_assert_int_eq(rok_task_wait(t[i], NULL), -ECANCELED);
		rok_task_unref(t[i]);
	}
	ck_assert_int_eq(rok_registrations(), base);
}
END_TEST

/*
 * A timer is filed by how far away it is, not by the highest tick bit in
 * which its deadline differs from the wheel's time: a timer 15 s away whose
 * deadline crosses a multiple of 2^18 ticks (2^34 ns, 17.2 s) sits at level
 * 1 (a level-1 slot spans 2^12 ticks, 268 ms; the level covers 17.2 s), not
 * at level 2.  Filed at level 2, every timer waiting across such a multiple
 * would be moved at once when the clock reached it.  The clock is moved to
 * 10 s before the multiple; real time that passes meanwhile only fires the
 * timers, which also leaves level 2 empty.  Then they fire when the clock
 * passes their deadline, none early.
 */
START_TEST(filed_by_distance)
{
	enum { N = 64 };
	rok_task *t[N];
	int64_t now = rok_now(), b = ((now >> 34) + 2) << 34;

	test_workers(1);
	timer_skew_clock(b - ROK_S(10) - now);
	ck_assert_int_eq(rok_start(), 0);
	int spawn_order[N];
	for (int i = 0; i < N; i++)
		spawn_order[i] = i;
	int64_t deadline[N];
	for (int i = 0; i < N; i++)
		deadline[i] = b + ROK_S(5) + ROK_US(100) * i;
	far_spawn(t, deadline, N, spawn_order);
	struct worker *w = far_worker();
	ck_assert_uint_eq(timer_count_from(&w->timers, 2), 0);
	ck_assert_uint_eq(timer_count_from(&w->timers, 1), N);
	far_clock_to(deadline[N - 1]);
	far_wait_fired(N);
	far_reap(t, N);
}
END_TEST

/*
 * Sleeps shorter than level 0's span (2^12 ticks, 268 ms) go straight to
 * level 0 and are never moved: with a 64-slot level 0 (4.2 ms), every
 * longer sleep moved down once, a whole level-1 slot of them at a time
 * (timer.c).  Sleepers of 100 ms to 256 ms: none above level 0, and none
 * fires early.  A slow machine may fire some before the count is read:
 * they are at no level then either.
 */
START_TEST(short_sleeps_at_level_0)
{
	enum { N = 27 };
	rok_task *t[N];
	int64_t now = rok_now();
	int64_t base = rok_registrations();

	test_workers(1);
	ck_assert_int_eq(rok_start(), 0);
	for (int i = 0; i < N; i++) {
		struct far f = { .idx = i,
		                 .deadline = now + ROK_MS(100) + ROK_MS(6) * i };
		ck_assert_int_eq(rok_spawn(&t[i], far_poll, &f, sizeof(f)), 0);
	}
	/* Each is filed, or fired already. */
	while (rok_registrations() - base + atomic_load(&fired_done) < N)
		sched_yield();
	struct worker *w = far_worker();
	ck_assert_uint_eq(timer_count_from(&w->timers, 1), 0);
	far_clock_to(now + ROK_MS(100) + ROK_MS(6) * N);
	far_wait_fired(N);
	far_reap(t, N);
}
END_TEST

/*
 * More timers than a batch (64) due in one tick wake in the order they
 * were filed (here their deadlines' order), not only in order within each
 * batch: a slot's list keeps the filing order, whether the slot is taken
 * whole (loop 0: the clock jumps past every deadline, so the level-1 slot
 * is fired as it is) or first moved down (loop 1: the clock to the
 * window's start, which moves them to level 0; then past them).  With a
 * list taken from the end it was filed at, loop 0 woke the second batch
 * first.
 */
START_TEST(slot_fires_in_filing_order)
{
	enum { N = 100 };
	rok_task *t[N];
	int64_t deadline[N];
	/* A level-1 slot's window (2^28 ns) starting 1.7 to 2 s on, and a
	 * tick 200 ms into it that every deadline falls in: loop 1 moves the
	 * clock to the window's start, and real time then has 199 ms to
	 * pass before the counts are read. */
	int64_t win = ((rok_now() + ROK_S(2)) >> 28) << 28;
	int64_t tick = ((win + ROK_MS(200)) >> 16) << 16;

	test_workers(1);
	ck_assert_int_eq(rok_start(), 0);
	struct worker *w = far_worker();
	for (int i = 0; i < N; i++) {
		int64_t base = rok_registrations();
		deadline[i] = tick + 1000 + 100 * i;
		struct far f = { .idx = i, .deadline = deadline[i] };
		ck_assert_int_eq(rok_spawn(&t[i], far_poll, &f, sizeof(f)), 0);
		while (rok_registrations() < base + 1)   /* filed, in turn */
			sched_yield();
	}
	ck_assert_uint_eq(timer_count_from(&w->timers, 1), N);
	if (_i == 1) {
		far_wheel_to(w, win + ROK_MS(1));
		ck_assert_uint_eq(timer_count_from(&w->timers, 1), 0);
		ck_assert_uint_eq(timer_count_from(&w->timers, 0), N);
	}
	/* Past the tick the deadlines round up to: all due at one look. */
	far_clock_to(tick + (1 << 16));
	far_wait_fired(N);
	far_reap_in_order(t, N);
}
END_TEST

/*
 * A top-level slot and a lower one that start at the same tick.
 * The top level names the windows after elapsed, so the top slot must be
 * taken first: taken after the lower one, elapsed is already at its start
 * and it reads as a turn (2^36 ticks, 52 days) later.  A (20 h away, so at
 * the top level) and B (1 h away when filed, level 3) both start at t, a
 * multiple of 2^46 ns (2^30 ticks).  With the clock past both, both fire.
 */
START_TEST(top_slot_tie)
{
	rok_task *t[2];
	int64_t now = rok_now(), tb = ((now >> 46) + 2) << 46;
	int64_t deadline[2] = { tb + ROK_MS(1), tb + ROK_MS(2) };
	int order0[1] = { 0 };

	test_workers(1);
	timer_skew_clock(tb - ROK_S(20 * 3600) - now);
	ck_assert_int_eq(rok_start(), 0);
	struct worker *w = far_worker();
	far_spawn(t, deadline, 1, order0);
	ck_assert_uint_eq(timer_count_from(&w->timers, 4), 1);
	far_wheel_to(w, tb - ROK_S(3600));
	struct far f = { .idx = 1, .deadline = deadline[1] };
	int64_t base = rok_registrations();
	ck_assert_int_eq(rok_spawn(&t[1], far_poll, &f, sizeof(f)), 0);
	while (rok_registrations() < base + 1)
		sched_yield();
	ck_assert_uint_eq(timer_count_from(&w->timers, 4), 1);
	ck_assert_uint_eq(timer_count_from(&w->timers, 3), 2);
	far_clock_to(tb + ROK_MS(10));
	far_wait_fired(2);
	ck_assert_int_eq(atomic_load(&fired[0]), 0);
	ck_assert_int_eq(atomic_load(&fired[1]), 1);
	far_reap(t, 2);
}
END_TEST

/*
 * Timers of one slot fire while another thread cancels them.  Firing wakes
 * tasks in batches of 64 and drops the wheel's lock to do it; a sleeper
 * released meanwhile must be unlinked from wherever the firing thread keeps
 * the rest of the slot, and the firing thread must not hold on to it.
 *
 * Two workers.  Sleepers that start on one of them (`race_worker`) sleep
 * until the same deadline, so they share a slot of its wheel, and record
 * the order in which they were filed there; the others (and any that come
 * too late to be filed) end at once.  When
 * the firing thread has woken its first batch (timer_hook_batch), it waits
 * while every sleeper after the batch is cancelled and has ended: the other
 * worker polls them and releases their nodes, the first of them the one a
 * firing thread that walked its own copy of the slot would go on with (a
 * crash, or a use after free under ASan, before the fix).
 */
struct racer {
	int64_t deadline;
	long idx;
	rok_sleep_op sleep;
};

static void *race_worker;
static _Atomic long race_filed, race_skipped;
static _Atomic long race_pos_done;    /* race_slot_pos entries written */
static _Atomic long *race_slot_pos;   /* per sleeper: order in the slot */
static _Atomic int race_window;       /* 1: firing thread in the hook; 2: go */

static rok_poll racer_poll(rok_cx *cx, void *frame)
{
	struct racer *f = frame;

	ROK_BEGIN(cx);
	if ((void *)executor_tls.worker != race_worker ||
	    rok_now() >= f->deadline - ROK_MS(1)) {
		atomic_fetch_add(&race_skipped, 1);
		ROK_RETURN(cx, NULL);
	}
	atomic_store(&race_slot_pos[f->idx], atomic_fetch_add(&race_filed, 1));
	atomic_fetch_add(&race_pos_done, 1);
	ROK_AWAIT(cx, rok_sleep_until(cx, &f->sleep, f->deadline));
	ROK_RETURN(cx, (void *)1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static rok_poll race_whoami_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	ROK_RETURN(cx, executor_tls.worker);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* The first window of a round holds the firing thread until the test is
 * done cancelling. */
static void race_hook(void)
{
	int idle = 0;

	if (!atomic_compare_exchange_strong(&race_window, &idle, 1))
		return;
	while (atomic_load(&race_window) != 2)
		sched_yield();
}

static void race_wake_others(void)
{
	for (unsigned i = 0; i < executor.nworkers; i++) {
		struct worker *w = atomic_load(&executor.workers[i]);
		if ((void *)w != race_worker)
			worker_unpark(w);
	}
}

START_TEST(fire_while_cancelling)
{
	enum { CHUNK = 64, WANT = 256, CAP = 4096 };
	rok_task **t = calloc(CAP, sizeof(*t));
	rok_task **in_slot = calloc(CAP, sizeof(*in_slot));

	race_slot_pos = calloc(CAP, sizeof(*race_slot_pos));
	ck_assert_ptr_nonnull(t);
	ck_assert_ptr_nonnull(in_slot);
	ck_assert_ptr_nonnull(race_slot_pos);
	test_workers(2);
	race_worker = test_spawn_wait(race_whoami_poll, NULL, 0);
	timer_hook_batch(race_hook);
	for (int round = 0; round < 2; round++) {
		int64_t base = rok_registrations();
		long n, filed;
		/* The sleepers must be filed before their deadline, and a
		 * loaded machine can take longer than any fixed lead to spawn
		 * them: a late one is not counted (race_slot_pos stays -1),
		 * and an attempt with too few in the slot is waited out and
		 * made again with twice the lead. */
		for (int64_t lead = ROK_S(1);; lead *= 2) {
			int64_t deadline = rok_now() + lead;
			n = 0;
			atomic_store(&race_filed, 0);
			atomic_store(&race_skipped, 0);
			atomic_store(&race_pos_done, 0);
			atomic_store(&race_window, 0);
			/* Chunks until the slot holds WANT, whatever the other
			 * worker takes. */
			while (atomic_load(&race_filed) < WANT &&
			       n + CHUNK <= CAP) {
				for (int j = 0; j < CHUNK; j++, n++) {
					struct racer init = {
						.deadline = deadline, .idx = n
					};
					atomic_store(&race_slot_pos[n], -1);
					ck_assert_int_eq(
						rok_spawn(&t[n], racer_poll,
					                  &init, sizeof(init)),
						0);
				}
				/* Written, not only taken: a slot's position
				 * is stored after its fetch_add. */
				while (atomic_load(&race_pos_done) +
				       atomic_load(&race_skipped) < n)
					sched_yield();
			}
			filed = atomic_load(&race_filed);
			if (filed > CHUNK || lead >= ROK_S(8))
				break;
			atomic_store(&race_window, 2);
			for (long i = 0; i < n; i++) {
				int err = rok_task_wait(t[i], NULL);
				ck_assert(err == 0 || err == -ECANCELED);
				rok_task_unref(t[i]);
			}
		}
		ck_assert_int_gt(filed, CHUNK);
		for (long i = 0; i < n; i++) {
			long pos = atomic_load(&race_slot_pos[i]);
			if (pos >= 0)
				in_slot[pos] = t[i];
		}
		while (atomic_load(&race_window) != 1)
			sched_yield();
		for (long k = CHUNK; k < filed; k++)
			rok_task_cancel(in_slot[k]);
		/* The firing worker still counts as searching, so the cancels
		 * woke nobody: wake the other one. */
		race_wake_others();
		for (long k = CHUNK; k < filed; k++) {
			int err = rok_task_wait(in_slot[k], NULL);
			ck_assert(err == 0 || err == -ECANCELED);
		}
		atomic_store(&race_window, 2);
		for (long i = 0; i < n; i++) {
			int err = rok_task_wait(t[i], NULL);
			ck_assert(err == 0 || err == -ECANCELED);
			rok_task_unref(t[i]);
		}
		ck_assert_int_eq(rok_registrations(), base);
	}
	timer_hook_batch(NULL);
	free(race_slot_pos);
	free(in_slot);
	free(t);
}
END_TEST

static Suite *timer_suite(void)
{
	const struct test_case cases[] = {
		{ "never_early", never_early },
		{ "zero_and_past", zero_and_past },
		{ "until_levels", sleep_until_levels },
		{ "in_order_busy", in_order_under_busy_worker },
		{ "woken_ahead", woken_ahead_of_backlog },
		{ "cancel_removes", cancel_removes_timer },
		{ "first_poll", measured_from_first_poll },
		{ "idle_wakes", idle_worker_wakes_for_timer },
		{ "wrap_at_span", wrap_at_wheel_span },
		{ "far_in_order", far_in_order },
		{ "far_cancel", far_cancel },
		{ "fire_while_cancelling", fire_while_cancelling },
		{ "filed_by_distance", filed_by_distance },
		{ "short_sleeps_at_level_0", short_sleeps_at_level_0 },
		{ "top_slot_tie", top_slot_tie },
	};

	Suite *s = TEST_SUITE("timer", cases, 30);

	test_add(s, "far_random", far_random, 8, 30);
	test_add(s, "slot_fires_in_filing_order", slot_fires_in_filing_order, 2,
	         30);
	return s;
}

int main(void)
{
	return test_run(timer_suite());
}
