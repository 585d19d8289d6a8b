/*
 * worker.c — the loop each worker thread runs, and where tasks are queued.
 *
 * A worker owns four queues: its Chase-Lev deque (stealable), a second
 * one, `timed`, for the tasks its timer wheel woke (stealable too), its
 * pinned run queue (tasks that may only run on this thread: spawn_local,
 * the block_on root) and a LIFO slot for the task most recently woken or
 * spawned by the task it is running.  Other threads reach it through its
 * inbox, a lock-free stack.
 *
 * Which task next (worker_next): every 61st tick the inbox and the global
 * injector first, so remote work is never starved by local work (Go uses
 * 61 too).  Then the LIFO slot, at most LIFO_MAX times in a row, then
 * `timed`, at most TIMED_MAX times in a row (a sleep that ended waits
 * behind no backlog: timer lateness under a burst; the bound keeps a flood
 * of short sleeps from starving the rest), then the
 * pinned queue and the deque, alternating which goes first; both are FIFO,
 * so a task that yields goes behind everything already queued.  Then the
 * inbox and the injector, then stealing, then parking.  A task that yields
 * is never put in the LIFO slot (task.c queues it with from_self).
 *
 * Stealing starts at a pseudo-random victim and goes round the other N-1
 * workers, taking half of the first non-empty deque (a victim's `timed`
 * before its deque: the late-sensitive work moves first).  Failing that, it
 * takes the LIFO task of a worker in a long poll (SPEC A2: the slot may not
 * starve its task).  Filling the slot wakes nobody, since its owner runs
 * it as soon as the current poll returns; when that poll runs long, the
 * monitor marks it (long_poll) and wakes a parked worker to take the task
 * (monitor_look), or a searcher sees it when it stops searching
 * (worker_any_work), so the task waits for at most a couple of monitor
 * periods while others idle.  Parking follows
 * idle.c's protocol; the park itself is a futex on park_word.
 *
 * Guest workers (threads inside rok_block_on) have the same struct but only
 * run their pinned queue and inbox; nobody steals from them and they steal
 * from nobody.
 *
 * Thread-per-core mode (SPEC A7): every task is pinned to its home worker
 * and workers never steal from each other, yet a pool worker keeps its
 * tasks in its deque, not in the pinned queue, and other threads queue them
 * in its shared inbox (worker_push_own, worker_inbox_for); only spawn_local
 * tasks, pinned to its thread (TASK_F_PINNED), keep to the pinned queue and
 * the inbox.  The reason is the hand-off (SPEC A6, monitor.c): when the
 * worker blocks inside a poll, a helper thread must take over its queue
 * while the stuck thread may still queue tasks from the rest of that poll.
 * The deque is built for just that: one producer (the worker's thread,
 * stuck or not), any number of consumers, lock-free, with a release store
 * per push.  The owner-only pinned queue could change hands only with a
 * lock or fence on every push or poll, since nothing tells the stuck thread
 * when its call returns.  The price is the deque's CAS per pop, which the
 * default mode pays too.  The helper stands in for the worker: its `home`
 * is the worker's index (so the tasks it spawns or wakes are the worker's
 * and go to its own deque), its thread is pinned to the worker's CPU, and
 * while the stuck poll lasts it takes the worker's shared inbox and steals
 * from its deque and from the deques of the worker's other helpers
 * (worker_tpc_steal: a helper that blocks in turn gets a helper too, which
 * must reach what both hold).  The worker, back and out of work, takes back
 * what its helpers still hold before it parks; a helper retires once the
 * thread it stands in for is back and it holds nothing.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"
#include "monitor.h"
#include "task.h"
#include "worker.h"

#define WORKER_REMOTE_INTERVAL 61
#define WORKER_TIMER_INTERVAL  32
#define WORKER_SPIN_NS         ROK_US(50)
#define WORKER_SPIN_LONG_NS    ROK_US(250)
#define WORKER_SPIN_SCORE_MAX  16
#define WORKER_SPIN_SCORE_LONG 8
#define WORKER_SPIN_WASTE_OFF  16
#define WORKER_SPIN_WASTE_ON   8
#define WORKER_LIFO_MAX        3
#define WORKER_TIMED_MAX       64
#define WORKER_STEAL_MAX       256

struct worker *worker_new(uint16_t index, bool guest)
{
	struct worker *w = aligned_alloc(64, sizeof(*w));

	if (w == NULL)
		return NULL;
	memset(w, 0, sizeof(*w));
	if (deque_init(&w->deque, guest ? 1 : 8) < 0) {
		free(w);
		return NULL;
	}
	if (deque_init(&w->timed, guest ? 1 : 6) < 0) {
		deque_done(&w->deque);
		free(w);
		return NULL;
	}
	w->index = index;
	w->home = index;
	w->guest = guest;
	w->own_deque = executor.thread_per_core && !guest;
	atomic_init(&w->root, w);
	timer_init(&w->timers);
	w->wheel = &w->timers;
	w->rng = 0x9e3779b9u * (index + 1u);
	return w;
}

void worker_free(struct worker *w)
{
	if (w == NULL)
		return;
	deque_done(&w->deque);
	deque_done(&w->timed);
	runq_done(&w->pinned);
	free(w);
}

static uint32_t worker_rand(struct worker *w)
{
	/* xorshift32: cheap, and per worker, so victims differ. */
	uint32_t x = w->rng;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	w->rng = x;
	return x;
}

