/*
 * check_cpuprobe.c — the choice of the journal thread's CPU
 * (daemon/cpuprobe.c) alone, with made-up commit durations and a virtual
 * clock: the turns the CPUs take, keeping the clearly fastest (by its
 * number), the CPUPROBE_KEEP_PCT boundary, keeping none when they are
 * close, medians that outliers do not move, a slowdown during the probe,
 * trying again after CPUPROBE_AGAIN_NS or as soon as the CPU kept slows
 * down, and the cases that never probe.
 */
#include <stdint.h>

#include "cpuprobe.h"
#include "testutil.h"

#define US 1000ll

/*
 * Runs a whole probe: took(cpu, i) is the i-th duration taken on cpu.
 * Checks that the CPUs take turns, CPUPROBE_BLOCK durations each, in
 * order, and returns the step of the last sample (CPUPROBE_DECIDE).
 */
static enum cpuprobe_step probe(struct cpuprobe *p, int64_t (*took)(int, int),
                                int64_t now)
{
	int taken[CPUPROBE_MAX_CPUS] = { 0 };
	int total = p->ncpus * CPUPROBE_SAMPLES;
	enum cpuprobe_step step = CPUPROBE_STAY;

	for (int k = 0; k < total; k++) {
		int turn = (k / CPUPROBE_BLOCK) % p->ncpus;
		ck_assert_int_eq(cpuprobe_want(p), p->cpus[turn]);
		step = cpuprobe_sample(p, took(cpuprobe_want(p), taken[turn]++), now);
		if (k == total - 1)
			break;
		ck_assert_int_eq(step, (k + 1) % CPUPROBE_BLOCK == 0
		                       ? CPUPROBE_TRY : CPUPROBE_STAY);
	}
	return step;
}

/* Commits that take one time per CPU, indexed by CPU number. */
static const int64_t *speed;

static int64_t by_speed(int cpu, int i)
{
	(void)i;
	return speed[cpu];
}

static enum cpuprobe_step probe_speeds(struct cpuprobe *p,
                                       const int64_t *ns_by_cpu, int64_t now)
{
	speed = ns_by_cpu;
	return probe(p, by_speed, now);
}

/* The disk's interrupt on CPU 1: commits there 99 µs, elsewhere 151. */
static const int64_t irq_on_1[] = { 151 * US, 99 * US };
static const int64_t irq_on_0[] = { 99 * US, 151 * US };

static int64_t alike(int cpu, int i)
{
	return (100 + cpu * 5 + i % 7) * US;
}

/* CPU 3 faster, but a quarter of its commits stall (checkpoints). */
static int64_t fast_with_stalls(int cpu, int i)
{
	if (cpu == 3)
		return i % 4 == 0 ? 9000 * US : 90 * US;
	return 140 * US;
}

START_TEST(keeps_the_interrupts_cpu)
{
	int cpus[] = { 0, 1 };
	struct cpuprobe p;

	cpuprobe_init(&p, cpus, 2);
	ck_assert_int_eq(cpuprobe_want(&p), 0);
	ck_assert_int_eq(probe_speeds(&p, irq_on_1, 1), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 1);
	ck_assert_int_eq(p.median[0], 151 * US);
	ck_assert_int_eq(p.median[1], 99 * US);
	/* Decided: it stays while its commits stay as fast. */
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(cpuprobe_sample(&p, (99 + i % 40) * US, 2 + i),
		                 CPUPROBE_STAY);
	ck_assert_int_eq(cpuprobe_want(&p), 1);
}
END_TEST

