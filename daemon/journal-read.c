/*
 * journal-read.c — reading tasks back from the journal: status, join and
 * list of tasks that are no longer (or not yet again) in the in-memory
 * table.
 *
 * Any thread: the blocking pool (status, list, logs: conn_offload),
 * workers (join replies), the journal thread never.  One read-only
 * connection of its own, serialised by a mutex; in WAL mode readers never
 * wait for the writer, and these are point reads by primary key or short
 * range scans over pages the writer keeps hot.  Still, a read waits for
 * the disk when the page is cold, and for the mutex behind a list's scan:
 * the reactor thread should not read here, and a debug line names each
 * task it still reads (the end of a watch or logs stream whose task was
 * evicted while it streamed; gate.c's dependencies at spawn).  A read that fails (an I/O error) reports the task
 * as not found and logs once per failure.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal.h"
#include "reactor.h"

static struct {
	pthread_mutex_t lock;
	sqlite3 *db;
	sqlite3_stmt *info, *ids, *ids_grp;
} jread = { .lock = PTHREAD_MUTEX_INITIALIZER };

int journal_read_open(const char *path, char *err, size_t len)
{
	/* Read-write, made read-only by query_only: under "unix-excl" a
	 * read-only connection takes and drops real fcntl locks, and an
	 * unlock of the file's last shared lock would drop the process's
	 * hold on it.  (The writer's connection keeps its shared lock while
	 * open, so that unlock does not come today; this does not rely on
	 * it.) */
	int rc = sqlite3_open_v2(path, &jread.db, SQLITE_OPEN_READWRITE |
	                         SQLITE_OPEN_NOMUTEX, journal_vfs());

	if (rc == SQLITE_OK)
		rc = sqlite3_exec(jread.db, "PRAGMA query_only = 1", NULL, NULL,
		                  NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_busy_timeout(jread.db, JOURNAL_BUSY_TIMEOUT_MS);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v3(jread.db, "SELECT uid, kind, spec, "
		        "state, spawned_us, started_us, finished_us, value, "
		        "exit_code, signal, reason, output_truncated, retries, run "
		        "FROM tasks WHERE id = ?1", -1,
		        SQLITE_PREPARE_PERSISTENT, &jread.info, NULL);
	/* Any group (?5 NULL) or the default one (?5 'default': NULL is the
	 * default) by the id order; a named group by the index tasks_grp,
	 * which an OR of both would keep the planner from using. */
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v3(jread.db, "SELECT id FROM tasks WHERE "
		        "id > ?1 AND (?2 < 0 OR uid = ?2) AND (?3 = 0 OR "
		        "state = ?3) AND (?5 IS NULL OR grp IS NULL OR "
		        "grp = ?5) ORDER BY id LIMIT ?4", -1,
		        SQLITE_PREPARE_PERSISTENT, &jread.ids, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v3(jread.db, "SELECT id FROM tasks WHERE "
		        "grp = ?5 AND id > ?1 AND (?2 < 0 OR uid = ?2) AND "
		        "(?3 = 0 OR state = ?3) ORDER BY id LIMIT ?4", -1,
		        SQLITE_PREPARE_PERSISTENT, &jread.ids_grp, NULL);
	if (rc != SQLITE_OK) {
		snprintf(err, len, "%s: read connection: %s", path,
		         jread.db != NULL ? sqlite3_errmsg(jread.db)
		                          : sqlite3_errstr(rc));
		journal_read_close();
		return -1;
	}
	return 0;
}

void journal_read_close(void)
{
	sqlite3_finalize(jread.info);
	sqlite3_finalize(jread.ids);
	sqlite3_finalize(jread.ids_grp);
	sqlite3_close(jread.db);
	jread.info = jread.ids = jread.ids_grp = NULL;
	jread.db = NULL;
}

static uint8_t *journal_read_dup(const void *p, size_t n)
{
	uint8_t *d = malloc(n > 0 ? n : 1);

	if (d != NULL && n > 0)
		memcpy(d, p, n);
	return d;
}

/* Lock held, a row in st: fills info. */
static void journal_read_fill(sqlite3_stmt *st, uint64_t id, TaskInfo *info)
{
	size_t n = (size_t)sqlite3_column_bytes(st, 1);
	const struct kind *k = kind_find(sqlite3_column_text(st, 1), n);
	static const char unknown[] = "unknown";

	info->id = id;
	info->uid = (uint32_t)sqlite3_column_int64(st, 0);
	/* The name must outlive the row: the kind's own, static. */
	info->kind.data = (uint8_t *)(uintptr_t)(k != NULL ? k->name : unknown);
	info->kind.len = strlen((const char *)info->kind.data);
	info->state = (Rok__V1__TaskState)sqlite3_column_int(st, 3);
	info->spawned_us = (uint64_t)sqlite3_column_int64(st, 4);
	info->started_us = (uint64_t)sqlite3_column_int64(st, 5);
	info->finished_us = (uint64_t)sqlite3_column_int64(st, 6);
	if (sqlite3_column_type(st, 7) != SQLITE_NULL) {
		const void *v = sqlite3_column_blob(st, 7);
		size_t vl = (size_t)sqlite3_column_bytes(st, 7);
		if ((info->value.data = journal_read_dup(v, vl)) != NULL)
			info->value.len = vl;
	}
	if (sqlite3_column_type(st, 8) != SQLITE_NULL) {
		info->has_exit_code = true;
		info->exit_code = sqlite3_column_int(st, 8);
	}
	if (sqlite3_column_type(st, 9) != SQLITE_NULL) {
		info->has_signal = true;
		info->signal = sqlite3_column_int(st, 9);
	}
	if (sqlite3_column_type(st, 10) != SQLITE_NULL) {
		const void *r = sqlite3_column_text(st, 10);
		size_t rl = (size_t)sqlite3_column_bytes(st, 10);
		if ((info->reason.data = journal_read_dup(r, rl)) != NULL)
			info->reason.len = rl;
	}
	info->output_truncated = sqlite3_column_int(st, 11) != 0;
	info->retries = (uint32_t)sqlite3_column_int(st, 12);
	info->run = (uint32_t)sqlite3_column_int(st, 13);
	TaskSpec *spec = rok__v1__task_spec__unpack(
		NULL, (size_t)sqlite3_column_bytes(st, 2),
		sqlite3_column_blob(st, 2));
	if (spec == NULL)
		return;
	if (spec->n_args > 0 &&
	    (info->args = calloc(spec->n_args, sizeof(*info->args))) != NULL) {
		for (size_t i = 0; i < spec->n_args; i++) {
			info->args[i].data = journal_read_dup(spec->args[i].data,
			                                      spec->args[i].len);
			info->args[i].len = info->args[i].data != NULL
			                            ? spec->args[i].len : 0;
		}
		info->n_args = spec->n_args;
	}
	/* Its group and class, as tasktab_fill gives them. */
	const ProtobufCBinaryData dflt = { 7, (uint8_t *)"default" };
	const ProtobufCBinaryData *g = spec->group.len > 0 ? &spec->group
	                                                   : &dflt;
	if ((info->group.data = journal_read_dup(g->data, g->len)) != NULL)
		info->group.len = g->len;
	info->priority = (Rok__V1__Priority)queue_wire_priority(
		queue_class(spec->priority));
	rok__v1__task_spec__free_unpacked(spec, NULL);
}

int journal_read_info(uint64_t id, uid_t uid, TaskInfo *info)
{
	int code = ROK__V1__ERROR_CODE__NOT_FOUND;

	if (id > INT64_MAX)
		return code;
	if (reactor_on_thread())
		log_debug("journal: task %llu read on the reactor thread",
		          (unsigned long long)id);
	pthread_mutex_lock(&jread.lock);
	if (jread.db == NULL) {
		pthread_mutex_unlock(&jread.lock);
		return code;
	}
	sqlite3_bind_int64(jread.info, 1, (sqlite3_int64)id);
	int rc = sqlite3_step(jread.info);
	if (rc == SQLITE_ROW) {
		if (uid != 0 && (uid_t)sqlite3_column_int64(jread.info, 0) != uid) {
			code = ROK__V1__ERROR_CODE__PERMISSION_DENIED;
		} else {
			if (info != NULL)
				journal_read_fill(jread.info, id, info);
			code = 0;
		}
	} else if (rc != SQLITE_DONE) {
		log_warnx("journal: reading task %llu: %s",
		          (unsigned long long)id, sqlite3_errmsg(jread.db));
	}
	sqlite3_reset(jread.info);
	pthread_mutex_unlock(&jread.lock);
	return code;
}

int journal_read_owner(uint64_t id, uid_t *uid)
{
	int err = -ENOENT;

	if (id > INT64_MAX)
		return err;
	pthread_mutex_lock(&jread.lock);
	if (jread.db == NULL) {
		pthread_mutex_unlock(&jread.lock);
		return err;
	}
	sqlite3_bind_int64(jread.info, 1, (sqlite3_int64)id);
	int rc = sqlite3_step(jread.info);
	if (rc == SQLITE_ROW) {
		*uid = (uid_t)sqlite3_column_int64(jread.info, 0);
		err = 0;
	} else if (rc != SQLITE_DONE) {
		log_warnx("journal: reading task %llu: %s",
		          (unsigned long long)id, sqlite3_errmsg(jread.db));
		err = -EIO;
	}
	sqlite3_reset(jread.info);
	pthread_mutex_unlock(&jread.lock);
	return err;
}

int journal_read_ids(uid_t uid, int state, const char *group,
                     uint64_t after, size_t limit, uint64_t *ids)
{
	int n = 0;

	if (after > INT64_MAX)
		return 0;
	pthread_mutex_lock(&jread.lock);
	if (jread.db == NULL) {
		pthread_mutex_unlock(&jread.lock);
		return 0;
	}
	sqlite3_stmt *st = group != NULL && strcmp(group, "default") != 0
	                   ? jread.ids_grp : jread.ids;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)after);
	sqlite3_bind_int64(st, 2, uid == 0 ? -1 : (sqlite3_int64)uid);
	sqlite3_bind_int(st, 3, state);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)limit);
	if (group != NULL)
		sqlite3_bind_text(st, 5, group, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, 5);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		ids[n++] = (uint64_t)sqlite3_column_int64(st, 0);
	if (rc != SQLITE_DONE) {
		log_warnx("journal: listing tasks: %s", sqlite3_errmsg(jread.db));
		n = -EIO;
	}
	sqlite3_reset(st);
	pthread_mutex_unlock(&jread.lock);
	return n;
}
