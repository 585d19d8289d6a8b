/*
 * exec.c — the exec kind: a task that runs a command as a supervised child
 * process.
 *
 * One runtime task per exec task, and no thread: the task's body starts
 * the child (exec-spawn.c), then waits in one loop on everything at once —
 * the child's pidfd, its stdout and stderr pipes, the stdin pipe while
 * bytes remain to be fed, a timer (the task's timeout, then the kill
 * grace), and a oneshot that the cancel hook fires — by polling each
 * awaitable in turn in the same poll (exec_wait), so that any of them wakes
 * the task.  All fds are non-blocking and awaited through the reactor.  A
 * pipe is read at most EXEC_DRAIN_BUDGET times per poll: a child that
 * writes without pause gets the worker back after other ready tasks had it
 * (a yield), not for as long as it keeps writing.
 *
 * Exactly one reaper per child: this task, with waitid(P_PIDFD) (or the
 * spawner, for a child that never got to this task), nowhere else (rokd
 * has no SIGCHLD handler, leaves SIGCHLD at its default and blocks it in
 * every thread), so the pid cannot be reused while the task holds the
 * pidfd, and every kill(-pgid) below happens while the leader is at most a
 * zombie, so the group id still names our group.  No wait blocks: the
 * reaps here follow a readable pidfd (WNOHANG), and the one that cannot
 * await (exec_kill_now) waits a bounded time after SIGKILL.
 *
 * Cancel and timeout.  A cancel of a running exec task does not cancel the
 * runtime task (whose cleanup may not wait): tasktab calls exec_cancel,
 * which sets a flag and fires the oneshot.  The body then sends SIGTERM to
 * the leader (through its pidfd) and to its process group, SIGKILL after
 * the grace (TaskSpec.kill_grace_ms, else config kill_grace), reaps, and
 * only then ends, as cancelled or timed_out.  The child leads its own
 * session, so it cannot move to another group; the pidfd reaches it all
 * the same.  The kind enforces its timeout itself the same way
 * (own_timeout), from before the child starts: a child stuck on its way
 * (chdir or execve on a hung mount) is killed at the timeout, by
 * exec_spawn_kill while a spawner starts it, else by the SIGTERM that ends
 * any running child (the child unblocks it first thing).  A task
 * cancelled before its child started never starts one.  race --cancel-rest
 * and select cancel their losers through the task table too.  A
 * runtime-level cancel (rok_stop at the end of a daemon stop, or a cancel
 * that comes while the child is being started) cannot wait: the cleanup
 * section sends SIGKILL and reaps at once.
 *
 * When the leader exits, whatever is left of its process group is killed
 * (SIGKILL, before the leader is reaped), as systemd does for a unit's
 * control group: a task is its process group, and a background process
 * holding the output pipe would otherwise keep the task running forever.
 * What is still in the pipes is then read, and the task ends.
 *
 * Once the child started, its group and start time are journaled
 * (journal_exec_started): if rokd dies, the leader dies with it
 * (PDEATHSIG) but the rest of the group would not, so the next start
 * kills it (exec-orphans.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec.h"
#include "journal.h"
#include "rok/io.h"
#include "rokd.h"

enum { EXEC_RUN, EXEC_TERM, EXEC_KILL };

struct exec_job {
	struct rtask *rec;
	uint64_t id;
	uid_t uid;
	/* The spec, copied (NUL-terminated strings). */
	char **argv;
	char **env;
	size_t nenv;
	char *cwd;                  /* NULL: rokd's */
	uint8_t *in;
	size_t in_len, in_off;
	bool clean_env;
	int nice;                   /* added to the child's nice (its class) */
	int64_t timeout_ns, grace_ns;
	/* The child. */
	pid_t pid;                  /* 0: none */
	int pidfd;
	int outfd[2];               /* our ends of stdout, stderr; -1: closed */
	bool eof[2];                /* outfd[i] at its end, closed at the end */
	int infd;                   /* our end of stdin; -1: none/closed */
	struct exec_cgroup cg;      /* procs -1: none */
	bool reaped;
	siginfo_t si;
	/* Waits. */
	rok_io_op io_pid, io_out[2], io_in;
	rok_sleep_op to_sleep, grace_sleep;
	bool to_armed, grace_armed;
	int64_t to_deadline, grace_deadline;
	struct exec_req *req;       /* the start, until its answer came */
	rok_oneshot *req_done;      /* the start's answer, until received */
	struct exec_req *launch;    /* a direct start's: until the reap */
	rok_oneshot *wake;
	rok_chan_op wake_op;
	bool woken;
	bool more;                  /* a pipe still had bytes: drain again */
	bool yielded;               /* rok_yield_now said pending */
	_Atomic bool cancel_req;    /* set by exec_cancel (any thread) */
	/* How it went. */
	int phase;
	int end_how;                /* RT_SUCCEEDED, RT_CANCELLED, RT_TIMED_OUT */
	bool start_failed;
	char reason[160];
	struct exec_out out;
};

