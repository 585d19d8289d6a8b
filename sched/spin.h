/*
 * spin.h — a test-and-test-and-set spinlock for short critical sections
 * (a channel's buffer, a wait list).  Never held across a call that may
 * block or take another lock, except where a caller documents its order.
 */
#ifndef ROK_SPIN_H
#define ROK_SPIN_H

#include <stdatomic.h>
#include <stdint.h>

struct spin {
	_Atomic uint32_t v;
};

static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static inline void spin_lock(struct spin *s)
{
	for (;;) {
		/* Acquire: pairs with spin_unlock's release, so the previous
		 * holder's writes are visible inside the section. */
		if (atomic_exchange_explicit(&s->v, 1, memory_order_acquire) == 0)
			return;
		while (atomic_load_explicit(&s->v, memory_order_relaxed) != 0)
			spin_pause();
	}
}

static inline void spin_unlock(struct spin *s)
{
	/* Release: publishes the section's writes to the next holder. */
	atomic_store_explicit(&s->v, 0, memory_order_release);
}

#endif /* ROK_SPIN_H */
