/*
 * rokd.c — the daemon's main: options, start, signals, stop.
 *
 * The main thread parses the command line, reads the configuration, opens
 * the listening socket, starts the runtime and hands the socket to the
 * reactor thread.  Then it only waits for signals (blocked everywhere, taken
 * with sigwait): SIGHUP reloads what can be reloaded, SIGTERM and SIGINT
 * stop the daemon: stop accepting, cancel the tasks still running (they
 * are recorded as interrupted and stay unfinished in the journal, so the
 * next start runs them again or reports them interrupted), answer every
 * request in flight (the waits see their tasks end), close the connections
 * once their replies are flushed, stop the runtime, write what the journal
 * has queued, exit 0.
 *
 * Start order: the journal is opened (or rokd refuses to start) before the
 * runtime, recovered after it (recovered tasks need workers) and before the
 * socket accepts anything.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"
#include "journal.h"
#include "reactor.h"
#include "rokd.h"
#include "slurm.h"

static const char rokd_usage[] =
	"usage: rokd [-c FILE] [-s SOCKET] [-S STATE_DIR] [-w N] [--daemonize]\n"
	"            [-v] [--version] [--help]\n"
	"\n"
	"  -c, --config FILE      read settings from FILE (see rokd.conf(5))\n"
	"  -s, --socket SOCKET    listen on this Unix socket\n"
	"  -S, --state-dir DIR    keep state (journal, output) in DIR\n"
	"  -w, --workers N        runtime worker threads (default: ROK_WORKERS,\n"
	"                         else the config file, else one per CPU)\n"
	"      --daemonize        detach and run in the background\n"
	"  -v, --verbose          log more (debug lines)\n"
	"      --version          print the version and exit\n"
	"  -h, --help             print this help and exit\n"
	"\n"
	"Defaults: as root /run/rok/rokd.sock and /var/lib/rok; otherwise\n"
	"$XDG_RUNTIME_DIR/rok/rokd.sock and $XDG_STATE_HOME/rok\n"
	"(or ~/.local/state/rok).  SIGTERM or SIGINT stop it; SIGHUP reloads\n"
	"the limits from the config file.\n";

struct rokd_opts {
	const char *config_file, *socket, *state_dir;
	unsigned workers;
	bool daemonize;
	int verbose;
};

static void rokd_parse_args(int argc, char **argv, struct rokd_opts *o)
{
	static const struct option longs[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "socket", required_argument, NULL, 's' },
		{ "state-dir", required_argument, NULL, 'S' },
		{ "workers", required_argument, NULL, 'w' },
		{ "daemonize", no_argument, NULL, 'D' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "c:s:S:w:vh", longs, NULL)) != -1) {
		switch (ch) {
		case 'c': o->config_file = optarg; break;
		case 's': o->socket = optarg; break;
		case 'S': o->state_dir = optarg; break;
		case 'w': {
			char *end;
			unsigned long n = strtoul(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || n < 1 || n > 1024) {
				fprintf(stderr, "rokd: -w: expected 1..1024\n");
				exit(2);
			}
			o->workers = (unsigned)n;
			break;
		}
		case 'D': o->daemonize = true; break;
		case 'v': o->verbose++; break;
		case 'V': printf("rokd %s (protocol %d)\n", ROKD_VERSION,
		                 ROKD_PROTOCOL);
			  exit(0);
		case 'h': fputs(rokd_usage, stdout); exit(0);
		default: fputs(rokd_usage, stderr); exit(2);
		}
	}
	if (optind != argc) {
		fprintf(stderr, "rokd: unexpected argument: %s\n", argv[optind]);
		fputs(rokd_usage, stderr);
		exit(2);
	}
}

/* Flags win over the environment, the environment over the config file. */
static void rokd_apply(const struct rokd_opts *o)
{
	char err[512];

	config_defaults(&config);
	if (o->config_file != NULL &&
	    config_load(&config, o->config_file, err, sizeof(err)) < 0)
		fatalx("%s", err);
	if (o->socket != NULL) {
		free(config.socket_path);
		config.socket_path = strdup(o->socket);
	}
	if (o->state_dir != NULL) {
		free(config.state_dir);
		config.state_dir = strdup(o->state_dir);
	}
	if (config.socket_path == NULL || config.state_dir == NULL)
		fatalx("out of memory");
	char n[16];
	if (o->workers > 0) {
		snprintf(n, sizeof(n), "%u", o->workers);
		setenv("ROK_WORKERS", n, 1);
	} else if (getenv("ROK_WORKERS") == NULL && config.workers > 0) {
		snprintf(n, sizeof(n), "%u", config.workers);
		setenv("ROK_WORKERS", n, 1);
	}
}

