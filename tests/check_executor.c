/*
 * check_executor.c — tests of the executor and its workers (sched/executor.c,
 * sched/worker.c) through the public API of rok.h.  One TCase per behaviour:
 *
 * idle:        a pool whose tasks are done burns no CPU (getrusage over a
 *              2 s sleep) and shows both workers parked.
 * workers:     rok_workers() is 1 outside the runtime and ROK_WORKERS inside
 *              a task; rok_cpu_count() is the online CPU count; inside a
 *              task block_on, task_wait and stop are refused with -EDEADLK;
 *              a second rok_start says -EALREADY.
 * env:         each bad ROK_WORKERS / ROK_THREAD_PER_CORE / ROK_LIFO makes
 *              rok_start, the first spawn and block_on fail with -EINVAL and
 *              starts no thread; with the setting fixed the runtime starts.
 * restart:     three start / stop rounds: start adds at least the workers'
 *              threads, stop returns 0 and joins every thread the runtime
 *              started (/proc/self/task), tasks run again after each start,
 *              task ids are never reused and grow from round to round.
 * stop:        tasks blocked for good (receiving from a silent channel,
 *              joining a task that yields forever, that task, a pinned
 *              task, tasks still queued) run their cleanup exactly once.
 * ids:         100k tasks spawned from four foreign threads and from a task
 *              get distinct ids; rok_task_id(handle) is the rok_id() seen
 *              inside; rok_try_id is -ESRCH outside a task.
 * spawn_local: -EPERM outside the pool; a pinned task is polled on its
 *              spawner's thread only, while its worker is being stolen from.
 * block_on:    the root's value comes back; root and its spawn_local tasks
 *              run on the calling thread and have all finished on return;
 *              tasks it rok_spawn'ed keep running afterwards; nested
 *              block_on / task_wait / stop give -EDEADLK; stop during a
 *              block_on on another thread is refused.
 * tpc:         ROK_THREAD_PER_CORE=1: no steals, children run on their
 *              spawner's thread, remote spawns reach both workers (the
 *              threads are checked only if no worker was handed off,
 *              since a helper may then run its tasks: SPEC A7).
 * steal:       normal mode: the children of one task end up on both
 *              workers through stealing.
 * handles:     dropping a handle does not cancel the task nor leak it (a
 *              malloc'd frame, counted by frame_bytes(), is freed);
 *              a finished task's frame is freed while handles remain,
 *              which still give its id and value; ref/unref balance;
 *              is_finished goes from false to true.
 * million:     10^6 spawns joined by one task, 4 x 10^5 spawned and waited
 *              by foreign threads at the same time; every value checked.
 * guest_waker: block_on does not free its guest worker while the waker
 *              that queued its root is still unparking it.
 * park_wake:   5 x 10^4 wake-ups through a guest's and (thread-per-core)
 *              pool workers' inboxes, none lost.
 *
 * Each test runs in its own forked process, so it sets ROK_WORKERS before
 * the runtime starts.  Tasks and helper threads never call ck_assert
 * (Check's failure path exits from whichever thread fails): they record
 * what they saw and the test thread asserts.  Tests wait through handles,
 * joins and semaphores, never by sleeping; the one sleep measures idle CPU.
 * ROK_TEST_SCALE divides the big counts (sanitizer builds).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"      /* frame_bytes(): the leak check of "handles" */
#include "task.h"       /* the state word: "guest_waker" waits for a park */
#include "testthreads.h"
#include "testutil.h"
#include "worker.h"     /* worker_push_remote_hook: "guest_waker" */

/* Asserting costs a pipe write per success in fork mode: loops test first. */
#define CEXEC_REQUIRE(cond, ...)                                             \
	do {                                                                 \
		if (!(cond))                                                 \
			ck_abort_msg(__VA_ARGS__);                           \
	} while (0)

/* Largest child frame cexec_spawner copies. */
#define CEXEC_CHILD_MAX 128

/* Polls that compared their thread with the one of their first poll, and
 * those that found another. */
static _Atomic long cexec_checked, cexec_wrong_thread;
/* Spawns refused inside tasks; joins whose handle id was not the id seen
 * inside the task. */
static _Atomic long cexec_spawn_errors, cexec_id_mismatch;

static long cexec_tri(long n)
{
	return n * (n - 1) / 2;   /* 0 + 1 + ... + n-1 */
}

/* ---- threads ----------------------------------------------------------- */

/* Distinct threads in v[0..n), copied to out[0..max); returns how many
 * (counting stops at max). */
static int cexec_distinct(const pthread_t *v, long n, pthread_t *out, int max)
{
	int k = 0;

	for (long i = 0; i < n && k < max; i++) {
		int j = 0;
		while (j < k && !pthread_equal(out[j], v[i]))
			j++;
		if (j == k)
			out[k++] = v[i];
	}
	return k;
}

static void cexec_sem_wait(sem_t *s)
{
	while (sem_wait(s) != 0)
		ck_assert_int_eq(errno, EINTR);
}

/* Called before ROK_BEGIN, so at every poll: remembers the thread of the
 * first poll and counts later polls on any other thread. */
static void cexec_check_thread(bool *started, pthread_t *want)
{
	pthread_t self = pthread_self();

	if (!*started) {
		*started = true;
		*want = self;
		return;
	}
	atomic_fetch_add_explicit(&cexec_checked, 1, memory_order_relaxed);
	if (!pthread_equal(self, *want))
		atomic_fetch_add_explicit(&cexec_wrong_thread, 1,
		                          memory_order_relaxed);
}

/* ---- tasks ------------------------------------------------------------ */

/* Returns its index. */
struct cexec_index {
	long idx;
};

static rok_poll cexec_index_poll(rok_cx *cx, void *frame)
{
	struct cexec_index *f = frame;

	ROK_BEGIN(cx);
	ROK_RETURN(cx, f->idx);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Spawns and waits for an index task from the calling thread. */
static long cexec_probe(long idx)
{
	struct cexec_index a = { idx };

	return (long)test_spawn_wait(cexec_index_poll, &a, sizeof(a));
}

/* Yields `yields` times and returns its index; the pointers (each
 * optional) are arrays indexed by idx that it fills in. */
struct cexec_yielder {
	long idx;               /* first member: cexec_spawner sets it */
	int yields, i;
	bool check, started;    /* check: see cexec_check_thread */
	pthread_t want;
	pthread_t *first;       /* first[idx] = thread of the first poll */
	pthread_t *last;        /* last[idx] = thread of the latest poll */
	uint64_t *ids;          /* ids[idx] = rok_id() */
	_Atomic int *done;      /* done[idx] = 1 when the body ends */
};

static rok_poll cexec_yielder_poll(rok_cx *cx, void *frame)
{
	struct cexec_yielder *f = frame;

	if (f->check)
		cexec_check_thread(&f->started, &f->want);
	if (f->last != NULL)
		f->last[f->idx] = pthread_self();
	ROK_BEGIN(cx);
	if (f->first != NULL)
		f->first[f->idx] = pthread_self();
	if (f->ids != NULL)
		f->ids[f->idx] = rok_id();
	for (f->i = 0; f->i < f->yields; f->i++)
		ROK_YIELD(cx);
	if (f->done != NULL)
		atomic_store(&f->done[f->idx], 1);
	ROK_RETURN(cx, f->idx);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/*
 * Spawns n children with handles (frames copied from a template whose first
 * member is `long idx`, set to 0..n-1), then joins them in order and
 * returns the sum of their values.
 */
struct cexec_spawner {
	long n, i;
	rok_poll_fn child_poll;
	const void *child;      /* borrowed template of child_size bytes */
	size_t child_size;
	bool check, started;    /* check: see cexec_check_thread */
	pthread_t want;
	pthread_t *self_out;    /* if set: thread of the first poll */
	uint64_t *ids;          /* if set: ids[i] is rok_task_id(child i) */
	rok_task **tasks;       /* n handles: caller storage */
	long sum;
	void *v;
	rok_join_op join;
};

union cexec_child {
	long idx;
	char bytes[CEXEC_CHILD_MAX];
};

static rok_poll cexec_spawner_poll(rok_cx *cx, void *frame)
{
	struct cexec_spawner *f = frame;

	if (f->check)
		cexec_check_thread(&f->started, &f->want);
	ROK_BEGIN(cx);
	if (f->self_out != NULL)
		*f->self_out = pthread_self();
	for (f->i = 0; f->i < f->n; f->i++) {
		union cexec_child c;
		int err;

		memcpy(c.bytes, f->child, f->child_size);
		c.idx = f->i;
		err = rok_spawn(&f->tasks[f->i], f->child_poll, &c,
		                f->child_size);
		if (err < 0) {
			atomic_fetch_add(&cexec_spawn_errors, 1);
			f->n = f->i;
			break;
		}
	}
	for (f->i = 0; f->i < f->n; f->i++) {
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->tasks[f->i], &f->v));
		f->sum += (long)f->v;
		if (f->ids != NULL &&
		    rok_task_id(f->tasks[f->i]) != f->ids[f->i])
			atomic_fetch_add(&cexec_id_mismatch, 1);
		rok_task_unref(f->tasks[f->i]);
	}
	ROK_RETURN(cx, f->sum);
	ROK_CLEANUP(cx);
	for (; f->i < f->n; f->i++)     /* left early: drop what is unjoined */
		rok_task_unref(f->tasks[f->i]);
	ROK_END(cx);
}