static void worker_count(_Atomic uint64_t *c)
{
	/* Only the owner writes: a relaxed load and store, no RMW. */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
	                      memory_order_relaxed);
}

void worker_run_task(struct worker *w, rok_task *t)
{
	/* poll_seq is odd while the poll runs; the monitor reads it to find
	 * a worker stuck in one poll.  Relaxed: it only needs to see the
	 * number change eventually. */
	uint32_t seq = atomic_load_explicit(&w->poll_seq, memory_order_relaxed);
	atomic_store_explicit(&w->poll_seq, seq + 1, memory_order_relaxed);
	worker_count(&w->polls);
	task_run(t);
	atomic_store_explicit(&w->poll_seq, seq + 2, memory_order_relaxed);
}

void worker_unpark(struct worker *w)
{
	/*
	 * The caller published work for `w` (its inbox, the STOPPING state)
	 * with a plain release; the parker stores 1 and then reads the inbox
	 * (worker_park_set).  That is a store-buffer (Dekker) pair: each side
	 * writes one word and reads the other, and on a weakly ordered CPU
	 * both reads can miss the other's write unless both sides are seq_cst
	 * or fenced.  This fence orders the publication before the exchange
	 * and pairs with the one in worker_park_set: either the exchange sees
	 * 1 and wakes the parker, or the parker's look sees the work.
	 */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_exchange(&w->park_word, 0) == 1)
		syscall(SYS_futex, &w->park_word, FUTEX_WAKE_PRIVATE, 1, NULL,
		        NULL, 0);
}

void (*worker_push_remote_hook)(void);

/* The inbox of `home` for `t`, which the caller owns (it is being queued),
 * so its flags are stable: helpers may take what is not pinned to the
 * thread of a thread-per-core worker. */
static struct injector *worker_inbox_for(struct worker *home, rok_task *t)
{
	return home->own_deque && !(task_body(t)->flags & TASK_F_PINNED)
	               ? &home->shared_inbox
	               : &home->inbox;
}

void worker_push_remote(struct worker *home, rok_task *t)
{
	/*
	 * A guest may take `t`, finish and free its struct (rok_block_on
	 * returns) as soon as the push is visible, while we still write the
	 * inbox's depth and park_word.  So a guest counts its wakers in flight
	 * and waits for none to be left before it is freed.  The struct is
	 * alive here: `t` is unfinished and homed at it, and a guest does not
	 * leave before its pinned tasks have finished.  Relaxed increment: the
	 * release CAS of the push publishes it to the guest's acquire take.
	 * Pool workers and helpers are freed only at stop: no count.
	 */
	bool guest = home->guest;

	if (guest)
		atomic_fetch_add_explicit(&home->wakers, 1,
		                          memory_order_relaxed);
	injector_push(worker_inbox_for(home, t), t);
	if (worker_push_remote_hook != NULL)
		worker_push_remote_hook();
	worker_unpark(home);
	if (guest)
		/* Release: our accesses to *home come before its free; pairs
		 * with the acquire in worker_guest_quiesce. */
		atomic_fetch_sub_explicit(&home->wakers, 1,
		                          memory_order_release);
}

void worker_guest_quiesce(struct worker *w)
{
	/* A waker's window is a few instructions (or a preemption): yield. */
	while (atomic_load_explicit(&w->wakers, memory_order_acquire) != 0)
		sched_yield();
}

