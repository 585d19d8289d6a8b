/*
 * reactor.h — the runtime's one I/O thread, a libevent loop.  See reactor.c.
 *
 * Besides the task-facing awaits of <rok/io.h>, the reactor is where other
 * internal code (the daemon's front end: its listening socket, client
 * connections, child pidfds) runs its own libevent events.  The hand-off
 * point is reactor_call(): queue a function to run on the reactor thread,
 * and from there use reactor_base() to create and add events.  The base is
 * never touched by any other thread, so it needs no locking.
 */
#ifndef ROK_REACTOR_H
#define ROK_REACTOR_H

#include <stdbool.h>

struct event_base;

/*
 * Queues fn(arg) to run once on the reactor thread, after the calls queued
 * before it (FIFO), starting the executor and the reactor if they are not
 * running.  Returns 0; -ENOMEM; -ESHUTDOWN while the runtime stops; or the
 * error that prevented a start.  On an error fn never runs.  Any thread,
 * the reactor thread included (the call runs on a later loop turn, never
 * inside reactor_call).  fn must not block: no rok_task_wait, rok_block_on
 * or rok_stop on the reactor thread.  Calls queued before rok_stop begins
 * run before the reactor thread exits; the events fn created must be freed
 * by then (the base goes away with the reactor).
 */
int reactor_call(void (*fn)(void *arg), void *arg);

/*
 * reactor_call in caller storage, for a call made often enough that its
 * allocation matters (the daemon's task events): c is borrowed from the
 * call until fn starts (fn may free it; it is not touched after), or, on
 * an error, until reactor_call_in returns.  The fields are reactor.c's.
 */
struct reactor_call {
	struct reactor_call *next;
	void (*fn)(void *arg);
	void *arg;
	bool borrowed;              /* c is the caller's: not freed here */
};
int reactor_call_in(struct reactor_call *c, void (*fn)(void *arg),
                    void *arg);

/* The reactor's event_base on the reactor thread (inside a reactor_call
 * function or an event callback), NULL on any other thread. */
struct event_base *reactor_base(void);

/* True on the reactor thread. */
bool reactor_on_thread(void);

/*
 * For rok_stop only.  reactor_stop(), once no worker runs: stops and joins
 * the reactor thread (running the calls still queued), frees every libevent
 * object and closes the reactor's fds; from then on nothing registers and
 * nothing is woken by the reactor.  reactor_free(), after the drain, when no
 * task waits on I/O any more: frees the fd table; the next await or
 * reactor_call starts a new reactor.  Both are no-ops when there is nothing
 * to do.
 */
void reactor_stop(void);
void reactor_free(void);

#endif /* ROK_REACTOR_H */
