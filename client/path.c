/*
 * path.c — where rokd's socket is when the caller does not say (DESIGN §3):
 * $ROK_SOCKET, then /run/rok/rokd.sock for root, then
 * $XDG_RUNTIME_DIR/rok/rokd.sock.
 *
 * XDG_RUNTIME_DIR is unset (or, against the XDG spec, relative) under su,
 * sudo without a login session, cron and most containers.  The fallback is
 * then /tmp/rok-UID/rokd.sock: /tmp always exists and is writable, whereas
 * /run/user/UID exists only when a login manager made it.  Because anyone
 * may create /tmp/rok-UID first, the client connects through it only if it
 * is a real directory owned by the user and closed to everybody else — a
 * squatter's socket would otherwise receive the caller's environment (which
 * rokctl sends with exec spawns).  rokd makes the directory with mode 0700
 * and applies the same check.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client-private.h"

int path_resolve(const char *rok_socket, const char *xdg_runtime_dir,
		 uid_t euid, char *buf, size_t size, bool *private_dir)
{
	int n;

	*private_dir = false;
	if (rok_socket != NULL && rok_socket[0] != '\0')
		n = snprintf(buf, size, "%s", rok_socket);
	else if (euid == 0)
		n = snprintf(buf, size, "/run/rok/rokd.sock");
	else if (xdg_runtime_dir != NULL && xdg_runtime_dir[0] == '/')
		n = snprintf(buf, size, "%s/rok/rokd.sock", xdg_runtime_dir);
	else {
		n = snprintf(buf, size, "/tmp/rok-%lu/rokd.sock",
			     (unsigned long)euid);
		*private_dir = true;
	}
	if (n < 0 || (size_t)n >= size) {
		if (size > 0)
			buf[0] = '\0';
		return -ENAMETOOLONG;
	}
	return n;
}

int path_check_dir(const char *path, uid_t euid)
{
	char dir[256];
	const char *slash = strrchr(path, '/');
	struct stat st;
	size_t n;

	if (slash == NULL)
		return -EINVAL;
	n = (size_t)(slash - path);
	if (n == 0 || n >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, n);
	dir[n] = '\0';
	if (lstat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != euid ||
	    (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
		return -EPERM;
	return 0;
}

int rok_socket_path(char *buf, size_t size)
{
	bool private_dir;

	return path_resolve(getenv("ROK_SOCKET"), getenv("XDG_RUNTIME_DIR"),
			    geteuid(), buf, size, &private_dir);
}
