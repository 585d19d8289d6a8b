/*
 * check_deque.c -- unit tests for sched/deque.c, the work-stealing ring.
 *
 * differential: random push / pop / steal sequences on one thread, checked
 *   item by item and length by length against a reference FIFO (a mutex and
 *   an array), starting from a tiny ring so that it grows often.
 * stress: one owner pushes distinct items in bursts (so the ring grows while
 *   thieves steal) and pops some; three thieves steal with random max; every
 *   item must be taken exactly once.
 * order: oldest first, steal takes ceil(len/2) capped by max.
 * peek (in differential and stress): the oldest item, nothing taken.
 * lifecycle: init/done contracts, NULL and zeroed structs, bad arguments.
 *
 * ROK_TEST_SCALE (an integer divisor, default 1) shrinks the op and item
 * counts, for sanitizer builds.  ROK_TEST_SEED replaces the built-in seeds
 * of the differential test; a failure prints the seed it ran with.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deque.h"

#define ITEM(id) ((void *)(uintptr_t)(id))

/* ck_assert_msg records a mark point on every success, which costs a pipe
 * write per check in fork mode; hot loops test first and abort only. */
#define CHECK_DEQUE_REQUIRE(cond, ...) do {				\
	if (!(cond))							\
		ck_abort_msg(__VA_ARGS__);				\
} while (0)
#define ID(p) ((uintptr_t)(p))

#define CHECK_DEQUE_DIFF_OPS 100000
#define CHECK_DEQUE_STRESS_ITEMS 1000000
#define CHECK_DEQUE_STRESS_ROUNDS 16
#define CHECK_DEQUE_THIEVES 3
#define CHECK_DEQUE_STEAL_MAX 64

static const uint64_t check_deque_seeds[] = {
	1, 2, 3, 42, 0xdeadbeef, 0x9e3779b97f4a7c15, 20240601, 7777777,
};
#define CHECK_DEQUE_NSEEDS \
	((int)(sizeof(check_deque_seeds) / sizeof(check_deque_seeds[0])))

static unsigned long
check_deque_scale(void)
{
	const char *s = getenv("ROK_TEST_SCALE");
	char *end;
	unsigned long v;

	if (s == NULL || *s == '\0')
		return 1;
	v = strtoul(s, &end, 10);
	return (*end != '\0' || v == 0) ? 1 : v;
}

/* splitmix64: small, seedable, the same sequence on every platform. */
static uint64_t
check_deque_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
	return z ^ (z >> 31);
}

/* The reference: a FIFO as a mutex and an array, never wrapped. */
struct check_deque_ref {
	pthread_mutex_t lock;
	uintptr_t *items;
	size_t head, tail, cap;
};

static void
check_deque_ref_init(struct check_deque_ref *ref, size_t cap)
{
	ck_assert_int_eq(pthread_mutex_init(&ref->lock, NULL), 0);
	ref->items = calloc(cap, sizeof(ref->items[0]));
	ck_assert_ptr_nonnull(ref->items);
	ref->head = ref->tail = 0;
	ref->cap = cap;
}

static void
check_deque_ref_done(struct check_deque_ref *ref)
{
	pthread_mutex_destroy(&ref->lock);
	free(ref->items);
}

static void
check_deque_ref_push(struct check_deque_ref *ref, uintptr_t id)
{
	pthread_mutex_lock(&ref->lock);
	CHECK_DEQUE_REQUIRE(ref->tail < ref->cap, "reference overflow");
	ref->items[ref->tail++] = id;
	pthread_mutex_unlock(&ref->lock);
}

/* What the deque should do: the oldest min(ceil(len/2), max) items. */
static size_t
check_deque_ref_take(struct check_deque_ref *ref, uintptr_t *out, size_t max)
{
	size_t n, i;

	pthread_mutex_lock(&ref->lock);
	n = (ref->tail - ref->head + 1) / 2;
	if (n > max)
		n = max;
	for (i = 0; i < n; i++)
		out[i] = ref->items[ref->head++];
	pthread_mutex_unlock(&ref->lock);
	return n;
}

static size_t
check_deque_ref_len(struct check_deque_ref *ref)
{
	size_t n;

	pthread_mutex_lock(&ref->lock);
	n = ref->tail - ref->head;
	pthread_mutex_unlock(&ref->lock);
	return n;
}

