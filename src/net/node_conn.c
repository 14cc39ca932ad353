/*-------------------------------------------------------------------------
 *
 * node_conn.c
 *	  Connections to the Redis nodes: the node list in force, opening a
 *	  connection (lookup, TCP connect, TLS handshake, AUTH and INFO queued)
 *	  and handling its socket's events; a connection lost under a round.
 *
 * Each backend keeps at most one connection per node, opened lazily (so
 * always after fork) and reused.  Every socket is counted against
 * max_files_per_process with AcquireExternalFD(), as PostgreSQL's own
 * modules do.  A node that failed is retried only after a backoff
 * (node_fail.c), so a dead node does not cost a connect timeout on every
 * call.
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

#include "net/node_internal.h"

static uint64_t rl_applied_generation = 0;

/* FNV-1a of text, then of the byte end: a step of the fingerprints below */
static uint64_t
hash_text(uint64_t hash, const char *text, char end)
{
	for (const unsigned char *c = (const unsigned char *) (text ? text : ""); *c; c++)
	{
		hash ^= *c;
		hash *= UINT64CONST(1099511628211);
	}
	hash ^= (unsigned char) end;
	return hash * UINT64CONST(1099511628211);
}

/* rl_nodes_fingerprint() of the node table, set when it is (re)built */
static uint64_t rl_applied_fingerprint = UINT64CONST(14695981039346656037);

/*
 * Which nodes this backend talks to, as a number: the same for every
 * backend that applied the same node list (FNV-1a over the nodes' names).
 * Asked for every lease; the names change only in rl_nodes_apply_config,
 * which computes it.
 */
uint64_t
rl_nodes_fingerprint(void)
{
	return rl_applied_fingerprint;
}

/*
 * Of the settings in force (not of the connections open): the node list in
 * its order, the credentials, TLS and the DNS servers.  Asked on every
 * round handed to the dispatcher, so it is computed again only when one of
 * them was given a different value: their assign hooks bump the node list
 * generation then (guc_net.c), on a reload and on a SET alike.  It is
 * computed when asked, after the assignment, never in the hook.
 */
uint64_t
rl_nodes_settings_fingerprint(void)
{
	static uint64_t cached = 0;
	static uint64_t cached_generation = 0;	/* 0: none (generations start at 1) */
	uint64_t	hash = UINT64CONST(14695981039346656037);
	char		port[16];

	if (cached_generation == rl_node_list_generation)
		return cached;

	if (rl_node_list != NULL)
	{
		for (int i = 0; i < rl_node_list->count; i++)
		{
			snprintf(port, sizeof(port), "%d", rl_node_list->nodes[i].port);
			hash = hash_text(hash, rl_node_list->nodes[i].host, '\n');
			hash = hash_text(hash, port, '\n');
		}
	}
	snprintf(port, sizeof(port), "%d", rl_tls_mode);
	hash = hash_text(hash, port, '\n');
	hash = hash_text(hash, rl_username, '\n');
	hash = hash_text(hash, rl_password, '\n');
	hash = hash_text(hash, rl_tls_ca_file, '\n');
	hash = hash_text(hash, rl_tls_cert_file, '\n');
	hash = hash_text(hash, rl_tls_key_file, '\n');
	hash = hash_text(hash, rl_dns_servers, '\n');
	cached = hash;
	cached_generation = rl_node_list_generation;
	return hash;
}

bool
rl_nodes_config_changed(void)
{
	return rl_applied_generation != rl_node_list_generation;
}

/* A node's must-deliver commands kept over a change of the node list */
typedef struct RlKeptStash
{
	char		name[RL_MAX_HOST_LEN + 16];
	char	   *cmd[RL_MAX_KEPT];
	int			len[RL_MAX_KEPT];
	int			n;
} RlKeptStash;

/*
 * Drop all connections and take the node list now in force.  The
 * must-deliver commands kept for a node (and those its connection owed a
 * reply to) stay with it if it is still in the list, under whatever index:
 * a release still reaches it.
 */
