/*
 * slurm.c — the Slurm backend: an exec task of a group whose backend is
 * slurm runs as one Slurm batch job.
 *
 * Commands, not libslurm: rokd runs sbatch --parsable, squeue and scancel
 * (slurm-cmd.c) on the blocking pool and on the watcher's thread.
 * libslurm's ABI changes with every Slurm release (libslurm.so.37 in
 * 22.05, .38 in 23.02, ...), so a rokd linked to it would break at the
 * cluster's next upgrade; the commands' options and --parsable output are
 * stable.  The price, a fork and exec per call, is paid once per
 * submission and once per interval for all jobs together (slurm-watch.c),
 * which is small next to a batch job's own start.  bench/slurm-compare
 * (single-node test cluster, loaded 2-core machine, 2026-12-01): 200
 * `true` jobs took 21.2 s through a rok Slurm group against 20.2 s as 200
 * direct `sbatch --wrap true` (ratio 1.05), and rokd spent 5.2 ms of CPU
 * per job (its fork + exec of sbatch, the squeues, the journal).
 *
 * A task: kind_spawn hands an exec spec of a slurm group here.  Its body
 * submits the job on the blocking pool (as the task's user: rokd as root
 * submits with the submitter's uid, gid and groups; as a user, as itself),
 * named rok-TAG-ID-RUN (slurm-watch.c), in its group's partition if it
 * has one, with its stdout and stderr going to <dir>/ID/{out,err} (dir:
 * slurm_output_dir, by default <state_dir>/slurm; ID/ is the user's:
 * slurmd writes there as the user, so dir must be on a file system the
 * nodes share and, as root with other users' tasks, reachable by them;
 * the state directory is private).  Then it wakes every
 * slurm_poll_interval: it copies what the two files gained into the
 * task's output file (exec-output.c), so `rokctl logs` and `logs -f` work
 * as for local tasks, and reads the job's state from the watcher's table.
 * The task shows queued (kind.own_running) until Slurm runs the job, its
 * `waiting` saying why ("Slurm job 12: pending (Priority)"); RUNNING marks
 * it running.  cancel and timeout: `scancel --full -s TERM` (a pending
 * job: plain scancel), then `scancel --full -s KILL` after the kill grace.
 *
 * slurmctld away: an sbatch that cannot reach it (slurm_unreachable) does
 * not fail the task, which stays queued ("not submitted to Slurm yet")
 * and tries again every interval until sbatch answers: an acknowledged
 * spawn is never lost.  Each try after the first looks for a job of the
 * run's name first, so a try whose answer was lost is not submitted
 * twice.  Any other refusal (an unknown partition, a limit) fails the
 * task with sbatch's message.
 *
 * Crashes: the job id is journaled (tasks.slurm_job; a retry clears it)
 * and every job is named after its task and run.  When rokd stops, its
 * jobs run on (slurm_shutdown: no scancel); at the next start, recovery
 * queues the unfinished tasks of slurm groups again (journal-recover.c),
 * and a task with an id from before the restart first asks squeue for a
 * job of its run's name and adopts it: a run is never submitted twice, a
 * job that ran meanwhile reports its result, and a retry never takes its
 * failed run's job for its own.  Limit: slurmctld forgets finished jobs after
 * MinJobAge (no accounting is asked for); a task whose journaled job is
 * no longer known then fails with that reason rather than run twice.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec.h"
#include "group.h"
#include "rok/blocking.h"
#include "journal.h"
#include "rokd.h"
#include "slurm.h"

static atomic_bool slurm_stopping;
static uint64_t slurm_first_new_id = 1;   /* set before any task starts */
/* The journaled job ids of the tasks recovery queues again.  Written by
 * recovery (main thread) before it starts any task, then only read, by
 * the init of a recovered task's runs on any thread (a retry, a gate
 * release), until slurm_free after rok_stop. */
static struct slurm_known {
	uint64_t id;
	uint32_t run;               /* the run the job was submitted for */
	uint32_t jobid;
} *slurm_known;
static size_t slurm_nknown, slurm_known_cap;

