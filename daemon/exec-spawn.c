/*
 * exec-spawn.c — starting an exec task's child: the clone + execve itself,
 * from the task's own worker, or on a few spawner threads.
 *
 * glibc's posix_spawn cannot change uids or groups, so children start with
 * clone3 (or clone, below) with CLONE_VM and CLONE_PIDFD, on a stack of
 * rokd's.  The child shares rokd's memory until it execs, and rokd has
 * other threads running, so the child makes raw system calls only
 * (exec_sys): no malloc, no locks, no glibc function that touches
 * process-wide state or the calling thread's (errno).  In particular
 * setgroups/setresgid/setresuid are the system calls and not the glibc
 * functions, which broadcast the change to every thread of the process
 * (they would reach rokd's threads through the shared memory).  Signal
 * dispositions and the mask go through the raw rt_sig* calls too, and the
 * child leaves with exit_group, not _exit (which sanitizers intercept);
 * the child's functions are not instrumented by the sanitizers
 * (EXEC_CHILD), whose state is the parent thread's.
 *
 * The parent thread runs with every signal blocked (workers and spawners
 * alike), so no handler runs in the child on rokd's memory; the child
 * resets every disposition that is not the default (SIGPIPE, which rokd
 * ignores; sanitizer handlers) and unblocks everything just before execve.
 * Order in the child: give up if the task did, reset signals, a session of
 * its own (setsid: the child leads a new session and process group and has
 * no controlling terminal, so it cannot push input into rokd's terminal
 * with TIOCSTI, and as a session leader it cannot move itself to another
 * group and out of reach of the group's signals), its cgroup
 * (exec-cgroup.c, where there is one and clone3 did not put it there), the
 * three fds, close everything else (every rokd fd is close-on-exec anyway:
 * close_range is a backstop), the resource limits rokd was started with
 * (exec_limits_save: rokd raises RLIMIT_NOFILE for itself, its tasks get
 * what they would have had), drop to the submitter (setgroups, setresgid,
 * setresuid, then a new session keyring, so that no user's task shares
 * rokd's or another user's keys), chdir (with the submitter's rights),
 * PR_SET_PDEATHSIG (after the credential change, which clears it), check
 * that the parent is still rokd, execve for each PATH candidate (with
 * /bin/sh for one the kernel cannot run, as execvp).  A step that fails
 * stores its errno and its name in the request and exits 127; whoever
 * reaps that child returns the error, so a typo in a command is a failed
 * task with a reason, not a daemon error.
 *
 * Which thread.  PR_SET_PDEATHSIG fires when the *thread* that forked
 * exits, so the parent must be a thread that lives as long as rokd.  A
 * pool worker does (rok_on_pool_worker): there the task starts the child
 * itself (exec_spawn_direct), without CLONE_VFORK, and goes on at once;
 * the child runs on a stack in the request and reads the request until it
 * execs, so the task keeps the request until it has reaped the child, and
 * learns then whether a step failed (exec_req_reaped).  A direct start
 * stuck in a path the user chose (chdir or execve on a dead FUSE or NFS
 * mount) holds no thread: the task supervises it as any running child,
 * and its timeout or cancel kills it.  The direct start needs the raw
 * system call instruction (x86-64 and arm64 here: EXEC_DIRECT), since the
 * child runs beside its parent thread, whose errno glibc's syscall()
 * would write.
 *
 * A helper thread standing in for a stuck worker retires later, and a
 * thread-per-core worker is pinned to one CPU, which its children would
 * inherit: tasks polled there (and every task, where there is no
 * EXEC_DIRECT) have their children started by spawner threads that never
 * exit, with rokd's CPUs: exec tasks queue a request (a mutex and a
 * condition variable) and await a oneshot that the spawner sends the
 * request back through.  CLONE_VFORK suspends the spawner until the child
 * execs or exits: tens of microseconds, except on a hung file system as
 * above.  So there are several spawners, up to SPAWN_THREADS, started on
 * demand (one more whenever a request waits and no spawner is idle), and
 * the starts of one user hold at most SPAWN_PER_UID of them: one user's
 * hung path never holds another user's start.  A child stuck there is
 * killed, not waited for: the kernel stores its pidfd in the request
 * (CLONE_PIDFD) before the child runs, and exec_spawn_kill (the task's
 * timeout or cancel) sends SIGKILL through it, which ends the spawner's
 * vfork wait too.  The spawner lock orders that kill against the spawner
 * closing the pidfd.  A request whose task gave up while it was queued is
 * answered at once by exec_spawn_kill (so a timeout holds even when every
 * spawner its user may have is stuck), and one given up on as its spawner
 * clones is not started (the child looks first).  If the task is gone
 * when the spawner answers, the spawner kills and reaps the child itself.
 * No wait is unbounded: every reap follows a SIGKILL and waits on the
 * pidfd for at most EXEC_REAP_WAIT_NS (exec_kill_reap), then leaves the
 * child to the late reaper (below).
 *
 * ROKD_TEST_EXEC_STALL, a test hook read once at start from rokd's own
 * environment: a child whose program is exactly that path opens it for
 * reading just before execve.  For a FIFO with no writer, that is a child
 * stuck in the kernel in a path the user chose, as on a dead mount, which
 * tests/exec.test needs to show that such a child holds no one else's
 * start and that cancel and timeout kill it.  Unset, nothing changes.
 * ROKD_TEST_EXEC_SPAWNERS=1, another: every child is started by a spawner
 * thread, so that tests/exec.test can show what their queue does.
 * ROKD_TEST_EXEC_CLONE3=0: children start with clone, not clone3, so that
 * tests/exec.test covers the way rokd starts them where it has no clone3.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <linux/keyctl.h>
#include <linux/sched.h>

#include "exec.h"
#include "rokd.h"

#define SPAWN_THREADS 8
#define SPAWN_PER_UID 4
#define SPAWN_STACK (128 * 1024)
/* How long a reap waits for a SIGKILLed child to be gone. */
#define EXEC_REAP_WAIT_NS 2000000000ll

/* What the child runs: no sanitizer instrumentation (its state belongs to
 * the parent thread, which the child runs beside or suspends, and the child
 * never returns to balance it).  clang 14's disable_sanitizer_instrumentation
 * leaves ASan's and UBSan's calls in (objdump): no_sanitize as well. */
