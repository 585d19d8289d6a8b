/*
 * injector.h — a lock-free multi-producer stack of tasks that consumers empty
 * in one exchange and get back in FIFO order.  Used as the global injector
 * (tasks from outside the pool) and as each worker's inbox (pinned tasks
 * woken elsewhere; remote spawns in thread-per-core mode).
 */
#ifndef ROK_INJECTOR_H
#define ROK_INJECTOR_H

#include <stdatomic.h>
#include <stdbool.h>

#include "task.h"

struct injector {
	_Alignas(64) _Atomic(rok_task *) head;   /* newest first */
	_Atomic int64_t depth;                   /* tasks in it (a statistic) */
	char pad[64 - sizeof(rok_task *) - sizeof(int64_t)];
};

/* Any thread.  Links `t` through t->next. */
void injector_push(struct injector *q, rok_task *t);

/* Any thread.  Takes every task pushed so far, oldest first (linked through
 * ->next, NULL-terminated), or NULL. */
rok_task *injector_take_all(struct injector *q);

static inline bool injector_is_empty(struct injector *q)
{
	return atomic_load_explicit(&q->head, memory_order_relaxed) == NULL;
}

#endif /* ROK_INJECTOR_H */
