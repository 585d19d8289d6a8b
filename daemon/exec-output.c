/*
 * exec-output.c — the capture file of an exec task's output.
 *
 * One file per task, <state_dir>/output/<ID>.log (the path is agreed with
 * the journal, which removes it when it prunes the task).  With durability
 * = off the name is <ID>.mem: such a run's ids start again at 1, so its
 * files must never pass for a journal's tasks' (after a switch back to a
 * journal, another user's task would show them), nor may it remove the
 * journal's; every start removes the .mem files.  It is created on
 * the first byte of output, so a task that writes nothing costs no file
 * (most `true`-like tasks), mode 0600, owned by rokd, with O_EXCL and
 * O_NOFOLLOW (nothing planted under the name is followed or written), in a
 * directory that must be rokd's own, not a link (exec_output_init):
 * clients read it through the socket (`rokctl logs`), with the usual
 * per-uid check.  A file under an id the journal has not handed out yet
 * (left by a journal that was deleted or replaced) is removed at start
 * (exec_output_sweep), so no new task is ever shown another's output.
 *
 * Format: a sequence of records, each a 1-byte stream (1 stdout, 2 stderr),
 * a 4-byte big-endian length, then that many bytes (at most EXEC_REC_MAX).
 * One file with records rather than one file per stream because the order
 * between the two streams is part of the output: `rokctl logs` replays the
 * records in order, each to the right stream, so a compiler's errors stay
 * next to the lines they interrupt; one file per stream would lose that and
 * cost two creations per task.  A reader may find a record cut short at the
 * end while the task writes; it reads only whole records (cmd-logs.c).
 *
 * The cap (config.max_task_output) bounds the file: data bytes and the
 * records' headers (a child that writes a byte at a time makes a record
 * per byte).  Past it the task's pipes are still drained (the child never
 * blocks on a full pipe) but the bytes are dropped and the task records
 * output_truncated.
 *
 * Output must not fill the state directory's file system: the journal
 * lives there too, and with no room for it every user's spawns are
 * refused.  So output is kept only while the file system has more than
 * output_keep_free bytes free (statvfs's f_bavail, what is left to
 * non-root users: the journal, rokd's, may still use the blocks kept for
 * root).  Looking costs a statvfs, so it is done once per EXEC_OUT_LOOK
 * bytes written by all tasks together, and at every write while the last
 * look found the space short: a task may overshoot the mark by at most
 * EXEC_OUT_LOOK between two looks, all tasks together.  A task whose write
 * finds the space short keeps no more output in that run (its output
 * stops, marked output_truncated; a gap in the middle would mislead).  The
 * log says when output stops being kept and when it is kept again.
 *
 * Only the exec task that owns an exec_out touches it (one worker at a
 * time); writes go to the page cache, never fsync'd.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "exec.h"
#include "rokd.h"

int exec_output_init(void)
{
	char path[4096];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s/output", config.state_dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return -errno;
	/* Not a link (the start's sweep would remove files wherever it
	 * led), and nobody else's to change. */
	if (lstat(path, &st) != 0)
		return -errno;
	if (!S_ISDIR(st.st_mode)) {
		log_warnx("%s is not a directory (a symbolic link?)", path);
		return -ENOTDIR;
	}
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
		log_warnx("%s is owned by uid %u (mode 0%o): it must be rokd's "
		          "and writable by nobody else", path,
		          (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* The name's ending: with durability = off ids start again at 1 at every
 * start, so its files must never be taken for a journal's (".log"). */
static const char *exec_output_suffix(void)
{
	return config.durability_off ? ".mem" : ".log";
}

int exec_output_sweep(uint64_t next_id)
{
	char path[4096];

	if (snprintf(path, sizeof(path), "%s/output", config.state_dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	DIR *d = opendir(path);
	if (d == NULL)
		return -errno;
	int dfd = dirfd(d), err = 0;
	for (struct dirent *e; (e = readdir(d)) != NULL;) {
		char *end;
		errno = 0;
		unsigned long long id = strtoull(e->d_name, &end, 10);
		if (errno != 0 || end == e->d_name ||
		    e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		/* A journal's files from its next id on; an unjournaled
		 * run's (".mem") always: nothing remembers their tasks. */
		bool stale = strcmp(end, ".mem") == 0 ||
		             (strcmp(end, ".log") == 0 && id >= next_id &&
		              !config.durability_off);
		if (!stale)
			continue;
		if (unlinkat(dfd, e->d_name, 0) != 0 && errno != ENOENT) {
			err = -errno;
			log_errno(errno, "%s/%s: a stale output file", path,
			          e->d_name);
		}
	}
	closedir(d);
	return err;
}

void exec_output_path(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/output/%llu%s", config.state_dir,
	         (unsigned long long)id, exec_output_suffix());
}

void exec_out_forget(uint64_t id)
{
	char path[4096];

	exec_output_path(id, path, sizeof(path));
	if (unlink(path) != 0 && errno != ENOENT)
		log_errno(errno, "task %llu: removing %s",
		          (unsigned long long)id, path);
}

/* Bytes of output between two looks at the free space (see the top). */
#define EXEC_OUT_LOOK (1u << 20)
/* output_keep_free's default: 5 % of the file system, at most this. */
#define EXEC_OUT_KEEP_FREE_MAX (256ull << 20)

/* Written since the last look; the first write looks.  Relaxed, both:
 * a look a write or two late is within the overshoot said above. */
static _Atomic uint64_t exec_out_unlooked = EXEC_OUT_LOOK;
static _Atomic bool exec_out_short;

/* The bytes to leave free on a file system of `size` bytes. */
static uint64_t exec_out_keep_free(uint64_t size)
{
	uint64_t keep = CONFIG_LIMIT(output_keep_free);

	if (keep != CONFIG_KEEP_FREE_AUTO)
		return keep;
	keep = size / 20;
	return keep < EXEC_OUT_KEEP_FREE_MAX ? keep : EXEC_OUT_KEEP_FREE_MAX;
}

/* Whether `bytes` more output leave output_keep_free free: any thread. */
static bool exec_out_room(uint64_t bytes)
{
	uint64_t seen = atomic_fetch_add_explicit(&exec_out_unlooked, bytes,
	                                          memory_order_relaxed) + bytes;

	if (seen < EXEC_OUT_LOOK &&
	    !atomic_load_explicit(&exec_out_short, memory_order_relaxed))
		return true;
	atomic_store_explicit(&exec_out_unlooked, 0, memory_order_relaxed);
	char path[4096];
	struct statvfs fs;
	snprintf(path, sizeof(path), "%s/output", config.state_dir);
	if (statvfs(path, &fs) != 0)
		return true;   /* cannot tell: a failed write will say */
	/* Cannot overflow: a file system's size. */
	uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
	uint64_t keep = exec_out_keep_free((uint64_t)fs.f_blocks * fs.f_frsize);
	bool is_short = avail < keep || avail - keep < bytes;
	if (atomic_exchange_explicit(&exec_out_short, is_short,
	                             memory_order_relaxed) != is_short) {
		if (is_short)
			log_warnx("%s: %llu bytes free, output_keep_free is "
			          "%llu: exec tasks' output is no longer kept "
			          "(marked output_truncated) until there is "
			          "room again", path, (unsigned long long)avail,
			          (unsigned long long)keep);
		else
			log_info("%s: %llu bytes free: exec tasks' output is "
			         "kept again", path, (unsigned long long)avail);
	}
	return !is_short;
}

void exec_out_init(struct exec_out *o, uint64_t id, uint64_t cap)
{
	o->id = id;
	o->fd = -1;
	o->kept = 0;
	o->cap = cap;
	o->truncated = false;
	o->err = 0;
}

/* Writes all of iov or fails: 0 or -errno. */
static int exec_out_writev(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

void exec_out_append(struct exec_out *o, int stream, const uint8_t *buf,
                     size_t n)
{
	bool wrote = false;

	if (n == 0 || o->err != 0)
		return;
	while (n > 0) {
		/* The cap bounds the file, headers too: a record per read
		 * of one byte would otherwise be 6 bytes on disk per byte. */
		uint64_t room = o->cap - o->kept;
		if (room <= EXEC_REC_HDR)
			break;
		size_t k = n > EXEC_REC_MAX ? EXEC_REC_MAX : n;
		if (k > room - EXEC_REC_HDR)
			k = (size_t)(room - EXEC_REC_HDR);
		if (!exec_out_room(EXEC_REC_HDR + k)) {
			o->err = -ENOSPC;
			break;
		}
		if (o->fd < 0) {
			char path[4096];
			exec_output_path(o->id, path, sizeof(path));
			/* A fresh file, never one planted under the name: the
			 * run's start removed any earlier one
			 * (exec_out_forget), so an existing file or link here
			 * was not made by rokd and is neither followed nor
			 * written. */
			o->fd = open(path, O_WRONLY | O_CREAT | O_EXCL |
			             O_NOFOLLOW | O_CLOEXEC, 0600);
			if (o->fd < 0) {
				o->err = -errno;
				log_errno(-o->err, "task %llu: cannot keep its "
				          "output: %s", (unsigned long long)o->id,
				          path);
				o->truncated = true;
				return;
			}
		}
		uint8_t hdr[EXEC_REC_HDR] = {
			(uint8_t)stream, (uint8_t)(k >> 24), (uint8_t)(k >> 16),
			(uint8_t)(k >> 8), (uint8_t)k,
		};
		struct iovec iov[2] = {
			{ hdr, sizeof(hdr) },
			{ (void *)(uintptr_t)buf, k },
		};
		int err = exec_out_writev(o->fd, iov, 2);
		if (err < 0) {
			o->err = err;
			o->truncated = true;
			log_errno(-err, "task %llu: writing its output",
			          (unsigned long long)o->id);
			break;
		}
		o->kept += EXEC_REC_HDR + k;
		metrics_output(k);
		wrote = true;
		buf += k;
		n -= k;
	}
	if (n > 0)
		o->truncated = true;
	/* Followers of its output (cmd-logs.c) read what was just written. */
	if (wrote && events_wanted(EVENTS_OUTPUT))
		events_publish(&(struct events_ev){ .kind = EVENTS_OUTPUT,
		                                    .id = o->id });
}

void exec_out_done(struct exec_out *o)
{
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
}
