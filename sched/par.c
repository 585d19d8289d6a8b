/*
 * par.c — rok_par_for_each and rok_par_scope: blocking fork-join on the
 * executor's workers (rok/par.h).
 *
 * Both work the same way.  The shared state (a loop's index counter, a
 * scope's job queue) lives in one heap object.  The caller spawns a few
 * helper tasks that take work from it until none is left, and takes work
 * from it itself; when none is left it waits for the items others took
 * (they are running, on other threads, so they finish without this one).
 * Because the caller never waits for an item nobody has started, a helper
 * task that cannot run — queued behind the caller on the only worker, or
 * sitting in the caller worker's LIFO slot — costs parallelism, never
 * progress.  Such a helper runs later, finds nothing to do and ends; the
 * shared object is reference counted (caller + each helper) so it outlives
 * the call for it.
 *
 * How many helpers: one per pool worker, at most one per batch beyond the
 * caller's first.  A helper spawned from a worker goes to that worker's
 * LIFO slot, where nobody can steal it, until the next spawn pushes it to
 * the deque; spawning as many helpers as workers (not workers - 1) leaves
 * enough stealable ones.  In thread-per-core mode tasks do not move, so the
 * helpers are pinned round robin starting after the caller's worker.
 *
 * A loop hands out indices in batches (grain) with a CAS on `next`; `left`
 * counts indices not yet finished and the thread that takes it to zero
 * wakes the caller.  A scope's queue, counters and the caller's sleep are
 * under one pthread mutex: jobs are coarse, and the caller must wake both
 * when a job is queued (to help) and when the last one finishes.
 *
 * Memory: every item's writes happen before the caller returns: for a
 * loop through the acq_rel RMWs on `left` (a release sequence ending at the
 * last finisher) and the mutex it signals under; for a scope through the
 * mutex.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "executor.h"
#include "rok/par.h"
#include "task.h"
#include "worker.h"

/* Batches per participating thread: enough to even out uneven items. */
#define PAR_BATCHES_PER_THREAD 4

/* ---- helpers' spawning ------------------------------------------------ */

/* Pool workers that may help: 0 when the executor is stopping or cannot
 * start (then the caller does everything). */
static unsigned par_workers(void)
{
	return executor_ensure() == 0 ? executor.nworkers : 0;
}

/* Spawns helper number `k` (detached).  0 or -errno; -EAGAIN in
 * thread-per-core mode when helper k would be pinned to the caller's own
 * worker, where it could only run after the call (or, as the caller
 * blocks, on a monitor's helper standing in for the worker). */
static int par_spawn(rok_poll_fn poll, const void *frame, size_t size,
                     unsigned k)
{
	if (!executor.thread_per_core)
		return rok_spawn(NULL, poll, frame, size);
	struct worker *me = executor_tls.worker;
	bool pool = me != NULL && !me->guest;
	unsigned home = ((pool ? me->home + 1u : 0) + k) % executor.nworkers;
	if (pool && home == me->home)
		return -EAGAIN;
	return task_spawn(NULL, poll, frame, size, (uint16_t)home, false,
	                  false);
}

/* ---- for_each --------------------------------------------------------- */

struct par_loop {
	_Atomic size_t next;        /* first index not handed out */
	_Atomic size_t left;        /* indices not finished */
	_Atomic unsigned refs;      /* the caller + each helper task */
	size_t n, grain;
	void (*fn)(size_t i, void *arg);
	void *arg;
	pthread_mutex_t lock;       /* with cond and done: the caller's sleep */
	pthread_cond_t cond;
	bool done;
};

struct par_loop_helper {
	struct par_loop *loop;
};

