/*
 * check_combine.c — join_all, race, select and timeouts (rok/combine.h),
 * rule by rule (SPEC A9, A10, A11).
 *
 * select: the lowest index wins a tie; a never-polled loser never runs,
 *   even when an earlier future left through a plain join's error;
 *   each started loser's cleanup runs exactly once; the losers' timers and
 *   waits are released; cancelling the waiting task cancels the children
 *   (innermost cleanup first); an empty list is -EINVAL.
 * race: the first task to finish wins, the losers keep running or, with
 *   ROK_RACE_CANCEL_LOSERS, are cancelled; a winner that ended without a
 *   value gives -ECANCELED; cancelling the racer drops its registrations;
 *   an empty list is -EINVAL.
 * join_all: values in list order, -ECANCELED for a cancelled task.
 * timeout: -ETIMEDOUT, after the deadline, with the future cancelled and
 *   its cleanup run; a value in time releases the timer; a task-join
 *   timeout leaves the task running.
 *
 * Futures record what they did in per-index counters (ran, after, cleaned)
 * and the order of events in `trail`.  Tasks never call ck_assert: they
 * count surprises in `bad`.  Registrations are compared with a baseline
 * taken after rok_start().
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rok/combine.h"
#include "rok/mutex.h"
#include "testutil.h"

#define MAXF 6

static _Atomic int bad;
static _Atomic int ran[MAXF], after[MAXF], cleaned[MAXF];
static _Atomic int outer_cleaned;
static char trail[32];
static _Atomic int trail_len;
static rok_mutex mu = ROK_MUTEX_INIT;

static void note(char c)
{
	int i = atomic_fetch_add(&trail_len, 1);

	if (i < (int)sizeof(trail) - 1)
		trail[i] = c;
}

static void wait_regs(int64_t want)
{
	while (rok_registrations() != want)
		sched_yield();
}

static int64_t start_base(int workers)
{
	test_workers(workers);
	ck_assert_int_eq(rok_start(), 0);
	return rok_registrations();
}

/* ---- a future that awaits one thing ----------------------------------- */

enum fkind {
	F_NOW,          /* returns `value` at once */
	F_CHAN,         /* returns what it receives from `ch` */
	F_SLEEP,        /* sleeps `ns`, returns `value` */
	F_LOCK,         /* locks `mu`, returns `value`; cleanup unlocks */
	F_SELECT,       /* selects over `inner[0..2)`, returns the winner's */
	F_JOIN,         /* plain rok_join of `target`, returns its value */
};

struct fut {
	int id;
	enum fkind kind;
	intptr_t value;
	rok_chan *ch;
	int64_t ns;
	bool held;
	void *v;
	int err;
	rok_chan_op cop;
	rok_sleep_op sop;
	rok_mutex_op mop;
	struct fut *inner;        /* F_SELECT: two futures' frames */
	rok_future *inner_futs;   /* F_SELECT: and their futures */
	rok_select_op sel;
	size_t index;
	rok_task *target;         /* F_JOIN */
	rok_join_op jop;
};

static rok_poll fut_poll(rok_cx *cx, void *frame)
{
	struct fut *f = frame;

	ROK_BEGIN(cx);
	atomic_fetch_add(&ran[f->id], 1);
	if (f->kind == F_CHAN) {
		ROK_AWAIT(cx, rok_chan_recv(cx, &f->cop, f->ch, &f->v, &f->err));
		f->value = (intptr_t)f->v;
	} else if (f->kind == F_SLEEP) {
		ROK_AWAIT(cx, rok_sleep(cx, &f->sop, f->ns));
	} else if (f->kind == F_LOCK) {
		ROK_AWAIT(cx, rok_mutex_lock(cx, &f->mop, &mu));
		f->held = true;
	} else if (f->kind == F_SELECT) {
		for (int i = 0; i < 2; i++)
			rok_future_init(&f->inner_futs[i], fut_poll,
			                &f->inner[i]);
		ROK_AWAIT(cx, rok_select(cx, &f->sel, f->inner_futs, 2,
		                         &f->index, &f->v, &f->err));
		f->value = (intptr_t)f->v;
	} else if (f->kind == F_JOIN) {
		ROK_AWAIT(cx, rok_join(cx, &f->jop, f->target, &f->v));
		f->value = (intptr_t)f->v;
	}
	atomic_fetch_add(&after[f->id], 1);
	ROK_RETURN(cx, f->value);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cleaned[f->id], 1);
	note((char)('0' + f->id));
	if (f->held && rok_mutex_unlock(&mu) != 0)
		atomic_fetch_add(&bad, 1);
	ROK_END(cx);
}

