/*
 * check_client.c — librokclient and rokctl against a fake daemon.
 *
 * rokd is written in parallel, so the daemon here is a thread of the test
 * (struct fake) that speaks the real framing and protobuf messages with
 * scripted behaviour: a normal mode with a fixed table of tasks, and modes
 * that misbehave on purpose (replies in reverse order, a connection closed
 * in the middle of a reply, garbage, silence, late replies).  The library
 * tests talk to it over a socketpair; the rokctl tests run the built rokctl
 * binary (ROKCTL_PATH) as a subprocess against a listening fake on a Unix
 * socket in a temporary directory, and check its output and exit status.
 *
 * The fake's task table (fake_task): ids 1..2500 exist and succeeded as
 * echo tasks with value "v<id>", except 7 (exec, exit code 3), 9 (exec,
 * SIGKILL), 11 (a value of invalid UTF-8), 13 (running: a join with a
 * timeout on it answers TIMED_OUT); 9403 belongs to another user, any
 * other id is NOT_FOUND.  Spawned tasks get ids from 101 on.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client-private.h"
#include "json.h"

extern char **environ;

static int test_timeout(int seconds)
{
	return getenv("ROK_TEST_SCALE") != NULL ? seconds * 4 : seconds;
}

/* ---- the fake daemon -------------------------------------------------- */

enum fake_mode {
	FAKE_NORMAL,
	FAKE_REVERSE,         /* hold reverse_n replies, send them backwards */
	FAKE_CLOSE_MID,       /* first request: half a reply, then close */
	FAKE_CLOSE_NOW,       /* first request: close without a word */
	FAKE_GARBAGE,         /* first request: a frame that does not decode */
	FAKE_HUGE,            /* first request: a header announcing 2 GiB */
	FAKE_GATED,           /* first request: answered once a byte is
	                         written to gate[1] */
	FAKE_HELLO_REFUSE,    /* hello: INVALID_ARGUMENT, as rokd does */
};

struct fake {
	enum fake_mode mode;
	int reverse_n;
	int gate[2];             /* FAKE_GATED: a pipe */
	uint32_t proto, max_frame;
	int fd;                  /* socketpair end, or -1 */
	int lfd, stop[2];        /* listening mode */
	char dir[64], path[100];
	pthread_t th;
	pthread_mutex_t mu;
	/* recorded, under mu */
	int n_requests;          /* other than hello, all connections */
	uint64_t next_id;
	char spawn_kind[32];
	char spawn_cwd[4096];
	char spawn_arg0[256];
	size_t spawn_n_args, spawn_n_env;
	bool spawn_clean_env;
	int spawn_marks;         /* env entries named ROK_TEST_MARK */
	char spawn_mark[32];     /* the last one's value */
};

static bool fake_read_full(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n > 0) {
		ssize_t k = read(fd, p, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p += k;
		n -= (size_t)k;
	}
	return true;
}

static bool fake_write_full(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;

	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p += k;
		n -= (size_t)k;
	}
	return true;
}

/* A framed, packed response (malloc'd) and its length. */
static uint8_t *fake_pack(const Rok__V1__Response *resp, size_t *len)
{
	size_t n = rok__v1__response__get_packed_size(resp);
	uint8_t *buf = malloc(WIRE_HEADER + n);

	ck_assert_ptr_nonnull(buf);
	wire_put_header(buf, (uint32_t)n);
	rok__v1__response__pack(resp, buf + WIRE_HEADER);
	*len = WIRE_HEADER + n;
	return buf;
}

static ProtobufCBinaryData fake_bytes(const char *s, size_t n)
{
	return (ProtobufCBinaryData){ n, (uint8_t *)(uintptr_t)s };
}

static ProtobufCBinaryData fake_str(const char *s)
{
	return fake_bytes(s, strlen(s));
}

static const char fake_bad_value[] = "ok\xff\xfe\"\n\x01";

/* Fills t (and err, buf: storage that must outlive the packing). */
static void fake_task(uint64_t id, Rok__V1__TaskInfo *t, Rok__V1__Error *err,
		      char *buf, size_t size)
{
	rok__v1__task_info__init(t);
	rok__v1__error__init(err);
	t->id = id;
	if (id == 0 || id > 2500) {
		err->code = id == 9403 ? ROK__V1__ERROR_CODE__PERMISSION_DENIED :
			    ROK__V1__ERROR_CODE__NOT_FOUND;
		err->message = fake_str(id == 9403 ? "not yours" :
					"no such task");
		t->error = err;
		return;
	}
	t->state = ROK__V1__TASK_STATE__TASK_SUCCEEDED;
	t->kind = fake_str("echo");
	t->uid = 1000;
	t->spawned_us = 1700000000000000ull + id;
	t->started_us = t->spawned_us + 1000;
	t->finished_us = t->started_us + 1500000;
	snprintf(buf, size, "v%llu", (unsigned long long)id);
	t->value = fake_str(buf);
	if (id == 7 || id == 9) {
		t->kind = fake_str("exec");
		t->state = ROK__V1__TASK_STATE__TASK_FAILED;
		t->value = fake_str("");
		if (id == 7) {
			t->has_exit_code = true;
			t->exit_code = 3;
			t->reason = fake_str("exited with status 3");
		} else {
			t->has_signal = true;
			t->signal = 9;
		}
	} else if (id == 11) {
		t->value = fake_bytes(fake_bad_value, sizeof(fake_bad_value) - 1);
	} else if (id == 13) {
		t->state = ROK__V1__TASK_STATE__TASK_RUNNING;
		t->finished_us = 0;
		t->value = fake_str("");
	}
}

/* A reply with one task per id (join, status). */
struct fake_tasks {
	Rok__V1__TaskInfo *t, **pt;
	Rok__V1__Error *e;
	char (*buf)[32];
};

static void fake_tasks_make(struct fake_tasks *ft, const uint64_t *ids,
			    size_t n)
{
	ft->t = calloc(n + 1, sizeof(*ft->t));
	ft->pt = calloc(n + 1, sizeof(*ft->pt));
	ft->e = calloc(n + 1, sizeof(*ft->e));
	ft->buf = calloc(n + 1, sizeof(*ft->buf));
	ck_assert(ft->t && ft->pt && ft->e && ft->buf);
	for (size_t i = 0; i < n; i++) {
		fake_task(ids[i], &ft->t[i], &ft->e[i], ft->buf[i],
			  sizeof(ft->buf[i]));
		ft->pt[i] = &ft->t[i];
	}
}

static void fake_tasks_free(struct fake_tasks *ft)
{
	free(ft->t);
	free(ft->pt);
	free(ft->e);
	free(ft->buf);
}

static void fake_record_spawn(struct fake *f, const Rok__V1__TaskSpec *s)
{
	pthread_mutex_lock(&f->mu);
	snprintf(f->spawn_kind, sizeof(f->spawn_kind), "%.*s",
		 (int)s->kind.len, (const char *)s->kind.data);
	snprintf(f->spawn_cwd, sizeof(f->spawn_cwd), "%.*s", (int)s->cwd.len,
		 s->cwd.len > 0 ? (const char *)s->cwd.data : "");
	f->spawn_n_args = s->n_args;
	snprintf(f->spawn_arg0, sizeof(f->spawn_arg0), "%.*s",
		 s->n_args > 0 ? (int)s->args[0].len : 0,
		 s->n_args > 0 ? (const char *)s->args[0].data : "");
	f->spawn_n_env = s->n_env;
	f->spawn_clean_env = s->clean_env;
	f->spawn_marks = 0;
	for (size_t i = 0; i < s->n_env; i++) {
		const char *e = (const char *)s->env[i].data;

		if (s->env[i].len > 14 && memcmp(e, "ROK_TEST_MARK=", 14) == 0) {
			f->spawn_marks++;
			snprintf(f->spawn_mark, sizeof(f->spawn_mark), "%.*s",
				 (int)s->env[i].len - 14, e + 14);
		}
	}
	pthread_mutex_unlock(&f->mu);
}

