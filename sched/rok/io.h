/*
 * rok/io.h — waiting for file descriptors: readiness awaits on the runtime's
 * one reactor thread (SPEC A4, A11).
 *
 * The model is edge-triggered, as in Tokio: the fd must be non-blocking, and
 * a task that awaits rok_readable() reads until the call fails with EAGAIN
 * before it awaits again:
 *
 *	for (;;) {
 *		ROK_AWAIT(cx, rok_readable(cx, &f->io, f->fd));
 *		while ((n = read(f->fd, buf, sizeof(buf))) > 0)
 *			... use n bytes ...;
 *		if (n == 0 || errno != EAGAIN)
 *			break;          (end of file, or an error)
 *	}
 *
 * The reactor keeps, per fd and direction, a readiness bit that it sets when
 * the kernel reports an edge and that an await consumes when it returns
 * ROK_READY; so readiness that arrived while no task was waiting is not
 * lost, and an await may come back ready spuriously (the I/O call then says
 * EAGAIN and the task awaits again).  Readiness wakes every task waiting on
 * that fd in that direction and no other task.  Error and hang-up conditions
 * count as both readable and writable.
 *
 * The reactor watches an fd from the first await on it until rok_io_forget()
 * or rok_wake_io() (or rok_io_close()), whichever comes first; it does not
 * notice close().  So:
 *
 *   - An fd that was ever awaited must be forgotten when it is closed, or a
 *     later file that gets the same number may never wake its waiters.
 *     When no task can still be waiting on it (the usual case: the task
 *     that owns the fd closes it), call rok_io_forget(fd) right before
 *     close(fd).
 *   - To close an fd that other tasks may be waiting on, call close(fd) and
 *     then rok_wake_io(fd).  The waiters' awaits return ROK_READY and their
 *     next I/O call fails with EBADF, which is how they learn it.  (Waking
 *     first and closing second leaves a window in which a woken task reads
 *     EAGAIN and waits again on an fd about to be closed.)  For a socket,
 *     shutdown(fd, SHUT_RDWR) already wakes readers and writers through the
 *     kernel; rok_wake_io(fd) after it does no harm.
 *
 * The first await on an fd in a direction adds the fd to the reactor's
 * epoll set on the awaiting thread (one epoll_ctl); later awaits make no
 * system call.  An fd is either awaited by tasks or handed to the daemon's
 * own libevent events on the reactor (reactor.h), not both: each would be
 * told of the same readiness, and neither would know the other consumed
 * it.
 */
#ifndef ROK_IO_H
#define ROK_IO_H

#include "rok.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A readiness await's state, in the frame.  Start it zeroed; it may be used
 * again (for any fd) once it gave ROK_READY. */
typedef struct rok_io_op {
	rok_waiter w;
	/*
	 * Out, valid once the await is ready: 0, or -errno when the reactor
	 * could not watch the fd: -EBADF (not an open fd), -EPERM (a kind of
	 * file epoll cannot watch, such as a regular file, which is always
	 * ready), -EMFILE (fd number 2^24 or above, or no fd left for the
	 * reactor's own at its start), -ENOMEM, -ESHUTDOWN (the runtime is
	 * stopping), or another error of epoll_ctl(2) (-ENOSPC at the
	 * max_user_watches limit).  The await is ready in these cases, so a
	 * caller that ignores err still learns of the problem from its I/O
	 * call.
	 */
	int err;
} rok_io_op;

/*
 * Await: ready when fd is readable (data, end of file, a pending
 * connection, an error or a hang-up).  A cancellation point; a cancelled
 * waiter leaves at once and takes its wake registration with it.  Pass the
 * same op and fd on every poll.
 */
rok_poll rok_readable(rok_cx *cx, rok_io_op *op, int fd);

/* Await: ready when fd is writable (or has an error or hang-up). */
rok_poll rok_writable(rok_cx *cx, rok_io_op *op, int fd);

/*
 * Wakes every task waiting on fd, in both directions (their awaits return
 * ROK_READY with err 0), and drops the reactor's watch of fd as
 * rok_io_forget() does.  Meant for right after close(fd) or shutdown(fd);
 * see the top of this file.  Any thread; a no-op for an fd never awaited or
 * when the runtime is not running.
 */
void rok_wake_io(int fd);

/*
 * Drops the reactor's watch of fd and its readiness bits, so that a later
 * file with the same number starts clean.  Call it right before close(fd)
 * when no task waits on fd; a task that still does is woken as by
 * rok_wake_io() rather than left waiting forever.  Takes fd out of epoll
 * itself (one epoll_ctl when fd was watched), so the close() that follows
 * races nothing.  Any thread.
 */
void rok_io_forget(int fd);

/*
 * rok_io_forget(fd), then close(fd).  For the owner of an fd that no task
 * waits on any more (one that still does is woken, as by rok_wake_io()).
 * fd belongs to the call from then on; close's result is not reported
 * (see close(2): the fd is gone either way).  Any thread.
 */
void rok_io_close(int fd);

#ifdef __cplusplus
}
#endif

#endif /* ROK_IO_H */
