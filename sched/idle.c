/*
 * idle.c — parking bookkeeping, after Tokio's idle.rs.
 *
 * One word counts the unparked workers and, among them, those searching for
 * work (stealing).  A producer that queues work calls idle_notify: if some
 * worker is searching it will find the work, so nobody is woken; otherwise
 * one parked worker is woken and counted as searching straight away, so that
 * a burst of spawns wakes one worker, not all of them.  At most half the
 * workers search at once, which bounds the contention of thieves.
 *
 * The lost-wake-up argument: a producer publishes its task, issues a seq_cst
 * fence and reads the word.  A worker going to sleep decrements the word
 * (seq_cst) and, if it was the last searcher, issues a seq_cst fence and
 * looks at every queue again.  Either the producer's read sees the worker
 * still searching, and then the worker's second look sees the task (the two
 * fences are ordered), or the producer sees no searcher and wakes someone.
 *
 * The sleeper list is a stack under a mutex: only the slow paths take it.
 */
#include <errno.h>
#include <stdlib.h>

#include "idle.h"

#define IDLE_UNPARKED_ONE (1u << 16)
#define IDLE_SEARCHING_MASK (IDLE_UNPARKED_ONE - 1)

static unsigned idle_nsearching(uint32_t s) { return s & IDLE_SEARCHING_MASK; }
static unsigned idle_nunparked(uint32_t s) { return s >> 16; }

int idle_init(struct idle *d, unsigned nworkers)
{
	d->nworkers = nworkers;
	d->nsleepers = 0;
	d->sleepers = calloc(nworkers, sizeof(*d->sleepers));
	if (d->sleepers == NULL)
		return -ENOMEM;
	atomic_init(&d->state, nworkers * IDLE_UNPARKED_ONE);
	pthread_mutex_init(&d->lock, NULL);
	return 0;
}

void idle_done(struct idle *d)
{
	if (d->sleepers == NULL)
		return;
	free(d->sleepers);
	d->sleepers = NULL;
	pthread_mutex_destroy(&d->lock);
}

bool idle_begin_search(struct idle *d)
{
	uint32_t s = atomic_load_explicit(&d->state, memory_order_seq_cst);

	/* Counting is advisory: a stale read only lets one more or one fewer
	 * worker search, so this check and the increment need not be one
	 * atomic step. */
	if (2 * idle_nsearching(s) >= d->nworkers)
		return false;
	atomic_fetch_add_explicit(&d->state, 1, memory_order_seq_cst);
	return true;
}

bool idle_end_search(struct idle *d)
{
	uint32_t prev = atomic_fetch_sub_explicit(&d->state, 1,
	                                          memory_order_seq_cst);
	return idle_nsearching(prev) == 1;
}

static bool idle_should_wake(uint32_t s, unsigned nworkers)
{
	return idle_nsearching(s) == 0 && idle_nunparked(s) < nworkers;
}

int idle_notify(struct idle *d)
{
	/* Orders the caller's publication of work before the read below;
	 * pairs with the fence in the parking worker's second look. */
	atomic_thread_fence(memory_order_seq_cst);
	if (!idle_should_wake(atomic_load_explicit(&d->state,
	                                           memory_order_relaxed),
	                      d->nworkers))
		return -1;

	pthread_mutex_lock(&d->lock);
	int idx = -1;
	if (d->nsleepers > 0 &&
	    idle_should_wake(atomic_load_explicit(&d->state,
	                                          memory_order_seq_cst),
	                     d->nworkers)) {
		atomic_fetch_add_explicit(&d->state, IDLE_UNPARKED_ONE + 1,
		                          memory_order_seq_cst);
		idx = (int)d->sleepers[--d->nsleepers];
	}
	pthread_mutex_unlock(&d->lock);
	return idx;
}

bool idle_park(struct idle *d, unsigned idx, bool searching)
{
	uint32_t dec = IDLE_UNPARKED_ONE + (searching ? 1u : 0u);

	pthread_mutex_lock(&d->lock);
	uint32_t prev = atomic_fetch_sub_explicit(&d->state, dec,
	                                          memory_order_seq_cst);
	d->sleepers[d->nsleepers++] = idx;
	pthread_mutex_unlock(&d->lock);
	if (!searching || idle_nsearching(prev) != 1)
		return false;
	/* Pairs with the fence in idle_notify; see the design note. */
	atomic_thread_fence(memory_order_seq_cst);
	return true;
}

bool idle_unpark_self(struct idle *d, unsigned idx)
{
	bool found = false;

	pthread_mutex_lock(&d->lock);
	for (unsigned i = 0; i < d->nsleepers; i++) {
		if (d->sleepers[i] == idx) {
			d->sleepers[i] = d->sleepers[--d->nsleepers];
			found = true;
			break;
		}
	}
	if (found)
		atomic_fetch_add_explicit(&d->state, IDLE_UNPARKED_ONE,
		                          memory_order_seq_cst);
	pthread_mutex_unlock(&d->lock);
	return found;
}

unsigned idle_searching(struct idle *d)
{
	return idle_nsearching(atomic_load_explicit(&d->state,
	                                            memory_order_relaxed));
}

unsigned idle_parked(struct idle *d)
{
	return d->nworkers - idle_nunparked(atomic_load_explicit(
		&d->state, memory_order_relaxed));
}
