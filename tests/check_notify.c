/*
 * check_notify.c — daemon/notify.c in-process: which environment turns the
 * watchdog on, and the watchdog itself: WATCHDOG=1 comes from a runtime
 * task, so a runtime whose workers are all stuck stops pinging (systemd
 * then restarts rokd) and starts again once they are free.
 *
 * How the runtime is wedged, without a hook in rokd: the test runs its own
 * runtime with one worker (ROK_WORKERS=1) and spawns a task that spins
 * until the test releases it.  A spinning worker is running, not blocked
 * in a call, so the monitor hands nothing off (sched/monitor.c): this is a
 * task stuck in a loop, the wedge the watchdog is for.  The ping that
 * would be due is never sent because the notifier task cannot run.
 *
 * The absence of a ping can only be seen over some time: the test waits 50
 * watchdog periods (a lower bound on what it checks, never an upper bound
 * on how fast anything runs), and then waits for the pings to come back.
 * rokd from the outside (READY=1, STATUS=, STOPPING=1, the period) is
 * tests/systemd.test.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rokd.h"
#include "testutil.h"

#define WATCHDOG_US 20000             /* a ping every 10 ms */

static char ndir[64];
static int rx = -1;                   /* the test's end: systemd's */

/* Binds the receiver and points NOTIFY_SOCKET at it. */
static void nsetup(const char *usec, const char *pid)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(ndir, sizeof(ndir), "/tmp/check_notify.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(ndir));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify", ndir);
	rx = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(rx, 0);
	ck_assert_int_eq(bind(rx, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setenv("NOTIFY_SOCKET", sa.sun_path, 1);
	if (usec != NULL)
		setenv("WATCHDOG_USEC", usec, 1);
	else
		unsetenv("WATCHDOG_USEC");
	if (pid != NULL)
		setenv("WATCHDOG_PID", pid, 1);
	else
		unsetenv("WATCHDOG_PID");
	log_init(0);
}

static void ncleanup(void)
{
	char path[128];

	close(rx);
	snprintf(path, sizeof(path), "%s/notify", ndir);
	unlink(path);
	rmdir(ndir);
}

/* The next message, waiting up to `ms` (-1: as long as it takes); 0 if
 * none came. */
static size_t nrecv(char *buf, size_t len, int ms)
{
	struct pollfd p = { .fd = rx, .events = POLLIN };

	int n = poll(&p, 1, ms);
	ck_assert_int_ge(n, 0);
	if (n == 0)
		return 0;
	ssize_t got = recv(rx, buf, len - 1, 0);
	ck_assert_int_gt(got, 0);
	buf[got] = '\0';
	return (size_t)got;
}

/* Waits for the next WATCHDOG=1 (other messages are skipped). */
static void nwait_ping(void)
{
	char buf[256];

	for (;;) {
		nrecv(buf, sizeof(buf), -1);
		if (strcmp(buf, "WATCHDOG=1") == 0)
			return;
	}
}

/* Drops what is queued; returns how many were WATCHDOG=1. */
static int ndrain(void)
{
	char buf[256];
	int pings = 0;

	while (nrecv(buf, sizeof(buf), 0) > 0)
		pings += strcmp(buf, "WATCHDOG=1") == 0;
	return pings;
}

START_TEST(watchdog_env)
{
	char pid[32];

	/* Period: half of WATCHDOG_USEC; the variables are gone after. */
	nsetup("20000", NULL);
	ck_assert_int_eq(notify_init(), 0);
	ck_assert(notify_enabled());
	ck_assert_int_eq(notify_watchdog_interval(), ROK_MS(10));
	ck_assert_ptr_null(getenv("NOTIFY_SOCKET"));
	ck_assert_ptr_null(getenv("WATCHDOG_USEC"));
	ck_assert_int_eq(notify_send("STATUS=%s", "hello"), 0);
	char buf[64];
	ck_assert_uint_eq(nrecv(buf, sizeof(buf), -1), 12);
	ck_assert_str_eq(buf, "STATUS=hello");
	ncleanup();

	/* WATCHDOG_PID names another process: not ours to ping. */
	snprintf(pid, sizeof(pid), "%d", (int)getpid() + 1);
	nsetup("20000", pid);
	ck_assert_int_eq(notify_init(), 0);
	ck_assert_int_eq(notify_watchdog_interval(), 0);
	ck_assert_ptr_null(getenv("WATCHDOG_PID"));
	ncleanup();

	/* Ours, and nonsense or out-of-range periods. */
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	nsetup("20000", pid);
	ck_assert_int_eq(notify_init(), 0);
	ck_assert_int_eq(notify_watchdog_interval(), ROK_MS(10));
	ncleanup();
	static const char *bad[] = { "", "0", "-5", "12x", "99999999999999999",
		                     "18446744073709551616" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		nsetup(bad[i], NULL);
		ck_assert_int_eq(notify_init(), 0);
		ck_assert_int_eq(notify_watchdog_interval(), 0);
		ncleanup();
	}

	/* An abstract name: '@' stands for the leading NUL. */
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char name[64];
	int n = snprintf(name, sizeof(name), "@check_notify.%d", (int)getpid());
	memcpy(sa.sun_path, name, (size_t)n);
	sa.sun_path[0] = '\0';
	int ab = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(ab, 0);
	ck_assert_int_eq(bind(ab, (struct sockaddr *)&sa,
	                      (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
	                                  (size_t)n)), 0);
	setenv("NOTIFY_SOCKET", name, 1);
	ck_assert_int_eq(notify_init(), 0);
	ck_assert_int_eq(notify_send("READY=1"), 0);
	ck_assert_int_eq(recv(ab, buf, sizeof(buf) - 1, 0), 7);
	close(ab);

	/* A NOTIFY_SOCKET that is not a path or an abstract name. */
	nsetup(NULL, NULL);
	setenv("NOTIFY_SOCKET", "relative/path", 1);
	ck_assert_int_eq(notify_init(), -EINVAL);
	ck_assert(!notify_enabled());
	ck_assert_int_eq(notify_send("READY=1"), 0);   /* a no-op */
	ncleanup();
}
END_TEST

static _Atomic bool spin_started, spin_release;

/* Holds its worker until released, never awaiting: a task stuck in a loop. */
static rok_poll spin_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	/* Relaxed: flags with no data behind them. */
	atomic_store_explicit(&spin_started, true, memory_order_relaxed);
	while (!atomic_load_explicit(&spin_release, memory_order_relaxed))
		;
	return ROK_READY;
}

