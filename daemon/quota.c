/*
 * quota.c — what each uid holds of the daemon's shared resources, against
 * a cap per uid, so that one user cannot take all of a global limit and
 * lock everyone else out.
 *
 * Counted here: connections (max_connections_per_user), requests in flight
 * (max_waits_per_user: every request counted by conn_begin_wait, over all of
 * the uid's connections), the task ids its waits name, each held until
 * the wait's answer, with some 24 bytes (max_wait_ids_per_user, waiter.c),
 * logs and watch streams (max_followers_per_user),
 * the bytes of replies queued on all of the uid's connections
 * (max_output_per_user, counted by quota_add in 64 KiB steps of each
 * connection, see conn_out_cb), and the bytes of the output files of
 * the uid's exec tasks (max_kept_output_per_user: exec-output.c counts
 * each write with quota_add_within and each file removed, and at start
 * every file there is, each in whole blocks and at least the file
 * system's bytes per inode).  Queued tasks (max_queued_per_user),
 * queued + running tasks (max_running_per_user) and the bytes of their
 * arguments and results (max_task_bytes_per_user) are counted by
 * tasktab.c under the task table's lock, which every change of a task's
 * state already holds; they are in the table below for their keys and
 * messages (quota_explain).  Root is counted like everyone: a root client
 * holding thousands of streams starves others just the same, and an
 * administrator who wants more raises the caps.
 *
 * Offloaded requests (conn_offload) are limited per uid as well, but
 * queued rather than refused: at most QUOTA_JOBS_RUNNING of a uid's run
 * in the blocking pool, the rest wait here in a FIFO per uid, and a pool
 * thread that finishes one of them takes the uid's next (quota_job_next).
 * So the pool's FIFO holds at most QUOTA_JOBS_RUNNING jobs of any one uid,
 * and another user's request waits behind that many of them, not behind
 * thousands.  A queued job holds its request's wait (conn_begin_wait), so
 * its connection stays allocated until it has run and its reply has been
 * delivered (or dropped, the connection being closed), as for a job in the
 * pool.
 *
 * Any thread (the reactor's; workers for output, the journal thread for
 * the output a prune removes): one
 * mutex over a small hash table of the uids that hold something.  An entry
 * is freed when its uid holds nothing, so the table's size follows the
 * number of users active at once, not of users ever seen.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "exec.h"
#include "rokd.h"

#define QUOTA_BUCKETS 256

struct quota_user {
	uid_t uid;
	uint64_t held[QUOTA_NKINDS];
	bool full[QUOTA_NKINDS];           /* refused since below its cap */
	unsigned running;                  /* jobs in the blocking pool */
	struct quota_job *head, **tail;    /* queued jobs, FIFO */
	struct quota_user *next;
};

static struct {
	pthread_mutex_t lock;
	struct quota_user *buckets[QUOTA_BUCKETS];
} quota = { .lock = PTHREAD_MUTEX_INITIALIZER };

static const struct {
	const char *key;            /* the rokd.conf key of its cap */
	const char *what;           /* for messages: "too many ..." */
} quota_kinds[QUOTA_NALL] = {
	[QUOTA_CONNECTIONS] = { "max_connections_per_user", "connections" },
	[QUOTA_WAITS] = { "max_waits_per_user", "requests in flight" },
	[QUOTA_WAIT_IDS] = { "max_wait_ids_per_user",
	                     "task ids in waits (join, race, select)" },
	[QUOTA_FOLLOWERS] = { "max_followers_per_user", "logs and watch streams" },
	[QUOTA_OUTPUT] = { "max_output_per_user", "bytes of unread replies" },
	[QUOTA_KEPT] = { "max_kept_output_per_user",
	                 "bytes of exec output kept" },
	[QUOTA_QUEUED] = { "max_queued_per_user", "queued tasks" },
	[QUOTA_RUNNING] = { "max_running_per_user",
	                    "queued and running tasks" },
	[QUOTA_TASK_BYTES] = { "max_task_bytes_per_user",
	                       "bytes of task arguments and results" },
};

uint64_t quota_cap(int kind)
{
	switch (kind) {
	/* Any thread (see the top): CONFIG_LIMIT. */
	case QUOTA_CONNECTIONS: return CONFIG_LIMIT(max_connections_per_user);
	case QUOTA_WAITS: return CONFIG_LIMIT(max_waits_per_user);
	case QUOTA_WAIT_IDS: return CONFIG_LIMIT(max_wait_ids_per_user);
	case QUOTA_FOLLOWERS: return CONFIG_LIMIT(max_followers_per_user);
	case QUOTA_OUTPUT: return CONFIG_LIMIT(max_output_per_user);
	case QUOTA_KEPT: {
		uint64_t cap = CONFIG_LIMIT(max_kept_output_per_user);
		/* A rokd of one user's own has one uid: no cap by default,
		 * output_keep_free guards the journal. */
		if (cap != CONFIG_KEPT_AUTO)
			return cap;
		return config.root ? exec_output_kept_auto() : UINT64_MAX;
	}
	case QUOTA_QUEUED: return CONFIG_LIMIT(max_queued_per_user);
	case QUOTA_RUNNING: return CONFIG_LIMIT(max_running_per_user);
	case QUOTA_TASK_BYTES: return CONFIG_LIMIT(max_task_bytes_per_user);
	}
	return 0;
}

/* Lock held: uid's entry, created if `create`; NULL if absent or out of
 * memory. */