static void cexec_spawner_init(struct cexec_spawner *s, long n,
                               rok_poll_fn child_poll, const void *child,
                               size_t child_size)
{
	ck_assert_uint_le(child_size, CEXEC_CHILD_MAX);
	memset(s, 0, sizeof(*s));
	s->n = n;
	s->child_poll = child_poll;
	s->child = child;
	s->child_size = child_size;
	s->tasks = calloc((size_t)n, sizeof(*s->tasks));
	ck_assert_ptr_nonnull(s->tasks);
}

/* Runs `s` as a task from the calling thread, waits, frees its handle
 * array and returns the sum of the children's values. */
static long cexec_spawner_run(struct cexec_spawner *s)
{
	long sum = (long)test_spawn_wait(cexec_spawner_poll, s, sizeof(*s));

	free(s->tasks);
	s->tasks = NULL;
	return sum;
}

/* Receives one value from `ch` (posting `started` first, if set), yields
 * `yields` times, returns the value + 1. */
struct cexec_bg {
	rok_chan *ch;
	sem_t *started;
	int yields, i;
	void *v;
	int err;
	rok_chan_op op;
};

static rok_poll cexec_bg_poll(rok_cx *cx, void *frame)
{
	struct cexec_bg *f = frame;

	ROK_BEGIN(cx);
	if (f->started != NULL)
		sem_post(f->started);
	ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
	for (f->i = 0; f->i < f->yields; f->i++)
		ROK_YIELD(cx);
	ROK_RETURN(cx, (long)f->v + 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* ---- idle ------------------------------------------------------------- */

START_TEST(test_executor_idle)
{
	struct cexec_yielder y = { .yields = 3 };
	struct cexec_spawner s;
	struct rok_stats st;

	test_workers(2);
	/* Some work first, so the workers have run and gone to sleep. */
	cexec_spawner_init(&s, 256, cexec_yielder_poll, &y, sizeof(y));
	ck_assert_int_eq(cexec_spawner_run(&s), cexec_tri(256));
	for (long i = 0; i < 4; i++)
		ck_assert_int_eq(cexec_probe(i), i);

	struct rok_stats st0;
	rok_stats_get(&st0);
	double before = test_cpu_seconds();
	test_sleep_ms(2000);
	double used = test_cpu_seconds() - before;
	rok_stats_get(&st);
	ck_assert_msg(used < 0.1, "an idle pool of 2 used %.3f s of CPU in 2 s "
	              "(meanwhile: %llu polls, %llu parks, %llu hand-offs)",
	              used, (unsigned long long)(st.polls - st0.polls),
	              (unsigned long long)(st.parks - st0.parks),
	              (unsigned long long)(st.handoffs - st0.handoffs));

	ck_assert_uint_eq(st.workers, 2);
	ck_assert_uint_eq(st.parked, 2);
	ck_assert_uint_eq(st.searching, 0);
	ck_assert_uint_gt(st.parks, 0);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- workers ---------------------------------------------------------- */

/* What a task saw of the API from inside (written by the task, read by the
 * test thread after rok_task_wait). */
static struct {
	int workers, try_id_err, block_on_err, wait_err, stop_err;
	int start_err, spawn_local_err;
	uint64_t id, try_id;
	long local_value;
} cexec_inside;

struct cexec_inside_frame {
	rok_task *child;
	void *v;
	rok_join_op join;
};

static rok_poll cexec_inside_poll(rok_cx *cx, void *frame)
{
	struct cexec_inside_frame *f = frame;

	ROK_BEGIN(cx);
	{
		struct cexec_index a = { 5 };
		void *v = (void *)1;

		cexec_inside.workers = rok_workers();
		cexec_inside.try_id_err = rok_try_id(&cexec_inside.try_id);
		cexec_inside.id = rok_id();
		cexec_inside.block_on_err =
			rok_block_on(cexec_index_poll, &a, sizeof(a), &v);
		if (v != NULL)  /* *result is cleared even on failure */
			cexec_inside.block_on_err = -1000;
		cexec_inside.stop_err = rok_stop();
		cexec_inside.start_err = rok_start();
		cexec_inside.spawn_local_err =
			rok_spawn_local(&f->child, cexec_index_poll, &a,
			                sizeof(a));
		if (f->child != NULL)
			cexec_inside.wait_err = rok_task_wait(f->child, &v);
	}
	if (f->child != NULL) {
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->child, &f->v));
		cexec_inside.local_value = (long)f->v;
	}
	ROK_RETURN(cx, 77);
	ROK_CLEANUP(cx);
	rok_task_unref(f->child);
	ROK_END(cx);
}

START_TEST(test_executor_workers)
{
	struct cexec_inside_frame in = { 0 };
	struct rok_stats st;
	rok_task *t;
	void *v;

	ck_assert_int_eq(rok_workers(), 1);
	ck_assert_int_ge(rok_cpu_count(), 1);
	ck_assert_int_eq(rok_cpu_count(), (int)sysconf(_SC_NPROCESSORS_ONLN));
	ck_assert_int_eq(rok_stop(), 0);          /* not running: a no-op */

	/* 3: neither the default (CPU count) of this 2-CPU machine nor 1. */
	test_workers(3);
	ck_assert_int_eq(rok_start(), 0);
	ck_assert_int_eq(rok_start(), -EALREADY);
	ck_assert_int_eq(rok_workers(), 1);       /* the test thread: outside */
	rok_stats_get(&st);
	ck_assert_uint_eq(st.workers, 3);

	ck_assert_int_eq(rok_spawn(&t, cexec_inside_poll, &in, sizeof(in)), 0);
	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	ck_assert_int_eq((long)v, 77);
	ck_assert_int_eq(cexec_inside.workers, 3);
	ck_assert_int_eq(cexec_inside.try_id_err, 0);
	ck_assert_uint_eq(cexec_inside.try_id, cexec_inside.id);
	ck_assert_uint_eq(cexec_inside.id, rok_task_id(t));
	ck_assert_int_eq(cexec_inside.block_on_err, -EDEADLK);
	ck_assert_int_eq(cexec_inside.stop_err, -EDEADLK);
	ck_assert_int_eq(cexec_inside.start_err, -EALREADY);
	ck_assert_int_eq(cexec_inside.spawn_local_err, 0);
	ck_assert_int_eq(cexec_inside.wait_err, -EDEADLK);
	ck_assert_int_eq(cexec_inside.local_value, 5);
	rok_task_unref(t);

	ck_assert_int_eq(rok_workers(), 1);
	ck_assert_int_eq(rok_stop(), 0);
	ck_assert_int_eq(rok_workers(), 1);
}
END_TEST

/* ---- env -------------------------------------------------------------- */

static const struct {
	const char *name, *value;
} cexec_bad_env[] = {
	{ "ROK_WORKERS", "0" },
	{ "ROK_WORKERS", "abc" },
	{ "ROK_WORKERS", "-1" },
	{ "ROK_WORKERS", "2x" },
	{ "ROK_WORKERS", "1025" },
	{ "ROK_WORKERS", "99999999999999999999999" },
	{ "ROK_THREAD_PER_CORE", "2" },
	{ "ROK_THREAD_PER_CORE", "yes" },
	{ "ROK_LIFO", "on" },
};

START_TEST(test_executor_env_invalid)
{
	const char *name = cexec_bad_env[_i].name;
	struct cexec_index a = { 3 };
	struct rok_stats st;
	rok_task *t = (rok_task *)&a;
	void *v = (void *)&a;
	int base = test_thread_baseline();

	test_workers(2);
	ck_assert_int_eq(setenv(name, cexec_bad_env[_i].value, 1), 0);
	ck_assert_int_eq(rok_start(), -EINVAL);
	ck_assert_int_eq(rok_spawn(&t, cexec_index_poll, &a, sizeof(a)),
	                 -EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_int_eq(rok_block_on(cexec_index_poll, &a, sizeof(a), &v),
	                 -EINVAL);
	ck_assert_ptr_null(v);
	rok_stats_get(&st);
	ck_assert_uint_eq(st.workers, 0);
	ck_assert_int_eq(test_thread_count(), base);   /* nothing started */
	ck_assert_int_eq(rok_stop(), 0);

	/* The failed start left nothing behind: a good setting works. */
	ck_assert_int_eq(unsetenv(name), 0);
	test_workers(2);
	ck_assert_int_eq(rok_start(), 0);
	ck_assert_int_eq(cexec_probe(3), 3);
	rok_stats_get(&st);
	ck_assert_uint_eq(st.workers, 2);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- restart ---------------------------------------------------------- */

static int cexec_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

START_TEST(test_executor_restart)
{
	enum { ROUNDS = 3, FROM_TEST = 8, FROM_TASK = 64 };
	uint64_t all[ROUNDS * (FROM_TEST + FROM_TASK)];
	uint64_t prev_max = 0, last_test_id = 0;
	size_t nall = 0;
	int base = test_thread_baseline();

	test_workers(2);
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t round_max = 0, ids[FROM_TASK] = { 0 };
		struct cexec_yielder y = { .yields = 1 };
		struct cexec_spawner s;
		struct rok_stats st;

		ck_assert_int_eq(rok_start(), 0);
		ck_assert_int_eq(rok_start(), -EALREADY);
		ck_assert_int_ge(test_thread_count(), base + 2);

		/* From the test thread: ids grow from spawn to spawn. */
		for (long i = 0; i < FROM_TEST; i++) {
			struct cexec_index a = { i };
			rok_task *t;
			void *v;

			ck_assert_int_eq(rok_spawn(&t, cexec_index_poll, &a,
			                           sizeof(a)), 0);
			ck_assert_int_eq(rok_task_wait(t, &v), 0);
			ck_assert_int_eq((long)v, i);
			uint64_t id = rok_task_id(t);
			ck_assert_uint_gt(id, last_test_id);
			last_test_id = id;
			all[nall++] = id;
			if (id > round_max)
				round_max = id;
			rok_task_unref(t);
		}

		/* From a worker thread, new in this round: its ids are above
		 * every id handed out in earlier rounds. */
		y.ids = ids;
		cexec_spawner_init(&s, FROM_TASK, cexec_yielder_poll, &y,
		                   sizeof(y));
		s.ids = ids;
		ck_assert_int_eq(cexec_spawner_run(&s), cexec_tri(FROM_TASK));
		for (int i = 0; i < FROM_TASK; i++) {
			ck_assert_uint_gt(ids[i], prev_max);
			all[nall++] = ids[i];
			if (ids[i] > round_max)
				round_max = ids[i];
		}
		prev_max = round_max;

		ck_assert_int_eq(rok_stop(), 0);
		ck_assert_int_eq(test_threads_settled(base), base);
		ck_assert_int_eq(rok_stop(), 0);         /* already stopped */
		ck_assert_int_eq(rok_workers(), 1);
		rok_stats_get(&st);
		ck_assert_uint_eq(st.workers, 0);
		ck_assert_uint_eq(st.polls, 0);
		ck_assert_int_eq(st.registrations, 0);
	}
	ck_assert_int_eq(cexec_spawn_errors, 0);
	ck_assert_int_eq(cexec_id_mismatch, 0);

	/* Never reused. */
	qsort(all, nall, sizeof(all[0]), cexec_cmp_u64);
	ck_assert_uint_gt(all[0], 0);
	for (size_t i = 1; i < nall; i++)
		ck_assert_uint_gt(all[i], all[i - 1]);

	/* A task spawned from the stopped state restarts the runtime. */
	ck_assert_int_eq(cexec_probe(9), 9);
	ck_assert_int_ge(test_thread_count(), base + 2);
	ck_assert_int_eq(rok_stop(), 0);
	ck_assert_int_eq(test_threads_settled(base), base);
}
END_TEST

/* ---- stop ------------------------------------------------------------- */

enum {
	CEXEC_RECV,     /* receives from a channel nobody sends to */
	CEXEC_JOIN,     /* joins `target` (owns the handle) */
	CEXEC_YIELD,    /* yields forever */
	CEXEC_PIN,      /* spawn_locals a RECV task (idx + 1), then RECV */
};

#define CEXEC_STOP_BLOCKED 100  /* CEXEC_RECV tasks that started */
#define CEXEC_STOP_LATE    100  /* CEXEC_RECV tasks spawned just before stop */
#define CEXEC_STOP_TASKS   (CEXEC_STOP_BLOCKED + 4 + CEXEC_STOP_LATE)

static _Atomic int cexec_cleanups[CEXEC_STOP_TASKS];
static _Atomic int cexec_bodies_ended;
static sem_t cexec_started;

struct cexec_blocker {
	long idx;
	int kind;
	rok_chan *ch;
	rok_task *target;
	void *v;
	int err;
	rok_chan_op op;
	rok_join_op join;
};

static rok_poll cexec_blocker_poll(rok_cx *cx, void *frame)
{
	struct cexec_blocker *f = frame;

	ROK_BEGIN(cx);
	if (f->kind == CEXEC_PIN) {
		struct cexec_blocker c = { .idx = f->idx + 1,
		                           .kind = CEXEC_RECV, .ch = f->ch };

		if (rok_spawn_local(NULL, cexec_blocker_poll, &c,
		                    sizeof(c)) < 0)
			atomic_fetch_add(&cexec_spawn_errors, 1);
	}
	sem_post(&cexec_started);
	if (f->kind == CEXEC_RECV || f->kind == CEXEC_PIN) {
		ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
	} else if (f->kind == CEXEC_JOIN) {
		/* Its target may end (cancelled) first, in which case the join
		 * completes and the body goes on: allowed, not counted. */
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->target, &f->v));
		ROK_RETURN(cx, 0);
	} else {
		for (;;)
			ROK_YIELD(cx);
	}
	atomic_fetch_add(&cexec_bodies_ended, 1);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cexec_cleanups[f->idx], 1);
	rok_task_unref(f->target);
	ROK_END(cx);
}

