/*
 * check_cancel.c — cooperative cancellation, rule by rule (SPEC A11).
 *
 * Tasks here log what they do into counters and flags; the tests cancel them
 * at chosen points and check that each cleanup section ran exactly once,
 * that a cancelled body never continues past its await, and what join says.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "rok/combine.h"
#include "testutil.h"

static _Atomic int cleanups;
static _Atomic int body_after_await;
static _Atomic int started;

/* Waits on a channel nobody writes to, then would set body_after_await. */
struct waiter {
	rok_chan *ch;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll waiter_poll(rok_cx *cx, void *frame)
{
	struct waiter *f = frame;

	ROK_BEGIN(cx);
	atomic_fetch_add(&started, 1);
	ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
	atomic_fetch_add(&body_after_await, 1);
	ROK_RETURN(cx, 7);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cleanups, 1);
	ROK_END(cx);
}

static void wait_started(int n)
{
	while (atomic_load(&started) < n)
		sched_yield();
}

START_TEST(cancel_waiting_runs_cleanup_once)
{
	rok_chan *ch;
	rok_task *t;
	void *v = (void *)1;

	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	int64_t base = rok_registrations();
	struct waiter w = { .ch = ch };
	ck_assert_int_eq(rok_spawn(&t, waiter_poll, &w, sizeof(w)), 0);
	wait_started(1);
	while (rok_registrations() == base)
		sched_yield();   /* linked into the channel's wait list */
	ck_assert(!rok_task_is_finished(t));
	rok_task_cancel(t);
	rok_task_cancel(t);   /* idempotent */
	ck_assert_int_eq(rok_task_wait(t, &v), -ECANCELED);
	ck_assert_ptr_null(v);
	ck_assert(rok_task_is_cancelled(t));
	ck_assert(rok_task_is_finished(t));
	ck_assert_int_eq(atomic_load(&cleanups), 1);
	ck_assert_int_eq(atomic_load(&body_after_await), 0);
	ck_assert_int_eq(rok_registrations(), base);
	rok_task_unref(t);
	rok_chan_free(ch, NULL);
}
END_TEST

/* Spawns a waiter and cancels it in the same poll: it is never polled. */
struct canceller {
	rok_chan *ch;
	rok_task *child;
	void *v;
	int err;
	rok_join_op join;
};

static rok_poll canceller_poll(rok_cx *cx, void *frame)
{
	struct canceller *f = frame;

	ROK_BEGIN(cx);
	{
		struct waiter w = { .ch = f->ch };
		ck_assert_int_eq(rok_spawn(&f->child, waiter_poll, &w,
		                           sizeof(w)), 0);
	}
	rok_task_cancel(f->child);
	ROK_AWAIT(cx, rok_join_err(cx, &f->join, f->child, &f->v, &f->err));
	ROK_RETURN(cx, f->err);
	ROK_CLEANUP(cx);
	rok_task_unref(f->child);
	ROK_END(cx);
}

START_TEST(cancel_before_first_poll)
{
	rok_chan *ch;

	test_workers(1);   /* nobody can poll the child before the cancel */
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct canceller c = { .ch = ch };
	void *err = test_spawn_wait(canceller_poll, &c, sizeof(c));
	ck_assert_int_eq((int)(intptr_t)err, -ECANCELED);
	ck_assert_int_eq(atomic_load(&started), 0);    /* body never ran */
	ck_assert_int_eq(atomic_load(&cleanups), 1);   /* cleanup did, once */
	rok_chan_free(ch, NULL);
}
END_TEST

static rok_poll value_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	ROK_YIELD(cx);
	ROK_RETURN(cx, 42);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cleanups, 1);
	ROK_END(cx);
}

START_TEST(cancel_after_completion)
{
	rok_task *t;
	void *v;

	ck_assert_int_eq(rok_spawn(&t, value_poll, NULL, 0), 0);
	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	rok_task_cancel(t);
	ck_assert(!rok_task_is_cancelled(t));
	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	ck_assert_int_eq((intptr_t)v, 42);
	ck_assert_int_eq(atomic_load(&cleanups), 1);
	rok_task_unref(t);
}
END_TEST

/* Passes its last await, then spins (a blocking call is not a cancellation
 * point) until the test has cancelled it. */
