/*
 * exec-cgroup.c — a cgroup (v2) per exec task, where rokd may make them.
 *
 * A process group holds a task only as long as its processes stay in it: a
 * grandchild that calls setsid() leaves, and outlives the task's timeout,
 * cancel and end.  A cgroup cannot be left without the rights to write to
 * another one.  So when rokd's own cgroup, on a cgroup2 mount, lets it make
 * children and the kernel has cgroup.kill (5.14), each exec task's child
 * joins a cgroup of its own, <rokd's cgroup>/rokd.<rokd's pid>/slot.<n>:
 * the kernel puts it there as clone3 makes it (CLONE_INTO_CGROUP, with the
 * directory fd opened here), or, where rokd cannot use that (no clone3, or
 * the kernel kills such children: exec-spawn.c), the child writes "0" to
 * the cgroup.procs fd opened here before it drops its credentials.
 * Whenever the task kills its process group with SIGKILL, and when its
 * leader is reaped with a process left in the cgroup, rokd writes "1" to
 * the cgroup's cgroup.kill.  Elsewhere (cgroup v1 only, a non-delegated
 * cgroup, an older kernel) this file does nothing and says so once at
 * start; tasks are then held by their process group alone.
 *
 * Making and removing a cgroup (mkdir and rmdir, each of which creates or
 * destroys a directory of control files in the kernel) cost more than
 * starting `true` does, so cgroups are reused: one whose task ended, that
 * was never killed (exec_cgroup.killed) and that is empty (its
 * cgroup.events says "populated 0") goes to a pool of up to CGROUP_POOL,
 * kept open, and the next start takes it from there (a spawner thread,
 * just before the clone: a queued start holds none).  A
 * cgroup is one task's at a time and empty when a task gets it, which is
 * all a task needs of it.  cgroup2 cannot rename, hence slot.<n> names
 * rather than task ids.
 *
 * No controllers are enabled (cgroup.subtree_control is left alone): this
 * is for holding and killing, not for resource limits.  A cgroup that is
 * not kept is removed when its task ends; one whose killed processes are
 * still exiting (rmdir says EBUSY) is retried at the next cgroup taken and
 * at exit; the directory of a rokd that died without removing its own is
 * killed and removed by the next start (exec_cgroup_sweep: a live rokd
 * holds an flock on its directory, so one in another pid namespace is not
 * taken for dead).
 *
 * ROKD_TEST_NO_CGROUP, a test hook read at start from rokd's environment,
 * turns this off.  Every rokd in one cgroup sweeps the dead ones' cgroups,
 * so a test that needs the processes a killed rokd left to live until its
 * own restart (journal.test) cannot share the cgroup with tests that start
 * rokds in parallel.
 *
 * Threads: exec_cgroup_init on the main thread; the rest on any thread
 * (a spawner takes a task's cgroup, the task's worker gives it back).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec.h"
#include "rokd.h"

#define CGROUP_PENDING 64
#define CGROUP_POOL 32

static struct {
	char *base;                 /* NULL: no cgroups */
	pthread_mutex_t lock;
	uint64_t pending[CGROUP_PENDING];   /* slots whose rmdir said EBUSY */
	unsigned npending;
	struct exec_cgroup pool[CGROUP_POOL];   /* empty, open, unused */
	unsigned npool;
	uint64_t last;              /* the last slot.<n> made */
	int own;                    /* base, open and flocked; -1: none */
} cg = { .lock = PTHREAD_MUTEX_INITIALIZER, .own = -1 };

/* The cgroup2 mount point from /proc/self/mountinfo, into buf: 0 or -1. */
static int exec_cgroup_mount(char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	int rc = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		/* id parent major:minor root mountpoint opts... - type ... */
		char *dash = strstr(line, " - cgroup2 ");
		char mnt[4096];
		if (dash == NULL ||
		    sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 ||
		    strchr(mnt, '\\') != NULL)   /* escaped: not worth it */
			continue;
		if (snprintf(buf, len, "%s", mnt) < (int)len)
			rc = 0;
		break;
	}
	fclose(f);
	return rc;
}

/* rokd's cgroup v2 path ("0::/path" in /proc/self/cgroup): 0 or -1. */
static int exec_cgroup_self(char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096];
	int rc = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "0::/", 4) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		if (snprintf(buf, len, "%s", line + 3) < (int)len)
			rc = 0;
		break;
	}
	fclose(f);
	return rc;
}