START_TEST(test_executor_stop_cancels)
{
	int base = test_thread_baseline();
	struct cexec_blocker b = { 0 };
	rok_chan *ch;
	long idx = 0;

	ck_assert_int_eq(sem_init(&cexec_started, 0, 0), 0);
	ck_assert_int_eq(rok_chan_new(&ch, 4), 0);
	test_workers(2);

	b.ch = ch;
	b.kind = CEXEC_RECV;
	for (; idx < CEXEC_STOP_BLOCKED; idx++) {
		b.idx = idx;
		ck_assert_int_eq(rok_spawn(NULL, cexec_blocker_poll, &b,
		                           sizeof(b)), 0);
	}
	/* The yield-forever task, and a task joining it: J owns the handle. */
	b.kind = CEXEC_YIELD;
	b.idx = idx++;
	ck_assert_int_eq(rok_spawn(&b.target, cexec_blocker_poll, &b,
	                           sizeof(b)), 0);
	b.kind = CEXEC_JOIN;
	b.idx = idx++;
	ck_assert_int_eq(rok_spawn(NULL, cexec_blocker_poll, &b, sizeof(b)), 0);
	b.target = NULL;
	/* A pool task and the task it pinned to its worker. */
	b.kind = CEXEC_PIN;
	b.idx = idx;
	idx += 2;
	ck_assert_int_eq(rok_spawn(NULL, cexec_blocker_poll, &b, sizeof(b)), 0);

	/* Every one of them has been polled and is blocked (or yielding). */
	for (long i = 0; i < idx; i++)
		cexec_sem_wait(&cexec_started);

	/* More that may or may not get their first poll before the stop. */
	b.kind = CEXEC_RECV;
	for (; idx < CEXEC_STOP_TASKS; idx++) {
		b.idx = idx;
		ck_assert_int_eq(rok_spawn(NULL, cexec_blocker_poll, &b,
		                           sizeof(b)), 0);
	}

	ck_assert_int_eq(rok_stop(), 0);
	ck_assert_int_eq(cexec_spawn_errors, 0);
	for (long i = 0; i < CEXEC_STOP_TASKS; i++)
		ck_assert_msg(cexec_cleanups[i] == 1,
		              "task %ld ran its cleanup %d times", i,
		              cexec_cleanups[i]);
	ck_assert_int_eq(cexec_bodies_ended, 0);
	ck_assert_int_eq(rok_registrations(), 0);
	ck_assert_int_eq(test_threads_settled(base), base);
	/* Every waiter was unlinked: the channel can go. */
	rok_chan_free(ch, NULL);

	/* And the runtime runs again afterwards. */
	ck_assert_int_eq(rok_start(), 0);
	ck_assert_int_eq(cexec_probe(4), 4);
	ck_assert_int_eq(rok_stop(), 0);
	sem_destroy(&cexec_started);
}
END_TEST

