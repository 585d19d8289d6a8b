/*
 * metrics-http.c — `metrics_listen = HOST:PORT`: rokd's metrics over HTTP
 * at /metrics, in the Prometheus text format (the same text as `rokctl
 * stats --prometheus`: metrics.c gathers, proto/promtext.c formats).
 *
 * metrics_http_open binds the port on the main thread before the runtime
 * starts, so a bad or busy address stops rokd at once with a clear
 * message; metrics_http_start then serves it on the reactor thread, which
 * owns the event_base (reactor.h); metrics_http_stop closes it there when
 * rokd stops.
 *
 * The endpoint is read-only and public to whoever reaches the port: no
 * credentials exist over TCP, so no per-user view; it shows counts and
 * timings only, never a task, a user or an argument.  Every local user
 * reaches a loopback port, socket_group or not, and its descriptors are
 * the ones rokd needs for its socket and its tasks: so what HTTP clients
 * can hold is bounded in all, not per connection.  At most
 * METRICS_HTTP_MAX_CONNS connections are open at once (the port stops
 * accepting meanwhile: more wait in the kernel's backlog), each answers
 * one request and closes, and each is closed METRICS_HTTP_DEADLINE_S
 * after it was accepted, whatever it did meanwhile (a byte every few
 * seconds keeps no connection).  A request's line and headers are read up
 * to METRICS_HTTP_MAX_HEADERS bytes, a body never.  When accept fails for
 * lack of descriptors the port stops accepting for 100 ms instead of
 * spinning, and says so at most once a minute.
 *
 * This is not libevent's evhttp: evhttp 2.1 tells nobody when it accepts
 * or drops a connection, so it cannot bound them.  HTTP/1.0 and 1.1, one
 * request per connection (Connection: close).  Only GET and HEAD of
 * /metrics are answered; other paths get 404, other methods 405 (with
 * Allow), what does not parse 400, and headers too large 431.  After its
 * answer a connection is shut for writing and what the client still sends
 * is read and dropped until it closes (or the deadline), so the answer is
 * not lost to a reset.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "promtext.h"
#include "reactor.h"
#include "rokd.h"

#define METRICS_HTTP_MAX_HEADERS 8192
#define METRICS_HTTP_DEADLINE_S 10
#define METRICS_HTTP_MAX_CONNS 64

/* One HTTP connection (reactor thread). */
struct mh_conn {
	struct bufferevent *bev;
	struct event *deadline;
	struct mh_conn *prev, *next;
};

static struct {
	int fd;                         /* bound and listening; -1: off */
	struct evconnlistener *lev;
	struct event *pause;            /* re-enables accepting */
	struct mh_conn *conns;          /* open, nconns of them */
	unsigned nconns;
	bool full;                      /* not accepting: nconns at the cap */
	bool paused;                    /* not accepting: out of descriptors */
	time_t said;                    /* last "accept" warning */
	unsigned unsaid;                /* failed accepts not logged since */
} mh = { .fd = -1 };

/* Splits "HOST:PORT" or "[V6]:PORT" into host and port: 0 or -1. */
static int metrics_http_split(const char *spec, char *host, size_t hlen,
                              const char **port)
{
	const char *colon = strrchr(spec, ':');
	const char *h = spec;
	size_t n;

	if (colon == NULL || colon[1] == '\0')
		return -1;
	n = (size_t)(colon - spec);
	if (n >= 2 && spec[0] == '[' && spec[n - 1] == ']') {
		h++;
		n -= 2;
	}
	if (n == 0 || n >= hlen || memchr(h, '[', n) || memchr(h, ']', n))
		return -1;
	memcpy(host, h, n);
	host[n] = '\0';
	*port = colon + 1;
	return 0;
}

/* Logs the URL with the port bound (port 0 in rokd.conf: any free one,
 * which is how the tests find theirs). */
