/*
 * tasktab.c — the task table: every task rokd knows, by id.
 *
 * A record is created on the reactor thread when a spawn is accepted, is
 * updated by the worker that runs its kind (running, finished), and is read
 * by requests on any thread.  One mutex guards the table and every record:
 * critical sections are a hash lookup and a few field copies, so a single
 * lock is enough at hundreds of thousands of tasks per second.
 *
 * Records sit in a hash table by id, in a list in id order (ids are handed
 * out in increasing order, so appending keeps it sorted; root's `list`
 * pages through it), in their uid's list in id order (a user's `list`),
 * and, while unfinished, in their uid's list of those (watch cursors);
 * once finished, in a FIFO: when more than
 * config.max_finished finished tasks are kept, the oldest are forgotten, so
 * memory stays bounded under any load.  An unfinished record is never
 * forgotten: its runtime task points at it.  Nor is a finished one whose
 * finish is not committed to the journal yet (queued for the linger, or
 * retried while commits fail): a reader that misses in memory reads the
 * journal, whose row would still say queued or running.  Such records are
 * evicted once the commit is made (tasktab_journal_committed).  They are
 * bounded by the finishes of one linger, and while the disk fails by the
 * tasks unfinished when it broke: no spawn is committed meanwhile.
 *
 * Ids are never reused: one counter, increasing, continued across
 * restarts from the journal (tasktab_set_next_id).
 *
 * The journal (journal.c) hears of every start, finish and cancel request
 * of a record; a record that is not in memory (evicted, or finished before
 * a restart) is looked up in the journal by status, join and list.  At a
 * clean stop (tasktab_cancel_all) the tasks the daemon cancels itself are
 * marked interrupted here and NOT journaled as finished: their rows stay
 * queued/running, so the next start runs them again (retry left, or never
 * started) or records them as interrupted, as after a crash.
 */
#include <errno.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "arena.h"
#include "exec.h"
#include "journal.h"
#include "rokd.h"

/*
 * A place in a uid's list of queued and running records: a record's, or a
 * cursor's (struct tasktab_cursor, r NULL), which stays put while records
 * around it come and go.
 */
struct tasktab_link {
	struct tasktab_link *prev, *next;
	struct rtask *r;
};

struct rtask {
	uint64_t id;
	uid_t uid;
	int state;
	const struct kind *kind;
	size_t nargs;
	ProtobufCBinaryData *args;     /* one allocation with the bytes */
	size_t bytes;                  /* of args and value, and gate_bytes:
	                                  its uid's count */
	size_t gate_bytes;             /* what the gate keeps for it until
	                                  its final outcome (gate_cost) */
	uint8_t *value;
	size_t value_len;
	bool has_exit_code, has_signal;
	int exit_code, signal;
	bool output_truncated;
	char *reason;
	char *group;                   /* NULL: default */
	struct metrics_group *mgroup;  /* its group's totals (metrics.c) */
	uint8_t cls;                   /* priority class (queue.c) */
	struct qticket *ticket;        /* queued for a slot (queue.c) */
	void *ctl;                     /* kind->cancel's argument, if set */
	char *why;                     /* queued: its kind's word on why it
	                                  waits (tasktab_set_why), or NULL */
	uint64_t spawned_us, started_us, finished_us;
	uint32_t retries;              /* runs again after an interruption */
	uint32_t run;                  /* 1 = first run (retry_failed) */
	uint32_t output_run;           /* the run whose output the file
	                                  holds: the last to start afresh
	                                  (tasktab_output_started); 0: none
	                                  started since this rokd did */
	uint32_t retry_failed;         /* from the spec: more runs on failure */
	uint64_t backoff_ms;
	uint64_t not_before_us;        /* queued: delay or retry backoff */
	/*
	 * When this run entered (or, not gated, enters) its group's queue,
	 * wall clock; 0: not yet.  queued_noted: the journal has it (the
	 * spawn's insert, the row at recovery, or journal_queued).  The
	 * starter's, as `run` (tasktab_start): written at creation, by the
	 * thread that starts the run before its runner exists
	 * (tasktab_queue_entry), and cleared by tasktab_requeue once the run
	 * ended; never read by anyone else.
	 */
	uint64_t queued_us;
	bool queued_noted;
	uint64_t wait_dep;             /* queued: a dependency not ended yet */
	bool gated;                    /* gate.c holds it: gate_ended hears
	                                  of its end */
	rok_task *life;                /* gated: ends with its final outcome,
	                                  for joins (gate.c) */
	bool cancel_requested;         /* by a client, not by the shutdown */
	uint64_t fin_seq;              /* finished: its journal update's seq
	                                  (journal_finished), 0: none */
	bool gone;                     /* pruned: no longer visible */
	bool pending;                  /* spawn not announced yet: no event
	                                  told of it (tasktab_announce) */
	rok_task *handle;              /* the runtime task, until finished */
	struct rtask *hnext;           /* hash chain */
	struct rtask *prev, *next;     /* all records, in id order */
	struct rtask *uaprev, *uanext; /* its uid's records, in id order */
	struct rtask *fnext, *fprev;   /* finished FIFO */
	struct rtask *ufnext;          /* its uid's finished FIFO */
	struct tasktab_link ulink;     /* queued or running: in its uid's
	                                  list */
	uint64_t chg_seq;              /* its last event's tab.seq; 0: none
	                                  since this rokd started */
	struct tasktab_user *user;     /* what its uid holds */
};

/*
 * What one uid holds: its queued and running tasks (max_queued_per_user,
 * max_running_per_user, checked at spawn) and its finished records in
 * memory, oldest first (max_finished_per_user: one user's flood of
 * finished tasks evicts that user's oldest, never another's).  Under the
 * table's lock; freed when it holds nothing.
 */
struct tasktab_user {
	uid_t uid;
	uint64_t queued, running, nfinished;
	uint64_t bytes;                /* its records' bytes (rtask.bytes) */
	struct rtask *fhead, *ftail;
	struct rtask *ahead, *atail;   /* all its records, in id order
	                                  (each counted above) */
	/* Its queued and running records, and the watches' cursors, which
	 * hold the entry (ncursors) while they are in the list. */
	struct tasktab_link *uhead, *utail;
	unsigned ncursors;
	struct tasktab_user *next;
};

#define TASKTAB_USER_BUCKETS 256

static struct {
	pthread_mutex_t lock;
	struct rtask **buckets;
	size_t nbuckets;               /* power of 2 */
	size_t count;
	uint64_t next_id;
	struct rtask *head, *tail;     /* id order */
	struct rtask *fhead, *ftail;   /* finished, oldest first */
	uint64_t nfinished;
	uint64_t counts[RT_NSTATES];
	uint64_t seq;                  /* state changes so far */
	bool stopping;                 /* tasktab_cancel_all ran */
	bool hold;                     /* no eviction (the recovery) */
	bool uncommitted;              /* eviction stopped at a record whose
	                                  finish is not committed yet */
	struct tasktab_user *users[TASKTAB_USER_BUCKETS];
} tab = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t tasktab_now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

int tasktab_init(void)
{
	tab.nbuckets = 1024;
	tab.buckets = calloc(tab.nbuckets, sizeof(*tab.buckets));
	tab.next_id = 1;
	return tab.buckets != NULL ? 0 : -ENOMEM;
}

static void tasktab_free_record(struct rtask *r)
{
	rok_task_unref(r->handle);
	rok_task_unref(r->life);
	free(r->args);
	free(r->value);
	free(r->reason);
	free(r->why);
	free(r->group);
	free(r);
}

void tasktab_free(void)
{
	pthread_mutex_lock(&tab.lock);
	struct rtask *r = tab.head;
	while (r != NULL) {
		struct rtask *next = r->next;
		tasktab_free_record(r);
		r = next;
	}
	free(tab.buckets);
	tab.buckets = NULL;
	tab.head = tab.tail = tab.fhead = tab.ftail = NULL;
	tab.count = tab.nfinished = 0;
	tab.uncommitted = false;
	for (size_t b = 0; b < TASKTAB_USER_BUCKETS; b++) {
		while (tab.users[b] != NULL) {
			struct tasktab_user *u = tab.users[b];
			tab.users[b] = u->next;
			free(u);
		}
	}
	memset(tab.counts, 0, sizeof(tab.counts));
	pthread_mutex_unlock(&tab.lock);
}

static size_t tasktab_bucket(uint64_t id)
{
	/* Ids are sequential: multiplicative hashing spreads them. */
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 20) &
	       (tab.nbuckets - 1);
}

