/*-------------------------------------------------------------------------
 *
 * node_io.c
 *	  Connections to the Redis nodes and multiplexed request rounds.
 *
 * Each backend keeps at most one connection per node, opened lazily (so
 * always after fork) and reused.  A round appends one command to every
 * node's connection, flushes them all, and waits for replies in a single
 * WaitEventSet that also wakes on the latch (query cancel, statement_timeout)
 * and on postmaster death.  The round ends as soon as its outcome is known;
 * nodes that have not answered are not waited for.
 *
 * Replies are matched to requests by position: every command appended to a
 * connection pushes a tag naming the round it belongs to, and each reply
 * pops one.  A reply that arrives after its round ended is therefore
 * recognised and dropped, never mistaken for the answer to a later command.
 * A round stops waiting for a silent node after node_timeout; its
 * connection is dropped only after a much longer silence or when too many
 * replies are owed, and a node that failed is retried only after a backoff,
 * so a dead node does not cost a connect timeout on every call.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <poll.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"

#include "node_io.h"

#define RL_MAX_OWED			1024	/* replies a connection may owe; a long
									 * silence usually fails it first */
#define RL_TAG_AUTH			UINT64_C(0)
#define RL_TAG_DISCARD		UINT64_MAX
#define RL_MAX_REPLAY		32	/* releases kept for an unreachable node */
#define RL_BACKOFF_MIN_MS	100
#define RL_BACKOFF_MAX_MS	2000

typedef enum RlConnState
{
	RL_CONN_NONE,
	RL_CONN_CONNECTING,
	RL_CONN_READY
} RlConnState;

typedef struct RlNode
{
	RlNodeAddr	addr;
	char		name[RL_MAX_HOST_LEN + 16];
	redisContext *ctx;
	RlConnState state;
	bool		want_write;		/* hiredis holds unsent output */
	int64_t		connect_deadline_us;
	int64_t		retry_at_us;	/* backoff: no reconnect before this */
	int			backoff_ms;
	char		last_error[128];
	bool		reported_down;	/* we logged that it stopped answering */

	/* releases that could not be sent, replayed on the next connection */
	char	   *replay_cmd[RL_MAX_REPLAY];
	int			replay_len[RL_MAX_REPLAY];
	int			nreplay;

	/* ring of tags of the replies this connection still owes, oldest first */
	uint64_t	owed[RL_MAX_OWED];
	char	   *owed_cmd[RL_MAX_OWED];	/* a release, kept until answered */
	int			owed_cmd_len[RL_MAX_OWED];
	int			owed_head;
	int			owed_count;
	int64_t		last_progress_us;	/* last reply, or when owing began */

	/* current round */
	int64_t		asked_at_us;	/* when our command could first be sent */
	bool		was_idle;		/* an idle connection was reused for it */

	/* position in the wait event set, -1 if none */
	int			wes_pos;
	uint32		wes_events;
} RlNode;

static RlNode rl_nodes[RL_MAX_NODES];
static int	rl_nnodes = 0;
static uint64_t rl_applied_generation = 0;
static uint64_t rl_round_id = 0;
static uint64_t rl_dispatch_tag = 0;	/* tag of what is being dispatched */

static WaitEventSet *rl_wes = NULL;
static bool rl_wes_stale = true;

static void node_fail(RlNode *node, RlRequest *req, const char *fmt,...) pg_attribute_printf(3, 4);
static void replay_remember(RlNode *node, const RlRequest *req);
static void replay_keep(RlNode *node, char *cmd, int len);

/*
 * None of our commands is answered with a large array.  A broken or hostile
 * peer may still announce one of two billion elements, which hiredis would
 * allocate and, when the reply is freed, walk element by element: seconds
 * of uninterruptible work.  Larger arrays are refused; the reader then
 * fails and so does the node, with a protocol error.
 */
#define RL_MAX_REPLY_ELEMENTS	65536
#if HIREDIS_MAJOR >= 1
typedef size_t rl_elements_t;
#else
typedef int rl_elements_t;
#endif
static redisReplyObjectFunctions rl_reply_functions;
static void *(*rl_default_create_array) (const redisReadTask *, rl_elements_t) = NULL;
static bool rl_reply_refused = false;

