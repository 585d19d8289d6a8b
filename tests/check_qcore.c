/*
 * check_qcore.c — the grant logic of a group's queue (daemon/qcore.c)
 * alone, with a virtual clock: FIFO within a class, strict classes, the
 * aging bound (counted in grants), weighted shares over thousands of
 * grants, fair share between users, removal, pause and limits, and a
 * differential test against a plain reference (a scan of every queued
 * entry) on random operation sequences.  rokd with real processes is
 * tests/sched.test.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qcore.h"

#define SEC 1000000000ll

struct ent {
	struct qent q;              /* first: qcore hands back &q */
	int id;
	uid_t uid;
	int cls;
};

static struct ent *pick(struct qgroup *g, int64_t now)
{
	return (struct ent *)(void *)qcore_pick(g, now);
}

static void push(struct qgroup *g, struct ent *e, int id, uid_t uid, int cls,
                 int64_t now)
{
	e->id = id;
	e->uid = uid;
	e->cls = cls;
	ck_assert_int_eq(qcore_push(g, &e->q, uid, cls, now), 0);
}

START_TEST(fifo_within_class)
{
	struct qgroup g;
	struct ent e[50];

	qcore_init(&g);
	g.parallel = 2;
	for (int i = 0; i < 50; i++)
		push(&g, &e[i], i, 0, QCLS_NORMAL, 0);
	int next = 0;
	struct ent *run[2];
	run[0] = pick(&g, 0);
	run[1] = pick(&g, 0);
	ck_assert_ptr_null(pick(&g, 0));   /* parallel 2 */
	ck_assert_int_eq(run[0]->id, next++);
	ck_assert_int_eq(run[1]->id, next++);
	for (int k = 0; next < 50; k ^= 1) {
		qcore_release(&g, &run[k]->q);
		run[k] = pick(&g, 0);
		ck_assert_int_eq(run[k]->id, next++);
		ck_assert_uint_le(g.running, 2);
	}
	qcore_release(&g, &run[0]->q);
	qcore_release(&g, &run[1]->q);
	ck_assert_ptr_null(pick(&g, 0));
	ck_assert_ptr_null(g.users);   /* every user record freed */
	qcore_done(&g);
}
END_TEST

START_TEST(strict_classes)
{
	struct qgroup g;
	struct ent e[8];

	qcore_init(&g);
	g.parallel = 1;
	push(&g, &e[0], 0, 0, QCLS_LOW, 0);
	push(&g, &e[1], 1, 0, QCLS_NORMAL, 0);
	push(&g, &e[2], 2, 0, QCLS_HIGH, 0);
	push(&g, &e[3], 3, 0, QCLS_URGENT, 0);
	push(&g, &e[4], 4, 0, QCLS_URGENT, 0);
	int want[] = { 3, 4, 2, 1, 0 };
	for (int i = 0; i < 5; i++) {
		struct ent *r = pick(&g, 0);
		ck_assert_ptr_nonnull(r);
		ck_assert_int_eq(r->id, want[i]);
		ck_assert_ptr_null(pick(&g, 0));
		qcore_release(&g, &r->q);
	}
	qcore_done(&g);
}
END_TEST

/*
 * The bound of rokd.conf(5): a low entry counts as urgent after 3 aging
 * intervals; from then on an urgent stream that keeps every slot busy
 * starts only the urgent entries queued before it.  Here: one slot, a
 * grant every 0.1 interval, two new urgent entries per grant (the queue
 * only grows), one low entry queued at t = 0 behind 5 urgent ones.
 */
START_TEST(aging_bound)
{
	enum { N = 4000 };
	struct qgroup g;
	struct ent *e = calloc(N, sizeof(*e));
	int64_t aging = SEC, now = 0, step = aging / 10;
	int id = 0, grants = 0, low_at = -1, queued_before = 0;

	ck_assert_ptr_nonnull(e);
	qcore_init(&g);
	g.parallel = 1;
	g.aging_ns = aging;
	for (int i = 0; i < 5; i++)
		push(&g, &e[id], id, 0, QCLS_URGENT, now), id++;
	struct ent *low = &e[id];
	push(&g, low, id, 0, QCLS_LOW, now), id++;
	queued_before = 5;
	while (id + 2 < N) {
		struct ent *r = pick(&g, now);
		ck_assert_ptr_nonnull(r);
		grants++;
		if (r == low) {
			low_at = grants;
			break;
		}
		qcore_release(&g, &r->q);
		now += step;
		push(&g, &e[id], id, 0, QCLS_URGENT, now), id++;
		push(&g, &e[id], id, 0, QCLS_URGENT, now), id++;
	}
	ck_assert_int_gt(low_at, 0);
	/* At most: the grants within 3 intervals (one per step), then the
	 * urgent entries queued before it. */
	int bound = (int)(3 * aging / step) + 1 + queued_before;
	ck_assert_int_le(low_at, bound);
	/* And not before it counted as urgent: every grant so far was an
	 * urgent entry, 30 of them at least. */
	ck_assert_int_ge(low_at, (int)(3 * aging / step));
	qcore_done(&g);
	free(e);
}
END_TEST

