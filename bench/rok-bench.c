/*
 * rok-bench — runtime workloads with fixed names (DESIGN.md §6).
 *
 *	rok-bench WORKLOAD
 *
 * prints one line: workload=NAME n=COUNT seconds=WALL rate=OPS_PER_S
 * maxrss_kb=PEAK [more key=value pairs].  Workers come from ROK_WORKERS.
 * Each workload starts the runtime first, so thread start-up is not timed.
 */
#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rok/blocking.h"
#include "rok/rok.h"

#define BENCH_TASKS   1000000L
#define BENCH_YIELDERS 1000L
#define BENCH_YIELDS   1000L
#define BENCH_CHAINS   1000L
#define BENCH_DEPTH    1000L
#define BENCH_PAIRS    1000L
#define BENCH_ROUNDS   1000L

static _Atomic long bench_remaining;
static sem_t bench_done;

static double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bench_die(const char *what, int err)
{
	fprintf(stderr, "rok-bench: %s: %s\n", what, strerror(-err));
	exit(1);
}

static void bench_check(const char *what, int err)
{
	if (err < 0)
		bench_die(what, err);
}

/* Counts one finished unit; the last one posts bench_done. */
static void bench_finish_one(void)
{
	if (atomic_fetch_sub_explicit(&bench_remaining, 1,
	                              memory_order_acq_rel) == 1)
		sem_post(&bench_done);
}

static void bench_wait_all(void)
{
	while (sem_wait(&bench_done) != 0 && errno == EINTR)
		;
}

static rok_poll bench_noop_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	bench_finish_one();
	return ROK_READY;
}

/* ---- spawn_local ------------------------------------------------------ */

struct bench_spawner { long n; };

static rok_poll bench_spawner_poll(rok_cx *cx, void *frame)
{
	struct bench_spawner *f = frame;
	(void)cx;
	for (long i = 0; i < f->n; i++)
		bench_check("spawn", rok_spawn(NULL, bench_noop_poll, NULL, 0));
	return ROK_READY;
}

static long bench_spawn_local(char *extra, size_t len)
{
	struct bench_spawner f = { BENCH_TASKS };
	(void)extra; (void)len;
	atomic_store(&bench_remaining, BENCH_TASKS);
	bench_check("spawn", rok_spawn(NULL, bench_spawner_poll, &f, sizeof(f)));
	bench_wait_all();
	return BENCH_TASKS;
}

/* ---- spawn_remote ----------------------------------------------------- */

static long bench_spawn_remote(char *extra, size_t len)
{
	(void)extra; (void)len;
	atomic_store(&bench_remaining, BENCH_TASKS);
	for (long i = 0; i < BENCH_TASKS; i++)
		bench_check("spawn", rok_spawn(NULL, bench_noop_poll, NULL, 0));
	bench_wait_all();
	return BENCH_TASKS;
}

/* ---- yield_many ------------------------------------------------------- */

struct bench_yielder { long i; };

static rok_poll bench_yielder_poll(rok_cx *cx, void *frame)
{
	struct bench_yielder *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < BENCH_YIELDS; f->i++)
		ROK_YIELD(cx);
	bench_finish_one();
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static long bench_yield_many(char *extra, size_t len)
{
	struct bench_yielder f = { 0 };
	(void)extra; (void)len;
	atomic_store(&bench_remaining, BENCH_YIELDERS);
	for (long i = 0; i < BENCH_YIELDERS; i++)
		bench_check("spawn", rok_spawn(NULL, bench_yielder_poll, &f,
		                               sizeof(f)));
	bench_wait_all();
	return BENCH_YIELDERS * BENCH_YIELDS;
}

/* ---- chained_spawn ---------------------------------------------------- */

struct bench_link { long depth; rok_oneshot *done; };

static rok_poll bench_link_poll(rok_cx *cx, void *frame)
{
	struct bench_link *f = frame;
	(void)cx;
	if (f->depth == 0) {
		bench_check("oneshot", rok_oneshot_send(f->done, (void *)1));
		return ROK_READY;
	}
	struct bench_link child = { f->depth - 1, f->done };
	bench_check("spawn", rok_spawn(NULL, bench_link_poll, &child,
	                               sizeof(child)));
	return ROK_READY;
}