void executor_notify(void)
{
	int idx = idle_notify(&executor.idle);

	if (idx >= 0)
		worker_unpark(atomic_load_explicit(&executor.workers[idx],
		                                   memory_order_relaxed));
}

/* Pushes to the deque, or to the injector if growing the deque failed. */
static void worker_push_deque(struct worker *w, rok_task *t)
{
	if (deque_push(&w->deque, t) < 0)
		injector_push(&executor.injector, t);
}

void worker_push_timed(struct worker *w, rok_task *t)
{
	if (deque_push(&w->timed, t) < 0)
		worker_push_deque(w, t);
}

void worker_push_local(struct worker *w, rok_task *t, bool from_self)
{
	if (w->guest) {
		injector_push(&executor.injector, t);
		executor_notify();
		return;
	}
	if (!from_self && executor.lifo) {
		/* acq_rel: publishes `t` to a helper that may take the slot,
		 * and takes back what the slot held. */
		rok_task *prev = atomic_exchange_explicit(&w->lifo, t,
		                                          memory_order_acq_rel);
		if (prev == NULL)
			return;   /* nothing stealable was added: wake nobody */
		t = prev;
	}
	worker_push_deque(w, t);
	executor_notify();
}

int worker_push_own(struct worker *w, rok_task *t)
{
	if (w->own_deque && !(task_body(t)->flags & TASK_F_PINNED))
		return deque_push(&w->deque, t);
	return runq_push(&w->pinned, t);
}

/* Moves the tasks of an inbox list (all w's own) to w's queues but the first,
 * which it returns (or *first if set already). */
static rok_task *worker_take_list(struct worker *w, rok_task *t,
                                  rok_task *first)
{
	while (t != NULL) {
		rok_task *next = task_body(t)->next;
		if (first == NULL)
			first = t;
		else if (worker_push_own(w, t) < 0)
			/* Retried next time. */
			injector_push(worker_inbox_for(w, t), t);
		t = next;
	}
	return first;
}

/* Takes the inboxes (into the pinned queue, or the deque: worker_push_own)
 * and, for pool workers, the injector (into the deque); returns the first
 * task taken. */
static rok_task *worker_take_remote(struct worker *w)
{
	rok_task *first = worker_take_list(w, injector_take_all(&w->inbox),
	                                   NULL);
	rok_task *t;

	if (w->own_deque)
		first = worker_take_list(
			w, injector_take_all(&w->shared_inbox), first);
	if (w->guest || first != NULL)
		return first;
	t = injector_take_all(&executor.injector);
	if (t != NULL && task_body(t)->next != NULL)
		executor_notify();   /* a batch: let a thief share it */
	while (t != NULL) {
		rok_task *next = task_body(t)->next;
		if (first == NULL)
			first = t;
		else
			worker_push_deque(w, t);
		t = next;
	}
	return first;
}

/*
 * Starts loading the task that will probably run next (its record: the
 * state word and where its body is; the body itself is behind a load that
 * cannot be made on a task that may be freed), so that its cache misses
 * overlap this poll instead of stalling the next.  For `timed`: in a storm
 * of sleeps a woken task waits there behind many others and is out of the
 * cache by its turn (its first touch was most of task_run's and its poll's
 * cost in timer_storm; rok-bench's other rows showed no gain for the
 * deque).  NULL: nothing.  A hint: `t` may be taken and freed meanwhile; a
 * prefetch reads nothing and never faults.
 */
static inline void worker_prefetch(const void *t)
{
	if (t != NULL)
		__builtin_prefetch(t, 1);
}

static rok_task *worker_next(struct worker *w)
{
	rok_task *t;

	if (++w->tick % WORKER_REMOTE_INTERVAL == 0 &&
	    (t = worker_take_remote(w)) != NULL)
		return t;
	if (atomic_load_explicit(&w->lifo, memory_order_relaxed) != NULL &&
	    (t = atomic_exchange_explicit(&w->lifo, NULL,
	                                  memory_order_acquire)) != NULL) {
		if (w->lifo_polls++ < WORKER_LIFO_MAX)
			return t;
		worker_push_deque(w, t);   /* its turn is over: go to the back */
	}
	w->lifo_polls = 0;
	/* Timer-woken tasks first, so a backlog in the deque does not make
	 * their sleeps late; at most WORKER_TIMED_MAX in a row, so a flood
	 * of them cannot starve the deque either. */
	if (w->timed_polls < WORKER_TIMED_MAX &&
	    (t = deque_pop(&w->timed)) != NULL) {
		w->timed_polls++;
		worker_prefetch(deque_peek(&w->timed));
		return t;
	}
	w->timed_polls = 0;
	if (w->tick & 1) {
		if ((t = runq_pop(&w->pinned)) != NULL ||
		    (t = deque_pop(&w->deque)) != NULL)
			return t;
	} else {
		if ((t = deque_pop(&w->deque)) != NULL ||
		    (t = runq_pop(&w->pinned)) != NULL)
			return t;
	}
	if ((t = deque_pop(&w->timed)) != NULL) {
		worker_prefetch(deque_peek(&w->timed));
		return t;   /* nothing else queued here: no turn to give */
	}
	return worker_take_remote(w);
}