/* The normal answer to req, packed.  NULL: no answer (already handled). */
static uint8_t *fake_answer(struct fake *f, const Rok__V1__Request *req,
			    size_t *len)
{
	Rok__V1__Response resp = ROK__V1__RESPONSE__INIT;
	Rok__V1__Error err = ROK__V1__ERROR__INIT;
	struct fake_tasks ft = { 0 };
	uint8_t *out;

	resp.id = req->id;
	switch (req->body_case) {
	case ROK__V1__REQUEST__BODY_HELLO: {
		static Rok__V1__HelloReply h = ROK__V1__HELLO_REPLY__INIT;

		if (f->mode == FAKE_HELLO_REFUSE) {
			err.code = ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
			err.message = fake_str("protocol version 1 is not "
					       "supported");
			resp.error = &err;
			break;
		}
		h.protocol_version = f->proto;
		h.software_version = fake_str("fake-rokd 0");
		h.uid = 1000;
		h.max_frame = f->max_frame;
		h.max_in_flight = 64;
		resp.body_case = ROK__V1__RESPONSE__BODY_HELLO;
		resp.hello = &h;
		break;
	}
	case ROK__V1__REQUEST__BODY_SPAWN: {
		static Rok__V1__SpawnReply sr;
		static Rok__V1__TaskInfo t;
		const Rok__V1__TaskSpec *s = req->spawn->spec;
		uint64_t id;

		fake_record_spawn(f, s);
		if (s->kind.len == 5 && memcmp(s->kind.data, "bogus", 5) == 0) {
			err.code = ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
			err.message = fake_str("unknown task kind \"bogus\"");
			resp.error = &err;
			break;
		}
		pthread_mutex_lock(&f->mu);
		id = f->next_id++;
		pthread_mutex_unlock(&f->mu);
		rok__v1__spawn_reply__init(&sr);
		sr.id = id;
		if (req->spawn->wait) {
			rok__v1__task_info__init(&t);
			t.id = id;
			t.kind = s->kind;
			t.state = ROK__V1__TASK_STATE__TASK_SUCCEEDED;
			t.value = s->n_args > 0 ? s->args[0] : fake_str("");
			sr.task = &t;
		}
		resp.body_case = ROK__V1__RESPONSE__BODY_SPAWN;
		resp.spawn = &sr;
		break;
	}
	case ROK__V1__REQUEST__BODY_JOIN:
	case ROK__V1__REQUEST__BODY_STATUS: {
		static Rok__V1__JoinReply jr;
		static Rok__V1__StatusReply st;
		bool join = req->body_case == ROK__V1__REQUEST__BODY_JOIN;
		const uint64_t *ids = join ? req->join->ids : req->status->ids;
		size_t n = join ? req->join->n_ids : req->status->n_ids;

		if (join && req->join->timeout_ms > 0) {
			for (size_t i = 0; i < n; i++) {
				if (ids[i] == 13) {
					err.code = ROK__V1__ERROR_CODE__TIMED_OUT;
					err.message = fake_str("join timed out");
					resp.error = &err;
				}
			}
			if (resp.error != NULL)
				break;
		}
		fake_tasks_make(&ft, ids, n);
		if (join) {
			rok__v1__join_reply__init(&jr);
			jr.n_tasks = n;
			jr.tasks = ft.pt;
			resp.body_case = ROK__V1__RESPONSE__BODY_JOIN;
			resp.join = &jr;
		} else {
			rok__v1__status_reply__init(&st);
			st.n_tasks = n;
			st.tasks = ft.pt;
			resp.body_case = ROK__V1__RESPONSE__BODY_STATUS;
			resp.status = &st;
		}
		break;
	}
	case ROK__V1__REQUEST__BODY_RACE: {
		static Rok__V1__RaceReply rr;

		fake_tasks_make(&ft, req->race->ids, 1);
		rok__v1__race_reply__init(&rr);
		rr.index = 0;
		rr.winner = ft.pt[0];
		resp.body_case = ROK__V1__RESPONSE__BODY_RACE;
		resp.race = &rr;
		break;
	}
	case ROK__V1__REQUEST__BODY_SELECT: {
		static Rok__V1__SelectReply sel;
		static uint64_t ids[8];
		static Rok__V1__TaskInfo t;
		size_t n = req->select->n_specs < 8 ? req->select->n_specs : 8;

		rok__v1__select_reply__init(&sel);
		for (size_t i = 0; i < n; i++)
			ids[i] = 200 + i;
		rok__v1__task_info__init(&t);
		t.id = 200 + n - 1;
		t.state = ROK__V1__TASK_STATE__TASK_SUCCEEDED;
		t.kind = req->select->specs[n - 1]->kind;
		sel.index = (uint32_t)(n - 1);
		sel.winner = &t;
		sel.n_ids = n;
		sel.ids = ids;
		resp.body_case = ROK__V1__RESPONSE__BODY_SELECT;
		resp.select = &sel;
		break;
	}
	case ROK__V1__REQUEST__BODY_CANCEL: {
		static Rok__V1__CancelReply cr;
		size_t n = req->cancel->n_ids;
		Rok__V1__Error *e = calloc(n, sizeof(*e));
		Rok__V1__Error **pe = calloc(n, sizeof(*pe));

		for (size_t i = 0; i < n; i++) {
			rok__v1__error__init(&e[i]);
			if (req->cancel->ids[i] > 2500) {
				e[i].code = ROK__V1__ERROR_CODE__NOT_FOUND;
				e[i].message = fake_str("no such task");
			}
			pe[i] = &e[i];
		}
		rok__v1__cancel_reply__init(&cr);
		cr.n_results = n;
		cr.results = pe;
		resp.body_case = ROK__V1__RESPONSE__BODY_CANCEL;
		resp.cancel = &cr;
		out = fake_pack(&resp, len);
		free(e);
		free(pe);
		return out;
	}
	case ROK__V1__REQUEST__BODY_LIST: {
		static Rok__V1__ListReply lr;
		uint64_t after = req->list->after_id;
		uint64_t limit = req->list->limit != 0 ? req->list->limit : 1000;
		uint64_t n = after >= 2500 ? 0 : 2500 - after;
		uint64_t *ids;

		if (n > limit)
			n = limit;
		ids = calloc(n + 1, sizeof(*ids));
		for (uint64_t i = 0; i < n; i++)
			ids[i] = after + 1 + i;
		fake_tasks_make(&ft, ids, n);
		free(ids);
		rok__v1__list_reply__init(&lr);
		lr.n_tasks = n;
		lr.tasks = ft.pt;
		lr.more = after + n < 2500;
		resp.body_case = ROK__V1__RESPONSE__BODY_LIST;
		resp.list = &lr;
		break;
	}
	case ROK__V1__REQUEST__BODY_STATS: {
		static Rok__V1__StatsReply s;

		rok__v1__stats_reply__init(&s);
		s.workers = 4;
		s.succeeded = 2497;
		s.failed = 2;
		s.running = 1;
		s.registrations = -1;
		s.uptime_ms = 12345;
		/* More buckets and states than the library keeps: it must
		 * clamp, never overrun. */
		static uint64_t totals[10] = { 0, 2500, 2500, 2497, 2, 0, 0,
		                               0, 9, 9 };
		static uint64_t bounds[40], counts[41];
		static Rok__V1__Histogram h;
		for (int i = 0; i < 40; i++)
			bounds[i] = 100 * (uint64_t)(i + 1);
		for (int i = 0; i < 41; i++)
			counts[i] = 1;
		rok__v1__histogram__init(&h);
		h.n_bounds_us = 40;
		h.bounds_us = bounds;
		h.n_counts = 41;
		h.counts = counts;
		h.sum_us = 2500;
		s.n_tasks_total = 10;
		s.tasks_total = totals;
		s.journal_commit = &h;
		s.output_bytes = 77;
		resp.body_case = ROK__V1__RESPONSE__BODY_STATS;
		resp.stats = &s;
		break;
	}
	case ROK__V1__REQUEST__BODY_PING: {
		static Rok__V1__PingReply p;

		rok__v1__ping_reply__init(&p);
		p.payload = req->ping->payload;
		resp.body_case = ROK__V1__RESPONSE__BODY_PING;
		resp.ping = &p;
		break;
	}
	case ROK__V1__REQUEST__BODY_WATCH: {
		/* A stream in one write: the snapshot of the first id, its
		 * marker, then the end (three frames back to back). */
		Rok__V1__WatchEvent ev[3];
		uint8_t *frames[3];
		size_t flen[3], total = 0;

		if (req->watch->n_ids == 0) {
			err.code = ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
			err.message = fake_str("the fake watches ids only");
			resp.error = &err;
			break;
		}
		fake_tasks_make(&ft, req->watch->ids, 1);
		for (int i = 0; i < 3; i++)
			rok__v1__watch_event__init(&ev[i]);
		ev[0].id = req->watch->ids[0];
		ev[0].state = ft.t[0].state;
		ev[0].time_us = 1234;
		ev[0].snapshot = true;
		ev[0].task = &ft.t[0];
		ev[1].snapshot_done = true;
		ev[2].end = true;
		resp.body_case = ROK__V1__RESPONSE__BODY_WATCH;
		for (int i = 0; i < 3; i++) {
			resp.watch = &ev[i];
			frames[i] = fake_pack(&resp, &flen[i]);
			total += flen[i];
		}
		out = malloc(total);
		ck_assert_ptr_nonnull(out);
		*len = 0;
		for (int i = 0; i < 3; i++) {
			memcpy(out + *len, frames[i], flen[i]);
			*len += flen[i];
			free(frames[i]);
		}
		fake_tasks_free(&ft);
		return out;
	}
	default:
		err.code = ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
		err.message = fake_str("unknown request");
		resp.error = &err;
		break;
	}
	out = fake_pack(&resp, len);
	fake_tasks_free(&ft);
	return out;
}

