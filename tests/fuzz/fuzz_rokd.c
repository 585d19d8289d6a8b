/*
 * fuzz_rokd.c — a libFuzzer target over rokd's frame decoding and dispatch.
 *
 * The real front end runs in-process: the runtime and its reactor thread,
 * the task table, the connection code.  Each input is a byte stream sent
 * down a fresh connection (a socketpair handed to conn_accept on the reactor
 * thread), after a valid hello so that dispatch is reachable, and followed
 * by the end of the stream.  The harness reads until the daemon closes the
 * connection, so every request the input held was decoded and answered.
 * Whatever the bytes, the daemon must not crash, hang or leak.
 *
 * The tasks an input spawns run within it: when the replies pause (a join
 * or a `logs -f` waiting for a long sleep) and again at the end, the
 * harness lets every task take its first poll, where a sleep files its
 * timer, and then cancels what is left (fuzz_tasks_settle), which also
 * ends those waits.  A 1440h sleep is thus polled by the input that
 * spawned it, not left queued for a later one or never run at all.  Exec
 * tasks fail at once: exec_init is not called, so no fuzzed command runs.
 *
 * Built and run by scripts/fuzz (clang -fsanitize=fuzzer,address,undefined)
 * with the dictionary rokd.dict and the seeds gen_corpus.c writes.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_tasks.h"
#include "journal.h"
#include "reactor.h"
#include "rokd.h"
#include "wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir[] = "/tmp/fuzz_rokd.XXXXXX";

/* The journal's files go with the process (the journal thread may still
 * hold them open: unlinking is fine). */
static void fuzz_cleanup(void)
{
	static const char *const names[] = {
		"journal.db", "journal.db-wal", "journal.db-shm", "rokd.lock",
	};
	char path[128];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", fuzz_dir, names[i]);
		unlink(path);
	}
	rmdir(fuzz_dir);
}

static void fuzz_accept_cb(void *arg)
{
	conn_accept((int)(intptr_t)arg);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_init(0);
	config_defaults(&config);
	config.max_queued = 10000;
	config.max_finished = 10000;
	setenv("ROK_WORKERS", "2", 1);
	/* A journal of its own, in a fresh directory removed at exit. */
	char err[512];
	if (mkdtemp(fuzz_dir) == NULL)
		abort();
	atexit(fuzz_cleanup);
	free(config.state_dir);
	config.state_dir = strdup(fuzz_dir);
	config.durability_full = false;
	if (config.state_dir == NULL || tasktab_init() < 0 ||
	    journal_open(err, sizeof(err)) < 0 || rok_start() < 0 ||
	    journal_recover(err, sizeof(err)) < 0 || journal_start() < 0)
		abort();
	return 0;
}

/* Writes what it can of [*p, *p + *n) without blocking: false once the
 * daemon closed the connection (fine: it may refuse what it read). */
static bool fuzz_write_some(int fd, const uint8_t **p, size_t *n)
{
	ssize_t w = send(fd, *p, *n, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (w < 0)
		return errno == EINTR || errno == EAGAIN;
	*p += w;
	*n -= (size_t)w;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Request{id: 1, hello: {protocol_version: 1}} */
	static const uint8_t hello[] = { 0, 0, 0, 6, 0x08, 0x01, 0x12, 0x02,
	                                 0x08, 0x01 };
	int sv[2];
	uint8_t buf[4096];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		abort();
	int fl = fcntl(sv[0], F_GETFL);
	if (fl < 0 || fcntl(sv[0], F_SETFL, fl | O_NONBLOCK) < 0 ||
	    reactor_call(fuzz_accept_cb, (void *)(intptr_t)sv[0]) < 0)
		abort();
	/* The hello goes first, whole: the buffer is empty. */
	if (send(sv[1], hello, sizeof(hello), MSG_NOSIGNAL) !=
	    (ssize_t)sizeof(hello))
		abort();
	/*
	 * The input and the replies at once (a large input would block on
	 * a daemon that waits for its replies to be read), then the end of
	 * the stream, then replies until the daemon closes its end.  A pause
	 * of 20 ms means what is left waits for tasks to end: run them,
	 * then cancel them.
	 */
	const uint8_t *p = data;
	size_t left = size;
	bool writing = true;
	for (;;) {
		if (writing && left == 0) {
			shutdown(sv[1], SHUT_WR);
			writing = false;
		}
		struct pollfd pfd = {
			.fd = sv[1],
			.events = POLLIN | (writing ? POLLOUT : 0),
		};
		int n = poll(&pfd, 1, 20);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			abort();
		if (n == 0) {
			fuzz_tasks_settle();
			continue;
		}
		if (writing && (pfd.revents & POLLOUT) &&
		    !fuzz_write_some(sv[1], &p, &left))
			left = 0;   /* closed by the daemon: read what it sent */
		if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t r = read(sv[1], buf, sizeof(buf));
			if (r < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (r <= 0)
				break;
		}
	}
	close(sv[1]);
	fuzz_tasks_settle();
	return 0;
}
