/*
 * check_par.c — rok_par_for_each and rok_par_scope (rok/par.h).
 *
 * each_once: every index of loops of many sizes runs exactly once, and the
 *   items' writes are visible when the call returns.
 * caller_helps: the calling thread runs items itself, from a plain thread
 *   and from inside a task.
 * nested_one_worker: a task on the only worker (ROK_WORKERS=1) runs a loop
 *   whose items run loops and scopes themselves: no deadlock, all done.
 * scope_tree: jobs that spawn jobs (a binary tree) all run exactly once
 *   before rok_par_scope returns.
 * scope_one_worker: the same from inside a task on the only worker.
 * many_callers: several tasks on 2 workers run loops at the same time.
 * thread_per_core: the same in ROK_THREAD_PER_CORE=1 mode, where helpers
 *   are pinned to workers.
 * errors: NULL functions give -EINVAL, n == 0 does nothing.
 *
 * Items never call ck_assert: they count surprises in `bad`.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rok/par.h"
#include "testutil.h"

static _Atomic int bad;

/*
 * Ends a test: helper tasks that found nothing left to do may still be
 * queued and hold the last reference to a loop or scope; stopping drives
 * them to their end, so LeakSanitizer sees every object freed.
 */
static void par_stop(void)
{
	ck_assert_int_eq(rok_stop(), 0);
}

/* ---- each_once -------------------------------------------------------- */

struct marks {
	_Atomic unsigned char *seen;
	long *plain;                     /* written without atomics */
};

static void mark(size_t i, void *arg)
{
	struct marks *m = arg;

	atomic_fetch_add(&m->seen[i], 1);
	m->plain[i] = (long)i * 3;
}

static void check_loop(size_t n)
{
	struct marks m = {
		.seen = calloc(n + 1, sizeof(*m.seen)),
		.plain = calloc(n + 1, sizeof(*m.plain)),
	};

	ck_assert_ptr_nonnull(m.seen);
	ck_assert_ptr_nonnull(m.plain);
	ck_assert_int_eq(rok_par_for_each(n, mark, &m), 0);
	for (size_t i = 0; i < n; i++) {
		ck_assert_int_eq(atomic_load(&m.seen[i]), 1);
		ck_assert_int_eq(m.plain[i], (long)i * 3);
	}
	free((void *)m.seen);
	free(m.plain);
}

START_TEST(par_each_once)
{
	test_workers(2);
	size_t sizes[] = { 1, 2, 3, 7, 64, 1000, (size_t)test_scale(100000) };
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		check_loop(sizes[k]);
	par_stop();
}
END_TEST

/* ---- caller_helps ----------------------------------------------------- */

struct whose {
	pthread_t caller;
	_Atomic long on_caller, total;
};

static void whose_item(size_t i, void *arg)
{
	struct whose *w = arg;

	(void)i;
	if (pthread_equal(pthread_self(), w->caller))
		atomic_fetch_add(&w->on_caller, 1);
	atomic_fetch_add(&w->total, 1);
}

static _Atomic long task_on_caller = -1;

