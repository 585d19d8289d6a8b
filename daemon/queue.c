/*
 * queue.c — what runs when: the slots of each group and the tickets that
 * wait for them.
 *
 * Every task of a kind that holds resources (kind->slot: exec) goes
 * through here, whoever starts it (a spawn, a select, the recovery, and
 * later the gate of dependencies and delayed starts): kind_spawn calls
 * queue_submit, on the thread that starts the task, before the task's
 * runtime task exists, so the queue sees tasks in the order they were
 * started (recovery starts them in the order they had entered their
 * queues, journal-recover.c).  The built-in kinds never come here: they
 * hold no process and start at once.
 *
 * An entry's time (qcore's enq_ns, which aging counts from) is when the
 * task's run entered the queue (tasktab_queue_entry): its spawn, its
 * release by the gate, or for a task restored by the recovery that time
 * before the restart, as the journal kept it (queue_enq_ns).
 *
 * queue_submit puts a ticket into its group's queue (qcore.c decides who
 * is next) and grants every slot that is free at once.  A grant is a send
 * on the ticket's oneshot: the task's runner (kind.c) awaits it before it
 * marks the task running and starts the kind's body, so a queued exec
 * task is a runtime task parked on a oneshot — join, race, cancel and the
 * shutdown treat it like any other task.  The runner calls queue_leave
 * when the task has ended (after tasktab_finish: a task is never seen
 * running once its slot is free again) or was cancelled while queued;
 * a freed slot is granted again before queue_leave returns.  Pausing a
 * group, raising its parallel or resuming it grants what now fits.
 *
 * One mutex, queue.lock, guards the registry (group.c), every qgroup and
 * ticket.  Grants are made under it (a oneshot send takes no lock of
 * ours).  Lock order: tasktab's lock, then queue.lock (tasktab_fill asks
 * queue_waiting); nothing is taken under queue.lock but the runtime's
 * own oneshot lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "group.h"
#include "journal.h"

struct qticket {
	struct qent q;              /* qcore's part */
	struct group *g;
	rok_oneshot *grant;         /* sent once the slot is granted */
	bool granted;
};

static struct {
	pthread_mutex_t lock;
} queue = { .lock = PTHREAD_MUTEX_INITIALIZER };

static const char *const queue_names[QCLS_N] = { "urgent", "high", "normal",
                                                 "low" };

void queue_lock(void)
{
	pthread_mutex_lock(&queue.lock);
}

void queue_unlock(void)
{
	pthread_mutex_unlock(&queue.lock);
}

int queue_init(char *err, size_t len)
{
	return group_load(journal_db(), err, len);
}

void queue_free(void)
{
	queue_lock();
	group_free_all();
	queue_unlock();
}

int queue_class(int wire)
{
	switch (wire) {
	case ROK__V1__PRIORITY__PRIORITY_URGENT: return QCLS_URGENT;
	case ROK__V1__PRIORITY__PRIORITY_HIGH: return QCLS_HIGH;
	case ROK__V1__PRIORITY__PRIORITY_LOW: return QCLS_LOW;
	default: return QCLS_NORMAL;
	}
}

int queue_wire_priority(int cls)
{
	static const int wire[QCLS_N] = {
		ROK__V1__PRIORITY__PRIORITY_URGENT,
		ROK__V1__PRIORITY__PRIORITY_HIGH,
		ROK__V1__PRIORITY__PRIORITY_NORMAL,
		ROK__V1__PRIORITY__PRIORITY_LOW,
	};
	return wire[cls >= 0 && cls < QCLS_N ? cls : QCLS_NORMAL];
}

const char *queue_class_name(int cls)
{
	return queue_names[cls >= 0 && cls < QCLS_N ? cls : QCLS_NORMAL];
}

int queue_nice(const TaskSpec *spec)
{
	return config.nice[queue_class(spec->priority)];
}

static int64_t queue_now(void)
{
	return rok_now();
}

/*
 * The queue's clock (rok_now, monotonic) at wall-clock time queued_us, in
 * the past: now less the wait so far.  The wait of a task restored by the
 * recovery began before the restart, when the monotonic clock (which a
 * reboot resets) meant nothing to this process: only the wall clock links
 * the two, and the time rokd was down counts as waiting.  A time ahead of
 * the wall clock (it went back) counts as now.
 */
static int64_t queue_enq_ns(uint64_t queued_us)
{
	struct timespec ts;
	int64_t now = queue_now();

	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t wall = (uint64_t)ts.tv_sec * 1000000 +
	                (uint64_t)ts.tv_nsec / 1000;
	if (queued_us == 0 || queued_us >= wall)
		return now;
	uint64_t waited = wall - queued_us;
	/* A wait of centuries is as good as one of 100 years (and fits). */
	if (waited > (uint64_t)100 * 366 * 86400 * 1000000)
		waited = (uint64_t)100 * 366 * 86400 * 1000000;
	return now - (int64_t)waited * 1000;
}

