/*
 * blocking.c — the blocking pool (rok_spawn_blocking) and 1:1 threads
 * (rok_thread_spawn): where code that blocks runs, away from the workers.
 *
 * A job is an external task (task_new_external): never queued to a worker
 * or polled, ended by task_complete() with fn's value, which wakes whoever
 * joins it.  Its frame holds fn and arg, and the task body's `next` link,
 * which only the injector uses and an external task never enters, links it
 * into the pool's FIFO queue: a job costs a record and a body from the
 * spawner's cache and no other allocation.  The body goes when the job
 * ends (task_complete), the record when its last reference goes, the
 * runtime's or the handle's, so a job whose awaiting task was cancelled
 * just runs to its end and is freed then.
 *
 * Jobs and threads.  A new job joins the FIFO queue, and one thread is
 * sent for the job at its head unless one is already coming (`ncoming`):
 * an idle thread is handed that job and woken, or, with none idle and the
 * pool below its cap, a thread is created with it as its first.  A thread
 * that arrives (woken or created) sends for the next one in the same way
 * if jobs queued up behind it, before it runs its own job, which may
 * block; a thread that finishes a job takes the next from the queue.  So
 * every queued job has a thread coming for it, jobs start in submission
 * order, one wake-up goes to one thread, and a burst of jobs costs the
 * spawner a lock and a push each, not a wake-up each: the wake-ups (and
 * the pool's growth) are passed on from thread to thread, and stop as soon
 * as the threads that run catch up with the queue.  Go's scheduler wakes
 * its spinning threads in the same way.  Measured on 2 CPUs, the
 * `blocking` benchmark went from ~0.1 to over 1 million jobs/s with it
 * (a wake-up per job, as Tokio does, costs the spawner a system call).
 *
 * Idle threads wait on the idle list, most recently idle first (so that the
 * surplus at the cold end times out and the pool shrinks), each on its own
 * futex word.  The wake is issued after the lock is dropped; a thread
 * record is freed only once no wake on it is in flight (`wakers`).  An idle
 * thread that gets no job within idle_ns takes itself off the list and
 * exits.  A thread decides to exit in the same hold of the lock in which
 * it found the queue empty.
 *
 * A thread is created outside the lock, counted in nthreads beforehand.  If
 * pthread_create fails, the job goes back to the head of the queue for the
 * threads that exist; if none is left, the spawn fails with its error, and
 * jobs that were queued behind the failed thread end without a value
 * (their joiners get -ECANCELED instead of waiting forever).
 *
 * Exited threads are joined by the next thread that exits (or by shutdown):
 * at most one exited thread is ever left unjoined (`zombie`), without a
 * reaper thread or a detached thread running past rok_stop.
 *
 * Locks.  blocking_pool.lock is a leaf: it guards the counters, the queue,
 * the idle list and the zombie.  Nothing is called under it but a futex
 * wake on rare paths (shutdown, a failed thread creation): fn,
 * task_complete (joiner wakes, the injector), frame allocation and
 * pthread_create/join all run outside it.  rok_stop holds the executor's
 * lock when it calls blocking_shutdown, so the order is executor.lock,
 * then blocking_pool.lock.
 *
 * Shutdown (rok_stop, while the workers still run): the pool closes, which
 * refuses new jobs; idle threads are told to leave; running threads drain
 * the queue and leave when it is empty; rok_thread_spawn threads are waited
 * for.  The pool stays closed until blocking_reopen, which rok_stop calls
 * once the executor is STOPPING (refusing jobs by itself), so a task cannot
 * slip a job in between the two and leave it running past the stop.
 */
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "blocking.h"
#include "executor.h"
#include "frame.h"
#include "rok/blocking.h"
#include "task.h"

#define BLOCKING_MAX_DEFAULT    512u
#define BLOCKING_MAX_LIMIT      65536u
#define BLOCKING_IDLE_DEFAULT   ROK_S(10)
#define BLOCKING_IDLE_MS_LIMIT  (86400u * 1000u)    /* a day */

/* What a job's frame holds. */
struct blocking_job {
	void *(*fn)(void *arg);
	void *arg;
};

/* An idle thread's `word`. */
enum {
	BLOCKING_WAITING  = 0,      /* on the idle list, not asleep yet */
	BLOCKING_POSTED   = 1,      /* handed a job, or told to leave */
	BLOCKING_SLEEPING = 2,      /* on the idle list, in a futex wait */
};