/* ---- a task that selects over its futures ----------------------------- */

static _Atomic size_t sel_index;
static _Atomic intptr_t sel_value;
static _Atomic int sel_err = 1;

struct selector {
	size_t n;
	struct fut fr[MAXF];
	rok_future futs[MAXF];
	struct fut inner[2];        /* for an F_SELECT future */
	rok_future inner_futs[2];
	rok_select_op op;
	size_t index;
	void *value;
	int err;
};

static rok_poll selector_poll(rok_cx *cx, void *frame)
{
	struct selector *f = frame;

	ROK_BEGIN(cx);
	for (size_t i = 0; i < f->n; i++) {
		f->fr[i].id = (int)i;
		f->fr[i].inner = f->inner;
		f->fr[i].inner_futs = f->inner_futs;
		rok_future_init(&f->futs[i], fut_poll, &f->fr[i]);
	}
	f->inner[0].id = MAXF - 2;
	f->inner[1].id = MAXF - 1;
	ROK_AWAIT(cx, rok_select(cx, &f->op, f->futs, f->n, &f->index,
	                         &f->value, &f->err));
	atomic_store(&sel_index, f->index);
	atomic_store(&sel_value, (intptr_t)f->value);
	atomic_store(&sel_err, f->err);
	ROK_RETURN(cx, 1);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&outer_cleaned, 1);
	note('S');
	ROK_END(cx);
}

/* Sends to ch[1] and then ch[0] in one poll. */
struct sender {
	rok_chan *ch[2];
};

