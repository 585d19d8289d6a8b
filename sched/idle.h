/*
 * idle.h — who is parked and who is searching for work.  See idle.c.
 */
#ifndef ROK_IDLE_H
#define ROK_IDLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct idle {
	_Alignas(64) _Atomic uint32_t state;   /* unparked << 16 | searching */
	unsigned nworkers;
	pthread_mutex_t lock;
	unsigned *sleepers;                     /* stack of parked workers */
	unsigned nsleepers;
};

int  idle_init(struct idle *d, unsigned nworkers);   /* 0 or -ENOMEM */
void idle_done(struct idle *d);

/* A worker with nothing local asks to search; false: enough already do. */
bool idle_begin_search(struct idle *d);

/* A searching worker found work.  True if it was the last searcher, in which
 * case the caller calls idle_notify so that someone keeps looking. */
bool idle_end_search(struct idle *d);

/*
 * New work was queued.  Returns the index of a parked worker the caller must
 * unpark (already counted as unparked and searching), or -1 when a worker is
 * already searching or none is parked.
 */
int idle_notify(struct idle *d);

/*
 * Worker `idx` parks.  Returns true if it was the last searcher: then the
 * caller must look at every queue once more (after the fence this issues)
 * and, finding work, call idle_notify.
 */
bool idle_park(struct idle *d, unsigned idx, bool searching);

/*
 * Worker `idx` wakes up by itself (timeout, stop).  True if it was still on
 * the sleeper list and is now counted as unparked (not searching); false if
 * a notifier already took it off and counted it as searching.
 */
bool idle_unpark_self(struct idle *d, unsigned idx);

/* Counters for diagnostics. */
unsigned idle_searching(struct idle *d);
unsigned idle_parked(struct idle *d);

#endif /* ROK_IDLE_H */