START_TEST(no_aging_starves)
{
	struct qgroup g;
	struct ent e[400];
	int id = 0;

	qcore_init(&g);
	g.parallel = 1;
	g.aging_ns = 0;
	push(&g, &e[id], id, 0, QCLS_LOW, 0), id++;
	push(&g, &e[id], id, 0, QCLS_URGENT, 0), id++;
	for (int k = 0; k < 150; k++) {
		struct ent *r = pick(&g, k * SEC);
		ck_assert_int_ne(r->id, 0);
		qcore_release(&g, &r->q);
		push(&g, &e[id], id, 0, QCLS_URGENT, k * SEC), id++;
	}
	qcore_done(&g);
}
END_TEST

/* Shares of >= 1,000 grants with every class backlogged: within 5 % of
 * the weights. */
static void weighted_shares(const uint32_t w[QCLS_N])
{
	enum { GRANTS = 4000, PER = GRANTS + 1 };
	struct qgroup g;
	struct ent *e = calloc((size_t)QCLS_N * PER, sizeof(*e));
	int got[QCLS_N] = { 0 };
	uint32_t wsum = 0;

	ck_assert_ptr_nonnull(e);
	qcore_init(&g);
	g.policy = QPOLICY_WEIGHTED;
	g.parallel = 3;
	memcpy(g.weights, w, sizeof(g.weights));
	for (int c = 0; c < QCLS_N; c++) {
		wsum += w[c];
		for (int i = 0; i < PER; i++)
			push(&g, &e[c * PER + i], c * PER + i, 0, c, 0);
	}
	struct ent *run[3];
	for (int k = 0; k < 3; k++)
		run[k] = pick(&g, 0);
	for (int n = 0; n < GRANTS; n++) {
		int k = n % 3;
		got[run[k]->cls]++;
		qcore_release(&g, &run[k]->q);
		run[k] = pick(&g, 0);
		ck_assert_ptr_nonnull(run[k]);
	}
	for (int c = 0; c < QCLS_N; c++) {
		double share = (double)got[c] / GRANTS;
		double want = (double)w[c] / wsum;
		ck_assert_msg(share > want * 0.95 && share < want * 1.05,
		              "class %d: share %.4f, weight share %.4f", c,
		              share, want);
	}
	qcore_done(&g);
	free(e);
}

START_TEST(weighted_default)
{
	weighted_shares(qcore_default_weights);
}
END_TEST

START_TEST(weighted_custom)
{
	static const uint32_t w[QCLS_N] = { 1, 2, 3, 4 };
	weighted_shares(w);
}
END_TEST

/* A class with nothing queued gives its share to the others; when it
 * has work again it gets its share back at once, without a burst of
 * banked credit. */
START_TEST(weighted_empty_class)
{
	struct qgroup g;
	struct ent e[3000];
	int got[QCLS_N] = { 0 }, id = 0;

	qcore_init(&g);
	g.policy = QPOLICY_WEIGHTED;
	g.parallel = 1;
	for (int i = 0; i < 1000; i++)
		push(&g, &e[id], id, 0, QCLS_LOW, 0), id++;
	for (int i = 0; i < 500; i++) {   /* low alone: every slot */
		struct ent *r = pick(&g, 0);
		ck_assert_int_eq(r->cls, QCLS_LOW);
		qcore_release(&g, &r->q);
	}
	for (int i = 0; i < 1000; i++)
		push(&g, &e[id], id, 0, QCLS_URGENT, 0), id++;
	for (int i = 0; i < 100; i++) {
		struct ent *r = pick(&g, 0);
		got[r->cls]++;
		qcore_release(&g, &r->q);
	}
	/* 50 : 5 of the slots, so about 91 urgent and 9 low. */
	ck_assert_int_ge(got[QCLS_URGENT], 85);
	ck_assert_int_ge(got[QCLS_LOW], 5);
	qcore_done(&g);
}
END_TEST

