/*
 * exec-spawn.c — starting an exec task's child: who it runs as, and the
 * vfork + execve itself.
 *
 * glibc's posix_spawn cannot change uids or groups, so children start with
 * vfork().  The child shares rokd's memory until it execs, and rokd has
 * other threads running, so the child makes raw system calls only: no
 * malloc, no locks, no glibc wrapper that touches process-wide state.  In
 * particular setgroups/setresgid/setresuid are syscall(SYS_...) and not the
 * glibc functions, which broadcast the change to every thread of the
 * process (they would reach rokd's threads through the shared memory).
 * Signal dispositions and the mask go through the raw rt_sig* calls too, and
 * the child leaves with exit_group, not _exit (which sanitizers intercept).
 *
 * The parent blocks every signal around vfork() so that no handler runs in
 * the child on the parent's stack; the child resets every disposition that
 * is not the default (SIGPIPE, which rokd ignores; sanitizer handlers) and
 * unblocks everything just before execve.  Order in
 * the child: reset signals, own process group, the three fds, close
 * everything else (every rokd fd is close-on-exec anyway: close_range is a
 * backstop), drop to the submitter (setgroups, setresgid, setresuid), chdir
 * (with the submitter's rights), PR_SET_PDEATHSIG (after the credential
 * change, which clears it), check that the parent is still rokd, execve for
 * each PATH candidate.  A step that fails stores its errno and its name in
 * memory the parent sees (vfork shares it) and exits 127; the parent reaps
 * that child and returns the error, so a typo in a command is a failed task
 * with a reason, not a daemon error.
 *
 * PR_SET_PDEATHSIG fires when the *thread* that forked exits.  Runtime
 * workers do not qualify: a worker stuck in a call is handed off to a
 * helper thread that retires later, and children forked there were killed
 * when it did.  So every child is forked by one spawner thread that rokd
 * starts at boot and never stops: exec tasks queue a request (a mutex and a
 * condition variable) and await a oneshot that the spawner sends the
 * request back through.  One thread is enough: vfork suspends only it, and
 * only until the child execs (tens of microseconds), and it keeps that
 * stall off the workers.  If the task is gone when the spawner answers (it
 * was cancelled while its child started), the spawner kills and reaps the
 * child itself.
 *
 * The user database (getpwuid_r, getgrouplist) is read before forking, on
 * the worker: with /etc files that is a few hundred microseconds, and a
 * small cache (uid → account, 10 s) makes it rare; a slow NSS backend would
 * stall one worker, which the runtime's blocking detection then hands off.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"
#include "rokd.h"

static void *exec_spawner_main(void *arg);

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct exec_req *head, *tail;   /* queued requests, FIFO */
	int devnull;
	/* Signals not at SIG_DFL in rokd (ignored, or caught by a sanitizer
	 * runtime): the child resets them before it unblocks signals, so no
	 * handler of rokd's ever runs in the child, on rokd's memory. */
	int reset[64];
	int nreset;
} spawn = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.devnull = -1,
};

int exec_spawn_init(void)
{
	pthread_t t;
	sigset_t all, old;
	int err;

	spawn.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (spawn.devnull < 0)
		return -errno;
	spawn.nreset = 0;
	for (int sig = 1; sig < 65 && spawn.nreset < 64; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL)
			spawn.reset[spawn.nreset++] = sig;
	}
	/* The spawner runs with every signal blocked (it blocks them around
	 * vfork anyway); it lives until the process exits. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, NULL, exec_spawner_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err != 0)
		return -err;
	pthread_detach(t);
	return 0;
}

int exec_devnull(void)
{
	return spawn.devnull;
}

bool exec_available(void)
{
	return spawn.devnull >= 0;   /* exec_spawn_init ran */
}

/* ---- the child ---------------------------------------------------------- */

/* Written by the child, read by the parent after vfork returns. */
struct exec_fail {
	int err;
	const char *step;
};

/* The kernel's sigaction, for the raw rt_sigaction call. */
struct exec_ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};

static _Noreturn void exec_child_fail(volatile struct exec_fail *fail,
                                      const char *step, long rc)
{
	fail->err = rc < 0 ? (int)-rc : errno;
	fail->step = step;
	syscall(SYS_exit_group, 127);
	for (;;)
		;
}

/* Runs in the vfork child: raw system calls only (see the top). */
static _Noreturn void exec_child(const struct exec_start *s, pid_t parent,
                                 volatile struct exec_fail *fail)
{
	struct exec_ksigaction dfl = { 0 };
	uint64_t none = 0;
	long rc;

	for (int i = 0; i < spawn.nreset; i++)
		syscall(SYS_rt_sigaction, spawn.reset[i], &dfl, NULL,
		        sizeof(uint64_t));
	if (syscall(SYS_setpgid, 0, 0) != 0)
		exec_child_fail(fail, "setpgid", 0);
	for (int i = 0; i < 3; i++) {
		/* dup3 refuses old == new; the fds are never 0-2 here (rokd
		 * keeps its own 0-2 open), but be safe: clear CLOEXEC then. */
		if (s->fds[i] == i)
			rc = syscall(SYS_fcntl, i, F_SETFD, 0);
		else
			rc = syscall(SYS_dup3, s->fds[i], i, 0);
		if (rc < 0)
			exec_child_fail(fail, "dup2", 0);
	}
	(void)syscall(SYS_close_range, 3u, ~0u, 0u);
	if (s->change_creds) {
		if (syscall(SYS_setgroups, s->ngroups, s->groups) != 0)
			exec_child_fail(fail, "setgroups", 0);
		if (syscall(SYS_setresgid, s->gid, s->gid, s->gid) != 0)
			exec_child_fail(fail, "setresgid", 0);
		if (syscall(SYS_setresuid, s->uid, s->uid, s->uid) != 0)
			exec_child_fail(fail, "setresuid", 0);
	}
	if (s->cwd != NULL && syscall(SYS_chdir, s->cwd) != 0)
		exec_child_fail(fail, "chdir", 0);
	if (syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
		exec_child_fail(fail, "prctl", 0);
	if (syscall(SYS_getppid) != parent)
		exec_child_fail(fail, "getppid", -ESRCH);
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof(none));
	/* execvp's rules: the first candidate that is not missing wins;
	 * EACCES is reported if nothing ran and some candidate had it. */
	int err = ENOENT;
	for (size_t i = 0; s->paths[i] != NULL; i++) {
		syscall(SYS_execve, s->paths[i], s->argv, s->envp);
		if (errno == EACCES)
			err = EACCES;
		else if (errno != ENOENT && errno != ENOTDIR) {
			err = errno;
			break;
		}
	}
	/* Signals are blocked again so the failure path is like the rest. */
	exec_child_fail(fail, "exec", -err);
}