static _Atomic int reached_end, cancel_sent;

static rok_poll late_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	ROK_YIELD(cx);
	atomic_store(&reached_end, 1);
	while (!atomic_load(&cancel_sent))
		sched_yield();
	ROK_RETURN(cx, 99);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cleanups, 1);
	ROK_END(cx);
}

START_TEST(cancel_after_last_await_keeps_result)
{
	rok_task *t;
	void *v;

	test_workers(2);
	ck_assert_int_eq(rok_spawn(&t, late_poll, NULL, 0), 0);
	while (!atomic_load(&reached_end))
		sched_yield();
	rok_task_cancel(t);
	atomic_store(&cancel_sent, 1);
	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	ck_assert_int_eq((intptr_t)v, 99);
	ck_assert(rok_task_is_cancelled(t));
	ck_assert_int_eq(atomic_load(&cleanups), 1);
	rok_task_unref(t);
}
END_TEST

/* A task joining a task that never ends; cancelling the joiner wakes it,
 * releases its registration and leaves the joined task alone. */
struct joiner {
	rok_task *target;
	void *v;
	rok_join_op join;
};

static rok_poll joiner_poll(rok_cx *cx, void *frame)
{
	struct joiner *f = frame;

	ROK_BEGIN(cx);
	atomic_fetch_add(&started, 1);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->target, &f->v));
	atomic_fetch_add(&body_after_await, 1);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cleanups, 1);
	ROK_END(cx);
}

START_TEST(cancel_wakes_joiner_and_releases)
{
	rok_chan *ch;
	rok_task *target, *j[8];

	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	int64_t base = rok_registrations() + 1;   /* + the target's wait */
	struct waiter w = { .ch = ch };
	ck_assert_int_eq(rok_spawn(&target, waiter_poll, &w, sizeof(w)), 0);
	wait_started(1);
	while (rok_registrations() < base)
		sched_yield();   /* linked into the channel's wait list */
	struct joiner jf = { .target = target };
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(rok_spawn(&j[i], joiner_poll, &jf, sizeof(jf)),
		                 0);
	wait_started(9);
	while (rok_registrations() < base + 8)
		sched_yield();
	for (int i = 0; i < 8; i++) {
		rok_task_cancel(j[i]);
		ck_assert_int_eq(rok_task_wait(j[i], NULL), -ECANCELED);
		rok_task_unref(j[i]);
	}
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(atomic_load(&cleanups), 8);
	ck_assert(!rok_task_is_finished(target));   /* joiners don't cancel */
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)5), 0);
	void *v;
	ck_assert_int_eq(rok_task_wait(target, &v), 0);
	ck_assert_int_eq((intptr_t)v, 7);
	ck_assert_int_eq(atomic_load(&cleanups), 9);
	ck_assert_int_eq(atomic_load(&body_after_await), 1);
	rok_task_unref(target);
	rok_chan_free(ch, NULL);
}
END_TEST

/* Innermost cleanup first: a task awaits a future that awaits a channel. */
static char order[8];
static _Atomic int order_len;

static void record(char c)
{
	order[atomic_fetch_add(&order_len, 1)] = c;
}

