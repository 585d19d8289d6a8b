/*
 * rok.h — the public interface of librok, an M:N work-stealing runtime for
 * stackless tasks.
 *
 * A task is a frame (a struct the caller defines) plus a poll function.  The
 * runtime copies the frame into storage of its own, then polls it on one of
 * its worker threads.  A poll either finishes the task (ROK_READY) or returns
 * ROK_PENDING after registering a waker; the task is polled again once woken,
 * by whichever worker gets it.  Locals do not survive an await: anything that
 * must live across one belongs in the frame.
 *
 * The ROK_BEGIN / ROK_AWAIT / ROK_CLEANUP / ROK_END macros turn a poll
 * function into straight-line code in the protothread (Duff's device) style:
 *
 *	struct copy { int fd; rok_task *child; void *val; rok_join_op join; };
 *
 *	static rok_poll copy_poll(rok_cx *cx, void *frame)
 *	{
 *		struct copy *f = frame;
 *
 *		ROK_BEGIN(cx);
 *		f->fd = open(...);
 *		ROK_AWAIT(cx, rok_join(cx, &f->join, f->child, &f->val));
 *		ROK_RETURN(cx, f->val);
 *		ROK_CLEANUP(cx);
 *		if (f->fd > 0)
 *			close(f->fd);
 *		rok_task_unref(f->child);
 *		ROK_END(cx);
 *	}
 *
 * Cancellation is cooperative (SPEC A11): every ROK_AWAIT is a cancellation
 * point.  A cancelled task leaves its body at its next await and runs its
 * cleanup section, exactly once.  A task cancelled before its first poll runs
 * only its cleanup section (the frame is as the spawner wrote it, the rest
 * zeroed).  A task that returns normally runs the cleanup section too.  An
 * await whose operation completes in the poll that observes the cancellation
 * keeps its value (a message, a lock); the task leaves at its next await.
 *
 * Errors are negative errno values.  Functions that can fail and return a
 * pointer take an out parameter instead.  Unless said otherwise a function may
 * be called from any thread.  A `rok_task *` is a counted reference to a task
 * (its handle); every function that returns one gives the caller a reference
 * to drop with rok_task_unref().  Dropping a handle never cancels the task.
 */
#ifndef ROK_ROK_H
#define ROK_ROK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- runtime ---------------------------------------------------------- */

/*
 * Starts the executor: ROK_WORKERS worker threads (default: the online CPU
 * count), or thread-per-core mode when ROK_THREAD_PER_CORE=1.  Optional: the
 * first spawn or block_on starts it too.  Returns 0, -EALREADY if running, or
 * -errno if a thread or an allocation failed (then nothing is left running).
 */
int rok_start(void);

/*
 * Stops the executor: every unfinished task is cancelled and driven through
 * its cleanup section, then every thread is joined and every frame and queue
 * freed.  Handles that callers still hold become invalid.  Must not be called
 * from a task.  Returns 0; -EDEADLK when called from inside the runtime;
 * -EBUSY while a thread is inside rok_block_on (the runtime keeps running).
 */
int rok_stop(void);

/* Workers in the pool when called from a task, 1 from any other thread. */
int rok_workers(void);

/* Online CPUs (at least 1). */
int rok_cpu_count(void);

/*
 * True on a pool worker's own thread (not a helper standing in for a stuck
 * worker, a rok_block_on guest or a blocking-pool thread) when workers are
 * not pinned to CPUs (no thread-per-core): a thread that runs until
 * rok_stop, with the affinity the process had.  A child process made here
 * keeps this thread as its parent (PR_SET_PDEATHSIG fires when the parent
 * thread exits) and inherits that affinity.
 */
bool rok_on_pool_worker(void);

/* A snapshot of the runtime's counters (zero when it is not running). */
struct rok_stats {
	unsigned workers;           /* pool workers */
	unsigned searching;         /* workers looking for work to steal */
	unsigned parked;            /* workers asleep */
	uint64_t polls;             /* task polls, all workers */
	uint64_t steals;            /* successful steals (batches) */
	uint64_t parks;             /* times a worker went to sleep */
	int64_t registrations;      /* see rok_registrations */
	uint64_t handoffs;          /* helpers started for stuck workers */
	uint64_t injector_depth;    /* tasks from outside waiting to be taken */
};
void rok_stats_get(struct rok_stats *st);

/* Wake registrations currently held by waiting tasks (join, channel and
 * oneshot waits; timers and I/O once they exist): back to its baseline once
 * the waiting tasks have ended. */