void
rl_nodes_apply_config(void)
{
	static RlKeptStash stash[RL_MAX_NODES];	/* too large for the stack */
	int			nstash = rl_nnodes;

	rl_nodes_disconnect_all();
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		strlcpy(stash[i].name, node->name, sizeof(stash[i].name));
		memcpy(stash[i].cmd, node->kept_cmd, sizeof(stash[i].cmd));
		memcpy(stash[i].len, node->kept_len, sizeof(stash[i].len));
		stash[i].n = node->nkept;
		node->nkept = 0;
		/* a closed connection keeps a small output buffer: free it */
		free(node->obuf);
		node->obuf = NULL;
		node->ocap = 0;
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
	for (int j = 0; j < nstash; j++)
	{
		RlNode	   *node = NULL;

		for (int i = 0; i < rl_nnodes && node == NULL; i++)
			if (strcmp(rl_nodes[i].name, stash[j].name) == 0)
				node = &rl_nodes[i];
		for (int k = 0; k < stash[j].n; k++)
		{
			if (node != NULL)
				queue_keep_text(node, stash[j].cmd[k], stash[j].len[k]);
			else
				redisFreeCommand(stash[j].cmd[k]);
		}
	}
	rl_applied_fingerprint = UINT64CONST(14695981039346656037);
	for (int i = 0; i < rl_nnodes; i++)
		rl_applied_fingerprint = hash_text(rl_applied_fingerprint,
										   rl_nodes[i].name, ',');
	rl_applied_generation = rl_node_list_generation;
	rl_wes_stale = true;
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

	node->reader = pipeline_new_reader();
	if (node->reader == NULL)
	{
		node_fail(node, req, RL_OUTCOME_OTHER, "could not allocate a connection");
		return;
	}
	node->serial++;
	script_forget_all(node);
	node->state = RL_CONN_RESOLVING;
	node->connect_started_us = node->phase_started_us = now;
	node->connect_deadline_us = now + (int64_t) rl_connect_timeout_ms * 1000;
	node->naddrs = node->next_addr = 0;
	node->addr_error[0] = '\0';
	node->tls_broken = false;
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
			queue_owe(node, RL_TAG_AUTH);
		if (len > 0)
			redisFreeCommand(cmd);
		if (!ok)
		{
			node_fail(node, req, RL_OUTCOME_OTHER, "could not queue AUTH");
			return;
		}
	}
	/* who the server is: its answer comes before anything else's */
	if (!server_queue_info(node))
	{
		node_fail(node, req, RL_OUTCOME_OTHER, "could not queue INFO");
		return;
	}
	queue_send_kept(node, rl_owed_limit());

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
		node_fail(node, req, RL_OUTCOME_REFUSED,
				  "could not connect: %s (%d addresses tried)",
				  node->addr_error, node->naddrs);
	else
		node_fail(node, req, RL_OUTCOME_REFUSED, "could not connect: %s",
				  node->addr_error);
}

/* The lookup of the node's addresses ended: connect, or fail. */
void
node_resolved(RlNode *node, RlRequest *req)
{
	node->resolve_done = false;
	node->resolve_seq = 0;
	if (node->naddrs == 0)
	{
		node_fail(node, req, RL_OUTCOME_RESOLVE,
				  "could not resolve host name \"%s\": %s",
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
	node_write(node, req);
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
				node_fail_hint(node, req, RL_OUTCOME_TLS, report_closed_hint(node),
							   "%s (the node answered in plain text: \"%s\"; it does not use TLS on this port)",
							   why, plain);
			else if (strstr(why, "closed the connection") != NULL)
				node_fail_hint(node, req, RL_OUTCOME_TLS, report_closed_hint(node),
							   "%s", why);
			else
				node_fail(node, req, RL_OUTCOME_TLS, "%s", why);
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
			node_fail(node, req, RL_OUTCOME_TLS, "%s", why);
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
				node_write(node, req);
			if (node->state == RL_CONN_READY &&
				(readable || sock_has_buffered_input(node)))
				node_read(node, req);
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

	bool		pending = false;

	if (node->shut_ours)
	{
		/* the node closed a connection we ended: it ran all it was sent */
		node_disconnect(node);
		return;
	}

	for (RlRequest *r = req; r != NULL; r = r->batch_next)
		pending |= !r->skip[idx] && r->results[idx].vote == RL_VOTE_PENDING;
	if (pending && node->was_idle)
	{
		node->was_idle = false;
		node_disconnect(node);
		node_connect(node, req);
		if (node->state == RL_CONN_NONE)
			return;				/* node_connect failed it */
		for (RlRequest *r = req; r != NULL; r = r->batch_next)
		{
			if (r->skip[idx] || r->results[idx].vote != RL_VOTE_PENDING)
				continue;
			if (!queue_request(node, r, r->tag))
			{
				node_fail(node, req, RL_OUTCOME_OTHER, "could not queue the request");
				return;
			}
		}
		return;
	}
	node_fail_hint(node, req,
				   node->tls_broken ? RL_OUTCOME_TLS : RL_OUTCOME_REFUSED,
				   report_closed_hint(node), "%s", what);
}

/*
 * Read what the node sent; a connection that broke is lost (node_lost may
 * reconnect at once).
 */
void
node_read(RlNode *node, RlRequest *req)
{
	char		lost[200];

	if (!pipeline_read(node, req, lost, sizeof(lost)))
		node_lost(node, req, lost);
}

/*
 * Write what is queued for the node; a connection that broke is lost.  A
 * node that closed it may have said why first (a refusal at connect: its
 * maxclients, protected mode): what it sent is read before the write's
 * error is taken for the cause.
 */
void
node_write(RlNode *node, RlRequest *req)
{
	char		lost[200];
	char		unread[200];

	if (pipeline_write(node, lost, sizeof(lost)))
		return;
	if (pipeline_read(node, req, unread, sizeof(unread)) &&
		node->state != RL_CONN_READY)
		return;					/* the node's own words failed it */
	node_lost(node, req, lost);
}

/* Move on the nodes whose lookup ended: connect them. */
void
node_lookups_ended(RlRequest *req)
{
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];

		if (node->state == RL_CONN_RESOLVING && node->resolve_done)
			node_resolved(node, req);
	}
}