static void metrics_http_log_address(void)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	char host[NI_MAXHOST], port[NI_MAXSERV];
	bool v6;

	if (getsockname(mh.fd, (struct sockaddr *)&sa, &sl) != 0 ||
	    getnameinfo((struct sockaddr *)&sa, sl, host, sizeof(host), port,
	                sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
		log_info("serving metrics on %s", config.metrics_listen);
		return;
	}
	v6 = sa.ss_family == AF_INET6;
	log_info("serving metrics on http://%s%s%s:%s/metrics", v6 ? "[" : "",
	         host, v6 ? "]" : "", port);
}

int metrics_http_open(char *err, size_t len)
{
	const char *spec = config.metrics_listen;
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
	                          .ai_socktype = SOCK_STREAM,
	                          .ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char host[256];
	const char *port;
	int rc, e = 0, one = 1;

	if (spec == NULL || *spec == '\0')
		return 0;
	if (metrics_http_split(spec, host, sizeof(host), &port) < 0) {
		snprintf(err, len, "metrics_listen = %s: expected HOST:PORT "
		         "(e.g. 127.0.0.1:9464 or [::1]:9464)", spec);
		return -1;
	}
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		snprintf(err, len, "metrics_listen = %s: %s", spec,
		         gai_strerror(rc));
		return -1;
	}
	/* The first address that binds: one port, as the setting says. */
	for (struct addrinfo *a = ai; a != NULL && mh.fd < 0; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC |
		                SOCK_NONBLOCK, a->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		/* A restarted rokd rebinds while old connections linger in
		 * TIME_WAIT. */
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
		               sizeof(one)) != 0 ||
		    bind(fd, a->ai_addr, a->ai_addrlen) != 0 ||
		    listen(fd, 64) != 0) {
			e = errno;
			close(fd);
			continue;
		}
		mh.fd = fd;
	}
	freeaddrinfo(ai);
	if (mh.fd < 0) {
		snprintf(err, len, "metrics_listen = %s: cannot listen: %s",
		         spec, strerror(e != 0 ? e : EADDRNOTAVAIL));
		return -1;
	}
	metrics_http_log_address();
	return 0;
}

/* Closes c and frees it; the port accepts again if it stopped for the
 * cap. */
static void mh_conn_free(struct mh_conn *c)
{
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		mh.conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	mh.nconns--;
	bufferevent_free(c->bev);
	event_free(c->deadline);
	free(c);
	if (mh.full && mh.lev != NULL) {
		mh.full = false;
		if (!mh.paused)
			evconnlistener_enable(mh.lev);
	}
}

static void mh_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	mh_conn_free(arg);
}

static void mh_event_cb(struct bufferevent *bev, short what, void *arg)
{
	/* A client that shut its side after its request still gets the
	 * answer being sent (mh_written_cb closes once it is out). */
	if ((what & BEV_EVENT_EOF) && (what & BEV_EVENT_READING) &&
	    evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
		bufferevent_disable(bev, EV_READ);
		return;
	}
	mh_conn_free(arg);   /* an error, or done */
}

/* After the answer: drops what the client still sends until it closes. */
static void mh_drain_cb(struct bufferevent *bev, void *arg)
{
	(void)arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	evbuffer_drain(in, evbuffer_get_length(in));
}

/* The answer is out: shut for writing, and wait for the client's end. */
static void mh_written_cb(struct bufferevent *bev, void *arg)
{
	struct mh_conn *c = arg;

	if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
		return;
	if (!(bufferevent_get_enabled(bev) & EV_READ)) {
		mh_conn_free(c);   /* the client's side is shut already */
		return;
	}
	(void)shutdown(bufferevent_getfd(bev), SHUT_WR);
	bufferevent_disable(bev, EV_WRITE);
	bufferevent_setcb(bev, mh_drain_cb, NULL, mh_event_cb, c);
}

/* Queues an answer on c and ends reading requests from it.  blen is the
 * body's length, the Content-Length (HEAD's too); the body goes out only
 * if send_body. */
