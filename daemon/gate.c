/*
 * gate.c — what a task waits for before it may start: its dependencies
 * (TaskSpec.after, after_any), its start time (not_before_us) and, between
 * the runs of a task with retry_failed, its backoff.
 *
 * A committed spawn whose spec asks for none of these is started at once,
 * as before (cmd-spawn.c, cmd-select.c call tasktab_start directly: the hot
 * path costs nothing more).  One that does is handed to gate_submit, which
 * keeps an entry for it until its final outcome and starts it, when its
 * time comes, through gate_start: the ONE place where a task leaves the
 * gate (a group queue, if there is one, comes after it).  The one
 * exception is the recovery's: a run that had left the gate before the
 * restart (its queue entry is in the journal) is registered as started
 * (gate_submit_started) and started by the recovery itself, in its place
 * in its queue, not released again.
 *
 * Entries are in a hash by id.  Each dependency not ended yet is a node
 * linked into a second hash, by the dependency's id: when a task ends
 * (gate_ended, from tasktab_finish) the nodes of its id are unlinked and
 * their entries counted down; an entry whose dependencies have all ended,
 * or one of whose `after` dependencies ended otherwise than succeeded,
 * goes onto the ready list.  The ready list is drained outside the lock,
 * by whichever thread finds it non-empty and nobody draining it: a task
 * cancelled because its dependency failed ends (tasktab_finish), which
 * calls gate_ended again, which only appends to the list the outer drain
 * is walking — a chain of any length is cancelled in a loop, never by
 * recursion.
 *
 * Cycles are impossible: a dependency must exist when the spawn is
 * checked (cmd_create_task), so it has a smaller id than its dependent.
 * A dependency no longer in memory has finished: its outcome is read from
 * the journal by primary key (at the spawn's check and its commit, on the
 * reactor thread: a point read, and only for dependencies that finished
 * long ago).  Repeats of an id in a list are dropped first (gate_deps),
 * and a request names at most max_ids dependencies in all (a select's
 * specs together), so a request costs at most 2 x max_ids reads.  One
 * pruned from the journal entirely is unknown: refused at spawn
 * (INVALID_ARGUMENT); pruned between the check and the commit, or
 * before a restart, it counts as failed (after) or ended (after_any).
 * A task interrupted by rokd's stop is no failure: nothing is resolved
 * once gate_stop ran, and the next start decides (retried, or
 * interrupted, which its dependents then see).
 *
 * Start times, the spec's and a retry's backoff alike, wait in a binary
 * min-heap by wall-clock time.  One runtime task, the timer, sleeps until
 * the earliest: a new, earlier deadline cancels it and spawns another, so
 * thousands of delayed tasks cost an entry each and one timer, never a
 * thread or a timer per task.  A waiting task also has a `life` task
 * (tasktab.c returns it to joins and waits instead of a runner, which it
 * does not have yet): a parked runtime task of 64 bytes that ends when the
 * task reaches its final outcome, so that join, race and spawn --wait wait
 * for that, across every retry.
 *
 * Lock order: gate.lock, then the task table's lock (gate_submit reads a
 * dependency's state, and sets what `waiting` shows, under gate.lock).
 * Nothing is started, finished or spawned while gate.lock is held, except
 * the timer task (rok_spawn only queues it).
 *
 * Any thread: gate_submit on the reactor thread (commit of a spawn) or the
 * main thread (recovery); gate_ended, gate_retry from workers; the timer on
 * a worker.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "journal.h"
#include "rokd.h"

struct gate_entry;

/* One dependency not ended yet, in the hash by the dependency's id. */
struct gate_dep {
	uint64_t dep;
	struct gate_entry *e;
	bool all_ok;                   /* `after` (else `after_any`) */
	bool linked;
	struct gate_dep *prev, *next;  /* bucket chain */
};

