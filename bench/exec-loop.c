/*
 * exec-loop — the floor for running N short commands: a plain C loop of
 * vfork + execvp + waitpid keeping P children alive at once (P = 2 matches
 * xargs -P2 and rok-load -c 2), nothing else.  bench/latency compares
 * rokd's exec rate with it.
 *
 *	exec-loop N P COMMAND [ARG...]
 *
 * prints: n=N p=P seconds=WALL rate=PER_S child_cpu_us=C self_cpu_us=S
 * switches=W.  C and S are the CPU time (user + system) per command of the
 * children and of the loop itself (bench/latency's CPU budget per task), W
 * the loop's context switches per command.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* User + system time of `ru`, in µs. */
static double el_cpu_us(const struct rusage *ru)
{
	return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e6 +
	       (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec);
}

static double el_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* vfork in a function of its own: the caller's locals stay out of the
 * child's way (and out of -Wclobbered's). */
static pid_t el_start(char **argv)
{
	pid_t pid = vfork();

	if (pid == 0) {
		execvp(argv[0], argv);
		_exit(127);
	}
	return pid;
}

int main(int argc, char **argv)
{
	long n, p, started = 0, done = 0;
	double t0;

	if (argc < 4) {
		fprintf(stderr, "usage: exec-loop N P COMMAND [ARG...]\n");
		return 2;
	}
	n = strtol(argv[1], NULL, 10);
	p = strtol(argv[2], NULL, 10);
	if (n < 1 || n > 100000000 || p < 1 || p > 1024) {
		fprintf(stderr, "exec-loop: N in 1..1e8, P in 1..1024\n");
		return 2;
	}
	t0 = el_now();
	while (done < n) {
		while (started < n && started - done < p) {
			if (el_start(argv + 3) < 0) {
				perror("exec-loop: vfork");
				return 1;
			}
			started++;
		}
		int st;
		if (wait(&st) < 0) {
			if (errno == EINTR)
				continue;
			perror("exec-loop: wait");
			return 1;
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "exec-loop: a child failed (%d)\n", st);
			return 1;
		}
		done++;
	}
	double s = el_now() - t0;
	struct rusage kids, self;
	if (getrusage(RUSAGE_CHILDREN, &kids) != 0 ||
	    getrusage(RUSAGE_SELF, &self) != 0) {
		perror("exec-loop: getrusage");
		return 1;
	}
	/* switches: how often the loop itself left the CPU (voluntarily:
	 * vfork and wait; or preempted), per command. */
	printf("n=%ld p=%ld seconds=%.3f rate=%.1f child_cpu_us=%.1f "
	       "self_cpu_us=%.1f switches=%.1f\n", n, p, s, (double)n / s,
	       el_cpu_us(&kids) / (double)n, el_cpu_us(&self) / (double)n,
	       (double)(self.ru_nvcsw + self.ru_nivcsw) / (double)n);
	return 0;
}
