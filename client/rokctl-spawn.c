/*
 * rokctl-spawn.c — `rokctl spawn [-k KIND] [-t TIMEOUT] [-w] [--] ARG...`.
 *
 * Turns the operands into a task spec by kind:
 *   exec   ARG... is the argv; the spec also carries this process's
 *          working directory (or -C DIR) and its whole environment (plus
 *          -e NAME=VALUE, which replaces a variable of the same name), so
 *          that `rokctl spawn make` behaves like `make` typed here.
 *          --clean-env sends clean_env and only the -e variables.
 *   noop   no operands.
 *   sleep  DURATION, checked here and sent normalised as "<N>ms".
 *   echo   TEXT... joined with spaces, like echo(1).
 *   other  a plugin kind: the operands are passed through unchanged.
 *
 * --after / --after-any ID,... (dependencies), --at TIME / --in DURATION
 * (a start time: --at is RFC 3339, or HH:MM[:SS] local, the next such
 * time), --retry-failed N --backoff D go into the spec as they are; the
 * daemon checks them.
 *
 * Without --wait it prints the new id alone on a line.  With --wait it
 * prints the finished task as join does and exits by its outcome.  A plain
 * --wait is one waiting spawn request; --wait-timeout spawns, then joins
 * with that timeout, so that on a timeout the id of the still running task
 * can be reported (a waiting spawn that times out has no id to give back).
 * With --follow it spawns, then streams the task's output as `logs -f`
 * does (rokctl-logs.c) and exits by its outcome, as --wait does.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rokctl.h"

extern char **environ;

static const struct rokctl_opt spawn_opts[] = {
	{ KEY_KIND, 'k', "kind", "KIND",
	  "exec (default), noop, sleep, echo, ..." },
	{ KEY_TIMEOUT, 't', "timeout", "TIMEOUT",
	  "the task's own time limit (timed_out)" },
	{ KEY_WAIT, 'w', "wait", NULL, "wait for the task, print its result" },
	{ KEY_WAIT_TIMEOUT, 0, "wait-timeout", "DURATION",
	  "wait at most DURATION (implies --wait)" },
	{ KEY_FOLLOW, 'f', "follow", NULL,
	  "write the task's output as it runs, exit by its outcome" },
	{ KEY_ENV, 'e', "env", "NAME=VALUE", "exec: set a variable (repeatable)" },
	{ KEY_CLEAN_ENV, 0, "clean-env", NULL,
	  "exec: do not send this environment" },
	{ KEY_CWD, 'C', "cwd", "DIR",
	  "exec: run in DIR (default: here)" },
	{ KEY_STDIN, 0, "stdin", "FILE",
	  "exec: feed FILE ('-': stdin) to the task" },
	{ KEY_RETRY, 0, "retry", "N", "re-run up to N times after a daemon crash" },
	{ KEY_KILL_GRACE, 0, "kill-grace", "DURATION",
	  "exec: SIGTERM to SIGKILL delay on cancel" },
	{ KEY_GROUP, 'g', "group", "GROUP",
	  "run in GROUP (default: default)" },
	{ KEY_PRIORITY, 'p', "priority", "PRIORITY",
	  "urgent, high, normal (default) or low" },
	{ KEY_AFTER, 0, "after", "ID[,ID...]",
	  "start once these succeeded (else cancelled)" },
	{ KEY_AFTER_ANY, 0, "after-any", "ID[,ID...]",
	  "start once these ended, however" },
	{ KEY_AT, 0, "at", "TIME",
	  "not before TIME (RFC 3339, or local HH:MM)" },
	{ KEY_IN, 0, "in", "DURATION", "not before DURATION from now" },
	{ KEY_RETRY_FAILED, 0, "retry-failed", "N",
	  "run again up to N times after a failure" },
	{ KEY_BACKOFF, 0, "backoff", "DURATION",
	  "wait DURATION, 2x, 4x... before each retry" },
	{ KEY_CPUS, 0, "cpus", "N", "slurm group: CPUs of the job" },
	{ KEY_MEM, 0, "mem", "SIZE",
	  "slurm group: memory of the job (MiB, or K/M/G/T suffix)" },
	{ KEY_TIME, 0, "time", "DURATION",
	  "slurm group: the job's time limit (Slurm's; timed_out)" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

/* Everything a spec borrows, freed by spawn_done. */
struct spawn {
	rok_spec spec;
	char cwd[PATH_MAX];
	const char **env;
	char *text;           /* echo: the joined text */
	char sleep_arg[32];
	const char *sleep_argv[1];
	uint8_t *input;
	uint64_t *after, *after_any;
};