#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
#define EXEC_CHILD                                                     \
	__attribute__((disable_sanitizer_instrumentation,               \
	               no_sanitize("address", "undefined", "thread")))
#endif
#endif
#ifndef EXEC_CHILD
#define EXEC_CHILD \
	__attribute__((no_sanitize("address", "undefined", "thread")))
#endif

/* ThreadSanitizer intercepts clone() and runs its fork bookkeeping in the
 * child, which with CLONE_VM is the parent's own state (it aborts); glibc's
 * __clone is the same function without the interceptor.  The child is not
 * instrumented anyway. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EXEC_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(EXEC_TSAN)
extern int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);
#define exec_clone __clone
#else
#define exec_clone clone
#endif

/*
 * clone3, for CLONE_INTO_CGROUP: the kernel puts the child into its task's
 * cgroup as it makes it.  The other way, the child's write to cgroup.procs,
 * takes cgroup_threadgroup_rwsem for writing (every fork and exit on the
 * machine waits while it is held) and cost each child 20-45 us of CPU
 * (a vfork + exec `true` loop with and without the write), 1.5-3 % of a
 * short command.  glibc 2.36 has no clone3 wrapper that runs a function
 * on a new stack, as clone does, so here is one, for x86-64:
 * rokd_clone3(args, size, fn, arg) returns the child's pid or -errno; the
 * child, on the top of args->stack, calls fn(arg) and exits with what it
 * returns.  fn and arg ride in r8 and r9, which the syscall keeps and the
 * child inherits; the child aligns its stack, as glibc's clone does, and
 * clears rbp and marks rip undefined to end a backtrace there.
 * Elsewhere, and where a seccomp filter or an old kernel says ENOSYS (or
 * EPERM, for a clone3 without CLONE_INTO_CGROUP; noted once, for every
 * later start), children start with glibc's clone and join their cgroup
 * themselves, as a spawner's do (exec_spawn_fork).
 */
#if defined(__x86_64__) && !defined(__ILP32__)
#define EXEC_CLONE3 1
#define EXEC_STR_(x) #x
#define EXEC_STR(x) EXEC_STR_(x)
#ifdef __CET__
#define EXEC_ENDBR "	endbr64\n"
#else
#define EXEC_ENDBR ""
#endif
__attribute__((visibility("hidden")))
long rokd_clone3(struct clone_args *args, size_t size, int (*fn)(void *),
                 void *arg);
__asm__(".pushsection .text\n"
        ".globl rokd_clone3\n"
        ".hidden rokd_clone3\n"
        ".type rokd_clone3, @function\n"
        ".p2align 4\n"
        "rokd_clone3:\n"
        "	.cfi_startproc\n"
        EXEC_ENDBR
        "	mov %rdx, %r8\n"
        "	mov %rcx, %r9\n"
        "	mov $" EXEC_STR(SYS_clone3) ", %eax\n"
        "	syscall\n"
        "	test %rax, %rax\n"
        "	jz 1f\n"
        "	ret\n"
        "1:	.cfi_undefined %rip\n"
        "	xor %ebp, %ebp\n"
        "	and $-16, %rsp\n"
        "	mov %r9, %rdi\n"
        "	call *%r8\n"
        "	mov %eax, %edi\n"
        "	mov $" EXEC_STR(SYS_exit_group) ", %eax\n"
        "	syscall\n"
        "	hlt\n"
        "	.cfi_endproc\n"
        ".size rokd_clone3, .-rokd_clone3\n"
        ".popsection\n");
#endif

/* The kernel's struct rlimit64, for the raw prlimit64 call. */
struct exec_rlim {
	uint64_t cur, max;
};

enum { SPAWN_QUEUED, SPAWN_STARTING, SPAWN_DONE };

static void *exec_spawner_main(void *arg);

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct exec_req *head, *tail;   /* queued requests, FIFO */
	unsigned threads, idle;         /* spawners; of which not starting */
	bool busy[SPAWN_THREADS];
	uid_t busy_uid[SPAWN_THREADS];  /* whose child a busy spawner starts */
	void *stack[SPAWN_THREADS];     /* each spawner's child stack */
	int devnull;
	/* Signals not at SIG_DFL in rokd (ignored, or caught by a sanitizer
	 * runtime): the child resets them before it unblocks signals, so no
	 * handler of rokd's ever runs in the child, on rokd's memory. */
	int reset[64];
	int nreset;
	/* The limits rokd started with, and which of them it changed since. */
	bool lim_saved;
	struct exec_rlim lim[RLIM_NLIMITS];
	int restore[RLIM_NLIMITS];
	int nrestore;
	/* rokd's CPU affinity at start, for the spawners: they are started
	 * from workers, which ROK_THREAD_PER_CORE pins to one CPU each, and
	 * their children would inherit that one CPU. */
	bool cpus_saved;
	cpu_set_t cpus;
	char *stall;                    /* ROKD_TEST_EXEC_STALL */
	bool spawners_only;             /* ROKD_TEST_EXEC_SPAWNERS=1 */
	/* clone3 not to be tried: the kernel refused it (ENOSYS), or
	 * ROKD_TEST_EXEC_CLONE3=0.  Relaxed: a start that reads it late
	 * tries clone3, is refused, and falls back on its own. */
	atomic_bool no_clone3;
	/* clone3 puts children into their cgroup (exec_clone3_probe). */
	bool into_cgroup;
	int64_t tick_ns;                /* one clock tick; 0: not known */
	pid_t self;                     /* rokd's: set after daemonizing */
} spawn = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.devnull = -1,
};

static uint64_t exec_rlim_value(rlim_t v)
{
	return v == RLIM_INFINITY ? UINT64_MAX : (uint64_t)v;
}

void exec_limits_save(void)
{
	for (int r = 0; r < RLIM_NLIMITS; r++) {
		struct rlimit rl;
		if (getrlimit(r, &rl) != 0) {
			/* Never restored: exec_spawn_init compares. */
			spawn.lim[r].cur = spawn.lim[r].max = 0;
			continue;
		}
		spawn.lim[r].cur = exec_rlim_value(rl.rlim_cur);
		spawn.lim[r].max = exec_rlim_value(rl.rlim_max);
	}
	spawn.lim_saved = true;
	spawn.cpus_saved = sched_getaffinity(0, sizeof(spawn.cpus),
	                                     &spawn.cpus) == 0;
}