static void mh_answer(struct mh_conn *c, bool v10, int code,
                      const char *reason, const char *type,
                      const char *extra, const char *body, size_t blen,
                      bool send_body)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (evbuffer_add_printf(out, "HTTP/1.%d %d %s\r\nContent-Type: %s\r\n"
	                        "%sContent-Length: %zu\r\nConnection: close"
	                        "\r\n\r\n", v10 ? 0 : 1, code, reason, type,
	                        extra, blen) < 0 ||
	    (send_body && blen > 0 && evbuffer_add(out, body, blen) != 0)) {
		mh_conn_free(c);   /* out of memory: no answer at all */
		return;
	}
	bufferevent_setcb(c->bev, mh_drain_cb, mh_written_cb, mh_event_cb, c);
	bufferevent_enable(c->bev, EV_WRITE);
}

static void mh_plain(struct mh_conn *c, bool v10, int code,
                     const char *reason, const char *extra, bool send_body)
{
	char body[64];
	int n = snprintf(body, sizeof(body), "%d %s\n", code, reason);

	mh_answer(c, v10, code, reason, "text/plain; charset=utf-8", extra,
	          body, (size_t)n, send_body);
}

/* The request line and headers, whole: answers them. */
static void mh_request(struct mh_conn *c, char *head)
{
	char *sp1, *sp2, *eol = strpbrk(head, "\r\n");

	if (eol != NULL)
		*eol = '\0';   /* the request line alone */
	sp1 = strchr(head, ' ');
	sp2 = sp1 != NULL ? strchr(sp1 + 1, ' ') : NULL;
	if (sp1 == NULL || sp2 == NULL || sp1 == head || sp2 == sp1 + 1 ||
	    strncmp(sp2 + 1, "HTTP/1.", 7) != 0 ||
	    (sp2[8] != '0' && sp2[8] != '1') || sp2[9] != '\0') {
		mh_plain(c, true, 400, "Bad Request", "", true);
		return;
	}
	bool v10 = sp2[8] == '0';
	*sp1 = *sp2 = '\0';
	const char *method = head, *target = sp1 + 1;
	size_t plen = strcspn(target, "?#");
	bool get = strcmp(method, "GET") == 0, head_req = strcmp(method,
	                                                         "HEAD") == 0;
	if (plen != strlen("/metrics") || strncmp(target, "/metrics", plen)) {
		mh_plain(c, v10, 404, "Not Found", "", !head_req);
		return;
	}
	if (!get && !head_req) {
		mh_plain(c, v10, 405, "Method Not Allowed",
		         "Allow: GET, HEAD\r\n", true);
		return;
	}
	struct metrics_reply m;
	char *text;
	size_t len;
	metrics_reply_fill(&m);
	int err = promtext_format(&m.sr, &text, &len);
	metrics_reply_free(&m);
	if (err < 0) {
		mh_plain(c, v10, 500, "Internal Server Error", "", !head_req);
		return;
	}
	mh_answer(c, v10, 200, "OK", "text/plain; version=0.0.4; "
	          "charset=utf-8", "Cache-Control: no-store\r\n", text, len,
	          get);
	free(text);
}

/* Reads until the headers end (a blank line); answers then. */
static void mh_read_cb(struct bufferevent *bev, void *arg)
{
	struct mh_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	/* The first blank line, its lines ended "\r\n" or "\n". */
	struct evbuffer_ptr crlf = evbuffer_search(in, "\n\r\n", 3, NULL);
	struct evbuffer_ptr lf = evbuffer_search(in, "\n\n", 2, NULL);
	size_t n = 0;

	if (crlf.pos >= 0 && (lf.pos < 0 || crlf.pos < lf.pos))
		n = (size_t)crlf.pos + 3;
	else if (lf.pos >= 0)
		n = (size_t)lf.pos + 2;
	if (n == 0) {
		if (evbuffer_get_length(in) > METRICS_HTTP_MAX_HEADERS)
			mh_plain(c, true, 431, "Request Header Fields Too "
			         "Large", "", true);
		return;
	}
	if (n > METRICS_HTTP_MAX_HEADERS) {
		mh_plain(c, true, 431, "Request Header Fields Too Large", "",
		         true);
		return;
	}
	char head[METRICS_HTTP_MAX_HEADERS + 1];
	evbuffer_remove(in, head, n);
	head[n] = '\0';
	mh_request(c, head);
}