static void *
rl_create_array(const redisReadTask *task, rl_elements_t elements)
{
	if ((long long) elements < 0 || (long long) elements > RL_MAX_REPLY_ELEMENTS)
	{
		rl_reply_refused = true;
		return NULL;
	}
	return rl_default_create_array(task, elements);
}

int
rl_nodes_count(void)
{
	return rl_nnodes;
}

const char *
rl_node_name(int i)
{
	return rl_nodes[i].name;
}

int
rl_nodes_open_connections(void)
{
	int			n = 0;

	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].ctx != NULL)
			n++;
	return n;
}

static void
node_disconnect(RlNode *node)
{
	if (node->ctx != NULL)
	{
		redisFree(node->ctx);
		node->ctx = NULL;
		rl_wes_stale = true;
	}
	node->state = RL_CONN_NONE;
	node->want_write = false;

	/* releases sent but never answered may not have been applied */
	for (int i = 0; i < node->owed_count; i++)
	{
		int			slot = (node->owed_head + i) % RL_MAX_OWED;

		if (node->owed_cmd[slot] != NULL)
			replay_keep(node, node->owed_cmd[slot], node->owed_cmd_len[slot]);
		node->owed_cmd[slot] = NULL;
	}
	node->owed_head = 0;
	node->owed_count = 0;
	node->wes_pos = -1;
}

void
rl_nodes_disconnect_all(void)
{
	for (int i = 0; i < rl_nnodes; i++)
		node_disconnect(&rl_nodes[i]);
}

bool
rl_nodes_config_changed(void)
{
	return rl_applied_generation != rl_node_list_generation;
}

/* Drop all connections and take the node list now in force. */
void
rl_nodes_apply_config(void)
{
	rl_nodes_disconnect_all();
	for (int i = 0; i < rl_nnodes; i++)
	{
		for (int r = 0; r < rl_nodes[i].nreplay; r++)
			redisFreeCommand(rl_nodes[i].replay_cmd[r]);
		rl_nodes[i].nreplay = 0;
	}
	rl_nnodes = 0;
	if (rl_node_list != NULL)
	{
		for (int i = 0; i < rl_node_list->count; i++)
		{
			RlNode	   *node = &rl_nodes[i];

			memset(node, 0, sizeof(*node));
			node->addr = rl_node_list->nodes[i];
			if (strchr(node->addr.host, ':') != NULL)
				snprintf(node->name, sizeof(node->name), "[%s]:%d",
						 node->addr.host, node->addr.port);
			else
				snprintf(node->name, sizeof(node->name), "%s:%d",
						 node->addr.host, node->addr.port);
			node->wes_pos = -1;
		}
		rl_nnodes = rl_node_list->count;
	}
	rl_applied_generation = rl_node_list_generation;
	rl_wes_stale = true;
}

/*
 * A node failed: close its connection, fail this round's pending request on
 * it, and back off before connecting again.
 */
static void
node_fail(RlNode *node, RlRequest *req, const char *fmt,...)
{
	va_list		args;
	int			idx = node - rl_nodes;

	va_start(args, fmt);
	vsnprintf(node->last_error, sizeof(node->last_error), fmt, args);
	va_end(args);

	if (req != NULL && !req->skip[idx] &&
		req->results[idx].vote == RL_VOTE_PENDING)
	{
		if (req->replay)
			replay_remember(node, req);
		req->results[idx].vote = RL_VOTE_FAILED;
		strlcpy(req->results[idx].detail, node->last_error,
				sizeof(req->results[idx].detail));
	}

	/* one log line when a node goes away, one when it is back */
	if (!node->reported_down)
	{
		ereport(LOG,
				(errmsg("redlock: node %s stopped answering: %s",
						node->name, node->last_error)));
		node->reported_down = true;
	}

	node_disconnect(node);
	node->backoff_ms = Min(Max(node->backoff_ms * 2, RL_BACKOFF_MIN_MS),
						   RL_BACKOFF_MAX_MS);
	node->retry_at_us = rl_now_us() + (int64_t) node->backoff_ms * 1000;
}

