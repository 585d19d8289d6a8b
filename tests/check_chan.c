/*
 * check_chan.c -- unit tests for sched/chan.c: bounded MPMC channels and
 * oneshots, driven by real tasks on the runtime.
 *
 * fifo: one producer task, one consumer task, capacity 1 and 4; every value
 *   arrives, in order, then -EPIPE after close.
 * mpmc: 4 producer and 4 consumer tasks over one cap-8 channel; every value
 *   is received exactly once, and each consumer sees each producer's values
 *   in increasing order (the ring is FIFO).
 * try: try_send / try_recv / the awaited ops without waiting: -EAGAIN,
 *   -EPIPE, -EINVAL, draining after close, capacity limits.
 * cancel_recv: receivers that wait, are woken and get cancelled while values
 *   arrive never lose a value (SPEC A11): what they returned plus what is
 *   left in the channel is exactly what was sent.
 * handoff: a waiter cancelled just as a wake-up reaches it passes the
 *   wake-up on to the next waiter (receivers and senders; 3,000 rounds,
 *   fewer if they take more than 5 s: a loaded machine).
 * cancel_send: a send cancelled while waiting for room does not send; raced
 *   against a receive, it either sent (and says so) or did not.
 * registrations: waiting receivers, senders and oneshot receivers that are
 *   cancelled and joined leave rok_registrations() at its baseline.
 * close: close wakes waiting receivers and senders with -EPIPE.
 * oneshot: send/recv in both orders (the late send from a foreign pthread),
 *   drop_sender, drop_receiver before and after a send, cancellation.
 * free: rok_chan_free hands every queued value, in order, to `drop`.
 *
 * Tasks never call ck_assert: they count surprises in check_chan_bad, which
 * the test thread asserts is zero.  ROK_TEST_SCALE shrinks the big counts.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "testutil.h"

#define CHECK_CHAN_V(i) ((void *)(uintptr_t)(i))
#define CHECK_CHAN_I(p) ((uintptr_t)(p))
/* A task result that carries a negative errno instead of a value. */
#define CHECK_CHAN_ERR(p) ((int)(intptr_t)(p))

#define CHECK_CHAN_MPMC_P 4
#define CHECK_CHAN_MPMC_C 4

/*
 * For loops that run thousands of times: ck_assert_* records a mark point
 * on every success (a write to Check's message channel in fork mode), so
 * these test first and only call into Check on failure.
 */
#define CHECK_CHAN_REQUIRE(cond, ...) do {                                  \
	if (!(cond))                                                        \
		ck_abort_msg(__VA_ARGS__);                                  \
} while (0)
#define CHECK_CHAN_EQ(a, b) do {                                            \
	intmax_t check_chan_a_ = (intmax_t)(a), check_chan_b_ = (intmax_t)(b); \
	if (check_chan_a_ != check_chan_b_)                                 \
		ck_abort_msg("Assertion '%s == %s' failed: %jd != %jd", #a, \
		             #b, check_chan_a_, check_chan_b_);             \
} while (0)

/* Unexpected events seen inside tasks; asserted zero by the test thread. */
static _Atomic unsigned long check_chan_bad;
/* Values sent so far by check_chan_producer tasks (for pacing). */
static _Atomic unsigned long check_chan_sent;
/* seen[v]: times value v was received, for the exactly-once tests. */
static _Atomic unsigned *check_chan_seen;
static uintptr_t check_chan_nvals;

static void check_chan_surprise(void)
{
	atomic_fetch_add_explicit(&check_chan_bad, 1, memory_order_relaxed);
}

static void check_chan_see(void *v)
{
	uintptr_t i = CHECK_CHAN_I(v);

	if (i == 0 || i > check_chan_nvals)
		check_chan_surprise();
	else
		atomic_fetch_add_explicit(&check_chan_seen[i], 1,
		                          memory_order_relaxed);
}

static void check_chan_seen_init(uintptr_t n)
{
	check_chan_nvals = n;
	check_chan_seen = calloc(n + 1, sizeof(*check_chan_seen));
	ck_assert_ptr_nonnull(check_chan_seen);
}

/* Every value 1..n seen exactly once. */
static void check_chan_seen_check(void)
{
	for (uintptr_t i = 1; i <= check_chan_nvals; i++) {
		unsigned c = atomic_load(&check_chan_seen[i]);
		if (c != 1)
			ck_abort_msg("value %" PRIuPTR " of %" PRIuPTR
			             " received %u times", i, check_chan_nvals,
			             c);
	}
	free(check_chan_seen);
	check_chan_seen = NULL;
}

static double check_chan_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Waits (yielding the CPU) until rok_registrations() reads `want`: the way
 * to know that tasks are parked on a wait list.  The deadline only turns a
 * hang into a readable failure before the tcase timeout.
 */
static void check_chan_wait_regs(int64_t want)
{
	double deadline = check_chan_now() + test_timeout(20);
	int64_t got;

	while ((got = rok_registrations()) != want) {
		if (check_chan_now() > deadline)
			ck_abort_msg("registrations stuck at %" PRId64
			             ", want %" PRId64, got, want);
		sched_yield();
	}
}

/* Starts the runtime and returns the registrations baseline. */
static int64_t check_chan_start(void)
{
	int err;

	atomic_store(&check_chan_bad, 0);   /* for CK_FORK=no runs */
	err = rok_start();

	ck_assert_msg(err == 0 || err == -EALREADY, "rok_start: %d", err);
	return rok_registrations();
}

