/*
 * check_events.c — daemon/events.c in-process: while the reactor thread
 * lags behind the publishers, output events do not pile up without bound
 * (at most EVENTS_OUTPUT_MAX queued, then one EVENTS_ANY_TASK standing for
 * the rest), and publishing goes on as before once it caught up.  The test
 * holds the reactor in a call of its own, so the lag is certain, not
 * hoped for.
 *
 * Each test runs in its own forked process (Check's default), so the
 * daemon's globals start clean every time.
 */
#include <check.h>
#include <semaphore.h>
#include <stdatomic.h>

#include "reactor.h"
#include "rokd.h"
#include "testutil.h"

static _Atomic unsigned ev_delivered, ev_any;
static sem_t ev_sem, ev_release;

static void ev_count(const struct events_ev *ev)
{
	atomic_fetch_add(&ev_delivered, 1);
	if (ev->id == EVENTS_ANY_TASK)
		atomic_fetch_add(&ev_any, 1);
}

static void ev_subscribe_cb(void *arg)
{
	(void)arg;
	ck_assert_int_eq(events_subscribe(ev_count, EVENTS_OUTPUT), 0);
	sem_post(&ev_sem);
}

/* Holds the reactor thread until the test lets it go. */
static void ev_block_cb(void *arg)
{
	(void)arg;
	sem_post(&ev_sem);
	while (sem_wait(&ev_release) != 0)
		;
}

static void ev_post_cb(void *arg)
{
	(void)arg;
	sem_post(&ev_sem);
}

/* Runs fn on the reactor thread and waits for it to have run (and every
 * call queued before it). */
static void ev_on_reactor(void (*fn)(void *))
{
	ck_assert_int_eq(reactor_call(fn, NULL), 0);
	while (sem_wait(&ev_sem) != 0)
		;
}

static void ev_publish(uint64_t id)
{
	events_publish(&(struct events_ev){ .kind = EVENTS_OUTPUT, .id = id });
}

START_TEST(output_bounded_while_reactor_lags)
{
	log_init(0);
	ck_assert_int_eq(sem_init(&ev_sem, 0, 0), 0);
	ck_assert_int_eq(sem_init(&ev_release, 0, 0), 0);
	ck_assert_int_eq(rok_start(), 0);
	ev_on_reactor(ev_subscribe_cb);
	ck_assert(events_wanted(EVENTS_OUTPUT));

	ev_on_reactor(ev_block_cb);   /* the reactor is stuck from here */
	unsigned n = EVENTS_OUTPUT_MAX * 25;
	for (unsigned i = 0; i < n; i++)
		ev_publish(1 + i % 7);
	sem_post(&ev_release);
	ev_on_reactor(ev_post_cb);
	/* The bound, and one event for all those dropped. */
	ck_assert_uint_eq(atomic_load(&ev_delivered), EVENTS_OUTPUT_MAX + 1);
	ck_assert_uint_eq(atomic_load(&ev_any), 1);

	/* Caught up: every event goes through again, as itself. */
	atomic_store(&ev_delivered, 0);
	for (unsigned i = 0; i < 10; i++)
		ev_publish(3);
	ev_on_reactor(ev_post_cb);
	ck_assert_uint_eq(atomic_load(&ev_delivered), 10);
	ck_assert_uint_eq(atomic_load(&ev_any), 1);

	/* A second lag gets its own stand-in. */
	ev_on_reactor(ev_block_cb);
	for (unsigned i = 0; i < n; i++)
		ev_publish(5);
	sem_post(&ev_release);
	ev_on_reactor(ev_post_cb);
	ck_assert_uint_eq(atomic_load(&ev_any), 2);
	ck_assert_int_eq(rok_stop(), 0);
}
END_TEST

static Suite *events_suite(void)
{
	const struct test_case cases[] = {
		{ "output_bounded_while_reactor_lags",
		  output_bounded_while_reactor_lags },
	};
	return TEST_SUITE("events", cases, 60);
}

int main(void)
{
	return test_run(events_suite());
}
