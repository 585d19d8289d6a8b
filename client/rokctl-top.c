/*
 * rokctl-top.c — `rokctl top`: a live view of the daemon on a terminal.
 *
 * Every interval it asks for the stats (counters, the journal's commit
 * histogram) and for the oldest queued task the caller may see (a list
 * of one queued task: ids grow, so the first is the oldest), then redraws
 * the screen in place with ANSI sequences (the alternate screen, cursor
 * home, clear to end of line): no curses.  Rates (spawns and completions
 * per second) are the differences of the daemon's never-decreasing
 * tasks_total between two samples, kept for a short sparkline; the
 * journal's commit latency and the spawn-to-start latency are the mean and
 * p99 bucket of the last interval's observations.
 *
 * The terminal is put in raw mode (no echo, no line buffering; signals
 * still come from ^C) so that `q` quits at once; it is restored on every
 * way out: q, an error, SIGINT, SIGTERM, SIGHUP (their handlers only set
 * a flag, which the wait in poll() sees as EINTR), and exit(); and while
 * ^Z (SIGTSTP) has it stopped, set raw again when it continues.  Without
 * a terminal on both stdin and stdout top prints one snapshot, without
 * escapes or rates, and exits.
 */
#include <errno.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "rokctl.h"

#define TOP_HISTORY 64            /* samples kept for the sparklines */
#define TOP_MIN_INTERVAL_MS 100
#define TOP_MAX_INTERVAL_MS 3600000

static const struct rokctl_opt top_opts[] = {
	{ KEY_INTERVAL, 'n', "interval", "DURATION",
	  "time between refreshes (default 1s, at least 100ms)" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

/* The terminal as we found it, restored by top_restore (idempotent). */
static struct {
	bool raw;
	bool atexit_done;
	struct termios saved;
} top_tty;

static volatile sig_atomic_t top_signalled;

static void top_restore(void)
{
	if (!top_tty.raw)
		return;
	top_tty.raw = false;
	/* Line wrap and cursor back, main screen back. */
	fputs("\033[?7h\033[?25h\033[?1049l", stdout);
	fflush(stdout);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &top_tty.saved);
}

static void top_signal(int sig)
{
	top_signalled = sig;
}

/* Raw mode and the alternate screen; 0 or -errno. */
static int top_raw(void)
{
	struct termios t;
	struct sigaction sa;

	if (tcgetattr(STDIN_FILENO, &top_tty.saved) != 0)
		return -errno;
	t = top_tty.saved;
	t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
	t.c_cc[VMIN] = 0;
	t.c_cc[VTIME] = 0;
	/* No SA_RESTART: the signal ends the wait in poll(). */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = top_signal;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGINT, &sa, NULL) != 0 ||
	    sigaction(SIGTERM, &sa, NULL) != 0 ||
	    sigaction(SIGHUP, &sa, NULL) != 0 ||
	    sigaction(SIGTSTP, &sa, NULL) != 0 ||
	    sigaction(SIGWINCH, &sa, NULL) != 0)
		return -errno;
	if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) != 0)
		return -errno;
	top_tty.raw = true;
	if (!top_tty.atexit_done && atexit(top_restore) == 0)
		top_tty.atexit_done = true;
	/* The alternate screen, no cursor, no line wrap: a line wider
	 * than the terminal is cut, so the redraw stays in place. */
	fputs("\033[?1049h\033[?25l\033[?7l", stdout);
	return 0;
}

static uint64_t top_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static uint64_t top_wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* A duration for people: 850us, 12.3ms, 4.2s, 3m05s, 2h07m. */
static void top_dur(char *buf, size_t len, uint64_t us)
{
	if (us < 1000)
		snprintf(buf, len, "%lluus", (unsigned long long)us);
	else if (us < 1000000)
		snprintf(buf, len, "%.1fms", (double)us / 1e3);
	else if (us < 60000000)
		snprintf(buf, len, "%.1fs", (double)us / 1e6);
	else if (us < 3600000000ull)
		snprintf(buf, len, "%llum%02llus",
			 (unsigned long long)(us / 60000000),
			 (unsigned long long)(us / 1000000 % 60));
	else
		snprintf(buf, len, "%lluh%02llum",
			 (unsigned long long)(us / 3600000000ull),
			 (unsigned long long)(us / 60000000 % 60));
}

#define TOP_MAX_GROUPS 16        /* the groups shown; the rest counted */

struct top {
	struct rokctl *ctx;
	bool live;                  /* on a terminal, redrawn in place */
	bool utf8;
	uint64_t interval_ms;
	rok_reply *sample;          /* the last stats reply: stats, groups */
	rok_reply *oldest;          /* the oldest queued task (0 or 1) */
	rok_daemon_stats prev;      /* the sample before */
	uint64_t prev_at, cur_at;   /* monotonic µs of the samples; 0: none */
	double spawns[TOP_HISTORY], dones[TOP_HISTORY];
	size_t nhist;               /* samples in the rings (at most full) */
	size_t next;                /* where the next sample goes */
};

