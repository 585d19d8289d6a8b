/*
 * crash-load.c — the client side of the crash test (tests/crash.test).
 *
 *   crash-load load SOCKET ACKFILE SECONDS SEED
 *	For SECONDS, keeps up to 32 spawns in flight on SOCKET (reconnecting
 *	whenever rokd dies and comes back), a mix of noop, echo, short sleeps,
 *	some with --retry, and appends "ID KIND ARG RETRY" to ACKFILE for
 *	every spawn the daemon acknowledged, and for nothing else.
 *
 *   crash-load verify SOCKET ACKFILE...
 *	Joins every acknowledged id (waiting for the ones still running) and
 *	checks: each exists and is visible, its kind and argument are the
 *	ones spawned, it ended succeeded (echo: with its text) or interrupted
 *	(caught running by a kill, no retry left), and no id was acknowledged
 *	twice.  Prints "acks=N" and the count per state; exits 1 on any fault.
 *
 * Only rokd is killed, never this program, so its own records are whole.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rok/client.h"

#define DEPTH 32

struct sent {
	uint64_t req;
	char kind[8];
	char arg[32];
	unsigned retry;
};

static double crash_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Makes the next spec: kind, argument and retry chosen at random. */
static void crash_pick(struct sent *s, unsigned *seed, uint64_t serial)
{
	int r = rand_r(seed) % 10;

	s->retry = rand_r(seed) % 4 == 0 ? 1 + (unsigned)(rand_r(seed) % 3) : 0;
	if (r < 4) {
		strcpy(s->kind, "noop");
		s->arg[0] = '\0';
	} else if (r < 7) {
		strcpy(s->kind, "echo");
		snprintf(s->arg, sizeof(s->arg), "e%" PRIu64 "x%u", serial,
		         (unsigned)rand_r(seed));
	} else {
		strcpy(s->kind, "sleep");
		snprintf(s->arg, sizeof(s->arg), "%dms", 10 + rand_r(seed) % 190);
	}
}

static int crash_load(const char *sock, const char *ackfile, double secs,
                      unsigned seed)
{
	FILE *f = fopen(ackfile, "ae");
	double end = crash_now() + secs;
	uint64_t serial = 0, acks = 0, refused = 0;

	if (f == NULL) {
		perror(ackfile);
		return 1;
	}
	while (crash_now() < end) {
		rok_client *c = rok_client_new("crash-load");
		struct sent inflight[DEPTH];
		size_t n = 0;

		if (c == NULL)
			return 1;
		rok_client_set_timeout(c, 2000);
		if (rok_client_connect(c, sock) != 0) {
			rok_client_free(c);
			usleep(20000);   /* rokd is down: poll until it is back */
			continue;
		}
		for (;;) {
			bool stop = crash_now() >= end;
			while (!stop && n < DEPTH) {
				struct sent *s = &inflight[n];
				const char *args[1] = { s->arg };
				crash_pick(s, &seed, ++serial);
				rok_spec spec = {
					.kind = s->kind, .args = args,
					.n_args = s->arg[0] != '\0' ? 1 : 0,
					.retry = s->retry,
				};
				if (rok_client_send_spawn(c, &spec, false, 0,
				                          &s->req) != 0)
					goto reconnect;
				n++;
			}
			if (n == 0)
				break;
			rok_reply *r;
			if (rok_client_recv(c, 2000, &r) != 0)
				goto reconnect;
			for (size_t i = 0; i < n; i++) {
				if (inflight[i].req != r->req_id)
					continue;
				if (r->error.code == 0 && r->type == ROK_REPLY_SPAWN) {
					fprintf(f, "%" PRIu64 " %s %s %u\n", r->id,
					        inflight[i].kind,
					        inflight[i].arg[0] ? inflight[i].arg
					                           : "-",
					        inflight[i].retry);
					acks++;
				} else {
					refused++;
				}
				inflight[i] = inflight[--n];
				break;
			}
			rok_reply_free(r);
			if (stop && n == 0)
				break;
		}
reconnect:
		/* Spawns without a reply were not acknowledged: not recorded. */
		rok_client_free(c);
	}
	if (fclose(f) != 0) {
		perror(ackfile);
		return 1;
	}
	fprintf(stderr, "crash-load: %" PRIu64 " acknowledged, %" PRIu64
	        " refused with an error\n", acks, refused);
	return 0;
}

struct ack {
	uint64_t id;
	char kind[8];
	char arg[32];
	unsigned retry;
};

