/*
 * exec.h — the private interface between the files of the exec kind:
 * exec.c (the kind: spec check, the supervising task, the outcome),
 * exec-spawn.c (who the child runs as, starting it) and exec-output.c (the
 * capture file).  Threads: everything here runs on the worker that polls
 * the exec task, except where said.
 */
#ifndef ROKD_EXEC_H
#define ROKD_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- exec-spawn.c ----------------------------------------------------- */

/* Everything the child needs, prepared before forking (the child only
 * makes system calls). */
struct exec_start {
	char *const *argv;          /* borrowed */
	char *const *envp;          /* borrowed */
	char *const *paths;         /* candidates for argv[0], in PATH order */
	const char *cwd;            /* NULL: rokd's */
	int fds[3];                 /* become the child's 0, 1, 2 */
	bool change_creds;
	uid_t uid;
	gid_t gid;
	size_t ngroups;
	const gid_t *groups;
};

/* The submitter's account, looked up (and cached) for the child. */
struct exec_user {
	uid_t uid;
	gid_t gid;
	size_t ngroups;
	gid_t *groups;              /* malloc'd */
	char *name, *home, *shell;  /* malloc'd */
};

/* Main thread, once: /dev/null, and the ignored signals to undo in
 * children.  0 or -errno. */
int exec_spawn_init(void);
/* Looks `uid` up in the user database: 0, -ENOENT (no such user), or
 * -errno.  Fills *u with copies (exec_user_done frees them). */
int exec_user_get(uid_t uid, struct exec_user *u);
void exec_user_done(struct exec_user *u);

/* rokd's /dev/null, opened once (O_RDONLY, close-on-exec). */
int exec_devnull(void);

/*
 * Starts the child (vfork + execve) in a process group of its own.
 * Returns its pid; or -errno, with the step that failed in *step (a static
 * string: "exec", "chdir", "setresuid", ...).  Must run on a thread that
 * lives as long as rokd (a worker, not a blocking-pool thread): the
 * child's parent-death signal is tied to that thread.
 */
pid_t exec_spawn(const struct exec_start *s, const char **step);

/* ---- exec-output.c ---------------------------------------------------- */

/* The capture of one task's output.  Owned by its exec task. */
struct exec_out {
	uint64_t id;
	int fd;                     /* -1 until the first byte */
	uint64_t kept;              /* bytes of output kept */
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
void exec_out_init(struct exec_out *o, uint64_t id, uint64_t cap);
/* Appends n bytes of `stream` (records of at most EXEC_REC_MAX), up to the
 * cap; past it marks the output truncated and drops the bytes. */
void exec_out_append(struct exec_out *o, int stream, const uint8_t *buf,
                     size_t n);
void exec_out_done(struct exec_out *o);

#endif /* ROKD_EXEC_H */