static void par_loop_unref(struct par_loop *l)
{
	/* acq_rel: the last owner sees every other owner's use before it
	 * frees. */
	if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

/* Claims the next batch: true with [*start, *end) to run. */
static bool par_loop_claim(struct par_loop *l, size_t *start, size_t *end)
{
	size_t s = atomic_load_explicit(&l->next, memory_order_relaxed);
	size_t e;

	do {
		if (s >= l->n)
			return false;
		e = l->n - s > l->grain ? s + l->grain : l->n;
		/* Relaxed: the counter only divides the work; results are
		 * published through `left`. */
	} while (!atomic_compare_exchange_weak_explicit(
		&l->next, &s, e, memory_order_relaxed, memory_order_relaxed));
	*start = s;
	*end = e;
	return true;
}

static void par_loop_run(struct par_loop *l, size_t start, size_t end)
{
	for (size_t i = start; i < end; i++)
		l->fn(i, l->arg);
	/* acq_rel: releases this batch's writes; the RMW chain carries every
	 * earlier batch's to the thread that reaches zero. */
	if (atomic_fetch_sub_explicit(&l->left, end - start,
	                              memory_order_acq_rel) != end - start)
		return;
	pthread_mutex_lock(&l->lock);
	l->done = true;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->lock);
}

static void par_loop_work(struct par_loop *l)
{
	size_t start, end;

	while (par_loop_claim(l, &start, &end))
		par_loop_run(l, start, end);
}

static rok_poll par_loop_poll(rok_cx *cx, void *frame)
{
	struct par_loop_helper *f = frame;

	ROK_BEGIN(cx);
	par_loop_work(f->loop);
	ROK_CLEANUP(cx);
	par_loop_unref(f->loop);
	ROK_END(cx);
}

int rok_par_for_each(size_t n, void (*fn)(size_t i, void *arg), void *arg)
{
	if (fn == NULL)
		return -EINVAL;
	if (n == 0)
		return 0;
	struct par_loop *l = calloc(1, sizeof(*l));
	if (l == NULL)
		return -ENOMEM;
	if (pthread_mutex_init(&l->lock, NULL) != 0) {
		free(l);
		return -ENOMEM;
	}
	if (pthread_cond_init(&l->cond, NULL) != 0) {
		pthread_mutex_destroy(&l->lock);
		free(l);
		return -ENOMEM;
	}
	l->n = n;
	l->fn = fn;
	l->arg = arg;
	atomic_init(&l->left, n);
	atomic_init(&l->refs, 1);

	/* The caller takes the first batch before any helper exists, so it
	 * always does its share. */
	unsigned workers = par_workers();
	l->grain = n / (((size_t)workers + 1) * PAR_BATCHES_PER_THREAD);
	if (l->grain == 0)
		l->grain = 1;
	size_t start = 0, end = 0;
	(void)par_loop_claim(l, &start, &end);   /* n > 0: always a batch */
	size_t batches = (n - end + l->grain - 1) / l->grain;
	unsigned helpers = batches < workers ? (unsigned)batches : workers;
	struct par_loop_helper h = { .loop = l };
	for (unsigned k = 0; k < helpers; k++) {
		atomic_fetch_add_explicit(&l->refs, 1, memory_order_relaxed);
		if (par_spawn(par_loop_poll, &h, sizeof(h), k) < 0) {
			atomic_fetch_sub_explicit(&l->refs, 1,
			                          memory_order_relaxed);
			break;   /* fewer helpers: the caller does the rest */
		}
	}
	par_loop_run(l, start, end);
	par_loop_work(l);

	pthread_mutex_lock(&l->lock);
	while (!l->done)
		pthread_cond_wait(&l->cond, &l->lock);
	pthread_mutex_unlock(&l->lock);
	par_loop_unref(l);
	return 0;
}

/* ---- scope ------------------------------------------------------------ */

struct par_job {
	struct par_job *next;
	void (*fn)(rok_scope *s, void *arg);
	void *arg;
};

