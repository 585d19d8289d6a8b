/*
 * cpuprobe.c — which CPU a thread that waits for the disk should run on.
 *
 * Why.  A disk whose completions all arrive on one CPU (one interrupt
 * line: a virtio-blk disk with a single queue, an older SATA controller)
 * wakes a thread that sleeps in fdatasync fastest when that thread sleeps
 * on that same CPU: elsewhere the wake-up is an inter-processor interrupt
 * to a CPU that may be idle, and on a virtual machine an idle vCPU must
 * first be scheduled again by the host.  Measured on this project's 2-vCPU
 * VMs (rokd, durability = full, one client, spawn-and-wait in a loop):
 * commits took a median of 99 µs while the journal thread ran on the CPU
 * of the disk's interrupt, 151 µs on the other, and which one the
 * scheduler picked at start lasted for the whole process.  Where every
 * CPU has a queue of its own (NVMe) the CPUs measure alike and nothing is
 * pinned.
 *
 * How.  No guess from /proc/interrupts (the mapping from a file to its
 * disk's interrupts is not portable, and a CPU's own load counts too): the
 * thread runs CPUPROBE_SAMPLES of its commits on each allowed CPU, the
 * CPUs taking turns CPUPROBE_BLOCK commits at a time (so that the disk's
 * own changes of speed fall on all of them), then stays on the CPU whose
 * median is clearly the lowest (at most CPUPROBE_KEEP_PCT of every
 * other's), or goes back to all of them.  The probe runs again after
 * CPUPROBE_AGAIN_NS, as loads and interrupt affinities change
 * (irqbalance), and at once when the CPU kept turns slower than another
 * was in the probe (cpuprobe_watch).  Medians, so that a checkpoint's
 * stall or a preemption during one commit does not decide.
 */
#include <stdlib.h>
#include <string.h>

#include "cpuprobe.h"

_Static_assert(CPUPROBE_SAMPLES % CPUPROBE_BLOCK == 0,
               "the CPUs' turns fill their samples exactly");

/* A commit longer than an hour counts as an hour. */
#define CPUPROBE_TOOK_MAX (3600 * 1000000000ll)

void cpuprobe_init(struct cpuprobe *p, const int *cpus, int n)
{
	memset(p, 0, sizeof(*p));
	p->trying = -1;
	p->kept = -1;
	if (n < 2 || n > CPUPROBE_MAX_CPUS)
		return;
	memcpy(p->cpus, cpus, (size_t)n * sizeof(*cpus));
	p->ncpus = n;
	p->trying = 0;
}

void cpuprobe_stop(struct cpuprobe *p)
{
	p->ncpus = 0;
	p->trying = -1;
	p->kept = -1;
}

static int cpuprobe_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* Index of the CPU to keep, or -1. */
static int cpuprobe_best(const struct cpuprobe *p)
{
	int best = 0;

	for (int i = 1; i < p->ncpus; i++)
		if (p->median[i] < p->median[best])
			best = i;
	for (int i = 0; i < p->ncpus; i++) {
		/* At most CPUPROBE_TOOK_MAX: no overflow at * 100. */
		if (i != best && p->median[best] * 100 >
		                         p->median[i] * CPUPROBE_KEEP_PCT)
			return -1;
	}
	return best;
}

/* Sorts CPU i's CPUPROBE_SAMPLES durations and returns their median. */
static int64_t cpuprobe_median(struct cpuprobe *p, int i)
{
	qsort(p->samples[i], CPUPROBE_SAMPLES, sizeof(p->samples[i][0]),
	      cpuprobe_cmp);
	return p->samples[i][CPUPROBE_SAMPLES / 2];
}

static enum cpuprobe_step cpuprobe_restart(struct cpuprobe *p)
{
	memset(p->nsamples, 0, sizeof(p->nsamples));
	p->trying = 0;
	p->kept = -1;
	return CPUPROBE_TRY;
}

/*
 * A duration taken on the CPU kept: every CPUPROBE_SAMPLES of them, their
 * median against the other CPUs' from the probe.  Slower than one of
 * those (a busy CPU: a CPU-bound task on it, which the thread, pinned,
 * cannot move away from), and the probe starts again at once.
 */
static enum cpuprobe_step cpuprobe_watch(struct cpuprobe *p, int64_t took)
{
	int k = p->kept;

	p->samples[k][p->nsamples[k]++] = took;
	if (p->nsamples[k] < CPUPROBE_SAMPLES)
		return CPUPROBE_STAY;
	p->nsamples[k] = 0;
	int64_t now_median = cpuprobe_median(p, k);
	for (int i = 0; i < p->ncpus; i++)
		if (i != k && now_median > p->median[i])
			return cpuprobe_restart(p);
	return CPUPROBE_STAY;
}

enum cpuprobe_step cpuprobe_sample(struct cpuprobe *p, int64_t took,
                                   int64_t now)
{
	if (p->ncpus < 2)
		return CPUPROBE_STAY;
	/* Bounded: a negative or absurd duration (a clock step) must not
	 * overflow cpuprobe_best's products. */
	if (took < 0)
		took = 0;
	if (took > CPUPROBE_TOOK_MAX)
		took = CPUPROBE_TOOK_MAX;
	if (p->trying < 0) {
		if (now - p->decided_ns >= CPUPROBE_AGAIN_NS)
			return cpuprobe_restart(p);
		return p->kept >= 0 ? cpuprobe_watch(p, took) : CPUPROBE_STAY;
	}
	int i = p->trying;
	p->samples[i][p->nsamples[i]++] = took;
	if (p->nsamples[i] % CPUPROBE_BLOCK != 0)
		return CPUPROBE_STAY;
	/* The CPUs take turns: the next one has fewer, unless all are full. */
	int next = (i + 1) % p->ncpus;
	if (p->nsamples[next] < CPUPROBE_SAMPLES) {
		p->trying = next;
		return CPUPROBE_TRY;
	}
	for (int c = 0; c < p->ncpus; c++)
		p->median[c] = cpuprobe_median(p, c);
	p->kept = cpuprobe_best(p);
	p->trying = -1;
	p->decided_ns = now;
	if (p->kept >= 0)
		p->nsamples[p->kept] = 0;
	return CPUPROBE_DECIDE;
}