struct exec_frame {
	struct exec_job *job;       /* owned; freed by exec_finish */
};

int exec_init(void)
{
	int err = exec_output_init();

	if (err < 0)
		return err;
	exec_cgroup_init();
	return exec_spawn_init();
}

/* ---- the job (reactor thread) -------------------------------------------- */

static void exec_job_free(struct exec_job *j)
{
	if (j == NULL)
		return;
	exec_args_strv_free(j->argv);
	exec_args_strv_free(j->env);
	free(j->cwd);
	free(j->in);
	free(j);
}

static void exec_init_frame(void *frame, struct rtask *r, const TaskSpec *spec)
{
	struct exec_frame *f = frame;
	struct exec_job *j = calloc(1, sizeof(*j));

	f->job = NULL;
	if (j == NULL)
		return;
	j->rec = r;
	j->id = tasktab_id(r);
	j->uid = tasktab_uid(r);
	j->pidfd = j->infd = -1;
	j->cg = EXEC_CGROUP_NONE;
	j->outfd[0] = j->outfd[1] = -1;
	j->argv = exec_args_strv(spec->args, spec->n_args);
	j->env = exec_args_strv(spec->env, spec->n_env);
	j->nenv = spec->n_env;
	j->clean_env = spec->clean_env;
	j->nice = queue_nice(spec);
	if (spec->cwd.len > 0)
		j->cwd = exec_args_strndup(&spec->cwd);
	if (spec->stdin.len > 0 && (j->in = malloc(spec->stdin.len)) != NULL) {
		memcpy(j->in, spec->stdin.data, spec->stdin.len);
		j->in_len = spec->stdin.len;
	}
	j->timeout_ns = duration_ns(spec->timeout_ms);
	j->grace_ns = duration_ns(spec->kill_grace_ms != 0 ? spec->kill_grace_ms
	                                                 : CONFIG_LIMIT(kill_grace_ms));
	j->end_how = RT_SUCCEEDED;
	atomic_init(&j->cancel_req, false);
	exec_out_init(&j->out, j->id, j->uid,
	              CONFIG_LIMIT(max_task_output));
	if (j->argv == NULL || j->env == NULL ||
	    (spec->cwd.len > 0 && j->cwd == NULL) ||
	    (spec->stdin.len > 0 && j->in == NULL)) {
		exec_job_free(j);
		return;
	}
	f->job = j;
}

/* ---- starting the child (worker) ----------------------------------------- */

static void exec_fail(struct exec_job *j, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void exec_fail(struct exec_job *j, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->reason, sizeof(j->reason), fmt, ap);
	va_end(ap);
	j->start_failed = true;
}

/*
 * Prepares the child's start and submits it (exec_spawn_submit: started
 * at once on a pool worker, else by a spawner thread): 0, or -1 with the
 * reason in j (a failed task).  The request takes j's argv, env and cwd;
 * j->req_done is what the task awaits.
 */
