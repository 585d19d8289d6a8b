/*
 * log.c — rokd's log: one line per event on stderr, with a level, which is
 * what journald expects from a service (it adds the time itself).  Any
 * thread: each line is written with one write(2) call, so lines from
 * different threads do not interleave.
 *
 * When stderr is the journal (JOURNAL_STREAM holds the device and inode of
 * the stream systemd connected, and stderr is that stream), each line
 * starts with its syslog priority as <N> (sd-daemon(3)), which journald
 * strips and records: `journalctl -p err` then finds rokd's errors.
 * Redirected elsewhere, stderr gets the plain lines.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rokd.h"

static int log_verbosity;   /* 0: info and up; 1: debug */
static bool log_journal;    /* stderr is the journal: <N> prefixes */

/* Syslog priorities (<syslog.h> LOG_*), as sd-daemon's SD_* prefixes. */
#define LOG_PRI_CRIT 2
#define LOG_PRI_ERR 3
#define LOG_PRI_WARNING 4
#define LOG_PRI_INFO 6
#define LOG_PRI_DEBUG 7

/* True if JOURNAL_STREAM ("DEV:INODE") names the file stderr is. */
static bool log_stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	int used = 0;

	if (js == NULL ||
	    sscanf(js, "%llu:%llu%n", &dev, &ino, &used) != 2 ||
	    js[used] != '\0' || fstat(STDERR_FILENO, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

void log_init(int verbosity)
{
	log_verbosity = verbosity;
	log_journal = log_stderr_is_journal();
}

static void __attribute__((format(printf, 4, 0)))
log_vwrite(int pri, const char *level, const char *err, const char *fmt,
           va_list ap)
{
	char line[1024];
	int n = log_journal ?
	        snprintf(line, sizeof(line), "<%d>rokd: %s: ", pri, level) :
	        snprintf(line, sizeof(line), "rokd: %s: ", level);

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

#define LOG_BODY(pri, level, err)                                            \
	va_list ap;                                                          \
	va_start(ap, fmt);                                                   \
	log_vwrite(pri, level, err, fmt, ap);                                \
	va_end(ap)

void log_debug(const char *fmt, ...)
{
	if (log_verbosity < 1)
		return;
	LOG_BODY(LOG_PRI_DEBUG, "debug", NULL);
}

void log_info(const char *fmt, ...)
{
	LOG_BODY(LOG_PRI_INFO, "info", NULL);
}

void log_warnx(const char *fmt, ...)
{
	LOG_BODY(LOG_PRI_WARNING, "warning", NULL);
}

void log_warn(const char *fmt, ...)
{
	int e = errno;
	LOG_BODY(LOG_PRI_WARNING, "warning", strerror(e));
}

void log_errno(int err, const char *fmt, ...)
{
	LOG_BODY(LOG_PRI_ERR, "error", strerror(err < 0 ? -err : err));
}

void fatalx(const char *fmt, ...)
{
	LOG_BODY(LOG_PRI_CRIT, "fatal", NULL);
	exit(1);
}