static rok_poll sender_poll(rok_cx *cx, void *frame)
{
	struct sender *f = frame;

	ROK_BEGIN(cx);
	if (rok_chan_try_send(f->ch[1], (void *)11) != 0 ||
	    rok_chan_try_send(f->ch[0], (void *)10) != 0)
		atomic_fetch_add(&bad, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(select_tie_lowest_index)
{
	rok_chan *ch[2];
	rok_task *s;

	/* One worker: the select task cannot run while the sender sends, so
	 * both futures become ready before its next poll. */
	int64_t base = start_base(1);
	ck_assert_int_eq(rok_chan_new(&ch[0], 1), 0);
	ck_assert_int_eq(rok_chan_new(&ch[1], 1), 0);
	struct selector f = {
		.n = 2,
		.fr = { { .kind = F_CHAN, .ch = ch[0] },
		        { .kind = F_CHAN, .ch = ch[1] } },
	};
	ck_assert_int_eq(rok_spawn(&s, selector_poll, &f, sizeof(f)), 0);
	wait_regs(base + 2);   /* both futures started and parked */
	struct sender sf = { .ch = { ch[0], ch[1] } };
	test_spawn_wait(sender_poll, &sf, sizeof(sf));
	ck_assert_int_eq(rok_task_wait(s, NULL), 0);
	rok_task_unref(s);
	ck_assert_int_eq(atomic_load(&sel_err), 0);
	ck_assert_uint_eq(atomic_load(&sel_index), 0);
	ck_assert_int_eq(atomic_load(&sel_value), 10);
	/* The loser was cancelled; its last poll completed its receive, so it
	 * kept the message (A11) and ran on to its end. */
	ck_assert_int_eq(atomic_load(&ran[1]), 1);
	ck_assert_int_eq(atomic_load(&after[1]), 1);
	ck_assert_int_eq(atomic_load(&cleaned[1]), 1);
	void *v;
	ck_assert_int_eq(rok_chan_try_recv(ch[1], &v), -EAGAIN);
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(atomic_load(&bad), 0);
	rok_chan_free(ch[0], NULL);
	rok_chan_free(ch[1], NULL);
}
END_TEST

START_TEST(select_never_polled_never_runs)
{
	rok_chan *ch;
	rok_task *s;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct selector f = {
		.n = 3,
		.fr = { { .kind = F_NOW, .value = 5 },
		        { .kind = F_CHAN, .ch = ch },
		        { .kind = F_NOW, .value = 6 } },
	};
	ck_assert_int_eq(rok_spawn(&s, selector_poll, &f, sizeof(f)), 0);
	ck_assert_int_eq(rok_task_wait(s, NULL), 0);
	rok_task_unref(s);
	ck_assert_uint_eq(atomic_load(&sel_index), 0);
	ck_assert_int_eq(atomic_load(&sel_value), 5);
	ck_assert_int_eq(atomic_load(&cleaned[0]), 1);   /* the winner's */
	for (int i = 1; i < 3; i++) {
		ck_assert_int_eq(atomic_load(&ran[i]), 0);
		ck_assert_int_eq(atomic_load(&cleaned[i]), 0);
	}
	ck_assert_int_eq(rok_registrations(), base);
	rok_chan_free(ch, NULL);
}
END_TEST

/* Sleeps for an hour: a task to cancel, which then has no result. */
struct sleepy {
	rok_sleep_op op;
};

static rok_poll sleepy_poll(rok_cx *cx, void *frame)
{
	struct sleepy *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_sleep(cx, &f->op, ROK_S(3600)));
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/*
 * A future whose plain rok_join meets a task that ended without a result
 * leaves through cancellation (rok.h), and so does the selecting task; the
 * select goes on in cancelled state, in which a never-polled future is not
 * started: the one after it never runs, not even its cleanup (A10).
 */
START_TEST(select_join_error_starts_no_more)
{
	struct sleepy sl = { 0 };
	rok_task *dead, *s;

	int64_t base = start_base(1);
	ck_assert_int_eq(rok_spawn(&dead, sleepy_poll, &sl, sizeof(sl)), 0);
	rok_task_cancel(dead);
	ck_assert_int_eq(rok_task_wait(dead, NULL), -ECANCELED);
	struct selector f = {
		.n = 3,
		.fr = { { .kind = F_JOIN, .target = dead },
		        { .kind = F_NOW, .value = 6 },
		        { .kind = F_NOW, .value = 7 } },
	};
	ck_assert_int_eq(rok_spawn(&s, selector_poll, &f, sizeof(f)), 0);
	ck_assert_int_eq(rok_task_wait(s, NULL), -ECANCELED);
	rok_task_unref(s);
	rok_task_unref(dead);
	ck_assert_int_eq(atomic_load(&ran[0]), 1);
	ck_assert_int_eq(atomic_load(&after[0]), 0);
	ck_assert_int_eq(atomic_load(&cleaned[0]), 1);
	for (int i = 1; i < 3; i++) {
		ck_assert_int_eq(atomic_load(&ran[i]), 0);
		ck_assert_int_eq(atomic_load(&cleaned[i]), 0);
	}
	ck_assert_int_eq(atomic_load(&outer_cleaned), 1);
	ck_assert_int_eq(atomic_load(&sel_err), 1);   /* select never ended */
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(atomic_load(&bad), 0);
}
END_TEST

START_TEST(select_losers_cleanup_once)
{
	rok_chan *win, *never;
	rok_task *s;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&win, 1), 0);
	ck_assert_int_eq(rok_chan_new(&never, 1), 0);
	ck_assert_int_eq(rok_mutex_try_lock(&mu), 0);
	struct selector f = {
		.n = 4,
		.fr = { { .kind = F_CHAN, .ch = never },
		        { .kind = F_SLEEP, .ns = ROK_S(30) },
		        { .kind = F_CHAN, .ch = win },
		        { .kind = F_LOCK } },
	};
	ck_assert_int_eq(rok_spawn(&s, selector_poll, &f, sizeof(f)), 0);
	wait_regs(base + 4);
	ck_assert_int_eq(rok_chan_try_send(win, (void *)42), 0);
	ck_assert_int_eq(rok_task_wait(s, NULL), 0);
	rok_task_unref(s);
	ck_assert_uint_eq(atomic_load(&sel_index), 2);
	ck_assert_int_eq(atomic_load(&sel_value), 42);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(atomic_load(&ran[i]), 1);
		ck_assert_int_eq(atomic_load(&cleaned[i]), 1);
		ck_assert_int_eq(atomic_load(&after[i]), i == 2);
	}
	ck_assert_int_eq(atomic_load(&outer_cleaned), 1);
	ck_assert_int_eq(rok_mutex_unlock(&mu), 0);
	ck_assert_int_eq(atomic_load(&bad), 0);
	rok_chan_free(win, NULL);
	rok_chan_free(never, NULL);
}
END_TEST

