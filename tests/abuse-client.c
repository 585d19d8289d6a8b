/*
 * abuse-client — the clients of tests/abuse.test, one per mode, built on
 * librokclient:
 *
 *	abuse-client good SOCKET SECONDS IDS_FILE
 *	abuse-client check SOCKET IDS_FILE
 *	abuse-client amplify SOCKET SECONDS
 *	abuse-client idle SOCKET COUNT SECONDS
 *	abuse-client slowlogs SOCKET SECONDS
 *	abuse-client slowwatch SOCKET SECONDS
 *
 * good: the well-behaved client.  For SECONDS it spawns tasks one at a
 * time (echo, noop, sleep 10ms, and exec true every eighth), on a fresh
 * connection every 50 spawns (so a daemon that locks new clients out shows
 * here), and writes the id of every acknowledged spawn to IDS_FILE.
 * Prints one line (counts, spawn latency p50/p99/max: reported, never
 * judged) and a "FAIL:" line when it could not connect; exits 1 then.
 *
 * check: joins every task of IDS_FILE: each must be found, finished and
 * succeeded; a "FAIL:" line per broken promise, exit 1 if there is one.
 * With ABUSE_PIDS_LIMIT_HIT set (not empty), a task whose start the
 * machine's process limit refused ("clone: Resource temporarily
 * unavailable") is counted apart instead.
 *
 * amplify: spawns an echo task whose value is 100 KB, then for SECONDS
 * asks status (and join) of that one id 20,000 times in one frame, again
 * and again, reconnecting when the daemon closes the connection.
 *
 * idle: opens COUNT connections (hello and all), keeps them open and
 * silent for SECONDS, and reports how many the daemon accepted.
 *
 * slowlogs: spawns a chatty exec task (lines without pause, for SECONDS)
 * and follows its output (`logs -f`), reading one reply every 500 ms.
 *
 * slowwatch: watches every task it may see (run as root: all of them) and
 * reads one event every 500 ms, so rokd must keep its memory bounded
 * (watch_lag_max) and say what it dropped; reports the lag markers.
 *
 * The hostile modes report what happened and exit 0 unless they could not
 * start at all: what they must not break is judged by the test through
 * the good client and rokd's own numbers.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rok/client.h"

/* Generous: a daemon that does not answer for this long is hung. */
#define ABUSE_TIMEOUT_MS 120000

static int64_t abuse_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void abuse_nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* A connected client, or NULL with the reason on stderr. */
static rok_client *abuse_connect(const char *mode, const char *socket,
                                 int *err)
{
	rok_client *c = rok_client_new(mode);

	*err = -ENOMEM;
	if (c == NULL)
		return NULL;
	rok_client_set_timeout(c, ABUSE_TIMEOUT_MS);
	if ((*err = rok_client_connect(c, socket)) != 0) {
		rok_client_free(c);
		return NULL;
	}
	return c;
}

static const char *abuse_strerr(int err)
{
	return err < 0 ? strerror(-err) : rok_error_name(err);
}

static int abuse_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* ---- good ------------------------------------------------------------- */

