/*
 * check_task.c — the task object: frames, values, joins, handles.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "testutil.h"

static rok_poll echo_poll(rok_cx *cx, void *frame)
{
	long *v = frame;

	ROK_BEGIN(cx);
	ROK_YIELD(cx);
	ROK_RETURN(cx, *v);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(spawn_rejects_bad_arguments)
{
	rok_task *t = (rok_task *)1;
	long v = 1;

	ck_assert_int_eq(rok_spawn(&t, NULL, &v, sizeof(v)), -EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_int_eq(rok_spawn(NULL, echo_poll, NULL, 8), -EINVAL);
}
END_TEST

/* Frames of every size class and beyond keep their bytes and alignment. */
struct big {
	size_t size;
	unsigned char fill;
	unsigned char bytes[];
};

static rok_poll big_poll(rok_cx *cx, void *frame)
{
	struct big *f = frame;
	long bad = 0;

	ROK_BEGIN(cx);
	ROK_YIELD(cx);   /* possibly resumed on another worker */
	if ((uintptr_t)frame % 8 != 0)
		bad++;
	for (size_t i = 0; i < f->size; i++)
		if (f->bytes[i] != (unsigned char)(f->fill + i))
			bad++;
	ROK_RETURN(cx, bad);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(frames_of_all_sizes)
{
	size_t sizes[] = { 0, 1, 7, 8, 9, 40, 64, 100, 200, 400, 480, 481,
	                   1000, 5000, 70000 };

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t n = sizes[k];
		struct big *b = malloc(sizeof(*b) + n);
		ck_assert_ptr_nonnull(b);
		b->size = n;
		b->fill = (unsigned char)k;
		for (size_t i = 0; i < n; i++)
			b->bytes[i] = (unsigned char)(b->fill + i);
		void *bad = test_spawn_wait(big_poll, b, sizeof(*b) + n);
		ck_assert_msg(bad == NULL, "frame of %zu bytes corrupted", n);
		free(b);
	}
}
END_TEST

/* Many tasks join one task; a foreign thread waits on it too. */
static _Atomic int gate;

static rok_poll gated_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	while (!atomic_load(&gate))
		ROK_YIELD(cx);
	ROK_RETURN(cx, 1234);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct joiner {
	rok_task *target;
	void *v;
	rok_join_op join;
};

static rok_poll joiner_poll(rok_cx *cx, void *frame)
{
	struct joiner *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->target, &f->v));
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static void *thread_wait(void *arg)
{
	void *v = NULL;

	if (rok_task_wait(arg, &v) != 0)
		return NULL;
	return v;
}

START_TEST(many_joiners)
{
	enum { J = 64, T = 4 };
	rok_task *target, *j[J];
	pthread_t th[T];

	ck_assert_int_eq(rok_spawn(&target, gated_poll, NULL, 0), 0);
	struct joiner jf = { .target = target };
	for (int i = 0; i < J; i++)
		ck_assert_int_eq(rok_spawn(&j[i], joiner_poll, &jf, sizeof(jf)), 0);
	for (int i = 0; i < T; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, thread_wait,
		                                target), 0);
	atomic_store(&gate, 1);
	for (int i = 0; i < J; i++) {
		void *v;
		ck_assert_int_eq(rok_task_wait(j[i], &v), 0);
		ck_assert_int_eq((intptr_t)v, 1234);
		rok_task_unref(j[i]);
	}
	for (int i = 0; i < T; i++) {
		void *v;
		pthread_join(th[i], &v);
		ck_assert_int_eq((intptr_t)v, 1234);
	}
	ck_assert(rok_task_is_finished(target));
	rok_task_unref(target);
}
END_TEST

/*
 * Joiners cancelled while their target finishes: a cancelled joiner's
 * release meets the finishing thread, which has taken the joiners off the
 * body it is about to free (task.c).  Each joiner ends with the value or
 * cancelled, and no registration is left; the sanitizer builds see any
 * use of the freed body.
 */
static _Atomic int race_gate;

static rok_poll race_target_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	while (!atomic_load(&race_gate))
		ROK_YIELD(cx);
	ROK_RETURN(cx, 99);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

struct join_err {
	rok_task *target;
	void *v;
	int err;
	rok_join_op join;
};