static void check_chan_stop(void)
{
	ck_assert_uint_eq(atomic_load(&check_chan_bad), 0);
	ck_assert_int_eq(rok_stop(), 0);
}

/* Waits for `t` from the test thread, drops the handle, returns the code
 * and the value. */
static int check_chan_wait(rok_task *t, void **v)
{
	int err = rok_task_wait(t, v);

	rok_task_unref(t);
	return err;
}

/* ---- tasks ------------------------------------------------------------ */

/* Sends first, first+1, ..., first+n-1; closes after if `close`.
 * Returns the number sent. */
struct check_chan_producer {
	rok_chan *ch;
	uintptr_t first, n, i;
	bool close, yield;
	int err;
	rok_chan_op op;
};

static rok_poll check_chan_producer_poll(rok_cx *cx, void *frame)
{
	struct check_chan_producer *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < f->n; f->i++) {
		ROK_AWAIT(cx, rok_chan_send(cx, &f->op, f->ch,
		                            CHECK_CHAN_V(f->first + f->i),
		                            &f->err));
		if (f->err != 0) {
			check_chan_surprise();
			break;
		}
		atomic_fetch_add_explicit(&check_chan_sent, 1,
		                          memory_order_relaxed);
		if (f->yield)
			ROK_YIELD(cx);
	}
	if (f->close)
		rok_chan_close(f->ch);
	ROK_RETURN(cx, f->i);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Receives until -EPIPE expecting first, first+1, ...; returns the count. */
