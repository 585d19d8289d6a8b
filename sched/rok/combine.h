/*
 * rok/combine.h — awaiting several things at once: join_all, race, select,
 * timeout (SPEC A9, A10).
 *
 * Every function here is an awaitable operation in the sense of rok.h: use
 * it inside ROK_AWAIT, keep its op struct in the frame (zeroed before the
 * first poll), and pass the same arguments on every poll.  Like every
 * awaitable, called with cx->releasing set it drops whatever it holds and
 * returns ROK_PENDING.  An op may be used again once it gave ROK_READY.
 *
 * Tasks (join_all, race, join_timeout) are spawned tasks awaited through
 * their handles: they run on their own and are never cancelled by being
 * awaited, unless said so.  Futures (select, timeout) are rok_future
 * coroutines that run inside the awaiting task and nowhere else: the
 * combinator decides when they are polled and cancels the ones that lost.
 */
#ifndef ROK_COMBINE_H
#define ROK_COMBINE_H

#include "rok.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- join_all --------------------------------------------------------- */

typedef struct rok_join_all_op {
	rok_join_op join;
	size_t next;            /* private: tasks joined so far */
} rok_join_all_op;

/*
 * Ready when all `n` tasks (borrowed) have finished.  results[i] gets task
 * i's value, or NULL when it ended without one; errs[i] gets 0 or
 * -ECANCELED.  Either array may be NULL; without errs, each task is
 * awaited as by rok_join (a task without a result ends the awaiting
 * coroutine).  The tasks are awaited one after another, so only
 * one wake registration exists at a time; they run concurrently anyway.
 * Cancelling the awaiting task does not cancel them.  n == 0 is ready at
 * once.
 */
rok_poll rok_join_all(rok_cx *cx, rok_join_all_op *op, rok_task *const *tasks,
                      size_t n, void **results, int *errs);

/* ---- race ------------------------------------------------------------- */

/* rok_race flags. */
#define ROK_RACE_CANCEL_LOSERS 1u   /* cancel every task that did not win */

typedef struct rok_race_op {
	rok_join_op *joins;     /* private: one registration per task */
} rok_race_op;

/*
 * Ready when the first of `n` tasks (borrowed) finishes: *index gets its
 * position, *result (if not NULL) its value, *err 0, or -ECANCELED when that
 * first task ended without a value.  If several have finished by the time
 * the awaiting task is polled, the lowest index wins.
 *
 * The first poll registers on all n tasks at once (an array of n joins,
 * allocated then and freed when the race is decided or abandoned); the
 * losers' registrations are dropped before it is ready, or when the
 * awaiting task is cancelled.  With ROK_RACE_CANCEL_LOSERS every other task
 * is cancelled once the winner is known, and every task is cancelled when
 * the awaiting task is cancelled before a winner is known (there is none).
 * Without it the losers keep running.
 *
 * *err is -EINVAL for n == 0 or an unknown flag, -ENOMEM if the array
 * could not be allocated; then *index is SIZE_MAX.
 */
rok_poll rok_race(rok_cx *cx, rok_race_op *op, rok_task *const *tasks,
                  size_t n, unsigned flags, size_t *index, void **result,
                  int *err);

/* ---- select ----------------------------------------------------------- */

typedef struct rok_select_op {
	size_t started;         /* private: futures polled at least once */
} rok_select_op;

/*
 * Polls the `n` futures (caller storage, each set up with rok_future_init
 * and not polled before) inside the awaiting task, in list order, and is
 * ready as soon as one of them finishes with a value: *index gets its
 * position, *result (if not NULL) its value, *err 0.  SPEC A10:
 *
 *   - futures are polled in list order and a poll stops at the first one
 *     that finishes, so when several could finish in the same poll the
 *     lowest index wins, and a future after the winner that was never
 *     polled never runs (not even its cleanup section);
 *   - every other future that had started is cancelled: polled once more
 *     in cancelled state, so it leaves at its await, drops its wake
 *     registrations (timers, parked waits) and runs its cleanup, once;
 *   - cancelling the awaiting task does the same to every started future,
 *     innermost cleanup first, and then the task leaves.
 *
 * A loser whose last poll completes the await it was parked on keeps what
 * that await handed over (A11: a message, a lock): it runs on to its next
 * await or to its end, and its own code owns the value (its cleanup must
 * give back a lock it holds).
 *
 * *err is -EINVAL (and *index SIZE_MAX) for an empty list; no future runs.
 */
rok_poll rok_select(rok_cx *cx, rok_select_op *op, rok_future *futs, size_t n,
                    size_t *index, void **result, int *err);

/* ---- timeouts --------------------------------------------------------- */

typedef struct rok_timeout_op {
	rok_sleep_op sleep;     /* private */
} rok_timeout_op;

/*
 * Awaits the future `f` (set up with rok_future_init, not polled before) for
 * at most `ns` nanoseconds, counted from the first poll: a select of `f`
 * against a sleep, `f` first.  Ready with *result (if not NULL) set and
 * *err 0 when `f` finished with a value; with *err -ETIMEDOUT when the time
 * passed first: then `f` has been cancelled (its cleanup ran) and its timer
 * and waits are gone.  If the poll that cancels `f` completes the await it
 * was parked on and `f` then reaches its end, its value is kept: *err is 0.
 */
rok_poll rok_timeout(rok_cx *cx, rok_timeout_op *op, int64_t ns, rok_future *f,
                     void **result, int *err);

typedef struct rok_join_timeout_op {
	rok_join_op join;       /* private */
	rok_sleep_op sleep;     /* private */
} rok_join_timeout_op;

/*
 * Awaits task `t` (borrowed) for at most `ns` nanoseconds from the first
 * poll.  Ready with *result (if not NULL) and *err as for rok_join_err (0 or
 * -ECANCELED) when `t` finished first, or with *err -ETIMEDOUT.  A timeout
 * does NOT cancel `t`: it keeps running and may be joined again (call
 * rok_task_cancel() to stop it).
 */
rok_poll rok_join_timeout(rok_cx *cx, rok_join_timeout_op *op, rok_task *t,
                          int64_t ns, void **result, int *err);

#ifdef __cplusplus
}
#endif

#endif /* ROK_COMBINE_H */