static int crash_cmp(const void *a, const void *b)
{
	const struct ack *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static int crash_verify(const char *sock, char **files, int nfiles)
{
	struct ack *acks = NULL;
	size_t n = 0, cap = 0;
	unsigned long counts[8] = { 0 };
	int faults = 0;

	for (int i = 0; i < nfiles; i++) {
		FILE *f = fopen(files[i], "re");
		char line[128];
		if (f == NULL) {
			perror(files[i]);
			return 1;
		}
		while (fgets(line, sizeof(line), f) != NULL) {
			if (n == cap) {
				cap = cap ? 2 * cap : 4096;
				acks = realloc(acks, cap * sizeof(*acks));
				if (acks == NULL)
					return 1;
			}
			struct ack *a = &acks[n];
			if (sscanf(line, "%" SCNu64 " %7s %31s %u", &a->id,
			           a->kind, a->arg, &a->retry) != 4) {
				fprintf(stderr, "%s: bad line: %s", files[i], line);
				return 1;
			}
			n++;
		}
		fclose(f);
	}
	qsort(acks, n, sizeof(*acks), crash_cmp);
	for (size_t i = 1; i < n; i++) {
		if (acks[i].id == acks[i - 1].id) {
			fprintf(stderr, "FAULT: id %" PRIu64 " acknowledged "
			        "twice (reused)\n", acks[i].id);
			faults++;
		}
	}
	rok_client *c = rok_client_new("crash-verify");
	if (c == NULL || rok_client_connect(c, sock) != 0) {
		fprintf(stderr, "crash-load: cannot connect to %s\n", sock);
		return 1;
	}
	for (size_t i = 0; i < n; i += 500) {
		size_t k = n - i < 500 ? n - i : 500;
		uint64_t ids[500];
		rok_reply *r;
		for (size_t j = 0; j < k; j++)
			ids[j] = acks[i + j].id;
		int rc = rok_client_join(c, ids, k, 60000, &r);
		if (rc != 0) {
			fprintf(stderr, "crash-load: join: %d\n", rc);
			return 1;
		}
		for (size_t j = 0; j < k; j++) {
			const rok_task_info *t = &r->tasks[j];
			const struct ack *a = &acks[i + j];
			const char *arg = t->n_args > 0
			        ? (const char *)t->args[0].data : "-";
			if (t->error.code != 0) {
				fprintf(stderr, "FAULT: acknowledged id %" PRIu64
				        " lost: %s\n", a->id,
				        rok_error_name(t->error.code));
				faults++;
				continue;
			}
			if (strcmp((const char *)t->kind.data, a->kind) != 0 ||
			    strcmp(arg, a->arg) != 0) {
				fprintf(stderr, "FAULT: id %" PRIu64 " is %s %s, "
				        "spawned as %s %s\n", a->id,
				        (const char *)t->kind.data, arg, a->kind,
				        a->arg);
				faults++;
			}
			/* Interrupted is legal for any kind: a kill between
			 * the commit of its start and of its finish. */
			bool legal = t->state == ROK_TASK_SUCCEEDED ||
			             t->state == ROK_TASK_INTERRUPTED;
			if (t->state == ROK_TASK_SUCCEEDED &&
			    strcmp(a->kind, "echo") == 0 &&
			    strcmp((const char *)t->value.data, a->arg) != 0)
				legal = false;
			if (!legal) {
				fprintf(stderr, "FAULT: id %" PRIu64 " (%s %s "
				        "retry %u) ended %s: %s\n", a->id,
				        a->kind, a->arg, a->retry,
				        rok_state_name(t->state),
				        (const char *)t->reason.data);
				faults++;
			}
			if (t->state >= 0 && t->state < 8)
				counts[t->state]++;
		}
		rok_reply_free(r);
	}
	rok_client_free(c);
	printf("acks=%zu", n);
	for (int s = 1; s < 8; s++)
		if (counts[s] > 0)
			printf(" %s=%lu", rok_state_name(s), counts[s]);
	printf(" faults=%d\n", faults);
	free(acks);
	return faults > 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "load") == 0)
		return crash_load(argv[2], argv[3], atof(argv[4]),
		                  (unsigned)strtoul(argv[5], NULL, 10));
	if (argc >= 4 && strcmp(argv[1], "verify") == 0)
		return crash_verify(argv[2], argv + 3, argc - 3);
	fprintf(stderr, "usage: crash-load load SOCKET ACKFILE SECONDS SEED\n"
	        "       crash-load verify SOCKET ACKFILE...\n");
	return 2;
}
