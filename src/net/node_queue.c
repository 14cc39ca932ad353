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
 * briefly away does not hold a lock until its TTL (as far as the connection
 * has room; no new request goes before them).  The oldest is dropped only
 * when more than RL_MAX_KEPT pile up, as many as a connection may owe.  Kept commands live in malloc'd memory, like the
 * output buffer: nothing here allocates with palloc on the no-throw paths.
 * They outlive a change of the node list for the nodes that stay in it
 * (node_conn.c), and a worker that exits hands them to its successor
 * (rl_nodes_hand_kept, rl_nodes_take_kept).
 *
 * A round sends one command to every node: each form of it (its text, its
 * EVALSHA form) is formatted once, when the first node of the dispatch
 * (queue_format_begin .. queue_format_end) sends it so, and reused for the
 * others; a round that goes by SHA1 everywhere never formats the text.
 * The EVALSHA form is built in a buffer kept from round to round.  A node
 * that keeps a must-deliver command gets a copy of its own, of the form it
 * was sent in (the EVALSHA form is about 200 bytes, the text of the release
 * script 1.6 kB); one kept by its EVALSHA form goes by its text again
 * (script_eval_form) when the node refuses it or the connection is lost.
 * A request queued again later (a connection reopened under it, an EVALSHA
 * refused, the nodes in backoff asked after all) is formatted again then.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "net/node_internal.h"

/*
 * A copy of a formatted command, for a node to keep; malloc'd as hiredis
 * allocates (redlock never replaces its allocator), so that
 * redisFreeCommand frees every kept command alike.  NULL: out of memory.
 */
static char *
copy_command(const char *cmd, int len)
{
	char	   *copy = malloc(len);

	if (copy != NULL)
		memcpy(copy, cmd, len);
	return copy;
}

/* A request's command, formatted */
typedef struct RlFormatted
{
	const RlRequest *req;		/* whose; NULL: none */
	char	   *cmd;			/* its text, by hiredis (redisFreeCommand);
								 * NULL until formatted */
	int			len;
	char	   *shacmd;			/* its EVALSHA form (free()); the dispatch's
								 * buffer is kept from round to round */
	int			shacap;
	int			shalen;			/* > 0 once formatted */
	bool		sha_tried;		/* formatted, or it cannot be */
} RlFormatted;

/* the request being dispatched to its nodes */
static RlFormatted dispatching;

static void
formatted_free(RlFormatted *f)
{
	if (f->cmd != NULL)
		redisFreeCommand(f->cmd);
	f->req = NULL;
	f->cmd = NULL;
	f->len = 0;
	f->shalen = 0;
	f->sha_tried = false;
	if (f != &dispatching)
	{
		free(f->shacmd);
		f->shacmd = NULL;
		f->shacap = 0;
	}
}

/*
 * The request's formatted commands: the dispatch's, or own (empty) for a
 * request queued outside its dispatch.  Nothing is formatted yet.
 */
static RlFormatted *
formatted_of(const RlRequest *req, RlFormatted *own)
{
	RlFormatted *f = dispatching.req == req ? &dispatching : own;

	f->req = req;
	return f;
}

/* Its text, formatted once.  False when it could not be. */
static bool
formatted_text(RlFormatted *f)
{
	if (f->cmd == NULL)
	{
		char	   *cmd = NULL;
		int			len;

		len = redisFormatCommandArgv(&cmd, f->req->argc, f->req->argv,
									 f->req->argvlen);
		if (len <= 0)
			return false;
		f->cmd = cmd;
		f->len = len;
	}
	return true;
}

/* Its EVALSHA form for script (script_by_sha), formatted once.  False: none. */
static bool
formatted_sha(RlFormatted *f, int script)
{
	if (!f->sha_tried)
	{
		f->sha_tried = true;
		f->shalen = script_sha_form(f->req, script, &f->shacmd, &f->shacap);
	}
	return f->shalen > 0;
}

/*
 * Whether the request goes to this node by its EVALSHA form (formatted
 * then): the connection ran its script before (script_by_sha).
 */
static bool
formatted_sha_for(RlFormatted *f, RlNode *node)
{
	int			script = script_by_sha(node, f->req);

	return script >= 0 && formatted_sha(f, script);
}