START_TEST(select_losers_released)
{
	rok_chan *ch;
	rok_task *s;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	ck_assert_int_eq(rok_mutex_try_lock(&mu), 0);
	struct selector f = {
		.n = 5,
		.fr = { { .kind = F_SLEEP, .ns = ROK_S(20) },
		        { .kind = F_SLEEP, .ns = ROK_S(40) },
		        { .kind = F_LOCK },
		        { .kind = F_SLEEP, .ns = ROK_MS(2), .value = 9 },
		        { .kind = F_CHAN, .ch = ch } },
	};
	ck_assert_int_eq(rok_spawn(&s, selector_poll, &f, sizeof(f)), 0);
	ck_assert_int_eq(rok_task_wait(s, NULL), 0);
	rok_task_unref(s);
	ck_assert_uint_eq(atomic_load(&sel_index), 3);
	ck_assert_int_eq(atomic_load(&sel_value), 9);
	/* Two timers, a lock wait and a channel wait: all gone. */
	ck_assert_int_eq(rok_registrations(), base);
	/* The lock waiter was unlinked: unlocking finds nobody to hand to. */
	ck_assert_int_eq(rok_mutex_unlock(&mu), 0);
	ck_assert(!rok_mutex_is_locked(&mu));
	/* The channel waiter too: a value sent now stays in the channel. */
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)1), 0);
	void *v;
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), 0);
	ck_assert_int_eq(atomic_load(&bad), 0);
	rok_chan_free(ch, NULL);
}
END_TEST

START_TEST(select_cancel_cancels_children)
{
	rok_chan *ch;
	rok_task *s;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	ck_assert_int_eq(rok_mutex_try_lock(&mu), 0);
	struct selector f = {
		.n = 3,
		.fr = { { .kind = F_CHAN, .ch = ch },
		        { .kind = F_SLEEP, .ns = ROK_S(30) },
		        { .kind = F_LOCK } },
	};
	ck_assert_int_eq(rok_spawn(&s, selector_poll, &f, sizeof(f)), 0);
	wait_regs(base + 3);
	rok_task_cancel(s);
	ck_assert_int_eq(rok_task_wait(s, NULL), -ECANCELED);
	rok_task_unref(s);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(atomic_load(&cleaned[i]), 1);
		ck_assert_int_eq(atomic_load(&after[i]), 0);
	}
	ck_assert_int_eq(atomic_load(&sel_err), 1);   /* never ready */
	ck_assert_int_eq(atomic_load(&outer_cleaned), 1);
	ck_assert_int_eq(atomic_load(&trail_len), 4);
	ck_assert_int_eq(trail[3], 'S');   /* innermost cleanups first */
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert(rok_mutex_is_locked(&mu));   /* still the test's */
	ck_assert_int_eq(rok_mutex_unlock(&mu), 0);
	ck_assert(!rok_mutex_is_locked(&mu));
	rok_chan_free(ch, NULL);
}
END_TEST

/* A loser that is itself a select: cancelling it polls its started
 * futures in cancelled state, so each of them cleans up once too. */