/* Lock held. */
static struct rtask *tasktab_find(uint64_t id)
{
	struct rtask *r = tab.buckets[tasktab_bucket(id)];

	while (r != NULL && r->id != id)
		r = r->hnext;
	return r;
}

static size_t tasktab_user_bucket(uid_t uid)
{
	return (uid * 2654435761u) % TASKTAB_USER_BUCKETS;
}

/* Lock held.  uid's entry, or NULL. */
static struct tasktab_user *tasktab_user_find(uid_t uid)
{
	struct tasktab_user *u = tab.users[tasktab_user_bucket(uid)];

	while (u != NULL && u->uid != uid)
		u = u->next;
	return u;
}

/* Lock held.  uid's entry, created if absent (NULL: out of memory). */
static struct tasktab_user *tasktab_user_get(uid_t uid)
{
	struct tasktab_user **b = &tab.users[tasktab_user_bucket(uid)];
	struct tasktab_user *u = tasktab_user_find(uid);

	if (u == NULL && (u = calloc(1, sizeof(*u))) != NULL) {
		u->uid = uid;
		u->next = *b;
		*b = u;
	}
	return u;
}

/* Lock held.  Frees u once it holds nothing: called by whoever is done
 * with u (nothing that removes a record frees its uid's on its own). */
static void tasktab_user_put(struct tasktab_user *u)
{
	if (u->queued != 0 || u->running != 0 || u->nfinished != 0 ||
	    u->ncursors != 0)
		return;
	struct tasktab_user **b = &tab.users[tasktab_user_bucket(u->uid)];
	while (*b != u)
		b = &(*b)->next;
	*b = u->next;
	free(u);
}

/* Lock held.  Puts l into u's list of unfinished records after `at`
 * (NULL: at the head). */
static void tasktab_ulist_insert(struct tasktab_user *u,
                                 struct tasktab_link *at,
                                 struct tasktab_link *l)
{
	l->prev = at;
	l->next = at != NULL ? at->next : u->uhead;
	if (l->next != NULL)
		l->next->prev = l;
	else
		u->utail = l;
	if (at != NULL)
		at->next = l;
	else
		u->uhead = l;
}

/* Lock held.  Takes l out of u's list. */
static void tasktab_ulist_remove(struct tasktab_user *u,
                                 struct tasktab_link *l)
{
	if (l->prev != NULL)
		l->prev->next = l->next;
	else
		u->uhead = l->next;
	if (l->next != NULL)
		l->next->prev = l->prev;
	else
		u->utail = l->prev;
	l->prev = l->next = NULL;
}

/* Lock held.  Counts r in (delta 1) or out of (-1) its state for its uid,
 * and in or out of its uid's list of unfinished records (a change between
 * queued and running moves it to the end). */
static void tasktab_user_count(struct rtask *r, int delta)
{
	if (r->state == RT_QUEUED)
		r->user->queued += (uint64_t)(int64_t)delta;
	else if (r->state == RT_RUNNING)
		r->user->running += (uint64_t)(int64_t)delta;
	else
		return;
	if (delta > 0)
		tasktab_ulist_insert(r->user, r->user->utail, &r->ulink);
	else
		tasktab_ulist_remove(r->user, &r->ulink);
}

/* Lock held.  Doubles the buckets when the table is full; failure to grow
 * only costs speed. */
static void tasktab_grow(void)
{
	size_t n = tab.nbuckets * 2;
	struct rtask **b = calloc(n, sizeof(*b));

	if (b == NULL)
		return;
	struct rtask **old = tab.buckets;
	size_t oldn = tab.nbuckets;
	tab.buckets = b;
	tab.nbuckets = n;
	for (size_t i = 0; i < oldn; i++) {
		struct rtask *r = old[i];
		while (r != NULL) {
			struct rtask *next = r->hnext;
			size_t k = tasktab_bucket(r->id);
			r->hnext = b[k];
			b[k] = r;
			r = next;
		}
	}
	free(old);
}

/* Lock held.  Takes r out of the hash and the id lists and frees it; the
 * caller took it off the finished FIFO (or it was never on it).  Its uid's
 * record stays, even holding nothing now: the caller puts it
 * (tasktab_user_put) once done with it. */
static void tasktab_unlink(struct rtask *r)
{
	struct rtask **p = &tab.buckets[tasktab_bucket(r->id)];

	while (*p != r)
		p = &(*p)->hnext;
	*p = r->hnext;
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		tab.head = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	else
		tab.tail = r->prev;
	struct tasktab_user *u = r->user;
	if (r->uaprev != NULL)
		r->uaprev->uanext = r->uanext;
	else
		u->ahead = r->uanext;
	if (r->uanext != NULL)
		r->uanext->uaprev = r->uaprev;
	else
		u->atail = r->uaprev;
	tab.count--;
	tab.counts[r->state]--;
	tasktab_user_count(r, -1);
	r->user->bytes -= r->bytes;
	tasktab_free_record(r);
}

/* Lock held.  Takes a finished record, the oldest of its uid, off both
 * FIFOs and forgets it.  Never frees its uid's record, so a caller that
 * holds that record (a loop over its FIFO, a spawn making room) keeps it:
 * the caller puts it (tasktab_user_put) once done. */
static void tasktab_evict_one(struct rtask *r)
{
	struct tasktab_user *u = r->user;

	if (r->fprev != NULL)
		r->fprev->fnext = r->fnext;
	else
		tab.fhead = r->fnext;
	if (r->fnext != NULL)
		r->fnext->fprev = r->fprev;
	else
		tab.ftail = r->fprev;
	tab.nfinished--;
	/* Both FIFOs are in finish order: the oldest of the table is the
	 * oldest of its uid, and so is the one a uid's cap evicts. */
	u->fhead = r->ufnext;
	if (u->fhead == NULL)
		u->ftail = NULL;
	u->nfinished--;
	/* Without a journal no prune ever removes an exec task's output: it
	 * goes with the record. */
	if (config.durability_off && strcmp(r->kind->name, "exec") == 0)
		exec_out_forget(r->id, r->uid, 0);
	tasktab_unlink(r);
}

/* Lock held.  Whether r, finished, may be forgotten: its finish is in
 * the journal (or never will be), which then answers for it. */
static bool tasktab_evictable(const struct rtask *r)
{
	if (r->fin_seq == 0 || r->fin_seq <= journal_committed())
		return true;
	tab.uncommitted = true;   /* tasktab_journal_committed comes back */
	return false;
}

/* Lock held.  Forgets u's oldest finished records beyond its caps; frees
 * no uid's record, not even u's. */
static void tasktab_evict_user(struct tasktab_user *u)
{
	while ((u->nfinished > CONFIG_LIMIT(max_finished_per_user) ||
	        u->bytes > CONFIG_LIMIT(max_task_bytes_per_user)) &&
	       u->fhead != NULL && tasktab_evictable(u->fhead))
		tasktab_evict_one(u->fhead);
}

/*
 * Lock held.  Forgets the oldest finished records beyond the caps: first
 * the uid's own (max_finished_per_user) when `u` is given, then the
 * table's (max_finished), which only bites when several users each hold
 * close to their cap; memory stays bounded either way.  It stops at a
 * record whose finish is not committed: the FIFOs are in finish order,
 * which is the order of the journal's queue, so the ones behind are not
 * committed either.  Frees the record of a uid other than u that the
 * table's cap leaves holding nothing, never u's: the caller, who holds u,
 * puts it.  (So a caller holding another uid's record must know that it
 * holds something: tasktab_insert's holds the record just inserted.)
 */
static void tasktab_evict(struct tasktab_user *u)
{
	if (tab.hold)
		return;
	if (u != NULL)
		tasktab_evict_user(u);
	while (tab.nfinished > CONFIG_LIMIT(max_finished) && tab.fhead != NULL
	       && tasktab_evictable(tab.fhead)) {
		struct tasktab_user *owner = tab.fhead->user;
		tasktab_evict_one(tab.fhead);
		if (owner != u)
			tasktab_user_put(owner);
	}
}

/* Lock held.  Evicts beyond every uid's cap and the table's.  The uids
 * first, each put (freed if empty) only once its eviction is done and the
 * next is known; then the table's cap, with no uid held. */
static void tasktab_evict_all(void)
{
	if (tab.hold)
		return;
	for (size_t b = 0; b < TASKTAB_USER_BUCKETS; b++) {
		struct tasktab_user *u = tab.users[b];
		while (u != NULL) {
			struct tasktab_user *next = u->next;
			tasktab_evict_user(u);
			tasktab_user_put(u);   /* may free u, no other */
			u = next;
		}
	}
	tasktab_evict(NULL);
}

