/*
 * timer.c — sleeps: a hierarchical timing wheel per worker.
 *
 * Time is counted in ticks of 2^16 ns (65.5 us).  Six levels of 64 slots
 * each cover 2^36 ticks, 2^52 ns (52 days).  A timer sits at the level of
 * its distance from `elapsed` (the time processed so far): level L holds
 * the timers 64^L to 64^(L+1) ticks away, in the slot of their deadline's
 * bits 6L..6L+5, so a level-L slot holds a window of 64^L ticks and never
 * starts after a deadline it holds.  The windows a level holds at once are
 * the 64 from `elapsed` on, so each slot names one: the first at or after
 * `elapsed` with its index (at the top level, the first after it).  The next
 * expiry is the earliest of each level's first occupied slot, found by
 * scanning the level's 64-bit occupancy word.
 *
 * Not Tokio's rule (the level of the highest tick bit in which the deadline
 * differs from `elapsed`), under which a timer 1 ms away whose deadline
 * crosses a multiple of 2^12 ticks sits at level 2: every timer waiting
 * across that multiple then had to be moved down at once when the clock
 * reached it, in rok-bench's timer_storm some 35,000 every 268 ms, a stall
 * of over 10 ms of the worker firing them, and most of the row's p99
 * lateness.  By distance, a timer is moved down at most once per level it
 * is above the one its sleep's length names, counted from the wheel's
 * time: that stands still while the wheel is empty (timer_fire returns at
 * once), so the first sleep after an idle spell may be filed a level or
 * more higher and moved down more often; correct, and rare under load.
 *
 * A timer 2^36 ticks away or more (a "far" timer: more than a turn of the
 * top level away) goes to the top level too, in the slot its deadline names
 * there, which is then taken a turn or more early.  When a slot comes due,
 * its timers that are not due yet are filed again from the new `elapsed`:
 * a far one goes round the top level again, the others go down.  No timer
 * fires late, and every deadline up to INT64_MAX ns ("never") has a place.
 *
 * Deadlines are rounded up to a tick, so a timer never fires early; it
 * fires late by at most a tick plus the time its worker takes to look: a
 * busy worker looks every 32 polls, an idle one parks until timer_next().
 *
 * Woken tasks are queued in firing order on the firing worker's `timed`
 * deque, which it runs ahead of its other work (a bounded number in a
 * row) and thieves steal from first: a backlog of spawns or wake-ups in
 * the deque does not make a sleep late.  Never in the LIFO slot, which
 * would put the last fired first.
 *
 * The timer node is the rok_waiter inside the sleeping frame's rok_sleep_op,
 * linked into a slot list; `aux` records its level and slot.  A sleep
 * registers in the wheel of the worker it runs on; cancelling it unlinks
 * the node at once from whichever thread polls the cancelled task, hence
 * the lock (uncontended in the common case: the owner fires its own wheel).
 * Firing moves a due slot to the wheel's `firing` list and takes its nodes
 * one at a time under the lock; the lock is dropped only to wake a batch,
 * and a node released meanwhile is unlinked from `firing` like from any
 * slot, so nobody walks a list it does not hold.  The nodes keep their aux:
 * while `firing` is not empty, aux == firing_aux means "on `firing`", and a
 * node that would be filed in that very slot meanwhile (a far timer going
 * round the top level, a registration due at once) waits on `deferred`
 * (aux TIMER_DEFERRED) and is filed once `firing` is empty, before that
 * timer_fire returns (timer_next does not look there; only a stuck worker
 * and its helper share a wheel, and the one firing files it).  So taking a
 * slot costs O(1), not a walk of its nodes (a cache miss each).
 *
 * rok_now() adds `timer_skew` (0 but in tests, which move the clock to the
 * edges of the wheel: timer_skew_clock()).
 */
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "executor.h"
#include "task.h"
#include "timer.h"
#include "waitq.h"
#include "worker.h"

#define TIMER_TICK_SHIFT 16
#define TIMER_BITS       6                      /* log2(TIMER_SLOTS) */
#define TIMER_MAX_TICKS  ((uint64_t)1 << (TIMER_BITS * TIMER_LEVELS))
#define TIMER_FIRE_BATCH 64
#define TIMER_DEFERRED   (TIMER_LEVELS * TIMER_SLOTS)   /* aux: on `deferred` */

/* Relaxed: a test sets it before the timers it is about; a thread that
 * reads the old value sees the clock as it was a moment earlier. */
