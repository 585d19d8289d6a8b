/*
 * rokctl-group.c — `rokctl group list|add|set|rm|pause|resume [NAME]
 * [--parallel N] [--policy strict|weighted] [--backend local|slurm]
 * [--partition P] [--weights U,H,N,L]`: the daemon's groups (DESIGN §3).
 *
 * The options may come before the operation or after NAME (`group add
 * build --parallel 2`, as DESIGN writes it): rokctl's parser stops at the
 * first operand, so those after it are read here.  list prints a table
 * (NAME PARALLEL POLICY BACKEND STATE WEIGHTS PARTITION) or one JSON object per
 * group; the other operations print the group as it is now the same way
 * (rm prints nothing).  Managing is for root and the daemon's own user.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rokctl.h"

static const struct rokctl_opt group_opts[] = {
	{ KEY_PARALLEL, 0, "parallel", "N",
	  "add, set: tasks running at once (0: no limit)" },
	{ KEY_POLICY, 0, "policy", "POLICY",
	  "add, set: strict (default) or weighted" },
	{ KEY_BACKEND, 0, "backend", "BACKEND", "add, set: local or slurm" },
	{ KEY_PARTITION, 0, "partition", "P",
	  "add, set: a slurm group's Slurm partition (\"\": the default)" },
	{ KEY_WEIGHTS, 0, "weights", "U,H,N,L",
	  "add, set: weighted shares of urgent,high,normal,low (1..1000)" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static const struct {
	const char *name;
	int op;
} group_ops[] = {
	{ "list", ROK_GROUP_LIST }, { "add", ROK_GROUP_ADD },
	{ "set", ROK_GROUP_SET }, { "rm", ROK_GROUP_RM },
	{ "pause", ROK_GROUP_PAUSE }, { "resume", ROK_GROUP_RESUME },
};

/* The option values, from the parser or from the trailing operands. */
struct group_vals {
	const char *val[KEY__COUNT];
};

static int group_key(const char *name)
{
	for (const struct rokctl_opt *o = group_opts; o->key != KEY_NONE; o++)
		if (strcmp(o->long_name, name) == 0)
			return o->key;
	return KEY_NONE;
}

/* Reads --KEY VALUE / --KEY=VALUE from argv[i..]: an exit status. */
static int group_trailing(struct rokctl *ctx, int argc, char **argv,
			  struct group_vals *v)
{
	for (int i = 0; i < argc; i++) {
		char name[32];
		const char *s = argv[i], *val;

		if (strncmp(s, "--", 2) != 0)
			return rokctl_usage(ctx, "unexpected operand '%s'", s);
		const char *eq = strchr(s, '=');
		size_t n = eq != NULL ? (size_t)(eq - s - 2) : strlen(s + 2);
		if (n >= sizeof(name))
			return rokctl_usage(ctx, "unknown option '%s'", s);
		memcpy(name, s + 2, n);
		name[n] = '\0';
		int key = group_key(name);
		if (key == KEY_NONE)
			return rokctl_usage(ctx, "unknown option '%s'", s);
		if (eq != NULL)
			val = eq + 1;
		else if (i + 1 < argc)
			val = argv[++i];
		else
			return rokctl_usage(ctx, "--%s wants a value", name);
		v->val[key] = val;
	}
	return ROKCTL_EXIT_OK;
}