void tasktab_journal_committed(void)
{
	pthread_mutex_lock(&tab.lock);
	if (tab.uncommitted) {
		/* Set again by tasktab_evictable if some still wait. */
		tab.uncommitted = false;
		tasktab_evict_all();
	}
	pthread_mutex_unlock(&tab.lock);
}

/*
 * Lock held.  Whether u can take `bytes` more within
 * max_task_bytes_per_user, after forgetting its oldest finished records
 * as needed.  The count cannot wrap: each record's bytes come from one
 * frame.
 */
static bool tasktab_room(struct tasktab_user *u, size_t bytes)
{
	uint64_t cap = CONFIG_LIMIT(max_task_bytes_per_user);

	/* u stays even if this evicts its last record (tasktab_evict_one):
	 * the caller inserts the new record into it, or puts it. */
	while (u->bytes + bytes > cap && u->fhead != NULL && !tab.hold &&
	       tasktab_evictable(u->fhead))
		tasktab_evict_one(u->fhead);
	/* Finished records left are ones whose end is not journaled yet
	 * (or the recovery holds them): not the uid's unfinished tasks,
	 * which alone refuse a spawn; they go once committed. */
	return u->bytes + bytes <= cap || u->fhead != NULL;
}

/*
 * While the journal is recovered, its thread is not running yet: the ends
 * of the tasks that the recovery finishes (a dependent cancelled because
 * its dependency was interrupted, a task whose group is gone) are not in
 * the journal, only in memory.  A record evicted then would leave a later
 * dependent's gate_submit reading the journal's stale "queued" row of its
 * dependency, and waiting for an end already past: nothing is evicted
 * until the recovery is over.  Its finished records are at most the
 * journal's unfinished rows, which were in memory anyway.
 */
void tasktab_hold_eviction(bool hold)
{
	pthread_mutex_lock(&tab.lock);
	tab.hold = hold;
	if (!hold)
		tasktab_evict_all();
	pthread_mutex_unlock(&tab.lock);
}

/* Copies a spec's args into one allocation of *size bytes. */
static ProtobufCBinaryData *tasktab_copy_args(const TaskSpec *spec,
                                              size_t *size)
{
	/* Bounded: the spec was decoded from one frame (max_frame). */
	size_t bytes = spec->n_args * sizeof(ProtobufCBinaryData);

	for (size_t i = 0; i < spec->n_args; i++)
		bytes += spec->args[i].len;
	ProtobufCBinaryData *a = malloc(bytes > 0 ? bytes : 1);
	if (a == NULL)
		return NULL;
	*size = bytes;
	uint8_t *p = (uint8_t *)(a + spec->n_args);
	for (size_t i = 0; i < spec->n_args; i++) {
		a[i].len = spec->args[i].len;
		a[i].data = p;
		if (spec->args[i].len > 0)
			memcpy(p, spec->args[i].data, spec->args[i].len);
		p += spec->args[i].len;
	}
	return a;
}

static struct rtask *tasktab_new_record(uid_t uid, const struct kind *k,
                                       const TaskSpec *spec)
{
	struct rtask *r = calloc(1, sizeof(*r));

	if (r != NULL)
		r->ulink.r = r;
	if (r == NULL ||
	    (r->args = tasktab_copy_args(spec, &r->bytes)) == NULL) {
		free(r);
		return NULL;
	}
	if (spec->group.len > 0) {
		if ((r->group = malloc(spec->group.len + 1)) == NULL) {
			free(r->args);
			free(r);
			return NULL;
		}
		memcpy(r->group, spec->group.data, spec->group.len);
		r->group[spec->group.len] = '\0';
	}
	/* The gate keeps a copy of the spec (every run needs it): counted
	 * with the args while the task has not reached its final outcome. */
	if (gate_needed(spec)) {
		r->gate_bytes = gate_cost(spec);
		r->bytes += r->gate_bytes;
	}
	r->mgroup = metrics_group(r->group);
	r->cls = (uint8_t)queue_class(spec->priority);
	r->nargs = spec->n_args;
	r->uid = uid;
	r->kind = k;
	r->state = RT_QUEUED;
	r->spawned_us = tasktab_now_us();
	r->run = 1;
	r->retry_failed = spec->retry_failed;
	r->backoff_ms = spec->backoff_ms;
	/* With nothing to wait for it enters its queue as it starts, right
	 * after the spawn's commit, which records this time with it (the
	 * callers put tasktab_queued_us into the insert); a gated one when
	 * the gate releases it. */
	if (!gate_needed(spec)) {
		r->queued_us = r->spawned_us;
		r->queued_noted = true;
	}
	return r;
}

/* Lock held.  Adds a queued record; ids arrive in increasing order.  Its
 * entry into queued is counted by the caller (metrics_task_state). */
static void tasktab_insert(struct rtask *r)
{
	tab.counts[RT_QUEUED]++;
	if (tab.count >= tab.nbuckets)
		tasktab_grow();
	size_t b = tasktab_bucket(r->id);
	r->hnext = tab.buckets[b];
	tab.buckets[b] = r;
	r->prev = tab.tail;
	if (tab.tail != NULL)
		tab.tail->next = r;
	else
		tab.head = r;
	tab.tail = r;
	struct tasktab_user *u = r->user;
	r->uaprev = u->atail;
	if (u->atail != NULL)
		u->atail->uanext = r;
	else
		u->ahead = r;
	u->atail = r;
	tab.count++;
	tasktab_user_count(r, 1);
	r->user->bytes += r->bytes;
	tasktab_evict(NULL);
}

int tasktab_create(uid_t uid, const struct kind *k, const TaskSpec *spec,
                   struct rtask **out)
{
	struct rtask *r = tasktab_new_record(uid, k, spec);

	*out = NULL;
	if (r == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&tab.lock);
	int err = 0;
	if (tab.counts[RT_QUEUED] >= CONFIG_LIMIT(max_queued))
		err = -EAGAIN;
	else if ((r->user = tasktab_user_get(uid)) == NULL)
		err = -ENOMEM;
	else if (r->user->queued >= CONFIG_LIMIT(max_queued_per_user))
		err = -EDQUOT;
	/* Every queued task will run: bounding the uid's unfinished tasks
	 * at spawn bounds its running ones. */
	else if (r->user->queued + r->user->running >=
	         CONFIG_LIMIT(max_running_per_user))
		err = -EUSERS;
	/* What its unfinished tasks hold counts; its finished ones make
	 * room (their oldest go first, as at max_finished_per_user). */
	else if (!tasktab_room(r->user, r->bytes))
		err = -ENOSPC;
	if (err < 0) {
		if (r->user != NULL)
			tasktab_user_put(r->user);
		pthread_mutex_unlock(&tab.lock);
		tasktab_free_record(r);
		return err;
	}
	r->id = tab.next_id++;
	/* Announced (an event, a count) only once the journal has it: a
	 * spawn it refuses is discarded, and a watcher would have seen a
	 * task start that then vanished without an end. */
	r->pending = true;
	tasktab_insert(r);
	pthread_mutex_unlock(&tab.lock);
	*out = r;
	return 0;
}

/*
 * Lock held.  Announces r if it is still pending: its `queued` event into
 * *ev, to be published before any later event of r, and its count; false
 * if it was announced already (or never pending: restored).
 *
 * A spawn is announced only once the journal has committed it, and before
 * its first other event; that is, by the first of these to take the
 * table's lock for it, all after the commit (the record is started only
 * then), so the spawn costs no lock of its own for it:
 * - tasktab_start, after kind_spawn (the commit's thread);
 * - tasktab_set_life, for a gated record (gate_submit, the same thread);
 * - tasktab_running or tasktab_finish, if the task's worker (or a failed
 *   start) got there first.
 * Numbered under the lock: a snapshot taken before left r out, one taken
 * after has it and drops this event (cmd-watch.c).
 */
static bool tasktab_announce(struct rtask *r, struct events_ev *ev)
{
	if (!r->pending)
		return false;
	r->pending = false;
	*ev = (struct events_ev){
		.kind = EVENTS_STATE, .id = r->id, .uid = r->uid,
		.state = RT_QUEUED, .time_us = r->spawned_us, .seq = ++tab.seq,
	};
	r->chg_seq = ev->seq;
	if (r->group != NULL)
		snprintf(ev->group, sizeof(ev->group), "%s", r->group);
	metrics_task_state(r->mgroup, RT_QUEUED);
	return true;
}