static uint64_t top_done(const rok_daemon_stats *s)
{
	uint64_t n = 0;

	for (size_t st = ROK_TASK_SUCCEEDED;
	     st < sizeof(s->tasks_total) / sizeof(s->tasks_total[0]); st++)
		n += s->tasks_total[st];
	return n;
}

/* Per second from two readings of a counter; 0 if it went down (only a
 * restarted daemon's would). */
static double top_rate(uint64_t cur, uint64_t prev, double dt)
{
	return cur >= prev ? (double)(cur - prev) / dt : 0;
}

/* Takes one sample; 0 or the library's error. */
static int top_sample(struct top *t)
{
	rok_reply *r, *q;
	int rc;

	rc = rok_client_stats_reply(t->ctx->client, &r);
	if (rc != 0)
		return rc;
	/* Ids grow: the first queued task the caller sees is its oldest. */
	rc = rok_client_list(t->ctx->client, ROK_TASK_QUEUED, 0, 1, &q);
	if (rc != 0) {
		rok_reply_free(r);
		return rc;
	}
	if (t->sample != NULL)
		t->prev = t->sample->stats;
	rok_reply_free(t->sample);
	rok_reply_free(t->oldest);
	t->sample = r;
	t->oldest = q;
	t->prev_at = t->cur_at;
	t->cur_at = top_mono_us();
	if (t->prev_at != 0 && t->cur_at > t->prev_at) {
		const rok_daemon_stats *cur = &r->stats;
		double dt = (double)(t->cur_at - t->prev_at) / 1e6;
		t->spawns[t->next] = top_rate(
			cur->tasks_total[ROK_TASK_QUEUED],
			t->prev.tasks_total[ROK_TASK_QUEUED], dt);
		t->dones[t->next] = top_rate(top_done(cur),
					     top_done(&t->prev), dt);
		t->next = (t->next + 1) % TOP_HISTORY;
		if (t->nhist < TOP_HISTORY)
			t->nhist++;
	}
	return 0;
}

/* The last `width` samples of ring v as a sparkline, scaled to its max. */
static void top_spark(const struct top *t, const double *v, size_t width)
{
	static const char *const blocks[] = {
		"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586",
		"\u2587", "\u2588",
	};
	static const char ascii[] = "_.-:=+*#";
	size_t n = t->nhist < width ? t->nhist : width;
	double max = 0;

	for (size_t i = 0; i < n; i++) {
		double x = v[(t->next + TOP_HISTORY - n + i) % TOP_HISTORY];
		if (x > max)
			max = x;
	}
	for (size_t i = 0; i < n; i++) {
		double x = v[(t->next + TOP_HISTORY - n + i) % TOP_HISTORY];
		int k = max > 0 ? (int)(x / max * 7.0 + 0.5) : 0;
		if (k < 0)
			k = 0;
		if (k > 7)
			k = 7;
		if (t->utf8)
			fputs(blocks[k], stdout);
		else
			putchar(ascii[k]);
	}
}

/* The newest rate of ring v. */
static double top_last(const struct top *t, const double *v)
{
	return t->nhist > 0 ? v[(t->next + TOP_HISTORY - 1) % TOP_HISTORY] : 0;
}

/* Ends a line: clears the rest of it on a terminal. */
static void top_eol(const struct top *t)
{
	fputs(t->live ? "\033[K\r\n" : "\n", stdout);
}

/*
 * A latency line from histogram c (and p, the previous sample): the
 * observations between the two samples (all of them in a snapshot), their
 * count, mean, and the bound of the bucket that holds the 99th percentile.
 */
static void top_latency(const struct top *t, const char *label,
			const char *what, const char *many,
			const rok_histogram *c, const rok_histogram *p)
{
	bool delta = t->live && t->nhist > 0 &&
		     p->n_bounds == c->n_bounds && c->count >= p->count;
	uint64_t n = delta ? c->count - p->count : c->count;
	uint64_t sum = delta ? c->sum_us - p->sum_us : c->sum_us;
	char mean[32], p99[32];

	printf("%-8s %s ", label, what);
	if (c->n_bounds == 0) {
		printf("latency not reported by this rokd");
		top_eol(t);
		return;
	}
	if (n == 0) {
		printf("none %s", delta ? "in the last interval" : "yet");
		top_eol(t);
		return;
	}
	size_t i = print_quantile_bucket(c, delta ? p : NULL, 99);
	top_dur(mean, sizeof(mean), sum / n);
	if (i < c->n_bounds) {
		p99[0] = '<';
		p99[1] = '=';
		top_dur(p99 + 2, sizeof(p99) - 2, c->bounds_us[i]);
	} else {
		p99[0] = '>';
		top_dur(p99 + 1, sizeof(p99) - 1, c->bounds_us[c->n_bounds - 1]);
	}
	printf("mean %s, p99 %s, %llu %s%s", mean, p99, (unsigned long long)n,
	       many, delta ? " in the last interval" : "");
	top_eol(t);
}