static _Atomic int64_t timer_skew;

int64_t rok_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec +
	       atomic_load_explicit(&timer_skew, memory_order_relaxed);
}

void timer_skew_clock(int64_t ns)
{
	atomic_fetch_add_explicit(&timer_skew, ns, memory_order_relaxed);
}

/* Relaxed: set by a test before the timers it is about. */
static void (*_Atomic timer_batch_hook)(void);

void timer_hook_batch(void (*fn)(void))
{
	atomic_store_explicit(&timer_batch_hook, fn, memory_order_relaxed);
}

/* now + ns, saturated at INT64_MAX (never); now >= 0. */
static int64_t timer_after(int64_t now, int64_t ns)
{
	if (ns <= 0)
		return now;
	return ns > INT64_MAX - now ? INT64_MAX : now + ns;
}

int64_t rok_deadline(int64_t ns)
{
	return timer_after(rok_now(), ns);
}

static uint64_t timer_tick_ceil(int64_t ns)
{
	if (ns <= 0)
		return 0;
	return ((uint64_t)ns + (1u << TIMER_TICK_SHIFT) - 1) >> TIMER_TICK_SHIFT;
}

static uint64_t timer_tick_floor(int64_t ns)
{
	return ns <= 0 ? 0 : (uint64_t)ns >> TIMER_TICK_SHIFT;
}

static void timer_release(rok_waiter *w);

static rok_sleep_op *timer_op(rok_waiter *w)
{
	return (rok_sleep_op *)(void *)((char *)w - offsetof(rok_sleep_op, w));
}

void timer_init(struct timer_wheel *tw)
{
	memset(tw, 0, sizeof(*tw));
	tw->elapsed = timer_tick_floor(rok_now());
}

/*
 * Lock held.  Files `w` by its deadline relative to tw->elapsed: a new
 * registration for the task in `cx`, or (cx NULL) a node that moves to
 * another slot as the wheel turns.
 */
static void timer_file(struct timer_wheel *tw, rok_waiter *w, uint64_t when,
                       rok_cx *cx)
{
	if (when <= tw->elapsed)
		when = tw->elapsed;   /* due: goes to the current level-0 slot */
	uint64_t dist = when - tw->elapsed;
	unsigned level = dist >= TIMER_MAX_TICKS
	                         ? TIMER_LEVELS - 1   /* far: see the top */
	                         : (unsigned)(63 - __builtin_clzll(dist | 1)) /
	                                   TIMER_BITS;
	unsigned slot = (unsigned)(when >> (level * TIMER_BITS)) &
	                (TIMER_SLOTS - 1);
	rok_waiter **head = &tw->slots[level][slot];
	w->aux = level * TIMER_SLOTS + slot;
	if (tw->firing != NULL && w->aux == tw->firing_aux) {
		/* Its aux would say "on `firing`": see the note at the top. */
		w->aux = TIMER_DEFERRED;
		head = &tw->deferred;
	} else {
		tw->occupied[level] |= (uint64_t)1 << slot;
	}
	if (cx != NULL)
		waitq_link(head, w, cx, timer_release, tw);
	else
		waitq_append(head, w);
}

static void timer_unfile(struct timer_wheel *tw, rok_waiter *w)
{
	if (w->aux == TIMER_DEFERRED) {
		(void)waitq_unlink(&tw->deferred, w);
		return;
	}
	if (tw->firing != NULL && w->aux == tw->firing_aux) {
		(void)waitq_unlink(&tw->firing, w);
		return;
	}
	unsigned level = w->aux / TIMER_SLOTS, slot = w->aux % TIMER_SLOTS;
	if (waitq_unlink(&tw->slots[level][slot], w) &&
	    tw->slots[level][slot] == NULL)
		tw->occupied[level] &= ~((uint64_t)1 << slot);
}

static void timer_release(rok_waiter *w)
{
	struct timer_wheel *tw = w->queue;

	spin_lock(&tw->lock);
	if (atomic_load_explicit(&w->state, memory_order_relaxed) ==
	    WAITQ_QUEUED) {
		timer_unfile(tw, w);
		atomic_fetch_sub_explicit(&tw->count, 1, memory_order_relaxed);
	}
	spin_unlock(&tw->lock);
}

/*
 * Lock held.  The first window of `level` that a slot may hold, counted in
 * the level's slot spans: the first at or after `elapsed` (the top level:
 * after it, so a far timer filed again goes a turn on).  See the note at
 * the top.
 */
