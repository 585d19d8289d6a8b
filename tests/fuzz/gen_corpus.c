/*
 * gen_corpus.c — writes the seed inputs of fuzz_rokd (tests/fuzz) into a
 * directory: usage `gen_corpus DIR`.
 *
 * Each seed is the byte stream of one connection after its hello: frames
 * (a 4-byte big-endian length and a packed rok.v1.Request) built with the
 * protobuf-c code generated from proto/rok.proto, so the seeds follow the
 * protocol as it is.  scripts/fuzz builds and runs this before every run.
 * Between them the seeds hold every request type and the values at the
 * edges the daemon must bound: durations near and past the limits of
 * duration_parse and of the timer wheel, timeouts of 0, 1, 2^63 and
 * 2^64-1 ms, ids 0 and 2^64-1, huge counts and limits, one id named
 * thousands of times, long and many args, every task kind and unknown
 * ones, and framing at its limits.  The names say what each one holds.
 *
 * The output is the same at every run (no clock, no randomness).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rok.pb-c.h"

static const char *gen_dir;
static uint8_t *gen_buf;
static size_t gen_len, gen_cap;
static uint64_t gen_next_req = 2;   /* the harness's hello is request 1 */

static void gen_fail(const char *what)
{
	fprintf(stderr, "gen_corpus: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void gen_raw(const void *p, size_t n)
{
	if (gen_len + n > gen_cap) {
		size_t cap = gen_cap > 0 ? gen_cap : 4096;
		while (cap < gen_len + n)
			cap *= 2;
		if ((gen_buf = realloc(gen_buf, cap)) == NULL)
			gen_fail("realloc");
		gen_cap = cap;
	}
	memcpy(gen_buf + gen_len, p, n);
	gen_len += n;
}

static void gen_be32(uint32_t v)
{
	uint8_t b[4] = { v >> 24, v >> 16, v >> 8, v };

	gen_raw(b, 4);
}

/* Appends one frame holding rq; a fresh request id unless rq has one. */
static void gen_frame(Rok__V1__Request *rq)
{
	if (rq->id == 0)
		rq->id = gen_next_req++;
	size_t n = rok__v1__request__get_packed_size(rq);
	uint8_t *p = malloc(n + 1);
	if (p == NULL)
		gen_fail("malloc");
	rok__v1__request__pack(rq, p);
	gen_be32((uint32_t)n);
	gen_raw(p, n);
	free(p);
}

/* Writes what was appended as DIR/name and starts the next seed. */
static void gen_emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void gen_emit(const char *fmt, ...)
{
	char name[200], path[4300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	snprintf(path, sizeof(path), "%s/%s", gen_dir, name);
	FILE *f = fopen(path, "wb");
	if (f == NULL || fwrite(gen_buf, 1, gen_len, f) != gen_len ||
	    fclose(f) != 0)
		gen_fail(path);
	gen_len = 0;
	gen_next_req = 2;
}

static ProtobufCBinaryData gen_bytes(const char *s)
{
	return (ProtobufCBinaryData){ strlen(s), (uint8_t *)(uintptr_t)s };
}

/* ---- requests ------------------------------------------------------------ */

static void gen_spawn(Rok__V1__TaskSpec *spec, int wait, uint64_t wait_ms)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__SpawnRequest sp = ROK__V1__SPAWN_REQUEST__INIT;

	sp.spec = spec;
	sp.wait = wait;
	sp.wait_timeout_ms = wait_ms;
	rq.body_case = ROK__V1__REQUEST__BODY_SPAWN;
	rq.spawn = &sp;
	gen_frame(&rq);
}

/* A spec of `kind` with one argument (or none: arg NULL). */
static void gen_spec(Rok__V1__TaskSpec *spec, ProtobufCBinaryData *args,
                     const char *kind, const char *arg)
{
	rok__v1__task_spec__init(spec);
	spec->kind = gen_bytes(kind);
	if (arg != NULL) {
		args[0] = gen_bytes(arg);
		spec->args = args;
		spec->n_args = 1;
	}
}

static void gen_spawn1(const char *kind, const char *arg, uint64_t timeout_ms,
                       int wait, uint64_t wait_ms)
{
	Rok__V1__TaskSpec spec;
	ProtobufCBinaryData args[1];

	gen_spec(&spec, args, kind, arg);
	spec.timeout_ms = timeout_ms;
	gen_spawn(&spec, wait, wait_ms);
}

/* The five requests that take a list of ids. */
enum { GEN_JOIN, GEN_RACE, GEN_CANCEL, GEN_STATUS, GEN_NIDS };
static const char *const gen_ids_name[GEN_NIDS] = {
	"join", "race", "cancel", "status",
};

static void gen_ids(int what, uint64_t *ids, size_t n, uint64_t timeout_ms)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__JoinRequest j = ROK__V1__JOIN_REQUEST__INIT;
	Rok__V1__RaceRequest r = ROK__V1__RACE_REQUEST__INIT;
	Rok__V1__CancelRequest c = ROK__V1__CANCEL_REQUEST__INIT;
	Rok__V1__StatusRequest s = ROK__V1__STATUS_REQUEST__INIT;

	switch (what) {
	case GEN_JOIN:
		j.ids = ids, j.n_ids = n, j.timeout_ms = timeout_ms;
		rq.body_case = ROK__V1__REQUEST__BODY_JOIN, rq.join = &j;
		break;
	case GEN_RACE:
		r.ids = ids, r.n_ids = n, r.timeout_ms = timeout_ms;
		r.cancel_rest = timeout_ms & 1;
		rq.body_case = ROK__V1__REQUEST__BODY_RACE, rq.race = &r;
		break;
	case GEN_CANCEL:
		c.ids = ids, c.n_ids = n;
		rq.body_case = ROK__V1__REQUEST__BODY_CANCEL, rq.cancel = &c;
		break;
	default:
		s.ids = ids, s.n_ids = n;
		rq.body_case = ROK__V1__REQUEST__BODY_STATUS, rq.status = &s;
		break;
	}
	gen_frame(&rq);
}

static void gen_list(int state, uint64_t after, uint32_t limit)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__ListRequest l = ROK__V1__LIST_REQUEST__INIT;

	l.state = state;
	l.after_id = after;
	l.limit = limit;
	rq.body_case = ROK__V1__REQUEST__BODY_LIST;
	rq.list = &l;
	gen_frame(&rq);
}