/* Serves one connection until EOF or a scripted close. */
static void fake_serve(struct fake *f, int fd)
{
	uint8_t *held[64];
	size_t held_len[64];
	int n_held = 0;
	bool first = true;

	for (;;) {
		uint8_t hdr[WIRE_HEADER], *body, *out;
		Rok__V1__Request *req;
		uint32_t n;
		size_t len;

		if (!fake_read_full(fd, hdr, sizeof(hdr)))
			break;
		n = wire_get_header(hdr);
		ck_assert_uint_le(n, f->max_frame);   /* the client obeys */
		body = malloc(n + 1);
		ck_assert_ptr_nonnull(body);
		if (!fake_read_full(fd, body, n)) {
			free(body);
			break;
		}
		req = rok__v1__request__unpack(NULL, n, body);
		free(body);
		ck_assert_ptr_nonnull(req);
		if (req->body_case != ROK__V1__REQUEST__BODY_HELLO) {
			pthread_mutex_lock(&f->mu);
			f->n_requests++;
			pthread_mutex_unlock(&f->mu);
		}
		if (req->body_case != ROK__V1__REQUEST__BODY_HELLO && first) {
			static const uint8_t half[] = { 0, 0, 0, 100, 1, 2, 3 };
			static const uint8_t junk[] = { 0, 0, 0, 3, 0xff, 0xff,
							0xff };
			static const uint8_t huge[] = { 0x80, 0, 0, 0 };

			first = false;
			switch (f->mode) {
			case FAKE_CLOSE_MID:
				fake_write_full(fd, half, sizeof(half));
				rok__v1__request__free_unpacked(req, NULL);
				return;
			case FAKE_CLOSE_NOW:
				rok__v1__request__free_unpacked(req, NULL);
				return;
			case FAKE_GARBAGE:
				fake_write_full(fd, junk, sizeof(junk));
				rok__v1__request__free_unpacked(req, NULL);
				continue;
			case FAKE_HUGE:
				fake_write_full(fd, huge, sizeof(huge));
				rok__v1__request__free_unpacked(req, NULL);
				continue;
			case FAKE_GATED: {
				char b;
				ssize_t k;

				while ((k = read(f->gate[0], &b, 1)) < 0 &&
				       errno == EINTR)
					;
				ck_assert_int_eq(k, 1);
				break;
			}
			default:
				break;
			}
		}
		out = fake_answer(f, req, &len);
		if (f->mode == FAKE_REVERSE &&
		    req->body_case != ROK__V1__REQUEST__BODY_HELLO) {
			held[n_held] = out;
			held_len[n_held++] = len;
			if (n_held == f->reverse_n) {
				while (n_held > 0) {
					n_held--;
					fake_write_full(fd, held[n_held],
							held_len[n_held]);
					free(held[n_held]);
				}
			}
		} else {
			fake_write_full(fd, out, len);
			free(out);
		}
		rok__v1__request__free_unpacked(req, NULL);
	}
	while (n_held > 0)
		free(held[--n_held]);
}

static void *fake_pair_main(void *arg)
{
	struct fake *f = arg;

	fake_serve(f, f->fd);
	close(f->fd);
	return NULL;
}

static void *fake_listen_main(void *arg)
{
	struct fake *f = arg;

	for (;;) {
		struct pollfd p[2] = { { f->lfd, POLLIN, 0 },
				       { f->stop[0], POLLIN, 0 } };
		int fd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents != 0)
			break;
		fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		fake_serve(f, fd);
		close(fd);
	}
	return NULL;
}

static void fake_init(struct fake *f, enum fake_mode mode)
{
	memset(f, 0, sizeof(*f));
	f->mode = mode;
	f->proto = ROK_PROTOCOL_VERSION;
	f->max_frame = WIRE_DEFAULT_MAX;
	f->next_id = 101;
	f->fd = f->lfd = -1;
	pthread_mutex_init(&f->mu, NULL);
}

/* Starts f on a socketpair; returns a client connected to it (hello done,
 * *rc its result). */
static rok_client *fake_pair(struct fake *f, int *rc)
{
	int sv[2];
	rok_client *c = rok_client_new("check_client");

	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
			 0);
	f->fd = sv[1];
	ck_assert_int_eq(pthread_create(&f->th, NULL, fake_pair_main, f), 0);
	*rc = rok_client_connect_fd(c, sv[0]);
	return c;
}

/* The client's last error is `code` and its message contains `text`. */
#define assert_last_error(c, code, text) do {                           \
		const char *m_;                                         \
		ck_assert_int_eq(rok_client_last_error((c), &m_), (code)); \
		ck_assert_msg(strstr(m_, (text)) != NULL, "message: %s", m_); \
	} while (0)

/* Frees the client (EOF for the fake) and waits for the fake to end. */
static void fake_pair_done(struct fake *f, rok_client *c)
{
	rok_client_free(c);
	pthread_join(f->th, NULL);
}

static void fake_listen(struct fake *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(f->dir, sizeof(f->dir), "/tmp/check_client.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/rokd.sock", f->dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(f->lfd, 0);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, 16), 0);
	ck_assert_int_eq(pipe2(f->stop, O_CLOEXEC), 0);
	ck_assert_int_eq(pthread_create(&f->th, NULL, fake_listen_main, f), 0);
}

static void fake_listen_done(struct fake *f)
{
	ck_assert_int_eq(write(f->stop[1], "x", 1), 1);
	pthread_join(f->th, NULL);
	close(f->lfd);
	close(f->stop[0]);
	close(f->stop[1]);
	unlink(f->path);
	rmdir(f->dir);
}

/* ---- library: connecting ---------------------------------------------- */