static void spawn_done(struct spawn *sp)
{
	free(sp->after);
	free(sp->after_any);
	free(sp->env);
	free(sp->text);
	free(sp->input);
}

/* The length of NAME in "NAME=value" (the whole string if no '='). */
static size_t spawn_name_len(const char *s)
{
	const char *eq = strchr(s, '=');

	return eq != NULL ? (size_t)(eq - s) : strlen(s);
}

static bool spawn_overridden(const struct rokctl_args *a, const char *var)
{
	size_t n = spawn_name_len(var);

	for (size_t i = 0; i < a->n_env; i++) {
		if (spawn_name_len(a->env[i]) == n &&
		    strncmp(a->env[i], var, n) == 0)
			return true;
	}
	return false;
}

static int spawn_env(struct rokctl *ctx, const struct rokctl_args *a,
		     struct spawn *sp)
{
	size_t n = 0, k = 0;

	for (size_t i = 0; i < a->n_env; i++) {
		if (strchr(a->env[i], '=') == NULL || a->env[i][0] == '=')
			return rokctl_usage(ctx, "-e wants NAME=VALUE, not '%s'",
					    a->env[i]);
	}
	if (!a->seen[KEY_CLEAN_ENV] && environ != NULL) {
		while (environ[n] != NULL)
			n++;
	}
	sp->env = calloc(n + a->n_env + 1, sizeof(*sp->env));
	if (sp->env == NULL)
		return rokctl_err(ctx, ROKCTL_EXIT_TASK, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (!spawn_overridden(a, environ[i]))
			sp->env[k++] = environ[i];
	}
	for (size_t i = 0; i < a->n_env; i++)
		sp->env[k++] = a->env[i];
	sp->spec.env = sp->env;
	sp->spec.n_env = k;
	sp->spec.clean_env = a->seen[KEY_CLEAN_ENV];
	return ROKCTL_EXIT_OK;
}

static int spawn_cwd(struct rokctl *ctx, const struct rokctl_args *a,
		     struct spawn *sp)
{
	const char *dir = a->val[KEY_CWD];

	if (dir != NULL && dir[0] == '/') {
		sp->spec.cwd = dir;
		return ROKCTL_EXIT_OK;
	}
	if (getcwd(sp->cwd, sizeof(sp->cwd)) == NULL)
		return rokctl_err(ctx, ROKCTL_EXIT_TASK, "cannot tell the "
				  "current directory (%s); give one with -C",
				  strerror(errno));
	if (dir != NULL) {   /* relative to ours: the daemon's differs */
		size_t n = strlen(sp->cwd);

		if (n + 1 + strlen(dir) >= sizeof(sp->cwd))
			return rokctl_usage(ctx, "directory name too long");
		snprintf(sp->cwd + n, sizeof(sp->cwd) - n, "%s%s",
			 n > 1 ? "/" : "", dir);
	}
	sp->spec.cwd = sp->cwd;
	return ROKCTL_EXIT_OK;
}

/* Reads FILE (or standard input) whole; bounded by the frame cap later. */
static int spawn_stdin(struct rokctl *ctx, const char *path, struct spawn *sp)
{
	int fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	size_t len = 0, cap = 0;
	const size_t max = 64u << 20;

	if (fd < 0)
		return rokctl_err(ctx, ROKCTL_EXIT_TASK, "%s: %s", path,
				  strerror(errno));
	for (;;) {
		ssize_t n;

		if (len == cap) {
			uint8_t *p;

			cap = cap != 0 ? cap * 2 : 65536;
			if (cap > max)
				cap = max + 1;
			p = realloc(sp->input, cap);
			if (p == NULL) {
				if (fd != 0)
					close(fd);
				return rokctl_err(ctx, ROKCTL_EXIT_TASK,
						  "out of memory");
			}
			sp->input = p;
		}
		n = read(fd, sp->input + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			if (fd != 0)
				close(fd);
			return rokctl_err(ctx, ROKCTL_EXIT_TASK, "%s: %s", path,
					  strerror(e));
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max) {
			if (fd != 0)
				close(fd);
			return rokctl_err(ctx, ROKCTL_EXIT_REFUSED, "%s: more "
					  "than 64 MiB of input", path);
		}
	}
	if (fd != 0)
		close(fd);
	sp->spec.stdin_data = sp->input;
	sp->spec.stdin_len = len;
	return ROKCTL_EXIT_OK;
}

