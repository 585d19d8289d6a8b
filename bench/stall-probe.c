/*
 * stall-probe — how long this machine stops running anything: one thread
 * per CPU, pinned there, at SCHED_FIFO where it may be (root), asks to
 * wake every millisecond and records how late each wake-up was.  A
 * real-time thread preempts every ordinary one, so what it sees late is
 * time the kernel or the hypervisor did not give the CPU (a guest's vCPU
 * descheduled by the host shows no steal time here), not the
 * benchmark's own load.  bench/latency runs it beside timer_storm.
 *
 *	stall-probe
 *
 * runs until SIGTERM or SIGINT, then prints: fifo=0|1 cpus=N wakeups=W
 * max_late_us=M over_1ms=K over_1ms_sum_us=S (K wake-ups more than 1 ms
 * late, S the sum of their lateness, over every CPU).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SP_PERIOD_NS 1000000ll
#define SP_MAX_CPUS  1024

struct sp_cpu {
	pthread_t thread;
	int cpu;
	int64_t wakeups, max_late, over, over_sum;   /* ns */
};

static atomic_bool sp_stop;

static int64_t sp_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec;
}

static void *sp_run(void *arg)
{
	struct sp_cpu *c = arg;
	struct timespec next, now;

	clock_gettime(CLOCK_MONOTONIC, &next);
	/* Relaxed: a flag to stop at the next wake-up; the counts are read
	 * after pthread_join. */
	while (!atomic_load_explicit(&sp_stop, memory_order_relaxed)) {
		next.tv_nsec += SP_PERIOD_NS;
		if (next.tv_nsec >= 1000000000) {
			next.tv_sec++;
			next.tv_nsec -= 1000000000;
		}
		int err;
		while ((err = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME,
		                              &next, NULL)) == EINTR)
			;
		if (err != 0) {
			fprintf(stderr, "stall-probe: clock_nanosleep: %s\n",
			        strerror(err));
			exit(1);
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		int64_t late = sp_ns(&now) - sp_ns(&next);
		c->wakeups++;
		if (late > c->max_late)
			c->max_late = late;
		if (late > SP_PERIOD_NS) {
			c->over++;
			c->over_sum += late;
			next = now;   /* one stall counts once */
		}
	}
	return NULL;
}

int main(void)
{
	static struct sp_cpu cpus[SP_MAX_CPUS];
	cpu_set_t set;
	sigset_t sigs;
	int n = 0, sig, fifo = 1;

	if (sched_getaffinity(0, sizeof(set), &set) != 0) {
		perror("stall-probe: sched_getaffinity");
		return 1;
	}
	/* The threads inherit the mask: only the parent waits for these. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	for (int cpu = 0; cpu < CPU_SETSIZE && n < SP_MAX_CPUS; cpu++) {
		if (!CPU_ISSET(cpu, &set))
			continue;
		struct sp_cpu *c = &cpus[n];
		pthread_attr_t attr;
		cpu_set_t one;
		struct sched_param prio = { .sched_priority = 50 };
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		c->cpu = cpu;
		int err = pthread_attr_init(&attr);
		if (err == 0)
			err = pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
		if (err == 0 && fifo) {
			(void)pthread_attr_setinheritsched(&attr,
			                                   PTHREAD_EXPLICIT_SCHED);
			(void)pthread_attr_setschedpolicy(&attr, SCHED_FIFO);
			(void)pthread_attr_setschedparam(&attr, &prio);
		}
		if (err == 0)
			err = pthread_create(&c->thread, &attr, sp_run, c);
		if (err == EPERM && fifo) {
			/* Not allowed real-time: ordinary threads, said so. */
			fifo = 0;
			(void)pthread_attr_setinheritsched(&attr,
			                                   PTHREAD_INHERIT_SCHED);
			err = pthread_create(&c->thread, &attr, sp_run, c);
		}
		pthread_attr_destroy(&attr);
		if (err != 0) {
			fprintf(stderr, "stall-probe: a thread for CPU %d: %s\n",
			        cpu, strerror(err));
			return 1;
		}
		n++;
	}
	while (sigwait(&sigs, &sig) != 0)
		;
	atomic_store_explicit(&sp_stop, true, memory_order_relaxed);
	int64_t wakeups = 0, max_late = 0, over = 0, over_sum = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(cpus[i].thread, NULL);
		wakeups += cpus[i].wakeups;
		over += cpus[i].over;
		over_sum += cpus[i].over_sum;
		if (cpus[i].max_late > max_late)
			max_late = cpus[i].max_late;
	}
	printf("fifo=%d cpus=%d wakeups=%lld max_late_us=%.1f over_1ms=%lld "
	       "over_1ms_sum_us=%.1f\n", fifo, n, (long long)wakeups,
	       (double)max_late / 1e3, (long long)over, (double)over_sum / 1e3);
	return 0;
}
