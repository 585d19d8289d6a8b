/*
 * check_reactor.c — the reactor (sched/reactor.c): readiness awaits on
 * pipes and socketpairs, driven by real tasks.  One TCase per behaviour:
 *
 * read:          a task awaits a pipe, the test writes a byte, the task
 *                wakes, reads it (non-blocking fd) and returns it.
 * before:        readiness before the await is not lost: a byte written
 *                before the reader exists, and an edge that reaches an
 *                already watched fd while nobody waits.
 * only_waiters:  a write wakes the reader of that pipe and not the reader
 *                of another; on one socket, readiness for writing wakes the
 *                writer and not the reader.
 * writable:      a writer blocked on a socketpair filled until EAGAIN wakes
 *                when the test drains the other end.
 * ping_pong:     two tasks echo bursts of 1..7 bytes through a socketpair,
 *                each reading until EAGAIN before it awaits again.
 * cancel:        cancelling tasks waiting readable / writable gives
 *                -ECANCELED, runs their cleanup, and rok_registrations()
 *                is back at its baseline.
 * wake_io:       close(fd) then rok_wake_io(fd): the waiter's await returns,
 *                its read fails with EBADF; a later await on the closed
 *                number says -EBADF; after shutdown both directions wake.
 * forget:        rok_io_forget(fd) before close(fd): a new pipe that gets
 *                the same numbers is watched afresh.
 * close:         rok_io_close(fd), watched or not: the number is closed
 *                when it returns, and a new pipe that gets it is watched
 *                afresh.
 * errors:        fd -1 and 2^24 are refused at once, a regular file says
 *                -EPERM: each await is ready with op->err set.
 * reused:        a watched socket closed without a forget, its number
 *                taken by a regular file: awaits there say -EPERM in both
 *                directions, and the socket's reader is woken.
 * thousand:      1,000 tasks each awaiting their own pipe all wake and
 *                finish (ROK_TEST_SCALE shrinks it).
 * call:          reactor_call runs functions on the reactor thread, in
 *                order; reactor_base() is set there only.
 * call_in:       reactor_call_in (caller storage, freed by the function)
 *                keeps the same order mixed with reactor_call.
 * idle:          with the reactor running and a task waiting, the process
 *                uses (almost) no CPU.
 * stop:          rok_stop with the reactor running and a task waiting joins
 *                its thread, runs the cleanup, and leaves as many fds and
 *                threads as before the start; a restart works.
 *
 * Synchronisation never sleeps: the test waits for rok_registrations() to
 * show the tasks parked, and for "the reactor has processed every edge up to
 * now" with a barrier of two chained reactor_call()s (an edge raised before
 * the first call makes the reactor's set of task fds readable, which the
 * same epoll_wait as the call's wake-up reports, or an earlier one; so its
 * callback, which takes up to 64 edges a turn, has run before the second
 * call runs: no test raises more at once).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "reactor.h"
#include "rok/io.h"
#include "testthreads.h"
#include "testutil.h"

#define CRX_EOF 1000                    /* a reader's result at end of file */
#define CRX_RESULT(v) ((int)(intptr_t)(v))

/* Surprises seen inside tasks or on the reactor thread; asserted zero. */
static _Atomic unsigned long crx_bad;
/* Cleanup sections run. */
static _Atomic long crx_cleanups;

static void crx_surprise(void)
{
	atomic_fetch_add(&crx_bad, 1);
}

/* Messages libevent logged: library code must not make it log (task fds
 * never reach libevent, so nothing should). */
static _Atomic int crx_logged;
static char crx_first_log[256];

static void crx_log_cb(int severity, const char *msg)
{
	(void)severity;
	if (atomic_fetch_add(&crx_logged, 1) == 0)
		snprintf(crx_first_log, sizeof(crx_first_log), "%s", msg);
}

static double crx_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Waits (yielding) until rok_registrations() reads `want`. */
static void crx_wait_regs(int64_t want)
{
	double deadline = crx_now() + test_timeout(20);
	int64_t got;

	while ((got = rok_registrations()) != want) {
		if (crx_now() > deadline)
			ck_abort_msg("registrations stuck at %" PRId64
			             ", want %" PRId64, got, want);
		sched_yield();
	}
}

/* Starts the runtime with 2 workers; returns the registrations baseline. */
static int64_t crx_start(void)
{
	test_workers(2);
	int err = rok_start();
	ck_assert_msg(err == 0 || err == -EALREADY, "rok_start: %d", err);
	return rok_registrations();
}

static void crx_stop(void)
{
	ck_assert_uint_eq(atomic_load(&crx_bad), 0);
	ck_assert_int_eq(rok_stop(), 0);
	ck_assert_msg(atomic_load(&crx_logged) == 0, "libevent logged: %s",
	              crx_first_log);
}

