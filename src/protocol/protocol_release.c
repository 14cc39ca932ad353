/*-------------------------------------------------------------------------
 *
 * protocol_release.c
 *	  The Redlock protocol for a lock given up: the release of leases, and
 *	  the withdrawal of an attempt that was not granted, with their scripts.
 *
 * Releases are owner-checked and must-deliver: a node that cannot take one
 * now gets it when it can.  One release command carries up to
 * RL_RELEASE_CHUNK leases, so a commit that ends hundreds of leases is one
 * round trip.  The release script also hands the lock to a waiter on
 * another server whose offer it finds beside the lock, or announces it
 * free, but only when a waiter left its marker there: a release that
 * nobody waits for pays nothing for that machinery (protocol_acquire.c describes
 * the offers).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "protocol/protocol_internal.h"

/*
 * KEYS[i] is released when it holds ARGV[i], or the offer value of the
 * attempt that took it (rl_offer_value(): 'w' for its first character),
 * which a release may have set on a node the attempt did not need; returns
 * how many were.  ARGV[#KEYS + 1] is the key prefix, which names each
 * lock's waiters' marker "<prefix>wake:<resource>" (left by every attempt
 * of a lock call that waits, ACQUIRE_WAITING_SCRIPT), its waiters' queue
 * "<prefix>wait:<resource>" and the offers in it (RL_LUA_QUEUE).  The lock
 * and the marker are read in one MGET: with no marker, nobody waits, and
 * the release is that MGET and a DEL.  With one, a released lock is taken
 * for the first live offer of the queue as its acquire would, and "value
 * counter" is published (the counter before the grant); a lock left free
 * (no live offer) is announced with an empty message, and the marker
 * removed (the waiters woken leave it again if they are refused).  Either
 * way on the key's channel, which the wake-up workers of other servers
 * subscribe to.  Where the lock is not ours, an offer of ours (its value,
 * or its offer value) is removed.
 * MGET, the queue's commands and PUBLISH are pcall'd: a Redis user whose
 * ACL lacks MGET releases as if someone waited, and one that lacks the
 * others still releases (its waiters then poll).  A node in its
 * quarantine (RL_LUA_QUARANTINE, the two last arguments, asked only where
 * there is an offer to hand the lock to) hands nothing over and announces
 * a free lock.  The waiter counts the lease's validity on its own clock
 * (lock_table_remote.c).  A shared lease's value ('r' first) is taken out
 * of the readers' set (RL_LUA_READERS); the lock then lives as long as the
 * last reader left, or, with none left, is released as an exclusive one
 * is, handed to the first offer (a writer that waits) or announced.
 */
static const char RELEASE_HANDOVER_SCRIPT[] =
RL_LUA_QUARANTINE
RL_LUA_QUEUE
RL_LUA_HAND
RL_LUA_READERS
"local pre = ARGV[#KEYS + 1]\n"
"local ep = pre .. 'offer:'\n"
"local n = 0\n"
"local held_out\n"
"local function freed(k, m, q)\n"
"  local o = q and rl_first(q, ep, function(e) return true end)\n"
"  if o and held_out == nil then held_out = rl_q() or false end\n"
"  if o and not held_out then\n"
"    rl_hand(k, q, ep, o)\n"
"  else\n"
"    if m then redis.pcall('DEL', m) end\n"
"    redis.pcall('PUBLISH', k, '')\n"
"  end\n"
"end\n"
"for i = 1, #KEYS do\n"
"  local k = KEYS[i]\n"
"  local v = ARGV[i]\n"
"  local res = string.sub(k, 1, #pre + 5) == pre .. 'lock:' and\n"
"    string.sub(k, #pre + 6)\n"
"  local m = res and pre .. 'wake:' .. res\n"
"  local q = res and pre .. 'wait:' .. res\n"
"  local r = m and redis.pcall('MGET', k, m)\n"
"  local cur, waiting\n"
"  if type(r) == 'table' and not r.err then\n"
"    cur, waiting = r[1], r[2]\n"
"  else\n"
"    cur, waiting = redis.call('GET', k), true\n"
"  end\n"
"  local w = 'w' .. string.sub(v, 2)\n"
"  if string.sub(v, 1, 1) == 'r' then\n"
"    local rk = res and pre .. 'read:' .. res\n"
"    if rk and redis.call('ZREM', rk, v) == 1 then\n"
"      n = n + 1\n"
"      local now = rl_now()\n"
"      local last = rl_last(rk, now)\n"
"      if cur == '" RL_SHARED_VALUE "' and last then\n"
"        redis.call('PEXPIRE', k, string.format('%d', math.max(last - now, 1)))\n"
"      elseif cur == '" RL_SHARED_VALUE "' then\n"
"        redis.call('DEL', k)\n"
"        if waiting then freed(k, m, q) end\n"
"      end\n"
"    end\n"
"  elseif cur == v or cur == w then\n"
"    n = n + redis.call('DEL', k)\n"
"    if waiting then\n"
"      if q then\n"
"        rl_drop(q, ep, w)\n"
"        if v ~= w then rl_drop(q, ep, v) end\n"
"      end\n"
"      freed(k, m, q)\n"
"    end\n"
"  elseif q then\n"
"    rl_drop(q, ep, w)\n"
"    if v ~= w then rl_drop(q, ep, v) end\n"
"  end\n"
"end\n"
"return n\n";

