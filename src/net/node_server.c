/*-------------------------------------------------------------------------
 *
 * node_server.c
 *	  Which Redis server answers behind each entry of redlock.nodes: its
 *	  run_id and uptime, learned from INFO server once per connection, and
 *	  entries found to name the same server.
 *
 * INFO server is queued on every new connection right after AUTH, ahead of
 * the connection's first command, so it costs no round trip of its own and
 * an established connection (the uncontended fast path) never sends it
 * again.  Its reply comes before the reply to that first command, so a
 * node's identity is known before its first vote counts.
 *
 * Two entries whose current connections show the same run_id are one
 * server under two names (127.0.0.1:6379 and localhost:6379): a majority
 * counted over both would count it twice.  The later of the two is not
 * asked any more, its vote in the round that showed it fails, and lock
 * calls are refused (RL004) until the list is fixed.  A server that does
 * not let us run INFO (an ACL without +info) is not checked.
 *
 * The identity also tells when a node restarted (run_id changes, and
 * uptime_in_seconds says since when): RlServerIdent is kept per node, across
 * connections.  A node seen to restart is quarantined: a restarted node has
 * lost the locks it held (unless it fsyncs every write), so counting it
 * toward a majority at once could grant a lock whose holder still has
 * validity left (Redlock's delayed restart).  Lock and extend rounds do not
 * ask it until redlock.restart_quarantine after its start, and a vote it
 * gave in the round that showed the restart does not count.  The last
 * run_id of each node name is kept per backend, or for the whole server
 * when a higher layer registers a sighting hook.
 *
 * Nothing here raises an ERROR but server_refuse_duplicates(), which runs
 * only where the caller may raise.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/time.h>

#include "pgtime.h"

#include "net/node_internal.h"

static RlSighting backend_sightings[RL_SIGHTINGS];
static RlSightingHook sighting_hook = NULL;

void
rl_nodes_set_sighting_hook(RlSightingHook hook)
{
	sighting_hook = hook;
}

/*
 * Record that node showed run_id, its server having started at start_us,
 * in table (RL_SIGHTINGS entries), and copy what is recorded for it into
 * *memo.  A name not in the table takes a free entry or the one seen
 * longest ago.  Returns true when this sighting is a restart.  Raises
 * nothing; the caller holds whatever lock protects the table.
 */
bool
rl_sightings_record(RlSighting *table, const char *node, const char *run_id,
					int64_t start_us, RlRestartMemo *memo)
{
	RlSighting *entry = NULL;
	bool		restarted;

	for (int i = 0; i < RL_SIGHTINGS && entry == NULL; i++)
		if (strcmp(table[i].node, node) == 0)
			entry = &table[i];
	if (entry == NULL)
	{
		entry = &table[0];
		for (int i = 1; i < RL_SIGHTINGS; i++)
			if (table[i].seen_us < entry->seen_us)
				entry = &table[i];
		memset(entry, 0, sizeof(*entry));
		strlcpy(entry->node, node, sizeof(entry->node));
	}
	restarted = rl_restart_sighting(&entry->memo, run_id, start_us);
	entry->seen_us = rl_now_us();
	*memo = entry->memo;
	return restarted;
}

int64_t
rl_node_quarantined_until(int i)
{
	return rl_quarantined_until(&rl_nodes[i].ident.restart,
								rl_restart_quarantine_ms, rl_now_us());
}

/*
 * Is the node out of this round's majority for a restart?  Rounds of lock
 * and extend calls count votes; releases (must-deliver), probes and
 * questions (status replies) go to it.  If so, its result says until when.
 */