enum { SLURM_PH_RUN, SLURM_PH_TERM, SLURM_PH_KILL };

/* What the submission needs, owned by the blocking job that submits. */
struct slurm_sub {
	uint64_t id;
	uint32_t run;
	uid_t uid;
	bool adopt;                 /* look for the job first: an id from
	                               before the restart, or a try again */
	uint32_t known_job;         /* and its journaled job; 0: none */
	char **argv, **env;
	char *cwd;
	uint32_t cpus;
	uint64_t mem_mib, time_min;
	char partition[GROUP_PARTITION_MAX]; /* its group's; "": default */
	char dir[512];
	/* Out. */
	int64_t jobid;              /* > 0: submitted or adopted */
	bool again;                 /* not submitted, for now: slurmctld
	                               could not be reached */
	bool lost;                  /* known_job is no longer known: how
	                               it ended cannot be told */
	char reason[200];
};

struct slurm_job {
	struct rtask *rec;
	uint64_t id;
	struct slurm_sub *sub;      /* until submitted */
	rok_task *submit;           /* the blocking job */
	rok_join_op join;
	uint32_t jobid;
	char why[200];              /* what `waiting` shows now */
	bool running;               /* marked running (tasktab_running) */
	bool warned;                /* logged that slurmctld is away */
	bool lost;                  /* its job forgotten by Slurm, or not
	                               watched: failed, with no retry (it
	                               may have run) */
	uid_t owner;                /* whose out and err may be read */
	int fd[2];                  /* out, err; -1: not open yet */
	struct exec_out out;
	int64_t timeout_ns, grace_ns, to_deadline, grace_deadline;
	rok_sleep_op sleep;
	_Atomic bool cancel_req;
	int phase, end_how;
	bool failed;
	char reason[200];
	struct slurm_jobstate js;
};

struct slurm_frame {
	struct slurm_job *job;      /* owned; freed by slurm_finish */
};

void slurm_shutdown(void)
{
	atomic_store(&slurm_stopping, true);
}

void slurm_free(void)
{
	free(slurm_known);
	slurm_known = NULL;
	slurm_nknown = slurm_known_cap = 0;
}

void slurm_set_first_new_id(uint64_t id)
{
	slurm_first_new_id = id;
}

void slurm_note_job(uint64_t id, uint32_t run, uint32_t jobid)
{
	if (slurm_nknown == slurm_known_cap) {
		size_t cap = slurm_known_cap != 0 ? slurm_known_cap * 2 : 64;
		void *v = realloc(slurm_known, cap * sizeof(*slurm_known));
		if (v == NULL) {
			log_warnx("slurm: out of memory; task %llu's job %u is "
			          "adopted by name only", (unsigned long long)id,
			          jobid);
			return;
		}
		slurm_known = v;
		slurm_known_cap = cap;
	}
	slurm_known[slurm_nknown++] = (struct slurm_known){ id, run, jobid };
}

/* The job id recovery noted for run `run` of id, or 0.  Only that run's:
 * a retry after it (the adopted job failed) has no job yet, and is
 * submitted.  Ids come in increasing order (a damaged journal's may
 * repeat): the last one noted is the one looked for. */
static uint32_t slurm_known_job(uint64_t id, uint32_t run)
{
	for (size_t i = slurm_nknown; i > 0; i--)
		if (slurm_known[i - 1].id == id && slurm_known[i - 1].run == run)
			return slurm_known[i - 1].jobid;
	return 0;
}

static void slurm_sub_free(struct slurm_sub *s)
{
	if (s == NULL)
		return;
	exec_args_strv_free(s->argv);
	exec_args_strv_free(s->env);
	free(s->cwd);
	free(s);
}

/* ---- submitting (blocking pool) ------------------------------------------ */