int64_t rok_registrations(void);

/* ---- tasks ------------------------------------------------------------ */

typedef enum rok_poll { ROK_PENDING = 0, ROK_READY = 1 } rok_poll;

typedef struct rok_task rok_task;
typedef struct rok_cx rok_cx;
typedef struct rok_waiter rok_waiter;

/*
 * A poll function.  `frame` is the task's own copy of the frame; it stays at
 * the same address for the task's whole life.
 */
typedef rok_poll (*rok_poll_fn)(rok_cx *cx, void *frame);

/* Frames up to this many bytes come from per-thread caches (the frame sits
 * behind 32 bytes the task needs while it runs; both go when it finishes,
 * and a finished task a handle still names keeps 24 bytes). */
#define ROK_FRAME_CACHED_MAX 480

/*
 * Spawns a task that may run on any worker.  The runtime copies `size` bytes
 * of `frame` (borrowed) into the task's frame; frames are 8-byte aligned.
 * With `out` non-NULL, *out receives a handle; with NULL the task is detached.
 * Returns 0, -ENOMEM, or -ESHUTDOWN while the runtime is stopping.
 */
int rok_spawn(rok_task **out, rok_poll_fn poll, const void *frame, size_t size);

/*
 * Like rok_spawn, but the task only ever runs on the calling worker's thread
 * (or the calling block_on thread).  -EPERM from any other thread.
 */
int rok_spawn_local(rok_task **out, rok_poll_fn poll, const void *frame,
                    size_t size);

/*
 * Runs a task on the calling thread, which becomes a guest worker, until that
 * task and every task it pinned with rok_spawn_local have finished.  Other
 * tasks keep running on the pool.  *result (if not NULL) gets the task's
 * value.  Returns 0, -ECANCELED if the task ended without a value, -EDEADLK
 * from inside the runtime, or a spawn error.
 */
int rok_block_on(rok_poll_fn poll, const void *frame, size_t size,
                 void **result);

/* Task handles. */
rok_task *rok_task_ref(rok_task *t);
void      rok_task_unref(rok_task *t);          /* NULL-safe */
void      rok_task_cancel(rok_task *t);         /* no-op once finished */
bool      rok_task_is_cancelled(const rok_task *t); /* cancel was requested before it finished */
bool      rok_task_is_finished(const rok_task *t);
uint64_t  rok_task_id(const rok_task *t);

/*
 * Waits for `t` from a thread outside the runtime.  Returns 0 with its value
 * in *result, -ECANCELED if it ended without one, or -EDEADLK when called from
 * a task (a task awaits rok_join instead).
 */
int rok_task_wait(rok_task *t, void **result);

/* The running task's id; calling it outside a task aborts. */
uint64_t rok_id(void);
/* The running task's id into *id: 0, or -ESRCH outside a task. */
int rok_try_id(uint64_t *id);

/* ---- the await notation ----------------------------------------------- */

/*
 * A wait registration: a node that lives in the awaiting frame (inside an
 * operation's state) and is linked into whatever the task waits on.  When a
 * waiting task is cancelled, the await macro evaluates the operation once
 * more with cx->releasing set, and the operation unlinks its node, so every
 * registration is gone by the time the task ends.  Fields are private.
 */
struct rok_waiter {
	struct rok_waiter *next, *prev;
	rok_task *task;
	void (*release)(struct rok_waiter *w);
	void *queue;                    /* the wait queue it is linked into */
	_Atomic uint32_t state;         /* ROK__W_IDLE, _QUEUED, _WOKEN */
	uint32_t aux;
};

/*
 * The context of one poll.  Fields are private; the macros and the awaitable
 * operations use them.
 */
struct rok_cx {
	rok_task *task;          /* the task being polled */
	uint32_t *pc;            /* resume point of the coroutine being polled */
	void **result;           /* where ROK_RETURN stores the value */
	bool force_cancel;       /* poll in cancelled state (select's losers) */
	bool releasing;          /* the await is abandoned: drop registrations */
	bool cancelled_exit;     /* out: left through cancellation, no value */
};

/* True when the current poll runs in cancelled state. */
bool rok_cx_cancelled(const rok_cx *cx);

/* Private helper of the macros. */
void rok__bad_pc(uint32_t pc);

#define ROK__PC_CLEANUP UINT32_MAX

#if defined(__GNUC__) || defined(__clang__)
#define ROK__FALLTHROUGH __attribute__((fallthrough))
#else
#define ROK__FALLTHROUGH ((void)0)
#endif

