/*
 * group.c — the groups rokd knows: their registry, the rokd.conf keys that
 * define them, and the journal table that keeps those added or changed at
 * run time.
 *
 * The registry is a list in name order (there are few groups; a lookup is
 * a short scan), touched under queue.c's lock once the daemon runs, and by
 * the main thread alone before (config, group_load).  `default` always
 * exists: parallel = online CPUs unless rokd.conf says otherwise.
 *
 * rokd.conf: `group.NAME.KEY = VALUE`, KEY one of parallel, policy,
 * weights, backend, partition, paused (etc/rokd.conf, rokd.conf(5)); the
 * scheduling keys `aging` and `nice_CLASS` are read here too.
 *
 * Persistence: the journal's `groups` table (schema version 4, partition
 * since 6; journal-schema.c) holds one row per
 * group that a GroupRequest added or changed, with all its settings.  At
 * start the groups of rokd.conf are made first, then every row is applied
 * on top (a row wins over rokd.conf: it is the newer word).  `group rm`
 * deletes the row; a group of rokd.conf comes back at the next start.
 * Rows are written by cmd-group.c on the blocking pool through a
 * connection of group.c's own (SQLite serialises it with the journal
 * thread's writes; busy_timeout covers the wait), before the change is
 * applied in memory and answered: an acknowledged change survives a
 * kill -9.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group.h"
#include "journal.h"

static struct {
	struct group *head;
	sqlite3 *db;                /* group_store's connection */
} groups;

bool group_name_ok(const uint8_t *s, size_t len)
{
	if (len == 0 || len > GROUP_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!isalnum(s[i]) && s[i] != '_' && s[i] != '-')
			return false;
	return true;
}

struct group *group_find(const char *name, size_t len)
{
	for (struct group *g = groups.head; g != NULL; g = g->next)
		if (strlen(g->name) == len && memcmp(g->name, name, len) == 0)
			return g;
	return NULL;
}

struct group *group_first(void)
{
	return groups.head;
}

struct group *group_add(const char *name, size_t len)
{
	struct group *g = calloc(1, sizeof(*g));

	if (g == NULL || len > GROUP_NAME_MAX) {
		free(g);
		return NULL;
	}
	memcpy(g->name, name, len);
	snprintf(g->backend, sizeof(g->backend), "local");
	qcore_init(&g->q);
	g->q.aging_ns = config.aging_ns;
	struct group **p = &groups.head;
	while (*p != NULL && strcmp((*p)->name, g->name) < 0)
		p = &(*p)->next;
	g->next = *p;
	*p = g;
	return g;
}

void group_remove(struct group *g)
{
	for (struct group **p = &groups.head; *p != NULL; p = &(*p)->next) {
		if (*p == g) {
			*p = g->next;
			qcore_done(&g->q);
			free(g);
			return;
		}
	}
}

void group_free_all(void)
{
	while (groups.head != NULL)
		group_remove(groups.head);
}

void group_apply(struct group *g, const struct group_settings *s)
{
	if (s->has_parallel)
		g->q.parallel = s->parallel;
	if (s->has_policy)
		g->q.policy = s->policy;
	if (s->has_weights)
		memcpy(g->q.weights, s->weights, sizeof(g->q.weights));
	if (s->has_backend)
		snprintf(g->backend, sizeof(g->backend), "%s", s->backend);
	if (s->has_partition)
		snprintf(g->partition, sizeof(g->partition), "%s",
		         s->partition);
	if (s->has_paused)
		g->q.paused = s->paused;
}

void group_settings_of(const struct group *g, struct group_settings *s)
{
	*s = (struct group_settings){
		.has_parallel = true, .has_policy = true, .has_weights = true,
		.has_backend = true, .has_paused = true, .has_partition = true,
		.parallel = g->q.parallel, .policy = g->q.policy,
		.paused = g->q.paused,
	};
	memcpy(s->weights, g->q.weights, sizeof(s->weights));
	snprintf(s->backend, sizeof(s->backend), "%s", g->backend);
	snprintf(s->partition, sizeof(s->partition), "%s", g->partition);
}

/* Slurm's partition names, and sbatch's comma between several: nothing
 * an sbatch argument could misread (no '=', no space, no leading '-'). */
