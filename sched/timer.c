/*
 * timer.c — sleeps: a hierarchical timing wheel per worker.
 *
 * Time is counted in ticks of 2^16 ns (65.5 us).  Level 0 has 2^12 slots
 * of one tick each (268 ms); above it four levels of 64 slots each, a slot
 * of level L spanning 2^(12+6(L-1)) ticks, cover 2^36 ticks, 2^52 ns (52
 * days), in all.  A timer sits at the level of its distance from `elapsed`
 * (the time processed so far): level 0 holds the timers less than 2^12
 * ticks away, level L the ones 2^(12+6(L-1)) to 2^(12+6L) ticks away, in
 * the slot of their deadline's bits from the level's shift on (0 at level
 * 0, 12+6(L-1) above), so a slot holds a window of the level's slot span
 * and never starts after a deadline it holds.  The windows a level holds
 * at once are the ones from `elapsed` on, so each slot names one: the first
 * at or after `elapsed` with its index (at the top level, the first after
 * it).  The next expiry is the earliest of each level's first occupied
 * slot, found by scanning the level's occupancy bits (level 0's: 64 words
 * and a word saying which of them are not empty).
 *
 * Why level 0 is that large: a timer above it moves down when its slot
 * comes due, all of the slot's timers at once, each a cache miss.  With 64
 * slots at level 0 (4.2 ms), every sleep longer than that moved once: in
 * rok-bench's timer_storm (sleeps of 1 to 100 ms) some 5,800 timers every
 * 4.2 ms, a 0.8 ms stall of the firing worker each time (most of the row's
 * p99 lateness; with one worker, 122 ms of its ~750 ms of CPU).  Sleeps
 * under 268 ms now never move; longer ones move down once per level they
 * are above level 0.  The price is 68 KiB of slot lists per wheel (64 KiB
 * of them level 0's).
 *
 * Not Tokio's rule (the level of the highest tick bit in which the deadline
 * differs from `elapsed`), under which a timer 1 ms away whose deadline
 * crosses a multiple of a level's span sits at the level above: every
 * timer waiting across that multiple then had to be moved down at once when
 * the clock reached it (with 64-slot levels, in rok-bench's timer_storm
 * some 35,000 every 268 ms, a stall of over 10 ms of the worker firing
 * them).  By distance, a timer is moved down at most once per level it
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
 * linked into a slot list (timer_push: not a waitq list, but with its
 * state protocol); `aux` records its place in `slots`.  A sleep
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
#define TIMER_MAX_TICKS  ((uint64_t)1 << (TIMER_L0_BITS + \
                                          TIMER_BITS * (TIMER_LEVELS - 1)))
#define TIMER_FIRE_BATCH 64
#define TIMER_DEFERRED   TIMER_NSLOTS   /* aux: on `deferred` */

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

/* The tick bit a slot index of `level` starts at. */
static unsigned timer_shift(unsigned level)
{
	return level == 0 ? 0 : TIMER_L0_BITS + TIMER_BITS * (level - 1);
}

static unsigned timer_slots(unsigned level)
{
	return level == 0 ? TIMER_L0_SLOTS : TIMER_SLOTS;
}

/* A slot's place in tw->slots, which a filed node keeps in its aux. */
static unsigned timer_aux(unsigned level, unsigned slot)
{
	return level == 0 ? slot
	                  : TIMER_L0_SLOTS + (level - 1) * TIMER_SLOTS + slot;
}

static unsigned timer_aux_level(unsigned aux)
{
	return aux < TIMER_L0_SLOTS ? 0
	                            : 1 + (aux - TIMER_L0_SLOTS) / TIMER_SLOTS;
}

static unsigned timer_aux_slot(unsigned aux)
{
	return aux < TIMER_L0_SLOTS ? aux
	                            : (aux - TIMER_L0_SLOTS) % TIMER_SLOTS;
}

static void timer_occupy(struct timer_wheel *tw, unsigned aux)
{
	unsigned level = timer_aux_level(aux), slot = timer_aux_slot(aux);

	if (level > 0) {
		tw->occupied[level] |= (uint64_t)1 << slot;
		return;
	}
	tw->occupied0[slot / 64] |= (uint64_t)1 << (slot % 64);
	tw->occupied0_words |= (uint64_t)1 << (slot / 64);
}

static void timer_vacate(struct timer_wheel *tw, unsigned aux)
{
	unsigned level = timer_aux_level(aux), slot = timer_aux_slot(aux);

	if (level > 0) {
		tw->occupied[level] &= ~((uint64_t)1 << slot);
		return;
	}
	tw->occupied0[slot / 64] &= ~((uint64_t)1 << (slot % 64));
	if (tw->occupied0[slot / 64] == 0)
		tw->occupied0_words &= ~((uint64_t)1 << (slot / 64));
}

static bool timer_level_empty(const struct timer_wheel *tw, unsigned level)
{
	return level == 0 ? tw->occupied0_words == 0 : tw->occupied[level] == 0;
}

/*
 * `level` not empty: how many slots on from slot `first` (mod the level's
 * slots) its first occupied one is.
 */
static unsigned timer_first_occupied(const struct timer_wheel *tw,
                                     unsigned level, unsigned first)
{
	if (level > 0) {
		uint64_t occ = tw->occupied[level];
		/* Rotate slot `first` to bit 0. */
		uint64_t rot = first == 0 ? occ
		                          : (occ >> first) | (occ << (64 - first));
		return (unsigned)__builtin_ctzll(rot);
	}
	unsigned wi = first / 64, bit = first % 64;
	uint64_t here = tw->occupied0[wi] >> bit << bit;
	uint64_t words = tw->occupied0_words;
	uint64_t later = wi == 63 ? 0 : words >> (wi + 1) << (wi + 1);
	unsigned w;
	if (here != 0)
		return (unsigned)(wi * 64 + __builtin_ctzll(here)) - first;
	/* The next word that is not empty, else round to the lowest (which
	 * may be wi's own bits below `first`). */
	w = (unsigned)__builtin_ctzll(later != 0 ? later : words);
	unsigned slot = w * 64 + (unsigned)__builtin_ctzll(tw->occupied0[w]);
	return (slot - first) & (TIMER_L0_SLOTS - 1);
}

