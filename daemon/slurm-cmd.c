/*
 * slurm-cmd.c — running one Slurm command (sbatch, squeue, scancel) and
 * taking its output.
 *
 * Called on a thread of the blocking pool (a submission, a scancel) or on
 * the watcher's thread (squeue), never on a worker: a command takes a fork,
 * an exec and a round trip to slurmctld.  The child only makes
 * async-signal-safe calls between fork and execve (rokd has threads): it
 * unblocks signals (pool threads block them all), restores SIGPIPE, takes
 * the user's credentials when asked, and execs.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"
#include "slurm.h"

extern char **environ;

/* Found once, under the lock; a path never changes once set. */
static pthread_mutex_t slurm_cmd_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *slurm_cmd_find(int k, const char *name);

const char *slurm_cmd_path(const char *name)
{
	static const char *const names[3] = { "sbatch", "squeue", "scancel" };
	int k = -1;

	for (int i = 0; i < 3; i++)
		if (strcmp(names[i], name) == 0)
			k = i;
	if (k < 0)
		return NULL;
	pthread_mutex_lock(&slurm_cmd_lock);
	const char *p = slurm_cmd_find(k, name);
	pthread_mutex_unlock(&slurm_cmd_lock);
	return p;
}

/* Lock held. */
static const char *slurm_cmd_find(int k, const char *name)
{
	static char paths[3][256];

	if (paths[k][0] != '\0')
		return paths[k];
	const char *path = getenv("PATH");
	char dirs[1024];
	snprintf(dirs, sizeof(dirs), "%s:/usr/bin:/usr/local/bin",
	         path != NULL ? path : "");
	char *save = NULL;
	for (char *d = strtok_r(dirs, ":", &save); d != NULL;
	     d = strtok_r(NULL, ":", &save)) {
		char p[256];
		if (*d != '/' ||
		    snprintf(p, sizeof(p), "%s/%s", d, name) >= (int)sizeof(p))
			continue;
		if (access(p, X_OK) == 0) {
			memcpy(paths[k], p, sizeof(p));
			return paths[k];
		}
	}
	return NULL;
}

static void slurm_cmd_child(char *const *argv, char *const *envp,
                            const struct exec_user *u, int in, int out)
{
	sigset_t none;

	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	(void)signal(SIGPIPE, SIG_DFL);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
		_exit(126);
	if (u != NULL &&
	    (setgroups(u->ngroups, u->groups) != 0 || setgid(u->gid) != 0 ||
	     setuid(u->uid) != 0))
		_exit(126);
	execve(argv[0], argv, envp != NULL ? envp : environ);
	_exit(127);
}

/*
 * Slurm's commands bound their own waits for slurmctld (MessageTimeout,
 * 10 s by default, a few tries); a command still running after a minute
 * is hung, and would hold a pool thread (sbatch, scancel) or every job's
 * state (squeue) for as long as it hangs.
 */
unsigned slurm_cmd_timeout_ms = 60000;

static int64_t slurm_cmd_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *slurm_cmd_strerror(int err)
{
	if (err == -E2BIG)
		return "its output was too long to read";
	if (err == -ETIMEDOUT)
		return "no answer in time: killed";
	return strerror(-err);
}

/*
 * Whether child pid exits by `deadline` (its output may have ended long
 * before: a wrapper that closed its fds, or daemonised).  Without a pidfd
 * (an old kernel) the caller waits as before, unbounded.
 */
static bool slurm_cmd_exits_by(pid_t pid, int64_t deadline)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);

	if (fd < 0)
		return true;
	int ready;
	do {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = deadline - slurm_cmd_now_ms();
		ready = left > 0 ? poll(&p, 1, (int)left) : 0;
	} while (ready < 0 && errno == EINTR);
	close(fd);
	return ready != 0;   /* an error: as without a pidfd */
}

int slurm_cmd_run(char *const *argv, char *const *envp,
                  const struct exec_user *u, const char *in, char *out,
                  size_t cap)
{
	int pin[2], pout[2];
	size_t kept = 0, in_len = in != NULL ? strlen(in) : 0, in_off = 0;
	bool cut = false, hung = false;
	int64_t deadline = slurm_cmd_now_ms() + slurm_cmd_timeout_ms;

	out[0] = '\0';
	if (pipe2(pin, O_CLOEXEC) != 0)
		return -errno;
	if (pipe2(pout, O_CLOEXEC) != 0) {
		int err = -errno;
		close(pin[0]);
		close(pin[1]);
		return err;
	}
	pid_t pid = fork();
	if (pid == 0)
		slurm_cmd_child(argv, envp, u, pin[0], pout[1]);
	int err = pid < 0 ? -errno : 0;
	close(pin[0]);
	close(pout[1]);
	if (err < 0) {
		close(pin[1]);
		close(pout[0]);
		return err;
	}
	if (in_len == 0) {
		close(pin[1]);
		pin[1] = -1;
	}
	/* Feeds stdin and reads stdout together: neither side can fill a
	 * pipe while the other waits. */
	while (pout[0] >= 0) {
		struct pollfd p[2] = {
			{ .fd = pout[0], .events = POLLIN },
			{ .fd = pin[1], .events = POLLOUT },
		};
		int64_t left = deadline - slurm_cmd_now_ms();
		int ready = left > 0 ? poll(p, pin[1] >= 0 ? 2 : 1, (int)left) : 0;
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0) {
			/* Out of time, or poll itself failed: either way the
			 * child is not heard, and is not waited for. */
			hung = true;
			break;
		}
		if (pin[1] >= 0 && p[1].revents != 0) {
			ssize_t n = write(pin[1], in + in_off, in_len - in_off);
			if (n > 0)
				in_off += (size_t)n;
			if (n < 0 && errno != EINTR && errno != EAGAIN)
				in_off = in_len;   /* EPIPE: it stopped reading */
			if (in_off == in_len) {
				close(pin[1]);
				pin[1] = -1;
			}
		}
		if (p[0].revents != 0) {
			char buf[4096];
			ssize_t n = read(pout[0], buf, sizeof(buf));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(pout[0]);
				pout[0] = -1;
				break;
			}
			size_t take = (size_t)n < cap - 1 - kept
			              ? (size_t)n : cap - 1 - kept;
			cut |= take < (size_t)n;
			memcpy(out + kept, buf, take);
			kept += take;
			out[kept] = '\0';
		}
	}
	if (pin[1] >= 0)
		close(pin[1]);
	if (pout[0] >= 0)
		close(pout[0]);
	if (!hung && !slurm_cmd_exits_by(pid, deadline))
		hung = true;
	if (hung)
		(void)kill(pid, SIGKILL);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	/* Output cut short would be read as a partial answer (jobs missing
	 * from squeue's list look gone): no answer instead. */
	if (hung)
		return -ETIMEDOUT;
	if (cut)
		return -E2BIG;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
