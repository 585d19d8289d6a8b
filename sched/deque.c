/*
 * deque.c -- the per-worker work-stealing ring.
 *
 * Each worker owns one deque.  The owner pushes tasks at the bottom; the
 * owner (deque_pop) and any number of thieves (deque_steal) take the OLDEST
 * task at the top, so a task that keeps re-queueing itself cannot starve the
 * ones behind it (SPEC A2).  This is the Chase-Lev deque in the C11 form of
 * Le, Pop, Cohen and Zappa Nardelli (PPoPP 2013), cut down to one producer
 * and many consumers: nobody takes at the bottom, so the owner-vs-thief race
 * on the last item, and the seq_cst fences that settle it, do not exist.
 *
 * Invariants.  top and bottom are 64-bit and only ever grow (no wrap, no
 * ABA on the CAS); top <= bottom; items live at indices [top, bottom) of the
 * current ring, at slot index & mask.  Only the owner writes bottom, ring
 * and slots; consumers only move top, always by CAS from the value they
 * read, so each index is taken by exactly one successful CAS.
 *
 * Orderings.  push stores the slot relaxed, then bottom with release: a
 * consumer's acquire load of bottom makes the slot visible.  Growth copies
 * [top, bottom) into a ring twice the size and publishes it with a release
 * store of ring; a consumer loads ring with acquire after bottom, so it sees
 * a ring at least as new as the one the pushes it saw went into.  If it is
 * newer still, the indices below the top that growth copied from are
 * already taken (the owner read that top before the release), so a
 * consumer holding an older t fails its CAS on the uncopied slots.  The old
 * ring goes on the owner's retired list and is freed only by deque_done,
 * because a slow thief may still be reading it.  Consumers take by CAS
 * top t -> t+n with release on success; the owner loads top with acquire
 * before it overwrites a slot, so every consumer that took that index had
 * finished reading it (RMWs on top extend each release sequence, so seeing
 * a later top also covers earlier CASes).  A consumer whose CAS fails may
 * have read a slot the owner was rewriting -- slots are atomics so that is
 * not a data race -- and throws what it read away.
 *
 * A thief that reads a stale bottom may report "empty" while the last push
 * is in flight.  That is harmless: only the owner pushes, so the owner is
 * awake, and it will pop the item itself or a later steal will find it.
 */
#include "deque.h"

#include <errno.h>
#include <stdlib.h>

/* How often deque_steal retries a lost CAS before saying 0. */
#define DEQUE_STEAL_TRIES 4

struct deque_ring {
	int64_t mask;                  /* capacity - 1; capacity is 2^k */
	struct deque_ring *next;       /* retired list link, owner only */
	_Atomic(void *) slots[];
};

/* A ring of cap slots (a power of 2), all NULL; NULL if too big or OOM. */
static struct deque_ring *
deque_ring_new(uint64_t cap)
{
	struct deque_ring *r;
	uint64_t i;

	if (cap > (UINT64_C(1) << DEQUE_CAP_LOG2_MAX) ||
	    cap > (SIZE_MAX - sizeof(*r)) / sizeof(r->slots[0]))
		return NULL;
	r = malloc(sizeof(*r) + (size_t)cap * sizeof(r->slots[0]));
	if (r == NULL)
		return NULL;
	r->mask = (int64_t)cap - 1;
	r->next = NULL;
	for (i = 0; i < cap; i++)
		atomic_init(&r->slots[i], NULL);
	return r;
}

int
deque_init(struct deque *d, unsigned cap_log2)
{
	struct deque_ring *r;

	atomic_init(&d->top, 0);
	atomic_init(&d->bottom, 0);
	atomic_init(&d->ring, NULL);
	d->retired = NULL;
	if (cap_log2 > DEQUE_CAP_LOG2_MAX)
		return -EINVAL;
	if ((r = deque_ring_new(UINT64_C(1) << cap_log2)) == NULL)
		return -ENOMEM;
	/* Not shared yet: whoever hands d to the thieves publishes it. */
	atomic_init(&d->ring, r);
	return 0;
}

void
deque_done(struct deque *d)
{
	struct deque_ring *r, *next;

	if (d == NULL)
		return;
	free(atomic_load_explicit(&d->ring, memory_order_relaxed));
	for (r = d->retired; r != NULL; r = next) {
		next = r->next;
		free(r);
	}
	atomic_init(&d->top, 0);
	atomic_init(&d->bottom, 0);
	atomic_init(&d->ring, NULL);
	d->retired = NULL;
}

/*
 * Owner only.  Replace the full ring r, which holds [t, b), by one twice the
 * size.  Returns the new ring, or NULL (nothing changed) if out of memory.
 */
