/*-------------------------------------------------------------------------
 *
 * node_pipeline.c
 *	  What travels on one node's connection: queued commands written,
 *	  replies read (with limits on their size and shape) and handed to the
 *	  round that asked, to the server identity (INFO) or to the pub/sub
 *	  handler.
 *
 * Replies are matched to the requests that asked by the tags the
 * connection owes (node_queue.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"

#include "net/node_internal.h"

static RlPushHandler rl_push_handler = NULL;

/*
 * None of our commands is answered with a large or nested array.  A broken
 * or hostile peer may still announce one of two billion elements, which
 * hiredis would allocate and, when the reply is freed, walk element by
 * element; or nest arrays hundreds of thousands deep, which some hiredis
 * versions follow recursively until the stack overflows.  Both are refused
 * by our own reader hook, whatever the hiredis version: the reader then
 * fails and so does the node, with a protocol error.
 */
#define RL_MAX_REPLY_ELEMENTS	65536
#define RL_MAX_REPLY_DEPTH		2	/* an array, and arrays inside it */

#if HIREDIS_MAJOR >= 1
typedef size_t rl_elements_t;
#else
typedef int rl_elements_t;
#endif
static redisReplyObjectFunctions rl_reply_functions;
static void *(*rl_default_create_array) (const redisReadTask *, rl_elements_t) = NULL;
static const char *rl_reply_refused = NULL;

static void *
rl_create_array(const redisReadTask *task, rl_elements_t elements)
{
	int			depth = 0;

	for (const redisReadTask *t = task->parent; t != NULL; t = t->parent)
		depth++;
	if (depth >= RL_MAX_REPLY_DEPTH)
	{
		rl_reply_refused = "array reply nested too deeply";
		return NULL;
	}
	if ((long long) elements < 0 || (long long) elements > RL_MAX_REPLY_ELEMENTS)
	{
		rl_reply_refused = "array reply too large";
		return NULL;
	}
	return rl_default_create_array(task, elements);
}

/*
 * Why the reader last refused a reply (NULL: it did not), and forget it.
 */
static const char *
reply_refusal(void)
{
	const char *why = rl_reply_refused;

	rl_reply_refused = NULL;
	return why;
}

/*
 * A reader for a new connection's replies, with the limits above; NULL when
 * out of memory.
 */