static void gen_logs(uint64_t id, int follow)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__LogsRequest l = ROK__V1__LOGS_REQUEST__INIT;

	l.task_id = id;
	l.follow = follow;
	rq.body_case = ROK__V1__REQUEST__BODY_LOGS;
	rq.logs = &l;
	gen_frame(&rq);
}

/* A watch of ids (n of them; 0: all), in a group (NULL: none), of one
 * state (0: all; any int, valid or not). */
static void gen_watch(uint64_t *ids, size_t n, const char *group, int state)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__WatchRequest w = ROK__V1__WATCH_REQUEST__INIT;
	Rok__V1__TaskState st = (Rok__V1__TaskState)state;

	w.ids = ids;
	w.n_ids = n;
	if (group != NULL) {
		w.group.data = (uint8_t *)(uintptr_t)group;
		w.group.len = strlen(group);
	}
	if (state != 0) {
		w.states = &st;
		w.n_states = 1;
	}
	rq.body_case = ROK__V1__REQUEST__BODY_WATCH;
	rq.watch = &w;
	gen_frame(&rq);
}

static void gen_prune(uint64_t older_ms, uint64_t keep, int keep_set)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__PruneRequest p = ROK__V1__PRUNE_REQUEST__INIT;

	p.older_than_ms = older_ms;
	p.keep = keep;
	p.keep_set = keep_set;
	rq.body_case = ROK__V1__REQUEST__BODY_PRUNE;
	rq.prune = &p;
	gen_frame(&rq);
}