struct check_chan_fifo_rx {
	rok_chan *ch;
	uintptr_t next, n;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll check_chan_fifo_rx_poll(rok_cx *cx, void *frame)
{
	struct check_chan_fifo_rx *f = frame;

	ROK_BEGIN(cx);
	for (;;) {
		ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
		if (f->err == -EPIPE)
			break;
		if (f->err != 0 || CHECK_CHAN_I(f->v) != f->next)
			check_chan_surprise();
		f->next++;
		f->n++;
	}
	if (f->v != NULL)
		check_chan_surprise();    /* -EPIPE must clear the value */
	ROK_RETURN(cx, f->n);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Receives until -EPIPE, marking values seen and checking that each
 * producer's values come in increasing order; returns the count. */
struct check_chan_mpmc_rx {
	rok_chan *ch;
	uintptr_t per;                  /* values per producer */
	uintptr_t last[CHECK_CHAN_MPMC_P];
	uintptr_t n;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll check_chan_mpmc_rx_poll(rok_cx *cx, void *frame)
{
	struct check_chan_mpmc_rx *f = frame;

	ROK_BEGIN(cx);
	for (;;) {
		ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
		if (f->err == -EPIPE)
			break;
		if (f->err != 0) {
			check_chan_surprise();
			continue;
		}
		check_chan_see(f->v);
		{
			uintptr_t i = CHECK_CHAN_I(f->v);
			uintptr_t p = (i - 1) / f->per;
			if (i == 0 || p >= CHECK_CHAN_MPMC_P || i <= f->last[p])
				check_chan_surprise();
			else
				f->last[p] = i;
		}
		f->n++;
	}
	ROK_RETURN(cx, f->n);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* One receive: returns the value, or the error as a negative number. */
struct check_chan_rx1 {
	rok_chan *ch;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll check_chan_rx1_poll(rok_cx *cx, void *frame)
{
	struct check_chan_rx1 *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
	if (f->err != 0)
		ROK_RETURN(cx, (intptr_t)f->err);
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* One send: returns 1 when sent, or the error as a negative number. */
struct check_chan_tx1 {
	rok_chan *ch;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll check_chan_tx1_poll(rok_cx *cx, void *frame)
{
	struct check_chan_tx1 *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_chan_send(cx, &f->op, f->ch, f->v, &f->err));
	if (f->err != 0)
		ROK_RETURN(cx, (intptr_t)f->err);
	ROK_RETURN(cx, (uintptr_t)1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Joins n tasks with rok_join_err; returns how many ended cancelled, and
 * counts a surprise for any that ended with a value. */
struct check_chan_joiner {
	rok_task **tasks;
	size_t n, i;
	uintptr_t cancelled;
	void *v;
	int err;
	rok_join_op join;
};

static rok_poll check_chan_joiner_poll(rok_cx *cx, void *frame)
{
	struct check_chan_joiner *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < f->n; f->i++) {
		ROK_AWAIT(cx, rok_join_err(cx, &f->join, f->tasks[f->i], &f->v,
		                           &f->err));
		if (f->err == -ECANCELED && f->v == NULL)
			f->cancelled++;
		else
			check_chan_surprise();
	}
	ROK_RETURN(cx, f->cancelled);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Receives from a oneshot: the value, or the error as a negative number.
 * With `drop` it lets go of the receiver side in its cleanup, and counts a
 * surprise if that hands back a value (it should have been received). */
struct check_chan_os_rx {
	rok_oneshot *o;
	bool drop;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll check_chan_os_rx_poll(rok_cx *cx, void *frame)
{
	struct check_chan_os_rx *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_oneshot_recv(cx, &f->op, f->o, &f->v, &f->err));
	if (f->err != 0)
		ROK_RETURN(cx, (intptr_t)f->err);
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	if (f->drop && rok_oneshot_drop_receiver(f->o) != NULL)
		check_chan_surprise();
	ROK_END(cx);
}

/* ---- fifo ------------------------------------------------------------- */

START_TEST(test_chan_fifo)
{
	static const size_t caps[] = { 1, 4 };
	uintptr_t n = (uintptr_t)test_scale(20000);
	rok_chan *ch;
	rok_task *tx, *rx;
	void *v;

	check_chan_start();
	ck_assert_int_eq(rok_chan_new(&ch, caps[_i]), 0);
	struct check_chan_fifo_rx r = { .ch = ch, .next = 1 };
	ck_assert_int_eq(rok_spawn(&rx, check_chan_fifo_rx_poll, &r,
	                           sizeof(r)), 0);
	struct check_chan_producer p = { .ch = ch, .first = 1, .n = n,
	                                 .close = true };
	ck_assert_int_eq(rok_spawn(&tx, check_chan_producer_poll, &p,
	                           sizeof(p)), 0);

	ck_assert_int_eq(check_chan_wait(tx, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), n);
	ck_assert_int_eq(check_chan_wait(rx, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), n);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), -EPIPE);
	rok_chan_free(ch, NULL);
	check_chan_stop();
}
END_TEST

/* ---- mpmc ------------------------------------------------------------- */

START_TEST(test_chan_mpmc)
{
	uintptr_t per = (uintptr_t)test_scale(200000) / CHECK_CHAN_MPMC_P + 1;
	rok_task *tx[CHECK_CHAN_MPMC_P], *rx[CHECK_CHAN_MPMC_C];
	uintptr_t got = 0;
	rok_chan *ch;
	void *v;

	test_workers(4);
	check_chan_start();
	check_chan_seen_init(per * CHECK_CHAN_MPMC_P);
	ck_assert_int_eq(rok_chan_new(&ch, 8), 0);
	for (int i = 0; i < CHECK_CHAN_MPMC_C; i++) {
		struct check_chan_mpmc_rx r = { .ch = ch, .per = per };
		ck_assert_int_eq(rok_spawn(&rx[i], check_chan_mpmc_rx_poll, &r,
		                           sizeof(r)), 0);
	}
	for (int i = 0; i < CHECK_CHAN_MPMC_P; i++) {
		struct check_chan_producer p = {
			.ch = ch, .first = 1 + (uintptr_t)i * per, .n = per,
		};
		ck_assert_int_eq(rok_spawn(&tx[i], check_chan_producer_poll,
		                           &p, sizeof(p)), 0);
	}
	for (int i = 0; i < CHECK_CHAN_MPMC_P; i++) {
		ck_assert_int_eq(check_chan_wait(tx[i], &v), 0);
		ck_assert_uint_eq(CHECK_CHAN_I(v), per);
	}
	rok_chan_close(ch);
	for (int i = 0; i < CHECK_CHAN_MPMC_C; i++) {
		ck_assert_int_eq(check_chan_wait(rx[i], &v), 0);
		got += CHECK_CHAN_I(v);
	}
	ck_assert_uint_eq(got, per * CHECK_CHAN_MPMC_P);
	check_chan_seen_check();
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), -EPIPE);
	rok_chan_free(ch, NULL);
	check_chan_stop();
}
END_TEST

/* ---- try -------------------------------------------------------------- */

START_TEST(test_chan_try)
{
	rok_chan *ch = CHECK_CHAN_V(1);
	void *v = CHECK_CHAN_V(1);

	/* Capacity limits; *out is NULL on failure. */
	ck_assert_int_eq(rok_chan_new(&ch, 0), -EINVAL);
	ck_assert_ptr_null(ch);
	ck_assert_int_eq(rok_chan_new(&ch, ((size_t)1 << 24) + 1), -EINVAL);
	ck_assert_ptr_null(ch);

	ck_assert_int_eq(rok_chan_new(&ch, 2), 0);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), -EAGAIN);
	ck_assert_ptr_null(v);
	ck_assert_int_eq(rok_chan_try_send(ch, NULL), -EINVAL);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), -EAGAIN);
	ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(1)), 0);
	ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(2)), 0);
	ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(3)), -EAGAIN);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), 1);
	ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(3)), 0);

	/* Closed: no more sends, but what is queued drains in order. */
	rok_chan_close(ch);
	ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(4)), -EPIPE);
	ck_assert_int_eq(rok_chan_try_send(ch, NULL), -EINVAL);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), 2);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), 3);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), -EPIPE);
	ck_assert_ptr_null(v);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), -EPIPE);
	rok_chan_close(ch);     /* twice is harmless */
	rok_chan_free(ch, NULL);

	/* The awaited ops, where they need not wait. */
	check_chan_start();
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	struct check_chan_tx1 s = { .ch = ch, .v = NULL };
	v = test_spawn_wait(check_chan_tx1_poll, &s, sizeof(s));
	ck_assert_int_eq(CHECK_CHAN_ERR(v), -EINVAL);
	s.v = CHECK_CHAN_V(5);
	v = test_spawn_wait(check_chan_tx1_poll, &s, sizeof(s));
	ck_assert_uint_eq(CHECK_CHAN_I(v), 1);
	struct check_chan_rx1 r = { .ch = ch };
	v = test_spawn_wait(check_chan_rx1_poll, &r, sizeof(r));
	ck_assert_uint_eq(CHECK_CHAN_I(v), 5);
	ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(6)), 0);
	rok_chan_close(ch);
	s.v = CHECK_CHAN_V(7);
	v = test_spawn_wait(check_chan_tx1_poll, &s, sizeof(s));
	ck_assert_int_eq(CHECK_CHAN_ERR(v), -EPIPE);
	v = test_spawn_wait(check_chan_rx1_poll, &r, sizeof(r));
	ck_assert_uint_eq(CHECK_CHAN_I(v), 6);
	v = test_spawn_wait(check_chan_rx1_poll, &r, sizeof(r));
	ck_assert_int_eq(CHECK_CHAN_ERR(v), -EPIPE);
	rok_chan_free(ch, NULL);
	check_chan_stop();
}
END_TEST

