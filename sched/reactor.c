/*
 * reactor.c — the I/O driver: one libevent thread per process that waits on
 * epoll and wakes the tasks awaiting fd readiness (rok_readable,
 * rok_writable in <rok/io.h>); also the hand-off point where internal code
 * runs its own libevent events (reactor_call in reactor.h).
 *
 * Who touches what.  The event_base and every struct event belong to the
 * reactor thread alone; other threads queue calls for it and write an
 * eventfd that the loop watches (the libuv pattern).  We chose this over
 * libevent's own locking (evthread_use_pthreads) because: that switch is
 * process-global and must come before any base exists, so a library should
 * not flip it for the program; tasks' fds need no libevent event at all
 * (see below); one thread owning the base needs no lock order between
 * libevent's locks and ours; and ThreadSanitizer, which cannot see inside
 * the uninstrumented libevent, has nothing to misjudge.
 *
 * Registrations are per fd, not per wait (Tokio's design).  Task fds live
 * in an epoll set of their own (`tfd`), apart from libevent's; the loop
 * watches tfd as one level-triggered fd and drains it (reactor_tasks_cb).
 * The first await on an fd in a direction adds the fd to tfd, edge-
 * triggered, from the awaiting thread itself: epoll_ctl is thread-safe,
 * and making the call there spares a hand-off to the reactor thread and
 * its wake-up (two thread switches per registered fd, the largest share of
 * an exec task's cost, issue 15).  The fd stays in tfd until rok_io_forget
 * / rok_wake_io / rok_io_close.  Each edge the kernel reports sets a
 * readiness bit in the fd's entry and wakes the waiters of that direction;
 * an await that finds the bit set clears it and is ready at once.  So an
 * await on an fd already watched never involves the reactor thread: it
 * takes the entry's spinlock, tests a bit, and links a waiter or not.
 * Clearing the bit before the caller's I/O call is what makes
 * edge-triggering safe: any data that arrives after the clear either is
 * read by that call or raises a new edge.  epoll_ctl itself says why an
 * fd cannot be watched (EBADF, EPERM for a regular file), so nothing is
 * asked beforehand.
 *
 * The fd table.  Entries live in chunks of 256, found through a directory
 * indexed by fd >> 8.  Chunks never move or go away while the reactor
 * exists, so a waiter may point into one; the directory grows by copy, and
 * old directories are kept (retired) until reactor_free, so readers need no
 * lock: they load the directory and the chunk pointer with acquire.
 *
 * An fd number outlives its file.  Each entry has a generation, which
 * every registration carries in its epoll data next to the fd; forget,
 * wake_io and close bump it, drop the readiness bits and the watched
 * directions, and take the fd out of tfd (EPOLL_CTL_DEL) before they
 * return, so the caller's close() and whatever file gets the number next
 * race nothing.  An edge the reactor fetched just before the DEL carries
 * the old generation and is dropped.  reactor.lock orders the epoll_ctl
 * calls of one fd: an ADD cannot slip between a forget's new generation
 * and its DEL.  A file still open elsewhere (by dup or fork) after a
 * close without forget stays in tfd under its old generation until its
 * last holder closes it; its edges are dropped the same way.
 *
 * Life cycle.  The reactor starts lazily, at the first registration or
 * reactor_call (a program that never awaits I/O has no reactor thread and
 * no epoll fd), and only while the executor runs.  rok_stop calls
 * reactor_stop once the workers are joined (so no wake-up from here races
 * its drain) and reactor_free after the drain (the drain's cancelled
 * waiters still unlink themselves from the table).
 *
 * Locks.  reactor.lock (a mutex) guards start and stop, the call queue,
 * table growth and every epoll_ctl on tfd (a few per exec child: one lock
 * is enough); an entry's spinlock guards its readiness, watched
 * directions, generation and waiter lists.  Order: reactor.lock, then an
 * entry lock.  A task is never woken with an entry lock held, and a
 * forget wakes its waiters after it let go of reactor.lock, since they
 * may come straight back for it (a new await on a forgotten fd adds it).
 */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "executor.h"