static int abuse_good(const char *socket, long secs, const char *ids_file)
{
	size_t cap = 1024, acked = 0, refused = 0, failed_connects = 0;
	uint64_t *ids = malloc(cap * sizeof(*ids));
	int64_t *lat = malloc(cap * sizeof(*lat));
	int64_t end = abuse_now_ns() + secs * 1000000000ll;
	rok_client *c = NULL;
	int fails = 0, err;
	char val[64];

	if (ids == NULL || lat == NULL)
		return 2;
	for (size_t n = 0; abuse_now_ns() < end; n++) {
		if (c == NULL || n % 50 == 0) {
			/* The new one first: a full daemon must still let
			 * this user in. */
			rok_client *old = c;
			c = abuse_connect("abuse-good", socket, &err);
			rok_client_free(old);
			if (c == NULL) {
				if (failed_connects++ < 5)
					printf("FAIL: the well-behaved client "
					       "cannot connect: %s\n",
					       abuse_strerr(err));
				fails++;
				abuse_nap_ms(100);
				continue;
			}
		}
		static const char *const sleep_args[] = { "10ms" };
		static const char *const exec_args[] = { "true" };
		const char *echo_args[] = { val };
		rok_spec spec = { 0 };
		snprintf(val, sizeof(val), "good-%zu", n);
		switch (n % 8) {
		case 7:
			spec.kind = "exec", spec.args = exec_args;
			spec.n_args = 1;
			break;
		case 0: case 3:
			spec.kind = "sleep", spec.args = sleep_args;
			spec.n_args = 1;
			break;
		case 1: case 4: case 6:
			spec.kind = "echo", spec.args = echo_args;
			spec.n_args = 1;
			break;
		default:
			spec.kind = "noop";
			break;
		}
		uint64_t id;
		int64_t t0 = abuse_now_ns();
		err = rok_client_spawn(c, &spec, &id);
		int64_t t1 = abuse_now_ns();
		if (err != 0) {
			/* Not acknowledged: nothing was promised.  A refusal
			 * is fine; a dead connection is retried. */
			if (refused++ < 5)
				printf("good: spawn %zu not acknowledged: %s\n",
				       n, abuse_strerr(err));
			if (err < 0) {
				rok_client_free(c);
				c = NULL;
			}
			continue;
		}
		if (acked == cap) {
			cap *= 2;
			ids = realloc(ids, cap * sizeof(*ids));
			lat = realloc(lat, cap * sizeof(*lat));
			if (ids == NULL || lat == NULL)
				return 2;
		}
		ids[acked] = id;
		lat[acked++] = t1 - t0;
	}
	/* The ids go to the file for `check`, once the others are gone. */
	FILE *f = fopen(ids_file, "w");
	for (size_t i = 0; f != NULL && i < acked; i++)
		fprintf(f, "%llu\n", (unsigned long long)ids[i]);
	if (f == NULL || fclose(f) != 0) {
		printf("FAIL: %s: %s\n", ids_file, strerror(errno));
		fails++;
	}
	rok_client_free(c);
	qsort(lat, acked, sizeof(*lat), abuse_cmp);
	printf("good: seconds=%ld acked=%zu not_acked=%zu connect_failures=%zu "
	       "p50_us=%lld p99_us=%lld max_us=%lld\n", secs, acked, refused,
	       failed_connects,
	       acked ? (long long)lat[acked / 2] / 1000 : 0,
	       acked ? (long long)lat[acked * 99 / 100] / 1000 : 0,
	       acked ? (long long)lat[acked - 1] / 1000 : 0);
	free(ids);
	free(lat);
	return fails > 0 ? 1 : 0;
}

/* ---- check ------------------------------------------------------------ */

/* t's reason is exactly `what`. */
static bool abuse_reason_is(const rok_task_info *t, const char *what)
{
	return t->reason.len == strlen(what) &&
	       memcmp(t->reason.data, what, t->reason.len) == 0;
}

static int abuse_check(const char *socket, const char *ids_file)
{
	FILE *f = fopen(ids_file, "r");
	size_t n = 0, cap = 1024;
	uint64_t *ids = malloc(cap * sizeof(*ids));
	unsigned long long v;
	rok_client *c = NULL;
	int err, fails = 0;

	if (f == NULL || ids == NULL) {
		printf("FAIL: %s: %s\n", ids_file, strerror(errno));
		return 1;
	}
	while (fscanf(f, "%llu", &v) == 1) {
		if (n == cap && (ids = realloc(ids, (cap *= 2) * sizeof(*ids))) ==
		    NULL)
			return 2;
		ids[n++] = v;
	}
	fclose(f);
	/* Every acknowledged task: found, finished, succeeded; but for
	 * starts refused at a pids limit of the machine's that was hit
	 * (abuse.test sets ABUSE_PIDS_LIMIT_HIT then). */
	const char *hit = getenv("ABUSE_PIDS_LIMIT_HIT");
	bool pids_limit_hit = hit != NULL && hit[0] != '\0';
	size_t lost = 0, unfinished = 0, bad = 0, limited = 0;
	for (size_t i = 0; i < n; i += 100) {
		size_t k = n - i < 100 ? n - i : 100;
		rok_reply *r = NULL;
		err = -1;
		if (c == NULL &&
		    (c = abuse_connect("abuse-check", socket, &err)) == NULL) {
			printf("FAIL: cannot connect to join: %s\n",
			       abuse_strerr(err));
			return 1;
		}
		if ((err = rok_client_join(c, ids + i, k, ABUSE_TIMEOUT_MS,
		                           &r)) != 0) {
			printf("FAIL: join of acknowledged tasks %llu..: %s\n",
			       (unsigned long long)ids[i], abuse_strerr(err));
			return 1;
		}
		for (size_t j = 0; j < r->n_tasks; j++) {
			const rok_task_info *t = &r->tasks[j];
			if (t->error.code != 0) {
				if (lost++ < 5)
					printf("FAIL: acknowledged task %llu "
					       "lost: %s\n",
					       (unsigned long long)t->id,
					       rok_error_name(t->error.code));
			} else if (!rok_state_finished(t->state)) {
				unfinished++;
			} else if (t->state != ROK_TASK_SUCCEEDED &&
			           pids_limit_hit &&
			           abuse_reason_is(t, "clone: Resource "
			                           "temporarily unavailable")) {
				limited++;
			} else if (t->state != ROK_TASK_SUCCEEDED) {
				if (bad++ < 5)
					printf("FAIL: task %llu ended %s: "
					       "%.*s\n",
					       (unsigned long long)t->id,
					       rok_state_name(t->state),
					       (int)t->reason.len,
					       (const char *)t->reason.data);
			}
		}
		rok_reply_free(r);
	}
	if (lost > 0 || unfinished > 0 || bad > 0) {
		printf("FAIL: of %zu acknowledged tasks, %zu lost, %zu not "
		       "finished, %zu did not succeed\n", n, lost, unfinished,
		       bad);
		fails++;
	}
	if (limited > 0)
		printf("check: %zu tasks refused at the machine's pids limit "
		       "(not judged)\n", limited);
	printf("check: %zu acknowledged tasks joined\n", n);
	rok_client_free(c);
	free(ids);
	return fails > 0 ? 1 : 0;
}

