/*
 * client.c — a connection to rokd: connect, the hello exchange, sending
 * framed requests, and the reply loop that serves both synchronous calls
 * and pipelining.  Public entry points are rok_client_*; request.c builds
 * the requests, reply.c decodes replies, stream.c moves the bytes.
 *
 * One thread at a time per rok_client.  The reply loop (client_pump) reads
 * whole frames, decodes them, and either hands a reply to the caller that
 * waits for its id or keeps it on the stash, in arrival order, for
 * rok_client_recv.  A waiter that gave up (the client timeout) leaves its
 * id on the dropped list so the late reply is discarded, not delivered to
 * someone who never asked for it.
 *
 * Failures of the byte stream — EOF, a read/write error, a frame over the
 * cap, a reply that does not decode — make the connection unusable: the
 * stream cannot be resynchronised, so `broken` remembers the first such
 * error and every later call returns it.  Everything else (a typed error
 * reply, a request refused for its size, a timeout) leaves it usable.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client-private.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0"
#endif

const char *rok_client_version(void)
{
	return "librokclient " PACKAGE_VERSION;
}

/* ---- errors --------------------------------------------------------- */

__attribute__((format(printf, 3, 0)))
static void client_vset(rok_client *c, int code, const char *fmt,
			va_list ap)
{
	int n = vsnprintf(c->err_msg, sizeof(c->err_msg), fmt, ap);

	c->err_code = code;
	if (code < 0 && n >= 0 && (size_t)n < sizeof(c->err_msg)) {
		char tmp[256];
		/* GNU strerror_r: returns the text, maybe not in tmp. */
		const char *e = strerror_r(-code, tmp, sizeof(tmp));

		snprintf(c->err_msg + n, sizeof(c->err_msg) - (size_t)n,
			 "%s%s", n > 0 ? ": " : "", e);
	}
}

int client_fail(rok_client *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	client_vset(c, code, fmt, ap);
	va_end(ap);
	return code;
}

int client_break(rok_client *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	client_vset(c, code, fmt, ap);
	va_end(ap);
	if (c->broken == 0) {
		c->broken = code;
		memcpy(c->broken_msg, c->err_msg, sizeof(c->broken_msg));
	}
	return code;
}

int client_check(rok_client *c)
{
	if (c->broken != 0) {
		c->err_code = c->broken;
		memcpy(c->err_msg, c->broken_msg, sizeof(c->err_msg));
		return c->broken;
	}
	if (!c->connected && !c->connecting)
		return client_fail(c, -ENOTCONN, "not connected");
	return 0;
}

int rok_client_last_error(const rok_client *c, const char **message)
{
	if (message != NULL)
		*message = c->err_code != 0 ? c->err_msg : "";
	return c->err_code;
}

/* ---- lifecycle ------------------------------------------------------ */

rok_client *rok_client_new(const char *name)
{
	rok_client *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	stream_init(&c->s, ROK_CLIENT_MAX_REPLY);
	c->name = strdup(name != NULL ? name : rok_client_version());
	if (c->name == NULL) {
		free(c);
		return NULL;
	}
	c->next_id = 1;
	c->max_frame = WIRE_DEFAULT_MAX;
	return c;
}

void rok_client_free(rok_client *c)
{
	if (c == NULL)
		return;
	stream_done(&c->s);
	for (size_t i = 0; i < c->n_stash; i++)
		rok_reply_free(c->stash[i]);
	free(c->stash);
	free(c->dropped);
	rok_reply_free(c->hello);
	free(c->name);
	free(c);
}

const char *rok_client_path(const rok_client *c)
{
	return c->path;
}

const rok_server_info *rok_client_server(const rok_client *c)
{
	return c->connected ? &c->server : NULL;
}