/* One OS thread of the pool or of rok_thread_spawn; malloc'd by its creator,
 * freed by whoever joins it. */
struct blocking_thread {
	struct blocking_thread *prev, *next;  /* idle list, under the lock */
	rok_task *job;              /* first job, then the one handed over */
	_Atomic uint32_t word;      /* BLOCKING_*, the futex word */
	_Atomic uint32_t wakers;    /* futex wakes on `word` still in flight */
	pthread_t self;             /* set by the thread as it exits */
};

static struct blocking_pool {
	pthread_mutex_t lock;
	pthread_cond_t done;        /* shutdown waits for threads to leave */
	rok_task *head, *tail;      /* queued jobs, linked by body->next */
	struct blocking_thread *idle;
	unsigned nthreads;          /* pool threads, being created included */
	unsigned ncoming;           /* woken or being created for a job, not
	                             * yet arrived (see blocking_chain) */
	unsigned nidle;             /* on the idle list */
	unsigned nos;               /* rok_thread_spawn threads */
	struct blocking_thread *zombie; /* exited, not joined yet */
	unsigned max;
	int64_t idle_ns;
	int env_err;                /* a bad ROK_BLOCKING_* variable */
	bool configured;            /* limits read from the environment */
	bool closed;                /* blocking_shutdown ran */
} blocking_pool = {
	/* Adaptive: holds are a few dozen instructions, so a contender
	 * spins a little before it sleeps. */
	.lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP,
	.done = PTHREAD_COND_INITIALIZER,
	.max = BLOCKING_MAX_DEFAULT,
	.idle_ns = BLOCKING_IDLE_DEFAULT,
};

static int blocking_pthread_create(pthread_t *thread, void *(*start)(void *),
                                   void *arg)
{
	return pthread_create(thread, NULL, start, arg);
}

int (*blocking_thread_create)(pthread_t *thread, void *(*start)(void *arg),
                              void *arg) = blocking_pthread_create;

/* Set on pool threads and rok_thread_spawn threads. */
static _Thread_local bool blocking_tls_inside;

bool blocking_on_thread(void)
{
	return blocking_tls_inside;
}

/* ---- small helpers ---------------------------------------------------- */

