/*
 * quota.c — what each uid holds of the daemon's shared resources, against
 * a cap per uid, so that one user cannot take all of a global limit and
 * lock everyone else out.
 *
 * Counted today: connections (max_connections_per_user), requests in flight
 * (max_waits_per_user: every request counted by conn_begin_wait, over all of
 * the uid's connections) and logs streams (max_followers_per_user).  A new
 * kind (running or queued tasks) is one more enum value, config key and
 * name in the table below.  Root is counted like everyone: a root client
 * holding thousands of streams starves others just the same, and an
 * administrator who wants more raises the caps.
 *
 * Any thread (today the reactor's; task quotas will come from workers): one
 * mutex over a small hash table of the uids that hold something.  An entry
 * is freed when its uid holds nothing, so the table's size follows the
 * number of users active at once, not of users ever seen.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "rokd.h"

#define QUOTA_BUCKETS 256

struct quota_user {
	uid_t uid;
	uint64_t held[QUOTA_NKINDS];
	struct quota_user *next;
};

static struct {
	pthread_mutex_t lock;
	struct quota_user *buckets[QUOTA_BUCKETS];
} quota = { .lock = PTHREAD_MUTEX_INITIALIZER };

static const struct {
	const char *key;            /* the rokd.conf key of its cap */
	const char *what;           /* for messages: "too many ..." */
} quota_kinds[QUOTA_NKINDS] = {
	[QUOTA_CONNECTIONS] = { "max_connections_per_user", "connections" },
	[QUOTA_WAITS] = { "max_waits_per_user", "requests in flight" },
	[QUOTA_FOLLOWERS] = { "max_followers_per_user", "logs streams" },
};

uint64_t quota_cap(int kind)
{
	switch (kind) {
	/* Any thread (see the top): CONFIG_LIMIT. */
	case QUOTA_CONNECTIONS: return CONFIG_LIMIT(max_connections_per_user);
	case QUOTA_WAITS: return CONFIG_LIMIT(max_waits_per_user);
	case QUOTA_FOLLOWERS: return CONFIG_LIMIT(max_followers_per_user);
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
		bool empty = true;
		for (int k = 0; k < QUOTA_NKINDS; k++)
			empty = empty && u->held[k] == 0;
		if (empty) {
			struct quota_user **p =
				&quota.buckets[(unsigned)uid % QUOTA_BUCKETS];
			while (*p != u)
				p = &(*p)->next;
			*p = u->next;
			free(u);
		}
	}
	pthread_mutex_unlock(&quota.lock);
}

void quota_explain(uid_t uid, int kind, char *buf, size_t len)
{
	snprintf(buf, len, "too many %s for uid %u (the limit is %s = %llu)",
	         quota_kinds[kind].what, (unsigned)uid, quota_kinds[kind].key,
	         (unsigned long long)quota_cap(kind));
}