/* Opens the body of a poll function. */
#define ROK_BEGIN(cx)                                                        \
	switch (*(cx)->pc) {                                                 \
	case 0:                                                              \
		if (rok_cx_cancelled(cx))                                    \
			goto rok__cancel;

/*
 * Awaits `op`, an expression of type rok_poll that is evaluated on every
 * poll until it gives ROK_READY, so its arguments must not have side
 * effects.  A cancellation point: entered cancelled, the task leaves without
 * evaluating `op`; re-polled after cancellation, `op` is evaluated once more
 * so that a value it hands over is kept, and if it is still pending, once
 * again with cx->releasing set so that it drops its registration.
 */
#define ROK_AWAIT(cx, op)                                                    \
	do {                                                                 \
		*(cx)->pc = __LINE__;                                        \
		if (rok_cx_cancelled(cx))                                    \
			goto rok__cancel;                                    \
		ROK__FALLTHROUGH;                                            \
	case __LINE__:                                                       \
		if ((op) == ROK_PENDING) {                                   \
			if (!rok_cx_cancelled(cx))                           \
				return ROK_PENDING;                          \
			(cx)->releasing = true;                              \
			(void)(op);                                          \
			(cx)->releasing = false;                             \
			goto rok__cancel;                                    \
		}                                                            \
	} while (0)

/* Lets every other ready task run once, then continues.  A cancellation point. */
#define ROK_YIELD(cx) ROK_AWAIT(cx, rok_yield_now(cx))

/* Ends the body with a value; the cleanup section runs next. */
#define ROK_RETURN(cx, value)                                                \
	do {                                                                 \
		*(cx)->result = (void *)(intptr_t)(value);                          \
		goto rok__cleanup;                                           \
	} while (0)

/*
 * Ends the body and opens the cleanup section.  The cleanup section runs
 * exactly once, however the body ended; it must not await.
 */
#define ROK_CLEANUP(cx)                                                      \
		goto rok__cleanup;                                           \
	rok__cancel:                                                         \
		(cx)->cancelled_exit = true;                                 \
	rok__cleanup:                                                        \
		*(cx)->pc = ROK__PC_CLEANUP;

/* In the cleanup section: true when the body left through cancellation
 * (it has no value then), false when it returned or ran to its end. */
#define ROK_LEFT_BY_CANCEL(cx) ((cx)->cancelled_exit)

/* Closes the poll function: the task is finished. */
#define ROK_END(cx)                                                          \
		break;                                                       \
	default:                                                             \
		rok__bad_pc(*(cx)->pc);                                      \
	}                                                                    \
	return ROK_READY;

/* ---- awaitable operations --------------------------------------------- */

/* The monotonic clock, in nanoseconds. */
int64_t rok_now(void);

#define ROK_US(n) ((int64_t)(n) * 1000)
#define ROK_MS(n) ((int64_t)(n) * 1000000)
#define ROK_S(n)  ((int64_t)(n) * 1000000000)

/* A sleep's state, in the frame.  Start it zeroed. */
typedef struct rok_sleep_op {
	rok_waiter w;
	int64_t deadline;
	bool started;
} rok_sleep_op;

/* rok_now() + ns for ns > 0 (else rok_now()), saturated at INT64_MAX: a
 * deadline that never comes, which rok_sleep_until accepts. */
int64_t rok_deadline(int64_t ns);

/*
 * Sleeps `ns` nanoseconds, counted from the first poll; never wakes early.
 * A deadline past INT64_MAX ns saturates there (never).  Cancelling the
 * task removes the timer at once.  The same op may be used again after it
 * finished (in a loop).
 */
rok_poll rok_sleep(rok_cx *cx, rok_sleep_op *op, int64_t ns);

/* Sleeps until rok_now() >= deadline; any deadline, INT64_MAX included. */
rok_poll rok_sleep_until(rok_cx *cx, rok_sleep_op *op, int64_t deadline);

/* Gives the worker to every other ready task once. */
rok_poll rok_yield_now(rok_cx *cx);

/* Awaits another task.  Storage for the wait lives in the frame. */
typedef struct rok_join_op {
	rok_waiter w;
} rok_join_op;

