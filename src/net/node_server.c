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
 * not let the script run (an ACL without +info, a read-only replica) fails
 * with its own words, unless the quarantine is off: then it is not
 * checked.
 *
 * The restart quarantine rests on the node's epoch (quorum.h), a key on
 * the node itself, "<prefix>epoch": when the node's present memory began.
 * The script that asks INFO server on a new connection also reads it, and
 * writes it anew when it is missing (a new node, a restart without data, a
 * FLUSHALL) or was written by another server process (a restart from the
 * node's files, a replica promoted): that is the moment the node may have
 * lost locks.  Every script that grants or extends a lock checks the epoch
 * in the same call and refuses, with "QUARANTINED <ms left> <epoch>", while
 * it is younger than redlock.restart_quarantine (protocol_values.c builds
 * their arguments), writing it first if it went missing meanwhile.  So the
 * evidence survives whatever a PostgreSQL server forgets (a crash restart,
 * a new server, any number of node names), and every server that shares
 * the node sees it.
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

/* Keep what the node said of its epoch, read at node_now_ms on its clock. */
static void
server_keep_epoch(RlNode *node, const RlEpoch *epoch, int64_t node_now_ms)
{
	node->ident.epoch = *epoch;
	node->ident.epoch_known = true;
	node->ident.epoch_node_now_ms = node_now_ms;
	node->ident.epoch_read_us = rl_now_us();
}

/*
 * The DETAIL of a node out for its quarantine until until_us (rl_now_us()
 * clock): until when on the wall clock, in the session's time zone, and why.
 */
static void
server_quarantine_detail(RlNodeResult *res, int64_t until_us,
						 const RlEpoch *epoch)
{
	struct timeval tv;
	pg_time_t	t;
	struct pg_tm *tm;
	int64_t		wall_us;
	char		when[64];

	gettimeofday(&tv, NULL);
	wall_us = (int64_t) tv.tv_sec * 1000000 + tv.tv_usec + (until_us - rl_now_us());
	t = (pg_time_t) (wall_us / 1000000);
	tm = session_timezone ? pg_localtime(&t, session_timezone) : NULL;
	if (tm != NULL)
		snprintf(when, sizeof(when), "until %02d:%02d:%02d.%03d",
				 tm->tm_hour, tm->tm_min, tm->tm_sec, (int) (wall_us % 1000000 / 1000));
	else
		snprintf(when, sizeof(when), "for %d ms more",
				 (int) ((until_us - rl_now_us() + 999) / 1000));
	report_clip(res->detail, sizeof(res->detail),
				"quarantined %s (redlock.restart_quarantine): %s",
				when, rl_epoch_reason(epoch));
}

/*
 * A script's refusal for the quarantine, "QUARANTINED <ms left> <epoch>":
 * the node's vote fails, the node answered (no failure of its own), and
 * its epoch is kept.  False when the error reply is another.
 */
bool
server_quarantine_refusal(RlNode *node, RlNodeResult *res,
						  const char *str, size_t len)
{
	static const char word[] = "QUARANTINED ";
	const char *p = str + sizeof(word) - 1;
	const char *end = str + len;
	const char *sp;
	int64_t		left_ms;
	RlEpoch		epoch;

	if (len < sizeof(word) - 1 || memcmp(str, word, sizeof(word) - 1) != 0 ||
		(sp = memchr(p, ' ', end - p)) == NULL ||
		!rl_parse_counter(p, sp - p, &left_ms) ||
		!rl_parse_epoch(sp + 1, end - sp - 1, &epoch))
		return false;
	server_keep_epoch(node, &epoch,
					  epoch.since_ms + rl_restart_quarantine_ms - left_ms);
	res->vote = RL_VOTE_FAILED;
	res->outcome = RL_OUTCOME_SUCCESS;
	res->hint = "A node whose epoch is younger than redlock.restart_quarantine may have lost locks that holders still count on; it counts again once the quarantine has passed (redlock_nodes.quarantined_until).";
	server_quarantine_detail(res, rl_now_us() + left_ms * 1000, &epoch);
	return true;
}

/*
 * On a new connection: INFO server, and the node's epoch read, or written
 * anew when it is missing or another server process wrote it (the node
 * restarted from its files, or a replica took over).  Returns {INFO text,
 * epoch, the node's clock in ms}.  The epoch is the key ARGV[1].
 */
static const char EPOCH_CONNECT_SCRIPT[] =
"local info = redis.call('INFO', 'server')\n"
"local rid = string.match(info, 'run_id:(%w+)') or ''\n"
"local t = redis.call('TIME')\n"
"local now = string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000))\n"
"local e = redis.call('GET', ARGV[1])\n"
"local erid = e and string.match(e, '^%d+ (%w*) %l+$')\n"
"if not erid or erid ~= rid then\n"
"  e = now .. ' ' .. rid .. (erid and ' restart' or ' new')\n"
"  redis.call('SET', ARGV[1], e)\n"
"end\n"
"return {info, e, now}\n";

/*
 * Queue the connect script on a new connection, owing a reply tagged
 * RL_TAG_INFO.  Formatted here, into a buffer of our own: it may run on
 * commit, abort and exit paths, where nothing may raise.
 */
bool
server_queue_info(RlNode *node)
{
	static char cmd[sizeof(EPOCH_CONNECT_SCRIPT) + RL_KEY_MAX + 64];
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	int			len;

	keylen = snprintf(key, sizeof(key), "%sepoch", rl_key_prefix);
	len = snprintf(cmd, sizeof(cmd), "*4\r\n$4\r\nEVAL\r\n$%d\r\n%s\r\n$1\r\n0\r\n$%d\r\n%s\r\n",
				   (int) sizeof(EPOCH_CONNECT_SCRIPT) - 1, EPOCH_CONNECT_SCRIPT,
				   keylen, key);
	return len > 0 && len < (int) sizeof(cmd) &&
		sock_append(node, cmd, len) && queue_owe(node, RL_TAG_INFO);
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

/*
 * The reply to the connect script (server_queue_info): who the server is,
 * and its epoch.
 */
void
server_learn(RlNode *node, RlRequest *req, const redisReply *reply)
{
	int			idx = node - rl_nodes;
	RlServerIdent *id = &node->ident;
	char		run_id[sizeof(id->run_id)];
	char		uptime[24];
	const redisReply *info;
	RlEpoch		epoch;
	int64_t		node_now_ms;
	int64_t		left_ms;

	if (reply->type == REDIS_REPLY_ERROR)
	{
		/* with the quarantine off, the node is not checked (as before) */
		if (rl_restart_quarantine_ms > 0)
			node_fail_hint(node, req, RL_OUTCOME_REDIS_ERROR,
						   strncmp(reply->str, "READONLY", 8) == 0 ?
						   "The node is a read-only replica: list only independent masters in redlock.nodes." :
						   (strncmp(reply->str, "NOPERM", 6) == 0 ||
							strstr(reply->str, "can't run this command") != NULL ||	/* Redis */
							strstr(reply->str, "no permissions to run") != NULL) ?	/* Valkey */
						   "The node's user must be allowed EVAL, INFO, TIME, and GET and SET on the key redlock.key_prefix || 'epoch'; or turn the check off with redlock.restart_quarantine = 0." :
						   "The node must run the epoch script of redlock.restart_quarantine (EVAL, INFO, TIME, GET and SET); or turn the check off with redlock.restart_quarantine = 0.",
						   "could not read its epoch (redlock.restart_quarantine): %.*s",
						   (int) Min(reply->len, 200), reply->str);
		return;
	}
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 3 ||
		reply->element[0]->type != REDIS_REPLY_STRING ||
		reply->element[1]->type != REDIS_REPLY_STRING ||
		reply->element[2]->type != REDIS_REPLY_STRING ||
		!rl_parse_epoch(reply->element[1]->str, reply->element[1]->len, &epoch) ||
		!rl_parse_counter(reply->element[2]->str, reply->element[2]->len,
						  &node_now_ms))
	{
		node_fail(node, req, RL_OUTCOME_OTHER,
				  "protocol error: unexpected reply (type %d) to the epoch script",
				  reply->type);
		for (RlRequest *r = req; r != NULL; r = r->batch_next)
			if (!r->skip[idx])
				r->results[idx].protocol_error = true;
		return;
	}
	server_keep_epoch(node, &epoch, node_now_ms);
	left_ms = rl_epoch_quarantine_left_ms(&epoch, node_now_ms,
										  rl_restart_quarantine_ms);
	if (left_ms > 0 && epoch.since_ms == node_now_ms)
		ereport(LOG,
				(errmsg("Redis node %s begins a new epoch: it does not count toward a majority for %lld ms",
						node->name, (long long) left_ms),
				 errdetail("A new epoch was written because %s.", rl_epoch_reason(&epoch)),
				 errhint("See redlock.restart_quarantine.")));

	info = reply->element[0];
	if (!info_value(info->str, info->len, "run_id", run_id, sizeof(run_id)) ||
		run_id[0] == '\0')
		return;					/* a server that does not say */

	if (id->run_id[0] != '\0' && strcmp(id->run_id, run_id) != 0)
		id->changes++;
	strlcpy(id->run_id, run_id, sizeof(id->run_id));
	id->uptime_s = -1;
	if (info_value(info->str, info->len, "uptime_in_seconds", uptime, sizeof(uptime)))
		id->uptime_s = strtoll(uptime, NULL, 10);
	id->learned_us = rl_now_us();
	id->serial = node->serial;

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