START_TEST(hello_ok)
{
	struct fake f;
	int rc;
	rok_client *c;
	const rok_server_info *srv;

	fake_init(&f, FAKE_NORMAL);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	srv = rok_client_server(c);
	ck_assert_ptr_nonnull(srv);
	ck_assert_uint_eq(srv->protocol_version, 1);
	ck_assert_str_eq(srv->software_version, "fake-rokd 0");
	ck_assert_uint_eq(srv->uid, 1000);
	ck_assert_uint_eq(srv->max_frame, WIRE_DEFAULT_MAX);
	ck_assert_uint_eq(srv->max_in_flight, 64);
	ck_assert_int_eq(rok_client_ping(c, "abc", 3), 0);
	ck_assert_int_eq(rok_client_ping(c, NULL, 0), 0);
	ck_assert_uint_eq(rok_client_in_flight(c), 0);
	ck_assert_int_eq(rok_client_last_error(c, NULL), 0);
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(hello_version_mismatch)
{
	struct fake f;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_NORMAL);
	f.proto = 2;
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, -EPROTONOSUPPORT);
	assert_last_error(c, -EPROTONOSUPPORT, "version 2");
	ck_assert_ptr_null(rok_client_server(c));
	/* Sticky: the connection is not usable. */
	ck_assert_int_eq(rok_client_ping(c, "x", 1), -EPROTONOSUPPORT);
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(hello_refused)
{
	struct fake f;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_HELLO_REFUSE);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, -EPROTONOSUPPORT);
	assert_last_error(c, -EPROTONOSUPPORT, "not supported");
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(connect_errors)
{
	rok_client *c = rok_client_new(NULL);
	char path[300];

	ck_assert_int_eq(rok_client_connect(c, "/nonexistent/rokd.sock"),
			 -ENOENT);
	assert_last_error(c, -ENOENT, "/nonexistent/rokd.sock");
	rok_client_free(c);

	memset(path, 'a', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	c = rok_client_new(NULL);
	ck_assert_int_eq(rok_client_connect(c, path), -ENAMETOOLONG);
	rok_client_free(c);

	/* Not connected: calls fail cleanly. */
	c = rok_client_new(NULL);
	ck_assert_int_eq(rok_client_ping(c, NULL, 0), -ENOTCONN);
	rok_client_free(c);
	rok_client_free(NULL);
	rok_reply_free(NULL);
}
END_TEST

START_TEST(connect_unix_socket)
{
	struct fake f;
	rok_client *c = rok_client_new(NULL);

	fake_init(&f, FAKE_NORMAL);
	fake_listen(&f);
	ck_assert_int_eq(rok_client_connect(c, f.path), 0);
	ck_assert_str_eq(rok_client_path(c), f.path);
	ck_assert_int_ge(rok_client_fd(c), 0);
	ck_assert_int_ne(fcntl(rok_client_fd(c), F_GETFD) & FD_CLOEXEC, 0);
	ck_assert_int_eq(rok_client_ping(c, "p", 1), 0);
	rok_client_free(c);

	/* The default path comes from $ROK_SOCKET. */
	setenv("ROK_SOCKET", f.path, 1);
	c = rok_client_new(NULL);
	ck_assert_int_eq(rok_client_connect(c, NULL), 0);
	ck_assert_str_eq(rok_client_path(c), f.path);
	rok_client_free(c);
	unsetenv("ROK_SOCKET");
	fake_listen_done(&f);
}
END_TEST

/* ---- library: requests ------------------------------------------------ */

START_TEST(spawn_and_join)
{
	static const char *const argv[] = { "hello" };
	rok_spec spec = { .kind = "echo", .args = argv, .n_args = 1 };
	uint64_t ids[] = { 1, 7, 9, 9404, 9403 };
	struct fake f;
	rok_reply *r;
	uint64_t id;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_NORMAL);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);

	ck_assert_int_eq(rok_client_spawn(c, &spec, &id), 0);
	ck_assert_uint_eq(id, 101);
	ck_assert_str_eq(f.spawn_kind, "echo");
	ck_assert_str_eq(f.spawn_arg0, "hello");

	ck_assert_int_eq(rok_client_spawn_wait(c, &spec, 0, &r), 0);
	ck_assert_int_eq(r->type, ROK_REPLY_SPAWN);
	ck_assert_uint_eq(r->id, 102);
	ck_assert_uint_eq(r->n_tasks, 1);
	ck_assert_int_eq(r->tasks[0].state, ROK_TASK_SUCCEEDED);
	ck_assert_str_eq((const char *)r->tasks[0].value.data, "hello");
	rok_reply_free(r);

	/* A NULL kind is exec. */
	spec.kind = NULL;
	ck_assert_int_eq(rok_client_spawn(c, &spec, &id), 0);
	ck_assert_str_eq(f.spawn_kind, "exec");

	ck_assert_int_eq(rok_client_join(c, ids, 5, 0, &r), 0);
	ck_assert_int_eq(r->type, ROK_REPLY_JOIN);
	ck_assert_uint_eq(r->n_tasks, 5);
	ck_assert_uint_eq(r->tasks[0].id, 1);
	ck_assert_int_eq(r->tasks[0].state, ROK_TASK_SUCCEEDED);
	ck_assert_str_eq((const char *)r->tasks[0].kind.data, "echo");
	ck_assert_str_eq((const char *)r->tasks[0].value.data, "v1");
	ck_assert_uint_eq(r->tasks[0].started_us - r->tasks[0].spawned_us,
			  1000);
	ck_assert_int_eq(r->tasks[1].state, ROK_TASK_FAILED);
	ck_assert(r->tasks[1].has_exit_code);
	ck_assert_int_eq(r->tasks[1].exit_code, 3);
	ck_assert(!r->tasks[1].has_signal);
	ck_assert_str_eq((const char *)r->tasks[1].reason.data,
			 "exited with status 3");
	ck_assert(r->tasks[2].has_signal);
	ck_assert_int_eq(r->tasks[2].signal, 9);
	ck_assert_int_eq(r->tasks[3].error.code, ROK_E_NOT_FOUND);
	ck_assert_str_eq((const char *)r->tasks[3].error.message.data,
			 "no such task");
	ck_assert_int_eq(r->tasks[4].error.code, ROK_E_PERMISSION_DENIED);
	ck_assert_int_eq(r->tasks[0].error.code, 0);
	rok_reply_free(r);

	ck_assert_int_eq(rok_client_status(c, (uint64_t[]){ 13, 11 }, 2, &r), 0);
	ck_assert_int_eq(r->type, ROK_REPLY_STATUS);
	ck_assert_int_eq(r->tasks[0].state, ROK_TASK_RUNNING);
	ck_assert_uint_eq(r->tasks[1].value.len, sizeof(fake_bad_value) - 1);
	ck_assert_mem_eq(r->tasks[1].value.data, fake_bad_value,
			 sizeof(fake_bad_value) - 1);
	rok_reply_free(r);

	ck_assert_int_eq(rok_client_race(c, (uint64_t[]){ 5, 6 }, 2, 0, true,
					 &r), 0);
	ck_assert_int_eq(r->type, ROK_REPLY_RACE);
	ck_assert_uint_eq(r->index, 0);
	ck_assert_uint_eq(r->tasks[0].id, 5);
	rok_reply_free(r);

	ck_assert_int_eq(rok_client_cancel(c, (uint64_t[]){ 5, 9999 }, 2, &r),
			 0);
	ck_assert_uint_eq(r->n_results, 2);
	ck_assert_int_eq(r->results[0].code, 0);
	ck_assert_int_eq(r->results[1].code, ROK_E_NOT_FOUND);
	rok_reply_free(r);

	{
		static const char *const s1[] = { "5s" };
		rok_spec specs[2] = { { .kind = "sleep", .args = s1,
					.n_args = 1 },
				      { .kind = "noop" } };

		ck_assert_int_eq(rok_client_select(c, specs, 2, 0, &r), 0);
		ck_assert_uint_eq(r->index, 1);
		ck_assert_uint_eq(r->n_ids, 2);
		ck_assert_uint_eq(r->ids[1], 201);
		ck_assert_str_eq((const char *)r->tasks[0].kind.data, "noop");
		rok_reply_free(r);
	}

	/* Empty id lists are refused locally. */
	ck_assert_int_eq(rok_client_join(c, ids, 0, 0, &r), -EINVAL);
	ck_assert_ptr_null(r);
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(list_pages_and_stats)
{
	struct fake f;
	rok_daemon_stats s;
	uint64_t after = 0, seen = 0;
	int rc, pages = 0;
	rok_client *c;

	fake_init(&f, FAKE_NORMAL);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	for (;;) {
		rok_reply *r;
		bool more;

		ck_assert_int_eq(rok_client_list(c, 0, after, 0, &r), 0);
		ck_assert_int_eq(r->type, ROK_REPLY_LIST);
		for (size_t i = 0; i < r->n_tasks; i++) {
			ck_assert_uint_eq(r->tasks[i].id, after + 1 + i);
			seen++;
		}
		if (r->n_tasks > 0)
			after = r->tasks[r->n_tasks - 1].id;
		more = r->more;
		rok_reply_free(r);
		pages++;
		if (!more)
			break;
	}
	ck_assert_uint_eq(seen, 2500);
	ck_assert_int_eq(pages, 3);

	ck_assert_int_eq(rok_client_stats(c, &s), 0);
	ck_assert_uint_eq(s.workers, 4);
	ck_assert_uint_eq(s.succeeded, 2497);
	ck_assert_int_eq(s.registrations, -1);
	ck_assert_uint_eq(s.uptime_ms, 12345);
	fake_pair_done(&f, c);
}
END_TEST

/* The metrics of a stats reply: clamped into rok_daemon_stats, and the
 * Prometheus text of the whole reply. */
START_TEST(stats_metrics)
{
	struct fake f;
	uint64_t rid;
	rok_reply *r;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_NORMAL);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rok_client_send_stats(c, &rid), 0);
	ck_assert_int_eq(rok_client_wait(c, rid, &r), 0);
	ck_assert_int_eq(r->type, ROK_REPLY_STATS);

	const rok_daemon_stats *s = &r->stats;
	ck_assert_uint_eq(s->tasks_total[ROK_TASK_QUEUED], 2500);
	ck_assert_uint_eq(s->tasks_total[ROK_TASK_SUCCEEDED], 2497);
	ck_assert_uint_eq(s->tasks_total[7], 0);
	ck_assert_uint_eq(s->output_bytes, 77);
	const rok_histogram *h = &s->journal_commit;
	ck_assert_uint_eq(h->n_bounds, ROK_HISTOGRAM_MAX);
	ck_assert_uint_eq(h->bounds_us[ROK_HISTOGRAM_MAX - 1],
			  100 * ROK_HISTOGRAM_MAX);
	ck_assert_uint_eq(h->count, 41);
	ck_assert_uint_eq(h->counts[0], 1);
	/* Buckets past the kept bounds fall into the overflow. */
	ck_assert_uint_eq(h->counts[ROK_HISTOGRAM_MAX], 41 - ROK_HISTOGRAM_MAX);
	ck_assert_uint_eq(h->sum_us, 2500);
	ck_assert_uint_eq(s->run_time.n_bounds, 0);   /* not sent */

	const char *text = (const char *)r->prometheus.data;
	ck_assert_uint_eq(strlen(text), r->prometheus.len);
	ck_assert_ptr_nonnull(strstr(text, "\nrok_tasks_total{state=\"succeeded\","
				     "group=\"default\"} 2497\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nrok_tasks{state=\"running\"} 1\n"));
	/* The text has all 40 buckets, cumulative, in seconds. */
	ck_assert_ptr_nonnull(strstr(text, "\nrok_journal_commit_seconds_bucket"
				     "{le=\"0.004\"} 40\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nrok_journal_commit_seconds_bucket"
				     "{le=\"+Inf\"} 41\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nrok_journal_commit_seconds_sum "
				     "0.0025\n"));
	ck_assert_ptr_nonnull(strstr(text, "\nrok_uptime_seconds 12.345\n"));
	/* Histograms the daemon did not send are left out. */
	ck_assert_ptr_null(strstr(text, "rok_task_run_seconds"));
	rok_reply_free(r);
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(typed_error)
{
	rok_spec spec = { .kind = "bogus" };
	struct fake f;
	const char *msg;
	uint64_t id = 77;
	rok_reply *r;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_NORMAL);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rok_client_spawn(c, &spec, &id), ROK_E_INVALID_ARGUMENT);
	ck_assert_uint_eq(id, 0);
	ck_assert_int_eq(rok_client_last_error(c, &msg), ROK_E_INVALID_ARGUMENT);
	ck_assert_str_eq(msg, "unknown task kind \"bogus\"");
	ck_assert_str_eq(rok_error_name(ROK_E_INVALID_ARGUMENT),
			 "invalid_argument");
	ck_assert_str_eq(rok_error_name(42), "error_42");

	/* A request timeout surfaces as TIMED_OUT, the connection lives on. */
	ck_assert_int_eq(rok_client_join(c, (uint64_t[]){ 13 }, 1, 100, &r),
			 ROK_E_TIMED_OUT);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(rok_client_ping(c, "still", 5), 0);
	/* The last error stays until another call fails. */
	ck_assert_int_eq(rok_client_last_error(c, NULL), ROK_E_TIMED_OUT);

	/* The same error through the pipelined interface. */
	uint64_t rid;

	ck_assert_int_eq(rok_client_send_spawn(c, &spec, false, 0, &rid), 0);
	ck_assert_int_eq(rok_client_recv(c, -1, &r), 0);
	ck_assert_uint_eq(r->req_id, rid);
	ck_assert_int_eq(r->error.code, ROK_E_INVALID_ARGUMENT);
	ck_assert_int_eq(r->type, ROK_REPLY_NONE);
	rok_reply_free(r);
	fake_pair_done(&f, c);
}
END_TEST

/* ---- library: pipelining ---------------------------------------------- */

#define PIPE_N 48

