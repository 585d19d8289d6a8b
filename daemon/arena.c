/*
 * arena.c — a bump allocator for messages decoded and dropped in one call.
 *
 * A request is decoded, dispatched and freed within one read callback, a
 * task's spec decoded and freed within its start; protobuf-c made a malloc
 * for every message, string and repeated field of them and free_unpacked
 * a free for each, the largest part of the reactor's malloc churn at many
 * small pipelined spawns (issue 15).  An arena hands out pieces of one
 * block owned by its user (static or thread-local, never shared between
 * threads) and takes them all back at once: arena_mark notes where it
 * stands, arena_release goes back there.  The marks nest (a task's start
 * may start another), so a release frees only what came after its mark.
 * A piece that does not fit in what is left of the block is malloc'd on
 * its own and chained, freed at the release that passes it; their total
 * may be capped (arena_set_limit: conn.c caps a request's).  protobuf-c's
 * frees are ignored: nothing is given back before the release.
 *
 * Under AddressSanitizer the free part of a static block is poisoned
 * (arena_init's `poison`): a handler that kept a pointer into a request
 * past its dispatch is caught as a use after its release, as with
 * protobuf-c's own allocator, and a read past a piece as an overflow.  Not
 * a thread-local block: a thread's static TLS is reused by a later thread,
 * which would inherit the poison.
 */
#include <stdalign.h>
#include <stdlib.h>

#include "arena.h"

#if defined(__SANITIZE_ADDRESS__)
#define ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_ASAN 1
#endif
#endif

#ifdef ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define arena_poison(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define arena_unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define arena_poison(p, n) ((void)(p), (void)(n))
#define arena_unpoison(p, n) ((void)(p), (void)(n))
#endif

struct arena_big {
	struct arena_big *next;
	max_align_t data[];
};

static void *arena_alloc(void *data, size_t size)
{
	struct arena *a = data;
	const size_t align = alignof(max_align_t);

	if (size <= a->cap - a->used) {
		void *p = a->buf + a->used;
		size_t left = a->cap - a->used - size;
		/* Rounded up for the next piece, never past the block. */
		size_t pad = (align - size % align) % align;
		a->used += size + (pad < left ? pad : left);
		if (a->poison)
			arena_unpoison(p, size);
		return p;
	}
	/* Counted with malloc's own header (about 16 bytes a block). */
	const size_t over = sizeof(struct arena_big) + 16;
	if (size > SIZE_MAX - over)
		return NULL;
	if (a->big_limit != 0 && (size + over > a->big_limit ||
	                          a->big_bytes > a->big_limit - size - over)) {
		a->over = true;
		return NULL;
	}
	struct arena_big *b = malloc(sizeof(*b) + size);
	if (b == NULL)
		return NULL;
	b->next = a->big;
	a->big = b;
	a->big_bytes += size + over;
	return b->data;
}

static void arena_free(void *data, void *p)
{
	(void)data;
	(void)p;    /* at arena_release */
}

void arena_init(struct arena *a, void *buf, size_t cap, bool poison)
{
	a->buf = buf;
	a->cap = cap;
	a->used = 0;
	a->big = NULL;
	a->big_bytes = 0;
	a->big_limit = 0;
	a->over = false;
	a->pb.alloc = arena_alloc;
	a->pb.free = arena_free;
	a->pb.allocator_data = a;
	a->poison = poison;
	if (poison)
		arena_poison(buf, cap);
}

void arena_set_limit(struct arena *a, size_t limit)
{
	a->big_limit = limit;
}

struct arena_mark arena_mark(const struct arena *a)
{
	return (struct arena_mark){ a->used, a->big, a->big_bytes };
}

void arena_release(struct arena *a, struct arena_mark m)
{
	while (a->big != m.big) {
		struct arena_big *next = a->big->next;
		free(a->big);
		a->big = next;
	}
	if (a->poison)
		arena_poison(a->buf + m.used, a->used - m.used);
	a->used = m.used;
	a->big_bytes = m.big_bytes;
	a->over = false;
}
