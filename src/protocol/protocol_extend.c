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

/*
 * KEYS[1] gets the TTL ARGV[2] when it still holds ARGV[1]; ARGV[3] is the
 * key prefix, which names a shared lease's readers (RL_LUA_READERS).
 */
static const char EXTEND_SCRIPT[] =
RL_LUA_QUARANTINE
RL_LUA_READERS
"local qr = rl_q()\n"
"if qr then return qr end\n"
"if string.sub(ARGV[1], 1, 1) == 'r' then\n"
"  return rl_rextend(KEYS[1], rl_rk(ARGV[3], KEYS[1]), ARGV[1], ARGV[2])\n"
"end\n"
"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
"end\n"
"return 0\n";

/*
 * KEYS[i] gets the TTL ARGV[n + i] when it still holds ARGV[i]; returns one
 * flag per key, 1 where it did.  ARGV[2n + 1]: the key prefix.
 */
static const char EXTEND_MANY_SCRIPT[] =
RL_LUA_QUARANTINE
RL_LUA_READERS
"local qr = rl_q()\n"
"if qr then return qr end\n"
"local n = #KEYS\n"
"local r = {}\n"
"for i = 1, n do\n"
"  r[i] = 0\n"
"  if string.sub(ARGV[i], 1, 1) == 'r' then\n"
"    r[i] = rl_rextend(KEYS[i], rl_rk(ARGV[2 * n + 1], KEYS[i]), ARGV[i],\n"
"                      ARGV[n + i])\n"
"  elseif redis.call('GET', KEYS[i]) == ARGV[i] then\n"
"    r[i] = redis.call('PEXPIRE', KEYS[i], ARGV[n + i])\n"
"  end\n"
"end\n"
"return r\n";

/*
 * The lock's value and remaining time, or '' when nobody holds it; for a
 * resource held shared, a line of each valid reader's (ARGV[1]: the key
 * prefix).
 */
static const char HOLDER_SCRIPT[] =
RL_LUA_READERS
"local v = redis.call('GET', KEYS[1])\n"
"if not v then return '' end\n"
"if v ~= '" RL_SHARED_VALUE "' then\n"
"  return v .. ' ' .. redis.call('PTTL', KEYS[1])\n"
"end\n"
"local now = rl_now()\n"
"local rs = redis.call('ZRANGEBYSCORE', rl_rk(ARGV[1], KEYS[1]),\n"
"                     '(' .. string.format('%d', now), '+inf', 'WITHSCORES')\n"
"local out = {}\n"
"for i = 1, #rs, 2 do\n"
"  out[#out + 1] = rs[i] .. ' ' .. string.format('%d', tonumber(rs[i + 1]) - now)\n"
"end\n"
"return table.concat(out, '\\n')\n";

/*
 * Extend a lease on a majority (owner-checked).  Returns the decision;
 * *started_us is when the round began, from which the new validity counts.
 */
RlDecision
rl_proto_extend(const char *key, int keylen, const char *owner, int ttl_ms,
				int64_t *started_us, RlRequest *req)
{
	const char *argv[7 + RL_EPOCH_ARGS];
	size_t		argvlen[7 + RL_EPOCH_ARGS];
	char		ttl_buf[16];

	rl_proto_eval_header(argv, argvlen, EXTEND_SCRIPT, sizeof(EXTEND_SCRIPT) - 1, "1");
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = owner;
	argvlen[4] = strlen(owner);
	argv[5] = ttl_buf;
	argvlen[5] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);
	argv[6] = rl_key_prefix;
	argvlen[6] = strlen(rl_key_prefix);
	rl_proto_request_init(req, RL_REPLY_FLAG, RL_GOAL_QUORUM,
						  7 + rl_proto_epoch_args(argv + 7, argvlen + 7),
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
	const char *argv[4 + 3 * RL_EXTEND_CHUNK + RL_EPOCH_ARGS];
	size_t		argvlen[4 + 3 * RL_EXTEND_CHUNK + RL_EPOCH_ARGS];
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
	argv[3 + 3 * nitems] = rl_key_prefix;
	argvlen[3 + 3 * nitems] = strlen(rl_key_prefix);
	rl_proto_request_init(req, RL_REPLY_FLAGS, RL_GOAL_ITEMS,
						  4 + 3 * nitems +
						  rl_proto_epoch_args(argv + 4 + 3 * nitems,
											  argvlen + 4 + 3 * nitems),
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
 * "<lock value> <remaining ms>", a line for each reader of a resource held
 * shared.
 */
void
rl_proto_holder(const char *key, int keylen, RlRequest *req)
{
	const char *argv[5];
	size_t		argvlen[5];

	rl_proto_eval_header(argv, argvlen, HOLDER_SCRIPT, sizeof(HOLDER_SCRIPT) - 1, "1");
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = rl_key_prefix;
	argvlen[4] = strlen(rl_key_prefix);
	rl_proto_request_init(req, RL_REPLY_STATUS, RL_GOAL_ALL, 5, argv, argvlen);
	rl_nodes_run(req);
	req->argv = NULL;
	req->argvlen = NULL;
}