static void crx_pipe(int p[2])
{
	ck_assert_int_eq(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
}

static void crx_socketpair(int s[2])
{
	ck_assert_int_eq(socketpair(AF_UNIX,
	                            SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	                            0, s),
	                 0);
}

/* Forgets and closes each of n fds (the end of a test that awaited them). */
static void crx_forget_close(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		rok_io_forget(fds[i]);
		close(fds[i]);
	}
}

static void crx_put(int fd, unsigned char c)
{
	ck_assert_int_eq(write(fd, &c, 1), 1);
}

/* Writes to fd until EAGAIN. */
static void crx_fill(int fd)
{
	char buf[4096] = { 0 };

	for (;;) {
		ssize_t n = write(fd, buf, sizeof(buf));
		if (n < 0) {
			ck_assert_int_eq(errno, EAGAIN);
			return;
		}
	}
}

/* Reads fd until EAGAIN; returns the bytes read.  *w (if not NULL) counts
 * the 'w' bytes among them (the writer task's). */
static long crx_drain(int fd, int *w)
{
	char buf[4096];
	long total = 0;

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n <= 0) {
			ck_assert(n < 0 && errno == EAGAIN);
			return total;
		}
		for (ssize_t i = 0; w != NULL && i < n; i++)
			*w += buf[i] == 'w';
		total += n;
	}
}


/* Waits for t, drops it, returns the code; *v gets the value. */
static int crx_wait(rok_task *t, void **v)
{
	int err = rok_task_wait(t, v);

	rok_task_unref(t);
	return err;
}

/* Waits for t and returns its value as an int (it must have one). */
static int crx_result(rok_task *t)
{
	void *v = NULL;

	ck_assert_int_eq(crx_wait(t, &v), 0);
	return CRX_RESULT(v);
}

/* Fails unless t finishes before the deadline (instead of a hang). */
static void crx_wait_finished(rok_task *t)
{
	double deadline = crx_now() + test_timeout(20);

	while (!rok_task_is_finished(t)) {
		if (crx_now() > deadline)
			ck_abort_msg("task %" PRIu64 " did not finish",
			             rok_task_id(t));
		sched_yield();
	}
}

/* ---- the reactor barrier ---------------------------------------------- */

static void crx_barrier_last(void *arg)
{
	if (!reactor_on_thread())
		crx_surprise();
	sem_post(arg);
}

static void crx_barrier_first(void *arg)
{
	if (reactor_call(crx_barrier_last, arg) != 0) {
		crx_surprise();
		sem_post(arg);
	}
}

/* Returns once the reactor has handled every edge raised before the call. */
static void crx_barrier(void)
{
	sem_t s;

	ck_assert_int_eq(sem_init(&s, 0, 0), 0);
	ck_assert_int_eq(reactor_call(crx_barrier_first, &s), 0);
	while (sem_wait(&s) != 0)
		ck_assert_int_eq(errno, EINTR);
	sem_destroy(&s);
}

/* ---- tasks ------------------------------------------------------------ */

/* Reads one byte: returns it, CRX_EOF at end of file, or -errno. */
struct crx_reader {
	int fd;
	rok_io_op io;
};

static rok_poll crx_reader_poll(rok_cx *cx, void *frame)
{
	struct crx_reader *f = frame;
	unsigned char c;
	ssize_t n;

	ROK_BEGIN(cx);
	for (;;) {
		ROK_AWAIT(cx, rok_readable(cx, &f->io, f->fd));
		n = read(f->fd, &c, 1);
		if (n == 1)
			ROK_RETURN(cx, c);
		if (n == 0)
			ROK_RETURN(cx, CRX_EOF);
		if (errno != EAGAIN)
			ROK_RETURN(cx, -errno);
	}
	ROK_CLEANUP(cx);
	atomic_fetch_add(&crx_cleanups, 1);
	ROK_END(cx);
}

static rok_task *crx_spawn_reader(int fd)
{
	struct crx_reader f = { .fd = fd };
	rok_task *t;

	ck_assert_int_eq(rok_spawn(&t, crx_reader_poll, &f, sizeof(f)), 0);
	return t;
}

/* Writes one byte: returns 1 or -errno. */
struct crx_writer {
	int fd;
	rok_io_op io;
};

static rok_poll crx_writer_poll(rok_cx *cx, void *frame)
{
	struct crx_writer *f = frame;
	ssize_t n;

	ROK_BEGIN(cx);
	for (;;) {
		ROK_AWAIT(cx, rok_writable(cx, &f->io, f->fd));
		n = send(f->fd, "w", 1, MSG_NOSIGNAL);
		if (n == 1)
			ROK_RETURN(cx, 1);
		if (errno != EAGAIN)
			ROK_RETURN(cx, -errno);
	}
	ROK_CLEANUP(cx);
	atomic_fetch_add(&crx_cleanups, 1);
	ROK_END(cx);
}