/* ---- ids -------------------------------------------------------------- */

/* A foreign (non-runtime) thread that spawns n children with handles, then
 * waits for each in order. */
struct cexec_foreign {
	long n;
	rok_poll_fn child_poll;
	const void *child;      /* template, as for cexec_spawner */
	size_t child_size;
	uint64_t *ids;          /* if set: ids[i] is rok_task_id(child i) */
	rok_task **tasks;
	long sum;               /* out */
	long errors;            /* out */
	pthread_t thread;
};

static void *cexec_foreign_main(void *arg)
{
	struct cexec_foreign *t = arg;
	union cexec_child c;

	memcpy(c.bytes, t->child, t->child_size);
	for (long i = 0; i < t->n; i++) {
		c.idx = i;
		if (rok_spawn(&t->tasks[i], t->child_poll, &c,
		              t->child_size) < 0)
			t->errors++;
	}
	for (long i = 0; i < t->n; i++) {
		void *v;

		if (t->tasks[i] == NULL)
			continue;
		if (rok_task_wait(t->tasks[i], &v) != 0)
			t->errors++;
		t->sum += (long)v;
		if (t->ids != NULL && rok_task_id(t->tasks[i]) != t->ids[i])
			t->errors++;
		rok_task_unref(t->tasks[i]);
	}
	return NULL;
}

static void cexec_foreign_start(struct cexec_foreign *t, long n,
                                rok_poll_fn child_poll, const void *child,
                                size_t child_size, uint64_t *ids)
{
	ck_assert_uint_le(child_size, CEXEC_CHILD_MAX);
	memset(t, 0, sizeof(*t));
	t->n = n;
	t->child_poll = child_poll;
	t->child = child;
	t->child_size = child_size;
	t->ids = ids;
	t->tasks = calloc((size_t)n, sizeof(*t->tasks));
	ck_assert_ptr_nonnull(t->tasks);
	ck_assert_int_eq(pthread_create(&t->thread, NULL, cexec_foreign_main,
	                                t), 0);
}

/* Joins the thread; returns its sum after checking its errors. */
static long cexec_foreign_finish(struct cexec_foreign *t)
{
	ck_assert_int_eq(pthread_join(t->thread, NULL), 0);
	free(t->tasks);
	ck_assert_int_eq(t->errors, 0);
	return t->sum;
}

