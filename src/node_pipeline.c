/*-------------------------------------------------------------------------
 *
 * node_pipeline.c
 *	  What travels on one node's connection: commands queued and written,
 *	  replies read and matched to the round that asked, and must-deliver
 *	  commands kept until their node has answered them.
 *
 * Replies are matched to requests by position: every command appended to a
 * connection pushes a tag naming the round it belongs to, and each reply
 * pops one.  A reply that arrives after its round ended is therefore
 * recognised and dropped, never mistaken for the answer to a later command.
 *
 * A must-deliver command (a release: see protocol.c) keeps its bytes with
 * its reply slot until the node answers it.  If the connection dies first,
 * or the node cannot be reached at all, the command is kept and sent ahead
 * of everything else on the next connection, so a node that was briefly
 * away does not hold a lock until its TTL.  The oldest is dropped when too
 * many pile up.  Kept commands live in malloc'd memory, like the output
 * buffer: nothing here allocates with palloc on the no-throw paths.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "node_internal.h"

uint64_t	rl_round_id = 0;
uint64_t	rl_dispatch_tag = 0;
static RlPushHandler rl_push_handler = NULL;

void
rl_nodes_set_push_handler(RlPushHandler handler)
{
	rl_push_handler = handler;
}

/*
 * Is this a pub/sub push ("message", or the confirmation of a (un)subscribe,
 * which we do not count as replies)?  Hands messages and subscribe
 * confirmations to the handler.
 */
static bool
take_push(RlNode *node, redisReply *reply)
{
	const redisReply *kind;

	if (rl_push_handler == NULL || reply->type != REDIS_REPLY_ARRAY ||
		reply->elements != 3)
		return false;
	kind = reply->element[0];
	if (kind->type != REDIS_REPLY_STRING)
		return false;
	if ((kind->len == 7 && memcmp(kind->str, "message", 7) == 0) ||
		(kind->len == 9 && memcmp(kind->str, "subscribe", 9) == 0))
	{
		const redisReply *payload = reply->element[2];
		bool		message = kind->len == 7;

		if (reply->element[1]->type == REDIS_REPLY_STRING &&
			(!message || payload->type == REDIS_REPLY_STRING))
			rl_push_handler((int) (node - rl_nodes),
							message ? RL_PUSH_MESSAGE : RL_PUSH_SUBSCRIBED,
							reply->element[1]->str, reply->element[1]->len,
							message ? payload->str : NULL,
							message ? payload->len : 0);
		return true;
	}
	return kind->len == 11 && memcmp(kind->str, "unsubscribe", 11) == 0;
}

bool
pipeline_owe(RlNode *node, uint64_t tag)
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
static void
keep_formatted(RlNode *node, char *cmd, int len)
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
pipeline_keep(RlNode *node, const RlRequest *req)
{
	char	   *cmd;
	int			len;

	len = redisFormatCommandArgv(&cmd, req->argc, req->argv, req->argvlen);
	if (len > 0)
		keep_formatted(node, cmd, len);
}

/* The connection is gone: keep the must-deliver commands it owed replies to. */
void
pipeline_requeue_owed(RlNode *node)
{
	for (int i = 0; i < node->owed_count; i++)
	{
		int			slot = (node->owed_head + i) % RL_MAX_OWED;

		if (node->owed_cmd[slot] != NULL)
			keep_formatted(node, node->owed_cmd[slot], node->owed_cmd_len[slot]);
		node->owed_cmd[slot] = NULL;
	}
	node->owed_head = 0;
	node->owed_count = 0;
}

/* Queue the kept commands on a new connection, ahead of anything else. */
void
pipeline_send_kept(RlNode *node)
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
			(void) pipeline_owe(node, RL_TAG_DISCARD);
			/* still must be delivered: kept with its slot until answered */
			node->owed_cmd[slot] = cmd;
			node->owed_cmd_len[slot] = len;
		}
		else
			keep_formatted(node, cmd, len);
	}
}