struct gate_entry {
	uint64_t id;
	struct rtask *rec;             /* unfinished while the entry lives */
	uint8_t *spec;                 /* packed, for every run */
	size_t spec_len;
	uint64_t not_before_us;        /* wall clock; 0: none */
	uint64_t failed_dep;           /* an `after` dependency that failed */
	bool dep_unknown;              /* ... and it was not found */
	bool cancel;                   /* a client cancelled it while it waited */
	bool on_ready;
	bool started;                  /* handed to gate_start, this run */
	bool done;                     /* final outcome: free when popped */
	size_t pending;                /* dependencies not ended yet */
	size_t heap_at;                /* index in the heap, or SIZE_MAX */
	struct gate_entry *hnext;      /* hash by id */
	struct gate_entry *rnext;      /* ready list */
	size_t ndeps;
	struct gate_dep deps[];
};

#define GATE_BUCKETS 4096

static struct {
	pthread_mutex_t lock;
	struct gate_entry *byid[GATE_BUCKETS];
	struct gate_dep *bydep[GATE_BUCKETS];
	struct gate_entry *rhead, *rtail;
	bool draining;
	bool stopping;
	struct gate_entry **heap;
	size_t nheap, heapcap;
	rok_task *timer;
	uint64_t timer_us;             /* the deadline it sleeps to */
	uint64_t timer_gen;
	/*
	 * Dependency nodes linked: tasks end without taking gate.lock when it
	 * is 0.  Incremented under gate.lock before a dependency's state is
	 * read under the task table's lock; a task's end is set under that
	 * lock before gate_ended loads this.  So if the registration read the
	 * dependency unfinished, the table's mutex orders the increment
	 * before the load, which sees it: relaxed suffices.
	 */
	_Atomic uint64_t nlinked;
} gate = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t gate_now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

static size_t gate_bucket(uint64_t id)
{
	return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 40) &
	       (GATE_BUCKETS - 1);
}

bool gate_needed(const TaskSpec *spec)
{
	return spec->n_after > 0 || spec->n_after_any > 0 ||
	       spec->not_before_us != 0 || spec->retry_failed > 0;
}

/*
 * The spec's dependencies with each id once per list (an id may be in
 * both: `after` and `after_any` mean different things), `after` first:
 * each costs a node and perhaps a journal read, and one id named 10,000
 * times must cost one.  *out (owned by the caller, NULL when there are
 * none) and *nafter, the count from `after`; the total, or -1 without
 * memory.
 */
static ssize_t gate_deps(const TaskSpec *spec, uint64_t **out, size_t *nafter)
{
	size_t n = spec->n_after + spec->n_after_any;

	*out = NULL;
	*nafter = 0;
	if (n == 0)
		return 0;
	uint64_t *ids = malloc(n * sizeof(*ids));
	if (ids == NULL)
		return -1;
	ssize_t a = idlist_dedup(spec->after, spec->n_after, ids, NULL);
	ssize_t b = a < 0 ? -1 : idlist_dedup(spec->after_any, spec->n_after_any,
	                                      ids + a, NULL);
	if (b < 0) {
		free(ids);
		return -1;
	}
	*out = ids;
	*nafter = (size_t)a;
	return a + b;
}

int gate_check(const TaskSpec *spec, uid_t uid, char *err, size_t len)
{
	uint64_t now = gate_now_us();
	uint64_t *deps;
	size_t nafter;

	if (spec->n_after + spec->n_after_any > config.max_ids) {
		snprintf(err, len, "too many dependencies (%zu; the limit is "
		         "max_ids = %u)", spec->n_after + spec->n_after_any,
		         config.max_ids);
		return -1;
	}
	if (spec->not_before_us > now &&
	    spec->not_before_us - now > DURATION_MAX_MS * 1000) {
		snprintf(err, len, "not_before_us is more than %s ahead",
		         DURATION_MAX_TEXT);
		return -1;
	}
	if (spec->retry_failed > GATE_RETRY_MAX) {
		snprintf(err, len, "retry_failed %u is more than %u",
		         spec->retry_failed, GATE_RETRY_MAX);
		return -1;
	}
	if (duration_check_ms(spec->backoff_ms, "backoff_ms", err, len) < 0)
		return -1;
	ssize_t ndeps = gate_deps(spec, &deps, &nafter);
	if (ndeps < 0) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < (size_t)ndeps; i++) {
		int code = tasktab_dep_visible(deps[i], uid);
		if (code != 0) {
			snprintf(err, len, "dependency %llu: %s",
			         (unsigned long long)deps[i],
			         code == ROK__V1__ERROR_CODE__PERMISSION_DENIED
			         ? "task belongs to another user"
			         : "no such task");
			free(deps);
			return -1;
		}
	}
	free(deps);
	return 0;
}