bool
server_quarantined(RlNode *node, RlRequest *req)
{
	RlNodeResult *res = &req->results[node - rl_nodes];
	int64_t		until;
	struct timeval tv;
	pg_time_t	t;
	struct pg_tm *tm;
	int64_t		wall_us;

	if (req->probe || req->must_deliver || req->reply_kind == RL_REPLY_STATUS)
		return false;
	until = rl_node_quarantined_until(node - rl_nodes);
	if (until == 0)
		return false;

	/* on the wall clock, in the session's time zone */
	gettimeofday(&tv, NULL);
	wall_us = (int64_t) tv.tv_sec * 1000000 + tv.tv_usec + (until - rl_now_us());
	t = (pg_time_t) (wall_us / 1000000);
	tm = session_timezone ? pg_localtime(&t, session_timezone) : NULL;
	res->vote = RL_VOTE_FAILED;
	res->hint = "A node restarted lately and may have lost the locks it held, so it counts toward a majority only once redlock.restart_quarantine has passed since its start (redlock_nodes.quarantined_until): wait until then; lower redlock.restart_quarantine only for nodes that fsync every write (appendfsync always).";
	if (tm != NULL)
		snprintf(res->detail, sizeof(res->detail),
				 "quarantined after a restart until %02d:%02d:%02d.%03d (redlock.restart_quarantine)",
				 tm->tm_hour, tm->tm_min, tm->tm_sec, (int) (wall_us % 1000000 / 1000));
	else
		snprintf(res->detail, sizeof(res->detail),
				 "quarantined after a restart for %d ms more (redlock.restart_quarantine)",
				 (int) ((until - rl_now_us() + 999) / 1000));
	return true;
}

/* Queue INFO server on a new connection, owing a reply tagged RL_TAG_INFO. */
bool
server_queue_info(RlNode *node)
{
	static const char cmd[] = "*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";

	return sock_append(node, cmd, sizeof(cmd) - 1) &&
		queue_owe(node, RL_TAG_INFO);
}

/*
 * The value of "field:" in INFO text, copied into out (at most len - 1
 * bytes); false if the field is missing.
 */
static bool
info_value(const char *text, size_t textlen, const char *field,
		   char *out, size_t len)
{
	size_t		flen = strlen(field);
	const char *p = text;
	const char *end = text + textlen;

	while (p < end)
	{
		const char *eol = memchr(p, '\n', end - p);
		size_t		linelen = (eol ? eol : end) - p;

		if (linelen > flen && memcmp(p, field, flen) == 0 && p[flen] == ':')
		{
			size_t		vlen = linelen - flen - 1;

			if (vlen > 0 && p[flen + 1 + vlen - 1] == '\r')
				vlen--;
			if (vlen >= len)
				return false;
			memcpy(out, p + flen + 1, vlen);
			out[vlen] = '\0';
			return true;
		}
		p = eol ? eol + 1 : end;
	}
	return false;
}

static bool
sighting_in_backend(const char *node, const char *run_id, int64_t start_us,
					RlRestartMemo *memo)
{
	return rl_sightings_record(backend_sightings, node, run_id, start_us, memo);
}

/* Is the node's entry known to reach the same server as another's? */
bool
server_same_as_other(const RlNode *node)
{
	return node->same_as >= 0 &&
		node->serial == node->same_serials[0] &&
		rl_nodes[node->same_as].serial == node->same_serials[1];
}

int
rl_node_same_as(int i)
{
	return server_same_as_other(&rl_nodes[i]) ? rl_nodes[i].same_as : -1;
}

const RlServerIdent *
rl_node_ident(int i)
{
	return &rl_nodes[i].ident;
}