/* "ID[,ID...]" into a new array: an exit status. */
static int spawn_ids(struct rokctl *ctx, const char *flag, const char *s,
		     uint64_t **out, size_t *n)
{
	size_t cap = 1;

	for (const char *p = s; *p != '\0'; p++)
		cap += *p == ',';
	*out = calloc(cap, sizeof(**out));
	if (*out == NULL)
		return rokctl_err(ctx, ROKCTL_EXIT_TASK, "out of memory");
	*n = 0;
	for (const char *p = s;;) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(p, &end, 10);
		if (errno != 0 || end == p || v == 0 || *p == '-' ||
		    (*end != ',' && *end != '\0'))
			return rokctl_usage(ctx, "%s wants task ids separated by "
					    "commas, not '%s'", flag, s);
		(*out)[(*n)++] = v;
		if (*end == '\0')
			return ROKCTL_EXIT_OK;
		p = end + 1;
	}
}

/* The count option `key` (left as it is if not given); an exit status. */
static int spawn_count(struct rokctl *ctx, const struct rokctl_args *a,
		       int key, const char *flag, uint32_t *out)
{
	const char *s = a->val[key];
	char *end;
	unsigned long n;

	if (!a->seen[key])
		return ROKCTL_EXIT_OK;
	errno = 0;
	n = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || s[0] == '-' ||
	    n > UINT32_MAX)
		return rokctl_usage(ctx, "%s wants a count, not '%s'", flag, s);
	*out = (uint32_t)n;
	return ROKCTL_EXIT_OK;
}

static uint64_t spawn_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/*
 * --at TIME: RFC 3339 ("2026-12-01T18:00:00Z", "...+01:00", fractions
 * of a second allowed, a space for the T too), or HH:MM[:SS] in local time:
 * the next such time (today, or tomorrow if it has passed).  0 or -EINVAL.
 */
static int spawn_at_parse(const char *s, uint64_t now_us, uint64_t *us)
{
	struct tm tm = { 0 };
	const char *p;
	time_t t;

	if ((p = strptime(s, "%H:%M", &tm)) != NULL &&
	    (*p == '\0' || (*p == ':' && (p = strptime(p, ":%S", &tm)) != NULL
			    && *p == '\0'))) {
		time_t now = (time_t)(now_us / 1000000);
		struct tm today;
		if (localtime_r(&now, &today) == NULL)
			return -EINVAL;
		/* Today at that time, else tomorrow. */
		for (int day = 0; day < 2; day++) {
			struct tm when = today;
			when.tm_mday += day;   /* mktime normalises */
			when.tm_hour = tm.tm_hour;
			when.tm_min = tm.tm_min;
			when.tm_sec = tm.tm_sec;
			when.tm_isdst = -1;
			t = mktime(&when);
			if (t == (time_t)-1 || (uint64_t)t * 1000000 > now_us)
				break;
		}
		if (t == (time_t)-1 || t < 0)
			return -EINVAL;
		*us = (uint64_t)t * 1000000;
		return 0;
	}
	memset(&tm, 0, sizeof(tm));
	p = strptime(s, "%Y-%m-%d", &tm);
	if (p == NULL || (*p != 'T' && *p != 't' && *p != ' '))
		return -EINVAL;
	p = strptime(p + 1, "%H:%M:%S", &tm);
	if (p == NULL)
		return -EINVAL;
	uint64_t frac = 0, scale = 1000000;
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++) {
			scale /= 10;
			frac += (uint64_t)(*p - '0') * scale;
		}
	}
	long off;
	if (*p == 'Z' || *p == 'z') {
		off = 0;
		p++;
	} else if ((*p == '+' || *p == '-') && p[1] >= '0' && p[1] <= '9' &&
		   p[2] >= '0' && p[2] <= '9' && p[3] == ':' && p[4] >= '0' &&
		   p[4] <= '9' && p[5] >= '0' && p[5] <= '9') {
		off = ((p[1] - '0') * 10 + (p[2] - '0')) * 3600L +
		      ((p[4] - '0') * 10 + (p[5] - '0')) * 60L;
		if (*p == '-')
			off = -off;
		p += 6;
	} else {
		return -EINVAL;   /* RFC 3339 always names its offset */
	}
	if (*p != '\0' || (t = timegm(&tm)) == (time_t)-1 || t - off < 0)
		return -EINVAL;
	*us = (uint64_t)(t - off) * 1000000 + frac;
	return 0;
}

