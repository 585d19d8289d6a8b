/*
 * chan.c — a bounded MPMC channel and a oneshot, for tasks.
 *
 * A channel is a ring of values and two wait lists (receivers waiting for a
 * value, senders waiting for room) under one spinlock.  A sender never hands
 * a value to a particular receiver: values stay in the ring until a polled
 * receiver takes one, so a receiver that is woken and then cancelled loses
 * nothing.  What it must not lose is the wake-up itself: a waiter that was
 * woken but leaves without taking its turn passes the wake-up on (the
 * release functions below).
 *
 * The oneshot is the same idea for one value and one receiver; it is freed
 * by whichever side lets go last.
 *
 * Lock order: a channel's lock is never held while taking another lock or
 * waking a task; wakes happen after unlocking.
 */
#include <errno.h>
#include <stdlib.h>

#include "spin.h"
#include "task.h"
#include "waitq.h"

#define CHAN_CAP_MAX (1u << 24)

struct rok_chan {
	struct spin lock;
	bool closed;
	size_t cap, head, len;
	rok_waiter *recvq, *sendq;
	void *buf[];
};

static void chan_wake(rok_task *t)
{
	if (t != NULL)
		task_wake_by_val(t);
}

int rok_chan_new(rok_chan **out, size_t cap)
{
	*out = NULL;
	if (cap == 0 || cap > CHAN_CAP_MAX)
		return -EINVAL;
	rok_chan *ch = calloc(1, sizeof(*ch) + cap * sizeof(void *));
	if (ch == NULL)
		return -ENOMEM;
	ch->cap = cap;
	*out = ch;
	return 0;
}

void rok_chan_free(rok_chan *ch, void (*drop)(void *value))
{
	if (ch == NULL)
		return;
	for (size_t i = 0; i < ch->len && drop != NULL; i++)
		drop(ch->buf[(ch->head + i) % ch->cap]);
	free(ch);
}

void rok_chan_close(rok_chan *ch)
{
	spin_lock(&ch->lock);
	ch->closed = true;
	spin_unlock(&ch->lock);
	for (;;) {
		spin_lock(&ch->lock);
		rok_task *t = waitq_take(&ch->recvq);
		if (t == NULL)
			t = waitq_take(&ch->sendq);
		spin_unlock(&ch->lock);
		if (t == NULL)
			return;
		chan_wake(t);
	}
}

/* Lock held.  Queues a value and picks a receiver to wake. */
static rok_task *chan_put_locked(rok_chan *ch, void *value)
{
	ch->buf[(ch->head + ch->len) % ch->cap] = value;
	ch->len++;
	return waitq_take(&ch->recvq);
}

/* Lock held.  Takes the oldest value and picks a sender to wake. */
static rok_task *chan_get_locked(rok_chan *ch, void **value)
{
	*value = ch->buf[ch->head];
	ch->head = (ch->head + 1) % ch->cap;
	ch->len--;
	return waitq_take(&ch->sendq);
}

int rok_chan_try_send(rok_chan *ch, void *value)
{
	rok_task *wake = NULL;
	int err = 0;

	if (value == NULL)
		return -EINVAL;
	spin_lock(&ch->lock);
	if (ch->closed)
		err = -EPIPE;
	else if (ch->len == ch->cap)
		err = -EAGAIN;
	else
		wake = chan_put_locked(ch, value);
	spin_unlock(&ch->lock);
	chan_wake(wake);
	return err;
}

int rok_chan_try_recv(rok_chan *ch, void **value)
{
	rok_task *wake = NULL;
	int err = 0;

	*value = NULL;
	spin_lock(&ch->lock);
	if (ch->len > 0)
		wake = chan_get_locked(ch, value);
	else
		err = ch->closed ? -EPIPE : -EAGAIN;
	spin_unlock(&ch->lock);
	chan_wake(wake);
	return err;
}

/* A waiter leaves (cancelled).  If a wake-up reached it first, hand the
 * wake-up to the next waiter of the same kind while its reason holds. */
static void chan_release(rok_waiter *w, bool sender)
{
	rok_chan *ch = w->queue;
	rok_waiter **q = sender ? &ch->sendq : &ch->recvq;
	rok_task *wake = NULL;

	spin_lock(&ch->lock);
	if (!waitq_unlink(q, w)) {
		bool reason = sender ? ch->len < ch->cap : ch->len > 0;
		if (reason || ch->closed)
			wake = waitq_take(q);
	}
	spin_unlock(&ch->lock);
	chan_wake(wake);
}

static void chan_send_release(rok_waiter *w) { chan_release(w, true); }
static void chan_recv_release(rok_waiter *w) { chan_release(w, false); }