/* Forget the kept commands (the node list changed). */
void
pipeline_forget_kept(RlNode *node)
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
pipeline_queue(RlNode *node, const RlRequest *req, uint64_t tag)
{
	char	   *cmd;
	int			len;
	int			slot;
	char	   *shacmd = NULL;
	int			shalen = 0;
	bool		by_sha;
	bool		ok;

	len = redisFormatCommandArgv(&cmd, req->argc, req->argv, req->argvlen);
	if (len <= 0)
		return false;
	if (req->no_reply)
	{
		ok = sock_append(node, cmd, len);
		redisFreeCommand(cmd);
		return ok;
	}
	slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;
	by_sha = script_by_sha(node, req, cmd, len, &shacmd, &shalen);
	ok = node->owed_count < RL_MAX_OWED &&
		(by_sha ? sock_append(node, shacmd, shalen) : sock_append(node, cmd, len));
	free(shacmd);
	if (!ok)
	{
		redisFreeCommand(cmd);
		return false;
	}
	(void) pipeline_owe(node, tag);
	node->owed_by_sha[slot] = by_sha;
	if (req->must_deliver)
	{
		node->owed_cmd[slot] = cmd;
		node->owed_cmd_len[slot] = len;
	}
	else
		redisFreeCommand(cmd);
	return true;
}

/*
 * A reply to a multi-item command: exactly one integer 0 or 1 per item.
 * Anything else, even one odd element, makes the whole answer unusable.
 */
static void
take_flags(const RlRequest *req, RlNodeResult *res, const redisReply *reply)
{
	int			yes = 0;

	if (req->nitems < 1 || req->nitems > RL_MAX_ITEMS ||
		reply->type != REDIS_REPLY_ARRAY || reply->elements != (size_t) req->nitems)
	{
		res->vote = RL_VOTE_FAILED;
		res->protocol_error = true;
		snprintf(res->detail, sizeof(res->detail),
				 "unexpected reply (type %d, %zu elements for %d keys)",
				 reply->type, reply->type == REDIS_REPLY_ARRAY ? reply->elements : 0,
				 req->nitems);
		return;
	}
	memset(&res->flags, 0, sizeof(res->flags));
	for (int i = 0; i < req->nitems; i++)
	{
		const redisReply *el = reply->element[i];

		if (el->type != REDIS_REPLY_INTEGER || (el->integer != 0 && el->integer != 1))
		{
			res->vote = RL_VOTE_FAILED;
			res->protocol_error = true;
			snprintf(res->detail, sizeof(res->detail),
					 "unexpected element %d (type %d) in the reply", i + 1, el->type);
			return;
		}
		if (el->integer == 1)
		{
			rl_item_flag_set(&res->flags, i);
			yes++;
		}
	}
	res->vote = RL_VOTE_YES;
	snprintf(res->detail, sizeof(res->detail), "done for %d of %d keys",
			 yes, req->nitems);
}