/* --after, --after-any, --at, --in, --retry-failed, --backoff. */
static int spawn_when(struct rokctl *ctx, const struct rokctl_args *a,
		      struct spawn *sp)
{
	int rc = ROKCTL_EXIT_OK;

	if (a->seen[KEY_AFTER])
		rc = spawn_ids(ctx, "--after", a->val[KEY_AFTER], &sp->after,
			       &sp->spec.n_after);
	if (rc == ROKCTL_EXIT_OK && a->seen[KEY_AFTER_ANY])
		rc = spawn_ids(ctx, "--after-any", a->val[KEY_AFTER_ANY],
			       &sp->after_any, &sp->spec.n_after_any);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	sp->spec.after = sp->after;
	sp->spec.after_any = sp->after_any;
	if (a->seen[KEY_AT] && a->seen[KEY_IN])
		return rokctl_usage(ctx, "give --at or --in, not both");
	if (a->seen[KEY_AT] && spawn_at_parse(a->val[KEY_AT], spawn_now_us(),
					      &sp->spec.not_before_us) < 0)
		return rokctl_usage(ctx, "--at wants a time such as 18:30 or "
				    "2026-12-01T18:30:00+01:00, not '%s'",
				    a->val[KEY_AT]);
	if (a->seen[KEY_IN]) {
		uint64_t ms;
		rc = rokctl_duration(ctx, a, KEY_IN, 0, &ms);
		if (rc != ROKCTL_EXIT_OK)
			return rc;
		sp->spec.not_before_us = spawn_now_us() + ms * 1000;
	}
	rc = spawn_count(ctx, a, KEY_RETRY_FAILED, "--retry-failed",
			 &sp->spec.retry_failed);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	return rokctl_duration(ctx, a, KEY_BACKOFF, 0, &sp->spec.backoff_ms);
}

/* --cpus, --mem, --time (a slurm group's job; the daemon checks). */
static int spawn_slurm(struct rokctl *ctx, const struct rokctl_args *a,
		       struct spawn *sp)
{
	char *end;
	unsigned long long n;

	if (a->seen[KEY_CPUS]) {
		errno = 0;
		n = strtoull(a->val[KEY_CPUS], &end, 10);
		if (errno != 0 || *end != '\0' || end == a->val[KEY_CPUS] ||
		    a->val[KEY_CPUS][0] == '-' || n == 0 || n > UINT32_MAX)
			return rokctl_usage(ctx, "--cpus wants a count, not '%s'",
					    a->val[KEY_CPUS]);
		sp->spec.cpus = (uint32_t)n;
	}
	if (a->seen[KEY_MEM]) {
		const char *v = a->val[KEY_MEM];
		unsigned shift = 0;   /* MiB to MiB */
		errno = 0;
		n = strtoull(v, &end, 10);
		if (*end == 'K' || *end == 'k')
			shift = 1;    /* rounded up below */
		else if (*end == 'G' || *end == 'g')
			shift = 10;
		else if (*end == 'T' || *end == 't')
			shift = 20;
		else if (*end != 'M' && *end != 'm' && *end != '\0')
			shift = 99;
		if (*end != '\0')
			end++;
		if (errno != 0 || *end != '\0' || end == v || v[0] == '-' ||
		    n == 0 || shift == 99 || n > (1ull << 30))
			return rokctl_usage(ctx, "--mem wants a size such as 512M "
					    "or 4G, not '%s'", v);
		sp->spec.mem_mib = shift == 1 ? (n + 1023) / 1024 : n << shift;
	}
	return rokctl_duration(ctx, a, KEY_TIME, 0, &sp->spec.time_limit_ms);
}