START_TEST(test_executor_ids)
{
	enum { NTHREADS = 4 };
	long per = test_scale(100000) / (NTHREADS + 1);
	long total = per * (NTHREADS + 1);
	uint64_t *ids = calloc((size_t)total, sizeof(*ids));
	struct cexec_yielder y[NTHREADS + 1];
	struct cexec_foreign th[NTHREADS];
	struct cexec_spawner s;
	uint64_t id = 12345;
	rok_task *st;
	void *v;

	ck_assert_ptr_nonnull(ids);
	ck_assert_int_eq(rok_try_id(&id), -ESRCH);
	ck_assert_uint_eq(id, 12345);     /* untouched */
	test_workers(2);

	/* Slice 0 from a task on a worker, slices 1..4 from foreign threads,
	 * all at once. */
	memset(y, 0, sizeof(y));
	for (int k = 0; k <= NTHREADS; k++) {
		y[k].yields = k % 2;
		y[k].ids = ids + (long)k * per;
	}
	cexec_spawner_init(&s, per, cexec_yielder_poll, &y[0], sizeof(y[0]));
	s.ids = y[0].ids;
	ck_assert_int_eq(rok_spawn(&st, cexec_spawner_poll, &s, sizeof(s)), 0);
	for (int k = 0; k < NTHREADS; k++)
		cexec_foreign_start(&th[k], per, cexec_yielder_poll, &y[k + 1],
		                    sizeof(y[k + 1]), y[k + 1].ids);

	ck_assert_int_eq(rok_task_wait(st, &v), 0);
	ck_assert_int_eq((long)v, cexec_tri(per));
	rok_task_unref(st);
	free(s.tasks);
	for (int k = 0; k < NTHREADS; k++)
		ck_assert_int_eq(cexec_foreign_finish(&th[k]), cexec_tri(per));
	ck_assert_int_eq(cexec_spawn_errors, 0);
	ck_assert_int_eq(cexec_id_mismatch, 0);

	qsort(ids, (size_t)total, sizeof(*ids), cexec_cmp_u64);
	CEXEC_REQUIRE(ids[0] > 0, "a task saw id 0 (or never ran)");
	for (long i = 1; i < total; i++)
		CEXEC_REQUIRE(ids[i] > ids[i - 1], "id %llu seen twice",
		              (unsigned long long)ids[i]);
	free(ids);
	ck_assert_int_eq(rok_try_id(&id), -ESRCH);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- spawn_local ------------------------------------------------------ */

/* Pinned by cexec_local_root: yields at least min_yields times and until
 * *stop is set; returns how often it yielded. */
struct cexec_pinned {
	long i, min_yields;
	bool started;
	pthread_t want;
	pthread_t *first;       /* out: thread of the first poll */
	_Atomic int *stop;
};

static rok_poll cexec_pinned_poll(rok_cx *cx, void *frame)
{
	struct cexec_pinned *f = frame;

	cexec_check_thread(&f->started, &f->want);
	ROK_BEGIN(cx);
	*f->first = pthread_self();
	for (f->i = 0; f->i < f->min_yields || !atomic_load(f->stop); f->i++)
		ROK_YIELD(cx);
	ROK_RETURN(cx, f->i);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/*
 * On one worker: pins a task (spawn_local) that yields all along, and
 * floods the same worker's deque with nbusy stealable tasks, so the other
 * worker steals from it while the pinned task lives.  Once every busy task
 * is joined, lets the pinned task end and returns its yield count.
 */
struct cexec_local_root {
	long nbusy, i;
	struct cexec_pinned pin;
	pthread_t *spawner;     /* out: the thread that called spawn_local */
	pthread_t *busy_ran;    /* 2 * nbusy: first and last poll threads */
	rok_task **busy;        /* nbusy handles */
	rok_task *pinned;
	void *v;
	rok_join_op join;
};

static rok_poll cexec_local_root_poll(rok_cx *cx, void *frame)
{
	struct cexec_local_root *f = frame;

	ROK_BEGIN(cx);
	*f->spawner = pthread_self();
	if (rok_spawn_local(&f->pinned, cexec_pinned_poll, &f->pin,
	                    sizeof(f->pin)) < 0)
		atomic_fetch_add(&cexec_spawn_errors, 1);
	for (f->i = 0; f->i < f->nbusy; f->i++) {
		struct cexec_yielder b = {
			.idx = f->i, .yields = 20, .first = f->busy_ran,
			.last = f->busy_ran + f->nbusy,
		};
		if (rok_spawn(&f->busy[f->i], cexec_yielder_poll, &b,
		              sizeof(b)) < 0)
			atomic_fetch_add(&cexec_spawn_errors, 1);
	}
	for (f->i = 0; f->i < f->nbusy; f->i++) {
		if (f->busy[f->i] == NULL)
			continue;
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->busy[f->i], &f->v));
		rok_task_unref(f->busy[f->i]);
		f->busy[f->i] = NULL;
	}
	atomic_store(f->pin.stop, 1);
	f->v = NULL;
	if (f->pinned != NULL)
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->pinned, &f->v));
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	rok_task_unref(f->pinned);
	for (f->i = 0; f->i < f->nbusy; f->i++)
		rok_task_unref(f->busy[f->i]);
	ROK_END(cx);
}

static void *cexec_spawn_local_foreign(void *arg)
{
	struct cexec_index a = { 1 };
	rok_task *t = (rok_task *)&a;
	int err = rok_spawn_local(&t, cexec_index_poll, &a, sizeof(a));

	*(int *)arg = t == NULL ? err : -1000;
	return NULL;
}

