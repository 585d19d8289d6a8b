/*
 * monitor.h — the thread that watches for workers stuck in one poll.
 */
#ifndef ROK_MONITOR_H
#define ROK_MONITOR_H

/* Starts the monitor (executor lock held).  0 or -errno. */
int monitor_start(void);

/* Stops it and joins every helper thread it started (executor lock held,
 * before the workers are joined: helpers leave at STOPPING too).  The
 * helpers' worker structs stay in their slots for the drain. */
void monitor_stop(void);

/* Frees what monitor_start allocated (after the drain at stop). */
void monitor_free(void);

/* A parked worker woke up: lets a monitor that sleeps for good resume. */
void monitor_poke(void);

/*
 * Test seam: called on the monitor thread after its last look at an idle
 * pool, just before it sleeps until poked, so that a test can wake a worker
 * in that window.  NULL (nothing called) unless a test sets it before
 * rok_start.
 */
extern void (*monitor_sleep_hook)(void);

/* Helpers started so far (hand-offs). */
unsigned monitor_helpers(void);

#endif /* ROK_MONITOR_H */
