/*
 * client-private.h — what the files of librokclient share and nothing
 * outside the library sees (rokctl includes only <rok/client.h>).  The
 * shared library exports only rok_[a-z]* symbols, so the names below, the
 * protocol code and wire_parse stay internal; the unit test links the
 * static archive and may call them.  Prototypes are grouped by file.
 */
#ifndef ROK_CLIENT_PRIVATE_H
#define ROK_CLIENT_PRIVATE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "wire.h"
#include "rok.pb-c.h"
#include "rok/client.h"

/* ---- stream.c: the socket and its two buffers ------------------------ */

/*
 * A non-blocking stream socket with an output buffer of whole frames
 * waiting to be written and an input buffer of bytes read but not yet
 * parsed.  Owned by one rok_client.
 */
struct stream {
	int fd;                 /* -1: none */
	uint8_t *out;
	size_t out_off;         /* written so far */
	size_t out_len;         /* queued */
	size_t out_cap;
	uint8_t *in;
	size_t in_off;          /* parsed so far */
	size_t in_len;          /* read */
	size_t in_cap;
	uint32_t in_max;        /* largest frame body accepted */
};

void stream_init(struct stream *s, uint32_t in_max);
/* Closes the fd and frees the buffers; fine on a zeroed or initialised s. */
void stream_done(struct stream *s);
/* Takes fd: makes it non-blocking and close-on-exec.  0 or -errno. */
int stream_attach(struct stream *s, int fd);
/* n more bytes at the end of the output; commit with stream_commit. */
int stream_reserve(struct stream *s, size_t n, uint8_t **p);
void stream_commit(struct stream *s, size_t n);
bool stream_pending(const struct stream *s);
/* Writes what the socket takes now.  0 (also when it took nothing) or
 * -errno (-EPIPE/-ECONNRESET: the peer is gone). */
int stream_write(struct stream *s);
/* Reads what is there.  Bytes read (> 0), 0 if none yet, -ECONNRESET at
 * EOF, or -errno. */
long stream_read(struct stream *s);
/* The next whole frame in the input: its length with *body set (valid
 * until the next stream_read), 0 with *body NULL if none yet, -EMSGSIZE if
 * the announced length is above in_max. */
long stream_frame(struct stream *s, const uint8_t **body);
/* Bytes of an unfinished frame in the input. */
size_t stream_partial(const struct stream *s);
/* Waits until readable (or writable, with output pending) or deadline
 * (monotonic ns; -1: none).  1 ready, 0 deadline passed, or -errno. */
int stream_poll(struct stream *s, int64_t deadline);
/* The monotonic clock in ns, and now + ms as a deadline (ms < 0: -1). */
int64_t stream_now(void);
int64_t stream_deadline(int ms);

/* ---- client.c: connections, errors, the reply loop ------------------- */

struct rok_client {
	struct stream s;
	char *name;                     /* sent in the hello */
	char path[128];
	bool connected;                 /* the hello succeeded */
	bool connecting;                /* connect is under way (hello may go) */
	int broken;                     /* sticky transport error, or 0 */
	uint64_t next_id;
	size_t in_flight;
	int timeout_ms;                 /* 0: none */
	uint32_t max_frame;             /* the daemon's cap on our frames */
	rok_server_info server;
	rok_reply *hello;               /* owns server.software_version */
	int err_code;
	char err_msg[1024];
	char broken_msg[1024];
	rok_reply **stash;              /* replies kept for rok_client_recv */
	size_t n_stash, cap_stash;
	uint64_t *dropped;              /* ids whose waiter gave up */
	size_t n_dropped, cap_dropped;
};

/* Records a failure and returns code.  For code < 0 the errno text is
 * appended to the message. */
int client_fail(rok_client *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* As client_fail, and marks the connection unusable (sticky). */
int client_break(rok_client *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* 0 if c may send requests now, else the error (recorded again). */
int client_check(rok_client *c);
/*
 * Gives req the next request id, frames and queues it, and writes what the
 * socket takes.  -EMSGSIZE (nothing queued) if it is above the daemon's
 * max_frame.  Borrows req.
 */
int client_send(rok_client *c, Rok__V1__Request *req, uint64_t *req_id);

/* ---- request.c: building requests ------------------------------------ */

/* Waits for req_id's reply and checks it is of type `type`. */
int request_finish(rok_client *c, int rc, uint64_t req_id, int type,
		   rok_reply **out);

/* ---- reply.c: decoding replies --------------------------------------- */

/* A new rok_reply holding a deep copy of m (which the caller keeps).
 * 0 or -ENOMEM. */
int reply_from_response(const Rok__V1__Response *m, rok_reply **out);

/* ---- path.c: where the daemon's socket is ---------------------------- */

/*
 * The default socket path for the given environment values (either may be
 * NULL) and effective uid; see rok_socket_path.  *private_dir is set to
 * true when the path is the /tmp fallback, whose directory must be checked
 * with path_check_dir before connecting.  Returns the length or
 * -ENAMETOOLONG.
 */
int path_resolve(const char *rok_socket, const char *xdg_runtime_dir,
		 uid_t euid, char *buf, size_t size, bool *private_dir);
/* 0 if the directory holding `path` is a directory owned by euid and not
 * accessible to group or others; -EPERM (or -errno from lstat) if not. */
int path_check_dir(const char *path, uid_t euid);

#endif /* ROK_CLIENT_PRIVATE_H */