/* ---- cancel_recv ------------------------------------------------------ */

#define CHECK_CHAN_CR_K 32              /* receivers per round */
#define CHECK_CHAN_CR_V (2 * CHECK_CHAN_CR_K) /* values per round */

/* Waits until `t` finished; the deadline turns a lost wake-up into a
 * readable failure before the tcase timeout. */
static void check_chan_wait_finished(rok_task *t, int i)
{
	double deadline = check_chan_now() + test_timeout(20);

	while (!rok_task_is_finished(t)) {
		if (check_chan_now() > deadline)
			ck_abort_msg("waiter %d never finished", i);
		sched_yield();
	}
}

/* Spins (yielding the CPU) until the producer sent at least `n` values. */
static void check_chan_wait_sent(unsigned long n)
{
	while (atomic_load(&check_chan_sent) < n)
		sched_yield();
}

/*
 * Per round: K receivers (one receive each) park on an empty channel of
 * capacity V = 2K (so a send never waits), then V values arrive while
 * receivers get cancelled:
 *
 * _i = 0: a sender task sends, yielding between sends; the test thread
 *   cancels receiver i once i values went out, so cancels land among the
 *   wake-ups.
 * _i = 1: the test thread try_sends a value, cancels the receiver that
 *   send most likely woke, and sends another.
 * _i = 2: as 0, but only even receivers are cancelled.
 * _i = 3: as 2, and the test thread also steals up to K/2 values with
 *   try_recv, so a woken receiver may find the ring empty when it runs and
 *   leave, cancelled, without a value: it must pass its wake-up on.
 * _i = 4: as 0 (all cancelled), with the stealing of 3.
 *
 * In 2 and 3 there are always values enough for every odd receiver, so
 * each must end with a value: one left parked beside queued values means a
 * wake-up was lost.  In all variants the values the receivers returned (a
 * receiver whose poll took a value keeps it, cancelled or not), those
 * stolen and those still queued are each value exactly once.
 */
START_TEST(test_chan_cancel_recv)
{
	long rounds = test_scale(200);
	unsigned long kept = 0, cancelled = 0, stolen = 0, left = 0;
	rok_task *rx[CHECK_CHAN_CR_K], *tx = NULL;
	bool odd_live = _i == 2 || _i == 3, steal = _i == 3 || _i == 4;
	int64_t base;
	rok_chan *ch;
	void *v;

	base = check_chan_start();
	for (long round = 0; round < rounds; round++) {
		unsigned long steals = 0;

		check_chan_seen_init(CHECK_CHAN_CR_V);
		atomic_store(&check_chan_sent, 0);
		CHECK_CHAN_EQ(rok_chan_new(&ch, CHECK_CHAN_CR_V), 0);
		for (int i = 0; i < CHECK_CHAN_CR_K; i++) {
			struct check_chan_rx1 r = { .ch = ch };
			CHECK_CHAN_EQ(rok_spawn(&rx[i], check_chan_rx1_poll,
						&r, sizeof(r)), 0);
		}
		check_chan_wait_regs(base + CHECK_CHAN_CR_K);

		if (_i != 1) {
			struct check_chan_producer p = {
				.ch = ch, .first = 1, .n = CHECK_CHAN_CR_V,
				.yield = true,
			};
			CHECK_CHAN_EQ(rok_spawn(&tx, check_chan_producer_poll,
						&p, sizeof(p)), 0);
		}
		for (int i = 0; i < CHECK_CHAN_CR_K; i++) {
			if (_i == 1) {
				CHECK_CHAN_EQ(rok_chan_try_send(ch,
				        CHECK_CHAN_V(2 * i + 1)), 0);
				rok_task_cancel(rx[i]);
				CHECK_CHAN_EQ(rok_chan_try_send(ch,
				        CHECK_CHAN_V(2 * i + 2)), 0);
				continue;
			}
			check_chan_wait_sent((unsigned long)i);
			if (!odd_live || i % 2 == 0)
				rok_task_cancel(rx[i]);
			if (steal && steals < CHECK_CHAN_CR_K / 2 &&
			    rok_chan_try_recv(ch, &v) == 0) {
				check_chan_see(v);
				steals++;
			}
		}
		stolen += steals;
		if (tx != NULL) {
			CHECK_CHAN_EQ(check_chan_wait(tx, &v), 0);
			CHECK_CHAN_EQ(CHECK_CHAN_I(v), CHECK_CHAN_CR_V);
			tx = NULL;
		}

		for (int i = 0; i < CHECK_CHAN_CR_K; i++) {
			check_chan_wait_finished(rx[i], i);
			int err = check_chan_wait(rx[i], &v);
			if (err == -ECANCELED) {
				CHECK_CHAN_REQUIRE(!odd_live || i % 2 == 0,
				                   "receiver %d ended cancelled, but "
				                   "nobody cancelled it", i);
				CHECK_CHAN_EQ(CHECK_CHAN_I(v), 0);
				cancelled++;
				continue;
			}
			CHECK_CHAN_EQ(err, 0);
			check_chan_see(v);
			kept++;
		}
		while (rok_chan_try_recv(ch, &v) == 0) {
			check_chan_see(v);
			left++;
		}
		CHECK_CHAN_EQ(atomic_load(&check_chan_bad), 0);
		check_chan_seen_check();
		CHECK_CHAN_EQ(rok_registrations(), base);
		rok_chan_free(ch, NULL);
	}
	CHECK_CHAN_EQ(kept + stolen + left,
		      (unsigned long)rounds * CHECK_CHAN_CR_V);
	CHECK_CHAN_EQ(kept + cancelled,
		      (unsigned long)rounds * CHECK_CHAN_CR_K);
	check_chan_stop();
}
END_TEST