/* How long exec_cgroup_clear waits for killed processes to be gone. */
#define CGROUP_CLEAR_WAIT_MS 2000

/* cgroup.kill only sends the signals: waits until no process is left in
 * `base` (its cgroup.events says "populated 0"), for a bounded time, so
 * that the rmdirs that follow find the cgroups empty.  Start and exit
 * only (the main thread). */
static void exec_cgroup_wait_empty(const char *base)
{
	char path[8192], buf[256];

	snprintf(path, sizeof(path), "%s/cgroup.events", base);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	for (int ms = 0; ms < CGROUP_CLEAR_WAIT_MS; ms += 10) {
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
		if (n < 0)
			break;
		buf[n] = '\0';
		if (strstr(buf, "populated 0") != NULL)
			break;
		/* A change wakes poll early (POLLPRI); 10 ms at most. */
		struct pollfd p = { .fd = fd, .events = POLLPRI };
		(void)poll(&p, 1, 10);
	}
	close(fd);
}

/* Kills what is left in a rokd.<pid> directory and removes what it can
 * (a cgroup whose processes are still exiting stays, and is retried by the
 * next start).  0, or -errno of the last rmdir. */
static int exec_cgroup_clear(const char *base)
{
	char path[8192];

	/* Whatever is left in the tasks' cgroups is a leftover of a task. */
	snprintf(path, sizeof(path), "%s/cgroup.kill", base);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "1", 1) != 1)
			log_errno(errno, "exec: %s", path);
		close(fd);
	}
	exec_cgroup_wait_empty(base);
	DIR *d = opendir(base);
	struct dirent *de;
	while (d != NULL && (de = readdir(d)) != NULL) {
		/* (task.<id>: an earlier version's names) */
		if (strncmp(de->d_name, "slot.", 5) == 0 ||
		    strncmp(de->d_name, "task.", 5) == 0)
			(void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
	}
	if (d != NULL)
		closedir(d);
	return rmdir(base) == 0 ? 0 : -errno;
}

static void exec_cgroup_exit(void)
{
	pthread_mutex_lock(&cg.lock);
	int err = exec_cgroup_clear(cg.base);
	if (err < 0)
		log_errno(err, "exec: removing %s", cg.base);
	pthread_mutex_unlock(&cg.lock);
}

/*
 * The rokd.<pid> directories of rokds that died without removing them
 * (SIGKILL, a crash), in `parent`.  A live rokd holds an flock on its
 * directory for as long as it runs (exec_cgroup_own), which the kernel
 * drops when it dies, whatever pid namespace it ran in: the pid alone
 * would not do, a rokd in another container that shares this cgroup has a
 * pid that names no process here.  The pid must name no process here as
 * well (a rokd of an earlier version takes no lock).  (A pid reused since
 * keeps its directory until it is gone too.)
 */
static void exec_cgroup_sweep(const char *parent)
{
	DIR *d = opendir(parent);
	struct dirent *de;
	char path[8192];

	while (d != NULL && (de = readdir(d)) != NULL) {
		char *end;
		if (strncmp(de->d_name, "rokd.", 5) != 0)
			continue;
		long pid = strtol(de->d_name + 5, &end, 10);
		if (*end != '\0' || pid <= 0 || pid == (long)getpid() ||
		    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", parent, de->d_name) >=
		    (int)sizeof(path))
			continue;
		int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue;
		/* Held while clearing: its owner cannot be starting. */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0 &&
		    exec_cgroup_clear(path) == 0)
			log_info("exec: removed %s, left by a rokd that is gone",
			         path);
		close(fd);
	}
	if (d != NULL)
		closedir(d);
}

/* Makes (or takes over) `path`, rokd's own directory, and holds an flock
 * on it until rokd exits (exec_cgroup_sweep): 0, or -errno (-EBUSY: a rokd
 * with the same pid in another pid namespace has it). */
static int exec_cgroup_own(const char *path)
{
	/* Another rokd's sweep may remove it between our mkdir and our
	 * lock: then make it again. */
	for (int tries = 0; tries < 3; tries++) {
		struct stat a, b;
		if (mkdir(path, 0755) != 0 && errno != EEXIST)
			return -errno;
		int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
			int err = errno == EWOULDBLOCK ? -EBUSY : -errno;
			close(fd);
			return err;
		}
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
			cg.own = fd;
			return 0;
		}
		close(fd);
	}
	return -EAGAIN;
}

