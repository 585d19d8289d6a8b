/*
 * journal-cpu.c — the CPU the journal thread runs on at durability =
 * full: the one where its commits end soonest, when one clearly does
 * (cpuprobe.c says why and how).  At normal a commit does not wait for
 * the disk, and with durability = off there is no thread: nothing is
 * probed.  The CPUs tried are those the thread may use when it starts
 * (rokd's own affinity, a cpuset): a later change of rokd's affinity is
 * not seen, and a move the kernel refuses ends the probing for good, with
 * a warning.  Journal thread only.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "cpuprobe.h"
#include "journal.h"

static struct {
	struct cpuprobe probe;
	cpu_set_t allowed;          /* the thread's at start */
	int said;                   /* the CPU last logged as chosen; -1: any,
	                               -2: none yet */
} jcpu;

/* Runs the calling thread on `cpu`, or back on every allowed CPU (-1). */
static int journal_cpu_move(int cpu)
{
	cpu_set_t one;

	if (cpu < 0)
		return pthread_setaffinity_np(pthread_self(), sizeof(jcpu.allowed),
		                              &jcpu.allowed);
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	return pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
}

/* A move refused (a CPU taken offline, a cpuset changed): no more
 * probing, and the thread goes where the scheduler puts it. */
static void journal_cpu_give_up(int cpu, int err)
{
	log_warnx("journal: cannot run the journal thread on CPU %d (%s): it "
	          "runs on any from now on", cpu, strerror(err));
	cpuprobe_stop(&jcpu.probe);
	jcpu.said = -1;
	(void)journal_cpu_move(-1);
}

/* Logs a new decision, with every CPU's median. */
static void journal_cpu_say(void)
{
	char list[256];
	size_t off = 0;
	const struct cpuprobe *p = &jcpu.probe;

	list[0] = '\0';
	for (int i = 0; i < p->ncpus && off < sizeof(list); i++) {
		int n = snprintf(list + off, sizeof(list) - off, "%sCPU %d %lld",
		                 i > 0 ? ", " : "", p->cpus[i],
		                 (long long)(p->median[i] / 1000));
		if (n < 0)
			break;
		off += (size_t)n;
	}
	int cpu = cpuprobe_want(p);
	if (cpu >= 0)
		log_info("journal: commits end soonest on CPU %d (median µs: %s): "
		         "the journal thread stays there", cpu, list);
	else
		log_info("journal: no CPU ends commits clearly sooner (median µs: "
		         "%s): the journal thread runs on any", list);
}

void journal_cpu_start(void)
{
	int cpus[CPUPROBE_MAX_CPUS], n = 0;

	jcpu.said = -2;
	cpuprobe_init(&jcpu.probe, NULL, 0);
	if (!config.durability_full ||
	    sched_getaffinity(0, sizeof(jcpu.allowed), &jcpu.allowed) != 0)
		return;
	int count = CPU_COUNT(&jcpu.allowed);
	if (count < 2 || count > CPUPROBE_MAX_CPUS)
		return;
	for (int cpu = 0; cpu < CPU_SETSIZE && n < count; cpu++)
		if (CPU_ISSET(cpu, &jcpu.allowed))
			cpus[n++] = cpu;
	cpuprobe_init(&jcpu.probe, cpus, n);
	int cpu = cpuprobe_want(&jcpu.probe);
	int err = journal_cpu_move(cpu);
	if (err != 0)
		journal_cpu_give_up(cpu, err);
}

void journal_cpu_commit(int64_t took_ns, int64_t now_ns)
{
	enum cpuprobe_step step = cpuprobe_sample(&jcpu.probe, took_ns,
	                                          now_ns);

	if (step == CPUPROBE_STAY)
		return;
	int cpu = cpuprobe_want(&jcpu.probe);
	int err = journal_cpu_move(cpu);
	if (err != 0) {
		journal_cpu_give_up(cpu, err);
		return;
	}
	if (step == CPUPROBE_DECIDE && cpu != jcpu.said) {
		jcpu.said = cpu;
		journal_cpu_say();
	}
}
