/*
 * exec.h — the private interface between the files of the exec kind:
 * exec.c (the kind: the supervising task, the outcome), exec-args.c (the
 * spec's check, its strings, the environment and PATH), exec-spawn.c
 * (starting the child), exec-user.c (who it runs as), exec-output.c (the
 * capture file), exec-cgroup.c (a cgroup per task) and exec-orphans.c
 * (what a run left behind when rokd died).  Threads: everything here runs
 * on the worker that polls the exec task, except where said.
 */
#ifndef ROKD_EXEC_H
#define ROKD_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "rok.pb-c.h"
#include "rok/rok.h"

/* ---- exec-args.c ------------------------------------------------------ */

#define EXEC_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

struct exec_user;

/* The kind's check hook: 0, or -1 with a message in err. */
int exec_args_check(const Rok__V1__TaskSpec *spec, char *err, size_t len);
/* A copy of b, NUL-terminated (b holds no NUL: exec_args_check); NULL on
 * ENOMEM.  Free it. */
char *exec_args_strndup(const ProtobufCBinaryData *b);
/* n copies, NULL-terminated, each its own allocation: NULL on ENOMEM.
 * exec_args_strv_free frees it (NULL-safe). */
char **exec_args_strv(const ProtobufCBinaryData *v, size_t n);
void exec_args_strv_free(char **a);
/* Finds NAME= in a NULL-terminated env: the value (borrowed), or NULL. */
const char *exec_args_getenv(char *const *env, const char *name);
/*
 * --clean-env: PATH, HOME, USER, LOGNAME, SHELL of u (NULL: PATH alone),
 * then the *nenv entries of *envp, which win.  Replaces *envp (its strings
 * move) and *nenv: 0 or -ENOMEM (then unchanged).
 */
int exec_args_clean_env(char ***envp, size_t *nenv, const struct exec_user *u);
/* The PATH entries tried for a program name, at most (a longer PATH's
 * rest is ignored: each entry costs a copy of the name). */
#define EXEC_PATH_DIRS 1024
/* Sets *out to the candidates execve tries for prog along `path` (just
 * prog when it has a slash), NULL-terminated, in one allocation (free()
 * it): 0, -ENAMETOOLONG (prog, to be looked up in PATH, is longer than
 * NAME_MAX) or -ENOMEM. */
int exec_args_paths(const char *prog, const char *path, char ***out);

/* ---- exec-user.c ------------------------------------------------------ */

/* The submitter's account, looked up (and cached) for the child. */
struct exec_user {
	uid_t uid;
	gid_t gid;
	size_t ngroups;
	gid_t *groups;              /* malloc'd */
	char *name, *home, *shell;  /* malloc'd */
};

/* Looks `uid` up in the user database: 0, -ENOENT (no such user), or
 * -errno.  Fills *u with copies (exec_user_done frees them).  Any thread. */
int exec_user_get(uid_t uid, struct exec_user *u);
void exec_user_done(struct exec_user *u);

/* ---- exec-cgroup.c ---------------------------------------------------- */

/* One task's cgroup; the fds -1 when there is none. */
struct exec_cgroup {
	int dir;                    /* its directory, for clone3 */
	int procs;                  /* its cgroup.procs, for the child */
	int kill;                   /* its cgroup.kill */
	int events;                 /* its cgroup.events */
	uint64_t n;                 /* its name: slot.<n> */
	/* cgroup.kill was written, by rokd or (as far as rokd can tell:
	 * a leader ended by SIGKILL, a child killed as it started) by
	 * someone else.  Such a cgroup is not kept for another task: the
	 * kernels that count cgroup.kill's kills (kill_seq; Linux 6.18 here)
	 * compare a new child's cgroup's count with its parent's, and
	 * SIGKILL a child cloned into it (CLONE_INTO_CGROUP) when they
	 * differ. */
	bool killed;
};

#define EXEC_CGROUP_NONE \
	((struct exec_cgroup){ .dir = -1, .procs = -1, .kill = -1, .events = -1 })

/* Main thread, at exec_init: finds out whether rokd can make a cgroup per
 * task, and says which way it is. */
void exec_cgroup_init(void);
/* A cgroup for a task, empty, reused or new (nothing when there are
 * none): 0 or -errno.  Any thread. */
int exec_cgroup_new(struct exec_cgroup *c);
/* SIGKILL to every process in the cgroup (cgroup.kill).  Any thread. */
void exec_cgroup_kill(struct exec_cgroup *c);
/* The same, when a process is left in it (a task's leader reaped): an
 * empty cgroup stays unkilled, for CLONE_INTO_CGROUP.  Any thread. */
void exec_cgroup_kill_left(struct exec_cgroup *c);
/* Gives the cgroup back: kept for the next task if it is empty, not
 * frozen and never killed, else its fds closed and it removed (now, or
 * once it is empty).
 * Any thread; nothing for a cgroup-less c (n 0). */
