/*
 * runq.h — an owner-only growable FIFO ring of tasks: the queue of tasks
 * pinned to one worker (spawn_local, block_on, thread-per-core), which no
 * other thread may take.  No atomics: only the owner touches it.
 */
#ifndef ROK_RUNQ_H
#define ROK_RUNQ_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "task.h"

struct runq {
	rok_task **slots;
	size_t cap, head, len;      /* cap is 0 or a power of 2 */
};

static inline int runq_push(struct runq *q, rok_task *t)
{
	if (q->len == q->cap) {
		size_t ncap = q->cap != 0 ? 2 * q->cap : 64;
		rok_task **n = malloc(ncap * sizeof(*n));
		if (n == NULL)
			return -ENOMEM;
		for (size_t i = 0; i < q->len; i++)
			n[i] = q->slots[(q->head + i) & (q->cap - 1)];
		free(q->slots);
		q->slots = n;
		q->cap = ncap;
		q->head = 0;
	}
	q->slots[(q->head + q->len) & (q->cap - 1)] = t;
	q->len++;
	return 0;
}

static inline rok_task *runq_pop(struct runq *q)
{
	if (q->len == 0)
		return NULL;
	rok_task *t = q->slots[q->head];
	q->head = (q->head + 1) & (q->cap - 1);
	q->len--;
	return t;
}

static inline void runq_done(struct runq *q)
{
	free(q->slots);
	memset(q, 0, sizeof(*q));
}

#endif /* ROK_RUNQ_H */