void exec_cgroup_init(void)
{
	char mnt[4096], self[4096], path[8192];
	const char *why = "ROKD_TEST_NO_CGROUP is set";

	if (getenv("ROKD_TEST_NO_CGROUP") != NULL)
		goto off;
	why = "no cgroup2 mount";
	if (exec_cgroup_mount(mnt, sizeof(mnt)) < 0)
		goto off;
	why = "rokd is not in a cgroup v2 cgroup";
	if (exec_cgroup_self(self, sizeof(self)) < 0)
		goto off;
	why = "path too long";
	if (snprintf(path, sizeof(path), "%s%s", mnt,
	             strcmp(self, "/") == 0 ? "" : self) >= (int)sizeof(path))
		goto off;
	exec_cgroup_sweep(path);
	size_t n = strlen(path);
	if (snprintf(path + n, sizeof(path) - n, "/rokd.%d", (int)getpid()) >=
	    (int)(sizeof(path) - n))
		goto off;
	int err = exec_cgroup_own(path);
	if (err == -EBUSY) {
		why = "another rokd holds its directory";
		goto off;
	} else if (err < 0) {
		why = strerror(-err);
		goto off;
	}
	/* Not in the root cgroup, which has none: in the one just made. */
	char kill[8192 + 16];
	snprintf(kill, sizeof(kill), "%s/cgroup.kill", path);
	if (access(kill, W_OK) != 0) {
		(void)rmdir(path);
		close(cg.own);
		cg.own = -1;
		why = "no cgroup.kill (Linux 5.14)";
		goto off;
	}
	if ((cg.base = strdup(path)) == NULL) {
		(void)rmdir(path);
		close(cg.own);
		cg.own = -1;
		why = "out of memory";
		goto off;
	}
	if (atexit(exec_cgroup_exit) != 0)
		log_warnx("exec: %s is not removed at exit", path);
	log_info("exec: a cgroup per task under %s", cg.base);
	return;
off:
	log_info("exec: no cgroup per task (%s): tasks are held by their "
	         "process group", why);
}

/* Lock held: removes cgroup slot.<n>, or remembers it for later. */
static void exec_cgroup_rmdir_locked(uint64_t n)
{
	char path[8192];

	snprintf(path, sizeof(path), "%s/slot.%llu", cg.base,
	         (unsigned long long)n);
	if (rmdir(path) == 0 || errno == ENOENT)
		return;
	if (errno == EBUSY && cg.npending < CGROUP_PENDING) {
		cg.pending[cg.npending++] = n;
		return;
	}
	log_errno(errno, "exec: removing the cgroup %s", path);
}

/* Closes c's fds (NULL-safe on each). */
static void exec_cgroup_close(struct exec_cgroup *c)
{
	int *fd[] = { &c->dir, &c->procs, &c->kill, &c->events };

	for (size_t i = 0; i < sizeof(fd) / sizeof(fd[0]); i++) {
		if (*fd[i] >= 0)
			close(*fd[i]);
		*fd[i] = -1;
	}
}

/* Makes cgroup slot.<n> for c (c->n set) and opens its files: 0 or -errno
 * (-EEXIST: the name is taken). */
static int exec_cgroup_make(struct exec_cgroup *c)
{
	char path[8192];
	int err = 0;

	snprintf(path, sizeof(path), "%s/slot.%llu", cg.base,
	         (unsigned long long)c->n);
	if (mkdir(path, 0755) != 0)
		return -errno;
	c->dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->dir < 0)
		return -errno;
	c->procs = openat(c->dir, "cgroup.procs", O_WRONLY | O_CLOEXEC);
	c->kill = openat(c->dir, "cgroup.kill", O_WRONLY | O_CLOEXEC);
	c->events = openat(c->dir, "cgroup.events", O_RDONLY | O_CLOEXEC);
	if (c->procs < 0 || c->kill < 0 || c->events < 0)
		err = -errno;
	return err;
}

#define CGROUP_MAKE_TRIES 8