rok_poll rok_chan_send(rok_cx *cx, rok_chan_op *op, rok_chan *ch, void *value,
                       int *err)
{
	rok_task *wake = NULL;

	if (waitq_begin(cx, &op->w))
		return ROK_PENDING;
	if (value == NULL) {
		*err = -EINVAL;
		return ROK_READY;
	}
	spin_lock(&ch->lock);
	if (ch->closed) {
		*err = -EPIPE;
	} else if (ch->len < ch->cap) {
		wake = chan_put_locked(ch, value);
		*err = 0;
	} else {
		waitq_link(&ch->sendq, &op->w, cx, chan_send_release, ch);
		spin_unlock(&ch->lock);
		return ROK_PENDING;
	}
	spin_unlock(&ch->lock);
	chan_wake(wake);
	return ROK_READY;
}

rok_poll rok_chan_recv(rok_cx *cx, rok_chan_op *op, rok_chan *ch, void **value,
                       int *err)
{
	rok_task *wake = NULL;

	if (waitq_begin(cx, &op->w))
		return ROK_PENDING;
	spin_lock(&ch->lock);
	if (ch->len > 0) {
		wake = chan_get_locked(ch, value);
		*err = 0;
	} else if (ch->closed) {
		*value = NULL;
		*err = -EPIPE;
	} else {
		waitq_link(&ch->recvq, &op->w, cx, chan_recv_release, ch);
		spin_unlock(&ch->lock);
		return ROK_PENDING;
	}
	spin_unlock(&ch->lock);
	chan_wake(wake);
	return ROK_READY;
}

/* ---- oneshot ---------------------------------------------------------- */

enum { ONESHOT_SENDER = 1, ONESHOT_RECEIVER = 2 };

struct rok_oneshot {
	struct spin lock;
	uint8_t sides;          /* ONESHOT_* still held */
	bool sent;              /* value holds an unreceived value */
	void *value;
	rok_waiter *waiter;
};

int rok_oneshot_new(rok_oneshot **out)
{
	*out = calloc(1, sizeof(**out));
	if (*out == NULL)
		return -ENOMEM;
	(*out)->sides = ONESHOT_SENDER | ONESHOT_RECEIVER;
	return 0;
}

/* Lock held: drops a side; true if the caller must free the oneshot. */
static bool oneshot_drop_locked(rok_oneshot *o, uint8_t side)
{
	o->sides &= (uint8_t)~side;
	return o->sides == 0;
}

static void oneshot_unlock_and_finish(rok_oneshot *o, bool last,
                                      rok_task *wake)
{
	spin_unlock(&o->lock);
	chan_wake(wake);
	if (last)
		free(o);
}

int rok_oneshot_send(rok_oneshot *o, void *value)
{
	rok_task *wake = NULL;
	int err = 0;

	spin_lock(&o->lock);
	if (o->sides & ONESHOT_RECEIVER) {
		o->value = value;
		o->sent = true;
		wake = waitq_take(&o->waiter);
	} else {
		err = -EPIPE;
	}
	oneshot_unlock_and_finish(o, oneshot_drop_locked(o, ONESHOT_SENDER),
	                          wake);
	return err;
}

void rok_oneshot_drop_sender(rok_oneshot *o)
{
	spin_lock(&o->lock);
	rok_task *wake = waitq_take(&o->waiter);
	oneshot_unlock_and_finish(o, oneshot_drop_locked(o, ONESHOT_SENDER),
	                          wake);
}

void *rok_oneshot_drop_receiver(rok_oneshot *o)
{
	spin_lock(&o->lock);
	if (o->waiter != NULL)
		waitq_unlink(&o->waiter, o->waiter);
	void *v = o->sent ? o->value : NULL;
	o->sent = false;
	oneshot_unlock_and_finish(o, oneshot_drop_locked(o, ONESHOT_RECEIVER),
	                          NULL);
	return v;
}

static void oneshot_release(rok_waiter *w)
{
	rok_oneshot *o = w->queue;

	spin_lock(&o->lock);
	waitq_unlink(&o->waiter, w);
	spin_unlock(&o->lock);
}

rok_poll rok_oneshot_recv(rok_cx *cx, rok_chan_op *op, rok_oneshot *o,
                          void **value, int *err)
{
	if (waitq_begin(cx, &op->w))
		return ROK_PENDING;
	spin_lock(&o->lock);
	if (o->sent) {
		*value = o->value;
		o->sent = false;
		o->value = NULL;
		*err = 0;
	} else if (!(o->sides & ONESHOT_SENDER)) {
		*value = NULL;
		*err = -EPIPE;
	} else {
		waitq_link(&o->waiter, &op->w, cx, oneshot_release, o);
		spin_unlock(&o->lock);
		return ROK_PENDING;
	}
	spin_unlock(&o->lock);
	return ROK_READY;
}