int tasktab_restore(uint64_t id, uid_t uid, const struct kind *k,
                    const TaskSpec *spec, uint64_t spawned_us,
                    uint64_t queued_us, uint32_t retries, uint32_t run,
                    struct rtask **out)
{
	struct rtask *r = tasktab_new_record(uid, k, spec);

	*out = NULL;
	if (r == NULL)
		return -ENOMEM;
	r->id = id;
	r->spawned_us = spawned_us;
	r->retries = retries;
	r->run = run > 0 ? run : 1;
	if (queued_us != 0) {
		r->queued_us = queued_us;
		r->queued_noted = true;
	} else if (!gate_needed(spec)) {
		/* A row of a rokd before the queued_us column: it entered
		 * its queue at its spawn.  Written at its entry now. */
		r->queued_us = spawned_us;
		r->queued_noted = false;
	}
	pthread_mutex_lock(&tab.lock);
	if ((r->user = tasktab_user_get(uid)) == NULL) {
		pthread_mutex_unlock(&tab.lock);
		tasktab_free_record(r);
		return -ENOMEM;
	}
	tasktab_insert(r);
	if (tab.next_id <= id)
		tab.next_id = id + 1;
	pthread_mutex_unlock(&tab.lock);
	metrics_task_state(r->mgroup, RT_QUEUED);
	*out = r;
	return 0;
}

void tasktab_set_next_id(uint64_t next)
{
	pthread_mutex_lock(&tab.lock);
	if (tab.next_id < next)
		tab.next_id = next;
	pthread_mutex_unlock(&tab.lock);
}

uint64_t tasktab_next_id(void)
{
	pthread_mutex_lock(&tab.lock);
	uint64_t next = tab.next_id;
	pthread_mutex_unlock(&tab.lock);
	return next;
}

void tasktab_discard(struct rtask *r)
{
	pthread_mutex_lock(&tab.lock);
	struct tasktab_user *u = r->user;
	/* A watch or logs -f of its id (cmd-watch.c, cmd-logs.c) may have
	 * started while the commit was pending: it hears that the id is
	 * gone, no one else does. */
	struct events_ev ev = {
		.kind = EVENTS_GONE, .id = r->id, .uid = r->uid,
		.seq = ++tab.seq,
	};
	tasktab_unlink(r);   /* queued, never started: not on the FIFO */
	tasktab_user_put(u);
	pthread_mutex_unlock(&tab.lock);
	events_publish(&ev);
}

void tasktab_forget(uint64_t id)
{
	pthread_mutex_lock(&tab.lock);
	struct rtask *r = tasktab_find(id);
	/* Left on the finished FIFO (it is singly linked); eviction frees it
	 * in its turn. */
	if (r != NULL && r->state >= RT_SUCCEEDED)
		r->gone = true;
	pthread_mutex_unlock(&tab.lock);
}

uint64_t tasktab_spawned_us(const struct rtask *r)
{
	return r->spawned_us;
}

uint64_t tasktab_queued_us(const struct rtask *r)
{
	return r->queued_us;
}

void tasktab_forget_queue_entry(struct rtask *r)
{
	r->queued_us = 0;
	r->queued_noted = false;
}

uint64_t tasktab_queue_entry(struct rtask *r)
{
	if (r->queued_us == 0) {
		r->queued_us = tasktab_now_us();
		r->queued_noted = false;
	}
	if (!r->queued_noted) {
		/* Rides on the next commit; see journal_queued for a death
		 * before it. */
		r->queued_noted = true;
		journal_queued(r->id, r->queued_us);
	}
	return r->queued_us;
}

uint64_t tasktab_id(const struct rtask *r)
{
	return r->id;
}

void tasktab_reply(uint64_t id, struct conn_answer *reply)
{
	Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__SpawnReply sr = ROK__V1__SPAWN_REPLY__INIT;
	TaskInfo info;
	struct conn *c = conn_answer_claim(reply);

	if (c == NULL) {   /* its client left: the wait was given back */
		conn_answer_unref(reply);
		return;
	}
	tasktab_info(id, conn_uid(c), &info);
	sr.id = id;
	sr.task = &info;
	resp.id = conn_answer_req_id(reply);
	resp.body_case = ROK__V1__RESPONSE__BODY_SPAWN;
	resp.spawn = &sr;
	reply_post_direct(c, &resp);
	tasktab_info_free(&info);
	conn_answer_unref(reply);
}

/* Lock held.  Moves a record to a new state, keeping the counts; fills
 * *ev for events_publish (its time set by the caller). */
static void tasktab_set_state(struct rtask *r, int state,
                              struct events_ev *ev)
{
	tab.counts[r->state]--;
	tab.counts[state]++;
	tasktab_user_count(r, -1);
	r->state = state;
	tasktab_user_count(r, 1);
	*ev = (struct events_ev){
		.kind = state >= RT_SUCCEEDED ? EVENTS_END : EVENTS_STATE,
		.id = r->id, .uid = r->uid,
		.state = state, .seq = ++tab.seq,
	};
	r->chg_seq = ev->seq;
	if (r->group != NULL)
		snprintf(ev->group, sizeof(ev->group), "%s", r->group);
	metrics_task_state(r->mgroup, state);
}

int tasktab_start(struct rtask *r, const TaskSpec *spec,
                  struct conn_answer *reply)
{
	rok_task *h;
	struct qticket *t;
	/*
	 * Cancelled while its spawn waited for the journal (or rokd began
	 * to stop meanwhile): it ends here, never started.  Cancelling the
	 * handle after kind_spawn is too late for that: a worker may poll it
	 * first, and an exec task's command would then run.  A cancel that
	 * comes between this look and the one after kind_spawn cancels the
	 * handle there, and the task may then run for a moment.
	 *
	 * run only changes when a run of r fails (tasktab_requeue), after
	 * the kind_spawn below: read here, it is this run's.
	 */
	pthread_mutex_lock(&tab.lock);
	uint32_t run = r->run;
	uint64_t id = r->id;
	bool cancelled = tab.stopping || r->cancel_requested;
	pthread_mutex_unlock(&tab.lock);
	if (cancelled) {
		struct rt_outcome o = { .state = RT_CANCELLED };
		snprintf(o.reason, sizeof(o.reason), "cancelled before it "
		         "started");
		tasktab_finish(r, &o);   /* r may go from here on */
		if (reply != NULL)
			tasktab_reply(id, reply);
		return 0;
	}
	int err = kind_spawn(r, r->kind, spec, reply, &h, &t);

	if (err < 0) {
		struct rt_outcome o = { .state = RT_FAILED };
		snprintf(o.reason, sizeof(o.reason), "could not start: %s",
		         err == -ENOENT ? "its group does not exist (removed?)"
		                        : strerror(-err));
		tasktab_finish(r, &o);   /* r may go from here on */
		if (reply != NULL)
			tasktab_reply(id, reply);
		return err;
	}
	/*
	 * Once kind_spawn has started it, the task may end on a worker and
	 * its record be evicted by another task's end: r is found again by
	 * its id (never reused), not read, and NULL means it finished.  The
	 * same run: one that failed at once may be queued again for its
	 * retry already (run + 1), and its handle and ticket are no longer
	 * kept (the ticket is freed after the finish).
	 */
	pthread_mutex_lock(&tab.lock);
	r = tasktab_find(id);
	/*
	 * Announced here if its worker has not done it yet (tasktab_running,
	 * tasktab_finish), and published under the lock: its worker's next
	 * event takes the lock after this and is published after it, where
	 * publishing after unlocking would let the two race to the reactor's
	 * queue.  With nobody watching this is one atomic load; with a
	 * watcher, an allocation and the reactor's queue lock, whose holders
	 * never take the table's.
	 */
	struct events_ev qev;
	if (r != NULL && tasktab_announce(r, &qev))
		events_publish(&qev);
	if (r != NULL && (r->state == RT_QUEUED || r->state == RT_RUNNING) &&
	    r->run == run) {
		r->handle = h;   /* kept for join, race and cancel */
		r->ticket = t;
		/* Cancelled, or the stop began (tasktab_cancel_all), since
		 * the look above: stopped as soon as it can be. */
		if (tab.stopping || r->cancel_requested)
			rok_task_cancel(h);
	} else {
		rok_task_unref(h);   /* it finished already */
	}
	pthread_mutex_unlock(&tab.lock);
	return 0;
}

