/*-------------------------------------------------------------------------
 *
 * node_report.c
 *	  How what happened on the nodes is told: per-node texts cut at a word
 *	  boundary, the hint that says what is likely wrong, from the failure
 *	  seen (a Redis error code, a TLS mismatch, a hostile reply), and how
 *	  each request ended, to the health hook of a higher layer.
 *
 * A failing minority is only useful to an operator if each node's line
 * says what happened in full words, and the hint names the setting or the
 * node setting to look at.  The texts go into errdetail and errhint (see
 * rl_describe_nodes() and report_unavailable() in lease_sql.c).
 *
 * Nothing here raises an ERROR or allocates: it runs on the no-throw paths
 * (and so must the health hook).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "net/node_internal.h"

/*
 * vsnprintf into dst; a text that does not fit is cut after its last whole
 * word that leaves room for "...", which is appended.
 */
void
report_vclip(char *dst, size_t len, const char *fmt, va_list args)
{
	int			n;
	size_t		cut;

	if (len == 0)
		return;
	n = vsnprintf(dst, len, fmt, args);
	if (n < 0 || (size_t) n < len)
		return;
	if (len < 8)
		return;					/* no room to cut nicely */
	cut = len - 4;				/* room for "..." and the NUL */
	while (cut > len / 2 && dst[cut] != ' ')
		cut--;
	if (dst[cut] != ' ')
		cut = len - 4;			/* one long word: cut it */
	while (cut > 0 && (dst[cut - 1] == ' ' || dst[cut - 1] == ',' ||
					   dst[cut - 1] == ':' || dst[cut - 1] == ';'))
		cut--;
	memcpy(dst + cut, "...", 4);
}

void
report_clip(char *dst, size_t len, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	report_vclip(dst, len, fmt, args);
	va_end(args);
}

/*
 * What is likely wrong when a node closed the connection before answering
 * anything, or did not complete (or answer) the TLS handshake: the TLS
 * setting does not match the node's port.  NULL if nothing points there.
 */
const char *
report_closed_hint(const RlNode *node)
{
	if (rl_tls_mode == RL_TLS_DISABLE)
		return node->bytes_in == 0 ?
			"A node closed the connection before answering anything, as a Redis that accepts only TLS on that port does: if so, set redlock.tls_mode (and redlock.tls_ca_file)." :
			NULL;
	if (node->state == RL_CONN_HANDSHAKE)
		return "A node did not complete the TLS handshake: check that redlock.nodes names the nodes' TLS ports (tls-port); a Redis without TLS on a port cannot answer TLS there, so set redlock.tls_mode = disable for plain-TCP nodes.";
	return NULL;
}

/* What a text a node sent means for redlock: the words it begins with. */
typedef struct WordsHint
{
	const char *words;
	const char *hint;
} WordsHint;

/* What a Redis error code means for redlock, by its first word. */
static const WordsHint redis_error_hints[] =
{
	{"NOAUTH", "A node requires authentication: set redlock.password (and redlock.username for an ACL user)."},
	{"WRONGPASS", "A node refused redlock.username and redlock.password: check them against the node's ACL users (ACL LIST) or its requirepass."},
	{"NOPERM", "The node's ACL user lacks a command, key or channel that redlock uses: grant the minimal ACL given in redlock's documentation (doc/operating.md), with key patterns that match redlock.key_prefix."},
	{"OOM", "A node is out of memory and refuses writes (maxmemory reached with maxmemory-policy noeviction): free memory or raise maxmemory there; redlock_nodes warns about such nodes."},
	{"READONLY", "A node is a read-only replica: redlock.nodes must name independent masters."},
	{"MOVED", "A node runs in cluster mode: redlock needs independent masters, not a Redis Cluster (cluster-enabled no)."},
	{"ASK", "A node runs in cluster mode: redlock needs independent masters, not a Redis Cluster (cluster-enabled no)."},
	{"CLUSTERDOWN", "A node runs in cluster mode: redlock needs independent masters, not a Redis Cluster (cluster-enabled no)."},
	{"CROSSSLOT", "A node runs in cluster mode: redlock needs independent masters, not a Redis Cluster (cluster-enabled no)."},
	{"BUSY", "A node is busy running a long script or function: it answers again once that ends (or is stopped with SCRIPT KILL or FUNCTION KILL)."},
	{"LOADING", "A node is loading its data set after a restart: it answers once it is done."},
	{"MISCONF", "A node refuses writes because it cannot save its data (stop-writes-on-bgsave-error): check its disk and its log."},
	{"NOSCRIPT", "A node does not run Lua scripts (EVAL), which redlock needs: check that it is a Redis server with scripting enabled."},
	{"WRONGTYPE", "A key under redlock.key_prefix holds a value redlock did not write: another application uses the prefix; give redlock a prefix of its own (redlock.key_prefix)."},
	{"MASTERDOWN", "A node is a replica that lost its master: redlock.nodes must name independent masters."},
};

