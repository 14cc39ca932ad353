/*-------------------------------------------------------------------------
 *
 * protocol_shared.c
 *	  The Redlock protocol for a shared lease: the script that adds a
 *	  reader on each node, and the settling of its round (the token, its
 *	  write-back, the validity, or the withdrawal of a round not won).
 *
 * While readers hold a resource, its lock holds RL_SHARED_VALUE and lives
 * as long as the last of them, so that every exclusive path sees it held
 * and nobody's; the readers are a sorted set beside it, each scored by
 * its expiry on the node's clock (RL_LUA_READERS, protocol_internal.h).  A
 * node adds a reader unless the lock is held exclusively, or an exclusive
 * call waits in line there (a live offer in the waiters' queue,
 * RL_LUA_QUEUE): a stream of readers does not starve a writer.  A refused
 * call that waits leaves the waiters' marker, so that the release it
 * waits for is announced.  The release of the last reader hands the lock
 * to the first offer, or announces it free (protocol_release.c).
 *
 * Each shared grant gets a token as an exclusive one does: strictly
 * greater than every earlier grant of the resource, and smaller than every
 * later one.  The round is settled as an exclusive attempt's
 * (rl_proto_settle(), protocol_acquire.c, which knows a shared value by
 * its first character): a round not won is withdrawn on every node that
 * may have added the reader, by the release script.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "protocol/protocol_internal.h"

/*
 * KEYS[1]: the lock, KEYS[2]: its readers, KEYS[3]: its fencing counter.
 * ARGV: the reader's value, the TTL, the proposal, the marker's lifetime
 * ('' for a call that does not wait), the marker, the waiters' queue, the
 * offers' prefix, then the quarantine's two arguments.  Returns the
 * counter before the grant, or nil when refused.
 */
static const char ACQUIRE_SHARED_SCRIPT[] =
RL_LUA_QUARANTINE
RL_LUA_QUEUE
RL_LUA_HAND
RL_LUA_READERS
"local qr = rl_q()\n"
"if qr then return qr end\n"
"local cur = redis.call('GET', KEYS[1])\n"
"local held = cur and cur ~= '" RL_SHARED_VALUE "'\n"
"if not held and rl_first(ARGV[6], ARGV[7], function(o) return true end) then\n"
"  held = true\n"
"end\n"
"if held then\n"
"  local life = ARGV[4]\n"
"  if life ~= '' then\n"
"    local t = redis.pcall('PTTL', ARGV[5])\n"
"    if type(t) ~= 'number' or t < tonumber(life) then\n"
"      redis.pcall('SET', ARGV[5], '1', 'PX', life)\n"
"    end\n"
"  end\n"
"  return false\n"
"end\n"
"local now = rl_now()\n"
"local x = tonumber(ARGV[2])\n"
"rl_last(KEYS[2], now)\n"
"redis.call('ZADD', KEYS[2], string.format('%d', now + x), ARGV[1])\n"
"if redis.call('PTTL', KEYS[2]) < x then redis.call('PEXPIRE', KEYS[2], x) end\n"
"if not cur or redis.call('PTTL', KEYS[1]) < x then\n"
"  redis.call('SET', KEYS[1], '" RL_SHARED_VALUE "', 'PX', x)\n"
"end\n"
"local c = redis.call('GET', KEYS[3]) or '0'\n"
"local p = ARGV[3]\n"
"if #p > #c or (#p == #c and p > c) then redis.call('SET', KEYS[3], p) end\n"
"return c\n";

/* A shared lease's value: a fresh owner value, 'r' for its first character. */
static void
shared_owner(char *owner)
{
	rl_proto_new_owner(owner);
	owner[0] = 'r';
}

/*
 * One attempt at a shared lease on resource (key: its lock).  mark: a call
 * that waits, whose refusal leaves the waiters' marker beside the lock, so
 * that its release is announced to the wake-up workers.  Granted: grant
 * has the reader's value and the token.  Otherwise everything the attempt
 * may have set is withdrawn, and req_out describes what each node said.
 */
RlAttempt
rl_proto_acquire_shared(const char *resource, const char *key, int keylen,
						int ttl_ms, bool mark, RlGrant *grant,
						RlRequest *req_out)
{
	const char *argv[13 + RL_EPOCH_ARGS];
	size_t		argvlen[13 + RL_EPOCH_ARGS];
	char		rkey[RL_KEY_MAX + 1];
	char		ckey[RL_KEY_MAX + 1];
	char		mkey[RL_KEY_MAX + 1];
	char		qkey[RL_KEY_MAX + 1];
	char		eprefix[RL_KEY_MAX + 1];
	char		ttl_buf[16];
	char		proposal_buf[24];
	char		life_buf[16];
	int64		proposal;
	int64_t		start_us;
	int			argc;

	shared_owner(grant->owner);
	proposal = rl_proto_new_proposal();

	rl_proto_eval_header(argv, argvlen, ACQUIRE_SHARED_SCRIPT,
						 sizeof(ACQUIRE_SHARED_SCRIPT) - 1, "3");
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = rkey;
	argvlen[4] = rl_readers_key(rkey, resource);
	argv[5] = ckey;
	argvlen[5] = rl_counter_key(ckey, resource);
	argv[6] = grant->owner;
	argvlen[6] = strlen(grant->owner);
	argv[7] = ttl_buf;
	argvlen[7] = snprintf(ttl_buf, sizeof(ttl_buf), "%d", ttl_ms);
	argv[8] = proposal_buf;
	argvlen[8] = rl_format_counter(proposal, proposal_buf);
	argv[9] = life_buf;
	argvlen[9] = mark ?
		snprintf(life_buf, sizeof(life_buf), "%d", rl_offer_life_ms()) : 0;
	life_buf[argvlen[9]] = '\0';
	argv[10] = mkey;
	argvlen[10] = snprintf(mkey, sizeof(mkey), "%swake:%s", rl_key_prefix,
						   resource);
	argv[11] = qkey;
	argvlen[11] = rl_offer_key(qkey, resource);
	argv[12] = eprefix;
	argvlen[12] = rl_offer_prefix(eprefix);
	argc = 13 + rl_proto_epoch_args(argv + 13, argvlen + 13);
	rl_proto_request_init(req_out, RL_REPLY_COUNTER, RL_GOAL_QUORUM, argc,
						  argv, argvlen);

	/* from here on an error must not leave the reader behind */
	rl_proto_set_in_flight(key, keylen, grant->owner);

	start_us = rl_now_us();
	rl_nodes_run(req_out);
	req_out->argv = NULL;
	req_out->argvlen = NULL;

	return rl_proto_settle(resource, key, keylen, ttl_ms, proposal, start_us,
						   false, grant, req_out);
}
