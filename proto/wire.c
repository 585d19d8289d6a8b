/*
 * wire.c — parsing of length-prefixed frames; see wire.h.  The length is
 * checked against the cap before anything is allocated, so a peer that
 * announces 4 GiB costs nothing.
 */
#include <errno.h>

#include "wire.h"

long wire_parse(const uint8_t *buf, size_t len, uint32_t max,
                 const uint8_t **body)
{
	*body = NULL;
	if (len < WIRE_HEADER)
		return 0;
	uint32_t n = wire_get_header(buf);
	if (n > max)
		return -EMSGSIZE;
	if (len - WIRE_HEADER < n)
		return 0;
	*body = buf + WIRE_HEADER;
	return (long)n;
}