START_TEST(test_deque_differential)
{
	const char *env = getenv("ROK_TEST_SEED");
	uint64_t seed = env != NULL ? strtoull(env, NULL, 0) :
	    check_deque_seeds[_i];
	uint64_t rng = seed;
	size_t nops = CHECK_DEQUE_DIFF_OPS / check_deque_scale();
	struct check_deque_ref ref;
	struct deque d;
	void *buf[CHECK_DEQUE_STEAL_MAX];
	uintptr_t want[CHECK_DEQUE_STEAL_MAX];
	uintptr_t next = 1;
	unsigned push_pct = 50;
	size_t op, i, n, wn;
	void *got;

	check_deque_ref_init(&ref, nops + 1);
	ck_assert_int_eq(deque_init(&d, 1 + (unsigned)(seed & 1)), 0);
	for (op = 0; op < nops; op++) {
		unsigned r;

		/* Swing between filling and draining so lengths vary. */
		if (op % 1000 == 0)
			push_pct = 20 + (unsigned)(check_deque_rand(&rng) % 61);
		r = (unsigned)(check_deque_rand(&rng) % 100);
		if (r < push_pct) {
			CHECK_DEQUE_REQUIRE(deque_push(&d, ITEM(next)) ==
			    0,
			    "seed %" PRIu64 " op %zu: push failed", seed, op);
			check_deque_ref_push(&ref, next++);
		} else if (r < push_pct + (100 - push_pct) / 2) {
			got = deque_pop(&d);
			wn = check_deque_ref_take(&ref, want, 1);
			CHECK_DEQUE_REQUIRE(ID(got) == (wn ? want[0] : 0),
			    "seed %" PRIu64 " op %zu: pop got %" PRIuPTR
			    " want %" PRIuPTR, seed, op, ID(got),
			    wn ? want[0] : 0);
		} else {
			size_t max = 1 + (size_t)(check_deque_rand(&rng) %
			    CHECK_DEQUE_STEAL_MAX);

			n = deque_steal(&d, buf, max);
			wn = check_deque_ref_take(&ref, want, max);
			CHECK_DEQUE_REQUIRE(n == wn, "seed %" PRIu64 " op %zu: "
			    "steal(max %zu) took %zu want %zu", seed, op, max,
			    n, wn);
			for (i = 0; i < n; i++)
				CHECK_DEQUE_REQUIRE(ID(buf[i]) == want[i],
				    "seed %" PRIu64 " op %zu: steal item %zu "
				    "got %" PRIuPTR " want %" PRIuPTR, seed,
				    op, i, ID(buf[i]), want[i]);
		}
		CHECK_DEQUE_REQUIRE(deque_len(&d) ==
		    check_deque_ref_len(&ref),
		    "seed %" PRIu64 " op %zu: len %zu want %zu", seed, op,
		    deque_len(&d), check_deque_ref_len(&ref));
		/* peek shows the oldest item, and takes nothing. */
		got = deque_peek(&d);
		CHECK_DEQUE_REQUIRE(ref.tail == ref.head ? got == NULL :
		    ID(got) == ref.items[ref.head], "seed %" PRIu64
		    " op %zu: peek %" PRIuPTR, seed, op, ID(got));
	}
	/* Drain: what is left comes out in order too. */
	while ((wn = check_deque_ref_take(&ref, want, 1)) != 0) {
		got = deque_pop(&d);
		CHECK_DEQUE_REQUIRE(ID(got) == want[0], "seed %" PRIu64
		    " drain: got %" PRIuPTR " want %" PRIuPTR, seed, ID(got),
		    want[0]);
	}
	ck_assert_msg(deque_pop(&d) == NULL, "seed %" PRIu64 ": not empty",
	    seed);
	deque_done(&d);
	check_deque_ref_done(&ref);
}
END_TEST

struct check_deque_stress {
	struct deque d;
	atomic_int done;
	_Atomic unsigned *seen;         /* seen[id]: times id was taken */
	/* payload[id] is plain memory the owner writes before pushing id,
	 * as a task frame would be, and the taker reads: if the deque
	 * failed to publish it, TSan reports a race. */
	uintptr_t *payload;
	uintptr_t nitems;
	atomic_ulong bad;               /* bad ids or payloads */
	atomic_ulong stolen;
};

struct check_deque_thief {
	struct check_deque_stress *s;
	uint64_t rng;
};

static void
check_deque_stress_take(struct check_deque_stress *s, void *item)
{
	uintptr_t id = ID(item);

	if (id == 0 || id > s->nitems || s->payload[id] != ~id) {
		atomic_fetch_add_explicit(&s->bad, 1, memory_order_relaxed);
		return;
	}
	atomic_fetch_add_explicit(&s->seen[id], 1, memory_order_relaxed);
}

