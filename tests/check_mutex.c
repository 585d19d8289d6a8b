/*
 * check_mutex.c — the async mutex (rok/mutex.h), rule by rule (SPEC A11).
 *
 * exclusion: many tasks on 2 workers increment a plain counter inside the
 *   critical section across an await; no two are ever inside at once and
 *   no increment is lost.
 * fifo: waiters get the lock in the order they queued; unlock hands it
 *   over, so a try_lock right after it cannot barge in.
 * cancel_waiter: a cancel wakes a task waiting for the lock; it leaves
 *   without the lock, runs its cleanup once and leaves no registration.
 * kept: a waiter cancelled after the lock was handed to it keeps the lock
 *   when its next poll completes the lock op; it leaves at its next await
 *   and its cleanup unlocks.
 * release_passes: a lock op released (cx->releasing) after the lock was
 *   handed to it passes the lock to the next waiter, or unlocks.
 * cancel_stress: tasks lock and unlock while the test cancels them at
 *   random; afterwards the mutex is free and no registration is left.
 *
 * Tasks never call ck_assert: they count surprises in `bad`, which the test
 * thread asserts is zero.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rok/mutex.h"
#include "testutil.h"
#include "waitq.h"

static rok_mutex mu = ROK_MUTEX_INIT;
static _Atomic int bad;
static _Atomic int inside;
static _Atomic int cleanups;
static _Atomic int got_lock;
static _Atomic int after_await;
static _Atomic int lockers_started;
static long counter;                 /* guarded by mu */

static void wait_regs(int64_t want)
{
	while (rok_registrations() != want)
		sched_yield();
}

/* ---- exclusion -------------------------------------------------------- */

struct incr {
	long iters, i, v;
	rok_mutex_op op;
};

static rok_poll incr_poll(rok_cx *cx, void *frame)
{
	struct incr *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < f->iters; f->i++) {
		ROK_AWAIT(cx, rok_mutex_lock(cx, &f->op, &mu));
		if (atomic_fetch_add(&inside, 1) != 0)
			atomic_fetch_add(&bad, 1);
		f->v = counter;
		ROK_YIELD(cx);   /* an await inside the critical section */
		counter = f->v + 1;
		atomic_fetch_sub(&inside, 1);
		if (rok_mutex_unlock(&mu) != 0)
			atomic_fetch_add(&bad, 1);
	}
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(mutex_exclusion)
{
	enum { TASKS = 16 };
	long iters = test_scale(300);
	rok_task *t[TASKS];

	test_workers(2);
	for (int i = 0; i < TASKS; i++) {
		struct incr f = { .iters = iters };
		ck_assert_int_eq(rok_spawn(&t[i], incr_poll, &f, sizeof(f)), 0);
	}
	for (int i = 0; i < TASKS; i++) {
		ck_assert_int_eq(rok_task_wait(t[i], NULL), 0);
		rok_task_unref(t[i]);
	}
	ck_assert_int_eq(atomic_load(&bad), 0);
	ck_assert_int_eq(counter, TASKS * iters);
	ck_assert(!rok_mutex_is_locked(&mu));
}
END_TEST

/* ---- fifo ------------------------------------------------------------- */

static int order[16];
static _Atomic int order_len;

struct orderly {
	int id;
	rok_chan *hold;      /* if set: keep the lock until a value arrives */
	void *v;
	int err;
	rok_chan_op cop;
	rok_mutex_op op;
};

static rok_poll orderly_poll(rok_cx *cx, void *frame)
{
	struct orderly *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_mutex_lock(cx, &f->op, &mu));
	order[atomic_fetch_add(&order_len, 1)] = f->id;
	if (f->hold != NULL)
		ROK_AWAIT(cx, rok_chan_recv(cx, &f->cop, f->hold, &f->v,
		                            &f->err));
	ROK_YIELD(cx);
	if (rok_mutex_unlock(&mu) != 0)
		atomic_fetch_add(&bad, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(mutex_fifo)
{
	enum { N = 8 };
	rok_task *t[N];
	rok_chan *hold;

	test_workers(2);
	ck_assert_int_eq(rok_start(), 0);
	ck_assert_int_eq(rok_chan_new(&hold, 1), 0);
	int64_t base = rok_registrations();
	ck_assert_int_eq(rok_mutex_try_lock(&mu), 0);
	for (int i = 0; i < N; i++) {
		struct orderly f = { .id = i, .hold = i == 0 ? hold : NULL };
		ck_assert_int_eq(rok_spawn(&t[i], orderly_poll, &f, sizeof(f)),
		                 0);
		wait_regs(base + i + 1);   /* queued before the next one */
	}
	ck_assert_int_eq(rok_mutex_unlock(&mu), 0);
	/* Handed to waiter 0, which holds it until `hold` gets a value. */
	ck_assert_int_eq(rok_mutex_try_lock(&mu), -EBUSY);
	ck_assert(rok_mutex_is_locked(&mu));
	ck_assert_int_eq(rok_chan_try_send(hold, (void *)1), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(rok_task_wait(t[i], NULL), 0);
		rok_task_unref(t[i]);
	}
	ck_assert_int_eq(atomic_load(&order_len), N);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(order[i], i);
	ck_assert_int_eq(atomic_load(&bad), 0);
	ck_assert(!rok_mutex_is_locked(&mu));
	ck_assert_int_eq(rok_mutex_unlock(&mu), -EPERM);
	ck_assert_int_eq(rok_registrations(), base);
	rok_chan_free(hold, NULL);
}
END_TEST

/* ---- cancel_waiter, kept ---------------------------------------------- */

/* Locks, notes it, awaits once more (a yield), unlocks; the cleanup unlocks
 * if the body was left while holding the lock. */
struct locker {
	bool held;
	rok_mutex_op op;
};

static rok_poll locker_poll(rok_cx *cx, void *frame)
{
	struct locker *f = frame;

	ROK_BEGIN(cx);
	atomic_fetch_add(&lockers_started, 1);
	ROK_AWAIT(cx, rok_mutex_lock(cx, &f->op, &mu));
	f->held = true;
	atomic_fetch_add(&got_lock, 1);
	ROK_YIELD(cx);
	atomic_fetch_add(&after_await, 1);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cleanups, 1);
	if (f->held && rok_mutex_unlock(&mu) != 0)
		atomic_fetch_add(&bad, 1);
	ROK_END(cx);
}