static bool group_partition_ok(const char *p)
{
	if (p[0] == '-' || p[0] == ',')
		return false;
	for (; *p != '\0'; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_' || *p == '-' ||
		      *p == '.' || *p == ','))
			return false;
	return true;
}

int group_settings_check(const struct group_settings *s, char *err,
                         size_t len)
{
	if (s->has_backend && strcmp(s->backend, "local") != 0 &&
	    strcmp(s->backend, "slurm") != 0) {
		snprintf(err, len, "unknown backend \"%s\" (local, slurm)",
		         s->backend);
		return -1;
	}
	if (s->has_partition && !group_partition_ok(s->partition)) {
		snprintf(err, len, "partition \"%s\": at most %d of A-Z a-z "
		         "0-9 _ . - ,", s->partition, GROUP_PARTITION_MAX - 1);
		return -1;
	}
	if (s->has_policy && s->policy != QPOLICY_STRICT &&
	    s->policy != QPOLICY_WEIGHTED) {
		snprintf(err, len, "unknown policy %d (strict or weighted)",
		         s->policy);
		return -1;
	}
	if (s->has_parallel && s->parallel > GROUP_PARALLEL_MAX) {
		snprintf(err, len, "parallel %u is more than %u", s->parallel,
		         GROUP_PARALLEL_MAX);
		return -1;
	}
	for (int c = 0; s->has_weights && c < QCLS_N; c++) {
		if (s->weights[c] < 1 || s->weights[c] > QWEIGHT_MAX) {
			snprintf(err, len, "weights: each of the four is 1..%d",
			         QWEIGHT_MAX);
			return -1;
		}
	}
	return 0;
}

/* ---- rokd.conf ------------------------------------------------------------ */

/* "50,30,15,5": 0 or -1. */
static int group_parse_weights(const char *v, uint32_t w[QCLS_N])
{
	const char *p = v;

	for (int c = 0; c < QCLS_N; c++) {
		char *end;
		while (isspace((unsigned char)*p))
			p++;
		if (!isdigit((unsigned char)*p))
			return -1;
		errno = 0;
		unsigned long n = strtoul(p, &end, 10);
		if (errno != 0 || n < 1 || n > QWEIGHT_MAX)
			return -1;
		w[c] = (uint32_t)n;
		p = end;
		while (isspace((unsigned char)*p))
			p++;
		if (c < QCLS_N - 1 && *p++ != ',')
			return -1;
	}
	return *p == '\0' ? 0 : -1;
}

int group_policy_parse(const char *v)
{
	if (strcmp(v, "strict") == 0)
		return QPOLICY_STRICT;
	if (strcmp(v, "weighted") == 0)
		return QPOLICY_WEIGHTED;
	return -1;
}

static struct group_conf *group_conf_get(struct config *c, const char *name,
                                         size_t len)
{
	for (size_t i = 0; i < c->ngroups; i++)
		if (strlen(c->groups[i].name) == len &&
		    memcmp(c->groups[i].name, name, len) == 0)
			return &c->groups[i];
	if (c->ngroups >= GROUP_COUNT_MAX)
		return NULL;
	struct group_conf *n = realloc(c->groups,
	                               (c->ngroups + 1) * sizeof(*n));
	if (n == NULL)
		return NULL;
	c->groups = n;
	n = &c->groups[c->ngroups++];
	memset(n, 0, sizeof(*n));
	memcpy(n->name, name, len);
	return n;
}

