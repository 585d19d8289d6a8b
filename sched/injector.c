/*
 * injector.c — see injector.h.
 *
 * Producers push onto a Treiber stack with one CAS; a consumer takes the
 * whole stack with one exchange and reverses it, so tasks come out in the
 * order they were pushed (per batch, and batches in order).  There is no pop
 * of a single node, hence no ABA problem.  A consumer that takes a big batch
 * spreads it through its own deque, where other workers can steal it.
 */
#include "injector.h"

void injector_push(struct injector *q, rok_task *t)
{
	rok_task *head = atomic_load_explicit(&q->head, memory_order_relaxed);

	do {
		task_body(t)->next = head;
		/* Release: publishes the task's initialised frame and its next
		 * to the consumer's acquire exchange. */
	} while (!atomic_compare_exchange_weak_explicit(&q->head, &head, t,
	                                                memory_order_release,
	                                                memory_order_relaxed));
	atomic_fetch_add_explicit(&q->depth, 1, memory_order_relaxed);
}

rok_task *injector_take_all(struct injector *q)
{
	if (atomic_load_explicit(&q->head, memory_order_relaxed) == NULL)
		return NULL;
	/* Acquire: pairs with the producers' release CAS. */
	rok_task *t = atomic_exchange_explicit(&q->head, NULL,
	                                       memory_order_acquire);
	rok_task *fifo = NULL;
	int64_t n = 0;

	while (t != NULL) {
		rok_task *next = task_body(t)->next;
		task_body(t)->next = fifo;
		fifo = t;
		t = next;
		n++;
	}
	atomic_fetch_sub_explicit(&q->depth, n, memory_order_relaxed);
	return fifo;
}