struct bench_chainer {
	long round;
	rok_oneshot *done;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll bench_chainer_poll(rok_cx *cx, void *frame)
{
	struct bench_chainer *f = frame;

	ROK_BEGIN(cx);
	for (f->round = 0; f->round < BENCH_CHAINS; f->round++) {
		bench_check("oneshot", rok_oneshot_new(&f->done));
		{
			struct bench_link l = { BENCH_DEPTH - 1, f->done };
			bench_check("spawn", rok_spawn(NULL, bench_link_poll,
			                               &l, sizeof(l)));
		}
		ROK_AWAIT(cx, rok_oneshot_recv(cx, &f->op, f->done, &f->v,
		                               &f->err));
		rok_oneshot_drop_receiver(f->done);
		f->done = NULL;
	}
	bench_finish_one();
	ROK_CLEANUP(cx);
	if (f->done != NULL)
		rok_oneshot_drop_receiver(f->done);
	ROK_END(cx);
}

static long bench_chained_spawn(char *extra, size_t len)
{
	struct bench_chainer f = { 0 };
	(void)extra; (void)len;
	atomic_store(&bench_remaining, 1);
	bench_check("spawn", rok_spawn(NULL, bench_chainer_poll, &f, sizeof(f)));
	bench_wait_all();
	return BENCH_CHAINS * BENCH_DEPTH;
}

/* ---- ping_pong -------------------------------------------------------- */

struct bench_player {
	rok_chan *in, *out;
	long i;
	bool serves;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll bench_player_poll(rok_cx *cx, void *frame)
{
	struct bench_player *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < BENCH_ROUNDS; f->i++) {
		if (f->serves) {
			ROK_AWAIT(cx, rok_chan_send(cx, &f->op, f->out,
			                            (void *)1, &f->err));
			ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->in, &f->v,
			                            &f->err));
		} else {
			ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->in, &f->v,
			                            &f->err));
			ROK_AWAIT(cx, rok_chan_send(cx, &f->op, f->out,
			                            (void *)1, &f->err));
		}
		if (f->err < 0)
			bench_die("channel", f->err);
	}
	bench_finish_one();
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static long bench_ping_pong(char *extra, size_t len)
{
	rok_chan **chans = calloc(2 * BENCH_PAIRS, sizeof(*chans));
	(void)extra; (void)len;

	if (chans == NULL)
		bench_die("calloc", -ENOMEM);
	for (long i = 0; i < 2 * BENCH_PAIRS; i++)
		bench_check("chan", rok_chan_new(&chans[i], 1));
	atomic_store(&bench_remaining, 2 * BENCH_PAIRS);
	for (long i = 0; i < BENCH_PAIRS; i++) {
		struct bench_player a = { .in = chans[2 * i],
		                          .out = chans[2 * i + 1], .serves = true };
		struct bench_player b = { .in = chans[2 * i + 1],
		                          .out = chans[2 * i] };
		bench_check("spawn", rok_spawn(NULL, bench_player_poll, &a,
		                               sizeof(a)));
		bench_check("spawn", rok_spawn(NULL, bench_player_poll, &b,
		                               sizeof(b)));
	}
	bench_wait_all();
	for (long i = 0; i < 2 * BENCH_PAIRS; i++)
		rok_chan_free(chans[i], NULL);
	free(chans);
	return BENCH_PAIRS * BENCH_ROUNDS * 2;
}

/* ---- fanout_join ------------------------------------------------------ */

struct bench_index { long i; };