static void top_draw(struct top *t)
{
	const rok_daemon_stats *s = &t->sample->stats;
	const rok_group *g = t->sample->groups;
	size_t ng = t->sample->n_groups;
	struct winsize ws;
	int cols = 80;
	char up[32], age[32];

	if (t->live && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 &&
	    ws.ws_col > 0)
		cols = ws.ws_col;
	if (t->live)
		fputs("\033[H", stdout);
	top_dur(up, sizeof(up), s->uptime_ms * 1000);
	printf("rokd: up %s, %u workers, %u blocking threads, %u connections",
	       up, s->workers, s->blocking_threads, s->connections);
	if (t->live)
		printf("   (every %llums, q quits)",
		       (unsigned long long)t->interval_ms);
	top_eol(t);
	top_eol(t);
	printf("TASKS    queued %llu  running %llu", (unsigned long long)s->queued,
	       (unsigned long long)s->running);
	top_eol(t);
	printf("         since start: created %llu  started %llu",
	       (unsigned long long)s->tasks_total[ROK_TASK_QUEUED],
	       (unsigned long long)s->tasks_total[ROK_TASK_RUNNING]);
	top_eol(t);
	printf("         ended: succeeded %llu  failed %llu  cancelled %llu  "
	       "timed_out %llu  interrupted %llu",
	       (unsigned long long)s->tasks_total[ROK_TASK_SUCCEEDED],
	       (unsigned long long)s->tasks_total[ROK_TASK_FAILED],
	       (unsigned long long)s->tasks_total[ROK_TASK_CANCELLED],
	       (unsigned long long)s->tasks_total[ROK_TASK_TIMED_OUT],
	       (unsigned long long)s->tasks_total[ROK_TASK_INTERRUPTED]);
	top_eol(t);
	if (t->live) {
		size_t width = cols > 40 ? (size_t)cols - 32 : 8;
		if (width > TOP_HISTORY)
			width = TOP_HISTORY;
		printf("RATE     spawns/s %9.1f  ", top_last(t, t->spawns));
		top_spark(t, t->spawns, width);
		top_eol(t);
		printf("         done/s   %9.1f  ", top_last(t, t->dones));
		top_spark(t, t->dones, width);
		top_eol(t);
	}
	top_eol(t);
	printf("%-16s %8s %8s %8s  %s", "GROUP", "RUNNING", "LIMIT", "QUEUED",
	       "urgent/high/normal/low");
	top_eol(t);
	for (size_t i = 0; i < ng && i < TOP_MAX_GROUPS; i++) {
		char limit[24];
		uint64_t q = 0;
		for (int k = 0; k < 4; k++)
			q += g[i].queued[k];
		if (g[i].parallel > 0)
			snprintf(limit, sizeof(limit), "%lu",
				 (unsigned long)g[i].parallel);
		else
			snprintf(limit, sizeof(limit), "-");
		/* Queued by class: urgent, high, normal, low. */
		printf("%-16.*s %8lu %8s %8llu  %llu/%llu/%llu/%llu",
		       (int)g[i].name.len, (const char *)g[i].name.data,
		       (unsigned long)g[i].running, limit,
		       (unsigned long long)q,
		       (unsigned long long)g[i].queued[0],
		       (unsigned long long)g[i].queued[1],
		       (unsigned long long)g[i].queued[2],
		       (unsigned long long)g[i].queued[3]);
		top_eol(t);
	}
	if (ng > TOP_MAX_GROUPS) {
		printf("(%zu more groups)", ng - TOP_MAX_GROUPS);
		top_eol(t);
	}
	top_eol(t);
	printf("OLDEST   ");
	if (t->oldest->n_tasks > 0) {
		const rok_task_info *o = &t->oldest->tasks[0];
		uint64_t now = top_wall_us();
		top_dur(age, sizeof(age), now > o->spawned_us
			? now - o->spawned_us : 0);
		printf("task %llu, queued for %s", (unsigned long long)o->id,
		       age);
		if (o->waiting.len > 0) {
			fputs(": ", stdout);
			print_escaped(stdout, o->waiting.data, o->waiting.len,
				      0);
		}
	} else {
		printf("no queued task");
	}
	top_eol(t);
	top_latency(t, "JOURNAL", "commit", "commits", &s->journal_commit,
		    &t->prev.journal_commit);
	top_latency(t, "START", "spawn->start", "starts", &s->spawn_to_start,
		    &t->prev.spawn_to_start);
	printf("RUNTIME  polls %llu  steals %llu  parks %llu  handoffs %llu  "
	       "injector %llu",
	       (unsigned long long)s->polls, (unsigned long long)s->steals,
	       (unsigned long long)s->parks, (unsigned long long)s->handoffs,
	       (unsigned long long)s->injector_depth);
	top_eol(t);
	if (t->live)
		fputs("\033[J", stdout);
	fflush(stdout);
}