START_TEST(watchdog_stops_when_wedged)
{
	nsetup("20000", NULL);
	test_workers(1);
	ck_assert_int_eq(tasktab_init(), 0);   /* STATUS= reads its counts */
	ck_assert_int_eq(notify_init(), 0);
	ck_assert_int_eq(rok_start(), 0);
	ck_assert_int_eq(notify_start(), 0);
	for (int i = 0; i < 3; i++)
		nwait_ping();

	/* Wedge the one worker. */
	rok_task *spin;
	ck_assert_int_eq(rok_spawn(&spin, spin_poll, NULL, 0), 0);
	while (!atomic_load_explicit(&spin_started, memory_order_relaxed))
		test_sleep_ms(1);
	/* A ping sent before the spinner took the worker may be queued. */
	ndrain();
	test_sleep_ms(50 * WATCHDOG_US / 2 / 1000);
	ck_assert_int_eq(ndrain(), 0);
	struct rok_stats st;
	rok_stats_get(&st);
	ck_assert_uint_eq(st.handoffs, 0);   /* nothing ran it elsewhere */

	/* Free it: the pings come back. */
	atomic_store_explicit(&spin_release, true, memory_order_relaxed);
	nwait_ping();
	nwait_ping();
	ck_assert_int_eq(rok_task_wait(spin, NULL), 0);
	rok_task_unref(spin);
	ck_assert_int_eq(rok_stop(), 0);
	tasktab_free();
	ncleanup();
}
END_TEST

static Suite *notify_suite(void)
{
	const struct test_case cases[] = {
		{ "watchdog_env", watchdog_env },
		{ "watchdog_stops_when_wedged", watchdog_stops_when_wedged },
	};
	return TEST_SUITE("notify", cases, 30);
}

int main(void)
{
	return test_run(notify_suite());
}
