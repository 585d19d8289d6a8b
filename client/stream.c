/*
 * stream.c — the client's socket: a non-blocking Unix stream with an output
 * buffer of framed requests and an input buffer of reply bytes.  Called by
 * client.c only, on the thread that owns the rok_client.
 *
 * The socket is non-blocking so that a client with many requests in flight
 * never deadlocks against the daemon: whenever it waits, it waits for both
 * "readable" and (with output pending) "writable", and serves whichever
 * comes.  Every syscall is retried on EINTR; writes use MSG_NOSIGNAL so a
 * daemon that went away yields -EPIPE, never SIGPIPE.
 *
 * Invariants: out_off <= out_len <= out_cap, in_off <= in_len <= in_cap;
 * the input buffer never grows beyond WIRE_HEADER + in_max plus one read.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client-private.h"

#ifndef MSG_NOSIGNAL
#error "librokclient needs MSG_NOSIGNAL (Linux, the BSDs); add SO_NOSIGPIPE support in stream_attach"
#endif

/* Bytes asked of each read(): big enough that a list page comes in a few. */
#define STREAM_READ_CHUNK (64u * 1024)

void stream_init(struct stream *s, uint32_t in_max)
{
	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->in_max = in_max;
}

void stream_done(struct stream *s)
{
	if (s->fd >= 0)
		close(s->fd);   /* an EINTR here still closed it on Linux */
	free(s->out);
	free(s->in);
	s->fd = -1;
	s->out = s->in = NULL;
	s->out_off = s->out_len = s->out_cap = 0;
	s->in_off = s->in_len = s->in_cap = 0;
}

int stream_attach(struct stream *s, int fd)
{
	int fl;

	s->fd = fd;
	fl = fcntl(fd, F_GETFD);
	if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0)
		return -errno;
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

/* Grows *buf to hold `need` bytes; keeps doubling so appends stay O(1). */
static int stream_grow(uint8_t **buf, size_t *cap, size_t need)
{
	size_t n = *cap != 0 ? *cap : 4096;
	uint8_t *p;

	if (need <= *cap)
		return 0;
	while (n < need) {
		if (n > SIZE_MAX / 2)
			return -ENOMEM;
		n *= 2;
	}
	p = realloc(*buf, n);
	if (p == NULL)
		return -ENOMEM;
	*buf = p;
	*cap = n;
	return 0;
}

int stream_reserve(struct stream *s, size_t n, uint8_t **p)
{
	int rc;

	*p = NULL;
	/* Drop what was written before growing: the buffer is reused. */
	if (s->out_off == s->out_len) {
		s->out_off = s->out_len = 0;
	} else if (s->out_off > 0 && s->out_len + n > s->out_cap) {
		memmove(s->out, s->out + s->out_off, s->out_len - s->out_off);
		s->out_len -= s->out_off;
		s->out_off = 0;
	}
	if (n > SIZE_MAX - s->out_len)
		return -ENOMEM;
	rc = stream_grow(&s->out, &s->out_cap, s->out_len + n);
	if (rc < 0)
		return rc;
	*p = s->out + s->out_len;
	return 0;
}

void stream_commit(struct stream *s, size_t n)
{
	s->out_len += n;
}

bool stream_pending(const struct stream *s)
{
	return s->out_off < s->out_len;
}

int stream_write(struct stream *s)
{
	while (s->out_off < s->out_len) {
		ssize_t n = send(s->fd, s->out + s->out_off,
				 s->out_len - s->out_off, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		s->out_off += (size_t)n;   /* a short write: loop for the rest */
	}
	s->out_off = s->out_len = 0;
	return 0;
}

long stream_read(struct stream *s)
{
	ssize_t n;
	int rc;

	/* Compact: parsed bytes are never looked at again. */
	if (s->in_off > 0) {
		memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
		s->in_len -= s->in_off;
		s->in_off = 0;
	}
	rc = stream_grow(&s->in, &s->in_cap, s->in_len + STREAM_READ_CHUNK);
	if (rc < 0)
		return rc;
	for (;;) {
		n = recv(s->fd, s->in + s->in_len, s->in_cap - s->in_len, 0);
		if (n >= 0 || errno != EINTR)
			break;
	}
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
	if (n == 0)
		return -ECONNRESET;
	s->in_len += (size_t)n;
	return (long)n;
}

long stream_frame(struct stream *s, const uint8_t **body)
{
	long n;

	*body = NULL;
	if (s->in_len == s->in_off)   /* also before the first read: in NULL */
		return 0;
	n = wire_parse(s->in + s->in_off, s->in_len - s->in_off, s->in_max,
		       body);
	if (n < 0 || *body == NULL)
		return n;
	s->in_off += WIRE_HEADER + (size_t)n;
	return n;
}

size_t stream_partial(const struct stream *s)
{
	return s->in_len - s->in_off;
}

int64_t stream_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t stream_deadline(int ms)
{
	return ms < 0 ? -1 : stream_now() + (int64_t)ms * 1000000;
}

int stream_poll(struct stream *s, int64_t deadline)
{
	struct pollfd p = { .fd = s->fd, .events = POLLIN };
	int n;

	if (stream_pending(s))
		p.events |= POLLOUT;
	for (;;) {
		int ms = -1;

		if (deadline >= 0) {
			int64_t left = deadline - stream_now();

			if (left <= 0)
				ms = 0;
			else   /* round up: never wake just before the deadline */
				ms = left / 1000000 >= 86400000 ? 86400000 :
				     (int)((left + 999999) / 1000000);
		}
		n = poll(&p, 1, ms);
		if (n > 0)
			return 1;
		if (n == 0) {
			if (deadline >= 0 && stream_now() >= deadline)
				return 0;
			continue;   /* the 1-day cap passed, not the deadline */
		}
		if (errno != EINTR)
			return -errno;
	}
}
