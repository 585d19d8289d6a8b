/*
 * reactor.c — the I/O driver: one libevent thread per process that waits on
 * epoll, edge-triggered, and wakes the tasks awaiting fd readiness
 * (rok_readable, rok_writable in <rok/io.h>); also the hand-off point where
 * internal code runs its own libevent events (reactor_call in reactor.h).
 *
 * Who touches what.  The event_base and every struct event belong to the
 * reactor thread alone; other threads talk to it through a queue and an
 * eventfd that the loop watches (the libuv pattern).  We chose this over
 * libevent's own locking (evthread_use_pthreads) because: that switch is
 * process-global and must come before any base exists, so a library should
 * not flip it for the program; the hand-off is off the hot path anyway
 * (see below); one thread owning the base needs no lock order between
 * libevent's locks and ours; and ThreadSanitizer, which cannot see inside
 * the uninstrumented libevent, has nothing to misjudge.
 *
 * Registrations are per fd, not per wait (Tokio's design).  The first await
 * on an fd in a direction asks the reactor to add an EV_ET|EV_PERSIST event
 * for it; the event stays until rok_io_forget / rok_wake_io.  Each edge the
 * kernel reports sets a readiness bit in the fd's entry and wakes the
 * waiters of that direction; an await that finds the bit set clears it and
 * is ready at once.  So an await on an fd already watched never involves
 * the reactor thread: it takes the entry's spinlock, tests a bit, and links
 * a waiter or not.  Clearing the bit before the caller's I/O call is what
 * makes edge-triggering safe: any data that arrives after the clear either
 * is read by that call or raises a new edge.
 *
 * The fd table.  Entries live in chunks of 256, found through a directory
 * indexed by fd >> 8.  Chunks never move or go away while the reactor
 * exists, so a waiter may point into one; the directory grows by copy, and
 * old directories are kept (retired) until reactor_free, so readers need no
 * lock: they load the directory and the chunk pointer with acquire.
 *
 * An fd number outlives its file.  Each entry has a generation: forget and
 * wake_io bump it, drop the readiness bits and the wanted directions, queue
 * the entry, and wait until the reactor has applied it (a sequence number
 * and a condition variable under reactor.lock); the reactor, seeing a
 * generation it has not applied, frees the old event (EPOLL_CTL_DEL) before
 * adding a new one.  Waiting keeps the reactor's epoll_ctl on the number
 * ahead of the caller's close() and of whatever file gets the number next;
 * forget without it would race them (ThreadSanitizer says so, and a file
 * still open elsewhere, by dup or fork, would stay in epoll).  On the
 * reactor thread itself forget applies the queue inline instead.
 * rok_io_close needs no wait: it queues the entry marked close_fd and the
 * reactor closes the fd after its epoll_ctl, the number staying taken
 * (so unusable by another file) until then.
 *
 * Library code must not log, but libevent logs a failed EPOLL_CTL_ADD or
 * _MOD (not a failed DEL).  So the reactor asks fstat() first whether the
 * fd is open and of a kind epoll accepts, and keeps one event per fd (see
 * reactor_unwatch).  What remains is a close() racing the first
 * registration of that fd, documented in <rok/io.h>.
 *
 * Life cycle.  The reactor starts lazily, at the first registration or
 * reactor_call (a program that never awaits I/O has no reactor thread and
 * no epoll fd), and only while the executor runs.  rok_stop calls
 * reactor_stop once the workers are joined (so no wake-up from here races
 * its drain) and reactor_free after the drain (the drain's cancelled
 * waiters still unlink themselves from the table).
 *
 * Locks.  reactor.lock (a mutex) guards start and stop, the request queues,
 * the apply sequence and table growth; an entry's spinlock guards its
 * readiness, wanted directions, generation and waiter lists.  Order:
 * reactor.lock, then an entry lock.  A task is never woken with an entry
 * lock held.  The reactor thread waits for nobody but these two locks, so
 * a thread waiting for it (forget) cannot deadlock with it.
 */
#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
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

/* Directions: index into waiters[], and their bits. */
enum { REACTOR_IN = 0, REACTOR_OUT = 1 };
#define REACTOR_BIT(d) (1u << (d))

enum {
	REACTOR_IDLE = 0,       /* no thread, no table: starts on demand */
	REACTOR_RUNNING = 1,
	REACTOR_CLOSED = 2,     /* stopped inside rok_stop: refuses to start */
};