START_TEST(select_nested_loser)
{
	rok_chan *win, *never;
	rok_task *s;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&win, 1), 0);
	ck_assert_int_eq(rok_chan_new(&never, 1), 0);
	struct selector f = {
		.n = 2,
		.fr = { { .kind = F_SELECT }, { .kind = F_CHAN, .ch = win } },
		.inner = { { .kind = F_CHAN, .ch = never },
		           { .kind = F_SLEEP, .ns = ROK_S(30) } },
	};
	ck_assert_int_eq(rok_spawn(&s, selector_poll, &f, sizeof(f)), 0);
	wait_regs(base + 3);   /* inner receive and timer, outer receive */
	ck_assert_int_eq(rok_chan_try_send(win, (void *)3), 0);
	ck_assert_int_eq(rok_task_wait(s, NULL), 0);
	rok_task_unref(s);
	ck_assert_uint_eq(atomic_load(&sel_index), 1);
	ck_assert_int_eq(atomic_load(&sel_value), 3);
	for (int i = MAXF - 2; i < MAXF; i++) {
		ck_assert_int_eq(atomic_load(&cleaned[i]), 1);
		ck_assert_int_eq(atomic_load(&after[i]), 0);
	}
	ck_assert_int_eq(atomic_load(&cleaned[0]), 1);
	ck_assert_int_eq(atomic_load(&after[0]), 0);
	/* The winner ended first; then the inner futures, innermost first,
	 * then the inner select's future, then the task. */
	ck_assert_int_eq(atomic_load(&trail_len), 5);
	ck_assert_int_eq(memcmp(trail, "1450S", 5), 0);
	ck_assert_int_eq(rok_registrations(), base);
	rok_chan_free(win, NULL);
	rok_chan_free(never, NULL);
}
END_TEST

START_TEST(select_empty)
{
	start_base(1);
	struct selector f = { .n = 0 };
	test_spawn_wait(selector_poll, &f, sizeof(f));
	ck_assert_int_eq(atomic_load(&sel_err), -EINVAL);
	ck_assert_uint_eq(atomic_load(&sel_index), SIZE_MAX);
}
END_TEST

/* ---- race ------------------------------------------------------------- */

/* A task that returns what it receives from `ch` (or `value` on -EPIPE). */
struct recv_task {
	int id;
	rok_chan *ch;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll recv_task_poll(rok_cx *cx, void *frame)
{
	struct recv_task *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
	ROK_RETURN(cx, f->err == 0 ? (intptr_t)f->v : -1);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cleaned[f->id], 1);
	ROK_END(cx);
}

static _Atomic size_t race_index;
static _Atomic intptr_t race_value;
static _Atomic int race_err = 1;

struct racer {
	rok_task *tasks[MAXF];
	size_t n;
	unsigned flags;
	rok_race_op op;
	size_t index;
	void *value;
	int err;
};

static rok_poll racer_poll(rok_cx *cx, void *frame)
{
	struct racer *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_race(cx, &f->op, f->tasks, f->n, f->flags, &f->index,
	                       &f->value, &f->err));
	atomic_store(&race_index, f->index);
	atomic_store(&race_value, (intptr_t)f->value);
	atomic_store(&race_err, f->err);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&outer_cleaned, 1);
	ROK_END(cx);
}

/* Four receivers: index 2 on `mine`, the others on `rest`; a racer over
 * them, started and parked on all four. */
struct race_setup {
	rok_chan *mine, *rest;
	rok_task *t[4];
	rok_task *racer;
	int64_t base;
};

static void race_setup(struct race_setup *r, unsigned flags)
{
	r->base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&r->mine, 1), 0);
	ck_assert_int_eq(rok_chan_new(&r->rest, 4), 0);
	for (int i = 0; i < 4; i++) {
		struct recv_task f = { .id = i,
		                       .ch = i == 2 ? r->mine : r->rest };
		ck_assert_int_eq(rok_spawn(&r->t[i], recv_task_poll, &f,
		                           sizeof(f)), 0);
	}
	wait_regs(r->base + 4);
	struct racer rf = { .n = 4, .flags = flags };
	for (int i = 0; i < 4; i++)
		rf.tasks[i] = r->t[i];
	ck_assert_int_eq(rok_spawn(&r->racer, racer_poll, &rf, sizeof(rf)),
	                 0);
	wait_regs(r->base + 8);   /* one join per task */
}

static void race_teardown(struct race_setup *r)
{
	rok_chan_close(r->rest);
	rok_chan_close(r->mine);
	for (int i = 0; i < 4; i++) {
		(void)rok_task_wait(r->t[i], NULL);
		rok_task_unref(r->t[i]);
	}
	rok_task_unref(r->racer);
	ck_assert_int_eq(rok_registrations(), r->base);
	rok_chan_free(r->mine, NULL);
	rok_chan_free(r->rest, NULL);
}