/*
 * Ready when `t` (borrowed) has finished: *result gets its value, or *err
 * gets -ECANCELED (SPEC A11's CancellationError) when it ended without one
 * (then *result is NULL).  Use ROK_AWAIT(cx, rok_join_err(...)).
 *
 * rok_join, without err, is the plain await: for a task that may end
 * without a result (cancelled, or itself ended by such a join) it is a
 * programming error, and the error is not lost: the awaiting coroutine
 * leaves its body at that await, as if cancelled, and its task ends
 * without a result (its own joiners get -ECANCELED).
 */
rok_poll rok_join_err(rok_cx *cx, rok_join_op *op, rok_task *t, void **result,
                      int *err);
/*
 * Every awaitable operation follows the same contract: called with
 * cx->releasing set, it unlinks its waiter (if linked) and returns
 * ROK_PENDING without doing anything else.
 */
#define rok_join(cx, op, t, result) rok_join_err(cx, op, t, result, NULL)

/*
 * A future: a coroutine that runs inside the task that awaits it, without
 * being spawned.  Its frame is caller storage (usually a field of the
 * awaiting frame).  It is polled with the awaiting task's cancellation: if
 * the task is cancelled while awaiting it, the future leaves at its own
 * await and runs its cleanup first, then the task leaves too (innermost
 * cleanup first).  A future never awaited never runs.
 */
typedef struct rok_future {
	rok_poll_fn poll;
	void *frame;            /* borrowed */
	void *result;           /* its ROK_RETURN value, once finished */
	uint32_t pc;
	uint8_t state;          /* private */
	bool cancelled;         /* finished by leaving through cancellation */
} rok_future;

void rok_future_init(rok_future *f, rok_poll_fn poll, void *frame);

/* Await it: ready with *result set (if not NULL) when the future finished
 * with a value.  A future that left through cancellation makes the awaiting
 * task leave too. */
rok_poll rok_future_await(rok_cx *cx, rok_future *f, void **result);

/* ---- channels --------------------------------------------------------- */

/*
 * A bounded multi-producer multi-consumer channel of non-NULL pointers.
 * Values are handed over in FIFO order; a value accepted by send is received
 * exactly once or is still in the channel (closing or cancelling never
 * drops one).  rok_chan_free() hands any values still queued to `drop`.
 */
typedef struct rok_chan rok_chan;

typedef struct rok_chan_op {
	rok_waiter w;
} rok_chan_op;

/* 0 with *out set, -EINVAL for cap 0 or cap > 2^24, -ENOMEM. */
int  rok_chan_new(rok_chan **out, size_t cap);
void rok_chan_free(rok_chan *ch, void (*drop)(void *value)); /* NULL-safe */

/* No more sends; receivers drain what is queued, then get -EPIPE. */
void rok_chan_close(rok_chan *ch);

/* 0, -EAGAIN when full, -EPIPE when closed, -EINVAL for a NULL value. */
int rok_chan_try_send(rok_chan *ch, void *value);
/* 0 with *value set, -EAGAIN when empty, -EPIPE when closed and empty. */
int rok_chan_try_recv(rok_chan *ch, void **value);

/*
 * Await these.  *err gets 0 or -EPIPE (closed), -EINVAL (NULL value).  A
 * send cancelled while it waits for room does not send (the caller keeps
 * the value); a poll that completes a send or a receive keeps its result.
 */
rok_poll rok_chan_send(rok_cx *cx, rok_chan_op *op, rok_chan *ch, void *value,
                       int *err);
rok_poll rok_chan_recv(rok_cx *cx, rok_chan_op *op, rok_chan *ch, void **value,
                       int *err);

/*
 * A oneshot: one value from one sender to one receiver.  Any thread sends;
 * a task awaits.  Freed by whichever side lets go last.
 */
typedef struct rok_oneshot rok_oneshot;

int  rok_oneshot_new(rok_oneshot **out);
/* 0, or -EPIPE if the receiver is gone (then the caller keeps the value).
 * Consumes the sender's side. */
int  rok_oneshot_send(rok_oneshot *o, void *value);
/* Drops the sender's side without a value; the receiver gets -EPIPE. */
void rok_oneshot_drop_sender(rok_oneshot *o);
/* Drops the receiver's side; a value sent later is refused with -EPIPE.
 * Returns a value that was sent but not received (the caller owns it), or
 * NULL. */
void *rok_oneshot_drop_receiver(rok_oneshot *o);
/* Await; *err gets 0 or -EPIPE.  Receiving does not drop the receiver side. */
rok_poll rok_oneshot_recv(rok_cx *cx, rok_chan_op *op, rok_oneshot *o,
                          void **value, int *err);

#ifdef __cplusplus
}
#endif

#endif /* ROK_ROK_H */
