/*
 * worker.h — a worker: the queues one thread runs tasks from.  See worker.c.
 */
#ifndef ROK_WORKER_H
#define ROK_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "deque.h"
#include "injector.h"
#include "runq.h"
#include "timer.h"

struct worker {
	/* Shared with thieves: its own cache lines (deque is 64-aligned). */
	struct deque deque;                 /* stealable tasks */
	struct deque timed;                 /* tasks their sleep's timer woke
	                                       here: run before `deque`,
	                                       stolen before it (worker.c) */
	struct injector inbox;              /* pinned tasks woken elsewhere */
	struct injector shared_inbox;       /* thread-per-core: its other
	                                       tasks woken elsewhere, which
	                                       its helpers may take too */
	_Alignas(64) _Atomic uint32_t park_word; /* 1 while parked */
	_Atomic uint64_t steals;            /* written by the owner only */
	_Atomic uint64_t parks;
	_Atomic uint64_t polls;
	_Atomic int64_t regs;               /* registrations delta */
	_Atomic uint32_t poll_seq;          /* odd while inside a poll */
	_Atomic(rok_task *) lifo;           /* most recently woken task; a
	                                       helper may take it (monitor.c),
	                                       a thief during a long poll */
	_Atomic uint32_t long_poll;         /* poll_seq of a poll the monitor
	                                       saw at two looks (monitor.c) */
	_Atomic unsigned pinned_live;       /* unfinished spawn_local tasks
	                                       homed here; owner writes */
	_Atomic unsigned wakers;            /* guest: worker_push_remote calls
	                                       still touching this struct */
	/* The pool worker whose timer wheel this thread fires and, in
	 * thread-per-core mode, whose tasks it runs: itself, or for a helper
	 * the pool worker at the end of its chain of stuck workers.  Written
	 * by the monitor before the helper's thread starts; other helpers
	 * read it relaxed, as a hint only (worker_tpc_steal). */
	_Atomic(struct worker *) root;
	struct timer_wheel timers;          /* sleeps of tasks run here */

	/* Owner thread only. */
	_Alignas(64) struct runq pinned;    /* tasks that only run here */
	unsigned lifo_polls;                /* LIFO runs in a row */
	unsigned timed_polls;               /* `timed` runs in a row */
	uint32_t tick;
	uint32_t rng;
	int64_t idle_since;                 /* when it first found no work
	                                       since its last task; 0: none */
	uint8_t spin_score;                 /* idle spells only a long spin
	                                       ends, less the others, 0..16
	                                       (worker_idle_end) */
	uint8_t spin_waste;                 /* idle spells no spin ends, less
	                                       twice the others, 0..16
	                                       (worker_idle_end) */
	bool spin_off;                      /* worker_spin does not spin */
	bool slept;                         /* in this idle spell */
	uint16_t index;                     /* in executor.workers */
	uint16_t home;                      /* tasks homed here are its own:
	                                       its index, or a thread-per-core
	                                       helper's root's (set before its
	                                       thread starts) */
	bool guest;                         /* a rok_block_on thread */
	bool own_deque;                     /* thread-per-core pool worker or
	                                       helper: its own tasks go to its
	                                       deque, not `pinned` (worker.c) */
	bool searching;
	bool helper;                        /* stands in for a stuck worker */
	struct worker *stuck;               /* helper: the worker it stands in for */
	uint32_t stuck_seq;                 /* helper: its poll_seq when seen stuck */
	/* Monitor thread only (monitor.c). */
	bool active;                        /* helper: its thread runs */
	struct worker *helped_by;           /* the helper standing in, or NULL */
	uint32_t mon_seen;                  /* poll_seq at the monitor's last look */
	_Atomic pid_t tid;                  /* the thread's id, for /proc */
	_Atomic bool retired;               /* helper: its thread is done */
	struct timer_wheel *wheel;          /* where this thread's sleeps go:
	                                       its own, or a helper's stuck one */
	pthread_t thread;
};

/* A new worker (pool or guest) at executor index `index`; NULL on ENOMEM. */
struct worker *worker_new(uint16_t index, bool guest);
void worker_free(struct worker *w);     /* NULL-safe; queues must be empty */

/* Thread entry of a pool worker. */
void *worker_main(void *arg);

/* Thread entry of a helper standing in for a stuck worker (monitor.c). */
void *worker_helper_main(void *arg);

/* The calling thread's worker polls a task (owner only). */
void worker_run_task(struct worker *w, rok_task *t);

/* Owner-written counters: one relaxed load and store, no RMW. */
static inline void worker_set_pinned(struct worker *w, int delta)
{
	atomic_store_explicit(&w->pinned_live,
	                      atomic_load_explicit(&w->pinned_live,
	                                           memory_order_relaxed) +
	                              (unsigned)delta,
	                      memory_order_relaxed);
}

/* Runs the calling guest worker until `root` finished and no task pinned to
 * it is left. */
void worker_run_guest(struct worker *w, rok_task *root);

/* Queues `t` on the calling thread's worker `w` (owner only).  from_self: the
 * task re-queues itself (a yield), so it goes to the back, never LIFO. */
void worker_push_local(struct worker *w, rok_task *t, bool from_self);

/*
 * True if `t` (homed, and owned by the caller: being scheduled) is one of
 * w's own tasks, which w's thread queues itself: a TASK_F_PINNED task homed
 * at w, or another task homed at w's home (thread-per-core).
 */
static inline bool worker_owns(const struct worker *w, rok_task *t)
{
	const struct task_body *b = task_body(t);

	return (b->flags & TASK_F_PINNED) ? b->home == w->index
	                                  : b->home == w->home;
}

/*
 * Queues `t`, one of w's own (worker_owns), where w's thread takes it: the
 * pinned queue, or for a thread-per-core worker's unpinned tasks the deque,
 * where its helpers may take it too (worker.c).  Owner only; 0, or -ENOMEM
 * with nothing queued.
 */
int worker_push_own(struct worker *w, rok_task *t);

/*
 * Queues `t`, pinned to `home`, in home's inbox and wakes home.  Any
 * thread.  A guest's struct stays alive until this returns (see
 * worker_guest_quiesce).
 */
void worker_push_remote(struct worker *home, rok_task *t);

/*
 * Test seam: called by worker_push_remote between the push and the wake-up,
 * so that a test can hold a waker in that window.  NULL unless a test sets
 * it.
 */
extern void (*worker_push_remote_hook)(void);

/* The calling guest leaves: waits until no worker_push_remote is still
 * touching `w`, after which `w` may be freed. */
void worker_guest_quiesce(struct worker *w);

/* Wakes `w` if it is parked.  Any thread. */
void worker_unpark(struct worker *w);

/* Takes any one queued task of `w`, for the drain at stop (single thread). */
rok_task *worker_take_any(struct worker *w);

/* Owner (the thread firing its wheel).  Queues a task a timer woke on
 * w's `timed` deque, ahead of its other work.  Wakes nobody: the caller
 * calls executor_notify() once for the batch it queued. */
void worker_push_timed(struct worker *w, rok_task *t);

#endif /* ROK_WORKER_H */