START_TEST(test_executor_spawn_local)
{
	enum { ATTEMPTS = 50, PIN_YIELDS = 1000 };
	long nbusy = test_scale(4000);
	struct cexec_index a = { 1 };
	struct rok_stats st;
	rok_task *t = (rok_task *)&a;
	pthread_t th, seen[4];
	uint64_t steals = 0;
	int err = 0, ran_on = 0, attempt;

	/* Outside the runtime, before it starts: refused, starts nothing. */
	ck_assert_int_eq(rok_spawn_local(&t, cexec_index_poll, &a, sizeof(a)),
	                 -EPERM);
	ck_assert_ptr_null(t);
	rok_stats_get(&st);
	ck_assert_uint_eq(st.workers, 0);

	test_workers(2);
	ck_assert_int_eq(rok_start(), 0);
	t = (rok_task *)&a;
	ck_assert_int_eq(rok_spawn_local(&t, cexec_index_poll, &a, sizeof(a)),
	                 -EPERM);
	ck_assert_ptr_null(t);
	ck_assert_int_eq(pthread_create(&th, NULL, cexec_spawn_local_foreign,
	                                &err), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(err, -EPERM);

	/* Until the pinned task's worker was stolen from while it lived (the
	 * OS may keep the other worker off the CPU for a whole attempt). */
	for (attempt = 0; attempt < ATTEMPTS; attempt++) {
		pthread_t spawner, pinned_first;
		_Atomic int stop = 0;
		struct cexec_local_root r = {
			.nbusy = nbusy,
			.pin = { .min_yields = PIN_YIELDS,
			         .first = &pinned_first, .stop = &stop },
			.spawner = &spawner,
			.busy_ran = calloc(2 * (size_t)nbusy,
			                   sizeof(pthread_t)),
			.busy = calloc((size_t)nbusy, sizeof(rok_task *)),
		};
		long checked0 = cexec_checked;
		uint64_t steals0;

		ck_assert_ptr_nonnull(r.busy_ran);
		ck_assert_ptr_nonnull(r.busy);
		rok_stats_get(&st);
		steals0 = st.steals;
		long yields = (long)test_spawn_wait(cexec_local_root_poll, &r,
		                                    sizeof(r));
		ck_assert_int_ge(yields, PIN_YIELDS);
		ck_assert_int_eq(cexec_spawn_errors, 0);
		ck_assert_msg(pthread_equal(pinned_first, spawner),
		              "pinned task started on another thread");
		ck_assert_int_eq(cexec_wrong_thread, 0);
		ck_assert_int_ge(cexec_checked - checked0, PIN_YIELDS);
		ran_on = cexec_distinct(r.busy_ran, 2 * nbusy, seen, 4);
		free(r.busy_ran);
		free(r.busy);
		rok_stats_get(&st);
		steals = st.steals - steals0;
		if (steals > 0 && ran_on == 2)
			break;
	}
	ck_assert_msg(attempt < ATTEMPTS,
	              "no stealing around the pinned task in %d attempts "
	              "(steals %llu, busy tasks ran on %d threads)", ATTEMPTS,
	              (unsigned long long)steals, ran_on);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- block_on --------------------------------------------------------- */

/* What the block_on root saw (written on the calling thread itself). */
static struct {
	int on_caller, workers, block_on_err, wait_err, stop_err;
} cexec_guest;

struct cexec_guest_root {
	pthread_t caller;
	int nlocal, local_yields, yields, i;
	bool started;
	pthread_t want;
	pthread_t *local_first; /* nlocal slots */
	_Atomic int *local_done;/* nlocal flags */
	rok_chan *ch;           /* the background task receives from it */
	rok_task **bg;          /* out: the background task's handle */
	long value;
};

static rok_poll cexec_guest_root_poll(rok_cx *cx, void *frame)
{
	struct cexec_guest_root *f = frame;

	cexec_check_thread(&f->started, &f->want);
	ROK_BEGIN(cx);
	cexec_guest.on_caller = pthread_equal(pthread_self(), f->caller);
	cexec_guest.workers = rok_workers();
	{
		struct cexec_index a = { 1 };
		struct cexec_bg b = { .ch = f->ch, .yields = 100 };

		cexec_guest.block_on_err =
			rok_block_on(cexec_index_poll, &a, sizeof(a), NULL);
		cexec_guest.stop_err = rok_stop();
		for (int i = 0; i < f->nlocal; i++) {
			struct cexec_yielder l = {
				.idx = i, .yields = f->local_yields,
				.check = true, .first = f->local_first,
				.done = f->local_done,
			};
			if (rok_spawn_local(NULL, cexec_yielder_poll, &l,
			                    sizeof(l)) < 0)
				atomic_fetch_add(&cexec_spawn_errors, 1);
		}
		if (rok_spawn(f->bg, cexec_bg_poll, &b, sizeof(b)) < 0)
			atomic_fetch_add(&cexec_spawn_errors, 1);
		else
			cexec_guest.wait_err = rok_task_wait(*f->bg, NULL);
	}
	/* The root ends long before its pinned tasks do. */
	for (f->i = 0; f->i < f->yields; f->i++)
		ROK_YIELD(cx);
	ROK_RETURN(cx, f->value);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(test_executor_block_on)
{
	enum { NLOCAL = 8, LOCAL_YIELDS = 50, ROOT_YIELDS = 5 };
	pthread_t local_first[NLOCAL] = { 0 };
	_Atomic int local_done[NLOCAL] = { 0 };
	rok_task *bg = NULL;
	struct cexec_guest_root r = {
		.caller = pthread_self(), .nlocal = NLOCAL,
		.local_yields = LOCAL_YIELDS, .yields = ROOT_YIELDS,
		.local_first = local_first, .local_done = local_done,
		.bg = &bg, .value = 0x5eed,
	};
	struct cexec_index a = { 7 };
	rok_chan *ch;
	void *v = NULL;

	test_workers(2);
	ck_assert_int_eq(rok_chan_new(&ch, 1), 0);
	r.ch = ch;
	ck_assert_int_eq(rok_block_on(cexec_guest_root_poll, &r, sizeof(r), &v),
	                 0);
	ck_assert_ptr_eq(v, (void *)0x5eed);
	ck_assert_int_eq(rok_workers(), 1);      /* a guest no more */
	ck_assert_int_eq(cexec_spawn_errors, 0);
	ck_assert_int_eq(cexec_guest.on_caller, 1);
	ck_assert_int_eq(cexec_guest.workers, 2);
	ck_assert_int_eq(cexec_guest.block_on_err, -EDEADLK);
	ck_assert_int_eq(cexec_guest.stop_err, -EDEADLK);
	ck_assert_int_eq(cexec_guest.wait_err, -EDEADLK);

	/* Its pinned tasks all finished, on this thread, every poll. */
	for (int i = 0; i < NLOCAL; i++) {
		ck_assert_msg(local_done[i] == 1, "local task %d unfinished",
		              i);
		ck_assert_msg(pthread_equal(local_first[i], pthread_self()),
		              "local task %d started on another thread", i);
	}
	ck_assert_int_eq(cexec_wrong_thread, 0);
	ck_assert_int_ge(cexec_checked, NLOCAL * LOCAL_YIELDS + ROOT_YIELDS);

	/* The pool task it spawned outlives it: still waiting for its value,
	 * it gets it now and finishes on the pool. */
	ck_assert_ptr_nonnull(bg);
	ck_assert(!rok_task_is_finished(bg));
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)41), 0);
	ck_assert_int_eq(rok_task_wait(bg, &v), 0);
	ck_assert_int_eq((long)v, 42);
	rok_task_unref(bg);
	rok_chan_free(ch, NULL);

	/* The guest slot was given back: block_on again. */
	ck_assert_int_eq(rok_block_on(cexec_index_poll, &a, sizeof(a), &v), 0);
	ck_assert_int_eq((long)v, 7);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

struct cexec_guest_thread {
	rok_chan *ch;
	sem_t started;
	int err;
	void *value;
};

static void *cexec_guest_main(void *arg)
{
	struct cexec_guest_thread *g = arg;
	struct cexec_bg b = { .ch = g->ch, .started = &g->started,
	                      .yields = 3 };

	g->err = rok_block_on(cexec_bg_poll, &b, sizeof(b), &g->value);
	return NULL;
}

/* rok_stop refuses while another thread is inside rok_block_on (rok.h does
 * not document this -EBUSY yet), and the runtime runs on. */
START_TEST(test_executor_block_on_stop_busy)
{
	struct cexec_guest_thread g = { 0 };
	pthread_t th;

	test_workers(2);
	ck_assert_int_eq(sem_init(&g.started, 0, 0), 0);
	ck_assert_int_eq(rok_chan_new(&g.ch, 1), 0);
	ck_assert_int_eq(rok_start(), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, cexec_guest_main, &g), 0);
	cexec_sem_wait(&g.started);

	ck_assert_int_eq(rok_stop(), -EBUSY);
	ck_assert_int_eq(cexec_probe(2), 2);
	ck_assert_int_eq(rok_chan_try_send(g.ch, (void *)9), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(g.err, 0);
	ck_assert_int_eq((long)g.value, 10);
	ck_assert_int_eq(rok_stop(), 0);
	rok_chan_free(g.ch, NULL);
	sem_destroy(&g.started);
}
END_TEST

/* ---- tpc -------------------------------------------------------------- */

START_TEST(test_executor_tpc)
{
	long n = test_scale(20000);
	struct cexec_yielder y = { .yields = 3, .check = true };
	struct cexec_spawner s;
	struct rok_stats st;
	pthread_t spawner, seen[4];
	rok_task *remote[100];
	pthread_t remote_first[100] = { 0 };
	long bad = 0;

	ck_assert_int_eq(setenv("ROK_THREAD_PER_CORE", "1", 1), 0);
	test_workers(2);

	/* One task spawns many yielding children: in normal mode the idle
	 * worker would steal them; here each stays on the spawner's worker. */
	y.first = calloc((size_t)n, sizeof(pthread_t));
	ck_assert_ptr_nonnull(y.first);
	cexec_spawner_init(&s, n, cexec_yielder_poll, &y, sizeof(y));
	s.check = true;
	s.self_out = &spawner;
	ck_assert_int_eq(cexec_spawner_run(&s), cexec_tri(n));
	ck_assert_int_eq(cexec_spawn_errors, 0);
	rok_stats_get(&st);
	/* A worker the monitor found asleep inside one poll (a page fault, a
	 * contended lock, on a loaded machine) goes on on a helper thread
	 * (SPEC A7: thread identity is not stable): then only the count of
	 * steals between workers says that nothing moved. */
	if (st.handoffs == 0) {
		for (long i = 0; i < n; i++)
			bad += !pthread_equal(y.first[i], spawner);
		ck_assert_msg(bad == 0, "%ld of %ld children started on "
		              "another thread than their spawner's", bad, n);
		ck_assert_int_eq(cexec_wrong_thread, 0);
	}
	ck_assert_int_ge(cexec_checked, 3 * n);
	free(y.first);
	ck_assert_uint_eq(st.workers, 2);
	ck_assert_uint_eq(st.steals, 0);

	/* Spawns from outside the pool are spread over the workers. */
	for (long i = 0; i < 100; i++) {
		struct cexec_yielder c = { .idx = i, .yields = 2, .check = true,
		                           .first = remote_first };
		ck_assert_int_eq(rok_spawn(&remote[i], cexec_yielder_poll, &c,
		                           sizeof(c)), 0);
	}
	for (long i = 0; i < 100; i++) {
		void *v;

		ck_assert_int_eq(rok_task_wait(remote[i], &v), 0);
		ck_assert_int_eq((long)v, i);
		rok_task_unref(remote[i]);
	}
	rok_stats_get(&st);
	if (st.handoffs == 0) {
		ck_assert_int_eq(cexec_distinct(remote_first, 100, seen, 4), 2);
		ck_assert(pthread_equal(seen[0], spawner) ||
		          pthread_equal(seen[1], spawner));
		ck_assert(!pthread_equal(seen[0], pthread_self()));
		ck_assert(!pthread_equal(seen[1], pthread_self()));
		ck_assert_int_eq(cexec_wrong_thread, 0);
	}
	ck_assert_uint_eq(st.steals, 0);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- steal ------------------------------------------------------------ */

START_TEST(test_executor_steal)
{
	enum { ATTEMPTS = 50 };
	long n = test_scale(20000);
	pthread_t *ran = calloc(2 * (size_t)n, sizeof(pthread_t));
	pthread_t seen[4];
	uint64_t steals = 0;
	int ran_on = 0, attempt;

	ck_assert_ptr_nonnull(ran);
	test_workers(2);
	/* The OS may keep one worker off the CPU for a whole attempt. */
	for (attempt = 0; attempt < ATTEMPTS; attempt++) {
		struct cexec_yielder y = { .yields = 3, .first = ran,
		                           .last = ran + n };
		struct cexec_spawner s;
		struct rok_stats st;
		uint64_t steals0;

		memset(ran, 0, 2 * (size_t)n * sizeof(pthread_t));
		rok_stats_get(&st);
		steals0 = st.steals;
		cexec_spawner_init(&s, n, cexec_yielder_poll, &y, sizeof(y));
		ck_assert_int_eq(cexec_spawner_run(&s), cexec_tri(n));
		ck_assert_int_eq(cexec_spawn_errors, 0);
		ran_on = cexec_distinct(ran, 2 * n, seen, 4);
		rok_stats_get(&st);
		steals = st.steals - steals0;
		if (steals > 0 && ran_on == 2)
			break;
	}
	ck_assert_msg(attempt < ATTEMPTS,
	              "no stealing in %d attempts (steals %llu, children ran "
	              "on %d threads)", ATTEMPTS, (unsigned long long)steals,
	              ran_on);
	ck_assert(!pthread_equal(seen[0], pthread_self()));
	ck_assert(!pthread_equal(seen[1], pthread_self()));
	free(ran);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- handles ---------------------------------------------------------- */

static _Atomic int cexec_big_ended, cexec_big_cleanups;
static sem_t cexec_big_sem;

/* Receives a value and returns it.  The padding takes the frame past
 * ROK_FRAME_CACHED_MAX: a malloc'd frame that frame_bytes() counts while
 * the task lives, so the test sees when it is freed. */
struct cexec_big {
	rok_chan *ch;
	void *v;
	int err;
	rok_chan_op op;
	char pad[ROK_FRAME_CACHED_MAX + 64];
};

static rok_poll cexec_big_poll(rok_cx *cx, void *frame)
{
	struct cexec_big *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_chan_recv(cx, &f->op, f->ch, &f->v, &f->err));
	atomic_fetch_add(&cexec_big_ended, 1);
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	atomic_fetch_add(&cexec_big_cleanups, 1);
	sem_post(&cexec_big_sem);
	ROK_END(cx);
}

static _Atomic long cexec_counted;
static sem_t cexec_counted_sem;

/* Yields a few times, then counts itself; the n-th posts the semaphore. */
struct cexec_counter {
	long n;
	int i;
};

static rok_poll cexec_counter_poll(rok_cx *cx, void *frame)
{
	struct cexec_counter *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < 5; f->i++)
		ROK_YIELD(cx);
	if (atomic_fetch_add(&cexec_counted, 1) + 1 == f->n)
		sem_post(&cexec_counted_sem);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(test_executor_handles)
{
	struct cexec_big b = { 0 };
	struct cexec_counter c = { .n = 1000 };
	rok_task *t, *t2;
	rok_chan *ch;
	size_t base;
	uint64_t id;
	void *v;

	/* One worker: a probe task queued after X runs after X's poll
	 * returned, runtime reference dropped and frame freed included. */
	test_workers(1);
	ck_assert_int_eq(sem_init(&cexec_big_sem, 0, 0), 0);
	ck_assert_int_eq(sem_init(&cexec_counted_sem, 0, 0), 0);
	ck_assert_int_eq(rok_chan_new(&ch, 4), 0);
	b.ch = ch;
	ck_assert_int_eq(cexec_probe(0), 0);
	base = frame_bytes();

	/* Dropped before it finishes: neither cancelled nor leaked. */
	ck_assert_int_eq(rok_spawn(&t, cexec_big_poll, &b, sizeof(b)), 0);
	ck_assert_uint_gt(frame_bytes(), base);
	ck_assert(!rok_task_is_finished(t));
	ck_assert(!rok_task_is_cancelled(t));
	ck_assert_ptr_eq(rok_task_ref(t), t);
	rok_task_unref(t);                          /* ref/unref balance */
	ck_assert_uint_gt(frame_bytes(), base);
	ck_assert(!rok_task_is_finished(t));
	rok_task_unref(t);                          /* the only handle */
	rok_task_unref(NULL);
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)0x77), 0);
	cexec_sem_wait(&cexec_big_sem);
	ck_assert_int_eq(cexec_probe(1), 1);
	ck_assert_int_eq(cexec_big_ended, 1);       /* ran to the end */
	ck_assert_int_eq(cexec_big_cleanups, 1);
	ck_assert_uint_eq(frame_bytes(), base);     /* and was freed */

	/* Finished, two handles: the frame went as it finished, the record
	 * stays with its id and value until the last unref. */
	ck_assert_int_eq(rok_spawn(&t, cexec_big_poll, &b, sizeof(b)), 0);
	id = rok_task_id(t);
	t2 = rok_task_ref(t);
	ck_assert_ptr_eq(t2, t);
	ck_assert_int_eq(rok_chan_try_send(ch, (void *)0x78), 0);
	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	ck_assert_ptr_eq(v, (void *)0x78);
	ck_assert(rok_task_is_finished(t));
	ck_assert(!rok_task_is_cancelled(t));
	cexec_sem_wait(&cexec_big_sem);
	ck_assert_int_eq(cexec_probe(2), 2);
	/* The frame went as the task finished; the record stays. */
	ck_assert_uint_eq(frame_bytes(), base);
	rok_task_unref(t2);
	ck_assert(rok_task_is_finished(t));
	ck_assert_uint_eq(rok_task_id(t), id);
	ck_assert_int_eq(rok_task_wait(t, &v), 0);  /* waits are repeatable */
	ck_assert_ptr_eq(v, (void *)0x78);
	rok_task_unref(t);
	ck_assert_uint_eq(frame_bytes(), base);
	ck_assert_int_eq(cexec_big_ended, 2);
	ck_assert_int_eq(cexec_big_cleanups, 2);

	/* Many small ones, dropped at once, all run to the end. */
	for (long i = 0; i < c.n; i++) {
		ck_assert_int_eq(rok_spawn(&t, cexec_counter_poll, &c,
		                           sizeof(c)), 0);
		rok_task_unref(t);
	}
	cexec_sem_wait(&cexec_counted_sem);
	ck_assert_int_eq(cexec_counted, c.n);

	ck_assert_int_eq(rok_stop(), 0);
	rok_chan_free(ch, NULL);
	sem_destroy(&cexec_big_sem);
	sem_destroy(&cexec_counted_sem);
}
END_TEST