static void *
check_deque_thief_main(void *arg)
{
	struct check_deque_thief *th = arg;
	struct check_deque_stress *s = th->s;
	void *buf[CHECK_DEQUE_STEAL_MAX];
	size_t n, i;

	for (;;) {
		size_t max = 1 + (size_t)(check_deque_rand(&th->rng) %
		    CHECK_DEQUE_STEAL_MAX);

		/* A peek races with everyone: NULL or some pushed item. */
		uintptr_t peeked = ID(deque_peek(&s->d));
		if (peeked > s->nitems)
			atomic_fetch_add_explicit(&s->bad, 1,
			    memory_order_relaxed);
		n = deque_steal(&s->d, buf, max);
		for (i = 0; i < n; i++)
			check_deque_stress_take(s, buf[i]);
		atomic_fetch_add_explicit(&s->stolen, n, memory_order_relaxed);
		if (n == 0) {
			/* Pairs with the owner's release store of done; the
			 * owner drains whatever we leave behind. */
			if (atomic_load_explicit(&s->done,
			    memory_order_acquire))
				break;
			sched_yield();
		}
	}
	return NULL;
}

START_TEST(test_deque_stress)
{
	static struct check_deque_stress s;
	struct check_deque_thief th[CHECK_DEQUE_THIEVES];
	pthread_t tid[CHECK_DEQUE_THIEVES];
	uintptr_t nitems = CHECK_DEQUE_STRESS_ITEMS / check_deque_scale();
	uintptr_t per_round, next = 1, id, end;
	uint64_t rng = 0x5eed;
	int round, i;
	void *got;

	if (nitems < CHECK_DEQUE_STRESS_ROUNDS)
		nitems = CHECK_DEQUE_STRESS_ROUNDS;
	per_round = nitems / CHECK_DEQUE_STRESS_ROUNDS;
	s.nitems = nitems;
	s.seen = calloc(nitems + 1, sizeof(s.seen[0]));
	ck_assert_ptr_nonnull(s.seen);
	s.payload = calloc(nitems + 1, sizeof(s.payload[0]));
	ck_assert_ptr_nonnull(s.payload);
	atomic_init(&s.bad, 0);
	atomic_init(&s.stolen, 0);

	/* A fresh ring of 4 slots each round, so it grows under thieves. */
	for (round = 0; round < CHECK_DEQUE_STRESS_ROUNDS; round++) {
		end = round == CHECK_DEQUE_STRESS_ROUNDS - 1 ?
		    nitems + 1 : next + per_round;
		ck_assert_int_eq(deque_init(&s.d, 2), 0);
		atomic_init(&s.done, 0);
		for (i = 0; i < CHECK_DEQUE_THIEVES; i++) {
			th[i].s = &s;
			th[i].rng = (uint64_t)round * 131 + (uint64_t)i + 1;
			ck_assert_int_eq(pthread_create(&tid[i], NULL,
			    check_deque_thief_main, &th[i]), 0);
		}
		while (next < end) {
			unsigned shift = check_deque_rand(&rng) % 13;
			uintptr_t burst = 1 + (uintptr_t)(check_deque_rand(&rng)
			    % ((uintptr_t)1 << shift));
			uintptr_t pops;

			for (id = 0; id < burst && next < end; id++, next++) {
				s.payload[next] = ~next;
				CHECK_DEQUE_REQUIRE(deque_push(&s.d,
				    ITEM(next)) == 0, "push %" PRIuPTR, next);
			}
			pops = (uintptr_t)(check_deque_rand(&rng) %
			    (burst / 2 + 1));
			while (pops-- > 0 && (got = deque_pop(&s.d)) != NULL)
				check_deque_stress_take(&s, got);
		}
		/* Publishes that no more pushes come; pairs with the thieves'
		 * acquire load. */
		atomic_store_explicit(&s.done, 1, memory_order_release);
		for (i = 0; i < CHECK_DEQUE_THIEVES; i++)
			ck_assert_int_eq(pthread_join(tid[i], NULL), 0);
		while ((got = deque_pop(&s.d)) != NULL)
			check_deque_stress_take(&s, got);
		ck_assert_uint_eq(deque_len(&s.d), 0);
		deque_done(&s.d);
	}

	ck_assert_uint_eq(next, nitems + 1);
	ck_assert_uint_eq(atomic_load(&s.bad), 0);
	for (id = 1; id <= nitems; id++)
		CHECK_DEQUE_REQUIRE(atomic_load(&s.seen[id]) == 1,
		    "item %" PRIuPTR " of %" PRIuPTR " taken %u times", id,
		    nitems, atomic_load(&s.seen[id]));
	free(s.seen);
	free(s.payload);
}
END_TEST