#include "reactor.h"
#include "rok/io.h"
#include "spin.h"
#include "task.h"
#include "waitq.h"

#define REACTOR_CHUNK_SHIFT 8
#define REACTOR_CHUNK       (1u << REACTOR_CHUNK_SHIFT)
#define REACTOR_FD_MAX      (1 << 24)     /* fds at or above: -EMFILE */
#define REACTOR_DIR_MIN     8             /* chunk slots of a new directory */
#define REACTOR_WAKE_BATCH  64
#define REACTOR_EDGE_BATCH  64            /* tfd events per epoll_wait */

/* Directions: index into waiters[], and their bits. */
enum { REACTOR_IN = 0, REACTOR_OUT = 1 };
#define REACTOR_BIT(d) (1u << (d))

enum {
	REACTOR_IDLE = 0,       /* no thread, no table: starts on demand */
	REACTOR_RUNNING = 1,
	REACTOR_CLOSED = 2,     /* stopped inside rok_stop: refuses to start */
};

/* One fd's state, under `lock` but for the constant fd. */
struct reactor_fd {
	struct spin lock;
	uint8_t ready;                  /* edges not consumed yet: BIT(dir) */
	uint8_t have;                   /* directions in tfd; changed only
	                                   under reactor.lock too */
	uint32_t gen;                   /* bumped by forget / wake_io */
	rok_waiter *waiters[2];         /* by direction */
	int fd;                         /* constant */
};

struct reactor_dir {
	size_t n;                               /* chunk slots */
	struct reactor_dir *retired;            /* the smaller one it replaced */
	struct reactor_fd *_Atomic chunks[];
};

static struct {
	pthread_mutex_t lock;
	_Atomic int state;                      /* REACTOR_*; written locked */
	struct reactor_dir *_Atomic dir;        /* grown locked, read lock-free */
	/* Under lock. */
	bool stopping;                          /* the loop must exit */
	bool signalled;                         /* the eventfd holds a wake-up */
	/* reactor_call's eventfd writes made after unlocking, in flight:
	 * the teardown waits for none before closing the eventfd. */
	_Atomic unsigned kicking;
	struct reactor_call *calls, **calls_tail;
	/* Set up before the thread starts, torn down after it is joined. */
	int efd;
	int tfd;                                /* the task fds' epoll set */
	struct event_base *base;
	struct event *wake_ev, *tasks_ev;
	pthread_t thread;
} reactor = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.efd = -1,
	.tfd = -1,
};

static _Thread_local bool reactor_tls_on_thread;

bool reactor_on_thread(void)
{
	return reactor_tls_on_thread;
}

struct event_base *reactor_base(void)
{
	return reactor_tls_on_thread ? reactor.base : NULL;
}

static rok_io_op *reactor_op(rok_waiter *w)
{
	return (rok_io_op *)(void *)((char *)w - offsetof(rok_io_op, w));
}

/* ---- the fd table ----------------------------------------------------- */

/* The entry of fd if its chunk exists, else NULL.  Any thread, no lock. */
static struct reactor_fd *reactor_fd_find(int fd)
{
	/* Acquire: pairs with the release stores in reactor_fd_add_locked,
	 * publishing the directory's and the chunk's contents. */
	struct reactor_dir *d = atomic_load_explicit(&reactor.dir,
	                                              memory_order_acquire);
	size_t ci = (size_t)fd >> REACTOR_CHUNK_SHIFT;

	if (d == NULL || ci >= d->n)
		return NULL;
	struct reactor_fd *c = atomic_load_explicit(&d->chunks[ci],
	                                            memory_order_acquire);
	return c != NULL ? &c[fd & (REACTOR_CHUNK - 1)] : NULL;
}