static void mh_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
                         struct sockaddr *sa, int salen, void *arg)
{
	static const struct timeval deadline = { METRICS_HTTP_DEADLINE_S, 0 };
	struct event_base *base = reactor_base();
	struct mh_conn *c = calloc(1, sizeof(*c));

	(void)sa;
	(void)salen;
	(void)arg;
	if (c != NULL)
		c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (c != NULL && c->bev != NULL)
		c->deadline = evtimer_new(base, mh_deadline_cb, c);
	if (c == NULL || c->bev == NULL || c->deadline == NULL ||
	    evtimer_add(c->deadline, &deadline) != 0) {
		if (c != NULL && c->bev != NULL)
			bufferevent_free(c->bev);   /* closes fd */
		else
			close(fd);
		if (c != NULL && c->deadline != NULL)
			event_free(c->deadline);
		free(c);
		return;
	}
	c->next = mh.conns;
	if (mh.conns != NULL)
		mh.conns->prev = c;
	mh.conns = c;
	if (++mh.nconns >= METRICS_HTTP_MAX_CONNS) {
		mh.full = true;
		evconnlistener_disable(lev);
	}
	bufferevent_setcb(c->bev, mh_read_cb, NULL, mh_event_cb, c);
	bufferevent_setwatermark(c->bev, EV_READ, 0,
	                         METRICS_HTTP_MAX_HEADERS + 1);
	bufferevent_enable(c->bev, EV_READ);
}

static void metrics_http_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	mh.paused = false;
	if (mh.lev != NULL && !mh.full)
		evconnlistener_enable(mh.lev);
}

/* accept failed other than for a retriable reason: out of descriptors,
 * most likely.  Pause instead of spinning on a port that stays ready; say
 * so at most once a minute. */
static void metrics_http_error_cb(struct evconnlistener *lev, void *arg)
{
	static const struct timeval pause = { 0, 100000 };
	int e = errno;
	time_t now = time(NULL);

	(void)arg;
	if (now - mh.said >= 60) {
		log_warnx("metrics_listen: accept: %s (%u more since the last "
		          "word); pausing", strerror(e), mh.unsaid);
		mh.said = now;
		mh.unsaid = 0;
	} else {
		mh.unsaid++;
	}
	mh.paused = true;
	evconnlistener_disable(lev);
	evtimer_add(mh.pause, &pause);
}

static void metrics_http_start_cb(void *arg)
{
	struct event_base *base = reactor_base();

	(void)arg;
	mh.pause = evtimer_new(base, metrics_http_resume_cb, NULL);
	if (mh.pause == NULL)
		fatalx("metrics_listen: out of memory");
	mh.lev = evconnlistener_new(base, mh_accept_cb, NULL,
	                            LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
	                            -1, mh.fd);
	if (mh.lev == NULL)
		fatalx("metrics_listen: cannot watch the port");
	mh.fd = -1;   /* the listener owns it now */
	evconnlistener_set_error_cb(mh.lev, metrics_http_error_cb);
}

int metrics_http_start(void)
{
	if (mh.fd < 0)
		return 0;
	return reactor_call(metrics_http_start_cb, NULL);
}

void metrics_http_stop(void)
{
	/* Closes the port, then the connections. */
	if (mh.lev != NULL) {
		evconnlistener_free(mh.lev);
		mh.lev = NULL;
	}
	while (mh.conns != NULL)
		mh_conn_free(mh.conns);
	if (mh.pause != NULL) {
		event_free(mh.pause);
		mh.pause = NULL;
	}
	if (mh.fd >= 0) {
		close(mh.fd);
		mh.fd = -1;
	}
}