/* ---- million ---------------------------------------------------------- */

START_TEST(test_executor_million)
{
	enum { NTHREADS = 4 };
	long n = test_scale(1000000), per = test_scale(100000);
	struct cexec_index tmpl = { 0 };
	struct cexec_foreign th[NTHREADS];
	struct cexec_spawner s;
	rok_task *st;
	void *v;

	test_workers(2);
	cexec_spawner_init(&s, n, cexec_index_poll, &tmpl, sizeof(tmpl));
	ck_assert_int_eq(rok_spawn(&st, cexec_spawner_poll, &s, sizeof(s)), 0);
	for (int k = 0; k < NTHREADS; k++)
		cexec_foreign_start(&th[k], per, cexec_index_poll, &tmpl,
		                    sizeof(tmpl), NULL);
	ck_assert_int_eq(rok_task_wait(st, &v), 0);
	ck_assert_int_eq((long)v, cexec_tri(n));
	rok_task_unref(st);
	free(s.tasks);
	for (int k = 0; k < NTHREADS; k++)
		ck_assert_int_eq(cexec_foreign_finish(&th[k]), cexec_tri(per));
	ck_assert_int_eq(cexec_spawn_errors, 0);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/* ---- suite ------------------------------------------------------------ */

/*
 * guest_waker: rok_block_on does not free its guest worker while a waker
 * is still inside worker_push_remote (writing the inbox depth, unparking).
 * The root joins a pool task that ends only once the root is parked, so the
 * root is woken through the guest's inbox, while a pinned task keeps the
 * guest busy; the seam holds that waker after its push and watches whether
 * rok_block_on returns meanwhile.  It must
 * not, so the hold ends on a deadline (the only wait here that is one).
 */
static _Atomic bool cexec_gw_armed, cexec_gw_in_hook, cexec_gw_returned;
static _Atomic bool cexec_gw_hook_done, cexec_gw_returned_in_hook;

static void cexec_gw_hook(void)
{
	if (!atomic_exchange(&cexec_gw_armed, false))
		return;
	atomic_store(&cexec_gw_in_hook, true);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		sched_yield();
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (!atomic_load(&cexec_gw_returned) &&
	         (t.tv_sec - t0.tv_sec) * 1000 +
	                 (t.tv_nsec - t0.tv_nsec) / 1000000 < 300);
	atomic_store(&cexec_gw_returned_in_hook,
	             atomic_load(&cexec_gw_returned));
	atomic_store(&cexec_gw_hook_done, true);
}

struct cexec_gw_child {
	rok_task *root;   /* borrowed: it joins us */
};

static rok_poll cexec_gw_child_poll(rok_cx *cx, void *frame)
{
	struct cexec_gw_child *f = frame;

	ROK_BEGIN(cx);
	/* End only after the root's poll ended with its join linked. */
	while (atomic_load(&f->root->state) & TASK_RUNNING)
		ROK_YIELD(cx);
	atomic_store(&cexec_gw_armed, true);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

/* Keeps the guest awake (polling, not parked) until the waker is held, so
 * that it sees the push at once, as a busy guest would. */
static rok_poll cexec_gw_local_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	while (!atomic_load(&cexec_gw_in_hook))
		ROK_YIELD(cx);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct cexec_gw_root {
	rok_task *child;
	rok_join_op join;
};

static rok_poll cexec_gw_root_poll(rok_cx *cx, void *frame)
{
	struct cexec_gw_root *f = frame;
	struct cexec_gw_child c = { .root = cx->task };

	ROK_BEGIN(cx);
	if (rok_spawn_local(NULL, cexec_gw_local_poll, NULL, 0) < 0 ||
	    rok_spawn(&f->child, cexec_gw_child_poll, &c, sizeof(c)) < 0)
		ROK_RETURN(cx, -1);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->child, NULL));
	ROK_RETURN(cx, 1);
	ROK_CLEANUP(cx);
	rok_task_unref(f->child);
	ROK_END(cx);
}