/* ---- amplify ---------------------------------------------------------- */

static int abuse_amplify(const char *socket, long secs)
{
	enum { NAMES = 20000, VALUE = 100 * 1024 };
	int64_t end = abuse_now_ns() + secs * 1000000000ll;
	char *value = malloc(VALUE + 1);
	uint64_t *ids = malloc(NAMES * sizeof(*ids));
	long sent = 0, answered = 0, refused = 0, closed = 0;
	rok_client *c = NULL;
	uint64_t id = 0;
	int err;

	if (value == NULL || ids == NULL)
		return 2;
	memset(value, 'a', VALUE);
	value[VALUE] = '\0';
	const char *args[] = { value };
	rok_spec spec = { .kind = "echo", .args = args, .n_args = 1 };
	while (abuse_now_ns() < end) {
		if (c == NULL) {
			if ((c = abuse_connect("abuse-amplify", socket, &err)) ==
			    NULL) {
				closed++;
				abuse_nap_ms(100);
				continue;
			}
			rok_reply *r;
			if (id == 0 &&
			    rok_client_spawn_wait(c, &spec, 0, &r) == 0) {
				id = r->tasks[0].id;
				rok_reply_free(r);
			}
			if (id == 0) {
				rok_client_free(c);
				c = NULL;
				abuse_nap_ms(100);
				continue;
			}
			for (size_t i = 0; i < NAMES; i++)
				ids[i] = id;
		}
		rok_reply *r = NULL;
		err = sent % 2 == 0 ? rok_client_status(c, ids, NAMES, &r)
		                    : rok_client_join(c, ids, NAMES, 1000, &r);
		sent++;
		if (err == 0)
			answered++;
		else if (err > 0)
			refused++;
		else {
			closed++;
			rok_client_free(c);
			c = NULL;
		}
		rok_reply_free(r);
	}
	rok_client_free(c);
	printf("amplify: task %llu named %d times per request: sent=%ld "
	       "answered=%ld refused=%ld connection_lost=%ld\n",
	       (unsigned long long)id, NAMES, sent, answered, refused, closed);
	free(ids);
	free(value);
	return 0;
}

/* ---- idle ------------------------------------------------------------- */