START_TEST(pipelined_out_of_order)
{
	struct fake f;
	uint64_t rid[PIPE_N], prev = UINT64_MAX;
	bool got[PIPE_N] = { false };
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_REVERSE);
	f.reverse_n = PIPE_N;
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	for (int i = 0; i < PIPE_N; i++) {
		char payload[16];

		snprintf(payload, sizeof(payload), "p%d", i);
		if (i % 3 == 0) {
			static const char *const a[] = { "x" };
			rok_spec spec = { .kind = "echo", .args = a,
					  .n_args = 1 };

			ck_assert_int_eq(rok_client_send_spawn(c, &spec, true,
							       0, &rid[i]), 0);
		} else {
			ck_assert_int_eq(rok_client_send_ping(c, payload,
							      strlen(payload),
							      &rid[i]), 0);
		}
		for (int j = 0; j < i; j++)
			ck_assert_uint_ne(rid[i], rid[j]);
	}
	ck_assert_uint_eq(rok_client_in_flight(c), PIPE_N);
	ck_assert_int_eq(rok_client_flush(c), 0);
	for (int k = 0; k < PIPE_N; k++) {
		rok_reply *r;
		int i;

		ck_assert_int_eq(rok_client_recv(c, 10000, &r), 0);
		for (i = 0; i < PIPE_N && rid[i] != r->req_id; i++)
			;
		ck_assert_int_lt(i, PIPE_N);
		ck_assert(!got[i]);
		got[i] = true;
		/* They come back newest first: truly out of order. */
		ck_assert_uint_lt(r->req_id, prev);
		prev = r->req_id;
		if (i % 3 == 0) {
			ck_assert_int_eq(r->type, ROK_REPLY_SPAWN);
			ck_assert_uint_eq(r->n_tasks, 1);
		} else {
			char payload[16];

			snprintf(payload, sizeof(payload), "p%d", i);
			ck_assert_int_eq(r->type, ROK_REPLY_PING);
			ck_assert_uint_eq(r->payload.len, strlen(payload));
			ck_assert_mem_eq(r->payload.data, payload,
					 strlen(payload));
		}
		rok_reply_free(r);
	}
	ck_assert_uint_eq(rok_client_in_flight(c), 0);
	{
		rok_reply *r;

		ck_assert_int_eq(rok_client_recv(c, 0, &r), -EAGAIN);
		ck_assert_ptr_null(r);
	}
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(wait_keeps_other_replies)
{
	struct fake f;
	uint64_t rid[4];
	rok_reply *r;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_REVERSE);
	f.reverse_n = 4;
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(rok_client_send_ping(c, &"abcd"[i], 1,
						      &rid[i]), 0);
	/* The first request's reply comes last; the others wait for recv. */
	ck_assert_int_eq(rok_client_wait(c, rid[0], &r), 0);
	ck_assert_uint_eq(r->req_id, rid[0]);
	ck_assert_mem_eq(r->payload.data, "a", 1);
	rok_reply_free(r);
	for (int i = 3; i >= 1; i--) {
		ck_assert_int_eq(rok_client_recv(c, 0, &r), 0);
		ck_assert_uint_eq(r->req_id, rid[i]);
		ck_assert_mem_eq(r->payload.data, &"abcd"[i], 1);
		rok_reply_free(r);
	}
	ck_assert_int_eq(rok_client_recv(c, 0, &r), -EAGAIN);
	fake_pair_done(&f, c);
}
END_TEST

/* A watch is one request in flight until its end; its events decode. */
START_TEST(watch_stream)
{
	static const int states[] = { ROK_TASK_SUCCEEDED };
	uint64_t id = 7, rid;
	struct fake f;
	rok_reply *r;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_NORMAL);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rok_client_send_watch(c, &id, 1, NULL, states, 1,
					       &rid), 0);
	ck_assert_int_eq(rok_client_wait(c, rid, &r), 0);
	ck_assert_int_eq(r->type, ROK_REPLY_WATCH);
	ck_assert_uint_eq(r->id, 7);
	ck_assert_int_eq(r->state, ROK_TASK_FAILED);
	ck_assert_uint_eq(r->time_us, 1234);
	ck_assert(r->snapshot && !r->snapshot_done && !r->end);
	ck_assert_uint_eq(r->n_tasks, 1);
	ck_assert_int_eq(r->tasks[0].exit_code, 3);
	rok_reply_free(r);
	ck_assert_uint_eq(rok_client_in_flight(c), 1);
	ck_assert_int_eq(rok_client_wait(c, rid, &r), 0);
	ck_assert(r->snapshot_done && !r->end);
	rok_reply_free(r);
	ck_assert_uint_eq(rok_client_in_flight(c), 1);
	ck_assert_int_eq(rok_client_wait(c, rid, &r), 0);
	ck_assert(r->end);
	rok_reply_free(r);
	ck_assert_uint_eq(rok_client_in_flight(c), 0);
	ck_assert_int_eq(rok_client_send_watch(c, &id, 1, NULL, states, 99,
					       &rid), -EINVAL);
	fake_pair_done(&f, c);
}
END_TEST

/* ---- library: a misbehaving daemon ------------------------------------ */

START_TEST(close_mid_reply)
{
	struct fake f;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_CLOSE_MID);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rok_client_ping(c, "x", 1), -ECONNRESET);
	assert_last_error(c, -ECONNRESET, "middle of a reply");
	/* Sticky, and no crash on further use. */
	ck_assert_int_eq(rok_client_ping(c, "y", 1), -ECONNRESET);
	{
		rok_reply *r;

		ck_assert_int_eq(rok_client_recv(c, 0, &r), -ECONNRESET);
	}
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(close_without_reply)
{
	struct fake f;
	rok_daemon_stats s;
	uint64_t rid;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_CLOSE_NOW);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rok_client_send_ping(c, "1", 1, &rid), 0);
	pthread_join(f.th, NULL);   /* the fake has closed its end */
	/* Writing to the closed socket must fail, not raise SIGPIPE. */
	signal(SIGPIPE, SIG_DFL);
	rc = rok_client_ping(c, "2", 1);
	ck_assert_msg(rc == -EPIPE || rc == -ECONNRESET, "rc %d", rc);
	ck_assert_int_eq(rok_client_stats(c, &s), rc);   /* sticky */
	rok_client_free(c);
}
END_TEST

START_TEST(close_before_reply)
{
	struct fake f;
	rok_daemon_stats s;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_CLOSE_NOW);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rok_client_stats(c, &s), -ECONNRESET);
	assert_last_error(c, -ECONNRESET, "closed the connection");
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(garbage_reply)
{
	struct fake f;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_GARBAGE);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rok_client_ping(c, "x", 1), -EPROTO);
	ck_assert_int_eq(rok_client_ping(c, "x", 1), -EPROTO);
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(oversized_reply)
{
	struct fake f;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_HUGE);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(rok_client_ping(c, "x", 1), -EMSGSIZE);
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(request_over_cap_refused)
{
	char big[1000];
	const char *argv[] = { big };
	rok_spec spec = { .kind = "echo", .args = argv, .n_args = 1 };
	struct fake f;
	uint64_t id, rid;
	int rc;
	rok_client *c;

	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	fake_init(&f, FAKE_NORMAL);
	f.max_frame = 256;
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(rok_client_server(c)->max_frame, 256);
	ck_assert_int_eq(rok_client_spawn(c, &spec, &id), -EMSGSIZE);
	assert_last_error(c, -EMSGSIZE, "256");
	ck_assert_int_eq(rok_client_send_spawn(c, &spec, false, 0, &rid),
			 -EMSGSIZE);
	ck_assert_uint_eq(rid, 0);
	ck_assert_uint_eq(rok_client_in_flight(c), 0);
	/* Nothing was sent, and the connection is still good. */
	ck_assert_int_eq(rok_client_ping(c, "small", 5), 0);
	pthread_mutex_lock(&f.mu);
	ck_assert_int_eq(f.n_requests, 1);
	pthread_mutex_unlock(&f.mu);
	fake_pair_done(&f, c);
}
END_TEST

START_TEST(client_timeout_drops_late_reply)
{
	struct fake f;
	int rc;
	rok_client *c;

	fake_init(&f, FAKE_GATED);
	ck_assert_int_eq(pipe2(f.gate, O_CLOEXEC), 0);
	c = fake_pair(&f, &rc);
	ck_assert_int_eq(rc, 0);
	rok_client_set_timeout(c, 50);
	ck_assert_int_eq(rok_client_ping(c, "late", 4), -ETIMEDOUT);
	rok_client_set_timeout(c, 0);
	/* Only now is "late" answered: its reply comes after the timeout. */
	ck_assert_int_eq(write(f.gate[1], "x", 1), 1);
	/* The late reply to "late" must not be taken for this one's (the
	 * payload check would fail with -EPROTO). */
	ck_assert_int_eq(rok_client_ping(c, "next", 4), 0);
	{
		rok_reply *r;

		ck_assert_int_eq(rok_client_recv(c, 0, &r), -EAGAIN);
	}
	fake_pair_done(&f, c);
	close(f.gate[0]);
	close(f.gate[1]);
}
END_TEST

/* ---- durations, JSON, paths ------------------------------------------- */

