/*
 * rokctl.c — rokctl's main: the command table, the command-line parser
 * driven by each command's option table, the help it prints from the same
 * tables, and the one place that turns library errors into messages and
 * exit statuses.  The commands themselves live in rokctl-CMD.c.
 *
 * rokctl [-s SOCKET] [--json] COMMAND [OPTION]... [OPERAND]...
 *
 * Options stop at the first operand (getopt's "+" mode), so
 * `rokctl spawn ls -l` passes -l to ls.  The global options may also be
 * given after the command name (`rokctl join --json 4`).  Messages go to
 * stderr, prefixed "rokctl: COMMAND:"; results go to stdout.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rokctl.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "0"
#endif

const struct rokctl_cmd *const rokctl_cmds[] = {
	&rokctl_cmd_spawn,
	&rokctl_cmd_join,
	&rokctl_cmd_race,
	&rokctl_cmd_cancel,
	&rokctl_cmd_status,
	&rokctl_cmd_list,
	&rokctl_cmd_logs,
	&rokctl_cmd_stats,
	&rokctl_cmd_top,
	&rokctl_cmd_ping,
	&rokctl_cmd_prune,
	&rokctl_cmd_group,
	&rokctl_cmd_watch,
	&rokctl_cmd_help,
	NULL
};

/* Options every command accepts too, after its own. */
static const struct rokctl_opt rokctl_common_opts[] = {
	{ KEY_SOCKET, 's', "socket", "SOCKET", "the daemon's socket" },
	{ KEY_JSON, 0, "json", NULL, "print JSON, one object per line" },
	{ KEY_HELP, 'h', "help", NULL, "show this help" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static const char rokctl_exit_help[] =
	"Exit status (when several apply, the highest wins):\n"
	"  0  success; join, race, spawn -w/-f, watch ID: the tasks succeeded\n"
	"  1  a task ended unsuccessfully (failed, cancelled, timed_out,\n"
	"     interrupted), or a local error (out of memory, output)\n"
	"  2  usage error\n"
	"  3  the daemon refused the request or a task id (not found,\n"
	"     permission denied, invalid argument, over a limit)\n"
	"  4  cannot reach the daemon (no socket, connection lost, protocol\n"
	"     mismatch, daemon unavailable or shutting down, no answer)\n"
	"  5  the wait timeout (-t, --wait-timeout) passed first\n";

static const char rokctl_socket_help[] =
	"The socket is -s SOCKET, else $ROK_SOCKET, else /run/rok/rokd.sock\n"
	"for root, else $XDG_RUNTIME_DIR/rok/rokd.sock, else\n"
	"/tmp/rok-UID/rokd.sock.  Durations: 250ms, 5s, 2m, 1h, 1m30s, 1.5s.\n";

static void rokctl_main_help(FILE *f)
{
	fprintf(f, "Usage: rokctl [-s SOCKET] [--json] COMMAND [OPTION]... "
		"[OPERAND]...\n"
		"Submit, wait for and inspect tasks of rokd, the rok "
		"task-execution daemon.\n\nCommands:\n");
	for (size_t i = 0; rokctl_cmds[i] != NULL; i++) {
		const struct rokctl_cmd *cmd = rokctl_cmds[i];
		char syn[128];

		snprintf(syn, sizeof(syn), "%s %s", cmd->name, cmd->synopsis);
		if (strlen(syn) > 36)
			fprintf(f, "  %s\n  %-36s %s\n", syn, "", cmd->summary);
		else
			fprintf(f, "  %-36s %s\n", syn, cmd->summary);
	}
	fprintf(f, "\nOptions:\n"
		"  -s, --socket SOCKET      the daemon's socket\n"
		"      --json               JSON output, one object per line\n"
		"  -h, --help               show this help\n"
		"  -V, --version            show the version\n\n%s\n%s\n"
		"'rokctl help COMMAND' describes a command; see rokctl(1).\n",
		rokctl_socket_help, rokctl_exit_help);
}

static void rokctl_opt_help(FILE *f, const struct rokctl_opt *o)
{
	char left[64];
	int n = 0;

	if (o->short_name != 0)
		n = snprintf(left, sizeof(left), "-%c, ", o->short_name);
	else
		n = snprintf(left, sizeof(left), "    ");
	snprintf(left + n, sizeof(left) - (size_t)n, "--%s%s%s", o->long_name,
		 o->arg != NULL ? " " : "", o->arg != NULL ? o->arg : "");
	fprintf(f, "  %-28s %s\n", left, o->help);
}

void rokctl_print_help(FILE *f, const struct rokctl_cmd *cmd)
{
	fprintf(f, "Usage: rokctl %s%s %s\n%s.\n", cmd->name,
		cmd->opts[0].key != KEY_NONE ? " [OPTION]..." : "",
		cmd->operands, cmd->summary);
	if (cmd->details != NULL)
		fprintf(f, "\n%s", cmd->details);
	fprintf(f, "\nOptions:\n");
	for (const struct rokctl_opt *o = cmd->opts; o->key != KEY_NONE; o++)
		rokctl_opt_help(f, o);
	for (const struct rokctl_opt *o = rokctl_common_opts;
	     o->key != KEY_NONE; o++)
		rokctl_opt_help(f, o);
	fprintf(f, "\n%s", rokctl_exit_help);
}

const struct rokctl_cmd *rokctl_find(const char *name)
{
	for (size_t i = 0; rokctl_cmds[i] != NULL; i++) {
		if (strcmp(rokctl_cmds[i]->name, name) == 0)
			return rokctl_cmds[i];
	}
	return NULL;
}

/* ---- messages and exit statuses ------------------------------------- */

__attribute__((format(printf, 2, 0)))
static void rokctl_vmsg(struct rokctl *ctx, const char *fmt, va_list ap)
{
	fflush(stdout);   /* keep results and messages in order on a tty */
	if (ctx->cmd != NULL)
		fprintf(stderr, "%s: %s: ", ctx->prog, ctx->cmd->name);
	else
		fprintf(stderr, "%s: ", ctx->prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

int rokctl_usage(struct rokctl *ctx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	rokctl_vmsg(ctx, fmt, ap);
	va_end(ap);
	if (ctx->cmd != NULL)
		fprintf(stderr, "Try '%s help %s'.\n", ctx->prog,
			ctx->cmd->name);
	else
		fprintf(stderr, "Try '%s --help'.\n", ctx->prog);
	return ROKCTL_EXIT_USAGE;
}

int rokctl_err(struct rokctl *ctx, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	rokctl_vmsg(ctx, fmt, ap);
	va_end(ap);
	return code;
}

static int rokctl_exit_for(int rc)
{
	if (rc == 0)
		return ROKCTL_EXIT_OK;
	if (rc > 0) {
		switch (rc) {
		case ROK_E_TIMED_OUT:
			return ROKCTL_EXIT_TIMEOUT;
		case ROK_E_UNAVAILABLE:
		case ROK_E_CANCELLED:
			return ROKCTL_EXIT_UNREACHABLE;
		default:
			return ROKCTL_EXIT_REFUSED;
		}
	}
	switch (-rc) {
	case ENOMEM:
	case EINVAL:
		return ROKCTL_EXIT_TASK;
	case EMSGSIZE:
		return ROKCTL_EXIT_REFUSED;
	default:   /* connect, transport and protocol errors */
		return ROKCTL_EXIT_UNREACHABLE;
	}
}

int rokctl_fail(struct rokctl *ctx, int rc)
{
	const char *msg = "";

	if (ctx->client != NULL)
		rok_client_last_error(ctx->client, &msg);
	fflush(stdout);
	if (ctx->cmd != NULL)
		fprintf(stderr, "%s: %s: ", ctx->prog, ctx->cmd->name);
	if (rc > 0) {
		/* The daemon's words: escaped, they are not ours to trust. */
		print_escaped(stderr, msg, strlen(msg), 0);
		fprintf(stderr, "%s(%s)\n", msg[0] != '\0' ? " " : "",
			rok_error_name(rc));
	} else {
		if (msg[0] == '\0')
			msg = strerror(-rc);
		print_escaped(stderr, msg, strlen(msg), 0);
		fputc('\n', stderr);
		if (rc == -ENOENT || rc == -ECONNREFUSED)
			fprintf(stderr, "%s: is rokd running?  Choose the "
				"socket with -s or $ROK_SOCKET.\n", ctx->prog);
	}
	return rokctl_exit_for(rc);
}

int rokctl_connect(struct rokctl *ctx)
{
	int rc;

	if (ctx->client != NULL)
		return ROKCTL_EXIT_OK;
	ctx->client = rok_client_new("rokctl " PACKAGE_VERSION);
	if (ctx->client == NULL)
		return rokctl_err(ctx, ROKCTL_EXIT_TASK, "out of memory");
	rok_client_set_timeout(ctx->client, 10000);
	rc = rok_client_connect(ctx->client, ctx->socket);
	if (rc != 0) {
		/* Whatever went wrong, there is no daemon to talk to. */
		rokctl_fail(ctx, rc);
		return ROKCTL_EXIT_UNREACHABLE;
	}
	rok_client_set_timeout(ctx->client, ROKCTL_CALL_TIMEOUT_MS);
	return ROKCTL_EXIT_OK;
}

/* ---- operand helpers ------------------------------------------------ */

static bool rokctl_parse_u64(const char *s, uint64_t *v)
{
	uint64_t n = 0;

	if (*s == '\0')
		return false;
	for (; *s != '\0'; s++) {
		if (*s < '0' || *s > '9' || n > (UINT64_MAX - 9) / 10)
			return false;
		n = n * 10 + (uint64_t)(*s - '0');
	}
	*v = n;
	return true;
}

static int rokctl_ids(struct rokctl *ctx, const struct rokctl_args *a,
		      uint64_t **ids)
{
	uint64_t *v = calloc((size_t)a->argc + 1, sizeof(*v));

	*ids = NULL;
	if (v == NULL)
		return rokctl_err(ctx, ROKCTL_EXIT_TASK, "out of memory");
	for (int i = 0; i < a->argc; i++) {
		if (!rokctl_parse_u64(a->argv[i], &v[i]) || v[i] == 0) {
			free(v);
			return rokctl_usage(ctx, "'%s' is not a task id",
					    a->argv[i]);
		}
	}
	*ids = v;
	return ROKCTL_EXIT_OK;
}

int rokctl_duration(struct rokctl *ctx, const struct rokctl_args *a, int key,
		    uint64_t def, uint64_t *ms)
{
	int rc;

	*ms = def;
	if (!a->seen[key])
		return ROKCTL_EXIT_OK;
	rc = rok_duration_parse(a->val[key], ms);
	if (rc == -ERANGE)
		return rokctl_usage(ctx, "duration '%s' is too long (at most "
				    "87600h)", a->val[key]);
	if (rc < 0)
		return rokctl_usage(ctx, "'%s' is not a duration (write e.g. "
				    "250ms, 5s, 2m, 1h, 1m30s)", a->val[key]);
	return ROKCTL_EXIT_OK;
}

int rokctl_open_ids(struct rokctl *ctx, const struct rokctl_args *a,
		    uint64_t **ids, uint64_t *wait_ms)
{
	int rc = rokctl_ids(ctx, a, ids);

	if (rc == ROKCTL_EXIT_OK && wait_ms != NULL)
		rc = rokctl_duration(ctx, a, KEY_TIMEOUT, 0, wait_ms);
	if (rc == ROKCTL_EXIT_OK)
		rc = rokctl_connect(ctx);
	if (rc == ROKCTL_EXIT_OK && wait_ms != NULL)
		rok_client_set_timeout(ctx->client, 0);   /* the daemon keeps time */
	return rc;
}

/* ---- parsing -------------------------------------------------------- */

static const struct rokctl_opt *rokctl_opt_by_short(
	const struct rokctl_cmd *cmd, int c)
{
	const struct rokctl_opt *tabs[] = { cmd->opts, rokctl_common_opts };

	for (size_t t = 0; t < 2; t++) {
		for (const struct rokctl_opt *o = tabs[t]; o->key != KEY_NONE;
		     o++) {
			if (o->short_name == c)
				return o;
		}
	}
	return NULL;
}

/*
 * Parses argv (argv[0] is the command's name) against cmd's table into a.
 * An exit status; -1 when the command should run.
 */
static int rokctl_parse(struct rokctl *ctx, const struct rokctl_cmd *cmd,
			int argc, char **argv, struct rokctl_args *a)
{
	struct option lopts[KEY__COUNT * 2 + 1];
	char sopts[KEY__COUNT * 2 + 3] = "+:";
	size_t nl = 0, ns = 2;
	const struct rokctl_opt *tabs[] = { cmd->opts, rokctl_common_opts };
	int c;

	memset(a, 0, sizeof(*a));
	a->env = calloc((size_t)argc + 1, sizeof(*a->env));
	if (a->env == NULL)
		return rokctl_err(ctx, ROKCTL_EXIT_TASK, "out of memory");
	for (size_t t = 0; t < 2; t++) {
		for (const struct rokctl_opt *o = tabs[t]; o->key != KEY_NONE;
		     o++) {
			lopts[nl++] = (struct option){
				o->long_name,
				o->arg != NULL ? required_argument : no_argument,
				NULL, 256 + o->key };
			if (o->short_name != 0) {
				sopts[ns++] = o->short_name;
				if (o->arg != NULL)
					sopts[ns++] = ':';
			}
		}
	}
	lopts[nl] = (struct option){ NULL, 0, NULL, 0 };
	sopts[ns] = '\0';

	optind = 0;    /* glibc: start over, the global options used it */
	opterr = 0;
	while ((c = getopt_long(argc, argv, sopts, lopts, NULL)) != -1) {
		const struct rokctl_opt *o = NULL;
		int key;

		if (c == '?') {
			if (optopt != 0)
				return rokctl_usage(ctx, "unknown option -%c",
						    optopt);
			return rokctl_usage(ctx, "unknown option %s",
					    argv[optind - 1]);
		}
		if (c == ':') {
			if (optopt != 0 && optopt < 256)
				return rokctl_usage(ctx, "option -%c needs a "
						    "value", optopt);
			return rokctl_usage(ctx, "option %s needs a value",
					    argv[optind - 1]);
		}
		if (c >= 256)
			key = c - 256;
		else if ((o = rokctl_opt_by_short(cmd, c)) != NULL)
			key = o->key;
		else
			return rokctl_usage(ctx, "unknown option -%c", c);
		a->seen[key] = true;
		a->val[key] = optarg;
		if (key == KEY_ENV)
			a->env[a->n_env++] = optarg;
	}
	a->argc = argc - optind;
	a->argv = argv + optind;
	if (a->seen[KEY_HELP]) {
		rokctl_print_help(stdout, cmd);
		return ROKCTL_EXIT_OK;
	}
	if (a->seen[KEY_JSON])
		ctx->json = true;
	if (a->seen[KEY_SOCKET])
		ctx->socket = a->val[KEY_SOCKET];
	if (a->argc < cmd->min_args)
		return rokctl_usage(ctx, a->argc == 0 ? "missing operand" :
				    "too few operands");
	if (cmd->max_args >= 0 && a->argc > cmd->max_args)
		return rokctl_usage(ctx, "unexpected operand '%s'",
				    a->argv[cmd->max_args]);
	return -1;
}

/* ---- help command --------------------------------------------------- */

static int rokctl_help_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	const struct rokctl_cmd *cmd;

	if (a->argc == 0) {
		rokctl_main_help(stdout);
		return ROKCTL_EXIT_OK;
	}
	cmd = rokctl_find(a->argv[0]);
	if (cmd == NULL)
		return rokctl_usage(ctx, "unknown command '%s'", a->argv[0]);
	rokctl_print_help(stdout, cmd);
	return ROKCTL_EXIT_OK;
}

static const struct rokctl_opt rokctl_help_opts[] = {
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

const struct rokctl_cmd rokctl_cmd_help = {
	.name = "help",
	.operands = "[COMMAND]",
	.synopsis = "[COMMAND]",
	.summary = "Describe rokctl or a command",
	.opts = rokctl_help_opts,
	.min_args = 0,
	.max_args = 1,
	.exec = rokctl_help_exec,
};

/* ---- main ----------------------------------------------------------- */

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	struct rokctl ctx = { .prog = "rokctl" };
	struct rokctl_args a;
	int c, rc;

	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:s:hV", lopts, NULL)) != -1) {
		switch (c) {
		case 's':
			ctx.socket = optarg;
			break;
		case 'j':
			ctx.json = true;
			break;
		case 'h':
			rokctl_main_help(stdout);
			return ROKCTL_EXIT_OK;
		case 'V':
			printf("rokctl %s (%s, protocol %d)\n", PACKAGE_VERSION,
			       rok_client_version(), ROK_PROTOCOL_VERSION);
			return ROKCTL_EXIT_OK;
		case ':':
			return rokctl_usage(&ctx, "option %s needs a value",
					    argv[optind - 1]);
		default:
			if (optopt != 0)
				return rokctl_usage(&ctx, "unknown option -%c",
						    optopt);
			return rokctl_usage(&ctx, "unknown option %s",
					    argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return rokctl_usage(&ctx, "no command given");
	ctx.cmd = rokctl_find(argv[optind]);
	if (ctx.cmd == NULL)
		return rokctl_usage(&ctx, "unknown command '%s'", argv[optind]);

	rc = rokctl_parse(&ctx, ctx.cmd, argc - optind, argv + optind, &a);
	if (rc < 0)
		rc = ctx.cmd->exec(&ctx, &a);
	free(a.env);
	rok_client_free(ctx.client);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		int e = errno;

		rc = rc > ROKCTL_EXIT_TASK ? rc : ROKCTL_EXIT_TASK;
		rokctl_err(&ctx, rc, "writing the output: %s", strerror(e));
	}
	return rc;
}
