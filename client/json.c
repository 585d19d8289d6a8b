/*
 * json.c — JSON output for rokctl --json; see json.h.
 *
 * Task values, arguments and reasons are bytes (rok.proto), not text, yet
 * a JSON string must be Unicode.  Escaping invalid bytes as \u00XX would
 * silently turn them into other characters, and lone surrogates (Python's
 * surrogateescape) are rejected by strict parsers; so invalid bytes become
 * U+FFFD, which every parser accepts, and json_bytes adds a "_base64"
 * sibling holding the exact bytes whenever that replacement happened.
 */
#include <string.h>

#include "json.h"

size_t json_utf8_len(const uint8_t *s, size_t n, uint32_t *cp)
{
	uint32_t c = s[0], min;
	size_t len;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		c &= 0x1f;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		c &= 0x0f;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		c &= 0x07;
		min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

bool json_string(FILE *f, const void *data, size_t len)
{
	const uint8_t *s = data;
	bool lossy = false;
	size_t i = 0;

	putc('"', f);
	while (i < len) {
		uint32_t cp;
		size_t n = json_utf8_len(s + i, len - i, &cp);

		if (n == 0) {
			fputs("\xef\xbf\xbd", f);   /* U+FFFD */
			lossy = true;
			i++;
			continue;
		}
		switch (cp) {
		case '"':
			fputs("\\\"", f);
			break;
		case '\\':
			fputs("\\\\", f);
			break;
		case '\b':
			fputs("\\b", f);
			break;
		case '\f':
			fputs("\\f", f);
			break;
		case '\n':
			fputs("\\n", f);
			break;
		case '\r':
			fputs("\\r", f);
			break;
		case '\t':
			fputs("\\t", f);
			break;
		default:
			if (cp < 0x20 || cp == 0x7f || cp == 0x2028 ||
			    cp == 0x2029)
				fprintf(f, "\\u%04x", (unsigned)cp);
			else
				fwrite(s + i, 1, n, f);
			break;
		}
		i += n;
	}
	putc('"', f);
	return lossy;
}

void json_base64(FILE *f, const void *data, size_t len)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const uint8_t *s = data;
	size_t i;

	putc('"', f);
	for (i = 0; i + 3 <= len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 |
			     s[i + 2];

		putc(tab[v >> 18], f);
		putc(tab[v >> 12 & 63], f);
		putc(tab[v >> 6 & 63], f);
		putc(tab[v & 63], f);
	}
	if (len - i == 1) {
		uint32_t v = (uint32_t)s[i] << 16;

		putc(tab[v >> 18], f);
		putc(tab[v >> 12 & 63], f);
		fputs("==", f);
	} else if (len - i == 2) {
		uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;

		putc(tab[v >> 18], f);
		putc(tab[v >> 12 & 63], f);
		putc(tab[v >> 6 & 63], f);
		putc('=', f);
	}
	putc('"', f);
}

void json_begin(struct json_obj *o, FILE *f)
{
	o->f = f;
	o->n = 0;
	putc('{', f);
}

void json_end(struct json_obj *o)
{
	fputs("}\n", o->f);
}

void json_key(struct json_obj *o, const char *key)
{
	if (o->n++ > 0)
		putc(',', o->f);
	json_string(o->f, key, strlen(key));
	putc(':', o->f);
}

void json_u64(struct json_obj *o, const char *key, uint64_t v)
{
	json_key(o, key);
	fprintf(o->f, "%llu", (unsigned long long)v);
}

void json_i64(struct json_obj *o, const char *key, int64_t v)
{
	json_key(o, key);
	fprintf(o->f, "%lld", (long long)v);
}

void json_bool(struct json_obj *o, const char *key, bool v)
{
	json_key(o, key);
	fputs(v ? "true" : "false", o->f);
}

void json_null(struct json_obj *o, const char *key)
{
	json_key(o, key);
	fputs("null", o->f);
}

void json_str(struct json_obj *o, const char *key, const char *s)
{
	json_key(o, key);
	json_string(o->f, s, strlen(s));
}

void json_bytes(struct json_obj *o, const char *key, const void *data,
		size_t len)
{
	char k[64];

	json_key(o, key);
	if (json_string(o->f, data, len)) {
		snprintf(k, sizeof(k), "%s_base64", key);
		json_key(o, k);
		json_base64(o->f, data, len);
	}
}

void json_i64_or_null(struct json_obj *o, const char *key, bool has,
		      int64_t v)
{
	if (has)
		json_i64(o, key, v);
	else
		json_null(o, key);
}

void json_bytes_or_null(struct json_obj *o, const char *key,
			const void *data, size_t len)
{
	if (len > 0)
		json_bytes(o, key, data, len);
	else
		json_null(o, key);
}
