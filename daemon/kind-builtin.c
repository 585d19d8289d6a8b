/*
 * kind-builtin.c — the built-in task kinds: noop (finishes at once), sleep
 * DURATION, echo TEXT (its value is TEXT).  Useful to try rokd out and to
 * measure the daemon without the cost of processes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rokd.h"

static int kind_check_nargs(const TaskSpec *spec, size_t n, const char *usage,
                            char *err, size_t len)
{
	if (spec->n_args != n) {
		snprintf(err, len, "usage: %s", usage);
		return -1;
	}
	return 0;
}

/* ---- noop ------------------------------------------------------------- */

static int noop_check(const TaskSpec *spec, char *err, size_t len)
{
	return kind_check_nargs(spec, 0, "noop", err, len);
}

static rok_poll noop_poll(rok_cx *cx, void *frame)
{
	(void)cx;
	(void)frame;
	return ROK_READY;
}

static void noop_init(void *frame, struct rtask *r, const TaskSpec *spec)
{
	(void)frame;
	(void)r;
	(void)spec;
}

static void noop_finish(void *frame, int how, struct rt_outcome *o)
{
	(void)frame;
	(void)how;
	(void)o;
}

const struct kind kind_noop = {
	.name = "noop",
	.check = noop_check,
	.poll = noop_poll,
	.frame_size = 0,
	.init = noop_init,
	.finish = noop_finish,
};

/* ---- sleep ------------------------------------------------------------ */

struct sleep_frame {
	int64_t ns;
	rok_sleep_op op;
};

static int sleep_check(const TaskSpec *spec, char *err, size_t len)
{
	int64_t ns;

	if (kind_check_nargs(spec, 1, "sleep DURATION", err, len) < 0)
		return -1;
	int e = duration_parse((const char *)spec->args[0].data,
	                       spec->args[0].len, &ns);
	if (e == -ERANGE) {
		snprintf(err, len, "sleep: duration longer than the maximum, %s",
		         DURATION_MAX_TEXT);
		return -1;
	}
	if (e < 0) {
		snprintf(err, len, "sleep: bad duration (try 250ms, 5s, 2m, 1h)");
		return -1;
	}
	return 0;
}

static rok_poll sleep_poll(rok_cx *cx, void *frame)
{
	struct sleep_frame *f = frame;

	ROK_BEGIN(cx);
	ROK_AWAIT(cx, rok_sleep(cx, &f->op, f->ns));
	ROK_CLEANUP(cx);
	ROK_END(cx);
}

static void sleep_init(void *frame, struct rtask *r, const TaskSpec *spec)
{
	struct sleep_frame *f = frame;

	(void)r;
	memset(f, 0, sizeof(*f));
	/* Checked by sleep_check already. */
	(void)duration_parse((const char *)spec->args[0].data,
	                     spec->args[0].len, &f->ns);
}

const struct kind kind_sleep = {
	.name = "sleep",
	.check = sleep_check,
	.poll = sleep_poll,
	.frame_size = sizeof(struct sleep_frame),
	.init = sleep_init,
	.finish = noop_finish,
};

/* ---- echo ------------------------------------------------------------- */

struct echo_frame {
	uint8_t *text;          /* owned until handed to the outcome */
	size_t len;
};

static int echo_check(const TaskSpec *spec, char *err, size_t len)
{
	return kind_check_nargs(spec, 1, "echo TEXT", err, len);
}

static void echo_init(void *frame, struct rtask *r, const TaskSpec *spec)
{
	struct echo_frame *f = frame;

	(void)r;
	f->len = spec->args[0].len;
	f->text = malloc(f->len > 0 ? f->len : 1);
	if (f->text != NULL && f->len > 0)
		memcpy(f->text, spec->args[0].data, f->len);
}

static void echo_finish(void *frame, int how, struct rt_outcome *o)
{
	struct echo_frame *f = frame;

	if (how == RT_SUCCEEDED && f->text != NULL) {
		o->value = f->text;
		o->value_len = f->len;
	} else {
		if (how == RT_SUCCEEDED) {
			o->state = RT_FAILED;
			snprintf(o->reason, sizeof(o->reason), "out of memory");
		}
		free(f->text);
	}
	f->text = NULL;
}

const struct kind kind_echo = {
	.name = "echo",
	.check = echo_check,
	.poll = noop_poll,
	.frame_size = sizeof(struct echo_frame),
	.init = echo_init,
	.finish = echo_finish,
};
