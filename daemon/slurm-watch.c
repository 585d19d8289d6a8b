/*
 * slurm-watch.c — watching rokd's Slurm jobs with one query per interval.
 *
 * One thread of its own (started with the first job, ended by
 * slurm_watch_stop) runs, every slurm_poll_interval, ONE squeue of the
 * jobs of the users rokd watches jobs of, in every state (`squeue -h -t
 * all -u UID,... -O ...`), and keeps, for each job it was asked to watch,
 * the last state seen, in a table under one mutex.  The cost to rokd and
 * to slurmctld is one query per interval however many jobs run; the tasks
 * (slurm.c) read the table when they wake, which costs no query.  Only
 * those users' jobs: on a cluster with a hundred thousand jobs, every
 * user's would pass the output's bound (SLURM_WATCH_OUT), and a query cut
 * short is no answer, so no job's state would ever change.  A line is
 * matched to a job by its id alone: the query shows no field a user
 * chooses (a job name with a newline in it would add a line of that
 * user's making), and jobs rokd does not watch (another rokd's) are
 * skipped.
 * A job that the query no longer lists (purged by slurmctld, MinJobAge)
 * becomes SLURM_GONE after two full queries that miss it.  A failed query
 * (slurmctld down) changes nothing: the jobs keep their last state.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rokd.h"
#include "slurm.h"

struct slurm_watched {
	uint32_t jobid;
	uid_t uid;                  /* the job's user */
	int misses;
	struct slurm_jobstate js;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct slurm_watched *v;    /* under lock */
	size_t n, cap;
	/* v's index by job id, open addressing with linear probing: each
	 * slot 0 (free) or an index into v plus one; mask + 1 slots, at
	 * least twice n.  Under lock.  A query's lines and each task's
	 * look cost O(1), not O(n): at thousands of jobs a linear search
	 * per line held the lock for O(n^2). */
	uint32_t *slot;
	size_t mask;
	bool started, stop;
	pthread_t thread;
	char tag[16];
	char dir[400];              /* slurm_output_dir, absolute */
	int dirfd;                  /* it, held open; -1: none */
	int lockfd;                 /* its rokd.lock, flocked until exit */
	int64_t interval_ms;
} sw = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
          .dirfd = -1, .lockfd = -1 };

#define SLURM_WATCH_OUT (4u << 20)   /* bytes of squeue output read */
/* More users than this in one query: every user's jobs instead (-u's
 * argument stays far under the kernel's 128 KiB per argument). */
#define SLURM_WATCH_USERS 4096

/* mkdir 0755 (whatever rokd's umask): each task's directory in it is its
 * user's (slurm.c), whom slurmd must let through.  One that exists keeps
 * the mode its owner gave it.  0 or -errno. */
static int slurm_watch_mkdir(const char *path)
{
	if (mkdir(path, 0755) == 0)
		return chmod(path, 0755) == 0 ? 0 : -errno;
	return errno == EEXIST ? 0 : -errno;
}