/* argv as a sh script: exec 'a' 'b' ... (single quotes, ' as '\''). */
static char *slurm_script(char **argv)
{
	size_t n = 64;
	for (char **a = argv; *a != NULL; a++)
		n += strlen(*a) * 4 + 3;
	char *s = malloc(n), *p = s;
	if (s == NULL)
		return NULL;
	p += sprintf(p, "#!/bin/sh\nexec");
	for (char **a = argv; *a != NULL; a++) {
		*p++ = ' ';
		*p++ = '\'';
		for (const char *c = *a; *c; c++) {
			if (*c == '\'') {
				memcpy(p, "'\\''", 4);
				p += 4;
			} else {
				*p++ = *c;
			}
		}
		*p++ = '\'';
	}
	strcpy(p, "\n");
	return s;
}

/*
 * Whether sbatch's message says slurmctld could not be reached (down,
 * restarting, a timeout): then the task waits and tries again, and is
 * never failed for it.  Any other refusal (an unknown partition, a limit)
 * is final.  A timeout may hide a job that was made: the next try looks
 * for it first (slurm_sub.adopt).  Slurm's messages, from slurm_strerror.
 */
static bool slurm_unreachable(const char *out)
{
	static const char *const says[] = {
		"Unable to contact slurm controller",
		"Communication connection failure",
		"Communication send failure",
		"Communication receive failure",
		"Socket timed out",
		"Zero Bytes were transmitted or received",
		"backup controller in standby mode",
		"Resource temporarily unavailable",
	};
	for (size_t i = 0; i < sizeof(says) / sizeof(says[0]); i++)
		if (strstr(out, says[i]) != NULL)
			return true;
	return false;
}