static rok_task *crx_spawn_writer(int fd)
{
	struct crx_writer f = { .fd = fd };
	rok_task *t;

	ck_assert_int_eq(rok_spawn(&t, crx_writer_poll, &f, sizeof(f)), 0);
	return t;
}

/* Awaits once and returns op->err. */
struct crx_probe {
	int fd;
	bool write;
	rok_io_op io;
};

static rok_poll crx_probe_poll(rok_cx *cx, void *frame)
{
	struct crx_probe *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, f->write ? rok_writable(cx, &f->io, f->fd)
	                       : rok_readable(cx, &f->io, f->fd));
	ROK_RETURN(cx, f->io.err);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static rok_task *crx_spawn_probe(int fd, bool write)
{
	struct crx_probe f = { .fd = fd, .write = write };
	rok_task *t;

	ck_assert_int_eq(rok_spawn(&t, crx_probe_poll, &f, sizeof(f)), 0);
	return t;
}

static int crx_probe(int fd, bool write)
{
	return crx_result(crx_spawn_probe(fd, write));
}

/*
 * Ping: for each round r, sends 1 + r % 7 bytes of value r & 0xff and
 * reads them back; then shuts its side down.  Returns the bytes echoed, or
 * -errno.  Writes and reads go until EAGAIN before each await.
 */
#define CRX_BURST 7

struct crx_ping {
	int fd;
	long rounds, round, total;
	int k, off;
	unsigned char buf[CRX_BURST];
	rok_io_op io;
};

