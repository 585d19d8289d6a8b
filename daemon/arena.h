/*
 * arena.h — a bump allocator for messages decoded and dropped in one call.
 */
#ifndef ROKD_ARENA_H
#define ROKD_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

struct arena_big;

struct arena {
	uint8_t *buf;               /* caller's block, cap bytes, aligned */
	size_t cap, used;
	struct arena_big *big;      /* what did not fit, newest first */
	size_t big_bytes;           /* malloc'd for `big`, headers included */
	size_t big_limit;           /* past it allocations fail; 0: none */
	bool over;                  /* one failed for big_limit since the mark */
	ProtobufCAllocator pb;      /* for protobuf-c: allocates here */
	bool poison;                /* under ASan, poison the free part */
};

/* Where an arena stood: arena_release goes back to it. */
struct arena_mark {
	size_t used;
	struct arena_big *big;
	size_t big_bytes;
};

/* buf: cap bytes aligned for max_align_t, owned by one thread.  poison:
 * under AddressSanitizer, keep its free part poisoned; only for a block
 * of static storage (see arena.c). */
void arena_init(struct arena *a, void *buf, size_t cap, bool poison);
/* Caps the bytes malloc'd beyond the block (0: no cap): a piece past it
 * is refused (NULL, and `over` is set until the next arena_release), so
 * a small frame cannot decode into unbounded memory. */
void arena_set_limit(struct arena *a, size_t limit);
struct arena_mark arena_mark(const struct arena *a);
void arena_release(struct arena *a, struct arena_mark m);

#endif