/*
 * What a node that refuses a connection as soon as it is made says (the
 * first reply, before it closes the connection), and the hint for it; NULL
 * if text is no such refusal.
 */
const char *
report_refusal_hint(const char *text, size_t len)
{
	static const WordsHint refusals[] =
	{
		{"ERR max number of clients reached", "A node refused the connection because it has as many clients as its maxclients setting allows: raise maxclients on the node (CONFIG SET maxclients, and in its configuration file), or have fewer clients connect to it (redlock.shared_connections lets this server's sessions share one connection per node)."},
		{"DENIED", "A node in protected mode refused a connection from another host: give the node a password (requirepass, and redlock.password here) or bind it to the addresses it should serve with protected-mode no, as its message says."},
	};

	for (int i = 0; i < lengthof(refusals); i++)
	{
		size_t		wlen = strlen(refusals[i].words);

		if (len >= wlen && strncmp(text, refusals[i].words, wlen) == 0)
			return refusals[i].hint;
	}
	return NULL;
}

/* The hint for a node's failure described by text, or NULL. */
const char *
report_text_hint(const char *text)
{
	static const char *const prefixes[] = {"Redis error: ", "authentication failed: "};

	for (int p = 0; p < lengthof(prefixes); p++)
	{
		size_t		plen = strlen(prefixes[p]);

		if (strncmp(text, prefixes[p], plen) != 0)
			continue;
		text += plen;
		for (int i = 0; i < lengthof(redis_error_hints); i++)
		{
			size_t		clen = strlen(redis_error_hints[i].words);

			if (strncmp(text, redis_error_hints[i].words, clen) == 0 &&
				(text[clen] == ' ' || text[clen] == '\0'))
				return redis_error_hints[i].hint;
		}
		if (strncmp(text, "ERR unknown command", 19) == 0)
			return "A node does not know a command redlock sends (EVAL renamed or disabled, or not a Redis server): check the nodes in redlock.nodes.";
		return NULL;
	}
	if (strncmp(text, "protocol error: ", 16) == 0 ||
		strncmp(text, "unexpected ", 11) == 0)
		return "A node answered with something that is not a valid answer to redlock's commands: check that every entry of redlock.nodes is a Redis server (not another service, or a proxy that changes replies).";
	return NULL;
}

static const char *
result_hint(const RlNodeResult *res)
{
	return res->hint != NULL ? res->hint : report_text_hint(res->detail);
}

/*
 * The errhint for a round that failed: what is likely wrong, from the
 * first node whose failure says, or fallback.
 */
const char *
rl_nodes_error_hint(const RlRequest *req, const char *fallback)
{
	for (int i = 0; i < req->nnodes; i++)
	{
		const char *hint;

		if (req->results[i].vote != RL_VOTE_FAILED)
			continue;
		hint = result_hint(&req->results[i]);
		if (hint != NULL)
			return hint;
	}
	return fallback;
}