static uint64_t timer_first_window(const struct timer_wheel *tw,
                                   unsigned level)
{
	unsigned shift = level * TIMER_BITS;

	if (level == TIMER_LEVELS - 1)
		return (tw->elapsed >> shift) + 1;
	return (tw->elapsed + ((uint64_t)1 << shift) - 1) >> shift;
}

/*
 * Lock held.  The occupied slot that starts first: its level, slot and the
 * tick at which it starts; on a tie the higher level, and not only for
 * its timers to join, filed lower, those due with them: the top level
 * reads its slots as the windows after elapsed, so a top slot left for
 * a lower one starting at the same tick would read, once elapsed reached
 * that tick, as a whole turn later (check_timer top_slot_tie).  False if
 * the wheel is empty.
 */
static bool timer_next_slot(struct timer_wheel *tw, unsigned *level,
                            unsigned *slot, uint64_t *start)
{
	bool found = false;

	for (unsigned l = TIMER_LEVELS; l-- > 0;) {
		uint64_t occ = tw->occupied[l];
		if (occ == 0)
			continue;
		/* Rotate the first window's slot to bit 0: the first occupied
		 * one from there is the level's next. */
		unsigned shift = l * TIMER_BITS;
		uint64_t c = timer_first_window(tw, l);
		unsigned first = (unsigned)c & (TIMER_SLOTS - 1);
		uint64_t rot = first == 0 ? occ
		                          : (occ >> first) | (occ << (64 - first));
		unsigned off = (unsigned)__builtin_ctzll(rot);
		uint64_t t = (c + off) << shift;
		unsigned s = (first + off) & (TIMER_SLOTS - 1);
		if (!found || t < *start) {
			*level = l;
			*slot = s;
			*start = t;
			found = true;
		}
	}
	return found;
}

int64_t timer_next(struct timer_wheel *tw)
{
	unsigned level, slot;
	uint64_t start;
	int64_t next = INT64_MAX;

	if (!timer_armed(tw))
		return next;
	spin_lock(&tw->lock);
	if (timer_next_slot(tw, &level, &slot, &start)) {
		uint64_t at = start > tw->elapsed ? start : tw->elapsed;
		/* Past INT64_MAX ns: never, as far as a parked worker cares. */
		if (at <= (uint64_t)INT64_MAX >> TIMER_TICK_SHIFT)
			next = (int64_t)(at << TIMER_TICK_SHIFT);
	}
	spin_unlock(&tw->lock);
	return next;
}

struct timer_due {
	int64_t deadline;
	rok_task *task;
};

/*
 * Wakes a batch of due timers, earliest deadline first: timers that came
 * due together (a slot of a higher level, a late look) still wake in order.
 * Insertion sort: the batch is small and mostly sorted.
 */
static void timer_wake(struct timer_due *due, unsigned n)
{
	for (unsigned i = 1; i < n; i++) {
		struct timer_due d = due[i];
		unsigned j = i;
		for (; j > 0 && due[j - 1].deadline > d.deadline; j--)
			due[j] = due[j - 1];
		due[j] = d;
	}
	for (unsigned i = 0; i < n; i++)
		task_wake_by_val_timed(due[i].task);
	/* One wake-up for the batch, not one per task: each costs a seq_cst
	 * fence and a read of the idle word every worker writes. */
	if (n > 0)
		executor_notify();
}

/*
 * Lock held, `firing` empty.  Moves the next slot that starts by `now_tick`
 * to `firing`, with elapsed advanced to its start; false if there is none.
 */
static bool timer_take_slot(struct timer_wheel *tw, uint64_t now_tick)
{
	unsigned level, slot;
	uint64_t start;

	if (!timer_next_slot(tw, &level, &slot, &start) || start > now_tick)
		return false;
	if (start > tw->elapsed)
		tw->elapsed = start;
	tw->firing = tw->slots[level][slot];   /* its nodes keep their aux */
	tw->firing_aux = level * TIMER_SLOTS + slot;
	tw->slots[level][slot] = NULL;
	tw->occupied[level] &= ~((uint64_t)1 << slot);
	return true;
}

/* Lock held.  Unlinks the head of *head to file it elsewhere (no state
 * change, no accounting: the node stays registered). */
static rok_waiter *timer_detach_first(rok_waiter **head)
{
	rok_waiter *w = *head;

	if (w->next == w) {
		*head = NULL;
	} else {
		w->prev->next = w->next;
		w->next->prev = w->prev;
		*head = w->next;
	}
	return w;
}