START_TEST(duration_parse)
{
	static const struct { const char *s; int rc; uint64_t ms; } cases[] = {
		{ "250ms", 0, 250 }, { "5s", 0, 5000 }, { "2m", 0, 120000 },
		{ "1h", 0, 3600000 }, { "1m30s", 0, 90000 },
		{ "1h2m3s4ms", 0, 3723004 }, { "1.5s", 0, 1500 },
		{ "0.25s", 0, 250 }, { "1.5h", 0, 5400000 }, { "0", 0, 0 },
		{ "0s", 0, 0 }, { "0ms", 0, 0 }, { ".5s", 0, 500 },
		{ "10s10s", 0, 20000 },
		{ "", -EINVAL, 0 }, { "5", -EINVAL, 0 }, { "s", -EINVAL, 0 },
		{ "5x", -EINVAL, 0 }, { "5 s", -EINVAL, 0 },
		{ " 5s", -EINVAL, 0 }, { "-5s", -EINVAL, 0 },
		{ "+5s", -EINVAL, 0 }, { "5S", -EINVAL, 0 },
		{ "5sec", -EINVAL, 0 }, { "1m30", -EINVAL, 0 },
		{ "0.5ms", -EINVAL, 0 }, { "1.0001s", -EINVAL, 0 },
		{ "5s ", -EINVAL, 0 }, { "1d", -EINVAL, 0 },
		{ "99999999999999999999ms", -ERANGE, 0 },
		{ "9999999999999999h", -ERANGE, 0 },
		/* At most ROK_DURATION_MAX_MS, 87600h: never wraps in rokd. */
		{ "1440h", 0, 5184000000 }, { "87600h", 0, 315360000000 },
		{ "315360000000ms", 0, 315360000000 },
		{ "315360000001ms", -ERANGE, 0 }, { "87600h1ms", -ERANGE, 0 },
		{ "87599h60m0.001s", -ERANGE, 0 },
		{ "9223372036s", -ERANGE, 0 },
		{ "18446744073709551615ms", -ERANGE, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t ms = 12345;
		int rc = rok_duration_parse(cases[i].s, &ms);

		ck_assert_msg(rc == cases[i].rc && ms == cases[i].ms,
			      "\"%s\": rc %d ms %llu, want %d %llu", cases[i].s,
			      rc, (unsigned long long)ms, cases[i].rc,
			      (unsigned long long)cases[i].ms);
	}
	ck_assert_int_eq(rok_duration_parse(NULL, &(uint64_t){ 0 }), -EINVAL);
}
END_TEST

START_TEST(duration_format)
{
	static const struct { uint64_t ms; const char *s; } cases[] = {
		{ 0, "0s" }, { 1, "1ms" }, { 250, "250ms" }, { 1000, "1s" },
		{ 1500, "1.5s" }, { 1250, "1.25s" }, { 1001, "1.001s" },
		{ 60000, "1m" }, { 90000, "1m30s" }, { 3600000, "1h" },
		{ 3723004, "1h2m3.004s" },
	};
	char buf[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t back;

		rok_duration_format(cases[i].ms, buf, sizeof(buf));
		ck_assert_str_eq(buf, cases[i].s);
		ck_assert_int_eq(rok_duration_parse(buf, &back), 0);
		ck_assert_uint_eq(back, cases[i].ms);
	}
	/* Round trip over a spread of values. */
	for (uint64_t ms = 0; ms < 20000000; ms = ms * 3 + 7) {
		uint64_t back;

		rok_duration_format(ms, buf, sizeof(buf));
		ck_assert_int_eq(rok_duration_parse(buf, &back), 0);
		ck_assert_uint_eq(back, ms);
	}
	ck_assert_int_eq(rok_duration_format(90000, buf, 3), 5);
	ck_assert_str_eq(buf, "1m");
}
END_TEST

/* json_string of data into a malloc'd NUL-terminated string. */
static char *json_of(const void *data, size_t len, bool *lossy)
{
	char *out = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&out, &n);

	ck_assert_ptr_nonnull(f);
	*lossy = json_string(f, data, len);
	fclose(f);
	return out;
}

