/*
 * rokctl.h — what the files of rokctl share: the command table's types,
 * the exit statuses, and the output helpers.  Prototypes grouped by file.
 *
 * The grammar is data (relayctl's model): each rokctl-CMD.c defines one
 * `const struct rokctl_cmd` listing its operands and options; rokctl.c
 * parses the command line against that table, prints the help from it, and
 * calls the command's exec function with the parsed arguments.
 */
#ifndef ROK_ROKCTL_H
#define ROK_ROKCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rok/client.h"

/*
 * Exit statuses (documented in rokctl(1) and --help).  When several apply,
 * the highest number wins.
 */
enum rokctl_exit {
	ROKCTL_EXIT_OK = 0,          /* success; join: every task succeeded */
	ROKCTL_EXIT_TASK = 1,        /* a task ended unsuccessfully (failed,
					cancelled, timed_out, interrupted), or
					a local failure (out of memory, I/O) */
	ROKCTL_EXIT_USAGE = 2,       /* bad command line */
	ROKCTL_EXIT_REFUSED = 3,     /* the daemon refused the request or an
					id (not found, permission, invalid) */
	ROKCTL_EXIT_UNREACHABLE = 4, /* cannot reach or talk to the daemon */
	ROKCTL_EXIT_TIMEOUT = 5,     /* the wait timeout (-t) passed first */
};

/* Option keys; an option's value lands in rokctl_args at its key. */
enum rokctl_key {
	KEY_NONE = 0,
	KEY_HELP, KEY_JSON, KEY_SOCKET,
	KEY_KIND, KEY_TIMEOUT, KEY_WAIT, KEY_WAIT_TIMEOUT, KEY_ENV,
	KEY_CLEAN_ENV, KEY_CWD, KEY_STDIN, KEY_RETRY, KEY_KILL_GRACE,
	KEY_CANCEL_REST, KEY_FOLLOW, KEY_STATE, KEY_AFTER, KEY_LIMIT,
	KEY_OLDER_THAN, KEY_KEEP, KEY_GROUP, KEY_PRIORITY, KEY_PARALLEL,
	KEY_POLICY, KEY_BACKEND, KEY_WEIGHTS,
	KEY_AFTER_ANY, KEY_AT, KEY_IN, KEY_RETRY_FAILED, KEY_BACKOFF,
	KEY_PROMETHEUS, KEY_INTERVAL, KEY_CPUS, KEY_MEM, KEY_TIME,
	KEY_PARTITION,
	KEY__COUNT
};

struct rokctl_opt {
	int key;                /* KEY_*; KEY_NONE ends a table */
	char short_name;        /* 0: long form only */
	const char *long_name;
	const char *arg;        /* the value's name in help; NULL: a flag */
	const char *help;
};

struct rokctl;
struct rokctl_args;

struct rokctl_cmd {
	const char *name;
	const char *operands;   /* e.g. "ID..." */
	const char *synopsis;   /* the main options and operands, for the
				   overview in --help */
	const char *summary;    /* one line */
	const char *details;    /* more help text, or NULL */
	const struct rokctl_opt *opts;
	int min_args, max_args; /* operand count; max -1: unbounded */
	int (*exec)(struct rokctl *ctx, const struct rokctl_args *a);
};

/* The parsed command line of one command. */
struct rokctl_args {
	int argc;               /* operands */
	char **argv;
	bool seen[KEY__COUNT];
	const char *val[KEY__COUNT];   /* last value given */
	const char **env;       /* every -e value, in order */
	size_t n_env;
};

/* What every command works with. */
struct rokctl {
	const char *prog;       /* "rokctl" */
	const struct rokctl_cmd *cmd;
	const char *socket;     /* -s; NULL: the default resolution */
	bool json;
	rok_client *client;
};

/* ---- rokctl.c -------------------------------------------------------- */

extern const struct rokctl_cmd *const rokctl_cmds[];