/* Lock held: grants every slot of g that is free now. */
void queue_run_locked(struct group *g)
{
	struct qent *e;
	int64_t now = queue_now();

	while ((e = qcore_pick(&g->q, now)) != NULL) {
		struct qticket *t = (struct qticket *)(void *)e;
		t->granted = true;
		/* The runner holds the receiver until queue_leave, which
		 * cannot run before this (it takes the lock): no -EPIPE. */
		(void)rok_oneshot_send(t->grant, t);
	}
}

/* Lock held: a task's group by its TaskSpec.group (empty: default), one
 * being removed included, or NULL. */
static struct group *queue_group_named(const uint8_t *name, size_t len)
{
	return len == 0 ? group_find("default", 7)
	                : group_find((const char *)name, len);
}

/* Lock held: the same, but NULL for one being removed. */
static struct group *queue_group_of(const uint8_t *name, size_t len)
{
	struct group *g = queue_group_named(name, len);

	return g != NULL && !g->removing ? g : NULL;
}

bool queue_group_exists(const uint8_t *name, size_t len)
{
	queue_lock();
	bool ok = queue_group_of(name, len) != NULL;
	queue_unlock();
	return ok;
}

bool queue_group_slurm(const TaskSpec *spec)
{
	queue_lock();
	struct group *g = queue_group_named(spec->group.data, spec->group.len);
	bool slurm = g != NULL && strcmp(g->backend, "slurm") == 0;
	queue_unlock();
	return slurm;
}

void queue_group_partition(const TaskSpec *spec, char *buf, size_t len)
{
	queue_lock();
	struct group *g = queue_group_named(spec->group.data, spec->group.len);
	snprintf(buf, len, "%s", g != NULL ? g->partition : "");
	queue_unlock();
}

int queue_submit(const TaskSpec *spec, uid_t uid, uint64_t queued_us,
                 struct qticket **out)
{
	struct qticket *t = calloc(1, sizeof(*t));
	int err;

	*out = NULL;
	if (t == NULL)
		return -ENOMEM;
	if ((err = rok_oneshot_new(&t->grant)) < 0) {
		free(t);
		return err;
	}
	queue_lock();
	struct group *g = queue_group_of(spec->group.data, spec->group.len);
	if (g == NULL)
		err = -ENOENT;
	else
		err = qcore_push(&g->q, &t->q, uid, queue_class(spec->priority),
		                 queue_enq_ns(queued_us));
	if (err < 0) {
		queue_unlock();
		rok_oneshot_drop_sender(t->grant);
		(void)rok_oneshot_drop_receiver(t->grant);
		free(t);
		return err;
	}
	t->g = g;
	g->tickets++;
	queue_run_locked(g);
	queue_unlock();
	*out = t;
	return 0;
}

rok_poll queue_await(rok_cx *cx, struct qticket *t, rok_chan_op *op)
{
	void *v;
	int err;

	return rok_oneshot_recv(cx, op, t->grant, &v, &err);
}

void queue_leave(struct qticket *t)
{
	if (t == NULL)
		return;
	queue_lock();
	struct group *g = t->g;
	bool granted = t->granted;
	if (t->q.queued)
		qcore_remove(&g->q, &t->q);
	else if (granted)
		qcore_release(&g->q, &t->q);
	g->tickets--;
	if (granted)
		queue_run_locked(g);
	queue_unlock();
	if (!granted)
		rok_oneshot_drop_sender(t->grant);
	(void)rok_oneshot_drop_receiver(t->grant);
	free(t);
}

void queue_waiting(const struct qticket *t, char *buf, size_t len)
{
	queue_lock();
	const struct group *g = t->g;
	buf[0] = '\0';
	if (!t->q.queued) {
		if (t->granted)
			snprintf(buf, len, "starting");
	} else if (g->q.paused) {
		snprintf(buf, len, "group %s paused", g->name);
	} else if (!qcore_can_grant(&g->q)) {
		int cls = qcore_class_now(&g->q, &t->q, queue_now());
		uint64_t ahead = 0;
		for (int c = 0; c < cls && g->q.policy == QPOLICY_STRICT; c++)
			ahead += g->q.queued[c];
		int n = snprintf(buf, len, "group %s full: %u/%u running",
		                 g->name, g->q.running, g->q.parallel);
		if (ahead > 0 && n > 0 && (size_t)n < len)
			snprintf(buf + n, len - (size_t)n, "; behind %llu "
			         "tasks of higher class",
			         (unsigned long long)ahead);
	} else {
		snprintf(buf, len, "starting");
	}
	queue_unlock();
}

