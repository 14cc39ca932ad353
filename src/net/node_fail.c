/*-------------------------------------------------------------------------
 *
 * node_fail.c
 *	  A node's failure and its recovery: the error kept for the round and
 *	  for redlock_nodes, the connection closed, the backoff before the next
 *	  connect, and the node's up/down log lines.
 *
 * Nothing here raises an ERROR: these functions run on the commit, abort
 * and exit paths too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "net/node_internal.h"

#define RL_BACKOFF_MIN_MS	100
#define RL_BACKOFF_MAX_MS	2000

static void node_vfail(RlNode *node, RlRequest *req, RlNodeOutcome kind,
					   const char *hint, const char *fmt, va_list args)
			pg_attribute_printf(5, 0);

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
	node->shut_ours = false;
	queue_requeue_owed(node);
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
 * A node failed: close its connection, fail the round's pending requests
 * on it (every undecided request of a batch), and back off before
 * connecting again.
 */
static void
node_vfail(RlNode *node, RlRequest *req, RlNodeOutcome kind, const char *hint,
		   const char *fmt, va_list args)
{
	int			idx = node - rl_nodes;
	bool		failed_request = false;

	report_vclip(node->last_error, sizeof(node->last_error), fmt, args);
	node->last_hint = hint ? hint : report_text_hint(node->last_error);
	node->last_outcome = kind;
	node->failed_at_us = rl_now_us();

	for (RlRequest *r = req; r != NULL; r = r->batch_next)
	{
		if (r->skip[idx] || r->results[idx].vote != RL_VOTE_PENDING)
			continue;
		if (r->must_deliver)
			queue_keep(node, r);
		r->results[idx].vote = RL_VOTE_FAILED;
		r->results[idx].outcome = kind; /* told at the round's end */
		strlcpy(r->results[idx].detail, node->last_error,
				sizeof(r->results[idx].detail));
		r->results[idx].hint = node->last_hint;
		failed_request = true;
	}
	if (!failed_request)
		report_failure(node, kind,
					   node_connecting(node) ? node->connect_started_us :
					   node->failed_at_us);

	/*
	 * One log line when a node goes away, one when it is back: this
	 * backend's, unless the health of the nodes is kept for the whole
	 * server, which logs once for all (report_server_wide()).
	 */
	if (!node->reported_down && !report_server_wide())
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
node_fail(RlNode *node, RlRequest *req, RlNodeOutcome kind,
		  const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	node_vfail(node, req, kind, NULL, fmt, args);
	va_end(args);
}

/* node_fail, with what is likely wrong (a full sentence, static text) */
void
node_fail_hint(RlNode *node, RlRequest *req, RlNodeOutcome kind,
			   const char *hint, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	node_vfail(node, req, kind, hint, fmt, args);
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
		if (!report_server_wide())
			ereport(LOG,
					(errmsg("Redis node %s is answering again", node->name)));
		node->reported_down = false;
	}
}

/*
 * What a node whose connect ran out of time was doing, for the message
 * (NULL: it is not connecting).
 */
static const char *
phase_timeout(RlNode *node, char *buf, size_t len)
{
	int			ms = (int) ((rl_now_us() - node->connect_started_us) / 1000);

	switch (node->state)
	{
		case RL_CONN_RESOLVING:
			snprintf(buf, len, "could not resolve host name \"%s\": no answer after %d ms",
					 node->addr.host, ms);
			return buf;
		case RL_CONN_CONNECTING:
			snprintf(buf, len, "connect timed out after %d ms", rl_connect_timeout_ms);
			return buf;
		case RL_CONN_HANDSHAKE:
			if (tls_heard_server(node))
				snprintf(buf, len, "TLS handshake timed out after %d ms", ms);
			else
				snprintf(buf, len, "TLS handshake timed out after %d ms: the node never answered the TLS hello (a Redis without TLS on this port waits in silence for the rest of a command)",
						 ms);
			return buf;
		default:
			return NULL;
	}
}

/* The node's connect ran out of time: fail it, saying in which phase. */
void
node_connect_timed_out(RlNode *node, RlRequest *req)
{
	char		why[RL_DETAIL_LEN];
	const char *hint = NULL;
	RlNodeOutcome kind = node->state == RL_CONN_RESOLVING ? RL_OUTCOME_RESOLVE :
		node->state == RL_CONN_HANDSHAKE ? RL_OUTCOME_TLS : RL_OUTCOME_TIMEOUT;

	if (node->state == RL_CONN_HANDSHAKE && !tls_heard_server(node))
		hint = report_closed_hint(node);
	node_fail_hint(node, req, kind, hint, "%s",
				   phase_timeout(node, why, sizeof(why)));
}
