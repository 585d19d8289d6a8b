/*
 * frame.c — storage for task frames.
 *
 * Spawning must not take a lock or make a system call, so frames come from a
 * cache owned by the calling thread: one free list per size class.  Caches
 * trade with a global depot in batches, under the depot's mutex, when they run
 * dry or grow past CACHE_MAX; the depot carves new frames out of 256 KiB
 * slabs, mapped with MAP_POPULATE: one system call faults in a whole slab,
 * where touching fresh pages one by one costs a page fault each (a third of
 * the time of a million spawns, measured, on a virtual machine).
 * Frames freed on another thread than the one that allocated them simply join
 * the freeing thread's cache, as in tcmalloc.  Frames larger than the biggest
 * class are malloc'd one by one and kept on a list.
 *
 * Slabs are only returned at stop (frame_release_all), which is also the only
 * time frame_for_each_record walks them (task records' class only).  A
 * record's first word (the task's state) is zero while it is free; the
 * free-list link is every frame's second word.
 *
 * A cache records the generation it was filled in; after a stop freed the
 * slabs a stale cache is dropped instead of used.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "frame.h"

#define SLAB_BYTES   (256 * 1024)
#define CACHE_MAX    512     /* frames per class a cache keeps */
#define BATCH        64      /* frames moved per depot trip */

/* 32 and 40: the bodies of tasks with no frame and an 8-byte one
 * (task.h). */
static const uint32_t frame_class_size[FRAME_NCLASS] = {
	FRAME_RECORD_SIZE, 32, 40, 48, 56, 64, 96, 128, 192, 256, 512
};

struct frame_slab {
	struct frame_slab *next;
	uint32_t cls;
	uint32_t carved;        /* frames handed out of this slab so far */
	_Alignas(16) char mem[];
};

struct frame_large {
	struct frame_large *prev, *next;
	size_t size;
	_Alignas(16) char mem[];
};

static struct {
	pthread_mutex_t lock;
	void *free[FRAME_NCLASS];          /* depot free lists */
	struct frame_slab *current[FRAME_NCLASS]; /* slab being carved */
	struct frame_slab *slabs;          /* every slab, for walking and freeing */
	struct frame_large *large;
	size_t bytes;
	_Atomic uint64_t generation;
} frame_depot = { .lock = PTHREAD_MUTEX_INITIALIZER, .generation = 1 };

static inline void **frame_link(void *p)
{
	return (void **)(void *)((char *)p + sizeof(uint64_t));
}

static int frame_class_of(size_t size)
{
	for (int i = 0; i < FRAME_NCLASS; i++)
		if (size <= frame_class_size[i])
			return i;
	return -1;
}

static uint32_t frame_slab_capacity(uint32_t cls)
{
	return (uint32_t)((SLAB_BYTES - sizeof(struct frame_slab)) /
	                  frame_class_size[cls]);
}

/* Moves up to BATCH frames of class cls into the cache; depot lock held. */
static void frame_refill_locked(struct frame_cache *c, int cls)
{
	unsigned n = 0;

	while (n < BATCH && frame_depot.free[cls] != NULL) {
		void *p = frame_depot.free[cls];
		frame_depot.free[cls] = *frame_link(p);
		*frame_link(p) = c->free[cls];
		c->free[cls] = p;
		n++;
	}
	while (n < BATCH) {
		struct frame_slab *s = frame_depot.current[cls];
		if (s == NULL || s->carved == frame_slab_capacity((uint32_t)cls)) {
			s = mmap(NULL, SLAB_BYTES, PROT_READ | PROT_WRITE,
			         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
			         -1, 0);
			if (s == MAP_FAILED)
				break;
			s->cls = (uint32_t)cls;
			s->carved = 0;
			s->next = frame_depot.slabs;
			frame_depot.slabs = s;
			frame_depot.current[cls] = s;
			frame_depot.bytes += SLAB_BYTES;
		}
		void *p = s->mem + (size_t)s->carved * frame_class_size[cls];
		s->carved++;
		memset(p, 0, sizeof(uint64_t));
		*frame_link(p) = c->free[cls];
		c->free[cls] = p;
		n++;
	}
	c->count[cls] += n;
}

static void frame_cache_check(struct frame_cache *c)
{
	uint64_t gen = atomic_load_explicit(&frame_depot.generation,
	                                    memory_order_relaxed);
	if (c->generation != gen) {
		memset(c, 0, sizeof(*c));
		c->generation = gen;
	}
}