/* User A queues 2,000; user B one: B's starts at the next free slot. */
START_TEST(fair_share)
{
	enum { N = 2000 };
	struct qgroup g;
	struct ent *e = calloc(N + 1, sizeof(*e));
	struct ent *run[2];

	ck_assert_ptr_nonnull(e);
	qcore_init(&g);
	g.parallel = 2;
	for (int i = 0; i < N; i++)
		push(&g, &e[i], i, 0, QCLS_NORMAL, 0);
	run[0] = pick(&g, 0);
	run[1] = pick(&g, 0);
	push(&g, &e[N], N, 1000, QCLS_NORMAL, SEC);
	qcore_release(&g, &run[0]->q);
	run[0] = pick(&g, 2 * SEC);
	ck_assert_int_eq(run[0]->uid, 1000);
	/* Then A again (B has nothing queued). */
	qcore_release(&g, &run[1]->q);
	run[1] = pick(&g, 2 * SEC);
	ck_assert_int_eq(run[1]->uid, 0);
	qcore_done(&g);
	free(e);
}
END_TEST

/*
 * Fair share with aging on: A's 2,000 entries have waited 3 intervals when
 * B queues one of the same class.  Aging raises a class, not one user's
 * entries over another's of the same class: B's starts at the next free
 * slot all the same, and A's aged class still goes ahead of fresher work
 * of a higher class.
 */
START_TEST(fair_share_aged)
{
	enum { N = 2000 };
	struct qgroup g;
	struct ent *e = calloc(N + 2, sizeof(*e));
	struct ent *run[2];

	ck_assert_ptr_nonnull(e);
	qcore_init(&g);
	g.parallel = 2;
	g.aging_ns = SEC;
	for (int i = 0; i < N; i++)
		push(&g, &e[i], i, 0, QCLS_NORMAL, 0);
	run[0] = pick(&g, 0);
	run[1] = pick(&g, 0);
	push(&g, &e[N], N, 1000, QCLS_NORMAL, 3 * SEC);
	push(&g, &e[N + 1], N + 1, 2000, QCLS_HIGH, 3 * SEC);
	ck_assert_int_eq(qcore_class_now(&g, &e[N].q, 3 * SEC), QCLS_URGENT);
	qcore_release(&g, &run[0]->q);
	run[0] = pick(&g, 3 * SEC);
	ck_assert_int_eq(run[0]->uid, 1000);
	/* Then the aged normal class (urgent now) before the fresh high
	 * entry. */
	qcore_release(&g, &run[1]->q);
	run[1] = pick(&g, 3 * SEC);
	ck_assert_int_eq(run[1]->uid, 0);
	qcore_done(&g);
	free(e);
}
END_TEST

/*
 * One slot, user A's flood of 6, then user B's one entry: when A's first
 * ends, A and B both run none, and B (never granted) goes before A's
 * older entries; then A and B alternate while both have work.  Ranked by
 * age after the running counts, B waited for A's whole flood.
 */
START_TEST(fair_share_one_slot)
{
	struct qgroup g;
	struct ent e[9];

	qcore_init(&g);
	g.parallel = 1;
	for (int i = 0; i < 6; i++)
		push(&g, &e[i], i, 1, QCLS_NORMAL, 0);
	struct ent *r = pick(&g, 0);
	ck_assert_int_eq(r->id, 0);
	push(&g, &e[6], 6, 2, QCLS_NORMAL, SEC);
	push(&g, &e[7], 7, 2, QCLS_NORMAL, SEC);
	int want[] = { 6, 1, 7, 2, 3, 4, 5 };
	for (int i = 0; i < 7; i++) {
		qcore_release(&g, &r->q);
		r = pick(&g, 2 * SEC);
		ck_assert_int_eq(r->id, want[i]);
	}
	qcore_release(&g, &r->q);
	ck_assert_ptr_null(g.users);
	qcore_done(&g);
}
END_TEST

/*
 * The urgent stream of the aging tests (aging: one SEC): a grant every
 * tenth of an interval, each time the streaming user's running entry
 * ends and a new one of its is queued.  `low` (a low entry, queued at
 * `now`) must start not before it counts as urgent (3 intervals) and at
 * the first grant after; every grant before goes to the stream.
 */