static void gen_ping(size_t n)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__PingRequest p = ROK__V1__PING_REQUEST__INIT;
	uint8_t *b = calloc(1, n + 1);

	if (b == NULL)
		gen_fail("calloc");
	memset(b, 'p', n);
	p.payload = (ProtobufCBinaryData){ n, b };
	rq.body_case = ROK__V1__REQUEST__BODY_PING;
	rq.ping = &p;
	gen_frame(&rq);
	free(b);
}

static void gen_stats(void)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__StatsRequest s = ROK__V1__STATS_REQUEST__INIT;

	rq.body_case = ROK__V1__REQUEST__BODY_STATS;
	rq.stats = &s;
	gen_frame(&rq);
}

static void gen_hello(uint32_t version)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__Hello h = ROK__V1__HELLO__INIT;

	h.protocol_version = version;
	h.software_version = gen_bytes("gen_corpus 1");
	rq.body_case = ROK__V1__REQUEST__BODY_HELLO;
	rq.hello = &h;
	gen_frame(&rq);
}

/* ---- the seeds ----------------------------------------------------------- */

static const uint64_t gen_edge_u64[] = {
	0, 1, 2, 1000, INT32_MAX, UINT32_MAX, (uint64_t)INT64_MAX / 1000,
	(uint64_t)INT64_MAX / 1000000, (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1,
	UINT64_MAX - 1, UINT64_MAX,
};
#define GEN_NEDGE (sizeof(gen_edge_u64) / sizeof(gen_edge_u64[0]))

/* Durations for `sleep`: ordinary ones, the timer wheel's far levels, the
 * limits of duration_parse (INT64_MAX ns is 2562047h47m16s854775807ns),
 * and malformed ones. */
static const char *const gen_durations[] = {
	"0ms", "1ns", "1ms", "10ms", "250ms", "5s", "2m", "1h", "1h1m1s1ms1us1ns",
	"24h", "1440h", "8760h", "100000h", "2562047h", "2562047h47m16s",
	"2562047h47m16s854775807ns", "2562047h47m16s854775808ns",
	"9223372036s", "9223372037s", "9223372036854775807ns",
	"9223372036854775808ns", "18446744073709551615ns",
	"99999999999999999999h", "", "5", "s", "-1s", "1.5s", "1d", "1S",
	"0x10s", " 1s", "1s ",
};

static void gen_spawns(void)
{
	static const char *const kinds[] = { "noop", "echo", "exec", "sleep",
	                                     "", "bogus", "SLEEP" };
	char big[4096];

	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		gen_spawn1(kinds[i], NULL, 0, 0, 0);
		gen_emit("spawn_%zu_noarg", i);
		gen_spawn1(kinds[i], "10ms", 0, 1, 0);
		gen_emit("spawn_%zu_wait", i);
	}
	for (size_t i = 0; i < sizeof(gen_durations) / sizeof(gen_durations[0]);
	     i++) {
		gen_spawn1("sleep", gen_durations[i], 0, 0, 0);
		gen_emit("sleep_%zu", i);
		gen_spawn1("sleep", gen_durations[i], 0, 1, 50);
		gen_emit("sleep_%zu_wait50", i);
	}
	for (size_t i = 0; i < GEN_NEDGE; i++) {
		Rok__V1__TaskSpec spec;
		ProtobufCBinaryData args[1];

		gen_spawn1("sleep", "50ms", gen_edge_u64[i], 0, 0);
		gen_emit("timeout_%zu_sleep", i);
		gen_spawn1("echo", "hi", gen_edge_u64[i], 1, gen_edge_u64[i]);
		gen_emit("timeout_%zu_echo_wait", i);
		gen_spawn1("sleep", "1h", 0, 1, gen_edge_u64[i]);
		gen_emit("wait_timeout_%zu", i);
		gen_spec(&spec, args, "exec", "/bin/true");
		spec.kill_grace_ms = gen_edge_u64[i];
		spec.timeout_ms = gen_edge_u64[i];
		spec.retry = (uint32_t)gen_edge_u64[i];
		gen_spawn(&spec, 1, 0);
		gen_emit("exec_grace_%zu", i);
	}
	/* An exec spec with every field (exec tasks fail in the harness). */
	{
		Rok__V1__TaskSpec spec;
		ProtobufCBinaryData args[3] = { gen_bytes("sh"), gen_bytes("-c"),
		                                gen_bytes("echo $X") };
		ProtobufCBinaryData env[2] = { gen_bytes("X=1"),
		                               gen_bytes("PATH=/bin") };
		rok__v1__task_spec__init(&spec);
		spec.kind = gen_bytes("exec");
		spec.args = args, spec.n_args = 3;
		spec.env = env, spec.n_env = 2;
		spec.cwd = gen_bytes("/");
		spec.stdin = gen_bytes("input\n");
		spec.clean_env = 1;
		spec.retry = 1;
		gen_spawn(&spec, 1, 1000);
		gen_emit("exec_full");
	}
	/* Long and many args: a 3 KB echo, 2000 args (small enough that the
	 * fuzzer stays fast: tests/abuse.test sends the 100 KB ones). */
	{
		size_t n = 3 * 1024;
		char *s = malloc(n + 1);
		if (s == NULL)
			gen_fail("malloc");
		memset(s, 'e', n);
		s[n] = '\0';
		gen_spawn1("echo", s, 0, 1, 0);
		gen_emit("echo_3k");
		free(s);
		ProtobufCBinaryData *args = calloc(2000, sizeof(*args));
		if (args == NULL)
			gen_fail("calloc");
		for (size_t i = 0; i < 2000; i++)
			args[i] = gen_bytes("a");
		Rok__V1__TaskSpec spec;
		rok__v1__task_spec__init(&spec);
		spec.kind = gen_bytes("echo");
		spec.args = args, spec.n_args = 2000;
		gen_spawn(&spec, 0, 0);
		gen_emit("echo_2000_args");
		free(args);
	}
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	gen_spawn1("sleep", big, 0, 0, 0);
	gen_emit("sleep_4k_arg");
	/* Ids follow: a run's later spawns and the lookups of ids 1..16. */
	for (int i = 0; i < 8; i++)
		gen_spawn1(i & 1 ? "echo" : "sleep", i & 1 ? "v" : "30ms", 0, 0,
		           0);
	uint64_t ids[16];
	for (int i = 0; i < 16; i++)
		ids[i] = (uint64_t)i + 1;
	for (int w = 0; w < GEN_NIDS; w++)
		gen_ids(w, ids, 16, 100);
	gen_list(0, 0, 0);
	gen_logs(1, 1);
	gen_logs(2, 0);
	gen_emit("spawn_then_all");
}

