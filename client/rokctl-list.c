/*
 * rokctl-list.c — `rokctl list [--state STATE] [--after ID] [-n N]`: the
 * tasks visible to the caller, oldest first.  The daemon answers a page at
 * a time; this walks the pages (passing the last id seen as after_id) and
 * stops early at -n N tasks.  A page that does not advance ends the walk,
 * so a confused daemon cannot make rokctl loop forever.
 */
#include <errno.h>
#include <stdlib.h>

#include "rokctl.h"

static const struct rokctl_opt list_opts[] = {
	{ KEY_STATE, 0, "state", "STATE",
	  "only tasks in STATE (queued, running, ...)" },
	{ KEY_AFTER, 0, "after", "ID", "only tasks with an id above ID" },
	{ KEY_LIMIT, 'n', "limit", "N", "at most N tasks" },
	{ KEY_GROUP, 'g', "group", "GROUP",
	  "only GROUP's tasks (those the daemon holds in memory)" },
	{ KEY_NONE, 0, NULL, NULL, NULL }
};

static int list_number(struct rokctl *ctx, const struct rokctl_args *a,
		       int key, uint64_t *v)
{
	const char *s = a->val[key];
	char *end;

	*v = 0;
	if (!a->seen[key])
		return ROKCTL_EXIT_OK;
	errno = 0;
	*v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || s[0] == '-')
		return rokctl_usage(ctx, "'%s' is not a number", s);
	return ROKCTL_EXIT_OK;
}

static int list_exec(struct rokctl *ctx, const struct rokctl_args *a)
{
	struct print_table tab = { .truncate = true };
	const char *group = a->seen[KEY_GROUP] ? a->val[KEY_GROUP] : NULL;
	uint64_t after, limit, shown = 0;
	int state = 0, rc;

	if (a->seen[KEY_STATE]) {
		state = rok_state_parse(a->val[KEY_STATE]);
		if (state < 0)
			return rokctl_usage(ctx, "unknown state '%s'",
					    a->val[KEY_STATE]);
	}
	rc = list_number(ctx, a, KEY_AFTER, &after);
	if (rc == ROKCTL_EXIT_OK)
		rc = list_number(ctx, a, KEY_LIMIT, &limit);
	if (rc == ROKCTL_EXIT_OK)
		rc = rokctl_connect(ctx);
	if (rc != ROKCTL_EXIT_OK)
		return rc;
	for (;;) {
		uint32_t page = 0;   /* the daemon's default */
		rok_reply *r;
		size_t n;

		if (a->seen[KEY_LIMIT] && limit - shown < 1000)
			page = (uint32_t)(limit - shown);
		if (a->seen[KEY_LIMIT] && page == 0)
			break;
		rc = rok_client_list_group(ctx->client, group, state, after,
					   page, &r);
		if (rc != 0)
			return rokctl_fail(ctx, rc);
		n = r->n_tasks;
		if (a->seen[KEY_LIMIT] && n > limit - shown)
			n = (size_t)(limit - shown);
		print_tasks(ctx, &tab, r->tasks, n, -1);
		shown += n;
		bool more = r->more && n > 0 &&
			    r->tasks[n - 1].id > after;
		if (n > 0)
			after = r->tasks[n - 1].id;
		rok_reply_free(r);
		if (!more)
			break;
	}
	return ROKCTL_EXIT_OK;
}

const struct rokctl_cmd rokctl_cmd_list = {
	.name = "list",
	.operands = "",
	.synopsis = "[--state STATE] [-g GROUP] [--after ID] [-n N]",
	.summary = "List tasks, oldest first",
	.opts = list_opts,
	.min_args = 0,
	.max_args = 0,
	.exec = list_exec,
};