static void *slurm_submit_main(void *arg)
{
	struct slurm_sub *s = arg;
	struct exec_user u = { 0 };
	bool as_user = config.root && s->uid != 0;
	char name[64], out[4096], opath[600], epath[600];
	char cpus[32], mem[40], tim[40], part[80];
	char *script = NULL, **env = NULL;
	int err;

	s->again = false;
	s->lost = false;
	s->reason[0] = '\0';
	slurm_watch_name(s->id, s->run, name, sizeof(name));
	if (slurm_cmd_path("sbatch") == NULL) {
		snprintf(s->reason, sizeof(s->reason), "sbatch is not installed");
		return s;
	}
	if (s->adopt) {
		/* Submitted before rokd stopped, or by a try whose answer
		 * was lost?  Then that job is this run's: adopted, never
		 * submitted again. */
		int64_t j = slurm_watch_lookup(s->id, s->run,
		                               as_user ? s->uid : geteuid());
		if (j < 0) {
			snprintf(s->reason, sizeof(s->reason), "squeue failed "
			         "(is slurmctld up?): cannot tell whether job "
			         "%s was submitted", name);
			s->again = true;
			return s;
		}
		if (j > 0) {
			s->jobid = j;
			return s;
		}
		if (s->known_job != 0) {
			/* Submitted, and forgotten by slurmctld since (it
			 * keeps finished jobs MinJobAge seconds). */
			snprintf(s->reason, sizeof(s->reason), "Slurm job %u, "
			         "submitted before rokd restarted, is no longer "
			         "known to Slurm (it ended longer than MinJobAge "
			         "ago?); not submitted again", s->known_job);
			s->lost = true;
			return s;
		}
	}
	if (as_user && (err = exec_user_get(s->uid, &u)) < 0) {
		snprintf(s->reason, sizeof(s->reason), "looking up uid %u: %s",
		         (unsigned)s->uid, strerror(-err));
		return s;
	}
	/* The output directory, the user's: slurmd writes there as them.
	 * Made and handed over relative to the held output directory,
	 * never following a link (slurm_watch_init). */
	char sub[24];
	int base = slurm_watch_dirfd(), tfd = -1;
	snprintf(sub, sizeof(sub), "%llu", (unsigned long long)s->id);
	if ((mkdirat(base, sub, 0700) != 0 && errno != EEXIST) ||
	    (tfd = openat(base, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	                  O_CLOEXEC)) < 0 ||
	    (as_user && fchown(tfd, u.uid, u.gid) != 0)) {
		snprintf(s->reason, sizeof(s->reason), "%.120s: %s", s->dir,
		         strerror(errno));
		if (tfd >= 0)
			close(tfd);
		goto out;
	}
	(void)unlinkat(tfd, "out", 0);
	(void)unlinkat(tfd, "err", 0);
	close(tfd);
	snprintf(opath, sizeof(opath), "%s/out", s->dir);
	snprintf(epath, sizeof(epath), "%s/err", s->dir);
	if ((script = slurm_script(s->argv)) == NULL) {
		snprintf(s->reason, sizeof(s->reason), "out of memory");
		goto out;
	}
	/* The task's environment, and SLURM_CONF from rokd's when the task
	 * has none (the cluster rokd was pointed at). */
	size_t ne = 0;
	while (s->env[ne] != NULL)
		ne++;
	if ((env = calloc(ne + 2, sizeof(*env))) == NULL) {
		snprintf(s->reason, sizeof(s->reason), "out of memory");
		goto out;
	}
	memcpy(env, s->env, ne * sizeof(*env));
	const char *conf = getenv("SLURM_CONF");
	char confv[600];
	if (conf != NULL && exec_args_getenv(s->env, "SLURM_CONF") == NULL) {
		snprintf(confv, sizeof(confv), "SLURM_CONF=%s", conf);
		env[ne++] = confv;
	}
	char *argv[20];
	int k = 0;
	argv[k++] = (char *)slurm_cmd_path("sbatch");
	argv[k++] = (char *)"--parsable";
	argv[k++] = (char *)"--export=ALL";
	argv[k++] = (char *)"-J";
	argv[k++] = name;
	argv[k++] = (char *)"-o";
	argv[k++] = opath;
	argv[k++] = (char *)"-e";
	argv[k++] = epath;
	argv[k++] = (char *)"-D";
	argv[k++] = s->cwd != NULL ? s->cwd : (char *)"/";
	if (s->cpus > 0) {
		snprintf(cpus, sizeof(cpus), "--cpus-per-task=%u", s->cpus);
		argv[k++] = cpus;
	}
	if (s->mem_mib > 0) {
		snprintf(mem, sizeof(mem), "--mem=%lluM",
		         (unsigned long long)s->mem_mib);
		argv[k++] = mem;
	}
	if (s->time_min > 0) {
		snprintf(tim, sizeof(tim), "--time=%llu",
		         (unsigned long long)s->time_min);
		argv[k++] = tim;
	}
	if (s->partition[0] != '\0') {
		snprintf(part, sizeof(part), "--partition=%s", s->partition);
		argv[k++] = part;
	}
	argv[k] = NULL;
	int st = slurm_cmd_run(argv, env, as_user ? &u : NULL, script, out,
	                       sizeof(out));
	char *end;
	long long j = strtoll(out, &end, 10);
	if (st == 0 && j > 0 && j <= UINT32_MAX &&
	    (*end == '\0' || *end == '\n' || *end == ';')) {
		s->jobid = j;
	} else {
		size_t l = strlen(out);
		while (l > 0 && out[l - 1] == '\n')
			out[--l] = '\0';
		if (st < 0)
			snprintf(s->reason, sizeof(s->reason), "sbatch: %s",
			         slurm_cmd_strerror(st));
		else
			snprintf(s->reason, sizeof(s->reason), "sbatch "
			         "failed (%d): %.160s", st, out);
		s->again = st < 0 || slurm_unreachable(out);
	}
out:
	free(env);
	free(script);
	exec_user_done(&u);
	return s;
}

/* Detached: scancel with `args` (borrowed static strings) for jobid. */
struct slurm_cancel {
	uint32_t jobid;
	const char *a1, *a2;
};

