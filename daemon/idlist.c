/*
 * idlist.c — the task-id lists that requests carry (status, join, race,
 * cancel; select's specs): a cap on their length and de-duplication.
 *
 * A frame of max_frame bytes can name one id hundreds of thousands of
 * times, and each name can cost a copy of that task's arguments in the
 * reply and a journal read: config.max_ids caps the list (INVALID_ARGUMENT
 * past it), and status, join and race name each task once (a race waiting
 * on one task named 10,000 times held a handle, slots and a registration
 * per name, for as long as the task ran).  Reactor thread; pure functions of their arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "rokd.h"

bool idlist_check(struct conn *c, uint64_t req_id, size_t n,
                  const char *what)
{
	if (n <= config.max_ids)
		return true;
	conn_send_error(c, req_id, ROK__V1__ERROR_CODE__INVALID_ARGUMENT,
	                "too many %s in one request: %zu (the limit is "
	                "max_ids = %u)", what, n, config.max_ids);
	return false;
}

struct idlist_entry {
	uint64_t id;
	size_t index;
};

static int idlist_cmp(const void *a, const void *b)
{
	const struct idlist_entry *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

static int idlist_cmp_index(const void *a, const void *b)
{
	const struct idlist_entry *x = a, *y = b;

	return x->index < y->index ? -1 : x->index > y->index;
}

ssize_t idlist_dedup(const uint64_t *ids, size_t n, uint64_t *out,
                     size_t *first)
{
	struct idlist_entry *e = malloc((n > 0 ? n : 1) * sizeof(*e));
	size_t m = 0;

	if (e == NULL)
		return -1;
	for (size_t i = 0; i < n; i++)
		e[i] = (struct idlist_entry){ .id = ids[i], .index = i };
	/* By id then position: the first of equal ids is kept. */
	qsort(e, n, sizeof(*e), idlist_cmp);
	for (size_t i = 0; i < n; i++)
		if (m == 0 || e[m - 1].id != e[i].id)
			e[m++] = e[i];
	qsort(e, m, sizeof(*e), idlist_cmp_index);
	for (size_t i = 0; i < m; i++) {
		out[i] = e[i].id;
		if (first != NULL)
			first[i] = e[i].index;
	}
	free(e);
	return (ssize_t)m;
}