/* ^Z: the terminal as it was, stop; once continued, raw again and
 * redrawn.  0, or -errno if the terminal cannot be set again. */
static int top_suspend(struct top *t)
{
	top_restore();
	signal(SIGTSTP, SIG_DFL);
	raise(SIGTSTP);               /* stopped here until SIGCONT */
	int rc = top_raw();
	if (rc < 0)
		return rc;
	fputs("\033[2J", stdout);
	top_draw(t);
	return 0;
}

/* Waits one interval, reading keys: 1 to quit, 0 to go on. */
static int top_wait(struct top *t)
{
	uint64_t until = top_mono_us() + t->interval_ms * 1000;

	for (;;) {
		uint64_t now = top_mono_us();
		if (top_signalled == SIGTSTP) {
			top_signalled = 0;
			if (top_suspend(t) < 0)
				return 1;
		}
		if (top_signalled != 0 && top_signalled != SIGWINCH)
			return 1;
		if (top_signalled == SIGWINCH) {
			top_signalled = 0;
			top_draw(t);
		}
		if (now >= until)
			return 0;
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
		int n = poll(&p, 1, (int)((until - now + 999) / 1000));
		if (n < 0 && errno != EINTR)
			return 1;
		if (n <= 0)
			continue;
		char key[64];
		ssize_t got = read(STDIN_FILENO, key, sizeof(key));
		if (got <= 0)
			return got == 0 ? 1 : 0;   /* EOF: the terminal went */
		for (ssize_t i = 0; i < got; i++)
			if (key[i] == 'q' || key[i] == 'Q')
				return 1;
	}
}

/* Draws the first sample, and on a terminal goes on sampling until q or
 * a signal; an exit status. */
static int top_run(struct top *t)
{
	int rc;

	if (!t->live) {
		top_draw(t);
		return ROKCTL_EXIT_OK;
	}
	if ((rc = top_raw()) < 0)
		return rokctl_err(t->ctx, ROKCTL_EXIT_TASK, "terminal: %s",
				  strerror(-rc));
	fputs("\033[2J", stdout);
	for (;;) {
		top_draw(t);
		if (top_wait(t))
			break;
		if ((rc = top_sample(t)) != 0) {
			top_restore();
			return rokctl_fail(t->ctx, rc);
		}
	}
	top_restore();
	return ROKCTL_EXIT_OK;
}

static int top_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	struct top t;
	int rc;

	memset(&t, 0, sizeof(t));
	t.ctx = ctx;
	rc = rokctl_duration(ctx, a, KEY_INTERVAL, 1000, &t.interval_ms);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	if (t.interval_ms < TOP_MIN_INTERVAL_MS ||
	    t.interval_ms > TOP_MAX_INTERVAL_MS)
		return rokctl_usage(ctx, "the interval must be between 100ms "
				    "and 1h");
	if (ctx->json)
		return rokctl_usage(ctx, "top has no --json output; use stats "
				    "--json");
	rc = rokctl_connect(ctx);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	t.live = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
	setlocale(LC_CTYPE, "");
	t.utf8 = strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
	if ((rc = top_sample(&t)) != 0)
		return rokctl_fail(ctx, rc);
	rc = top_run(&t);
	rok_reply_free(t.sample);
	rok_reply_free(t.oldest);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	if (top_signalled != 0 && top_signalled != SIGWINCH &&
	    top_signalled != SIGTSTP) {
		/* Die of it, as the shell expects of a ^C'd program. */
		signal(top_signalled, SIG_DFL);
		raise(top_signalled);
	}
	return ROKCTL_EXIT_OK;
}

const struct rokctl_cmd rokctl_cmd_top = {
	.name = "top",
	.operands = "",
	.synopsis = "[-n INTERVAL]",
	.summary = "Watch the daemon live (q quits)",
	.details = "On a terminal: tasks by state, spawns and completions per "
		   "second with their\nrecent history, the groups, your oldest "
		   "queued task, the journal's commit\nlatency; redrawn every "
		   "interval, q quits.  Otherwise: one snapshot.\n",
	.opts = top_opts,
	.min_args = 0,
	.max_args = 0,
	.exec = top_exec,
};
