/*
 * promtext.h — a StatsReply in the Prometheus text exposition format, the
 * one formatter rokd (/metrics) and librokclient (rokctl stats
 * --prometheus) share.  See promtext.c.
 */
#ifndef ROK_PROMTEXT_H
#define ROK_PROMTEXT_H

#include <stddef.h>

#include "rok.pb-c.h"

/* Any thread.  *out gets a new NUL-terminated string of *len bytes (the
 * caller frees it); 0, or -ENOMEM (then *out is NULL).  Borrows s. */
int promtext_format(const Rok__V1__StatsReply *s, char **out, size_t *len);

#endif /* ROK_PROMTEXT_H */