int slurm_watch_init(void)
{
	char real[PATH_MAX], out[PATH_MAX];
	int err;

	/* Absolute: sbatch's paths are read on the node, from the job's
	 * working directory. */
	if (realpath(config.state_dir, real) == NULL)
		return -errno;
	if (config.slurm_output_dir != NULL) {
		if (config.slurm_output_dir[0] != '/')
			return -EINVAL;
		if ((err = slurm_watch_mkdir(config.slurm_output_dir)) < 0)
			return err;
		if (realpath(config.slurm_output_dir, out) == NULL)
			return -errno;
	} else {
		if (snprintf(out, sizeof(out), "%s/slurm", real) >=
		    (int)sizeof(out))
			return -ENAMETOOLONG;
		if ((err = slurm_watch_mkdir(out)) < 0)
			return err;
	}
	/* rokd as root makes and chowns each task's directory in it: were
	 * it writable by others, one could put a link to anything there
	 * under a task's id, and have rokd chown that.  Held open, and the
	 * task directories made and chowned relative to it: whoever may
	 * rename a directory above it cannot swap it for another under
	 * rokd's feet either. */
	struct stat st;
	int fd = open(out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) ||
	    st.st_uid != geteuid() ||
	    (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
		close(fd);
		return -EPERM;
	}
	/* One rokd per directory: another's tasks of the same ids would
	 * write (and have rokd empty) the same ID/out and err.  The lock is
	 * held until exit.  On a file system without locks nobody can
	 * tell: that is logged, not refused. */
	int lk = openat(fd, "rokd.lock", O_RDWR | O_CREAT | O_NOFOLLOW |
	                O_CLOEXEC, 0600);
	if (lk < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	if (flock(lk, LOCK_EX | LOCK_NB) != 0) {
		/* EACCES: how some file systems' locks say it is held. */
		if (errno == EWOULDBLOCK || errno == EACCES) {
			close(lk);
			close(fd);
			return -EBUSY;
		}
		log_warnx("slurm groups: %s/rokd.lock: %s: another rokd using "
		          "this directory would not be noticed", out,
		          strerror(errno));
	}
	sw.lockfd = lk;
	sw.dirfd = fd;
	if (snprintf(sw.dir, sizeof(sw.dir), "%s", out) >= (int)sizeof(sw.dir))
		return -ENAMETOOLONG;
	/* FNV-1a of the state directory: stable across restarts. */
	uint32_t h = 2166136261u;
	for (const char *p = real; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	snprintf(sw.tag, sizeof(sw.tag), "%08x", h);
	sw.interval_ms = (int64_t)config.slurm_poll_interval_ms;
	return 0;
}

const char *slurm_watch_dir(void)
{
	return sw.dir;
}

int slurm_watch_dirfd(void)
{
	return sw.dirfd;
}

void slurm_watch_name(uint64_t id, uint32_t run, char *buf, size_t len)
{
	snprintf(buf, len, "rok-%s-%llu-%u", sw.tag, (unsigned long long)id,
	         run);
}

static int slurm_watch_state(const char *s)
{
	static const struct { const char *name; int state; } m[] = {
		{ "PENDING", SLURM_PENDING }, { "REQUEUED", SLURM_PENDING },
		{ "REQUEUE_HOLD", SLURM_PENDING },
		{ "REQUEUE_FED", SLURM_PENDING }, { "RESV_DEL_HOLD", SLURM_PENDING },
		{ "RUNNING", SLURM_RUNNING }, { "CONFIGURING", SLURM_RUNNING },
		{ "COMPLETING", SLURM_RUNNING }, { "SUSPENDED", SLURM_RUNNING },
		{ "STOPPED", SLURM_RUNNING }, { "SIGNALING", SLURM_RUNNING },
		{ "STAGE_OUT", SLURM_RUNNING }, { "RESIZING", SLURM_RUNNING },
		{ "COMPLETED", SLURM_COMPLETED },
		{ "CANCELLED", SLURM_CANCELLED }, { "TIMEOUT", SLURM_TIMEOUT },
		{ "DEADLINE", SLURM_TIMEOUT },
	};
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
		if (strcmp(s, m[i].name) == 0)
			return m[i].state;
	/* FAILED, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, PREEMPTED, ... */
	return SLURM_FAILED;
}

static size_t slurm_watch_home(uint32_t jobid)
{
	/* Every bit of the id mixed into the low ones (murmur3's
	 * finalizer): ids a power of two apart do not share a slot. */
	uint32_t x = jobid;
	x ^= x >> 16;
	x *= 0x85ebca6bu;
	x ^= x >> 13;
	x *= 0xc2b2ae35u;
	x ^= x >> 16;
	return (size_t)x & sw.mask;
}

/* Lock held.  The slot of jobid's entry, the next one after slot
 * `from` on its probe sequence (SIZE_MAX: start), or SIZE_MAX. */
static size_t slurm_watch_slot(uint32_t jobid, size_t from)
{
	if (sw.slot == NULL)
		return SIZE_MAX;
	size_t i = from == SIZE_MAX ? slurm_watch_home(jobid)
	                            : (from + 1) & sw.mask;
	for (; sw.slot[i] != 0; i = (i + 1) & sw.mask)
		if (sw.v[sw.slot[i] - 1].jobid == jobid)
			return i;
	return SIZE_MAX;
}

static struct slurm_watched *slurm_watch_find(uint32_t jobid)
{
	size_t i = slurm_watch_slot(jobid, SIZE_MAX);
	return i == SIZE_MAX ? NULL : &sw.v[sw.slot[i] - 1];
}

/* Lock held.  Puts v[k] in the index, which has a free slot. */
static void slurm_watch_index(size_t k)
{
	size_t i = slurm_watch_home(sw.v[k].jobid);
	while (sw.slot[i] != 0)
		i = (i + 1) & sw.mask;
	sw.slot[i] = (uint32_t)k + 1;
}

/* Lock held.  Frees slot i, moving back the entries after it whose probe
 * sequence passes through it (no tombstones). */
static void slurm_watch_unindex(size_t i)
{
	size_t j = i;

	sw.slot[i] = 0;
	for (;;) {
		j = (j + 1) & sw.mask;
		if (sw.slot[j] == 0)
			return;
		size_t h = slurm_watch_home(sw.v[sw.slot[j] - 1].jobid);
		/* Stays if its home lies cyclically in (i, j]. */
		if (i <= j ? (i < h && h <= j) : (i < h || h <= j))
			continue;
		sw.slot[i] = sw.slot[j];
		sw.slot[j] = 0;
		i = j;
	}
}

/* Lock held.  Room for one more entry in v and the index: 0 or -ENOMEM. */
static int slurm_watch_reserve(void)
{
	if (sw.n >= UINT32_MAX / 2)
		return -ENOMEM;   /* a slot holds an index + 1 in 32 bits */
	if (sw.n == sw.cap) {
		size_t cap = sw.cap != 0 ? sw.cap * 2 : 64;
		void *v = realloc(sw.v, cap * sizeof(*sw.v));
		if (v == NULL)
			return -ENOMEM;
		sw.v = v;
		sw.cap = cap;
	}
	if (sw.slot != NULL && (sw.n + 1) * 2 <= sw.mask + 1)
		return 0;
	size_t nslots = sw.slot != NULL ? (sw.mask + 1) * 2 : 128;
	uint32_t *slot = calloc(nslots, sizeof(*slot));
	if (slot == NULL)
		return -ENOMEM;
	free(sw.slot);
	sw.slot = slot;
	sw.mask = nslots - 1;
	for (size_t k = 0; k < sw.n; k++)
		slurm_watch_index(k);
	return 0;
}

/* One line: JOBID|STATE|EXIT_CODE|REASON|.  Lock held. */
static void slurm_watch_line(char *line)
{
	char *f[4], *save = NULL;
	int n = 0;

	for (char *t = strtok_r(line, "|", &save); t != NULL && n < 4;
	     t = strtok_r(NULL, "|", &save))
		f[n++] = t;
	if (n < 3)
		return;
	char *end;
	unsigned long id = strtoul(f[0], &end, 10);
	if (*end != '\0' || id == 0 || id > UINT32_MAX)
		return;   /* an array or het job: not one of ours */
	bool why = n == 4 && strcmp(f[3], "None") != 0;
	for (size_t i = slurm_watch_slot((uint32_t)id, SIZE_MAX);
	     i != SIZE_MAX; i = slurm_watch_slot((uint32_t)id, i)) {
		struct slurm_watched *w = &sw.v[sw.slot[i] - 1];
		w->misses = -1;   /* seen in this query */
		w->js.state = slurm_watch_state(f[1]);
		w->js.status = (int)strtol(f[2], NULL, 10);
		snprintf(w->js.reason, sizeof(w->js.reason), "%s%s%s", f[1],
		         why ? ": " : "", why ? f[3] : "");
		snprintf(w->js.why, sizeof(w->js.why), "%s", why ? f[3] : "");
	}
}

/* squeue's argv into argv[12] (its strings are constant); name_filter
 * and user (NULL: none) are borrowed. */
static char *const *slurm_watch_argv(char **argv, char *name_filter,
                                     char *user)
{
	/* No field a user chooses (a job's name may hold a newline, and
	 * with it a line of its own). */
	static const char fmt[] = "JobID:|,State:|,exit_code:|,Reason:|";
	int k = 0;

	argv[k++] = (char *)slurm_cmd_path("squeue");
	argv[k++] = (char *)"-h";
	argv[k++] = (char *)"-t";
	argv[k++] = (char *)"all";
	argv[k++] = (char *)"-O";
	argv[k++] = (char *)fmt;
	if (name_filter != NULL) {
		argv[k++] = (char *)"-n";
		argv[k++] = name_filter;
	}
	if (user != NULL) {
		argv[k++] = (char *)"-u";
		argv[k++] = user;
	}
	argv[k] = NULL;
	return argv;
}

static int slurm_watch_uid_cmp(const void *a, const void *b)
{
	uid_t x = *(const uid_t *)a, y = *(const uid_t *)b;
	return (x > y) - (x < y);
}

/*
 * Lock held.  The users of the watched jobs, as squeue's -u wants them
 * ("0,1000"), malloc'd; NULL for every user's (more than
 * SLURM_WATCH_USERS, or no memory).
 */
static char *slurm_watch_users_locked(void)
{
	uid_t *u = malloc((sw.n > 0 ? sw.n : 1) * sizeof(*u));
	size_t n = 0;

	if (u == NULL)
		return NULL;
	for (size_t i = 0; i < sw.n; i++)
		u[i] = sw.v[i].uid;
	/* Sorted, each user once: O(n log n) however many users. */
	qsort(u, sw.n, sizeof(*u), slurm_watch_uid_cmp);
	for (size_t i = 0; i < sw.n; i++)
		if (n == 0 || u[n - 1] != u[i])
			u[n++] = u[i];
	if (n > SLURM_WATCH_USERS) {
		free(u);
		return NULL;
	}
	/* Up to 10 digits and a comma each. */
	char *list = malloc(n * 11 + 1), *p = list;
	for (size_t k = 0; list != NULL && k < n; k++)
		p += sprintf(p, "%s%u", k > 0 ? "," : "", (unsigned)u[k]);
	if (list != NULL)
		*p = '\0';
	free(u);
	return list;
}

/* One query, of `users`' jobs (NULL: everyone's); lock not held.  0, or
 * -1 when squeue failed. */
static int slurm_watch_query(char *out, char *users)
{
	if (slurm_cmd_path("squeue") == NULL)
		return -1;
	char *argv[12];
	int st = slurm_cmd_run(slurm_watch_argv(argv, NULL, users), NULL, NULL,
	                       NULL, out, SLURM_WATCH_OUT);
	if (st < 0) {
		log_warnx("slurm: squeue: %s", slurm_cmd_strerror(st));
		return -1;
	}
	if (st != 0) {
		log_warnx("slurm: squeue failed (%d): %.200s", st, out);
		return -1;
	}
	return 0;
}

/* Lock held: one full query's output (consumed). */
static void slurm_watch_apply_locked(char *out)
{
	for (size_t i = 0; i < sw.n; i++)
		if (sw.v[i].misses < 0)
			sw.v[i].misses = 0;
	char *save = NULL;
	for (char *l = strtok_r(out, "\n", &save); l != NULL;
	     l = strtok_r(NULL, "\n", &save))
		slurm_watch_line(l);
	for (size_t i = 0; i < sw.n; i++) {
		struct slurm_watched *w = &sw.v[i];
		if (w->misses >= 0 && ++w->misses >= 2 &&
		    w->js.state != SLURM_GONE) {
			w->js.state = SLURM_GONE;
			snprintf(w->js.reason, sizeof(w->js.reason),
			         "no longer known to Slurm");
		}
	}
}

void slurm_watch_apply(char *out)
{
	pthread_mutex_lock(&sw.lock);
	slurm_watch_apply_locked(out);
	pthread_mutex_unlock(&sw.lock);
}

static void *slurm_watch_main(void *arg)
{
	char *out = malloc(SLURM_WATCH_OUT);

	(void)arg;
	pthread_mutex_lock(&sw.lock);
	while (!sw.stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (sw.interval_ms % 1000) * 1000000;
		ts.tv_sec += sw.interval_ms / 1000 + ts.tv_nsec / 1000000000;
		ts.tv_nsec %= 1000000000;
		(void)pthread_cond_timedwait(&sw.cond, &sw.lock, &ts);
		if (sw.stop || sw.n == 0 || out == NULL)
			continue;
		char *users = slurm_watch_users_locked();
		pthread_mutex_unlock(&sw.lock);
		int ok = slurm_watch_query(out, users);
		free(users);
		pthread_mutex_lock(&sw.lock);
		if (ok == 0)
			slurm_watch_apply_locked(out);
	}
	pthread_mutex_unlock(&sw.lock);
	free(out);
	return NULL;
}

int slurm_watch_add(uint32_t jobid, uid_t uid)
{
	int err = 0;

	pthread_mutex_lock(&sw.lock);
	if (!sw.started && !sw.stop) {
		if ((err = pthread_create(&sw.thread, NULL, slurm_watch_main,
		                          NULL)) != 0) {
			pthread_mutex_unlock(&sw.lock);
			return -err;
		}
		sw.started = true;
	}
	if ((err = slurm_watch_reserve()) < 0) {
		pthread_mutex_unlock(&sw.lock);
		return err;
	}
	/* misses 0: a job the next two queries miss is gone (sbatch
	 * answered, so slurmctld has it). */
	sw.v[sw.n] = (struct slurm_watched){ .jobid = jobid, .uid = uid };
	slurm_watch_index(sw.n++);
	pthread_mutex_unlock(&sw.lock);
	return 0;
}

void slurm_watch_remove(uint32_t jobid)
{
	pthread_mutex_lock(&sw.lock);
	size_t i = slurm_watch_slot(jobid, SIZE_MAX);
	if (i != SIZE_MAX) {
		size_t k = sw.slot[i] - 1, last = --sw.n;
		slurm_watch_unindex(i);
		if (k != last) {
			/* The last entry moves into the hole: its slot
			 * follows. */
			size_t j = slurm_watch_home(sw.v[last].jobid);
			while (sw.slot[j] != last + 1)
				j = (j + 1) & sw.mask;
			sw.v[k] = sw.v[last];
			sw.slot[j] = (uint32_t)k + 1;
		}
	}
	pthread_mutex_unlock(&sw.lock);
}

void slurm_watch_get(uint32_t jobid, struct slurm_jobstate *js)
{
	pthread_mutex_lock(&sw.lock);
	struct slurm_watched *w = slurm_watch_find(jobid);
	if (w != NULL)
		*js = w->js;
	else
		*js = (struct slurm_jobstate){ .state = SLURM_UNKNOWN };
	pthread_mutex_unlock(&sw.lock);
}

int64_t slurm_watch_lookup(uint64_t id, uint32_t run, uid_t uid)
{
	char name[64], user[16], out[4096];

	if (slurm_cmd_path("squeue") == NULL)
		return -ENOENT;
	slurm_watch_name(id, run, name, sizeof(name));
	/* Only the jobs of the user the run is submitted as: anyone may
	 * name a job of theirs rok-TAG-ID-RUN, and it must not be taken
	 * for another user's task. */
	snprintf(user, sizeof(user), "%u", (unsigned)uid);
	char *argv[12];
	int st = slurm_cmd_run(slurm_watch_argv(argv, name, user), NULL, NULL,
	                       NULL, out, sizeof(out));
	if (st != 0)
		return st < 0 ? st : -EIO;
	/* The newest of that name, should there be more than one. */
	int64_t found = 0;
	char *save = NULL;
	for (char *l = strtok_r(out, "\n", &save); l != NULL;
	     l = strtok_r(NULL, "\n", &save)) {
		long long j = strtoll(l, NULL, 10);
		if (j > found && j <= UINT32_MAX)
			found = j;
	}
	return found;
}

void slurm_watch_stop(void)
{
	pthread_mutex_lock(&sw.lock);
	sw.stop = true;
	bool started = sw.started;
	pthread_cond_signal(&sw.cond);
	pthread_mutex_unlock(&sw.lock);
	if (started)
		(void)pthread_join(sw.thread, NULL);
	/* Under the lock: a task the runtime's stop left running may still
	 * look or remove (it then finds nothing). */
	pthread_mutex_lock(&sw.lock);
	sw.started = false;
	free(sw.v);
	free(sw.slot);
	sw.v = NULL;
	sw.slot = NULL;
	sw.n = sw.cap = sw.mask = 0;
	pthread_mutex_unlock(&sw.lock);
}