static void stream_until_low(struct qgroup *g, struct ent *e, int id, int n,
                             struct ent *running, struct ent *low,
                             int64_t now)
{
	int64_t step = SEC / 10;
	uid_t streamer = running->uid;
	int grants = 0;

	for (;;) {
		ck_assert_int_lt(id, n);
		now += step;
		push(g, &e[id], id, streamer, QCLS_URGENT, now), id++;
		qcore_release(g, &running->q);
		running = pick(g, now);
		grants++;
		if (running == low)
			break;
		ck_assert_int_eq(running->uid, streamer);
	}
	ck_assert_int_ge(grants, (int)(3 * SEC / step));
	ck_assert_int_le(grants, (int)(3 * SEC / step) + 1);
}

/*
 * The aging bound across users (rokd.conf(5)): A holds one of two slots
 * for good; B's short urgent entries keep the other, a new one queued at
 * every grant, so at each grant B runs none and A one.  A's low entry
 * must start at the first grant after it counts as urgent, ahead of B's
 * fresher urgent entries whatever the running counts.  With the classes
 * compared by their users' running counts, it lost every tie to B, for
 * ever.
 */
START_TEST(aging_across_users)
{
	enum { N = 1000 };
	struct qgroup g;
	struct ent *e = calloc(N, sizeof(*e));
	int64_t now = 0;
	int id = 0;

	ck_assert_ptr_nonnull(e);
	qcore_init(&g);
	g.parallel = 2;
	g.aging_ns = SEC;
	push(&g, &e[id], id, 1, QCLS_URGENT, now), id++;
	ck_assert_ptr_eq(pick(&g, now), &e[0]);     /* A's, for good */
	push(&g, &e[id], id, 2, QCLS_URGENT, now), id++;
	struct ent *b = pick(&g, now);
	struct ent *low = &e[id];
	push(&g, low, id, 1, QCLS_LOW, now), id++;
	stream_until_low(&g, e, id, N, b, low, now);
	qcore_done(&g);
	free(e);
}
END_TEST

/*
 * The aging bound when fair share holds back a class's oldest entry: B
 * runs an urgent task for good and has another urgent one queued, which
 * C's stream of short urgent tasks always beats (C runs none at each
 * grant).  A's low entry, queued after B's but before every one of C's,
 * must start at the first grant after it counts as urgent; compared by
 * the urgent class's oldest (B's), the class won every tie for C's.
 */
START_TEST(aging_past_held_back)
{
	enum { N = 1000 };
	struct qgroup g;
	struct ent *e = calloc(N, sizeof(*e));
	int64_t now = 0;
	int id = 0;

	ck_assert_ptr_nonnull(e);
	qcore_init(&g);
	g.parallel = 2;
	g.aging_ns = SEC;
	push(&g, &e[id], id, 2, QCLS_URGENT, now), id++;
	ck_assert_ptr_eq(pick(&g, now), &e[0]);     /* B's, for good */
	push(&g, &e[id], id, 2, QCLS_URGENT, now), id++;   /* held back */
	struct ent *low = &e[id];
	push(&g, low, id, 1, QCLS_LOW, now), id++;
	push(&g, &e[id], id, 3, QCLS_URGENT, now), id++;
	struct ent *c = pick(&g, now);
	ck_assert_int_eq(c->uid, 3);
	stream_until_low(&g, e, id, N, c, low, now);
	qcore_done(&g);
	free(e);
}
END_TEST

/*
 * A user who queues one task at a time (its record goes whenever it holds
 * nothing) takes its turn among users with backlogs, not every other
 * grant: one slot, B, C and D backlogged, A one at a time.
 */
START_TEST(one_at_a_time_takes_turns)
{
	enum { GRANTS = 4000, PER = GRANTS + 1 };
	struct qgroup g;
	struct ent *e = calloc(4 * PER, sizeof(*e));
	int got[4] = { 0 }, next[4] = { 0 };

	ck_assert_ptr_nonnull(e);
	qcore_init(&g);
	g.parallel = 1;
	for (int u = 1; u < 4; u++)
		for (int i = 0; i < PER; i++)
			push(&g, &e[u * PER + i], u * PER + i, (uid_t)u,
			     QCLS_NORMAL, 0);
	next[0] = 1;
	push(&g, &e[0], 0, 0, QCLS_NORMAL, 0);
	for (int n = 0; n < GRANTS; n++) {
		struct ent *r = pick(&g, 0);
		ck_assert_ptr_nonnull(r);
		got[r->uid]++;
		qcore_release(&g, &r->q);
		if (r->uid == 0) {   /* A queues its next once one ended */
			ck_assert_int_lt(next[0], PER);
			push(&g, &e[next[0]], next[0], 0, QCLS_NORMAL, 0);
			next[0]++;
		}
	}
	for (int u = 0; u < 4; u++)
		ck_assert_msg(got[u] >= GRANTS / 4 - 2 && got[u] <= GRANTS / 4 + 2,
		              "user %d got %d of %d grants", u, got[u], GRANTS);
	qcore_done(&g);
	free(e);
}
END_TEST