/* Lock held.  Makes room for fd and returns its entry, or NULL for no
 * memory or no table (the reactor is not running). */
static struct reactor_fd *reactor_fd_add_locked(int fd)
{
	struct reactor_dir *d = atomic_load_explicit(&reactor.dir,
	                                             memory_order_relaxed);
	size_t ci = (size_t)fd >> REACTOR_CHUNK_SHIFT;

	if (d == NULL)
		return NULL;
	if (ci >= d->n) {
		size_t n = d->n * 2 > ci + 1 ? d->n * 2 : ci + 1;
		struct reactor_dir *g = calloc(1, sizeof(*g) +
		                                          n * sizeof(g->chunks[0]));
		if (g == NULL)
			return NULL;
		g->n = n;
		for (size_t i = 0; i < d->n; i++)
			atomic_store_explicit(
				&g->chunks[i],
				atomic_load_explicit(&d->chunks[i],
				                     memory_order_relaxed),
				memory_order_relaxed);
		g->retired = d;
		/* Release: a reader that loads the new directory sees the
		 * chunk pointers copied into it. */
		atomic_store_explicit(&reactor.dir, g, memory_order_release);
		d = g;
	}
	struct reactor_fd *c = atomic_load_explicit(&d->chunks[ci],
	                                            memory_order_relaxed);
	if (c == NULL) {
		c = calloc(REACTOR_CHUNK, sizeof(*c));
		if (c == NULL)
			return NULL;
		for (unsigned i = 0; i < REACTOR_CHUNK; i++)
			c[i].fd = (int)((ci << REACTOR_CHUNK_SHIFT) + i);
		/* Release: a reader that finds the chunk sees it initialised. */
		atomic_store_explicit(&d->chunks[ci], c, memory_order_release);
	}
	return &c[fd & (REACTOR_CHUNK - 1)];
}

/* Lock held.  Frees every directory and chunk. */
static void reactor_table_free_locked(void)
{
	struct reactor_dir *d = atomic_load_explicit(&reactor.dir,
	                                             memory_order_relaxed);

	atomic_store_explicit(&reactor.dir, NULL, memory_order_relaxed);
	if (d != NULL)
		for (size_t i = 0; i < d->n; i++)
			free(atomic_load_explicit(&d->chunks[i],
			                          memory_order_relaxed));
	while (d != NULL) {
		struct reactor_dir *r = d->retired;
		free(d);
		d = r;
	}
}

/* ---- requests to the reactor thread ----------------------------------- */

/*
 * Lock held.  Writes the eventfd.  The write is made under the lock so that
 * it cannot reach an eventfd that reactor_stop has closed (whose number may
 * be a new file's by then); it never blocks.
 */
static void reactor_kick_locked(void)
{
	uint64_t one = 1;
	ssize_t r = write(reactor.efd, &one, sizeof(one));

	(void)r;   /* EAGAIN only at a count of 2^64 - 2: one is pending */
}

/*
 * Lock held.  Wakes the running loop unless a wake-up is pending, the
 * caller writing the eventfd itself after unlocking (reactor_kick_claimed)
 * when this returns true: the loop thread, woken by the write, takes
 * reactor.lock at once, and found it held for the rest of our write() (a
 * futex round trip per call, measured with strace on rokd's reply path).
 * The claim counts in `kicking`, which the teardown waits out, so the
 * write never reaches a closed (or reused) eventfd number.
 */
static bool reactor_claim_kick_locked(void)
{
	if (atomic_load_explicit(&reactor.state, memory_order_relaxed) !=
	            REACTOR_RUNNING ||
	    reactor.signalled)
		return false;
	reactor.signalled = true;
	/* Relaxed: the lock orders it before the teardown's look. */
	atomic_fetch_add_explicit(&reactor.kicking, 1, memory_order_relaxed);
	return true;
}

