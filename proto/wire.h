/*
 * wire.h — the framing of rok's wire protocol, shared by rokd and
 * librokclient: a 4-byte big-endian length, then that many bytes of one
 * protobuf message (see rok.proto).
 */
#ifndef ROK_WIRE_H
#define ROK_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_HEADER 4
#define WIRE_DEFAULT_MAX (1u << 20)   /* 1 MiB */

/* Writes the header for a body of `len` bytes into out[0..4). */
static inline void wire_put_header(uint8_t out[WIRE_HEADER], uint32_t len)
{
	out[0] = (uint8_t)(len >> 24);
	out[1] = (uint8_t)(len >> 16);
	out[2] = (uint8_t)(len >> 8);
	out[3] = (uint8_t)len;
}

static inline uint32_t wire_get_header(const uint8_t in[WIRE_HEADER])
{
	return (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 |
	       (uint32_t)in[2] << 8 | (uint32_t)in[3];
}

/*
 * Looks for one whole frame at the start of buf[0..len).  Returns the
 * body's length and sets *body (an empty body is 0 with *body non-NULL),
 * 0 with *body NULL when more bytes are needed, or -EMSGSIZE when the announced length exceeds max (the caller
 * must drop the connection: the stream cannot be resynchronised).
 * A frame takes WIRE_HEADER + the returned length bytes of buf.
 */
long wire_parse(const uint8_t *buf, size_t len, uint32_t max,
                 const uint8_t **body);

#endif /* ROK_WIRE_H */