/* One fd's state.  Fields above `have_gen` are under `lock`. */
struct reactor_fd {
	struct spin lock;
	uint8_t ready;                  /* edges not consumed yet: BIT(dir) */
	uint8_t want;                   /* directions tasks asked to watch */
	bool dirty;                     /* queued for the reactor to apply */
	bool close_fd;                  /* rok_io_close: close after apply */
	uint32_t gen;                   /* bumped by forget / wake_io */
	rok_waiter *waiters[2];         /* by direction */
	struct reactor_fd *dirty_next;  /* under reactor.lock */
	int fd;                         /* constant */
	/* Reactor thread only. */
	uint8_t have;                   /* directions `ev` watches */
	uint32_t have_gen;              /* generation `ev` belongs to */
	struct event *ev;               /* or NULL */
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
	struct reactor_fd *dirty;               /* entries to apply */
	uint64_t queued, applied;               /* dirty pushes; of them done */
	pthread_cond_t applied_cond;            /* `applied` moved */
	struct reactor_call *calls, **calls_tail;
	/* Set up before the thread starts, torn down after it is joined. */
	int efd;
	struct event_base *base;
	struct event *wake_ev;
	pthread_t thread;
} reactor = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.applied_cond = PTHREAD_COND_INITIALIZER,
	.efd = -1,
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

/* Lock held.  Wakes the running loop unless a wake-up is pending. */
static void reactor_signal_locked(void)
{
	if (atomic_load_explicit(&reactor.state, memory_order_relaxed) !=
	            REACTOR_RUNNING ||
	    reactor.signalled)
		return;
	reactor.signalled = true;
	reactor_kick_locked();
}

/*
 * Lock held.  Like reactor_signal_locked, but the caller writes the
 * eventfd itself after unlocking (reactor_kick_claimed) when this returns
 * true: the loop thread, woken by the write, takes reactor.lock at once,
 * and found it held for the rest of our write() (a futex round trip per
 * call, measured with strace on rokd's reply path).  The claim counts in
 * `kicking`, which the teardown waits out, so the write never reaches a
 * closed (or reused) eventfd number.
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

/* Lock held.  Queues an entry that was marked dirty (under its lock). */
static void reactor_push_locked(struct reactor_fd *e)
{
	e->dirty_next = reactor.dirty;
	reactor.dirty = e;
	reactor.queued++;
	reactor_signal_locked();
}

