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
};

static void spawn_done(struct spawn *sp)
{
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
	if (rc == ROKCTL_EXIT_OK && a->seen[KEY_RETRY]) {
		char *end;
		unsigned long n;

		errno = 0;
		n = strtoul(a->val[KEY_RETRY], &end, 10);
		if (errno != 0 || *end != '\0' || end == a->val[KEY_RETRY] ||
		    a->val[KEY_RETRY][0] == '-' || n > UINT32_MAX)
			return rokctl_usage(ctx, "--retry wants a count, not "
					    "'%s'", a->val[KEY_RETRY]);
		sp->spec.retry = (uint32_t)n;
	}
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
	.synopsis = "[-k KIND] [-t TIMEOUT] [-w|-f] [--] ARG...",
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