/*
 * The withdrawal of an attempt that was refused: RELEASE_HANDOVER_SCRIPT
 * for one key, announcing nothing to other waiters.  The lock was never
 * ours on a majority, so nobody waits for it to go; a free lock announced
 * would wake every waiter, ours included, only to be refused again by the
 * holder.  Its offer stays on the nodes that refused it: the caller still
 * waits.  Where the lock was the attempt's, and the attempt left an offer
 * (ARGV[2] not ''; a try, or one that only leaves the marker, did not),
 * the node says "offer -" (the attempt's offer value, rl_offer_value): the
 * offer is not there and never handed over there.  The wake-up worker
 * counts that node's no for the offer, whose handoff elsewhere would
 * otherwise wait for its word until node_timeout (lock_table_remote.c);
 * other servers' workers ignore the message.
 */
static const char WITHDRAW_SCRIPT[] =
"if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
"  if ARGV[2] ~= '' then\n"
"    redis.pcall('PUBLISH', KEYS[1], 'w' .. string.sub(ARGV[1], 2) .. ' -')\n"
"  end\n"
"  return redis.call('DEL', KEYS[1])\n"
"end\n"
"return 0\n";

/*
 * When a no-throw bulk release must stop waiting: one connect attempt and
 * one answer per node, whatever the number of leases.
 */
int64_t
rl_proto_release_deadline(void)
{
	return rl_now_us() +
		((int64_t) rl_connect_timeout_ms + rl_node_timeout_ms) * 1000;
}

/*
 * Release up to RL_RELEASE_CHUNK leases with one command per node (skip:
 * NULL, or the nodes not to send it to).  With
 * wait, returns when a majority answered (or cannot); replies come back in
 * order on each connection, so that also confirms every release sent before
 * it.  The command is must-deliver either way.
 */
void
rl_proto_release(const RlReleaseItem *items, int nitems, bool wait,
				 bool nothrow, int64_t deadline_us, const bool *skip,
				 RlRequest *req)
{
	const char *argv[4 + 2 * RL_RELEASE_CHUNK + RL_EPOCH_ARGS];
	size_t		argvlen[4 + 2 * RL_RELEASE_CHUNK + RL_EPOCH_ARGS];
	char		numkeys[16];

	Assert(nitems > 0 && nitems <= RL_RELEASE_CHUNK);
	snprintf(numkeys, sizeof(numkeys), "%d", nitems);
	rl_proto_eval_header(argv, argvlen, RELEASE_HANDOVER_SCRIPT,
						 sizeof(RELEASE_HANDOVER_SCRIPT) - 1, numkeys);
	for (int i = 0; i < nitems; i++)
	{
		argv[3 + i] = items[i].key;
		argvlen[3 + i] = items[i].keylen;
		argv[3 + nitems + i] = items[i].owner;
		argvlen[3 + nitems + i] = strlen(items[i].owner);
	}
	argv[3 + 2 * nitems] = rl_key_prefix;
	argvlen[3 + 2 * nitems] = strlen(rl_key_prefix);

	rl_proto_request_init(req, RL_REPLY_COUNT, RL_GOAL_ANSWERS,
						  4 + 2 * nitems +
						  rl_proto_epoch_args(argv + 4 + 2 * nitems,
											  argvlen + 4 + 2 * nitems),
						  argv, argvlen);
	req->nothrow = nothrow;
	req->must_deliver = true;
	req->deadline_us = deadline_us;
	if (skip != NULL)
		memcpy(req->skip, skip, sizeof(req->skip));
	if (wait)
		rl_nodes_run(req);
	else
		rl_nodes_send(req);
	req->argv = NULL;			/* argv was on our stack */
	req->argvlen = NULL;
}

/*
 * Release one lock value without waiting (an interrupted attempt, a value
 * set for a waiter that left).  Must-deliver, announced.
 */
void
rl_proto_release_one(const char *key, int keylen, const char *owner,
					 bool nothrow)
{
	RlReleaseItem item = {key, keylen, owner};
	RlRequest	req;

	rl_proto_release(&item, 1, false, nothrow, 0, NULL, &req);
}

/*
 * Withdraw an attempt that was not granted, without waiting: on every node
 * but those that refused it or were not asked (nothing of ours was set
 * there), including the ones that did not answer.  Must-deliver, like a
 * release.  Announced (published) only when the lock was held on a
 * majority meanwhile, or when the attempt was a handoff (whose release of
 * the previous holder announced nothing): then someone may wait for it.
 * offered: the attempt left an offer where it was refused; a node where
 * it had set the lock says that the offer is not there (WITHDRAW_SCRIPT).
 */
void
rl_proto_withdraw_attempt(const char *key, int keylen, const char *owner,
						  const bool *skip, bool announce, bool offered)
{
	const char *argv[6 + RL_EPOCH_ARGS];
	size_t		argvlen[6 + RL_EPOCH_ARGS];
	RlRequest	req;

	if (announce)
		rl_proto_eval_header(argv, argvlen, RELEASE_HANDOVER_SCRIPT,
							 sizeof(RELEASE_HANDOVER_SCRIPT) - 1, "1");
	else
		rl_proto_eval_header(argv, argvlen, WITHDRAW_SCRIPT,
							 sizeof(WITHDRAW_SCRIPT) - 1, "1");
	argv[3] = key;
	argvlen[3] = keylen;
	argv[4] = owner;
	argvlen[4] = strlen(owner);
	/* RELEASE_HANDOVER_SCRIPT's prefix; WITHDRAW_SCRIPT's "say where" */
	argv[5] = announce ? rl_key_prefix : offered ? "1" : "";
	argvlen[5] = strlen(argv[5]);
	rl_proto_request_init(&req, RL_REPLY_COUNT, RL_GOAL_ANSWERS,
						  6 + rl_proto_epoch_args(argv + 6, argvlen + 6),
						  argv, argvlen);
	req.must_deliver = true;
	memcpy(req.skip, skip, sizeof(req.skip));
	rl_nodes_send(&req);
}