/*
 * A slot's list is NULL-ended, with its tail in the slot, not a circular
 * waitq list: linking a timer then writes only the node that was last,
 * where a circular link reads the first node for the last and writes
 * both.  Those are cache misses: a slot's nodes sit in the frames of
 * tasks that went to sleep long ago, and the sleeps of timer_storm spread
 * over 1,500 level-0 slots.  Taken from the head: a slot fires, and moves
 * down, in the order its timers were filed.
 */
static void timer_push(struct timer_list *l, rok_waiter *w)
{
	w->next = NULL;
	w->prev = l->tail;
	if (l->tail != NULL)
		l->tail->next = w;
	else
		l->head = w;
	l->tail = w;
}

static void timer_remove(struct timer_list *l, rok_waiter *w)
{
	if (w->prev != NULL)
		w->prev->next = w->next;
	else
		l->head = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	else
		l->tail = w->prev;
	w->next = w->prev = NULL;
}

/* Unlinks the first node of a list that is not empty. */
static rok_waiter *timer_pop(struct timer_list *l)
{
	rok_waiter *w = l->head;

	timer_remove(l, w);
	return w;
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
	unsigned level;
	if (dist < TIMER_L0_SLOTS)
		level = 0;
	else if (dist >= TIMER_MAX_TICKS)
		level = TIMER_LEVELS - 1;   /* far: see the top */
	else
		level = 1 + ((unsigned)(63 - __builtin_clzll(dist)) -
		             TIMER_L0_BITS) / TIMER_BITS;
	unsigned slot = (unsigned)(when >> timer_shift(level)) &
	                (timer_slots(level) - 1);
	w->aux = timer_aux(level, slot);
	struct timer_list *list = &tw->slots[w->aux];
	if (tw->firing.head != NULL && w->aux == tw->firing_aux) {
		/* Its aux would say "on `firing`": see the note at the top. */
		w->aux = TIMER_DEFERRED;
		list = &tw->deferred;
	} else {
		timer_occupy(tw, w->aux);
	}
	if (cx != NULL)
		waitq_enter(w, cx, timer_release, tw);
	timer_push(list, w);
}

/* Lock held, `w` filed: unlinks it from wherever it is. */
static void timer_unfile(struct timer_wheel *tw, rok_waiter *w)
{
	if (w->aux == TIMER_DEFERRED) {
		timer_remove(&tw->deferred, w);
	} else if (tw->firing.head != NULL && w->aux == tw->firing_aux) {
		timer_remove(&tw->firing, w);
	} else {
		timer_remove(&tw->slots[w->aux], w);
		if (tw->slots[w->aux].head == NULL)
			timer_vacate(tw, w->aux);
	}
}

static void timer_release(rok_waiter *w)
{
	struct timer_wheel *tw = w->queue;

	spin_lock(&tw->lock);
	if (waitq_queued(w)) {
		timer_unfile(tw, w);
		waitq_leave(w);
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
	unsigned shift = timer_shift(level);

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
		if (timer_level_empty(tw, l))
			continue;
		/* The first occupied slot from the first window's on is the
		 * level's next. */
		unsigned mask = timer_slots(l) - 1;
		uint64_t c = timer_first_window(tw, l);
		unsigned first = (unsigned)c & mask;
		unsigned off = timer_first_occupied(tw, l, first);
		uint64_t t = (c + off) << timer_shift(l);
		unsigned s = (first + off) & mask;
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
 * due together (a slot of a higher level, a late look) still wake in order
 * within the batch; a slot of more than a batch wakes its batches in the
 * order its timers were filed.  Insertion sort: the batch is small, and in
 * order across the slots it spans.
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
	unsigned aux = timer_aux(level, slot);
	tw->firing = tw->slots[aux];   /* its nodes keep their aux */
	tw->firing_aux = aux;
	tw->slots[aux] = (struct timer_list){ NULL, NULL };
	timer_vacate(tw, aux);
	return true;
}

/* Lock held, `firing` empty.  Files what waited on `deferred`. */
static void timer_file_deferred(struct timer_wheel *tw)
{
	while (tw->deferred.head != NULL) {
		rok_waiter *w = timer_pop(&tw->deferred);
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
		if (tw->firing.head == NULL) {
			timer_file_deferred(tw);
			if (!timer_take_slot(tw, now_tick))
				break;
		}
		rok_waiter *w = tw->firing.head;
		int64_t deadline = timer_op(w)->deadline;
		uint64_t when = timer_tick_ceil(deadline);
		if (when > now_tick) {
			/* Not due: file it again, relative to the advanced
			 * elapsed; it lands at a lower level (or, far, round
			 * the top level again: on `deferred` until the slot
			 * is empty). */
			(void)timer_pop(&tw->firing);
			timer_file(tw, w, when, NULL);
			continue;
		}
		due[n].deadline = deadline;
		due[n++].task = waitq_wake(timer_pop(&tw->firing));
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
	for (unsigned a = timer_aux(level, 0); a < TIMER_NSLOTS; a++) {
		for (rok_waiter *w = tw->slots[a].head; w != NULL; w = w->next)
			n++;
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