/* ---- handoff --------------------------------------------------------- */

/* Busy-waits a pseudo-random short while, to spread a race's timing. */
static void check_chan_jitter(uint64_t *rng)
{
	*rng = *rng * 6364136223846793005u + 1442695040888963407u;
	for (volatile unsigned n = (unsigned)(*rng >> 48); n > 0; n--)
		;
}

/*
 * A waiter that is cancelled just as a wake-up reaches it must pass the
 * wake-up on: per round, waiters A then B park on a cap-1 channel, the test
 * thread cancels A and (after a random pause) makes A's wait end: a
 * try_send for receivers (_i = 0), a try_recv for senders (_i = 1).  If A
 * used it (its poll completed the operation) the test satisfies B too;
 * otherwise B must complete with no further help.  A wake-up that A took
 * and dropped leaves B parked: "waiter B never finished".
 */
START_TEST(test_chan_handoff)
{
	long rounds = test_scale(3000), round = 0;
	double start = test_now();
	uint64_t rng = 0x2545f4914f6cdd1d;
	unsigned long used = 0, passed = 0;
	bool senders = _i == 1;
	rok_task *a, *b;
	int64_t base;
	rok_chan *ch;
	void *v;

	base = check_chan_start();
	CHECK_CHAN_EQ(rok_chan_new(&ch, 1), 0);
	for (; test_more_rounds("handoff", round, rounds, start); round++) {
		if (senders) {
			CHECK_CHAN_EQ(rok_chan_try_send(ch, CHECK_CHAN_V(1)),
				      0);
			struct check_chan_tx1 fa = { .ch = ch,
			                             .v = CHECK_CHAN_V(2) };
			struct check_chan_tx1 fb = { .ch = ch,
			                             .v = CHECK_CHAN_V(3) };
			CHECK_CHAN_EQ(rok_spawn(&a, check_chan_tx1_poll, &fa,
						sizeof(fa)), 0);
			check_chan_wait_regs(base + 1);
			CHECK_CHAN_EQ(rok_spawn(&b, check_chan_tx1_poll, &fb,
						sizeof(fb)), 0);
		} else {
			struct check_chan_rx1 f = { .ch = ch };
			CHECK_CHAN_EQ(rok_spawn(&a, check_chan_rx1_poll, &f,
						sizeof(f)), 0);
			check_chan_wait_regs(base + 1);
			CHECK_CHAN_EQ(rok_spawn(&b, check_chan_rx1_poll, &f,
						sizeof(f)), 0);
		}
		check_chan_wait_regs(base + 2);

		rok_task_cancel(a);
		check_chan_jitter(&rng);
		if (senders) {
			CHECK_CHAN_EQ(rok_chan_try_recv(ch, &v), 0);
			CHECK_CHAN_EQ(CHECK_CHAN_I(v), 1);
		} else {
			CHECK_CHAN_EQ(rok_chan_try_send(ch, CHECK_CHAN_V(1)),
				      0);
		}

		int err = check_chan_wait(a, &v);
		if (err == 0) {
			/* A completed in the poll that saw the cancel. */
			CHECK_CHAN_EQ(CHECK_CHAN_I(v), 1);
			if (senders) {
				CHECK_CHAN_EQ(rok_chan_try_recv(ch, &v), 0);
				CHECK_CHAN_EQ(CHECK_CHAN_I(v), 2);
			} else {
				CHECK_CHAN_EQ(rok_chan_try_send(ch,
				        CHECK_CHAN_V(2)), 0);
			}
			used++;
		} else {
			CHECK_CHAN_EQ(err, -ECANCELED);
			passed++;
		}
		check_chan_wait_finished(b, 1);
		CHECK_CHAN_EQ(check_chan_wait(b, &v), 0);
		if (senders) {
			CHECK_CHAN_EQ(CHECK_CHAN_I(v), 1);
			CHECK_CHAN_EQ(rok_chan_try_recv(ch, &v), 0);
			CHECK_CHAN_EQ(CHECK_CHAN_I(v), 3);
		} else {
			CHECK_CHAN_EQ(CHECK_CHAN_I(v), err == 0 ? 2 : 1);
		}
		CHECK_CHAN_EQ(rok_chan_try_recv(ch, &v), -EAGAIN);
		CHECK_CHAN_EQ(rok_registrations(), base);
	}
	CHECK_CHAN_EQ(used + passed, (unsigned long)round);
	rok_chan_free(ch, NULL);
	check_chan_stop();
}
END_TEST

/* ---- cancel_send ------------------------------------------------------ */