START_TEST(race_first_wins)
{
	struct race_setup r;

	race_setup(&r, 0);
	ck_assert_int_eq(rok_chan_try_send(r.mine, (void *)77), 0);
	ck_assert_int_eq(rok_task_wait(r.racer, NULL), 0);
	ck_assert_uint_eq(atomic_load(&race_index), 2);
	ck_assert_int_eq(atomic_load(&race_value), 77);
	ck_assert_int_eq(atomic_load(&race_err), 0);
	/* The racer's joins are gone; the losers still wait, uncancelled. */
	ck_assert_int_eq(rok_registrations(), r.base + 3);
	for (int i = 0; i < 4; i++) {
		ck_assert(!rok_task_is_cancelled(r.t[i]));
		ck_assert(rok_task_is_finished(r.t[i]) == (i == 2));
	}
	race_teardown(&r);
}
END_TEST

START_TEST(race_cancel_losers)
{
	struct race_setup r;

	race_setup(&r, ROK_RACE_CANCEL_LOSERS);
	ck_assert_int_eq(rok_chan_try_send(r.mine, (void *)77), 0);
	ck_assert_int_eq(rok_task_wait(r.racer, NULL), 0);
	ck_assert_uint_eq(atomic_load(&race_index), 2);
	ck_assert_int_eq(atomic_load(&race_value), 77);
	for (int i = 0; i < 4; i++) {
		if (i == 2)
			continue;
		ck_assert_int_eq(rok_task_wait(r.t[i], NULL), -ECANCELED);
		ck_assert(rok_task_is_cancelled(r.t[i]));
		ck_assert_int_eq(atomic_load(&cleaned[i]), 1);
	}
	ck_assert(!rok_task_is_cancelled(r.t[2]));
	ck_assert_int_eq(rok_registrations(), r.base);
	race_teardown(&r);
}
END_TEST

START_TEST(race_winner_without_value)
{
	struct race_setup r;

	race_setup(&r, 0);
	rok_task_cancel(r.t[1]);
	ck_assert_int_eq(rok_task_wait(r.racer, NULL), 0);
	ck_assert_uint_eq(atomic_load(&race_index), 1);
	ck_assert_int_eq(atomic_load(&race_err), -ECANCELED);
	ck_assert_int_eq(atomic_load(&race_value), 0);
	race_teardown(&r);
}
END_TEST

START_TEST(race_cancel_racer)
{
	struct race_setup r;

	race_setup(&r, 0);
	rok_task_cancel(r.racer);
	ck_assert_int_eq(rok_task_wait(r.racer, NULL), -ECANCELED);
	ck_assert_int_eq(atomic_load(&outer_cleaned), 1);
	ck_assert_int_eq(atomic_load(&race_err), 1);       /* never ready */
	ck_assert_int_eq(rok_registrations(), r.base + 4); /* tasks' own */
	for (int i = 0; i < 4; i++)
		ck_assert(!rok_task_is_finished(r.t[i]));
	race_teardown(&r);
}
END_TEST

START_TEST(race_cancel_racer_cancels_all)
{
	struct race_setup r;

	race_setup(&r, ROK_RACE_CANCEL_LOSERS);
	rok_task_cancel(r.racer);
	ck_assert_int_eq(rok_task_wait(r.racer, NULL), -ECANCELED);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(rok_task_wait(r.t[i], NULL), -ECANCELED);
		ck_assert_int_eq(atomic_load(&cleaned[i]), 1);
	}
	ck_assert_int_eq(rok_registrations(), r.base);
	race_teardown(&r);
}
END_TEST

START_TEST(race_empty)
{
	start_base(1);
	struct racer f = { .n = 0 };
	test_spawn_wait(racer_poll, &f, sizeof(f));
	ck_assert_int_eq(atomic_load(&race_err), -EINVAL);
	ck_assert_uint_eq(atomic_load(&race_index), SIZE_MAX);
	struct racer g = { .n = 1, .flags = 0x100 };
	test_spawn_wait(racer_poll, &g, sizeof(g));
	ck_assert_int_eq(atomic_load(&race_err), -EINVAL);
}
END_TEST

/* ---- join_all --------------------------------------------------------- */

/* Sleeps `ns`, then returns `value`. */
struct napper {
	int64_t ns;
	intptr_t value;
	rok_sleep_op op;
};

