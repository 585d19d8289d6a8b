/*
 * metrics-http.c — `metrics_listen = HOST:PORT`: rokd's metrics over HTTP
 * at /metrics, in the Prometheus text format (the same text as `rokctl
 * stats --prometheus`: metrics.c gathers, proto/promtext.c formats).
 *
 * metrics_http_open binds the port on the main thread before the runtime
 * starts, so a bad or busy address stops rokd at once with a clear
 * message; metrics_http_start then serves it with libevent's evhttp on the
 * reactor thread, which owns the event_base (reactor.h); metrics_http_stop
 * closes it there when rokd stops.
 *
 * The endpoint is read-only and public to whoever reaches the port: no
 * credentials exist over TCP, so no per-user view; it shows counts and
 * timings only, never a task, a user or an argument.  What a slow or
 * hostile HTTP client can cost is bounded per connection: a request's
 * headers (8 KiB) and body (1 KiB) are capped, a connection idle for 10 s
 * is closed, each answer is built at once (a few KiB, no state kept
 * between requests), and when accept fails for lack of descriptors the
 * port stops accepting for 100 ms instead of spinning.  The number of
 * connections is not capped: libevent 2.1's evhttp tells nobody when it
 * accepts or drops one, so a client that keeps many connections alive
 * (a byte every few seconds) holds that many descriptors; hence loopback
 * in the examples.  Only GET and HEAD of /metrics are answered; other
 * paths get 404, other methods 405.
 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "promtext.h"
#include "reactor.h"
#include "rokd.h"

#define METRICS_HTTP_MAX_HEADERS 8192
#define METRICS_HTTP_MAX_BODY 1024
#define METRICS_HTTP_TIMEOUT_S 10

static struct {
	int fd;                         /* bound and listening; -1: off */
	struct evhttp *http;
	struct evconnlistener *lev;
	struct event *pause;            /* re-enables accepting */
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

/* A short plain-text answer (evhttp_send_error would drop our headers). */
static void metrics_http_plain(struct evhttp_request *req, int code,
                               const char *reason)
{
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	struct evbuffer *body = evbuffer_new();

	if (body == NULL || evbuffer_add_printf(body, "%d %s\n", code,
	                                        reason) < 0) {
		if (body != NULL)
			evbuffer_free(body);
		evhttp_send_error(req, code, reason);
		return;
	}
	evhttp_add_header(hdr, "Content-Type", "text/plain; charset=utf-8");
	evhttp_send_reply(req, code, reason, body);
	evbuffer_free(body);
}

static void metrics_http_cb(struct evhttp_request *req, void *arg)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	struct metrics_reply m;
	struct evbuffer *body;
	char *text;
	size_t len;

	(void)arg;
	if (path == NULL || strcmp(path, "/metrics") != 0) {
		metrics_http_plain(req, HTTP_NOTFOUND, "Not Found");
		return;
	}
	if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		evhttp_add_header(hdr, "Allow", "GET, HEAD");
		metrics_http_plain(req, HTTP_BADMETHOD, "Method Not Allowed");
		return;
	}
	metrics_reply_fill(&m);
	int err = promtext_format(&m.sr, &text, &len);
	metrics_reply_free(&m);
	if (err < 0 || (body = evbuffer_new()) == NULL) {
		free(text);
		metrics_http_plain(req, HTTP_INTERNAL, "Out of Memory");
		return;
	}
	/* HEAD: the length of the body GET would get, and no body (evhttp
	 * 2.1 would send one). */
	char clen[24];
	snprintf(clen, sizeof(clen), "%zu", len);
	int rc = cmd == EVHTTP_REQ_HEAD ? 0 : evbuffer_add(body, text, len);
	free(text);
	if (rc != 0) {
		evbuffer_free(body);
		metrics_http_plain(req, HTTP_INTERNAL, "Out of Memory");
		return;
	}
	evhttp_add_header(hdr, "Content-Type",
	                  "text/plain; version=0.0.4; charset=utf-8");
	evhttp_add_header(hdr, "Cache-Control", "no-store");
	if (cmd == EVHTTP_REQ_HEAD)
		evhttp_add_header(hdr, "Content-Length", clen);
	evhttp_send_reply(req, HTTP_OK, "OK", body);
	evbuffer_free(body);
}

static void metrics_http_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (mh.lev != NULL)
		evconnlistener_enable(mh.lev);
}

/* accept failed other than for a retriable reason: out of descriptors,
 * most likely.  Pause instead of spinning on a port that stays ready. */
static void metrics_http_error_cb(struct evconnlistener *lev, void *arg)
{
	static const struct timeval pause = { 0, 100000 };

	(void)arg;
	log_warn("metrics_listen: accept");
	evconnlistener_disable(lev);
	evtimer_add(mh.pause, &pause);
}

static void metrics_http_start_cb(void *arg)
{
	struct event_base *base = reactor_base();

	(void)arg;
	mh.http = evhttp_new(base);
	mh.pause = evtimer_new(base, metrics_http_resume_cb, NULL);
	if (mh.http == NULL || mh.pause == NULL)
		fatalx("metrics_listen: out of memory");
	/* Every method reaches the callback, which answers 405 itself (with
	 * Allow); evhttp would answer a disallowed one 501. */
	evhttp_set_allowed_methods(mh.http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD |
	                           EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
	                           EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
	                           EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT |
	                           EVHTTP_REQ_PATCH);
	evhttp_set_max_headers_size(mh.http, METRICS_HTTP_MAX_HEADERS);
	evhttp_set_max_body_size(mh.http, METRICS_HTTP_MAX_BODY);
	evhttp_set_timeout(mh.http, METRICS_HTTP_TIMEOUT_S);
	evhttp_set_gencb(mh.http, metrics_http_cb, NULL);
	mh.lev = evconnlistener_new(base, NULL, NULL,
	                            LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
	                            -1, mh.fd);
	if (mh.lev == NULL || evhttp_bind_listener(mh.http, mh.lev) == NULL)
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
	/* Frees the bound listener (closing the port) and the connections. */
	if (mh.http != NULL) {
		evhttp_free(mh.http);
		mh.http = NULL;
		mh.lev = NULL;
	}
	if (mh.pause != NULL) {
		event_free(mh.pause);
		mh.pause = NULL;
	}
	if (mh.fd >= 0) {
		close(mh.fd);
		mh.fd = -1;
	}
}