static pid_t exec_spawn(const struct exec_start *s, const char **step)
{
	sigset_t all, old;
	volatile struct exec_fail fail = { 0, NULL };
	int err;

	*step = "fork";
	sigfillset(&all);
	if ((err = pthread_sigmask(SIG_SETMASK, &all, &old)) != 0)
		return -err;
	pid_t parent = getpid();
	pid_t pid = vfork();
	if (pid == 0)
		exec_child(s, parent, &fail);
	int fork_err = errno;
	(void)pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
		return -fork_err;
	if (fail.step != NULL) {
		/* It exited before exec: reap it here, it is ours alone. */
		siginfo_t si;
		while (waitid(P_PID, (id_t)pid, &si, WEXITED) != 0 &&
		       errno == EINTR)
			;
		*step = fail.step;
		return -(fail.err != 0 ? fail.err : EIO);
	}
	return pid;
}

/* ---- the spawner thread --------------------------------------------------- */

void exec_spawn_submit(struct exec_req *r)
{
	r->next = NULL;
	pthread_mutex_lock(&spawn.lock);
	if (spawn.tail != NULL)
		spawn.tail->next = r;
	else
		spawn.head = r;
	spawn.tail = r;
	pthread_cond_signal(&spawn.cond);
	pthread_mutex_unlock(&spawn.lock);
}

/* Frees what only the child needed, and closes the child's fds. */
static void exec_req_strip(struct exec_req *r)
{
	for (int i = 0; i < 3; i++) {
		if (r->child[i] >= 0 && r->child[i] != spawn.devnull)
			close(r->child[i]);
		r->child[i] = -1;
	}
	for (size_t i = 0; r->argv != NULL && r->argv[i] != NULL; i++)
		free(r->argv[i]);
	for (size_t i = 0; r->env != NULL && r->env[i] != NULL; i++)
		free(r->env[i]);
	free(r->argv);
	free(r->env);
	free(r->paths);
	free(r->cwd);
	exec_user_done(&r->user);
	r->argv = r->env = r->paths = NULL;
	r->cwd = NULL;
	memset(&r->s, 0, sizeof(r->s));
}

void exec_req_free(struct exec_req *r, bool kill_child)
{
	if (r == NULL)
		return;
	exec_req_strip(r);
	if (kill_child && r->pid > 0) {
		siginfo_t si;
		(void)kill(-r->pid, SIGKILL);
		while (waitid(P_PID, (id_t)r->pid, &si, WEXITED) != 0 &&
		       errno == EINTR)
			;
	}
	if (r->pidfd >= 0)
		close(r->pidfd);
	free(r);
}

static void exec_spawner_run(struct exec_req *r)
{
	const char *step;
	pid_t pid = exec_spawn(&r->s, &step);

	if (pid < 0) {
		const char *what = strerror((int)-pid);
		if (strcmp(step, "exec") == 0)
			snprintf(r->reason, sizeof(r->reason), "exec %s: %s",
			         r->argv[0], what);
		else if (strcmp(step, "chdir") == 0)
			snprintf(r->reason, sizeof(r->reason), "chdir %s: %s",
			         r->cwd, what);
		else
			snprintf(r->reason, sizeof(r->reason), "%s: %s", step,
			         what);
		exec_req_strip(r);
		return;
	}
	r->pid = pid;
	/* No race: nobody else reaps, so pid names our child until we do.
	 * A pidfd is always close-on-exec. */
	r->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (r->pidfd < 0) {
		/* Cannot supervise it: it dies here, the task fails. */
		siginfo_t si;
		snprintf(r->reason, sizeof(r->reason), "pidfd_open: %s",
		         strerror(errno));
		(void)kill(-pid, SIGKILL);
		while (waitid(P_PID, (id_t)pid, &si, WEXITED) != 0 &&
		       errno == EINTR)
			;
		r->pid = 0;
	}
	exec_req_strip(r);
}

static void *exec_spawner_main(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&spawn.lock);
		while (spawn.head == NULL)
			pthread_cond_wait(&spawn.cond, &spawn.lock);
		struct exec_req *r = spawn.head;
		spawn.head = r->next;
		if (spawn.head == NULL)
			spawn.tail = NULL;
		pthread_mutex_unlock(&spawn.lock);
		exec_spawner_run(r);
		/* The task gone (cancelled meanwhile): its child dies here. */
		if (rok_oneshot_send(r->done, r) < 0)
			exec_req_free(r, true);
	}
	return NULL;
}