START_TEST(test_deque_order)
{
	struct deque d;
	void *buf[CHECK_DEQUE_STEAL_MAX];
	uintptr_t id;
	size_t i, n;

	ck_assert_int_eq(deque_init(&d, 2), 0);
	ck_assert_ptr_null(deque_pop(&d));
	ck_assert_uint_eq(deque_steal(&d, buf, 8), 0);
	for (id = 1; id <= 10; id++)
		ck_assert_int_eq(deque_push(&d, ITEM(id)), 0);
	ck_assert_uint_eq(deque_len(&d), 10);

	/* 10 queued: steal takes half, oldest first. */
	n = deque_steal(&d, buf, CHECK_DEQUE_STEAL_MAX);
	ck_assert_uint_eq(n, 5);
	for (i = 0; i < n; i++)
		ck_assert_uint_eq(ID(buf[i]), i + 1);
	/* 5 queued: ceil(5/2) = 3. */
	n = deque_steal(&d, buf, CHECK_DEQUE_STEAL_MAX);
	ck_assert_uint_eq(n, 3);
	for (i = 0; i < n; i++)
		ck_assert_uint_eq(ID(buf[i]), i + 6);
	/* The owner takes the oldest too. */
	ck_assert_uint_eq(ID(deque_pop(&d)), 9);
	/* 1 queued: a steal takes it. */
	ck_assert_uint_eq(deque_steal(&d, buf, 1), 1);
	ck_assert_uint_eq(ID(buf[0]), 10);
	ck_assert_uint_eq(deque_steal(&d, buf, 1), 0);
	ck_assert_ptr_null(deque_pop(&d));
	ck_assert_uint_eq(deque_len(&d), 0);

	/* max caps the half; max 0 takes nothing. */
	for (id = 11; id <= 110; id++)
		ck_assert_int_eq(deque_push(&d, ITEM(id)), 0);
	ck_assert_uint_eq(deque_steal(&d, buf, 0), 0);
	n = deque_steal(&d, buf, 7);
	ck_assert_uint_eq(n, 7);
	for (i = 0; i < n; i++)
		ck_assert_uint_eq(ID(buf[i]), i + 11);
	for (id = 18; id <= 110; id++)
		ck_assert_uint_eq(ID(deque_pop(&d)), id);
	ck_assert_ptr_null(deque_pop(&d));
	deque_done(&d);

	/* Growth while the live range wraps the ring keeps the order. */
	ck_assert_int_eq(deque_init(&d, 2), 0);
	for (id = 1; id <= 3; id++)
		ck_assert_int_eq(deque_push(&d, ITEM(id)), 0);
	ck_assert_uint_eq(ID(deque_pop(&d)), 1);
	ck_assert_uint_eq(ID(deque_pop(&d)), 2);
	for (id = 4; id <= 20; id++)
		ck_assert_int_eq(deque_push(&d, ITEM(id)), 0);
	for (id = 3; id <= 20; id++)
		ck_assert_uint_eq(ID(deque_pop(&d)), id);
	ck_assert_ptr_null(deque_pop(&d));
	deque_done(&d);
}
END_TEST

START_TEST(test_deque_lifecycle)
{
	struct deque d;

	deque_done(NULL);
	memset(&d, 0, sizeof(d));
	deque_done(&d);

	ck_assert_int_eq(deque_init(&d, DEQUE_CAP_LOG2_MAX + 1), -EINVAL);
	deque_done(&d);

	ck_assert_int_eq(deque_init(&d, 0), 0);
	ck_assert_int_eq(deque_push(&d, NULL), -EINVAL);
	ck_assert_uint_eq(deque_len(&d), 0);
	ck_assert_int_eq(deque_push(&d, ITEM(1)), 0);
	ck_assert_int_eq(deque_push(&d, ITEM(2)), 0);
	ck_assert_uint_eq(deque_len(&d), 2);
	/* Queued items are dropped, not freed: the deque only borrows. */
	deque_done(&d);
	deque_done(&d);
}
END_TEST

static Suite *
check_deque_suite(void)
{
	Suite *s = suite_create("deque");
	TCase *tc;

	tc = tcase_create("differential");
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_deque_differential, 0,
	    CHECK_DEQUE_NSEEDS);
	suite_add_tcase(s, tc);

	tc = tcase_create("stress");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_deque_stress);
	suite_add_tcase(s, tc);

	tc = tcase_create("order");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_deque_order);
	suite_add_tcase(s, tc);

	tc = tcase_create("lifecycle");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_deque_lifecycle);
	suite_add_tcase(s, tc);
	return s;
}

int
main(void)
{
	SRunner *sr = srunner_create(check_deque_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