static struct quota_user *quota_find(uid_t uid, bool create)
{
	struct quota_user **b = &quota.buckets[(unsigned)uid % QUOTA_BUCKETS];

	for (struct quota_user *u = *b; u != NULL; u = u->next)
		if (u->uid == uid)
			return u;
	if (!create)
		return NULL;
	struct quota_user *u = calloc(1, sizeof(*u));
	if (u != NULL) {
		u->uid = uid;
		u->next = *b;
		*b = u;
	}
	return u;
}

/* Lock held: frees u if its uid holds nothing. */
static void quota_drop_if_idle(struct quota_user *u)
{
	bool empty = u->running == 0 && u->head == NULL;
	for (int k = 0; k < QUOTA_NKINDS; k++)
		empty = empty && u->held[k] == 0;
	if (!empty)
		return;
	struct quota_user **p = &quota.buckets[(unsigned)u->uid % QUOTA_BUCKETS];
	while (*p != u)
		p = &(*p)->next;
	*p = u->next;
	free(u);
}

bool quota_take(uid_t uid, int kind)
{
	pthread_mutex_lock(&quota.lock);
	struct quota_user *u = quota_find(uid, true);
	/* Out of memory: refused, like any resource that cannot be had. */
	bool ok = u != NULL && u->held[kind] < quota_cap(kind);
	if (ok)
		u->held[kind]++;
	pthread_mutex_unlock(&quota.lock);
	return ok;
}

void quota_give(uid_t uid, int kind)
{
	pthread_mutex_lock(&quota.lock);
	struct quota_user *u = quota_find(uid, false);
	if (u != NULL && u->held[kind] > 0) {
		u->held[kind]--;
		quota_drop_if_idle(u);
	}
	pthread_mutex_unlock(&quota.lock);
}

bool quota_add(uid_t uid, int kind, int64_t delta)
{
	pthread_mutex_lock(&quota.lock);
	struct quota_user *u = quota_find(uid, delta > 0);
	bool over = false;
	if (u != NULL) {
		/* A give never takes more than was added (the caller adds
		 * what it queued and gives back what left). */
		uint64_t d = (uint64_t)delta;   /* two's complement: adding
		                                   it subtracts when negative */
		if (delta < 0 && 0 - d >= u->held[kind])
			u->held[kind] = 0;
		else
			u->held[kind] += d;
		uint64_t cap = quota_cap(kind);
		over = u->held[kind] > cap;
		/* Said again only once there is real room (an eighth of the
		 * cap): a give-back of a few bytes must not repeat it. */
		if (u->held[kind] <= cap - cap / 8)
			u->full[kind] = false;
		quota_drop_if_idle(u);
	}
	pthread_mutex_unlock(&quota.lock);
	return over;
}

int quota_add_within(uid_t uid, int kind, uint64_t delta)
{
	pthread_mutex_lock(&quota.lock);
	struct quota_user *u = quota_find(uid, true);
	uint64_t cap = quota_cap(kind);
	int r = QUOTA_FULL;
	/* Out of memory: refused, like any resource that cannot be had. */
	if (u != NULL && u->held[kind] <= cap && delta <= cap - u->held[kind]) {
		u->held[kind] += delta;
		r = QUOTA_ADDED;
	} else if (u != NULL && !u->full[kind]) {
		u->full[kind] = true;
		r = QUOTA_FULL_NEWS;
	}
	if (u != NULL)
		quota_drop_if_idle(u);
	pthread_mutex_unlock(&quota.lock);
	return r;
}

bool quota_over(uid_t uid, int kind)
{
	pthread_mutex_lock(&quota.lock);
	struct quota_user *u = quota_find(uid, false);
	bool over = u != NULL && u->held[kind] > quota_cap(kind);
	pthread_mutex_unlock(&quota.lock);
	return over;
}

bool quota_job_queue(uid_t uid, struct quota_job *j)
{
	pthread_mutex_lock(&quota.lock);
	struct quota_user *u = quota_find(uid, true);
	/* Out of memory: run it uncounted (quota_job_next finds nothing to
	 * give back) rather than refuse a request already accepted. */
	bool run = u == NULL || u->running < QUOTA_JOBS_RUNNING;
	if (u != NULL && run) {
		u->running++;
	} else if (u != NULL) {
		j->next = NULL;
		if (u->head == NULL)
			u->tail = &u->head;
		*u->tail = j;
		u->tail = &j->next;
	}
	pthread_mutex_unlock(&quota.lock);
	return run;
}

struct quota_job *quota_job_next(uid_t uid)
{
	struct quota_job *j = NULL;

	pthread_mutex_lock(&quota.lock);
	struct quota_user *u = quota_find(uid, false);
	if (u != NULL && u->head != NULL) {
		j = u->head;
		u->head = j->next;
	} else if (u != NULL && u->running > 0) {
		u->running--;
		quota_drop_if_idle(u);
	}
	pthread_mutex_unlock(&quota.lock);
	return j;
}

void quota_job_cancel(uid_t uid)
{
	pthread_mutex_lock(&quota.lock);
	struct quota_user *u = quota_find(uid, false);
	if (u != NULL && u->running > 0) {
		u->running--;
		quota_drop_if_idle(u);
	}
	pthread_mutex_unlock(&quota.lock);
}

void quota_explain(uid_t uid, int kind, char *buf, size_t len)
{
	snprintf(buf, len, "too many %s for uid %u (the limit is %s = %llu)",
	         quota_kinds[kind].what, (unsigned)uid, quota_kinds[kind].key,
	         (unsigned long long)quota_cap(kind));
}