/* Makes dir/name, if it exists, private to its owner; refuses one that is
 * not a regular file of rokd's uid. */
static void rokd_private_file(const char *dir, const char *name)
{
	char path[4200];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (lstat(path, &st) != 0) {
		if (errno != ENOENT)
			fatalx("%s: %s; refusing to start", path, strerror(errno));
		return;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid())
		fatalx("%s is not a regular file owned by uid %u; refusing to "
		       "start", path, (unsigned)geteuid());
	/* sqlite gives the -wal and -shm files the journal's own mode. */
	if ((st.st_mode & 077) != 0) {
		if (chmod(path, st.st_mode & 0700) != 0)
			fatalx("chmod %s: %s; refusing to start", path,
			       strerror(errno));
		log_info("%s was mode 0%o: made private to its owner", path,
		         (unsigned)(st.st_mode & 07777));
	}
}

/*
 * Refuses a state directory that someone else could move away and replace
 * after the checks below, which are made by path, as every later open is:
 * each directory above it (symbolic links resolved) must be root's or
 * rokd's uid, and one that group or others may write must be sticky (like
 * /tmp), where only the owner of an entry can rename it.
 */
static void rokd_state_parents(const char *dir)
{
	char *real = realpath(dir, NULL);
	struct stat st;

	if (real == NULL)
		fatalx("%s: %s", dir, strerror(errno));
	for (char *slash = strrchr(real, '/'); slash != NULL;
	     slash = strrchr(real, '/')) {
		*slash = '\0';
		const char *p = slash == real ? "/" : real;
		if (stat(p, &st) != 0)
			fatalx("%s: %s", p, strerror(errno));
		if (st.st_uid != 0 && st.st_uid != geteuid())
			fatalx("%s, above the state directory %s, is owned by "
			       "uid %u: it could replace the state directory; "
			       "refusing to start", p, dir, (unsigned)st.st_uid);
		if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
		    (st.st_mode & S_ISVTX) == 0)
			fatalx("%s, above the state directory %s, is writable "
			       "by group or others (mode 0%o) and not sticky: "
			       "they could replace the state directory; "
			       "refusing to start", p, dir,
			       (unsigned)(st.st_mode & 07777));
		if (slash == real)
			break;
	}
	free(real);
}

/*
 * mkdir -p for the state directory, private to its owner.  It holds every
 * user's specs (env, stdin) and output: an existing one must be a
 * directory of rokd's uid that nobody else can write (else refused: the
 * files in it could be swapped), below directories nobody else can change
 * (rokd_state_parents); one that others can read or enter is made 0700,
 * and so are the journal's files in it.
 */