static rok_poll napper_poll(rok_cx *cx, void *frame)
{
	struct napper *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_sleep(cx, &f->op, f->ns));
	ROK_RETURN(cx, f->value);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

#define JOIN_N 5

struct joiner {
	rok_task *tasks[JOIN_N];
	void *results[JOIN_N];
	int errs[JOIN_N];
	rok_join_all_op op;
};

static void *join_results[JOIN_N];
static int join_errs[JOIN_N];

static rok_poll joiner_poll(rok_cx *cx, void *frame)
{
	struct joiner *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_join_all(cx, &f->op, f->tasks, JOIN_N, f->results,
	                           f->errs));
	memcpy(join_results, f->results, sizeof(join_results));
	memcpy(join_errs, f->errs, sizeof(join_errs));
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(join_all_in_order)
{
	struct joiner j = { 0 };
	rok_chan *ch;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	/* Later tasks finish first; task 2 never finishes by itself. */
	for (int i = 0; i < JOIN_N; i++) {
		if (i == 2) {
			struct recv_task f = { .id = i, .ch = ch };
			ck_assert_int_eq(rok_spawn(&j.tasks[i], recv_task_poll,
			                           &f, sizeof(f)), 0);
			continue;
		}
		struct napper f = { .ns = ROK_MS(2 * (JOIN_N - i)),
		                    .value = 100 + i };
		ck_assert_int_eq(rok_spawn(&j.tasks[i], napper_poll, &f,
		                           sizeof(f)), 0);
	}
	rok_task *t;
	ck_assert_int_eq(rok_spawn(&t, joiner_poll, &j, sizeof(j)), 0);
	rok_task_cancel(j.tasks[2]);
	ck_assert_int_eq(rok_task_wait(t, NULL), 0);
	rok_task_unref(t);
	for (int i = 0; i < JOIN_N; i++) {
		if (i == 2) {
			ck_assert_ptr_null(join_results[i]);
			ck_assert_int_eq(join_errs[i], -ECANCELED);
		} else {
			ck_assert_int_eq((intptr_t)join_results[i], 100 + i);
			ck_assert_int_eq(join_errs[i], 0);
		}
		rok_task_unref(j.tasks[i]);
	}
	ck_assert_int_eq(rok_registrations(), base);
	rok_chan_free(ch, NULL);
}
END_TEST

/* ---- timeouts --------------------------------------------------------- */

static _Atomic int to_err = 1;
static _Atomic intptr_t to_value;
static _Atomic int64_t to_elapsed;

struct timed {
	int64_t ns, t0;
	struct fut fr;
	rok_future fut;
	rok_timeout_op op;
	void *v;
	int err;
};

static rok_poll timed_poll(rok_cx *cx, void *frame)
{
	struct timed *f = frame;

	ROK_BEGIN(cx);
	rok_future_init(&f->fut, fut_poll, &f->fr);
	f->t0 = rok_now();
	ROK_AWAIT(cx, rok_timeout(cx, &f->op, f->ns, &f->fut, &f->v, &f->err));
	atomic_store(&to_elapsed, rok_now() - f->t0);
	atomic_store(&to_value, (intptr_t)f->v);
	atomic_store(&to_err, f->err);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(timeout_fires)
{
	rok_chan *ch;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct timed f = { .ns = ROK_MS(5),
	                   .fr = { .kind = F_CHAN, .ch = ch } };
	test_spawn_wait(timed_poll, &f, sizeof(f));
	ck_assert_int_eq(atomic_load(&to_err), -ETIMEDOUT);
	ck_assert_int_ge(atomic_load(&to_elapsed), ROK_MS(5));
	ck_assert_int_eq(atomic_load(&ran[0]), 1);
	ck_assert_int_eq(atomic_load(&cleaned[0]), 1);   /* cancelled */
	ck_assert_int_eq(atomic_load(&after[0]), 0);
	ck_assert_int_eq(rok_registrations(), base);
	/* Its receive was released: a value sent now stays queued. */
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)1), 0);
	rok_chan_free(ch, NULL);
}
END_TEST

