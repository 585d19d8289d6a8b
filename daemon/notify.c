/*
 * notify.c — systemd's service notifications (sd_notify(3)) without
 * libsystemd: READY=1, RELOADING=1, STOPPING=1, STATUS= and the watchdog.
 *
 * The protocol is one datagram per message to the AF_UNIX socket named by
 * NOTIFY_SOCKET (in the abstract namespace when it starts with '@').
 * notify_init runs on the main thread before any other thread exists: it
 * reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID, removes them from
 * the environment (no task should talk to systemd in rokd's name) and opens
 * the one socket every later send uses.  After that the state is read-only
 * and notify_send may be called from any thread.  Sends never block
 * (MSG_DONTWAIT): a full receiver queue costs a message, never a worker.
 *
 * The watchdog and STATUS= lines come from one runtime task, the notifier
 * (notify_start): it sends WATCHDOG=1 every half WATCHDOG_USEC, as
 * sd_watchdog_enabled(3) advises, so that a runtime whose workers are all
 * stuck stops pinging and systemd restarts rokd.  A thread of its own
 * would keep pinging for a wedged runtime.  The same task compares the
 * running and queued counts at most once a second and sends STATUS= when
 * they changed.  Without NOTIFY_SOCKET nothing is started: no wake-ups.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rokd.h"

/* Longest watchdog accepted: a day (systemd allows more; rokd has no use
 * for it, and the bound keeps the arithmetic in range). */
#define NOTIFY_WATCHDOG_MAX_US (24ULL * 3600 * 1000000)
/* STATUS= at most this often. */
#define NOTIFY_STATUS_EVERY ROK_S(1)

static struct {
	int fd;                     /* -1: no NOTIFY_SOCKET */
	struct sockaddr_un sa;
	socklen_t len;
	int64_t ping_ns;            /* WATCHDOG=1 every this; 0: no watchdog */
} notify = { .fd = -1 };

/* The watchdog settings, if they are meant for this process. */
static int64_t notify_watchdog_ns(void)
{
	const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	char *end;

	if (usec == NULL)
		return 0;
	if (pid != NULL) {
		errno = 0;
		long p = strtol(pid, &end, 10);
		if (errno != 0 || *pid == '\0' || *end != '\0' ||
		    p != (long)getpid())
			return 0;
	}
	errno = 0;
	unsigned long long us = strtoull(usec, &end, 10);
	if (errno != 0 || *usec == '\0' || *end != '\0' || us == 0 ||
	    us > NOTIFY_WATCHDOG_MAX_US) {
		log_warnx("WATCHDOG_USEC=%s: expected 1..%llu; no watchdog",
		          usec, NOTIFY_WATCHDOG_MAX_US);
		return 0;
	}
	return ROK_US((int64_t)us) / 2;
}

int notify_init(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	size_t n = path != NULL ? strlen(path) : 0;
	int64_t ping = notify_watchdog_ns();
	int err = 0;

	/* Called again (tests), it starts over. */
	if (notify.fd >= 0)
		close(notify.fd);
	memset(&notify, 0, sizeof(notify));
	notify.fd = -1;
	notify.sa.sun_family = AF_UNIX;
	if (path == NULL) {
		/* Nothing to tell. */
	} else if ((path[0] != '/' && path[0] != '@') || n < 2 ||
	           n > sizeof(notify.sa.sun_path)) {
		err = -EINVAL;
	} else {
		memcpy(notify.sa.sun_path, path, n);
		if (path[0] == '@')
			notify.sa.sun_path[0] = '\0';   /* abstract */
		/* A path is NUL-terminated when there is room; an abstract
		 * name is exactly its bytes. */
		notify.len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
		                         n + (path[0] == '/' &&
		                              n < sizeof(notify.sa.sun_path)));
		notify.fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (notify.fd < 0)
			err = -errno;
		else
			notify.ping_ns = ping;
	}
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	return err;
}

bool notify_enabled(void)
{
	return notify.fd >= 0;
}

int64_t notify_watchdog_interval(void)
{
	return notify.ping_ns;
}

int notify_send(const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (notify.fd < 0)
		return 0;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(msg))
		return -EMSGSIZE;
	if (sendto(notify.fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT,
	           (const struct sockaddr *)&notify.sa, notify.len) < 0)
		return -errno;
	return 0;
}

/* ---- the notifier task ------------------------------------------------ */

struct notify_frame {
	rok_sleep_op nap;
	int64_t next_ping;          /* rok_now() of the next WATCHDOG=1 */
	int64_t next_status;        /* earliest next STATUS= */
	int64_t wake;               /* the current sleep's deadline */
	uint64_t running, queued;   /* as last sent */
	bool sent;                  /* a STATUS= went out */
	bool warned;                /* a failed send was logged */
};

/* Sends one message; logs the first failure only (a dead receiver would
 * otherwise log at every tick). */
static void notify_task_send(struct notify_frame *f, const char *msg)
{
	int err = notify_send("%s", msg);

	if (err < 0 && !f->warned) {
		f->warned = true;
		log_errno(err, "sd_notify %s", msg);
	}
}

static void notify_task_status(struct notify_frame *f, int64_t now)
{
	uint64_t c[RT_NSTATES];
	char msg[96];

	if (now < f->next_status)
		return;
	tasktab_counts(c);
	if (f->sent && c[RT_RUNNING] == f->running && c[RT_QUEUED] == f->queued)
		return;
	f->running = c[RT_RUNNING];
	f->queued = c[RT_QUEUED];
	f->sent = true;
	f->next_status = now + NOTIFY_STATUS_EVERY;
	snprintf(msg, sizeof(msg), "STATUS=%llu running, %llu queued",
	         (unsigned long long)f->running, (unsigned long long)f->queued);
	notify_task_send(f, msg);
}

static rok_poll notify_task_poll(rok_cx *cx, void *frame)
{
	struct notify_frame *f = frame;
	int64_t now;

	ROK_BEGIN(cx);
	for (;;) {
		now = rok_now();
		if (notify.ping_ns > 0 && now >= f->next_ping) {
			notify_task_send(f, "WATCHDOG=1");
			f->next_ping = now + notify.ping_ns;
		}
		notify_task_status(f, now);
		/* Changes show within a second; the watchdog is on time. */
		f->wake = now + NOTIFY_STATUS_EVERY;
		if (notify.ping_ns > 0 && f->next_ping < f->wake)
			f->wake = f->next_ping;
		ROK_AWAIT(cx, rok_sleep_until(cx, &f->nap, f->wake));
	}
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

int notify_start(void)
{
	struct notify_frame f = { .next_ping = 0 };

	if (notify.fd < 0)
		return 0;
	/* Detached: rok_stop cancels it with every other task. */
	return rok_spawn(NULL, notify_task_poll, &f, sizeof(f));
}