/* The reply to INFO server, queued at connect: who the server is. */
void
server_learn(RlNode *node, RlRequest *req, const redisReply *reply)
{
	int			idx = node - rl_nodes;
	RlServerIdent *id = &node->ident;
	char		run_id[sizeof(id->run_id)];
	char		uptime[24];

	if (reply->type == REDIS_REPLY_ERROR)
		return;					/* INFO refused (ACL): not checked */
	if (reply->type != REDIS_REPLY_STRING)
	{
		node_fail(node, req, RL_OUTCOME_OTHER,
				  "protocol error: unexpected reply (type %d) to INFO",
				  reply->type);
		for (RlRequest *r = req; r != NULL; r = r->batch_next)
			if (!r->skip[idx])
				r->results[idx].protocol_error = true;
		return;
	}
	if (!info_value(reply->str, reply->len, "run_id", run_id, sizeof(run_id)) ||
		run_id[0] == '\0')
		return;					/* a server that does not say */

	if (id->run_id[0] != '\0' && strcmp(id->run_id, run_id) != 0)
		id->changes++;
	strlcpy(id->run_id, run_id, sizeof(id->run_id));
	id->uptime_s = -1;
	if (info_value(reply->str, reply->len, "uptime_in_seconds", uptime, sizeof(uptime)))
		id->uptime_s = strtoll(uptime, NULL, 10);
	id->learned_us = rl_now_us();
	id->serial = node->serial;

	/* a restart?  Then a vote given after this reply does not count. */
	if ((sighting_hook ? sighting_hook : sighting_in_backend)
		(node->name, run_id, rl_server_start_us(id->learned_us, id->uptime_s),
		 &id->restart) && rl_node_quarantined_until(idx) != 0)
		ereport(LOG,
				(errmsg("Redis node %s restarted %lld s ago (run_id %s): it does not count toward a majority for %d ms after its start",
						node->name, (long long) Max(id->uptime_s, 0), run_id,
						rl_restart_quarantine_ms),
				 errhint("See redlock.restart_quarantine.")));
	for (RlRequest *r = req; r != NULL; r = r->batch_next)
		if (!r->skip[idx] && r->results[idx].vote == RL_VOTE_PENDING)
			(void) server_quarantined(node, r);

	/* the same server behind another entry, on its current connection? */
	for (int j = 0; j < rl_nnodes; j++)
	{
		RlNode	   *other = &rl_nodes[j];
		RlNode	   *later;
		RlNode	   *earlier;

		if (j == idx || other->state == RL_CONN_NONE ||
			other->ident.serial != other->serial ||
			strcmp(other->ident.run_id, run_id) != 0)
			continue;
		/* the later entry of the list is the one left out */
		later = j > idx ? other : node;
		earlier = j > idx ? node : other;
		if (!server_same_as_other(later))
			ereport(LOG,
					(errmsg("redlock.nodes entries %s and %s are the same Redis server (run_id %s)",
							earlier->name, later->name, run_id)));
		later->same_as = earlier - rl_nodes;
		later->same_serials[0] = later->serial;
		later->same_serials[1] = earlier->serial;

		/*
		 * This node's vote, which comes after this reply, must not count:
		 * the other entry's may have counted already.
		 */
		for (RlRequest *r = req; r != NULL; r = r->batch_next)
		{
			if (r->skip[idx] || r->probe ||
				r->results[idx].vote != RL_VOTE_PENDING)
				continue;
			/* not counted: the server already votes as the other entry */
			r->results[idx].vote = RL_VOTE_FAILED;
			snprintf(r->results[idx].detail, sizeof(r->results[idx].detail),
					 "not counted: the same Redis server as %s (run_id %s)",
					 other->name, run_id);
		}
		break;
	}
}

/*
 * Refuse to go on with a node list that names one server twice.  For the
 * rounds of lock calls only: releases and probes go on.
 */
void
server_refuse_duplicates(void)
{
	for (int i = 0; i < rl_nnodes; i++)
	{
		RlNode	   *node = &rl_nodes[i];
		RlNode	   *other;

		if (!server_same_as_other(node))
			continue;
		other = &rl_nodes[node->same_as];
		ereport(ERROR,
				(errcode(ERRCODE_REDLOCK_CONFIG),
				 errmsg("redlock.nodes names the same Redis server twice: \"%s\" and \"%s\"",
						(other < node ? other : node)->name,
						(other < node ? node : other)->name),
				 errdetail("Both entries reach the Redis server with run_id %s. A majority counted over both would count that server twice, so no lease is taken or extended until one of them is removed.",
						   node->ident.run_id),
				 errhint("Remove one of the two entries from redlock.nodes and reload the configuration.")));
	}
}