/* Builds sp->spec from the command line; an exit status. */
static int spawn_build(struct rokctl *ctx, const struct rokctl_args *a,
		       struct spawn *sp)
{
	const char *kind = a->seen[KEY_KIND] ? a->val[KEY_KIND] : "exec";
	bool exec = strcmp(kind, "exec") == 0;
	int rc;

	sp->spec.kind = kind;
	sp->spec.args = (const char *const *)a->argv;
	sp->spec.n_args = (size_t)a->argc;
	if (kind[0] == '\0')
		return rokctl_usage(ctx, "empty kind");
	if (!exec && (a->n_env > 0 || a->seen[KEY_CLEAN_ENV] ||
		      a->seen[KEY_CWD] || a->seen[KEY_STDIN] ||
		      a->seen[KEY_KILL_GRACE]))
		return rokctl_usage(ctx, "-e, --clean-env, -C, --stdin and "
				    "--kill-grace apply to exec tasks only");
	if (exec) {
		if (a->argc == 0)
			return rokctl_usage(ctx, "exec needs a command to run");
		rc = spawn_env(ctx, a, sp);
		if (rc == ROKCTL_EXIT_OK)
			rc = spawn_cwd(ctx, a, sp);
		if (rc == ROKCTL_EXIT_OK && a->seen[KEY_STDIN])
			rc = spawn_stdin(ctx, a->val[KEY_STDIN], sp);
		if (rc != ROKCTL_EXIT_OK)
			return rc;
	} else if (strcmp(kind, "noop") == 0) {
		if (a->argc > 0)
			return rokctl_usage(ctx, "noop takes no operands");
	} else if (strcmp(kind, "sleep") == 0) {
		uint64_t ms;

		if (a->argc != 1)
			return rokctl_usage(ctx, "sleep takes one DURATION");
		rc = rok_duration_parse(a->argv[0], &ms);
		if (rc == -ERANGE)
			return rokctl_usage(ctx, "duration '%s' is too long (at "
					    "most 87600h)", a->argv[0]);
		if (rc < 0)
			return rokctl_usage(ctx, "'%s' is not a duration (write "
					    "e.g. 250ms, 5s, 2m, 1h)",
					    a->argv[0]);
		snprintf(sp->sleep_arg, sizeof(sp->sleep_arg), "%llums",
			 (unsigned long long)ms);
		sp->sleep_argv[0] = sp->sleep_arg;
		sp->spec.args = sp->sleep_argv;
		sp->spec.n_args = 1;
	} else if (strcmp(kind, "echo") == 0) {
		size_t len = 1;

		if (a->argc == 0)
			return rokctl_usage(ctx, "echo needs TEXT");
		for (int i = 0; i < a->argc; i++)
			len += strlen(a->argv[i]) + 1;
		sp->text = malloc(len);
		if (sp->text == NULL)
			return rokctl_err(ctx, ROKCTL_EXIT_TASK, "out of memory");
		sp->text[0] = '\0';
		for (int i = 0; i < a->argc; i++) {
			if (i > 0)
				strcat(sp->text, " ");
			strcat(sp->text, a->argv[i]);
		}
		sp->spec.args = (const char *const *)&sp->text;
		sp->spec.n_args = 1;
	}
	rc = rokctl_duration(ctx, a, KEY_TIMEOUT, 0, &sp->spec.timeout_ms);
	if (rc == ROKCTL_EXIT_OK)
		rc = rokctl_duration(ctx, a, KEY_KILL_GRACE, 0,
				     &sp->spec.kill_grace_ms);
	if (rc == ROKCTL_EXIT_OK)
		rc = spawn_count(ctx, a, KEY_RETRY, "--retry", &sp->spec.retry);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	if (a->seen[KEY_GROUP])
		sp->spec.group = a->val[KEY_GROUP];
	if (a->seen[KEY_PRIORITY] &&
	    (sp->spec.priority = rok_priority_parse(a->val[KEY_PRIORITY])) < 0)
		return rokctl_usage(ctx, "--priority wants urgent, high, normal "
				    "or low, not '%s'", a->val[KEY_PRIORITY]);
	rc = spawn_when(ctx, a, sp);
	if (rc == ROKCTL_EXIT_OK)
		rc = spawn_slurm(ctx, a, sp);
	return rc;
}