static bool
owe_reply_kept(RlNode *node, uint64_t tag, char *cmd, int len)
{
	int			slot = (node->owed_head + node->owed_count) % RL_MAX_OWED;

	if (node->owed_count >= RL_MAX_OWED)
		return false;
	if (node->owed_count == 0)
		node->last_progress_us = rl_now_us();
	node->owed[slot] = tag;
	node->owed_cmd[slot] = cmd;
	node->owed_cmd_len[slot] = len;
	node->owed_count++;
	return true;
}

static bool
owe_reply(RlNode *node, uint64_t tag)
{
	return owe_reply_kept(node, tag, NULL, 0);
}

/*
 * Append the request to the node's connection.  A release keeps its bytes
 * with its slot until the node answers it, so that a connection that dies
 * first hands it to the replay list instead of losing it.
 */
static bool
queue_request(RlNode *node, const RlRequest *req, uint64_t tag)
{
	char	   *cmd;
	int			len;

	if (!req->replay)
		return redisAppendCommandArgv(node->ctx, req->argc, req->argv,
									  req->argvlen) == REDIS_OK &&
			owe_reply(node, tag);

	len = redisFormatCommandArgv(&cmd, req->argc, req->argv, req->argvlen);
	if (len <= 0)
		return false;
	if (redisAppendFormattedCommand(node->ctx, cmd, len) != REDIS_OK ||
		!owe_reply_kept(node, tag, cmd, len))
	{
		redisFreeCommand(cmd);
		return false;
	}
	return true;
}

/*
 * A release that cannot reach the node now is kept (formatted, in malloc'd
 * memory like hiredis's own buffers) and sent on the next connection, so a
 * node that was briefly away does not hold the lock until its TTL.  The
 * release script is owner-checked, so a late one never frees another
 * owner's lock.  The oldest is dropped when too many pile up.
 */
static void
replay_keep(RlNode *node, char *cmd, int len)
{
	for (int i = 0; i < node->nreplay; i++)
	{
		if (node->replay_len[i] == len &&
			memcmp(node->replay_cmd[i], cmd, len) == 0)
		{
			redisFreeCommand(cmd);	/* already kept */
			return;
		}
	}
	if (node->nreplay == RL_MAX_REPLAY)
	{
		redisFreeCommand(node->replay_cmd[0]);
		memmove(&node->replay_cmd[0], &node->replay_cmd[1],
				sizeof(char *) * (RL_MAX_REPLAY - 1));
		memmove(&node->replay_len[0], &node->replay_len[1],
				sizeof(int) * (RL_MAX_REPLAY - 1));
		node->nreplay--;
	}
	node->replay_cmd[node->nreplay] = cmd;
	node->replay_len[node->nreplay] = len;
	node->nreplay++;
}

static void
replay_remember(RlNode *node, const RlRequest *req)
{
	char	   *cmd;
	int			len;

	len = redisFormatCommandArgv(&cmd, req->argc, req->argv, req->argvlen);
	if (len > 0)
		replay_keep(node, cmd, len);
}

/* Queue the kept releases on a new connection, replies discarded. */
static void
replay_flush(RlNode *node)
{
	for (int i = 0; i < node->nreplay; i++)
	{
		if (node->ctx != NULL &&
			redisAppendFormattedCommand(node->ctx, node->replay_cmd[i],
										node->replay_len[i]) == REDIS_OK)
			(void) owe_reply(node, RL_TAG_DISCARD);
		redisFreeCommand(node->replay_cmd[i]);
	}
	node->nreplay = 0;
}

