/*
 * slurm.h — the Slurm backend, between slurm.c (the kind: one exec task of
 * a slurm group as one batch job), slurm-cmd.c (running the Slurm
 * commands) and slurm-watch.c (the one batched squeue per interval).
 * Threads: see each function.
 */
#ifndef ROKD_SLURM_H
#define ROKD_SLURM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct exec_user;

/* ---- slurm-cmd.c (blocking pool or the watcher thread) ---------------- */

/* The path of Slurm command `name` (sbatch, squeue, scancel) along rokd's
 * PATH and /usr/bin: borrowed, or NULL when it is not installed. */
const char *slurm_cmd_path(const char *name);
/*
 * Runs argv (argv[0] from slurm_cmd_path) with envp (NULL: rokd's), as
 * user u when u is non-NULL (setgroups, setgid, setuid in the child),
 * feeding it `in` (may be NULL) on stdin, and keeping up to cap - 1 bytes
 * of its stdout and stderr in out (NUL-terminated).  Returns its exit
 * status (0..255, 128 + signal), or -errno when it could not run,
 * -E2BIG when its output did not fit in cap, -ETIMEDOUT when it ran
 * longer than slurm_cmd_timeout_ms (it is then killed).  Blocks until it
 * ends.
 */
extern unsigned slurm_cmd_timeout_ms;   /* tests shorten it */
int slurm_cmd_run(char *const *argv, char *const *envp,
                  const struct exec_user *u, const char *in, char *out,
                  size_t cap);
/* A negative slurm_cmd_run result for people ("output too long", not
 * E2BIG's "Argument list too long"). */
const char *slurm_cmd_strerror(int err);

/* ---- slurm-watch.c ---------------------------------------------------- */

/* Where a job is, as the last squeue saw it. */
enum {
	SLURM_UNKNOWN,              /* not seen yet */
	SLURM_PENDING, SLURM_RUNNING, /* and the other active states */
	SLURM_COMPLETED, SLURM_FAILED, SLURM_CANCELLED, SLURM_TIMEOUT,
	SLURM_GONE,                 /* no longer known to slurmctld */
};

struct slurm_jobstate {
	int state;
	int status;                 /* wait status (squeue's exit_code) */
	char reason[64];            /* Slurm's state and reason, for people */
	char why[48];               /* Slurm's reason alone ("" for None) */
};

/* Main thread, at start: the job-name tag of this rokd (from its state
 * directory), the poll interval, and the output directory made
 * (slurm_output_dir, or <state_dir>/slurm): 0 or -errno (-EINVAL: not an
 * absolute path; -EPERM: not a directory of rokd's uid that group and
 * others may not write; -EBUSY: another rokd holds it). */
int slurm_watch_init(void);
/* The output directory, absolute (borrowed), and an fd of it held open
 * (for the *at calls that make and hand over the task directories in it:
 * the path's parents may be renamed, the fd stays on the directory). */
const char *slurm_watch_dir(void);
int slurm_watch_dirfd(void);
/* The job name of run `run` of task `id`: "rok-TAG-ID-RUN".  The run in
 * it keeps a retry (retry_failed) from adopting its failed run's job. */
void slurm_watch_name(uint64_t id, uint32_t run, char *buf, size_t len);
/* Any thread: watch job `jobid`, of user `uid` (starts the watcher thread
 * on first use): 0 or -errno. */
int slurm_watch_add(uint32_t jobid, uid_t uid);
/* Any thread: stop watching it (one entry, if added more than once). */
void slurm_watch_remove(uint32_t jobid);
/* Any thread: what the last query saw of jobid. */
void slurm_watch_get(uint32_t jobid, struct slurm_jobstate *js);
/* Blocking: the job id of run `run` of task `id` among uid's jobs if
 * slurmctld knows one (0: none), or -errno when squeue failed. */
int64_t slurm_watch_lookup(uint64_t id, uint32_t run, uid_t uid);
/* Applies one squeue's output (JOBID|STATE|EXIT_CODE|REASON| lines, of
 * every watched job's user; consumed) as the watcher thread does after
 * each query: a job missing from two in a row is SLURM_GONE.  Any
 * thread; for tests, which stop the watcher first. */
void slurm_watch_apply(char *out);
/* Main thread, at the very end (after rok_stop): ends the watcher (and
 * forgets every job; after it, add keeps a table but starts no thread). */
void slurm_watch_stop(void);

/* ---- slurm.c ---------------------------------------------------------- */

/* Set once rokd stops (before it cancels its tasks): running jobs are
 * left to run, for the next start to adopt. */
void slurm_shutdown(void);
/* Main thread, after rok_stop: frees what recovery noted. */
void slurm_free(void);

#endif /* ROKD_SLURM_H */