static rok_poll crx_ping_poll(rok_cx *cx, void *frame)
{
	struct crx_ping *f = frame;
	ssize_t n;

	ROK_BEGIN(cx);
	for (f->round = 0; f->round < f->rounds; f->round++) {
		f->k = 1 + (int)(f->round % CRX_BURST);
		memset(f->buf, (int)(f->round & 0xff), (size_t)f->k);
		for (f->off = 0; f->off < f->k;) {
			n = send(f->fd, f->buf + f->off, (size_t)(f->k - f->off),
			         MSG_NOSIGNAL);
			if (n > 0) {
				f->off += (int)n;
				continue;
			}
			if (errno != EAGAIN)
				ROK_RETURN(cx, -errno);
			ROK_AWAIT(cx, rok_writable(cx, &f->io, f->fd));
		}
		for (f->off = 0; f->off < f->k;) {
			n = read(f->fd, f->buf, sizeof(f->buf));
			if (n > 0) {
				for (ssize_t i = 0; i < n; i++)
					if (f->buf[i] != (f->round & 0xff))
						crx_surprise();
				f->off += (int)n;
				continue;
			}
			if (n == 0)
				ROK_RETURN(cx, -EPIPE);
			if (errno != EAGAIN)
				ROK_RETURN(cx, -errno);
			ROK_AWAIT(cx, rok_readable(cx, &f->io, f->fd));
		}
		if (f->off != f->k)
			crx_surprise();
		f->total += f->k;
	}
	shutdown(f->fd, SHUT_WR);
	ROK_RETURN(cx, f->total);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Pong: echoes what it reads until end of file; returns the bytes. */
struct crx_pong {
	int fd;
	long total;
	int len, off;
	unsigned char buf[64];
	rok_io_op io;
};

static rok_poll crx_pong_poll(rok_cx *cx, void *frame)
{
	struct crx_pong *f = frame;
	ssize_t n;

	ROK_BEGIN(cx);
	for (;;) {
		n = read(f->fd, f->buf, sizeof(f->buf));
		if (n == 0)
			break;
		if (n < 0) {
			if (errno != EAGAIN)
				ROK_RETURN(cx, -errno);
			ROK_AWAIT(cx, rok_readable(cx, &f->io, f->fd));
			continue;
		}
		f->len = (int)n;
		f->total += n;
		for (f->off = 0; f->off < f->len;) {
			n = send(f->fd, f->buf + f->off,
			         (size_t)(f->len - f->off), MSG_NOSIGNAL);
			if (n > 0) {
				f->off += (int)n;
				continue;
			}
			if (errno != EAGAIN)
				ROK_RETURN(cx, -errno);
			ROK_AWAIT(cx, rok_writable(cx, &f->io, f->fd));
		}
	}
	ROK_RETURN(cx, f->total);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* ---- read ------------------------------------------------------------- */

START_TEST(test_reactor_read)
{
	int64_t base = crx_start();
	int p[2];

	crx_pipe(p);
	rok_task *t = crx_spawn_reader(p[0]);
	crx_wait_regs(base + 1);               /* parked on the pipe */
	crx_put(p[1], 'x');
	ck_assert_int_eq(crx_result(t), 'x');
	ck_assert_int_eq(rok_registrations(), base);

	/* Again on the same, now watched, fd. */
	t = crx_spawn_reader(p[0]);
	crx_wait_regs(base + 1);
	crx_put(p[1], 'y');
	ck_assert_int_eq(crx_result(t), 'y');

	rok_io_forget(p[0]);
	close(p[0]);
	close(p[1]);
	crx_stop();
}
END_TEST

/* ---- before ----------------------------------------------------------- */

START_TEST(test_reactor_before)
{
	int64_t base = crx_start();
	int p[2];

	crx_pipe(p);
	/* Data before the first await: epoll reports it when the fd is
	 * added. */
	crx_put(p[1], 'a');
	ck_assert_int_eq(crx_result(crx_spawn_reader(p[0])), 'a');

	/* The fd is watched now.  An edge while nobody waits sets the
	 * readiness bit (the barrier makes sure the reactor saw it); the
	 * next reader takes it without any new edge coming. */
	crx_put(p[1], 'b');
	crx_barrier();
	rok_task *t = crx_spawn_reader(p[0]);
	crx_wait_finished(t);
	ck_assert_int_eq(crx_result(t), 'b');

	ck_assert_int_eq(rok_registrations(), base);

	rok_io_forget(p[0]);
	close(p[0]);
	close(p[1]);
	crx_stop();
}
END_TEST

/* ---- only_waiters ----------------------------------------------------- */

START_TEST(test_reactor_only_waiters)
{
	int64_t base = crx_start();
	int a[2], b[2], s[2];

	/*
	 * The tasks that must not wake are probes: they await once and end,
	 * so a wrong wake-up takes their registration away for good, on the
	 * reactor thread, before the barrier returns.  (A task that awaits
	 * again after a spurious wake-up would hide it.)
	 */
	crx_pipe(a);
	crx_pipe(b);
	rok_task *ra = crx_spawn_reader(a[0]);
	rok_task *rb = crx_spawn_probe(b[0], false);
	crx_wait_regs(base + 2);
	crx_put(a[1], 'A');
	ck_assert_int_eq(crx_result(ra), 'A');
	crx_barrier();
	ck_assert_int_eq(rok_registrations(), base + 1);
	ck_assert(!rok_task_is_finished(rb));

	/* Same socket, two directions. */
	crx_socketpair(s);
	crx_fill(s[0]);
	rok_task *w = crx_spawn_writer(s[0]);
	rok_task *r = crx_spawn_probe(s[0], false);
	crx_wait_regs(base + 3);
	int ws = 0;
	ck_assert(crx_drain(s[1], &ws) > 0);
	ck_assert_int_eq(crx_result(w), 1);
	crx_barrier();
	ck_assert_int_eq(rok_registrations(), base + 2);
	ck_assert(!rok_task_is_finished(r));
	ck_assert(!rok_task_is_finished(rb));

	crx_put(s[1], 'S');
	ck_assert_int_eq(crx_result(r), 0);
	crx_put(b[1], 'B');
	ck_assert_int_eq(crx_result(rb), 0);
	ck_assert_int_eq(rok_registrations(), base);

	int fds[] = { a[0], a[1], b[0], b[1], s[0], s[1] };
	crx_forget_close(fds, 6);
	crx_stop();
}
END_TEST

/* ---- writable --------------------------------------------------------- */

START_TEST(test_reactor_writable)
{
	int64_t base = crx_start();
	int s[2];

	crx_socketpair(s);
	crx_fill(s[0]);
	rok_task *w = crx_spawn_writer(s[0]);
	crx_wait_regs(base + 1);
	ck_assert(!rok_task_is_finished(w));
	/* The writer may wake and write while the drain still runs. */
	int ws = 0;
	ck_assert(crx_drain(s[1], &ws) > 0);
	ck_assert_int_eq(crx_result(w), 1);
	crx_drain(s[1], &ws);
	ck_assert_int_eq(ws, 1);
	ck_assert_int_eq(rok_registrations(), base);

	rok_io_forget(s[0]);
	close(s[0]);
	close(s[1]);
	crx_stop();
}
END_TEST

/* ---- ping_pong -------------------------------------------------------- */

START_TEST(test_reactor_ping_pong)
{
	int64_t base = crx_start();
	long rounds = test_scale(5000);
	int s[2];

	crx_socketpair(s);
	struct crx_ping pi = { .fd = s[0], .rounds = rounds };
	struct crx_pong po = { .fd = s[1] };
	rok_task *tpi, *tpo;
	ck_assert_int_eq(rok_spawn(&tpo, crx_pong_poll, &po, sizeof(po)), 0);
	ck_assert_int_eq(rok_spawn(&tpi, crx_ping_poll, &pi, sizeof(pi)), 0);

	long want = 0;
	for (long r = 0; r < rounds; r++)
		want += 1 + r % CRX_BURST;
	ck_assert_int_eq(crx_result(tpi), want);
	ck_assert_int_eq(crx_result(tpo), want);
	ck_assert_int_eq(rok_registrations(), base);

	rok_io_forget(s[0]);
	rok_io_forget(s[1]);
	close(s[0]);
	close(s[1]);
	crx_stop();
}
END_TEST

/* ---- cancel ----------------------------------------------------------- */

START_TEST(test_reactor_cancel)
{
	int64_t base = crx_start();
	int p[2], s[2];
	void *v;

	crx_pipe(p);
	crx_socketpair(s);
	crx_fill(s[0]);
	rok_task *r = crx_spawn_reader(p[0]);
	rok_task *w = crx_spawn_writer(s[0]);
	crx_wait_regs(base + 2);

	rok_task_cancel(r);
	ck_assert_int_eq(rok_task_wait(r, &v), -ECANCELED);
	ck_assert(rok_task_is_cancelled(r));
	rok_task_unref(r);
	crx_wait_regs(base + 1);

	rok_task_cancel(w);
	ck_assert_int_eq(crx_wait(w, &v), -ECANCELED);
	crx_wait_regs(base);
	ck_assert_int_eq(atomic_load(&crx_cleanups), 2);

	/* The fds stay watched: a new reader still wakes. */
	r = crx_spawn_reader(p[0]);
	crx_wait_regs(base + 1);
	crx_put(p[1], 'z');
	ck_assert_int_eq(crx_result(r), 'z');

	int fds[] = { p[0], p[1], s[0], s[1] };
	crx_forget_close(fds, 4);
	crx_stop();
}
END_TEST

/* ---- wake_io ---------------------------------------------------------- */

START_TEST(test_reactor_wake_io)
{
	int64_t base = crx_start();
	int p[2], s[2];

	/*
	 * Closed under a waiter: the documented order is close, then wake.
	 * The fd has been read from before, so the reactor watches it already.
	 */
	crx_pipe(p);
	crx_put(p[1], 'p');
	ck_assert_int_eq(crx_result(crx_spawn_reader(p[0])), 'p');
	rok_task *r = crx_spawn_reader(p[0]);
	crx_wait_regs(base + 1);
	ck_assert_int_eq(close(p[0]), 0);
	rok_wake_io(p[0]);
	ck_assert_int_eq(crx_result(r), -EBADF);
	ck_assert_int_eq(rok_registrations(), base);
	/* An await on the closed number: ready at once, with the reason. */
	ck_assert_int_eq(crx_probe(p[0], false), -EBADF);
	close(p[1]);

	/* The number comes back with a new pipe: watched afresh. */
	int q[2];
	crx_pipe(q);
	r = crx_spawn_reader(q[0]);
	crx_wait_regs(base + 1);
	crx_put(q[1], 'q');
	ck_assert_int_eq(crx_result(r), 'q');

	/* A socket shut down: both directions wake (the kernel's hang-up;
	 * rok_wake_io after it changes nothing). */
	crx_socketpair(s);
	crx_fill(s[0]);
	rok_task *w = crx_spawn_writer(s[0]);
	r = crx_spawn_reader(s[0]);
	crx_wait_regs(base + 2);
	ck_assert_int_eq(shutdown(s[0], SHUT_RDWR), 0);
	rok_wake_io(s[0]);
	ck_assert_int_eq(crx_result(r), CRX_EOF);
	ck_assert_int_eq(crx_result(w), -EPIPE);
	ck_assert_int_eq(rok_registrations(), base);

	/* rok_wake_io on numbers never awaited, and out of range: no-ops. */
	rok_wake_io(-1);
	rok_wake_io(1 << 30);
	rok_wake_io(q[1]);

	int fds[] = { q[0], q[1], s[0], s[1] };
	crx_forget_close(fds, 4);
	crx_stop();
}
END_TEST

/* ---- forget and close ------------------------------------------------ */

/* Whether fd is a closed number. */
static bool crx_closed(int fd)
{
	return fcntl(fd, F_GETFD) == -1 && errno == EBADF;
}

/*
 * What forget and close share: a watched pipe with a pending edge is
 * given up with `drop`, and a new pipe, q, given the same numbers must see
 * none of the old one's readiness. q is left open and watched.
 */
static void crx_drop_and_reuse(int64_t base, void (*drop)(int fd), int q[2])
{
	int p[2];

	crx_pipe(p);
	crx_put(p[1], '1');
	ck_assert_int_eq(crx_result(crx_spawn_reader(p[0])), '1');
	/* Watched, with a pending edge: dropping it drops both. */
	crx_put(p[1], '2');
	crx_barrier();
	drop(p[0]);
	drop(p[1]);                         /* never awaited */

	crx_pipe(q);
	ck_assert_int_eq(q[0], p[0]);       /* the lowest numbers come back */
	rok_task *r = crx_spawn_reader(q[0]);
	crx_wait_regs(base + 1);
	crx_barrier();
	ck_assert(!rok_task_is_finished(r));  /* no stale readiness */
	crx_put(q[1], '3');
	ck_assert_int_eq(crx_result(r), '3');
}

static void crx_forget_then_close(int fd)
{
	rok_io_forget(fd);
	close(fd);
}

static void crx_io_close_checked(int fd)
{
	/* Out of epoll and closed before it returns. */
	rok_io_close(fd);
	ck_assert(crx_closed(fd));
}

START_TEST(test_reactor_forget)
{
	int64_t base = crx_start();
	int q[2];

	crx_drop_and_reuse(base, crx_forget_then_close, q);
	rok_io_forget(q[0]);
	close(q[0]);
	close(q[1]);
	crx_stop();
}
END_TEST

START_TEST(test_reactor_close)
{
	int64_t base = crx_start();
	int q[2];

	crx_drop_and_reuse(base, crx_io_close_checked, q);
	rok_io_close(q[0]);
	rok_io_close(q[1]);
	crx_stop();
	/* After the stop nothing is left half-closed. */
	ck_assert(crx_closed(q[0]));
	ck_assert(crx_closed(q[1]));
}
END_TEST

/* ---- errors ----------------------------------------------------------- */

START_TEST(test_reactor_errors)
{
	int64_t base = crx_start();
	char path[] = "/tmp/check_reactor.XXXXXX";
	int fd = mkostemp(path, O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	unlink(path);
	ck_assert_int_eq(crx_probe(-1, false), -EBADF);
	ck_assert_int_eq(crx_probe(-1, true), -EBADF);
	ck_assert_int_eq(crx_probe(1 << 24, false), -EMFILE);
	ck_assert_int_eq(crx_probe(fd, false), -EPERM);
	ck_assert_int_eq(crx_probe(fd, true), -EPERM);
	ck_assert_int_eq(rok_registrations(), base);
	rok_io_forget(fd);
	close(fd);
	crx_stop();
}
END_TEST

/*
 * A socket awaited for reading is closed without a forget (against the
 * rules of <rok/io.h>) and its number goes to a regular file.  An await
 * for writing there cannot extend the old watch (gone with the socket)
 * nor add the file: it says -EPERM, the reader is woken rather than left
 * on a watch that no longer exists, and a new read await asks epoll
 * again (-EPERM) instead of taking the number for watched.
 */
START_TEST(test_reactor_reused)
{
	int64_t base = crx_start();
	char path[] = "/tmp/check_reactor.XXXXXX";
	int s[2];

	crx_socketpair(s);
	rok_task *r = crx_spawn_reader(s[0]);
	crx_wait_regs(base + 1);
	crx_barrier();
	close(s[0]);
	int fd = mkostemp(path, O_CLOEXEC);
	ck_assert_int_eq(fd, s[0]);
	unlink(path);
	ck_assert_int_eq(crx_probe(fd, true), -EPERM);
	crx_wait_finished(r);
	ck_assert_int_eq(crx_result(r), CRX_EOF);   /* the file, read */
	ck_assert_int_eq(crx_probe(fd, false), -EPERM);
	ck_assert_int_eq(rok_registrations(), base);
	rok_io_forget(fd);
	close(fd);
	rok_io_forget(s[1]);
	close(s[1]);
	crx_stop();
}
END_TEST

/* ---- thousand --------------------------------------------------------- */

START_TEST(test_reactor_thousand)
{
	long n = test_scale(1000);
	struct rlimit rl;

	/* Two fds per pipe, plus room for the runtime and Check. */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rlim_t need = (rlim_t)(2 * n + 64);
	if (rl.rlim_cur < need) {
		rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
		ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
		if (rl.rlim_cur < need)
			n = (long)(rl.rlim_cur - 64) / 2;
	}

	int64_t base = crx_start();
	int (*p)[2] = calloc((size_t)n, sizeof(*p));
	rok_task **t = calloc((size_t)n, sizeof(*t));
	ck_assert(p != NULL && t != NULL);
	for (long i = 0; i < n; i++) {
		crx_pipe(p[i]);
		t[i] = crx_spawn_reader(p[i][0]);
	}
	crx_wait_regs(base + n);
	for (long i = 0; i < n; i++)
		crx_put(p[i][1], (unsigned char)(i & 0xff));
	for (long i = 0; i < n; i++)
		ck_assert_int_eq(crx_result(t[i]), (int)(i & 0xff));
	ck_assert_int_eq(rok_registrations(), base);
	for (long i = 0; i < n; i++) {
		rok_io_forget(p[i][0]);
		close(p[i][0]);
		close(p[i][1]);
	}
	free(p);
	free(t);
	crx_stop();
}
END_TEST

/* ---- call ------------------------------------------------------------- */

#define CRX_CALLS 100

static int crx_order[CRX_CALLS];
static _Atomic int crx_ncalls;

static void crx_record(void *arg)
{
	int i = atomic_fetch_add(&crx_ncalls, 1);

	if (!reactor_on_thread() || reactor_base() == NULL || i >= CRX_CALLS)
		crx_surprise();
	else
		crx_order[i] = (int)(intptr_t)arg;
}

/* Queues another call from the reactor thread: it must run later, not
 * inside reactor_call. */
static void crx_nested(void *arg)
{
	int before = atomic_load(&crx_ncalls);

	if (reactor_call(crx_record, arg) != 0 ||
	    atomic_load(&crx_ncalls) != before)
		crx_surprise();
}

/* Waits for the CRX_CALLS calls and checks they ran once each, in the
 * order they were made. */
static void crx_calls_ran_in_order(void)
{
	double deadline = crx_now() + test_timeout(20);
	while (atomic_load(&crx_ncalls) < CRX_CALLS) {
		ck_assert(crx_now() < deadline);
		sched_yield();
	}
	crx_barrier();
	ck_assert_int_eq(atomic_load(&crx_ncalls), CRX_CALLS);
	for (int i = 0; i < CRX_CALLS; i++)
		ck_assert_int_eq(crx_order[i], i);
}

START_TEST(test_reactor_call)
{
	/* Starts the executor and the reactor on its own. */
	ck_assert_int_eq(reactor_call(crx_record, (void *)(intptr_t)0), 0);
	for (int i = 1; i < CRX_CALLS - 1; i++)
		ck_assert_int_eq(reactor_call(crx_record, (void *)(intptr_t)i),
		                 0);
	ck_assert_int_eq(reactor_call(crx_nested,
	                              (void *)(intptr_t)(CRX_CALLS - 1)),
	                 0);
	ck_assert(!reactor_on_thread());
	ck_assert_ptr_null(reactor_base());
	crx_calls_ran_in_order();
	crx_stop();
}
END_TEST

/* A call in caller storage, which its function frees (a free by the
 * loop too would be a double free). */
struct crx_in {
	struct reactor_call call;
	int i;
};

static void crx_in_record(void *arg)
{
	struct crx_in *n = arg;

	crx_record((void *)(intptr_t)n->i);
	free(n);
}

START_TEST(test_reactor_call_in)
{
	atomic_store(&crx_ncalls, 0);
	for (int i = 0; i < CRX_CALLS; i++) {
		if (i % 2 != 0) {
			ck_assert_int_eq(reactor_call(crx_record,
			                              (void *)(intptr_t)i), 0);
			continue;
		}
		struct crx_in *n = malloc(sizeof(*n));
		ck_assert_ptr_nonnull(n);
		n->i = i;
		ck_assert_int_eq(reactor_call_in(&n->call, crx_in_record, n),
		                 0);
	}
	crx_calls_ran_in_order();
	crx_stop();
}
END_TEST

static _Atomic int crx_stop_err;

static void crx_stop_from_reactor(void *arg)
{
	atomic_store(&crx_stop_err, rok_stop());
	sem_post(arg);
}

START_TEST(test_reactor_call_stop)
{
	sem_t s;

	ck_assert_int_eq(sem_init(&s, 0, 0), 0);
	ck_assert_int_eq(reactor_call(crx_stop_from_reactor, &s), 0);
	while (sem_wait(&s) != 0)
		ck_assert_int_eq(errno, EINTR);
	sem_destroy(&s);
	/* It would join its own thread. */
	ck_assert_int_eq(atomic_load(&crx_stop_err), -EDEADLK);
	crx_stop();
}
END_TEST

/* ---- idle ------------------------------------------------------------- */

START_TEST(test_reactor_idle)
{
	int64_t base = crx_start();
	int p[2];

	crx_pipe(p);
	rok_task *r = crx_spawn_reader(p[0]);
	crx_wait_regs(base + 1);
	crx_barrier();              /* all quiet */

	double before = test_cpu_seconds();
	test_sleep_ms(500);
	double used = test_cpu_seconds() - before;
	ck_assert_msg(used < 0.1, "idle runtime with a reactor used %.3f s of "
	              "CPU in 0.5 s", used);

	crx_put(p[1], 'i');
	ck_assert_int_eq(crx_result(r), 'i');
	rok_io_forget(p[0]);
	close(p[0]);
	close(p[1]);
	crx_stop();
}
END_TEST

/* ---- stop ------------------------------------------------------------- */

/* Waits until the process has `want` threads: a joined thread leaves
 * /proc/self/task a moment after pthread_join returns. */
static void crx_wait_threads(int want)
{
	double deadline = crx_now() + test_timeout(20);
	int got;

	while ((got = test_thread_count()) != want) {
		if (crx_now() > deadline)
			ck_abort_msg("%d threads, want %d", got, want);
		sched_yield();
	}
}

struct crx_tid {
	sem_t done;
	pid_t tid;
};

static void crx_get_tid(void *arg)
{
	struct crx_tid *t = arg;

	t->tid = gettid();
	sem_post(&t->done);
}

/* The reactor thread's id. */
static pid_t crx_reactor_tid(void)
{
	struct crx_tid t;

	ck_assert_int_eq(sem_init(&t.done, 0, 0), 0);
	ck_assert_int_eq(reactor_call(crx_get_tid, &t), 0);
	while (sem_wait(&t.done) != 0)
		ck_assert_int_eq(errno, EINTR);
	sem_destroy(&t.done);
	return t.tid;
}

START_TEST(test_reactor_stop)
{
	char path[64];

	/* After a first pthread_create (sanitizer runtimes start a thread
	 * then), once its joined thread is no longer listed. */
	int threads0 = test_thread_baseline();
	int fds0 = test_dir_entries("/proc/self/fd");

	for (int round = 0; round < 3; round++) {
		int64_t base = crx_start();
		long cleanups = atomic_load(&crx_cleanups);
		int p[2], q[2];

		crx_pipe(p);
		crx_pipe(q);
		rok_task *r = crx_spawn_reader(p[0]);
		crx_put(p[1], 'r');
		ck_assert_int_eq(crx_result(r), 'r');
		/* The reactor runs: one thread, whose id we can see. */
		pid_t tid = crx_reactor_tid();
		snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
		ck_assert_int_eq(access(path, F_OK), 0);
		ck_assert_int_ne(tid, gettid());

		/* Stop with a (detached) task waiting on q: its cleanup runs
		 * and its registration goes. */
		struct crx_reader f = { .fd = q[0] };
		ck_assert_int_eq(rok_spawn(NULL, crx_reader_poll, &f,
		                           sizeof(f)), 0);
		crx_wait_regs(base + 1);
		ck_assert_int_eq(rok_stop(), 0);
		ck_assert_int_eq(atomic_load(&crx_cleanups), cleanups + 2);
		ck_assert_int_eq(rok_registrations(), 0);

		close(p[0]);
		close(p[1]);
		close(q[0]);
		close(q[1]);
		ck_assert_int_eq(test_dir_entries("/proc/self/fd"), fds0);
		crx_wait_threads(threads0);
		ck_assert_int_ne(access(path, F_OK), 0);
	}
	ck_assert_uint_eq(atomic_load(&crx_bad), 0);
	ck_assert_int_eq(atomic_load(&crx_logged), 0);
}
END_TEST

/* ---- suite ------------------------------------------------------------ */

static Suite *crx_suite(void)
{
	Suite *s = suite_create("reactor");

	test_add(s, "read", test_reactor_read, 0, 30);
	test_add(s, "before", test_reactor_before, 0, 30);
	test_add(s, "only_waiters", test_reactor_only_waiters, 0, 30);
	test_add(s, "writable", test_reactor_writable, 0, 30);
	test_add(s, "ping_pong", test_reactor_ping_pong, 0, 30);
	test_add(s, "cancel", test_reactor_cancel, 0, 30);
	test_add(s, "wake_io", test_reactor_wake_io, 0, 30);
	test_add(s, "forget", test_reactor_forget, 0, 30);
	test_add(s, "close", test_reactor_close, 0, 30);
	test_add(s, "errors", test_reactor_errors, 0, 30);
	test_add(s, "reused", test_reactor_reused, 0, 30);
	test_add(s, "thousand", test_reactor_thousand, 0, 30);
	test_add(s, "call", test_reactor_call, 0, 30);
	test_add(s, "call_in", test_reactor_call_in, 0, 30);
	test_add(s, "call_stop", test_reactor_call_stop, 0, 30);
	test_add(s, "idle", test_reactor_idle, 0, 30);
	test_add(s, "stop", test_reactor_stop, 0, 30);
	return s;
}

int main(void)
{
	event_set_log_callback(crx_log_cb);
	return test_run(crx_suite());
}