static rok_poll helps_poll(rok_cx *cx, void *frame)
{
	struct whose *w = frame;

	ROK_BEGIN(cx);
	w->caller = pthread_self();
	if (rok_par_for_each(1000, whose_item, w) != 0 ||
	    atomic_load(&w->total) != 1000)
		atomic_fetch_add(&bad, 1);
	atomic_store(&task_on_caller, atomic_load(&w->on_caller));
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(par_caller_helps)
{
	test_workers(2);
	struct whose w = { .caller = pthread_self() };
	ck_assert_int_eq(rok_par_for_each(1000, whose_item, &w), 0);
	ck_assert_int_eq(atomic_load(&w.total), 1000);
	ck_assert_int_ge(atomic_load(&w.on_caller), 1);

	struct whose tw = { 0 };
	test_spawn_wait(helps_poll, &tw, sizeof(tw));
	ck_assert_int_ge(atomic_load(&task_on_caller), 1);
	ck_assert_int_eq(atomic_load(&bad), 0);
	par_stop();
}
END_TEST

/* ---- nested ----------------------------------------------------------- */

static _Atomic long inner_items, jobs_run;

static void inner_item(size_t i, void *arg)
{
	(void)i;
	(void)arg;
	atomic_fetch_add(&inner_items, 1);
}

static void leaf_job(rok_scope *s, void *arg)
{
	(void)s;
	(void)arg;
	atomic_fetch_add(&jobs_run, 1);
}

static void inner_scope(rok_scope *s, void *arg)
{
	(void)arg;
	for (int k = 0; k < 4; k++)
		rok_scope_spawn(s, leaf_job, NULL);
}

static void outer_item(size_t i, void *arg)
{
	(void)arg;
	if (rok_par_for_each(50, inner_item, NULL) != 0)
		atomic_fetch_add(&bad, 1);
	if (i % 10 == 0 && rok_par_scope(inner_scope, NULL) != 0)
		atomic_fetch_add(&bad, 1);
}

static rok_poll nested_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	if (rok_par_for_each(100, outer_item, NULL) != 0)
		atomic_fetch_add(&bad, 1);
	ROK_RETURN(cx, atomic_load(&inner_items));
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(par_nested_one_worker)
{
	test_workers(1);
	void *v = test_spawn_wait(nested_poll, NULL, 0);
	ck_assert_int_eq((intptr_t)v, 100 * 50);
	ck_assert_int_eq(atomic_load(&jobs_run), 10 * 4);
	ck_assert_int_eq(atomic_load(&bad), 0);
	par_stop();
}
END_TEST

/* ---- scope ------------------------------------------------------------ */

#define TREE_DEPTH 10
#define TREE_NODES ((1 << (TREE_DEPTH + 1)) - 1)

static _Atomic unsigned char tree_seen[TREE_NODES];

static void tree_job(rok_scope *s, void *arg)
{
	uintptr_t node = (uintptr_t)arg;

	atomic_fetch_add(&tree_seen[node], 1);
	if (2 * node + 2 < TREE_NODES) {
		rok_scope_spawn(s, tree_job, (void *)(2 * node + 1));
		rok_scope_spawn(s, tree_job, (void *)(2 * node + 2));
	}
}

static void tree_body(rok_scope *s, void *arg)
{
	(void)arg;
	rok_scope_spawn(s, tree_job, (void *)0);
}

static void check_tree(void)
{
	for (int i = 0; i < TREE_NODES; i++)
		ck_assert_int_eq(atomic_load(&tree_seen[i]), 1);
}

START_TEST(par_scope_tree)
{
	test_workers(2);
	ck_assert_int_eq(rok_par_scope(tree_body, NULL), 0);
	check_tree();
	par_stop();
}
END_TEST

static rok_poll scope_task_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	if (rok_par_scope(tree_body, NULL) != 0)
		atomic_fetch_add(&bad, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(par_scope_one_worker)
{
	test_workers(1);
	test_spawn_wait(scope_task_poll, NULL, 0);
	check_tree();
	ck_assert_int_eq(atomic_load(&bad), 0);
	par_stop();
}
END_TEST

/* ---- many_callers ----------------------------------------------------- */

static rok_poll caller_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	if (rok_par_for_each(200, inner_item, NULL) != 0)
		atomic_fetch_add(&bad, 1);
	ROK_YIELD(cx);
	if (rok_par_scope(inner_scope, NULL) != 0)
		atomic_fetch_add(&bad, 1);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(par_many_callers)
{
	enum { TASKS = 16 };
	rok_task *t[TASKS];

	test_workers(2);
	for (int i = 0; i < TASKS; i++)
		ck_assert_int_eq(rok_spawn(&t[i], caller_poll, NULL, 0), 0);
	for (int i = 0; i < TASKS; i++) {
		ck_assert_int_eq(rok_task_wait(t[i], NULL), 0);
		rok_task_unref(t[i]);
	}
	ck_assert_int_eq(atomic_load(&inner_items), TASKS * 200);
	ck_assert_int_eq(atomic_load(&jobs_run), TASKS * 4);
	ck_assert_int_eq(atomic_load(&bad), 0);
	par_stop();
}
END_TEST

START_TEST(par_thread_per_core)
{
	enum { TASKS = 4 };
	rok_task *t[TASKS];

	test_workers(2);
	setenv("ROK_THREAD_PER_CORE", "1", 1);
	check_loop(5000);
	ck_assert_int_eq(rok_par_scope(tree_body, NULL), 0);
	check_tree();
	for (int i = 0; i < TASKS; i++)
		ck_assert_int_eq(rok_spawn(&t[i], caller_poll, NULL, 0), 0);
	for (int i = 0; i < TASKS; i++) {
		ck_assert_int_eq(rok_task_wait(t[i], NULL), 0);
		rok_task_unref(t[i]);
	}
	ck_assert_int_eq(atomic_load(&inner_items), TASKS * 200);
	ck_assert_int_eq(atomic_load(&jobs_run), TASKS * 4);
	ck_assert_int_eq(atomic_load(&bad), 0);
	par_stop();
}
END_TEST

/* ---- errors ----------------------------------------------------------- */

static void body_noop(rok_scope *s, void *arg)
{
	(void)s;
	(void)arg;
}

START_TEST(par_errors)
{
	ck_assert_int_eq(rok_par_for_each(10, NULL, NULL), -EINVAL);
	ck_assert_int_eq(rok_par_scope(NULL, NULL), -EINVAL);
	ck_assert_int_eq(rok_par_for_each(0, inner_item, NULL), 0);
	ck_assert_int_eq(atomic_load(&inner_items), 0);
	ck_assert_int_eq(rok_par_scope(body_noop, NULL), 0);
}
END_TEST

static Suite *par_suite(void)
{
	const struct test_case cases[] = {
		{ "each_once", par_each_once },
		{ "caller_helps", par_caller_helps },
		{ "nested_one_worker", par_nested_one_worker },
		{ "scope_tree", par_scope_tree },
		{ "scope_one_worker", par_scope_one_worker },
		{ "many_callers", par_many_callers },
		{ "thread_per_core", par_thread_per_core },
		{ "errors", par_errors },
	};

	return TEST_SUITE("par", cases, 30);
}

int main(void)
{
	return test_run(par_suite());
}