void *frame_alloc(struct frame_cache *c, size_t size, uint8_t *cls)
{
	int k = frame_class_of(size);

	if (k < 0) {
		struct frame_large *l = malloc(sizeof(*l) + size);
		if (l == NULL)
			return NULL;
		pthread_mutex_lock(&frame_depot.lock);
		l->prev = NULL;
		l->size = sizeof(*l) + size;
		l->next = frame_depot.large;
		if (l->next != NULL)
			l->next->prev = l;
		frame_depot.large = l;
		frame_depot.bytes += sizeof(*l) + size;
		pthread_mutex_unlock(&frame_depot.lock);
		*cls = FRAME_LARGE;
		return l->mem;
	}
	frame_cache_check(c);
	if (c->free[k] == NULL) {
		pthread_mutex_lock(&frame_depot.lock);
		frame_refill_locked(c, k);
		pthread_mutex_unlock(&frame_depot.lock);
		if (c->free[k] == NULL)
			return NULL;
	}
	void *p = c->free[k];
	c->free[k] = *frame_link(p);
	c->count[k]--;
	*cls = (uint8_t)k;
	return p;
}

/* Gives `n` frames from the head of the cache's class-k list to the depot. */
static void frame_spill(struct frame_cache *c, int k, uint32_t n)
{
	void *head = c->free[k], *tail = head;

	for (uint32_t i = 1; i < n; i++)
		tail = *frame_link(tail);
	c->free[k] = *frame_link(tail);
	c->count[k] -= n;
	pthread_mutex_lock(&frame_depot.lock);
	*frame_link(tail) = frame_depot.free[k];
	frame_depot.free[k] = head;
	pthread_mutex_unlock(&frame_depot.lock);
}

void frame_free(struct frame_cache *c, void *p, uint8_t cls)
{
	if (cls == FRAME_LARGE) {
		struct frame_large *l = (struct frame_large *)(void *)
			((char *)p - offsetof(struct frame_large, mem));
		pthread_mutex_lock(&frame_depot.lock);
		if (l->prev != NULL)
			l->prev->next = l->next;
		else
			frame_depot.large = l->next;
		if (l->next != NULL)
			l->next->prev = l->prev;
		frame_depot.bytes -= l->size;
		pthread_mutex_unlock(&frame_depot.lock);
		free(l);
		return;
	}
	frame_cache_check(c);
	*frame_link(p) = c->free[cls];
	c->free[cls] = p;
	if (++c->count[cls] > CACHE_MAX)
		frame_spill(c, cls, CACHE_MAX / 2);
}

void frame_cache_flush(struct frame_cache *c)
{
	if (c->generation != atomic_load_explicit(&frame_depot.generation,
	                                         memory_order_relaxed))
		return;
	for (int k = 0; k < FRAME_NCLASS; k++)
		if (c->count[k] > 0)
			frame_spill(c, k, c->count[k]);
}

void frame_for_each_record(void (*fn)(void *frame, void *arg), void *arg)
{
	pthread_mutex_lock(&frame_depot.lock);
	struct frame_slab *slabs = frame_depot.slabs;
	pthread_mutex_unlock(&frame_depot.lock);

	/* New slabs are pushed at the head, so walking from a snapshot of the
	 * head sees every frame that existed when the walk started. */
	for (struct frame_slab *s = slabs; s != NULL; s = s->next) {
		if (s->cls != FRAME_RECORD_CLASS)
			continue;
		for (uint32_t i = 0; i < s->carved; i++)
			fn(s->mem + (size_t)i * FRAME_RECORD_SIZE, arg);
	}
}

void frame_release_all(void)
{
	pthread_mutex_lock(&frame_depot.lock);
	while (frame_depot.slabs != NULL) {
		struct frame_slab *s = frame_depot.slabs;
		frame_depot.slabs = s->next;
		munmap(s, SLAB_BYTES);
	}
	while (frame_depot.large != NULL) {
		struct frame_large *l = frame_depot.large;
		frame_depot.large = l->next;
		free(l);
	}
	memset(frame_depot.free, 0, sizeof(frame_depot.free));
	memset(frame_depot.current, 0, sizeof(frame_depot.current));
	frame_depot.bytes = 0;
	atomic_fetch_add_explicit(&frame_depot.generation, 1,
	                          memory_order_relaxed);
	pthread_mutex_unlock(&frame_depot.lock);
}

size_t frame_bytes(void)
{
	pthread_mutex_lock(&frame_depot.lock);
	size_t n = frame_depot.bytes;
	pthread_mutex_unlock(&frame_depot.lock);
	return n;
}