static void blocking_futex_wait(_Atomic uint32_t *word, uint32_t val,
                                int64_t ns)
{
	struct timespec ts = { ns / 1000000000, ns % 1000000000 };

	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

static void blocking_futex_wake(_Atomic uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Reads ROK_BLOCKING_MAX and ROK_BLOCKING_IDLE_MS once; lock held. */
static void blocking_configure_locked(struct blocking_pool *p)
{
	unsigned ms = 0;

	if (p->configured)
		return;
	p->configured = true;
	if (executor_env_uint("ROK_BLOCKING_MAX", 1, BLOCKING_MAX_LIMIT,
	                      &p->max) < 0 ||
	    executor_env_uint("ROK_BLOCKING_IDLE_MS", 1, BLOCKING_IDLE_MS_LIMIT,
	                      &ms) < 0)
		p->env_err = -EINVAL;
	if (ms > 0)
		p->idle_ns = ROK_MS(ms);
}

/*
 * The common start of rok_spawn_blocking and rok_thread_spawn: clears the
 * caller's *handle, checks fn, starts the runtime, and makes *out a new
 * external task carrying fn and arg, not yet handed to anyone.  0 or -errno.
 */
static int blocking_job_new(rok_task **handle, rok_task **out,
                            void *(*fn)(void *), void *arg)
{
	int err;

	if (handle != NULL)
		*handle = NULL;
	if (fn == NULL)
		return -EINVAL;
	if ((err = executor_ensure()) < 0 ||
	    (err = task_new_external(out, sizeof(struct blocking_job))) < 0)
		return err;
	struct blocking_job *job = task_frame(*out);
	job->fn = fn;
	job->arg = arg;
	return 0;
}

/* Frees a job that was refused: nobody else ever saw it. */
static void blocking_job_drop(rok_task *t)
{
	task_complete(t, NULL, false);  /* frees the body, the runtime's ref */
	rok_task_unref(t);              /* the handle's */
}

/* Runs a job and ends its task with fn's value.  The task may be freed by
 * task_complete (when no handle is left), so nothing touches it after. */
static void blocking_job_run(rok_task *t)
{
	struct blocking_job *job = task_frame(t);

	task_complete(t, job->fn(job->arg), true);
}

/* Hands handle references back to the spawner: *out, or dropped. */
static void blocking_give_handle(rok_task **out, rok_task *t)
{
	if (out != NULL)
		*out = t;
	else
		rok_task_unref(t);
}

/* ---- the queue and the idle list (lock held) -------------------------- */

static void blocking_queue_push(struct blocking_pool *p, rok_task *t)
{
	task_body(t)->next = NULL;
	if (p->tail != NULL)
		task_body(p->tail)->next = t;
	else
		p->head = t;
	p->tail = t;
}

static void blocking_queue_push_front(struct blocking_pool *p, rok_task *t)
{
	task_body(t)->next = p->head;
	p->head = t;
	if (p->tail == NULL)
		p->tail = t;
}

static rok_task *blocking_queue_pop(struct blocking_pool *p)
{
	rok_task *t = p->head;

	if (t != NULL) {
		p->head = task_body(t)->next;
		if (p->head == NULL)
			p->tail = NULL;
		task_body(t)->next = NULL;
	}
	return t;
}

/* Takes `t` out of the queue if it is there (rare: a linear walk). */
static bool blocking_queue_unlink(struct blocking_pool *p, rok_task *t)
{
	rok_task *prev = NULL;

	for (rok_task *q = p->head; q != NULL;
	     prev = q, q = task_body(q)->next) {
		if (q != t)
			continue;
		if (prev != NULL)
			task_body(prev)->next = task_body(q)->next;
		else
			p->head = task_body(q)->next;
		if (p->tail == q)
			p->tail = prev;
		task_body(q)->next = NULL;
		return true;
	}
	return false;
}

static void blocking_idle_push(struct blocking_pool *p,
                               struct blocking_thread *bt)
{
	bt->prev = NULL;
	bt->next = p->idle;
	if (p->idle != NULL)
		p->idle->prev = bt;
	p->idle = bt;
	p->nidle++;
}

static void blocking_idle_unlink(struct blocking_pool *p,
                                 struct blocking_thread *bt)
{
	if (bt->prev != NULL)
		bt->prev->next = bt->next;
	else
		p->idle = bt->next;
	if (bt->next != NULL)
		bt->next->prev = bt->prev;
	bt->prev = bt->next = NULL;
	p->nidle--;
}

/* ---- hand-off and wake-up chain --------------------------------------- */

/*
 * Gives `job` to the most recently idle thread on the list, which then
 * counts as coming; NULL tells it to leave (lock held).  Returns the thread
 * if it sleeps and must be woken with blocking_wake after the lock is
 * dropped, or NULL if it sees the word change by itself (it has not
 * announced its sleep yet).
 */
static struct blocking_thread *blocking_hand_off(struct blocking_pool *p,
                                                 rok_task *job)
{
	struct blocking_thread *bt = p->idle;

	blocking_idle_unlink(p, bt);
	bt->job = job;
	if (job != NULL)
		p->ncoming++;
	/* Release: publishes bt->job, and the job's frame, to the thread,
	 * which reads the word with acquire and then the job without the
	 * lock.  Acquire: orders the wake below after the thread's
	 * announcement that it sleeps. */
	if (atomic_exchange_explicit(&bt->word, BLOCKING_POSTED,
	                             memory_order_acq_rel) != BLOCKING_SLEEPING)
		return NULL;
	/* Relaxed: the freer of bt learns of it through the lock (the thread
	 * must take it again before it can exit). */
	atomic_fetch_add_explicit(&bt->wakers, 1, memory_order_relaxed);
	return bt;
}

/*
 * Wakes a thread blocking_hand_off picked (NULL: nothing to do).  Outside
 * the lock, so that the woken thread does not at once sleep again on it.
 */
static void blocking_wake(struct blocking_thread *bt)
{
	if (bt == NULL)
		return;
	blocking_futex_wake(&bt->word);
	/* Release: pairs with blocking_thread_free's acquire; the record
	 * outlives this wake. */
	atomic_fetch_sub_explicit(&bt->wakers, 1, memory_order_release);
}

/* What blocking_chain decided, to be done once the lock is dropped. */
struct blocking_todo {
	struct blocking_thread *wake;   /* for blocking_wake */
	rok_task *create;               /* a new thread's first job */
};

/*
 * Sends one thread for the job at the head of the queue, unless one is
 * already coming (lock held): the job goes to an idle thread, or a thread
 * is reserved to be created with it (below the cap).  Called after every
 * push and every pop, and by every thread as it arrives, so that a burst
 * of jobs costs one wake-up at a time, passed on from thread to thread,
 * and never leaves a queued job without a thread coming for it.
 */
static void blocking_chain(struct blocking_pool *p, struct blocking_todo *todo)
{
	if (p->head == NULL || p->ncoming > 0)
		return;
	if (p->idle != NULL) {
		todo->wake = blocking_hand_off(p, blocking_queue_pop(p));
	} else if (p->nthreads < p->max) {
		todo->create = blocking_queue_pop(p);
		p->nthreads++;
		p->ncoming++;
	}
}

/*
 * Ends the jobs queued when the only thread left is one that could not be
 * created (lock held, dropped while the jobs end): they finish without a
 * value, so that their joiners do not hang.
 */
static void blocking_cancel_queue(struct blocking_pool *p)
{
	rok_task *t;

	while (p->nthreads == 1 && (t = p->head) != NULL) {
		p->head = p->tail = NULL;
		pthread_mutex_unlock(&p->lock);
		while (t != NULL) {
			rok_task *next = task_body(t)->next;
			task_body(t)->next = NULL;
			task_complete(t, NULL, false);
			t = next;
		}
		pthread_mutex_lock(&p->lock);
	}
}

/* ---- threads ---------------------------------------------------------- */

/*
 * Creates a thread running start(bt) with every signal blocked, bt->job set
 * to `job`.  0, or -errno (then nothing was created).
 */
static int blocking_thread_start(void *(*start)(void *), rok_task *job)
{
	struct blocking_thread *bt = calloc(1, sizeof(*bt));
	sigset_t all, old;
	pthread_t tid;

	if (bt == NULL)
		return -ENOMEM;
	bt->job = job;
	/* Like the workers: signals stay with the program's own threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = blocking_thread_create(&tid, start, bt);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err != 0) {
		free(bt);
		return -err;
	}
	/* The thread is joined through bt->self, which it sets itself. */
	return 0;
}

static void *blocking_pool_main(void *arg);

/*
 * A thread reserved by blocking_chain could not be created (lock not
 * held).  The job goes back to the head of the queue, for the threads that
 * exist: one that went idle meanwhile is sent for it, busy ones take it
 * when they finish.  With none, no queued job would ever run: the caller's
 * own new job `own`, if queued, is refused with `err` (returned), the
 * others end without a value.
 */
static int blocking_grow_failed(struct blocking_pool *p, rok_task *job,
                                rok_task *own, int err)
{
	struct blocking_thread *wake = NULL;
	int ret = 0;

	pthread_mutex_lock(&p->lock);
	p->ncoming--;
	blocking_queue_push_front(p, job);
	if (p->nthreads == 1) {         /* only the reservation */
		if (own != NULL && blocking_queue_unlink(p, own))
			ret = err;
		/* Until the count drops, this stands in for the thread:
		 * jobs queued meanwhile are ended here too. */
		blocking_cancel_queue(p);
	} else if (p->ncoming == 0 && p->idle != NULL) {
		/* Not blocking_chain: no second try at creating a thread. */
		wake = blocking_hand_off(p, blocking_queue_pop(p));
	}
	p->nthreads--;
	if (p->closed)
		pthread_cond_broadcast(&p->done);
	pthread_mutex_unlock(&p->lock);
	blocking_wake(wake);
	return ret;
}

/* Does what blocking_chain decided (lock not held).  0, or the error that
 * refuses `own` (see blocking_grow_failed). */
static int blocking_todo_run(struct blocking_pool *p,
                             struct blocking_todo *todo, rok_task *own)
{
	blocking_wake(todo->wake);
	if (todo->create == NULL)
		return 0;
	int err = blocking_thread_start(blocking_pool_main, todo->create);
	return err == 0 ? 0 : blocking_grow_failed(p, todo->create, own, err);
}

/*
 * A thread woken or created for a job has arrived (lock not held): it no
 * longer counts as coming, and sends for the next thread if jobs queued
 * up behind it, before it runs its own job, which may take long.
 */
static void blocking_arrive(struct blocking_pool *p)
{
	struct blocking_todo todo = { 0 };

	pthread_mutex_lock(&p->lock);
	p->ncoming--;
	blocking_chain(p, &todo);
	pthread_mutex_unlock(&p->lock);
	blocking_todo_run(p, &todo, NULL);
}

/* Joins a thread that left and frees its record (NULL: nothing). */
static void blocking_thread_free(struct blocking_thread *bt)
{
	if (bt == NULL)
		return;
	pthread_join(bt->self, NULL);
	/* Acquire: pairs with blocking_wake's release.  A waker is at most a
	 * system call away from done. */
	while (atomic_load_explicit(&bt->wakers, memory_order_acquire) != 0)
		sched_yield();
	free(bt);
}

/*
 * The last steps of a thread (lock held, released here): counts it out of
 * *count in the same hold of the lock in which it saw the queue empty, makes
 * it the zombie for the next leaver to join, and joins the previous zombie.
 */
static void blocking_leave(struct blocking_pool *p, struct blocking_thread *bt,
                           unsigned *count)
{
	(*count)--;
	bt->self = pthread_self();
	struct blocking_thread *prev = p->zombie;
	p->zombie = bt;
	if (p->closed)
		pthread_cond_broadcast(&p->done);
	pthread_mutex_unlock(&p->lock);
	blocking_thread_free(prev);
	/* Frames freed here (finished jobs) go back to the depot; the joiner
	 * of this thread, shutdown at the latest, waits for this. */
	frame_cache_flush(&executor_tls.cache);
}

/*
 * Waits on the idle list for a job (lock held on entry).  Returns a job,
 * with the lock released; or NULL, with the lock held, when the thread
 * must leave: told to by shutdown, or idle for idle_ns.
 */
static rok_task *blocking_idle_wait(struct blocking_pool *p,
                                    struct blocking_thread *bt)
{
	int64_t deadline = rok_now() + p->idle_ns;

	atomic_store_explicit(&bt->word, BLOCKING_WAITING,
	                      memory_order_relaxed);
	bt->job = NULL;
	blocking_idle_push(p, bt);
	pthread_mutex_unlock(&p->lock);

	for (;;) {
		uint32_t w = BLOCKING_WAITING;
		/* Acquire (both ways): pairs with blocking_hand_off's
		 * exchange, after which bt->job is readable. */
		if (atomic_compare_exchange_strong_explicit(
			&bt->word, &w, BLOCKING_SLEEPING,
			memory_order_acquire, memory_order_acquire))
			w = BLOCKING_SLEEPING;
		if (w == BLOCKING_POSTED) {
			if (bt->job != NULL)
				return bt->job;
			break;                  /* told to leave */
		}
		int64_t left = deadline - rok_now();
		if (left <= 0)
			break;
		blocking_futex_wait(&bt->word, BLOCKING_SLEEPING, left);
	}
	pthread_mutex_lock(&p->lock);
	/* Hand-offs happen under the lock, so this look is final. */
	if (atomic_load_explicit(&bt->word, memory_order_relaxed) ==
	    BLOCKING_POSTED) {
		rok_task *job = bt->job;
		if (job != NULL)
			pthread_mutex_unlock(&p->lock);
		return job;
	}
	blocking_idle_unlink(p, bt);     /* timed out */
	return NULL;
}

static void *blocking_pool_main(void *arg)
{
	struct blocking_pool *p = &blocking_pool;
	struct blocking_thread *bt = arg;
	rok_task *job = bt->job;     /* published by pthread_create */

	blocking_tls_inside = true;
	/* Best effort: for ps and debuggers only. */
	(void)pthread_setname_np(pthread_self(), "rok-blocking");
	blocking_arrive(p);
	for (;;) {
		blocking_job_run(job);
		pthread_mutex_lock(&p->lock);
		if ((job = blocking_queue_pop(p)) != NULL) {
			struct blocking_todo todo = { 0 };
			blocking_chain(p, &todo);
			pthread_mutex_unlock(&p->lock);
			blocking_todo_run(p, &todo, NULL);
			continue;
		}
		if (p->closed || p->nthreads > p->max)
			break;
		if ((job = blocking_idle_wait(p, bt)) == NULL)
			break;
		blocking_arrive(p);
	}
	blocking_leave(p, bt, &p->nthreads);     /* lock held, queue empty */
	return NULL;
}

static void *blocking_os_main(void *arg)
{
	struct blocking_pool *p = &blocking_pool;
	struct blocking_thread *bt = arg;

	blocking_tls_inside = true;
	blocking_job_run(bt->job);
	pthread_mutex_lock(&p->lock);
	blocking_leave(p, bt, &p->nos);
	return NULL;
}

/* ---- spawning --------------------------------------------------------- */

/* Hands a new job to the pool: 0, or -errno (the job was not taken). */
static int blocking_submit(struct blocking_pool *p, rok_task *job)
{
	struct blocking_todo todo = { 0 };

	pthread_mutex_lock(&p->lock);
	blocking_configure_locked(p);
	/* Checked under the lock: blocking_shutdown waits only for what
	 * got in before it closed the pool. */
	int err = p->env_err;
	if (err == 0 && (p->closed || !executor_running()))
		err = -ESHUTDOWN;
	if (err < 0) {
		pthread_mutex_unlock(&p->lock);
		return err;
	}
	blocking_queue_push(p, job);
	blocking_chain(p, &todo);
	pthread_mutex_unlock(&p->lock);
	return blocking_todo_run(p, &todo, job);
}

int rok_spawn_blocking(rok_task **out, void *(*fn)(void *arg), void *arg)
{
	rok_task *t;
	int err;

	if ((err = blocking_job_new(out, &t, fn, arg)) < 0)
		return err;
	if ((err = blocking_submit(&blocking_pool, t)) < 0) {
		blocking_job_drop(t);
		return err;
	}
	blocking_give_handle(out, t);
	return 0;
}

int rok_thread_spawn(rok_task **out, void *(*fn)(void *arg), void *arg)
{
	struct blocking_pool *p = &blocking_pool;
	rok_task *t;
	int err;

	if ((err = blocking_job_new(out, &t, fn, arg)) < 0)
		return err;
	pthread_mutex_lock(&p->lock);
	if (p->closed || !executor_running()) {
		pthread_mutex_unlock(&p->lock);
		blocking_job_drop(t);
		return -ESHUTDOWN;
	}
	p->nos++;
	pthread_mutex_unlock(&p->lock);

	if ((err = blocking_thread_start(blocking_os_main, t)) < 0) {
		pthread_mutex_lock(&p->lock);
		p->nos--;
		if (p->closed)
			pthread_cond_broadcast(&p->done);
		pthread_mutex_unlock(&p->lock);
		blocking_job_drop(t);
		return err;
	}
	blocking_give_handle(out, t);
	return 0;
}

/* ---- limits, counters, shutdown --------------------------------------- */

void rok_blocking_set_limits(unsigned max_threads, int64_t idle_ns)
{
	struct blocking_pool *p = &blocking_pool;

	pthread_mutex_lock(&p->lock);
	blocking_configure_locked(p);
	if (max_threads > 0)
		p->max = max_threads;
	if (idle_ns > 0)
		p->idle_ns = idle_ns;
	pthread_mutex_unlock(&p->lock);
}

unsigned rok_blocking_threads(void)
{
	pthread_mutex_lock(&blocking_pool.lock);
	unsigned n = blocking_pool.nthreads;
	pthread_mutex_unlock(&blocking_pool.lock);
	return n;
}

unsigned rok_blocking_idle(void)
{
	pthread_mutex_lock(&blocking_pool.lock);
	unsigned n = blocking_pool.nidle;
	pthread_mutex_unlock(&blocking_pool.lock);
	return n;
}

void blocking_shutdown(void)
{
	struct blocking_pool *p = &blocking_pool;

	pthread_mutex_lock(&p->lock);
	p->closed = true;
	/* Idle threads leave now; busy ones drain the queue, then leave. */
	while (p->idle != NULL)
		blocking_wake(blocking_hand_off(p, NULL));
	while (p->nthreads > 0 || p->nos > 0)
		pthread_cond_wait(&p->done, &p->lock);
	struct blocking_thread *last = p->zombie;
	p->zombie = NULL;
	pthread_mutex_unlock(&p->lock);
	/* Each leaver joined the one before it, so this joins them all. */
	blocking_thread_free(last);
}

void blocking_reopen(void)
{
	pthread_mutex_lock(&blocking_pool.lock);
	blocking_pool.closed = false;
	pthread_mutex_unlock(&blocking_pool.lock);
}
