/*
 * waiter.h — requests that wait for tasks; see waiter.c.
 */
#ifndef ROKD_WAITER_H
#define ROKD_WAITER_H

#include "rokd.h"

enum {
	WAIT_JOIN,      /* every task; JoinReply */
	WAIT_SPAWN,     /* the one task; SpawnReply */
	WAIT_RACE,      /* the first task; RaceReply */
	WAIT_SELECT,    /* the first task, the others cancelled; SelectReply */
};

/*
 * Starts the wait for `ids` on behalf of request req_id of connection c
 * (reactor thread); its reply comes later.  `index` (NULL: the identity)
 * gives the index in the request of each id, for a race's reply.  `begun`: the caller counted the
 * wait already (conn_begin_wait) and the waiter takes it over, so a wait
 * whose tasks were started cannot be refused for the in-flight limit.  On
 * failure the request has been answered already (and a begun wait ended).
 * Returns 0 or -errno.
 */
int waiter_start(struct conn *c, uint64_t req_id, int mode,
                 const uint64_t *ids, const size_t *index, size_t n,
                 uint64_t timeout_ms, bool cancel_rest, bool begun);

#endif /* ROKD_WAITER_H */