static void rokd_state_dir(void)
{
	char path[4096];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s", config.state_dir) >=
	    (int)sizeof(path))
		fatalx("state directory path too long");
	/* Missing parents get the usual 0755, not rokd's umask. */
	mode_t old = umask(022);
	for (char *p = path + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) != 0 && errno != EEXIST)
			fatalx("mkdir %s: %s", path, strerror(errno));
		*p = '/';
	}
	umask(old);
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		fatalx("mkdir %s: %s", path, strerror(errno));
	if (lstat(path, &st) != 0)
		fatalx("%s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		fatalx("state directory %s is not a directory; refusing to "
		       "start", path);
	if (st.st_uid != geteuid())
		fatalx("state directory %s is owned by uid %u, not by rokd's "
		       "uid %u; refusing to start", path, (unsigned)st.st_uid,
		       (unsigned)geteuid());
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
		fatalx("state directory %s is writable by group or others "
		       "(mode 0%o); refusing to start (chmod 0700 it)", path,
		       (unsigned)(st.st_mode & 07777));
	rokd_state_parents(path);
	if ((st.st_mode & 077) != 0) {
		if (chmod(path, 0700) != 0)
			fatalx("chmod %s: %s; refusing to start", path,
			       strerror(errno));
		log_info("state directory %s was mode 0%o: made 0700", path,
		         (unsigned)(st.st_mode & 07777));
	}
	static const char *const files[] = {
		"journal.db", "journal.db-wal", "journal.db-shm", "rokd.lock",
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		rokd_private_file(path, files[i]);
}

/* Many connections need many descriptors: take the hard limit. */
static void rokd_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
			log_warn("setrlimit(RLIMIT_NOFILE)");
	}
}

/* Tells systemd (Type=notify); a failure is logged, never fatal. */
static void rokd_notify(const char *msg)
{
	int err = notify_send("%s", msg);

	if (err < 0)
		log_errno(err, "sd_notify %s", msg);
}

static void rokd_daemonize(void)
{
	pid_t pid = fork();

	if (pid < 0)
		fatalx("fork: %s", strerror(errno));
	if (pid > 0)
		_exit(0);
	if (setsid() < 0)
		fatalx("setsid: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		fatalx("fork: %s", strerror(errno));
	if (pid > 0)
		_exit(0);
	if (chdir("/") != 0)
		fatalx("chdir /: %s", strerror(errno));
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd < 0 || dup2(fd, STDIN_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0)
		fatalx("/dev/null: %s", strerror(errno));
	if (fd > STDERR_FILENO)
		close(fd);
	/* stderr stays: the log goes where the caller sent it. */
}

static void rokd_shutdown_cb(void *arg)
{
	(void)arg;
	server_stop();
	metrics_http_stop();
	conn_shutdown();
}

static void rokd_close_all_cb(void *arg)
{
	(void)arg;
	conn_close_all();
}

/* Reactor thread: stores the reloaded limits and frees `arg`. */
static void rokd_reload_apply(void *arg)
{
	struct config *fresh = arg;

#define ROKD_SET(f) __atomic_store_n(&config.f, fresh->f, __ATOMIC_RELAXED)
	ROKD_SET(max_in_flight);
	ROKD_SET(max_output);
	ROKD_SET(max_queued);
	ROKD_SET(max_finished);
	ROKD_SET(max_queued_per_user);
	ROKD_SET(max_running_per_user);
	ROKD_SET(max_finished_per_user);
	ROKD_SET(max_task_bytes_per_user);
	ROKD_SET(keep_finished_per_user);
	ROKD_SET(max_connections);
	ROKD_SET(max_ids);
	ROKD_SET(max_connections_per_user);
	ROKD_SET(max_waits_per_user);
	ROKD_SET(max_wait_ids_per_user);
	ROKD_SET(max_followers_per_user);
	ROKD_SET(max_output_per_user);
	ROKD_SET(watch_lag_max);
	ROKD_SET(max_task_output);
	ROKD_SET(output_keep_free);
	ROKD_SET(max_kept_output_per_user);
	ROKD_SET(kill_grace_ms);
	ROKD_SET(keep_finished);
	ROKD_SET(keep_finished_for_ns);
#undef ROKD_SET
	exec_output_check_cap();
	config_free(fresh);
	free(fresh);
}

static void rokd_reload(const struct rokd_opts *o)
{
	struct config fresh;
	char err[512];

	if (o->config_file == NULL) {
		log_info("SIGHUP: no config file to reload");
		return;
	}
	config_defaults(&fresh);
	if (config_load(&fresh, o->config_file, err, sizeof(err)) < 0) {
		log_warnx("SIGHUP: %s; keeping the old settings", err);
		config_free(&fresh);
		return;
	}
	/* Limits only: paths and workers need a restart.  Stored on the
	 * reactor thread, which reads most of them plainly (see
	 * CONFIG_LIMIT in rokd.h). */
	struct config *copy = malloc(sizeof(*copy));
	int rc = copy == NULL ? -ENOMEM : 0;
	if (copy != NULL) {
		*copy = fresh;
		rc = reactor_call(rokd_reload_apply, copy);
	}
	if (rc < 0) {
		log_errno(rc, "SIGHUP: %s: keeping the old settings",
		          o->config_file);
		free(copy);
		config_free(&fresh);
		return;
	}
	log_info("SIGHUP: limits reloaded from %s", o->config_file);
}

/*
 * Fills fds 0, 1 and 2 with /dev/null where they are closed (rokd started
 * with `<&-`, say): otherwise the first file rokd opens gets such a number,
 * and the log (fd 2) writes into it, or a stray close of 0 (a bug) closes
 * a client's connection.  Each missing one is the lowest free number, which
 * open() takes.
 */
static void rokd_std_fds(void)
{
	for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int n = open("/dev/null", O_RDWR);
		if (n != fd)
			fatalx("/dev/null as fd %d: %s", fd,
			       n < 0 ? strerror(errno) : "another number");
	}
}