/* The CPUs are named by number, not by their place in the list. */
START_TEST(names_the_cpu_not_its_index)
{
	static const int64_t irq_on_5[] = { 150 * US, 0, 150 * US, 0, 0,
	                                    80 * US };
	int cpus[] = { 0, 2, 5 };
	struct cpuprobe p;

	cpuprobe_init(&p, cpus, 3);
	ck_assert_int_eq(probe_speeds(&p, irq_on_5, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 5);
}
END_TEST

/* CPUPROBE_KEEP_PCT exactly: kept; a microsecond more: not. */
START_TEST(keep_boundary)
{
	static const int64_t at_85[] = { 100 * US, 85 * US };
	static const int64_t at_86[] = { 100 * US, 86 * US };
	int cpus[] = { 0, 1 };
	struct cpuprobe p;

	cpuprobe_init(&p, cpus, 2);
	ck_assert_int_eq(probe_speeds(&p, at_85, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 1);
	cpuprobe_init(&p, cpus, 2);
	ck_assert_int_eq(probe_speeds(&p, at_86, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), -1);
}
END_TEST

/*
 * The CPU kept gets busy (a CPU-bound task there): once the median of its
 * last CPUPROBE_SAMPLES commits is above another CPU's from the probe,
 * the probe starts again at once, not after CPUPROBE_AGAIN_NS.
 */
START_TEST(tries_again_when_the_kept_cpu_slows)
{
	int cpus[] = { 0, 1 };
	struct cpuprobe p;

	cpuprobe_init(&p, cpus, 2);
	ck_assert_int_eq(probe_speeds(&p, irq_on_1, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 1);
	/* As slow as CPU 0 was: not slower, so it stays. */
	for (int i = 0; i < 2 * CPUPROBE_SAMPLES; i++)
		ck_assert_int_eq(cpuprobe_sample(&p, 151 * US, 1), CPUPROBE_STAY);
	/* A few slow commits do not move the median. */
	for (int i = 0; i < CPUPROBE_SAMPLES; i++)
		ck_assert_int_eq(cpuprobe_sample(&p, (i % 4 ? 99 : 900) * US, 1),
		                 CPUPROBE_STAY);
	/* Most commits slower than CPU 0's median. */
	for (int i = 0; i < CPUPROBE_SAMPLES - 1; i++)
		ck_assert_int_eq(cpuprobe_sample(&p, 400 * US, 1), CPUPROBE_STAY);
	ck_assert_int_eq(cpuprobe_sample(&p, 400 * US, 1), CPUPROBE_TRY);
	ck_assert_int_eq(cpuprobe_want(&p), 0);
	ck_assert_int_eq(p.nsamples[0], 0);
	ck_assert_int_eq(p.nsamples[1], 0);
	/* CPU 1 stays busy: CPU 0 wins the new probe. */
	ck_assert_int_eq(probe_speeds(&p, irq_on_0, 1), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 0);
}
END_TEST

START_TEST(keeps_none_when_alike)
{
	int cpus[] = { 2, 5, 7 };
	struct cpuprobe p;

	cpuprobe_init(&p, cpus, 3);
	ck_assert_int_eq(cpuprobe_want(&p), 2);
	ck_assert_int_eq(probe(&p, alike, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), -1);
}
END_TEST

/* The best must beat every other CPU, not only the slowest. */
START_TEST(keeps_none_when_two_are_fast)
{
	static const int64_t two_fast[] = { 100 * US, 95 * US, 300 * US };
	int cpus[] = { 0, 1, 2 };
	struct cpuprobe p;

	cpuprobe_init(&p, cpus, 3);
	ck_assert_int_eq(probe_speeds(&p, two_fast, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), -1);
}
END_TEST

START_TEST(median_ignores_stalls)
{
	int cpus[] = { 0, 1, 2, 3 };
	struct cpuprobe p;

	cpuprobe_init(&p, cpus, 4);
	ck_assert_int_eq(probe(&p, fast_with_stalls, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 3);
	ck_assert_int_eq(p.median[3], 90 * US);
}
END_TEST

/* The disk slows down threefold half-way through the probe (counted in
 * durations taken on any CPU).  Had CPU 0 taken all its turns first, it
 * would have seen only the fast half and won; with turns, both see it,
 * and the one with the interrupt still wins. */
static int slowing_calls;

static int64_t slowing(int cpu, int i)
{
	int half = 2 * CPUPROBE_SAMPLES / 2;

	(void)i;
	return irq_on_1[cpu] * (slowing_calls++ < half ? 1 : 3);
}

START_TEST(turns_share_a_slowdown)
{
	int cpus[] = { 0, 1 };
	struct cpuprobe p;

	slowing_calls = 0;
	cpuprobe_init(&p, cpus, 2);
	ck_assert_int_eq(probe(&p, slowing, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 1);
}
END_TEST

START_TEST(tries_again_later)
{
	int cpus[] = { 0, 1 };
	struct cpuprobe p;
	int64_t t = 1000;

	cpuprobe_init(&p, cpus, 2);
	ck_assert_int_eq(probe_speeds(&p, irq_on_1, t), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 1);
	ck_assert_int_eq(cpuprobe_sample(&p, 1, t + CPUPROBE_AGAIN_NS - 1),
	                 CPUPROBE_STAY);
	/* Time is up: the first CPU again, from a clean slate. */
	ck_assert_int_eq(cpuprobe_sample(&p, 1, t + CPUPROBE_AGAIN_NS),
	                 CPUPROBE_TRY);
	ck_assert_int_eq(cpuprobe_want(&p), 0);
	ck_assert_int_eq(p.nsamples[0], 0);
	ck_assert_int_eq(p.nsamples[1], 0);
	/* The interrupt moved to CPU 0 meanwhile (irqbalance). */
	ck_assert_int_eq(probe_speeds(&p, irq_on_0, t + CPUPROBE_AGAIN_NS),
	                 CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 0);
}
END_TEST

START_TEST(never_probes)
{
	int cpus[CPUPROBE_MAX_CPUS + 1];
	struct cpuprobe p;

	for (int i = 0; i <= CPUPROBE_MAX_CPUS; i++)
		cpus[i] = i;
	cpuprobe_init(&p, cpus, 1);
	ck_assert_int_eq(cpuprobe_want(&p), -1);
	ck_assert_int_eq(cpuprobe_sample(&p, 1, CPUPROBE_AGAIN_NS * 3),
	                 CPUPROBE_STAY);
	cpuprobe_init(&p, cpus, CPUPROBE_MAX_CPUS + 1);
	ck_assert_int_eq(cpuprobe_want(&p), -1);
	ck_assert_int_eq(cpuprobe_sample(&p, 1, CPUPROBE_AGAIN_NS * 3),
	                 CPUPROBE_STAY);
	/* Stopped mid-probe (a move the kernel refused): any CPU, for good. */
	cpuprobe_init(&p, cpus, 2);
	ck_assert_int_eq(cpuprobe_want(&p), 0);
	cpuprobe_stop(&p);
	ck_assert_int_eq(cpuprobe_want(&p), -1);
	for (int i = 0; i < 3 * CPUPROBE_SAMPLES; i++)
		ck_assert_int_eq(cpuprobe_sample(&p, 1, CPUPROBE_AGAIN_NS * i),
		                 CPUPROBE_STAY);
}
END_TEST

/* Durations from a stepped clock: negative or huge, still a decision. */
START_TEST(bounds_durations)
{
	static const int64_t absurd[] = { INT64_MAX, -5 };
	int cpus[] = { 0, 1 };
	struct cpuprobe p;

	cpuprobe_init(&p, cpus, 2);
	ck_assert_int_eq(probe_speeds(&p, absurd, 0), CPUPROBE_DECIDE);
	ck_assert_int_eq(cpuprobe_want(&p), 1);
	ck_assert_int_eq(p.median[1], 0);
	ck_assert_int_eq(p.median[0], 3600 * 1000000000ll);
}
END_TEST

static Suite *cpuprobe_suite(void)
{
	const struct test_case cases[] = {
		{ "keeps_the_interrupts_cpu", keeps_the_interrupts_cpu },
		{ "names_the_cpu_not_its_index", names_the_cpu_not_its_index },
		{ "keep_boundary", keep_boundary },
		{ "tries_again_when_the_kept_cpu_slows",
		  tries_again_when_the_kept_cpu_slows },
		{ "keeps_none_when_alike", keeps_none_when_alike },
		{ "keeps_none_when_two_are_fast", keeps_none_when_two_are_fast },
		{ "median_ignores_stalls", median_ignores_stalls },
		{ "turns_share_a_slowdown", turns_share_a_slowdown },
		{ "tries_again_later", tries_again_later },
		{ "never_probes", never_probes },
		{ "bounds_durations", bounds_durations },
	};

	return TEST_SUITE("cpuprobe", cases, 10);
}

int main(void)
{
	return test_run(cpuprobe_suite());
}
