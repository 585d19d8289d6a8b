/*
 * rok-load — drives a running rokd through its socket (DESIGN.md §6).
 *
 *	rok-load [-s SOCKET] [-c CLIENTS] [-d DEPTH] [-n TASKS] [-k KIND]
 *	         [-g GROUP] [-p PRIORITY] [-- ARG...]
 *
 * CLIENTS connections (one thread each) keep DEPTH spawn-and-wait requests
 * in flight until TASKS tasks in total have finished (-d 1: sequential).
 * Prints one line:
 *
 *	clients=C depth=D n=N seconds=WALL rate=TASKS_PER_S p50_us=.. p99_us=..
 *	max_us=..
 *
 * where latency runs from sending a spawn to receiving its result.  -g
 * and -p put every task in that group and priority class.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rok/client.h"

struct load_client {
	pthread_t thread;
	const char *socket;
	const rok_spec *spec;
	long n;                  /* tasks this client runs */
	long depth;
	int64_t *lat;            /* n latencies, ns */
	int err;
	char msg[160];
};

static int64_t load_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *load_client_main(void *arg)
{
	struct load_client *lc = arg;
	rok_client *c = rok_client_new("rok-load");
	int64_t *sent = calloc((size_t)lc->n, sizeof(*sent));
	uint64_t first = 0;
	long next = 0, done = 0;
	int err;

	if (c == NULL || sent == NULL) {
		lc->err = -ENOMEM;
		goto out;
	}
	if ((err = rok_client_connect(c, lc->socket)) != 0) {
		lc->err = err;
		snprintf(lc->msg, sizeof(lc->msg), "connect %s", lc->socket);
		goto out;
	}
	while (done < lc->n) {
		/* Top up to DEPTH requests in flight. */
		while (next < lc->n && next - done < lc->depth) {
			uint64_t req;
			err = rok_client_send_spawn(c, lc->spec, true, 0, &req);
			if (err < 0) {
				lc->err = err;
				snprintf(lc->msg, sizeof(lc->msg), "send");
				goto out;
			}
			if (next == 0)
				first = req;
			/* Request ids are handed out in order, one each. */
			sent[req - first] = load_now();
			next++;
		}
		if ((err = rok_client_flush(c)) < 0) {
			lc->err = err;
			snprintf(lc->msg, sizeof(lc->msg), "flush");
			goto out;
		}
		rok_reply *r;
		if ((err = rok_client_recv(c, -1, &r)) < 0) {
			lc->err = err;
			snprintf(lc->msg, sizeof(lc->msg), "receive");
			goto out;
		}
		int64_t now = load_now();
		if (r->error.code != 0) {
			lc->err = -EPROTO;
			snprintf(lc->msg, sizeof(lc->msg), "daemon: %s: %.*s",
			         rok_error_name(r->error.code),
			         (int)r->error.message.len,
			         (const char *)r->error.message.data);
			rok_reply_free(r);
			goto out;
		}
		uint64_t k = r->req_id - first;
		if (k < (uint64_t)lc->n)
			lc->lat[done] = now - sent[k];
		done++;
		rok_reply_free(r);
	}
out:
	free(sent);
	rok_client_free(c);
	return NULL;
}

static int load_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void load_usage(FILE *to)
{
	fputs("usage: rok-load [-s SOCKET] [-c CLIENTS] [-d DEPTH] [-n TASKS] "
	      "[-k KIND] [-g GROUP] [-p PRIORITY] [-- ARG...]\n"
	      "  defaults: the default socket, 8 clients, depth 64, "
	      "100000 tasks, kind noop\n", to);
}

static long load_num(const char *s, const char *what)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v < 1) {
		fprintf(stderr, "rok-load: %s: expected a positive number\n",
		        what);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	char path[4096];
	const char *socket = NULL, *kind = "noop", *group = NULL;
	int prio = 0;
	long clients = 8, depth = 64, tasks = 100000;
	int ch;

	while ((ch = getopt(argc, argv, "s:c:d:n:k:g:p:h")) != -1) {
		switch (ch) {
		case 's': socket = optarg; break;
		case 'c': clients = load_num(optarg, "-c"); break;
		case 'd': depth = load_num(optarg, "-d"); break;
		case 'n': tasks = load_num(optarg, "-n"); break;
		case 'k': kind = optarg; break;
		case 'g': group = optarg; break;
		case 'p':
			if ((prio = rok_priority_parse(optarg)) < 0) {
				fprintf(stderr, "rok-load: -p: urgent, high, "
				        "normal or low\n");
				return 2;
			}
			break;
		case 'h': load_usage(stdout); return 0;
		default: load_usage(stderr); return 2;
		}
	}
	if (socket == NULL) {
		if (rok_socket_path(path, sizeof(path)) < 0) {
			fprintf(stderr, "rok-load: no socket path\n");
			return 2;
		}
		socket = path;
	}
	if (clients > tasks)
		clients = tasks;
	rok_spec spec = {
		.kind = kind,
		.args = (const char *const *)(argv + optind),
		.n_args = (size_t)(argc - optind),
		.group = group,
		.priority = prio,
	};
	struct load_client *lc = calloc((size_t)clients, sizeof(*lc));
	int64_t *lat = malloc((size_t)tasks * sizeof(*lat));
	if (lc == NULL || lat == NULL) {
		fprintf(stderr, "rok-load: out of memory\n");
		return 1;
	}
	int64_t t0 = load_now();
	long off = 0;
	for (long i = 0; i < clients; i++) {
		lc[i].socket = socket;
		lc[i].spec = &spec;
		lc[i].n = tasks / clients + (i < tasks % clients ? 1 : 0);
		lc[i].depth = depth;
		lc[i].lat = lat + off;
		off += lc[i].n;
		if (pthread_create(&lc[i].thread, NULL, load_client_main,
		                   &lc[i]) != 0) {
			fprintf(stderr, "rok-load: pthread_create failed\n");
			return 1;
		}
	}
	int failed = 0;
	for (long i = 0; i < clients; i++) {
		pthread_join(lc[i].thread, NULL);
		if (lc[i].err != 0) {
			fprintf(stderr, "rok-load: client %ld: %s: %s\n", i,
			        lc[i].msg, lc[i].err < 0 ? strerror(-lc[i].err)
			                                 : rok_error_name(lc[i].err));
			failed = 1;
		}
	}
	double secs = (double)(load_now() - t0) / 1e9;
	if (failed)
		return 1;
	qsort(lat, (size_t)tasks, sizeof(*lat), load_cmp);
	printf("clients=%ld depth=%ld n=%ld seconds=%.3f rate=%.0f "
	       "p50_us=%.1f p99_us=%.1f max_us=%.1f\n",
	       clients, depth, tasks, secs, (double)tasks / secs,
	       (double)lat[tasks / 2] / 1e3,
	       (double)lat[tasks * 99 / 100] / 1e3,
	       (double)lat[tasks - 1] / 1e3);
	free(lat);
	free(lc);
	return 0;
}