/* Victim v of worker_steal_from_pool: pool worker v, or helper v - pool
 * (v < pool + nhelpers, read by the caller). */
static struct worker *worker_victim(unsigned pool, unsigned v)
{
	return v < pool ? atomic_load_explicit(&executor.workers[v],
	                                       memory_order_relaxed)
	                : executor.helpers[v - pool];
}

/*
 * The LIFO task of `v`, in a poll the monitor found long (monitor_look),
 * may be taken by a thief.  Relaxed: the marks are hints; a poll that just
 * ended lets the owner and a thief race for the slot, and the exchange
 * settles it.  The mark is odd (in a poll), never 0.
 */
static bool worker_lifo_open(struct worker *v)
{
	return atomic_load_explicit(&v->long_poll, memory_order_relaxed) ==
	               (atomic_load_explicit(&v->poll_seq,
	                                     memory_order_relaxed) | 1) &&
	       atomic_load_explicit(&v->lifo, memory_order_relaxed) != NULL;
}

/*
 * Takes half the deque (at most WORKER_STEAL_MAX) of the first non-empty
 * victim, starting at a random one; keeps all but the first task in its own
 * deque.  Victims are the pool workers and the helpers (monitor.c), whose
 * structs live until stop, so a thief never reads a freed deque.
 */
static rok_task *worker_steal_from_pool(struct worker *w)
{
	unsigned pool = executor.nworkers;
	unsigned n = pool + atomic_load_explicit(&executor.nhelpers,
	                                         memory_order_acquire);
	void *buf[WORKER_STEAL_MAX];
	unsigned start = worker_rand(w) % n;

	for (unsigned i = 0; i < n; i++) {
		struct worker *victim = worker_victim(pool, (start + i) % n);
		if (victim == w)
			continue;
		size_t k = deque_steal(&victim->timed, buf, WORKER_STEAL_MAX);
		if (k == 0)
			k = deque_steal(&victim->deque, buf, WORKER_STEAL_MAX);
		if (k == 0)
			continue;
		for (size_t j = 1; j < k; j++)
			worker_push_deque(w, buf[j]);
		if (k > 1 && w->helper)
			executor_notify();   /* it may get stuck: let others share */
		worker_count(&w->steals);
		return buf[0];
	}
	for (unsigned i = 0; i < n; i++) {
		struct worker *victim = worker_victim(pool, (start + i) % n);
		rok_task *t;
		if (victim == w || !worker_lifo_open(victim))
			continue;
		/* Acquire: pairs with the acq_rel exchange that filled it. */
		t = atomic_exchange_explicit(&victim->lifo, NULL,
		                             memory_order_acquire);
		if (t != NULL) {
			worker_count(&w->steals);
			return t;
		}
	}
	return NULL;
}

/* A task taken by worker_tpc_steal: the first of w's own to run now, the
 * rest into w's deque, any other home's back to its home.  (No task is
 * unpinned in this mode; should one be, it goes to the injector.) */
static void worker_tpc_keep(struct worker *w, rok_task *t, rok_task **first)
{
	bool own = worker_owns(w, t);

	if (own && *first == NULL) {
		*first = t;
	} else if (task_body(t)->home == TASK_HOME_ANY) {
		injector_push(&executor.injector, t);
		executor_notify();
	} else if (!own || worker_push_own(w, t) < 0) {
		worker_push_remote(atomic_load_explicit(
			&executor.workers[task_body(t)->home],
			memory_order_relaxed), t);
	}
}