void exec_cgroup_done(struct exec_cgroup *c);
/* Closes and removes the cgroup, empty or not (once it is empty). */
void exec_cgroup_drop(struct exec_cgroup *c);
/* Removes every kept cgroup (one was found killed from outside rokd). */
void exec_cgroup_flush(void);

/* ---- exec-spawn.c ----------------------------------------------------- */

/* Everything the child needs, prepared before forking (the child only
 * makes system calls). */
struct exec_start {
	char *const *argv;          /* borrowed */
	char *const *envp;          /* borrowed */
	char *const *paths;         /* candidates for argv[0], in PATH order */
	/* /bin/sh, a slot for the candidate, argv[1...]: what runs a
	 * candidate the kernel refuses with ENOEXEC, as execvp does (the
	 * child fills the slot). */
	char **sh_argv;
	const char *cwd;            /* NULL: rokd's */
	int fds[3];                 /* become the child's 0, 1, 2 */
	int cgroup;   /* cgroup.procs to join; -1: none, or clone3 put it */
	int nice;                   /* added to the child's nice; 0: none */
	bool change_creds;
	uid_t uid;
	gid_t gid;
	size_t ngroups;
	const gid_t *groups;
};

/* Main thread, once: /dev/null, the ignored signals to undo in children,
 * the limits to restore in them (exec_limits_save, rokd.h), the first
 * spawner thread.  0 or -errno. */
int exec_spawn_init(void);

/* False until exec_spawn_init ran: a process that never called exec_init
 * (the fuzz harness) must fail exec tasks, not run what its input says. */
bool exec_available(void);

/* Written by the child when a step before execve fails (it then exits
 * 127), read by whoever reaps it. */
struct exec_fail {
	int err;
	const char *step;
};

/*
 * A request to start a child: by a spawner thread, or by the task's own
 * worker (exec_spawn_direct, see exec-spawn.c).  The request owns
 * everything it points to (moved in by the exec task) and the pipes and
 * cgroup made for the child; a spawner frees what only the child needed
 * and closes the child's fds once the child has exec'd.  A direct start's
 * child reads the request (and runs on its stack) until it execs or
 * exits, so the task keeps it until the child is reaped (exec_req_reaped).
 */
struct exec_req {
	struct exec_start s;
	char **argv, **env, **paths;  /* malloc'd, NULL-terminated */
	char **sh_argv;             /* malloc'd; its strings argv's */
	char *cwd;
	struct exec_user user;
	uid_t owner;                /* the submitter: SPAWN_PER_UID */
	bool want_stdin;            /* a pipe for stdin, else /dev/null */
	/* The pipes, made by the spawner just before the clone (a queued
	 * start holds no fd, however many wait): the child's ends, closed
	 * by the spawner; ours, handed to the task with the answer (closed
	 * by exec_req_free if still here).  -1: none. */
	int child[3];
	int ours[3];                /* stdin (write), stdout, stderr (read) */
	/* The child's cgroup, taken by the spawner just before the pipes
	 * (so a queued start holds none of its fds either); handed to the
	 * task with the answer, else given back by exec_req_free. */
	struct exec_cgroup cg;
	rok_oneshot *done;          /* the spawner sends the request back */
	/* Under the spawner lock. */
	int state;                  /* queued, starting, done */
	/* Atomic (seq_cst), only ever set to 1: exec_spawn_kill, the child. */
	int kill;                   /* exec_spawn_kill: the task gave up */
	int ran;                    /* the child runs: clone succeeded */
	/* Out. */
	pid_t pid;                  /* > 0: started; then pidfd is open */
	int pidfd;                  /* -1 unless started */
	/* The child's start time in clock ticks since boot (field 22 of
	 * /proc/<pid>/stat) when the spawner could tell it without reading
	 * that file; else the task reads it (exec_orphans_stat). */
	bool start_known;
	uint64_t start_ticks;
	char reason[160];           /* why not started, for people */
	struct exec_fail fail;      /* the child's; step NULL: none failed */
	bool direct;                /* started by the task's worker */
	bool into;                  /* cloned into its cgroup (clone3) */
	void *stack;                /* a direct start's child's, malloc'd */
	struct exec_req *next;
};

/*
 * Starts r's child and sends r back through r->done: at once, from a pool
 * worker (a direct start: r->direct, the child may not have exec'd yet);
 * else queued for a spawner thread, which does so once the child has
 * exec'd; if the receiver is gone by then, the spawner kills and reaps the
 * child and frees r itself.  Any thread.
 */
void exec_spawn_submit(struct exec_req *r);
/*
 * A direct start's child was reaped (or killed): true if it had failed a
 * step before execve, or was killed as it started (then `cg`, its
 * cgroup's, is marked killed), with the reason in r->reason (the task
 * failed to start, as one a spawner answers with that reason does).
 */