START_TEST(mutex_cancel_waiter)
{
	rok_task *t;

	test_workers(2);
	ck_assert_int_eq(rok_start(), 0);
	int64_t base = rok_registrations();
	ck_assert_int_eq(rok_mutex_try_lock(&mu), 0);
	struct locker f = { 0 };
	ck_assert_int_eq(rok_spawn(&t, locker_poll, &f, sizeof(f)), 0);
	wait_regs(base + 1);
	rok_task_cancel(t);
	ck_assert_int_eq(rok_task_wait(t, NULL), -ECANCELED);
	rok_task_unref(t);
	ck_assert_int_eq(atomic_load(&cleanups), 1);
	ck_assert_int_eq(atomic_load(&got_lock), 0);
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert(rok_mutex_is_locked(&mu));   /* still ours */
	ck_assert_int_eq(rok_mutex_unlock(&mu), 0);
	ck_assert(!rok_mutex_is_locked(&mu));  /* nobody left to hand it to */
	ck_assert_int_eq(atomic_load(&bad), 0);
}
END_TEST

/* In one poll (one worker, so the waiter cannot run in between): hands the
 * lock to the waiter, then cancels the waiter.  (Not by registration count:
 * the test thread's rok_task_wait counts as one too.) */
struct handoff {
	rok_task *waiter;
	rok_mutex_op op;
};

static rok_poll handoff_poll(rok_cx *cx, void *frame)
{
	struct handoff *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_mutex_lock(cx, &f->op, &mu));
	{
		struct locker l = { 0 };
		if (rok_spawn(&f->waiter, locker_poll, &l, sizeof(l)) != 0)
			atomic_fetch_add(&bad, 1);
	}
	/* One worker: once the waiter's first poll ran, it is queued. */
	while (atomic_load(&lockers_started) == 0)
		ROK_YIELD(cx);
	if (rok_mutex_unlock(&mu) != 0)
		atomic_fetch_add(&bad, 1);
	rok_task_cancel(f->waiter);
	ROK_RETURN(cx, f->waiter);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(mutex_kept)
{
	rok_task *t;
	void *w = NULL;

	test_workers(1);
	ck_assert_int_eq(rok_start(), 0);
	int64_t base = rok_registrations();
	struct handoff f = { 0 };
	ck_assert_int_eq(rok_spawn(&t, handoff_poll, &f, sizeof(f)), 0);
	ck_assert_int_eq(rok_task_wait(t, &w), 0);
	rok_task_unref(t);
	rok_task *waiter = w;
	ck_assert_int_eq(rok_task_wait(waiter, NULL), -ECANCELED);
	ck_assert(rok_task_is_cancelled(waiter));
	rok_task_unref(waiter);
	ck_assert_int_eq(atomic_load(&got_lock), 1);     /* kept it */
	ck_assert_int_eq(atomic_load(&after_await), 0);  /* left at the yield */
	ck_assert_int_eq(atomic_load(&cleanups), 1);     /* which unlocked */
	ck_assert(!rok_mutex_is_locked(&mu));
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(atomic_load(&bad), 0);
}
END_TEST

/* ---- release_passes --------------------------------------------------- */

/*
 * Drives a lock op by hand, the way a combinator would: first poll queues
 * it; the next poll (the wake-up that handed it the lock) abandons the op
 * with cx->releasing instead of completing it.
 */
struct manual {
	int step;
	rok_mutex_op op;
};

static rok_poll manual_poll(rok_cx *cx, void *frame)
{
	struct manual *f = frame;

	if (f->step == 0) {
		f->step = 1;
		if (rok_mutex_lock(cx, &f->op, &mu) == ROK_READY)
			atomic_fetch_add(&bad, 1);   /* the test holds it */
		return ROK_PENDING;
	}
	/* Only the hand-off wakes us. */
	if (atomic_load(&f->op.w.state) != WAITQ_WOKEN)
		atomic_fetch_add(&bad, 1);
	rok_cx rel = *cx;
	rel.releasing = true;
	if (rok_mutex_lock(&rel, &f->op, &mu) != ROK_PENDING)
		atomic_fetch_add(&bad, 1);
	return ROK_READY;
}

