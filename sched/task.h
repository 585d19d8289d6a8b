/*
 * task.h — the task object: record, body, state word, reference counts.
 *
 * A task is two allocations: a record that handles point to (state word,
 * value, id) and a body (what polling needs, then the caller's frame) that
 * is freed when the task finishes.  The state word holds the scheduling
 * flags and the reference count together so that a wake, which both changes
 * the flags and moves a reference, is one atomic read-modify-write.
 *
 * References are held by: the runtime, from spawn until the task finished and
 * woke its joiners; each handle; and each waker that is between taking a
 * waiter off a queue and calling task_wake_by_val().  A task sitting in a
 * run queue or linked into a wait queue is covered by the runtime's
 * reference, which is why a waiter must be unlinked before its task can
 * finish.
 */
#ifndef ROK_TASK_H
#define ROK_TASK_H

#include <stdatomic.h>
#include <stdint.h>

#include "frame.h"
#include "rok/rok.h"

struct worker;

enum {
	TASK_SCHEDULED  = 1u << 0,  /* in a run queue, or about to be */
	TASK_RUNNING    = 1u << 1,  /* being polled */
	TASK_NOTIFIED   = 1u << 2,  /* woken while running: poll again */
	TASK_COMPLETE   = 1u << 3,  /* finished; result or cancellation final */
	TASK_CANCELLED  = 1u << 4,  /* cancel requested before it finished */
	TASK_HAS_VALUE  = 1u << 5,  /* finished through its body: joinable value */
	TASK_JOIN_LOCK  = 1u << 6,  /* guards the joiners list */
	TASK_EXTERNAL   = 1u << 7,  /* never polled: see task_new_external;
	                               set at birth, never changes */
};

#define TASK_REF_SHIFT 16
#define TASK_REF_ONE   ((uint64_t)1 << TASK_REF_SHIFT)
#define TASK_FLAGS     (TASK_REF_ONE - 1)

#define TASK_HOME_ANY  UINT16_MAX

/* body->flags: owned by the thread polling the task. */
enum {
	TASK_F_YIELDED = 1u << 0,   /* rok_yield_now gave way once already */
	TASK_F_PINNED  = 1u << 1,   /* runs on its home's thread only; counted
	                               in its home's pinned_live */
};

/*
 * What a task needs only until it finishes, with its frame after it: freed
 * as it finishes, so that a finished task that handles still name costs its
 * 24-byte record alone (a million joined one by one: 23 MiB, not 53).
 */
struct task_body {
	rok_poll_fn poll;
	struct rok_task *next;      /* link in an injector stack */
	rok_waiter *joiners;        /* under TASK_JOIN_LOCK */
	uint32_t pc;                /* coroutine resume point */
	uint16_t home;              /* worker it is pinned to, or TASK_HOME_ANY */
	uint8_t size_class;         /* frame.c's class, for freeing */
	uint8_t flags;              /* TASK_F_* */
};

/*
 * The record, which lives as long as a reference does.  u.body is read only
 * while the task cannot finish: by the thread polling it; by whoever queues
 * it or holds it in a queue (an idle task, or one waiting in a run queue,
 * an inbox, the injector or the blocking pool); and under TASK_JOIN_LOCK
 * before COMPLETE.  task_complete swaps in the value under that lock.
 */
struct rok_task {
	_Atomic uint64_t state;
	union {
		struct task_body *body; /* until COMPLETE */
		void *result;           /* then: the value, or NULL */
	} u;
	uint64_t id;
};

_Static_assert(sizeof(struct rok_task) == FRAME_RECORD_SIZE,
               "the task record is frame.c's record class");
_Static_assert(sizeof(struct task_body) == 32, "task body grew");

static inline struct task_body *task_body(rok_task *t)
{
	return t->u.body;
}

static inline void *task_frame(rok_task *t)
{
	return (char *)t->u.body + sizeof(struct task_body);
}

/* Allocates and schedules a task; see rok_spawn.  home: TASK_HOME_ANY or a
 * worker index; local: it may only run on the calling worker's thread, whose
 * index `home` is (spawn_local, block_on: TASK_F_PINNED); cancelled: born
 * cancelled (spawned during stop).  The executor must be started.  Returns
 * 0 or -errno. */
int task_spawn(rok_task **out, rok_poll_fn poll, const void *frame,
               size_t size, uint16_t home, bool local, bool cancelled);

/* Ends a task with a value (has_value) or without (cancelled), wakes its
 * joiners and drops the runtime's reference.  The caller polled it or owns
 * it as an external task. */
void task_complete(rok_task *t, void *result, bool has_value);

/*
 * A task driven from outside the executor (a blocking job, an OS thread):
 * never queued or polled, ended by task_complete().  *out gets two
 * references: the runtime's (dropped by task_complete) and the caller's
 * handle.  The frame (size bytes, zeroed) is the driver's.  0 or -ENOMEM.
 */
int task_new_external(rok_task **out, size_t size);

/* A finished task's outcome: 0 with its value, or -ECANCELED. */
int task_result(rok_task *t, void **result);

/*
 * Wakes `t` and consumes one reference the caller holds: schedules it if
 * idle, marks it for another poll if running, nothing if already scheduled or
 * finished.  Any thread.
 */
void task_wake_by_val(rok_task *t);

/* Like task_wake_by_val, for a timer firing: never in the LIFO slot (wakes
 * in bulk must keep their order), but ahead of the firing worker's other
 * work (worker.h, `timed`), else behind what is queued already.  A task
 * queued on `timed` wakes no idle worker: the caller calls
 * executor_notify() once after a batch of these. */
void task_wake_by_val_timed(rok_task *t);

/*
 * Polls a task that the caller took from a run queue (SCHEDULED set): runs
 * it, then re-queues it, leaves it waiting, or finishes it.  Worker threads.
 */
void task_run(rok_task *t);

/* Puts `t` (SCHEDULED, runtime reference) where it belongs from this thread;
 * fifo: behind everything queued (a yield, a bulk wake), never LIFO. */
void task_schedule(rok_task *t, bool fifo);

/* Marks `t` cancelled and running in the drain at stop; see executor.c. */
bool task_cancel_for_stop(rok_task *t);

#endif /* ROK_TASK_H */
