/*
 * monitor.c — blocking detection and hand-off (SPEC A6), after Go's sysmon.
 *
 * A task that makes a blocking call holds its worker for as long as the call
 * takes; the tasks queued behind it on that worker must not wait for it.
 * The monitor thread wakes every 2 to 10 ms and reads each worker's
 * poll_seq, which is odd while a poll runs.  A worker seen in the same poll
 * at two consecutive looks, whose thread the kernel reports asleep (state S
 * or D in /proc: blocked in a call, not merely preempted or computing), is
 * stuck: the monitor starts a helper, a fresh OS thread with a worker struct
 * of its own, which runs what the stuck worker cannot: its LIFO task, its
 * deque (by stealing, half at a time, like any thief), the injector, and its
 * timer wheel, which the helper fires in its place.  When the stuck call
 * returns, the worker goes on with its own thread, and the helper retires as
 * soon as it has nothing queued of its own.  So the queue changes threads, as
 * in Go's hand-off, but the stuck thread keeps its worker: nothing the stuck
 * poll does after its blocking call returns can race with another thread on
 * the worker's owner-only queues.
 *
 * Helpers are watched like workers: a helper that gets stuck in turn gets a
 * helper of its own, and every worker and helper may be stolen from, so no
 * task waits behind any blocked thread.  Helper structs are kept for reuse
 * and freed only at stop, which lets thieves read them without a lock.
 *
 * A long poll that is not blocked (computing, or preempted) gets no helper,
 * but its LIFO task is opened to thieves and a parked worker is woken for
 * it (monitor_look), so that the slot cannot starve it (SPEC A2).
 *
 * Not handed off: a worker with spawn_local tasks pinned to it (they may only
 * run on its thread).  Guests (block_on threads) are not watched.
 *
 * Thread-per-core workers are handed off too (SPEC A7: a blocked worker may
 * continue on another OS thread), unless spawn_local tasks are pinned to
 * them as above.  Every task is pinned to a worker there, so the helper
 * runs the stuck worker's tasks only, never another worker's: it stands in
 * for the worker (same home index, same CPU) and takes from its shared
 * inbox and its deque, where such a worker keeps the tasks that are pinned
 * to it but not to its thread (worker.c).  Once its blocking call returns,
 * the stuck task runs on until its poll ends beside the tasks the helper
 * runs: while a hand-off lasts, two tasks of one worker may run at once
 * (SPEC A7 promises a task a worker, not a thread).
 *
 * Each helper has a `root`, the pool worker at the end of its chain of
 * stuck workers, whose timers it fires and, in thread-per-core mode, whose
 * tasks it runs.
 *
 * An idle pool costs nothing: once every worker was parked and no helper ran
 * at MONITOR_IDLE_LOOKS looks in a row, the monitor sleeps until a worker
 * wakes up (monitor_poke).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"
#include "monitor.h"
#include "worker.h"

/*
 * The time between looks: MONITOR_PERIOD while some worker is in a long
 * poll (seen in the same poll at two looks), doubled after each look that
 * found none, up to MONITOR_PERIOD_MAX.  rokd's workers run short polls
 * between waits, and looks every 2 ms cost it 6 to 10 % of its CPU in
 * exec-heavy loads on a 2-vCPU VM (each look may wake an idle vCPU).  The
 * price: a call that blocks in a quiet spell is handed off after 10 to 20
 * ms instead of 2 to 4, as Go's sysmon, which backs off to 10 ms, does.
 */
#define MONITOR_PERIOD ROK_MS(2)
#define MONITOR_PERIOD_MAX ROK_MS(10)
/* Looks that find the pool all idle before the monitor sleeps until poked.
 * A pool that parks between requests (a daemon serving one client) would
 * otherwise have each unpark poke it: a futex wake on the worker's way to
 * its task, and a wake-up of this thread, per request.  The price: a burst
 * after a quiet spell costs up to 8 more looks (80 ms) before the sleep. */
#define MONITOR_IDLE_LOOKS 8

static struct {
	pthread_t thread;
	bool running;
	_Atomic uint32_t word;          /* futex: bumped to wake the monitor */
	_Atomic bool sleeping;          /* asleep until poked */
	_Atomic unsigned handoffs;      /* helpers started, for stats */
} monitor;

static bool monitor_stopping(void)
{
	return atomic_load_explicit(&executor.state, memory_order_relaxed) ==
	       EXECUTOR_STOPPING;
}

void (*monitor_sleep_hook)(void);

