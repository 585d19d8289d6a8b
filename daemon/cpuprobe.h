/*
 * cpuprobe.h — which CPU a thread that waits for the disk should run on,
 * found by trying each (cpuprobe.c): no locks, no threads, no clock of its
 * own.  journal-cpu.c applies its answers to the journal thread;
 * tests/check_cpuprobe.c drives it alone with made-up durations.
 */
#ifndef ROKD_CPUPROBE_H
#define ROKD_CPUPROBE_H

#include <stdbool.h>
#include <stdint.h>

/* Durations taken on each CPU, CPUPROBE_BLOCK at a time: the CPUs take
 * turns, so that a change of the disk's speed during the probe falls on
 * all of them. */
#define CPUPROBE_SAMPLES 32
#define CPUPROBE_BLOCK 8
/* More CPUs than this: no probe (it would take too long to be of use). */
#define CPUPROBE_MAX_CPUS 16
/* A CPU is kept when its median is at most this percentage of every
 * other CPU's. */
#define CPUPROBE_KEEP_PCT 85
/* How long a choice stands before the CPUs are tried again (unless the
 * CPU kept turns slower first). */
#define CPUPROBE_AGAIN_NS (600 * 1000000000ll)

struct cpuprobe {
	int cpus[CPUPROBE_MAX_CPUS];      /* the CPUs allowed, in order */
	int ncpus;
	int trying;                       /* index into cpus; -1: decided */
	int kept;                         /* index decided on; -1: none */
	int64_t samples[CPUPROBE_MAX_CPUS][CPUPROBE_SAMPLES];
	int nsamples[CPUPROBE_MAX_CPUS];
	int64_t median[CPUPROBE_MAX_CPUS];
	int64_t decided_ns;
};

/* The CPU to run on now: the one being tried, else the one kept; -1: any. */
static inline int cpuprobe_want(const struct cpuprobe *p)
{
	return p->trying >= 0 ? p->cpus[p->trying]
	       : p->kept >= 0 ? p->cpus[p->kept] : -1;
}

/*
 * Starts a probe over the n CPUs in cpus: cpuprobe_want is the first to
 * run on (or -1, any, for fewer than two CPUs or more than
 * CPUPROBE_MAX_CPUS: then nothing is ever tried, and cpus is not read).
 */
void cpuprobe_init(struct cpuprobe *p, const int *cpus, int n);

enum cpuprobe_step {
	CPUPROBE_STAY,      /* cpuprobe_want is unchanged */
	CPUPROBE_TRY,       /* the probe moves on to the CPU cpuprobe_want */
	CPUPROBE_DECIDE,    /* the probe is over: cpuprobe_want stands */
};

/*
 * One duration (ns) of the work being placed, taken on cpuprobe_want, at
 * time now.  Unless CPUPROBE_STAY, the caller moves the thread to
 * cpuprobe_want (-1: back to every allowed CPU).
 */
enum cpuprobe_step cpuprobe_sample(struct cpuprobe *p, int64_t took,
                                   int64_t now);

/* Never tries again: cpuprobe_want is -1 from now on. */
void cpuprobe_stop(struct cpuprobe *p);

#endif