static void reactor_kick_claimed(void)
{
	uint64_t one = 1;
	ssize_t r = write(reactor.efd, &one, sizeof(one));

	(void)r;   /* EAGAIN only at a count of 2^64 - 2: one is pending */
	/* Release: our read of efd comes before the teardown's close. */
	atomic_fetch_sub_explicit(&reactor.kicking, 1, memory_order_release);
}

/* ---- waking ----------------------------------------------------------- */

/*
 * Takes every waiter of direction d off e, in batches, gives their ops
 * `err` and wakes their tasks.  A waiter that links between two batches is
 * woken too: a spurious wake-up, which awaits allow.
 */
static void reactor_wake_dir(struct reactor_fd *e, unsigned d, int err)
{
	rok_task *due[REACTOR_WAKE_BATCH];
	unsigned n;

	do {
		n = 0;
		spin_lock(&e->lock);
		while (n < REACTOR_WAKE_BATCH && e->waiters[d] != NULL) {
			/* Written before waitq_take's release store of WOKEN,
			 * which the woken op reads with acquire. */
			reactor_op(e->waiters[d])->err = err;
			rok_task *t = waitq_take(&e->waiters[d]);
			if (t != NULL)
				due[n++] = t;
		}
		spin_unlock(&e->lock);
		for (unsigned i = 0; i < n; i++)
			task_wake_by_val(due[i]);
	} while (n == REACTOR_WAKE_BATCH);
}

/* Edge bits of an epoll event: error and hang-up count in both directions,
 * as the top of <rok/io.h> promises. */
static unsigned reactor_edge_bits(uint32_t events)
{
	if (events & (EPOLLERR | EPOLLHUP))
		return REACTOR_BIT(REACTOR_IN) | REACTOR_BIT(REACTOR_OUT);
	return ((events & EPOLLIN) ? REACTOR_BIT(REACTOR_IN) : 0) |
	       ((events & EPOLLOUT) ? REACTOR_BIT(REACTOR_OUT) : 0);
}

/* tfd is readable: take its edges, a batch per loop turn (the event is
 * level-triggered, so the rest come next turn, after other events). */
static void reactor_tasks_cb(evutil_socket_t fd, short what, void *arg)
{
	struct epoll_event evs[REACTOR_EDGE_BATCH];
	int n = epoll_wait(reactor.tfd, evs, REACTOR_EDGE_BATCH, 0);

	(void)fd;
	(void)what;
	(void)arg;
	for (int i = 0; i < n; i++) {
		struct reactor_fd *e = reactor_fd_find(
			(int)(uint32_t)evs[i].data.u64);
		uint32_t gen = (uint32_t)(evs[i].data.u64 >> 32);
		unsigned bits = reactor_edge_bits(evs[i].events);

		if (e == NULL)
			continue;   /* cannot be: the entry came before the ADD */
		spin_lock(&e->lock);
		/* Of an earlier generation: a file forgotten since. */
		bool stale = e->gen != gen;
		if (!stale)
			e->ready |= (uint8_t)bits;
		spin_unlock(&e->lock);
		for (unsigned d = 0; !stale && d < 2; d++)
			if (bits & REACTOR_BIT(d))
				reactor_wake_dir(e, d, 0);
	}
}

/* The eventfd fired: run queued calls. */
static void reactor_wake_cb(evutil_socket_t fd, short what, void *arg)
{
	uint64_t v;
	ssize_t r = read(reactor.efd, &v, sizeof(v));

	(void)r;   /* EAGAIN: a wake-up already consumed */
	(void)fd;
	(void)what;
	(void)arg;
	/* Clear `signalled` no later than taking the queues: a push after
	 * this point writes the eventfd again. */
	pthread_mutex_lock(&reactor.lock);
	struct reactor_call *calls = reactor.calls;
	bool stopping = reactor.stopping;
	reactor.calls = NULL;
	reactor.calls_tail = &reactor.calls;
	reactor.signalled = false;
	pthread_mutex_unlock(&reactor.lock);

	while (calls != NULL) {
		struct reactor_call *next = calls->next;
		bool borrowed = calls->borrowed;   /* fn may free a borrowed c */
		calls->fn(calls->arg);
		if (!borrowed)
			free(calls);
		calls = next;
	}
	if (stopping)
		event_base_loopbreak(reactor.base);
}