/* What a node's failure of a given kind likely means, without a hint. */
static const char *
kind_hint(RlNodeOutcome kind)
{
	switch (kind)
	{
		case RL_OUTCOME_TLS:
			return "A node's TLS connection failed: check redlock.tls_mode and redlock.tls_ca_file (the CA that signed the nodes' certificates), and redlock.tls_cert_file and redlock.tls_key_file for nodes that ask for a client certificate (tls-auth-clients).";
		case RL_OUTCOME_RESOLVE:
			return "A node's host name did not resolve: check the names in redlock.nodes, and redlock.dns_servers if it is set (otherwise the servers in /etc/resolv.conf are asked).";
		default:
			return "Check that the nodes in redlock.nodes are running and reachable: a node that refuses or closes the connection is down, restarting, or listens on another address or port.";
	}
}

/*
 * Nodes late for the round: node_timeout, and how long the last answer of
 * one of them took, which tells a stalled node from a slow network.
 */
static void
late_hint(const RlRequest *req, int nlate, char *buf, size_t len)
{
	int			known = -1;
	char		late[96];
	char		latency[RL_MAX_HOST_LEN + 80] = "";
	const char *advice;

	for (int i = 0; i < req->nnodes && known < 0; i++)
		if (req->results[i].vote == RL_VOTE_FAILED &&
			req->results[i].outcome == RL_OUTCOME_LATE &&
			req->results[i].latency_us > 0)
			known = i;
	if (nlate == 1)
		snprintf(late, sizeof(late), "A node did not answer within redlock.node_timeout (%d ms)",
				 rl_node_timeout_ms);
	else
		snprintf(late, sizeof(late), "%d nodes did not answer within redlock.node_timeout (%d ms)",
				 nlate, rl_node_timeout_ms);
	if (known >= 0)
	{
		int64_t		us = req->results[known].latency_us;

		snprintf(latency, sizeof(latency), "; the last answer of %s took %.1f ms",
				 rl_nodes[known].name, (double) us / 1000.0);
		advice = us * 2 < (int64_t) rl_node_timeout_ms * 1000 ?
			"A node that answers that fast is stalled or overloaded (a slow command, a fork, a paused process), not slow to reach: check the node, and raise redlock.node_timeout only if the nodes' latency (redlock_nodes.rtt_ms) comes near it." :
			"The node or the network is slow for this timeout: raise redlock.node_timeout, or check the node's load and latency (redlock_nodes.rtt_ms).";
	}
	else
		advice = "Check the nodes' load and latency (redlock_nodes.rtt_ms), and raise redlock.node_timeout if the network needs more time.";
	report_clip(buf, len, "%s%s.  %s", late, latency, advice);
}

/*
 * The errhint for a round that fewer than a majority could answer: what
 * its failures point at, one sentence per cause, in the order of the nodes
 * (the first three causes): the hint a failure came with (a Redis error, a
 * refusal at connect, a TLS mismatch, a quarantine, the dispatcher), or
 * one by how the node failed (late: node_timeout and its latency; no
 * connection in time: connect_timeout; TLS: the TLS settings; a name that
 * did not resolve; else: is it running and reachable).
 */
void
rl_nodes_unavailable_hint(const RlRequest *req, char *buf, size_t len)
{
	static const char cause_late[] = "late";
	static const char cause_timeout[] = "timeout";
	const char *seen[RL_MAX_NODES];
	int			nseen = 0;
	int			nlate = 0;
	size_t		used = 0;

	buf[0] = '\0';
	for (int i = 0; i < req->nnodes; i++)
		nlate += req->results[i].vote == RL_VOTE_FAILED &&
			req->results[i].outcome == RL_OUTCOME_LATE;

	for (int i = 0; i < req->nnodes && nseen < 3; i++)
	{
		const RlNodeResult *res = &req->results[i];
		const char *cause = NULL;
		char		text[RL_DETAIL_LEN * 2];
		bool		known = false;

		if (res->vote != RL_VOTE_FAILED)
			continue;
		cause = result_hint(res);
		if (cause == NULL)
			cause = res->outcome == RL_OUTCOME_LATE ? cause_late :
				res->outcome == RL_OUTCOME_TIMEOUT ? cause_timeout :
				kind_hint(res->outcome);
		for (int k = 0; k < nseen; k++)
			known |= seen[k] == cause;
		if (known)
			continue;
		seen[nseen++] = cause;

		if (cause == cause_late)
			late_hint(req, nlate, text, sizeof(text));
		else if (cause == cause_timeout)
			report_clip(text, sizeof(text),
						"A node could not be connected to within redlock.connect_timeout (%d ms), or stopped answering: check that it runs and that the network lets its traffic through (a host that is down, or a firewall that drops packets, gives no answer at all); raise redlock.connect_timeout only for a slow network.",
						rl_connect_timeout_ms);
		else
			strlcpy(text, cause, sizeof(text));
		if (used + strlen(text) + 2 >= len)
			break;
		used += snprintf(buf + used, len - used, "%s%s",
						 used > 0 ? "  " : "", text);
	}
	if (used == 0)
		strlcpy(buf, kind_hint(RL_OUTCOME_REFUSED), len);
}