int tasktab_start_packed(struct rtask *r, const uint8_t *spec, size_t len,
                         struct conn_answer *reply)
{
	/* Decoded into this thread's arena (the reactor's, the journal
	 * thread's or a worker's), no malloc per field: tasktab_start copies
	 * what it keeps.  A start within the start (a task that another's
	 * end starts) takes its pieces after this one's and gives them back
	 * first. */
	static _Thread_local struct {
		alignas(max_align_t) uint8_t buf[4096];
		struct arena a;
		bool ready;
	} ar;
	if (!ar.ready) {
		arena_init(&ar.a, ar.buf, sizeof(ar.buf), false);
		ar.ready = true;
	}
	struct arena_mark mark = arena_mark(&ar.a);
	TaskSpec *s = rok__v1__task_spec__unpack(&ar.a.pb, len, spec);

	if (s == NULL) {
		uint64_t id = r->id;
		struct rt_outcome o = { .state = RT_FAILED };
		snprintf(o.reason, sizeof(o.reason), "could not start: out of "
		         "memory");
		tasktab_finish(r, &o);
		arena_release(&ar.a, mark);
		if (reply != NULL)
			tasktab_reply(id, reply);
		return -ENOMEM;
	}
	int err = tasktab_start(r, s, reply);
	arena_release(&ar.a, mark);
	return err;
}

void tasktab_running(struct rtask *r)
{
	struct events_ev ev, qev;

	pthread_mutex_lock(&tab.lock);
	bool announced = tasktab_announce(r, &qev);
	bool started = r->state == RT_QUEUED;
	if (started) {
		tasktab_set_state(r, RT_RUNNING, &ev);
		r->started_us = ev.time_us = tasktab_now_us();
	}
	uint64_t id = r->id, us = r->started_us, spawned = r->spawned_us;
	pthread_mutex_unlock(&tab.lock);
	if (announced)
		events_publish(&qev);
	if (started) {
		journal_started(id, us);
		events_publish(&ev);
		metrics_observe(METRICS_SPAWN_START,
		                (int64_t)us - (int64_t)spawned);
	}
}

/*
 * Lock held.  A failed run with retry_failed runs left (and an outcome
 * known: not o->final): back to queued,
 * run + 1, not before now + backoff_ms * 2^(run - 2) (saturated, capped at
 * DURATION_MAX_MS).  Cancelled and timed-out runs are final: a cancel is
 * the client's word, and a timeout is the client's own limit, which the
 * next run would likely pass as well.  The output kept is the last run's
 * (each exec run starts a fresh file).
 */
static bool tasktab_requeue(struct rtask *r, const struct rt_outcome *o,
                            struct events_ev *ev)
{
	/* Also while rokd stops: the failure was real, and the next start
	 * runs the retry (the gate starts nothing once stopping). */
	if (o->state != RT_FAILED || o->final || !r->gated ||
	    r->cancel_requested || r->run > r->retry_failed)
		return false;
	uint64_t ms = r->backoff_ms;
	for (uint32_t k = 1; k < r->run && ms < DURATION_MAX_MS; k++)
		ms *= 2;   /* ms < 2^39 before: no wrap */
	if (ms > DURATION_MAX_MS)
		ms = DURATION_MAX_MS;
	r->run++;
	r->not_before_us = tasktab_now_us() + ms * 1000;
	tasktab_set_state(r, RT_QUEUED, ev);
	ev->time_us = tasktab_now_us();
	r->started_us = 0;
	/* The next run waits in the gate, then queues anew (its row's
	 * queued_us is cleared with the requeue). */
	r->queued_us = 0;
	r->queued_noted = false;
	r->ctl = NULL;
	free(r->why);
	r->why = NULL;
	r->ticket = NULL;   /* the runner's queue_leave frees it */
	return true;
}

bool tasktab_finish(struct rtask *r, struct rt_outcome *o)
{
	struct events_ev ev, qev;

	pthread_mutex_lock(&tab.lock);
	/* A task that ends before its start announced it (it could not
	 * start, or its worker was quicker). */
	bool announced = tasktab_announce(r, &qev);
	if (tasktab_requeue(r, o, &ev)) {
		uint64_t id = r->id, nb = r->not_before_us;
		uint32_t run = r->run;
		rok_task *h = r->handle;
		r->handle = NULL;
		journal_requeued(id, run, nb);
		pthread_mutex_unlock(&tab.lock);
		free(o->value);
		o->value = NULL;
		rok_task_unref(h);   /* as below: the runner holds its own */
		if (announced)
			events_publish(&qev);
		events_publish(&ev);   /* queued again: a state, not an end */
		gate_retry(id, nb);
		return false;
	}
	/* Cancelled by the shutdown, not by a client: interrupted, and its
	 * row stays unfinished for the next start to deal with. */
	bool journaled = true;
	if (tab.stopping && o->state == RT_CANCELLED && !r->cancel_requested) {
		o->state = RT_INTERRUPTED;
		if (r->state == RT_QUEUED)
			snprintf(o->reason, sizeof(o->reason), "rokd stopped "
			         "before it started; the next start runs it");
		else
			snprintf(o->reason, sizeof(o->reason), "rokd stopped "
			         "while it ran; the next start runs it again "
			         "or records it as interrupted");
		journaled = false;
	}
	tasktab_set_state(r, o->state, &ev);
	r->finished_us = ev.time_us = tasktab_now_us();
	r->value = o->value;
	r->value_len = o->value_len;
	r->bytes += r->value_len;
	r->user->bytes += r->value_len;
	/* Final: the gate lets go of its copy (gate_ended, just after). */
	r->bytes -= r->gate_bytes;
	r->user->bytes -= r->gate_bytes;
	r->gate_bytes = 0;
	o->value = NULL;
	r->has_exit_code = o->has_exit_code;
	r->exit_code = o->exit_code;
	r->has_signal = o->has_signal;
	r->signal = o->signal;
	r->output_truncated = o->output_truncated;
	r->ctl = NULL;
	free(r->why);
	r->why = NULL;
	r->ticket = NULL;   /* queue_leave frees it after this */
	if (o->reason[0] != '\0')
		r->reason = strdup(o->reason);   /* NULL on ENOMEM: no reason */
	/* The runtime task is about to end: joiners see this record. */
	rok_task *h = r->handle, *life = r->life;
	r->handle = NULL;
	r->life = NULL;
	uint64_t id = r->id;
	int state = r->state;
	bool gated = r->gated;
	r->fprev = tab.ftail;
	if (tab.ftail != NULL)
		tab.ftail->fnext = r;
	else
		tab.fhead = r;
	tab.ftail = r;
	tab.nfinished++;
	struct tasktab_user *u = r->user;
	if (u->ftail != NULL)
		u->ftail->ufnext = r;
	else
		u->fhead = r;
	u->ftail = r;
	u->nfinished++;
	struct journal_finish jf = {
		.id = r->id, .state = r->state, .started_us = r->started_us,
		.finished_us = r->finished_us, .value = r->value,
		.value_len = r->value_len, .has_exit_code = r->has_exit_code,
		.exit_code = r->exit_code, .has_signal = r->has_signal,
		.signal = r->signal, .reason = r->reason,
		.output_truncated = r->output_truncated,
	};
	/* Copied under the lock: eviction may free r once it is dropped.
	 * Numbered under it too, so that the FIFOs' order is the journal's
	 * (see tasktab_evict). */
	if (journaled)
		r->fin_seq = journal_finished(&jf);
	else
		/* Its processes, if it had any, were killed and reaped before
		 * its poll ended: the next start has no group to look for. */
		journal_exec_gone(jf.id);
	tasktab_evict(u);   /* r may go here */
	tasktab_user_put(u);   /* and u with it, if it was u's last */
	pthread_mutex_unlock(&tab.lock);
	/* Watchers and followers of its output see the end. */
	if (announced)
		events_publish(&qev);
	events_publish(&ev);
	if (jf.started_us != 0)
		metrics_observe(METRICS_RUN_TIME, (int64_t)jf.finished_us -
		                                  (int64_t)jf.started_us);
	/*
	 * Dropped after unlocking: the poll that calls this still holds the
	 * runtime's own reference, so this never frees the running task.
	 */
	rok_task_unref(h);
	/* Waits on a gated task end now, with the record final. */
	if (life != NULL) {
		rok_task_cancel(life);
		rok_task_unref(life);
	}
	gate_ended(id, state, gated);
	return true;
}

/* Lock held: the record as `uid` may see it, or an error code. */
static int tasktab_visible(uint64_t id, uid_t uid, struct rtask **out)
{
	struct rtask *r = tasktab_find(id);

	*out = NULL;
	if (r == NULL || r->gone)
		return ROK__V1__ERROR_CODE__NOT_FOUND;
	if (uid != 0 && r->uid != uid)
		return ROK__V1__ERROR_CODE__PERMISSION_DENIED;
	*out = r;
	return 0;
}

