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
	return rl_nodes[i].state != RL_CONN_NONE;
}

int
rl_nodes_open_connections(void)
{
	int			n = 0;

	for (int i = 0; i < rl_nnodes; i++)
		if (rl_nodes[i].state != RL_CONN_NONE)
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
	if (node->state == RL_CONN_RESOLVING)
		resolve_cancel(node);
	sock_close(node);
	if (node->reader != NULL)
	{
		redisReaderFree(node->reader);
		node->reader = NULL;
	}
	sock_reset_output(node);
	node->bytes_in = 0;
	node->reply_bytes = 0;
	node->state = RL_CONN_NONE;
	node->want_write = false;
	pipeline_requeue_owed(node);
	node->wes_pos = -1;
	rl_wes_stale = true;
}

void
rl_nodes_disconnect_all(void)
{
	for (int i = 0; i < rl_nnodes; i++)
		node_disconnect(&rl_nodes[i]);
	resolve_shutdown();
}

/*
 * Which nodes this backend talks to, as a number: the same for every
 * backend that applied the same node list (FNV-1a over the nodes' names).
 */
uint64_t
rl_nodes_fingerprint(void)
{
	uint64_t	hash = UINT64CONST(14695981039346656037);

	for (int i = 0; i < rl_nnodes; i++)
	{
		for (const unsigned char *c = (const unsigned char *) rl_nodes[i].name; *c; c++)
		{
			hash ^= *c;
			hash *= UINT64CONST(1099511628211);
		}
		hash ^= ',';
		hash *= UINT64CONST(1099511628211);
	}
	return hash;
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
		pipeline_forget_kept(&rl_nodes[i]);
		/* a closed connection keeps a small output buffer: free it */
		free(rl_nodes[i].obuf);
		rl_nodes[i].obuf = NULL;
		rl_nodes[i].ocap = 0;
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
			node->fd = -1;
			node->same_as = -1;
			node->ident.uptime_s = -1;
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
node_vfail(RlNode *node, RlRequest *req, const char *hint, const char *fmt,
		   va_list args) pg_attribute_printf(4, 0);

static void
node_vfail(RlNode *node, RlRequest *req, const char *hint, const char *fmt,
		   va_list args)
{
	int			idx = node - rl_nodes;

	report_vclip(node->last_error, sizeof(node->last_error), fmt, args);
	node->last_hint = hint ? hint : report_text_hint(node->last_error);
	node->failed_at_us = rl_now_us();

	if (req != NULL && !req->skip[idx] &&
		req->results[idx].vote == RL_VOTE_PENDING)
	{
		if (req->must_deliver)
			pipeline_keep(node, req);
		req->results[idx].vote = RL_VOTE_FAILED;
		strlcpy(req->results[idx].detail, node->last_error,
				sizeof(req->results[idx].detail));
		req->results[idx].hint = node->last_hint;
	}

	/* one log line when a node goes away, one when it is back */
	if (!node->reported_down)
	{
		ereport(LOG,
				(errmsg("Redis node %s stopped answering: %s",
						node->name, node->last_error)));
		node->reported_down = true;
	}

	node_disconnect(node);
	node->backoff_ms = Min(Max(node->backoff_ms * 2, RL_BACKOFF_MIN_MS),
						   RL_BACKOFF_MAX_MS);
	node->retry_at_us = rl_now_us() + (int64_t) node->backoff_ms * 1000;
}

void
node_fail(RlNode *node, RlRequest *req, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	node_vfail(node, req, NULL, fmt, args);
	va_end(args);
}

/* node_fail, with what is likely wrong (a full sentence, static text) */
void
node_fail_hint(RlNode *node, RlRequest *req, const char *hint,
			   const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	node_vfail(node, req, hint, fmt, args);
	va_end(args);
}

/* The node answered: end its backoff, and say so if it had been down. */
void
node_answering(RlNode *node)
{
	node->last_heard_us = rl_now_us();
	node->backoff_ms = 0;
	if (node->reported_down)
	{
		ereport(LOG,
				(errmsg("Redis node %s is answering again", node->name)));
		node->reported_down = false;
	}
}

/*
 * Start connecting: a reader for the replies, AUTH and the kept commands
 * queued ahead of anything else, and the lookup of the node's addresses.
 * Resolution, TCP connect and the TLS handshake all count against
 * connect_timeout and all progress in the round's wait loop.
 */
void
node_connect(RlNode *node, RlRequest *req)
{
	int64_t		now = rl_now_us();

	node->reader = redisReaderCreate();
	if (node->reader == NULL)
	{
		node_fail(node, req, "could not allocate a connection");
		return;
	}
	if (rl_default_create_array == NULL)
	{
		rl_reply_functions = *node->reader->fn;
		rl_default_create_array = rl_reply_functions.createArray;
		rl_reply_functions.createArray = rl_create_array;
	}
	node->reader->fn = &rl_reply_functions;
	node->serial++;
	script_forget_all(node);
	node->state = RL_CONN_RESOLVING;
	node->connect_started_us = node->phase_started_us = now;
	node->connect_deadline_us = now + (int64_t) rl_connect_timeout_ms * 1000;
	node->naddrs = node->next_addr = 0;
	node->addr_error[0] = '\0';
	rl_wes_stale = true;

	/*
	 * AUTH [username] password.  A user name without a password is sent
	 * with an empty one, as redis-py does: an ACL user with nopass accepts
	 * it, any other refuses it with WRONGPASS.
	 */
	if ((rl_password != NULL && rl_password[0] != '\0') ||
		(rl_username != NULL && rl_username[0] != '\0'))
	{
		const char *argv[3];
		size_t		argvlen[3];
		int			argc = 0;
		char	   *cmd;
		int			len;
		bool		ok;
		const char *password = rl_password != NULL ? rl_password : "";

		argv[argc] = "AUTH";
		argvlen[argc++] = 4;
		if (rl_username != NULL && rl_username[0] != '\0')
		{
			argv[argc] = rl_username;
			argvlen[argc++] = strlen(rl_username);
		}
		argv[argc] = password;
		argvlen[argc++] = strlen(password);
		len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
		ok = len > 0 && sock_append(node, cmd, len) &&
			pipeline_owe(node, RL_TAG_AUTH);
		if (len > 0)
			redisFreeCommand(cmd);
		if (!ok)
		{
			node_fail(node, req, "could not queue AUTH");
			return;
		}
	}
	/* who the server is: its answer comes before anything else's */
	if (!server_queue_info(node))
	{
		node_fail(node, req, "could not queue INFO");
		return;
	}
	pipeline_send_kept(node);

	resolve_start(node);
	if (node->resolve_done)
		node_resolved(node, req);
}

/*
 * Connect to the next address of the node; when none is left, the node
 * failed with the last address's error.
 */
static void
node_connect_next(RlNode *node, RlRequest *req)
{
	while (node->next_addr < node->naddrs)
	{
		int			i = node->next_addr++;

		if (sock_open(node, (struct sockaddr *) &node->addrs[i],
					  node->addrlens[i], node->addr_error,
					  sizeof(node->addr_error)))
		{
			node->state = RL_CONN_CONNECTING;
			node->phase_started_us = rl_now_us();
			return;
		}
	}
	if (node->naddrs > 1)
		node_fail(node, req, "could not connect: %s (%d addresses tried)",
				  node->addr_error, node->naddrs);
	else
		node_fail(node, req, "could not connect: %s", node->addr_error);
}

/* The lookup of the node's addresses ended: connect, or fail. */
void
node_resolved(RlNode *node, RlRequest *req)
{
	node->resolve_done = false;
	node->resolve_seq = 0;
	if (node->naddrs == 0)
	{
		node_fail(node, req, "could not resolve host name \"%s\": %s",
				  node->addr.host, node->addr_error);
		return;
	}
	node_connect_next(node, req);
}

/* Connected (and through the TLS handshake, if any): start talking. */
static void
node_ready(RlNode *node, RlRequest *req)
{
	node->state = RL_CONN_READY;
	node->asked_at_us = node->last_progress_us = node->last_heard_us =
		rl_now_us();
	pipeline_write(node, req);
}

/*
 * Take the TLS handshake as far as it goes now.  plain: what the node sent
 * instead of a TLS record, or "".
 */
static void
node_handshake(RlNode *node, RlRequest *req, const char *plain)
{
	char		why[RL_DETAIL_LEN];

	switch (tls_handshake(node, why, sizeof(why)))
	{
		case 1:
			node_ready(node, req);
			break;
		case 0:
			break;				/* wait for node->tls_events */
		default:
			if (plain[0] != '\0')
				node_fail_hint(node, req, report_closed_hint(node),
							   "%s (the node answered in plain text: \"%s\"; it does not use TLS on this port)",
							   why, plain);
			else if (strstr(why, "closed the connection") != NULL)
				node_fail_hint(node, req, report_closed_hint(node), "%s", why);
			else
				node_fail(node, req, "%s", why);
			break;
	}
}

/* A connect in progress became writable: did it succeed? */
static void
node_connect_done(RlNode *node, RlRequest *req)
{
	int			err = 0;
	int			one = 1;
	socklen_t	len = sizeof(err);

	if (getsockopt(node->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = errno;
	if (err == EINPROGRESS || err == EALREADY)
		return;
	if (err != 0)
	{
		/* try the node's next address, if it has one */
		snprintf(node->addr_error, sizeof(node->addr_error), "%s", strerror(err));
		sock_close(node);
		node_connect_next(node, req);
		return;
	}
	/* small requests, answered at once: never wait for Nagle */
	(void) setsockopt(node->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* a connection that only listens (pub/sub) must notice a dead peer too */
	(void) setsockopt(node->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
#ifdef TCP_KEEPIDLE
	{
		int			idle = 10,
					intvl = 5,
					cnt = 3;

		(void) setsockopt(node->fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
		(void) setsockopt(node->fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
		(void) setsockopt(node->fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	}
#endif
	if (rl_tls_mode != RL_TLS_DISABLE)
	{
		char		why[160];

		if (!tls_begin(node, why, sizeof(why)))
		{
			node_fail(node, req, "%s", why);
			return;
		}
		node->state = RL_CONN_HANDSHAKE;
		node->phase_started_us = rl_now_us();
		node_handshake(node, req, "");
		return;
	}
	node_ready(node, req);
}

/* The socket events the node waits for now (RL_EV_*). */
int
node_wanted_events(const RlNode *node)
{
	switch (node->state)
	{
		case RL_CONN_NONE:
		case RL_CONN_RESOLVING:
			return 0;
		case RL_CONN_CONNECTING:
			return RL_EV_WRITE;
		case RL_CONN_HANDSHAKE:
			return node->tls_events;
		case RL_CONN_READY:
			return RL_EV_READ | (node->want_write ? RL_EV_WRITE : 0) |
				node->tls_events;
	}
	return 0;
}

/* The node's socket is ready: move its connection along. */
void
node_event(RlNode *node, RlRequest *req, bool readable, bool writable)
{
	if (node->fd < 0)
		return;					/* closed meanwhile */
	switch (node->state)
	{
		case RL_CONN_NONE:
		case RL_CONN_RESOLVING:
			break;
		case RL_CONN_CONNECTING:
			if (writable)
				node_connect_done(node, req);
			break;
		case RL_CONN_HANDSHAKE:
			{
				char		plain[64];

				/* a node without TLS on this port answers in plain text */
				if (!readable || !tls_peer_speaks_plaintext(node, plain, sizeof(plain)))
					plain[0] = '\0';
				node_handshake(node, req, plain);
			}
			break;
		case RL_CONN_READY:
			if (node->want_write && (writable || node->ssl != NULL))
				pipeline_write(node, req);
			if (node->state == RL_CONN_READY &&
				(readable || sock_has_buffered_input(node)))
				pipeline_read(node, req);
			break;
	}
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
	node_fail_hint(node, req, report_closed_hint(node), "%s", what);
}