/* ---- the heap of start times (lock held) ------------------------------- */

static void gate_heap_swap(size_t a, size_t b)
{
	struct gate_entry *t = gate.heap[a];

	gate.heap[a] = gate.heap[b];
	gate.heap[b] = t;
	gate.heap[a]->heap_at = a;
	gate.heap[b]->heap_at = b;
}

static void gate_heap_up(size_t i)
{
	while (i > 0 && gate.heap[(i - 1) / 2]->not_before_us >
	                gate.heap[i]->not_before_us) {
		gate_heap_swap(i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void gate_heap_down(size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		if (l < gate.nheap && gate.heap[l]->not_before_us <
		                      gate.heap[m]->not_before_us)
			m = l;
		if (l + 1 < gate.nheap && gate.heap[l + 1]->not_before_us <
		                          gate.heap[m]->not_before_us)
			m = l + 1;
		if (m == i)
			return;
		gate_heap_swap(i, m);
		i = m;
	}
}

/* false: out of memory. */
static bool gate_heap_push(struct gate_entry *e)
{
	if (gate.nheap == gate.heapcap) {
		size_t cap = gate.heapcap > 0 ? 2 * gate.heapcap : 64;
		struct gate_entry **h = realloc(gate.heap, cap * sizeof(*h));
		if (h == NULL)
			return false;
		gate.heap = h;
		gate.heapcap = cap;
	}
	e->heap_at = gate.nheap;
	gate.heap[gate.nheap++] = e;
	gate_heap_up(e->heap_at);
	return true;
}

static void gate_heap_remove(struct gate_entry *e)
{
	size_t i = e->heap_at;

	if (i == SIZE_MAX)
		return;
	e->heap_at = SIZE_MAX;
	if (--gate.nheap == i)
		return;
	gate.heap[i] = gate.heap[gate.nheap];
	gate.heap[i]->heap_at = i;
	gate_heap_down(i);
	gate_heap_up(i);
}

/* ---- entries (lock held) ----------------------------------------------- */

static struct gate_entry *gate_find(uint64_t id)
{
	struct gate_entry *e = gate.byid[gate_bucket(id)];

	while (e != NULL && e->id != id)
		e = e->hnext;
	return e;
}

static void gate_ready(struct gate_entry *e)
{
	if (e->on_ready)
		return;
	gate_heap_remove(e);
	e->on_ready = true;
	e->rnext = NULL;
	if (gate.rtail != NULL)
		gate.rtail->rnext = e;
	else
		gate.rhead = e;
	gate.rtail = e;
}

static void gate_dep_unlink(struct gate_dep *d)
{
	if (!d->linked)
		return;
	if (d->prev != NULL)
		d->prev->next = d->next;
	else
		gate.bydep[gate_bucket(d->dep)] = d->next;
	if (d->next != NULL)
		d->next->prev = d->prev;
	d->linked = false;
	atomic_fetch_sub_explicit(&gate.nlinked, 1, memory_order_relaxed);
}

static void gate_dep_link(struct gate_dep *d)
{
	size_t b = gate_bucket(d->dep);

	d->prev = NULL;
	d->next = gate.bydep[b];
	if (d->next != NULL)
		d->next->prev = d;
	gate.bydep[b] = d;
	d->linked = true;
}

/* The dependency `waiting` names: the first not ended yet, or 0. */
static void gate_show_dep(struct gate_entry *e)
{
	uint64_t dep = 0;

	for (size_t i = 0; i < e->ndeps && dep == 0; i++)
		if (e->deps[i].linked)
			dep = e->deps[i].dep;
	tasktab_set_wait(e->rec, dep, e->not_before_us);
}

/* Takes e out of the id hash and the dependency hash; frees it unless the
 * ready list still holds it (then the drain frees it). */
static void gate_drop(struct gate_entry *e)
{
	struct gate_entry **p = &gate.byid[gate_bucket(e->id)];

	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	for (size_t i = 0; i < e->ndeps; i++)
		gate_dep_unlink(&e->deps[i]);
	gate_heap_remove(e);
	e->done = true;
	e->rec = NULL;
	if (!e->on_ready) {
		free(e->spec);
		free(e);
	}
}

/* ---- the timer ----------------------------------------------------------- */

struct gate_timer {
	rok_sleep_op sleep;
	int64_t deadline;              /* rok_now() time */
	uint64_t gen;
};

static void gate_drain(void);
static void gate_timer_fire(uint64_t gen);

static rok_poll gate_timer_poll(rok_cx *cx, void *frame)
{
	struct gate_timer *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_sleep_until(cx, &f->sleep, f->deadline));
	ROK_CLEANUP(cx);
	if (!ROK_LEFT_BY_CANCEL(cx))
		gate_timer_fire(f->gen);
	ROK_END(cx);
}

/* Lock held.  Makes the timer sleep until the heap's earliest time, if it
 * does not already sleep until then or earlier. */
static void gate_arm(void)
{
	if (gate.nheap == 0 || gate.stopping)
		return;
	uint64_t at = gate.heap[0]->not_before_us;
	if (gate.timer != NULL && gate.timer_us <= at)
		return;
	if (gate.timer != NULL) {
		rok_task_cancel(gate.timer);
		rok_task_unref(gate.timer);
		gate.timer = NULL;
	}
	uint64_t now = gate_now_us();
	/* at is at most DURATION_MAX_MS ahead (checked, or a capped
	 * backoff): the product fits. */
	int64_t ns = at > now ? (int64_t)(at - now) * 1000 : 0;
	struct gate_timer f = {
		.deadline = rok_deadline(ns), .gen = ++gate.timer_gen,
	};
	int err = rok_spawn(&gate.timer, gate_timer_poll, &f, sizeof(f));
	if (err < 0) {
		gate.timer = NULL;
		if (err != -ESHUTDOWN)
			log_errno(err, "gate: cannot arm the timer of delayed "
			          "tasks; they start at the next arming");
		return;
	}
	gate.timer_us = at;
}

static void gate_timer_fire(uint64_t gen)
{
	uint64_t now = gate_now_us();

	pthread_mutex_lock(&gate.lock);
	if (gen == gate.timer_gen && gate.timer != NULL) {
		rok_task_unref(gate.timer);
		gate.timer = NULL;
	}
	while (gate.nheap > 0 && gate.heap[0]->not_before_us <= now)
		gate_ready(gate.heap[0]);
	gate_arm();   /* the next, or again if the wall clock went back */
	pthread_mutex_unlock(&gate.lock);
	gate_drain();
}

/* ---- leaving the gate ---------------------------------------------------- */

/*
 * THE start: every task that waited in the gate leaves it here, once its
 * dependencies succeeded (or ended, after_any) and its time came.  Its
 * runner starts at once; one of an exec task waits there for a slot of
 * its group (kind_spawn, queue.c).
 */
static void gate_start(struct rtask *r, const uint8_t *spec, size_t len)
{
	(void)tasktab_start_packed(r, spec, len, NULL);
}

/* Ends r as cancelled, for `why`; its dependents hear of it (gate_ended
 * only appends them to the ready list). */
static void gate_cancel_task(struct rtask *r, const char *why)
{
	struct rt_outcome o = { .state = RT_CANCELLED };

	snprintf(o.reason, sizeof(o.reason), "%s", why);
	tasktab_finish(r, &o);   /* r may go from here on; publishes the end */
}

/* Acts on the ready entries, unless another thread is at it (then that
 * thread will see what this one appended). */
static void gate_drain(void)
{
	pthread_mutex_lock(&gate.lock);
	if (gate.draining) {
		pthread_mutex_unlock(&gate.lock);
		return;
	}
	gate.draining = true;
	for (;;) {
		struct gate_entry *e = gate.rhead;
		if (e == NULL)
			break;
		gate.rhead = e->rnext;
		if (gate.rhead == NULL)
			gate.rtail = NULL;
		e->on_ready = false;
		if (e->done) {
			free(e->spec);
			free(e);
			continue;
		}
		if (gate.stopping)
			continue;   /* stays queued in the journal */
		struct rtask *r = e->rec;
		char why[160] = "";
		if (e->cancel)
			snprintf(why, sizeof(why), "cancelled while it waited "
			         "to start");
		else if (e->failed_dep != 0)
			snprintf(why, sizeof(why), "dependency %llu %s",
			         (unsigned long long)e->failed_dep,
			         e->dep_unknown ? "is unknown (pruned from the "
			         "journal)" : "failed");
		else if (e->pending > 0)
			continue;   /* a cancel raced with it: still waiting */
		else if (e->not_before_us > gate_now_us()) {
			gate_show_dep(e);
			if (!gate_heap_push(e)) {
				snprintf(why, sizeof(why), "could not wait for "
				         "its start time: out of memory");
			} else {
				gate_arm();
				continue;
			}
		}
		/* Leaves the lock with the record: it is unfinished, and
		 * only its end (gate_ended) drops the entry. */
		uint8_t *spec = e->spec;
		size_t len = e->spec_len;
		if (why[0] == '\0') {
			e->started = true;
			tasktab_set_wait(r, 0, 0);
		}
		pthread_mutex_unlock(&gate.lock);
		if (why[0] != '\0')
			gate_cancel_task(r, why);
		else
			gate_start(r, spec, len);
		pthread_mutex_lock(&gate.lock);
	}
	gate.draining = false;
	pthread_mutex_unlock(&gate.lock);
}

/* ---- the interface ------------------------------------------------------- */

size_t gate_cost(const TaskSpec *spec)
{
	/* Its dependencies once each at most (gate_deps drops repeats). */
	return sizeof(struct gate_entry) +
	       (spec->n_after + spec->n_after_any) * sizeof(struct gate_dep) +
	       rok__v1__task_spec__get_packed_size(spec);
}

static rok_poll gate_life_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	/* Parked: only its cancellation (the task's final outcome, or the
	 * runtime's stop) wakes it. */
	ROK_AWAIT(cx, ROK_PENDING);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Fails `r`, which the gate could not take in. */
static int gate_fail_oom(struct rtask *r)
{
	struct rt_outcome o = { .state = RT_FAILED };

	snprintf(o.reason, sizeof(o.reason), "could not start: out of memory");
	tasktab_finish(r, &o);
	return -ENOMEM;
}

/* An entry for `r` with room for ndeps dependencies and a copy of its
 * packed spec; NULL when out of memory. */
static struct gate_entry *gate_entry_new(struct rtask *r, size_t ndeps,
                                         const uint8_t *packed, size_t len)
{
	struct gate_entry *e = calloc(1, sizeof(*e) +
	                                 ndeps * sizeof(e->deps[0]));
	uint8_t *copy = malloc(len > 0 ? len : 1);

	if (e == NULL || copy == NULL) {
		free(e);
		free(copy);
		return NULL;
	}
	if (len > 0)
		memcpy(copy, packed, len);
	e->id = tasktab_id(r);
	e->rec = r;
	e->spec = copy;
	e->spec_len = len;
	e->heap_at = SIZE_MAX;
	e->ndeps = ndeps;
	return e;
}

/* Gives `r` the parked task its joins wait on, and marks it gated. */
static void gate_give_life(struct rtask *r, uint64_t id)
{
	rok_task *life;
	uint64_t unused = 0;
	int err = rok_spawn(&life, gate_life_poll, &unused, sizeof(unused));

	if (err < 0) {
		/* Joins of it then return before its final outcome. */
		log_errno(err, "task %llu: no handle to wait on",
		          (unsigned long long)id);
		life = NULL;
	}
	tasktab_set_life(r, life);
}

/* Files `e` by its id; gate lock held. */
static void gate_file(struct gate_entry *e)
{
	struct gate_entry **b = &gate.byid[gate_bucket(e->id)];

	e->hnext = *b;
	*b = e;
}

int gate_submit(struct rtask *r, const TaskSpec *spec, const uint8_t *packed,
                size_t len, uint64_t not_before_us)
{
	uint64_t *deps;
	size_t nafter;
	ssize_t nd = gate_deps(spec, &deps, &nafter);
	size_t ndeps = nd > 0 ? (size_t)nd : 0;
	struct gate_entry *e = nd < 0 ? NULL
	                              : gate_entry_new(r, ndeps, packed, len);

	if (e == NULL) {
		free(deps);
		return gate_fail_oom(r);
	}
	uint64_t id = e->id;
	e->not_before_us = spec->not_before_us > not_before_us
	                   ? spec->not_before_us : not_before_us;
	if (e->not_before_us != 0 && e->not_before_us > gate_now_us() &&
	    e->not_before_us - gate_now_us() > DURATION_MAX_MS * 1000)
		e->not_before_us = gate_now_us() + DURATION_MAX_MS * 1000;
	gate_give_life(r, id);

	/* The states of dependencies no longer in memory, from the journal,
	 * before the lock (they are finished: nothing to register). */
	int *jstate = ndeps > 0 ? calloc(ndeps, sizeof(*jstate)) : NULL;
	for (size_t i = 0; i < ndeps; i++) {
		struct gate_dep *d = &e->deps[i];
		d->e = e;
		d->all_ok = i < nafter;
		d->dep = deps[i];
		if (jstate != NULL && tasktab_dep_state(d->dep) < 0) {
			TaskInfo info;
			rok__v1__task_info__init(&info);
			jstate[i] = journal_read_info(d->dep, 0, &info) == 0
			            ? (int)info.state : 0;
			tasktab_info_free(&info);
		}
	}

	free(deps);

	pthread_mutex_lock(&gate.lock);
	gate_file(e);
	for (size_t i = 0; i < ndeps; i++) {
		struct gate_dep *d = &e->deps[i];
		atomic_fetch_add_explicit(&gate.nlinked, 1,
		                          memory_order_relaxed);
		int st = tasktab_dep_state(d->dep);
		if (st < 0)   /* not in memory: finished (or pruned: 0) */
			st = jstate != NULL ? jstate[i] : 0;
		if (st == RT_QUEUED || st == RT_RUNNING) {
			gate_dep_link(d);
			e->pending++;
			continue;
		}
		atomic_fetch_sub_explicit(&gate.nlinked, 1,
		                          memory_order_relaxed);
		if (d->all_ok && st != RT_SUCCEEDED && e->failed_dep == 0) {
			e->failed_dep = d->dep;
			e->dep_unknown = st == 0;
		}
	}
	free(jstate);
	/* A cancel that came before the entry could be found (before the
	 * record was marked gated, or before the link above) did not reach
	 * gate_cancel: it would wait out the delay or the dependencies.  One
	 * from now on finds the entry. */
	if (tasktab_cancel_seen(r))
		e->cancel = true;
	if (e->pending > 0 && e->failed_dep == 0 && !e->cancel)
		gate_show_dep(e);
	else
		gate_ready(e);
	pthread_mutex_unlock(&gate.lock);

	gate_drain();
	return 0;
}

int gate_submit_started(struct rtask *r, const uint8_t *packed, size_t len)
{
	struct gate_entry *e = gate_entry_new(r, 0, packed, len);

	if (e == NULL)
		return gate_fail_oom(r);
	/* Past its dependencies and start time: it left the gate before
	 * the restart.  Its run is the caller's to start. */
	e->started = true;
	gate_give_life(r, e->id);

	pthread_mutex_lock(&gate.lock);
	gate_file(e);
	/* Its start sees a cancel (tasktab_start); the mark makes a retry
	 * queued meanwhile end at once (see gate_cancel). */
	if (tasktab_cancel_seen(r))
		e->cancel = true;
	pthread_mutex_unlock(&gate.lock);
	return 0;
}

int gate_submit_packed(struct rtask *r, const uint8_t *packed, size_t len)
{
	TaskSpec *s = rok__v1__task_spec__unpack(NULL, len, packed);

	if (s == NULL)   /* tasktab_start_packed fails it the same way */
		return tasktab_start_packed(r, packed, len, NULL);
	int err = gate_submit(r, s, packed, len, 0);
	rok__v1__task_spec__free_unpacked(s, NULL);
	return err;
}

void gate_ended(uint64_t id, int state, bool gated)
{
	if (!gated && atomic_load_explicit(&gate.nlinked,
	                                   memory_order_relaxed) == 0)
		return;
	pthread_mutex_lock(&gate.lock);
	if (gated) {
		struct gate_entry *e = gate_find(id);
		if (e != NULL)
			gate_drop(e);
	}
	/* rokd stops: an interrupted task is no failure, its dependents stay
	 * queued in the journal for the next start. */
	if (gate.stopping) {
		pthread_mutex_unlock(&gate.lock);
		return;
	}
	struct gate_dep *d = gate.bydep[gate_bucket(id)];
	bool any = false;
	while (d != NULL) {
		struct gate_dep *next = d->next;
		if (d->dep == id) {
			struct gate_entry *e = d->e;
			gate_dep_unlink(d);
			e->pending--;
			if (d->all_ok && state != RT_SUCCEEDED &&
			    e->failed_dep == 0)
				e->failed_dep = id;
			if (e->pending == 0 || e->failed_dep != 0) {
				gate_ready(e);
				any = true;
			} else {
				gate_show_dep(e);
			}
		}
		d = next;
	}
	pthread_mutex_unlock(&gate.lock);
	if (any)
		gate_drain();
}

void gate_retry(uint64_t id, uint64_t not_before_us)
{
	pthread_mutex_lock(&gate.lock);
	struct gate_entry *e = gate_find(id);
	if (e != NULL) {
		e->not_before_us = not_before_us;
		e->started = false;
		gate_ready(e);
	}
	pthread_mutex_unlock(&gate.lock);
	gate_drain();
}

void gate_cancel(uint64_t id)
{
	pthread_mutex_lock(&gate.lock);
	struct gate_entry *e = gate_find(id);
	/*
	 * A started run is cancelled through its runner (tasktab_start sees
	 * cancel_requested).  The mark is kept all the same: a run that
	 * failed just before this cancel may have been queued again for its
	 * retry (tasktab_requeue) without reaching gate_retry yet, which
	 * would otherwise hold it in the gate for its whole backoff before
	 * the start cancels it.  With the mark, gate_retry's drain ends it
	 * at once.
	 */
	if (e != NULL) {
		e->cancel = true;
		if (!e->started)
			gate_ready(e);
	}
	pthread_mutex_unlock(&gate.lock);
	gate_drain();
}

void gate_stop(void)
{
	pthread_mutex_lock(&gate.lock);
	gate.stopping = true;
	if (gate.timer != NULL) {
		rok_task_cancel(gate.timer);
		rok_task_unref(gate.timer);
		gate.timer = NULL;
	}
	pthread_mutex_unlock(&gate.lock);
}

void gate_free(void)
{
	pthread_mutex_lock(&gate.lock);
	/* First the entries dropped already but still on the ready list (the
	 * others are in the id hash, freed next). */
	for (struct gate_entry *e = gate.rhead; e != NULL;) {
		struct gate_entry *next = e->rnext;
		if (e->done) {
			free(e->spec);
			free(e);
		}
		e = next;
	}
	gate.rhead = gate.rtail = NULL;
	for (size_t b = 0; b < GATE_BUCKETS; b++) {
		struct gate_entry *e = gate.byid[b];
		while (e != NULL) {
			struct gate_entry *next = e->hnext;
			free(e->spec);
			free(e);
			e = next;
		}
		gate.byid[b] = NULL;
		gate.bydep[b] = NULL;
	}
	free(gate.heap);
	gate.heap = NULL;
	gate.nheap = gate.heapcap = 0;
	atomic_store_explicit(&gate.nlinked, 0, memory_order_relaxed);
	pthread_mutex_unlock(&gate.lock);
}