START_TEST(timeout_value_in_time)
{
	rok_chan *ch;
	rok_task *t;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct timed f = { .ns = ROK_S(30),
	                   .fr = { .kind = F_CHAN, .ch = ch } };
	ck_assert_int_eq(rok_spawn(&t, timed_poll, &f, sizeof(f)), 0);
	wait_regs(base + 2);   /* the receive and the timer */
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)31), 0);
	ck_assert_int_eq(rok_task_wait(t, NULL), 0);
	rok_task_unref(t);
	ck_assert_int_eq(atomic_load(&to_err), 0);
	ck_assert_int_eq(atomic_load(&to_value), 31);
	ck_assert_int_eq(atomic_load(&cleaned[0]), 1);
	ck_assert_int_eq(rok_registrations(), base);   /* timer dropped */

	/* Ready on the first poll: no timer at all. */
	struct timed g = { .ns = 0, .fr = { .kind = F_NOW, .value = 8 } };
	test_spawn_wait(timed_poll, &g, sizeof(g));
	ck_assert_int_eq(atomic_load(&to_err), 0);
	ck_assert_int_eq(atomic_load(&to_value), 8);
	ck_assert_int_eq(rok_registrations(), base);
	rok_chan_free(ch, NULL);
}
END_TEST

/* Joins `target` with a short timeout, reports, then joins it again with a
 * long one. */
static _Atomic int jt_first = 1, jt_second = 1;
static _Atomic intptr_t jt_value;

struct jt {
	rok_task *target;
	rok_join_timeout_op op;
	void *v;
	int err;
};

static rok_poll jt_poll(rok_cx *cx, void *frame)
{
	struct jt *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_join_timeout(cx, &f->op, f->target, ROK_MS(5), &f->v,
	                               &f->err));
	atomic_store(&jt_first, f->err);
	ROK_AWAIT(cx, rok_join_timeout(cx, &f->op, f->target, ROK_S(30), &f->v,
	                               &f->err));
	atomic_store(&jt_value, (intptr_t)f->v);
	atomic_store(&jt_second, f->err);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(join_timeout_leaves_task)
{
	rok_chan *ch;
	rok_task *target, *j;

	int64_t base = start_base(2);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct recv_task rf = { .id = 0, .ch = ch };
	ck_assert_int_eq(rok_spawn(&target, recv_task_poll, &rf, sizeof(rf)),
	                 0);
	struct jt f = { .target = target };
	ck_assert_int_eq(rok_spawn(&j, jt_poll, &f, sizeof(f)), 0);
	while (atomic_load(&jt_first) == 1)
		sched_yield();
	ck_assert_int_eq(atomic_load(&jt_first), -ETIMEDOUT);
	ck_assert(!rok_task_is_finished(target));
	ck_assert(!rok_task_is_cancelled(target));
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)64), 0);
	ck_assert_int_eq(rok_task_wait(j, NULL), 0);
	ck_assert_int_eq(atomic_load(&jt_second), 0);
	ck_assert_int_eq(atomic_load(&jt_value), 64);
	ck_assert_int_eq(atomic_load(&cleaned[0]), 1);
	rok_task_unref(j);
	rok_task_unref(target);
	ck_assert_int_eq(rok_registrations(), base);
	rok_chan_free(ch, NULL);
}
END_TEST

static Suite *combine_suite(void)
{
	const struct test_case cases[] = {
		{ "select_tie", select_tie_lowest_index },
		{ "select_never_polled", select_never_polled_never_runs },
		{ "select_join_error", select_join_error_starts_no_more },
		{ "select_cleanup_once", select_losers_cleanup_once },
		{ "select_released", select_losers_released },
		{ "select_cancel", select_cancel_cancels_children },
		{ "select_nested", select_nested_loser },
		{ "select_empty", select_empty },
		{ "race_first", race_first_wins },
		{ "race_cancel_losers", race_cancel_losers },
		{ "race_no_value", race_winner_without_value },
		{ "race_cancel_racer", race_cancel_racer },
		{ "race_cancel_all", race_cancel_racer_cancels_all },
		{ "race_empty", race_empty },
		{ "join_all", join_all_in_order },
		{ "timeout_fires", timeout_fires },
		{ "timeout_in_time", timeout_value_in_time },
		{ "join_timeout", join_timeout_leaves_task },
	};

	return TEST_SUITE("combine", cases, 30);
}

int main(void)
{
	return test_run(combine_suite());
}