static rok_poll join_err_poll(rok_cx *cx, void *frame)
{
	struct join_err *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_join_err(cx, &f->join, f->target, &f->v, &f->err));
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(joiners_cancelled_as_target_ends)
{
	enum { J = 16 };
	long rounds = 5000;   /* not scaled: the sanitizers need the hits */
	long got_value = 0, cancelled = 0;

	for (long r = 0; r < rounds; r++) {
		rok_task *target, *j[J];

		atomic_store(&race_gate, 0);
		ck_assert_int_eq(rok_spawn(&target, race_target_poll, NULL, 0),
		                 0);
		struct join_err jf = { .target = target };
		for (int i = 0; i < J; i++)
			ck_assert_int_eq(rok_spawn(&j[i], join_err_poll, &jf,
			                           sizeof(jf)), 0);
		while (rok_registrations() < J)
			sched_yield();
		/* Cancels from the back of the list, where the finishing
		 * thread gets last. */
		atomic_store(&race_gate, 1);
		for (int i = J - 1; i >= 0; i--)
			rok_task_cancel(j[i]);
		for (int i = 0; i < J; i++) {
			void *v = NULL;
			int e = rok_task_wait(j[i], &v);
			ck_assert(e == -ECANCELED || (e == 0 && v == (void *)99));
			if (e == 0)
				got_value++;
			else
				cancelled++;
			rok_task_unref(j[i]);
		}
		rok_task_unref(target);
	}
	ck_assert_int_eq(rok_registrations(), 0);
	ck_assert_int_eq(got_value + cancelled, rounds * J);
}
END_TEST

/* Joining an already finished task is ready at once. */
struct join_done {
	rok_task *t;
	void *v;
	rok_join_op join;
};

static rok_poll join_done_poll(rok_cx *cx, void *frame)
{
	struct join_done *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->t, &f->v));
	ROK_AWAIT(cx, rok_join(cx, &f->join, f->t, &f->v));   /* twice */
	ROK_RETURN(cx, f->v);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(join_finished_task)
{
	long v = 77;
	rok_task *t;

	ck_assert_int_eq(rok_spawn(&t, echo_poll, &v, sizeof(v)), 0);
	ck_assert_int_eq(rok_task_wait(t, NULL), 0);
	struct join_done jd = { .t = t };
	ck_assert_int_eq((intptr_t)test_spawn_wait(join_done_poll, &jd,
	                                           sizeof(jd)), 77);
	rok_task_unref(t);
}
END_TEST

/* Ids and handles. */
static rok_poll id_poll(rok_cx *cx, void *frame)
{
	uint64_t id;

	(void)frame;
	ROK_BEGIN(cx);
	if (rok_try_id(&id) != 0 || id != rok_id())
		ROK_RETURN(cx, 0);
	ROK_RETURN(cx, id);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(ids_and_handles)
{
	rok_task *a, *b;
	void *va, *vb;
	uint64_t id;

	ck_assert_int_eq(rok_try_id(&id), -ESRCH);
	ck_assert_int_eq(rok_spawn(&a, id_poll, NULL, 0), 0);
	ck_assert_int_eq(rok_spawn(&b, id_poll, NULL, 0), 0);
	ck_assert_int_ne(rok_task_id(a), rok_task_id(b));
	ck_assert_int_gt(rok_task_id(a), 0);
	rok_task *a2 = rok_task_ref(a);
	ck_assert_int_eq(rok_task_wait(a, &va), 0);
	ck_assert_int_eq(rok_task_wait(b, &vb), 0);
	ck_assert_int_eq((uint64_t)(uintptr_t)va, rok_task_id(a));
	ck_assert_int_eq((uint64_t)(uintptr_t)vb, rok_task_id(b));
	rok_task_unref(a);
	ck_assert_int_eq(rok_task_id(a2), (uint64_t)(uintptr_t)va);
	rok_task_unref(a2);
	rok_task_unref(b);
	rok_task_unref(NULL);
}
END_TEST

/* A body that falls off its end finishes with NULL, not garbage. */
static rok_poll void_poll(rok_cx *cx, void *frame)
{
	(void)frame;
	ROK_BEGIN(cx);
	ROK_YIELD(cx);
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

START_TEST(no_value_is_null)
{
	rok_task *t;
	void *v = (void *)1;

	ck_assert_int_eq(rok_spawn(&t, void_poll, NULL, 0), 0);
	ck_assert_int_eq(rok_task_wait(t, &v), 0);
	ck_assert_ptr_null(v);
	rok_task_unref(t);
}
END_TEST

static Suite *task_suite(void)
{
	const struct test_case cases[] = {
		{ "bad_arguments", spawn_rejects_bad_arguments },
		{ "frame_sizes", frames_of_all_sizes },
		{ "many_joiners", many_joiners },
		{ "cancel_race", joiners_cancelled_as_target_ends },
		{ "join_finished", join_finished_task },
		{ "ids_handles", ids_and_handles },
		{ "no_value", no_value_is_null },
	};

	return TEST_SUITE("task", cases, 30);
}

int main(void)
{
	return test_run(task_suite());
}