START_TEST(test_chan_cancel_send)
{
	long rounds = test_scale(300);
	rok_chan *ch;
	rok_task *tx;
	int64_t base;
	void *v;

	base = check_chan_start();

	/* Nothing makes room: the cancelled send leaves the channel as is. */
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(1)), 0);
	struct check_chan_tx1 s = { .ch = ch, .v = CHECK_CHAN_V(2) };
	ck_assert_int_eq(rok_spawn(&tx, check_chan_tx1_poll, &s, sizeof(s)),
	                 0);
	check_chan_wait_regs(base + 1);
	rok_task_cancel(tx);
	ck_assert(rok_task_is_cancelled(tx));
	ck_assert_int_eq(rok_task_wait(tx, &v), -ECANCELED);
	ck_assert(rok_task_is_finished(tx));
	rok_task_unref(tx);
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), 1);
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), -EAGAIN);

	/* Cancel raced against a receive that makes room: the sender's
	 * result says whether the value went in, and the channel agrees. */
	unsigned long sent = 0, dropped = 0;
	for (long round = 0; round < rounds; round++) {
		CHECK_CHAN_EQ(rok_chan_try_send(ch, CHECK_CHAN_V(1)), 0);
		CHECK_CHAN_EQ(rok_spawn(&tx, check_chan_tx1_poll, &s,
					sizeof(s)), 0);
		check_chan_wait_regs(base + 1);
		if (round & 1)
			rok_task_cancel(tx);
		CHECK_CHAN_EQ(rok_chan_try_recv(ch, &v), 0);
		CHECK_CHAN_EQ(CHECK_CHAN_I(v), 1);
		if (!(round & 1))
			rok_task_cancel(tx);
		int err = check_chan_wait(tx, &v);
		if (err == 0) {
			CHECK_CHAN_EQ(CHECK_CHAN_I(v), 1);
			CHECK_CHAN_EQ(rok_chan_try_recv(ch, &v), 0);
			CHECK_CHAN_EQ(CHECK_CHAN_I(v), 2);
			sent++;
		} else {
			CHECK_CHAN_EQ(err, -ECANCELED);
			dropped++;
		}
		CHECK_CHAN_EQ(rok_chan_try_recv(ch, &v), -EAGAIN);
		CHECK_CHAN_EQ(rok_registrations(), base);
	}
	CHECK_CHAN_EQ(sent + dropped, (unsigned long)rounds);
	rok_chan_free(ch, NULL);
	check_chan_stop();
}
END_TEST

/* ---- registrations ---------------------------------------------------- */

#define CHECK_CHAN_REG_RX 100
#define CHECK_CHAN_REG_TX 20
#define CHECK_CHAN_REG_OS 10
#define CHECK_CHAN_REG_ALL \
	(CHECK_CHAN_REG_RX + CHECK_CHAN_REG_TX + CHECK_CHAN_REG_OS)

START_TEST(test_chan_registrations)
{
	rok_task *tasks[CHECK_CHAN_REG_ALL], *j;
	rok_oneshot *os[CHECK_CHAN_REG_OS];
	rok_chan *empty, *full;
	int64_t base;
	size_t n = 0;
	void *v;

	base = check_chan_start();
	ck_assert_int_eq(rok_chan_new(&empty, 4), 0);
	ck_assert_int_eq(rok_chan_new(&full, 1), 0);
	ck_assert_int_eq(rok_chan_try_send(full, CHECK_CHAN_V(1)), 0);
	for (int i = 0; i < CHECK_CHAN_REG_RX; i++) {
		struct check_chan_rx1 r = { .ch = empty };
		ck_assert_int_eq(rok_spawn(&tasks[n++], check_chan_rx1_poll,
		                           &r, sizeof(r)), 0);
	}
	for (int i = 0; i < CHECK_CHAN_REG_TX; i++) {
		struct check_chan_tx1 s = { .ch = full, .v = CHECK_CHAN_V(2) };
		ck_assert_int_eq(rok_spawn(&tasks[n++], check_chan_tx1_poll,
		                           &s, sizeof(s)), 0);
	}
	for (int i = 0; i < CHECK_CHAN_REG_OS; i++) {
		ck_assert_int_eq(rok_oneshot_new(&os[i]), 0);
		struct check_chan_os_rx r = { .o = os[i], .drop = true };
		ck_assert_int_eq(rok_spawn(&tasks[n++], check_chan_os_rx_poll,
		                           &r, sizeof(r)), 0);
	}
	/* One registration per waiting task: the wait-list links. */
	check_chan_wait_regs(base + CHECK_CHAN_REG_ALL);

	for (size_t i = 0; i < n; i++)
		rok_task_cancel(tasks[i]);
	/* Join them from a task (rok_join_err), then the joiner from here. */
	struct check_chan_joiner jf = { .tasks = tasks, .n = n };
	ck_assert_int_eq(rok_spawn(&j, check_chan_joiner_poll, &jf,
	                           sizeof(jf)), 0);
	ck_assert_int_eq(check_chan_wait(j, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), n);
	ck_assert_int_eq(rok_registrations(), base);
	for (size_t i = 0; i < n; i++) {
		ck_assert(rok_task_is_finished(tasks[i]));
		ck_assert(rok_task_is_cancelled(tasks[i]));
		ck_assert_int_eq(check_chan_wait(tasks[i], &v), -ECANCELED);
	}
	ck_assert_int_eq(rok_registrations(), base);

	/* Nothing was taken from or put into the channels; the oneshot
	 * receivers let go, so a send is refused. */
	ck_assert_int_eq(rok_chan_try_recv(empty, &v), -EAGAIN);
	ck_assert_int_eq(rok_chan_try_recv(full, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), 1);
	ck_assert_int_eq(rok_chan_try_recv(full, &v), -EAGAIN);
	for (int i = 0; i < CHECK_CHAN_REG_OS; i++)
		ck_assert_int_eq(rok_oneshot_send(os[i], CHECK_CHAN_V(3)),
		                 -EPIPE);
	rok_chan_free(empty, NULL);
	rok_chan_free(full, NULL);
	check_chan_stop();
}
END_TEST