static int exec_start(struct exec_job *j)
{
	struct exec_req *r = calloc(1, sizeof(*r));
	int err;

	if (r == NULL) {
		exec_fail(j, "out of memory");
		return -1;
	}
	/* Before any failure: exec_req_free closes what these name. */
	for (int i = 0; i < 3; i++)
		r->child[i] = r->ours[i] = -1;
	r->pidfd = -1;
	r->cg = EXEC_CGROUP_NONE;
	if (!exec_available()) {
		free(r);
		exec_fail(j, "exec tasks are not available in this process");
		return -1;
	}
	exec_out_forget(j->id, j->uid, tasktab_run(j->rec));
	r->owner = j->uid;
	bool change = config.root && j->uid != 0;
	if (change || j->clean_env) {
		err = exec_user_get(j->uid, &r->user);
		if (err < 0 && (change || err != -ENOENT)) {
			if (err == -ENOENT)
				exec_fail(j, "uid %u has no entry in the user "
				          "database", (unsigned)j->uid);
			else
				exec_fail(j, "looking up uid %u: %s",
				          (unsigned)j->uid, strerror(-err));
			goto fail;
		}
	}
	if (j->clean_env &&
	    exec_args_clean_env(&j->env, &j->nenv,
	                        r->user.name != NULL ? &r->user : NULL) < 0) {
		exec_fail(j, "out of memory");
		goto fail;
	}
	const char *path = exec_args_getenv(j->env, "PATH");
	err = exec_args_paths(j->argv[0], path != NULL ? path
	                      : EXEC_DEFAULT_PATH, &r->paths);
	if (err < 0) {
		/* argv[0] may be long: its start, and the error. */
		exec_fail(j, "exec %.64s%s: %s", j->argv[0],
		          strlen(j->argv[0]) > 64 ? "..." : "",
		          strerror(-err));
		goto fail;
	}
	size_t argc = 0;
	while (j->argv[argc] != NULL)
		argc++;
	if ((r->sh_argv = calloc(argc + 2, sizeof(*r->sh_argv))) == NULL) {
		exec_fail(j, "out of memory");
		goto fail;
	}
	r->sh_argv[0] = (char *)"/bin/sh";
	for (size_t i = 1; i < argc; i++)
		r->sh_argv[i + 1] = j->argv[i];
	r->want_stdin = j->in_len > 0;
	if ((err = rok_oneshot_new(&r->done)) < 0) {
		exec_fail(j, "out of memory");
		goto fail;
	}
	/* Moved into the request: the spawner frees them. */
	r->argv = j->argv;
	r->env = j->env;
	r->cwd = j->cwd;
	j->argv = j->env = NULL;
	j->cwd = NULL;
	r->s = (struct exec_start){
		.argv = r->argv,
		.envp = r->env,
		.paths = r->paths,
		.sh_argv = r->sh_argv,
		.cwd = r->cwd,
		.fds = { -1, -1, -1 },   /* the spawner's pipes */
		.cgroup = -1,            /* the spawner's cgroup */
		.change_creds = change,
		.nice = j->nice,
		.uid = j->uid,
		.gid = r->user.gid,
		.ngroups = r->user.ngroups,
		.groups = r->user.groups,
	};
	j->req = r;
	j->req_done = r->done;
	exec_spawn_submit(r);
	return 0;
fail:
	exec_req_free(r, false);
	return -1;
}

/*
 * Journals the child's process group (its pid: it leads the group) and its
 * start time, for recovery to kill what is left of the group if rokd dies
 * (exec-orphans.c).  The start time is the spawner's (exec_spawner_run)
 * when it knows it; else /proc/<pid>/stat's: the child is ours and
 * unreaped, so /proc/<pid> is it.
 */
static void exec_record_group(struct exec_job *j, const struct exec_req *r)
{
	pid_t pgrp;
	uint64_t start;
	int err = 0;

	if (r->start_known)
		start = r->start_ticks;
	else
		err = exec_orphans_stat(j->pid, &pgrp, &start);
	if (err < 0) {
		log_errno(err, "task %llu: /proc/%d/stat: its process group is "
		          "not recorded, nor killed if rokd dies",
		          (unsigned long long)j->id, (int)j->pid);
		return;
	}
	journal_exec_started(j->id, j->pid, start);
}

/*
 * Await: the spawner's answer, or the timeout first (then the start is
 * given up: a child stuck on its way, in a path on a hung mount say, is
 * killed, and the answer follows).  Takes the child (pid, pidfd, our pipe
 * ends, its cgroup) or the reason it did not start, in the poll that
 * receives it (kept if that poll also sees a cancel: the cleanup then
 * kills the child).
 */