/* Prints a waited-for task and returns its exit status. */
static int spawn_show(struct rokctl *ctx, const rok_task_info *t)
{
	struct print_table tab = { 0 };

	print_tasks(ctx, &tab, t, 1, -1);
	return print_outcome(t, 1);
}

static int spawn_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	struct spawn sp = { 0 };
	bool wait = a->seen[KEY_WAIT] || a->seen[KEY_WAIT_TIMEOUT];
	uint64_t wait_ms, id;
	rok_reply *r = NULL;
	int rc;

	rc = spawn_build(ctx, a, &sp);
	if (rc == ROKCTL_EXIT_OK)
		rc = rokctl_duration(ctx, a, KEY_WAIT_TIMEOUT, 0, &wait_ms);
	if (rc == ROKCTL_EXIT_OK)
		rc = rokctl_connect(ctx);
	if (rc != ROKCTL_EXIT_OK)
		goto out;

	if (a->seen[KEY_FOLLOW] && wait) {
		rc = rokctl_usage(ctx, "--follow waits already: it does not go "
				  "with --wait or --wait-timeout");
		goto out;
	}
	if (wait && !a->seen[KEY_WAIT_TIMEOUT]) {
		rok_client_set_timeout(ctx->client, 0);   /* as long as it runs */
		rc = rok_client_spawn_wait(ctx->client, &sp.spec, 0, &r);
		rc = rc != 0 ? rokctl_fail(ctx, rc) : spawn_show(ctx, &r->tasks[0]);
		goto out;
	}
	rc = rok_client_spawn(ctx->client, &sp.spec, &id);
	if (rc != 0) {
		rc = rokctl_fail(ctx, rc);
		goto out;
	}
	if (a->seen[KEY_FOLLOW]) {
		rc = logs_stream(ctx, id, true);
		goto out;
	}
	if (!wait) {
		if (ctx->json)   /* acknowledged = accepted, not yet started */
			printf("{\"id\":%llu,\"state\":\"queued\"}\n",
			       (unsigned long long)id);
		else
			printf("%llu\n", (unsigned long long)id);
		goto out;
	}
	rok_client_set_timeout(ctx->client, 0);
	rc = rok_client_join(ctx->client, &id, 1, wait_ms, &r);
	if (rc == ROK_E_TIMED_OUT)
		rc = rokctl_err(ctx, ROKCTL_EXIT_TIMEOUT, "task %llu still "
				"running after %s", (unsigned long long)id,
				a->val[KEY_WAIT_TIMEOUT]);
	else if (rc != 0)
		rc = rokctl_fail(ctx, rc);
	else if (r->n_tasks != 1)
		rc = rokctl_err(ctx, ROKCTL_EXIT_UNREACHABLE, "the daemon "
				"answered the join of task %llu with %zu tasks",
				(unsigned long long)id, r->n_tasks);
	else
		rc = spawn_show(ctx, &r->tasks[0]);
out:
	rok_reply_free(r);
	spawn_done(&sp);
	return rc;
}

const struct rokctl_cmd rokctl_cmd_spawn = {
	.name = "spawn",
	.operands = "[--] ARG...",
	.synopsis = "[-k KIND] [-t TIMEOUT] [-g GROUP] [-p PRIORITY] [-w|-f] "
		    "[--] ARG...",
	.summary = "Start a task and print its id",
	.details =
		"Kinds: exec ARG... (the default; runs ARG... with this\n"
		"directory and environment), noop, sleep DURATION, echo TEXT.\n"
		"Prints the new task id alone on a line; with --wait, the\n"
		"finished task as 'join' prints it, and exits by its outcome.\n"
		"With --follow, writes the task's output as it runs (as 'logs -f'\n"
		"does) and exits by its outcome.\n",
	.opts = spawn_opts,
	.min_args = 0,
	.max_args = -1,
	.exec = spawn_exec,
};
