/*-------------------------------------------------------------------------
 *
 * node_queue.c
 *	  What is queued on one node's connection: commands appended, the
 *	  replies the connection owes, and must-deliver commands kept until
 *	  their node has answered them.
 *
 * Replies are matched to requests by position: every command appended to a
 * connection pushes a tag naming the round it belongs to, and each reply
 * pops one (node_pipeline.c).  A reply that arrives after its round ended
 * is therefore recognised and dropped, never mistaken for the answer to a
 * later command.
 *
 * A must-deliver command (a release: see protocol_release.c) keeps its
 * bytes with its reply slot until the node answers it.  If the connection
 * dies first, or the node cannot be reached at all, the command is kept and
 * sent ahead of everything else on the next connection, so a node that was
 * briefly away does not hold a lock until its TTL.  The oldest is dropped
 * when too many pile up.  Kept commands live in malloc'd memory, like the
 * output buffer: nothing here allocates with palloc on the no-throw paths.
 *
 * A round sends one command to every node: it is formatted once, when the
 * round is dispatched (queue_format_begin), its EVALSHA form too once a
 * node sends it so, and both are reused for every node and freed when the
 * dispatch is done (queue_format_end).  A node that keeps the command
 * gets a copy of its own.  A request queued again later (a connection
 * reopened under it, an EVALSHA refused, the nodes in backoff asked after
 * all) is formatted again then.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "net/node_internal.h"

/* A request's command, formatted */
typedef struct RlFormatted
{
	const RlRequest *req;		/* whose; NULL: none */
	char	   *cmd;			/* by hiredis (redisFreeCommand); NULL until
								 * formatted */
	int			len;
	char	   *shacmd;			/* its EVALSHA form (free()), or NULL */
	int			shalen;
	bool		sha_tried;		/* shacmd was built, or cannot be */
} RlFormatted;

/* the request being dispatched to its nodes */
static RlFormatted dispatching;

static void
formatted_free(RlFormatted *f)
{
	if (f->cmd != NULL)
		redisFreeCommand(f->cmd);
	free(f->shacmd);
	memset(f, 0, sizeof(*f));
}

/*
 * The request's formatted command: the one of the dispatch, or own (empty)
 * for a request queued outside its dispatch.  NULL when it could not be
 * formatted.
 */
static RlFormatted *
formatted_of(const RlRequest *req, RlFormatted *own)
{
	RlFormatted *f = dispatching.req == req ? &dispatching : own;

	f->req = req;
	if (f->cmd == NULL)
	{
		char	   *cmd = NULL;
		int			len;

		len = redisFormatCommandArgv(&cmd, req->argc, req->argv, req->argvlen);
		if (len <= 0)
			return NULL;
		f->cmd = cmd;
		f->len = len;
	}
	return f;
}

/*
 * The formatted command, for a node to keep (redisFreeCommand): own's is
 * taken over, the dispatch's copied.  NULL when out of memory.
 */
static char *
formatted_take(RlFormatted *f, RlFormatted *own)
{
	char	   *cmd;

	if (f == own)
	{
		cmd = f->cmd;
		f->cmd = NULL;
		return cmd;
	}
	/* malloc'd as hiredis allocates (redlock never replaces its allocator) */
	cmd = malloc(f->len);
	if (cmd != NULL)
		memcpy(cmd, f->cmd, f->len);
	return cmd;
}

/* The request is dispatched to its nodes: format it once for all. */
void
queue_format_begin(const RlRequest *req)
{
	formatted_free(&dispatching);
	dispatching.req = req;
}

/* The dispatch is done (or a new round begins): forget its command. */
void
queue_format_end(void)
{
	formatted_free(&dispatching);
}

bool
queue_owe(RlNode *node, uint64_t tag)
{
	int			slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;

	if (node->owed_count >= RL_MAX_OWED)
		return false;
	if (node->owed_count == 0)
		node->last_progress_us = rl_now_us();
	node->owed[slot] = tag;
	node->owed_cmd[slot] = NULL;
	node->owed_cmd_len[slot] = 0;
	node->owed_by_sha[slot] = false;
	node->owed_count++;
	return true;
}

