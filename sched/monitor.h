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

/* Helpers started so far (hand-offs). */
unsigned monitor_helpers(void);

#endif /* ROK_MONITOR_H */
