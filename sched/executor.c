/*
 * executor.c — the process's executor: start, stop, block_on, the public
 * spawn calls, and per-thread state.
 *
 * Start creates the pool workers and their threads (signals blocked, so a
 * daemon's signal handling stays on its main thread).  Stop marks the
 * executor STOPPING, which makes every worker leave its loop, joins the
 * threads and then, alone on the calling thread, drains the runtime: it
 * cancels every unfinished task it finds in the frame slabs and runs
 * whatever is queued until nothing is left, so every started task's cleanup
 * runs once.  Tasks spawned during that drain are born cancelled.  Then all
 * memory is freed.
 *
 * Lock order: executor.lock, then frame.c's depot lock.  Neither is taken on
 * a spawn, wake or poll.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blocking.h"
#include "executor.h"
#include "monitor.h"
#include "reactor.h"
#include "task.h"
#include "worker.h"

#define EXECUTOR_ID_BLOCK 1024

struct executor executor = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.slot_lock = PTHREAD_MUTEX_INITIALIZER,
	.next_id = 1,
};

_Thread_local struct executor_thread executor_tls
	__attribute__((tls_model("initial-exec")));

static unsigned executor_nguests;

int rok_cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (int)n : 1;
}

int rok_workers(void)
{
	return executor_tls.worker != NULL ? (int)executor.nworkers : 1;
}

bool rok_on_pool_worker(void)
{
	const struct worker *w = executor_tls.worker;

	return w != NULL && !w->guest && !w->helper && !executor.thread_per_core;
}

int executor_thread_create(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = pthread_create(thread, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -err;
}

int executor_env_uint(const char *name, unsigned lo, unsigned hi,
                      unsigned *out)
{
	const char *s = getenv(name);
	char *end;

	if (s == NULL || *s == '\0')
		return 0;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

static void executor_free_locked(void)
{
	unsigned total = executor.nworkers + EXECUTOR_MAX_GUESTS;

	if (executor.workers != NULL) {
		for (unsigned i = 0; i < total; i++)
			worker_free(atomic_load_explicit(&executor.workers[i],
			                                 memory_order_relaxed));
		free((void *)executor.workers);
		executor.workers = NULL;
	}
	idle_done(&executor.idle);
	atomic_store_explicit(&executor.injector.depth, 0, memory_order_relaxed);
	atomic_store_explicit(&executor.injector.head, NULL,
	                      memory_order_relaxed);
	executor.nworkers = 0;
}

/* Joins the first `n` pool threads after telling them to stop. */
static void executor_join(unsigned n)
{
	atomic_store(&executor.state, EXECUTOR_STOPPING);
	for (unsigned i = 0; i < n; i++)
		worker_unpark(atomic_load_explicit(&executor.workers[i],
		                                   memory_order_relaxed));
	for (unsigned i = 0; i < n; i++) {
		struct worker *w = atomic_load_explicit(&executor.workers[i],
		                                        memory_order_relaxed);
		pthread_join(w->thread, NULL);
	}
}