/*
 * Thread-per-core: takes tasks of w's root that another thread of that root
 * holds -- never a task of another worker, nor one pinned to a thread
 * (those are in no queue taken here).  Victims: the deques of the helpers
 * standing in for the root (monitor.c) and, with_root, the root's shared
 * inbox and deque (a helper whose stuck worker is still away).  Half of
 * the first non-empty deque, as a thief takes.  The helpers' roots are
 * read relaxed, as a hint: a helper struct reused for another root
 * meanwhile may yield a task homed elsewhere, which goes on to its home's
 * inbox.  Not counted as steals: the tasks stay with their worker.
 */
static rok_task *worker_tpc_steal(struct worker *w, bool with_root)
{
	struct worker *root = atomic_load_explicit(&w->root,
	                                           memory_order_relaxed);
	/* Acquire: pairs with the release that published helpers[i]. */
	unsigned n = atomic_load_explicit(&executor.nhelpers,
	                                  memory_order_acquire);
	void *buf[WORKER_STEAL_MAX];
	rok_task *first = NULL, *t = NULL;
	size_t k = 0;

	if (with_root) {
		t = injector_take_all(&root->shared_inbox);
		if (t == NULL)
			k = deque_steal(&root->deque, buf, WORKER_STEAL_MAX);
	}
	for (unsigned i = 0; t == NULL && k == 0 && i < n; i++) {
		struct worker *v = executor.helpers[i];
		if (v != w && atomic_load_explicit(&v->root,
		                                   memory_order_relaxed) == root)
			k = deque_steal(&v->deque, buf, WORKER_STEAL_MAX);
	}
	while (t != NULL) {
		rok_task *next = task_body(t)->next;
		worker_tpc_keep(w, t, &first);
		t = next;
	}
	for (size_t j = 0; j < k; j++)
		worker_tpc_keep(w, buf[j], &first);
	return first;
}

static rok_task *worker_steal(struct worker *w)
{
	/* Thread-per-core workers never steal from each other; what their
	 * own helpers still hold comes back to them. */
	if (executor.thread_per_core)
		return worker_tpc_steal(w, false);
	/* A lone worker searches too: parking as the last searcher is what
	 * makes it look at the injector once more (idle.c), without which a
	 * remote spawn racing with its park is never seen. */
	if (!w->searching) {
		if (!idle_begin_search(&executor.idle))
			return NULL;
		w->searching = true;
	}
	rok_task *t = worker_steal_from_pool(w);
	return t != NULL ? t : worker_take_remote(w);
}

/*
 * True if any pool deque or the injector holds a task, or, with
 * `lifo_slots`, a long poll's LIFO slot one that a thief may take.  The
 * monitor's wake-up for such a slot wakes nobody while a worker searches,
 * so the searcher looks at the slots when it stops (worker_park,
 * worker_found_work); not at every turn of its spin, since a slot shares
 * its line with the poll counter its owner writes at every poll.
 * Thread-per-core workers do not take each other's LIFO tasks.
 */
