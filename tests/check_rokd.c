/*
 * check_rokd.c — rokd from the outside: a real daemon on a private socket,
 * driven with raw frames, good and bad.
 *
 * Each test starts its own rokd (the binary named by $ROKD, built by make)
 * in a temporary directory, waits for it by polling the socket, talks to it
 * with hand-made frames, and stops it with SIGTERM, which must end it with
 * exit status 0.  The bad-input cases check that the daemon answers a typed
 * error or closes only the offending connection, and keeps serving others.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rok.pb-c.h"
#include "testutil.h"
#include "wire.h"

typedef Rok__V1__Request Request;
typedef Rok__V1__Response Response;

static char dir[64];
static char sock[100];
static pid_t rokd_pid;

static int rc_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Drops to uid and gid 65534 (nobody, nogroup): 0, or -1 when not root. */
static int rc_become_nobody(void)
{
	gid_t g = 65534;

	if (setgroups(1, &g) != 0 || setresgid(g, g, g) != 0 ||
	    setresuid(65534, 65534, 65534) != 0)
		return -1;
	return 0;
}

/* Starts rokd, as nobody when `as_nobody` (the caller is root). */
static void rokd_start_as(const char *extra_conf, bool as_nobody);

static void rokd_start(const char *extra_conf)
{
	rokd_start_as(extra_conf, false);
}

static void rokd_start_as(const char *extra_conf, bool as_nobody)
{
	const char *bin = getenv("ROKD");
	char conf[128], state[128];

	ck_assert_msg(bin != NULL, "set ROKD to the rokd binary");
	snprintf(dir, sizeof(dir), "/tmp/rokd-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sock, sizeof(sock), "%.60s/run/rokd.sock", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(conf, sizeof(conf), "%s/rokd.conf", dir);
	FILE *f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	/* Exec tasks run as many at once as the tests spawn: the group
	 * default without a limit (limits are tests/sched.test's). */
	fprintf(f, "group.default.parallel = 0\n%s\n",
	        extra_conf != NULL ? extra_conf : "");
	fclose(f);
	/* Other users must reach the socket's directory. */
	ck_assert_int_eq(chmod(dir, 0755), 0);
	if (as_nobody) {
		char run[128];
		snprintf(run, sizeof(run), "%s/run", dir);
		ck_assert_int_eq(mkdir(run, 0700), 0);
		ck_assert_int_eq(chown(run, 65534, 65534), 0);
		ck_assert_int_eq(mkdir(state, 0700), 0);
		ck_assert_int_eq(chown(state, 65534, 65534), 0);
		ck_assert_int_eq(chmod(conf, 0644), 0);
		/* The build tree may be closed to other users: run a copy. */
		static char copy[128];
		char cmd[320];
		snprintf(copy, sizeof(copy), "%s/rokd", dir);
		snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && chmod 0755 '%s'", bin,
		         copy, copy);
		ck_assert_int_eq(system(cmd), 0);
		bin = copy;
	}
	rokd_pid = fork();
	ck_assert_int_ge(rokd_pid, 0);
	if (rokd_pid == 0) {
		if (as_nobody && rc_become_nobody() != 0)
			_exit(126);
		execl(bin, bin, "-c", conf, "-s", sock, "-S", state, "-w", "2",
		      (char *)NULL);
		_exit(127);
	}
	/* Its start fsyncs the journal's WAL: seconds on a busy disk. */
	for (int i = 0; i < test_timeout(30) * 100; i++) {
		int fd = rc_connect();
		if (fd >= 0) {
			close(fd);
			return;
		}
		test_sleep_ms(10);
	}
	ck_abort_msg("rokd did not come up");
}

/* SIGTERM; the daemon must exit 0. */
static void rokd_stop(void)
{
	int status;

	ck_assert_int_eq(kill(rokd_pid, SIGTERM), 0);
	ck_assert_int_eq(waitpid(rokd_pid, &status, 0), rokd_pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	              "rokd exit status %d", status);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static void rc_write(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_int_gt(n, 0);
		p += n;
		len -= (size_t)n;
	}
}

static void rc_send(int fd, const Request *req)
{
	size_t n = rok__v1__request__get_packed_size(req);
	uint8_t *buf = malloc(WIRE_HEADER + n);

	ck_assert_ptr_nonnull(buf);
	wire_put_header(buf, (uint32_t)n);
	rok__v1__request__pack(req, buf + WIRE_HEADER);
	rc_write(fd, buf, WIRE_HEADER + n);
	free(buf);
}

/* Reads exactly len bytes, or returns false at end of stream. */
static bool rc_read(int fd, void *buf, size_t len, int timeout_ms)
{
	uint8_t *p = buf;

	while (len > 0) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r = poll(&pfd, 1, timeout_ms);
		ck_assert_msg(r > 0, "no reply within %d ms", timeout_ms);
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* The next response, or NULL if the daemon closed the connection. */
static Response *rc_recv(int fd)
{
	uint8_t hdr[WIRE_HEADER];

	if (!rc_read(fd, hdr, sizeof(hdr), test_timeout(10) * 1000))
		return NULL;
	uint32_t n = wire_get_header(hdr);
	ck_assert_uint_le(n, WIRE_DEFAULT_MAX);
	uint8_t *buf = malloc(n > 0 ? n : 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert(rc_read(fd, buf, n, test_timeout(10) * 1000));
	Response *r = rok__v1__response__unpack(NULL, n, buf);
	free(buf);
	ck_assert_ptr_nonnull(r);
	return r;
}

/* Fails, with the daemon's message, unless r is a reply without error. */
static void rc_assert_ok(const Response *r, const char *what)
{
	ck_assert_ptr_nonnull(r);
	ck_assert_msg(r->error == NULL, "%s: %.*s", what,
	              r->error ? (int)r->error->message.len : 0,
	              r->error ? (char *)r->error->message.data : "");
}

static bool rc_closed(int fd)
{
	uint8_t b;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	ck_assert_int_gt(poll(&pfd, 1, test_timeout(10) * 1000), 0);
	return read(fd, &b, 1) == 0;
}

/* Sends a version-1 hello as request 1. */
static void rc_send_hello(int fd)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__Hello h = ROK__V1__HELLO__INIT;

	h.protocol_version = 1;
	req.id = 1;
	req.body_case = ROK__V1__REQUEST__BODY_HELLO;
	req.hello = &h;
	rc_send(fd, &req);
}

static int rc_hello(void)
{
	int fd = rc_connect();

	ck_assert_int_ge(fd, 0);
	rc_send_hello(fd);
	Response *r = rc_recv(fd);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_null(r->error);
	ck_assert_int_eq(r->body_case, ROK__V1__RESPONSE__BODY_HELLO);
	ck_assert_uint_eq(r->hello->protocol_version, 1);
	ck_assert_uint_eq(r->hello->uid, getuid());
	rok__v1__response__free_unpacked(r, NULL);
	return fd;
}

/*
 * In a forked child: drops to nobody, connects and says hello; the
 * connection, or the child exits 10 (not root), 11 (no connection) or 12
 * (no hello reply, or one that does not see the caller as nobody).
 */
static int rc_child_hello(void)
{
	if (rc_become_nobody() != 0)
		_exit(10);
	int c = rc_connect();
	if (c < 0)
		_exit(11);
	rc_send_hello(c);
	Response *r = rc_recv(c);
	if (r == NULL || r->error != NULL || r->hello == NULL ||
	    r->hello->uid != 65534)
		_exit(12);
	rok__v1__response__free_unpacked(r, NULL);
	return c;
}

/* Waits for the child pid and fails unless it exited 0; its exit status
 * is the step that failed, reported with `who`. */
static void rc_reap(pid_t pid, const char *who)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	              "%s: step %d failed", who, WEXITSTATUS(status));
}

static ProtobufCBinaryData bin(const char *s)
{
	ProtobufCBinaryData b = { strlen(s), (uint8_t *)(uintptr_t)s };
	return b;
}

/* Sends a spawn of kind with one optional argument. */
static void rc_spawn_req(int fd, uint64_t id, const char *kind,
                         const char *arg, bool wait, uint64_t timeout_ms)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__SpawnRequest sp = ROK__V1__SPAWN_REQUEST__INIT;
	Rok__V1__TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	ProtobufCBinaryData a = arg != NULL ? bin(arg) : bin("");

	spec.kind = bin(kind);
	if (arg != NULL) {
		spec.n_args = 1;
		spec.args = &a;
	}
	spec.timeout_ms = timeout_ms;
	sp.spec = &spec;
	sp.wait = wait;
	req.id = id;
	req.body_case = ROK__V1__REQUEST__BODY_SPAWN;
	req.spawn = &sp;
	rc_send(fd, &req);
}

static uint64_t rc_spawn(int fd, const char *kind, const char *arg)
{
	rc_spawn_req(fd, 7, kind, arg, false, 0);
	Response *r = rc_recv(fd);
	rc_assert_ok(r, "spawn failed");
	ck_assert_uint_eq(r->id, 7);
	uint64_t id = r->spawn->id;
	rok__v1__response__free_unpacked(r, NULL);
	return id;
}

/* Sends a join of the n tasks in ids as request req_id. */
static void rc_join_send(int fd, uint64_t req_id, uint64_t *ids, size_t n,
                         uint64_t timeout_ms)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__JoinRequest j = ROK__V1__JOIN_REQUEST__INIT;

	j.ids = ids;
	j.n_ids = n;
	j.timeout_ms = timeout_ms;
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_JOIN;
	req.join = &j;
	rc_send(fd, &req);
}

static Response *rc_join(int fd, uint64_t *ids, size_t n, uint64_t timeout_ms)
{
	rc_join_send(fd, 9, ids, n, timeout_ms);
	return rc_recv(fd);
}

/* Sends a join of one task as request req_id (its reply comes later). */
static void rc_join_req(int fd, uint64_t req_id, uint64_t *id)
{
	rc_join_send(fd, req_id, id, 1, 0);
}

static void rc_logs_req(int fd, uint64_t req_id, uint64_t task, bool follow)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__LogsRequest l = ROK__V1__LOGS_REQUEST__INIT;

	l.task_id = task;
	l.follow = follow;
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_LOGS;
	req.logs = &l;
	rc_send(fd, &req);
}

/* Sends request req_id cancelling the n tasks in ids. */
static void rc_cancel_req(int fd, uint64_t req_id, uint64_t *ids, size_t n)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__CancelRequest cr = ROK__V1__CANCEL_REQUEST__INIT;

	cr.ids = ids;
	cr.n_ids = n;
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_CANCEL;
	req.cancel = &cr;
	rc_send(fd, &req);
}

static void rc_cancel_ok(int fd, uint64_t id)
{
	rc_cancel_req(fd, 43, &id, 1);
	Response *r = rc_recv(fd);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_nonnull(r->cancel);
	ck_assert_int_eq(r->cancel->results[0]->code, ROK__V1__ERROR_CODE__OK);
	rok__v1__response__free_unpacked(r, NULL);
}

/* Sends a ping as request req_id (its reply comes later). */
static void rc_ping_req(int fd, uint64_t req_id)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__PingRequest p = ROK__V1__PING_REQUEST__INIT;

	p.payload = bin("hi");
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_PING;
	req.ping = &p;
	rc_send(fd, &req);
}

static void rc_ping_ok(int fd)
{
	rc_ping_req(fd, 99);
	Response *r = rc_recv(fd);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->id, 99);
	ck_assert_int_eq(r->body_case, ROK__V1__RESPONSE__BODY_PING);
	ck_assert_uint_eq(r->ping->payload.len, 2);
	rok__v1__response__free_unpacked(r, NULL);
}

/* ---- tests ------------------------------------------------------------ */

START_TEST(spawn_join_kinds)
{
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t ids[3];
	ids[0] = rc_spawn(fd, "noop", NULL);
	ids[1] = rc_spawn(fd, "echo", "hello there");
	ids[2] = rc_spawn(fd, "sleep", "20ms");
	ck_assert(ids[0] < ids[1] && ids[1] < ids[2]);
	Response *r = rc_join(fd, ids, 3, 0);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_null(r->error);
	ck_assert_uint_eq(r->join->n_tasks, 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(r->join->tasks[i]->id, ids[i]);
		ck_assert_int_eq(r->join->tasks[i]->state,
		                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
	}
	ck_assert_uint_eq(r->join->tasks[1]->value.len, 11);
	ck_assert_int_eq(memcmp(r->join->tasks[1]->value.data, "hello there",
	                        11), 0);
	rok__v1__response__free_unpacked(r, NULL);

	/* spawn --wait gives the finished task */
	rc_spawn_req(fd, 11, "echo", "x", true, 0);
	r = rc_recv(fd);
	ck_assert_ptr_null(r->error);
	ck_assert_int_eq(r->spawn->task->state,
	                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
	rok__v1__response__free_unpacked(r, NULL);
	close(fd);
	rokd_stop();
}
END_TEST

START_TEST(timeouts_and_cancel)
{
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t id = rc_spawn(fd, "sleep", "1h");

	/* join with a timeout: TIMED_OUT, the task keeps running */
	Response *r = rc_join(fd, &id, 1, 50);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__TIMED_OUT);
	rok__v1__response__free_unpacked(r, NULL);

	/* cancel a sleeping task: it ends cancelled */
	uint64_t both[2] = { id, 999999 };
	rc_cancel_req(fd, 5, both, 2);
	r = rc_recv(fd);
	ck_assert_uint_eq(r->cancel->n_results, 2);
	ck_assert_int_eq(r->cancel->results[0]->code, ROK__V1__ERROR_CODE__OK);
	ck_assert_int_eq(r->cancel->results[1]->code,
	                 ROK__V1__ERROR_CODE__NOT_FOUND);
	rok__v1__response__free_unpacked(r, NULL);
	r = rc_join(fd, &id, 1, 0);
	ck_assert_int_eq(r->join->tasks[0]->state,
	                 ROK__V1__TASK_STATE__TASK_CANCELLED);
	rok__v1__response__free_unpacked(r, NULL);

	/* a task's own timeout: timed_out */
	rc_spawn_req(fd, 12, "sleep", "1h", true, 30);
	r = rc_recv(fd);
	ck_assert_ptr_null(r->error);
	ck_assert_int_eq(r->spawn->task->state,
	                 ROK__V1__TASK_STATE__TASK_TIMED_OUT);
	rok__v1__response__free_unpacked(r, NULL);
	close(fd);
	rokd_stop();
}
END_TEST

static Response *rc_race(int fd, uint64_t *ids, size_t n, bool cancel_rest)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__RaceRequest rr = ROK__V1__RACE_REQUEST__INIT;

	rr.ids = ids;
	rr.n_ids = n;
	rr.cancel_rest = cancel_rest;
	req.id = 21;
	req.body_case = ROK__V1__REQUEST__BODY_RACE;
	req.race = &rr;
	rc_send(fd, &req);
	return rc_recv(fd);
}