int tasktab_lookup(uint64_t id, uid_t uid, rok_task **handle)
{
	struct rtask *r;

	*handle = NULL;
	pthread_mutex_lock(&tab.lock);
	int code = tasktab_visible(id, uid, &r);
	if (code == 0 && r->life != NULL)   /* gated: its final outcome */
		*handle = rok_task_ref(r->life);
	else if (code == 0 && r->handle != NULL)
		*handle = rok_task_ref(r->handle);
	/* An id never handed out is in no journal row either: no read. */
	bool absent = code == ROK__V1__ERROR_CODE__NOT_FOUND && r == NULL &&
	              id < tab.next_id && tasktab_find(id) == NULL;
	pthread_mutex_unlock(&tab.lock);
	/* Not in memory: finished long ago, or before a restart. */
	if (absent)
		code = journal_read_info(id, uid, NULL);
	return code;
}

bool tasktab_lookup_mem(uint64_t id, uid_t uid, int *code)
{
	struct rtask *r;

	pthread_mutex_lock(&tab.lock);
	*code = tasktab_visible(id, uid, &r);
	/* As in tasktab_lookup: an id never handed out is in no row. */
	bool absent = *code == ROK__V1__ERROR_CODE__NOT_FOUND && r == NULL &&
	              id < tab.next_id && tasktab_find(id) == NULL;
	pthread_mutex_unlock(&tab.lock);
	return !absent;
}

static void tasktab_set_error(TaskInfo *info, uint64_t id, int code)
{
	static const char *const what[] = {
		[ROK__V1__ERROR_CODE__NOT_FOUND] = "no such task",
		[ROK__V1__ERROR_CODE__PERMISSION_DENIED] =
			"task belongs to another user",
	};
	Rok__V1__Error *e = malloc(sizeof(*e));

	info->id = id;
	if (e == NULL)
		return;
	rok__v1__error__init(e);
	e->code = (ErrorCode)code;
	e->message.data = (uint8_t *)(uintptr_t)what[code];
	e->message.len = strlen(what[code]);
	info->error = e;
}

static uint8_t *tasktab_dup(const void *p, size_t n)
{
	uint8_t *d = malloc(n > 0 ? n : 1);

	if (d != NULL && n > 0)
		memcpy(d, p, n);
	return d;
}

/* Lock held.  Why a gated queued record waits, for people. */
static void tasktab_fill_waiting(const struct rtask *r, TaskInfo *info)
{
	char buf[128], at[64] = "";

	if (r->not_before_us != 0) {
		time_t t = (time_t)(r->not_before_us / 1000000);
		struct tm tm;
		if (localtime_r(&t, &tm) != NULL)
			strftime(at, sizeof(at), "%Y-%m-%d %H:%M:%S", &tm);
		info->not_before_us = r->not_before_us;
	}
	if (r->wait_dep != 0)
		snprintf(buf, sizeof(buf), "after task %llu",
		         (unsigned long long)r->wait_dep);
	else if (r->run > 1 && at[0] != '\0')
		snprintf(buf, sizeof(buf), "retry %u of %u at %s", r->run - 1,
		         r->retry_failed, at);
	else if (at[0] != '\0' && r->not_before_us > tasktab_now_us())
		snprintf(buf, sizeof(buf), "not before %s", at);
	else
		return;
	info->waiting.data = tasktab_dup(buf, strlen(buf));
	info->waiting.len = info->waiting.data != NULL ? strlen(buf) : 0;
}

/* Lock held.  Fills info from r with copies. */
static void tasktab_fill(const struct rtask *r, TaskInfo *info)
{
	info->id = r->id;
	info->state = (Rok__V1__TaskState)r->state;
	info->uid = (uint32_t)r->uid;
	info->kind.data = (uint8_t *)(uintptr_t)r->kind->name;
	info->kind.len = strlen(r->kind->name);
	if (r->value != NULL && (info->value.data = tasktab_dup(
		                         r->value, r->value_len)) != NULL)
		info->value.len = r->value_len;
	info->has_exit_code = r->has_exit_code;
	info->exit_code = r->exit_code;
	info->has_signal = r->has_signal;
	info->signal = r->signal;
	info->output_truncated = r->output_truncated;
	info->spawned_us = r->spawned_us;
	info->started_us = r->started_us;
	info->finished_us = r->finished_us;
	info->retries = r->retries;
	info->run = r->run;
	const char *g = r->group != NULL ? r->group : "default";
	if ((info->group.data = tasktab_dup(g, strlen(g))) != NULL)
		info->group.len = strlen(g);
	info->priority = (Rok__V1__Priority)queue_wire_priority(r->cls);
	/* Queued: started by a kind that says why it still waits (a Slurm
	 * job pending), in its group's queue (a ticket), or in the gate. */
	if (r->state == RT_QUEUED && r->why != NULL) {
		if ((info->waiting.data = tasktab_dup(r->why,
		                                      strlen(r->why))) != NULL)
			info->waiting.len = strlen(r->why);
	} else if (r->state == RT_QUEUED && r->ticket != NULL) {
		char why[160];
		queue_waiting(r->ticket, why, sizeof(why));
		if (why[0] != '\0' && (info->waiting.data = tasktab_dup(
			                        why, strlen(why))) != NULL)
			info->waiting.len = strlen(why);
	} else if (r->state == RT_QUEUED && r->gated) {
		tasktab_fill_waiting(r, info);
	}
	if (r->reason != NULL && (info->reason.data = tasktab_dup(
		                          r->reason, strlen(r->reason))) != NULL)
		info->reason.len = strlen(r->reason);
	if (r->nargs > 0 &&
	    (info->args = malloc(r->nargs * sizeof(*info->args))) != NULL) {
		for (size_t i = 0; i < r->nargs; i++) {
			info->args[i].data = tasktab_dup(r->args[i].data,
			                                 r->args[i].len);
			info->args[i].len = info->args[i].data != NULL
			                            ? r->args[i].len : 0;
		}
		info->n_args = r->nargs;
	}
}

void tasktab_info(uint64_t id, uid_t uid, TaskInfo *info)
{
	struct rtask *r;

	rok__v1__task_info__init(info);
	pthread_mutex_lock(&tab.lock);
	int code = tasktab_visible(id, uid, &r);
	if (code == 0)
		tasktab_fill(r, info);
	bool absent = code == ROK__V1__ERROR_CODE__NOT_FOUND &&
	              id < tab.next_id && tasktab_find(id) == NULL;
	pthread_mutex_unlock(&tab.lock);
	if (absent)
		code = journal_read_info(id, uid, info);
	if (code != 0)
		tasktab_set_error(info, id, code);
}

size_t tasktab_reply_budget(void)
{
	/* A Response's id and body header, and a reply's few scalar fields
	 * (select's ids are counted by the caller): well under 64 bytes. */
	return config.max_frame > 64 ? config.max_frame - 64 : 0;
}

size_t tasktab_infos_fill(const uint64_t *ids, size_t n, uid_t uid,
                          TaskInfo **infos, size_t budget)
{
	size_t used = 0;

	for (size_t i = 0; i < n; i++) {
		tasktab_info(ids[i], uid, infos[i]);
		/* Each element also costs a tag and a length (at most 1 + 5
		 * bytes, max_frame being below 2^32). */
		size_t sz = rok__v1__task_info__get_packed_size(infos[i]) + 6;
		if (sz > budget - used) {
			tasktab_info_free(infos[i]);
			return i;
		}
		used += sz;
	}
	return n;
}

TaskInfo **tasktab_infos_new(size_t n)
{
	/* The pointer array and the infos in one allocation. */
	TaskInfo **ptrs = calloc(1, n * (sizeof(*ptrs) + sizeof(TaskInfo)) + 1);

	if (ptrs == NULL)
		return NULL;
	TaskInfo *infos = (TaskInfo *)(void *)(ptrs + n);
	for (size_t i = 0; i < n; i++) {
		rok__v1__task_info__init(&infos[i]);
		ptrs[i] = &infos[i];
	}
	return ptrs;
}

