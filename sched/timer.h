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

#define TIMER_LEVELS 6
#define TIMER_SLOTS  64

struct timer_wheel {
	struct spin lock;
	_Atomic uint64_t count;        /* armed timers; read unlocked as a hint */
	uint64_t elapsed;              /* ticks processed up to */
	uint64_t occupied[TIMER_LEVELS];
	rok_waiter *slots[TIMER_LEVELS][TIMER_SLOTS];
	rok_waiter *firing;            /* the slot timer_fire is emptying */
	unsigned firing_aux;           /* its aux (level, slot) */
	rok_waiter *deferred;          /* to be filed in it: see timer.c */
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