int exec_cgroup_new(struct exec_cgroup *c)
{
	int err = -EEXIST;

	*c = EXEC_CGROUP_NONE;
	if (cg.base == NULL)
		return 0;
	pthread_mutex_lock(&cg.lock);
	unsigned n = cg.npending;
	cg.npending = 0;
	for (unsigned i = 0; i < n; i++)
		exec_cgroup_rmdir_locked(cg.pending[i]);
	if (cg.npool > 0) {
		*c = cg.pool[--cg.npool];
		pthread_mutex_unlock(&cg.lock);
		return 0;
	}
	pthread_mutex_unlock(&cg.lock);
	/* A name is taken only if an earlier rokd with this pid left it
	 * (exec_cgroup_own took its directory over): the next one then. */
	for (int tries = 0; err == -EEXIST && tries < CGROUP_MAKE_TRIES;
	     tries++) {
		pthread_mutex_lock(&cg.lock);
		c->n = ++cg.last;
		pthread_mutex_unlock(&cg.lock);
		err = exec_cgroup_make(c);
	}
	if (err < 0) {
		exec_cgroup_close(c);
		if (err != -EEXIST)
			exec_cgroup_done(c);   /* removes what it made */
		c->n = 0;
	}
	return err;
}

void exec_cgroup_kill(struct exec_cgroup *c)
{
	if (c->kill < 0)
		return;
	c->killed = true;
	if (write(c->kill, "1", 1) != 1)
		log_errno(errno, "exec: cgroup.kill");
}

/* Reads c's cgroup.events into buf (a string): false if it cannot. */
static bool exec_cgroup_events(const struct exec_cgroup *c, char *buf,
                               size_t len)
{
	ssize_t n = c->events >= 0 ? pread(c->events, buf, len - 1, 0) : -1;

	if (n <= 0)
		return false;
	buf[n] = '\0';
	return true;
}

/* Whether a process may be left in the cgroup (true when unknown). */
static bool exec_cgroup_populated(const struct exec_cgroup *c)
{
	char buf[256];

	return !exec_cgroup_events(c, buf, sizeof(buf)) ||
	       strstr(buf, "populated 0\n") == NULL;
}

/* Whether the cgroup has no process left and is not frozen, as a new
 * one. */
static bool exec_cgroup_empty(const struct exec_cgroup *c)
{
	char buf[256];

	return exec_cgroup_events(c, buf, sizeof(buf)) &&
	       strstr(buf, "populated 0\n") != NULL &&
	       strstr(buf, "frozen 1") == NULL;
}

void exec_cgroup_kill_left(struct exec_cgroup *c)
{
	/* Nothing can join an empty cgroup but rokd's next child (or a
	 * process of rokd's own user, which is trusted). */
	if (c->kill >= 0 && !exec_cgroup_populated(c))
		return;
	exec_cgroup_kill(c);
}

/* Lock held: closes c's fds and removes it (now, or once it is empty). */
static void exec_cgroup_remove_locked(struct exec_cgroup *c)
{
	exec_cgroup_close(c);
	exec_cgroup_rmdir_locked(c->n);
}

/* c to the pool if `keep` and there is room, else closed and removed. */
static void exec_cgroup_put(struct exec_cgroup *c, bool keep)
{
	pthread_mutex_lock(&cg.lock);
	if (keep && cg.npool < CGROUP_POOL)
		cg.pool[cg.npool++] = *c;
	else
		exec_cgroup_remove_locked(c);
	pthread_mutex_unlock(&cg.lock);
	*c = EXEC_CGROUP_NONE;
}

void exec_cgroup_done(struct exec_cgroup *c)
{
	if (c->n == 0)
		return;
	/* Empty now, so empty when the next task gets it: only rokd's
	 * children join it.  Not frozen: a task that runs as rokd's own
	 * user may write its cgroup's cgroup.freeze, and the next task
	 * would start frozen.  (Such a task can write any task's cgroup
	 * files, and move a process into any task's cgroup, to die with
	 * that task: rokd's own user is trusted.) */
	exec_cgroup_put(c, c->procs >= 0 && c->kill >= 0 && !c->killed &&
	                   exec_cgroup_empty(c));
}

void exec_cgroup_flush(void)
{
	pthread_mutex_lock(&cg.lock);
	while (cg.npool > 0)
		exec_cgroup_remove_locked(&cg.pool[--cg.npool]);
	pthread_mutex_unlock(&cg.lock);
}

void exec_cgroup_drop(struct exec_cgroup *c)
{
	if (c->n != 0)
		exec_cgroup_put(c, false);
}