/* Lock held: one more spawner thread; 0 or -errno. */
static int exec_spawn_add_locked(void)
{
	unsigned i = spawn.threads;
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t t;
	int err;

	if (i >= SPAWN_THREADS)
		return -EAGAIN;
	if ((err = pthread_attr_init(&attr)) != 0)
		return -err;
	/* rokd's CPUs, not those of the worker that starts it. */
	if (spawn.cpus_saved &&
	    (err = pthread_attr_setaffinity_np(&attr, sizeof(spawn.cpus),
	                                       &spawn.cpus)) != 0) {
		pthread_attr_destroy(&attr);
		return -err;
	}
	void *stack = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE,
	                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		err = -errno;
		pthread_attr_destroy(&attr);
		return err;
	}
	spawn.stack[i] = stack;
	/* A spawner runs with every signal blocked and lives until the
	 * process exits. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, &attr, exec_spawner_main,
	                     (void *)(uintptr_t)i);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (err != 0) {
		munmap(stack, SPAWN_STACK);
		spawn.stack[i] = NULL;
		return -err;
	}
	pthread_detach(t);
	spawn.threads++;
	spawn.idle++;   /* idle from now: it is about to look at the queue */
	return 0;
}

/* Lock held: a request waits and no spawner is free to take it. */
static void exec_spawn_grow_locked(void)
{
	if (spawn.head == NULL || spawn.idle > 0 ||
	    spawn.threads >= SPAWN_THREADS)
		return;
	int err = exec_spawn_add_locked();
	if (err < 0)
		log_errno(err, "exec: starting spawner thread %u",
		          spawn.threads + 1);
}

#ifdef EXEC_CLONE3
EXEC_CHILD static int exec_probe_child(void *arg)
{
	(void)arg;
	return 0;
}

/*
 * Whether a child that clone3 puts into a cgroup of rokd's lives: the
 * kernels with cgroup.kill's kill_seq SIGKILL it when its parent's cgroup
 * was ever killed (a unit's cgroup that systemd killed at a stop and kept),
 * as they do in a killed cgroup of rokd's (exec_cgroup.killed).  One
 * child, `return 0` on a stack here, in a new cgroup of rokd's, removed
 * after (the pool is for tasks' cgroups).  A refusal (ENOSYS, EPERM: a
 * seccomp filter, an old kernel) is noted for every start.
 */
static void exec_clone3_probe(void)
{
	static char stack[4096] __attribute__((aligned(16)));
	struct exec_cgroup c;

	if (atomic_load_explicit(&spawn.no_clone3, memory_order_relaxed) ||
	    exec_cgroup_new(&c) != 0)
		return;
	if (c.dir < 0)
		return;   /* no cgroups here */
	struct clone_args a = {
		.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP,
		.exit_signal = SIGCHLD,
		.stack = (uintptr_t)stack,
		.stack_size = sizeof(stack),
		.cgroup = (unsigned)c.dir,
	};
	long pid = rokd_clone3(&a, sizeof(a), exec_probe_child, NULL);
	siginfo_t si = { 0 };
	int rc = 0;
	while (pid > 0 && (rc = waitid(P_PID, (id_t)pid, &si, WEXITED)) != 0 &&
	       errno == EINTR)
		;
	if (pid == -ENOSYS || pid == -EPERM) {
		/* glibc's clone for every start: the way known to work. */
		atomic_store_explicit(&spawn.no_clone3, true,
		                      memory_order_relaxed);
		log_info("exec: no clone3 here (%s): children join their "
		         "cgroup themselves", strerror((int)-pid));
	} else if (pid < 0) {
		log_warnx("exec: clone3 into a cgroup: %s: children join their "
		          "cgroup themselves", strerror((int)-pid));
	} else if (rc != 0) {
		log_errno(errno, "exec: waitid");
	} else if (si.si_code == CLD_EXITED && si.si_status == 0) {
		spawn.into_cgroup = true;
	} else {
		log_info("exec: a child that clone3 puts into a cgroup is "
		         "killed here (rokd's cgroup was killed once): "
		         "children join their cgroup themselves");
	}
	exec_cgroup_drop(&c);
}
#else
static void exec_clone3_probe(void)
{
}
#endif

int exec_spawn_init(void)
{
	int err;

	spawn.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (spawn.devnull < 0)
		return -errno;
	spawn.self = getpid();
	spawn.nreset = 0;
	for (int sig = 1; sig < 65 && spawn.nreset < 64; sig++) {
		struct sigaction sa;
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_DFL)
			spawn.reset[spawn.nreset++] = sig;
	}
	spawn.nrestore = 0;
	for (int r = 0; spawn.lim_saved && r < RLIM_NLIMITS; r++) {
		struct rlimit rl;
		if (spawn.lim[r].max == 0 && spawn.lim[r].cur == 0)
			continue;   /* unknown, or 0 (nothing raised it) */
		if (getrlimit(r, &rl) == 0 &&
		    exec_rlim_value(rl.rlim_cur) == spawn.lim[r].cur &&
		    exec_rlim_value(rl.rlim_max) == spawn.lim[r].max)
			continue;
		spawn.restore[spawn.nrestore++] = r;
	}
	/* The kernel reports start times in USER_HZ ticks, the divisor of
	 * 10^9 that sysconf knows (100 everywhere rokd runs). */
	long hz = sysconf(_SC_CLK_TCK);
	spawn.tick_ns = hz > 0 && hz <= 1000000000 && 1000000000 % hz == 0
	                ? 1000000000 / hz : 0;
	const char *only = getenv("ROKD_TEST_EXEC_SPAWNERS");
	spawn.spawners_only = only != NULL && strcmp(only, "1") == 0;
	const char *c3 = getenv("ROKD_TEST_EXEC_CLONE3");
	bool no_c3 = c3 != NULL && strcmp(c3, "0") == 0;
	atomic_init(&spawn.no_clone3, no_c3);
	if (no_c3)
		log_info("exec: ROKD_TEST_EXEC_CLONE3=0: children start with "
		         "clone");
	exec_clone3_probe();
	const char *stall = getenv("ROKD_TEST_EXEC_STALL");
	if (stall != NULL && stall[0] == '/' &&
	    (spawn.stall = strdup(stall)) == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&spawn.lock);
	err = exec_spawn_add_locked();
	pthread_mutex_unlock(&spawn.lock);
	return err;
}

bool exec_available(void)
{
	return spawn.devnull >= 0;   /* exec_spawn_init ran */
}