static struct deque_ring *
deque_grow(struct deque *d, struct deque_ring *r, int64_t t, int64_t b)
{
	struct deque_ring *n;
	int64_t i;

	if ((n = deque_ring_new(2 * ((uint64_t)r->mask + 1))) == NULL)
		return NULL;
	for (i = t; i < b; i++)
		atomic_store_explicit(&n->slots[i & n->mask],
		    atomic_load_explicit(&r->slots[i & r->mask],
		    memory_order_relaxed), memory_order_relaxed);
	/* Publishes the copied slots; pairs with the acquire load of ring in
	 * deque_take. */
	atomic_store_explicit(&d->ring, n, memory_order_release);
	r->next = d->retired;
	d->retired = r;
	return n;
}

int
deque_push(struct deque *d, void *item)
{
	struct deque_ring *r;
	int64_t b, t;

	if (item == NULL)
		return -EINVAL;
	/* Only the owner writes bottom and ring: relaxed reads its own. */
	b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
	r = atomic_load_explicit(&d->ring, memory_order_relaxed);
	/* Pairs with the consumers' release CAS on top: every index below t
	 * has been read by its taker, so its slot may be overwritten. */
	t = atomic_load_explicit(&d->top, memory_order_acquire);
	if (b - t > r->mask && (r = deque_grow(d, r, t, b)) == NULL)
		return -ENOMEM;
	atomic_store_explicit(&r->slots[b & r->mask], item,
	    memory_order_relaxed);
	/* Publishes the slot just written; pairs with the acquire load of
	 * bottom in deque_take. */
	atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
	return 0;
}

/*
 * Take the oldest min(ceil(len/2), max) items (max >= 1) into buf with one
 * CAS.  owner: the caller owns d, so bottom may be read relaxed.  Tries the
 * CAS at most tries times (tries <= 0: until it wins or d is empty).
 */
static size_t
deque_take(struct deque *d, void **buf, size_t max, int owner, int tries)
{
	struct deque_ring *r;
	int64_t t, b, n, i;

	/* Pairs with the release CAS of the previous taker: what it read of
	 * bottom happens before our load of bottom, so we see b >= t. */
	t = atomic_load_explicit(&d->top, memory_order_acquire);
	for (;;) {
		/* Pairs with push's release store of bottom: the slots
		 * below b are visible. */
		b = atomic_load_explicit(&d->bottom, owner ?
		    memory_order_relaxed : memory_order_acquire);
		/* Pairs with deque_grow's release store: a ring at least as
		 * new as the one slots [t, b) were published in. */
		r = atomic_load_explicit(&d->ring, memory_order_acquire);
		n = b - t;
		if (n <= 0)
			return 0;
		n = (n + 1) / 2;
		if ((uint64_t)n > max)
			n = (int64_t)max;
		for (i = 0; i < n; i++)
			buf[i] = atomic_load_explicit(
			    &r->slots[(t + i) & r->mask], memory_order_relaxed);
		/* Success releases our slot reads to the owner's acquire load
		 * of top in push.  Failure reloads t with acquire, as above,
		 * and what we read is discarded. */
		if (atomic_compare_exchange_strong_explicit(&d->top, &t, t + n,
		    memory_order_release, memory_order_acquire))
			return (size_t)n;
		if (tries > 0 && --tries == 0)
			return 0;
	}
}

void *
deque_pop(struct deque *d)
{
	void *item;

	if (deque_take(d, &item, 1, 1, 0) == 0)
		return NULL;
	return item;
}

size_t
deque_steal(struct deque *victim, void **buf, size_t max)
{
	if (max == 0)
		return 0;
	return deque_take(victim, buf, max, 0, DEQUE_STEAL_TRIES);
}

size_t
deque_len(const struct deque *d)
{
	int64_t t, b;

	/* Same as deque_take: with top read first and acquire, b >= t. */
	t = atomic_load_explicit(&d->top, memory_order_acquire);
	b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
	return b > t ? (size_t)(b - t) : 0;
}

void *
deque_peek(const struct deque *d)
{
	int64_t t, b;
	struct deque_ring *r;

	/* As deque_take: the slots below b are visible, in a ring at least
	 * as new as the one they went into.  The item may be taken meanwhile
	 * (even the slot rewritten): the caller only prefetches it. */
	t = atomic_load_explicit(&d->top, memory_order_acquire);
	b = atomic_load_explicit(&d->bottom, memory_order_acquire);
	r = atomic_load_explicit(&d->ring, memory_order_acquire);
	if (b <= t)
		return NULL;
	return atomic_load_explicit(&r->slots[t & r->mask],
	    memory_order_relaxed);
}