static void gen_selects(void)
{
	for (size_t t = 0; t < GEN_NEDGE; t += 3) {
		Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
		Rok__V1__SelectRequest s = ROK__V1__SELECT_REQUEST__INIT;
		Rok__V1__TaskSpec specs[4], *ptrs[4];
		ProtobufCBinaryData args[4][1];
		const char *k[4] = { "sleep", "echo", "sleep", "noop" };
		const char *a[4] = { "1440h", "x", "10ms", NULL };

		for (int i = 0; i < 4; i++) {
			gen_spec(&specs[i], args[i], k[i], a[i]);
			ptrs[i] = &specs[i];
		}
		s.specs = ptrs;
		s.n_specs = 4;
		s.timeout_ms = gen_edge_u64[t];
		rq.body_case = ROK__V1__REQUEST__BODY_SELECT;
		rq.select = &s;
		gen_frame(&rq);
		gen_emit("select_%zu", t);
	}
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;
	Rok__V1__SelectRequest s = ROK__V1__SELECT_REQUEST__INIT;
	rq.body_case = ROK__V1__REQUEST__BODY_SELECT;
	rq.select = &s;
	gen_frame(&rq);
	gen_emit("select_empty");
}

static void gen_lookups(void)
{
	enum { MANY = 2000 };
	uint64_t *many = malloc(MANY * sizeof(*many));

	if (many == NULL)
		gen_fail("malloc");
	for (int w = 0; w < GEN_NIDS; w++) {
		for (size_t i = 0; i < GEN_NEDGE; i += 2) {
			uint64_t ids[3] = { gen_edge_u64[i], 1,
			                    gen_edge_u64[GEN_NEDGE - 1 - i] };
			gen_ids(w, ids, 3, gen_edge_u64[i]);
			gen_emit("%s_%zu", gen_ids_name[w], i);
		}
		gen_ids(w, NULL, 0, 0);
		gen_emit("%s_none", gen_ids_name[w]);
		/* The amplification shape: one echo task, named 2,000 times
		 * (tests/abuse.test does 20,000 with a 100 KB value). */
		gen_spawn1("echo", "amplify", 0, 1, 0);
		for (size_t i = 0; i < MANY; i++)
			many[i] = i % 3 == 0 ? UINT64_MAX : 1;
		gen_ids(w, many, MANY, 10);
		gen_emit("%s_2000", gen_ids_name[w]);
	}
	free(many);
	for (int st = 0; st <= 9; st++) {
		gen_list(st == 9 ? INT32_MAX : st, 0, 0);
		gen_emit("list_state_%d", st);
	}
	for (size_t i = 0; i < GEN_NEDGE; i += 2) {
		gen_list(0, gen_edge_u64[i], (uint32_t)gen_edge_u64[GEN_NEDGE - 1 - i]);
		gen_emit("list_%zu", i);
		gen_logs(gen_edge_u64[i], (int)(i / 2) & 1);
		gen_emit("logs_%zu", i);
		gen_prune(gen_edge_u64[i], gen_edge_u64[GEN_NEDGE - 1 - i],
		          (int)(i / 2) & 1);
		gen_emit("prune_%zu", i);
	}
	gen_prune(0, 0, 0);
	gen_emit("prune_default");
	/* watch: streams that stay open (all, a group) or end (ids). */
	for (int st = 0; st <= 9; st++) {
		gen_watch(NULL, 0, NULL, st == 9 ? INT32_MAX : st);
		gen_emit("watch_state_%d", st);
	}
	gen_watch(NULL, 0, "default", 0);
	gen_emit("watch_group_default");
	gen_watch(NULL, 0, "other", 0);
	gen_emit("watch_group_other");
	for (size_t i = 0; i < GEN_NEDGE; i++) {
		gen_spawn1("noop", NULL, 0, 0, 0);
		gen_watch((uint64_t *)(uintptr_t)&gen_edge_u64[i], 1, NULL, 0);
		gen_emit("watch_id_%zu", i);
	}
}