int group_config_set(struct config *c, const char *key, const char *v,
                     char *err, size_t len)
{
	static const char *const classes[QCLS_N] = { "urgent", "high",
	                                             "normal", "low" };

	if (strncmp(key, "nice_", 5) == 0) {
		for (int k = 0; k < QCLS_N; k++) {
			if (strcmp(key + 5, classes[k]) != 0)
				continue;
			char *end;
			errno = 0;
			long n = strtol(v, &end, 10);
			if (errno != 0 || end == v || *end != '\0' || n < -20 ||
			    n > 19) {
				snprintf(err, len, "%s: a nice value, -20..19: "
				         "%s", key, v);
				return -1;
			}
			c->nice[k] = (int)n;
			return 0;
		}
		snprintf(err, len, "unknown setting: %s", key);
		return -1;
	}
	/* group.NAME.KEY */
	const char *name = key + 6;
	const char *dot = strrchr(name, '.');
	if (dot == NULL || !group_name_ok((const uint8_t *)name,
	                                  (size_t)(dot - name))) {
		snprintf(err, len, "%s: expected group.NAME.KEY, NAME of 1..%d "
		         "letters, digits, _ and -", key, GROUP_NAME_MAX);
		return -1;
	}
	struct group_conf *g = group_conf_get(c, name, (size_t)(dot - name));
	if (g == NULL) {
		snprintf(err, len, "%s: too many groups (%d at most)", key,
		         GROUP_COUNT_MAX);
		return -1;
	}
	const char *k = dot + 1;
	struct group_settings *s = &g->set;
	if (strcmp(k, "parallel") == 0) {
		char *end;
		errno = 0;
		unsigned long n = strtoul(v, &end, 10);
		if (errno != 0 || end == v || *end != '\0' || *v == '-' ||
		    n > GROUP_PARALLEL_MAX) {
			snprintf(err, len, "%s: a number, 0..%u: %s", key,
			         GROUP_PARALLEL_MAX, v);
			return -1;
		}
		s->parallel = (uint32_t)n;
		s->has_parallel = true;
	} else if (strcmp(k, "policy") == 0) {
		if ((s->policy = group_policy_parse(v)) < 0) {
			snprintf(err, len, "%s: strict or weighted: %s", key, v);
			return -1;
		}
		s->has_policy = true;
	} else if (strcmp(k, "weights") == 0) {
		if (group_parse_weights(v, s->weights) < 0) {
			snprintf(err, len, "%s: four weights, urgent,high,normal,"
			         "low, each 1..%d: %s", key, QWEIGHT_MAX, v);
			return -1;
		}
		s->has_weights = true;
	} else if (strcmp(k, "backend") == 0) {
		snprintf(s->backend, sizeof(s->backend), "%s", v);
		s->has_backend = true;
		if (group_settings_check(s, err, len) < 0)
			return -1;
	} else if (strcmp(k, "partition") == 0) {
		if (strlen(v) >= sizeof(s->partition)) {
			snprintf(err, len, "%s: at most %d characters: %s", key,
			         GROUP_PARTITION_MAX - 1, v);
			return -1;
		}
		snprintf(s->partition, sizeof(s->partition), "%s", v);
		s->has_partition = true;
		if (group_settings_check(s, err, len) < 0)
			return -1;
	} else if (strcmp(k, "paused") == 0) {
		if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0) {
			snprintf(err, len, "%s: yes or no: %s", key, v);
			return -1;
		}
		s->paused = strcmp(v, "yes") == 0;
		s->has_paused = true;
	} else {
		snprintf(err, len, "%s: unknown group setting (parallel, policy, "
		         "weights, backend, partition, paused)", key);
		return -1;
	}
	return 0;
}

/* ---- the journal's groups table ------------------------------------------- */

static void group_weights_text(const uint32_t w[QCLS_N], char *buf,
                               size_t len)
{
	snprintf(buf, len, "%u,%u,%u,%u", w[0], w[1], w[2], w[3]);
}

/* One row into s: 0, or -1 for a row no rokd wrote. */
static int group_row(sqlite3_stmt *st, struct group_settings *s)
{
	const unsigned char *w = sqlite3_column_text(st, 3);
	const unsigned char *b = sqlite3_column_text(st, 4);
	const unsigned char *p = sqlite3_column_text(st, 6);
	int64_t par = sqlite3_column_int64(st, 1);

	*s = (struct group_settings){
		.has_parallel = true, .has_policy = true, .has_weights = true,
		.has_backend = true, .has_paused = true, .has_partition = true,
		.parallel = (uint32_t)par,
		.policy = (int)sqlite3_column_int64(st, 2),
		.paused = sqlite3_column_int64(st, 5) != 0,
	};
	if (par < 0 || par > GROUP_PARALLEL_MAX || w == NULL || b == NULL ||
	    p == NULL || (size_t)sqlite3_column_bytes(st, 6) >=
	    sizeof(s->partition) ||
	    group_parse_weights((const char *)w, s->weights) < 0)
		return -1;
	snprintf(s->backend, sizeof(s->backend), "%s", (const char *)b);
	snprintf(s->partition, sizeof(s->partition), "%s", (const char *)p);
	char msg[160];
	return group_settings_check(s, msg, sizeof(msg));
}