static void reactor_push(struct reactor_fd *e)
{
	pthread_mutex_lock(&reactor.lock);
	reactor_push_locked(e);
	pthread_mutex_unlock(&reactor.lock);
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

/* An event fired (reactor thread). */
static void reactor_io_cb(evutil_socket_t fd, short what, void *arg)
{
	struct reactor_fd *e = arg;
	unsigned bits = ((what & EV_READ) ? REACTOR_BIT(REACTOR_IN) : 0) |
	                ((what & EV_WRITE) ? REACTOR_BIT(REACTOR_OUT) : 0);

	(void)fd;
	spin_lock(&e->lock);
	/* A forget not applied yet: the event is for a file being dropped. */
	bool stale = e->gen != e->have_gen;
	if (!stale)
		e->ready |= (uint8_t)bits;
	spin_unlock(&e->lock);
	if (stale)
		return;
	for (unsigned d = 0; d < 2; d++)
		if (bits & REACTOR_BIT(d))
			reactor_wake_dir(e, d, 0);
}

/* ---- applying registrations (reactor thread) -------------------------- */

/* 0 if epoll can watch fd, else -errno: what EPOLL_CTL_ADD would say,
 * asked without libevent, which would log the failure. */
static int reactor_check_fd(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
		return -EPERM;
	return 0;
}

/*
 * One event per fd, for every direction wanted.  With two (a read and a
 * write event) libevent would turn the removal of the first into an
 * EPOLL_CTL_MOD, which fails and is logged when the fd is closed already;
 * the removal of the only event is a DEL, whose EBADF / ENOENT libevent
 * takes quietly.
 */
static void reactor_unwatch(struct reactor_fd *e)
{
	if (e->ev != NULL)
		event_free(e->ev);
	e->ev = NULL;
	e->have = 0;
}

/* Watches the directions `dirs` too: 0 or -errno. */
static int reactor_watch(struct reactor_fd *e, unsigned dirs)
{
	int err = reactor_check_fd(e->fd);

	if (err < 0)
		return err;
	dirs |= e->have;
	short what = ((dirs & REACTOR_BIT(REACTOR_IN)) ? EV_READ : 0) |
	             ((dirs & REACTOR_BIT(REACTOR_OUT)) ? EV_WRITE : 0) |
	             EV_ET | EV_PERSIST;
	struct event *ev = event_new(reactor.base, e->fd, what, reactor_io_cb,
	                             e);
	if (ev == NULL)
		return -ENOMEM;
	/* The new event first, then the old one goes: libevent merges them
	 * into one EPOLL_CTL_MOD (or an ADD for the first) and the removal
	 * changes nothing in the kernel. */
	errno = 0;
	if (event_add(ev, NULL) < 0) {
		err = errno != 0 ? -errno : -EINVAL;
		event_free(ev);
		return err;
	}
	if (e->ev != NULL)
		event_free(e->ev);
	e->ev = ev;
	e->have = (uint8_t)dirs;
	return 0;
}

/* Brings e's event in line with what its tasks want. */
static void reactor_apply(struct reactor_fd *e)
{
	spin_lock(&e->lock);
	e->dirty = false;
	unsigned want = e->want;
	uint32_t gen = e->gen;
	bool close_fd = e->close_fd;
	e->close_fd = false;
	spin_unlock(&e->lock);

	if (gen != e->have_gen) {
		reactor_unwatch(e);
		e->have_gen = gen;
	}
	if (close_fd) {
		/* rok_io_close: out of epoll (above), now the number goes.
		 * Nobody awaits it (its owner gave it up), so want is 0. */
		reactor_unwatch(e);
		close(e->fd);
		return;
	}
	unsigned add = want & ~(unsigned)e->have;
	if (add == 0)
		return;
	int err = reactor_watch(e, add);
	if (err == 0)
		return;
	/* Not watchable: the waiters learn why; the next await asks again
	 * (the fd may be a new file by then). */
	spin_lock(&e->lock);
	bool same = e->gen == gen;
	if (same)
		e->want &= (uint8_t)~add;
	spin_unlock(&e->lock);
	for (unsigned d = 0; same && d < 2; d++)
		if (add & REACTOR_BIT(d))
			reactor_wake_dir(e, d, err);
}

/* Applies every queued entry, then tells the forgetters waiting for it. */
static void reactor_apply_queued(void)
{
	pthread_mutex_lock(&reactor.lock);
	struct reactor_fd *dirty = reactor.dirty;
	uint64_t upto = reactor.queued;
	reactor.dirty = NULL;
	pthread_mutex_unlock(&reactor.lock);

	while (dirty != NULL) {
		/* Read the link first: once apply clears `dirty`, a task may
		 * queue the entry again and overwrite it. */
		struct reactor_fd *next = dirty->dirty_next;
		reactor_apply(dirty);
		dirty = next;
	}
	/* The mutex orders our epoll_ctl calls before the waiter's return
	 * (and its close()). */
	pthread_mutex_lock(&reactor.lock);
	if (reactor.applied != upto) {
		reactor.applied = upto;
		pthread_cond_broadcast(&reactor.applied_cond);
	}
	pthread_mutex_unlock(&reactor.lock);
}

/* The eventfd fired: apply queued registrations, run queued calls. */
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

	reactor_apply_queued();
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

/* Lock held.  Frees the libevent objects and closes the eventfd. */
static void reactor_teardown_locked(void)
{
	struct reactor_dir *d = atomic_load_explicit(&reactor.dir,
	                                             memory_order_relaxed);

	for (size_t i = 0; d != NULL && i < d->n; i++) {
		struct reactor_fd *c = atomic_load_explicit(
			&d->chunks[i], memory_order_relaxed);
		for (unsigned j = 0; c != NULL && j < REACTOR_CHUNK; j++)
			reactor_unwatch(&c[j]);
	}
	if (reactor.wake_ev != NULL)
		event_free(reactor.wake_ev);
	reactor.wake_ev = NULL;
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
}

static struct event_base *reactor_base_new(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *base = NULL;

	if (cfg == NULL)
		return NULL;
	/* Edge-triggered and O(1): epoll on Linux, whatever EVENT_NO*
	 * variables say.  No locks: only the reactor thread uses it. */
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
	int err;

	reactor.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (reactor.efd < 0)
		return -errno;
	struct reactor_dir *d = calloc(1, sizeof(*d) + REACTOR_DIR_MIN *
	                                                       sizeof(d->chunks[0]));
	reactor.base = reactor_base_new();
	if (d == NULL || reactor.base == NULL) {
		err = -ENOMEM;
		goto fail;
	}
	reactor.wake_ev = event_new(reactor.base, reactor.efd,
	                            EV_READ | EV_PERSIST, reactor_wake_cb, NULL);
	if (reactor.wake_ev == NULL || event_add(reactor.wake_ev, NULL) < 0) {
		err = -ENOMEM;
		goto fail;
	}
	d->n = REACTOR_DIR_MIN;
	atomic_store_explicit(&reactor.dir, d, memory_order_relaxed);
	d = NULL;
	reactor.stopping = false;
	reactor.signalled = false;
	reactor.dirty = NULL;
	reactor.applied = reactor.queued;
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
	/* Nothing will be applied any more: release every forgetter. */
	reactor.applied = reactor.queued;
	pthread_cond_broadcast(&reactor.applied_cond);
	reactor_teardown_locked();
	/* Calls queued after the last turn cannot exist: reactor_call refuses
	 * once `stopping` is set, and the last turn took everything before.
	 * Entries it did not apply are dropped, but an fd handed over by
	 * rok_io_close is still closed (its events are gone with the base). */
	for (struct reactor_fd *e = reactor.dirty; e != NULL;
	     e = e->dirty_next) {
		spin_lock(&e->lock);
		bool close_fd = e->close_fd;
		e->close_fd = false;
		spin_unlock(&e->lock);
		if (close_fd)
			close(e->fd);
	}
	reactor.dirty = NULL;
	pthread_mutex_unlock(&reactor.lock);
}

void reactor_free(void)
{
	pthread_mutex_lock(&reactor.lock);
	reactor_table_free_locked();
	reactor.dirty = NULL;
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

static rok_poll reactor_wait(rok_cx *cx, rok_io_op *op, int fd, unsigned d)
{
	struct reactor_fd *e;
	bool push = false;

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
	op->w.aux = reactor_aux(d, e->gen);
	waitq_link(&e->waiters[d], &op->w, cx, reactor_release, e);
	if (!(e->want & REACTOR_BIT(d))) {
		e->want |= (uint8_t)REACTOR_BIT(d);
		push = !e->dirty;
		e->dirty = true;
	}
	spin_unlock(&e->lock);
	if (push)
		reactor_push(e);
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
 * Under reactor.lock: takes e out of use (no interest, no readiness, its
 * waiters woken with 0) and queues it for the reactor if it is in epoll.
 * With close_fd the reactor is also told to close the fd, and the entry
 * is queued whenever the reactor may still touch it. Returns that: the
 * entry is queued, or another one is being applied (a concurrent forget
 * of fd, say).
 */
static bool reactor_detach_locked(struct reactor_fd *e, bool close_fd)
{
	spin_lock(&e->lock);
	bool watched = e->want != 0;
	bool waiting = e->waiters[0] != NULL || e->waiters[1] != NULL;
	bool busy = watched || waiting || e->dirty ||
	            reactor.applied != reactor.queued;
	bool push = false;
	e->ready = 0;
	if (watched || waiting) {
		e->gen++;
		e->want = 0;
	}
	if (close_fd ? busy : watched || waiting) {
		/* With close_fd, the number stays taken until the reactor's
		 * epoll_ctl is done, so nothing can race it. */
		if (close_fd)
			e->close_fd = true;
		push = !e->dirty;
		e->dirty = true;
	}
	spin_unlock(&e->lock);
	if (push)
		reactor_push_locked(e);
	if (waiting) {
		reactor_wake_dir(e, REACTOR_IN, 0);
		reactor_wake_dir(e, REACTOR_OUT, 0);
	}
	return busy;
}

/*
 * Forgets fd: a new generation, no readiness, no wanted directions, every
 * waiter woken; and returns only once the reactor thread has removed its
 * event (or right away if there is none), so that the caller's close()
 * cannot race the reactor's epoll_ctl on the same number.
 */
static void reactor_reset(int fd)
{
	if (fd < 0 || fd >= REACTOR_FD_MAX)
		return;
	/* The lock keeps the table alive (reactor_free) and orders the
	 * queueing; the entry lock is taken inside it. */
	pthread_mutex_lock(&reactor.lock);
	struct reactor_fd *e = reactor_fd_find(fd);
	if (e == NULL) {
		pthread_mutex_unlock(&reactor.lock);
		return;
	}
	bool busy = reactor_detach_locked(e, false);
	if (!busy || atomic_load_explicit(&reactor.state,
	                                  memory_order_relaxed) !=
	                     REACTOR_RUNNING) {
		pthread_mutex_unlock(&reactor.lock);
		return;
	}
	if (reactor_tls_on_thread) {
		/* The reactor itself (a reactor_call function or an event
		 * callback of the daemon's): apply now. */
		pthread_mutex_unlock(&reactor.lock);
		reactor_apply_queued();
		return;
	}
	uint64_t mine = reactor.queued;
	while (reactor.applied < mine)
		pthread_cond_wait(&reactor.applied_cond, &reactor.lock);
	pthread_mutex_unlock(&reactor.lock);
}

void rok_io_close(int fd)
{
	if (fd < 0)
		return;
	if (fd >= REACTOR_FD_MAX) {
		close(fd);
		return;
	}
	pthread_mutex_lock(&reactor.lock);
	struct reactor_fd *e = reactor_fd_find(fd);
	/* The reactor thread itself, or no reactor: rok_io_forget's way,
	 * which does not wait there. */
	if (e == NULL || reactor_tls_on_thread ||
	    atomic_load_explicit(&reactor.state, memory_order_relaxed) !=
	            REACTOR_RUNNING) {
		pthread_mutex_unlock(&reactor.lock);
		reactor_reset(fd);
		close(fd);
		return;
	}
	bool busy = reactor_detach_locked(e, true);
	pthread_mutex_unlock(&reactor.lock);
	if (!busy)
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
