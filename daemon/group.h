/*
 * group.h — groups, between group.c (the registry, rokd.conf keys, the
 * journal's groups table), queue.c (the lock, tickets, dispatch) and
 * cmd-group.c (the request).  Threads: see each function.
 */
#ifndef ROKD_GROUP_H
#define ROKD_GROUP_H

#include <sqlite3.h>

#include "qcore.h"
#include "rokd.h"

#define GROUP_BACKEND_MAX 16
#define GROUP_PARTITION_MAX 64      /* [A-Za-z0-9_.,-]{0,63} */

/* What a group is set to: from rokd.conf, a GroupRequest or the journal. */
struct group_settings {
	bool has_parallel, has_policy, has_weights, has_backend, has_paused;
	bool has_partition;
	uint32_t parallel;
	int policy;                 /* QPOLICY_* */
	uint32_t weights[QCLS_N];
	char backend[GROUP_BACKEND_MAX];
	char partition[GROUP_PARTITION_MAX]; /* slurm; "": the default */
	bool paused;
};

/* A group of rokd.conf: `group.NAME.KEY = VALUE` lines. */
struct group_conf {
	char name[GROUP_NAME_MAX + 1];
	struct group_settings set;
};

struct group {
	struct group *next;         /* in name order */
	char name[GROUP_NAME_MAX + 1];
	char backend[GROUP_BACKEND_MAX];
	char partition[GROUP_PARTITION_MAX];
	struct qgroup q;
	uint64_t tickets;           /* queued and running tasks */
	bool removing;              /* group rm under way: no new tasks */
	bool dispatching, again;    /* queue_run's (see queue.c) */
};

/* ---- group.c: the registry (under queue.c's lock, or main at start) --- */
struct group *group_find(const char *name, size_t len);
struct group *group_first(void);
/* A new group with the defaults (strict, no limit, local), in name
 * order: NULL on ENOMEM. */
struct group *group_add(const char *name, size_t len);
void group_remove(struct group *g);
void group_free_all(void);
/* Applies the fields set in s. */
void group_apply(struct group *g, const struct group_settings *s);
/* The whole of g as settings (every has_ set). */
void group_settings_of(const struct group *g, struct group_settings *s);
/* Checks s (backend local or slurm, a partition's characters, weights
 * 1..QWEIGHT_MAX): 0, or -1 with a message. */
int group_settings_check(const struct group_settings *s, char *err,
                         size_t len);

/* ---- queue.c: its lock, for cmd-group.c ------------------------------ */
void queue_lock(void);
void queue_unlock(void);
/* Lock held: grants every slot of g that is free now. */
void queue_run_locked(struct group *g);

/* ---- group.c: the journal's groups table ------------------------------ */
/*
 * Main thread, after the journal is open and before recovery: creates the
 * groups of rokd.conf and `default`, then those the journal keeps (the
 * groups added and changed at run time): 0, or -1 with a message.
 */
int group_load(sqlite3 *db, char *err, size_t len);
/* Blocking pool, one at a time (cmd-group.c serialises): writes g's row
 * (s) or deletes it (s NULL) through group.c's own connection to the
 * journal.  0, or -1 with a message. */
int group_store(const char *name, const struct group_settings *s, char *err,
                size_t len);
/* journal_stop alone: the connection closes with the journal's others. */
void group_store_close(void);

#endif /* ROKD_GROUP_H */