static int group_spec(struct rokctl *ctx, const struct group_vals *v,
		      rok_group_spec *g)
{
	if (v->val[KEY_PARALLEL] != NULL) {
		const char *s = v->val[KEY_PARALLEL];
		char *end;
		errno = 0;
		unsigned long n = strtoul(s, &end, 10);
		if (errno != 0 || *end != '\0' || end == s || s[0] == '-' ||
		    n > 1000000)
			return rokctl_usage(ctx, "--parallel wants 0..1000000, "
					    "not '%s'", s);
		g->has_parallel = true;
		g->parallel = (uint32_t)n;
	}
	if (v->val[KEY_POLICY] != NULL &&
	    (g->policy = rok_policy_parse(v->val[KEY_POLICY])) < 0)
		return rokctl_usage(ctx, "--policy wants strict or weighted, "
				    "not '%s'", v->val[KEY_POLICY]);
	if (v->val[KEY_BACKEND] != NULL)
		g->backend = v->val[KEY_BACKEND];
	g->partition = v->val[KEY_PARTITION];   /* NULL: unchanged */
	if (v->val[KEY_WEIGHTS] != NULL) {
		const char *p = v->val[KEY_WEIGHTS];
		for (int c = 0; c < 4; c++) {
			char *end;
			errno = 0;
			unsigned long n = strtoul(p, &end, 10);
			if (errno != 0 || end == p || *p == '-' || n < 1 ||
			    n > 1000 || (c < 3 ? *end != ',' : *end != '\0'))
				return rokctl_usage(ctx, "--weights wants four "
						    "numbers 1..1000, "
						    "U,H,N,L");
			g->weights[c] = (uint32_t)n;
			p = end + 1;
		}
		g->has_weights = true;
	}
	return ROKCTL_EXIT_OK;
}

static int group_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	struct group_vals v = { 0 };
	rok_group_spec g = { 0 };
	rok_reply *r;
	int op = -1, rc;

	for (size_t i = 0; i < sizeof(group_ops) / sizeof(group_ops[0]); i++)
		if (strcmp(a->argv[0], group_ops[i].name) == 0)
			op = group_ops[i].op;
	if (op < 0)
		return rokctl_usage(ctx, "unknown operation '%s' (list, add, "
				    "set, rm, pause, resume)", a->argv[0]);
	for (int k = 0; k < KEY__COUNT; k++)
		if (a->seen[k])
			v.val[k] = a->val[k];
	if (op == ROK_GROUP_LIST) {
		if (a->argc > 1)
			return rokctl_usage(ctx, "list takes no name");
	} else {
		if (a->argc < 2 || strncmp(a->argv[1], "--", 2) == 0)
			return rokctl_usage(ctx, "%s wants a group name",
					    a->argv[0]);
		g.name = a->argv[1];
		rc = group_trailing(ctx, a->argc - 2, a->argv + 2, &v);
		if (rc != ROKCTL_EXIT_OK)
			return rc;
	}
	bool opts = v.val[KEY_PARALLEL] != NULL || v.val[KEY_POLICY] != NULL ||
		    v.val[KEY_BACKEND] != NULL || v.val[KEY_WEIGHTS] != NULL ||
		    v.val[KEY_PARTITION] != NULL;
	if (opts && op != ROK_GROUP_ADD && op != ROK_GROUP_SET)
		return rokctl_usage(ctx, "only add and set take options");
	if (op == ROK_GROUP_SET && !opts)
		return rokctl_usage(ctx, "set wants an option to change");
	rc = group_spec(ctx, &v, &g);
	if (rc == ROKCTL_EXIT_OK)
		rc = rokctl_connect(ctx);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	rc = rok_client_group(ctx->client, op, &g, &r);
	if (rc != 0)
		return rokctl_fail(ctx, rc);
	if (op != ROK_GROUP_RM)
		print_groups(ctx, r->groups, r->n_groups);
	rok_reply_free(r);
	return ROKCTL_EXIT_OK;
}

const struct rokctl_cmd rokctl_cmd_group = {
	.name = "group",
	.operands = "list|add|set|rm|pause|resume [NAME]",
	.synopsis = "list|add|set|rm|pause|resume [NAME] [--parallel N] ...",
	.summary = "List or manage groups",
	.details = "A group runs at most --parallel exec tasks at once (0: no\n"
	           "limit); the others wait queued, by priority class (strict:\n"
	           "highest class first, with aging; weighted: classes share\n"
	           "the slots by --weights) and fairly between users.  The\n"
	           "group default always exists.  pause stops new starts (the\n"
	           "running tasks go on); rm refuses a group with queued or\n"
	           "running tasks.  A group --backend slurm runs its exec\n"
	           "tasks as Slurm batch jobs, in its --partition if given.\n"
	           "Everyone may list; root and the daemon's own user manage.\n"
	           "Changes are kept across restarts.\n",
	.opts = group_opts,
	.min_args = 1,
	.max_args = -1,
	.exec = group_exec,
};
