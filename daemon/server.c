/*
 * server.c — the listening socket.
 *
 * server_open runs on the main thread before anything else: it takes the
 * socket systemd passed (socket activation: LISTEN_PID/LISTEN_FDS), which
 * must be a listening Unix stream socket, or creates one at
 * config.socket_path, inside a directory that only its owner may write,
 * with mode 0600 (0660 and group config.socket_group as root, on a passed
 * socket too).  socket_group is never ignored: set for a daemon that is
 * not root, or naming no group, it stops rokd from starting.
 * A live daemon already answering on the path is left alone: rokd refuses
 * to start.  server_start then accepts on the reactor thread.
 */
#include <errno.h>
#include <event2/event.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <grp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "reactor.h"
#include "rokd.h"

#define SERVER_BACKLOG 1024

static struct {
	int fd;
	bool inherited;
	struct event *ev;
	struct event *pause;      /* re-arms accepting after EMFILE */
} server = { .fd = -1 };

/* The socket file is rokd's own and still there: whoever clears it (the
 * stop, or the exit of a start that failed after binding) removes it, and
 * only then, never a later rokd's file of the same name.  An exchange: the
 * exit may come from any thread. */
static _Atomic bool server_path_ours;

static void server_unlink_ours(void)
{
	if (atomic_exchange_explicit(&server_path_ours, false,
	                             memory_order_relaxed))
		(void)unlink(config.socket_path);
}

/* At exit (fatalx included): a rokd that bound its socket and then could
 * not start leaves no socket file that nobody answers on. */
static void server_exit(void)
{
	server_unlink_ours();
}

/* Creates each missing directory of `dir` with `mode`; checks the last one
 * is ours and writable by nobody else. */
static int server_make_dir(const char *dir, mode_t mode)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct stat st;

	if (snprintf(path, sizeof(path), "%s", dir) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	/* The modes asked for, not rokd's umask (077): clients must reach
	 * the socket.  Main thread, before any other: umask is per process. */
	mode_t old = umask(022);
	for (char *p = path + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) != 0 && errno != EEXIST) {
			int err = -errno;
			umask(old);
			return err;
		}
		*p = '/';
	}
	int rc = mkdir(path, mode) != 0 && errno != EEXIST ? -errno : 0;
	umask(old);
	if (rc < 0)
		return rc;
	if (stat(path, &st) != 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
		log_warnx("%s must be a directory owned by uid %u and writable by "
		          "nobody else", path, (unsigned)geteuid());
		return -EPERM;
	}
	return 0;
}

/* True if a daemon answers on the path. */
static bool server_alive(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool alive = false;

	if (fd >= 0) {
		alive = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0;
		close(fd);
	}
	return alive;
}

/*
 * Gives the socket file `path` group config.socket_group and mode 0660 (as
 * root; socket_group unset: group root).  0 or -errno, with a message.
 */
static int server_set_group(const char *path)
{
	gid_t gid = 0;

	if (config.socket_group != NULL) {
		struct group *g = getgrnam(config.socket_group);
		if (g == NULL) {
			log_warnx("socket_group %s: no such group",
			          config.socket_group);
			return -EINVAL;
		}
		gid = g->gr_gid;
	}
	if (chown(path, 0, gid) != 0 || chmod(path, 0660) != 0) {
		int err = -errno;
		log_errno(-err, "%s: setting its group and mode", path);
		return err;
	}
	return 0;
}

/*
 * Checks the socket systemd handed over: it must be a listening Unix
 * stream socket.  Over TCP, SO_PEERCRED reports uid 65534 (nobody) for
 * every peer, so a root rokd would run the commands of anyone who can
 * reach the port; a datagram or unbound socket cannot serve at all.
 * socket_group is applied to its file as to one rokd creates.  0 or
 * -errno, with a message.
 */
static int server_check_inherited(int fd)
{
	int domain = -1, type = -1, listening = 0;
	socklen_t len = sizeof(int);
	struct sockaddr_un sa;

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 ||
	    (len = sizeof(int),
	     getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len)) != 0 ||
	    (len = sizeof(int),
	     getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len)) != 0) {
		int err = -errno;
		log_errno(-err, "the socket passed by systemd (fd 3)");
		return err;
	}
	if (domain != AF_UNIX || type != SOCK_STREAM || !listening) {
		log_warnx("the socket passed by systemd (fd 3) is not a "
		          "listening Unix stream socket (domain %d, type %d%s): "
		          "rokd tells users apart by their Unix credentials, so "
		          "it serves nothing else; set ListenStream= to a path",
		          domain, type, listening ? "" : ", not listening");
		return -EPROTOTYPE;
	}
	if (config.socket_group == NULL)
		return 0;
	len = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		return -errno;
	if (len <= offsetof(struct sockaddr_un, sun_path) ||
	    sa.sun_path[0] == '\0') {
		log_warnx("socket_group %s cannot apply to the socket passed by "
		          "systemd: it has no path", config.socket_group);
		return -EINVAL;
	}
	sa.sun_path[sizeof(sa.sun_path) - 1] = '\0';
	return server_set_group(sa.sun_path);
}

