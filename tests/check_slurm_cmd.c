/*
 * check_slurm_cmd.c — daemon/slurm-cmd.c in-process: slurm_cmd_run feeds
 * stdin, keeps stdout and stderr and returns the exit status; output that
 * does not fit is no answer (-E2BIG), not a partial one that would make
 * squeue's missing jobs look gone; a command that hangs is killed and
 * reported (-ETIMEDOUT) instead of holding its caller for ever.  Plain
 * shell commands stand in for Slurm's: the runner does not care.
 */
#include <check.h>
#include <errno.h>
#include <string.h>

#include "slurm.h"
#include "testutil.h"

static char *const *sh(const char *script)
{
	static char *argv[4];

	argv[0] = (char *)"/bin/sh";
	argv[1] = (char *)"-c";
	argv[2] = (char *)script;
	argv[3] = NULL;
	return argv;
}

START_TEST(runs_and_keeps_output)
{
	char out[64];

	ck_assert_int_eq(slurm_cmd_run(sh("cat; echo err >&2; exit 3"), NULL,
	                               NULL, "in\n", out, sizeof(out)), 3);
	ck_assert_str_eq(out, "in\nerr\n");
	ck_assert_int_eq(slurm_cmd_run(sh("kill -TERM $$"), NULL, NULL, NULL,
	                               out, sizeof(out)), 128 + 15);
}
END_TEST

START_TEST(output_too_long_is_no_answer)
{
	char out[64];

	/* 63 bytes fit (and a NUL); 64 do not. */
	ck_assert_int_eq(slurm_cmd_run(sh("printf %063d 0"), NULL, NULL, NULL,
	                               out, sizeof(out)), 0);
	ck_assert_uint_eq(strlen(out), 63);
	ck_assert_int_eq(slurm_cmd_run(sh("printf %064d 0"), NULL, NULL, NULL,
	                               out, sizeof(out)), -E2BIG);
}
END_TEST

START_TEST(hung_command_is_killed)
{
	char out[64];

	/* Long enough for the shell to start and echo on a loaded machine
	 * (an ASan build): the assertion on `out` needs it to. */
	slurm_cmd_timeout_ms = 1000 * test_timeout(10);
	/* exec: the shell is the sleeper, so the kill ends the pipe's
	 * writer too. */
	ck_assert_int_eq(slurm_cmd_run(sh("echo started; exec sleep 600"),
	                               NULL, NULL, NULL, out, sizeof(out)),
	                 -ETIMEDOUT);
	ck_assert_str_eq(out, "started\n");
}
END_TEST

START_TEST(silent_hung_command_is_killed)
{
	char out[64];

	/* Its output ends at once, its life does not. */
	slurm_cmd_timeout_ms = 1000 * test_timeout(10);
	ck_assert_int_eq(slurm_cmd_run(sh("echo started; exec sleep 600 "
	                                  ">/dev/null 2>&1"),
	                               NULL, NULL, NULL, out, sizeof(out)),
	                 -ETIMEDOUT);
	ck_assert_str_eq(out, "started\n");
}
END_TEST

static Suite *slurm_cmd_suite(void)
{
	const struct test_case cases[] = {
		{ "runs_and_keeps_output", runs_and_keeps_output },
		{ "output_too_long_is_no_answer",
		  output_too_long_is_no_answer },
		{ "hung_command_is_killed", hung_command_is_killed },
		{ "silent_hung_command_is_killed",
		  silent_hung_command_is_killed },
	};
	return TEST_SUITE("slurm_cmd", cases, 60);
}

int main(void)
{
	return test_run(slurm_cmd_suite());
}
