/*
 * qcore.c — who gets a group's next free slot (see qcore.h).
 *
 * The queue of a group is a FIFO per (user, class): an entry joins the
 * tail of its user's FIFO of its class, so the head of each FIFO is the
 * oldest entry of that user in that class.  A grant looks only at these
 * heads — at most 4 per user with queued work — never at the entries
 * behind them: O(U) per grant for U users, however many entries are
 * queued (one user's 10,000 entries cost the same as one).
 *
 * Strict (the default): the class that counts highest gets the slot, where
 * a class rises one step per aging interval its oldest queued entry has
 * waited (so a low entry counts as urgent after 3 intervals at most);
 * between classes that count the same, the one whose entry to grant (its
 * fair share's pick) is older.  Fair share picks among the class's users.
 * Aging raises a whole class, never one user's entries over another's of
 * the same class: else a user whose backlog has aged would beat another's
 * fresh entry of the same class whatever the running counts, and fair share
 * would wait for aging.  Classes are not compared by their users' running
 * counts: an aged low entry would then lose every tie with a stream of
 * fresh urgent entries from a user whose short tasks end before each grant,
 * for ever.  So once an entry counts as urgent, only classes that count as
 * urgent too with an entry to grant queued before it, and users of its own
 * class ahead of its user by fair share (and such entries queued before
 * theirs), can start before it: the bound rokd.conf(5) states.
 *
 * Fair share, between the heads of one class: the user with the fewest
 * running entries in the group, then the one granted least recently (a user
 * new to the group, or back after holding nothing, as if just before the
 * last grant), then the oldest entry.  Without the round robin, a user
 * whose entry ends ties at the next grant with the user waiting (both
 * running one fewer) and wins it by age: with one slot, a flood would run
 * whole before another user's single entry.
 *
 * Weighted: stride scheduling over the classes.  Each class has a pass;
 * a grant goes to the class with queued entries whose pass is lowest, and
 * adds STRIDE / weight to it, so over many grants the classes with queued
 * entries get slots in proportion to their weights.  A class that had
 * nothing queued restarts from the pass of the last grant (vtime): an
 * idle class neither banks credit nor loses its turn, and while it is
 * empty its share goes to the others.  Inside the class, fair share as
 * above.  Aging does not apply: every class with a weight gets its share.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qcore.h"

#define QCORE_STRIDE ((uint64_t)1 << 32)

const uint32_t qcore_default_weights[QCLS_N] = { 50, 30, 15, 5 };

void qcore_init(struct qgroup *g)
{
	memset(g, 0, sizeof(*g));
	g->policy = QPOLICY_STRICT;
	memcpy(g->weights, qcore_default_weights, sizeof(g->weights));
}

void qcore_done(struct qgroup *g)
{
	struct quser *u = g->users;

	while (u != NULL) {
		struct quser *next = u->next;
		free(u);
		u = next;
	}
	g->users = NULL;
}

static struct quser *qcore_user(struct qgroup *g, uid_t uid)
{
	for (struct quser *u = g->users; u != NULL; u = u->next)
		if (u->uid == uid)
			return u;
	struct quser *u = calloc(1, sizeof(*u));
	if (u == NULL)
		return NULL;
	u->uid = uid;
	/* Its record goes whenever it holds nothing: as if served just
	 * before the last grant, so that a user who queues one task at a
	 * time takes its turn, not every turn. */
	u->last_grant = g->grants > 0 ? g->grants - 1 : 0;
	u->next = g->users;
	g->users = u;
	return u;
}

/* Frees u once it holds nothing in the group. */
static void qcore_user_gc(struct qgroup *g, struct quser *u)
{
	if (u->running > 0 || u->nqueued > 0)
		return;
	for (struct quser **p = &g->users; *p != NULL; p = &(*p)->next) {
		if (*p == u) {
			*p = u->next;
			free(u);
			return;
		}
	}
}

static int qcore_cls(int cls)
{
	return cls < 0 || cls >= QCLS_N ? QCLS_NORMAL : cls;
}

int qcore_push(struct qgroup *g, struct qent *e, uid_t uid, int cls,
               int64_t now)
{
	struct quser *u = qcore_user(g, uid);

	if (u == NULL)
		return -ENOMEM;
	cls = qcore_cls(cls);
	if (g->queued[cls] == 0 && g->pass[cls] < g->vtime)
		g->pass[cls] = g->vtime;
	e->user = u;
	e->cls = (uint8_t)cls;
	e->seq = g->seq++;
	e->enq_ns = now;
	e->queued = true;
	e->next = NULL;
	e->prev = u->tail[cls];
	if (u->tail[cls] != NULL)
		u->tail[cls]->next = e;
	else
		u->head[cls] = e;
	u->tail[cls] = e;
	u->nqueued++;
	g->queued[cls]++;
	return 0;
}

bool qcore_can_grant(const struct qgroup *g)
{
	return !g->paused && (g->parallel == 0 || g->running < g->parallel);
}