struct inner {
	rok_chan *ch;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll inner_poll(rok_cx *cx, void *frame)
{
	struct inner *f = frame;

	ROK_BEGIN(cx);
	record('i');
	ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
	record('x');
	ROK_CLEANUP(cx);
	record('I');
	ROK_END(cx);
}

struct outer {
	struct inner in;
	rok_future fut;
};

static rok_poll outer_poll(rok_cx *cx, void *frame)
{
	struct outer *f = frame;

	ROK_BEGIN(cx);
	record('o');
	rok_future_init(&f->fut, inner_poll, &f->in);
	ROK_AWAIT(cx, rok_future_await(cx, &f->fut, NULL));
	record('y');
	ROK_CLEANUP(cx);
	record('O');
	ROK_END(cx);
}

START_TEST(cleanup_innermost_first)
{
	rok_chan *ch;
	rok_task *t;

	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	int64_t base = rok_registrations();
	struct outer o = { .in = { .ch = ch } };
	ck_assert_int_eq(rok_spawn(&t, outer_poll, &o, sizeof(o)), 0);
	while (rok_registrations() == base)
		sched_yield();
	rok_task_cancel(t);
	ck_assert_int_eq(rok_task_wait(t, NULL), -ECANCELED);
	ck_assert_int_eq(atomic_load(&order_len), 4);
	ck_assert_int_eq(memcmp(order, "oiIO", 4), 0);
	ck_assert_int_eq(rok_registrations(), base);
	rok_task_unref(t);
	rok_chan_free(ch, NULL);
}
END_TEST

/* A future that finishes hands its value to the awaiting task. */
static rok_poll sum_inner_poll(rok_cx *cx, void *frame)
{
	long *n = frame;

	ROK_BEGIN(cx);
	ROK_YIELD(cx);
	ROK_RETURN(cx, *n * 2);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct sum_outer {
	long n;
	void *v;
	rok_future fut;
};

static rok_poll sum_outer_poll(rok_cx *cx, void *frame)
{
	struct sum_outer *f = frame;

	ROK_BEGIN(cx);
	rok_future_init(&f->fut, sum_inner_poll, &f->n);
	ROK_AWAIT(cx, rok_future_await(cx, &f->fut, &f->v));
	ROK_RETURN(cx, (long)f->v + 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(future_value)
{
	struct sum_outer s = { .n = 20 };
	ck_assert_int_eq((intptr_t)test_spawn_wait(sum_outer_poll, &s,
	                                           sizeof(s)), 41);
}
END_TEST

/* Cancel races with completion: each task ends exactly one way, cleanup
 * runs exactly once each. */
struct racer {
	long yields, i;
	_Atomic int *cleaned;
};

static rok_poll racer_poll(rok_cx *cx, void *frame)
{
	struct racer *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < f->yields; f->i++)
		ROK_YIELD(cx);
	ROK_RETURN(cx, f->yields + 1);
	ROK_CLEANUP(cx);
	atomic_fetch_add(f->cleaned, 1);
	ROK_END(cx);
}

START_TEST(cancel_races_completion)
{
	long n = test_scale(20000);
	rok_task **ts = calloc((size_t)n, sizeof(*ts));
	_Atomic int *cleaned = calloc((size_t)n, sizeof(*cleaned));
	long values = 0, cancelled = 0;

	test_workers(2);
	ck_assert_ptr_nonnull(ts);
	ck_assert_ptr_nonnull(cleaned);
	for (long i = 0; i < n; i++) {
		struct racer r = { .yields = i % 7, .cleaned = &cleaned[i] };
		ck_assert_int_eq(rok_spawn(&ts[i], racer_poll, &r, sizeof(r)), 0);
		if (i % 3 != 0)
			rok_task_cancel(ts[i]);
	}
	for (long i = 0; i < n; i++) {
		void *v;
		int err = rok_task_wait(ts[i], &v);
		if (err == 0) {
			ck_assert_int_eq((intptr_t)v, i % 7 + 1);
			values++;
		} else {
			ck_assert_int_eq(err, -ECANCELED);
			ck_assert(rok_task_is_cancelled(ts[i]));
			cancelled++;
		}
		rok_task_unref(ts[i]);
	}
	for (long i = 0; i < n; i++)
		ck_assert_int_eq(atomic_load(&cleaned[i]), 1);
	ck_assert_int_eq(values + cancelled, n);
	ck_assert_int_ge(values, n / 3);   /* the never-cancelled third */
	free(ts);
	free((void *)cleaned);
}
END_TEST

/* Dropping the only handle of a waiting task cancels nothing. */
START_TEST(drop_handle_does_not_cancel)
{
	rok_chan *ch;
	rok_task *t;

	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct waiter w = { .ch = ch };
	ck_assert_int_eq(rok_spawn(&t, waiter_poll, &w, sizeof(w)), 0);
	wait_started(1);
	rok_task_unref(t);
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)3), 0);
	while (atomic_load(&cleanups) == 0)
		sched_yield();
	ck_assert_int_eq(atomic_load(&body_after_await), 1);
	ck_assert_int_eq(rok_stop(), 0);
	rok_chan_free(ch, NULL);
}
END_TEST

/*
 * A join of a task that ended without a result (A11): rok_join_err gets
 * -ECANCELED and goes on; the plain rok_join (and rok_join_all without
 * errs, and a plain join inside a future) does not go on with a NULL value:
 * the awaiter leaves at that await, runs its cleanup and ends without a
 * result in turn.
 */