static int executor_start_locked(void)
{
	unsigned n = (unsigned)rok_cpu_count(), tpc = 0, lifo = 1;
	int err;

	if (n > EXECUTOR_MAX_WORKERS)
		n = EXECUTOR_MAX_WORKERS;
	if ((err = executor_env_uint("ROK_WORKERS", 1, EXECUTOR_MAX_WORKERS,
	                             &n)) < 0 ||
	    (err = executor_env_uint("ROK_THREAD_PER_CORE", 0, 1, &tpc)) < 0 ||
	    (err = executor_env_uint("ROK_LIFO", 0, 1, &lifo)) < 0)
		return err;
	executor.nworkers = n;
	executor.thread_per_core = tpc != 0;
	executor.lifo = lifo != 0;
	executor.workers = calloc(n + EXECUTOR_MAX_GUESTS,
	                          sizeof(*executor.workers));
	if (executor.workers == NULL || idle_init(&executor.idle, n) < 0) {
		executor_free_locked();
		return -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		struct worker *w = worker_new((uint16_t)i, false);
		if (w == NULL) {
			executor_free_locked();
			return -ENOMEM;
		}
		atomic_store_explicit(&executor.workers[i], w,
		                      memory_order_relaxed);
	}

	/* Workers leave signals to the program's own threads. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* Release: workers and spawners that read RUNNING see the set-up. */
	atomic_store_explicit(&executor.state, EXECUTOR_RUNNING,
	                      memory_order_release);
	for (unsigned i = 0; i < n; i++) {
		struct worker *w = atomic_load_explicit(&executor.workers[i],
		                                        memory_order_relaxed);
		err = -pthread_create(&w->thread, NULL, worker_main, w);
		if (err < 0) {
			executor_join(i);
			executor_free_locked();
			atomic_store(&executor.state, EXECUTOR_STOPPED);
			break;
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err == 0 && (err = monitor_start()) < 0) {
		executor_join(n);
		executor_free_locked();
		atomic_store(&executor.state, EXECUTOR_STOPPED);
	}
	return err;
}

int rok_start(void)
{
	pthread_mutex_lock(&executor.lock);
	int err = atomic_load(&executor.state) == EXECUTOR_STOPPED
	                  ? executor_start_locked()
	                  : -EALREADY;
	pthread_mutex_unlock(&executor.lock);
	return err;
}

int executor_ensure(void)
{
	if (executor_running())
		return 0;
	if (atomic_load(&executor.state) == EXECUTOR_STOPPING)
		return -ESHUTDOWN;
	int err = rok_start();
	return err == -EALREADY ? (executor_running() ? 0 : -ESHUTDOWN) : err;
}

static void executor_cancel_cb(void *frame, void *arg)
{
	if (task_cancel_for_stop(frame))
		++*(size_t *)arg;
}

/* Runs queued tasks of every worker (pool and helpers) until all queues
 * are empty. */
static void executor_drain_queues(void)
{
	bool progress;

	do {
		progress = false;
		for (unsigned i = 0; i < executor.nworkers + EXECUTOR_MAX_GUESTS;
		     i++) {
			struct worker *w = atomic_load_explicit(
				&executor.workers[i], memory_order_relaxed);
			rok_task *t;
			if (w == NULL)
				continue;
			while ((t = worker_take_any(w)) != NULL) {
				task_run(t);
				progress = true;
			}
		}
	} while (progress);
}

int rok_stop(void)
{
	if (executor_tls.worker != NULL || reactor_on_thread() ||
	    blocking_on_thread())
		return -EDEADLK;
	pthread_mutex_lock(&executor.lock);
	if (atomic_load(&executor.state) != EXECUTOR_RUNNING) {
		pthread_mutex_unlock(&executor.lock);
		return 0;
	}
	if (executor_nguests > 0) {
		pthread_mutex_unlock(&executor.lock);
		return -EBUSY;
	}
	blocking_shutdown();    /* finishing jobs wake joiners: workers run */
	executor_join(executor.nworkers);
	blocking_reopen();      /* STOPPING refuses new jobs from here on */
	monitor_stop();
	/* Before the drain, so that no I/O wake-up races it. */
	reactor_stop();

	/* Alone now: act as worker 0 and drive every task to its end. */
	executor_tls.worker = atomic_load_explicit(&executor.workers[0],
	                                           memory_order_relaxed);
	/*
	 * Each round cancels what is left and runs what that queued.  A task
	 * no queue holds (woken by nothing, say a poll that was left RUNNING)
	 * would keep the count up forever: stop once a round ends nothing.
	 */
	size_t live, before = SIZE_MAX;
	for (;;) {
		live = 0;
		frame_for_each_record(executor_cancel_cb, &live);
		executor_drain_queues();
		if (live == 0 || live >= before)
			break;
		before = live;
	}
	executor_tls.worker = NULL;

	reactor_free();
	executor_free_locked();
	monitor_free();
	executor.retired_polls = executor.retired_steals = 0;
	frame_release_all();
	atomic_store_explicit(&executor.regs_foreign, 0, memory_order_relaxed);
	atomic_store(&executor.state, EXECUTOR_STOPPED);
	pthread_mutex_unlock(&executor.lock);
	return 0;
}

uint64_t executor_next_id(void)
{
	struct executor_thread *me = &executor_tls;

	if (me->id_next == me->id_end) {
		me->id_next = atomic_fetch_add_explicit(&executor.next_id,
		                                        EXECUTOR_ID_BLOCK,
		                                        memory_order_relaxed);
		me->id_end = me->id_next + EXECUTOR_ID_BLOCK;
	}
	return me->id_next++;
}

void executor_regs_add(int64_t delta)
{
	struct worker *w = executor_tls.worker;

	if (w != NULL)
		/* Owner-written counter: load and store, no RMW. */
		atomic_store_explicit(&w->regs,
		                      atomic_load_explicit(&w->regs,
		                                           memory_order_relaxed) +
		                              delta,
		                      memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&executor.regs_foreign, delta,
		                          memory_order_relaxed);
}

/* Pinning: the calling pool worker in thread-per-core mode, else a worker
 * chosen round robin; TASK_HOME_ANY when tasks may move. */
static uint16_t executor_home_for_spawn(void)
{
	struct worker *me = executor_tls.worker;

	if (!executor.thread_per_core)
		return TASK_HOME_ANY;
	if (me != NULL && !me->guest)
		return me->home;   /* a helper's are its root's */
	return (uint16_t)(atomic_fetch_add_explicit(&executor.next_home, 1,
	                                            memory_order_relaxed) %
	                  executor.nworkers);
}

/* 0: spawn; 1: spawn cancelled (the drain at stop); <0: refuse. */
static int executor_spawn_mode(void)
{
	int err = executor_ensure();

	if (err == -ESHUTDOWN && executor_tls.worker != NULL)
		return 1;
	return err;
}

int rok_spawn(rok_task **out, rok_poll_fn poll, const void *frame,
              size_t size)
{
	int mode = executor_spawn_mode();

	if (mode < 0) {
		if (out != NULL)
			*out = NULL;
		return mode;
	}
	return task_spawn(out, poll, frame, size, executor_home_for_spawn(),
	                  false, mode == 1);
}

int rok_spawn_local(rok_task **out, rok_poll_fn poll, const void *frame,
                    size_t size)
{
	struct worker *me = executor_tls.worker;

	if (out != NULL)
		*out = NULL;
	if (me == NULL)
		return -EPERM;
	int mode = executor_spawn_mode();
	if (mode < 0)
		return mode;
	return task_spawn(out, poll, frame, size, me->index, true, mode == 1);
}

int executor_slot_take(struct worker **out, bool guest)
{
	int err = -EAGAIN;

	pthread_mutex_lock(&executor.slot_lock);
	for (unsigned i = executor.nworkers;
	     i < executor.nworkers + EXECUTOR_MAX_GUESTS; i++) {
		if (atomic_load_explicit(&executor.workers[i],
		                         memory_order_relaxed) != NULL)
			continue;
		struct worker *w = worker_new((uint16_t)i, guest);
		if (w == NULL) {
			err = -ENOMEM;
			break;
		}
		atomic_store_explicit(&executor.workers[i], w,
		                      memory_order_relaxed);
		*out = w;
		err = 0;
		break;
	}
	pthread_mutex_unlock(&executor.slot_lock);
	return err;
}

/* Gives a guest's slot back and frees the worker (its queues are empty). */
static void executor_slot_put(struct worker *w)
{
	pthread_mutex_lock(&executor.slot_lock);
	atomic_store_explicit(&executor.workers[w->index], NULL,
	                      memory_order_relaxed);
	/* Its counts live on in the shared totals. */
	atomic_fetch_add_explicit(&executor.regs_foreign,
	                          atomic_load_explicit(&w->regs,
	                                               memory_order_relaxed),
	                          memory_order_relaxed);
	executor.retired_polls += atomic_load_explicit(&w->polls,
	                                               memory_order_relaxed);
	executor.retired_steals += atomic_load_explicit(&w->steals,
	                                                memory_order_relaxed);
	pthread_mutex_unlock(&executor.slot_lock);
	worker_free(w);
}

/* Takes a guest slot for the calling thread: 0 or -errno. */
static int executor_guest_enter(struct worker **out)
{
	int err;

	pthread_mutex_lock(&executor.lock);
	if (!executor_running())
		err = -ESHUTDOWN;
	else if ((err = executor_slot_take(out, true)) == 0)
		executor_nguests++;
	pthread_mutex_unlock(&executor.lock);
	return err;
}

static void executor_guest_leave(struct worker *w)
{
	pthread_mutex_lock(&executor.lock);
	executor_nguests--;
	pthread_mutex_unlock(&executor.lock);
	executor_slot_put(w);
}

int rok_block_on(rok_poll_fn poll, const void *frame, size_t size,
                 void **result)
{
	struct worker *w;
	rok_task *root;
	int err;

	if (result != NULL)
		*result = NULL;
	if (executor_tls.worker != NULL)
		return -EDEADLK;
	if ((err = executor_ensure()) < 0 ||
	    (err = executor_guest_enter(&w)) < 0)
		return err;
	executor_tls.worker = w;
	err = task_spawn(&root, poll, frame, size, w->index, true, false);
	if (err == 0) {
		worker_run_guest(w, root);
		err = task_result(root, result);
		rok_task_unref(root);
	}
	executor_tls.worker = NULL;
	worker_guest_quiesce(w);   /* wakers still touching w: see there */
	executor_guest_leave(w);
	return err;
}

void rok_stats_get(struct rok_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&executor.lock);
	pthread_mutex_lock(&executor.slot_lock);   /* helpers come and go */
	if (executor_running()) {
		st->workers = executor.nworkers;
		st->searching = idle_searching(&executor.idle);
		st->parked = idle_parked(&executor.idle);
		for (unsigned i = 0; i < executor.nworkers + EXECUTOR_MAX_GUESTS;
		     i++) {
			struct worker *w = atomic_load_explicit(
				&executor.workers[i], memory_order_relaxed);
			if (w == NULL)
				continue;
			st->polls += atomic_load_explicit(&w->polls,
			                                  memory_order_relaxed);
			st->steals += atomic_load_explicit(&w->steals,
			                                   memory_order_relaxed);
			st->parks += atomic_load_explicit(&w->parks,
			                                  memory_order_relaxed);
			st->registrations += atomic_load_explicit(
				&w->regs, memory_order_relaxed);
		}
	}
	st->registrations += atomic_load_explicit(&executor.regs_foreign,
	                                          memory_order_relaxed);
	if (executor_running()) {
		int64_t d = atomic_load_explicit(&executor.injector.depth,
		                                 memory_order_relaxed);
		st->injector_depth = d > 0 ? (uint64_t)d : 0;
		st->handoffs = monitor_helpers();
		st->polls += executor.retired_polls;
		st->steals += executor.retired_steals;
	}
	pthread_mutex_unlock(&executor.slot_lock);
	pthread_mutex_unlock(&executor.lock);
}

int64_t rok_registrations(void)
{
	struct rok_stats st;

	rok_stats_get(&st);
	return st.registrations;
}