/*
 * The health hook: who keeps the nodes' health for the whole server, if
 * anyone (see rl_nodes_set_health_hook() in nodes.h).
 */
static RlHealthHook health_hook = NULL;

void
rl_nodes_set_health_hook(RlHealthHook hook)
{
	health_hook = hook;
}

/* Is the health of the nodes kept, and logged, for the whole server? */
bool
report_server_wide(void)
{
	return health_hook != NULL;
}

/* The node failed outside a request (req NULL, or its answer in already). */
void
report_failure(const RlNode *node, RlNodeOutcome kind, int64_t began_us)
{
	RlNodeEvent ev;

	if (health_hook == NULL)
		return;
	memset(&ev, 0, sizeof(ev));
	ev.node = node->name;
	ev.outcome = kind;
	ev.began_us = began_us;
	ev.error = node->last_error;
	ev.hint = node->last_hint;
	health_hook(&ev, 1);
}

/*
 * Which command a request sends, as a number: FNV-1a over its first two
 * words (for EVAL, the script itself), never 0.  A failure of one command
 * (a script that writes, refused with OOM) is not undone by the success of
 * another (a release, which deletes).  A static script's number is
 * computed once, and kept with the script (node_script.c).
 */
static uint32_t
command_of(const RlRequest *req)
{
	uint32_t	hash = 2166136261u;
	uint32_t   *kept = script_command_slot(req);

	if (kept != NULL && *kept != 0)
		return *kept;
	for (int a = 0; a < Min(req->argc, 2); a++)
	{
		for (size_t i = 0; i < req->argvlen[a]; i++)
		{
			hash ^= (unsigned char) req->argv[a][i];
			hash *= 16777619u;
		}
		hash ^= ' ';
		hash *= 16777619u;
	}
	if (hash == 0)
		hash = 1;
	if (kept != NULL)
		*kept = hash;
	return hash;
}

/*
 * The end of a round: tell how its request ended on each node it asked.
 * A node that answered (yes or no) succeeded; one that failed says how; one
 * whose answer was not awaited (the round was decided without it, or the
 * request needs none) was asked, no more.  Nodes not asked (skipped, in
 * backoff, quarantined, another entry's server) are not told of.
 */
void
report_round(const RlRequest *req)
{
	RlNodeEvent evs[RL_MAX_NODES];
	int			n = 0;
	uint32_t	command;

	if (health_hook == NULL)
		return;
	command = command_of(req);
	for (int i = 0; i < req->nnodes; i++)
	{
		const RlNodeResult *res = &req->results[i];
		RlNodeEvent *ev = &evs[n];

		if (req->skip[i] || res->asked_us == 0)
			continue;
		memset(ev, 0, sizeof(*ev));
		ev->node = rl_nodes[i].name;
		ev->request = true;
		ev->began_us = res->asked_us;
		ev->command = command;
		if (rl_nodes[i].ident.epoch_known)
			ev->ident = &rl_nodes[i].ident;
		if (res->vote == RL_VOTE_YES || res->vote == RL_VOTE_NO)
			ev->outcome = RL_OUTCOME_SUCCESS;
		else if (res->vote == RL_VOTE_FAILED)
		{
			ev->outcome = res->outcome;
			ev->error = res->detail;
			ev->hint = result_hint(res);
		}
		n++;
	}
	if (n > 0)
		health_hook(evs, n);
}