static rok_poll exec_await_start(rok_cx *cx, struct exec_job *j)
{
	void *v = NULL;
	int err;

	if (j->to_armed &&
	    rok_sleep_until(cx, &j->to_sleep, j->to_deadline) == ROK_READY) {
		j->to_armed = false;
		j->end_how = RT_TIMED_OUT;
		exec_spawn_kill(j->req);
	}
	if (rok_oneshot_recv(cx, &j->wake_op, j->req_done, &v, &err) ==
	    ROK_PENDING || cx->releasing)
		return ROK_PENDING;
	(void)rok_oneshot_drop_receiver(j->req_done);
	j->req_done = NULL;
	j->req = NULL;
	j->wake_op = (rok_chan_op){ 0 };
	struct exec_req *r = v;
	if (r == NULL) {
		exec_fail(j, "the spawner went away");
		return ROK_READY;
	}
	if (r->pid > 0) {
		j->pid = r->pid;
		j->pidfd = r->pidfd;
		j->infd = r->ours[0];
		j->outfd[0] = r->ours[1];
		j->outfd[1] = r->ours[2];
		j->cg = r->cg;
		r->cg = EXEC_CGROUP_NONE;
		r->pid = 0;
		r->pidfd = -1;
		r->ours[0] = r->ours[1] = r->ours[2] = -1;
		exec_record_group(j, r);
		if (r->direct) {
			/* Its child may not have exec'd yet: it reads r. */
			j->launch = r;
			return ROK_READY;
		}
	} else if (j->end_how == RT_SUCCEEDED) {
		exec_fail(j, "%s", r->reason);
	}
	exec_req_free(r, false);
	return ROK_READY;
}

/*
 * The child is reaped, or killed: a direct start's request is let go, and
 * a step of the child's that failed before execve makes the task one that
 * failed to start, with the reason (as a spawner's answer does), unless
 * it ended otherwise already (timed out, cancelled).
 */
static void exec_launch_done(struct exec_job *j)
{
	if (j->launch == NULL)
		return;
	if (exec_req_reaped(j->launch, &j->cg) && j->end_how == RT_SUCCEEDED)
		exec_fail(j, "%s", j->launch->reason);
	exec_req_free(j->launch, false);
	j->launch = NULL;
}

/* ---- supervising (worker) ------------------------------------------------ */

/* Drops the wait `op` may hold on fd (an await polled with
 * cx->releasing set releases its registration). */
static void exec_unwatch(rok_cx *cx, rok_io_op *op, int fd, bool write)
{
	bool was = cx->releasing;
	cx->releasing = true;
	(void)(write ? rok_writable(cx, op, fd) : rok_readable(cx, op, fd));
	cx->releasing = was;
}

/* Closes one of our fds that may have been awaited with `op`: the wait is
 * released first, then rok_io_close takes the fd out of epoll and closes
 * it, on this worker. */
static void exec_close(rok_cx *cx, rok_io_op *op, int *fd, bool write)
{
	if (*fd < 0)
		return;
	exec_unwatch(cx, op, *fd, write);
	rok_io_close(*fd);
	*fd = -1;
}

/*
 * One await over every source of work at once: ready when any of them is.
 * Each awaitable keeps its own registration, so all are polled on every
 * poll (a pending one just stays linked); called with cx->releasing set
 * (cancellation, or exec_release), each drops its registration.
 */
static rok_poll exec_wait(rok_cx *cx, struct exec_job *j)
{
	bool ready = false;

	/* Not once reaped: both reaps drop the pidfd's waiter and watch
	 * first (exec_reap, exec_kill_now). */
	if (j->pidfd >= 0 && !j->reaped)
		ready |= rok_readable(cx, &j->io_pid, j->pidfd) == ROK_READY;
	for (int i = 0; i < 2; i++)
		if (j->outfd[i] >= 0 && !j->eof[i])
			ready |= rok_readable(cx, &j->io_out[i], j->outfd[i]) ==
			         ROK_READY;
	if (j->infd >= 0)
		ready |= rok_writable(cx, &j->io_in, j->infd) == ROK_READY;
	if (j->wake != NULL && !j->woken) {
		void *v;
		int err;
		if (rok_oneshot_recv(cx, &j->wake_op, j->wake, &v, &err) ==
		    ROK_READY)
			ready = j->woken = true;
	}
	if (j->to_armed &&
	    rok_sleep_until(cx, &j->to_sleep, j->to_deadline) == ROK_READY) {
		j->to_armed = false;
		ready = true;
	}
	if (j->grace_armed &&
	    rok_sleep_until(cx, &j->grace_sleep, j->grace_deadline) ==
	    ROK_READY) {
		j->grace_armed = false;
		ready = true;
	}
	/* A pipe left with bytes (EXEC_DRAIN_BUDGET): ready again once every
	 * other ready task had the worker.  A yield that said pending is
	 * always taken back (it leaves a flag on the task). */
	if (j->yielded) {
		(void)rok_yield_now(cx);
		j->yielded = false;
		ready = true;
	} else if (j->more && !cx->releasing) {
		if (rok_yield_now(cx) == ROK_READY)
			ready = true;
		else
			j->yielded = true;
	}
	return ready && !cx->releasing ? ROK_READY : ROK_PENDING;
}