/* Interpret a reply to the current round's command. */
static void
take_reply(RlRequest *req, int idx, redisReply *reply)
{
	RlNodeResult *res = &req->results[idx];

	res->elapsed_us = rl_now_us() - rl_nodes[idx].asked_at_us;

	if (reply->type == REDIS_REPLY_ERROR)
	{
		res->vote = RL_VOTE_FAILED;
		res->protocol_error = true;
		report_clip(res->detail, sizeof(res->detail), "Redis error: %.*s",
					(int) Min(reply->len, RL_DETAIL_LEN), reply->str);
		return;
	}

	switch (req->reply_kind)
	{
		case RL_REPLY_COUNTER:
			if (reply->type == REDIS_REPLY_NIL)
			{
				res->vote = RL_VOTE_NO;
				strlcpy(res->detail, "held by another owner", sizeof(res->detail));
			}
			else if (reply->type == REDIS_REPLY_STRING &&
					 rl_parse_counter(reply->str, reply->len, &res->counter))
			{
				res->vote = RL_VOTE_YES;
				strlcpy(res->detail, "granted", sizeof(res->detail));
			}
			else
			{
				res->vote = RL_VOTE_FAILED;
				res->protocol_error = true;
				snprintf(res->detail, sizeof(res->detail),
						 "unexpected reply (type %d) to the acquire script",
						 reply->type);
			}
			break;

		case RL_REPLY_FLAG:
		case RL_REPLY_COUNT:
			if (reply->type == REDIS_REPLY_INTEGER &&
				(reply->integer == 0 || reply->integer == 1 ||
				 (req->reply_kind == RL_REPLY_COUNT && reply->integer > 1)))
			{
				res->vote = (reply->integer || req->reply_kind == RL_REPLY_COUNT) ?
					RL_VOTE_YES : RL_VOTE_NO;
				strlcpy(res->detail, res->vote == RL_VOTE_YES ? "done" : "not the owner",
						sizeof(res->detail));
			}
			else
			{
				res->vote = RL_VOTE_FAILED;
				res->protocol_error = true;
				snprintf(res->detail, sizeof(res->detail),
						 "unexpected reply (type %d)", reply->type);
			}
			break;

		case RL_REPLY_FLAGS:
			take_flags(req, res, reply);
			break;

		case RL_REPLY_STATUS:
			res->vote = RL_VOTE_YES;
			strlcpy(res->detail, "answered", sizeof(res->detail));
			if (req->nothrow)
				break;
			if (reply->type == REDIS_REPLY_STRING ||
				reply->type == REDIS_REPLY_STATUS)
				res->reply_text = pnstrdup(reply->str, reply->len);
			else if (reply->type == REDIS_REPLY_ARRAY)
			{
				/* e.g. CONFIG GET: string elements, one per line */
				StringInfoData buf;

				initStringInfo(&buf);
				for (size_t e = 0; e < reply->elements; e++)
				{
					redisReply *el = reply->element[e];

					if (el->type == REDIS_REPLY_STRING ||
						el->type == REDIS_REPLY_STATUS)
						appendBinaryStringInfo(&buf, el->str, el->len);
					appendStringInfoChar(&buf, '\n');
				}
				res->reply_text = buf.data;
			}
			break;
	}
}

/*
 * The node refused an EVALSHA whose reply was owed with tag
 * (script_refused): send the command again by its text, owing the same
 * tag.  kept is its text if it is must-deliver (taken over), NULL if not:
 * then it is sent again only while its round still waits for it (req).
 * False when nothing was sent again.
 */
static bool
resend_by_text(RlNode *node, RlRequest *req, uint64_t tag, char *kept,
			   int kept_len)
{
	int			idx = node - rl_nodes;
	int			slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;

	if (kept != NULL)
	{
		if (node->owed_count < RL_MAX_OWED && sock_append(node, kept, kept_len))
		{
			(void) pipeline_owe(node, tag);
			node->owed_cmd[slot] = kept;
			node->owed_cmd_len[slot] = kept_len;
		}
		else
			keep_formatted(node, kept, kept_len);	/* for the next connection */
		return true;
	}
	if (req != NULL && tag == rl_round_id && !req->skip[idx] &&
		req->argv != NULL && req->results[idx].vote == RL_VOTE_PENDING)
		return pipeline_queue(node, req, tag);
	return false;
}

/* Mark the node's answer to this round as a protocol error. */
static void
mark_protocol_error(RlRequest *req, int idx)
{
	if (req != NULL && !req->skip[idx])
		req->results[idx].protocol_error = true;
}