static void *reactor_main(void *arg)
{
	(void)arg;
	(void)pthread_setname_np(pthread_self(), "rok-reactor");
	reactor_tls_on_thread = true;
	event_base_loop(reactor.base, EVLOOP_NO_EXIT_ON_EMPTY);
	reactor_tls_on_thread = false;
	return NULL;
}

/* ---- start and stop --------------------------------------------------- */

/* Lock held.  Frees the libevent objects and closes the eventfd and tfd
 * (which takes every task fd out of epoll). */
static void reactor_teardown_locked(void)
{
	if (reactor.wake_ev != NULL)
		event_free(reactor.wake_ev);
	reactor.wake_ev = NULL;
	if (reactor.tasks_ev != NULL)
		event_free(reactor.tasks_ev);
	reactor.tasks_ev = NULL;
	if (reactor.base != NULL)
		event_base_free(reactor.base);
	reactor.base = NULL;
	/* No new claim once the state left RUNNING (under the lock): wait
	 * out the writes claimed before, each one syscall long. */
	while (atomic_load_explicit(&reactor.kicking, memory_order_acquire) != 0)
		sched_yield();
	if (reactor.efd >= 0)
		close(reactor.efd);
	reactor.efd = -1;
	if (reactor.tfd >= 0)
		close(reactor.tfd);
	reactor.tfd = -1;
}

static struct event_base *reactor_base_new(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *base = NULL;

	if (cfg == NULL)
		return NULL;
	/* Edge-triggered (the daemon's connections are) and O(1): epoll on
	 * Linux, whatever EVENT_NO* variables say.  No locks: only the
	 * reactor thread uses it. */
	if (event_config_require_features(cfg, EV_FEATURE_ET | EV_FEATURE_O1) ==
	            0 &&
	    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK) == 0 &&
	    event_config_set_flag(cfg, EVENT_BASE_FLAG_IGNORE_ENV) == 0)
		base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return base;
}

