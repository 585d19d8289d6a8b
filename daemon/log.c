/*
 * log.c — rokd's log: one line per event on stderr, with a level, which is
 * what journald expects from a service (it adds the time itself).  Any
 * thread: each line is written with one write(2) call, so lines from
 * different threads do not interleave.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rokd.h"

static int log_verbosity;   /* 0: info and up; 1: debug */

void log_init(int verbosity)
{
	log_verbosity = verbosity;
}

static void __attribute__((format(printf, 3, 0)))
log_vwrite(const char *level, const char *err, const char *fmt,
                       va_list ap)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "rokd: %s: ", level);

	if (n < 0)
		return;
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	if (m < 0)
		return;
	n += m;
	if ((size_t)n >= sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	if (err != NULL)
		n += snprintf(line + n, sizeof(line) - (size_t)n, ": %s", err);
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* Best effort: nowhere to report a failing stderr. */
	(void)!write(STDERR_FILENO, line, (size_t)n);
}

#define LOG_BODY(level, err)                                                 \
	va_list ap;                                                          \
	va_start(ap, fmt);                                                   \
	log_vwrite(level, err, fmt, ap);                                     \
	va_end(ap)

void log_debug(const char *fmt, ...)
{
	if (log_verbosity < 1)
		return;
	LOG_BODY("debug", NULL);
}

void log_info(const char *fmt, ...)
{
	LOG_BODY("info", NULL);
}

void log_warnx(const char *fmt, ...)
{
	LOG_BODY("warning", NULL);
}

void log_warn(const char *fmt, ...)
{
	int e = errno;
	LOG_BODY("warning", strerror(e));
}

void log_errno(int err, const char *fmt, ...)
{
	LOG_BODY("error", strerror(err < 0 ? -err : err));
}

void fatalx(const char *fmt, ...)
{
	LOG_BODY("fatal", NULL);
	exit(1);
}
