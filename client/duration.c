/*
 * duration.c — the duration syntax of rokctl and the protocol's "sleep"
 * argument: NUMBER UNIT groups ("250ms", "5s", "1m30s", "1.5h"), parsed to
 * whole milliseconds, and the inverse.  Pure functions, any thread.
 *
 * Rules, chosen so that a typo never turns into a surprising value:
 *   - every number has a unit (ms, s, m, h); only a lone "0" may omit it,
 *     because a bare "5" could mean seconds or milliseconds;
 *   - a fraction must come out to whole milliseconds ("0.5ms" is refused
 *     rather than rounded to 0, which the protocol reads as "no timeout");
 *   - no sign, no spaces, no empty groups; more than ROK_DURATION_MAX_MS
 *     (what rokd accepts) is -ERANGE.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rok/client.h"

struct duration_unit {
	const char *name;
	uint64_t ms;
};

/* Longest names first so "ms" is not read as "m" followed by junk. */
static const struct duration_unit duration_units[] = {
	{ "ms", 1 },
	{ "h", 3600000 },
	{ "m", 60000 },
	{ "s", 1000 },
};

static bool duration_digit(char c)
{
	return c >= '0' && c <= '9';
}

int rok_duration_parse(const char *s, uint64_t *ms)
{
	uint64_t total = 0;

	*ms = 0;
	if (s == NULL || *s == '\0')
		return -EINVAL;
	if (strcmp(s, "0") == 0)
		return 0;
	while (*s != '\0') {
		uint64_t whole = 0, frac = 0, scale = 1, unit = 0, v;
		bool digits = false;

		for (; duration_digit(*s); s++, digits = true) {
			if (whole > (UINT64_MAX - 9) / 10)
				return -ERANGE;
			whole = whole * 10 + (uint64_t)(*s - '0');
		}
		if (*s == '.') {
			s++;
			for (; duration_digit(*s); s++, digits = true) {
				if (scale >= 1000000000000ull)
					return -EINVAL;   /* absurd precision */
				frac = frac * 10 + (uint64_t)(*s - '0');
				scale *= 10;
			}
		}
		if (!digits)
			return -EINVAL;
		for (size_t i = 0; i < sizeof(duration_units) /
				       sizeof(duration_units[0]); i++) {
			size_t n = strlen(duration_units[i].name);

			if (strncmp(s, duration_units[i].name, n) == 0) {
				unit = duration_units[i].ms;
				s += n;
				break;
			}
		}
		if (unit == 0)
			return -EINVAL;   /* no unit, or an unknown one */
		if (whole > UINT64_MAX / unit)
			return -ERANGE;
		v = whole * unit;
		/* frac < scale <= 1e12 and unit <= 3.6e6: no overflow. */
		if (frac * unit % scale != 0)
			return -EINVAL;   /* finer than a millisecond */
		if (v > UINT64_MAX - frac * unit / scale)
			return -ERANGE;
		v += frac * unit / scale;
		if (total > UINT64_MAX - v)
			return -ERANGE;
		total += v;
	}
	if (total > ROK_DURATION_MAX_MS)
		return -ERANGE;
	*ms = total;
	return 0;
}

int rok_duration_format(uint64_t ms, char *buf, size_t size)
{
	uint64_t h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60;
	uint64_t frac = ms % 1000;
	char tmp[64];
	int n = 0;

	if (ms == 0)
		return snprintf(buf, size, "0s");
	if (ms < 1000)
		return snprintf(buf, size, "%llums", (unsigned long long)ms);
	if (h > 0)
		n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, "%lluh",
			      (unsigned long long)h);
	if (m > 0)
		n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, "%llum",
			      (unsigned long long)m);
	if (s > 0 || frac > 0) {
		n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, "%llu",
			      (unsigned long long)s);
		if (frac > 0) {
			/* ".5", ".25", ".125": trailing zeros dropped */
			int digits = 3;

			while (frac % 10 == 0) {
				frac /= 10;
				digits--;
			}
			n += snprintf(tmp + n, sizeof(tmp) - (size_t)n,
				      ".%0*llu", digits,
				      (unsigned long long)frac);
		}
		n += snprintf(tmp + n, sizeof(tmp) - (size_t)n, "s");
	}
	return snprintf(buf, size, "%s", tmp);
}