/* ---- the child ---------------------------------------------------------- */

/*
 * The child's system calls: the result, or -errno.  A child that a worker
 * starts itself (exec_spawn_direct) runs beside that worker, on the
 * worker's thread-local storage: glibc's syscall() would store errno
 * there, in the middle of whatever the worker does with its own.  So where
 * rokd knows the instruction, the child makes the call itself; elsewhere
 * every child is started by a spawner thread, suspended (CLONE_VFORK)
 * while the child runs, whose errno the child may use.
 */
#if defined(__x86_64__) && !defined(__ILP32__)
#define EXEC_DIRECT 1
EXEC_CHILD static inline long exec_sys(long n, long a, long b, long c, long d,
                                       long e)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	long ret;

	__asm__ volatile("syscall"
	                 : "=a"(ret)
	                 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
	                 : "rcx", "r11", "memory");
	return ret;
}
#elif defined(__aarch64__)
#define EXEC_DIRECT 1
EXEC_CHILD static inline long exec_sys(long n, long a, long b, long c, long d,
                                       long e)
{
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;

	__asm__ volatile("svc 0"
	                 : "+r"(x0)
	                 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4)
	                 : "memory");
	return x0;
}
#else
EXEC_CHILD static long exec_sys(long n, long a, long b, long c, long d,
                                long e)
{
	long rc = syscall(n, a, b, c, d, e);

	return rc < 0 ? -errno : rc;
}
#endif

#define EXEC_SYS0(n) exec_sys(n, 0, 0, 0, 0, 0)
#define EXEC_SYS1(n, a) exec_sys(n, (long)(a), 0, 0, 0, 0)
#define EXEC_SYS2(n, a, b) exec_sys(n, (long)(a), (long)(b), 0, 0, 0)
#define EXEC_SYS3(n, a, b, c) exec_sys(n, (long)(a), (long)(b), (long)(c), 0, 0)
#define EXEC_SYS4(n, a, b, c, d) \
	exec_sys(n, (long)(a), (long)(b), (long)(c), (long)(d), 0)
#define EXEC_SYS5(n, a, b, c, d, e) \
	exec_sys(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e))

/* The kernel's sigaction, for the raw rt_sigaction call. */
struct exec_ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};

/* Stores why the child gives up (rc: -errno) where the parent sees it. */
EXEC_CHILD static _Noreturn void
exec_child_fail(volatile struct exec_fail *fail, const char *step, long rc)
{
	fail->err = rc < 0 ? (int)-rc : EIO;
	fail->step = step;
	EXEC_SYS1(SYS_exit_group, 127);
	for (;;)
		;
}

