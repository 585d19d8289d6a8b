/*
 * exec-user.c — the submitter's account, for an exec task's child: its
 * uid, groups, home, name and shell from the user database.
 *
 * Read on the worker that starts the task, before the spawner runs (so a
 * slow NSS backend stalls one worker, which the runtime's blocking
 * detection hands off, and never the spawner).  With /etc files a lookup is
 * a few hundred microseconds; a small cache (uid -> account, 10 s) makes it
 * rare.  Any thread: the cache has its own lock, and the lookup runs
 * without it.
 */
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "rokd.h"
#define USER_CACHE 16
#define USER_TTL_NS 10000000000ll
/* The largest buffer a passwd entry is read into. */
#define EXEC_USER_BUF_MAX (1024 * 1024)

static struct {
	pthread_mutex_t lock;
	struct {
		struct exec_user u;
		int64_t at;             /* 0: empty */
	} e[USER_CACHE];
	unsigned next;
} users = { .lock = PTHREAD_MUTEX_INITIALIZER };

void exec_user_done(struct exec_user *u)
{
	free(u->groups);
	free(u->name);
	free(u->home);
	free(u->shell);
	memset(u, 0, sizeof(*u));
}

/* Deep copy; 0 or -ENOMEM (then *to is empty). */
static int exec_user_copy(struct exec_user *to, const struct exec_user *from)
{
	memset(to, 0, sizeof(*to));
	to->uid = from->uid;
	to->gid = from->gid;
	to->ngroups = from->ngroups;
	to->groups = malloc((from->ngroups + 1) * sizeof(gid_t));
	to->name = strdup(from->name);
	to->home = strdup(from->home);
	to->shell = strdup(from->shell);
	if (to->groups == NULL || to->name == NULL || to->home == NULL ||
	    to->shell == NULL) {
		exec_user_done(to);
		return -ENOMEM;
	}
	memcpy(to->groups, from->groups, from->ngroups * sizeof(gid_t));
	return 0;
}

/* Its passwd entry: 0, -ENOENT, or -errno; *buf (free it) holds the
 * strings pw points to. */
static int exec_user_passwd(uid_t uid, struct passwd *pw, char **buf)
{
	struct passwd *res = NULL;
	size_t len = 4096;
	int err;

	*buf = NULL;
	for (;;) {
		char *b = realloc(*buf, len);
		if (b == NULL)
			return -ENOMEM;
		*buf = b;
		errno = 0;
		err = getpwuid_r(uid, pw, b, len, &res);
		/* ERANGE: an entry longer than the buffer (a long GECOS,
		 * say); doubled up to EXEC_USER_BUF_MAX. */
		if (err != ERANGE || len >= EXEC_USER_BUF_MAX)
			break;
		len *= 2;
	}
	if (err != 0)
		return -err;
	if (res != NULL)
		return 0;
	/* Not found, with one of the errnos getpwuid_r(3) lists for that.
	 * A backend that failed may answer 0 and no entry too, with
	 * another errno set (glibc's files backend returns its error
	 * itself; others need not): that is no answer, and must not pass
	 * for "no such user". */
	err = errno;
	if (err == 0 || err == ENOENT || err == ESRCH || err == EBADF ||
	    err == EPERM)
		return -ENOENT;
	return -err;
}

static int exec_user_lookup(uid_t uid, struct exec_user *u)
{
	struct passwd pw;
	char *buf;
	int n = 32, err;

	memset(u, 0, sizeof(*u));
	err = exec_user_passwd(uid, &pw, &buf);
	if (err < 0) {
		free(buf);
		return err;
	}
	u->uid = uid;
	u->gid = pw.pw_gid;
	for (;;) {
		gid_t *g = realloc(u->groups, (size_t)n * sizeof(gid_t));
		if (g == NULL) {
			exec_user_done(u);
			free(buf);
			return -ENOMEM;
		}
		u->groups = g;
		int want = n;
		if (getgrouplist(pw.pw_name, pw.pw_gid, g, &want) >= 0) {
			u->ngroups = (size_t)want;
			break;
		}
		if (want <= n || want > 65536) {
			exec_user_done(u);
			free(buf);
			return -E2BIG;
		}
		n = want;
	}
	u->name = strdup(pw.pw_name);
	u->home = strdup(pw.pw_dir != NULL ? pw.pw_dir : "/");
	u->shell = strdup(pw.pw_shell != NULL && pw.pw_shell[0] != '\0'
	                  ? pw.pw_shell : "/bin/sh");
	free(buf);
	if (u->name == NULL || u->home == NULL || u->shell == NULL) {
		exec_user_done(u);
		return -ENOMEM;
	}
	return 0;
}

int exec_user_get(uid_t uid, struct exec_user *u)
{
	int64_t now = rok_now();
	int err;

	pthread_mutex_lock(&users.lock);
	for (unsigned i = 0; i < USER_CACHE; i++) {
		if (users.e[i].at != 0 && users.e[i].u.uid == uid &&
		    now - users.e[i].at < USER_TTL_NS) {
			err = exec_user_copy(u, &users.e[i].u);
			pthread_mutex_unlock(&users.lock);
			return err;
		}
	}
	pthread_mutex_unlock(&users.lock);
	/* Looked up without the lock: NSS may be slow. */
	err = exec_user_lookup(uid, u);
	if (err < 0)
		return err;
	struct exec_user copy;
	if (exec_user_copy(&copy, u) == 0) {
		pthread_mutex_lock(&users.lock);
		unsigned i = users.next++ % USER_CACHE;
		exec_user_done(&users.e[i].u);
		users.e[i].u = copy;
		users.e[i].at = now;
		pthread_mutex_unlock(&users.lock);
	}
	return 0;
}