static bool worker_any_work(bool lifo_slots)
{
	bool lifo = lifo_slots && !executor.thread_per_core;

	if (!injector_is_empty(&executor.injector))
		return true;
	for (unsigned i = 0; i < executor.nworkers; i++) {
		struct worker *v = atomic_load_explicit(&executor.workers[i],
		                                        memory_order_relaxed);
		if (deque_len(&v->deque) > 0 || deque_len(&v->timed) > 0 ||
		    (lifo && worker_lifo_open(v)))
			return true;
	}
	unsigned n = atomic_load_explicit(&executor.nhelpers,
	                                  memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		if (deque_len(&executor.helpers[i]->deque) > 0 ||
		    (lifo && worker_lifo_open(executor.helpers[i])))
			return true;
	return false;
}

static bool worker_stopping(void)
{
	return atomic_load_explicit(&executor.state, memory_order_relaxed) ==
	       EXECUTOR_STOPPING;
}

/*
 * Announces that `w` is about to sleep (park_word = 1) and takes a last look
 * at its inbox and the stop flag; false (word back at 0) if there is a
 * reason not to sleep.  The fence after the store pairs with the fence in
 * worker_unpark: the inbox read below is relaxed, and without the fence a
 * weakly ordered CPU may perform it before the store is visible, while the
 * waker's exchange still reads 0 -- both would miss, and the wake-up would
 * be lost.
 */
static bool worker_park_set(struct worker *w)
{
	atomic_store(&w->park_word, 1);
	atomic_thread_fence(memory_order_seq_cst);
	if (!injector_is_empty(&w->inbox) ||
	    !injector_is_empty(&w->shared_inbox) || worker_stopping()) {
		atomic_store(&w->park_word, 0);
		return false;
	}
	return true;
}

/*
 * Sleeps on park_word until unparked or until its next timer is due; the
 * word must already be 1.  Clears the word before returning.
 */
static void worker_sleep(struct worker *w)
{
	while (atomic_load(&w->park_word) == 1 && !worker_stopping()) {
		int64_t next = timer_next(w->wheel);
		struct timespec ts, *tsp = NULL;
		if (next != INT64_MAX) {
			int64_t d = next - rok_now();
			if (d <= 0)
				break;
			ts.tv_sec = d / 1000000000;
			ts.tv_nsec = d % 1000000000;
			tsp = &ts;
		}
		syscall(SYS_futex, &w->park_word, FUTEX_WAIT_PRIVATE, 1, tsp,
		        NULL, 0);
	}
	atomic_store(&w->park_word, 0);
}

/*
 * Fires this worker's due timers; true if any task was woken.  That ends
 * an idle spell unscored (worker_idle_end): a sleep's spell says nothing
 * of when the next request comes, and the futex wait ends with the timer
 * anyway.
 */
static bool worker_fire_timers(struct worker *w)
{
	if (!timer_armed(w->wheel) || timer_fire(w->wheel, rok_now()) == 0)
		return false;
	w->idle_since = 0;
	return true;
}

/* How long worker_spin looks. */
static int64_t worker_spin_ns(const struct worker *w)
{
	return w->spin_score >= WORKER_SPIN_SCORE_LONG ? WORKER_SPIN_LONG_NS
	                                               : WORKER_SPIN_NS;
}

/*
 * Before parking, a worker that was searching keeps looking for a little
 * while (Go's spinning M): work that arrives meanwhile is taken without a
 * futex round trip, which is most of the latency of a request that hops
 * from the reactor to a worker and back.  Still counted as searching, so
 * producers wake nobody meanwhile.  Bounded, so an idle pool still costs
 * nothing.
 *
 * How long: WORKER_SPIN_NS, or WORKER_SPIN_LONG_NS while spin_score says
 * that most idle spells (from finding no work to finding some) are ones
 * only the long spin ends (worker_idle_end).  A request whose commit waits
 * for the disk comes back after 100-250 us, and is then taken by a worker
 * still awake on a CPU still awake, instead of by a futex wake-up of both.
 * Work that mostly comes sooner needs no more than the short spin, and
 * work that mostly comes later (a child process's exit) would make a long
 * one yield at every park for nothing, CPU that the producers of that
 * work need.  And no spin at all while few spells end within it
 * (spin_off): rokd running short commands, whose children exit hundreds
 * of microseconds apart, parked after four spins in five, and those spins
 * were almost a tenth of its CPU time (bench/latency's exec row).  Timers
 * due meanwhile are fired here, since nobody wakes a worker that is not
 * asleep; that includes one that a helper standing in for this worker
 * (monitor.c) armed before it retired, whose unpark finds this worker
 * awake.
 */
static bool worker_spin(struct worker *w)
{
	if (!w->searching || executor.thread_per_core || w->spin_off)
		return false;
	int64_t now = rok_now();
	int64_t until = now + worker_spin_ns(w);
	do {
		/* Yield rather than spin: the threads that will produce the
		 * work (the reactor, a client) may need this very CPU. */
		sched_yield();
		if (!injector_is_empty(&executor.injector) ||
		    !injector_is_empty(&w->inbox) || worker_any_work(false))
			return true;
		now = rok_now();
		/* The wheel's next deadline is read at every turn: a helper
		 * retiring meanwhile may have armed an earlier one. */
		if (now >= timer_next(w->wheel) && worker_fire_timers(w))
			return true;
	} while (now < until && !worker_stopping());
	return false;
}

/*
 * A worker found work: scores the idle spell that this ends, if one ran
 * and no timer ended it (worker_fire_timers).  Up by one for a spell only
 * the long spin ends, down by one for a spell the short spin ends already,
 * down by two for one longer than either; so the long spin lasts while
 * the first kind is clearly the most common.  spin_waste goes up by one
 * for a spell that the worker slept in, down by two for one that its spin
 * ended, or would have (a spell no longer than the spin, wake-up
 * included, when it did not spin): it climbs while more than two spells
 * in three outlast the spin.  Spinning stops when it reaches
 * WORKER_SPIN_WASTE_OFF and starts again once it is down to
 * WORKER_SPIN_WASTE_ON, so that a stray short spell among long ones does
 * not bring back a spin per park.
 */
static void worker_idle_end(struct worker *w)
{
	if (w->idle_since == 0)
		return;
	int64_t spell = rok_now() - w->idle_since;
	w->idle_since = 0;
	if (w->slept && spell > worker_spin_ns(w)) {
		if (w->spin_waste < WORKER_SPIN_WASTE_OFF)
			w->spin_waste++;
		if (w->spin_waste == WORKER_SPIN_WASTE_OFF)
			w->spin_off = true;
	} else {
		w->spin_waste = w->spin_waste > 2 ? w->spin_waste - 2 : 0;
		if (w->spin_waste <= WORKER_SPIN_WASTE_ON)
			w->spin_off = false;
	}
	if (spell > WORKER_SPIN_NS && spell <= WORKER_SPIN_LONG_NS) {
		if (w->spin_score < WORKER_SPIN_SCORE_MAX)
			w->spin_score++;
	} else {
		unsigned down = spell > WORKER_SPIN_LONG_NS ? 2 : 1;
		w->spin_score = w->spin_score > down ? w->spin_score - down : 0;
	}
}

static void worker_park(struct worker *w)
{
	if (w->idle_since == 0) {
		w->idle_since = rok_now();
		w->slept = false;
	}
	if (worker_fire_timers(w) || worker_spin(w))
		return;
	/* Set before the worker shows up as a sleeper, so an unpark that
	 * picks it finds 1 and issues the futex wake.  The inbox is only
	 * announced by worker_unpark, which saw 0 if it ran before the store:
	 * worker_park_set looks once more. */
	(void)worker_park_set(w);   /* worker_sleep reads the word */
	bool last = idle_park(&executor.idle, w->index, w->searching);
	w->searching = false;
	if (last && worker_any_work(true))
		executor_notify();
	worker_count(&w->parks);
	w->slept = true;
	worker_sleep(w);
	if (!idle_unpark_self(&executor.idle, w->index))
		w->searching = true;   /* the notifier counted us searching */
	/* After we count as unparked: see monitor_main's second look. */
	monitor_poke();
}

/*
 * The last searcher to find work wakes another to keep looking, if work
 * is left for it.  Not when none is: a request that hops from the reactor
 * to a worker would wake a second worker every time, only for it to spin
 * and park again, on the CPU the reply needs next.  Work pushed while we
 * searched woke nobody (a searcher counted); either its producer sees our
 * count drop and wakes a worker itself, or we see its work here: the
 * fence pairs with the one in idle_notify (store-buffering, both sides
 * seq_cst).
 */
static void worker_found_work(struct worker *w)
{
	if (!w->searching)
		return;
	w->searching = false;
	if (!idle_end_search(&executor.idle))
		return;
	atomic_thread_fence(memory_order_seq_cst);
	if (worker_any_work(true))
		executor_notify();   /* keep someone looking */
}

/* Pins the calling thread to the CPU of pool worker `index`. */
static void worker_pin_cpu(unsigned index)
{
	cpu_set_t allowed, one;
	int seen = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
		return;
	int want = (int)(index % (unsigned)CPU_COUNT(&allowed));
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (!CPU_ISSET(cpu, &allowed))
			continue;
		if (seen++ == want) {
			CPU_ZERO(&one);
			CPU_SET(cpu, &one);
			/* Best effort: an unpinned worker still works. */
			(void)pthread_setaffinity_np(pthread_self(), sizeof(one),
			                             &one);
			return;
		}
	}
}