int main(int argc, char **argv)
{
	struct rokd_opts o = { 0 };
	sigset_t sigs;
	int sig, err;

	rokd_std_fds();
	/* Before any file is made: the journal and output hold every user's
	 * specs and output. */
	rokd_umask = umask(077);
	rokd_parse_args(argc, argv, &o);
	log_init(o.verbose);
	rokd_apply(&o);
	if (o.daemonize)
		rokd_daemonize();
	/* Before any thread: it edits the environment. */
	if ((err = notify_init()) < 0)
		log_errno(err, "NOTIFY_SOCKET: ignored");
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	/* Blocked before any thread starts, so only sigwait takes them.
	 * SIGCHLD too, though nothing waits for it.  Its default is to be
	 * dropped, but the kernel drops it at once only if the thread that
	 * started the child does not block it, and the spawners block every
	 * signal: it was delivered to this thread, the only one that did not
	 * block it, woken out of sigwait at every exec task's end to drop it.
	 * Children start with an empty mask (exec-spawn.c, slurm-cmd.c) and
	 * no pending signal. */
	sigset_t blocked = sigs;
	sigaddset(&blocked, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &blocked, NULL);
	exec_limits_save();
	rokd_raise_nofile();
	rokd_state_dir();
	if ((err = tasktab_init()) < 0)
		fatalx("task table: %s", strerror(-err));
	/* The journal first: it is what refuses a state directory it cannot
	 * keep (read-only, foreign, corrupt) with the reason. */
	char jerr[1024];
	if (journal_open(jerr, sizeof(jerr)) < 0)
		fatalx("%s", jerr);
	/* The groups before the recovery queues tasks into them. */
	if (queue_init(jerr, sizeof(jerr)) < 0)
		fatalx("%s", jerr);
	if ((err = exec_init()) < 0)
		fatalx("exec tasks: %s/output: %s; refusing to start",
		       config.state_dir, strerror(-err));
	if ((err = slurm_watch_init()) < 0)
		fatalx("slurm groups: %s: %s; refusing to start",
		       config.slurm_output_dir != NULL ? config.slurm_output_dir
		       : "<state_dir>/slurm", err == -EINVAL
		       ? "slurm_output_dir must be an absolute path"
		       : err == -EBUSY ? "another rokd uses it (each needs a "
		       "directory of its own)"
		       : err == -EPERM ? "not a directory of rokd's uid that "
		       "group and others may not write" : strerror(-err));
	/* Before the recovery starts tasks, which write output: what each
	 * uid's output holds; and no output of a task the journal does not
	 * have (a deleted or replaced journal.db's) may show as a new
	 * task's. */
	if ((err = exec_output_scan()) < 0)
		fatalx("%s/output: %s; refusing to start", config.state_dir,
		       strerror(-err));
	/* Before the socket: a port that cannot be bound stops rokd before
	 * any client could connect. */
	if (metrics_http_open(jerr, sizeof(jerr)) < 0)
		fatalx("%s; refusing to start", jerr);
	int fd = server_open();
	if (fd < 0)
		fatalx("cannot listen on %s: %s", config.socket_path,
		       strerror(-fd));
	if ((err = rok_start()) < 0)
		fatalx("cannot start the runtime: %s", strerror(-err));
	/* Before the socket accepts: the ids and tasks of the journal first. */
	tasktab_hold_eviction(true);
	if (journal_recover(jerr, sizeof(jerr)) < 0)
		fatalx("%s", jerr);
	tasktab_hold_eviction(false);
	if ((err = journal_start()) < 0)
		fatalx("cannot start the journal thread: %s", strerror(-err));
	if ((err = server_start(fd)) < 0)
		fatalx("cannot start accepting: %s", strerror(-err));
	if ((err = metrics_http_start()) < 0)
		fatalx("cannot serve metrics: %s", strerror(-err));
	struct rok_stats st;
	rok_stats_get(&st);
	log_info("rokd %s ready: %u workers, state in %s", ROKD_VERSION,
	         st.workers, config.state_dir);
	/* The journal is recovered and the socket accepts. */
	rokd_notify("READY=1");
	if ((err = notify_start()) < 0)
		fatalx("cannot start the watchdog task: %s", strerror(-err));

	for (;;) {
		if (sigwait(&sigs, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			/* MONOTONIC_USEC: newer systemd wants it with
			 * RELOADING=1; older ones ignore it. */
			struct timespec ts;
			char msg[64];
			clock_gettime(CLOCK_MONOTONIC, &ts);
			snprintf(msg, sizeof(msg),
			         "RELOADING=1\nMONOTONIC_USEC=%llu",
			         (unsigned long long)ts.tv_sec * 1000000 +
			         (unsigned long long)ts.tv_nsec / 1000);
			rokd_notify(msg);
			rokd_reload(&o);
			rokd_notify("READY=1");
			continue;
		}
		break;
	}
	log_info("%s: stopping", sig == SIGINT ? "SIGINT" : "SIGTERM");
	rokd_notify("STOPPING=1");
	if (reactor_call(rokd_shutdown_cb, NULL) < 0)
		log_warnx("could not reach the reactor to stop accepting");
	gate_stop();   /* waiting tasks stay queued for the next start */
	slurm_shutdown();   /* Slurm jobs run on: the next start adopts them */
	tasktab_cancel_all();
	/* Exec tasks end once their children are dead: give them their kill
	 * grace before the runtime's own cancel, which kills at once. */
	for (uint64_t waited = 0; waited < CONFIG_LIMIT(kill_grace_ms) + 1000;
	     waited += 10) {
		uint64_t counts[RT_NSTATES];
		tasktab_counts(counts);
		if (counts[RT_RUNNING] == 0)
			break;
		usleep(10000);
	}
	/* Waits end as their tasks do; give the replies time to leave. */
	for (int i = 0; i < 500 && !conn_all_closed(); i++)
		usleep(10000);
	if (!conn_all_closed()) {
		log_warnx("some clients did not take their replies; closing");
		if (reactor_call(rokd_close_all_cb, NULL) == 0)
			for (int i = 0; i < 100 && !conn_all_closed(); i++)
				usleep(10000);
	}
	/* The clients are answered or gone: a spawn committed from here on is
	 * not started (its task is run at the next start, as after a crash),
	 * and nothing may start the runtime again after rok_stop. */
	journal_detach();
	if ((err = rok_stop()) < 0)
		log_errno(err, "stopping the runtime");
	else
		conn_free_leftovers();   /* the reactor thread has ended */
	slurm_watch_stop();
	slurm_free();
	/* Every task has ended and told the journal: write it all. */
	journal_stop();
	gate_free();
	tasktab_free();
	queue_free();
	config_free(&config);
	log_info("stopped");
	return 0;
}
