/*
 * executor.h — the process's one executor and each thread's view of it.
 */
#ifndef ROK_EXECUTOR_H
#define ROK_EXECUTOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "frame.h"
#include "idle.h"
#include "injector.h"

struct worker;

enum {
	EXECUTOR_STOPPED = 0,
	EXECUTOR_RUNNING = 1,
	EXECUTOR_STOPPING = 2,
};

#define EXECUTOR_MAX_WORKERS 1024
#define EXECUTOR_MAX_GUESTS  1024      /* threads inside rok_block_on */
#define EXECUTOR_MAX_HELPERS 64        /* stand-ins for stuck workers */

struct executor {
	_Atomic int state;                 /* EXECUTOR_* */
	unsigned nworkers;                 /* pool workers: workers[0..n) */
	bool thread_per_core;
	bool lifo;                         /* use the LIFO slot (ROK_LIFO=0 turns it off) */
	/* Pool workers, then guest slots: a task's `home` indexes this. */
	struct worker *_Atomic *workers;
	struct injector injector;
	struct idle idle;
	_Atomic uint64_t next_id;
	_Atomic uint32_t next_home;        /* round robin of remote spawns (TPC) */
	_Atomic int64_t regs_foreign;      /* registrations counted off-worker */
	/* Helpers (monitor.c): created on demand, reused, freed at stop only,
	 * so thieves may read them without a lock.  Release on nhelpers
	 * publishes helpers[i] before the count that covers it. */
	struct worker *helpers[EXECUTOR_MAX_HELPERS];
	_Atomic unsigned nhelpers;
	pthread_mutex_t lock;              /* start, stop, guest count */
	pthread_mutex_t slot_lock;         /* spare slots; after `lock` */
	uint64_t retired_polls;            /* of freed slots; under slot_lock */
	uint64_t retired_steals;
};

extern struct executor executor;

/* Per-thread state. */
struct executor_thread {
	struct worker *worker;             /* pool or guest worker, or NULL */
	rok_task *current;                 /* task being polled */
	uint64_t id_next, id_end;          /* block of task ids */
	struct frame_cache cache;
};

extern _Thread_local struct executor_thread executor_tls
	__attribute__((tls_model("initial-exec")));

/* Starts the executor unless it runs.  0 or -errno. */
int executor_ensure(void);

static inline bool executor_running(void)
{
	/* Acquire: pairs with the release store in rok_start, so a caller that
	 * sees RUNNING sees the workers and queues it set up. */
	return atomic_load_explicit(&executor.state, memory_order_acquire) ==
	       EXECUTOR_RUNNING;
}

/* Creates a runtime thread with every signal blocked, so that signals stay
 * with the program's own threads.  0 or -errno. */
int executor_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg);

/* Reads an integer in [lo, hi] from the environment into *out (untouched
 * if unset or empty): 0, or -EINVAL. */
int executor_env_uint(const char *name, unsigned lo, unsigned hi,
                      unsigned *out);

/* A fresh task id from this thread's block. */
uint64_t executor_next_id(void);

/* Counts wait registrations made (+1) or released (-1) by this thread. */
void executor_regs_add(int64_t delta);

/*
 * Takes a spare slot of executor.workers (after the pool's) for a new worker
 * struct: a guest (block_on) or a helper (monitor.c).  0 or -errno.
 */
int executor_slot_take(struct worker **out, bool guest);

/* Wakes a worker that idle_notify picked, or none. */
void executor_notify(void);

#endif /* ROK_EXECUTOR_H */