/* Lock held, `firing` empty.  Files what waited on `deferred`. */
static void timer_file_deferred(struct timer_wheel *tw)
{
	while (tw->deferred != NULL) {
		rok_waiter *w = timer_detach_first(&tw->deferred);
		timer_file(tw, w, timer_tick_ceil(timer_op(w)->deadline), NULL);
	}
}

unsigned timer_fire(struct timer_wheel *tw, int64_t now)
{
	uint64_t now_tick = timer_tick_floor(now);
	struct timer_due due[TIMER_FIRE_BATCH];
	unsigned total = 0, n = 0;

	if (!timer_armed(tw))
		return 0;
	spin_lock(&tw->lock);
	/* Each take empties a slot: its timers fire or go to lower levels,
	 * or, far, round the top level, whose slots start after elapsed; so
	 * this ends. */
	for (;;) {
		if (tw->firing == NULL) {
			timer_file_deferred(tw);
			if (!timer_take_slot(tw, now_tick))
				break;
		}
		rok_waiter *w = tw->firing;
		int64_t deadline = timer_op(w)->deadline;
		uint64_t when = timer_tick_ceil(deadline);
		if (when > now_tick) {
			/* Not due: file it again, relative to the advanced
			 * elapsed; it lands at a lower level (or, far, round
			 * the top level again: on `deferred` until the slot
			 * is empty). */
			(void)timer_detach_first(&tw->firing);
			timer_file(tw, w, when, NULL);
			continue;
		}
		due[n].deadline = deadline;
		due[n++].task = waitq_take(&tw->firing);
		atomic_fetch_sub_explicit(&tw->count, 1, memory_order_relaxed);
		if (n == TIMER_FIRE_BATCH) {
			/* What is left on `firing` stays there, under the
			 * lock, for a release to unlink meanwhile. */
			spin_unlock(&tw->lock);
			timer_wake(due, n);
			total += n;
			n = 0;
			void (*hook)(void) = atomic_load_explicit(
				&timer_batch_hook, memory_order_relaxed);
			if (hook != NULL)
				hook();
			spin_lock(&tw->lock);
		}
	}
	if (now_tick > tw->elapsed)
		tw->elapsed = now_tick;
	spin_unlock(&tw->lock);
	timer_wake(due, n);
	return total + n;
}

size_t timer_count_from(struct timer_wheel *tw, unsigned level)
{
	size_t n = 0;

	spin_lock(&tw->lock);
	for (unsigned l = level; l < TIMER_LEVELS; l++)
		for (unsigned s = 0; s < TIMER_SLOTS; s++) {
			rok_waiter *h = tw->slots[l][s], *w = h;
			if (h != NULL)
				do {
					n++;
					w = w->next;
				} while (w != h);
		}
	spin_unlock(&tw->lock);
	return n;
}

/* Ready if op->deadline passed at `now`, else arms the timer. */
static rok_poll timer_wait(rok_cx *cx, rok_sleep_op *op, int64_t now)
{
	if (now >= op->deadline) {
		op->started = false;   /* the op may be used again */
		return ROK_READY;
	}
	struct worker *me = executor_tls.worker;
	struct timer_wheel *tw = me->wheel;
	spin_lock(&tw->lock);
	timer_file(tw, &op->w, timer_tick_ceil(op->deadline), cx);
	atomic_fetch_add_explicit(&tw->count, 1, memory_order_relaxed);
	spin_unlock(&tw->lock);
	if (tw != &me->timers)
		/* A helper armed its root's wheel; the root may be back and
		 * parked with a longer timeout: let it look again. */
		worker_unpark(atomic_load_explicit(&me->root,
		                                   memory_order_relaxed));
	return ROK_PENDING;
}

rok_poll rok_sleep_until(rok_cx *cx, rok_sleep_op *op, int64_t deadline)
{
	if (waitq_begin(cx, &op->w))
		return ROK_PENDING;
	op->deadline = deadline;
	return timer_wait(cx, op, rok_now());
}

rok_poll rok_sleep(rok_cx *cx, rok_sleep_op *op, int64_t ns)
{
	if (waitq_begin(cx, &op->w))
		return ROK_PENDING;
	int64_t now = rok_now();
	/* The first poll fixes the deadline; a later poll keeps it. */
	if (!op->started) {
		op->started = true;
		op->deadline = timer_after(now, ns);
	}
	return timer_wait(cx, op, now);
}