START_TEST(test_executor_guest_waker)
{
	struct cexec_gw_root r = { 0 };
	void *v = NULL;

	test_workers(1);
	worker_push_remote_hook = cexec_gw_hook;
	ck_assert_int_eq(rok_block_on(cexec_gw_root_poll, &r, sizeof(r), &v),
	                 0);
	atomic_store(&cexec_gw_returned, true);
	ck_assert_ptr_eq(v, (void *)1);
	while (!atomic_load(&cexec_gw_hook_done))
		sched_yield();
	ck_assert_msg(!atomic_load(&cexec_gw_returned_in_hook),
	              "rok_block_on returned (and freed its worker) while a "
	              "waker was still inside worker_push_remote");
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

/*
 * park_wake: many wake-ups through inboxes (a guest's, and the pool
 * workers' in thread-per-core mode, where a guest's spawns go to a pool
 * worker's inbox), each racing with its receiver's park.  A lost wake-up
 * leaves the root or a child parked for good: the tcase times out.  _i = 1
 * runs thread-per-core.
 */
struct cexec_pw_root {
	long i, n;
	rok_task *child;
	rok_join_op join;
};

static rok_poll cexec_pw_child_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	ROK_RETURN(cx, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static rok_poll cexec_pw_root_poll(rok_cx *cx, void *frame)
{
	struct cexec_pw_root *f = frame;

	ROK_BEGIN(cx);
	for (f->i = 0; f->i < f->n; f->i++) {
		if (rok_spawn(&f->child, cexec_pw_child_poll, NULL, 0) < 0)
			ROK_RETURN(cx, -1);
		ROK_AWAIT(cx, rok_join(cx, &f->join, f->child, NULL));
		rok_task_unref(f->child);
		f->child = NULL;
	}
	ROK_RETURN(cx, f->i);
	ROK_CLEANUP(cx);
	rok_task_unref(f->child);
	ROK_END(cx);
}

START_TEST(test_executor_park_wake)
{
	struct cexec_pw_root r = { .n = test_scale(50000) };
	void *v = NULL;

	test_workers(2);
	setenv("ROK_THREAD_PER_CORE", _i ? "1" : "0", 1);
	ck_assert_int_eq(rok_block_on(cexec_pw_root_poll, &r, sizeof(r), &v),
	                 0);
	ck_assert_int_eq((long)(intptr_t)v, r.n);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

static Suite *cexec_suite(void)
{
	Suite *s = suite_create("executor");
	TCase *tc;

	test_add(s, "idle", test_executor_idle, 0, 30);
	test_add(s, "workers", test_executor_workers, 0, 30);
	test_add(s, "env", test_executor_env_invalid,
	         (int)(sizeof(cexec_bad_env) / sizeof(cexec_bad_env[0])), 30);
	test_add(s, "restart", test_executor_restart, 0, 30);
	test_add(s, "stop", test_executor_stop_cancels, 0, 30);
	test_add(s, "ids", test_executor_ids, 0, 30);
	test_add(s, "spawn_local", test_executor_spawn_local, 0, 30);

	tc = tcase_create("block_on");
	tcase_set_timeout(tc, test_timeout(30));
	tcase_add_test(tc, test_executor_block_on);
	tcase_add_test(tc, test_executor_block_on_stop_busy);
	suite_add_tcase(s, tc);

	test_add(s, "tpc", test_executor_tpc, 0, 30);
	test_add(s, "steal", test_executor_steal, 0, 30);
	test_add(s, "handles", test_executor_handles, 0, 30);
	test_add(s, "million", test_executor_million, 0, 30);
	test_add(s, "guest_waker", test_executor_guest_waker, 0, 30);
	test_add(s, "park_wake", test_executor_park_wake, 2, 60);
	return s;
}

int main(void)
{
	return test_run(cexec_suite());
}
