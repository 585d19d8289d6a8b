/*
 * testthreads.h — counting the threads of a test process through
 * /proc/self/task, for tests that check the runtime starts and joins its
 * threads.  Apart from testutil.h because of <unistd.h>, whose names
 * (F_LOCK, ...) some tests use for their own.
 *
 * pthread_join returns when the kernel clears the thread's tid, a moment
 * before it unlists the thread from /proc/self/task: a count taken right
 * after a join or rok_stop may include threads already joined (2 counts in
 * 20,000 did on an idle 2-core VM), so these helpers wait for the count
 * they expect, or for the joined thread's entry to go.
 */
#ifndef ROK_TESTTHREADS_H
#define ROK_TESTTHREADS_H

#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>
#include <unistd.h>

#include "testutil.h"

/* The number of entries in the directory path, bar "." and "..". */
static inline int test_dir_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static inline int test_thread_count(void)
{
	return test_dir_entries("/proc/self/task");
}

/* Polls (yielding the CPU) until path no longer exists, for at most 10 s;
 * true if it went. */
static inline bool test_vanished(const char *path)
{
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (access(path, F_OK) == 0) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > 10)
			return false;
		sched_yield();
	}
	return true;
}

static inline void *test_note_tid(void *arg)
{
	*(pid_t *)arg = gettid();
	return NULL;
}

/*
 * The thread count now, taken after one helper thread came and went:
 * ThreadSanitizer starts a background thread at the first pthread_create,
 * which must be in the count.  Waits for the helper's /proc entry to go, so
 * that the helper is not counted.
 */
static inline int test_thread_baseline(void)
{
	char path[64];
	pthread_t th;
	pid_t tid = 0;

	ck_assert_int_eq(pthread_create(&th, NULL, test_note_tid, &tid), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
	ck_assert_msg(test_vanished(path), "joined thread %d still listed",
	              (int)tid);
	return test_thread_count();
}

/* The thread count once it is `want`, or whatever it is after 10 s: the
 * tids of the threads joined (by rok_stop, say) are not known here, so
 * this waits for the count, yielding the CPU. */
static inline int test_threads_settled(int want)
{
	struct timespec t0, now;
	int n;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((n = test_thread_count()) != want) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > 10)
			break;
		sched_yield();
	}
	return n;
}

#endif /* ROK_TESTTHREADS_H */
