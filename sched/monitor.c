/*
 * monitor.c — blocking detection and hand-off (SPEC A6), after Go's sysmon.
 *
 * A task that makes a blocking call holds its worker for as long as the call
 * takes; the tasks queued behind it on that worker must not wait for it.
 * The monitor thread wakes every MONITOR_PERIOD and reads each pool worker's
 * poll_seq, which is odd while a poll runs.  A worker seen in the same poll
 * at two consecutive looks (between one and two periods) is stuck: the
 * monitor starts a helper, a fresh OS thread with a worker struct of its own
 * (in a spare slot of executor.workers), which runs what the stuck worker
 * cannot: its LIFO task, its deque (by stealing, half at a time, like any
 * thief), the injector, and its timer wheel, which the helper fires in its
 * place.  When the stuck call returns, the worker goes on with its own
 * thread, and the helper retires as soon as it has nothing queued of its own.
 * So the queue changes threads, as in Go's hand-off, but the stuck thread
 * keeps its worker: nothing the stuck poll does after its blocking call
 * returns can race with another thread on the worker's owner-only queues.
 *
 * Not handed off: a worker with spawn_local tasks pinned to it (they may only
 * run on its thread), and thread-per-core workers, whose every task is
 * pinned.  Guests (block_on threads) are not watched.
 *
 * An idle pool costs nothing: when every worker is parked and no helper runs,
 * the monitor sleeps until a worker wakes up (monitor_poke).
 */
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"
#include "monitor.h"
#include "worker.h"

#define MONITOR_PERIOD ROK_MS(2)

static struct {
	pthread_t thread;
	bool running;
	_Atomic uint32_t word;          /* futex: bumped to wake the monitor */
	_Atomic bool sleeping;          /* asleep until poked */
	uint32_t *seen;                 /* poll_seq at the last look */
	struct worker **helper;         /* helper per pool worker, or NULL */
	_Atomic unsigned helpers;       /* helpers started, for stats */
} monitor;

static bool monitor_stopping(void)
{
	return atomic_load_explicit(&executor.state, memory_order_relaxed) ==
	       EXECUTOR_STOPPING;
}

static void monitor_wait(const struct timespec *ts)
{
	uint32_t v = atomic_load(&monitor.word);

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

/* Joins a helper that retired and gives its slot back. */
static void monitor_reap(unsigned i)
{
	struct worker *h = monitor.helper[i];

	if (h == NULL)
		return;
	if (!atomic_load(&h->retired))
		return;
	pthread_join(h->thread, NULL);
	monitor.helper[i] = NULL;
	executor_slot_put(h);
}

static void monitor_hand_off(unsigned i, struct worker *stuck, uint32_t seq)
{
	struct worker *h;

	if (executor_slot_take(&h, false) < 0)
		return;   /* no slot or no memory: look again next period */
	atomic_store(&h->retired, false);
	h->stuck = stuck;
	h->stuck_seq = seq;
	h->wheel = stuck->wheel;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = pthread_create(&h->thread, NULL, worker_helper_main, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err != 0) {
		executor_slot_put(h);
		return;
	}
	monitor.helper[i] = h;
	atomic_fetch_add_explicit(&monitor.helpers, 1, memory_order_relaxed);
}

static bool monitor_all_idle(void)
{
	for (unsigned i = 0; i < executor.nworkers; i++)
		if (monitor.helper[i] != NULL)
			return false;
	return idle_parked(&executor.idle) == executor.nworkers;
}

static void *monitor_main(void *arg)
{
	const struct timespec period = { 0, MONITOR_PERIOD };

	(void)arg;
	while (!monitor_stopping()) {
		if (monitor_all_idle()) {
			atomic_store(&monitor.sleeping, true);
			/* A worker that woke between the check and the store
			 * poked nobody: check again before sleeping for good. */
			if (monitor_all_idle())
				monitor_wait(NULL);
			atomic_store(&monitor.sleeping, false);
			continue;
		}
		monitor_wait(&period);
		for (unsigned i = 0; i < executor.nworkers; i++) {
			struct worker *w = atomic_load_explicit(
				&executor.workers[i], memory_order_relaxed);
			uint32_t seq = atomic_load_explicit(&w->poll_seq,
			                                    memory_order_relaxed);
			monitor_reap(i);
			if ((seq & 1) && seq == monitor.seen[i] &&
			    monitor.helper[i] == NULL &&
			    atomic_load_explicit(&w->pinned_live,
			                         memory_order_relaxed) == 0)
				monitor_hand_off(i, w, seq);
			monitor.seen[i] = seq;
		}
	}
	return NULL;
}

int monitor_start(void)
{
	unsigned n = executor.nworkers;

	monitor.running = false;
	if (executor.thread_per_core || n == 0)
		return 0;   /* every task is pinned: nothing to hand off */
	monitor.seen = calloc(n, sizeof(*monitor.seen));
	monitor.helper = calloc(n, sizeof(*monitor.helper));
	if (monitor.seen == NULL || monitor.helper == NULL) {
		free(monitor.seen);
		free(monitor.helper);
		return -ENOMEM;
	}
	atomic_store(&monitor.sleeping, false);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = -pthread_create(&monitor.thread, NULL, monitor_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err < 0) {
		free(monitor.seen);
		free(monitor.helper);
		return err;
	}
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
	for (unsigned i = 0; i < executor.nworkers; i++)
		if (monitor.helper[i] != NULL) {
			worker_unpark(monitor.helper[i]);
			pthread_join(monitor.helper[i]->thread, NULL);
		}
	monitor.running = false;
}

void monitor_free(void)
{
	atomic_store_explicit(&monitor.helpers, 0, memory_order_relaxed);
	free(monitor.seen);
	free(monitor.helper);
	monitor.seen = NULL;
	monitor.helper = NULL;
}

unsigned monitor_helpers(void)
{
	return atomic_load_explicit(&monitor.helpers, memory_order_relaxed);
}