/* Drops every registration exec_wait still holds (before the body ends
 * normally; a cancelled await drops them itself). */
static void exec_release(rok_cx *cx, struct exec_job *j)
{
	bool was = cx->releasing;

	cx->releasing = true;
	(void)exec_wait(cx, j);
	cx->releasing = was;
	j->to_armed = j->grace_armed = false;
	j->woken = true;
}

#define EXEC_READ_BYTES 32768

/*
 * Reads what a pipe holds: until it would block, or its end, or `budget`
 * reads (then j->more: a child that writes without pause must not keep the
 * worker from other tasks; the next exec_wait yields first).  The
 * readiness edge was consumed, so the pipe must be read again without
 * awaiting it.
 *
 * At its end the pipe's wait is released but the fd stays open (eof) until
 * the task ends, when both pipes and the pidfd go to rok_io_close.
 */
static void exec_drain(rok_cx *cx, struct exec_job *j, int i, int budget)
{
	uint8_t buf[EXEC_READ_BYTES];

	for (int reads = 0; j->outfd[i] >= 0 && !j->eof[i]; reads++) {
		if (reads == budget) {
			j->more = true;
			return;
		}
		ssize_t n = read(j->outfd[i], buf, sizeof(buf));
		if (n > 0) {
			exec_out_append(&j->out, i + 1, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		exec_unwatch(cx, &j->io_out[i], j->outfd[i], false);
		j->eof[i] = true;
	}
}

/* Feeds stdin bytes as far as the pipe takes them; closes it when done
 * (or when the child closed its end: EPIPE is no error of the task). */
static void exec_feed(rok_cx *cx, struct exec_job *j)
{
	while (j->infd >= 0 && j->in_off < j->in_len) {
		ssize_t n = write(j->infd, j->in + j->in_off,
		                  j->in_len - j->in_off);
		if (n > 0) {
			j->in_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		break;   /* EPIPE or another error: stop feeding */
	}
	exec_close(cx, &j->io_in, &j->infd, true);
}

/* To the leader through its pidfd (it may have left its group: a session
 * leader cannot, but a cgroup-less kernel has no other hold on it) and to
 * its process group.  Only while the leader is unreaped, so its pid and
 * group id are still ours. */
static void exec_signal(struct exec_job *j, int sig)
{
	(void)syscall(SYS_pidfd_send_signal, j->pidfd, sig, NULL, 0);
	(void)kill(-j->pid, sig);
	if (sig == SIGKILL)
		exec_cgroup_kill(&j->cg);
}

/* Starts the kill sequence (cancel, timeout): SIGTERM now. */
static void exec_terminate(struct exec_job *j, int how)
{
	j->end_how = how;
	j->phase = EXEC_TERM;
	exec_signal(j, SIGTERM);
	j->grace_deadline = rok_deadline(j->grace_ns);
	j->grace_armed = true;
}

/*
 * Looks at the leader: reaps it once it has exited, after killing what is
 * left of its group.  True once reaped.  Never waits.
 *
 * The pidfd's watch goes first: the reap makes the pidfd ready once more
 * (the pid is released), and a watched pidfd would wake the reactor for
 * that edge, which nobody awaits (one thread wake-up per exec task).
 */
static bool exec_reap(rok_cx *cx, struct exec_job *j)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid(P_PIDFD, (id_t)j->pidfd, &si,
	           WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
		return false;
	/* The leader is a zombie: the group id cannot be reused yet. */
	(void)kill(-j->pid, SIGKILL);
	exec_cgroup_kill_left(&j->cg);
	bool was = cx->releasing;
	cx->releasing = true;
	(void)rok_readable(cx, &j->io_pid, j->pidfd);   /* unlinks it */
	cx->releasing = was;
	rok_io_forget(j->pidfd);   /* no waiter left: wakes nobody */
	memset(&j->si, 0, sizeof(j->si));
	if (waitid(P_PIDFD, (id_t)j->pidfd, &j->si, WEXITED | WNOHANG) != 0 ||
	    j->si.si_pid == 0) {
		/* A zombie is reaped at once; anything else is a bug.  The
		 * task ends all the same, as exec_kill_now's does: its pidfd,
		 * readable and no longer watched, would otherwise end every
		 * await at once, and the loop would spin. */
		log_errno(errno, "task %llu: waitid", (unsigned long long)j->id);
		memset(&j->si, 0, sizeof(j->si));
		j->si.si_code = CLD_KILLED;
		j->si.si_status = SIGKILL;
	}
	j->reaped = true;
	return true;
}

/* A cancel whose body could not wait (runtime cancel, daemon stop): kill
 * and reap now, waiting a bounded time. */
static void exec_kill_now(struct exec_job *j)
{
	if (j->pid == 0 || j->reaped)
		return;
	exec_cgroup_kill(&j->cg);
	rok_io_forget(j->pidfd);   /* as in exec_reap; no waiter is left */
	int err = exec_kill_reap(j->pid, j->pidfd, &j->si);
	if (err < 0) {
		log_errno(err, "task %llu: pid %d did not end after SIGKILL; it "
		          "is reaped once it does", (unsigned long long)j->id,
		          (int)j->pid);
		memset(&j->si, 0, sizeof(j->si));
		j->si.si_code = CLD_KILLED;
		j->si.si_status = SIGKILL;
	}
	j->reaped = true;
	if (j->end_how == RT_SUCCEEDED)
		j->end_how = RT_CANCELLED;
}

/* Up to this many reads of 32 KiB per pipe per poll. */
#define EXEC_DRAIN_BUDGET 8

/* The last drain, the group dead: the reads that empty pipe i if no one
 * writes to it any more, which is the case unless a process left the
 * group (and there is no cgroup): that one, writing on, must not hold the
 * worker for as long as it writes.  What it writes past that is dropped. */
static int exec_drain_last(struct exec_job *j, int i)
{
	if (j->outfd[i] < 0 || j->eof[i])
		return 0;
	int size = fcntl(j->outfd[i], F_GETPIPE_SZ);

	if (size <= 0)
		size = 1 << 20;   /* pipe-max-size's default */
	return size / EXEC_READ_BYTES + 2;
}

static rok_poll exec_poll(rok_cx *cx, void *frame)
{
	struct exec_frame *f = frame;
	struct exec_job *j = f->job;

	ROK_BEGIN(cx);
	if (j == NULL)
		ROK_RETURN(cx, NULL);
	/* From here: a child stuck before exec times out too. */
	if (j->timeout_ns > 0) {
		j->to_deadline = rok_deadline(j->timeout_ns);
		j->to_armed = true;
	}
	if (exec_start(j) < 0) {
		j->to_armed = false;   /* never awaited */
		ROK_RETURN(cx, NULL);
	}
	ROK_AWAIT(cx, exec_await_start(cx, j));
	if (j->start_failed || j->pid == 0) {
		exec_release(cx, j);
		ROK_RETURN(cx, NULL);
	}
	if (j->end_how != RT_SUCCEEDED) {
		/* Timed out on its way: killed already; make sure. */
		j->phase = EXEC_KILL;
		exec_signal(j, SIGKILL);
	}
	if (rok_oneshot_new(&j->wake) < 0)
		j->wake = NULL;   /* cancel then only works at its timeout */
	else
		tasktab_set_ctl(j->rec, j);
	for (;;) {
		ROK_AWAIT(cx, exec_wait(cx, j));
		j->more = false;
		exec_drain(cx, j, 0, EXEC_DRAIN_BUDGET);
		exec_drain(cx, j, 1, EXEC_DRAIN_BUDGET);
		exec_feed(cx, j);
		if (exec_reap(cx, j)) {
			exec_launch_done(j);
			break;
		}
		int64_t now = rok_now();
		if (j->phase == EXEC_RUN && atomic_load(&j->cancel_req))
			exec_terminate(j, RT_CANCELLED);
		else if (j->phase == EXEC_RUN && j->timeout_ns > 0 &&
		         now >= j->to_deadline)
			exec_terminate(j, RT_TIMED_OUT);
		else if (j->phase == EXEC_TERM && now >= j->grace_deadline) {
			j->phase = EXEC_KILL;
			exec_signal(j, SIGKILL);
		}
	}
	/* The group is dead: what is left in the pipes is all there is. */
	exec_drain(cx, j, 0, exec_drain_last(j, 0));
	exec_drain(cx, j, 1, exec_drain_last(j, 1));
	exec_release(cx, j);
	ROK_CLEANUP(cx);
	if (j != NULL) {
		if (j->req_done != NULL) {
			/* Cancelled while the child started: a child stuck
			 * on its way is killed now, and the spawner (or we,
			 * if it answered already) reaps it. */
			exec_spawn_kill(j->req);
			exec_req_free(rok_oneshot_drop_receiver(j->req_done),
			              true);
			j->req_done = NULL;
			j->req = NULL;
		}
		if (j->wake != NULL) {
			/* After this no exec_cancel runs for j. */
			tasktab_set_ctl(j->rec, NULL);
			if (!atomic_load(&j->cancel_req))
				rok_oneshot_drop_sender(j->wake);
			(void)rok_oneshot_drop_receiver(j->wake);
			j->wake = NULL;
		}
		exec_kill_now(j);
		exec_launch_done(j);
		/* A cancelled await dropped its registrations already. */
		exec_close(cx, &j->io_out[0], &j->outfd[0], false);
		exec_close(cx, &j->io_out[1], &j->outfd[1], false);
		exec_close(cx, &j->io_in, &j->infd, true);
		if (j->pidfd >= 0) {
			rok_io_close(j->pidfd);
			j->pidfd = -1;
		}
		exec_out_done(&j->out);
		/* A leader ended by SIGKILL may have been killed through its
		 * cgroup by someone else than rokd (the task itself, as root). */
		if (j->reaped && j->si.si_code == CLD_KILLED &&
		    j->si.si_status == SIGKILL)
			j->cg.killed = true;
		/* Empty by now, unless killed processes are still exiting. */
		exec_cgroup_done(&j->cg);
	}
	ROK_END(cx);
}

/* Any thread, under the task table's lock: must not block. */
static void exec_cancel(void *ctl)
{
	struct exec_job *j = ctl;

	if (!atomic_exchange(&j->cancel_req, true))
		(void)rok_oneshot_send(j->wake, (void *)1);
}

static void exec_finish(void *frame, int how, struct rt_outcome *o)
{
	struct exec_frame *f = frame;
	struct exec_job *j = f->job;

	f->job = NULL;
	if (j == NULL) {
		o->state = RT_FAILED;
		snprintf(o->reason, sizeof(o->reason), "out of memory");
		return;
	}
	o->output_truncated = j->out.truncated;
	if (j->start_failed) {
		o->state = RT_FAILED;
		snprintf(o->reason, sizeof(o->reason), "%s", j->reason);
	} else {
		if (j->reaped && j->si.si_code == CLD_EXITED) {
			o->has_exit_code = true;
			o->exit_code = j->si.si_status;
		} else if (j->reaped) {
			o->has_signal = true;
			o->signal = j->si.si_status;
		}
		/* end_how: also a timeout before the child was up. */
		if (how == RT_SUCCEEDED && j->end_how != RT_SUCCEEDED)
			o->state = j->end_how;
		else if (how == RT_SUCCEEDED)
			o->state = o->has_exit_code && o->exit_code == 0
			           ? RT_SUCCEEDED : RT_FAILED;
	}
	exec_job_free(j);
}

const struct kind kind_exec = {
	.name = "exec",
	.check = exec_args_check,
	.poll = exec_poll,
	.frame_size = sizeof(struct exec_frame),
	.init = exec_init_frame,
	.finish = exec_finish,
	.cancel = exec_cancel,
	.own_timeout = true,
	.slot = true,
};