/* Lock held: g as a GroupInfo (strings borrowed from g). */
static void queue_info(const struct group *g, Rok__V1__GroupInfo *gi,
                       uint32_t *weights)
{
	rok__v1__group_info__init(gi);
	gi->name.data = (uint8_t *)(uintptr_t)g->name;
	gi->name.len = strlen(g->name);
	gi->parallel = g->q.parallel;
	gi->policy = (Rok__V1__GroupPolicy)g->q.policy;
	gi->backend.data = (uint8_t *)(uintptr_t)g->backend;
	gi->backend.len = strlen(g->backend);
	gi->partition.data = (uint8_t *)(uintptr_t)g->partition;
	gi->partition.len = strlen(g->partition);
	gi->paused = g->q.paused;
	memcpy(weights, g->q.weights, QCLS_N * sizeof(*weights));
	gi->weights = weights;
	gi->n_weights = QCLS_N;
}

/*
 * Every group (name_len 0) or the one named, as GroupInfos in one
 * allocation (names copied): *out, freed with free(); the count, or -1 on
 * ENOMEM.  Any thread.
 */
ssize_t queue_group_infos(const char *name, size_t name_len,
                          Rok__V1__GroupInfo ***out)
{
	struct queue_gi {
		Rok__V1__GroupInfo gi;
		uint32_t weights[QCLS_N];
		char name[GROUP_NAME_MAX + 1];
		char backend[GROUP_BACKEND_MAX];
		char partition[GROUP_PARTITION_MAX];
	};
	size_t n = 0;

	*out = NULL;
	queue_lock();
	for (struct group *g = group_first(); g != NULL; g = g->next)
		n++;
	Rok__V1__GroupInfo **ptrs = malloc(n * (sizeof(*ptrs) +
	                                        sizeof(struct queue_gi)) + 1);
	if (ptrs == NULL) {
		queue_unlock();
		return -1;
	}
	struct queue_gi *v = (struct queue_gi *)(void *)(ptrs + n);
	size_t k = 0;
	for (struct group *g = group_first(); g != NULL; g = g->next) {
		if (name_len > 0 && (strlen(g->name) != name_len ||
		                     memcmp(g->name, name, name_len) != 0))
			continue;
		queue_info(g, &v[k].gi, v[k].weights);
		memcpy(v[k].name, g->name, sizeof(v[k].name));
		memcpy(v[k].backend, g->backend, sizeof(v[k].backend));
		memcpy(v[k].partition, g->partition, sizeof(v[k].partition));
		v[k].gi.name.data = (uint8_t *)v[k].name;
		v[k].gi.backend.data = (uint8_t *)v[k].backend;
		v[k].gi.partition.data = (uint8_t *)v[k].partition;
		ptrs[k] = &v[k].gi;
		k++;
	}
	queue_unlock();
	*out = ptrs;
	return (ssize_t)k;
}

ssize_t queue_group_stats(Rok__V1__GroupStats ***out)
{
	struct queue_gs {
		Rok__V1__GroupStats gs;
		uint64_t queued[QCLS_N];
		char name[GROUP_NAME_MAX + 1];
	};
	size_t n = 0;

	*out = NULL;
	queue_lock();
	for (struct group *g = group_first(); g != NULL; g = g->next)
		n++;
	Rok__V1__GroupStats **ptrs = malloc(n * (sizeof(*ptrs) +
	                                         sizeof(struct queue_gs)) + 1);
	if (ptrs == NULL) {
		queue_unlock();
		return -1;
	}
	struct queue_gs *v = (struct queue_gs *)(void *)(ptrs + n);
	size_t k = 0;
	for (struct group *g = group_first(); g != NULL; g = g->next, k++) {
		rok__v1__group_stats__init(&v[k].gs);
		memcpy(v[k].name, g->name, sizeof(v[k].name));
		memcpy(v[k].queued, g->q.queued, sizeof(v[k].queued));
		v[k].gs.name.data = (uint8_t *)v[k].name;
		v[k].gs.name.len = strlen(v[k].name);
		v[k].gs.parallel = g->q.parallel;
		v[k].gs.running = g->q.running;
		v[k].gs.queued = v[k].queued;
		v[k].gs.n_queued = QCLS_N;
		v[k].gs.paused = g->q.paused;
		v[k].gs.policy = (Rok__V1__GroupPolicy)g->q.policy;
		ptrs[k] = &v[k].gs;
	}
	queue_unlock();
	*out = ptrs;
	return (ssize_t)k;
}