void tasktab_infos_free(TaskInfo **infos, size_t n)
{
	if (infos == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		tasktab_info_free(infos[i]);
	free(infos);
}

void tasktab_info_free(TaskInfo *info)
{
	free(info->value.data);
	free(info->waiting.data);
	free(info->reason.data);
	free(info->group.data);
	for (size_t i = 0; i < info->n_args; i++)
		free(info->args[i].data);
	free(info->args);
	free(info->error);
	rok__v1__task_info__init(info);
}

/*
 * Lock held.  A running task of a kind that ends itself on request (exec:
 * its process group must be dead before it may end) gets the kind's hook;
 * the hook and rok_task_cancel are atomic operations and a kill(2), never
 * a wait, so calling them under the lock is fine.
 */
static void tasktab_cancel_one(struct rtask *r)
{
	if (r->ctl != NULL && r->kind->cancel != NULL)
		r->kind->cancel(r->ctl);
	else if (r->handle != NULL)
		rok_task_cancel(r->handle);
}

int tasktab_cancel(uint64_t id, uid_t uid)
{
	struct rtask *r;

	pthread_mutex_lock(&tab.lock);
	int code = tasktab_visible(id, uid, &r);
	/* Unfinished, even if not started yet (its spawn still waiting for
	 * the journal): tasktab_start then ends it without starting it. */
	bool live = code == 0 &&
	            (r->state == RT_QUEUED || r->state == RT_RUNNING);
	bool journal = live && !r->cancel_requested;
	bool gated = live && r->gated;
	if (live) {
		r->cancel_requested = true;
		tasktab_cancel_one(r);
	}
	bool absent = code == ROK__V1__ERROR_CODE__NOT_FOUND &&
	              id < tab.next_id && tasktab_find(id) == NULL;
	pthread_mutex_unlock(&tab.lock);
	if (journal)
		journal_cancel_requested(id);
	if (gated)   /* waiting in the gate: ended there, if not started */
		gate_cancel(id);
	if (absent)   /* finished before a restart: nothing to cancel */
		code = journal_read_info(id, uid, NULL);
	return code;
}

void tasktab_set_kind(struct rtask *r, const struct kind *k)
{
	pthread_mutex_lock(&tab.lock);
	r->kind = k;
	pthread_mutex_unlock(&tab.lock);
}

void tasktab_set_why(struct rtask *r, const char *why)
{
	char *copy = why != NULL ? strdup(why) : NULL;

	/* Out of memory: the old text stays, or none; only people read it. */
	if (why != NULL && copy == NULL)
		return;
	pthread_mutex_lock(&tab.lock);
	char *old = r->why;
	r->why = copy;
	pthread_mutex_unlock(&tab.lock);
	free(old);
}

uint32_t tasktab_run(const struct rtask *r)
{
	/* Only changes when a run fails (tasktab_requeue), once that run
	 * has ended: read by the run itself, at its kind init (see
	 * tasktab_start) and as it starts (exec_start, slurm_poll). */
	return r->run;
}

void tasktab_set_ctl(struct rtask *r, void *ctl)
{
	pthread_mutex_lock(&tab.lock);
	r->ctl = ctl;
	pthread_mutex_unlock(&tab.lock);
}

uid_t tasktab_uid(const struct rtask *r)
{
	return r->uid;   /* set at creation, never changed */
}

bool tasktab_finished(uint64_t id)
{
	pthread_mutex_lock(&tab.lock);
	struct rtask *r = tasktab_find(id);
	bool done = r == NULL || (r->state != RT_QUEUED &&
	                          r->state != RT_RUNNING);
	pthread_mutex_unlock(&tab.lock);
	return done;
}

void tasktab_output_started(uint64_t id, uint32_t run)
{
	pthread_mutex_lock(&tab.lock);
	struct rtask *r = tasktab_find(id);
	if (r != NULL)
		r->output_run = run;
	pthread_mutex_unlock(&tab.lock);
}

uint32_t tasktab_output_run(uint64_t id)
{
	pthread_mutex_lock(&tab.lock);
	struct rtask *r = tasktab_find(id);
	uint32_t run = r != NULL ? r->output_run : 0;
	pthread_mutex_unlock(&tab.lock);
	return run;
}

/* Lock held.  Where a page of uid's records (root: everyone's) after id
 * `after` starts: past that record when it is one of them, else at the
 * first.  A user's page walks the uid's own records only. */
static struct rtask *tasktab_list_first(uid_t uid, uint64_t after)
{
	struct rtask *r = after > 0 ? tasktab_find(after) : NULL;

	if (r != NULL && (uid == 0 || r->uid == uid))
		return uid == 0 ? r->next : r->uanext;
	if (uid == 0)
		return tab.head;
	struct tasktab_user *u = tasktab_user_find(uid);
	return u != NULL ? u->ahead : NULL;
}

/*
 * Merges two id-ordered sources: the records in memory (which hold every
 * unfinished task and the newest finished ones, always current) and the
 * journal's rows (everything journaled, finished ones possibly evicted
 * from memory).  A journal row whose task is in memory is skipped: the
 * record is the truth (the row may lag by one batch).
 */
size_t tasktab_list(uid_t uid, int state, const char *group, uint64_t after,
                    size_t limit,
                    size_t budget, TaskInfo **infos, bool *more)
{
	size_t used = 0;

	uint64_t *jids = malloc((limit + 1) * sizeof(*jids));
	bool *from_journal = calloc(limit + 1, sizeof(*from_journal));
	int nj = 0;
	size_t n = 0, j = 0;

	*more = false;
	/* Unfinished tasks are all in memory (never evicted, all restored
	 * at recovery): for them the journal, which would be scanned whole
	 * for a state it has no index on (`rokctl top` asks every second),
	 * has nothing to add. */
	if (jids != NULL && from_journal != NULL && state != RT_QUEUED &&
	    state != RT_RUNNING) {
		nj = journal_read_ids(uid, state, group, after, limit + 1,
		                      jids);
		if (nj < 0)
			nj = 0;
	}
	pthread_mutex_lock(&tab.lock);
	struct rtask *r = tasktab_list_first(uid, after);
	for (;;) {
		while (r != NULL && (r->id <= after || r->gone ||
		       (state != 0 && r->state != state) ||
		       (group != NULL && !tasktab_in_group(r->group, group))))
			r = uid == 0 ? r->next : r->uanext;
		while (j < (size_t)nj && (jids[j] <= after ||
		       (r != NULL && jids[j] == r->id) ||
		       ((r == NULL || jids[j] < r->id) &&
		        tasktab_find(jids[j]) != NULL)))
			j++;
		bool mem = r != NULL && (j == (size_t)nj || r->id < jids[j]);
		if (!mem && j == (size_t)nj)
			break;
		if (n == limit) {
			*more = true;
			break;
		}
		if (mem) {
			tasktab_fill(r, infos[n]);
			size_t sz = rok__v1__task_info__get_packed_size(
				infos[n]) + 6;   /* and its tag and length */
			if (sz > budget - used) {
				/* The page ends here: the client asks for
				 * the next one from the last id it got. */
				tasktab_info_free(infos[n]);
				*more = true;
				break;
			}
			used += sz;
			n++;
			after = r->id;
			r = uid == 0 ? r->next : r->uanext;
		} else {
			infos[n]->id = jids[j];
			from_journal[n++] = true;
			after = jids[j++];
		}
	}
	pthread_mutex_unlock(&tab.lock);
	if (nj == (int)(limit + 1) && j == (size_t)nj)
		*more = true;   /* the journal may hold more beyond its page */
	/* The rows from the journal are read now, outside the lock, and
	 * the page cut where it passes the budget. */
	used = 0;
	for (size_t i = 0; i < n; i++) {
		if (from_journal[i]) {
			uint64_t id = infos[i]->id;
			int code = journal_read_info(id, uid, infos[i]);
			if (code != 0)   /* pruned meanwhile */
				tasktab_set_error(infos[i], id, code);
		}
		size_t sz = rok__v1__task_info__get_packed_size(infos[i]) + 6;
		if (sz > budget - used) {
			for (size_t k = i; k < n; k++)
				tasktab_info_free(infos[k]);
			n = i;
			*more = true;
			break;
		}
		used += sz;
	}
	free(jids);
	free(from_journal);
	return n;
}

int tasktab_dep_visible(uint64_t id, uid_t uid)
{
	struct rtask *r;

	pthread_mutex_lock(&tab.lock);
	int code = tasktab_visible(id, uid, &r);
	bool absent = code == ROK__V1__ERROR_CODE__NOT_FOUND &&
	              id < tab.next_id && tasktab_find(id) == NULL;
	pthread_mutex_unlock(&tab.lock);
	/* Evicted from memory: a point read by primary key.  On the reactor
	 * thread at spawn; only for dependencies that finished long ago. */
	if (absent)
		code = journal_read_info(id, uid, NULL);
	return code;
}

int tasktab_dep_state(uint64_t id)
{
	pthread_mutex_lock(&tab.lock);
	struct rtask *r = tasktab_find(id);
	int st = r == NULL ? -1 : r->gone ? 0 : r->state;
	pthread_mutex_unlock(&tab.lock);
	return st;
}

bool tasktab_cancel_seen(struct rtask *r)
{
	pthread_mutex_lock(&tab.lock);
	bool seen = r->cancel_requested;
	pthread_mutex_unlock(&tab.lock);
	return seen;
}

void tasktab_set_life(struct rtask *r, rok_task *life)
{
	struct events_ev qev;

	pthread_mutex_lock(&tab.lock);
	/* Published after unlocking: nothing else happens to r before
	 * gate_submit, on this thread, has entered it in the gate. */
	bool announced = tasktab_announce(r, &qev);
	r->gated = true;
	rok_task_unref(r->life);
	r->life = life;
	pthread_mutex_unlock(&tab.lock);
	if (announced)
		events_publish(&qev);
}

void tasktab_set_wait(struct rtask *r, uint64_t dep, uint64_t not_before_us)
{
	pthread_mutex_lock(&tab.lock);
	r->wait_dep = dep;
	r->not_before_us = not_before_us;
	pthread_mutex_unlock(&tab.lock);
}

/* Lock held: when r entered its present state. */
static uint64_t tasktab_state_us(const struct rtask *r)
{
	return r->state == RT_QUEUED ? r->spawned_us
	       : r->state == RT_RUNNING ? r->started_us : r->finished_us;
}

bool tasktab_in_group(const char *task_group, const char *group)
{
	if (task_group == NULL || task_group[0] == '\0')
		task_group = "default";
	return strcmp(task_group, group) == 0;
}

uint64_t tasktab_group_unfinished(const char *group)
{
	uint64_t n = 0;

	pthread_mutex_lock(&tab.lock);
	for (struct rtask *r = tab.head; r != NULL; r = r->next)
		if ((r->state == RT_QUEUED || r->state == RT_RUNNING) &&
		    tasktab_in_group(r->group, group))
			n++;
	pthread_mutex_unlock(&tab.lock);
	return n;
}

ssize_t tasktab_snapshot(const uint64_t *ids, size_t n,
                         struct tasktab_snap **out, uint64_t *seq)
{
	struct tasktab_snap *s = n > 0 ? malloc(n * sizeof(*s)) : NULL;

	*out = s;
	if (n > 0 && s == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&tab.lock);
	for (size_t i = 0; i < n; i++) {
		struct rtask *r = tasktab_find(ids[i]);
		s[i].id = ids[i];
		s[i].state = r != NULL && !r->gone ? r->state : 0;
		s[i].time_us = s[i].state != 0 ? tasktab_state_us(r) : 0;
	}
	*seq = tab.seq;
	pthread_mutex_unlock(&tab.lock);
	return (ssize_t)n;
}

/*
 * Watch cursors.  A cursor is a pair of links with no record in a uid's
 * list of unfinished records: `mark`, which each step moves past at most
 * TASKTAB_CURSOR_STEP links, and `end`, put at the list's tail when the
 * cursor enters it, where the walk of that list stops (what is appended
 * behind it came later: a new spawn, or a record that changed).  So a
 * watch of a uid with a million tasks holds the lock (and the reactor)
 * for a bounded time per step and ends however fast the uid spawns, and
 * one of a uid with few tasks never walks another's.  Root's cursor goes
 * through every uid's list in turn, in the hash's order; a user entry
 * made after the start may or may not be reached, and holds nothing to
 * report either way.  What a step reports is what has not changed since
 * the start (chg_seq <= seq): what did is told by its event, numbered
 * after the start.  A record moves to its list's end only with a change,
 * so an unchanged one is met exactly once.
 */
#define TASKTAB_CURSOR_STEP 256

struct tasktab_cursor {
	struct tasktab_link mark, end;
	struct tasktab_user *u;        /* whose list mark is in; NULL: none */
	uint64_t seq;                  /* tab.seq at the start */
	uid_t uid;
};

/* Lock held.  Puts c's mark at the head of u's list, its end at the
 * tail. */
static void tasktab_cursor_enter(struct tasktab_cursor *c,
                                 struct tasktab_user *u)
{
	tasktab_ulist_insert(u, u->utail, &c->end);
	tasktab_ulist_insert(u, NULL, &c->mark);
	u->ncursors++;
	c->u = u;
}

/* Lock held.  Takes c out of its list; its uid's entry may go. */
static void tasktab_cursor_leave(struct tasktab_cursor *c)
{
	struct tasktab_user *u = c->u;

	if (u == NULL)
		return;
	tasktab_ulist_remove(u, &c->mark);
	tasktab_ulist_remove(u, &c->end);
	u->ncursors--;
	c->u = NULL;
	tasktab_user_put(u);
}

/* Lock held.  Root's cursor: into the first list of a user after u (NULL:
 * the first user of all) in the hash, or nowhere when none is left. */
static void tasktab_cursor_next_user(struct tasktab_cursor *c)
{
	struct tasktab_user *u = c->u, *next = u != NULL ? u->next : NULL;
	size_t b = u != NULL ? tasktab_user_bucket(u->uid) : 0;

	if (u == NULL && tab.users[0] != NULL)
		next = tab.users[0];
	while (next == NULL && ++b < TASKTAB_USER_BUCKETS)
		next = tab.users[b];
	tasktab_cursor_leave(c);   /* after next was read: u may go */
	if (next != NULL)
		tasktab_cursor_enter(c, next);
}

struct tasktab_cursor *tasktab_cursor_new(uid_t uid)
{
	struct tasktab_cursor *c = calloc(1, sizeof(*c));

	if (c != NULL)
		c->uid = uid;
	return c;
}

int tasktab_cursor_start(struct tasktab_cursor *c, uint64_t *seq)
{
	int err = 0;

	pthread_mutex_lock(&tab.lock);
	tasktab_cursor_leave(c);
	if (c->uid == 0) {
		tasktab_cursor_next_user(c);
	} else {
		struct tasktab_user *u = tasktab_user_get(c->uid);
		if (u != NULL)
			tasktab_cursor_enter(c, u);
		else
			err = -ENOMEM;
	}
	c->seq = *seq = tab.seq;
	pthread_mutex_unlock(&tab.lock);
	return err;
}

size_t tasktab_cursor_step(struct tasktab_cursor *c, const char *group,
                           struct tasktab_snap *out, size_t max, bool *done)
{
	size_t n = 0;

	pthread_mutex_lock(&tab.lock);
	for (unsigned left = TASKTAB_CURSOR_STEP; left > 0 && n < max;) {
		if (c->u == NULL)
			break;
		struct tasktab_link *l = c->mark.next;
		if (l == &c->end) {
			if (c->uid != 0) {
				tasktab_cursor_leave(c);
				break;
			}
			tasktab_cursor_next_user(c);
			left--;
			continue;
		}
		/* Past l. */
		tasktab_ulist_remove(c->u, &c->mark);
		tasktab_ulist_insert(c->u, l, &c->mark);
		left--;
		struct rtask *r = l->r;
		if (r == NULL || r->pending || r->chg_seq > c->seq ||
		    (group != NULL && !tasktab_in_group(r->group, group)))
			continue;
		out[n].id = r->id;
		out[n].state = r->state;
		out[n].time_us = tasktab_state_us(r);
		n++;
	}
	*done = c->u == NULL;
	pthread_mutex_unlock(&tab.lock);
	return n;
}

void tasktab_cursor_free(struct tasktab_cursor *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&tab.lock);
	tasktab_cursor_leave(c);
	pthread_mutex_unlock(&tab.lock);
	free(c);
}

void tasktab_counts(uint64_t counts[RT_NSTATES])
{
	pthread_mutex_lock(&tab.lock);
	memcpy(counts, tab.counts, sizeof(tab.counts));
	pthread_mutex_unlock(&tab.lock);
}

void tasktab_cancel_all(void)
{
	pthread_mutex_lock(&tab.lock);
	tab.stopping = true;
	for (struct rtask *r = tab.head; r != NULL; r = r->next) {
		if (r->state == RT_QUEUED || r->state == RT_RUNNING)
			tasktab_cancel_one(r);
		/* Waits on a task held by the gate end now (it stays queued
		 * in the journal), not at the runtime's stop; and the handle
		 * goes before the runtime's memory does. */
		if (r->life != NULL) {
			rok_task_cancel(r->life);
			rok_task_unref(r->life);
			r->life = NULL;
		}
	}
	pthread_mutex_unlock(&tab.lock);
}