void *worker_main(void *arg)
{
	struct worker *w = arg;

	executor_tls.worker = w;
	atomic_store_explicit(&w->tid, gettid(), memory_order_relaxed);
	(void)pthread_setname_np(pthread_self(), "rok-worker");
	if (executor.thread_per_core)
		worker_pin_cpu(w->index);
	while (!worker_stopping()) {
		if (w->tick % WORKER_TIMER_INTERVAL == 0)
			worker_fire_timers(w);
		rok_task *t = worker_next(w);
		if (t == NULL)
			t = worker_steal(w);
		if (t != NULL) {
			worker_idle_end(w);
			worker_found_work(w);
			worker_run_task(w, t);
			continue;
		}
		worker_park(w);
	}
	frame_cache_flush(&executor_tls.cache);
	executor_tls.worker = NULL;
	return NULL;
}

/* A helper has nothing queued of its own (owner only). */
static bool worker_helper_idle(struct worker *h)
{
	return deque_len(&h->deque) == 0 && h->pinned.len == 0 &&
	       atomic_load_explicit(&h->lifo, memory_order_relaxed) == NULL &&
	       atomic_load_explicit(&h->pinned_live, memory_order_relaxed) == 0 &&
	       injector_is_empty(&h->inbox) &&
	       injector_is_empty(&h->shared_inbox);
}