struct rok_scope {
	pthread_mutex_t lock;       /* everything below but refs */
	pthread_cond_t cond;        /* the caller: a job queued, or none left */
	struct par_job *head, **tail;
	size_t pending;             /* jobs queued or running */
	unsigned helpers;           /* helper tasks spawned and not ended */
	unsigned helpers_max;
	bool waiting;               /* the caller sleeps on cond */
	_Atomic unsigned refs;      /* the caller + each helper task */
};

struct par_scope_helper {
	rok_scope *scope;
};

static void par_scope_unref(rok_scope *s)
{
	/* acq_rel: as for par_loop_unref. */
	if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
		return;
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Lock held.  Takes the oldest queued job, or NULL. */
static struct par_job *par_scope_pop(rok_scope *s)
{
	struct par_job *j = s->head;

	if (j != NULL) {
		s->head = j->next;
		if (s->head == NULL)
			s->tail = &s->head;
	}
	return j;
}

/* Lock held on entry and on return.  Runs `j` without the lock. */
static void par_scope_run(rok_scope *s, struct par_job *j)
{
	pthread_mutex_unlock(&s->lock);
	j->fn(s, j->arg);
	free(j);
	pthread_mutex_lock(&s->lock);
	if (--s->pending == 0 && s->waiting)
		pthread_cond_signal(&s->cond);
}

static rok_poll par_scope_poll(rok_cx *cx, void *frame)
{
	struct par_scope_helper *f = frame;
	rok_scope *s = f->scope;
	struct par_job *j;

	ROK_BEGIN(cx);
	pthread_mutex_lock(&s->lock);
	while ((j = par_scope_pop(s)) != NULL)
		par_scope_run(s, j);
	pthread_mutex_unlock(&s->lock);
	ROK_CLEANUP(cx);
	pthread_mutex_lock(&s->lock);
	s->helpers--;   /* from here on a new job spawns a new helper */
	pthread_mutex_unlock(&s->lock);
	par_scope_unref(s);
	ROK_END(cx);
}

void rok_scope_spawn(rok_scope *s, void (*fn)(rok_scope *s, void *arg),
                     void *arg)
{
	struct par_job *j = malloc(sizeof(*j));

	if (j == NULL) {
		fn(s, arg);   /* still done before the scope ends */
		return;
	}
	j->next = NULL;
	j->fn = fn;
	j->arg = arg;
	pthread_mutex_lock(&s->lock);
	*s->tail = j;
	s->tail = &j->next;
	s->pending++;
	unsigned k = s->helpers;
	bool spawn = k < s->helpers_max;
	if (spawn) {
		s->helpers++;
		atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
	}
	if (s->waiting)
		pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (!spawn)
		return;
	struct par_scope_helper h = { .scope = s };
	if (par_spawn(par_scope_poll, &h, sizeof(h), k) < 0) {
		pthread_mutex_lock(&s->lock);
		s->helpers--;
		pthread_mutex_unlock(&s->lock);
		par_scope_unref(s);
	}
}

int rok_par_scope(void (*body)(rok_scope *s, void *arg), void *arg)
{
	if (body == NULL)
		return -EINVAL;
	rok_scope *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	if (pthread_mutex_init(&s->lock, NULL) != 0) {
		free(s);
		return -ENOMEM;
	}
	if (pthread_cond_init(&s->cond, NULL) != 0) {
		pthread_mutex_destroy(&s->lock);
		free(s);
		return -ENOMEM;
	}
	s->tail = &s->head;
	s->helpers_max = par_workers();
	atomic_init(&s->refs, 1);

	body(s, arg);

	/* Help until nothing is queued, then wait for the jobs in flight;
	 * they may queue more, which wakes us to help again. */
	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct par_job *j = par_scope_pop(s);
		if (j != NULL) {
			par_scope_run(s, j);
			continue;
		}
		if (s->pending == 0)
			break;
		s->waiting = true;
		pthread_cond_wait(&s->cond, &s->lock);
		s->waiting = false;
	}
	pthread_mutex_unlock(&s->lock);
	par_scope_unref(s);
	return 0;
}