/* Lock held, state IDLE.  0 or -errno (then nothing is left behind). */
static int reactor_start_locked(void)
{
	struct reactor_dir *d = NULL;
	int err;

	if ((reactor.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    (reactor.tfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		err = -errno;
		goto fail;
	}
	d = calloc(1, sizeof(*d) + REACTOR_DIR_MIN * sizeof(d->chunks[0]));
	reactor.base = reactor_base_new();
	if (d == NULL || reactor.base == NULL) {
		err = -ENOMEM;
		goto fail;
	}
	reactor.wake_ev = event_new(reactor.base, reactor.efd,
	                            EV_READ | EV_PERSIST, reactor_wake_cb, NULL);
	reactor.tasks_ev = event_new(reactor.base, reactor.tfd,
	                             EV_READ | EV_PERSIST, reactor_tasks_cb,
	                             NULL);
	if (reactor.wake_ev == NULL || event_add(reactor.wake_ev, NULL) < 0 ||
	    reactor.tasks_ev == NULL || event_add(reactor.tasks_ev, NULL) < 0) {
		err = -ENOMEM;
		goto fail;
	}
	d->n = REACTOR_DIR_MIN;
	atomic_store_explicit(&reactor.dir, d, memory_order_relaxed);
	d = NULL;
	reactor.stopping = false;
	reactor.signalled = false;
	reactor.calls = NULL;
	reactor.calls_tail = &reactor.calls;

	/* The reactor leaves signals to the program's own threads. */
	err = executor_thread_create(&reactor.thread, reactor_main, NULL);
	if (err < 0) {
		reactor_table_free_locked();
		goto fail;
	}
	/* Release: a task that sees RUNNING without the lock sees the table
	 * (pairs with the acquire load in reactor_entry). */
	atomic_store_explicit(&reactor.state, REACTOR_RUNNING,
	                      memory_order_release);
	return 0;
fail:
	free(d);
	reactor_teardown_locked();
	return err;
}

/* Lock held.  Starts the reactor if it is idle and the executor runs. */
static int reactor_ensure_locked(void)
{
	switch (atomic_load_explicit(&reactor.state, memory_order_relaxed)) {
	case REACTOR_RUNNING:
		return reactor.stopping ? -ESHUTDOWN : 0;
	case REACTOR_IDLE:
		return executor_running() ? reactor_start_locked() : -ESHUTDOWN;
	default:
		return -ESHUTDOWN;
	}
}

void reactor_stop(void)
{
	pthread_mutex_lock(&reactor.lock);
	int was = atomic_load_explicit(&reactor.state, memory_order_relaxed);
	atomic_store_explicit(&reactor.state, REACTOR_CLOSED,
	                      memory_order_relaxed);
	if (was != REACTOR_RUNNING) {
		pthread_mutex_unlock(&reactor.lock);
		return;
	}
	reactor.stopping = true;
	reactor.signalled = true;
	reactor_kick_locked();
	pthread_mutex_unlock(&reactor.lock);
	pthread_join(reactor.thread, NULL);

	pthread_mutex_lock(&reactor.lock);
	reactor_teardown_locked();
	pthread_mutex_unlock(&reactor.lock);
}

void reactor_free(void)
{
	pthread_mutex_lock(&reactor.lock);
	reactor_table_free_locked();
	atomic_store_explicit(&reactor.state, REACTOR_IDLE,
	                      memory_order_relaxed);
	pthread_mutex_unlock(&reactor.lock);
}

/* Queues c (its `borrowed` set by the caller). */
static int reactor_call_queue(struct reactor_call *c, void (*fn)(void *arg),
                              void *arg)
{
	bool kick = false;
	int err;

	c->next = NULL;
	c->fn = fn;
	c->arg = arg;
	if ((err = executor_ensure()) < 0)
		return err;
	pthread_mutex_lock(&reactor.lock);
	err = reactor_ensure_locked();
	if (err == 0) {
		*reactor.calls_tail = c;
		reactor.calls_tail = &c->next;
		kick = reactor_claim_kick_locked();
	}
	pthread_mutex_unlock(&reactor.lock);
	if (kick)
		reactor_kick_claimed();
	return err;
}

int reactor_call(void (*fn)(void *arg), void *arg)
{
	struct reactor_call *c = malloc(sizeof(*c));

	if (c == NULL)
		return -ENOMEM;
	c->borrowed = false;   /* freed by the loop once fn has run */
	int err = reactor_call_queue(c, fn, arg);
	if (err < 0)
		free(c);
	return err;
}

int reactor_call_in(struct reactor_call *c, void (*fn)(void *arg),
                    void *arg)
{
	c->borrowed = true;
	return reactor_call_queue(c, fn, arg);
}

/* ---- the awaits ------------------------------------------------------- */

/* The entry of fd for a registration, starting the reactor if need be. */
static int reactor_entry(int fd, struct reactor_fd **out)
{
	int err = 0;

	*out = NULL;
	if (fd < 0)
		return -EBADF;
	if (fd >= REACTOR_FD_MAX)
		return -EMFILE;
	/* Acquire: pairs with the release store of RUNNING in
	 * reactor_start_locked, publishing the table. */
	if (atomic_load_explicit(&reactor.state, memory_order_acquire) ==
	            REACTOR_RUNNING &&
	    (*out = reactor_fd_find(fd)) != NULL)
		return 0;
	pthread_mutex_lock(&reactor.lock);
	err = reactor_ensure_locked();
	if (err == 0 && (*out = reactor_fd_add_locked(fd)) == NULL)
		err = -ENOMEM;
	pthread_mutex_unlock(&reactor.lock);
	return err;
}

/* The waiter's aux: its direction in bit 0, its entry's generation above. */
static uint32_t reactor_aux(unsigned d, uint32_t gen)
{
	return d | (gen << 1);
}

static void reactor_release(rok_waiter *w)
{
	struct reactor_fd *e = w->queue;

	spin_lock(&e->lock);
	waitq_unlink(&e->waiters[w->aux & 1], w);
	spin_unlock(&e->lock);
}

/* tfd's registration of e: its directions `have`, generation gen.  ADD for
 * a first direction, MOD for a second; the other when the kernel's view
 * differs (the fd was closed and its number reused without a forget, say).
 * reactor.lock held, state RUNNING.  0 or -errno. */
static int reactor_ctl(struct reactor_fd *e, unsigned have, bool first,
                       uint32_t gen)
{
	struct epoll_event ev = {
		.events = EPOLLET |
		          ((have & REACTOR_BIT(REACTOR_IN)) ? EPOLLIN : 0) |
		          ((have & REACTOR_BIT(REACTOR_OUT)) ? EPOLLOUT : 0),
		.data.u64 = (uint64_t)gen << 32 | (uint32_t)e->fd,
	};
	int op = first ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;

	if (epoll_ctl(reactor.tfd, op, e->fd, &ev) == 0)
		return 0;
	if (errno != (first ? EEXIST : ENOENT))
		return -errno;
	op = first ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	return epoll_ctl(reactor.tfd, op, e->fd, &ev) == 0 ? 0 : -errno;
}

/*
 * Adds direction d to e's watch, for generation gen, unless a forget came
 * first (its waiters are woken) or another await did it.  On failure the
 * waiters learn why, woken under reactor.lock so that no later file's
 * waiter gets this error, and the next await asks again (the fd may be a
 * new file by then).  A failed MOD wakes the other direction's waiters
 * too, and drops its watch: the number no longer names the file watched
 * (EPERM, EBADF, ENOENT: closed without a forget), or, for a lack of
 * memory, their next await adds it again.
 */
static void reactor_add(struct reactor_fd *e, unsigned d, uint32_t gen)
{
	pthread_mutex_lock(&reactor.lock);
	int err = reactor_ensure_locked();
	spin_lock(&e->lock);
	bool todo = e->gen == gen && !(e->have & REACTOR_BIT(d));
	unsigned have = e->have;
	spin_unlock(&e->lock);
	if (!todo) {
		pthread_mutex_unlock(&reactor.lock);
		return;
	}
	if (err == 0)
		err = reactor_ctl(e, have | REACTOR_BIT(d), have == 0, gen);
	/* The generation cannot have moved: forget takes our lock. */
	spin_lock(&e->lock);
	e->have = err == 0 ? (uint8_t)(have | REACTOR_BIT(d)) : 0;
	spin_unlock(&e->lock);
	if (err < 0) {
		reactor_wake_dir(e, d, err);
		if (have != 0)
			reactor_wake_dir(e, 1 - d, err);
	}
	pthread_mutex_unlock(&reactor.lock);
}

static rok_poll reactor_wait(rok_cx *cx, rok_io_op *op, int fd, unsigned d)
{
	struct reactor_fd *e;

	if (cx->releasing) {
		(void)waitq_begin(cx, &op->w);   /* unlinks through release */
		return ROK_PENDING;
	}
	/* Acquire: pairs with waitq_take's release store of WOKEN, so the
	 * err the waker wrote is visible. */
	uint32_t st = atomic_load_explicit(&op->w.state, memory_order_acquire);
	if (st == WAITQ_QUEUED)
		return ROK_PENDING;
	if (st == WAITQ_WOKEN) {
		/* Woken by an edge, a failed registration or a wake_io: ready
		 * in every case.  Consume the edge, unless a forget came in
		 * between (then the bits are a new file's). */
		atomic_store_explicit(&op->w.state, WAITQ_IDLE,
		                      memory_order_relaxed);
		e = op->w.queue;
		spin_lock(&e->lock);
		if (reactor_aux(d, e->gen) == op->w.aux)
			e->ready &= (uint8_t)~REACTOR_BIT(d);
		spin_unlock(&e->lock);
		return ROK_READY;
	}

	op->err = 0;
	int err = reactor_entry(fd, &e);
	if (err < 0) {
		op->err = err;
		return ROK_READY;
	}
	spin_lock(&e->lock);
	if (e->ready & REACTOR_BIT(d)) {
		e->ready &= (uint8_t)~REACTOR_BIT(d);
		spin_unlock(&e->lock);
		return ROK_READY;
	}
	uint32_t gen = e->gen;
	op->w.aux = reactor_aux(d, gen);
	waitq_link(&e->waiters[d], &op->w, cx, reactor_release, e);
	/* Linked before the ADD: an fd ready already raises an edge at the
	 * ADD, which finds the waiter. */
	bool add = !(e->have & REACTOR_BIT(d));
	spin_unlock(&e->lock);
	if (add)
		reactor_add(e, d, gen);
	return ROK_PENDING;
}

rok_poll rok_readable(rok_cx *cx, rok_io_op *op, int fd)
{
	return reactor_wait(cx, op, fd, REACTOR_IN);
}

rok_poll rok_writable(rok_cx *cx, rok_io_op *op, int fd)
{
	return reactor_wait(cx, op, fd, REACTOR_OUT);
}

/*
 * Forgets fd: a new generation, no readiness, no watched directions, every
 * waiter woken (with 0), and fd out of tfd before this returns, so that
 * the caller's close() races nothing.  Any thread, the reactor's included.
 */
static void reactor_reset(int fd)
{
	if (fd < 0 || fd >= REACTOR_FD_MAX)
		return;
	/* The lock keeps the table alive (reactor_free) and tfd open, and
	 * orders this DEL against an ADD of the same number. */
	pthread_mutex_lock(&reactor.lock);
	struct reactor_fd *e = reactor_fd_find(fd);
	if (e == NULL) {
		pthread_mutex_unlock(&reactor.lock);
		return;
	}
	spin_lock(&e->lock);
	bool watched = e->have != 0;
	bool waiting = e->waiters[0] != NULL || e->waiters[1] != NULL;
	e->ready = 0;
	if (watched || waiting)
		e->gen++;
	e->have = 0;
	spin_unlock(&e->lock);
	/* EBADF (closed before a wake_io) and ENOENT say it is out already;
	 * after a stop, tfd is closed and took it along. */
	if (watched && atomic_load_explicit(&reactor.state,
	                                    memory_order_relaxed) ==
	                       REACTOR_RUNNING)
		(void)epoll_ctl(reactor.tfd, EPOLL_CTL_DEL, fd, NULL);
	pthread_mutex_unlock(&reactor.lock);
	/* Unlocked (see the top).  A waiter of a newer generation, linked
	 * meanwhile, is woken with 0 too: a spurious wake-up.  The table
	 * outlives every forget: reactor_free comes after every task ended. */
	if (waiting) {
		reactor_wake_dir(e, REACTOR_IN, 0);
		reactor_wake_dir(e, REACTOR_OUT, 0);
	}
}

void rok_io_close(int fd)
{
	if (fd < 0)
		return;
	reactor_reset(fd);
	close(fd);
}

void rok_wake_io(int fd)
{
	reactor_reset(fd);
}

void rok_io_forget(int fd)
{
	reactor_reset(fd);
}