/* Sleeps up to 1 ms, or until unparked or the stuck wheel's next timer. */
static void worker_helper_nap(struct worker *h)
{
	int64_t next = timer_next(h->wheel), limit = rok_now() + ROK_MS(1);
	struct timespec ts;

	if (next > limit)
		next = limit;
	int64_t d = next - rok_now();
	if (d <= 0)
		return;
	if (!worker_park_set(h))
		return;
	ts.tv_sec = d / 1000000000;
	ts.tv_nsec = d % 1000000000;
	syscall(SYS_futex, &h->park_word, FUTEX_WAIT_PRIVATE, 1, &ts, NULL, 0);
	atomic_store(&h->park_word, 0);
}

/* The tasks a helper runs besides its own queues'. */
static rok_task *worker_helper_take(struct worker *h, bool away)
{
	if (executor.thread_per_core)
		/* Only its root's, and only while the worker it stands in
		 * for is away: then that one takes them again. */
		return away ? worker_tpc_steal(h, true) : NULL;
	/* The stuck worker's LIFO task cannot wait for it. */
	rok_task *t = atomic_exchange_explicit(&h->stuck->lifo, NULL,
	                                       memory_order_acquire);
	return t != NULL ? t : worker_steal_from_pool(h);
}

void *worker_helper_main(void *arg)
{
	struct worker *h = arg, *stuck = h->stuck;
	/* The value the monitor saw, not a fresh read: the stuck poll may
	 * have ended before this thread started. */
	uint32_t stuck_seq = h->stuck_seq;
	struct worker *root = atomic_load_explicit(&h->root,
	                                           memory_order_relaxed);

	(void)pthread_setname_np(pthread_self(), "rok-helper");
	executor_tls.worker = h;
	atomic_store_explicit(&h->tid, gettid(), memory_order_relaxed);
	if (executor.thread_per_core)
		worker_pin_cpu(root->index);   /* it continues the root's work */
	while (!worker_stopping()) {
		if (h->tick % WORKER_TIMER_INTERVAL == 0)
			worker_fire_timers(h);
		rok_task *t = worker_next(h);
		if (t == NULL)
			t = worker_helper_take(
				h, atomic_load_explicit(&stuck->poll_seq,
				                        memory_order_relaxed) ==
				           stuck_seq);
		if (t != NULL) {
			worker_run_task(h, t);
			continue;
		}
		if (worker_fire_timers(h))
			continue;
		if (atomic_load_explicit(&stuck->poll_seq, memory_order_relaxed) !=
		            stuck_seq &&
		    worker_helper_idle(h))
			break;   /* the stuck worker is back: retire */
		worker_count(&h->parks);
		worker_helper_nap(h);
	}
	frame_cache_flush(&executor_tls.cache);
	executor_tls.worker = NULL;
	atomic_store(&h->retired, true);
	/* The wheel's owner may sleep past timers armed meanwhile. */
	worker_unpark(root);
	return NULL;
}

void worker_run_guest(struct worker *w, rok_task *root)
{
	while (!rok_task_is_finished(root) ||
	       atomic_load_explicit(&w->pinned_live, memory_order_relaxed) > 0) {
		if (++w->tick % WORKER_TIMER_INTERVAL == 0)
			worker_fire_timers(w);
		rok_task *t = runq_pop(&w->pinned);
		if (t == NULL)
			t = worker_take_remote(w);
		if (t != NULL) {
			task_run(t);
			continue;
		}
		if (worker_fire_timers(w))
			continue;
		(void)worker_park_set(w);   /* worker_sleep reads the word */
		worker_sleep(w);
	}
}

rok_task *worker_take_any(struct worker *w)
{
	rok_task *t = atomic_exchange_explicit(&w->lifo, NULL,
	                                       memory_order_acquire);

	if (t != NULL)
		return t;
	if ((t = runq_pop(&w->pinned)) != NULL ||
	    (t = deque_pop(&w->timed)) != NULL ||
	    (t = deque_pop(&w->deque)) != NULL)
		return t;
	return worker_take_remote(w);
}