int group_load(sqlite3 *db, char *err, size_t len)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct group *g = group_add("default", 7);

	if (g == NULL)
		goto nomem;
	g->q.parallel = cpus > 0 ? (uint32_t)cpus : 1;
	for (size_t i = 0; i < config.ngroups; i++) {
		const struct group_conf *c = &config.groups[i];
		if ((g = group_find(c->name, strlen(c->name))) == NULL &&
		    (g = group_add(c->name, strlen(c->name))) == NULL)
			goto nomem;
		group_apply(g, &c->set);
	}
	if (db == NULL)
		return 0;   /* durability = off: groups live in memory only */
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(db, "SELECT name, parallel, policy, weights, "
	                       "backend, paused, partition FROM groups", -1, &st,
	                       NULL) != SQLITE_OK) {
		snprintf(err, len, "journal: groups: %s", sqlite3_errmsg(db));
		return -1;
	}
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const unsigned char *name = sqlite3_column_text(st, 0);
		size_t n = (size_t)sqlite3_column_bytes(st, 0);
		struct group_settings s;
		if (name == NULL || !group_name_ok(name, n) ||
		    group_row(st, &s) < 0) {
			log_warnx("journal: groups: a row rokd cannot read (%.*s) "
			          "is left alone", (int)(n > 64 ? 64 : n),
			          name != NULL ? (const char *)name : "");
			continue;
		}
		if ((g = group_find((const char *)name, n)) == NULL &&
		    (g = group_add((const char *)name, n)) == NULL) {
			sqlite3_finalize(st);
			goto nomem;
		}
		group_apply(g, &s);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		snprintf(err, len, "journal: groups: %s", sqlite3_errmsg(db));
		return -1;
	}
	return 0;
nomem:
	snprintf(err, len, "groups: out of memory");
	return -1;
}

static int group_store_open(char *err, size_t len)
{
	char path[4200];

	if (groups.db != NULL)
		return 0;
	snprintf(path, sizeof(path), "%s/journal.db", config.state_dir);
	if (sqlite3_open_v2(path, &groups.db, SQLITE_OPEN_READWRITE |
	                    SQLITE_OPEN_NOMUTEX, journal_vfs()) != SQLITE_OK) {
		snprintf(err, len, "journal: %s", groups.db != NULL
		         ? sqlite3_errmsg(groups.db) : "cannot open");
		sqlite3_close(groups.db);
		groups.db = NULL;
		return -1;
	}
	char sql[96];
	snprintf(sql, sizeof(sql), "PRAGMA busy_timeout = 10000; "
	         "PRAGMA synchronous = %s", config.durability_full ? "FULL"
	                                                           : "NORMAL");
	if (journal_schema_exec(groups.db, sql, err, len) != SQLITE_OK) {
		sqlite3_close(groups.db);
		groups.db = NULL;
		return -1;
	}
	return 0;
}

int group_store(const char *name, const struct group_settings *s, char *err,
                size_t len)
{
	sqlite3_stmt *st;
	char w[64];

	if (config.durability_off)
		return 0;   /* no journal: the change lives in memory only */
	if (group_store_open(err, len) < 0)
		return -1;
	int rc = sqlite3_prepare_v2(groups.db, s != NULL
	        ? "INSERT OR REPLACE INTO groups (name, parallel, policy, "
	          "weights, backend, paused, partition) VALUES (?1, ?2, ?3, "
	          "?4, ?5, ?6, ?7)"
	        : "DELETE FROM groups WHERE name = ?1", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
		if (s != NULL) {
			group_weights_text(s->weights, w, sizeof(w));
			sqlite3_bind_int64(st, 2, s->parallel);
			sqlite3_bind_int64(st, 3, s->policy);
			sqlite3_bind_text(st, 4, w, -1, SQLITE_TRANSIENT);
			sqlite3_bind_text(st, 5, s->backend, -1,
			                  SQLITE_TRANSIENT);
			sqlite3_bind_int64(st, 6, s->paused);
			sqlite3_bind_text(st, 7, s->partition, -1,
			                  SQLITE_TRANSIENT);
		}
		rc = sqlite3_step(st);
		sqlite3_finalize(st);
	}
	if (rc != SQLITE_DONE) {
		snprintf(err, len, "journal: groups: %s",
		         sqlite3_errmsg(groups.db));
		return -1;
	}
	return 0;
}

void group_store_close(void)
{
	sqlite3_close(groups.db);
	groups.db = NULL;
}