/* Class cls raised by the age of an entry queued at enq (strict). */
static int qcore_aged(const struct qgroup *g, int cls, int64_t enq,
                      int64_t now)
{
	if (g->policy != QPOLICY_STRICT || g->aging_ns <= 0 || now <= enq)
		return cls;
	int64_t steps = (now - enq) / g->aging_ns;
	return steps >= cls ? 0 : cls - (int)steps;
}

/* When the oldest queued entry of class cls was queued (INT64_MAX: none):
 * the oldest of the heads, each user's FIFO being in queueing order. */
static int64_t qcore_oldest(const struct qgroup *g, int cls)
{
	int64_t enq = INT64_MAX;

	for (const struct quser *u = g->users; u != NULL; u = u->next)
		if (u->head[cls] != NULL && u->head[cls]->enq_ns < enq)
			enq = u->head[cls]->enq_ns;
	return enq;
}

int qcore_class_now(const struct qgroup *g, const struct qent *e, int64_t now)
{
	int64_t enq = e->enq_ns;

	if (e->queued) {
		int64_t oldest = qcore_oldest(g, e->cls);
		if (oldest < enq)
			enq = oldest;
	}
	return qcore_aged(g, e->cls, enq, now);
}

/* Fair share between two heads of one class: (running, last grant, seq)
 * lexicographically; whether a beats b. */
static bool qcore_fairer(const struct qent *a, const struct qent *b)
{
	if (b == NULL)
		return true;
	if (a->user->running != b->user->running)
		return a->user->running < b->user->running;
	if (a->user->last_grant != b->user->last_grant)
		return a->user->last_grant < b->user->last_grant;
	return a->seq < b->seq;
}

static void qcore_unlink(struct qgroup *g, struct qent *e)
{
	struct quser *u = e->user;

	if (e->prev != NULL)
		e->prev->next = e->next;
	else
		u->head[e->cls] = e->next;
	if (e->next != NULL)
		e->next->prev = e->prev;
	else
		u->tail[e->cls] = e->prev;
	e->prev = e->next = NULL;
	e->queued = false;
	u->nqueued--;
	g->queued[e->cls]--;
}

static void qcore_grant(struct qgroup *g, struct qent *e)
{
	qcore_unlink(g, e);
	e->user->running++;
	e->user->last_grant = ++g->grants;
	g->running++;
	g->granted[e->cls]++;
}

/* Weighted: the class with queued entries and the lowest pass. */
static int qcore_weighted_class(struct qgroup *g)
{
	int best = -1;

	for (int c = 0; c < QCLS_N; c++)
		if (g->queued[c] > 0 && (best < 0 || g->pass[c] < g->pass[best]))
			best = c;
	return best;
}

struct qent *qcore_pick(struct qgroup *g, int64_t now)
{
	struct qent *best[QCLS_N] = { NULL }, *oldest[QCLS_N] = { NULL };
	int c = -1;

	if (!qcore_can_grant(g) || qcore_queued(g) == 0)
		return NULL;
	/* One pass over the heads: each class's best entry by fair share
	 * and its oldest entry (aging; seq follows the queueing times). */
	for (struct quser *u = g->users; u != NULL; u = u->next) {
		for (int k = 0; k < QCLS_N; k++) {
			struct qent *e = u->head[k];
			if (e == NULL)
				continue;
			if (qcore_fairer(e, best[k]))
				best[k] = e;
			if (oldest[k] == NULL || e->seq < oldest[k]->seq)
				oldest[k] = e;
		}
	}
	if (g->policy == QPOLICY_WEIGHTED) {
		c = qcore_weighted_class(g);
		uint32_t w = g->weights[c];
		g->vtime = g->pass[c];
		g->pass[c] += QCORE_STRIDE / (w > 0 ? w : 1);
	} else {
		/* A class counts as high as its oldest entry has aged
		 * to; between equals, the one whose entry to grant is
		 * older (its oldest may be one fair share holds back,
		 * and would win every tie for a fresher one). */
		int ccls = QCLS_N;
		for (int k = 0; k < QCLS_N; k++) {
			if (best[k] == NULL)
				continue;
			int a = qcore_aged(g, k, oldest[k]->enq_ns, now);
			if (c < 0 || a < ccls || (a == ccls &&
			    best[k]->seq < best[c]->seq)) {
				c = k;
				ccls = a;
			}
		}
	}
	qcore_grant(g, best[c]);
	return best[c];
}

void qcore_release(struct qgroup *g, struct qent *e)
{
	struct quser *u = e->user;

	u->running--;
	g->running--;
	e->user = NULL;
	qcore_user_gc(g, u);
}

void qcore_remove(struct qgroup *g, struct qent *e)
{
	struct quser *u = e->user;

	qcore_unlink(g, e);
	e->user = NULL;
	qcore_user_gc(g, u);
}

uint64_t qcore_queued(const struct qgroup *g)
{
	uint64_t n = 0;

	for (int c = 0; c < QCLS_N; c++)
		n += g->queued[c];
	return n;
}