/*
 * The formatted text, for a node to keep (redisFreeCommand): own's is
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
	return copy_command(f->cmd, f->len);
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

	if (node->owed_count >= rl_owed_limit())
		return false;
	if (node->owed_count == 0)
	{
		node->last_progress_us = rl_now_us();
		node->stalled_us = 0;
	}
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
	/*
	 * The same command twice (a node failed again before its kept ones
	 * went out): compared from its end, where the keys and the owner
	 * values differ (every release begins with the same script's text)
	 */
	int			tail = Min(len, 128);

	for (int i = 0; i < node->nkept; i++)
	{
		if (node->kept_len[i] == len &&
			memcmp(node->kept_cmd[i] + len - tail, cmd + len - tail, tail) == 0 &&
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

	if (formatted_text(f))
	{
		cmd = formatted_take(f, &own);
		if (cmd != NULL)
			queue_keep_text(node, cmd, f->len);
	}
	formatted_free(&own);
}

/*
 * Keep a must-deliver command a connection owed a reply to, taking
 * ownership: by its text (a new connection may not have the script), and
 * dropped when out of memory.
 */
static void
queue_keep_owed(RlNode *node, char *cmd, int len, bool by_sha)
{
	if (by_sha)
	{
		int			evallen;
		char	   *eval = script_eval_form(cmd, len, &evallen);

		redisFreeCommand(cmd);
		if (eval == NULL)
			return;
		cmd = eval;
		len = evallen;
	}
	queue_keep_text(node, cmd, len);
}

/* The connection is gone: keep the must-deliver commands it owed replies to. */
void
queue_requeue_owed(RlNode *node)
{
	for (int i = 0; i < node->owed_count; i++)
	{
		int			slot = (node->owed_head + i) % RL_MAX_OWED;

		if (node->owed_cmd[slot] != NULL)
			queue_keep_owed(node, node->owed_cmd[slot],
							node->owed_cmd_len[slot], node->owed_by_sha[slot]);
		node->owed_cmd[slot] = NULL;
	}
	node->owed_head = 0;
	node->owed_count = 0;
}

/*
 * Queue the kept commands on the connection, in order, while it owes
 * fewer than upto replies: the rest stay kept, in order, and no new
 * request is asked on it before they went (round_dispatch).
 */
void
queue_send_kept(RlNode *node, int upto)
{
	int			sent = 0;

	while (sent < node->nkept)
	{
		char	   *cmd = node->kept_cmd[sent];
		int			len = node->kept_len[sent];
		int			slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;

		if (node->state == RL_CONN_NONE ||
			node->owed_count >= Min(upto, rl_owed_limit()) ||
			!sock_append(node, cmd, len))
			break;
		(void) queue_owe(node, RL_TAG_DISCARD);
		/* still must be delivered: kept with its slot until answered */
		node->owed_cmd[slot] = cmd;
		node->owed_cmd_len[slot] = len;
		sent++;
	}
	if (sent > 0)
	{
		node->nkept -= sent;
		memmove(&node->kept_cmd[0], &node->kept_cmd[sent],
				sizeof(char *) * node->nkept);
		memmove(&node->kept_len[0], &node->kept_len[sent],
				sizeof(int) * node->nkept);
	}
}

/*
 * The kept commands of every node go to fn, by the node's name, and are
 * forgotten: a process that stops using its connections (a worker that
 * exits) hands them on.  Close the connections first: the must-deliver
 * commands they owed a reply to are kept then.
 */
void
rl_nodes_hand_kept(RlKeptHandler fn, void *arg)
{
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		for (int k = 0; k < node->nkept; k++)
		{
			fn(node->name, node->kept_cmd[k], node->kept_len[k], arg);
			redisFreeCommand(node->kept_cmd[k]);
		}
		node->nkept = 0;
	}
}

/*
 * Keep a copy of a must-deliver command (a formatted command, as handed by
 * rl_nodes_hand_kept) for the node of that name: sent ahead of anything
 * else on its next connection.  False when no node has that name, or out
 * of memory.
 */
bool
rl_nodes_take_kept(const char *node_name, const char *cmd, int len)
{
	for (int i = 0; i < rl_nnodes; i++)
	{
		if (strcmp(rl_nodes[i].name, node_name) == 0)
		{
			char	   *copy = len > 0 ? copy_command(cmd, len) : NULL;

			if (copy == NULL)
				return false;
			queue_keep_text(&rl_nodes[i], copy, len);
			return true;
		}
	}
	return false;
}

/*
 * Append the request to the node's connection, owing a reply tagged tag.
 * A script the connection ran before goes as EVALSHA (node_script.c); a
 * must-deliver command is kept in the form it was sent in.
 */
bool
queue_request(RlNode *node, const RlRequest *req, uint64_t tag)
{
	RlFormatted own = {0};
	RlFormatted *f = formatted_of(req, &own);
	const char *out;
	int			len;
	int			slot;
	char	   *kept = NULL;
	bool		by_sha;
	bool		ok;

	if (req->no_reply)
	{
		ok = formatted_text(f) && sock_append(node, f->cmd, f->len);
		formatted_free(&own);
		return ok;
	}
	if (node->owed_count >= rl_owed_limit())
	{
		formatted_free(&own);
		return false;
	}
	slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;
	by_sha = formatted_sha_for(f, node);
	if (!by_sha && !formatted_text(f))
	{
		formatted_free(&own);
		return false;
	}
	out = by_sha ? f->shacmd : f->cmd;
	len = by_sha ? f->shalen : f->len;
	if (req->must_deliver)
	{
		/* out stays valid: kept is it (own's text) or a copy */
		kept = by_sha ? copy_command(out, len) : formatted_take(f, &own);
		if (kept == NULL)
		{
			formatted_free(&own);
			return false;
		}
	}
	ok = sock_append(node, out, len);
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
