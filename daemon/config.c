/*
 * config.c — rokd's settings: embedded defaults, then the config file, then
 * the environment and the command line (rokd.c applies those two).  The file
 * is `key = value` lines; `#` starts a comment; etc/rokd.conf lists every
 * key with its default.  Main thread, before the runtime starts.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rokd.h"

struct config config;
mode_t rokd_umask = 022;   /* set by main before anything else */

static char *config_strdup(const char *s)
{
	char *d = strdup(s);

	if (d == NULL)
		fatalx("out of memory");
	return d;
}

/* The per-user default paths of DESIGN.md §3. */
static void config_user_paths(struct config *c)
{
	const char *run = getenv("XDG_RUNTIME_DIR");
	const char *state = getenv("XDG_STATE_HOME");
	const char *home = getenv("HOME");
	char buf[4096];

	if (run != NULL && *run == '/')
		snprintf(buf, sizeof(buf), "%s/rok/rokd.sock", run);
	else
		snprintf(buf, sizeof(buf), "/tmp/rok-%u/rokd.sock",
		         (unsigned)geteuid());
	c->socket_path = config_strdup(buf);
	if (state != NULL && *state == '/')
		snprintf(buf, sizeof(buf), "%s/rok", state);
	else if (home != NULL && *home == '/')
		snprintf(buf, sizeof(buf), "%s/.local/state/rok", home);
	else
		snprintf(buf, sizeof(buf), "/tmp/rok-%u/state",
		         (unsigned)geteuid());
	c->state_dir = config_strdup(buf);
}

void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	c->root = geteuid() == 0;
	if (c->root) {
		c->socket_path = config_strdup("/run/rok/rokd.sock");
		c->state_dir = config_strdup("/var/lib/rok");
	} else {
		config_user_paths(c);
	}
	c->max_frame = 1u << 20;
	c->max_in_flight = 4096;
	c->max_output = 16u << 20;
	c->max_queued = 1000000;
	c->max_finished = 100000;
	c->max_connections = 4096;
	c->max_ids = 10000;
	/* Per uid: a quarter of max_connections, so one user cannot take
	 * them all; waits and streams bounded per user as well as per
	 * connection. */
	c->max_connections_per_user = 1024;
	c->max_waits_per_user = 16384;
	c->max_wait_ids_per_user = 1000000;
	c->max_followers_per_user = 256;
	/* 16 full connections' worth, far above what clients that read
	 * leave queued; without it, 1024 connections at just under
	 * max_output each held 16 GiB. */
	c->max_output_per_user = 256u << 20;
	/* Tasks per uid: a quarter of the table's caps, so that one user's
	 * flood leaves room (and results) for the others. */
	c->max_queued_per_user = 250000;
	c->max_running_per_user = 250000;
	c->max_finished_per_user = 25000;
	/* Counts alone let one user's tasks hold a frame each: 250,000
	 * queued tasks of 1 MiB of arguments. */
	c->max_task_bytes_per_user = 1ull << 30;
	c->keep_finished_per_user = 250000;
	c->watch_lag_max = 16384;
	c->max_task_output = 64ull << 20;
	c->output_keep_free = CONFIG_KEEP_FREE_AUTO;
	c->max_kept_output_per_user = CONFIG_KEPT_AUTO;
	c->kill_grace_ms = 5000;
	c->slurm_poll_interval_ms = 1000;
	/* journal */
	c->durability_full = true;
	c->keep_finished = 1000000;
	c->keep_finished_for_ns = 30 * 24 * 3600 * 1000000000ll;
	/* scheduling: one class up per minute; low-class children nice 10 */
	c->aging_ns = 60 * 1000000000ll;
	c->nice[3] = 10;
}

void config_free(struct config *c)
{
	free(c->socket_path);
	free(c->state_dir);
	free(c->socket_group);
	free(c->groups);
	free(c->metrics_listen);
	free(c->slurm_output_dir);
	memset(c, 0, sizeof(*c));
}