/* ---- close ------------------------------------------------------------ */

#define CHECK_CHAN_CLOSE_RX 16
#define CHECK_CHAN_CLOSE_TX 16

START_TEST(test_chan_close)
{
	rok_task *rx[CHECK_CHAN_CLOSE_RX], *tx[CHECK_CHAN_CLOSE_TX];
	rok_chan *empty, *full;
	int64_t base;
	void *v;

	base = check_chan_start();
	ck_assert_int_eq(rok_chan_new(&empty, 2), 0);
	ck_assert_int_eq(rok_chan_new(&full, 1), 0);
	ck_assert_int_eq(rok_chan_try_send(full, CHECK_CHAN_V(1)), 0);
	for (int i = 0; i < CHECK_CHAN_CLOSE_RX; i++) {
		struct check_chan_rx1 r = { .ch = empty };
		ck_assert_int_eq(rok_spawn(&rx[i], check_chan_rx1_poll, &r,
		                           sizeof(r)), 0);
	}
	for (int i = 0; i < CHECK_CHAN_CLOSE_TX; i++) {
		struct check_chan_tx1 s = { .ch = full, .v = CHECK_CHAN_V(2) };
		ck_assert_int_eq(rok_spawn(&tx[i], check_chan_tx1_poll, &s,
		                           sizeof(s)), 0);
	}
	check_chan_wait_regs(base + CHECK_CHAN_CLOSE_RX + CHECK_CHAN_CLOSE_TX);

	rok_chan_close(empty);
	rok_chan_close(full);
	for (int i = 0; i < CHECK_CHAN_CLOSE_RX; i++) {
		ck_assert_int_eq(check_chan_wait(rx[i], &v), 0);
		ck_assert_int_eq(CHECK_CHAN_ERR(v), -EPIPE);
	}
	for (int i = 0; i < CHECK_CHAN_CLOSE_TX; i++) {
		ck_assert_int_eq(check_chan_wait(tx[i], &v), 0);
		ck_assert_int_eq(CHECK_CHAN_ERR(v), -EPIPE);
	}
	ck_assert_int_eq(rok_registrations(), base);
	/* The queued value survives the close; the refused sends are not in. */
	ck_assert_int_eq(rok_chan_try_recv(full, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), 1);
	ck_assert_int_eq(rok_chan_try_recv(full, &v), -EPIPE);
	ck_assert_int_eq(rok_chan_try_recv(empty, &v), -EPIPE);
	rok_chan_free(empty, NULL);
	rok_chan_free(full, NULL);
	check_chan_stop();
}
END_TEST

/* ---- oneshot ---------------------------------------------------------- */

struct check_chan_os_sender {
	rok_oneshot *o;
	void *v;
	int err;
};

static void *check_chan_os_sender_main(void *arg)
{
	struct check_chan_os_sender *s = arg;

	s->err = rok_oneshot_send(s->o, s->v);
	return NULL;
}

