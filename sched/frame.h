/*
 * frame.h — task frame storage: per-thread caches over a global depot of
 * slabs.  See frame.c for the design.
 */
#ifndef ROK_FRAME_H
#define ROK_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define FRAME_NCLASS   11
#define FRAME_LARGE    0xff        /* size_class of a malloc'd frame */

/* Class 0 holds task records (task.h) and nothing else: every other
 * request is bigger.  frame_for_each_record walks it. */
#define FRAME_RECORD_SIZE  24
#define FRAME_RECORD_CLASS 0

/* One thread's cache: owner thread only. */
struct frame_cache {
	void *free[FRAME_NCLASS];
	uint32_t count[FRAME_NCLASS];
	uint64_t generation;            /* frame_generation it was filled in */
};

/*
 * Returns storage of `size` bytes (a task's record, or its body with the
 * frame) and its class in *cls, or NULL when out of memory.  Owner
 * thread's cache.
 */
void *frame_alloc(struct frame_cache *c, size_t size, uint8_t *cls);

/* Returns a frame to the calling thread's cache (or the depot). */
void frame_free(struct frame_cache *c, void *p, uint8_t cls);

/* Gives everything `c` holds back to the depot (thread exit). */
void frame_cache_flush(struct frame_cache *c);

/*
 * Calls fn on every record handed out and not freed (stop only: the caller
 * guarantees no other thread allocates or frees meanwhile, and fn must not
 * free frames).  A frame's first word is zero while it is free, so fn can
 * tell live tasks apart.
 */
void frame_for_each_record(void (*fn)(void *frame, void *arg), void *arg);

/* Frees every slab and large frame; caches of all threads become stale. */
void frame_release_all(void);

/* Bytes in slabs and large frames (a diagnostic). */
size_t frame_bytes(void);

#endif /* ROK_FRAME_H */
