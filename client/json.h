/*
 * json.h — the little JSON rokctl writes: one flat object per line, with
 * strings made from arbitrary bytes.  Part of rokctl (and its unit test),
 * not of librokclient.
 */
#ifndef ROK_JSON_H
#define ROK_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Length of the valid UTF-8 sequence at s[0..n) (1 to 4; n > 0) with its
 * code point in *cp, or 0 if s does not start one.  RFC 3629: no overlong
 * forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
 */
size_t json_utf8_len(const uint8_t *s, size_t n, uint32_t *cp);

/*
 * Writes bytes as a JSON string, quotes included.  Valid UTF-8 passes
 * through; ", \ and control characters are escaped (and U+2028/U+2029, so
 * the output is also a JavaScript string literal); every byte that is not
 * part of valid UTF-8 (a stray continuation byte, an overlong form, a
 * surrogate, a truncated sequence, > U+10FFFF) becomes U+FFFD.  Returns
 * true if some byte was replaced, i.e. the string lost information.
 */
bool json_string(FILE *f, const void *data, size_t len);

/* Writes bytes as a base64 (RFC 4648, padded) JSON string. */
void json_base64(FILE *f, const void *data, size_t len);

/* An object being written; json_begin writes "{", json_end "}\n". */
struct json_obj {
	FILE *f;
	int n;              /* members so far */
};

void json_begin(struct json_obj *o, FILE *f);
void json_end(struct json_obj *o);
/* Writes the separator and "key": ; the caller writes the value. */
void json_key(struct json_obj *o, const char *key);
void json_u64(struct json_obj *o, const char *key, uint64_t v);
void json_i64(struct json_obj *o, const char *key, int64_t v);
void json_bool(struct json_obj *o, const char *key, bool v);
void json_null(struct json_obj *o, const char *key);
void json_str(struct json_obj *o, const char *key, const char *s);
/*
 * "key": the bytes as a string; if that lost information, also
 * "key_base64": the exact bytes.
 */
void json_bytes(struct json_obj *o, const char *key, const void *data,
		size_t len);
/* The optional fields of a task: v if `has`, else null; the bytes if
 * there are any, else null. */
void json_i64_or_null(struct json_obj *o, const char *key, bool has,
		      int64_t v);
void json_bytes_or_null(struct json_obj *o, const char *key,
			const void *data, size_t len);

#endif /* ROK_JSON_H */