int duration_parse(const char *s, size_t len, int64_t *ns)
{
	static const struct {
		const char *unit;
		int64_t ns;
	} units[] = {
		{ "ms", 1000000 }, { "us", 1000 }, { "ns", 1 },
		{ "s", 1000000000 }, { "m", 60000000000 }, { "h", 3600000000000 },
	};
	size_t i = 0;
	int64_t total = 0;

	if (len == 0)
		return -EINVAL;
	while (i < len) {
		if (!isdigit((unsigned char)s[i]))
			return -EINVAL;
		int64_t n = 0;
		while (i < len && isdigit((unsigned char)s[i])) {
			if (n > (INT64_MAX - 9) / 10)
				return -ERANGE;
			n = n * 10 + (s[i++] - '0');
		}
		size_t k;
		for (k = 0; k < sizeof(units) / sizeof(units[0]); k++) {
			size_t ul = strlen(units[k].unit);
			if (len - i >= ul && memcmp(s + i, units[k].unit, ul) == 0 &&
			    (len - i == ul || isdigit((unsigned char)s[i + ul])))
				break;
		}
		if (k == sizeof(units) / sizeof(units[0]))
			return -EINVAL;
		if (n > (INT64_MAX - total) / units[k].ns)
			return -ERANGE;
		total += n * units[k].ns;
		i += strlen(units[k].unit);
	}
	if ((uint64_t)total / 1000000 > DURATION_MAX_MS)
		return -ERANGE;
	*ns = total;
	return 0;
}

int64_t duration_ns(uint64_t ms)
{
	return ms > (uint64_t)INT64_MAX / 1000000 ? INT64_MAX
	                                          : (int64_t)ms * 1000000;
}

int duration_check_ms(uint64_t ms, const char *what, char *err, size_t len)
{
	if (ms <= DURATION_MAX_MS)
		return 0;
	snprintf(err, len, "%s: %llu ms is longer than the maximum, %s", what,
	         (unsigned long long)ms, DURATION_MAX_TEXT);
	return -1;
}

static int config_uint(const char *v, uint64_t max, uint64_t *out)
{
	char *end;

	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0' || n > max ||
	    *v == '-')
		return -1;
	*out = n;
	return 0;
}