static int rc_state(int fd, uint64_t id)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__StatusRequest s = ROK__V1__STATUS_REQUEST__INIT;

	s.ids = &id;
	s.n_ids = 1;
	req.id = 31;
	req.body_case = ROK__V1__REQUEST__BODY_STATUS;
	req.status = &s;
	rc_send(fd, &req);
	Response *r = rc_recv(fd);
	int st = r->status->tasks[0]->error != NULL
	                 ? -(int)r->status->tasks[0]->error->code
	                 : (int)r->status->tasks[0]->state;
	rok__v1__response__free_unpacked(r, NULL);
	return st;
}

/* Sends a select of specs[0..n) (borrowed) as request req_id, with its
 * timeout (0: none); the reply comes later (rc_recv). */
static void rc_select(int fd, uint64_t req_id, Rok__V1__TaskSpec **specs,
                      size_t n, uint64_t timeout_ms)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__SelectRequest sel = ROK__V1__SELECT_REQUEST__INIT;

	sel.specs = specs;
	sel.n_specs = n;
	sel.timeout_ms = timeout_ms;
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_SELECT;
	req.select = &sel;
	rc_send(fd, &req);
}

/* select {sleep 1h, echo won}: spawned server-side; the echo wins and the
 * sleep is cancelled. */
static void rc_select_echo_wins(int fd)
{
	Rok__V1__TaskSpec a = ROK__V1__TASK_SPEC__INIT, b = a;
	Rok__V1__TaskSpec *specs[2] = { &a, &b };
	ProtobufCBinaryData aa = bin("1h"), ba = bin("won");
	a.kind = bin("sleep");
	a.args = &aa;
	a.n_args = 1;
	b.kind = bin("echo");
	b.args = &ba;
	b.n_args = 1;
	rc_select(fd, 41, specs, 2, 0);
	Response *r = rc_recv(fd);
	rc_assert_ok(r, "select failed");
	ck_assert_uint_eq(r->select->index, 1);
	ck_assert_uint_eq(r->select->n_ids, 2);
	ck_assert_int_eq(memcmp(r->select->winner->value.data, "won", 3), 0);
	uint64_t loser = r->select->ids[0];
	rok__v1__response__free_unpacked(r, NULL);
	r = rc_join(fd, &loser, 1, 0);
	ck_assert_int_eq(r->join->tasks[0]->state,
	                 ROK__V1__TASK_STATE__TASK_CANCELLED);
	rok__v1__response__free_unpacked(r, NULL);
}

START_TEST(race_and_select)
{
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t ids[2] = { rc_spawn(fd, "sleep", "1h"),
	                    rc_spawn(fd, "sleep", "10ms") };

	Response *r = rc_race(fd, ids, 2, false);
	ck_assert_ptr_null(r->error);
	ck_assert_uint_eq(r->race->index, 1);
	rok__v1__response__free_unpacked(r, NULL);
	ck_assert_int_eq(rc_state(fd, ids[0]), ROK__V1__TASK_STATE__TASK_RUNNING);

	uint64_t more[2] = { rc_spawn(fd, "sleep", "1h"),
	                     rc_spawn(fd, "sleep", "5ms") };
	r = rc_race(fd, more, 2, true);
	ck_assert_uint_eq(r->race->index, 1);
	rok__v1__response__free_unpacked(r, NULL);
	r = rc_join(fd, more, 1, 0);
	ck_assert_int_eq(r->join->tasks[0]->state,
	                 ROK__V1__TASK_STATE__TASK_CANCELLED);
	rok__v1__response__free_unpacked(r, NULL);

	rc_select_echo_wins(fd);
	close(fd);
	rokd_stop();
}
END_TEST

/*
 * A wait whose tasks are durable and started cannot be refused any more:
 * with one request in flight allowed, a select (which holds the slot while
 * its spawns are journaled) still gets its answer, and a spawn --wait with a
 * time limit is refused up front, before a task exists, when the slot is
 * taken.
 */
START_TEST(waits_begun_before_commit)
{
	rokd_start("max_in_flight = 1");
	int fd = rc_hello();

	rc_select_echo_wins(fd);
	uint64_t id = rc_spawn(fd, "sleep", "1h");
	rc_join_req(fd, 9, &id);                 /* takes the slot */
	/* spawn --wait-timeout 10s: its wait would come from a waiter */
	Request sreq = ROK__V1__REQUEST__INIT;
	Rok__V1__SpawnRequest sp = ROK__V1__SPAWN_REQUEST__INIT;
	Rok__V1__TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	ProtobufCBinaryData arg = bin("late");
	spec.kind = bin("echo");
	spec.args = &arg;
	spec.n_args = 1;
	sp.spec = &spec;
	sp.wait = true;
	sp.wait_timeout_ms = 10000;
	sreq.id = 8;
	sreq.body_case = ROK__V1__REQUEST__BODY_SPAWN;
	sreq.spawn = &sp;
	rc_send(fd, &sreq);
	Response *r = rc_recv(fd);
	ck_assert_uint_eq(r->id, 8);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code,
	                 ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED);
	rok__v1__response__free_unpacked(r, NULL);
	/* The join's task ends only now (the slot held till the refusal),
	 * cancelled from another connection: this one's slot is taken. */
	int fd2 = rc_hello();
	rc_cancel_ok(fd2, id);
	close(fd2);
	r = rc_recv(fd);                         /* the join */
	ck_assert_uint_eq(r->id, 9);
	ck_assert_ptr_null(r->error);
	rok__v1__response__free_unpacked(r, NULL);
	/* The refused spawn took no id: nothing of it exists. */
	ck_assert_uint_eq(rc_spawn(fd, "noop", NULL), id + 1);
	close(fd);
	rokd_stop();
}
END_TEST

START_TEST(typed_errors)
{
	rokd_start(NULL);
	int fd = rc_connect();
	uint64_t id = 1;

	/* before hello */
	Response *r = rc_join(fd, &id, 1, 0);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	rok__v1__response__free_unpacked(r, NULL);
	close(fd);

	fd = rc_hello();
	/* unknown kind, bad arguments */
	rc_spawn_req(fd, 3, "teleport", NULL, false, 0);
	r = rc_recv(fd);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	rok__v1__response__free_unpacked(r, NULL);
	rc_spawn_req(fd, 3, "sleep", "forever", false, 0);
	r = rc_recv(fd);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	rok__v1__response__free_unpacked(r, NULL);
	/* out-of-range enum in a list filter */
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__ListRequest l = ROK__V1__LIST_REQUEST__INIT;
	l.state = (Rok__V1__TaskState)77;
	req.id = 4;
	req.body_case = ROK__V1__REQUEST__BODY_LIST;
	req.list = &l;
	rc_send(fd, &req);
	r = rc_recv(fd);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	rok__v1__response__free_unpacked(r, NULL);
	/* an empty request */
	Request empty = ROK__V1__REQUEST__INIT;
	empty.id = 5;
	rc_send(fd, &empty);
	r = rc_recv(fd);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	ck_assert_uint_eq(r->id, 5);
	rok__v1__response__free_unpacked(r, NULL);
	/* unknown ids are per task in a join, and NOT_FOUND for a race */
	uint64_t missing = 123456;
	r = rc_join(fd, &missing, 1, 0);
	ck_assert_int_eq(r->join->tasks[0]->error->code,
	                 ROK__V1__ERROR_CODE__NOT_FOUND);
	rok__v1__response__free_unpacked(r, NULL);
	r = rc_race(fd, &missing, 1, false);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__NOT_FOUND);
	rok__v1__response__free_unpacked(r, NULL);
	rc_ping_ok(fd);
	close(fd);
	rokd_stop();
}
END_TEST

/* ---- durations -------------------------------------------------------- */

#define RC_DURATION_MAX_MS (87600ull * 3600 * 1000)   /* rokd.h: 87600h */

/* Expects INVALID_ARGUMENT whose message mentions `what`. */
static void rc_expect_invalid(int fd, const char *what)
{
	Response *r = rc_recv(fd);

	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	ck_assert_msg(memmem(r->error->message.data, r->error->message.len,
	                     what, strlen(what)) != NULL,
	              "\"%.*s\" does not mention %s",
	              (int)r->error->message.len,
	              (char *)r->error->message.data, what);
	rok__v1__response__free_unpacked(r, NULL);
}

static void rc_spawn_spec(int fd, Rok__V1__TaskSpec *spec, bool wait,
                          uint64_t wait_timeout_ms)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__SpawnRequest sp = ROK__V1__SPAWN_REQUEST__INIT;

	sp.spec = spec;
	sp.wait = wait;
	sp.wait_timeout_ms = wait_timeout_ms;
	req.id = 41;
	req.body_case = ROK__V1__REQUEST__BODY_SPAWN;
	req.spawn = &sp;
	rc_send(fd, &req);
}

static void rc_wait_running(int fd, uint64_t id)
{
	int st;

	while ((st = rc_state(fd, id)) != ROK__V1__TASK_STATE__TASK_RUNNING) {
		ck_assert_int_eq(st, ROK__V1__TASK_STATE__TASK_QUEUED);
		test_sleep_ms(1);
	}
}

/*
 * Far sleeps and timeouts run (rokd once died on `sleep 1440h`: the timer
 * wheel wrote past its last level), and durations past the documented
 * maximum, 87600h, are refused wherever a client can give one, instead of
 * wrapping into the past (`sleep 9223372036s` and a huge timeout_ms used to
 * end at once).
 */
START_TEST(durations_bounded)
{
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t ids[3];

	ids[0] = rc_spawn(fd, "sleep", "1440h");
	ids[1] = rc_spawn(fd, "sleep", "87600h");
	rc_spawn_req(fd, 7, "sleep", "1h", false, RC_DURATION_MAX_MS);
	Response *r = rc_recv(fd);
	ck_assert_ptr_null(r->error);
	ids[2] = r->spawn->id;
	rok__v1__response__free_unpacked(r, NULL);
	for (int i = 0; i < 3; i++)
		rc_wait_running(fd, ids[i]);
	r = rc_join(fd, ids, 3, 50);   /* all still running */
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__TIMED_OUT);
	rok__v1__response__free_unpacked(r, NULL);
	rc_ping_ok(fd);

	/* the sleep kind's argument */
	rc_spawn_req(fd, 3, "sleep", "9223372036s", true, 0);
	rc_expect_invalid(fd, "sleep: duration longer than the maximum");
	rc_spawn_req(fd, 3, "sleep", "87600h1ms", true, 0);
	rc_expect_invalid(fd, "sleep: duration longer than the maximum");
	rc_spawn_req(fd, 3, "sleep", "99999999999999999999h", true, 0);
	rc_expect_invalid(fd, "sleep: duration longer than the maximum");
	/* the task's own timeout and kill grace */
	rc_spawn_req(fd, 3, "sleep", "1s", true, UINT64_MAX);
	rc_expect_invalid(fd, "timeout_ms");
	rc_spawn_req(fd, 3, "sleep", "1s", true, RC_DURATION_MAX_MS + 1);
	rc_expect_invalid(fd, "timeout_ms");
	Rok__V1__TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	ProtobufCBinaryData arg = bin("true");
	spec.kind = bin("exec");
	spec.args = &arg;
	spec.n_args = 1;
	spec.kill_grace_ms = (uint64_t)INT64_MAX;
	rc_spawn_spec(fd, &spec, false, 0);
	rc_expect_invalid(fd, "kill_grace_ms");
	/* waits: spawn --wait, join, select */
	spec.kill_grace_ms = 0;
	rc_spawn_spec(fd, &spec, true, UINT64_MAX);
	rc_expect_invalid(fd, "wait_timeout_ms");
	r = rc_join(fd, ids, 1, UINT64_MAX);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	rok__v1__response__free_unpacked(r, NULL);
	Rok__V1__TaskSpec *specs[1] = { &spec };
	rc_select(fd, 45, specs, 1, RC_DURATION_MAX_MS + 1);
	rc_expect_invalid(fd, "timeout_ms");

	/* the far ones cancel like any other */
	for (int i = 0; i < 3; i++)
		rc_cancel_ok(fd, ids[i]);
	r = rc_join(fd, ids, 3, 0);
	ck_assert_ptr_null(r->error);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(r->join->tasks[i]->state,
		                 ROK__V1__TASK_STATE__TASK_CANCELLED);
	rok__v1__response__free_unpacked(r, NULL);
	rc_ping_ok(fd);
	close(fd);
	rokd_stop();
}
END_TEST

/* Malformed framing closes that connection only; others carry on. */
START_TEST(bad_frames)
{
	rokd_start(NULL);
	int good = rc_hello();
	static const uint8_t huge[4] = { 0xff, 0xff, 0xff, 0xff };
	static const uint8_t garbage[] = { 0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef,
	                                   0xff, 0xff, 0xff, 0xff };

	int fd = rc_connect();
	rc_write(fd, huge, sizeof(huge));
	ck_assert(rc_closed(fd));
	close(fd);

	fd = rc_connect();
	rc_write(fd, garbage, sizeof(garbage));
	ck_assert(rc_closed(fd));
	close(fd);

	/* random bytes, many times */
	srand(42);
	for (int k = 0; k < 50; k++) {
		uint8_t buf[64];
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = (uint8_t)rand();
		buf[0] = 0;   /* a plausible length */
		buf[1] = 0;
		buf[2] = 0;
		buf[3] = 60;
		fd = rc_connect();
		rc_write(fd, buf, sizeof(buf));
		shutdown(fd, SHUT_WR);
		/* either a typed error (it decoded) or a close */
		Response *r;
		while ((r = rc_recv(fd)) != NULL)
			rok__v1__response__free_unpacked(r, NULL);
		close(fd);
	}
	/* a truncated frame, then the client goes away */
	fd = rc_connect();
	rc_write(fd, garbage, 6);
	close(fd);

	/* A select of 500,000 empty specs (2 bytes each, within max_frame)
	 * would decode into ~124 MB: RESOURCE_EXHAUSTED, not decoded (it
	 * was, then refused for max_ids), and the connection goes on. */
	{
		enum { NSPECS = 500000 };
		size_t body = 2 * (size_t)NSPECS;
		size_t len = 2 + 1 + 3 + body;
		uint8_t *f = malloc(WIRE_HEADER + len);
		ck_assert_ptr_nonnull(f);
		uint8_t *q = f + WIRE_HEADER;
		wire_put_header(f, (uint32_t)len);
		*q++ = 0x08;                    /* id = 42 */
		*q++ = 42;
		*q++ = (6 << 3) | 2;            /* select, length-delimited */
		*q++ = (uint8_t)(0x80 | (body & 0x7f));
		*q++ = (uint8_t)(0x80 | ((body >> 7) & 0x7f));
		*q++ = (uint8_t)(body >> 14);
		for (size_t i = 0; i < NSPECS; i++) {
			*q++ = (1 << 3) | 2;    /* specs: empty */
			*q++ = 0;
		}
		rc_write(good, f, WIRE_HEADER + len);
		free(f);
		Response *r = rc_recv(good);
		ck_assert_ptr_nonnull(r);
		ck_assert_uint_eq(r->id, 42);
		ck_assert_ptr_nonnull(r->error);
		ck_assert_int_eq(r->error->code,
		                 ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED);
		rok__v1__response__free_unpacked(r, NULL);
	}

	rc_ping_ok(good);
	close(good);
	rokd_stop();
}
END_TEST