static void gen_misc(void)
{
	Rok__V1__Request rq = ROK__V1__REQUEST__INIT;

	gen_stats();
	gen_emit("stats");
	gen_ping(0);
	gen_emit("ping_empty");
	gen_ping(6000);
	gen_emit("ping_6k");
	static const uint32_t versions[] = { 0, 1, 2, UINT32_MAX };
	for (size_t i = 0; i < 4; i++) {
		gen_hello(versions[i]);
		gen_stats();
		gen_emit("hello_again_%zu", i);
	}
	/* Request ids at the edges, and a request with no body. */
	rq.id = UINT64_MAX;
	gen_frame(&rq);
	gen_stats();
	gen_emit("no_body");
	/* Framing: an empty frame, a length at the limit and past it, a
	 * frame cut short. */
	gen_be32(0);
	gen_emit("frame_empty");
	gen_be32(1u << 20);
	gen_emit("frame_max_cut");
	gen_be32((1u << 20) + 1);
	gen_emit("frame_over");
	gen_be32(UINT32_MAX);
	gen_emit("frame_4g");
	gen_stats();
	gen_len -= 1;
	gen_emit("frame_short");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gen_corpus DIR\n");
		return 2;
	}
	gen_dir = argv[1];
	gen_spawns();
	gen_selects();
	gen_lookups();
	gen_misc();
	free(gen_buf);
	return 0;
}