enum { JC_PLAIN, JC_ERR, JC_ALL, JC_FUTURE, JC_N };

static _Atomic int jc_after[JC_N], jc_cleanups[JC_N];

struct jc_inner {
	rok_task *target;
	void *v;
	rok_join_op join;
};

static rok_poll jc_inner_poll(rok_cx *cx, void *frame)
{
	struct jc_inner *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->target, &f->v));
	ROK_RETURN(cx, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct jc {
	int kind;
	rok_task *target;
	void *v;
	int err;
	rok_join_op join;
	rok_join_all_op all;
	struct jc_inner inner;
	rok_future fut;
};

static rok_poll jc_poll(rok_cx *cx, void *frame)
{
	struct jc *f = frame;

	ROK_BEGIN(cx);
	atomic_fetch_add(&started, 1);
	/* An if chain: the await macros are case labels of their own. */
	if (f->kind == JC_PLAIN) {
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->target, &f->v));
	} else if (f->kind == JC_ERR) {
		ROK_AWAIT(cx, rok_join_err(cx, &f->join, f->target, &f->v,
		                           &f->err));
	} else if (f->kind == JC_ALL) {
		ROK_AWAIT(cx, rok_join_all(cx, &f->all, &f->target, 1, &f->v,
		                           NULL));
	} else {
		f->inner.target = f->target;
		rok_future_init(&f->fut, jc_inner_poll, &f->inner);
		ROK_AWAIT(cx, rok_future_await(cx, &f->fut, &f->v));
	}
	atomic_fetch_add(&jc_after[f->kind], 1);
	ROK_RETURN(cx, f->err);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&jc_cleanups[f->kind], 1);
	ROK_END(cx);
}

START_TEST(join_of_cancelled)
{
	rok_chan *ch;
	rok_task *target, *j[JC_N];
	void *v;

	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	int64_t base = rok_registrations() + 1 + JC_N;
	struct waiter w = { .ch = ch };
	ck_assert_int_eq(rok_spawn(&target, waiter_poll, &w, sizeof(w)), 0);
	for (int k = 0; k < JC_N; k++) {
		struct jc f = { .kind = k, .target = target };
		ck_assert_int_eq(rok_spawn(&j[k], jc_poll, &f, sizeof(f)), 0);
	}
	while (rok_registrations() < base)
		sched_yield();   /* the target and every joiner are linked */
	rok_task_cancel(target);
	ck_assert_int_eq(rok_task_wait(target, NULL), -ECANCELED);

	ck_assert_int_eq(rok_task_wait(j[JC_ERR], &v), 0);
	ck_assert_int_eq((intptr_t)v, -ECANCELED);
	ck_assert_int_eq(atomic_load(&jc_after[JC_ERR]), 1);
	for (int k = 0; k < JC_N; k++) {
		if (k != JC_ERR) {
			ck_assert_int_eq(rok_task_wait(j[k], &v), -ECANCELED);
			ck_assert_msg(atomic_load(&jc_after[k]) == 0,
			              "joiner %d went on past its join", k);
			ck_assert(!rok_task_is_cancelled(j[k]));
		}
		ck_assert_int_eq(atomic_load(&jc_cleanups[k]), 1);
		rok_task_unref(j[k]);
	}
	rok_task_unref(target);
	rok_chan_free(ch, NULL);
}
END_TEST

static Suite *cancel_suite(void)
{
	const struct test_case cases[] = {
		{ "waiting", cancel_waiting_runs_cleanup_once },
		{ "before_first_poll", cancel_before_first_poll },
		{ "after_completion", cancel_after_completion },
		{ "after_last_await", cancel_after_last_await_keeps_result },
		{ "wakes_joiner", cancel_wakes_joiner_and_releases },
		{ "innermost_first", cleanup_innermost_first },
		{ "future_value", future_value },
		{ "races_completion", cancel_races_completion },
		{ "drop_handle", drop_handle_does_not_cancel },
		{ "join_of_cancelled", join_of_cancelled },
	};

	return TEST_SUITE("cancel", cases, 30);
}

int main(void)
{
	return test_run(cancel_suite());
}