START_TEST(many_ids_one_join)
{
	rokd_start(NULL);
	int fd = rc_hello();
	size_t n = 10000;
	uint64_t *ids = malloc(n * sizeof(*ids));

	ck_assert_ptr_nonnull(ids);
	for (size_t i = 0; i < n; i++)
		rc_spawn_req(fd, 100 + i, "noop", NULL, false, 0);
	for (size_t i = 0; i < n; i++) {
		Response *r = rc_recv(fd);
		ck_assert_ptr_null(r->error);
		ids[r->id - 100] = r->spawn->id;
		rok__v1__response__free_unpacked(r, NULL);
	}
	Response *r = rc_join(fd, ids, n, 0);
	ck_assert_ptr_null(r->error);
	ck_assert_uint_eq(r->join->n_tasks, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(r->join->tasks[i]->state,
		                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
	rok__v1__response__free_unpacked(r, NULL);
	free(ids);
	close(fd);
	rokd_stop();
}
END_TEST

/* A field of /proc/PID/status in kB ("VmRSS", "VmHWM"). */
static long proc_status_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	long kb = -1;
	size_t fl = strlen(field);

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, field, fl) == 0 && line[fl] == ':')
			kb = strtol(line + fl + 1, NULL, 10);
	fclose(f);
	ck_assert_int_ge(kb, 0);
	return kb;
}

/* Sends a status of n ids as request req_id: the reply. */
static Response *rc_status(int fd, uint64_t req_id, uint64_t *ids, size_t n)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__StatusRequest s = ROK__V1__STATUS_REQUEST__INIT;

	s.ids = ids;
	s.n_ids = n;
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_STATUS;
	req.status = &s;
	rc_send(fd, &req);
	Response *r = rc_recv(fd);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->id, req_id);
	return r;
}

/*
 * One frame naming a large task thousands of times must not make rokd
 * copy it thousands of times: status and join answer each task once, lists
 * past max_ids are refused, replies are built within the frame limit, and
 * a list pages through tasks too large for one frame.  The bound on the
 * peak RSS (VmHWM) is generous: without the fixes it was gigabytes.
 */
START_TEST(amplification)
{
	enum { BIG = 100000, NAMES = 10000, NBIG = 15 };
	char *arg = malloc(BIG + 1);
	uint64_t *ids = malloc((NAMES + 1) * sizeof(*ids));
	uint64_t big[NBIG];

	ck_assert_ptr_nonnull(arg);
	ck_assert_ptr_nonnull(ids);
	memset(arg, 'x', BIG);
	arg[BIG] = '\0';
	rokd_start(NULL);
	int fd = rc_hello(), other = rc_hello();
	for (int i = 0; i < NBIG; i++)
		big[i] = rc_spawn(fd, "echo", arg);
	Response *r = rc_join(fd, big, 1, 0);
	ck_assert_ptr_null(r->error);
	rok__v1__response__free_unpacked(r, NULL);
	long before = proc_status_kb(rokd_pid, "VmRSS");

	/* One task named NAMES times: answered once. */
	for (size_t i = 0; i < NAMES; i++)
		ids[i] = big[0];
	r = rc_status(fd, 40, ids, NAMES);
	ck_assert_ptr_null(r->error);
	ck_assert_uint_eq(r->status->n_tasks, 1);
	ck_assert_uint_eq(r->status->tasks[0]->id, big[0]);
	rok__v1__response__free_unpacked(r, NULL);
	r = rc_join(fd, ids, NAMES, 0);
	ck_assert_ptr_null(r->error);
	ck_assert_uint_eq(r->join->n_tasks, 1);
	rok__v1__response__free_unpacked(r, NULL);
	rc_ping_ok(other);

	/* Past max_ids: refused. */
	ids[NAMES] = big[0];
	r = rc_status(fd, 41, ids, NAMES + 1);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code,
	                 ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	rok__v1__response__free_unpacked(r, NULL);

	/* Distinct large tasks, more than a frame holds: a typed error. */
	for (size_t i = 0; i < NAMES; i++)
		ids[i] = big[i % NBIG] + (i / NBIG) * 1000000;
	r = rc_status(fd, 42, ids, NAMES);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code,
	                 ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED);
	rok__v1__response__free_unpacked(r, NULL);
	long peak = proc_status_kb(rokd_pid, "VmHWM");
	ck_assert_msg(peak - before < 256 * 1024,
	              "rokd's RSS went from %ld kB to a peak of %ld kB",
	              before, peak);

	/* A list pages through them, each page within one frame. */
	uint64_t after = 0;
	size_t seen = 0;
	for (int pages = 0;; pages++) {
		Request req = ROK__V1__REQUEST__INIT;
		Rok__V1__ListRequest l = ROK__V1__LIST_REQUEST__INIT;
		ck_assert_int_lt(pages, NBIG + 1);
		l.after_id = after;
		req.id = 43;
		req.body_case = ROK__V1__REQUEST__BODY_LIST;
		req.list = &l;
		rc_send(fd, &req);
		r = rc_recv(fd);
		rc_assert_ok(r, "list");
		ck_assert_uint_gt(r->list->n_tasks, 0);
		seen += r->list->n_tasks;
		after = r->list->tasks[r->list->n_tasks - 1]->id;
		bool more = r->list->more;
		rok__v1__response__free_unpacked(r, NULL);
		if (!more)
			break;
	}
	ck_assert_uint_eq(seen, NBIG);
	rc_ping_ok(other);
	free(ids);
	free(arg);
	close(fd);
	close(other);
	rokd_stop();
}
END_TEST

/*
 * Status requests read evicted tasks from the journal on the blocking
 * pool, which is FIFO: one uid pipelining many of them must not make
 * another uid's status wait behind all of them (at most QUOTA_JOBS_RUNNING
 * of a uid's run at once, the rest queue per uid).  B's reply must arrive
 * while A still has most of its replies outstanding: A pings once B is
 * answered, and the ping's reply (sent at once by the reactor) must come
 * before most of A's status replies.
 */
START_TEST(offload_fairness)
{
	enum { TASKS = 1000, REQS = 100 };
	uint64_t *ids = malloc(TASKS * sizeof(*ids));
	int go[2], done[2];
	char byte = 0;

	if (geteuid() != 0)
		return;    /* a second uid needs root */
	ck_assert_ptr_nonnull(ids);
	/* The pool grows to 512 threads by default: a small pool shows at
	 * this scale what a flood of thousands of requests does to it. */
	ck_assert_int_eq(setenv("ROK_BLOCKING_MAX", "4", 1), 0);
	rokd_start("socket_group = nogroup\nmax_finished = 1");
	ck_assert_int_eq(unsetenv("ROK_BLOCKING_MAX"), 0);
	int fd = rc_hello();
	for (int i = 0; i < TASKS; i++)
		rc_spawn_req(fd, 1000 + (uint64_t)i, "echo", "x", false, 0);
	for (int i = 0; i < TASKS; i++) {
		Response *r = rc_recv(fd);
		ck_assert_ptr_nonnull(r);
		ck_assert_ptr_null(r->error);
		ck_assert_uint_ge(r->id, 1000);
		ck_assert_uint_lt(r->id, 1000 + TASKS);
		ids[r->id - 1000] = r->spawn->id;
		rok__v1__response__free_unpacked(r, NULL);
	}
	Response *r = rc_join(fd, ids, TASKS, 0);
	ck_assert_ptr_null(r->error);
	rok__v1__response__free_unpacked(r, NULL);

	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(done), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* B: connected before A's flood, asks once it is queued. */
		if (rc_become_nobody() != 0)
			_exit(10);
		int c = rc_connect();
		if (c < 0)
			_exit(11);
		Request req = ROK__V1__REQUEST__INIT;
		Rok__V1__Hello h = ROK__V1__HELLO__INIT;
		h.protocol_version = 1;
		req.id = 1;
		req.body_case = ROK__V1__REQUEST__BODY_HELLO;
		req.hello = &h;
		rc_send(c, &req);
		Response *hr = rc_recv(c);
		if (hr == NULL || hr->error != NULL)
			_exit(12);
		if (read(go[0], &byte, 1) != 1)
			_exit(13);
		Rok__V1__StatusRequest st = ROK__V1__STATUS_REQUEST__INIT;
		st.ids = ids;
		st.n_ids = 1;
		req.id = 2;
		req.body_case = ROK__V1__REQUEST__BODY_STATUS;
		req.status = &st;
		rc_send(c, &req);
		Response *sr = rc_recv(c);
		if (sr == NULL || sr->id != 2)
			_exit(14);
		if (write(done[1], &byte, 1) != 1)
			_exit(15);
		_exit(0);
	}

	/* A: REQS status requests, each reading TASKS tasks. */
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__StatusRequest st = ROK__V1__STATUS_REQUEST__INIT;
	st.ids = ids;
	st.n_ids = TASKS;
	req.body_case = ROK__V1__REQUEST__BODY_STATUS;
	req.status = &st;
	for (int i = 0; i < REQS; i++) {
		req.id = 2000 + (uint64_t)i;
		rc_send(fd, &req);
	}
	ck_assert_int_eq(write(go[1], &byte, 1), 1);
	ck_assert_int_eq(read(done[0], &byte, 1), 1);
	rc_reap(pid, "uid B");

	/* B is answered: count A's replies that came before its ping's. */
	Request ping = ROK__V1__REQUEST__INIT;
	Rok__V1__PingRequest p = ROK__V1__PING_REQUEST__INIT;
	p.payload = bin("hi");
	ping.id = 99;
	ping.body_case = ROK__V1__REQUEST__BODY_PING;
	ping.ping = &p;
	rc_send(fd, &ping);
	int before = 0, after = 0;
	bool pinged = false;
	while (before + after < REQS || !pinged) {
		r = rc_recv(fd);
		ck_assert_ptr_nonnull(r);
		if (r->id == 99) {
			pinged = true;
		} else {
			ck_assert_ptr_null(r->error);
			ck_assert_uint_eq(r->status->n_tasks, TASKS);
			if (pinged)
				after++;
			else
				before++;
		}
		rok__v1__response__free_unpacked(r, NULL);
	}
	ck_assert_msg(before < REQS / 2,
	              "uid B waited for %d of uid A's %d status requests",
	              before, REQS);

	/* A connection closed while its requests are queued, then a stop
	 * while they still are: no hang, nothing leaked (ASan), no reply
	 * written to a freed connection. */
	for (int i = 0; i < REQS; i++) {
		req.id = 3000 + (uint64_t)i;
		rc_send(fd, &req);
	}
	rc_send(fd, &ping);
	for (pinged = false; !pinged;) {   /* every request was read */
		r = rc_recv(fd);
		ck_assert_ptr_nonnull(r);
		pinged = r->id == 99;
		rok__v1__response__free_unpacked(r, NULL);
	}
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
	close(fd);
	free(ids);
	rokd_stop();
}
END_TEST

/* A ping frame with a 4,000-byte payload (as big a reply), in *frame
 * bytes of malloc'd memory. */
static uint8_t *lazy_ping_frame(size_t *frame)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__PingRequest p = ROK__V1__PING_REQUEST__INIT;
	static uint8_t payload[4000];

	p.payload.data = payload;
	p.payload.len = sizeof(payload);
	req.body_case = ROK__V1__REQUEST__BODY_PING;
	req.ping = &p;
	*frame = WIRE_HEADER + rok__v1__request__get_packed_size(&req);
	uint8_t *buf = malloc(*frame);
	ck_assert_ptr_nonnull(buf);
	wire_put_header(buf, (uint32_t)(*frame - WIRE_HEADER));
	rok__v1__request__pack(&req, buf + WIRE_HEADER);
	return buf;
}

/* A connection that does not read: the smallest receive buffer, and
 * sends that fail rather than block. */
static int lazy_hello(void)
{
	int fd = rc_hello(), nb = 1;

	ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &nb,
	                            sizeof(nb)), 0);
	int fl = fcntl(fd, F_GETFL);
	ck_assert_int_eq(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
	return fd;
}

/* A client that never reads its replies is cut off; others are served. */
START_TEST(client_that_does_not_read)
{
	rokd_start("max_output = 65536");
	int lazy = lazy_hello(), good = rc_hello();
	size_t frame;
	uint8_t *buf = lazy_ping_frame(&frame);

	/* Keep sending until the daemon drops us (send fails) or we sent
	 * far more than the limit. */
	bool dropped = false;
	for (int i = 0; i < 20000 && !dropped; i++) {
		ssize_t n = send(lazy, buf, frame, MSG_NOSIGNAL);
		if (n < 0 && errno == EAGAIN) {
			test_sleep_ms(1);
			continue;
		}
		if (n < 0)
			dropped = true;
	}
	free(buf);
	ck_assert_msg(dropped, "the daemon kept a client that never reads");
	rc_ping_ok(good);
	close(lazy);
	close(good);
	rokd_stop();
}
END_TEST

/*
 * Many connections of one uid that never read, each kept under max_output:
 * past max_output_per_user the daemon drops them (before, 8 x 2 MB of
 * unread replies stayed queued, and 1024 connections could hold 16 GiB),
 * and a connection of the same uid that reads is still served.
 */