/* Between users with equal running counts the one granted least
 * recently wins; a user with fewer running tasks wins over an older
 * entry. */
START_TEST(fair_share_ties)
{
	struct qgroup g;
	struct ent e[6];

	qcore_init(&g);
	g.parallel = 0;   /* no limit: pick until empty */
	push(&g, &e[0], 0, 1, QCLS_NORMAL, 0);
	push(&g, &e[1], 1, 1, QCLS_NORMAL, 0);
	push(&g, &e[2], 2, 2, QCLS_NORMAL, 0);
	push(&g, &e[3], 3, 2, QCLS_NORMAL, 0);
	int want[] = { 0, 2, 1, 3 };
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pick(&g, 0)->id, want[i]);
	qcore_done(&g);
}
END_TEST

START_TEST(remove_pause_limit)
{
	struct qgroup g;
	struct ent e[4];

	qcore_init(&g);
	g.parallel = 1;
	g.paused = true;
	push(&g, &e[0], 0, 0, QCLS_NORMAL, 0);
	push(&g, &e[1], 1, 0, QCLS_NORMAL, 0);
	push(&g, &e[2], 2, 5, QCLS_LOW, 0);
	ck_assert_ptr_null(pick(&g, 0));
	ck_assert_uint_eq(qcore_queued(&g), 3);
	qcore_remove(&g, &e[0].q);
	qcore_remove(&g, &e[2].q);   /* user 5's last: its record goes */
	ck_assert_uint_eq(qcore_queued(&g), 1);
	g.paused = false;
	struct ent *r = pick(&g, 0);
	ck_assert_int_eq(r->id, 1);
	ck_assert_ptr_null(g.users->next);
	g.parallel = 0;
	push(&g, &e[3], 3, 0, QCLS_NORMAL, 0);
	ck_assert_int_eq(pick(&g, 0)->id, 3);   /* no limit now */
	qcore_done(&g);
}
END_TEST

/*
 * Differential: random pushes, picks, releases and removals with several
 * users and classes in a strict group with aging, against a reference that
 * scans every queued entry: the class that counts highest (aging by the
 * wait of its oldest queued entry), the older fair-share pick between
 * equals; in a class the least (user's
 * running, user's last grant, seq), a user back after holding nothing in
 * the group counting as served just before the last grant.
 */
/* The reference's side of qcore_user_gc: a user holding nothing in the
 * group is new to it again (absent). */
static void forget(const int *state, const struct ent *e, int pushed,
                   const uint32_t *running_of, bool *present, uid_t u)
{
	if (running_of[u] > 0)
		return;
	for (int i = 0; i < pushed; i++)
		if (state[i] == 1 && e[i].uid == u)
			return;
	present[u] = false;
}

/* The reference's fair share: whether queued entry i beats `best`. */
static bool fairer(const struct ent *e, int i, int best,
                   const uint32_t *running_of, const uint64_t *last_of)
{
	if (best < 0)
		return true;
	uid_t u = e[i].uid, v = e[best].uid;
	if (running_of[u] != running_of[v])
		return running_of[u] < running_of[v];
	if (last_of[u] != last_of[v])
		return last_of[u] < last_of[v];
	return e[i].q.seq < e[best].q.seq;
}