START_TEST(json_escaping)
{
	static const struct {
		const char *in;
		size_t len;
		const char *out;
		bool lossy;
	} cases[] = {
#define J(in, out, lossy) { in, sizeof(in) - 1, out, lossy }
		J("", "\"\"", false),
		J("plain text", "\"plain text\"", false),
		J("q\"b\\s/", "\"q\\\"b\\\\s/\"", false),
		J("\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"", false),
		J("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"", false),
		J("a\0b", "\"a\\u0000b\"", false),
		J("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
		  "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", false),
		J("\xe2\x80\xa8", "\"\\u2028\"", false),
		J("\xff", "\"\xef\xbf\xbd\"", true),
		J("a\x80z", "\"a\xef\xbf\xbdz\"", true),
		J("\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\"", true), /* overlong */
		J("\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"",
		  true),                                          /* surrogate */
		J("\xe2\x82", "\"\xef\xbf\xbd\xef\xbf\xbd\"", true), /* cut */
		J("\xf4\x90\x80\x80",                             /* > 10FFFF */
		  "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"", true),
		J("ok\xff\xfe\"\n\x01",
		  "\"ok\xef\xbf\xbd\xef\xbf\xbd\\\"\\n\\u0001\"", true),
#undef J
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool lossy;
		char *s = json_of(cases[i].in, cases[i].len, &lossy);

		ck_assert_msg(strcmp(s, cases[i].out) == 0,
			      "case %zu: got %s want %s", i, s, cases[i].out);
		ck_assert_int_eq(lossy, cases[i].lossy);
		free(s);
	}

	/* Every byte value alone, and random byte strings: the output is
	 * always valid UTF-8 without raw control characters. */
	srand(1);
	for (int i = 0; i < 2000; i++) {
		uint8_t in[24];
		size_t len = i < 256 ? 1 : (size_t)(rand() % 24);
		bool lossy;
		char *s;

		for (size_t k = 0; k < len; k++)
			in[k] = i < 256 ? (uint8_t)i : (uint8_t)rand();
		s = json_of(in, len, &lossy);
		for (size_t k = 0; s[k] != '\0';) {
			uint32_t cp;
			size_t n = json_utf8_len((const uint8_t *)s + k,
						 strlen(s + k), &cp);

			ck_assert_uint_gt(n, 0);
			ck_assert_uint_ge(cp, 0x20);
			k += n;
		}
		free(s);
	}
}
END_TEST

START_TEST(json_base64_and_bytes)
{
	static const char *const rfc[][2] = {
		{ "", "\"\"" }, { "f", "\"Zg==\"" }, { "fo", "\"Zm8=\"" },
		{ "foo", "\"Zm9v\"" }, { "foob", "\"Zm9vYg==\"" },
		{ "fooba", "\"Zm9vYmE=\"" }, { "foobar", "\"Zm9vYmFy\"" },
	};
	char *out = NULL;
	size_t n = 0;
	FILE *f;
	struct json_obj o;

	for (size_t i = 0; i < sizeof(rfc) / sizeof(rfc[0]); i++) {
		f = open_memstream(&out, &n);
		json_base64(f, rfc[i][0], strlen(rfc[i][0]));
		fclose(f);
		ck_assert_str_eq(out, rfc[i][1]);
		free(out);
	}

	f = open_memstream(&out, &n);
	json_begin(&o, f);
	json_u64(&o, "id", 18446744073709551615ull);
	json_bytes(&o, "good", "text", 4);
	json_bytes(&o, "bad", "\xff\x00", 2);
	json_null(&o, "none");
	json_bool(&o, "yes", true);
	json_i64(&o, "neg", -5);
	json_end(&o);
	fclose(f);
	ck_assert_str_eq(out, "{\"id\":18446744073709551615,\"good\":\"text\","
			 "\"bad\":\"\xef\xbf\xbd\\u0000\",\"bad_base64\":\"/wA=\","
			 "\"none\":null,\"yes\":true,\"neg\":-5}\n");
	free(out);
}
END_TEST

START_TEST(socket_path)
{
	char buf[256];
	bool priv;

	ck_assert_int_gt(path_resolve("/x/y.sock", "/run/user/5", 5, buf,
				      sizeof(buf), &priv), 0);
	ck_assert_str_eq(buf, "/x/y.sock");
	ck_assert(!priv);
	ck_assert_int_gt(path_resolve("/x/y.sock", NULL, 0, buf, sizeof(buf),
				      &priv), 0);
	ck_assert_str_eq(buf, "/x/y.sock");
	ck_assert_int_gt(path_resolve(NULL, "/run/user/5", 0, buf, sizeof(buf),
				      &priv), 0);
	ck_assert_str_eq(buf, "/run/rok/rokd.sock");
	ck_assert_int_gt(path_resolve("", "/run/user/5", 5, buf, sizeof(buf),
				      &priv), 0);
	ck_assert_str_eq(buf, "/run/user/5/rok/rokd.sock");
	ck_assert(!priv);
	ck_assert_int_gt(path_resolve(NULL, NULL, 1234, buf, sizeof(buf),
				      &priv), 0);
	ck_assert_str_eq(buf, "/tmp/rok-1234/rokd.sock");
	ck_assert(priv);
	ck_assert_int_gt(path_resolve(NULL, "relative", 1234, buf, sizeof(buf),
				      &priv), 0);
	ck_assert_str_eq(buf, "/tmp/rok-1234/rokd.sock");
	ck_assert_int_eq(path_resolve("/x/y.sock", NULL, 5, buf, 4, &priv),
			 -ENAMETOOLONG);

	/* The public call reads the environment. */
	setenv("ROK_SOCKET", "/env/rokd.sock", 1);
	ck_assert_int_eq(rok_socket_path(buf, sizeof(buf)), 14);
	ck_assert_str_eq(buf, "/env/rokd.sock");
	unsetenv("ROK_SOCKET");
	setenv("XDG_RUNTIME_DIR", "/xdg", 1);
	ck_assert_int_gt(rok_socket_path(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, geteuid() == 0 ? "/run/rok/rokd.sock" :
			 "/xdg/rok/rokd.sock");

	/* The /tmp fallback's directory must be private. */
	{
		char dir[] = "/tmp/check_client_dir.XXXXXX";
		char sock[64];

		ck_assert_ptr_nonnull(mkdtemp(dir));
		snprintf(sock, sizeof(sock), "%s/rokd.sock", dir);
		ck_assert_int_eq(path_check_dir(sock, geteuid()), 0);
		ck_assert_int_eq(chmod(dir, 0755), 0);
		ck_assert_int_eq(path_check_dir(sock, geteuid()), -EPERM);
		ck_assert_int_eq(chmod(dir, 0700), 0);
		ck_assert_int_eq(path_check_dir(sock, geteuid() + 1), -EPERM);
		rmdir(dir);
		ck_assert_int_eq(path_check_dir(sock, geteuid()), -ENOENT);
	}
}
END_TEST

START_TEST(state_names)
{
	static const char *const names[] = { "queued", "running", "succeeded",
		"failed", "cancelled", "timed_out", "interrupted" };

	for (int i = 0; i < 7; i++) {
		ck_assert_str_eq(rok_state_name(i + 1), names[i]);
		ck_assert_int_eq(rok_state_parse(names[i]), i + 1);
	}
	ck_assert_int_eq(rok_state_parse("bogus"), -EINVAL);
	ck_assert_str_eq(rok_state_name(99), "unknown");
	ck_assert(!rok_state_finished(ROK_TASK_RUNNING));
	ck_assert(rok_state_finished(ROK_TASK_INTERRUPTED));
	ck_assert_int_eq(rok_state_parse("unspecified"), -EINVAL);

	/* Priorities: 0 (unspecified) reads as normal, "normal" parses to
	 * the class itself; policies. */
	ck_assert_str_eq(rok_priority_name(0), "normal");
	ck_assert_str_eq(rok_priority_name(ROK_PRIORITY_LOW), "low");
	ck_assert_str_eq(rok_priority_name(5), "unknown");
	ck_assert_str_eq(rok_priority_name(-1), "unknown");
	ck_assert_int_eq(rok_priority_parse("URGENT"), 1);
	ck_assert_int_eq(rok_priority_parse("normal"), 3);
	ck_assert_int_eq(rok_priority_parse("low"), ROK_PRIORITY_LOW);
	ck_assert_int_eq(rok_priority_parse("bogus"), -EINVAL);
	ck_assert_str_eq(rok_policy_name(ROK_POLICY_WEIGHTED), "weighted");
	ck_assert_str_eq(rok_policy_name(3), "unknown");
	ck_assert_int_eq(rok_policy_parse("strict"), 1);
	ck_assert_int_eq(rok_policy_parse("Weighted"), ROK_POLICY_WEIGHTED);
	ck_assert_int_eq(rok_policy_parse("unspecified"), -EINVAL);
	ck_assert_str_eq(rok_error_name(0), "ok");
}
END_TEST

/* ---- rokctl against the fake ------------------------------------------ */

struct run {
	int status;        /* exit status, or 128 + signal */
	char *out;         /* stdout, NUL-terminated */
	int lines;
};

/*
 * Runs rokctl with args (NULL-terminated) and ROK_SOCKET=socket (NULL: none)
 * plus extra environment entries, feeding it no input.  The environment is
 * built before fork: the child of a threaded process may only exec.
 */
static struct run rokctl_run(const char *socket, const char *const *extra,
			     const char *const *args)
{
	struct run r = { 0 };
	char *argv[32], *envp[512], sockenv[256];
	size_t na = 0, ne = 0, len = 0, cap = 4096;
	int out[2], st;
	pid_t pid;

	argv[na++] = (char *)ROKCTL_PATH;
	for (; *args != NULL && na < 31; args++)
		argv[na++] = (char *)*args;
	argv[na] = NULL;
	for (char **e = environ; *e != NULL && ne < 500; e++) {
		if (strncmp(*e, "ROK_SOCKET=", 11) != 0 &&
		    strncmp(*e, "ROK_TEST_MARK=", 14) != 0)
			envp[ne++] = *e;
	}
	if (socket != NULL) {
		snprintf(sockenv, sizeof(sockenv), "ROK_SOCKET=%s", socket);
		envp[ne++] = sockenv;
	}
	for (; extra != NULL && *extra != NULL; extra++)
		envp[ne++] = (char *)*extra;
	envp[ne] = NULL;

	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);

		dup2(devnull, 0);
		dup2(out[1], 1);
		execve(ROKCTL_PATH, argv, envp);
		_exit(127);
	}
	close(out[1]);
	r.out = malloc(cap);
	for (;;) {
		ssize_t n;

		if (len + 1024 > cap) {
			cap *= 2;
			r.out = realloc(r.out, cap);
		}
		n = read(out[0], r.out + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	r.out[len] = '\0';
	close(out[0]);
	while (waitpid(pid, &st, 0) < 0)
		ck_assert_int_eq(errno, EINTR);
	r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	for (size_t i = 0; i < len; i++)
		r.lines += r.out[i] == '\n';
	return r;
}

#define RUN(f, ...) rokctl_run((f)->path, NULL, (const char *const[]){ __VA_ARGS__, NULL })

/* The n-th line (0-based) of s, copied into buf. */
static const char *line_of(const char *s, int n, char *buf, size_t size)
{
	while (n-- > 0 && s != NULL) {
		s = strchr(s, '\n');
		if (s != NULL)
			s++;
	}
	if (s == NULL)
		return "";
	snprintf(buf, size, "%.*s", (int)strcspn(s, "\n"), s);
	return buf;
}

static bool rokctl_available(void)
{
	if (access(ROKCTL_PATH, X_OK) == 0)
		return true;
	fprintf(stderr, "check_client: %s not built, rokctl tests skipped\n",
		ROKCTL_PATH);
	return false;
}

#define HAS(s, sub) ck_assert_msg(strstr((s), (sub)) != NULL, \
				  "'%s' not in: %s", (sub), (s))

START_TEST(rokctl_json_and_exit_codes)
{
	struct fake f;
	struct run r;
	char l[1024];

	if (!rokctl_available())
		return;
	fake_init(&f, FAKE_NORMAL);
	fake_listen(&f);

	r = RUN(&f, "--json", "join", "1", "7", "9", "9404");
	ck_assert_int_eq(r.status, 3);
	ck_assert_int_eq(r.lines, 4);
	line_of(r.out, 0, l, sizeof(l));
	HAS(l, "{\"id\":1,\"state\":\"succeeded\",\"kind\":\"echo\","
	       "\"exit_code\":null,\"signal\":null,\"value\":\"v1\"");
	HAS(l, "\"spawned_us\":1700000000000001,");
	HAS(l, "\"finished_us\":1700000001501001,");
	line_of(r.out, 1, l, sizeof(l));
	HAS(l, "\"id\":7,\"state\":\"failed\",\"kind\":\"exec\","
	       "\"exit_code\":3,\"signal\":null");
	HAS(l, "\"reason\":\"exited with status 3\"");
	line_of(r.out, 2, l, sizeof(l));
	HAS(l, "\"exit_code\":null,\"signal\":9");
	line_of(r.out, 3, l, sizeof(l));
	ck_assert_str_eq(l, "{\"id\":9404,\"error\":\"not_found\","
			 "\"message\":\"no such task\"}");
	free(r.out);

	r = RUN(&f, "join", "1", "2");
	ck_assert_int_eq(r.status, 0);
	line_of(r.out, 0, l, sizeof(l));
	ck_assert_str_eq(l, "ID  STATE      KIND  EXIT  TIME  GROUP  PRIO    "
			 "VALUE");
	line_of(r.out, 1, l, sizeof(l));
	ck_assert_str_eq(l, "1   succeeded  echo  -     1.5s  -      normal  v1");
	free(r.out);

	r = RUN(&f, "join", "9", "7");
	ck_assert_int_eq(r.status, 1);
	HAS(r.out, "SIGKILL");
	HAS(r.out, "[exited with status 3]");
	free(r.out);

	r = RUN(&f, "join", "-t", "1s", "13");
	ck_assert_int_eq(r.status, 5);
	ck_assert_int_eq(r.lines, 0);
	free(r.out);

	r = RUN(&f, "--json", "status", "11", "13");
	ck_assert_int_eq(r.status, 0);
	line_of(r.out, 0, l, sizeof(l));
	HAS(l, "\"value\":\"ok\xef\xbf\xbd\xef\xbf\xbd\\\"\\n\\u0001\","
	       "\"value_base64\":\"b2v//iIKAQ==\"");
	line_of(r.out, 1, l, sizeof(l));
	HAS(l, "\"state\":\"running\"");
	HAS(l, "\"finished_us\":null");
	free(r.out);

	r = RUN(&f, "status", "11");   /* escaped for the terminal */
	HAS(r.out, "ok\\xff\\xfe\"\\n\\x01");
	free(r.out);

	r = RUN(&f, "race", "--json", "--cancel-rest", "7", "1");
	ck_assert_int_eq(r.status, 1);
	HAS(r.out, "\"id\":7");
	HAS(r.out, "\"index\":0");
	free(r.out);

	r = RUN(&f, "--json", "cancel", "5", "9999");
	ck_assert_int_eq(r.status, 3);
	HAS(r.out, "{\"id\":5,\"cancel\":\"requested\"}\n");
	HAS(r.out, "{\"id\":9999,\"error\":\"not_found\"");
	free(r.out);

	r = RUN(&f, "--json", "stats");
	ck_assert_int_eq(r.status, 0);
	ck_assert_int_eq(r.lines, 1);
	HAS(r.out, "\"workers\":4,");
	HAS(r.out, "\"registrations\":-1,");
	HAS(r.out, "\"tasks_total\":{\"queued\":2500,");
	HAS(r.out, ",\"groups\":[]}");
	free(r.out);

	r = RUN(&f, "ping");
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "pong from fake-rokd 0");
	free(r.out);

	r = RUN(&f, "list");
	ck_assert_int_eq(r.status, 0);
	ck_assert_int_eq(r.lines, 2501);   /* header + three pages */
	free(r.out);

	r = RUN(&f, "--json", "list", "-n", "5", "--after", "100");
	ck_assert_int_eq(r.status, 0);
	ck_assert_int_eq(r.lines, 5);
	HAS(r.out, "{\"id\":101,");
	free(r.out);

	r = RUN(&f, "list", "--state", "bogus");
	ck_assert_int_eq(r.status, 2);
	free(r.out);

	fake_listen_done(&f);
}
END_TEST

START_TEST(rokctl_spawn)
{
	static const char *const mark[] = { "ROK_TEST_MARK=1", NULL };
	struct fake f;
	struct run r;
	char cwd[4096];

	if (!rokctl_available())
		return;
	ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
	fake_init(&f, FAKE_NORMAL);
	fake_listen(&f);

	r = RUN(&f, "spawn", "-k", "echo", "hello", "world");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "101\n");
	ck_assert_str_eq(f.spawn_arg0, "hello world");
	free(r.out);

	r = RUN(&f, "--json", "spawn", "-k", "noop");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(r.out, "{\"id\":102,\"state\":\"queued\"}\n");
	free(r.out);

	r = RUN(&f, "spawn", "-w", "-k", "echo", "hi");
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "succeeded  echo");
	free(r.out);

	r = RUN(&f, "spawn", "-k", "sleep", "1m30s");
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(f.spawn_kind, "sleep");
	ck_assert_str_eq(f.spawn_arg0, "90000ms");
	free(r.out);

	/* exec sends the directory and environment. */
	r = rokctl_run(f.path, mark, (const char *const[]){
		"spawn", "--", "ls", "-l", NULL });
	ck_assert_int_eq(r.status, 0);
	ck_assert_str_eq(f.spawn_kind, "exec");
	ck_assert_str_eq(f.spawn_arg0, "ls");
	ck_assert_uint_eq(f.spawn_n_args, 2);
	ck_assert_str_eq(f.spawn_cwd, cwd);
	ck_assert(!f.spawn_clean_env);
	ck_assert_int_eq(f.spawn_marks, 1);
	ck_assert_str_eq(f.spawn_mark, "1");
	free(r.out);

	/* Options stop at the first operand: -l belongs to ls. */
	r = rokctl_run(f.path, mark, (const char *const[]){
		"spawn", "-e", "ROK_TEST_MARK=2", "ls", "-l", NULL });
	ck_assert_int_eq(r.status, 0);
	ck_assert_uint_eq(f.spawn_n_args, 2);
	ck_assert_int_eq(f.spawn_marks, 1);
	ck_assert_str_eq(f.spawn_mark, "2");
	free(r.out);

	r = rokctl_run(f.path, mark, (const char *const[]){
		"spawn", "--clean-env", "-C", "/", "true", NULL });
	ck_assert_int_eq(r.status, 0);
	ck_assert(f.spawn_clean_env);
	ck_assert_uint_eq(f.spawn_n_env, 0);
	ck_assert_str_eq(f.spawn_cwd, "/");
	free(r.out);

	r = RUN(&f, "spawn", "-k", "bogus");
	ck_assert_int_eq(r.status, 3);
	free(r.out);

	fake_listen_done(&f);
}
END_TEST