static void *slurm_cancel_main(void *arg)
{
	struct slurm_cancel *c = arg;
	char id[16], out[1024];
	char *argv[6];
	int k = 0;

	snprintf(id, sizeof(id), "%u", c->jobid);
	argv[k++] = (char *)slurm_cmd_path("scancel");
	if (c->a1 != NULL)
		argv[k++] = (char *)c->a1;
	if (c->a2 != NULL)
		argv[k++] = (char *)c->a2;
	argv[k++] = id;
	argv[k] = NULL;
	int st = argv[0] != NULL ? slurm_cmd_run(argv, NULL, NULL, NULL, out,
	                                         sizeof(out)) : -ENOENT;
	if (st != 0)
		log_warnx("slurm: scancel of job %u failed (%d): %.200s",
		          c->jobid, st, out);
	free(c);
	return NULL;
}

static void slurm_scancel(uint32_t jobid, const char *a1, const char *a2)
{
	struct slurm_cancel *c = malloc(sizeof(*c));

	if (c == NULL) {
		log_warnx("slurm: out of memory; job %u not signalled", jobid);
		return;
	}
	*c = (struct slurm_cancel){ jobid, a1, a2 };
	if (rok_spawn_blocking(NULL, slurm_cancel_main, c) < 0) {
		log_warnx("slurm: job %u not signalled (no blocking thread)",
		          jobid);
		free(c);
	}
}

/* A submission whose task went away first: its job, if any, is
 * cancelled (unless rokd is stopping: then the next start adopts it). */
static void *slurm_orphan_main(void *arg)
{
	rok_task *t = arg;
	void *v = NULL;

	if (rok_task_wait(t, &v) == 0 && v != NULL) {
		struct slurm_sub *s = v;
		if (s->jobid > 0 && !atomic_load(&slurm_stopping))
			slurm_scancel((uint32_t)s->jobid, NULL, NULL);
		slurm_sub_free(s);
	}
	rok_task_unref(t);
	return NULL;
}

/* ---- the task (worker) ----------------------------------------------------- */

static void slurm_init_frame(void *frame, struct rtask *r, const TaskSpec *spec)
{
	struct slurm_frame *f = frame;
	struct slurm_job *j = calloc(1, sizeof(*j));
	struct slurm_sub *s = calloc(1, sizeof(*s));

	f->job = NULL;
	if (j == NULL || s == NULL) {
		free(j);
		free(s);
		return;
	}
	j->rec = r;
	j->id = s->id = tasktab_id(r);
	s->run = tasktab_run(r);
	s->uid = tasktab_uid(r);
	s->adopt = j->id < slurm_first_new_id;
	if (s->adopt)
		s->known_job = slurm_known_job(j->id, s->run);
	s->argv = exec_args_strv(spec->args, spec->n_args);
	s->env = exec_args_strv(spec->env, spec->n_env);
	if (spec->cwd.len > 0)
		s->cwd = exec_args_strndup(&spec->cwd);
	s->cpus = spec->cpus;
	queue_group_partition(spec, s->partition, sizeof(s->partition));
	s->mem_mib = spec->mem_mib;
	s->time_min = spec->time_limit_ms / 60000 +
	              (spec->time_limit_ms % 60000 != 0);
	snprintf(s->dir, sizeof(s->dir), "%s/%llu", slurm_watch_dir(),
	         (unsigned long long)j->id);
	j->fd[0] = j->fd[1] = -1;
	j->owner = config.root ? s->uid : geteuid();
	j->timeout_ns = duration_ns(spec->timeout_ms);
	j->grace_ns = duration_ns(spec->kill_grace_ms != 0 ? spec->kill_grace_ms
	                          : CONFIG_LIMIT(kill_grace_ms));
	j->end_how = RT_SUCCEEDED;
	atomic_init(&j->cancel_req, false);
	exec_out_init(&j->out, j->id, s->uid,
	              CONFIG_LIMIT(max_task_output));
	j->sub = s;
	if (s->argv == NULL || s->env == NULL ||
	    (spec->cwd.len > 0 && s->cwd == NULL)) {
		slurm_sub_free(s);
		free(j);
		return;
	}
	f->job = j;
}

