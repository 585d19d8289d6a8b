/*
 * commit-echo — the least any socket service can do per durable request:
 * a client process sends a 16-byte request over a Unix stream socket and
 * waits for the reply; a server process commits one row (WAL,
 * synchronous=FULL, as sqlite-commit) and then replies.  No protocol, no
 * event loop, no runtime.  bench/latency sets rokd's sequential
 * spawn-and-wait next to it: what rokd adds is the difference.  Against
 * sqlite-commit, this adds the round trip, its wake-ups, and the CPU
 * idling between commits (which on a virtual machine can slow the fsync
 * itself; sqlite-commit's GAP_US measures that part alone).
 *
 * MODE inline: the server's one thread reads, commits and replies.
 * MODE handoff: a reader thread passes each request to a committing
 * thread, which replies: one thread crossing, as rokd's reactor makes to
 * its journal thread.
 *
 *	commit-echo DBFILE MODE [N]
 *
 * prints: n=N p50_us=.. p99_us=.. max_us=..
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commit-row.h"

#define CE_MSG 16

static void ce_die(const char *what)
{
	fprintf(stderr, "commit-echo: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* 1: a whole message moved; 0: the peer closed before any byte was
 * read; -1: an error (errno says which), or the peer closed mid-message. */
static int ce_io(int fd, char *buf, int out)
{
	size_t done = 0;

	while (done < CE_MSG) {
		ssize_t r = out ? write(fd, buf + done, CE_MSG - done)
		                : read(fd, buf + done, CE_MSG - done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			if (!out && done == 0)
				return 0;
			errno = EPIPE;
			return -1;
		}
		done += (size_t)r;
	}
	return 1;
}

/* The server's side: an error ends it (the client then reports). */
static int ce_serve_io(int fd, char *buf, int out)
{
	int r = ce_io(fd, buf, out);

	if (r < 0)
		ce_die(out ? "server: write" : "server: read");
	return r;
}

struct ce_server {
	int fd;
	struct commit_row cr;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int pending;	/* requests read, not yet committed */
	int closed;	/* the client closed: commit what is pending, stop */
};

static void *ce_committer(void *arg)
{
	struct ce_server *s = arg;
	char buf[CE_MSG] = "ok";

	for (;;) {
		pthread_mutex_lock(&s->lock);
		while (s->pending == 0 && !s->closed)
			pthread_cond_wait(&s->cond, &s->lock);
		if (s->pending == 0) {
			pthread_mutex_unlock(&s->lock);
			return NULL;
		}
		s->pending--;
		pthread_mutex_unlock(&s->lock);
		commit_row_commit(&s->cr);
		ce_serve_io(s->fd, buf, 1);
	}
}

static void ce_serve(int fd, const char *path, int handoff)
{
	struct ce_server s = { .fd = fd };
	char buf[CE_MSG];
	pthread_t th;

	commit_row_open(&s.cr, "commit-echo", path);
	if ((errno = pthread_mutex_init(&s.lock, NULL)) ||
	    (errno = pthread_cond_init(&s.cond, NULL)))
		ce_die("pthread init");
	if (handoff && (errno = pthread_create(&th, NULL, ce_committer, &s)))
		ce_die("pthread_create");
	while (ce_serve_io(fd, buf, 0)) {
		if (!handoff) {
			commit_row_commit(&s.cr);
			ce_serve_io(fd, buf, 1);
			continue;
		}
		pthread_mutex_lock(&s.lock);
		s.pending++;
		pthread_cond_signal(&s.cond);
		pthread_mutex_unlock(&s.lock);
	}
	if (handoff) {
		pthread_mutex_lock(&s.lock);
		s.closed = 1;
		pthread_cond_signal(&s.cond);
		pthread_mutex_unlock(&s.lock);
		if ((errno = pthread_join(th, NULL)))
			ce_die("pthread_join");
	}
	commit_row_close(&s.cr);
	exit(0);
}

/* The client's I/O failed: say why, with the server's end if it died. */
static void ce_client_fail(pid_t pid, const char *what, int r)
{
	int status;

	if (r < 0)
		fprintf(stderr, "commit-echo: %s: %s\n", what, strerror(errno));
	else
		fprintf(stderr, "commit-echo: %s: the server closed\n", what);
	if (waitpid(pid, &status, 0) == pid) {
		if (WIFEXITED(status))
			fprintf(stderr, "commit-echo: the server exited with "
			        "status %d\n", WEXITSTATUS(status));
		else if (WIFSIGNALED(status))
			fprintf(stderr, "commit-echo: the server was killed by "
			        "signal %d\n", WTERMSIG(status));
	}
	exit(1);
}

int main(int argc, char **argv)
{
	char *end = NULL;
	long n = argc > 3 ? strtol(argv[3], &end, 10) : 2000;
	int sv[2], status, handoff, r;
	char buf[CE_MSG] = "spawn";
	int64_t *lat;
	pid_t pid;

	if (argc < 3 || argc > 4 || n < 1 || n > 10000000 ||
	    (end != NULL && (end == argv[3] || *end != '\0')) ||
	    (strcmp(argv[2], "inline") && strcmp(argv[2], "handoff"))) {
		fprintf(stderr, "usage: commit-echo DBFILE inline|handoff "
		        "[N (1..10000000)]\n");
		return 2;
	}
	handoff = strcmp(argv[2], "handoff") == 0;
	/* A server that died is reported by ce_client_fail, not by a
	 * silent SIGPIPE. */
	if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
		ce_die("signal");
	lat = malloc((size_t)n * sizeof(*lat));
	if (lat == NULL)
		ce_die("malloc");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		ce_die("socketpair");
	if ((pid = fork()) < 0)
		ce_die("fork");
	if (pid == 0) {
		close(sv[0]);
		ce_serve(sv[1], argv[1], handoff);
	}
	close(sv[1]);
	for (long i = -COMMIT_ROW_WARMUP; i < n; i++) {
		int64_t t0 = commit_row_now();

		if ((r = ce_io(sv[0], buf, 1)) <= 0)
			ce_client_fail(pid, "write", r);
		if ((r = ce_io(sv[0], buf, 0)) <= 0)
			ce_client_fail(pid, "read", r);
		if (i >= 0)
			lat[i] = commit_row_now() - t0;
	}
	if (close(sv[0]) != 0)
		ce_die("close");
	if (waitpid(pid, &status, 0) < 0)
		ce_die("waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "commit-echo: the server failed\n");
		return 1;
	}
	commit_row_report(lat, n);
	free(lat);
	return 0;
}