/* Start a non-blocking connect; AUTH is queued ahead of any command. */
static void
node_connect(RlNode *node, RlRequest *req)
{
	redisContext *ctx;

	ctx = redisConnectNonBlock(node->addr.host, node->addr.port);
	if (ctx == NULL)
	{
		node_fail(node, req, "could not allocate a connection");
		return;
	}
	if (ctx->err)
	{
		char		msg[128];

		strlcpy(msg, ctx->errstr, sizeof(msg));
		redisFree(ctx);
		node_fail(node, req, "could not connect: %s", msg);
		return;
	}
	if (rl_default_create_array == NULL)
	{
		rl_reply_functions = *ctx->reader->fn;
		rl_default_create_array = rl_reply_functions.createArray;
		rl_reply_functions.createArray = rl_create_array;
	}
	ctx->reader->fn = &rl_reply_functions;
	node->ctx = ctx;
	node->state = RL_CONN_CONNECTING;
	node->connect_deadline_us = rl_now_us() + (int64_t) rl_connect_timeout_ms * 1000;
	node->want_write = true;
	rl_wes_stale = true;

	if (rl_password != NULL && rl_password[0] != '\0')
	{
		const char *argv[3];
		size_t		argvlen[3];
		int			argc = 0;

		argv[argc] = "AUTH";
		argvlen[argc++] = 4;
		if (rl_username != NULL && rl_username[0] != '\0')
		{
			argv[argc] = rl_username;
			argvlen[argc++] = strlen(rl_username);
		}
		argv[argc] = rl_password;
		argvlen[argc++] = strlen(rl_password);
		if (redisAppendCommandArgv(ctx, argc, argv, argvlen) != REDIS_OK ||
			!owe_reply(node, RL_TAG_AUTH))
		{
			node_fail(node, req, "could not queue AUTH");
			return;
		}
	}
	replay_flush(node);
}

/*
 * The connection broke under this round's request.  A connection that sat
 * idle since the last round may simply have been closed by a restarted
 * node: reconnect once at once and send the request again, instead of
 * failing the node for this round.
 */