START_TEST(test_chan_oneshot)
{
	rok_oneshot *o;
	rok_task *rx;
	int64_t base;
	void *v;

	base = check_chan_start();

	/* Send, then receive; the receiver side outlives the receive. */
	ck_assert_int_eq(rok_oneshot_new(&o), 0);
	ck_assert_int_eq(rok_oneshot_send(o, CHECK_CHAN_V(7)), 0);
	struct check_chan_os_rx r = { .o = o };
	v = test_spawn_wait(check_chan_os_rx_poll, &r, sizeof(r));
	ck_assert_uint_eq(CHECK_CHAN_I(v), 7);
	ck_assert_ptr_null(rok_oneshot_drop_receiver(o));

	/* The receiver waits; a foreign pthread sends. */
	ck_assert_int_eq(rok_oneshot_new(&o), 0);
	r = (struct check_chan_os_rx){ .o = o, .drop = true };
	ck_assert_int_eq(rok_spawn(&rx, check_chan_os_rx_poll, &r, sizeof(r)),
	                 0);
	check_chan_wait_regs(base + 1);
	struct check_chan_os_sender snd = { .o = o, .v = CHECK_CHAN_V(8),
	                                    .err = 1 };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, check_chan_os_sender_main,
	                                &snd), 0);
	ck_assert_int_eq(check_chan_wait(rx, &v), 0);
	ck_assert_uint_eq(CHECK_CHAN_I(v), 8);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(snd.err, 0);
	ck_assert_int_eq(rok_registrations(), base);

	/* drop_sender before the receiver looks. */
	ck_assert_int_eq(rok_oneshot_new(&o), 0);
	rok_oneshot_drop_sender(o);
	r = (struct check_chan_os_rx){ .o = o, .drop = true };
	v = test_spawn_wait(check_chan_os_rx_poll, &r, sizeof(r));
	ck_assert_int_eq(CHECK_CHAN_ERR(v), -EPIPE);

	/* drop_sender while the receiver waits. */
	ck_assert_int_eq(rok_oneshot_new(&o), 0);
	r = (struct check_chan_os_rx){ .o = o, .drop = true };
	ck_assert_int_eq(rok_spawn(&rx, check_chan_os_rx_poll, &r, sizeof(r)),
	                 0);
	check_chan_wait_regs(base + 1);
	rok_oneshot_drop_sender(o);
	ck_assert_int_eq(check_chan_wait(rx, &v), 0);
	ck_assert_int_eq(CHECK_CHAN_ERR(v), -EPIPE);
	ck_assert_int_eq(rok_registrations(), base);

	/* drop_receiver before the send: refused, the sender keeps the value
	 * (heap memory, so ASan sees a double free or a leak if not). */
	ck_assert_int_eq(rok_oneshot_new(&o), 0);
	ck_assert_ptr_null(rok_oneshot_drop_receiver(o));
	char *mine = malloc(16);
	ck_assert_ptr_nonnull(mine);
	ck_assert_int_eq(rok_oneshot_send(o, mine), -EPIPE);
	free(mine);

	/* drop_receiver after a send nobody received: the value comes back. */
	ck_assert_int_eq(rok_oneshot_new(&o), 0);
	mine = malloc(16);
	ck_assert_ptr_nonnull(mine);
	ck_assert_int_eq(rok_oneshot_send(o, mine), 0);
	ck_assert_ptr_eq(rok_oneshot_drop_receiver(o), mine);
	free(mine);

	/* A waiting receiver cancelled: its registration goes, its side is
	 * dropped in its cleanup, and a later send is refused. */
	ck_assert_int_eq(rok_oneshot_new(&o), 0);
	r = (struct check_chan_os_rx){ .o = o, .drop = true };
	ck_assert_int_eq(rok_spawn(&rx, check_chan_os_rx_poll, &r, sizeof(r)),
	                 0);
	check_chan_wait_regs(base + 1);
	rok_task_cancel(rx);
	ck_assert_int_eq(check_chan_wait(rx, &v), -ECANCELED);
	ck_assert_int_eq(rok_registrations(), base);
	ck_assert_int_eq(rok_oneshot_send(o, CHECK_CHAN_V(9)), -EPIPE);

	check_chan_stop();
}
END_TEST

/* ---- free ------------------------------------------------------------- */

static uintptr_t check_chan_dropped[16];
static size_t check_chan_ndropped;

static void check_chan_drop(void *v)
{
	if (check_chan_ndropped < 16)
		check_chan_dropped[check_chan_ndropped] = CHECK_CHAN_I(v);
	check_chan_ndropped++;
}

START_TEST(test_chan_free)
{
	rok_chan *ch;
	void *v;

	check_chan_ndropped = 0;
	rok_chan_free(NULL, check_chan_drop);
	rok_chan_free(NULL, NULL);
	ck_assert_uint_eq(check_chan_ndropped, 0);

	/* Empty: drop is not called. */
	ck_assert_int_eq(rok_chan_new(&ch, 3), 0);
	rok_chan_free(ch, check_chan_drop);
	ck_assert_uint_eq(check_chan_ndropped, 0);

	/* Queued values wrapping round the ring: each dropped once, oldest
	 * first. */
	ck_assert_int_eq(rok_chan_new(&ch, 4), 0);
	for (uintptr_t i = 1; i <= 4; i++)
		ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(i)), 0);
	for (uintptr_t i = 1; i <= 3; i++) {
		ck_assert_int_eq(rok_chan_try_recv(ch, &v), 0);
		ck_assert_uint_eq(CHECK_CHAN_I(v), i);
	}
	for (uintptr_t i = 5; i <= 7; i++)
		ck_assert_int_eq(rok_chan_try_send(ch, CHECK_CHAN_V(i)), 0);
	rok_chan_close(ch);     /* closed or not, queued values are dropped */
	rok_chan_free(ch, check_chan_drop);
	ck_assert_uint_eq(check_chan_ndropped, 4);
	for (size_t i = 0; i < 4; i++)
		ck_assert_uint_eq(check_chan_dropped[i], i + 4);

	/* Heap values with free(): LeakSanitizer sees any one left behind. */
	ck_assert_int_eq(rok_chan_new(&ch, 8), 0);
	for (int i = 0; i < 5; i++) {
		void *p = malloc(32);
		ck_assert_ptr_nonnull(p);
		ck_assert_int_eq(rok_chan_try_send(ch, p), 0);
	}
	ck_assert_int_eq(rok_chan_try_recv(ch, &v), 0);
	free(v);
	rok_chan_free(ch, free);
}
END_TEST

/* ---- suite ------------------------------------------------------------ */

static Suite *check_chan_suite(void)
{
	Suite *s = suite_create("chan");

	test_add(s, "fifo", test_chan_fifo, 2, 30);
	test_add(s, "mpmc", test_chan_mpmc, 0, 30);
	test_add(s, "try", test_chan_try, 0, 30);
	test_add(s, "cancel_recv", test_chan_cancel_recv, 5, 30);
	test_add(s, "handoff", test_chan_handoff, 2, 30);
	test_add(s, "cancel_send", test_chan_cancel_send, 0, 30);
	test_add(s, "registrations", test_chan_registrations, 0, 30);
	test_add(s, "close", test_chan_close, 0, 30);
	test_add(s, "oneshot", test_chan_oneshot, 0, 30);
	test_add(s, "free", test_chan_free, 0, 30);
	return s;
}

int main(void)
{
	return test_run(check_chan_suite());
}