static rok_poll bench_index_poll(rok_cx *cx, void *frame)
{
	struct bench_index *f = frame;

	ROK_BEGIN(cx);
	ROK_RETURN(cx, f->i);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct bench_fanout {
	rok_task **tasks;
	long i;
	long sum;
	void *v;
	rok_join_op join;
};

static rok_poll bench_fanout_poll(rok_cx *cx, void *frame)
{
	struct bench_fanout *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < BENCH_TASKS; f->i++) {
		struct bench_index a = { f->i };
		bench_check("spawn", rok_spawn(&f->tasks[f->i], bench_index_poll,
		                               &a, sizeof(a)));
	}
	for (f->i = 0; f->i < BENCH_TASKS; f->i++) {
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->tasks[f->i], &f->v));
		f->sum += (long)f->v;
		rok_task_unref(f->tasks[f->i]);
	}
	ROK_RETURN(cx, f->sum);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static long bench_fanout_join(char *extra, size_t len)
{
	struct bench_fanout f = { .tasks = malloc(BENCH_TASKS *
	                                          sizeof(rok_task *)) };
	rok_task *t;
	void *sum;

	if (f.tasks == NULL)
		bench_die("malloc", -ENOMEM);
	bench_check("spawn", rok_spawn(&t, bench_fanout_poll, &f, sizeof(f)));
	bench_check("wait", rok_task_wait(t, &sum));
	rok_task_unref(t);
	free(f.tasks);
	long want = BENCH_TASKS * (BENCH_TASKS - 1) / 2;
	snprintf(extra, len, " sum_ok=%d", (long)sum == want);
	return BENCH_TASKS;
}

/* ---- sleep_many ------------------------------------------------------- */

static long bench_rss_kb(void)
{
	FILE *f = fopen("/proc/self/statm", "r");
	long pages = 0, rss = 0;

	if (f == NULL)
		return 0;
	if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
		rss = 0;
	fclose(f);
	return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static long bench_peak_kb(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

struct bench_sleeper {
	rok_sleep_op sleep;
};

static rok_poll bench_sleeper_poll(rok_cx *cx, void *frame)
{
	struct bench_sleeper *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_sleep(cx, &f->sleep, ROK_S(1)));
	bench_finish_one();
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static long bench_sleep_many(char *extra, size_t len)
{
	struct bench_sleeper f = { 0 };
	long base = bench_rss_kb();

	atomic_store(&bench_remaining, BENCH_TASKS);
	for (long i = 0; i < BENCH_TASKS; i++)
		bench_check("spawn", rok_spawn(NULL, bench_sleeper_poll, &f,
		                               sizeof(f)));
	bench_wait_all();
	snprintf(extra, len, " baseline_kb=%ld rss_per_task_b=%ld", base,
	         (bench_peak_kb() - base) * 1024 / BENCH_TASKS);
	return BENCH_TASKS;
}

/* ---- timer_storm ------------------------------------------------------ */

#define BENCH_STORM_TASKS  100000L
#define BENCH_STORM_SLEEPS 10L

static int64_t *bench_late;            /* lateness of every sleep, ns */
static _Atomic long bench_late_n;

struct bench_stormer {
	uint32_t rng;
	long i;
	int64_t start, want;
	rok_sleep_op sleep;
};

static rok_poll bench_stormer_poll(rok_cx *cx, void *frame)
{
	struct bench_stormer *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < BENCH_STORM_SLEEPS; f->i++) {
		f->rng = f->rng * 1103515245u + 12345u;
		f->want = ROK_MS(1 + (f->rng >> 8) % 100);
		f->start = rok_now();
		ROK_AWAIT(cx, rok_sleep(cx, &f->sleep, f->want));
		bench_late[atomic_fetch_add(&bench_late_n, 1)] =
			rok_now() - f->start - f->want;
	}
	bench_finish_one();
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static int bench_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static long bench_timer_storm(char *extra, size_t len)
{
	long n = BENCH_STORM_TASKS * BENCH_STORM_SLEEPS;

	bench_late = malloc((size_t)n * sizeof(*bench_late));
	if (bench_late == NULL)
		bench_die("malloc", -ENOMEM);
	atomic_store(&bench_remaining, BENCH_STORM_TASKS);
	for (long i = 0; i < BENCH_STORM_TASKS; i++) {
		struct bench_stormer f = { .rng = (uint32_t)i * 2654435761u };
		bench_check("spawn", rok_spawn(NULL, bench_stormer_poll, &f,
		                               sizeof(f)));
	}
	bench_wait_all();
	qsort(bench_late, (size_t)n, sizeof(*bench_late), bench_cmp_i64);
	snprintf(extra, len, " p50_late_us=%.1f p99_late_us=%.1f max_late_us=%.1f",
	         (double)bench_late[n / 2] / 1e3,
	         (double)bench_late[n * 99 / 100] / 1e3,
	         (double)bench_late[n - 1] / 1e3);
	free(bench_late);
	return n;
}

/* ---- blocking --------------------------------------------------------- */

#define BENCH_BLOCKING_JOBS 10000L

static void *bench_blocking_job(void *arg)
{
	return arg;
}

struct bench_blocker {
	rok_task **jobs;
	long i;
	long sum;
	void *v;
	rok_join_op join;
};

static rok_poll bench_blocker_poll(rok_cx *cx, void *frame)
{
	struct bench_blocker *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < BENCH_BLOCKING_JOBS; f->i++)
		bench_check("spawn_blocking",
		            rok_spawn_blocking(&f->jobs[f->i], bench_blocking_job,
		                               (void *)f->i));
	for (f->i = 0; f->i < BENCH_BLOCKING_JOBS; f->i++) {
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->jobs[f->i], &f->v));
		f->sum += (long)f->v;
		rok_task_unref(f->jobs[f->i]);
	}
	ROK_RETURN(cx, f->sum);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static long bench_blocking(char *extra, size_t len)
{
	struct bench_blocker f = { .jobs = malloc(BENCH_BLOCKING_JOBS *
	                                          sizeof(rok_task *)) };
	rok_task *t;
	void *sum;

	if (f.jobs == NULL)
		bench_die("malloc", -ENOMEM);
	bench_check("spawn", rok_spawn(&t, bench_blocker_poll, &f, sizeof(f)));
	bench_check("wait", rok_task_wait(t, &sum));
	rok_task_unref(t);
	free(f.jobs);
	long want = BENCH_BLOCKING_JOBS * (BENCH_BLOCKING_JOBS - 1) / 2;
	snprintf(extra, len, " sum_ok=%d threads=%u", (long)sum == want,
	         rok_blocking_threads());
	return BENCH_BLOCKING_JOBS;
}