START_TEST(differential)
{
	enum { N = 3000 };
	struct qgroup g;
	struct ent *e = calloc(N, sizeof(*e));
	int state[N] = { 0 };    /* 0 unused, 1 queued, 2 running, 3 done */
	unsigned seed = 12345;
	int pushed = 0;
	int64_t now = 0;
	uint32_t running_of[4] = { 0 };
	uint64_t last_of[4] = { 0 }, grants = 0;
	bool present[4] = { false };

	ck_assert_ptr_nonnull(e);
	qcore_init(&g);
	g.parallel = 5;
	g.aging_ns = SEC;
	for (int step = 0; step < 20000; step++) {
		int op = rand_r(&seed) % 10;
		now += rand_r(&seed) % (SEC / 4);
		if (op < 4 && pushed < N) {
			int u = rand_r(&seed) % 4, c = rand_r(&seed) % QCLS_N;
			if (!present[u])   /* as if served before the last */
				last_of[u] = grants > 0 ? grants - 1 : 0;
			present[u] = true;
			push(&g, &e[pushed], pushed, (uid_t)u, c, now);
			state[pushed++] = 1;
		} else if (op < 7) {
			/* the reference's choice first: a class ages by
			 * its oldest queued entry's wait */
			int oldest[QCLS_N];
			for (int c = 0; c < QCLS_N; c++)
				oldest[c] = -1;
			for (int i = 0; i < pushed; i++)
				if (state[i] == 1 && oldest[e[i].cls] < 0)
					oldest[e[i].cls] = i;   /* ids follow seq */
			/* each class's fair-share pick */
			int pick_of[QCLS_N];
			for (int c = 0; c < QCLS_N; c++)
				pick_of[c] = -1;
			for (int i = 0; i < pushed; i++) {
				if (state[i] != 1)
					continue;
				int64_t steps = (now - e[oldest[e[i].cls]].q.enq_ns)
				                / SEC;
				ck_assert_int_eq(steps >= e[i].cls ? 0
				                 : e[i].cls - (int)steps,
				                 qcore_class_now(&g, &e[i].q, now));
				if (fairer(e, i, pick_of[e[i].cls], running_of,
				           last_of))
					pick_of[e[i].cls] = i;
			}
			/* the class that counts highest; between equals,
			 * the older pick */
			int best = -1, ccls = QCLS_N;
			for (int c = 0; c < QCLS_N; c++) {
				if (oldest[c] < 0)
					continue;
				int64_t steps = (now - e[oldest[c]].q.enq_ns) / SEC;
				int a = steps >= c ? 0 : c - (int)steps;
				if (best < 0 || a < ccls ||
				    (a == ccls && pick_of[c] < best)) {
					best = pick_of[c];
					ccls = a;
				}
			}
			struct ent *r = pick(&g, now);
			if (g.running > 5 || (r == NULL && best >= 0 &&
			                      qcore_can_grant(&g)))
				ck_abort_msg("step %d: no grant", step);
			if (r == NULL)
				continue;
			ck_assert_int_eq(r->id, best);
			state[r->id] = 2;
			running_of[r->uid]++;
			last_of[r->uid] = ++grants;
		} else if (op < 9) {
			for (int i = 0; i < pushed; i++) {
				if (state[i] == 2) {
					qcore_release(&g, &e[i].q);
					running_of[e[i].uid]--;
					state[i] = 3;
					forget(state, e, pushed, running_of,
					       present, e[i].uid);
					break;
				}
			}
		} else {
			int i = pushed > 0 ? rand_r(&seed) % pushed : 0;
			if (pushed > 0 && state[i] == 1) {
				qcore_remove(&g, &e[i].q);
				state[i] = 3;
				forget(state, e, pushed, running_of, present,
				       e[i].uid);
			}
		}
	}
	qcore_done(&g);
	free(e);
}
END_TEST

static Suite *qcore_suite(void)
{
	Suite *s = suite_create("qcore");
	struct { const char *name; const TTest *t; } tests[] = {
		{ "fifo_within_class", fifo_within_class },
		{ "strict_classes", strict_classes },
		{ "aging_bound", aging_bound },
		{ "no_aging_starves", no_aging_starves },
		{ "weighted_default", weighted_default },
		{ "weighted_custom", weighted_custom },
		{ "weighted_empty_class", weighted_empty_class },
		{ "fair_share", fair_share },
		{ "fair_share_aged", fair_share_aged },
		{ "fair_share_one_slot", fair_share_one_slot },
		{ "aging_across_users", aging_across_users },
		{ "aging_past_held_back", aging_past_held_back },
		{ "one_at_a_time_takes_turns", one_at_a_time_takes_turns },
		{ "fair_share_ties", fair_share_ties },
		{ "remove_pause_limit", remove_pause_limit },
		{ "differential", differential },
	};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		TCase *tc = tcase_create(tests[i].name);
		tcase_add_test(tc, tests[i].t);
		tcase_set_timeout(tc, 60);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(qcore_suite());

	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