void rok_client_set_timeout(rok_client *c, int timeout_ms)
{
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

int rok_client_fd(const rok_client *c)
{
	return c->s.fd;
}

size_t rok_client_in_flight(const rok_client *c)
{
	return c->in_flight;
}

/* The deadline of a synchronous call: the client timeout from now. */
static int64_t client_deadline(const rok_client *c)
{
	return stream_deadline(c->timeout_ms > 0 ? c->timeout_ms : -1);
}

/* ---- sending -------------------------------------------------------- */

int client_send(rok_client *c, Rok__V1__Request *req, uint64_t *req_id)
{
	size_t size;
	uint8_t *p;
	int rc;

	if (req_id != NULL)
		*req_id = 0;
	rc = client_check(c);
	if (rc < 0)
		return rc;
	req->id = c->next_id;
	size = rok__v1__request__get_packed_size(req);
	if (size > c->max_frame)
		return client_fail(c, -EMSGSIZE,
				   "request of %zu bytes is larger than the "
				   "daemon accepts (%u bytes)", size,
				   c->max_frame);
	rc = stream_reserve(&c->s, WIRE_HEADER + size, &p);
	if (rc < 0)
		return client_fail(c, rc, "queueing a request");
	wire_put_header(p, (uint32_t)size);
	if (rok__v1__request__pack(req, p + WIRE_HEADER) != size)
		return client_fail(c, -EPROTO, "encoding a request");
	stream_commit(&c->s, WIRE_HEADER + size);
	c->next_id++;
	c->in_flight++;
	if (req_id != NULL)
		*req_id = req->id;
	/* Opportunistic: a full socket is not an error, the pump finishes. */
	rc = stream_write(&c->s);
	if (rc < 0)
		return client_break(c, rc, "sending to the daemon");
	return 0;
}

/* ---- receiving ------------------------------------------------------ */

static bool client_take_dropped(rok_client *c, uint64_t id)
{
	for (size_t i = 0; i < c->n_dropped; i++) {
		if (c->dropped[i] == id) {
			c->dropped[i] = c->dropped[--c->n_dropped];
			return true;
		}
	}
	return false;
}

static int client_add_dropped(rok_client *c, uint64_t id)
{
	if (c->n_dropped == c->cap_dropped) {
		size_t n = c->cap_dropped != 0 ? c->cap_dropped * 2 : 8;
		uint64_t *p = realloc(c->dropped, n * sizeof(*p));

		if (p == NULL)
			return -ENOMEM;
		c->dropped = p;
		c->cap_dropped = n;
	}
	c->dropped[c->n_dropped++] = id;
	return 0;
}

static int client_stash(rok_client *c, rok_reply *r)
{
	if (c->n_stash == c->cap_stash) {
		size_t n = c->cap_stash != 0 ? c->cap_stash * 2 : 8;
		rok_reply **p = realloc(c->stash, n * sizeof(*p));

		if (p == NULL)
			return -ENOMEM;
		c->stash = p;
		c->cap_stash = n;
	}
	c->stash[c->n_stash++] = r;
	return 0;
}

/* Removes and returns the stashed reply at index i, keeping the order. */
static rok_reply *client_unstash(rok_client *c, size_t i)
{
	rok_reply *r = c->stash[i];

	memmove(&c->stash[i], &c->stash[i + 1],
		(c->n_stash - i - 1) * sizeof(*c->stash));
	c->n_stash--;
	return r;
}

/* Decodes one frame body into a reply; the stream breaks if it is junk. */
static int client_decode(rok_client *c, const uint8_t *body, size_t len,
			 rok_reply **out)
{
	Rok__V1__Response *m = rok__v1__response__unpack(NULL, len, body);
	int rc;

	*out = NULL;
	if (m == NULL)
		return client_break(c, -EPROTO,
				    "the daemon sent a reply that does not decode");
	rc = reply_from_response(m, out);
	rok__v1__response__free_unpacked(m, NULL);
	if (rc < 0)
		return client_fail(c, rc, "decoding a reply");
	return 0;
}

/* One read: bytes read (> 0), 0 if none yet, or the error, which breaks
 * the stream. */
static long client_read(rok_client *c)
{
	long n = stream_read(&c->s);

	if (n == -ECONNRESET)
		return client_break(c, -ECONNRESET,
				    stream_partial(&c->s) > 0 ?
				    "the daemon closed the connection "
				    "in the middle of a reply" :
				    "the daemon closed the connection");
	if (n < 0)
		return client_break(c, (int)n, "reading from the daemon");
	return n;
}

/*
 * Reads until one reply (not a dropped one) has arrived, writing pending
 * output meanwhile.  0 with *out, -EAGAIN when the deadline (monotonic ns,
 * -1: none) passed, or an error.
 */
static int client_pump(rok_client *c, int64_t deadline, rok_reply **out)
{
	int rc = client_check(c);

	*out = NULL;
	if (rc < 0)
		return rc;
	for (;;) {
		const uint8_t *body;
		long n = stream_frame(&c->s, &body);

		if (n < 0)
			return client_break(c, (int)n,
					    "the daemon sent a frame larger than "
					    "%u bytes", c->s.in_max);
		if (body != NULL) {
			rok_reply *r;

			rc = client_decode(c, body, (size_t)n, &r);
			if (rc < 0)
				return rc;
			/* A logs or watch stream is one request: only
			 * its last reply (end, or an error) ends it. */
			if (c->in_flight > 0 &&
			    !((r->type == ROK_REPLY_LOGS ||
			       r->type == ROK_REPLY_WATCH) && !r->end))
				c->in_flight--;
			if (client_take_dropped(c, r->req_id)) {
				rok_reply_free(r);
				continue;
			}
			*out = r;
			return 0;
		}
		if (stream_pending(&c->s)) {
			rc = stream_write(&c->s);
			if (rc < 0)
				return client_break(c, rc, "sending to the daemon");
		}
		n = client_read(c);
		if (n < 0)
			return (int)n;
		if (n > 0)
			continue;
		rc = stream_poll(&c->s, deadline);
		if (rc < 0)
			return client_break(c, rc, "waiting for the daemon");
		if (rc == 0)
			return -EAGAIN;
	}
}

int rok_client_recv(rok_client *c, int timeout_ms, rok_reply **out)
{
	int rc;

	*out = NULL;
	if (c->n_stash > 0) {
		*out = client_unstash(c, 0);
		return 0;
	}
	rc = client_pump(c, stream_deadline(timeout_ms), out);
	if (rc == -EAGAIN)
		return client_fail(c, rc, "no reply yet");
	return rc;
}

int rok_client_wait(rok_client *c, uint64_t req_id, rok_reply **out)
{
	int64_t deadline = client_deadline(c);
	rok_reply *r = NULL;
	int rc;

	*out = NULL;
	for (size_t i = 0; i < c->n_stash; i++) {
		if (c->stash[i]->req_id == req_id) {
			r = client_unstash(c, i);
			break;
		}
	}
	while (r == NULL) {
		rc = client_pump(c, deadline, &r);
		if (rc == -EAGAIN) {
			if (client_add_dropped(c, req_id) < 0)
				return client_break(c, -ETIMEDOUT,
						    "no reply from the daemon "
						    "within %d ms", c->timeout_ms);
			return client_fail(c, -ETIMEDOUT,
					   "no reply from the daemon within "
					   "%d ms", c->timeout_ms);
		}
		if (rc < 0)
			return rc;
		if (r->req_id == req_id)
			break;
		rc = client_stash(c, r);
		if (rc < 0) {
			rok_reply_free(r);
			return client_break(c, rc, "keeping a reply");
		}
		r = NULL;
	}
	if (r->error.code != 0) {
		rc = client_fail(c, r->error.code, "%s", r->error.message.len > 0 ?
				 (const char *)r->error.message.data :
				 rok_error_name(r->error.code));
		rok_reply_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

int rok_client_flush(rok_client *c)
{
	int64_t deadline = client_deadline(c);
	int rc = client_check(c);

	if (rc < 0)
		return rc;
	while (stream_pending(&c->s)) {
		rc = stream_write(&c->s);
		if (rc < 0)
			return client_break(c, rc, "sending to the daemon");
		if (!stream_pending(&c->s))
			break;
		/* Read replies while we wait, or a daemon that is blocked
		 * writing to us would never drain its input. */
		long n = client_read(c);

		if (n < 0)
			return (int)n;
		if (n > 0)
			continue;
		rc = stream_poll(&c->s, deadline);
		if (rc < 0)
			return client_break(c, rc, "waiting for the daemon");
		if (rc == 0)
			return client_fail(c, -ETIMEDOUT, "sending to the daemon "
					   "took longer than %d ms", c->timeout_ms);
	}
	return 0;
}

/* ---- connecting ----------------------------------------------------- */

static int client_hello(rok_client *c)
{
	Rok__V1__Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__Hello hello = ROK__V1__HELLO__INIT;
	rok_reply *r;
	uint64_t id;
	int rc;

	hello.protocol_version = ROK_PROTOCOL_VERSION;
	hello.software_version.data = (uint8_t *)c->name;
	hello.software_version.len = strlen(c->name);
	req.body_case = ROK__V1__REQUEST__BODY_HELLO;
	req.hello = &hello;
	c->connecting = true;
	rc = client_send(c, &req, &id);
	if (rc == 0)
		rc = rok_client_wait(c, id, &r);
	c->connecting = false;
	if (rc == -ETIMEDOUT)
		return client_break(c, rc, "no hello reply from the daemon "
				    "within %d ms", c->timeout_ms);
	if (rc == ROK_E_INVALID_ARGUMENT) {
		/* How a daemon of another version answers ours. */
		char msg[sizeof(c->err_msg)];

		memcpy(msg, c->err_msg, sizeof(msg));
		return client_break(c, -EPROTONOSUPPORT, "the daemon refused "
				    "the hello of protocol version %u (%s)",
				    ROK_PROTOCOL_VERSION, msg);
	}
	if (rc != 0)
		return rc;
	if (r->type != ROK_REPLY_HELLO) {
		rok_reply_free(r);
		return client_break(c, -EPROTO,
				    "the daemon answered the hello with "
				    "something else");
	}
	if (r->server.protocol_version != ROK_PROTOCOL_VERSION) {
		unsigned v = r->server.protocol_version;

		rok_reply_free(r);
		return client_break(c, -EPROTONOSUPPORT,
				    "the daemon speaks protocol version %u, "
				    "this client version %u", v,
				    ROK_PROTOCOL_VERSION);
	}
	c->hello = r;
	c->server = r->server;
	if (c->server.max_frame == 0)
		c->server.max_frame = WIRE_DEFAULT_MAX;
	c->max_frame = c->server.max_frame;
	c->connected = true;
	return 0;
}

int rok_client_connect_fd(rok_client *c, int fd)
{
	int rc;

	if (c->s.fd >= 0 || c->connected) {
		if (fd >= 0)
			close(fd);
		return client_fail(c, -EISCONN, "already connected");
	}
	if (fd < 0)
		return client_fail(c, -EBADF, "connecting");
	rc = stream_attach(&c->s, fd);
	if (rc < 0)
		return client_break(c, rc, "setting up the socket");
	return client_hello(c);
}

/* connect(2) on a blocking socket, EINTR-safe: an interrupted connect goes
 * on in the background, so wait for it to finish rather than retry it. */
static int client_connect_unix(int fd, const struct sockaddr_un *sa)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t len = sizeof(err);

	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
		return 0;
	if (errno != EINTR)
		return -errno;
	while (poll(&p, 1, -1) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	return -err;
}

int rok_client_connect(rok_client *c, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char def[sizeof(c->path)];
	bool private_dir = false;
	int fd, rc;

	if (c->s.fd >= 0 || c->connected)
		return client_fail(c, -EISCONN, "already connected");
	if (path == NULL) {
		const char *env_sock = getenv("ROK_SOCKET");

		rc = path_resolve(env_sock, getenv("XDG_RUNTIME_DIR"),
				  geteuid(), def, sizeof(def), &private_dir);
		if (rc < 0)
			return client_fail(c, rc, "the default socket path");
		path = def;
	}
	if (strlen(path) >= sizeof(sa.sun_path) ||
	    strlen(path) >= sizeof(c->path))
		return client_fail(c, -ENAMETOOLONG, "socket path %s", path);
	if (path[0] == '\0')
		return client_fail(c, -EINVAL, "empty socket path");
	strcpy(c->path, path);
	strcpy(sa.sun_path, path);
	if (private_dir) {
		rc = path_check_dir(path, geteuid());
		if (rc == -EPERM)
			return client_fail(c, -EPERM, "%s: its directory must "
					   "be yours and mode 0700", path);
		if (rc < 0)
			return client_fail(c, rc, "%s", path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return client_fail(c, -errno, "socket");
	rc = client_connect_unix(fd, &sa);
	if (rc < 0) {
		close(fd);
		return client_fail(c, rc, "connect to %s", path);
	}
	return rok_client_connect_fd(c, fd);
}