START_TEST(lazy_clients_of_one_user)
{
	enum { LAZY = 8, FRAMES = 500 };
	rokd_start("max_output = 4194304\nmax_output_per_user = 1048576");
	int good = rc_hello(), lazy[LAZY];
	bool dropped[LAZY] = { false };
	size_t frame;
	uint8_t *buf = lazy_ping_frame(&frame);

	/* Each sends 2 MB of pings (2 MB of replies: half its max_output). */
	for (int k = 0; k < LAZY; k++) {
		lazy[k] = lazy_hello();
		for (size_t i = 0, off = 0; i < FRAMES && !dropped[k];) {
			ssize_t n = send(lazy[k], buf + off, frame - off,
			                 MSG_NOSIGNAL);
			if (n < 0 && errno == EAGAIN) {
				test_sleep_ms(1);
				continue;
			}
			if (n < 0) {
				dropped[k] = true;
				continue;
			}
			off += (size_t)n;   /* whole frames only */
			if (off == frame) {
				off = 0;
				i++;
			}
		}
	}
	free(buf);
	/* A dropped one shows as hung up (the daemon read everything sent,
	 * so nothing is lost by waiting). */
	int ndropped = 0;
	for (int t = 0; t < 30000 && ndropped == 0; t += 10) {
		for (int k = 0; k < LAZY; k++) {
			struct pollfd pf = { .fd = lazy[k] };
			if (!dropped[k] && poll(&pf, 1, 0) == 1 &&
			    (pf.revents & (POLLHUP | POLLERR)))
				dropped[k] = true;
			ndropped += dropped[k];
		}
		if (ndropped == 0)
			test_sleep_ms(10);
	}
	ck_assert_msg(ndropped > 0, "8 connections of one uid hold 16 MB "
	              "of unread replies, max_output_per_user 1 MiB");
	rc_ping_ok(good);
	for (int k = 0; k < LAZY; k++)
		close(lazy[k]);
	close(good);
	rokd_stop();
}
END_TEST

static int count_fds(pid_t pid)
{
	char path[64];
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(path);
	ck_assert_ptr_nonnull(d);
	for (struct dirent *e; (e = readdir(d)) != NULL;)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

START_TEST(thousand_connections)
{
	enum { N = 1000 };
	static int fds[N];

	rokd_start(NULL);
	int base = rc_hello();
	int before = count_fds(rokd_pid);
	for (int i = 0; i < N; i++)
		fds[i] = rc_hello();
	for (int i = 0; i < N; i += 97)
		rc_ping_ok(fds[i]);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	rc_ping_ok(base);
	/* Every connection's descriptor is given back. */
	for (int i = 0; i < test_timeout(30) * 100 &&
	                count_fds(rokd_pid) > before; i++)
		test_sleep_ms(10);
	ck_assert_int_le(count_fds(rokd_pid), before);
	close(base);
	rokd_stop();
}
END_TEST

/* SIGTERM with requests in flight: they are answered, exit is 0.  The
 * task the daemon stops is interrupted (not cancelled: nobody asked), so
 * the journal lets the next start run it again or report it. */
START_TEST(sigterm_answers_in_flight)
{
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t id = rc_spawn(fd, "sleep", "1h");
	rc_join_req(fd, 77, &id);
	rc_ping_ok(fd);   /* the join is in flight */
	ck_assert_int_eq(kill(rokd_pid, SIGTERM), 0);
	Response *r = rc_recv(fd);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->id, 77);
	ck_assert(r->error != NULL ||
	          r->join->tasks[0]->state ==
	          ROK__V1__TASK_STATE__TASK_INTERRUPTED);
	rok__v1__response__free_unpacked(r, NULL);
	int status;
	ck_assert_int_eq(waitpid(rokd_pid, &status, 0), rokd_pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(fd);
	char cmd[160];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/*
 * As root, rokd serves every user but shows each only their own tasks;
 * a client running as nobody tries root's task.
 */
START_TEST(permissions_root_daemon)
{
	if (geteuid() != 0)
		return;   /* needs root to switch users */
	rokd_start("socket_group = nogroup");
	int fd = rc_hello();
	uint64_t mine = rc_spawn(fd, "sleep", "1h");
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* The child reports through its exit status only. */
		int c = rc_child_hello();
		Response *r;
		if (rc_state(c, mine) !=
		    -(int)ROK__V1__ERROR_CODE__PERMISSION_DENIED)
			_exit(13);
		rc_cancel_req(c, 2, &mine, 1);
		r = rc_recv(c);
		if (r->cancel->results[0]->code !=
		    ROK__V1__ERROR_CODE__PERMISSION_DENIED)
			_exit(14);
		/* Nor its output (the check fails closed). */
		rc_logs_req(c, 4, mine, false);
		r = rc_recv(c);
		if (r == NULL || r->error == NULL || r->error->code !=
		    ROK__V1__ERROR_CODE__PERMISSION_DENIED)
			_exit(16);
		uint64_t own = rc_spawn(c, "noop", NULL);
		Request req = ROK__V1__REQUEST__INIT;
		Rok__V1__ListRequest l = ROK__V1__LIST_REQUEST__INIT;
		req.id = 3;
		req.body_case = ROK__V1__REQUEST__BODY_LIST;
		req.list = &l;
		rc_send(c, &req);
		r = rc_recv(c);
		if (r->list->n_tasks != 1 || r->list->tasks[0]->id != own)
			_exit(15);
		_exit(0);
	}
	rc_reap(pid, "client as nobody");
	/* root sees both; nobody's noop runs on a worker: joined first, not
	 * raced */
	uint64_t theirs = mine + 1;
	Response *jr = rc_join(fd, &theirs, 1, 0);
	ck_assert_ptr_nonnull(jr);
	rok__v1__response__free_unpacked(jr, NULL);
	ck_assert_int_eq(rc_state(fd, mine), ROK__V1__TASK_STATE__TASK_RUNNING);
	ck_assert_int_eq(rc_state(fd, mine + 1),
	                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
	close(fd);
	rokd_stop();
}
END_TEST

/* Run as an ordinary user, rokd refuses connections from other users. */
START_TEST(permissions_user_daemon)
{
	if (geteuid() != 0)
		return;
	rokd_start_as(NULL, true);
	int fd = rc_connect();   /* as root: a different uid */
	ck_assert_int_ge(fd, 0);
	ck_assert(rc_closed(fd));
	close(fd);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (rc_become_nobody() != 0)
			_exit(10);
		int c = rc_hello();   /* the daemon's own user is served */
		rc_ping_ok(c);
		_exit(0);
	}
	int status;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	struct stat st;
	ck_assert_int_eq(stat(sock, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	rokd_stop();
}
END_TEST

/* ---- exec and the logs stream ------------------------------------------ */

/* Spawns `sh -c script` as an exec task: its id. */
static uint64_t rc_spawn_sh(int fd, const char *script)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__SpawnRequest sp = ROK__V1__SPAWN_REQUEST__INIT;
	Rok__V1__TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	ProtobufCBinaryData args[3] = { bin("sh"), bin("-c"), bin(script) };

	spec.kind = bin("exec");
	spec.n_args = 3;
	spec.args = args;
	sp.spec = &spec;
	req.id = 7;
	req.body_case = ROK__V1__REQUEST__BODY_SPAWN;
	req.spawn = &sp;
	rc_send(fd, &req);
	Response *r = rc_recv(fd);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_null(r->error);
	uint64_t id = r->spawn->id;
	rok__v1__response__free_unpacked(r, NULL);
	return id;
}

/* Reads a logs stream to its end: the bytes of each stream in out[1],
 * out[2] (malloc'd, NUL-terminated), and the order of the streams as the
 * chunks came in `order` (one digit per chunk).  Returns the final reply. */
static Response *rc_logs_read(int fd, uint64_t req_id, char *out[3],
                              size_t len[3], char *order, size_t olen)
{
	size_t k = 0;

	for (int i = 0; i < 3; i++) {
		out[i] = calloc(1, 1);
		len[i] = 0;
	}
	for (;;) {
		Response *r = rc_recv(fd);
		ck_assert_ptr_nonnull(r);
		ck_assert_uint_eq(r->id, req_id);
		ck_assert_ptr_null(r->error);
		ck_assert_int_eq(r->body_case, ROK__V1__RESPONSE__BODY_LOGS);
		for (size_t i = 0; i < r->logs->n_chunks; i++) {
			const Rok__V1__LogChunk *c = r->logs->chunks[i];
			ck_assert(c->stream == 1 || c->stream == 2);
			out[c->stream] = realloc(out[c->stream],
			                         len[c->stream] + c->data.len + 1);
			memcpy(out[c->stream] + len[c->stream], c->data.data,
			       c->data.len);
			len[c->stream] += c->data.len;
			out[c->stream][len[c->stream]] = '\0';
			if (k + 1 < olen)
				order[k++] = (char)('0' + c->stream);
		}
		order[k] = '\0';
		if (r->logs->end)
			return r;
		rok__v1__response__free_unpacked(r, NULL);
	}
}

/* A follow gets output pushed while the task runs, in order, on one
 * request id, then one end reply with the task; it counts as one request
 * in flight for its whole life. */
START_TEST(logs_stream)
{
	rokd_start("max_in_flight = 1");
	int fd = rc_hello();
	char *out[3], order[64];
	size_t len[3];

	uint64_t id = rc_spawn_sh(fd, "echo one; sleep 0.2; echo two >&2; "
	                              "sleep 0.2; echo three; exit 4");
	rc_logs_req(fd, 40, id, true);
	/* The stream holds the one slot: a waiting join is refused. */
	Response *r = rc_join(fd, &id, 1, 0);
	ck_assert_ptr_nonnull(r);
	if (r->id == 40) {
		/* the first chunk came first; the refusal follows */
		ck_assert_int_eq(r->body_case, ROK__V1__RESPONSE__BODY_LOGS);
		ck_assert(!r->logs->end);
		rok__v1__response__free_unpacked(r, NULL);
		r = rc_recv(fd);
	}
	ck_assert_uint_eq(r->id, 9);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED);
	rok__v1__response__free_unpacked(r, NULL);
	r = rc_logs_read(fd, 40, out, len, order, sizeof(order));
	ck_assert_ptr_nonnull(r->logs->task);
	ck_assert_int_eq(r->logs->task->state, ROK__V1__TASK_STATE__TASK_FAILED);
	ck_assert(r->logs->task->has_exit_code);
	ck_assert_int_eq(r->logs->task->exit_code, 4);
	rok__v1__response__free_unpacked(r, NULL);
	/* (the first chunk may have been read above) */
	ck_assert(strcmp(out[1], "one\nthree\n") == 0 ||
	          strcmp(out[1], "three\n") == 0);
	ck_assert_str_eq(out[2], "two\n");
	ck_assert(strcmp(order, "121") == 0 || strcmp(order, "21") == 0);
	for (int i = 0; i < 3; i++)
		free(out[i]);
	/* The slot is free again. */
	r = rc_join(fd, &id, 1, 0);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_null(r->error);
	rok__v1__response__free_unpacked(r, NULL);
	/* Without follow, after the end: the same bytes. */
	rc_logs_req(fd, 41, id, false);
	r = rc_logs_read(fd, 41, out, len, order, sizeof(order));
	rok__v1__response__free_unpacked(r, NULL);
	ck_assert_str_eq(out[1], "one\nthree\n");
	ck_assert_str_eq(out[2], "two\n");
	ck_assert_str_eq(order, "121");
	for (int i = 0; i < 3; i++)
		free(out[i]);
	/* Unknown task: a typed error ends the stream at once. */
	rc_logs_req(fd, 42, 999999, false);
	r = rc_recv(fd);
	ck_assert_uint_eq(r->id, 42);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__NOT_FOUND);
	rok__v1__response__free_unpacked(r, NULL);
	close(fd);
	rokd_stop();
}
END_TEST

/* A stream to a client that reads slowly is paced by the client: with
 * max_output far below the output's size (and as low as the stream's own
 * default pause threshold, 256 KiB), the connection is not dropped, and
 * every byte arrives. */
START_TEST(logs_slow_reader)
{
	rokd_start("max_output = 262144");
	int fd = rc_hello();
	char *out[3], order[8];
	size_t len[3];

	uint64_t id = rc_spawn_sh(fd, "head -c 8000000 /dev/zero");
	Response *r = rc_join(fd, &id, 1, 0);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(r->join->tasks[0]->state,
	                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
	rok__v1__response__free_unpacked(r, NULL);
	int small = 4096;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	rc_logs_req(fd, 50, id, false);
	test_sleep_ms(500);   /* not reading: the daemon must wait for us */
	r = rc_logs_read(fd, 50, out, len, order, sizeof(order));
	ck_assert(r->logs->end);
	rok__v1__response__free_unpacked(r, NULL);
	ck_assert_uint_eq(len[1], 8000000);
	ck_assert_uint_eq(len[2], 0);
	for (int i = 0; i < 3; i++)
		free(out[i]);
	rc_ping_ok(fd);
	close(fd);
	rokd_stop();
}
END_TEST

/* The next reply must be RESOURCE_EXHAUSTED for req_id naming `key`. */
static void rc_expect_cap(int fd, uint64_t req_id, const char *key)
{
	Response *r = rc_recv(fd);

	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->id, req_id);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(memmem(r->error->message.data, r->error->message.len,
	                     key, strlen(key)) != NULL,
	              "message without %s: %.*s", key,
	              (int)r->error->message.len,
	              (char *)r->error->message.data);
	rok__v1__response__free_unpacked(r, NULL);
}

/*
 * Per-uid caps: a uid over its cap of connections, requests in flight or
 * logs streams gets RESOURCE_EXHAUSTED (a connection: at its hello, then
 * closed), while another uid is served.
 */
static void rc_watch_req(int fd, uint64_t req_id, uint64_t *ids, size_t n,
                         const char *group);