/* The socket systemd handed over: fd, -1 when there is none, or -errno. */
static int server_inherited(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");

	if (pid == NULL || fds == NULL || atol(pid) != (long)getpid() ||
	    atoi(fds) < 1)
		return -1;
	if (atoi(fds) > 1)
		log_warnx("systemd passed %d sockets; rokd listens on the first "
		          "only", atoi(fds));
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	int fd = 3;   /* SD_LISTEN_FDS_START */
	int fl = fcntl(fd, F_GETFD);
	if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC) < 0 ||
	    (fl = fcntl(fd, F_GETFL)) < 0 ||
	    fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		int err = -errno;
		log_errno(-err, "the socket passed by systemd (fd 3)");
		return err;
	}
	int err = server_check_inherited(fd);
	return err < 0 ? err : fd;
}

int server_open(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = server_inherited();

	/* A user's rokd serves its own uid only: a group would be a promise
	 * it does not keep. */
	if (!config.root && config.socket_group != NULL) {
		log_warnx("socket_group = %s: rokd is not running as root, and "
		          "then serves its own uid only; remove the setting",
		          config.socket_group);
		if (fd >= 0)
			close(fd);
		return -EINVAL;
	}
	if (fd >= 0) {
		server.inherited = true;
		log_info("listening on the socket passed by systemd");
		return server.fd = fd;
	}
	if (fd < -1)
		return fd;
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s",
	             config.socket_path) >= (int)sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	char dir[sizeof(sa.sun_path)];
	snprintf(dir, sizeof(dir), "%s", config.socket_path);
	char *slash = strrchr(dir, '/');
	if (slash != NULL && slash != dir) {
		*slash = '\0';
		int err = server_make_dir(dir, config.root ? 0755 : 0700);
		if (err < 0)
			return err;
	}
	if (server_alive(&sa)) {
		log_warnx("another rokd already answers on %s", sa.sun_path);
		return -EADDRINUSE;
	}
	if (unlink(sa.sun_path) != 0 && errno != ENOENT)
		return -errno;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	mode_t old = umask(0177);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc != 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	atomic_store_explicit(&server_path_ours, true, memory_order_relaxed);
	if (atexit(server_exit) != 0)
		log_warnx("%s is not removed if rokd exits before its stop",
		          sa.sun_path);
	if (config.root && (rc = server_set_group(sa.sun_path)) < 0) {
		close(fd);
		server_unlink_ours();
		return rc;
	}
	if (listen(fd, SERVER_BACKLOG) != 0) {
		rc = -errno;
		close(fd);
		server_unlink_ours();
		return rc;
	}
	log_info("listening on %s", sa.sun_path);
	return server.fd = fd;
}

static void server_resume_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	if (server.ev != NULL)
		event_add(server.ev, NULL);
}

static void server_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	(void)what;
	(void)arg;
	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0) {
			conn_accept(fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
		    errno == ENOMEM) {
			/* Out of descriptors: stop accepting for a moment
			 * instead of spinning on a socket that stays ready. */
			static const struct timeval pause = { 0, 100000 };
			log_warn("accept");
			event_del(server.ev);
			event_add(server.pause, &pause);
		}
		return;   /* EAGAIN: nothing more to accept */
	}
}

static void server_start_cb(void *arg)
{
	(void)arg;
	server.ev = event_new(reactor_base(), server.fd, EV_READ | EV_PERSIST,
	                      server_accept_cb, NULL);
	server.pause = evtimer_new(reactor_base(), server_resume_cb, NULL);
	if (server.ev == NULL || server.pause == NULL ||
	    event_add(server.ev, NULL) != 0)
		fatalx("cannot watch the listening socket");
}

int64_t rokd_started_ns;

int server_start(int fd)
{
	rokd_started_ns = rok_now();
	server.fd = fd;
	return reactor_call(server_start_cb, NULL);
}

void server_stop(void)
{
	if (server.ev != NULL) {
		event_free(server.ev);
		event_free(server.pause);
		server.ev = server.pause = NULL;
	}
	if (server.fd >= 0) {
		close(server.fd);
		server.fd = -1;
		server_unlink_ours();
	}
}