/* Read what the node sent and hand each reply to its owner. */
void
pipeline_read(RlNode *node, RlRequest *req)
{
	int			idx = node - rl_nodes;
	char		err[160];
	char	   *kept;
	int			kept_len;
	bool		by_sha;

	switch (sock_read(node, err, sizeof(err)))
	{
		case 0:
			break;
		case -2:
			node_fail_hint(node, req,
						   "A node sent a reply larger than redlock accepts (" RL_MAX_REPLY_TEXT "): check that every entry of redlock.nodes is a Redis server that redlock alone uses this way.",
						   "protocol error: %s", err);
			mark_protocol_error(req, idx);
			return;
		default:
			{
				char		what[200];

				snprintf(what, sizeof(what), "connection lost: %s", err);
				node_lost(node, req, what);
				return;
			}
	}

	for (;;)
	{
		void	   *r = NULL;
		redisReply *reply;
		uint64_t	tag;
		size_t		unparsed = sock_unparsed(node);

		if (redisReaderGetReply(node->reader, &r) != REDIS_OK)
		{
			const char *refused = node_reply_refusal();

			node_fail(node, req, "protocol error: %s",
					  refused ? refused : node->reader->errstr);
			mark_protocol_error(req, idx);
			return;
		}
		if (r == NULL)
		{
			/* what the reader took in of a reply still incomplete */
			node->reply_bytes += unparsed - sock_unparsed(node);
			return;
		}
		node->reply_bytes = 0;
		reply = (redisReply *) r;

		if (take_push(node, reply))
		{
			freeReplyObject(reply);
			node_answering(node);
			continue;
		}
		if (rl_push_handler != NULL && node->owed_count == 0 &&
			reply->type == REDIS_REPLY_ERROR)
		{
			/* a (UN)SUBSCRIBE refused, e.g. by an ACL: say so once */
			if (!node->push_refused)
				ereport(LOG,
						(errmsg("Redis node %s refused a subscription: %.*s",
								node->name, (int) Min(reply->len, 120), reply->str)));
			node->push_refused = true;
			freeReplyObject(reply);
			continue;
		}
		if (node->owed_count == 0)
		{
			freeReplyObject(reply);
			node_fail(node, req, "protocol error: unsolicited reply");
			mark_protocol_error(req, idx);
			return;
		}
		tag = node->owed[node->owed_head];
		kept = node->owed_cmd[node->owed_head];
		kept_len = node->owed_cmd_len[node->owed_head];
		by_sha = node->owed_by_sha[node->owed_head];
		node->owed_cmd[node->owed_head] = NULL;
		node->owed_head = (node->owed_head + 1) % RL_MAX_OWED;
		node->owed_count--;
		node->last_progress_us = rl_now_us();

		if (by_sha && script_refused(node, reply) &&
			resend_by_text(node, req, tag, kept, kept_len))
			kept = NULL;		/* sent again, or kept: its answer is to come */
		else if (tag == RL_TAG_AUTH)
		{
			if (reply->type == REDIS_REPLY_ERROR)
			{
				char		msg[RL_DETAIL_LEN];

				report_clip(msg, sizeof(msg) - 32, "%.*s",
							(int) Min(reply->len, RL_DETAIL_LEN), reply->str);
				freeReplyObject(reply);
				node_fail(node, req, "authentication failed: %s", msg);
				mark_protocol_error(req, idx);
				return;
			}
		}
		else if (tag == RL_TAG_INFO)
		{
			server_learn(node, req, reply);
			freeReplyObject(reply);
			if (node->state != RL_CONN_READY)
				return;			/* it failed the node */
			node_answering(node);
			continue;
		}
		else if (req != NULL && tag == rl_round_id && !req->skip[idx] &&
				 req->results[idx].vote == RL_VOTE_PENDING)
			take_reply(req, idx, reply);

		if (kept != NULL)
			redisFreeCommand(kept);
		node_answering(node);
		freeReplyObject(reply);
	}
}

/* Write what is queued for the node, as far as the socket takes it. */
void
pipeline_write(RlNode *node, RlRequest *req)
{
	char		err[160];

	if (sock_write(node, err, sizeof(err)) < 0)
	{
		char		what[180];

		snprintf(what, sizeof(what), "could not send: %s", err);
		node_lost(node, req, what);
	}
}