static void slurm_fail(struct slurm_job *j, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void slurm_fail(struct slurm_job *j, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(j->reason, sizeof(j->reason), fmt, ap);
	va_end(ap);
	j->failed = true;
}

/* Copies what out and err gained into the task's output file. */
static void slurm_tail(struct slurm_job *j)
{
	static const char *const names[2] = { "out", "err" };
	uint8_t buf[32768];

	for (int i = 0; i < 2; i++) {
		if (j->fd[i] < 0) {
			char p[64];
			snprintf(p, sizeof(p), "%llu/%s",
			         (unsigned long long)j->id, names[i]);
			/* Through the held output directory, as its task
			 * directory was made (slurm_submit_main).  ID/ is the
			 * user's: as root, rokd must not follow a link they
			 * put there (to a file only root may read), nor read
			 * a file that is not theirs (a hard link): it is left
			 * unread, and tried again. */
			j->fd[i] = openat(slurm_watch_dirfd(), p, O_RDONLY |
			                  O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
			if (j->fd[i] < 0)
				continue;
			struct stat st;
			if (fstat(j->fd[i], &st) != 0 || !S_ISREG(st.st_mode) ||
			    st.st_uid != j->owner) {
				close(j->fd[i]);
				j->fd[i] = -1;
				continue;
			}
		}
		/* Bounded per wake: a job that writes fast cannot hold
		 * the worker; the rest comes at the next wake. */
		for (int reads = 0; reads < 64; reads++) {
			ssize_t n = read(j->fd[i], buf, sizeof(buf));
			if (n <= 0)
				break;
			exec_out_append(&j->out, i + 1, buf, (size_t)n);
		}
	}
}

static bool slurm_ended(int state)
{
	return state >= SLURM_COMPLETED;
}

/* What the task's `waiting` shows, when it changes (one table lock). */
static void slurm_set_why(struct slurm_job *j, const char *why)
{
	if (strcmp(j->why, why) == 0)
		return;
	snprintf(j->why, sizeof(j->why), "%s", why);
	tasktab_set_why(j->rec, why);
}

/* After each look at the job: RUNNING marks the task running (once);
 * before that it is queued, waiting for Slurm, which says why. */
static void slurm_show(struct slurm_job *j)
{
	char why[sizeof(j->why)];

	if (j->running)
		return;
	if (j->js.state == SLURM_RUNNING) {
		j->running = true;
		tasktab_set_why(j->rec, NULL);
		tasktab_running(j->rec);
		return;
	}
	if (j->js.state == SLURM_PENDING)
		snprintf(why, sizeof(why), "Slurm job %u: pending%s%s%s",
		         j->jobid, j->js.why[0] != '\0' ? " (" : "", j->js.why,
		         j->js.why[0] != '\0' ? ")" : "");
	else
		snprintf(why, sizeof(why), "Slurm job %u: submitted", j->jobid);
	slurm_set_why(j, why);
}

static rok_poll slurm_poll(rok_cx *cx, void *frame)
{
	struct slurm_frame *f = frame;
	struct slurm_job *j = f->job;
	void *v = NULL;
	int err;

	ROK_BEGIN(cx);
	if (j == NULL)
		ROK_RETURN(cx, NULL);
	if (!exec_available() || slurm_watch_dir()[0] == '\0') {
		/* The fuzz harness: nothing its input says may run. */
		slurm_fail(j, "Slurm tasks are not available in this process");
		ROK_RETURN(cx, NULL);
	}
	exec_out_forget(j->id, j->out.uid, tasktab_run(j->rec));
	if (j->timeout_ns > 0)
		j->to_deadline = rok_deadline(j->timeout_ns);
	slurm_set_why(j, "submitting to Slurm");
	/* Until sbatch answers with a job: a slurmctld that cannot be
	 * reached leaves the task queued, tried again every interval (an
	 * acknowledged spawn is never lost); any other refusal fails it. */
	for (;;) {
		if ((err = rok_spawn_blocking(&j->submit, slurm_submit_main,
		                              j->sub)) < 0) {
			slurm_fail(j, "could not submit: %s", strerror(-err));
			ROK_RETURN(cx, NULL);
		}
		j->sub = NULL;   /* the blocking job's now */
		ROK_AWAIT(cx, rok_join_err(cx, &j->join, j->submit, &v, &err));
		rok_task_unref(j->submit);
		j->submit = NULL;
		if ((j->sub = v) == NULL) {
			slurm_fail(j, "the submission ended without an answer");
			ROK_RETURN(cx, NULL);
		}
		if (j->sub->jobid > 0) {
			j->jobid = (uint32_t)j->sub->jobid;
			break;
		}
		if (!j->sub->again) {
			j->lost = j->sub->lost;
			slurm_fail(j, "%s", j->sub->reason);
			ROK_RETURN(cx, NULL);
		}
		if (!j->warned) {
			log_warnx("task %llu: not submitted yet, tried again "
			          "every %llu ms: %s", (unsigned long long)j->id,
			          (unsigned long long)config.slurm_poll_interval_ms,
			          j->sub->reason);
			j->warned = true;
		}
		{
			char why[sizeof(j->why)];
			snprintf(why, sizeof(why), "not submitted to Slurm yet "
			         "(tried again): %.120s", j->sub->reason);
			slurm_set_why(j, why);
		}
		j->sub->adopt = true;   /* the try may have reached it */
		/* known_job stays: it is set only when no sbatch was tried,
		 * and a recovered run whose journaled job Slurm has
		 * forgotten must fail, never be submitted again. */
		ROK_AWAIT(cx, rok_sleep(cx, &j->sleep,
		          (int64_t)config.slurm_poll_interval_ms * 1000000));
		if (j->timeout_ns > 0 && rok_now() >= j->to_deadline) {
			j->end_how = RT_TIMED_OUT;
			snprintf(j->reason, sizeof(j->reason), "never submitted "
			         "to Slurm: %.150s", j->sub->reason);
			ROK_RETURN(cx, NULL);
		}
	}
	slurm_sub_free(j->sub);
	j->sub = NULL;
	journal_slurm_job(j->id, j->jobid);
	if ((err = slurm_watch_add(j->jobid, j->owner)) < 0) {
		j->lost = true;   /* the job may have started before the scancel */
		slurm_fail(j, "watching job %u: %s", j->jobid, strerror(-err));
		slurm_scancel(j->jobid, NULL, NULL);
		j->jobid = 0;
		ROK_RETURN(cx, NULL);
	}
	tasktab_set_ctl(j->rec, j);
	for (;;) {
		slurm_show(j);
		ROK_AWAIT(cx, rok_sleep(cx, &j->sleep,
		          (int64_t)config.slurm_poll_interval_ms * 1000000));
		slurm_tail(j);
		slurm_watch_get(j->jobid, &j->js);
		if (slurm_ended(j->js.state))
			break;
		int64_t now = rok_now();
		if (j->phase == SLURM_PH_RUN &&
		    (atomic_load(&j->cancel_req) ||
		     (j->timeout_ns > 0 && now >= j->to_deadline))) {
			j->end_how = atomic_load(&j->cancel_req) ? RT_CANCELLED
			                                         : RT_TIMED_OUT;
			j->phase = SLURM_PH_TERM;
			j->grace_deadline = rok_deadline(j->grace_ns);
			if (j->js.state == SLURM_PENDING ||
			    j->js.state == SLURM_UNKNOWN)
				slurm_scancel(j->jobid, NULL, NULL);
			else
				slurm_scancel(j->jobid, "--full", "--signal=TERM");
		} else if (j->phase == SLURM_PH_TERM &&
		           now >= j->grace_deadline) {
			j->phase = SLURM_PH_KILL;
			slurm_scancel(j->jobid, NULL, NULL);
		}
	}
	/* A job that ran (and was not cancelled while it waited) counts as
	 * started, even if no query saw it RUNNING. */
	if (j->js.state != SLURM_CANCELLED && j->js.state != SLURM_GONE &&
	    !j->running) {
		j->running = true;
		tasktab_running(j->rec);
	}
	slurm_tail(j);
	ROK_CLEANUP(cx);
	if (j != NULL) {
		if (j->submit != NULL) {
			/* Left while submitting: whoever waits for the
			 * submission deals with its job. */
			rok_task *t = j->submit;
			j->submit = NULL;
			if (rok_spawn_blocking(NULL, slurm_orphan_main, t) < 0) {
				log_warnx("task %llu: its Slurm submission is "
				          "not followed", (unsigned long long)j->id);
				rok_task_unref(t);
			}
		}
		if (j->jobid != 0) {
			tasktab_set_ctl(j->rec, NULL);
			slurm_watch_remove(j->jobid);
			/* Left by the runtime (not by its own end): rokd
			 * stops, and the job runs on for the next start. */
			if (ROK_LEFT_BY_CANCEL(cx) &&
			    !atomic_load(&slurm_stopping) &&
			    !slurm_ended(j->js.state))
				slurm_scancel(j->jobid, NULL, NULL);
		}
		for (int i = 0; i < 2; i++)
			if (j->fd[i] >= 0) {
				close(j->fd[i]);
				j->fd[i] = -1;
			}
		exec_out_done(&j->out);
	}
	ROK_END(cx);
}

/* Any thread, under the task table's lock: must not block. */
static void slurm_cancel(void *ctl)
{
	struct slurm_job *j = ctl;

	/* At rokd's stop the job runs on (the next start adopts it); the
	 * runtime's cancel then ends the body. */
	if (!atomic_load(&slurm_stopping))
		atomic_store(&j->cancel_req, true);
}

static void slurm_finish(void *frame, int how, struct rt_outcome *o)
{
	struct slurm_frame *f = frame;
	struct slurm_job *j = f->job;

	f->job = NULL;
	if (j == NULL) {
		o->state = RT_FAILED;
		snprintf(o->reason, sizeof(o->reason), "out of memory");
		return;
	}
	o->output_truncated = j->out.truncated;
	if (j->failed) {
		o->state = RT_FAILED;
		o->final = j->lost;
		snprintf(o->reason, sizeof(o->reason), "%.*s",
		         (int)sizeof(o->reason) - 1, j->reason);
	} else if (how == RT_SUCCEEDED) {
		int st = j->js.status;
		if (j->js.state == SLURM_COMPLETED || j->js.state == SLURM_FAILED) {
			if (WIFSIGNALED(st)) {
				o->has_signal = true;
				o->signal = WTERMSIG(st);
			} else {
				o->has_exit_code = true;
				o->exit_code = WEXITSTATUS(st);
			}
		}
		if (j->end_how != RT_SUCCEEDED)
			o->state = j->end_how;
		else if (j->js.state == SLURM_COMPLETED)
			o->state = RT_SUCCEEDED;
		else if (j->js.state == SLURM_CANCELLED)
			o->state = RT_CANCELLED;
		else if (j->js.state == SLURM_TIMEOUT)
			o->state = RT_TIMED_OUT;
		else
			o->state = RT_FAILED;
		/* Gone from slurmctld's view before a query saw it end. */
		o->final = j->js.state == SLURM_GONE;
		if (j->jobid == 0)
			snprintf(o->reason, sizeof(o->reason), "%.*s",
			         (int)sizeof(o->reason) - 1, j->reason);
		else if (o->state != RT_SUCCEEDED)
			snprintf(o->reason, sizeof(o->reason), "Slurm job %u: %s",
			         j->jobid, j->js.reason);
	}
	slurm_sub_free(j->sub);
	free(j);
}

const struct kind kind_slurm = {
	.name = "exec",
	.check = exec_args_check,
	.poll = slurm_poll,
	.frame_size = sizeof(struct slurm_frame),
	.init = slurm_init_frame,
	.finish = slurm_finish,
	.cancel = slurm_cancel,
	.own_timeout = true,
	.slot = true,
	.own_running = true,
};
