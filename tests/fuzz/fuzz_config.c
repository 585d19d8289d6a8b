/*
 * fuzz_config.c — a libFuzzer target over rokd's config file parser
 * (daemon/config.c: config_load, config_set, duration_parse).
 *
 * Each input is the whole file: it goes into an anonymous memory file and
 * config_load reads it through /proc/self/fd/N, as rokd reads a path.  The
 * parse starts from the defaults every time and its result is freed, so
 * inputs do not see each other.  Whatever the bytes, config_load returns 0,
 * or -1 with a message for people; it must not crash, overflow, or leave a
 * message that is empty or unterminated.  The first line of the input is
 * also handed to duration_parse by itself, which rokctl-style strings (and
 * the "sleep" kind) go through.
 *
 * Built and run by scripts/fuzz; seeds in tests/fuzz/config-corpus.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rokd.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_fd = -1;
static char fuzz_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_init(0);
	fuzz_fd = memfd_create("fuzz_config", MFD_CLOEXEC);
	if (fuzz_fd < 0)
		abort();
	snprintf(fuzz_path, sizeof(fuzz_path), "/proc/self/fd/%d", fuzz_fd);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config c;
	char err[512];

	if (ftruncate(fuzz_fd, 0) != 0 ||
	    pwrite(fuzz_fd, data, size, 0) != (ssize_t)size)
		abort();
	config_defaults(&c);
	memset(err, 0x55, sizeof(err));
	int rc = config_load(&c, fuzz_path, err, sizeof(err));
	if (rc != 0 && rc != -1)
		abort();
	if (rc < 0 && (memchr(err, '\0', sizeof(err)) == NULL || err[0] == '\0'))
		abort();   /* a refusal must say why */
	config_free(&c);

	const uint8_t *nl = memchr(data, '\n', size);
	size_t len = nl != NULL ? (size_t)(nl - data) : size;
	int64_t ns = -1;
	if (duration_parse((const char *)data, len, &ns) == 0 && ns < 0)
		abort();   /* a duration is never negative */
	return 0;
}