static void
node_lost(RlNode *node, RlRequest *req, const char *what)
{
	int			idx = node - rl_nodes;

	if (req != NULL && node->was_idle && !req->skip[idx] &&
		req->results[idx].vote == RL_VOTE_PENDING)
	{
		node->was_idle = false;
		node_disconnect(node);
		node_connect(node, req);
		if (node->state == RL_CONN_NONE)
			return;				/* node_connect failed it */
		if (!queue_request(node, req, rl_dispatch_tag))
			node_fail(node, req, "could not queue the request");
		return;
	}
	node_fail(node, req, "%s", what);
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
		snprintf(res->detail, sizeof(res->detail), "Redis error: %.*s",
				 (int) Min(reply->len, 120), reply->str);
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
			if (reply->type == REDIS_REPLY_INTEGER &&
				(reply->integer == 0 || reply->integer == 1))
			{
				res->vote = reply->integer ? RL_VOTE_YES : RL_VOTE_NO;
				strlcpy(res->detail, reply->integer ? "done" : "not the owner",
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

/* Read what the node sent and hand each reply to its owner. */
static void
node_read(RlNode *node, RlRequest *req)
{
	int			idx = node - rl_nodes;

	if (redisBufferRead(node->ctx) != REDIS_OK)
	{
		char		what[160];

		snprintf(what, sizeof(what), "connection lost: %s",
				 node->ctx->errstr[0] ? node->ctx->errstr : "closed by the server");
		node_lost(node, req, what);
		return;
	}

	for (;;)
	{
		void	   *r = NULL;
		redisReply *reply;
		uint64_t	tag;

		if (redisReaderGetReply(node->ctx->reader, &r) != REDIS_OK)
		{
			node_fail(node, req, "protocol error: %s",
					  rl_reply_refused ? "array reply too large" :
					  node->ctx->reader->errstr);
			rl_reply_refused = false;
			if (req != NULL && !req->skip[idx])
				req->results[idx].protocol_error = true;
			return;
		}
		if (r == NULL)
			return;
		reply = (redisReply *) r;

		if (node->owed_count == 0)
		{
			freeReplyObject(reply);
			node_fail(node, req, "protocol error: unsolicited reply");
			if (req != NULL && !req->skip[idx])
				req->results[idx].protocol_error = true;
			return;
		}
		tag = node->owed[node->owed_head];
		if (node->owed_cmd[node->owed_head] != NULL)
		{
			redisFreeCommand(node->owed_cmd[node->owed_head]);
			node->owed_cmd[node->owed_head] = NULL;
		}
		node->owed_head = (node->owed_head + 1) % RL_MAX_OWED;
		node->owed_count--;
		node->last_progress_us = rl_now_us();

		if (tag == RL_TAG_AUTH)
		{
			if (reply->type == REDIS_REPLY_ERROR)
			{
				char		msg[128];

				snprintf(msg, sizeof(msg), "%.*s", (int) Min(reply->len, 100),
						 reply->str);
				freeReplyObject(reply);
				node_fail(node, req, "authentication failed: %s", msg);
				if (req != NULL && !req->skip[idx])
					req->results[idx].protocol_error = true;
				return;
			}
		}
		else if (req != NULL && tag == rl_round_id && !req->skip[idx] &&
				 req->results[idx].vote == RL_VOTE_PENDING)
			take_reply(req, idx, reply);

		node->backoff_ms = 0;
		if (node->reported_down)
		{
			ereport(LOG,
					(errmsg("redlock: node %s is answering again", node->name)));
			node->reported_down = false;
		}
		freeReplyObject(reply);
	}
}

static void
node_write(RlNode *node, RlRequest *req)
{
	int			done = 0;

	if (redisBufferWrite(node->ctx, &done) != REDIS_OK)
	{
		char		what[160];

		snprintf(what, sizeof(what), "could not send: %s", node->ctx->errstr);
		node_lost(node, req, what);
		return;
	}
	node->want_write = !done;
}

/* A connect in progress became writable: did it succeed? */
static void
node_connect_done(RlNode *node, RlRequest *req)
{
	int			err = 0;
	socklen_t	len = sizeof(err);

	if (getsockopt(node->ctx->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = errno;
	if (err != 0)
	{
		node_fail(node, req, "could not connect: %s", strerror(err));
		return;
	}
	node->state = RL_CONN_READY;
	node->asked_at_us = node->last_progress_us = rl_now_us();
	node_write(node, req);
}

/*
 * How long a connection may owe replies without producing one before it is
 * dropped.  Rounds stop waiting for a silent node after node_timeout; the
 * connection itself is kept much longer, because a node that is merely slow
 * (overloaded) still applies the releases we pipeline behind its backlog,
 * while a dropped connection would lose them and leave locks to their TTL.
 * A stalled node is dropped sooner anyway when its reply ring fills up.
 */
static int64_t
rl_silence_limit_us(void)
{
	return Max((int64_t) rl_node_timeout_ms * 10, 1000) * 1000;
}

/*
 * Before a round: take replies that arrived since the last one, and drop
 * connections that have owed replies in silence for too long.
 */
static void
nodes_housekeeping(void)
{
	int64_t		now = rl_now_us();

	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (node->state == RL_CONN_READY && node->owed_count > 0)
			node_read(node, NULL);
		if (node->state == RL_CONN_READY && node->owed_count > 0 &&
			now - node->last_progress_us > rl_silence_limit_us())
			node_fail(node, NULL, "stopped answering (no reply for %d ms)",
					  (int) ((now - node->last_progress_us) / 1000));
		else if (node->state == RL_CONN_CONNECTING &&
				 now > node->connect_deadline_us)
			node_fail(node, NULL, "connect timed out after %d ms",
					  rl_connect_timeout_ms);
	}
}

/*
 * Queue the request on one node and start sending.  A node in backoff is
 * not asked unless honour_backoff is false.
 */
static void
node_dispatch(RlNode *node, RlRequest *req, uint64_t tag, bool honour_backoff)
{
	RlNodeResult *res = &req->results[node - rl_nodes];
	int64_t		now = rl_now_us();

	memset(res, 0, sizeof(*res));
	res->vote = RL_VOTE_PENDING;
	node->was_idle = (node->state == RL_CONN_READY && node->owed_count == 0);

	if (node->state == RL_CONN_NONE)
	{
		if (now < node->retry_at_us && honour_backoff)
		{
			res->vote = RL_VOTE_FAILED;
			res->in_backoff = true;
			snprintf(res->detail, sizeof(res->detail),
					 "%s (next retry in %d ms)", node->last_error,
					 (int) ((node->retry_at_us - now + 999) / 1000));
			if (req->replay)
				replay_remember(node, req);
			return;
		}
		node_connect(node, req);
		if (node->state == RL_CONN_NONE)
			return;				/* node_fail kept a release for replay */
	}

	if (!queue_request(node, req, tag))
	{
		node_fail(node, req, "too many requests queued on a stalled connection");
		return;
	}
	node->asked_at_us = now;
	node->want_write = true;
	if (node->state == RL_CONN_READY)
		node_write(node, req);
}

/* Queue the request on every participating node. */
static void
nodes_dispatch(RlRequest *req, uint64_t tag)
{
	req->nnodes = rl_nnodes;
	for (int i = 0; i < rl_nnodes; i++)
	{
		if (req->skip[i])
		{
			memset(&req->results[i], 0, sizeof(RlNodeResult));
			req->results[i].vote = RL_VOTE_FAILED;
			strlcpy(req->results[i].detail, "not asked", sizeof(req->results[i].detail));
			continue;
		}
		node_dispatch(&rl_nodes[i], req, tag, true);
	}
}

/*
 * Backoff spares a connect attempt per call to a node that is down, but it
 * must never be what decides a round: a node that came back would sit out
 * its backoff while calls fail.  When a round could not reach a majority
 * and some nodes were skipped for backoff, ask them now.
 */
static bool
nodes_dispatch_backed_off(RlRequest *req, uint64_t tag)
{
	bool		any = false;

	for (int i = 0; i < req->nnodes; i++)
	{
		if (!req->skip[i] && req->results[i].in_backoff)
		{
			node_dispatch(&rl_nodes[i], req, tag, false);
			any = true;
		}
	}
	return any;
}

static bool
round_finished(RlRequest *req)
{
	RlVote		votes[RL_MAX_NODES];

	for (int i = 0; i < req->nnodes; i++)
		votes[i] = req->results[i].vote;
	req->tally = rl_tally(votes, req->nnodes);
	req->decision = rl_decide(req->nnodes, req->tally);

	switch (req->goal)
	{
		case RL_GOAL_QUORUM:
			return req->decision != RL_UNDECIDED;
		case RL_GOAL_ANSWERS:
			return req->tally.yes + req->tally.no >= rl_majority(req->nnodes) ||
				req->tally.yes + req->tally.no + req->tally.pending <
				rl_majority(req->nnodes);
		case RL_GOAL_ALL:
			return req->tally.pending == 0;
	}
	return true;
}

/* Make the wait event set match the open sockets. */
static void
wes_rebuild(void)
{
	if (rl_wes != NULL)
		FreeWaitEventSet(rl_wes);
	rl_wes = NULL;

#if PG_VERSION_NUM >= 170000
	rl_wes = CreateWaitEventSet(NULL, RL_MAX_NODES + 2);
#else
	rl_wes = CreateWaitEventSet(TopMemoryContext, RL_MAX_NODES + 2);
#endif
	AddWaitEventToSet(rl_wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	if (IsUnderPostmaster)
		AddWaitEventToSet(rl_wes, WL_POSTMASTER_DEATH, PGINVALID_SOCKET,
						  NULL, NULL);
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		node->wes_pos = -1;
		if (node->ctx == NULL)
			continue;
		node->wes_events = WL_SOCKET_WRITEABLE;
		node->wes_pos = AddWaitEventToSet(rl_wes, node->wes_events,
										  node->ctx->fd, NULL, node);
	}
	rl_wes_stale = false;
}

static void
wes_update_events(void)
{
	if (rl_wes_stale || rl_wes == NULL)
		wes_rebuild();

	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];
		uint32		events;

		if (node->wes_pos < 0)
			continue;
		if (node->state == RL_CONN_CONNECTING)
			events = WL_SOCKET_WRITEABLE;
		else
			events = WL_SOCKET_READABLE |
				(node->want_write ? WL_SOCKET_WRITEABLE : 0);
		if (events != node->wes_events)
		{
			ModifyWaitEvent(rl_wes, node->wes_pos, events, NULL);
			node->wes_events = events;
		}
	}
}

/* When node i's pending answer in this round is due. */
static int64_t
node_deadline(RlNode *node)
{
	int64_t		since;

	if (node->state == RL_CONN_CONNECTING)
		return node->connect_deadline_us;
	since = Min(node->last_progress_us, node->asked_at_us);
	return since + (int64_t) rl_node_timeout_ms * 1000;
}

static void
round_wait(RlRequest *req)
{
	WaitEvent	events[RL_MAX_NODES + 2];
	bool		polled = false;

	for (;;)
	{
		int64_t		now;
		int64_t		next_deadline = INT64_MAX;
		bool		overdue = false;
		long		timeout_ms;
		int			nevents;

		if (round_finished(req))
			return;

		now = rl_now_us();
		for (int i = 0; i < req->nnodes; i++)
		{
			int64_t		deadline;

			if (req->results[i].vote != RL_VOTE_PENDING)
				continue;
			deadline = node_deadline(&rl_nodes[i]);
			if (now >= deadline)
				overdue = true;
			else
				next_deadline = Min(next_deadline, deadline);
		}

		/*
		 * A node is late only if its answer is not already waiting in the
		 * socket: a backend kept off the CPU past a deadline must not fail
		 * nodes that did answer.  So look once without waiting, then judge.
		 */
		if (overdue && polled)
		{
			for (int i = 0; i < req->nnodes; i++)
			{
				RlNode	   *node = &rl_nodes[i];

				if (req->results[i].vote != RL_VOTE_PENDING ||
					now < node_deadline(node))
					continue;
				if (node->state == RL_CONN_CONNECTING)
					node_fail(node, req, "connect timed out after %d ms",
							  rl_connect_timeout_ms);
				else
				{
					req->results[i].vote = RL_VOTE_FAILED;
					snprintf(req->results[i].detail, sizeof(req->results[i].detail),
							 "timed out after %d ms", rl_node_timeout_ms);
				}
			}
			polled = false;
			continue;
		}
		polled = overdue;

		wes_update_events();
		timeout_ms = overdue ? 0 : (long) ((next_deadline - now + 999) / 1000);
		nevents = WaitEventSetWait(rl_wes, timeout_ms, events, lengthof(events),
								   PG_WAIT_EXTENSION);

		for (int e = 0; e < nevents; e++)
		{
			WaitEvent  *ev = &events[e];
			RlNode	   *node = (RlNode *) ev->user_data;

			if (ev->events & WL_LATCH_SET)
			{
				ResetLatch(MyLatch);
				if (!req->nothrow)
					CHECK_FOR_INTERRUPTS();
				continue;
			}
			if (ev->events & WL_POSTMASTER_DEATH)
			{
				if (req->nothrow)
					return;
				ereport(FATAL,
						(errcode(ERRCODE_ADMIN_SHUTDOWN),
						 errmsg("terminating connection due to unexpected postmaster exit")));
			}
			if (node == NULL || node->ctx == NULL || node->wes_pos != ev->pos)
				continue;		/* its socket was closed in this batch */

			if (node->state == RL_CONN_CONNECTING)
			{
				node_connect_done(node, req);
				continue;
			}
			if ((ev->events & WL_SOCKET_WRITEABLE) && node->want_write)
				node_write(node, req);
			if (node->ctx != NULL && (ev->events & WL_SOCKET_READABLE))
				node_read(node, req);
		}
	}
}

/*
 * After a round: push out what is still queued without waiting.  A node
 * whose connect was still in progress when the round was decided holds the
 * request (and any replayed releases) in its output buffer; finishing the
 * connect now sends them at once instead of at this backend's next call.
 */
static void
nodes_flush(void)
{
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (node->state == RL_CONN_CONNECTING)
		{
			struct pollfd pfd;

			pfd.fd = node->ctx->fd;
			pfd.events = POLLOUT;
			pfd.revents = 0;
			if (poll(&pfd, 1, 0) == 1)
				node_connect_done(node, NULL);
		}
		else if (node->state == RL_CONN_READY && node->want_write)
			node_write(node, NULL);
	}
}

/*
 * Send the request to every node and wait until the round's goal is met.
 * Nodes that did not answer in time are left PENDING or FAILED in
 * req->results; their replies, should they come later, are discarded.
 */
void
rl_nodes_run(RlRequest *req)
{
	nodes_housekeeping();
	rl_round_id++;
	rl_dispatch_tag = rl_round_id;
	nodes_dispatch(req, rl_round_id);
	round_wait(req);
	if (req->decision == RL_UNAVAILABLE &&
		nodes_dispatch_backed_off(req, rl_round_id))
		round_wait(req);
	nodes_flush();
}

/*
 * Send the request without waiting for replies (used for best-effort
 * releases).  Output that does not fit in the socket now goes out with the
 * next round.
 */
void
rl_nodes_send(RlRequest *req)
{
	nodes_housekeeping();
	rl_dispatch_tag = RL_TAG_DISCARD;
	nodes_dispatch(req, RL_TAG_DISCARD);
	nodes_flush();
}
