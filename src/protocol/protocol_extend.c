/*-------------------------------------------------------------------------
 *
 * protocol_extend.c
 *	  Keeping leases: extending one or many (owner-checked, each on its own
 *	  majority), and asking the nodes who holds a resource.
 *
 * The keep-alive worker extends up to RL_EXTEND_CHUNK leases with one
 * command, each decided on its own majority.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "protocol/protocol_internal.h"

static const char EXTEND_SCRIPT[] =
RL_LUA_QUARANTINE
"local qr = rl_q()\n"
"if qr then return qr end\n"
"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
"end\n"
"return 0\n";

/*
 * KEYS[i] gets the TTL ARGV[n + i] when it still holds ARGV[i]; returns one
 * flag per key, 1 where it did.
 */
static const char EXTEND_MANY_SCRIPT[] =
RL_LUA_QUARANTINE
"local qr = rl_q()\n"
"if qr then return qr end\n"
"local n = #KEYS\n"
"local r = {}\n"
"for i = 1, n do\n"
"  r[i] = 0\n"
"  if redis.call('GET', KEYS[i]) == ARGV[i] then\n"
"    r[i] = redis.call('PEXPIRE', KEYS[i], ARGV[n + i])\n"
"  end\n"
"end\n"
"return r\n";

/* the lock's value and remaining time, or '' when nobody holds it */
static const char HOLDER_SCRIPT[] =
"local v = redis.call('GET', KEYS[1])\n"
"if not v then return '' end\n"
"return v .. ' ' .. redis.call('PTTL', KEYS[1])\n";

/*
 * Extend a lease on a majority (owner-checked).  Returns the decision;
 * *started_us is when the round began, from which the new validity counts.
 */
RlDecision
rl_proto_extend(const char *key, int keylen, const char *owner, int ttl_ms,
				int64_t *started_us, RlRequest *req)
{
	const char *argv[6 + RL_EPOCH_ARGS];
	size_t		argvlen[6 + RL_EPOCH_ARGS];
	char		ttl_buf[16];

	rl_proto_eval_header(argv, argvlen, EXTEND_SCRIPT, sizeof(EXTEND_SCRIPT) - 1, "1");
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = owner;
	argvlen[4] = strlen(owner);
	argv[5] = ttl_buf;
	argvlen[5] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);
	rl_proto_request_init(req, RL_REPLY_FLAG, RL_GOAL_QUORUM,
						  6 + rl_proto_epoch_args(argv + 6, argvlen + 6),
						  argv, argvlen);

	*started_us = rl_now_us();
	rl_nodes_run(req);
	req->argv = NULL;
	req->argvlen = NULL;
	return req->decision;
}

/*
 * Extend up to RL_EXTEND_CHUNK leases in one round, each owner-checked and
 * decided on its own as if extended alone: decisions[i] and tallies[i] are
 * lease i's.  The round lasts until every lease is decided.  *started_us is
 * when it began, from which each new validity counts.
 */
void
rl_proto_extend_many(const RlExtendItem *items, int nitems,
					 int64_t *started_us, RlDecision *decisions,
					 RlTally *tallies, RlRequest *req)
{
	const char *argv[3 + 3 * RL_EXTEND_CHUNK + RL_EPOCH_ARGS];
	size_t		argvlen[3 + 3 * RL_EXTEND_CHUNK + RL_EPOCH_ARGS];
	char		ttl_bufs[RL_EXTEND_CHUNK][16];
	char		numkeys[16];
	RlVote		votes[RL_MAX_NODES];
	RlItemFlags flags[RL_MAX_NODES];

	Assert(nitems > 0 && nitems <= RL_EXTEND_CHUNK);
	snprintf(numkeys, sizeof(numkeys), "%d", nitems);
	rl_proto_eval_header(argv, argvlen, EXTEND_MANY_SCRIPT,
						 sizeof(EXTEND_MANY_SCRIPT) - 1, numkeys);
	for (int i = 0; i < nitems; i++)
	{
		argv[3 + i] = items[i].key;
		argvlen[3 + i] = items[i].keylen;
		argv[3 + nitems + i] = items[i].owner;
		argvlen[3 + nitems + i] = strlen(items[i].owner);
		argv[3 + 2 * nitems + i] = ttl_bufs[i];
		argvlen[3 + 2 * nitems + i] =
			snprintf(ttl_bufs[i], sizeof(ttl_bufs[i]), "%d", items[i].ttl_ms);
	}
	rl_proto_request_init(req, RL_REPLY_FLAGS, RL_GOAL_ITEMS,
						  3 + 3 * nitems +
						  rl_proto_epoch_args(argv + 3 + 3 * nitems,
											  argvlen + 3 + 3 * nitems),
						  argv, argvlen);
	req->nitems = nitems;

	*started_us = rl_now_us();
	rl_nodes_run(req);
	req->argv = NULL;
	req->argvlen = NULL;

	for (int i = 0; i < req->nnodes; i++)
	{
		votes[i] = req->results[i].vote;
		flags[i] = req->results[i].flags;
	}
	(void) rl_decide_items(req->nnodes, votes, flags, nitems, tallies,
						   decisions);
}

/*
 * Ask every node who holds key: each answer's reply_text is "" (nobody) or
 * "<lock value> <remaining ms>".
 */
void
rl_proto_holder(const char *key, int keylen, RlRequest *req)
{
	const char *argv[4];
	size_t		argvlen[4];

	rl_proto_eval_header(argv, argvlen, HOLDER_SCRIPT, sizeof(HOLDER_SCRIPT) - 1, "1");
	argv[3] = key;
	argvlen[3] = keylen;
	rl_proto_request_init(req, RL_REPLY_STATUS, RL_GOAL_ALL, 4, argv, argvlen);
	rl_nodes_run(req);
	req->argv = NULL;
	req->argvlen = NULL;
}
