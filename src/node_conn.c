/*-------------------------------------------------------------------------
 *
 * node_conn.c
 *	  Connections to the Redis nodes: the node list in force, opening and
 *	  closing connections, failure, backoff and the node up/down log lines.
 *
 * Each backend keeps at most one connection per node, opened lazily (so
 * always after fork) and reused.  Every socket is counted against
 * max_files_per_process with AcquireExternalFD(), as PostgreSQL's own
 * modules do.  A node that failed is retried only after a backoff, so a
 * dead node does not cost a connect timeout on every call.
 *
 * Nothing here raises an ERROR: these functions run on the commit, abort
 * and exit paths too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "storage/fd.h"

#include "node_internal.h"

#define RL_BACKOFF_MIN_MS	100
#define RL_BACKOFF_MAX_MS	2000

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

RlNode		rl_nodes[RL_MAX_NODES];
int			rl_nnodes = 0;
static uint64_t rl_applied_generation = 0;

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
const char *
node_reply_refusal(void)
{
	const char *why = rl_reply_refused;

	rl_reply_refused = NULL;
	return why;
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

/* Changes whenever node i gets a new connection (pub/sub: subscribe again). */
uint64_t
rl_node_connection_serial(int i)
{
	return rl_nodes[i].serial;
}

bool
rl_node_connected(int i)
{
	return rl_nodes[i].ctx != NULL;
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

/*
 * Close the connection.  Must-deliver commands it still owed replies for
 * may not have been applied: they are kept for the next connection.
 */
void
node_disconnect(RlNode *node)
{
	if (node->ctx != NULL)
	{
		redisFree(node->ctx);
		node->ctx = NULL;
		rl_wes_stale = true;
	}
	if (node->fd_reserved)
	{
		ReleaseExternalFD();
		node->fd_reserved = false;
	}
	node->state = RL_CONN_NONE;
	node->want_write = false;
	pipeline_requeue_owed(node);
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
		pipeline_forget_kept(&rl_nodes[i]);
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
void
node_fail(RlNode *node, RlRequest *req, const char *fmt,...)
{
	va_list		args;
	int			idx = node - rl_nodes;

	va_start(args, fmt);
	vsnprintf(node->last_error, sizeof(node->last_error), fmt, args);
	va_end(args);
	node->failed_at_us = rl_now_us();

	if (req != NULL && !req->skip[idx] &&
		req->results[idx].vote == RL_VOTE_PENDING)
	{
		if (req->must_deliver)
			pipeline_keep(node, req);
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

/* The node answered: end its backoff, and say so if it had been down. */
void
node_answering(RlNode *node)
{
	node->backoff_ms = 0;
	if (node->reported_down)
	{
		ereport(LOG,
				(errmsg("redlock: node %s is answering again", node->name)));
		node->reported_down = false;
	}
}

/* Start a non-blocking connect; AUTH is queued ahead of any command. */
void
node_connect(RlNode *node, RlRequest *req)
{
	redisContext *ctx;

	if (!AcquireExternalFD())
	{
		node_fail(node, req, "could not connect: too many open files in this backend (max_files_per_process)");
		return;
	}
	node->fd_reserved = true;

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
	node->serial++;
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
			!pipeline_owe(node, RL_TAG_AUTH))
		{
			node_fail(node, req, "could not queue AUTH");
			return;
		}
	}
	pipeline_send_kept(node);
}

/* A connect in progress became writable: did it succeed? */
void
node_connect_done(RlNode *node, RlRequest *req)
{
	int			err = 0;
	int			one = 1;
	socklen_t	len = sizeof(err);

	if (getsockopt(node->ctx->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = errno;
	if (err != 0)
	{
		node_fail(node, req, "could not connect: %s", strerror(err));
		return;
	}
	/* small requests, answered at once: never wait for Nagle */
	(void) setsockopt(node->ctx->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a connection that only listens (pub/sub) must notice a dead peer too */
	(void) setsockopt(node->ctx->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
#ifdef TCP_KEEPIDLE
	{
		int			idle = 10,
					intvl = 5,
					cnt = 3;

		(void) setsockopt(node->ctx->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		(void) setsockopt(node->ctx->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
		(void) setsockopt(node->ctx->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	}
#endif
	node->state = RL_CONN_READY;
	node->asked_at_us = node->last_progress_us = rl_now_us();
	pipeline_write(node, req);
}

/*
 * The connection broke under this round's request.  A connection that sat
 * idle since the last round may simply have been closed by a restarted
 * node: reconnect once at once and send the request again, instead of
 * failing the node for this round.
 */
void
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
		if (!pipeline_queue(node, req, rl_dispatch_tag))
			node_fail(node, req, "could not queue the request");
		return;
	}
	node_fail(node, req, "%s", what);
}