/* Sets one key; 0 or -1 with a message. */
static int config_set(struct config *c, const char *key, const char *v,
                      char *err, size_t len)
{
	static const struct {
		const char *key;
		size_t off;
		int size;              /* 0: string, -1: duration in ms, -2: duration
		                          in ns where 0 also means none, else bytes
		                          of integer */
		uint64_t min, max;     /* integers: 0 only where it means
		                          something (CFG_U0) */
	} keys[] = {
#define CFG_U(k, f, m) { k, offsetof(struct config, f), sizeof(((struct config *)0)->f), 1, m }
#define CFG_U0(k, f, m) { k, offsetof(struct config, f), sizeof(((struct config *)0)->f), 0, m }
#define CFG_S(k, f) { k, offsetof(struct config, f), 0, 0, 0 }
#define CFG_D(k, f) { k, offsetof(struct config, f), -1, 0, 0 }   /* ms */
#define CFG_DNS(k, f) { k, offsetof(struct config, f), -2, 0, 0 } /* ns, or 0 */
		CFG_S("socket", socket_path),
		CFG_S("state_dir", state_dir),
		CFG_S("socket_group", socket_group),
		CFG_S("metrics_listen", metrics_listen),
		CFG_U0("workers", workers, 1024),      /* 0: one per CPU */
		CFG_U("max_frame", max_frame, 64u << 20),
		CFG_U("max_in_flight", max_in_flight, 1u << 20),
		CFG_U("max_output", max_output, 1ull << 32),
		CFG_U("max_queued", max_queued, 1ull << 32),
		CFG_U("max_finished", max_finished, 1ull << 32),
		CFG_U("max_connections", max_connections, 1u << 20),
		CFG_U("max_ids", max_ids, 1u << 20),
		CFG_U("max_connections_per_user", max_connections_per_user,
		      1u << 20),
		CFG_U("max_waits_per_user", max_waits_per_user, 1u << 30),
		CFG_U("max_wait_ids_per_user", max_wait_ids_per_user,
		      1ull << 40),
		CFG_U("max_followers_per_user", max_followers_per_user,
		      1u << 20),
		CFG_U("max_output_per_user", max_output_per_user, 1ull << 40),
		CFG_U("max_queued_per_user", max_queued_per_user, 1ull << 32),
		CFG_U("max_running_per_user", max_running_per_user,
		      1ull << 32),
		CFG_U("max_finished_per_user", max_finished_per_user,
		      1ull << 32),
		CFG_U("max_task_bytes_per_user", max_task_bytes_per_user,
		      1ull << 44),
		CFG_U("keep_finished_per_user", keep_finished_per_user,
		      1ull << 40),
		CFG_U("watch_lag_max", watch_lag_max, 1u << 24),
		/* exec tasks */
		CFG_U("max_task_output", max_task_output, 1ull << 40),
		CFG_U0("output_keep_free", output_keep_free, 1ull << 50),
		CFG_U("max_kept_output_per_user", max_kept_output_per_user,
		      1ull << 50),
		CFG_D("kill_grace", kill_grace_ms),
		/* journal */
		CFG_U("keep_finished", keep_finished, 1ull << 40),
		CFG_DNS("keep_finished_for", keep_finished_for_ns),
		/* scheduling */
		CFG_DNS("aging", aging_ns),
		/* slurm groups */
		CFG_D("slurm_poll_interval", slurm_poll_interval_ms),
		CFG_S("slurm_output_dir", slurm_output_dir),
#undef CFG_DNS
#undef CFG_D
#undef CFG_U0
#undef CFG_U
#undef CFG_S
	};

	/* scheduling: group.NAME.KEY, nice_CLASS (group.c) */
	if (strncmp(key, "group.", 6) == 0 || strncmp(key, "nice_", 5) == 0)
		return group_config_set(c, key, v, err, len);
	/* journal: a key whose value is a word */
	if (strcmp(key, "durability") == 0) {
		if (strcmp(v, "full") != 0 && strcmp(v, "normal") != 0 &&
		    strcmp(v, "off") != 0) {
			snprintf(err, len, "durability: expected full, normal or "
			         "off, not %s", v);
			return -1;
		}
		c->durability_full = strcmp(v, "full") == 0;
		c->durability_off = strcmp(v, "off") == 0;
		return 0;
	}
	if (strcmp(key, "journal_lock") == 0) {
		if (strcmp(v, "exclusive") != 0 && strcmp(v, "shared") != 0) {
			snprintf(err, len, "journal_lock: expected exclusive or "
			         "shared, not %s", v);
			return -1;
		}
		c->journal_shared = strcmp(v, "shared") == 0;
		return 0;
	}
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		if (strcmp(keys[i].key, key) != 0)
			continue;
		char *field = (char *)c + keys[i].off;
		if (keys[i].size == 0) {
			char **s = (char **)(void *)field;
			free(*s);
			*s = config_strdup(v);
			return 0;
		}
		if (keys[i].size < 0) {   /* a duration */
			bool ns_zero = keys[i].size == -2 && strcmp(v, "0") == 0;
			int64_t ns = 0;
			int e = ns_zero ? 0 : duration_parse(v, strlen(v), &ns);
			if (e == -ERANGE) {
				snprintf(err, len, "%s: longer than the maximum, "
				         "%s: %s", key, DURATION_MAX_TEXT, v);
				return -1;
			}
			if (e < 0) {
				snprintf(err, len, "%s: not a duration (250ms, "
				         "5s, 2m)%s: %s", key,
				         keys[i].size == -2 ? " nor 0" : "", v);
				return -1;
			}
			if (keys[i].size == -2)
				*(int64_t *)(void *)field = ns;
			else
				*(uint64_t *)(void *)field = (uint64_t)(ns / 1000000);
			return 0;
		}
		uint64_t n;
		if (config_uint(v, keys[i].max, &n) < 0 || n < keys[i].min) {
			snprintf(err, len, "%s: not a number in range: %s", key, v);
			return -1;
		}
		if (keys[i].size == 8)
			*(uint64_t *)(void *)field = n;
		else
			*(uint32_t *)(void *)field = (uint32_t)n;
		return 0;
	}
	snprintf(err, len, "unknown setting: %s", key);
	return -1;
}

static char *config_trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int config_load(struct config *c, const char *path, char *err, size_t len)
{
	FILE *f = fopen(path, "re");
	char line[4096];
	unsigned lineno = 0;

	if (f == NULL) {
		snprintf(err, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash != NULL)
			*hash = '\0';
		char *s = config_trim(line);
		if (*s == '\0')
			continue;
		char *eq = strchr(s, '=');
		char msg[256];
		if (eq == NULL) {
			snprintf(err, len, "%s:%u: expected key = value", path,
			         lineno);
			fclose(f);
			return -1;
		}
		*eq = '\0';
		if (config_set(c, config_trim(s), config_trim(eq + 1), msg,
		               sizeof(msg)) < 0) {
			snprintf(err, len, "%s:%u: %s", path, lineno, msg);
			fclose(f);
			return -1;
		}
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		snprintf(err, len, "%s: read error", path);
		return -1;
	}
	return 0;
}
