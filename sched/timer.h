/*
 * timer.h — a hierarchical timing wheel per worker.  See timer.c.
 */
#ifndef ROK_TIMER_H
#define ROK_TIMER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "rok/rok.h"
#include "spin.h"

/* Level 0: 2^12 slots of a tick each; levels 1 to 4: 64 slots each. */
#define TIMER_LEVELS   5
#define TIMER_L0_BITS  12
#define TIMER_L0_SLOTS (1u << TIMER_L0_BITS)
#define TIMER_BITS     6
#define TIMER_SLOTS    (1u << TIMER_BITS)
#define TIMER_NSLOTS   (TIMER_L0_SLOTS + (TIMER_LEVELS - 1) * TIMER_SLOTS)

/* A slot's timers in the order they were filed (timer.c). */
struct timer_list {
	rok_waiter *head, *tail;
};

struct timer_wheel {
	struct spin lock;
	_Atomic uint64_t count;        /* armed timers; read unlocked as a hint */
	uint64_t elapsed;              /* ticks processed up to */
	/* Occupied slots: level 0's in 64 words, with a word whose bit i
	 * says occupied0[i] != 0; the others' in a word each. */
	uint64_t occupied0_words;
	uint64_t occupied0[TIMER_L0_SLOTS / 64];
	uint64_t occupied[TIMER_LEVELS];   /* [0] unused */
	/* Level 0's slots, then level 1's, and so on: by aux. */
	struct timer_list slots[TIMER_NSLOTS];
	struct timer_list firing;      /* the slot timer_fire is emptying */
	unsigned firing_aux;           /* its aux (its place in slots) */
	struct timer_list deferred;    /* to be filed in it: see timer.c */
};

void timer_init(struct timer_wheel *tw);

/* Wakes every timer due at `now` (ns).  Returns how many.  Any thread, but
 * meant for the wheel's worker. */
unsigned timer_fire(struct timer_wheel *tw, int64_t now);

/* The earliest time (ns) a timer may be due, or INT64_MAX. */
int64_t timer_next(struct timer_wheel *tw);

/* Tests only: moves rok_now() forward by `ns` (>= 0) for every thread, on
 * top of earlier moves.  Parked workers are not woken. */
void timer_skew_clock(int64_t ns);

/* Tests only: `fn` (NULL: none) runs each time timer_fire has woken a
 * batch and not yet taken the lock again. */
void timer_hook_batch(void (*fn)(void));

/* Tests only: how many timers are filed at `level` or above (not those
 * being fired). */
size_t timer_count_from(struct timer_wheel *tw, unsigned level);

static inline bool timer_armed(struct timer_wheel *tw)
{
	return atomic_load_explicit(&tw->count, memory_order_relaxed) != 0;
}

#endif /* ROK_TIMER_H */