/* The test hook (see the top): true when a equals b. */
EXEC_CHILD static bool exec_child_same(const char *a, const char *b)
{
	while (*a != '\0' && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

/* Runs in the clone child, on r: raw system calls only (see the top). */
EXEC_CHILD static int exec_child_main(void *arg)
{
	struct exec_req *r = arg;
	const struct exec_start *s = &r->s;
	volatile struct exec_fail *fail = &r->fail;
	struct exec_ksigaction dfl = { 0 };
	uint64_t none = 0, term = 1ull << (SIGTERM - 1);
	long rc;

	/* Dekker's pattern with exec_spawn_kill, both sides seq_cst: it
	 * stores `kill` then loads `ran`, this stores `ran` then loads
	 * `kill`, so at least one sees the other's store: either it kills
	 * through the pidfd, or this gives up. */
	__atomic_store_n(&r->ran, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&r->kill, __ATOMIC_SEQ_CST))
		exec_child_fail(fail, "cancelled", -ECANCELED);
	for (int i = 0; i < spawn.nreset; i++)
		EXEC_SYS4(SYS_rt_sigaction, spawn.reset[i], &dfl, NULL,
		          sizeof(uint64_t));
	/* At its default now: the task's SIGTERM (timeout, cancel) ends a
	 * child stuck on its way at once, not after the kill grace. */
	(void)EXEC_SYS4(SYS_rt_sigprocmask, SIG_UNBLOCK, &term, NULL,
	                sizeof(term));
	/* rokd runs with umask 077 for its own files; a task gets the umask
	 * rokd was started with. */
	(void)EXEC_SYS1(SYS_umask, rokd_umask);
	if ((rc = EXEC_SYS0(SYS_setsid)) < 0)
		exec_child_fail(fail, "setsid", rc);
	/* The class's nice (rokd.conf nice_CLASS), added to rokd's own.
	 * Lowering always works; raising needs privilege, and a task whose
	 * raise is refused runs at rokd's level rather than not at all.  The
	 * raw getpriority returns 20 - nice. */
	if (s->nice != 0) {
		rc = EXEC_SYS2(SYS_getpriority, PRIO_PROCESS, 0);
		if (rc >= 0) {
			long want = 20 - rc + s->nice;
			want = want < -20 ? -20 : want > 19 ? 19 : want;
			(void)EXEC_SYS3(SYS_setpriority, PRIO_PROCESS, 0, want);
		}
	}
	if (s->cgroup >= 0 &&
	    (rc = EXEC_SYS3(SYS_write, s->cgroup, "0", 1)) != 1)
		exec_child_fail(fail, "joining its cgroup", rc);
	for (int i = 0; i < 3; i++) {
		/* dup3 refuses old == new; the fds are never 0-2 here (rokd
		 * keeps its own 0-2 open), but be safe: clear CLOEXEC then. */
		if (s->fds[i] == i)
			rc = EXEC_SYS3(SYS_fcntl, i, F_SETFD, 0);
		else
			rc = EXEC_SYS3(SYS_dup3, s->fds[i], i, 0);
		if (rc < 0)
			exec_child_fail(fail, "dup2", rc);
	}
	(void)EXEC_SYS3(SYS_close_range, 3u, ~0u, 0u);
	for (int i = 0; i < spawn.nrestore; i++) {
		int lim = spawn.restore[i];
		if ((rc = EXEC_SYS4(SYS_prlimit64, 0, lim, &spawn.lim[lim],
		                    NULL)) != 0)
			exec_child_fail(fail, "setrlimit", rc);
	}
	if (s->change_creds) {
		if ((rc = EXEC_SYS2(SYS_setgroups, s->ngroups, s->groups)) != 0)
			exec_child_fail(fail, "setgroups", rc);
		if ((rc = EXEC_SYS3(SYS_setresgid, s->gid, s->gid, s->gid)) != 0)
			exec_child_fail(fail, "setresgid", rc);
		if ((rc = EXEC_SYS3(SYS_setresuid, s->uid, s->uid, s->uid)) != 0)
			exec_child_fail(fail, "setresuid", rc);
		/* rokd's session keyring (KeyringMode=private under
		 * systemd) would be every user's: a new anonymous one, owned
		 * by the user.  A kernel without keyrings has nothing to
		 * share, nor does one where a seccomp filter refuses keyctl
		 * (Docker's default: EPERM), which holds for the task too. */
		rc = EXEC_SYS2(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL);
		if (rc < 0 && rc != -ENOSYS && rc != -EPERM)
			exec_child_fail(fail, "joining a session keyring of "
			                "its own", rc);
	}
	if (s->cwd != NULL && (rc = EXEC_SYS1(SYS_chdir, s->cwd)) != 0)
		exec_child_fail(fail, "chdir", rc);
	if ((rc = EXEC_SYS5(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)) != 0)
		exec_child_fail(fail, "prctl", rc);
	if (EXEC_SYS0(SYS_getppid) != spawn.self)
		exec_child_fail(fail, "getppid", -ESRCH);
	if (spawn.stall != NULL && s->paths[0] != NULL &&
	    exec_child_same(s->paths[0], spawn.stall)) {
		rc = EXEC_SYS3(SYS_openat, AT_FDCWD, spawn.stall,
		               O_RDONLY | O_CLOEXEC);
		if (rc >= 0)
			(void)EXEC_SYS1(SYS_close, rc);
	}
	(void)EXEC_SYS4(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL,
	                sizeof(none));
	/* execvp's rules: the first candidate that is not missing wins, a
	 * file the kernel cannot run (ENOEXEC: no #! line) runs with
	 * /bin/sh; EACCES is reported if nothing ran and some candidate had
	 * it. */
	long err = -ENOENT;
	for (size_t i = 0; s->paths[i] != NULL; i++) {
		rc = EXEC_SYS3(SYS_execve, s->paths[i], s->argv, s->envp);
		if (rc == -ENOEXEC) {
			s->sh_argv[1] = s->paths[i];
			rc = EXEC_SYS3(SYS_execve, "/bin/sh", s->sh_argv,
			               s->envp);
		}
		if (rc == -EACCES)
			err = -EACCES;
		else if (rc != -ENOENT && rc != -ENOTDIR) {
			err = rc;
			break;
		}
	}
	exec_child_fail(fail, "exec", err);
}

/* ---- killing and reaping ------------------------------------------------ */

/*
 * Children that did not end within EXEC_REAP_WAIT_NS of SIGKILL (stuck in
 * the kernel: a FUSE flush that is never answered, say) would stay zombies
 * for good once they end, their pids taken, since no one else reaps: the
 * late reaper, a thread started for the first of them, holds a pidfd of
 * each and reaps it when it becomes readable.  It looks at new ones once a
 * second; it never exits.
 */
#define LATE_MAX 256
#define LATE_POLL_MS 1000

static struct {
	pthread_mutex_t lock;
	int fd[LATE_MAX];
	unsigned n;
	bool started;
} late = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *exec_late_main(void *arg)
{
	struct pollfd p[LATE_MAX];

	(void)arg;
	for (;;) {
		pthread_mutex_lock(&late.lock);
		unsigned n = late.n;
		for (unsigned i = 0; i < n; i++)
			p[i] = (struct pollfd){ .fd = late.fd[i], .events = POLLIN };
		pthread_mutex_unlock(&late.lock);
		if (poll(p, n, LATE_POLL_MS) <= 0)
			continue;
		pthread_mutex_lock(&late.lock);
		/* Only this thread removes entries: the first n are p's. */
		for (unsigned i = n; i-- > 0; ) {
			siginfo_t si;
			memset(&si, 0, sizeof(si));
			if (p[i].revents == 0 ||
			    (waitid(P_PIDFD, (id_t)p[i].fd, &si,
			            WEXITED | WNOHANG) == 0 && si.si_pid == 0))
				continue;
			close(late.fd[i]);
			late.fd[i] = late.fd[--late.n];
			late.fd[late.n] = -1;
		}
		pthread_mutex_unlock(&late.lock);
	}
	return NULL;
}

/* Hands a copy of pidfd to the late reaper: 0 or -errno. */
static int exec_reap_later(int pidfd)
{
	int err = 0;

	pthread_mutex_lock(&late.lock);
	if (!late.started) {
		sigset_t all, old;
		pthread_t t;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		err = -pthread_create(&t, NULL, exec_late_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (err == 0) {
			pthread_detach(t);
			late.started = true;
		}
	}
	if (err == 0 && late.n == LATE_MAX)
		err = -EMFILE;
	if (err == 0) {
		int fd = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			err = -errno;
		else
			late.fd[late.n++] = fd;
	}
	pthread_mutex_unlock(&late.lock);
	return err;
}

int exec_kill_reap(pid_t pid, int pidfd, siginfo_t *si)
{
	int64_t deadline = rok_now() + EXEC_REAP_WAIT_NS;

	/* Through the pidfd: the leader even if it left its group. */
	(void)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
	(void)kill(-pid, SIGKILL);
	for (;;) {
		memset(si, 0, sizeof(*si));
		if (waitid(P_PIDFD, (id_t)pidfd, si, WEXITED | WNOHANG) == 0) {
			if (si->si_pid != 0)
				return 0;
		} else if (errno != EINTR) {
			return -errno;
		}
		int64_t left = deadline - rok_now();
		if (left <= 0) {
			int err = exec_reap_later(pidfd);
			if (err < 0)
				log_errno(err, "exec: pid %d: no late reaper: "
				          "it stays a zombie once it ends",
				          (int)pid);
			return -ETIMEDOUT;
		}
		struct pollfd p = { .fd = pidfd, .events = POLLIN };
		(void)poll(&p, 1, (int)(left / 1000000) + 1);
	}
}

/* Reaps pid or says why not; closes pidfd. */
static void exec_kill_reap_close(pid_t pid, int pidfd, const char *who)
{
	siginfo_t si;
	int err = exec_kill_reap(pid, pidfd, &si);

	if (err < 0)
		log_errno(err, "%s: pid %d did not end after SIGKILL; it is "
		          "reaped once it does", who, (int)pid);
	close(pidfd);
}

static void exec_req_strip(struct exec_req *r);

/* Lock held: takes r off the queue, prev being the request before it (NULL
 * if r is the head). */
static void exec_spawn_unlink_after_locked(struct exec_req *prev,
                                           struct exec_req *r)
{
	if (prev != NULL)
		prev->next = r->next;
	else
		spawn.head = r->next;
	if (spawn.tail == r)
		spawn.tail = prev;
	r->next = NULL;
}

/* Lock held: takes r, queued, off the queue. */
static void exec_spawn_unlink_locked(struct exec_req *r)
{
	struct exec_req *prev = NULL;

	for (struct exec_req *q = spawn.head; q != NULL; prev = q, q = q->next) {
		if (q == r) {
			exec_spawn_unlink_after_locked(prev, r);
			return;
		}
	}
}

void exec_spawn_kill(struct exec_req *r)
{
	bool queued = false;

	pthread_mutex_lock(&spawn.lock);
	/* seq_cst: the store is ordered before the load of `ran` (see
	 * exec_child_main). */
	__atomic_store_n(&r->kill, 1, __ATOMIC_SEQ_CST);
	if (r->state == SPAWN_STARTING) {
		/* The pidfd is the child's once the child runs: the kernel
		 * stored it before.  Not before that: a clone that fails
		 * after storing the number gives the number back, and it may
		 * be another file's already (see exec_spawner_run). */
		if (__atomic_load_n(&r->ran, __ATOMIC_SEQ_CST))
			(void)syscall(SYS_pidfd_send_signal, r->pidfd, SIGKILL,
			              NULL, 0);
	} else if (r->state == SPAWN_QUEUED) {
		/* Still waiting for a spawner, which may not come for long
		 * (every spawner this user may hold is stuck, or all are):
		 * answered here and now, so a timeout is kept. */
		exec_spawn_unlink_locked(r);
		r->state = SPAWN_DONE;
		queued = true;
	}
	pthread_mutex_unlock(&spawn.lock);
	if (!queued)
		return;
	snprintf(r->reason, sizeof(r->reason), "cancelled before it started");
	exec_req_strip(r);
	/* The caller holds the receiver (see exec.h); if not, r is ours. */
	if (rok_oneshot_send(r->done, r) < 0)
		exec_req_free(r, false);
}

/* ---- the spawner threads ------------------------------------------------ */

#ifdef EXEC_DIRECT
static void exec_spawn_direct(struct exec_req *r);
#endif

void exec_spawn_submit(struct exec_req *r)
{
#ifdef EXEC_DIRECT
	if (!spawn.spawners_only && rok_on_pool_worker()) {
		exec_spawn_direct(r);
		/* The receiver is the calling task's: it takes r at once. */
		if (rok_oneshot_send(r->done, r) < 0)
			exec_req_free(r, true);
		return;
	}
#endif
	r->next = NULL;
	r->state = SPAWN_QUEUED;
	pthread_mutex_lock(&spawn.lock);
	if (spawn.tail != NULL)
		spawn.tail->next = r;
	else
		spawn.head = r;
	spawn.tail = r;
	exec_spawn_grow_locked();
	pthread_mutex_unlock(&spawn.lock);
	/* One spawner is enough: any may take any request that is eligible,
	 * and one that is not (its user holds SPAWN_PER_UID spawners) waits
	 * for one of those to finish, which wakes the others.  Signalled
	 * after the unlock: a spawner woken under the lock ran into it at
	 * once and slept again on it (a futex round trip per child in strace;
	 * the spawner looks at the queue under the lock, so no request is
	 * missed). */
	pthread_cond_signal(&spawn.cond);
}

/* Closes the child's ends of its fds (the child has its own copies). */
static void exec_req_close_child(struct exec_req *r)
{
	for (int i = 0; i < 3; i++) {
		if (r->child[i] >= 0 && r->child[i] != spawn.devnull)
			close(r->child[i]);
		r->child[i] = -1;
	}
}

/* Frees what only the child needed, and closes the child's fds. */
static void exec_req_strip(struct exec_req *r)
{
	exec_req_close_child(r);
	for (size_t i = 0; r->argv != NULL && r->argv[i] != NULL; i++)
		free(r->argv[i]);
	for (size_t i = 0; r->env != NULL && r->env[i] != NULL; i++)
		free(r->env[i]);
	free(r->argv);
	free(r->env);
	free(r->paths);
	free(r->sh_argv);   /* its strings are argv's */
	free(r->cwd);
	exec_user_done(&r->user);
	r->argv = r->env = r->paths = r->sh_argv = NULL;
	r->cwd = NULL;
	memset(&r->s, 0, sizeof(r->s));
}

/* Closes our ends of the pipes (a start that failed, or a task gone). */
static void exec_req_close_ours(struct exec_req *r)
{
	for (int i = 0; i < 3; i++) {
		if (r->ours[i] >= 0)
			close(r->ours[i]);
		r->ours[i] = -1;
	}
}

void exec_req_free(struct exec_req *r, bool kill_child)
{
	if (r == NULL)
		return;
	/* First: a direct start's child may still read what strip frees. */
	if (kill_child && r->pid > 0) {
		exec_cgroup_kill(&r->cg);
		exec_kill_reap_close(r->pid, r->pidfd, "exec");
		r->pidfd = -1;
	}
	exec_req_strip(r);
	exec_req_close_ours(r);
	if (r->pidfd >= 0)
		close(r->pidfd);
	exec_cgroup_done(&r->cg);
	/* A direct start's child, if any, is reaped or killed by now: killed,
	 * it runs none of its code again, and the kernel writes nothing of
	 * r's (no CLONE_CHILD_CLEARTID). */
	free(r->stack);
	free(r);
}

/* Lock held: the first queued request whose user does not hold
 * SPAWN_PER_UID spawners already, taken off the queue; or NULL.  (A
 * request given up on is not queued: exec_spawn_kill answered it.) */
static struct exec_req *exec_spawn_take_locked(void)
{
	struct exec_req *prev = NULL;

	for (struct exec_req *r = spawn.head; r != NULL; prev = r, r = r->next) {
		unsigned n = 0;
		for (unsigned i = 0; i < spawn.threads; i++)
			n += spawn.busy[i] && spawn.busy_uid[i] == r->owner;
		if (n >= SPAWN_PER_UID)
			continue;
		exec_spawn_unlink_after_locked(prev, r);
		return r;
	}
	return NULL;
}

/* CLOCK_BOOTTIME in ticks (the clock and unit of a process's start time
 * in /proc/<pid>/stat); false if unknown. */
static bool exec_boot_ticks(uint64_t *ticks)
{
	struct timespec ts;

	if (spawn.tick_ns == 0 || clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
		return false;
	*ticks = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) /
	         (uint64_t)spawn.tick_ns;
	return true;
}

/* Our end non-blocking, the child's blocking; both close-on-exec.  (A
 * new pipe end has no status flag but O_NONBLOCK, so clearing the child's
 * is one F_SETFL of 0, without an F_GETFL first.)  0 or errno. */
static int exec_pipe(int fds[2], int ours)
{
	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
		return errno;
	if (fcntl(fds[1 - ours], F_SETFL, 0) != 0) {
		int err = errno;
		close(fds[0]);
		close(fds[1]);
		return err;
	}
	return 0;
}

/*
 * The child's stdin (a pipe when there are bytes to feed it, else
 * /dev/null), stdout and stderr.  Made here, just before the clone, and
 * not when the task starts: a start waiting for a spawner holds no fd, so
 * a burst of starts (or a stuck spawner) cannot run rokd out of fds
 * (abuse.test saw 200 queued starts hold 800 pipe ends).  0 or errno;
 * what was made is closed by the caller's cleanup either way.
 */
static int exec_spawn_pipes(struct exec_req *r)
{
	int p[2], err;

	r->child[0] = spawn.devnull;
	if (r->want_stdin) {
		if ((err = exec_pipe(p, 1)) != 0)
			return err;
		r->child[0] = p[0];
		r->ours[0] = p[1];
	}
	for (int i = 1; i < 3; i++) {
		if ((err = exec_pipe(p, 0)) != 0)
			return err;
		r->ours[i] = p[0];
		r->child[i] = p[1];
	}
	for (int i = 0; i < 3; i++)
		r->s.fds[i] = r->child[i];
	return 0;
}

/* A child's "step" when it was killed as it started (exec_req_born_dead). */
#define EXEC_STEP_BORN_DEAD "killed as it started"

/*
 * Whether r's child, cloned into its cgroup and reaped now, died before
 * its first instruction: the kernel killed it as it cloned it into a
 * cgroup killed from outside rokd (kill_seq, see exec_clone3_probe), or
 * rokd killed it on its way (a timeout, a cancel: that task ends so
 * anyway, and its reason is not this).  Then `cg` (its cgroup, the task's
 * by now) is marked killed, and the other kept cgroups are dropped: what
 * killed this one (cgroup.kill on rokd's directory) may have killed them
 * all.
 */
static bool exec_req_born_dead(struct exec_req *r, struct exec_cgroup *cg)
{
	if (!r->into || __atomic_load_n(&r->ran, __ATOMIC_SEQ_CST))
		return false;
	cg->killed = true;
	exec_cgroup_flush();
	return true;
}

/* r->reason: why the start failed at `step` with errno err. */
static void exec_req_explain(struct exec_req *r, const char *step, int err)
{
	const char *what = strerror(err);

	if (strcmp(step, EXEC_STEP_BORN_DEAD) == 0)
		snprintf(r->reason, sizeof(r->reason), "killed as it started: "
		         "its cgroup had been killed from outside rokd");
	else if (strcmp(step, "cancelled") == 0)
		snprintf(r->reason, sizeof(r->reason), "cancelled before it "
		         "started");
	else if (strcmp(step, "exec") == 0)
		snprintf(r->reason, sizeof(r->reason), "exec %s: %s",
		         r->argv[0], what);
	else if (strcmp(step, "chdir") == 0)
		snprintf(r->reason, sizeof(r->reason), "chdir %s: %s", r->cwd,
		         what);
	else
		snprintf(r->reason, sizeof(r->reason), "%s: %s", step, what);
}

/*
 * clone3 or clone (see rokd_clone3) with `flags` besides CLONE_VM,
 * CLONE_PIDFD and SIGCHLD: the child's pid, or -errno.
 */
static pid_t exec_spawn_fork(struct exec_req *r, char *stack, size_t size,
                             int flags)
{
#ifdef EXEC_CLONE3
	if (!atomic_load_explicit(&spawn.no_clone3, memory_order_relaxed)) {
		struct clone_args a = {
			.flags = CLONE_VM | CLONE_PIDFD | (unsigned)flags,
			.pidfd = (uintptr_t)&r->pidfd,
			.exit_signal = SIGCHLD,
			.stack = (uintptr_t)stack,
			.stack_size = size,
		};
		/* Not for a spawner's start (CLONE_VFORK): a child cloned
		 * into a cgroup frozen meanwhile is frozen before its first
		 * instruction, before `ran`, so exec_spawn_kill could not
		 * end the spawner's wait.  A direct start's child is killed
		 * through its pidfd like any running child. */
		r->into = r->cg.dir >= 0 && spawn.into_cgroup &&
		          !(flags & CLONE_VFORK);
		r->s.cgroup = r->into ? -1 : r->cg.procs;
		if (r->into) {
			a.flags |= CLONE_INTO_CGROUP;
			a.cgroup = (unsigned)r->cg.dir;
		}
		long pid = rokd_clone3(&a, sizeof(a), exec_child_main, r);
		/* EPERM too where nothing but a system call filter refuses
		 * (one older than clone3 that says EPERM, not ENOSYS). */
		if (pid != -ENOSYS && (pid != -EPERM || r->into))
			return (pid_t)pid;
		if (!atomic_exchange_explicit(&spawn.no_clone3, true,
		                              memory_order_relaxed))
			log_info("exec: clone3 refused (%s): children start with "
			         "clone and join their cgroup themselves",
			         strerror((int)-pid));
	}
#endif
	r->into = false;
	r->s.cgroup = r->cg.procs;
	pid_t pid = exec_clone(exec_child_main, stack + size,
	                       CLONE_VM | CLONE_PIDFD | SIGCHLD | flags, r,
	                       &r->pidfd);
	return pid < 0 ? -errno : pid;
}

/*
 * Starts r's child on `stack` (`size` bytes) with clone `flags` besides
 * CLONE_VM, CLONE_PIDFD and SIGCHLD, in a cgroup of its own where there
 * are such (taken here, as the pipes are, so that a queued start holds no
 * fd).  The child's pid, or -1 with *step and *err saying why not.
 *
 * The child's start time (exec_record_group) is the kernel's
 * CLOCK_BOOTTIME when clone made it, in ticks: read here just before and
 * just after the clone, it is known exactly when both readings fall in the
 * same tick, which they do but for a clone that straddles a tick's end (a
 * few in a hundred for a short exec at 100 Hz); only then does the task
 * read /proc/<pid>/stat, whose open and read cost rokd as much CPU time
 * as the clone itself (perf record, rokd running `true`).
 */
static pid_t exec_spawn_clone(struct exec_req *r, void *stack, size_t size,
                              int flags, const char **step, int *err)
{
	/* Given up on already (a stop cancels every start): nothing to take,
	 * and at exit no cgroup to make under a directory being removed.
	 * (The child looks again: the flag may be set from now on.) */
	if (__atomic_load_n(&r->kill, __ATOMIC_SEQ_CST)) {
		*step = "cancelled";
		*err = ECANCELED;
		return -1;
	}
	*step = "its cgroup";
	if ((*err = -exec_cgroup_new(&r->cg)) != 0)
		return -1;
	*step = "pipe";
	if ((*err = exec_spawn_pipes(r)) != 0)
		return -1;

	uint64_t t0 = 0, t1 = 0;
	bool t0_ok = exec_boot_ticks(&t0);

	*step = "clone";
	/* r->pidfd is -1 (exec_start) until the kernel stores the child's. */
	pid_t pid = exec_spawn_fork(r, stack, size, flags);
	*err = pid < 0 ? -pid : 0;
	/* A clone that fails after the kernel stored the pidfd's number
	 * (cgroup_can_fork refusing, a fatal signal) frees the number: it is
	 * not ours, and closing it would close whatever file another thread
	 * opened under it meanwhile. */
	if (pid < 0)
		r->pidfd = -1;
	if (t0_ok && exec_boot_ticks(&t1) && t0 == t1) {
		r->start_known = true;
		r->start_ticks = t0;
	}
	return pid;
}

/* A spawner thread starts r's child and waits for it to exec. */
static void exec_spawner_run(struct exec_req *r, void *stack)
{
	const char *step;
	int err;
	pid_t pid = exec_spawn_clone(r, stack, SPAWN_STACK, CLONE_VFORK, &step,
	                             &err);

	pthread_mutex_lock(&spawn.lock);
	r->state = SPAWN_DONE;   /* exec_spawn_kill leaves the pidfd alone */
	pthread_mutex_unlock(&spawn.lock);
	if (pid > 0 && r->fail.step != NULL) {
		/* It exited before exec: reap it here, it is ours alone. */
		exec_kill_reap_close(pid, r->pidfd, "exec");
		r->pidfd = -1;
		step = r->fail.step;
		err = r->fail.err;
	} else if (pid > 0) {
		/* Started (or killed on its way by exec_spawn_kill: the task
		 * reaps it and sees the signal). */
		r->pid = pid;
		exec_req_strip(r);
		return;
	}
	exec_req_explain(r, step, err);
	exec_req_strip(r);
	exec_req_close_ours(r);
}

#ifdef EXEC_DIRECT
/* A direct start's child stack: its frames take well under a kilobyte. */
#define EXEC_DIRECT_STACK 8192

/*
 * Starts r's child from the calling pool worker, without a spawner and
 * without waiting for it to exec (no CLONE_VFORK), which takes two thread
 * hand-offs and a worker's park off every start.  The child runs on a
 * stack of r's and reads r until it execs, and the task keeps r until the
 * child is reaped (exec_req_reaped, which also tells a step that failed
 * before execve).  A start stuck on a hung mount holds no thread at all:
 * it is a process like a running child, and the task's timeout or cancel
 * kills it as one.  The child's fds are closed here at once: the child has
 * its own copy of the fd table (no CLONE_FILES).
 */
static void exec_spawn_direct(struct exec_req *r)
{
	const char *step = "its stack";
	int err = ENOMEM;
	pid_t pid = -1;

	r->direct = true;
	r->state = SPAWN_DONE;   /* never queued: exec_spawn_kill only flags */
	if ((r->stack = malloc(EXEC_DIRECT_STACK)) != NULL)
		pid = exec_spawn_clone(r, r->stack, EXEC_DIRECT_STACK, 0,
		                       &step, &err);
	if (pid > 0) {
		r->pid = pid;
		exec_req_close_child(r);
		return;
	}
	exec_req_explain(r, step, err);
	exec_req_strip(r);
	exec_req_close_ours(r);
}
#endif

bool exec_req_reaped(struct exec_req *r, struct exec_cgroup *cg)
{
	/* The child is gone: what it stored before exit_group is seen. */
	if (!r->direct)
		return false;
	if (r->fail.step != NULL)
		exec_req_explain(r, r->fail.step, r->fail.err);
	else if (exec_req_born_dead(r, cg))
		exec_req_explain(r, EXEC_STEP_BORN_DEAD, 0);
	else
		return false;
	return true;
}

static void *exec_spawner_main(void *arg)
{
	unsigned me = (unsigned)(uintptr_t)arg;
	/* Written before this thread was created. */
	void *stack = spawn.stack[me];

	(void)pthread_setname_np(pthread_self(), "rokd-spawner");
	pthread_mutex_lock(&spawn.lock);
	for (;;) {
		struct exec_req *r;
		while ((r = exec_spawn_take_locked()) == NULL)
			pthread_cond_wait(&spawn.cond, &spawn.lock);
		spawn.idle--;
		spawn.busy[me] = true;
		spawn.busy_uid[me] = r->owner;
		r->state = SPAWN_STARTING;
		exec_spawn_grow_locked();
		pthread_mutex_unlock(&spawn.lock);
		exec_spawner_run(r, stack);
		/* The task gone (cancelled meanwhile): its child dies here. */
		if (rok_oneshot_send(r->done, r) < 0)
			exec_req_free(r, true);
		pthread_mutex_lock(&spawn.lock);
		spawn.busy[me] = false;
		spawn.idle++;
		/* This user may hold one spawner fewer: a request of theirs
		 * may be eligible now.  With nothing queued there is nothing
		 * to take, and no spawner needs waking (this one looks at the
		 * queue itself before it waits). */
		if (spawn.head != NULL)
			pthread_cond_broadcast(&spawn.cond);
	}
	return NULL;
}