/*
 * Sleeps on the futex word until it differs from `v`, the value read before
 * the caller's last look at the state it waits for: a poke that came after
 * that look has bumped the word, so the wait returns at once.  (Reading the
 * word here, after the look, would take in such a poke's bump and sleep
 * through it.)
 */
static void monitor_wait(uint32_t v, const struct timespec *ts)
{
	if (!monitor_stopping())
		syscall(SYS_futex, &monitor.word, FUTEX_WAIT_PRIVATE, v, ts,
		        NULL, 0);
}

void monitor_poke(void)
{
	/* seq_cst, pairing with monitor_main: the caller counted itself as
	 * unparked (seq_cst) before this load; the monitor stores `sleeping`
	 * before its second look at the count.  One of the two sees the
	 * other. */
	if (atomic_load(&monitor.sleeping) &&
	    atomic_exchange(&monitor.sleeping, false)) {
		atomic_fetch_add(&monitor.word, 1);
		syscall(SYS_futex, &monitor.word, FUTEX_WAKE_PRIVATE, 1, NULL,
		        NULL, 0);
	}
}

/* True if the kernel says the thread sleeps in a call (state S or D). */
static bool monitor_thread_asleep(pid_t tid)
{
	char path[64], buf[256];

	if (tid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "tid (comm) S ...": the comm may hold spaces and parentheses. */
	char *p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' && (p[2] == 'S' || p[2] == 'D');
}

/*
 * A helper struct for `root`'s chain: one to reuse, or a new one (monitor
 * thread only).  In thread-per-core mode one that last served the same root
 * is preferred, since other helpers read `root` without a lock to find
 * their root's work (worker_tpc_steal), and a change is only a hint to them.
 */
static struct worker *monitor_helper_struct(struct worker *root)
{
	unsigned n = atomic_load_explicit(&executor.nhelpers,
	                                  memory_order_relaxed);
	struct worker *h, *spare = NULL;

	for (unsigned i = 0; i < n; i++) {
		h = executor.helpers[i];
		if (h->active)
			continue;
		if (atomic_load_explicit(&h->root, memory_order_relaxed) == root)
			return h;
		if (spare == NULL)
			spare = h;
	}
	if (spare != NULL) {
		atomic_store_explicit(&spare->root, root, memory_order_relaxed);
		return spare;
	}
	if (n == EXECUTOR_MAX_HELPERS || executor_slot_take(&h, false) < 0)
		return NULL;
	h->helper = true;
	atomic_store_explicit(&h->root, root, memory_order_relaxed);
	executor.helpers[n] = h;
	/* Release: thieves that read the new count see the struct. */
	atomic_store_explicit(&executor.nhelpers, n + 1, memory_order_release);
	return h;
}

static void monitor_hand_off(struct worker *stuck, uint32_t seq)
{
	struct worker *root = atomic_load_explicit(&stuck->root,
	                                           memory_order_relaxed);
	struct worker *h = monitor_helper_struct(root);

	if (h == NULL)
		return;   /* none to be had: look again next period */
	h->stuck = stuck;
	h->stuck_seq = seq;
	h->wheel = &root->timers;
	/* Thread-per-core: it runs the root's tasks as its own. */
	h->home = executor.thread_per_core ? root->index : h->index;
	h->mon_seen = atomic_load_explicit(&h->poll_seq, memory_order_relaxed);
	atomic_store(&h->retired, false);
	if (executor_thread_create(&h->thread, worker_helper_main, h) < 0)
		return;
	h->active = true;
	stuck->helped_by = h;
	atomic_fetch_add_explicit(&monitor.handoffs, 1, memory_order_relaxed);
}

/* Joins a helper whose thread retired, making its struct reusable. */
static void monitor_reap(struct worker *h)
{
	if (!h->active || !atomic_load(&h->retired))
		return;
	pthread_join(h->thread, NULL);
	h->active = false;
	if (h->stuck->helped_by == h)
		h->stuck->helped_by = NULL;
	h->stuck = NULL;
	h->wheel = &h->timers;
}

/* One look at a worker or an active helper: true if it is in a long poll
 * (the same poll as at the last look) that no helper stands in for yet. */
static bool monitor_look(struct worker *w)
{
	uint32_t seq = atomic_load_explicit(&w->poll_seq, memory_order_relaxed);
	bool long_poll = (seq & 1) && seq == w->mon_seen;

	if (long_poll) {
		/* Its LIFO task may be stolen now, and someone parked is
		 * woken to do it (worker.c).  At each look, as the slot may
		 * fill during the poll. */
		atomic_store_explicit(&w->long_poll, seq, memory_order_relaxed);
		if (atomic_load_explicit(&w->lifo, memory_order_relaxed) != NULL)
			executor_notify();
	}
	if (long_poll && w->helped_by == NULL &&
	    atomic_load_explicit(&w->pinned_live, memory_order_relaxed) == 0 &&
	    monitor_thread_asleep(atomic_load_explicit(&w->tid,
	                                               memory_order_relaxed)))
		monitor_hand_off(w, seq);
	w->mon_seen = seq;
	/* A call already handed off does not keep the looks at 2 ms: its
	 * helper takes the LIFO task itself, and is looked at in turn. */
	return long_poll && w->helped_by == NULL;
}

static bool monitor_all_idle(void)
{
	unsigned n = atomic_load_explicit(&executor.nhelpers,
	                                  memory_order_relaxed);

	for (unsigned i = 0; i < n; i++)
		if (executor.helpers[i]->active)
			return false;
	return idle_parked(&executor.idle) == executor.nworkers;
}

static void *monitor_main(void *arg)
{
	struct timespec period = { 0, MONITOR_PERIOD };
	unsigned idle_looks = 0;

	(void)arg;
	(void)pthread_setname_np(pthread_self(), "rok-monitor");
	while (!monitor_stopping()) {
		idle_looks = monitor_all_idle() ? idle_looks + 1 : 0;
		if (idle_looks >= MONITOR_IDLE_LOOKS) {
			idle_looks = 0;
			/* Before `sleeping` is set, so any poke that sees it
			 * set bumps the word past v. */
			uint32_t v = atomic_load(&monitor.word);
			atomic_store(&monitor.sleeping, true);
			/*
			 * A worker that woke between the check and the store
			 * poked nobody: check again before sleeping for good.
			 * The fence orders the store above before the loads of
			 * the second look (monitor_all_idle reads relaxed); it
			 * pairs with the seq_cst increment of the unparked
			 * count and the seq_cst load in monitor_poke: either
			 * the look sees the worker unparked, or the poke sees
			 * `sleeping` and bumps the word.
			 */
			atomic_thread_fence(memory_order_seq_cst);
			if (monitor_all_idle()) {
				if (monitor_sleep_hook != NULL)
					monitor_sleep_hook();
				monitor_wait(v, NULL);
			}
			atomic_store(&monitor.sleeping, false);
			continue;
		}
		monitor_wait(atomic_load(&monitor.word), &period);
		unsigned n = atomic_load_explicit(&executor.nhelpers,
		                                  memory_order_relaxed);
		bool long_polls = false;
		for (unsigned i = 0; i < n; i++)
			monitor_reap(executor.helpers[i]);
		for (unsigned i = 0; i < executor.nworkers; i++)
			long_polls |= monitor_look(atomic_load_explicit(
				&executor.workers[i], memory_order_relaxed));
		for (unsigned i = 0; i < n; i++)
			if (executor.helpers[i]->active)
				long_polls |= monitor_look(executor.helpers[i]);
		period.tv_nsec = long_polls ? MONITOR_PERIOD
		                 : period.tv_nsec * 2 > MONITOR_PERIOD_MAX
		                 ? MONITOR_PERIOD_MAX : period.tv_nsec * 2;
	}
	return NULL;
}

int monitor_start(void)
{
	monitor.running = false;
	atomic_store_explicit(&monitor.handoffs, 0, memory_order_relaxed);
	if (executor.nworkers == 0)
		return 0;
	atomic_store(&monitor.sleeping, false);
	int err = executor_thread_create(&monitor.thread, monitor_main, NULL);
	if (err < 0)
		return err;
	monitor.running = true;
	return 0;
}

void monitor_stop(void)
{
	if (!monitor.running)
		return;
	atomic_fetch_add(&monitor.word, 1);
	syscall(SYS_futex, &monitor.word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	pthread_join(monitor.thread, NULL);
	unsigned n = atomic_load_explicit(&executor.nhelpers,
	                                  memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		struct worker *h = executor.helpers[i];
		if (h->active) {
			worker_unpark(h);
			pthread_join(h->thread, NULL);
			h->active = false;
		}
	}
	monitor.running = false;
}

void monitor_free(void)
{
	/* The helper structs sit in executor slots: executor.c frees them. */
	atomic_store_explicit(&executor.nhelpers, 0, memory_order_relaxed);
	memset(executor.helpers, 0, sizeof(executor.helpers));
	atomic_store_explicit(&monitor.handoffs, 0, memory_order_relaxed);
}

unsigned monitor_helpers(void)
{
	return atomic_load_explicit(&monitor.handoffs, memory_order_relaxed);
}