START_TEST(mutex_release_passes)
{
	rok_task *m, *next;

	test_workers(2);
	ck_assert_int_eq(rok_start(), 0);
	int64_t base = rok_registrations();

	/* A second waiter queued behind: the released lock goes to it. */
	ck_assert_int_eq(rok_mutex_try_lock(&mu), 0);
	struct manual mf = { 0 };
	ck_assert_int_eq(rok_spawn(&m, manual_poll, &mf, sizeof(mf)), 0);
	wait_regs(base + 1);
	struct locker lf = { 0 };
	ck_assert_int_eq(rok_spawn(&next, locker_poll, &lf, sizeof(lf)), 0);
	wait_regs(base + 2);
	ck_assert_int_eq(rok_mutex_unlock(&mu), 0);   /* to the manual op */
	ck_assert_int_eq(rok_task_wait(m, NULL), 0);
	ck_assert_int_eq(rok_task_wait(next, NULL), 0);
	rok_task_unref(m);
	rok_task_unref(next);
	ck_assert_int_eq(atomic_load(&got_lock), 1);
	ck_assert_int_eq(atomic_load(&cleanups), 1);
	ck_assert(!rok_mutex_is_locked(&mu));
	ck_assert_int_eq(rok_registrations(), base);

	/* Alone: the release unlocks. */
	ck_assert_int_eq(rok_mutex_try_lock(&mu), 0);
	mf.step = 0;
	ck_assert_int_eq(rok_spawn(&m, manual_poll, &mf, sizeof(mf)), 0);
	wait_regs(base + 1);
	ck_assert_int_eq(rok_mutex_unlock(&mu), 0);
	ck_assert_int_eq(rok_task_wait(m, NULL), 0);
	rok_task_unref(m);
	ck_assert(!rok_mutex_is_locked(&mu));
	ck_assert_int_eq(rok_mutex_try_lock(&mu), 0);
	ck_assert_int_eq(rok_mutex_unlock(&mu), 0);
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(atomic_load(&bad), 0);
}
END_TEST

/* ---- cancel_stress ---------------------------------------------------- */

struct churn {
	long iters, i;
	bool held;
	rok_mutex_op op;
};

static rok_poll churn_poll(rok_cx *cx, void *frame)
{
	struct churn *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < f->iters; f->i++) {
		ROK_AWAIT(cx, rok_mutex_lock(cx, &f->op, &mu));
		f->held = true;
		if (atomic_fetch_add(&inside, 1) != 0)
			atomic_fetch_add(&bad, 1);
		ROK_YIELD(cx);
		atomic_fetch_sub(&inside, 1);
		f->held = false;
		if (rok_mutex_unlock(&mu) != 0)
			atomic_fetch_add(&bad, 1);
	}
	ROK_CLEANUP(cx);
	if (f->held) {
		atomic_fetch_sub(&inside, 1);
		if (rok_mutex_unlock(&mu) != 0)
			atomic_fetch_add(&bad, 1);
	}
	atomic_fetch_add(&cleanups, 1);
	ROK_END(cx);
}

START_TEST(mutex_cancel_stress)
{
	enum { TASKS = 32 };
	long rounds = test_scale(40);
	rok_task *t[TASKS];
	uint32_t rng = 12345;

	test_workers(2);
	ck_assert_int_eq(rok_start(), 0);
	int64_t base = rok_registrations();
	for (long r = 0; r < rounds; r++) {
		for (int i = 0; i < TASKS; i++) {
			struct churn f = { .iters = 20 };
			ck_assert_int_eq(rok_spawn(&t[i], churn_poll, &f,
			                           sizeof(f)), 0);
		}
		for (int i = 0; i < TASKS; i++) {
			rng = rng * 1103515245u + 12345u;
			if ((rng >> 16) % 3 == 0)
				rok_task_cancel(t[i]);
			else if ((rng >> 16) % 3 == 1)
				sched_yield();
		}
		for (int i = 0; i < TASKS; i++) {
			(void)rok_task_wait(t[i], NULL);
			rok_task_unref(t[i]);
		}
		ck_assert(!rok_mutex_is_locked(&mu));
		ck_assert_int_eq(atomic_load(&inside), 0);
	}
	ck_assert_int_eq(atomic_load(&cleanups), TASKS * rounds);
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(atomic_load(&bad), 0);
}
END_TEST

static Suite *mutex_suite(void)
{
	const struct test_case cases[] = {
		{ "exclusion", mutex_exclusion },
		{ "fifo", mutex_fifo },
		{ "cancel_waiter", mutex_cancel_waiter },
		{ "kept", mutex_kept },
		{ "release_passes", mutex_release_passes },
		{ "cancel_stress", mutex_cancel_stress },
	};

	return TEST_SUITE("mutex", cases, 30);
}

int main(void)
{
	return test_run(mutex_suite());
}