redisReader *
pipeline_new_reader(void)
{
	redisReader *reader = redisReaderCreate();

	if (reader == NULL)
		return NULL;
	if (rl_default_create_array == NULL)
	{
		rl_reply_functions = *reader->fn;
		rl_default_create_array = rl_reply_functions.createArray;
		rl_reply_functions.createArray = rl_create_array;
	}
	reader->fn = &rl_reply_functions;
	return reader;
}

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
		res->outcome = RL_OUTCOME_OTHER;
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
			res->outcome = RL_OUTCOME_OTHER;
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
	rl_nodes[idx].last_rtt_us = Max(res->elapsed_us, 1);

	if (reply->type == REDIS_REPLY_ERROR &&
		server_quarantine_refusal(&rl_nodes[idx], res, reply->str, reply->len))
		return;
	if (reply->type == REDIS_REPLY_ERROR)
	{
		res->vote = RL_VOTE_FAILED;
		res->outcome = RL_OUTCOME_REDIS_ERROR;
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
			else if (reply->type == REDIS_REPLY_STATUS && reply->len > 7 &&
					 memcmp(reply->str, "QUEUED ", 7) == 0 &&
					 rl_parse_counter(reply->str + 7, reply->len - 7,
									  &res->counter) &&
					 res->counter <= PG_INT32_MAX)
			{
				res->vote = RL_VOTE_NO;
				res->queued = true;
				res->queued_ahead = (int32) res->counter;
				res->counter = 0;
				snprintf(res->detail, sizeof(res->detail),
						 "held by another owner (queued, %d waiting ahead)",
						 res->queued_ahead);
			}
			else
			{
				res->vote = RL_VOTE_FAILED;
				res->protocol_error = true;
				res->outcome = RL_OUTCOME_OTHER;
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
				res->outcome = RL_OUTCOME_OTHER;
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
 * tag.  kept is its EVALSHA form if it is must-deliver (still the
 * caller's), NULL if not: then it is sent again only while its round still
 * waits for it (req), as also when its text cannot be made (out of
 * memory).  False when nothing was sent again.
 */
static bool
resend_by_text(RlNode *node, RlRequest *req, uint64_t tag, const char *kept,
			   int kept_len)
{
	int			idx = node - rl_nodes;
	int			slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;
	char	   *text;
	int			textlen;

	if (kept != NULL &&
		(text = script_eval_form(kept, kept_len, &textlen)) != NULL)
	{
		if (node->owed_count < rl_owed_limit() && sock_append(node, text, textlen))
		{
			(void) queue_owe(node, tag);
			node->owed_cmd[slot] = text;
			node->owed_cmd_len[slot] = textlen;
		}
		else
			queue_keep_text(node, text, textlen);	/* for the next connection */
		return true;
	}
	req = round_request(req, tag);
	if (req != NULL && !req->skip[idx] &&
		req->argv != NULL && req->results[idx].vote == RL_VOTE_PENDING)
		return queue_request(node, req, tag);
	return false;
}

/* Mark the node's answer to this round (batch) as a protocol error. */
static void
mark_protocol_error(RlRequest *req, int idx)
{
	for (RlRequest *r = req; r != NULL; r = r->batch_next)
		if (!r->skip[idx])
			r->results[idx].protocol_error = true;
}

/*
 * The first reply of a connection (to AUTH, or to INFO when no AUTH is
 * sent) may refuse the whole connection: a node at its maxclients or in
 * protected mode says why and closes it, and one that wants a password
 * refuses everything until AUTH (NOAUTH; what comes after may only be
 * "Protocol error: unauthenticated multibulk length").  Then the node
 * fails here, in its own words: true.  Other errors (INFO refused by an
 * ACL, AUTH refused) are the caller's.
 */
static bool
first_reply_refuses(RlNode *node, RlRequest *req, const redisReply *reply)
{
	const char *hint;
	int			len;

	if (reply->type != REDIS_REPLY_ERROR)
		return false;
	len = (int) Min(reply->len, RL_DETAIL_LEN);
	hint = report_refusal_hint(reply->str, reply->len);
	if (hint != NULL)
	{
		node_fail_hint(node, req, RL_OUTCOME_REFUSED, hint,
					   "refused the connection: %.*s", len, reply->str);
		return true;
	}
	if (reply->len >= 6 && strncmp(reply->str, "NOAUTH", 6) == 0)
	{
		node_fail(node, req, RL_OUTCOME_REDIS_ERROR, "Redis error: %.*s",
				  len, reply->str);
		mark_protocol_error(req, node - rl_nodes);
		return true;
	}
	return false;
}

/*
 * Read what the node sent and hand each reply to its owner.  Returns false
 * when the connection broke, with what happened in lost (the caller decides
 * whether to reconnect: node_lost); other failures fail the node here.
 */
bool
pipeline_read(RlNode *node, RlRequest *req, char *lost, size_t lostlen)
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
			node_fail_hint(node, req, RL_OUTCOME_OTHER,
						   "A node sent a reply larger than redlock accepts (" RL_MAX_REPLY_TEXT "): check that every entry of redlock.nodes is a Redis server that redlock alone uses this way.",
						   "protocol error: %s", err);
			mark_protocol_error(req, idx);
			return true;
		default:
			snprintf(lost, lostlen, "connection lost: %s", err);
			return false;
	}

	for (;;)
	{
		void	   *r = NULL;
		redisReply *reply;
		uint64_t	tag;
		size_t		unparsed = sock_unparsed(node);

		if (redisReaderGetReply(node->reader, &r) != REDIS_OK)
		{
			const char *refused = reply_refusal();

			node_fail(node, req, RL_OUTCOME_OTHER, "protocol error: %s",
					  refused ? refused : node->reader->errstr);
			mark_protocol_error(req, idx);
			return true;
		}
		if (r == NULL)
		{
			/* what the reader took in of a reply still incomplete */
			node->reply_bytes += unparsed - sock_unparsed(node);
			return true;
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
			node_fail(node, req, RL_OUTCOME_OTHER,
					  "protocol error: unsolicited reply");
			mark_protocol_error(req, idx);
			return true;
		}
		tag = node->owed[node->owed_head];
		kept = node->owed_cmd[node->owed_head];
		kept_len = node->owed_cmd_len[node->owed_head];
		by_sha = node->owed_by_sha[node->owed_head];
		node->owed_cmd[node->owed_head] = NULL;
		node->owed_head = (node->owed_head + 1) % RL_MAX_OWED;
		node->owed_count--;
		node->last_progress_us = rl_now_us();
		node->stalled_us = 0;

		if (by_sha && script_refused(node, reply) &&
			resend_by_text(node, req, tag, kept, kept_len))
		{
			/* sent again by its text, or kept so: its answer is to come */
		}
		else if ((tag == RL_TAG_AUTH || tag == RL_TAG_INFO) &&
				 first_reply_refuses(node, req, reply))
		{
			freeReplyObject(reply);
			return true;		/* it failed the node */
		}
		else if (tag == RL_TAG_AUTH)
		{
			if (reply->type == REDIS_REPLY_ERROR)
			{
				char		msg[RL_DETAIL_LEN];

				report_clip(msg, sizeof(msg) - 32, "%.*s",
							(int) Min(reply->len, RL_DETAIL_LEN), reply->str);
				freeReplyObject(reply);
				node_fail(node, req, RL_OUTCOME_REDIS_ERROR,
						  "authentication failed: %s", msg);
				mark_protocol_error(req, idx);
				return true;
			}
		}
		else if (tag == RL_TAG_INFO)
		{
			server_learn(node, req, reply);
			freeReplyObject(reply);
			if (node->state != RL_CONN_READY)
				return true;			/* it failed the node */
			node_answering(node);
			continue;
		}
		else
		{
			RlRequest  *owner = round_request(req, tag);

			if (owner != NULL && !owner->skip[idx] &&
				owner->results[idx].vote == RL_VOTE_PENDING)
				take_reply(owner, idx, reply);
		}

		if (kept != NULL)
			redisFreeCommand(kept);
		node_answering(node);
		freeReplyObject(reply);
	}
}

/*
 * Write what is queued for the node, as far as the socket takes it.
 * Returns false when the connection broke, with what happened in lost.
 */
bool
pipeline_write(RlNode *node, char *lost, size_t lostlen)
{
	char		err[160];

	if (sock_write(node, err, sizeof(err)) < 0)
	{
		snprintf(lost, lostlen, "could not send: %s", err);
		return false;
	}
	return true;
}