static int abuse_idle(const char *socket, long count, long secs)
{
	struct rlimit rl;
	rok_client **cs = calloc((size_t)count, sizeof(*cs));
	long ok = 0, refused = 0;
	int err, first_err = 0;

	if (cs == NULL)
		return 2;
	/* Room for COUNT sockets, as far as the hard limit allows. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
	    rl.rlim_cur < (rlim_t)count + 64) {
		rl.rlim_cur = (rlim_t)count + 64 < rl.rlim_max
		              ? (rlim_t)count + 64 : rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (long i = 0; i < count; i++) {
		if ((cs[i] = abuse_connect("abuse-idle", socket, &err)) != NULL) {
			ok++;
		} else {
			refused++;
			if (first_err == 0)
				first_err = err;
		}
	}
	printf("idle: %ld connections tried, %ld accepted, %ld refused%s%s\n",
	       count, ok, refused, refused ? ": " : "",
	       refused ? abuse_strerr(first_err) : "");
	fflush(stdout);
	abuse_nap_ms(secs * 1000);
	for (long i = 0; i < count; i++)
		rok_client_free(cs[i]);
	free(cs);
	return 0;
}

/* ---- slowlogs --------------------------------------------------------- */

static int abuse_slowlogs(const char *socket, long secs)
{
	static const char script[] = "$| = 1; for (my $i = 0; ; $i++) { "
	                             "print \"chatty line $i\\n\" }";
	static const char *const args[] = { "perl", "-e", script };
	rok_spec spec = { .kind = "exec", .args = args, .n_args = 3,
	                  .timeout_ms = (uint64_t)secs * 1000 };
	int64_t end = abuse_now_ns() + secs * 1000000000ll;
	long replies = 0;
	uint64_t id, req;
	int err;
	rok_client *c = abuse_connect("abuse-slowlogs", socket, &err);

	if (c == NULL || (err = rok_client_spawn(c, &spec, &id)) != 0 ||
	    (err = rok_client_send_logs(c, id, true, &req)) != 0 ||
	    (err = rok_client_flush(c)) != 0) {
		printf("slowlogs: could not start: %s\n", abuse_strerr(err));
		rok_client_free(c);
		return 2;
	}
	printf("slowlogs: following task %llu\n", (unsigned long long)id);
	while (abuse_now_ns() < end) {
		rok_reply *r;
		if (rok_client_wait(c, req, &r) != 0)
			break;
		replies++;
		bool last = r->end;
		rok_reply_free(r);
		if (last)
			break;
		abuse_nap_ms(500);
	}
	printf("slowlogs: task %llu, read %ld replies of its logs -f, one per "
	       "500 ms\n", (unsigned long long)id, replies);
	rok_client_free(c);
	return 0;
}

/* ---- slowwatch -------------------------------------------------------- */

static int abuse_slowwatch(const char *socket, long secs)
{
	int64_t end = abuse_now_ns() + secs * 1000000000ll;
	long events = 0, lags = 0;
	uint64_t req, dropped = 0;
	int err;
	rok_client *c = abuse_connect("abuse-slowwatch", socket, &err);

	if (c == NULL ||
	    (err = rok_client_send_watch(c, NULL, 0, NULL, NULL, 0, &req)) != 0 ||
	    (err = rok_client_flush(c)) != 0) {
		printf("slowwatch: could not start: %s\n", abuse_strerr(err));
		rok_client_free(c);
		return 2;
	}
	printf("slowwatch: watching\n");
	while (abuse_now_ns() < end) {
		rok_reply *r;
		if ((err = rok_client_wait(c, req, &r)) != 0) {
			printf("slowwatch: the stream broke after %ld events: "
			       "%s\n", events, abuse_strerr(err));
			rok_client_free(c);
			return 0;   /* judged by the test */
		}
		events++;
		if (r->lagged > 0) {
			lags++;
			dropped += r->lagged;
		}
		bool last = r->end;
		rok_reply_free(r);
		if (last)
			break;
		abuse_nap_ms(500);
	}
	printf("slowwatch: read %ld events, one per 500 ms; %ld lag markers, "
	       "%llu events dropped\n", events, lags,
	       (unsigned long long)dropped);
	rok_client_free(c);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && strcmp(argv[1], "good") == 0)
		return abuse_good(argv[2], atol(argv[3]), argv[4]);
	if (argc == 4 && strcmp(argv[1], "check") == 0)
		return abuse_check(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "amplify") == 0)
		return abuse_amplify(argv[2], atol(argv[3]));
	if (argc == 5 && strcmp(argv[1], "idle") == 0)
		return abuse_idle(argv[2], atol(argv[3]), atol(argv[4]));
	if (argc == 4 && strcmp(argv[1], "slowlogs") == 0)
		return abuse_slowlogs(argv[2], atol(argv[3]));
	if (argc == 4 && strcmp(argv[1], "slowwatch") == 0)
		return abuse_slowwatch(argv[2], atol(argv[3]));
	fprintf(stderr, "usage: abuse-client good SOCKET SECONDS IDS_FILE\n"
	        "       abuse-client check SOCKET IDS_FILE\n"
	        "       abuse-client amplify|slowlogs|slowwatch SOCKET SECONDS\n"
	        "       abuse-client idle SOCKET COUNT SECONDS\n");
	return 2;
}