bool exec_req_reaped(struct exec_req *r, struct exec_cgroup *cg);
/*
 * The task gives up on r's start (timeout, cancel): a child not yet up
 * never starts, one on its way (stuck in chdir or execve, say) gets
 * SIGKILL.  r is still answered through r->done: at once, from this call,
 * if it was still queued.  Any thread, while r is the spawner's or in the
 * oneshot (before the receiver is dropped).
 */
void exec_spawn_kill(struct exec_req *r);
/* Frees a request (the task's, or the spawner's when the task is gone):
 * kills (SIGKILL, through its cgroup too) and reaps a child that can no
 * longer be supervised when `kill_child`, and gives the cgroup back.  Any
 * thread. */
void exec_req_free(struct exec_req *r, bool kill_child);
/*
 * Sends SIGKILL to pid through its pidfd and to its process group, and
 * reaps it (into *si), waiting for it to be gone for a bounded time: 0, or
 * -ETIMEDOUT (then a thread of its own reaps it once it ends), or -errno.
 * pid must be an unreaped child of rokd's, so that its group id is still
 * its own.  Any thread; may block up to a few seconds for a process that
 * does not die.
 */
int exec_kill_reap(pid_t pid, int pidfd, siginfo_t *si);

/* ---- exec-orphans.c --------------------------------------------------- */

/*
 * Any thread: the process group (field 5) and start time (field 22, clock
 * ticks since boot) of `pid` from /proc/<pid>/stat.  0, -ENOENT when the
 * process is gone, or -errno.
 */
int exec_orphans_stat(pid_t pid, pid_t *pgrp, uint64_t *start_ticks);
/* This boot's id (the first 64 bits of the kernel's boot_id, top bit
 * cleared, never 0): 0 or -errno. */
int exec_orphans_boot_id(uint64_t *id);

/* A group of an interrupted run, as the journal recorded it. */
struct exec_orphans_group {
	uint64_t id;                /* the task */
	pid_t pgid;
	uint64_t start_ticks;       /* the leader's, when it started */
	/* Out. */
	bool member, leader;        /* seen: a process of the group, pid pgid */
	uint64_t leader_start;
	bool killed;
};
/*
 * Main thread, at recovery: scans /proc once and sends SIGKILL to each of
 * the n groups that still has processes and is still ours (see the file's
 * note), logging each.  Sorts g by pgid; sets the out fields.  Returns how
 * many groups were killed.
 */
size_t exec_orphans_kill(struct exec_orphans_group *g, size_t n);

/* ---- exec-output.c ---------------------------------------------------- */

/* The capture of one task's output.  Owned by its exec task. */
struct exec_out {
	uint64_t id;
	uid_t uid;                  /* whose max_kept_output_per_user counts it */
	int fd;                     /* -1 until the first byte */
	uint64_t kept;              /* bytes of the file: records, headers too */
	uint64_t cap;
	bool truncated;
	int err;                    /* first write error, -errno */
};

#define EXEC_STDOUT 1
#define EXEC_STDERR 2
/* Bytes of one record's header: stream (1), length (4, big-endian). */
#define EXEC_REC_HDR 5
/* The largest data of one record. */
#define EXEC_REC_MAX 65536

/* Main thread: creates <state_dir>/output.  0 or -errno. */
int exec_output_init(void);
/* Main thread, before the journal's recovery starts any task: counts each
 * output file against its task's uid (max_kept_output_per_user) and
 * removes those of no task (no journal row, or a run without a journal's
 * ".mem").  0 or -errno (logged). */
int exec_output_scan(void);
/* Warns if max_kept_output_per_user is less than one output file counts:
 * then no task's output is kept.  After exec_output_scan and each
 * change of the setting (SIGHUP); any thread. */
void exec_output_check_cap(void);
/* max_kept_output_per_user's default (CONFIG_KEPT_AUTO): a quarter of the
 * state file system; UINT64_MAX while its size is not known.  Any
 * thread. */
uint64_t exec_output_kept_auto(void);
void exec_out_init(struct exec_out *o, uint64_t id, uid_t uid,
                   uint64_t cap);
/* Removes the output file of task `id` (run as `uid`) if there is one,
 * and gives its bytes back to uid (any thread): at the start of run `run`,
 * the file of an earlier run of the same id (a retry after a failure or
 * a crash), so a silent task shows no output but its own, and the task
 * table hears which run the file now belongs to; and (run 0, which
 * touches no task record: the caller may hold the table's lock) when
 * the journal prunes the task or its record is forgotten. */
void exec_out_forget(uint64_t id, uid_t uid, uint32_t run);
/* Appends n bytes of `stream` (records of at most EXEC_REC_MAX) while the
 * file, headers included, stays within the cap; past it marks the output
 * truncated and drops the bytes. */
void exec_out_append(struct exec_out *o, int stream, const uint8_t *buf,
                     size_t n);
void exec_out_done(struct exec_out *o);

#endif /* ROKD_EXEC_H */