/* Keep a formatted command (taking ownership) for the next connection. */
void
queue_keep_text(RlNode *node, char *cmd, int len)
{
	for (int i = 0; i < node->nkept; i++)
	{
		if (node->kept_len[i] == len &&
			memcmp(node->kept_cmd[i], cmd, len) == 0)
		{
			redisFreeCommand(cmd);	/* already kept */
			return;
		}
	}
	if (node->nkept == RL_MAX_KEPT)
	{
		redisFreeCommand(node->kept_cmd[0]);
		memmove(&node->kept_cmd[0], &node->kept_cmd[1],
				sizeof(char *) * (RL_MAX_KEPT - 1));
		memmove(&node->kept_len[0], &node->kept_len[1],
				sizeof(int) * (RL_MAX_KEPT - 1));
		node->nkept--;
	}
	node->kept_cmd[node->nkept] = cmd;
	node->kept_len[node->nkept] = len;
	node->nkept++;
}

/* The node cannot take this must-deliver request now: keep it. */
void
queue_keep(RlNode *node, const RlRequest *req)
{
	RlFormatted own = {0};
	RlFormatted *f = formatted_of(req, &own);
	char	   *cmd;

	if (f == NULL)
		return;
	cmd = formatted_take(f, &own);
	if (cmd != NULL)
		queue_keep_text(node, cmd, f->len);
	formatted_free(&own);
}

/* The connection is gone: keep the must-deliver commands it owed replies to. */
void
queue_requeue_owed(RlNode *node)
{
	for (int i = 0; i < node->owed_count; i++)
	{
		int			slot = (node->owed_head + i) % RL_MAX_OWED;

		if (node->owed_cmd[slot] != NULL)
			queue_keep_text(node, node->owed_cmd[slot], node->owed_cmd_len[slot]);
		node->owed_cmd[slot] = NULL;
	}
	node->owed_head = 0;
	node->owed_count = 0;
}

/* Queue the kept commands on a new connection, ahead of anything else. */
void
queue_send_kept(RlNode *node)
{
	int			n = node->nkept;

	node->nkept = 0;
	for (int i = 0; i < n; i++)
	{
		char	   *cmd = node->kept_cmd[i];
		int			len = node->kept_len[i];
		int			slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;

		if (node->state != RL_CONN_NONE &&
			node->owed_count < RL_MAX_OWED &&
			sock_append(node, cmd, len))
		{
			(void) queue_owe(node, RL_TAG_DISCARD);
			/* still must be delivered: kept with its slot until answered */
			node->owed_cmd[slot] = cmd;
			node->owed_cmd_len[slot] = len;
		}
		else
			queue_keep_text(node, cmd, len);
	}
}

/* Forget the kept commands (the node list changed). */
void
queue_forget_kept(RlNode *node)
{
	for (int i = 0; i < node->nkept; i++)
		redisFreeCommand(node->kept_cmd[i]);
	node->nkept = 0;
}

/*
 * Append the request to the node's connection, owing a reply tagged tag.
 * A script the connection ran before goes as EVALSHA (node_script.c); a
 * must-deliver command is kept by its text all the same, which any
 * connection can run.
 */
bool
queue_request(RlNode *node, const RlRequest *req, uint64_t tag)
{
	RlFormatted own = {0};
	RlFormatted *f = formatted_of(req, &own);
	const char *text;
	int			len;
	int			slot;
	int			script;
	char	   *kept = NULL;
	bool		by_sha;
	bool		ok;

	if (f == NULL)
		return false;
	text = f->cmd;
	len = f->len;
	if (req->no_reply)
	{
		ok = sock_append(node, text, len);
		formatted_free(&own);
		return ok;
	}
	if (node->owed_count >= RL_MAX_OWED)
	{
		formatted_free(&own);
		return false;
	}
	slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;
	script = script_by_sha(node, req);
	if (script >= 0 && !f->sha_tried)
	{
		f->sha_tried = true;
		(void) script_sha_form(req, script, f->cmd, f->len, &f->shacmd,
							   &f->shalen);
	}
	by_sha = script >= 0 && f->shacmd != NULL;
	if (req->must_deliver)
	{
		/* text stays valid: kept is it (own's) or a copy (the dispatch's) */
		kept = formatted_take(f, &own);
		if (kept == NULL)
		{
			formatted_free(&own);
			return false;
		}
	}
	ok = by_sha ? sock_append(node, f->shacmd, f->shalen) :
		sock_append(node, text, len);
	if (!ok)
	{
		if (kept != NULL)
			redisFreeCommand(kept);
		formatted_free(&own);
		return false;
	}
	(void) queue_owe(node, tag);
	node->owed_by_sha[slot] = by_sha;
	node->owed_cmd[slot] = kept;
	node->owed_cmd_len[slot] = kept != NULL ? len : 0;
	formatted_free(&own);
	return true;
}
