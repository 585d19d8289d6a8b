/*
 * qcore.h — the grant logic of one group's queue, without locks, threads
 * or tasks (qcore.c): which queued entry gets the next free slot.  queue.c
 * wraps it with the lock and the tasks; tests/check_qcore.c drives it
 * alone.  Every function: the caller serialises calls on one qgroup.
 */
#ifndef ROKD_QCORE_H
#define ROKD_QCORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Priority classes, highest first. */
enum { QCLS_URGENT, QCLS_HIGH, QCLS_NORMAL, QCLS_LOW, QCLS_N };

enum { QPOLICY_STRICT = 1, QPOLICY_WEIGHTED = 2 };

/* A weighted class's weight: 1..QWEIGHT_MAX. */
#define QWEIGHT_MAX 1000

struct quser;

/* One queued (then running) entry; the caller's storage. */
struct qent {
	struct qent *prev, *next;   /* in its user's FIFO of its class */
	struct quser *user;
	uint64_t seq;               /* submission order in the group */
	int64_t enq_ns;             /* when it was queued (aging) */
	uint8_t cls;                /* its class as submitted */
	bool queued;                /* in a FIFO (else granted or never) */
};

/* A user with queued or running entries in the group (qcore's storage). */
struct quser {
	struct quser *next;
	uid_t uid;
	uint32_t running;
	uint64_t nqueued;
	uint64_t last_grant;        /* the group's grants at its last; 0: none */
	struct qent *head[QCLS_N], *tail[QCLS_N];
};

struct qgroup {
	/* Settings: the caller changes them between calls. */
	uint32_t parallel;          /* 0: no limit */
	int policy;                 /* QPOLICY_* */
	uint32_t weights[QCLS_N];   /* weighted: 1..QWEIGHT_MAX each */
	int64_t aging_ns;           /* strict: one class up per interval; 0: off */
	bool paused;
	/* State. */
	uint32_t running;
	uint64_t queued[QCLS_N];    /* by submitted class */
	uint64_t seq;
	struct quser *users;
	uint64_t pass[QCLS_N];      /* weighted: stride scheduling */
	uint64_t vtime;             /* the pass of the last weighted grant */
	uint64_t granted[QCLS_N];   /* grants by submitted class, ever */
	uint64_t grants;            /* all grants, ever (fair share's order) */
};

/* Settings of a new group: strict, no limit, default weights, aging off. */
void qcore_init(struct qgroup *g);
/* Frees the user records (the entries are the caller's). */
void qcore_done(struct qgroup *g);
/* The default weights: urgent 50, high 30, normal 15, low 5. */
extern const uint32_t qcore_default_weights[QCLS_N];

/* Queues e for uid in class cls at time now: 0 or -ENOMEM. */
int qcore_push(struct qgroup *g, struct qent *e, uid_t uid, int cls,
               int64_t now);
/* Whether a slot is free and the group not paused. */
bool qcore_can_grant(const struct qgroup *g);
/*
 * The entry that gets the next slot at time now, taken off its FIFO and
 * counted as running (its user's and the group's), or NULL (no free slot,
 * paused, nothing queued).  Strict: the highest class after aging (the
 * older oldest entry between equals), then in it the user with the fewest
 * running entries, then the one granted least recently, then the longest
 * waiting.  Weighted: the class whose stride pass is lowest, then as
 * above.  O(U) for U users with queued or running entries.
 */
struct qent *qcore_pick(struct qgroup *g, int64_t now);
/* e (granted) ended: its slot is free. */
void qcore_release(struct qgroup *g, struct qent *e);
/* e (queued) leaves the queue without running. */
void qcore_remove(struct qgroup *g, struct qent *e);
/* e's class at time now after aging (strict): its class as submitted,
 * raised by the wait of the oldest queued entry of that class. */
int qcore_class_now(const struct qgroup *g, const struct qent *e,
                    int64_t now);
/* Queued entries, all classes. */
uint64_t qcore_queued(const struct qgroup *g);

#endif /* ROKD_QCORE_H */