START_TEST(per_user_caps)
{
	enum { CONNS = 4 };
	int fds[CONNS];

	rokd_start("socket_group = nogroup\nmax_connections_per_user = 4\n"
	           "max_waits_per_user = 4\nmax_followers_per_user = 2");
	for (int i = 0; i < CONNS; i++)
		fds[i] = rc_hello();
	/* The fifth connection is told why at its hello, then closed. */
	int extra = rc_connect();
	ck_assert_int_ge(extra, 0);
	rc_send_hello(extra);
	rc_expect_cap(extra, 1, "max_connections_per_user");
	ck_assert(rc_closed(extra));
	close(extra);

	/* Streams, then waits, counted over the uid's connections. */
	uint64_t sleeper = rc_spawn(fds[0], "sleep", "1h");
	rc_logs_req(fds[0], 50, sleeper, true);
	rc_logs_req(fds[1], 51, sleeper, true);
	rc_logs_req(fds[2], 52, sleeper, true);
	rc_expect_cap(fds[2], 52, "max_followers_per_user");
	rc_watch_req(fds[2], 56, NULL, 0, NULL);   /* watches count too */
	rc_expect_cap(fds[2], 56, "max_followers_per_user");
	rc_join_req(fds[2], 53, &sleeper);
	rc_join_req(fds[3], 54, &sleeper);
	rc_join_req(fds[3], 55, &sleeper);
	rc_expect_cap(fds[3], 55, "max_waits_per_user");

	if (geteuid() == 0) {
		/* Another uid is served meanwhile: connect, wait, stream. */
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			int c = rc_child_hello();
			rc_spawn_req(c, 2, "sleep", "1h", false, 0);
			Response *r = rc_recv(c);
			if (r == NULL || r->error != NULL)
				_exit(13);
			uint64_t own = r->spawn->id;
			rc_logs_req(c, 3, own, true);
			rc_join_req(c, 4, &own);
			rc_cancel_req(c, 5, &own, 1);
			/* The cancel's reply, the stream's end, the join's
			 * reply: in any order, none an error. */
			for (int i = 0; i < 3; i++) {
				r = rc_recv(c);
				if (r == NULL || r->error != NULL)
					_exit(14);
			}
			_exit(0);
		}
		rc_reap(pid, "another uid");
	}

	/* Closing a connection gives its slot back. */
	close(fds[1]);
	int again = -1;
	for (int i = 0; i < 1000 && again < 0; i++) {
		int fd = rc_connect();
		ck_assert_int_ge(fd, 0);
		rc_send_hello(fd);
		Response *r = rc_recv(fd);
		if (r != NULL && r->error == NULL)
			again = fd;
		else
			close(fd);
		if (r != NULL)
			rok__v1__response__free_unpacked(r, NULL);
		if (again < 0)
			test_sleep_ms(10);
	}
	ck_assert_int_ge(again, 0);
	rc_ping_ok(again);
	close(again);
	for (int i = 0; i < CONNS; i++)
		if (i != 1)
			close(fds[i]);
	rokd_stop();
}
END_TEST

/*
 * SIGHUP reloads the limits while the reactor and the workers read them:
 * under ThreadSanitizer a store from the signal-handling thread that no
 * reader is ordered with is a data race (rokd then exits non-zero).  The
 * reload is seen to take effect (max_ids lowered), then exec tasks, which
 * read max_task_output and kill_grace on a worker, still run.
 */
START_TEST(sighup_reload)
{
	uint64_t ids[3];
	char conf[128];

	rokd_start("max_ids = 100");
	int fd = rc_hello();
	for (int i = 0; i < 3; i++)
		ids[i] = rc_spawn_sh(fd, "echo before");
	Response *r = rc_join(fd, ids, 3, 0);
	ck_assert_ptr_null(r->error);
	rok__v1__response__free_unpacked(r, NULL);
	r = rc_status(fd, 50, ids, 3);
	ck_assert_ptr_null(r->error);
	rok__v1__response__free_unpacked(r, NULL);

	snprintf(conf, sizeof(conf), "%s/rokd.conf", dir);
	FILE *f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "max_ids = 2\nmax_task_output = 1000\nkill_grace = 2s\n");
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(kill(rokd_pid, SIGHUP), 0);
	/* Asked until it shows: the reload is asynchronous. */
	for (int tries = 0;; tries++) {
		ck_assert_int_lt(tries, test_timeout(10) * 100);
		r = rc_status(fd, 51, ids, 3);
		bool reloaded = r->error != NULL &&
		        r->error->code == ROK__V1__ERROR_CODE__INVALID_ARGUMENT;
		rok__v1__response__free_unpacked(r, NULL);
		if (reloaded)
			break;
		test_sleep_ms(10);
	}
	for (int i = 0; i < 2; i++)
		ids[i] = rc_spawn_sh(fd, "echo after");
	r = rc_join(fd, ids, 2, 0);
	ck_assert_ptr_null(r->error);
	rok__v1__response__free_unpacked(r, NULL);
	close(fd);
	rokd_stop();
}
END_TEST

/*
 * A race naming one running task thousands of times holds what one name
 * costs, not thousands: many such races waiting at once must not grow
 * rokd by the product.  The winner's index is the first at which the task
 * was named.  (Without de-duplication each of these races held a handle,
 * a slot and a registration per name: hundreds of megabytes here.)
 */
START_TEST(race_duplicates)
{
	enum { NAMES = 10000, RACES = 200 };
	uint64_t *ids = malloc(NAMES * sizeof(*ids));
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__RaceRequest rr = ROK__V1__RACE_REQUEST__INIT;

	ck_assert_ptr_nonnull(ids);
	/* Under ASan, freed memory waits in a quarantine (256 MB by default)
	 * before it is reused: the 200 request frames would count as growth.
	 * (Each test runs in its own process: nothing to restore.) */
	const char *asan = getenv("ASAN_OPTIONS");
	char opts[512];
	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=0",
	         asan != NULL ? asan : "", asan != NULL && *asan ? ":" : "");
	ck_assert_int_eq(setenv("ASAN_OPTIONS", opts, 1), 0);
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t other = rc_spawn(fd, "noop", NULL);
	uint64_t task = rc_spawn_sh(fd, "exec sleep 1000");   /* until cancelled */
	rc_wait_running(fd, task);
	Response *r = rc_join(fd, &other, 1, 0);
	ck_assert_ptr_null(r->error);
	rok__v1__response__free_unpacked(r, NULL);
	long before = proc_status_kb(rokd_pid, "VmRSS");
	for (size_t i = 0; i < NAMES; i++)
		ids[i] = task;
	rr.ids = ids;
	rr.n_ids = NAMES;
	req.body_case = ROK__V1__REQUEST__BODY_RACE;
	req.race = &rr;
	for (int i = 0; i < RACES; i++) {
		req.id = 100 + (uint64_t)i;
		rc_send(fd, &req);
	}
	rc_ping_ok(fd);   /* answered after every race began */
	long after = proc_status_kb(rokd_pid, "VmRSS");
	ck_assert_msg(after - before < 32 * 1024,
	              "%d races of one task named %d times: rokd's RSS went "
	              "from %ld kB to %ld kB", RACES, NAMES, before, after);
	/* A finished task named after the running one wins, at its first
	 * index. */
	ids[7] = other;
	ids[9] = other;
	r = rc_race(fd, ids, NAMES, false);
	ck_assert_ptr_null(r->error);
	ck_assert_uint_eq(r->race->index, 7);
	ck_assert_uint_eq(r->race->winner->id, other);
	rok__v1__response__free_unpacked(r, NULL);
	/* The cancel's reply and the races' come in any order. */
	rc_cancel_req(fd, 99999, &task, 1);
	for (int i = 0; i < RACES + 1; i++) {
		r = rc_recv(fd);
		ck_assert_ptr_nonnull(r);
		ck_assert_ptr_null(r->error);
		if (r->id == 99999)
			ck_assert_ptr_nonnull(r->cancel);
		else
			ck_assert_uint_eq(r->race->index, 0);
		rok__v1__response__free_unpacked(r, NULL);
	}
	close(fd);
	free(ids);
	rokd_stop();
}
END_TEST

/* ---- what runs when: dependency checks, task quotas, retention ------- */

/* A spawn of spec as request req_id; the reply's id, or 0 with *code set
 * to the error (its message into msg). */
static uint64_t rc_spawn_try(int fd, uint64_t req_id, Rok__V1__TaskSpec *spec,
                             int *code, char *msg, size_t len)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__SpawnRequest sp = ROK__V1__SPAWN_REQUEST__INIT;

	sp.spec = spec;
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_SPAWN;
	req.spawn = &sp;
	rc_send(fd, &req);
	Response *r = rc_recv(fd);
	if (r == NULL) {
		*code = -1;
		return 0;
	}
	uint64_t id = 0;
	*code = r->error != NULL ? (int)r->error->code : 0;
	if (msg != NULL)
		snprintf(msg, len, "%.*s", r->error != NULL
		         ? (int)r->error->message.len : 0, r->error != NULL
		         ? (char *)r->error->message.data : "");
	if (r->error == NULL && r->spawn != NULL)
		id = r->spawn->id;
	rok__v1__response__free_unpacked(r, NULL);
	return id;
}

static uint64_t when_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/*
 * Dependencies only on tasks the submitter may see: another user's id is
 * INVALID_ARGUMENT, like an unknown one; the spec's new fields are
 * bounded (max_ids dependencies, retry_failed, backoff, not_before).
 */
