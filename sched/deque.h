/*
 * deque.h -- the per-worker work-stealing ring (private to librok).
 *
 * A growable Chase-Lev ring in which the owner pushes at the bottom and
 * everyone, owner and thieves alike, takes the OLDEST item from the top.
 * See the design note in deque.c for the orderings.
 *
 * Thread contract: deque_init, deque_done, deque_push and deque_pop are for
 * the owner thread only; deque_steal and deque_len may be called from any
 * thread.  deque_done must not run while a thief can still touch the deque.
 *
 * struct deque is 64-byte aligned (top and bottom live on separate cache
 * lines): embed it in static or automatic storage, or in memory from
 * aligned_alloc(64, ...), not in plain malloc() memory.
 */
#ifndef ROK_SCHED_DEQUE_H
#define ROK_SCHED_DEQUE_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Largest cap_log2 that deque_init accepts (2^32 slots = 32 GiB of ring). */
#define DEQUE_CAP_LOG2_MAX 32

struct deque_ring;

struct deque {
	/* Next index to take; consumers move it by CAS. */
	alignas(64) _Atomic int64_t top;
	/* Next index to fill; only the owner writes it. */
	alignas(64) _Atomic int64_t bottom;
	/* The current ring; only the owner writes it. */
	_Atomic(struct deque_ring *) ring;
	/* Rings replaced by growth: owner only, freed in deque_done. */
	struct deque_ring *retired;
};

/*
 * Owner.  Set up an empty deque with 2^cap_log2 slots.  Returns 0, -EINVAL
 * if cap_log2 > DEQUE_CAP_LOG2_MAX, or -ENOMEM; on error *d is left zeroed
 * so that deque_done(d) is still safe.
 */
int deque_init(struct deque *d, unsigned cap_log2);

/*
 * Owner, with no thief left.  Free the current and all retired rings and
 * zero *d.  Items still queued are dropped, not freed (the deque only
 * borrows them).  Safe on NULL, on a zeroed struct and after a failed init.
 */
void deque_done(struct deque *d);

/*
 * Owner only.  Append item (must be non-NULL; the deque borrows it until it
 * is taken) at the bottom, doubling the ring when it is full.  Returns 0,
 * -EINVAL for a NULL item, or -ENOMEM, in which case nothing was pushed.
 */
int deque_push(struct deque *d, void *item);

/*
 * Owner only.  Take the OLDEST item, or return NULL if the deque is empty.
 * Retries while racing thieves, so NULL really means "was empty".
 */
void *deque_pop(struct deque *d);

/*
 * Any thread.  Take the oldest ceil(len/2) items, at most max, with one CAS
 * on top, and store them in buf[0..n) oldest first.  Returns n; 0 means
 * empty or lost the race a few times in a row (try another victim).  On 0,
 * the contents of buf are unspecified.
 */
size_t deque_steal(struct deque *victim, void **buf, size_t max);

/*
 * Any thread.  The oldest queued item without taking it, or NULL: a hint
 * only (a consumer may take it, and its owner end it, at any moment), for
 * a prefetch, never to be dereferenced.
 */
void *deque_peek(const struct deque *d);

/* Any thread.  Number of queued items: a snapshot that may be stale. */
size_t deque_len(const struct deque *d);

#endif /* ROK_SCHED_DEQUE_H */
