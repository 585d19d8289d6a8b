/*
 * exec-args.c — a task's command line and environment: the spec's check
 * (the kind's check hook, on the reactor thread), copies of its strings,
 * --clean-env, and the paths execve tries for argv[0] (PATH, as execvp,
 * within bounds).
 * Pure functions over their arguments, any thread; exec.c calls them.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "rokd.h"

static bool exec_args_has_nul(const ProtobufCBinaryData *b)
{
	return b->len > 0 && memchr(b->data, 0, b->len) != NULL;
}

int exec_args_check(const TaskSpec *spec, char *err, size_t len)
{
	if (spec->n_args == 0 || spec->args[0].len == 0) {
		snprintf(err, len, "exec: a command is required");
		return -1;
	}
	for (size_t i = 0; i < spec->n_args; i++) {
		if (exec_args_has_nul(&spec->args[i])) {
			snprintf(err, len, "exec: argument %zu contains a NUL "
			         "byte", i);
			return -1;
		}
	}
	for (size_t i = 0; i < spec->n_env; i++) {
		const ProtobufCBinaryData *e = &spec->env[i];
		if (exec_args_has_nul(e) || e->len == 0 || e->data[0] == '=' ||
		    memchr(e->data, '=', e->len) == NULL) {
			snprintf(err, len, "exec: environment entry %zu is not "
			         "NAME=value", i);
			return -1;
		}
	}
	if (spec->cwd.len > 0 &&
	    (exec_args_has_nul(&spec->cwd) || spec->cwd.data[0] != '/')) {
		snprintf(err, len, "exec: the working directory must be an "
		         "absolute path");
		return -1;
	}
	return 0;
}

char *exec_args_strndup(const ProtobufCBinaryData *b)
{
	char *s = malloc(b->len + 1);

	if (s != NULL) {
		if (b->len > 0)
			memcpy(s, b->data, b->len);
		s[b->len] = '\0';
	}
	return s;
}

/* n strings, NULL-terminated, each its own allocation: NULL on ENOMEM. */
char **exec_args_strv(const ProtobufCBinaryData *v, size_t n)
{
	char **a = calloc(n + 1, sizeof(*a));

	for (size_t i = 0; a != NULL && i < n; i++) {
		if ((a[i] = exec_args_strndup(&v[i])) == NULL) {
			while (i-- > 0)
				free(a[i]);
			free(a);
			return NULL;
		}
	}
	return a;
}

void exec_args_strv_free(char **a)
{
	for (size_t i = 0; a != NULL && a[i] != NULL; i++)
		free(a[i]);
	free(a);
}

/* Finds NAME= in a NULL-terminated env: the value, or NULL. */
const char *exec_args_getenv(char *const *env, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; env[i] != NULL; i++)
		if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
			return env[i] + n + 1;
	return NULL;
}

/*
 * --clean-env: PATH, HOME, USER, LOGNAME, SHELL of the user the child runs
 * as, then the entries of *envp (which win): a new *envp (the strings
 * move into it) and *nenv; 0 or -ENOMEM (*envp unchanged).
 */
int exec_args_clean_env(char ***envp, size_t *nenv, const struct exec_user *u)
{
	size_t n = *nenv + 5, k = 0;
	char **env = calloc(n + 1, sizeof(*env));

	if (env == NULL)
		return -ENOMEM;
	const char *const base[][2] = {
		{ "PATH", EXEC_DEFAULT_PATH },
		{ "HOME", u != NULL ? u->home : NULL },
		{ "USER", u != NULL ? u->name : NULL },
		{ "LOGNAME", u != NULL ? u->name : NULL },
		{ "SHELL", u != NULL ? u->shell : NULL },
	};
	for (size_t i = 0; i < 5; i++) {
		if (base[i][1] == NULL ||
		    exec_args_getenv(*envp, base[i][0]) != NULL)
			continue;
		size_t len = strlen(base[i][0]) + strlen(base[i][1]) + 2;
		if ((env[k] = malloc(len)) == NULL) {
			exec_args_strv_free(env);
			return -ENOMEM;
		}
		snprintf(env[k++], len, "%s=%s", base[i][0], base[i][1]);
	}
	for (size_t i = 0; i < *nenv; i++) {
		env[k++] = (*envp)[i];
		(*envp)[i] = NULL;
	}
	free(*envp);
	*envp = env;
	*nenv = k;
	return 0;
}

/*
 * The candidates execve tries for argv[0], as execvp finds them, with
 * bounds on what a client's PATH and argv[0] can cost: a name longer than
 * NAME_MAX cannot exist in any directory (-ENAMETOOLONG, as execvp), a
 * candidate longer than PATH_MAX could not be opened and is skipped (as
 * execvp skips it), and only the first EXEC_PATH_DIRS entries of PATH are
 * tried.  So the allocation is at most the length of PATH plus
 * EXEC_PATH_DIRS * (NAME_MAX + 2) bytes, never PATH's length times
 * argv[0]'s.
 */
int exec_args_paths(const char *prog, const char *path, char ***out)
{
	*out = NULL;
	if (strchr(prog, '/') != NULL)
		path = NULL;
	size_t plen = strlen(prog), n = 1, bytes = plen + 1;
	if (path != NULL) {
		if (plen > NAME_MAX)
			return -ENAMETOOLONG;
		/* Two passes over the same entries: count, then copy. */
		n = 0;
		bytes = 0;
		const char *p = path;
		for (size_t k = 0; k < EXEC_PATH_DIRS; k++) {
			const char *e = strchrnul(p, ':');
			size_t dl = (size_t)(e - p);
			if (dl + 1 + plen < PATH_MAX) {
				n++;
				bytes += dl + 1 + plen + 1;
			}
			if (*e == '\0')
				break;
			p = e + 1;
		}
	}
	char **v = malloc((n + 1) * sizeof(*v) + bytes);
	if (v == NULL)
		return -ENOMEM;
	char *s = (char *)(v + n + 1);
	if (path == NULL) {
		v[0] = memcpy(s, prog, plen + 1);
		v[1] = NULL;
		*out = v;
		return 0;
	}
	size_t k = 0;
	const char *p = path;
	for (size_t i = 0; i < EXEC_PATH_DIRS; i++) {
		const char *e = strchrnul(p, ':');
		size_t dl = (size_t)(e - p);
		if (dl + 1 + plen < PATH_MAX) {
			v[k++] = s;
			/* An empty element is the current directory. */
			if (dl > 0) {
				memcpy(s, p, dl);
				s += dl;
				*s++ = '/';
			}
			memcpy(s, prog, plen + 1);
			s += plen + 1;
		}
		if (*e == '\0')
			break;
		p = e + 1;
	}
	v[k] = NULL;
	*out = v;
	return 0;
}