const struct rokctl_cmd *rokctl_find(const char *name);
/* Prints "rokctl: CMD: message" and the usage hint; returns EXIT_USAGE. */
int rokctl_usage(struct rokctl *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Prints "rokctl: CMD: message"; returns code. */
int rokctl_err(struct rokctl *ctx, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Connects (once) with the client timeout for connecting; an exit status. */
int rokctl_connect(struct rokctl *ctx);
/* Reports the client's last error rc (from a library call) and returns
 * the exit status it maps to. */
int rokctl_fail(struct rokctl *ctx, int rc);
/* A duration option, or def when absent; an exit status. */
int rokctl_duration(struct rokctl *ctx, const struct rokctl_args *a, int key,
		    uint64_t def, uint64_t *ms);
/*
 * The start of a command on task ids: parses the ids (decimal, > 0) from
 * the operands into *ids (malloc'd; the caller frees it, also on failure),
 * with wait_ms != NULL the -t duration (0 when absent), then connects.  A
 * wait also clears the client timeout: the daemon keeps time.  An exit
 * status (usage error on garbage).
 */
int rokctl_open_ids(struct rokctl *ctx, const struct rokctl_args *a,
		    uint64_t **ids, uint64_t *wait_ms);
/* Prints the command's help (to f). */
void rokctl_print_help(FILE *f, const struct rokctl_cmd *cmd);
/* Waits at most this long for a daemon that should answer at once. */
#define ROKCTL_CALL_TIMEOUT_MS 30000

/* ---- rokctl-print.c -------------------------------------------------- */

/* Column state of a human table that may be printed in parts (list). */
struct print_table {
	bool header_done;
	bool truncate;          /* cut long values (list) */
	int w[7];
};

/* Prints tasks (a table, or JSON lines); per-id errors go to stderr in
 * human mode, into the JSON line in --json mode.  `index` >= 0 adds an
 * "index" member (race). */
void print_tasks(struct rokctl *ctx, struct print_table *tab,
		 const rok_task_info *t, size_t n, long index);
/* The exit status of a set of tasks as join sees it: 0 all succeeded,
 * 1 one did not, 3 one could not be looked up. */
int print_outcome(const rok_task_info *t, size_t n);
/* Writes bytes for people: valid UTF-8 text as is, control characters
 * and invalid bytes as C escapes; at most max characters (0: all). */
void print_escaped(FILE *f, const void *data, size_t len, size_t max);
/* The bucket of h holding its q-th percentile (q in percent) of the
 * observations since `before`, an earlier reading of the same histogram
 * (NULL: all of them); an index of bounds_us, or n_bounds for the bucket
 * past the last bound.  For a histogram with bounds. */
size_t print_quantile_bucket(const rok_histogram *h,
			     const rok_histogram *before, unsigned q);
void print_stats(struct rokctl *ctx, const rok_daemon_stats *s,
		 const rok_group *groups, size_t n_groups);
/* Groups as `group list` shows them (a table, or JSON lines). */
void print_groups(struct rokctl *ctx, const rok_group *g, size_t n);

/* ---- the commands (one file each) ------------------------------------ */

extern const struct rokctl_cmd rokctl_cmd_spawn, rokctl_cmd_join,
	rokctl_cmd_race, rokctl_cmd_cancel, rokctl_cmd_status,
	rokctl_cmd_list, rokctl_cmd_logs, rokctl_cmd_stats,
	rokctl_cmd_ping, rokctl_cmd_prune, rokctl_cmd_group, rokctl_cmd_top,
	rokctl_cmd_watch, rokctl_cmd_help;

/* ---- rokctl-logs.c --------------------------------------------------- */
/* Writes task id's output as it comes (follow: until it ends); an exit
 * status: with follow, the task's outcome as join reports it. */
int logs_stream(struct rokctl *ctx, uint64_t id, bool follow);

/* ---- rokctl-watch.c -------------------------------------------------- */
/* join of n ids (no timeout) with "37/100 done, 2 failed" on stderr as
 * they end (a terminal's business: the caller checks).  As
 * rok_client_join: 0 with *out the join reply, a typed error, or -errno. */
int watch_progress_join(struct rokctl *ctx, const uint64_t *ids, size_t n,
			rok_reply **out);

#endif /* ROK_ROKCTL_H */
