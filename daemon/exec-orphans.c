/*
 * exec-orphans.c — the processes an exec task leaves behind when rokd dies.
 *
 * An exec task's child leads its own session and process group (pgid ==
 * its pid) and dies with rokd (PR_SET_PDEATHSIG), but what it started in
 * the background stays in the group and survives as orphans.  So the
 * journal records, for every run, the group id and the leader's start time
 * (clock ticks since boot, field 22 of /proc/<pid>/stat: the spawner
 * knows it from the clock around the clone, or exec.c reads it with
 * exec_orphans_stat right after the spawn, while the child is ours and
 * unreaped, so the pid names it).  At the next start, recovery hands the
 * groups of the runs it interrupts to exec_orphans_kill, which scans /proc
 * once and sends SIGKILL to a group when a process of that group exists and
 *   - no process has pid == pgid: the leader is dead, and a group id is not
 *     handed out again while the group has members, so they are ours; or
 *   - the process with pid == pgid started at the recorded time: it is our
 *     leader itself (PDEATHSIG was not delivered).
 * A process with pid == pgid and another start time means the id was
 * reused: that group is someone else's and is left alone.  So is the
 * group rokd itself runs in, whatever the rules say.
 *
 * What this cannot see: a group of ours that emptied completely, then a
 * new process that got the same pid, made it a group and died leaving
 * members — that group would be killed.  The clean stop shrinks this (it
 * kills and reaps every group, and journal_exec_gone clears the record);
 * a reboot removes it (recovery compares boot ids, exec_orphans_boot_id,
 * and looks for nothing after a reboot).  Between the scan and kill() a
 * group may end; kill() then fails with ESRCH, which is fine.
 *
 * Threads: exec_orphans_stat runs on a worker (exec.c); exec_orphans_kill
 * and exec_orphans_boot_id on the main thread at recovery, before the
 * socket accepts.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "rokd.h"

/* Reads a small /proc file into buf (NUL-terminated): its length, or
 * -errno (-ENOENT: the process is gone). */
static ssize_t exec_orphans_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	ssize_t n;
	do
		n = read(fd, buf, len - 1);
	while (n < 0 && errno == EINTR);
	int err = errno;
	close(fd);
	if (n < 0)
		return err == ESRCH ? -ENOENT : -err;
	buf[n] = '\0';
	return n;
}

int exec_orphans_stat(pid_t pid, pid_t *pgrp, uint64_t *start_ticks)
{
	char path[64], buf[2048];

	*pgrp = 0;
	*start_ticks = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	ssize_t n = exec_orphans_read(path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	/* The command name (field 2) may hold spaces and parentheses: the
	 * fields that follow start after its last ')'. */
	char *p = strrchr(buf, ')');
	if (p == NULL)
		return -EINVAL;
	p++;
	long long pg = -1;
	for (int field = 3; field <= 22; field++) {
		while (*p == ' ')
			p++;
		if (*p == '\0')
			return -EINVAL;
		if (field == 5 || field == 22) {
			char *end;
			errno = 0;
			unsigned long long v = strtoull(p, &end, 10);
			if (end == p || errno != 0)
				return -EINVAL;
			if (field == 5)
				pg = (long long)v;
			else
				*start_ticks = v;
			p = end;
		} else {
			p += strcspn(p, " ");
		}
	}
	*pgrp = (pid_t)pg;
	return 0;
}

int exec_orphans_boot_id(uint64_t *id)
{
	char buf[64];
	ssize_t n = exec_orphans_read("/proc/sys/kernel/random/boot_id", buf,
	                              sizeof(buf));
	uint64_t v = 0;
	int digits = 0;

	*id = 0;
	if (n < 0)
		return (int)n;
	/* A UUID: its first 64 bits are enough to tell two boots apart. */
	for (const char *p = buf; *p != '\0' && digits < 16; p++) {
		if (*p == '-')
			continue;
		if (!isxdigit((unsigned char)*p))
			break;
		v = v << 4 | (uint64_t)(isdigit((unsigned char)*p) ? *p - '0'
		             : tolower((unsigned char)*p) - 'a' + 10);
		digits++;
	}
	if (digits < 16)
		return -EINVAL;
	/* Kept in an sqlite INTEGER: the top bit cleared, and never 0. */
	*id = (v >> 1) | 1;
	return 0;
}

static int exec_orphans_cmp(const void *a, const void *b)
{
	const struct exec_orphans_group *x = a, *y = b;

	return (x->pgid > y->pgid) - (x->pgid < y->pgid);
}

/* The first of the groups sorted by pgid with this pgid, or n. */
static size_t exec_orphans_find(const struct exec_orphans_group *g, size_t n,
                                pid_t pgid)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (g[mid].pgid < pgid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && g[lo].pgid == pgid ? lo : n;
}

size_t exec_orphans_kill(struct exec_orphans_group *g, size_t n)
{
	size_t killed = 0;

	if (n == 0)
		return 0;
	qsort(g, n, sizeof(*g), exec_orphans_cmp);
	for (size_t i = 0; i < n; i++)
		g[i].member = g[i].leader = g[i].killed = false;
	/* glibc's opendir opens the directory close-on-exec. */
	DIR *d = opendir("/proc");
	if (d == NULL) {
		log_errno(errno, "journal: /proc: the leftover processes of "
		          "%zu interrupted exec tasks are not looked for", n);
		return 0;
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid_t pid = (pid_t)strtol(de->d_name, NULL, 10), pgrp;
		uint64_t start;
		if (pid <= 0 || exec_orphans_stat(pid, &pgrp, &start) < 0)
			continue;   /* gone meanwhile */
		for (size_t i = exec_orphans_find(g, n, pgrp);
		     i < n && g[i].pgid == pgrp; i++)
			g[i].member = true;
		for (size_t i = exec_orphans_find(g, n, pid);
		     i < n && g[i].pgid == pid; i++) {
			g[i].leader = true;
			g[i].leader_start = start;
		}
	}
	closedir(d);
	for (size_t i = 0; i < n; i++) {
		if (!g[i].member)
			continue;   /* nothing left: the usual case */
		if (g[i].pgid == getpgrp()) {
			/* Reused for the group rokd itself runs in (its leader
			 * gone, say a shell that started rokd in the
			 * background): never ours to kill. */
			log_info("task %llu: process group %d of its interrupted "
			         "run is not killed: rokd itself runs in it now",
			         (unsigned long long)g[i].id, (int)g[i].pgid);
			continue;
		}
		if (g[i].leader && g[i].leader_start != g[i].start_ticks) {
			log_info("task %llu: process group %d of its interrupted "
			         "run is not killed: that id now belongs to "
			         "another process", (unsigned long long)g[i].id,
			         (int)g[i].pgid);
			continue;
		}
		if (kill(-g[i].pgid, SIGKILL) != 0) {
			if (errno != ESRCH)
				log_errno(errno, "task %llu: killing the leftover "
				          "process group %d",
				          (unsigned long long)g[i].id,
				          (int)g[i].pgid);
			continue;
		}
		g[i].killed = true;
		killed++;
		log_info("task %llu: killed the leftover process group %d of "
		         "its interrupted run", (unsigned long long)g[i].id,
		         (int)g[i].pgid);
	}
	return killed;
}