START_TEST(when_checks)
{
	rokd_start("socket_group = nogroup\nmax_ids = 4");
	int fd = rc_hello();
	uint64_t mine = rc_spawn(fd, "sleep", "1h");
	char msg[200];
	int code;
	Rok__V1__TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	spec.kind = bin("noop");

	uint64_t five[5] = { mine, mine, mine, mine, mine };
	spec.after = five;
	spec.n_after = 5;
	ck_assert_uint_eq(rc_spawn_try(fd, 60, &spec, &code, msg, sizeof(msg)),
	                  0);
	ck_assert_int_eq(code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	ck_assert_msg(strstr(msg, "max_ids") != NULL, "%s", msg);
	spec.n_after = 0;
	spec.retry_failed = 1001;
	(void)rc_spawn_try(fd, 61, &spec, &code, msg, sizeof(msg));
	ck_assert_int_eq(code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	spec.retry_failed = 1;
	spec.backoff_ms = 87601ull * 3600 * 1000;
	(void)rc_spawn_try(fd, 62, &spec, &code, msg, sizeof(msg));
	ck_assert_int_eq(code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	spec.backoff_ms = 0;
	spec.not_before_us = when_now_us() + 87601ull * 3600 * 1000000;
	(void)rc_spawn_try(fd, 63, &spec, &code, msg, sizeof(msg));
	ck_assert_int_eq(code, ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	ck_assert_msg(strstr(msg, "not_before_us") != NULL, "%s", msg);
	spec.not_before_us = 0;
	spec.retry_failed = 0;
	/* A join of a task that waits for its dependency waits too. */
	spec.after = &mine;
	spec.n_after = 1;
	uint64_t after = rc_spawn_try(fd, 64, &spec, &code, NULL, 0);
	ck_assert_int_eq(code, 0);
	ck_assert_int_eq(rc_state(fd, after), ROK__V1__TASK_STATE__TASK_QUEUED);
	Response *jr = rc_join(fd, &after, 1, 100);
	ck_assert_ptr_nonnull(jr);
	ck_assert_ptr_nonnull(jr->error);
	ck_assert_int_eq(jr->error->code, ROK__V1__ERROR_CODE__TIMED_OUT);
	rok__v1__response__free_unpacked(jr, NULL);
	/* Repeats of a dependency wait for it as one does. */
	uint64_t three[3] = { mine, mine, mine };
	spec.after = three;
	spec.n_after = 3;
	spec.after_any = three;
	spec.n_after_any = 1;
	uint64_t dups = rc_spawn_try(fd, 65, &spec, &code, NULL, 0);
	ck_assert_int_eq(code, 0);
	ck_assert_int_eq(rc_state(fd, dups), ROK__V1__TASK_STATE__TASK_QUEUED);
	spec.n_after_any = 0;
	/* max_ids bounds a select's dependencies in all (each may cost a
	 * journal read), not each spec's: 2 x 3 > 4. */
	{
		Rok__V1__TaskSpec *specs[2] = { &spec, &spec };
		rc_select(fd, 66, specs, 2, 0);
		rc_expect_invalid(fd, "dependencies in one select");
		rc_select(fd, 67, specs, 1, 100);   /* 3 alone: within */
		Response *sr = rc_recv(fd);
		ck_assert_ptr_nonnull(sr);
		ck_assert_msg(sr->error != NULL &&
		              sr->error->code == ROK__V1__ERROR_CODE__TIMED_OUT,
		              "select of one spec after a running task");
		rok__v1__response__free_unpacked(sr, NULL);
	}
	spec.after = &mine;
	spec.n_after = 1;

	if (geteuid() == 0) {
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			int c = rc_child_hello();
			/* root's task: refused as unknown ids are */
			if (rc_spawn_try(c, 2, &spec, &code, msg,
			                 sizeof(msg)) != 0 ||
			    code != ROK__V1__ERROR_CODE__INVALID_ARGUMENT ||
			    strstr(msg, "another user") == NULL)
				_exit(13);
			uint64_t own = rc_spawn(c, "noop", NULL);
			spec.after = &own;
			if (rc_spawn_try(c, 3, &spec, &code, NULL, 0) == 0)
				_exit(14);
			_exit(0);
		}
		rc_reap(pid, "another uid");
	}
	/* Cancelling the dependency cancels the task after it. */
	rc_cancel_ok(fd, mine);
	jr = rc_join(fd, &after, 1, 0);
	ck_assert_ptr_nonnull(jr);
	ck_assert_ptr_null(jr->error);
	ck_assert_int_eq(jr->join->tasks[0]->state,
	                 ROK__V1__TASK_STATE__TASK_CANCELLED);
	rok__v1__response__free_unpacked(jr, NULL);
	jr = rc_join(fd, &dups, 1, 0);
	ck_assert_ptr_nonnull(jr);
	ck_assert_ptr_null(jr->error);
	ck_assert_int_eq(jr->join->tasks[0]->state,
	                 ROK__V1__TASK_STATE__TASK_CANCELLED);
	rok__v1__response__free_unpacked(jr, NULL);
	close(fd);
	rokd_stop();
}
END_TEST

/*
 * max_task_bytes_per_user: a uid's unfinished tasks' arguments count
 * against it (a spawn past it is refused, naming the key), while its
 * finished ones make room, oldest first.  Counts alone let one user's
 * queued tasks hold a frame each.  A delayed task counts twice: the gate
 * keeps a copy of its spec until its final outcome (gate_cost), so with
 * 100 kB arguments one delayed task fits in 350 kB and a second does not
 * (three did while that copy went uncounted), yet a task started at once
 * still fits beside it.
 */
START_TEST(task_bytes_quota)
{
	enum { BIG = 100000 };
	rokd_start("max_task_bytes_per_user = 350000");
	int fd = rc_hello();
	static uint8_t big[BIG];
	memset(big, 'x', sizeof(big));
	ProtobufCBinaryData arg = { .len = sizeof(big), .data = big };
	Rok__V1__TaskSpec later = ROK__V1__TASK_SPEC__INIT;
	later.kind = bin("echo");
	later.args = &arg;
	later.n_args = 1;
	later.not_before_us = when_now_us() + 3600ull * 1000000;
	Rok__V1__TaskSpec now = later;
	now.not_before_us = 0;
	int code;
	char msg[200];
	uint64_t id = rc_spawn_try(fd, 80, &later, &code, msg, sizeof(msg));
	ck_assert_msg(code == 0, "first delayed spawn: %s", msg);
	(void)rc_spawn_try(fd, 81, &later, &code, msg, sizeof(msg));
	ck_assert_msg(code == ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED,
	              "a second delayed spawn of 100 kB arguments fits in "
	              "350 kB: the gate's copy of the first is not counted "
	              "(code %d: %s)", code, msg);
	ck_assert_msg(strstr(msg, "max_task_bytes_per_user = 350000") != NULL,
	              "%s", msg);
	/* Not gated: its arguments alone, 200 kB and 100 kB in all. */
	(void)rc_spawn_try(fd, 82, &now, &code, msg, sizeof(msg));
	ck_assert_msg(code == 0, "a spawn started at once: %s", msg);
	rc_cancel_ok(fd, id);
	Response *jr = rc_join(fd, &id, 1, 0);
	rok__v1__response__free_unpacked(jr, NULL);
	(void)rc_spawn_try(fd, 83, &later, &code, msg, sizeof(msg));
	ck_assert_msg(code == 0, "after the cancel: %s", msg);
	rc_ping_ok(fd);
	close(fd);
	rokd_stop();
}
END_TEST

/*
 * Per-uid task quotas refuse with RESOURCE_EXHAUSTED naming the key, and
 * the daemon goes on serving: max_queued_per_user counts tasks not started
 * (here delayed), max_running_per_user queued and running ones at spawn.
 */
START_TEST(task_quotas)
{
	rokd_start("socket_group = nogroup\nmax_queued_per_user = 3\n"
	           "max_running_per_user = 4");
	int fd = rc_hello();
	Rok__V1__TaskSpec later = ROK__V1__TASK_SPEC__INIT;
	later.kind = bin("noop");
	later.not_before_us = when_now_us() + 3600ull * 1000000;
	Rok__V1__TaskSpec sl = ROK__V1__TASK_SPEC__INIT;
	ProtobufCBinaryData arg = bin("1h");
	sl.kind = bin("sleep");
	sl.args = &arg;
	sl.n_args = 1;
	int code;
	char msg[200];
	uint64_t s1 = rc_spawn(fd, "sleep", "1h");
	uint64_t s2 = rc_spawn(fd, "sleep", "1h");
	rc_wait_running(fd, s1);
	rc_wait_running(fd, s2);
	for (int i = 0; i < 2; i++) {
		(void)rc_spawn_try(fd, 70, &later, &code, NULL, 0);
		ck_assert_int_eq(code, 0);
	}
	/* 2 running + 2 queued */
	(void)rc_spawn_try(fd, 72, &sl, &code, msg, sizeof(msg));
	ck_assert_int_eq(code, ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(msg, "max_running_per_user = 4") != NULL, "%s",
	              msg);
	/* A task that ends gives its place back. */
	rc_cancel_ok(fd, s1);
	Response *jr = rc_join(fd, &s1, 1, 0);
	rok__v1__response__free_unpacked(jr, NULL);
	(void)rc_spawn_try(fd, 73, &later, &code, NULL, 0);
	ck_assert_int_eq(code, 0);
	/* 3 queued: even a task that would start at once is one more
	 * queued until it starts. */
	(void)rc_spawn_try(fd, 71, &later, &code, msg, sizeof(msg));
	ck_assert_int_eq(code, ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(msg, "max_queued_per_user = 3") != NULL, "%s",
	              msg);
	rc_ping_ok(fd);
	if (geteuid() == 0) {
		/* Another uid is not held by this one's count. */
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			int c = rc_child_hello();
			if (rc_spawn_try(c, 2, &sl, &code, NULL, 0) == 0)
				_exit(13);
			_exit(0);
		}
		rc_reap(pid, "another uid");
	}
	close(fd);
	rokd_stop();
}
END_TEST

/*
 * Retention per uid: root's flood of finished tasks prunes root's oldest
 * (from memory and from the journal), never another user's result.
 */
START_TEST(per_user_retention)
{
	if (geteuid() != 0)
		return;   /* needs a second uid */
	rokd_start("socket_group = nogroup\nmax_finished_per_user = 10\n"
	           "keep_finished_per_user = 10");
	int fd = rc_hello();
	int to_child[2], from_child[2];
	ck_assert_int_eq(pipe(to_child), 0);
	ck_assert_int_eq(pipe(from_child), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* B: one echo, then, once A's flood is over, its result. */
		close(to_child[1]);
		close(from_child[0]);
		int c = rc_child_hello();
		rc_spawn_req(c, 2, "echo", "B-result", true, 0);
		Response *r = rc_recv(c);
		if (r == NULL || r->error != NULL)
			_exit(13);
		uint64_t own = r->spawn->id;
		if (write(from_child[1], &own, sizeof(own)) != sizeof(own))
			_exit(14);
		char go;
		if (read(to_child[0], &go, 1) != 1)
			_exit(15);
		r = rc_status(c, 3, &own, 1);
		Rok__V1__TaskInfo *t = r->status->tasks[0];
		if (t->error != NULL || t->state !=
		    ROK__V1__TASK_STATE__TASK_SUCCEEDED ||
		    t->value.len != 8 || memcmp(t->value.data, "B-result", 8))
			_exit(16);
		_exit(0);
	}
	close(to_child[0]);
	close(from_child[1]);
	uint64_t theirs;
	ck_assert_int_eq(read(from_child[0], &theirs, sizeof(theirs)),
	                 sizeof(theirs));
	uint64_t first = 0, last = 0;
	for (int i = 0; i < 60; i++) {
		rc_spawn_req(fd, 80, "noop", NULL, true, 0);
		Response *r = rc_recv(fd);
		ck_assert_ptr_nonnull(r);
		ck_assert_ptr_null(r->error);
		last = r->spawn->id;
		if (first == 0)
			first = last;
		rok__v1__response__free_unpacked(r, NULL);
	}
	/* The retention of rokd.conf, now. */
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__PruneRequest pr = ROK__V1__PRUNE_REQUEST__INIT;
	req.id = 81;
	req.body_case = ROK__V1__REQUEST__BODY_PRUNE;
	req.prune = &pr;
	rc_send(fd, &req);
	Response *r = rc_recv(fd);
	ck_assert_ptr_nonnull(r);
	ck_assert_ptr_null(r->error);
	ck_assert_uint_ge(r->prune->pruned, 50);
	rok__v1__response__free_unpacked(r, NULL);
	ck_assert_int_eq(rc_state(fd, first),
	                 -(int)ROK__V1__ERROR_CODE__NOT_FOUND);
	ck_assert_int_eq(rc_state(fd, last),
	                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
	ck_assert_int_eq(rc_state(fd, theirs),
	                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
	ck_assert_int_eq(write(to_child[1], "g", 1), 1);
	rc_reap(pid, "user B");
	close(to_child[1]);
	close(from_child[0]);
	close(fd);
	rokd_stop();
}
END_TEST

/*
 * A chain of 20000 tasks, each after the one before, its head a sleep that
 * is cancelled: every task ends cancelled, "dependency N failed", in a loop
 * (a recursion that deep would overflow a worker's stack).  The spawns are
 * pipelined on one connection: ids follow one another.
 */
START_TEST(long_chain)
{
	enum { N = 20000 };
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t head = rc_spawn(fd, "sleep", "1h");
	Rok__V1__TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	spec.kind = bin("noop");
	spec.n_after = 1;
	for (uint64_t k = 1; k <= N; k++) {
		uint64_t dep = head + k - 1;
		Request req = ROK__V1__REQUEST__INIT;
		Rok__V1__SpawnRequest sp = ROK__V1__SPAWN_REQUEST__INIT;
		spec.after = &dep;
		sp.spec = &spec;
		req.id = 1000 + k;
		req.body_case = ROK__V1__REQUEST__BODY_SPAWN;
		req.spawn = &sp;
		rc_send(fd, &req);
	}
	for (uint64_t k = 1; k <= N; k++) {
		Response *r = rc_recv(fd);
		ck_assert_ptr_nonnull(r);
		ck_assert_ptr_null(r->error);
		ck_assert_uint_eq(r->spawn->id, head + k);
		rok__v1__response__free_unpacked(r, NULL);
	}
	uint64_t last = head + N;
	ck_assert_int_eq(rc_state(fd, last), ROK__V1__TASK_STATE__TASK_QUEUED);
	rc_cancel_ok(fd, head);
	Response *jr = rc_join(fd, &last, 1, 0);
	ck_assert_ptr_nonnull(jr);
	ck_assert_ptr_null(jr->error);
	Rok__V1__TaskInfo *t = jr->join->tasks[0];
	ck_assert_int_eq(t->state, ROK__V1__TASK_STATE__TASK_CANCELLED);
	char want[64];
	snprintf(want, sizeof(want), "dependency %llu failed",
	         (unsigned long long)(last - 1));
	ck_assert_uint_eq(t->reason.len, strlen(want));
	ck_assert(memcmp(t->reason.data, want, strlen(want)) == 0);
	rok__v1__response__free_unpacked(jr, NULL);
	rc_ping_ok(fd);
	close(fd);
	rokd_stop();
}
END_TEST

/* ---- watch ------------------------------------------------------------ */

/* Sends a watch of n ids (0: all; group NULL: none) as request req_id. */
static void rc_watch_req(int fd, uint64_t req_id, uint64_t *ids, size_t n,
                         const char *group)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__WatchRequest w = ROK__V1__WATCH_REQUEST__INIT;

	w.ids = ids;
	w.n_ids = n;
	if (group != NULL)
		w.group = bin(group);
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_WATCH;
	req.watch = &w;
	rc_send(fd, &req);
}

/* The next response, which must be a watch event of req_id. */
static Response *rc_watch_next(int fd, uint64_t req_id)
{
	Response *r = rc_recv(fd);

	rc_assert_ok(r, "watch failed");
	ck_assert_uint_eq(r->id, req_id);
	ck_assert_int_eq(r->body_case, ROK__V1__RESPONSE__BODY_WATCH);
	return r;
}

/* Reads a watch's snapshot up to its marker: how many entries it had. */
static size_t rc_watch_snapshot(int fd, uint64_t req_id)
{
	size_t n = 0;

	for (;;) {
		Response *r = rc_watch_next(fd, req_id);
		bool done = r->watch->snapshot_done;
		if (!done) {
			ck_assert(r->watch->snapshot);
			n++;
		}
		rok__v1__response__free_unpacked(r, NULL);
		if (done)
			return n;
	}
}

static bool rc_is_end(Rok__V1__TaskState s)
{
	return s >= ROK__V1__TASK_STATE__TASK_SUCCEEDED;
}

/* With ids: the snapshot, each end once, then the end marker; another
 * user's id, an unknown id and a bad state are refused. */
START_TEST(watch_ids)
{
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t ids[3];
	ids[0] = rc_spawn(fd, "noop", NULL);
	ids[1] = rc_spawn(fd, "sleep", "300ms");
	ids[2] = ids[0];   /* named twice: reported once */
	Response *jr = rc_join(fd, ids, 1, 0);
	rok__v1__response__free_unpacked(jr, NULL);
	rc_watch_req(fd, 30, ids, 3, NULL);
	int ends[2] = { 0, 0 };
	bool done = false, seen_snap_done = false;
	while (!done) {
		Response *r = rc_watch_next(fd, 30);
		Rok__V1__WatchEvent *w = r->watch;
		if (w->end) {
			done = true;
		} else if (w->snapshot_done) {
			seen_snap_done = true;
		} else {
			ck_assert(w->id == ids[0] || w->id == ids[1]);
			ck_assert_uint_eq(w->snapshot, !seen_snap_done);
			if (rc_is_end(w->state)) {
				ck_assert_ptr_nonnull(w->task);
				ck_assert_uint_eq(w->task->id, w->id);
				ck_assert_int_eq(w->task->state, w->state);
				ck_assert_uint_gt(w->time_us, 0);
				ends[w->id == ids[1]]++;
			}
		}
		rok__v1__response__free_unpacked(r, NULL);
	}
	ck_assert(seen_snap_done);
	ck_assert_int_eq(ends[0], 1);
	ck_assert_int_eq(ends[1], 1);
	rc_ping_ok(fd);   /* the stream ended: the connection goes on */

	uint64_t unknown = 999999;
	rc_watch_req(fd, 31, &unknown, 1, NULL);
	Response *r = rc_recv(fd);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code, ROK__V1__ERROR_CODE__NOT_FOUND);
	rok__v1__response__free_unpacked(r, NULL);

	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__WatchRequest w = ROK__V1__WATCH_REQUEST__INIT;
	Rok__V1__TaskState bad = 42;
	w.states = &bad;
	w.n_states = 1;
	req.id = 32;
	req.body_case = ROK__V1__REQUEST__BODY_WATCH;
	req.watch = &w;
	rc_send(fd, &req);
	r = rc_recv(fd);
	ck_assert_ptr_nonnull(r->error);
	ck_assert_int_eq(r->error->code,
	                 ROK__V1__ERROR_CODE__INVALID_ARGUMENT);
	rok__v1__response__free_unpacked(r, NULL);

	/* A group other than "default" matches nothing (no groups yet). */
	rc_watch_req(fd, 33, NULL, 0, "nosuchgroup");
	ck_assert_uint_eq(rc_watch_snapshot(fd, 33), 0);
	close(fd);
	rokd_stop();
}
END_TEST

/* 10,000 tasks finishing while a watcher of all reads: every end event
 * arrives exactly once, and nothing lags. */
START_TEST(watch_every_end_once)
{
	rokd_start("watch_lag_max = 1000000\nmax_finished = 1000000");
	long n = test_scale(10000);
	int wfd = rc_hello();
	rc_watch_req(wfd, 40, NULL, 0, NULL);
	ck_assert_uint_eq(rc_watch_snapshot(wfd, 40), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Spawns in pipelined batches; reports by exit status. */
		int fd = rc_connect();
		if (fd < 0)
			_exit(10);
		rc_send_hello(fd);
		Response *r = rc_recv(fd);
		if (r == NULL || r->hello == NULL)
			_exit(11);
		for (long done = 0; done < n;) {
			long b = n - done < 500 ? n - done : 500;
			for (long i = 0; i < b; i++)
				rc_spawn_req(fd, 100, "noop", NULL, false, 0);
			for (long i = 0; i < b; i++) {
				r = rc_recv(fd);
				if (r == NULL || r->error != NULL)
					_exit(12);
				rok__v1__response__free_unpacked(r, NULL);
			}
			done += b;
		}
		_exit(0);
	}
	uint8_t *ends = calloc((size_t)n + 1, 1);
	ck_assert_ptr_nonnull(ends);
	long distinct = 0;
	while (distinct < n) {
		Response *r = rc_watch_next(wfd, 40);
		Rok__V1__WatchEvent *w = r->watch;
		ck_assert_uint_eq(w->lagged, 0);
		ck_assert(!w->snapshot && !w->end);
		ck_assert_uint_ge(w->id, 1);
		ck_assert_uint_le(w->id, (uint64_t)n);
		if (rc_is_end(w->state)) {
			ck_assert_int_eq(w->state,
			                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
			ck_assert_msg(ends[w->id] == 0, "task %llu ended twice",
			              (unsigned long long)w->id);
			ends[w->id] = 1;
			distinct++;
		}
		rok__v1__response__free_unpacked(r, NULL);
	}
	rc_reap(pid, "spawner");
	/* Nothing more for them: a ping's answer comes next. */
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__PingRequest p = ROK__V1__PING_REQUEST__INIT;
	req.id = 41;
	req.body_case = ROK__V1__REQUEST__BODY_PING;
	req.ping = &p;
	rc_send(wfd, &req);
	Response *r = rc_recv(wfd);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->id, 41);
	rok__v1__response__free_unpacked(r, NULL);
	free(ends);
	close(wfd);
	rokd_stop();   /* ends the watch (end marker) and stops cleanly */
}
END_TEST

/* A watcher that stops reading: rokd keeps it (no disconnect), its memory
 * stays bounded, and once it reads it gets "lagged: N", a fresh snapshot,
 * and the stream goes on. */
START_TEST(watch_lagging_reader)
{
	/* Enough events to fill the socket, the pause mark (16 KiB with
	 * this max_output) and 100 more at any test scale: a noop task
	 * makes three, about 150 bytes. */
	/* Under ASan, freed memory waits in a quarantine (256 MB by default)
	 * before it is reused: the frames of the ids' requests would count
	 * as growth, as in race_duplicates.  (Each test runs in its own
	 * process: nothing to restore.) */
	const char *asan = getenv("ASAN_OPTIONS");
	char opts[512];
	snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=0",
	         asan != NULL ? asan : "", asan != NULL && *asan ? ":" : "");
	ck_assert_int_eq(setenv("ASAN_OPTIONS", opts, 1), 0);
	rokd_start("watch_lag_max = 100\nmax_finished = 1000000\n"
	           "max_output = 32768");
	long n = test_scale(20000);
	if (n < 6000)
		n = 6000;
	int wfd = rc_hello(), fd = rc_hello();
	int small = 4096;
	setsockopt(wfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	rc_watch_req(wfd, 50, NULL, 0, NULL);
	uint64_t sleeper = rc_spawn(fd, "sleep", "1h");
	long rss0 = proc_status_kb(rokd_pid, "VmRSS");
	for (long done = 0; done < n;) {
		long b = n - done < 500 ? n - done : 500;
		for (long i = 0; i < b; i++)
			rc_spawn_req(fd, 100, "noop", NULL, false, 0);
		for (long i = 0; i < b; i++) {
			Response *r = rc_recv(fd);
			ck_assert_ptr_nonnull(r);
			ck_assert_ptr_null(r->error);
			rok__v1__response__free_unpacked(r, NULL);
		}
		done += b;
	}
	uint64_t last = n + 1;   /* ids 1..n+1, the sleeper first */
	Response *jr = rc_join(fd, &last, 1, 0);
	rok__v1__response__free_unpacked(jr, NULL);
	long rss1 = proc_status_kb(rokd_pid, "VmRSS");
	/* Unbounded, the events would take about n * 3 frames of output;
	 * bounded, a few hundred KiB at most.  The margin is for the
	 * records themselves and the allocator. */
	ck_assert_msg(rss1 - rss0 < 64 * 1024,
	              "rokd grew by %ld KiB for a watcher that does not read",
	              rss1 - rss0);
	/* Now read: some events, then the lag marker, then a snapshot
	 * holding the sleeper, then live events again. */
	uint64_t lagged = 0;
	while (lagged == 0) {
		Response *r = rc_watch_next(wfd, 50);
		lagged = r->watch->lagged;
		rok__v1__response__free_unpacked(r, NULL);
	}
	ck_assert_uint_gt(lagged, 100);
	bool sleeper_seen = false;
	for (;;) {
		Response *r = rc_watch_next(wfd, 50);
		bool done = r->watch->snapshot_done;
		if (r->watch->lagged > 0) {
			sleeper_seen = false;   /* lagged again: a new one */
		} else if (!done) {
			ck_assert(r->watch->snapshot);
			if (r->watch->id == sleeper)
				sleeper_seen = true;
		}
		rok__v1__response__free_unpacked(r, NULL);
		if (done)
			break;
	}
	ck_assert(sleeper_seen);
	/* The stream goes on: a task spawned now is seen ending.  (The
	 * watcher may have lagged more than once while it did not read: a
	 * lag still on its way may swallow that task; then another.) */
	bool seen = false;
	for (int tries = 0; !seen && tries < 100; tries++) {
		uint64_t id = rc_spawn(fd, "noop", NULL);
		for (;;) {
			Response *r = rc_watch_next(wfd, 50);
			bool again = r->watch->lagged > 0;
			seen = r->watch->id == id && rc_is_end(r->watch->state);
			rok__v1__response__free_unpacked(r, NULL);
			if (seen || again)
				break;
		}
	}
	ck_assert(seen);
	rc_cancel_ok(fd, sleeper);
	close(fd);
	close(wfd);
	rokd_stop();
}
END_TEST

/* A user hears only of their own tasks (root of all). */
/* Streams cut short: a watcher and a logs follower whose connections
 * close while events flow (one never read, one mid-stream), then rokd
 * stopped with a watch of all, a watch of ids and a logs -f still open.
 * rokd exits 0 (under ASan: no use after free, nothing leaked). */
START_TEST(streams_closed_and_stopped)
{
	rokd_start(NULL);
	int fd = rc_hello();
	uint64_t talker = rc_spawn_sh(fd, "while :; do echo x; sleep 0.01; done");
	uint64_t sleeper = rc_spawn(fd, "sleep", "1h");
	int gone_w = rc_hello(), gone_l = rc_hello(), mid = rc_hello();
	rc_watch_req(gone_w, 1, NULL, 0, NULL);     /* never read */
	rc_logs_req(gone_l, 2, talker, true);       /* never read */
	rc_watch_req(mid, 3, NULL, 0, NULL);
	ck_assert_uint_ge(rc_watch_snapshot(mid, 3), 2);
	uint64_t ids[64];
	for (int i = 0; i < 64; i++)
		ids[i] = rc_spawn(fd, "noop", NULL);
	close(gone_w);
	close(gone_l);
	Response *r = rc_watch_next(mid, 3);        /* one event, then cut */
	rok__v1__response__free_unpacked(r, NULL);
	close(mid);
	Response *jr = rc_join(fd, ids, 64, 0);
	rok__v1__response__free_unpacked(jr, NULL);
	rc_ping_ok(fd);   /* the reactor went through the closes */

	/* Left open at the stop. */
	int all = rc_hello(), some = rc_hello(), logs = rc_hello();
	rc_watch_req(all, 4, NULL, 0, NULL);
	rc_watch_req(some, 5, &sleeper, 1, NULL);
	rc_logs_req(logs, 6, talker, true);
	ck_assert_uint_ge(rc_watch_snapshot(all, 4), 2);
	ck_assert_uint_eq(rc_watch_snapshot(some, 5), 1);
	rokd_stop();
	close(all);
	close(some);
	close(logs);
	close(fd);
}
END_TEST

/* A watch and a logs of a task no longer in memory go through the
 * blocking pool (the journal); their connections close meanwhile, over
 * and over: nothing is left behind (no stream holds one of the uid's 4
 * followers; rokd exits 0; under ASan, no leak). */
START_TEST(streams_of_evicted_closed)
{
	rokd_start("max_finished = 1\nmax_followers_per_user = 4");
	int fd = rc_hello();
	uint64_t old = rc_spawn_sh(fd, "echo old");
	Response *jr = rc_join(fd, &old, 1, 0);
	rok__v1__response__free_unpacked(jr, NULL);
	uint64_t ids[2];
	for (int i = 0; i < 2; i++)
		ids[i] = rc_spawn(fd, "noop", NULL);
	jr = rc_join(fd, ids, 2, 0);
	rok__v1__response__free_unpacked(jr, NULL);
	for (int i = 0; i < 20; i++) {
		int c = rc_hello();
		rc_watch_req(c, 1, &old, 1, NULL);
		rc_logs_req(c, 2, old, true);
		close(c);
	}
	/* And read to the end: the journal's outcome, once.  Streams of the
	 * closed connections may still be ending (on a later loop turn):
	 * their followers come back soon, or never if one was kept. */
	int c = rc_hello();
	Response *r = NULL;
	for (int tries = 0; tries < 1000; tries++) {
		rc_watch_req(c, 3, &old, 1, NULL);
		r = rc_recv(c);
		ck_assert_ptr_nonnull(r);
		if (r->error == NULL || r->error->code !=
		    ROK__V1__ERROR_CODE__RESOURCE_EXHAUSTED)
			break;
		rok__v1__response__free_unpacked(r, NULL);
		r = NULL;
		usleep(10000);
	}
	ck_assert_msg(r != NULL, "the uid's followers never came back");
	ck_assert_ptr_null(r->error);
	int ends = 0;
	for (;;) {
		if (r == NULL)
			r = rc_watch_next(c, 3);
		bool end = r->watch->end;
		if (!end && !r->watch->snapshot_done) {
			ck_assert_uint_eq(r->watch->id, old);
			ck_assert_int_eq(r->watch->state,
			                 ROK__V1__TASK_STATE__TASK_SUCCEEDED);
			ck_assert_ptr_nonnull(r->watch->task);
			ends++;
		}
		rok__v1__response__free_unpacked(r, NULL);
		r = NULL;
		if (end)
			break;
	}
	ck_assert_int_eq(ends, 1);
	close(c);
	rc_ping_ok(fd);
	rokd_stop();
	close(fd);
}
END_TEST

START_TEST(watch_own_tasks_only)
{
	if (geteuid() != 0)
		return;   /* needs root to switch users */
	rokd_start("socket_group = nogroup");
	int fd = rc_hello();
	uint64_t mine = rc_spawn(fd, "sleep", "1h");
	int rootw = rc_hello();
	rc_watch_req(rootw, 60, NULL, 0, NULL);
	ck_assert_uint_eq(rc_watch_snapshot(rootw, 60), 1);
	int ready[2], go[2];
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char b = 0;
		int c = rc_child_hello();
		Response *r;
		/* Root's task by id: refused. */
		rc_watch_req(c, 5, &mine, 1, NULL);
		r = rc_recv(c);
		if (r == NULL || r->error == NULL || r->error->code !=
		    ROK__V1__ERROR_CODE__PERMISSION_DENIED)
			_exit(13);
		/* All of mine: root's sleeper is not in the snapshot. */
		rc_watch_req(c, 6, NULL, 0, NULL);
		r = rc_recv(c);
		if (r == NULL || r->watch == NULL || !r->watch->snapshot_done)
			_exit(14);
		/* Root's tasks run and end now (the parent), before ours:
		 * their events would come first. */
		if (write(ready[1], &b, 1) != 1 || read(go[0], &b, 1) != 1)
			_exit(18);
		/* The events of our task may come before the spawn's reply. */
		rc_spawn_req(c, 7, "noop", NULL, false, 0);
		uint64_t own = 0, seen[8];
		size_t nseen = 0;
		bool ended = false;
		while (own == 0 || !ended) {
			r = rc_recv(c);
			if (r == NULL)
				_exit(15);
			if (r->id == 7 && r->spawn != NULL) {
				own = r->spawn->id;
				continue;
			}
			if (r->watch == NULL || nseen == 8)
				_exit(16);
			seen[nseen++] = r->watch->id;
			if (rc_is_end(r->watch->state))
				ended = true;
		}
		for (size_t i = 0; i < nseen; i++)
			if (seen[i] != own)
				_exit(17);
		_exit(0);
	}
	char b = 0;
	ck_assert_int_eq(read(ready[0], &b, 1), 1);
	uint64_t ids[4];
	for (int i = 0; i < 4; i++)
		ids[i] = rc_spawn(fd, "noop", NULL);
	Response *jr = rc_join(fd, ids, 4, 0);
	rok__v1__response__free_unpacked(jr, NULL);
	ck_assert_int_eq(write(go[1], &b, 1), 1);
	rc_reap(pid, "watcher as nobody");
	/* Root's watch saw nobody's task too. */
	bool theirs = false;
	while (!theirs) {
		Response *r = rc_watch_next(rootw, 60);
		if (r->watch->task != NULL && r->watch->task->uid == 65534)
			theirs = true;
		rok__v1__response__free_unpacked(r, NULL);
	}
	for (int i = 0; i < 2; i++) {
		close(ready[i]);
		close(go[i]);
	}
	rc_cancel_ok(fd, mine);
	close(rootw);
	close(fd);
	rokd_stop();
}
END_TEST

/* Sends a list of the tasks after id `after`, at most limit (0: the
 * daemon's page), as request req_id. */
static void rc_list_req(int fd, uint64_t req_id, uint64_t after,
                        uint32_t limit)
{
	Request req = ROK__V1__REQUEST__INIT;
	Rok__V1__ListRequest l = ROK__V1__LIST_REQUEST__INIT;

	l.after_id = after;
	l.limit = limit;
	req.id = req_id;
	req.body_case = ROK__V1__REQUEST__BODY_LIST;
	req.list = &l;
	rc_send(fd, &req);
}

/* Spawns n tasks of spec on fd, 500 at a time, into ids. */
static void rc_spawn_many(int fd, Rok__V1__TaskSpec *spec, uint64_t *ids,
                          long n)
{
	for (long done = 0; done < n;) {
		long b = n - done < 500 ? n - done : 500;
		for (long i = 0; i < b; i++)
			rc_spawn_spec(fd, spec, false, 0);
		for (long i = 0; i < b; i++) {
			Response *r = rc_recv(fd);
			rc_assert_ok(r, "spawn failed");
			ids[done + i] = r->spawn->id;
			rok__v1__response__free_unpacked(r, NULL);
		}
		done += b;
	}
}

/* Cancels the n tasks of ids on fd. */
static void rc_cancel_many(int fd, const uint64_t *ids, long n)
{
	for (long done = 0; done < n; done += 1000) {
		long b = n - done < 1000 ? n - done : 1000;
		rc_cancel_req(fd, 44, (uint64_t *)ids + done, (size_t)b);
		Response *r = rc_recv(fd);
		rc_assert_ok(r, "cancel failed");
		rok__v1__response__free_unpacked(r, NULL);
	}
}

/* Spawns a task that sleeps an hour on fd and waits until it runs: a gate
 * for tasks that start once it ended (after_any), which stay queued. */
static uint64_t rc_gate(int fd)
{
	uint64_t gate = rc_spawn(fd, "sleep", "1h");

	while (rc_state(fd, gate) == ROK__V1__TASK_STATE__TASK_QUEUED)
		usleep(1000);
	return gate;
}

/* How many snapshot entries leave no room in the daemon's socket: three
 * times what its send buffer (the default for a Unix socket's) and the
 * pause mark (max_output / 2) hold, at some 20 bytes an entry. */
static long rc_snapshot_too_big(long max_output)
{
	long wmem = 212992;
	FILE *f = fopen("/proc/sys/net/core/wmem_default", "r");

	if (f != NULL) {
		if (fscanf(f, "%ld", &wmem) != 1)
			wmem = 212992;
		fclose(f);
	}
	long n = 3 * (wmem + max_output / 2) / 20;
	return n > 20000 ? n : 20000;
}

/*
 * A watch of all takes its snapshot a step at a time as its connection
 * has room (cmd-watch.c): root's holds every uid's tasks, a user's only
 * their own, across steps; the user's list pages go through their own.
 * Then a snapshot far larger than what the socket holds, whose tasks
 * start while it is half sent: each task is in it at most once and as it
 * was when the watch began (queued), each change comes once after the
 * marker, and every end comes once.
 */
START_TEST(watch_snapshot_in_steps)
{
	rokd_start("socket_group = nogroup\nwatch_lag_max = 1000000\n"
	           "max_output = 32768");
	int fd = rc_hello();
	Rok__V1__TaskSpec spec = ROK__V1__TASK_SPEC__INIT;
	ProtobufCBinaryData hour = bin("1h");
	spec.kind = bin("sleep");
	spec.args = &hour;
	spec.n_args = 1;
	/* Root's 600 and nobody's 300, several steps each, held queued by a
	 * gate each (running): none changes while the watches walk. */
	uint64_t mine[600], gate = rc_gate(fd);
	spec.after_any = &gate;
	spec.n_after_any = 1;
	rc_spawn_many(fd, &spec, mine, 600);
	if (geteuid() == 0) {
		int ready[2];
		ck_assert_int_eq(pipe(ready), 0);
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			char b = 0;
			int c = rc_child_hello();
			uint64_t theirs = rc_gate(c);
			spec.after_any = &theirs;
			for (int i = 0; i < 300; i++) {
				rc_spawn_spec(c, &spec, false, 0);
				Response *r = rc_recv(c);
				if (r == NULL || r->spawn == NULL)
					_exit(13);
				rok__v1__response__free_unpacked(r, NULL);
			}
			rc_watch_req(c, 6, NULL, 0, NULL);
			size_t k = 0;
			for (;;) {
				Response *r = rc_recv(c);
				if (r == NULL || r->watch == NULL)
					_exit(14);
				bool done = r->watch->snapshot_done;
				if (!done && r->watch->task != NULL)
					_exit(15);
				rok__v1__response__free_unpacked(r, NULL);
				if (done)
					break;
				k++;
			}
			if (k != 301)
				_exit(16);
			/* Its list, by pages of 100: its 301 in id order
			 * (from one of root's ids too). */
			uint64_t after = 0, first = 0;
			k = 0;
			for (bool more = true; more;) {
				rc_list_req(c, 8, after, 100);
				Response *r = rc_recv(c);
				if (r == NULL || r->list == NULL)
					_exit(18);
				for (size_t i = 0; i < r->list->n_tasks; i++) {
					uint64_t id = r->list->tasks[i]->id;
					if (id <= after ||
					    r->list->tasks[i]->uid != 65534)
						_exit(19);
					if (first == 0)
						first = id;
					after = id;
					k++;
				}
				more = r->list->more;
				rok__v1__response__free_unpacked(r, NULL);
			}
			if (k != 301)
				_exit(20);
			rc_list_req(c, 9, mine[599], 0);   /* root's id */
			Response *r = rc_recv(c);
			if (r == NULL || r->list == NULL ||
			    r->list->n_tasks != 301 || r->list->more ||
			    r->list->tasks[0]->id != first)
				_exit(21);
			rok__v1__response__free_unpacked(r, NULL);
			_exit(write(ready[1], &b, 1) == 1 ? 0 : 17);
		}
		char b = 0;
		ck_assert_int_eq(read(ready[0], &b, 1), 1);
		rc_reap(pid, "watcher as nobody");
		close(ready[0]);
		close(ready[1]);
		int rootw = rc_hello();
		rc_watch_req(rootw, 60, NULL, 0, NULL);
		ck_assert_uint_eq(rc_watch_snapshot(rootw, 60), 902);
		close(rootw);
	}
	rc_cancel_many(fd, mine, 600);
	rc_cancel_ok(fd, gate);

	/* The large one: n tasks held back by a gate task. */
	long n = rc_snapshot_too_big(32768);
	uint64_t *ids = malloc((size_t)n * sizeof(*ids));
	uint8_t *snap = calloc((size_t)n, 1), *ran = calloc((size_t)n, 1),
	        *ended = calloc((size_t)n, 1);
	ck_assert(ids != NULL && snap != NULL && ran != NULL && ended != NULL);
	gate = rc_gate(fd);
	rc_spawn_many(fd, &spec, ids, n);
	for (long i = 1; i < n; i++)
		ck_assert_uint_eq(ids[i], ids[0] + (uint64_t)i);
	int wfd = rc_hello();
	int small = 4096;
	setsockopt(wfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	rc_watch_req(wfd, 50, NULL, 0, NULL);
	/* Its first entry: the watch began, its snapshot is under way. */
	Response *first = rc_watch_next(wfd, 50);
	ck_assert(first->watch->snapshot);
	/* The gate goes: the n start while the snapshot waits for room. */
	rc_cancel_ok(fd, gate);
	for (long i = 0; i < n; i++)
		while (rc_state(fd, ids[i]) == ROK__V1__TASK_STATE__TASK_QUEUED)
			usleep(1000);
	long nsnap = 0, nended = 0;
	bool marker = false, cancelled = false;
	for (Response *r = first; r != NULL;
	     r = nended < n ? rc_watch_next(wfd, 50) : NULL) {
		Rok__V1__WatchEvent *we = r->watch;
		uint64_t id = we->id;
		long k = id >= ids[0] && id < ids[0] + (uint64_t)n
		         ? (long)(id - ids[0]) : -1;
		if (we->snapshot_done) {
			ck_assert(!marker);
			marker = true;
		} else if (we->snapshot) {
			ck_assert_msg(!marker, "task %llu: a snapshot entry "
			              "after the marker", (unsigned long long)id);
			if (k >= 0) {
				ck_assert_msg(!snap[k], "task %llu twice in the "
				              "snapshot", (unsigned long long)id);
				ck_assert_msg(we->state ==
				              ROK__V1__TASK_STATE__TASK_QUEUED,
				              "task %llu: in the snapshot as %d, "
				              "a state it took after the watch "
				              "began", (unsigned long long)id,
				              (int)we->state);
				snap[k] = 1;
				nsnap++;
			}
		} else if (k >= 0) {
			ck_assert(marker);
			if (rc_is_end(we->state)) {
				ck_assert_msg(!ended[k], "task %llu ended twice",
				              (unsigned long long)id);
				ck_assert(cancelled);
				ended[k] = 1;
				nended++;
			} else if (we->state ==
			           ROK__V1__TASK_STATE__TASK_RUNNING) {
				ck_assert_msg(!ran[k], "task %llu started twice",
				              (unsigned long long)id);
				ran[k] = 1;
			}
		}
		rok__v1__response__free_unpacked(r, NULL);
		/* The snapshot read whole, with every task running: now
		 * their ends. */
		if (marker && !cancelled) {
			rc_cancel_many(fd, ids, n);
			cancelled = true;
		}
	}
	/* Some were sent before the gate went, not all; and all started
	 * after the watch began, so each was told of as it did. */
	ck_assert_int_gt(nsnap, 0);
	ck_assert_int_lt(nsnap, n);
	for (long k = 0; k < n; k++)
		ck_assert_msg(ran[k], "task %llu: no running event",
		              (unsigned long long)ids[k]);
	free(ids);
	free(snap);
	free(ran);
	free(ended);
	close(wfd);
	close(fd);
	rokd_stop();
}
END_TEST

/* spawn --wait of noop on fd, as request req_id: its reply must be a
 * success (not a refusal). */
static void rc_spawn_wait_ok(int fd, uint64_t req_id)
{
	rc_spawn_req(fd, req_id, "noop", NULL, true, 0);
	Response *r = rc_recv(fd);
	rc_assert_ok(r, "spawn --wait refused");
	ck_assert_uint_eq(r->id, req_id);
	rok__v1__response__free_unpacked(r, NULL);
}

/*
 * The reply to a connection's only wait is written by the worker that ends
 * it (reply_post_direct), while the reactor answers the pings sent behind
 * it: every frame must come whole, each request answered once.  With one
 * wait allowed per connection and per user, a wait asked for as soon as
 * the last reply is read, on the same connection or another, is not
 * refused: the worker's write counted it answered.  Then clients that
 * leave before or right after their reply: the daemon goes on.
 */
START_TEST(direct_replies)
{
	enum { ROUNDS = 200, PINGS = 8 };

	rokd_start("max_in_flight = 1\nmax_waits_per_user = 1");
	int fd = rc_hello();
	for (int round = 0; round < ROUNDS; round++) {
		uint64_t wait_id = 1000;
		if (round % 2 == 0) {
			rc_spawn_req(fd, wait_id, "sleep", "1ms", true, 0);
		} else {
			uint64_t id = rc_spawn(fd, "sleep", "1ms");
			rc_join_req(fd, wait_id, &id);
		}
		for (uint64_t i = 0; i < PINGS; i++)
			rc_ping_req(fd, 2000 + i);
		bool seen[PINGS + 1] = { false };
		for (int i = 0; i < PINGS + 1; i++) {
			Response *r = rc_recv(fd);
			ck_assert_ptr_nonnull(r);
			ck_assert_ptr_null(r->error);
			size_t k;
			if (r->id == wait_id) {
				k = PINGS;
				const Rok__V1__TaskInfo *t = round % 2 == 0
				        ? r->spawn->task : r->join->tasks[0];
				ck_assert_int_eq(t->state,
				        ROK__V1__TASK_STATE__TASK_SUCCEEDED);
			} else {
				ck_assert_uint_ge(r->id, 2000);
				ck_assert_uint_lt(r->id, 2000 + PINGS);
				ck_assert_int_eq(r->body_case,
				                 ROK__V1__RESPONSE__BODY_PING);
				k = r->id - 2000;
			}
			ck_assert_msg(!seen[k], "request %llu answered twice",
			              (unsigned long long)r->id);
			seen[k] = true;
			rok__v1__response__free_unpacked(r, NULL);
		}
	}
	/* A reply larger than the socket takes at once: the reactor writes
	 * the rest, before the reply to a ping sent once the first bytes
	 * came. */
	enum { BIG = 4, VALUE = 100 << 10 };
	char *value = malloc(VALUE + 1);
	ck_assert_ptr_nonnull(value);
	uint64_t ids[BIG];
	for (int i = 0; i < BIG; i++) {
		memset(value, 'a' + i, VALUE);
		value[VALUE] = '\0';
		rc_spawn_req(fd, 30, "echo", value, true, 0);
		Response *r = rc_recv(fd);
		ck_assert_ptr_null(r->error);
		ids[i] = r->spawn->task->id;
		rok__v1__response__free_unpacked(r, NULL);
	}
	free(value);
	rc_join_send(fd, 31, ids, BIG, 0);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	ck_assert_int_eq(poll(&pfd, 1, test_timeout(10) * 1000), 1);
	rc_ping_req(fd, 32);
	Response *r = rc_recv(fd);
	ck_assert_uint_eq(r->id, 31);
	rc_assert_ok(r, "join");
	ck_assert_uint_eq(r->join->n_tasks, BIG);
	for (int i = 0; i < BIG; i++) {
		const ProtobufCBinaryData *v = &r->join->tasks[i]->value;
		ck_assert_uint_eq(v->len, VALUE);
		ck_assert(v->data[0] == 'a' + i && v->data[VALUE - 1] == 'a' + i);
	}
	rok__v1__response__free_unpacked(r, NULL);
	r = rc_recv(fd);
	ck_assert_uint_eq(r->id, 32);
	rok__v1__response__free_unpacked(r, NULL);
	int other = rc_hello();
	for (int i = 0; i < ROUNDS; i++)
		rc_spawn_wait_ok(i % 2 ? other : fd, 40 + (uint64_t)i);
	close(other);
	close(fd);
	rokd_stop();

	rokd_start(NULL);
	for (int i = 0; i < ROUNDS; i++) {
		int gone = rc_hello();
		if (i % 2)
			rc_spawn_wait_ok(gone, 5);   /* then leaves at once */
		else
			rc_spawn_req(gone, 5, "sleep", "1ms", true, 0);
		close(gone);
	}
	fd = rc_hello();
	rc_ping_ok(fd);
	close(fd);
	rokd_stop();
}
END_TEST

static Suite *rokd_suite(void)
{
	const struct test_case cases[] = {
		{ "spawn_join", spawn_join_kinds },
		{ "timeouts_cancel", timeouts_and_cancel },
		{ "race_select", race_and_select },
		{ "waits_begun", waits_begun_before_commit },
		{ "typed_errors", typed_errors },
		{ "durations", durations_bounded },
		{ "bad_frames", bad_frames },
		{ "many_ids", many_ids_one_join },
		{ "amplification", amplification },
		{ "offload_fairness", offload_fairness },
		{ "lazy_client", client_that_does_not_read },
		{ "lazy_clients_of_one_user", lazy_clients_of_one_user },
		{ "thousand_conns", thousand_connections },
		{ "sigterm", sigterm_answers_in_flight },
		{ "perm_root", permissions_root_daemon },
		{ "perm_user", permissions_user_daemon },
		{ "logs_stream", logs_stream },
		{ "logs_slow_reader", logs_slow_reader },
		{ "per_user_caps", per_user_caps },
		{ "sighup_reload", sighup_reload },
		{ "race_duplicates", race_duplicates },
		{ "watch_ids", watch_ids },
		{ "watch_every_end_once", watch_every_end_once },
		{ "watch_lagging_reader", watch_lagging_reader },
		{ "watch_own_tasks_only", watch_own_tasks_only },
		{ "watch_snapshot_in_steps", watch_snapshot_in_steps },
		{ "streams_closed_and_stopped", streams_closed_and_stopped },
		{ "streams_of_evicted_closed", streams_of_evicted_closed },
		{ "when_checks", when_checks },
		{ "task_quotas", task_quotas },
		{ "task_bytes_quota", task_bytes_quota },
		{ "per_user_retention", per_user_retention },
		{ "long_chain", long_chain },
		{ "direct_replies", direct_replies },
	};

	return TEST_SUITE("rokd", cases, 60);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	return test_run(rokd_suite());
}