/* ---- main ------------------------------------------------------------- */

static const struct bench_workload {
	const char *name;
	long (*run)(char *extra, size_t len);
} bench_workloads[] = {
	{ "spawn_local", bench_spawn_local },
	{ "spawn_remote", bench_spawn_remote },
	{ "yield_many", bench_yield_many },
	{ "chained_spawn", bench_chained_spawn },
	{ "ping_pong", bench_ping_pong },
	{ "fanout_join", bench_fanout_join },
	{ "sleep_many", bench_sleep_many },
	{ "timer_storm", bench_timer_storm },
	{ "blocking", bench_blocking },
};

static void bench_usage(FILE *to)
{
	fputs("usage: rok-bench WORKLOAD\nworkloads:", to);
	for (size_t i = 0; i < sizeof(bench_workloads) / sizeof(bench_workloads[0]); i++)
		fprintf(to, " %s", bench_workloads[i].name);
	fputs("\nworkers: ROK_WORKERS (default: online CPUs)\n", to);
}

int main(int argc, char **argv)
{
	const struct bench_workload *w = NULL;
	char extra[256] = "";

	if (argc == 2 && strcmp(argv[1], "--help") == 0) {
		bench_usage(stdout);
		return 0;
	}
	for (size_t i = 0; argc == 2 && i < sizeof(bench_workloads) / sizeof(bench_workloads[0]); i++)
		if (strcmp(argv[1], bench_workloads[i].name) == 0)
			w = &bench_workloads[i];
	if (w == NULL) {
		bench_usage(stderr);
		return 2;
	}
	if (sem_init(&bench_done, 0, 0) != 0)
		bench_die("sem_init", -errno);
	bench_check("start", rok_start());

	double t0 = bench_now();
	long n = w->run(extra, sizeof(extra));
	double secs = bench_now() - t0;

	printf("workload=%s n=%ld seconds=%.3f rate=%.0f maxrss_kb=%ld%s\n",
	       w->name, n, secs, (double)n / secs, bench_peak_kb(), extra);
	bench_check("stop", rok_stop());
	return 0;
}
