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
 * per-uid check.  A file under an id the journal has no task of (left by
 * a journal that was deleted or replaced, or by a prune that a crash cut
 * short) is removed at start (exec_output_scan), so no new task is ever
 * shown another's output.
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
 * refused.  So output_keep_free bytes of it stay free of output (counted
 * in statvfs's f_bavail, what is left to unprivileged users: a rokd
 * running as root may still use the blocks kept for root for its
 * journal).  Looking costs a statvfs, so it is done once per EXEC_OUT_LOOK
 * bytes written by all tasks together, each new file counted as
 * EXEC_OUT_FILE bytes more (a file takes at least a block, up to 64 KiB
 * with large pages), and at every write while the last look found the
 * space short.  Since up to EXEC_OUT_LOOK may go out between two looks, a
 * look finds the space short once less than that is left above the mark;
 * and only once twice that is free again is output kept again, so that a
 * file system near the mark does not flip the state (and the log) at
 * every look.  A task whose write finds the space short keeps no more
 * output in that run (its output stops, marked output_truncated; a gap in
 * the middle would mislead).  The log says when output stops being kept
 * and when it is kept again.  Files take inodes as well as blocks, and a
 * file system with none left refuses new files however many blocks it
 * has: the same look keeps the same share of the inodes free (f_favail),
 * with the same margins counted in files (EXEC_OUT_LOOK / EXEC_OUT_FILE
 * new files at most between two looks).
 *
 * Nor may one user's output take everyone else's room, down to that mark:
 * the output files of a uid's tasks together hold at most
 * max_kept_output_per_user bytes (quota.c counts them: each record before
 * it is written, each file removed, and at start, before any task runs,
 * every file there is: exec_output_scan).  A task whose record would pass
 * its uid's cap stops keeping output the same way.  A file counts in
 * whole 4 KiB blocks, so that a flood of one-byte files holds no more
 * than the cap, and, on a file system whose inodes are made once and for
 * all (ext2/3/4, tmpfs), at least its bytes per inode, so that it takes
 * no larger share of the inodes than the cap is of the bytes (ext4 makes
 * an inode per 16 KiB: a cap of a quarter of the file system, in 4 KiB
 * files, would have let one user take every inode, and with them every
 * other user's output and any file the journal needs).  Not elsewhere:
 * XFS, for one, reports as many inodes as its free space could hold,
 * which on a nearly full one would make every file count megabytes.
 *
 * Only the exec task that owns an exec_out touches it (one worker at a
 * time); writes go to the page cache, never fsync'd.  The count of bytes
 * since the last look and the state it found are the process's, shared by
 * every worker: atomics, and one look at a time (exec_out_look).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "exec.h"
#include "journal.h"
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

/* The least a file counts against its uid's cap: the file system's bytes
 * per inode (see the top).  Set once, by exec_output_scan at start, before
 * any task runs, so that a file counts the same when it goes as when it
 * came; 0 (blocks only) where the file system's number of inodes is not
 * fixed, or statfs failed.  Relaxed: set before any output is written,
 * and nothing else is published through it. */
static _Atomic uint64_t exec_out_file_min;

/* What a file of `size` bytes counts against its uid's
 * max_kept_output_per_user: whole blocks, so that many small files cannot
 * hold many times the cap, and at least exec_out_file_min; nothing
 * without a byte (no file, or an empty one). */
#define EXEC_OUT_BLOCK 4096
static uint64_t exec_out_charged(uint64_t size)
{
	if (size == 0)
		return 0;
	uint64_t c = (size + EXEC_OUT_BLOCK - 1) / EXEC_OUT_BLOCK *
	             EXEC_OUT_BLOCK;
	uint64_t min = atomic_load_explicit(&exec_out_file_min,
	                                    memory_order_relaxed);
	return c > min ? c : min;
}

/* The file system's size, from the last statvfs (0: not known yet), for
 * max_kept_output_per_user's default.  Relaxed: it stands alone. */
static _Atomic uint64_t exec_out_fs_size;

static void exec_out_note_size(const struct statvfs *fs)
{
	atomic_store_explicit(&exec_out_fs_size,
	                      (uint64_t)fs->f_blocks * fs->f_frsize,
	                      memory_order_relaxed);
}

void exec_output_check_cap(void)
{
	uint64_t min = atomic_load_explicit(&exec_out_file_min,
	                                    memory_order_relaxed);
	uint64_t cap = quota_cap(QUOTA_KEPT);

	if (cap < min)
		log_warnx("max_kept_output_per_user is %llu, less than one "
		          "output file counts on this file system (%llu, its "
		          "bytes per inode): no exec task's output is kept",
		          (unsigned long long)cap,
		          (unsigned long long)min);
}

uint64_t exec_output_kept_auto(void)
{
	uint64_t size = atomic_load_explicit(&exec_out_fs_size,
	                                     memory_order_relaxed);
	return size != 0 ? size / 4 : UINT64_MAX;
}

int exec_output_scan(void)
{
	char path[4096];
	struct statvfs fs;

	if (snprintf(path, sizeof(path), "%s/output", config.state_dir) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	if (statvfs(path, &fs) == 0) {
		exec_out_note_size(&fs);
		struct statfs sf;
		bool fixed = statfs(path, &sf) == 0 &&
		             (sf.f_type == EXT4_SUPER_MAGIC ||
		              sf.f_type == TMPFS_MAGIC);
		/* At most the file system's size: no overflow in a charge. */
		uint64_t min = fixed && fs.f_files > 0
		               ? (uint64_t)fs.f_blocks * fs.f_frsize / fs.f_files
		               : 0;
		atomic_store_explicit(&exec_out_file_min, min,
		                      memory_order_relaxed);
		if (min > EXEC_OUT_BLOCK)
			log_info("%s: each output file counts at least %llu "
			         "bytes against max_kept_output_per_user (the "
			         "file system's bytes per inode)", path,
			         (unsigned long long)min);
		exec_output_check_cap();
	}
	DIR *d = opendir(path);
	if (d == NULL)
		return -errno;
	int dfd = dirfd(d), err = 0;
	uint64_t files = 0, bytes = 0;
	for (struct dirent *e; err == 0 && (e = readdir(d)) != NULL;) {
		char *end;
		errno = 0;
		unsigned long long id = strtoull(e->d_name, &end, 10);
		if (errno != 0 || end == e->d_name ||
		    e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		/* A journal's files are kept, unread, by a run without one
		 * (".mem" names its own), for a later start with it. */
		bool mem = strcmp(end, ".mem") == 0;
		if (!mem && (strcmp(end, ".log") != 0 || config.durability_off))
			continue;
		uid_t uid;
		int r = mem ? -ENOENT : journal_read_owner(id, &uid);
		struct stat st;
		if (r == 0) {
			if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
				if (errno != ENOENT)
					err = -errno;
				continue;
			}
			(void)quota_add(uid, QUOTA_KEPT, (int64_t)exec_out_charged(
				(uint64_t)st.st_size));
			files++;
			bytes += (uint64_t)st.st_size;
			continue;
		}
		if (r != -ENOENT) {
			err = r;
			break;
		}
		/* No task has it: nothing remembers a run without a journal's
		 * tasks; a journal's task was pruned (a crash between the
		 * prune's commit and its unlink), or the file was left by a
		 * journal since deleted or replaced, and must never show as a
		 * new task's. */
		if (unlinkat(dfd, e->d_name, 0) != 0 && errno != ENOENT) {
			err = -errno;
			log_errno(errno, "%s/%s: a stale output file", path,
			          e->d_name);
		}
	}
	closedir(d);
	if (err == 0 && files > 0)
		log_info("%s: %llu bytes of output in %llu files", path,
		         (unsigned long long)bytes, (unsigned long long)files);
	return err;
}

void exec_output_path(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "%s/output/%llu%s", config.state_dir,
	         (unsigned long long)id, exec_output_suffix());
}

void exec_out_forget(uint64_t id, uid_t uid, uint32_t run)
{
	char path[4096];
	struct stat st;

	exec_output_path(id, path, sizeof(path));
	/* Nothing writes the file meanwhile: its task is not running. */
	bool gone = lstat(path, &st) == 0 && unlink(path) == 0;
	if (!gone && errno != ENOENT) {
		log_errno(errno, "task %llu: removing %s",
		          (unsigned long long)id, path);
		return;   /* the old file stays: no run owns it anew */
	}
	/* After the unlink: whoever opens the file from here on opens this
	 * run's (cmd-logs.c). */
	if (run > 0)
		tasktab_output_started(id, run);
	if (!gone)
		return;
	(void)quota_add(uid, QUOTA_KEPT,
	                -(int64_t)exec_out_charged((uint64_t)st.st_size));
	/* Followers holding it open let it go (cmd-logs.c): else its blocks
	 * stay taken, uncounted, for as long as they hold it. */
	if (events_wanted(EVENTS_OUTPUT))
		events_publish(&(struct events_ev){ .kind = EVENTS_OUTPUT,
		                                    .id = id,
		                                    .removed = true });
}

/* Bytes of output between two looks at the free space (see the top). */
#define EXEC_OUT_LOOK (1ull << 20)
/* What a new output file counts for, beyond its bytes. */
#define EXEC_OUT_FILE 65536
/* output_keep_free's default: 5 % of the file system, at most this. */
#define EXEC_OUT_KEEP_FREE_MAX (256ull << 20)

/* Bytes written, counted from LOOK - 1 so that the first write looks: a
 * write whose bytes take the count past a multiple of EXEC_OUT_LOOK looks
 * (never reset, so no count is lost; 2^64 bytes are never written).
 * Relaxed, both: nothing else is published through them, and a write
 * that reads `short` just before a look changes it is one more write
 * within the overshoot said at the top. */
static _Atomic uint64_t exec_out_written = EXEC_OUT_LOOK - 1;
static _Atomic bool exec_out_short;
/* One look at a time: a look that ended later but began earlier would
 * leave an older state. */
static pthread_mutex_t exec_out_look_lock = PTHREAD_MUTEX_INITIALIZER;

/* The bytes to leave free on a file system of `size` bytes. */
static uint64_t exec_out_keep_free(uint64_t size)
{
	uint64_t keep = CONFIG_LIMIT(output_keep_free);

	if (keep != CONFIG_KEEP_FREE_AUTO)
		return keep;
	keep = size / 20;
	return keep < EXEC_OUT_KEEP_FREE_MAX ? keep : EXEC_OUT_KEEP_FREE_MAX;
}

/* Looks at the free space: whether output may be kept.  One thread at a
 * time, each looking itself (a statvfs, once per MiB): taking the state a
 * descheduled look has not updated yet would let every other writer past
 * the mark meanwhile. */
static bool exec_out_look(void)
{
	pthread_mutex_lock(&exec_out_look_lock);
	bool was = atomic_load_explicit(&exec_out_short, memory_order_relaxed);
	bool is = was;
	char path[4096];
	struct statvfs fs;
	snprintf(path, sizeof(path), "%s/output", config.state_dir);
	if (statvfs(path, &fs) == 0) {
		exec_out_note_size(&fs);
		/* Cannot overflow: a file system's size.  keep is at most
		 * 2^50 (config.c), so keep + 2 looks cannot either. */
		uint64_t size = (uint64_t)fs.f_blocks * fs.f_frsize;
		uint64_t avail = (uint64_t)fs.f_bavail * fs.f_frsize;
		uint64_t keep = exec_out_keep_free(size);
		unsigned margin = was ? 2 : 1;
		bool bytes_short = avail < keep + margin * EXEC_OUT_LOOK;
		/* The same share of the inodes (all of them if keep passes
		 * the size); a mark of 0 keeps none free here either.  A
		 * double: f_files * keep may pass 2^64, and a mark needs no
		 * more precision. */
		uint64_t keep_files = 0;
		if (fs.f_files > 0 && keep > 0 && size > 0)
			keep_files = keep >= size ? (uint64_t)fs.f_files :
			        (uint64_t)((double)fs.f_files *
			                   ((double)keep / (double)size));
		bool files_short = fs.f_files > 0 &&
		        (uint64_t)fs.f_favail < keep_files +
		                margin * (EXEC_OUT_LOOK / EXEC_OUT_FILE);
		is = bytes_short || files_short;
		if (is && !was && bytes_short)
			log_warnx("%s: %llu bytes free, output_keep_free is "
			          "%llu: exec tasks' output is no longer kept "
			          "(marked output_truncated) until there is "
			          "room again", path, (unsigned long long)avail,
			          (unsigned long long)keep);
		else if (is && !was)
			log_warnx("%s: %llu inodes free, output_keep_free "
			          "keeps %llu: exec tasks' output is no longer "
			          "kept (marked output_truncated) until there "
			          "is room again", path,
			          (unsigned long long)fs.f_favail,
			          (unsigned long long)keep_files);
		else if (was && !is)
			log_info("%s: %llu bytes and %llu inodes free: exec "
			         "tasks' output is kept again", path,
			         (unsigned long long)avail,
			         (unsigned long long)fs.f_favail);
		atomic_store_explicit(&exec_out_short, is,
		                      memory_order_relaxed);
	}
	/* Else it cannot tell: the state stays, and a failed write says. */
	pthread_mutex_unlock(&exec_out_look_lock);
	return !is;
}

/* Whether `bytes` more output (in a new file: `create`) may be kept: any
 * thread. */
static bool exec_out_room(uint64_t bytes, bool create)
{
	if (create)
		bytes += EXEC_OUT_FILE;
	uint64_t before = atomic_fetch_add_explicit(&exec_out_written, bytes,
	                                            memory_order_relaxed);

	if (before / EXEC_OUT_LOOK == (before + bytes) / EXEC_OUT_LOOK &&
	    !atomic_load_explicit(&exec_out_short, memory_order_relaxed))
		return true;
	return exec_out_look();
}

void exec_out_init(struct exec_out *o, uint64_t id, uid_t uid,
                   uint64_t cap)
{
	o->id = id;
	o->uid = uid;
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
		if (!exec_out_room(EXEC_REC_HDR + k, o->fd < 0)) {
			o->err = -ENOSPC;
			break;
		}
		/* Cannot overflow: kept + the record is within the cap,
		 * itself at most 2^40 (config.c). */
		uint64_t charge = exec_out_charged(o->kept + EXEC_REC_HDR + k) -
		                  exec_out_charged(o->kept);
		int q = quota_add_within(o->uid, QUOTA_KEPT, charge);
		if (q != QUOTA_ADDED) {
			if (q == QUOTA_FULL_NEWS) {
				char why[160];
				quota_explain(o->uid, QUOTA_KEPT, why,
				              sizeof(why));
				log_warnx("task %llu: %s: output of uid %u's "
				          "tasks that does not fit is no longer "
				          "kept (marked output_truncated) until "
				          "older tasks of theirs are %s",
				          (unsigned long long)o->id, why,
				          (unsigned)o->uid, config.durability_off
				          ? "forgotten (max_finished)" : "pruned");
			}
			o->err = -EDQUOT;
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
				(void)quota_add(o->uid, QUOTA_KEPT,
				                -(int64_t)charge);
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
			/* Counted is what the file holds: part of the record
			 * may be in it. */
			struct stat st;
			uint64_t has = fstat(o->fd, &st) == 0
			               ? (uint64_t)st.st_size : o->kept;
			uint64_t now = exec_out_charged(has),
			         was = exec_out_charged(o->kept + EXEC_REC_HDR + k);
			if (now < was)
				(void)quota_add(o->uid, QUOTA_KEPT,
				                -(int64_t)(was - now));
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