START_TEST(rokctl_usage_and_unreachable)
{
	static const char *const usage[][6] = {
		{ "bogus" }, { "join" }, { "join", "abc" }, { "join", "0" },
		{ "join", "-t", "5", "1" }, { "join", "-t", "1x", "1" },
		{ "join", "--bogus", "1" }, { "join", "-t" },
		{ "spawn" }, { "spawn", "-k", "sleep" },
		{ "spawn", "-k", "sleep", "soon" }, { "spawn", "-k", "noop", "x" },
		{ "spawn", "-k", "echo", "-e", "A=1", "x" },
		{ "spawn", "-e", "novalue", "ls" }, { "logs", "1", "2" },
		{ "stats", "extra" }, { "help", "bogus" }, { "--bogus" }, { "-s" },
	};
	struct run r;

	if (!rokctl_available())
		return;
	r = rokctl_run(NULL, NULL, (const char *const[]){ NULL });
	ck_assert_int_eq(r.status, 2);
	free(r.out);
	for (size_t i = 0; i < sizeof(usage) / sizeof(usage[0]); i++) {
		/* No daemon anywhere: a usage error must be found first. */
		r = rokctl_run("/nonexistent/rokd.sock", NULL, usage[i]);
		ck_assert_msg(r.status == 2, "rokctl %s %s: exit %d, want 2",
			      usage[i][0], usage[i][1] ? usage[i][1] : "",
			      r.status);
		free(r.out);
	}
	r = rokctl_run("/nonexistent/rokd.sock", NULL,
		       (const char *const[]){ "ping", NULL });
	ck_assert_int_eq(r.status, 4);
	free(r.out);
	r = rokctl_run(NULL, NULL, (const char *const[]){
		"-s", "/nonexistent/rokd.sock", "join", "1", NULL });
	ck_assert_int_eq(r.status, 4);
	free(r.out);
	r = rokctl_run(NULL, NULL, (const char *const[]){ "--help", NULL });
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "Exit status");
	free(r.out);
	r = rokctl_run(NULL, NULL, (const char *const[]){ "help", "race",
							   NULL });
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "--cancel-rest");
	free(r.out);
	r = rokctl_run(NULL, NULL, (const char *const[]){ "join", "--help",
							   NULL });
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "Usage: rokctl join");
	free(r.out);
	r = rokctl_run(NULL, NULL, (const char *const[]){ "--version", NULL });
	ck_assert_int_eq(r.status, 0);
	HAS(r.out, "protocol 1");
	free(r.out);
}
END_TEST

START_TEST(rokctl_daemon_vanishes)
{
	struct fake f;
	struct run r;

	if (!rokctl_available())
		return;
	fake_init(&f, FAKE_CLOSE_MID);
	fake_listen(&f);
	r = RUN(&f, "stats");
	ck_assert_int_eq(r.status, 4);
	free(r.out);
	fake_listen_done(&f);

	fake_init(&f, FAKE_NORMAL);
	f.proto = 7;
	fake_listen(&f);
	r = RUN(&f, "ping");
	ck_assert_int_eq(r.status, 4);
	free(r.out);
	fake_listen_done(&f);
}
END_TEST

static Suite *client_suite(void)
{
	Suite *s = suite_create("client");
	struct {
		const char *name;
		const TTest *fn;
	} cases[] = {
		{ "hello_ok", hello_ok },
		{ "hello_version_mismatch", hello_version_mismatch },
		{ "hello_refused", hello_refused },
		{ "connect_errors", connect_errors },
		{ "connect_unix_socket", connect_unix_socket },
		{ "spawn_and_join", spawn_and_join },
		{ "list_pages_and_stats", list_pages_and_stats },
		{ "stats_metrics", stats_metrics },
		{ "typed_error", typed_error },
		{ "pipelined_out_of_order", pipelined_out_of_order },
		{ "wait_keeps_other_replies", wait_keeps_other_replies },
		{ "watch_stream", watch_stream },
		{ "close_mid_reply", close_mid_reply },
		{ "close_without_reply", close_without_reply },
		{ "close_before_reply", close_before_reply },
		{ "garbage_reply", garbage_reply },
		{ "oversized_reply", oversized_reply },
		{ "request_over_cap_refused", request_over_cap_refused },
		{ "client_timeout", client_timeout_drops_late_reply },
		{ "duration_parse", duration_parse },
		{ "duration_format", duration_format },
		{ "json_escaping", json_escaping },
		{ "json_base64_and_bytes", json_base64_and_bytes },
		{ "socket_path", socket_path },
		{ "state_names", state_names },
		{ "rokctl_json_and_exit_codes", rokctl_json_and_exit_codes },
		{ "rokctl_spawn", rokctl_spawn },
		{ "rokctl_usage_and_unreachable", rokctl_usage_and_unreachable },
		{ "rokctl_daemon_vanishes", rokctl_daemon_vanishes },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		TCase *tc = tcase_create(cases[i].name);

		tcase_set_timeout(tc, test_timeout(30));
		tcase_add_test(tc, cases[i].fn);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(client_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
