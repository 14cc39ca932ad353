/*-------------------------------------------------------------------------
 *
 * protocol_internal.h
 *	  What the protocol files share: building a script call, settling an
 *	  attempt.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_PROTOCOL_INTERNAL_H
#define REDLOCK_PROTOCOL_INTERNAL_H

#include "protocol/protocol.h"

extern int64 rl_last_token;

/*
 * The restart quarantine, decided on the node in the same script as its
 * vote (node_server.c tells the design).  The two last arguments of every
 * script that grants or extends a lock are the epoch's key and
 * redlock.restart_quarantine in ms (rl_proto_epoch_args).  rl_q() returns
 * the error reply "QUARANTINED <ms left> <epoch>" while the node's epoch is
 * younger than the quarantine, writing the epoch first where it is
 * missing (the node was flushed, or lost its data, since a client read
 * it), and nil otherwise or with the quarantine off.  A node clock that
 * went back counts as no time passed.
 */
#define RL_LUA_QUARANTINE \
"local function rl_q()\n" \
"  local q = tonumber(ARGV[#ARGV])\n" \
"  if not q or q <= 0 then return nil end\n" \
"  local ek = ARGV[#ARGV - 1]\n" \
"  local t = redis.call('TIME')\n" \
"  local now = t[1] * 1000 + math.floor(t[2] / 1000)\n" \
"  local e = redis.call('GET', ek)\n" \
"  local since = e and tonumber(string.match(e, '^(%d+) %w* %l+$'))\n" \
"  if not since then\n" \
"    local rid = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)')\n" \
"    e = string.format('%d', now) .. ' ' .. (rid or '') .. ' new'\n" \
"    redis.call('SET', ek, e)\n" \
"    since = now\n" \
"  end\n" \
"  local passed = math.max(now - since, 0)\n" \
"  if passed >= q then return nil end\n" \
"  return redis.error_reply('QUARANTINED ' .. string.format('%d', q - passed) ..\n" \
"                           ' ' .. e)\n" \
"end\n"

/*
 * The waiters' queue beside a lock, on each node: one order across the
 * servers that share the nodes, the order in which their offers came to
 * the node (never a server's clock).  "<prefix>wait:<resource>" is a list
 * of offer values, oldest first; each offer is a hash "<prefix>offer:<value>"
 * (x: the TTL it asks for, p: its token proposal, c: the name of its
 * fencing counter) that expires by the offer's lifetime: a value whose
 * hash is gone is a lapsed offer, skipped and removed from the list by the
 * next script that meets it.  A new attempt of the same wait takes its
 * earlier offer's place (ACQUIRE_WAITING_SCRIPT); a release hands the lock
 * to the first live offer (RELEASE_HANDOVER_SCRIPT); a local handoff goes
 * to the waiter of its own server, unless its server had its
 * redlock.local_handoffs in a row and an offer of another server waits
 * (HANDOFF_SCRIPT).  Every command on the queue is pcall'd: a Redis user
 * whose ACL lacks them still locks and releases, and its waiters poll.
 *
 * RL_LUA_QUEUE: rl_offer(ep, v), the live offer v (ep: "<prefix>offer:"),
 * or nil; rl_drop(q, ep, v): offer v is gone.  Each script takes only the
 * parts it uses: the text goes through the dispatcher's slots with the
 * arguments (RL_SHARED_ARGS_BYTES).
 *
 * RL_LUA_HAND, after it, for the scripts that hand a lock over: rl_srv(v),
 * the server a lock or offer value names (its system identifier and start
 * time, protocol_values.c); rl_first(q, ep, stop), the first live offer of
 * queue q for which stop(offer) is true, removing the lapsed ones before
 * it; rl_hand(k, q, ep, o): lock k is taken for offer o as its own acquire
 * would (value, TTL, the fencing counter raised to its proposal), and
 * "value counter" published on k's channel for its wake-up worker.
 *
 * RL_LUA_ENQUEUE, after RL_LUA_QUEUE, for the scripts that queue a waiter:
 * rl_enqueue(q, ep, m, v, x, p, c, life, ours) leaves offer v (TTL x,
 * proposal p, counter c) in queue q for life ms: where it is already, or
 * in the place of the first of the earlier offers of the same wait listed
 * in ours (" v1 v2 ... ", which are removed), or else at the end; the
 * marker m (which makes a release look at the queue) and the queue live at
 * least as long.  It returns the number of live offers ahead of it, or nil
 * if the offer could not be left.
 */
#define RL_LUA_QUEUE \
"local function rl_offer(ep, v)\n" \
"  local f = redis.pcall('HMGET', ep .. v, 'x', 'p', 'c')\n" \
"  if type(f) ~= 'table' or f.err or not f[1] or not f[2] or not f[3] then\n" \
"    return nil\n" \
"  end\n" \
"  return {v = v, x = f[1], p = f[2], c = f[3]}\n" \
"end\n" \
"local function rl_drop(q, ep, v)\n" \
"  redis.pcall('LREM', q, 0, v)\n" \
"  redis.pcall('DEL', ep .. v)\n" \
"end\n"

#define RL_LUA_HAND \
"local function rl_srv(v)\n" \
"  return string.match(v, '^[^:]*:([^:]*:[^:]*):')\n" \
"end\n" \
"local function rl_first(q, ep, stop)\n" \
"  local vs = redis.pcall('LRANGE', q, 0, -1)\n" \
"  if type(vs) ~= 'table' or vs.err then return nil end\n" \
"  for _, v in ipairs(vs) do\n" \
"    local o = rl_offer(ep, v)\n" \
"    if not o then\n" \
"      redis.pcall('LREM', q, 1, v)\n" \
"    elseif stop(o) then\n" \
"      return o\n" \
"    end\n" \
"  end\n" \
"  return nil\n" \
"end\n" \
"local function rl_hand(k, q, ep, o)\n" \
"  rl_drop(q, ep, o.v)\n" \
"  redis.call('SET', k, o.v, 'PX', o.x)\n" \
"  local c = redis.call('GET', o.c) or '0'\n" \
"  if #o.p > #c or (#o.p == #c and o.p > c) then redis.call('SET', o.c, o.p) end\n" \
"  redis.pcall('PUBLISH', k, o.v .. ' ' .. c)\n" \
"end\n"

#define RL_LUA_ENQUEUE \
"local function rl_enqueue(q, ep, m, v, x, p, c, life, ours)\n" \
"  local vs = redis.pcall('LRANGE', q, 0, -1)\n" \
"  if type(vs) ~= 'table' or vs.err then return nil end\n" \
"  local n, at, gone = 0, nil, {}\n" \
"  for i, u in ipairs(vs) do\n" \
"    if u == v or string.find(ours, ' ' .. u .. ' ', 1, true) then\n" \
"      if at then gone[#gone + 1] = u else at = i end\n" \
"      if u ~= v then redis.pcall('DEL', ep .. u) end\n" \
"    elseif not at and rl_offer(ep, u) then\n" \
"      n = n + 1\n" \
"    end\n" \
"  end\n" \
"  local e = ep .. v\n" \
"  if type(redis.pcall('HSET', e, 'x', x, 'p', p, 'c', c)) == 'table' or\n" \
"     type(redis.pcall('PEXPIRE', e, life)) == 'table' then\n" \
"    redis.pcall('DEL', e)\n" \
"    return nil\n" \
"  end\n" \
"  if at then redis.pcall('LSET', q, at - 1, v) else redis.pcall('RPUSH', q, v) end\n" \
"  for _, u in ipairs(gone) do redis.pcall('LREM', q, 1, u) end\n" \
"  local t = redis.pcall('PTTL', q)\n" \
"  if type(t) == 'number' and t < tonumber(life) then\n" \
"    redis.pcall('PEXPIRE', q, life)\n" \
"  end\n" \
"  t = redis.pcall('PTTL', m)\n" \
"  if type(t) ~= 'number' or t < tonumber(life) then\n" \
"    redis.pcall('SET', m, '1', 'PX', life)\n" \
"  end\n" \
"  return n\n" \
"end\n"

/*
 * Shared leases (protocol_shared.c).  While readers hold a resource, its
 * lock "<prefix>lock:<resource>" holds the value RL_SHARED_VALUE, which no
 * owner value equals, and lives as long as the last of them: every
 * exclusive path (SET NX, EXISTS, an owner-checked GET) sees the lock held
 * and nobody's.  The readers are the sorted set "<prefix>read:<resource>":
 * their lock values (rl_shared_owner(): 'r' for the first character),
 * each scored by its expiry on the node's clock in ms.  RL_LUA_READERS:
 * rl_now(), the node's clock in ms; rl_rk(pre, k), the readers' set of
 * lock k; rl_last(rk, now): the lapsed readers dropped, the latest expiry
 * of the others, or nil; rl_rextend(k, rk, v, ttl): reader v's lease
 * extended to ttl ms where it is still valid (1), or 0.
 */
#define RL_SHARED_VALUE "shared"
#define RL_LUA_READERS \
"local function rl_now()\n" \
"  local t = redis.call('TIME')\n" \
"  return t[1] * 1000 + math.floor(t[2] / 1000)\n" \
"end\n" \
"local function rl_rk(pre, k)\n" \
"  return pre .. 'read:' .. string.sub(k, #pre + 6)\n" \
"end\n" \
"local function rl_last(rk, now)\n" \
"  redis.call('ZREMRANGEBYSCORE', rk, '-inf', string.format('%d', now))\n" \
"  local top = redis.call('ZRANGE', rk, -1, -1, 'WITHSCORES')\n" \
"  return top[2] and tonumber(top[2]) or nil\n" \
"end\n" \
"local function rl_rextend(k, rk, v, ttl)\n" \
"  if redis.call('GET', k) ~= '" RL_SHARED_VALUE "' then return 0 end\n" \
"  local now = rl_now()\n" \
"  local s = redis.call('ZSCORE', rk, v)\n" \
"  if not s or tonumber(s) <= now then return 0 end\n" \
"  local x = tonumber(ttl)\n" \
"  redis.call('ZADD', rk, string.format('%d', now + x), v)\n" \
"  if redis.call('PTTL', k) < x then redis.call('PEXPIRE', k, x) end\n" \
"  if redis.call('PTTL', rk) < x then redis.call('PEXPIRE', rk, x) end\n" \
"  return 1\n" \
"end\n"

#define RL_EPOCH_ARGS	2
extern int	rl_proto_epoch_args(const char **argv, size_t *argvlen);

extern int64_t rl_proto_wall_clock_us(void);
extern int	rl_counter_key(char *buf, const char *resource);
extern int	rl_offer_prefix(char *buf);
extern void rl_proto_lock_call(const char **argv, size_t *argvlen,
							   const char *script, size_t scriptlen,
							   const char *key, int keylen,
							   const char *resource, char *ckey,
							   const char *owner);
extern void rl_proto_set_in_flight(const char *key, int keylen,
								   const char *owner);
extern RlAttempt rl_proto_settle(const char *resource, const char *key,
								 int keylen, int ttl_ms, int64 proposal,
								 int64_t start_us, bool handed,
								 RlGrant *grant, RlRequest *req);
extern bool rl_proto_token_of(const RlRequest *req, int64 proposal,
							  int64 *token);
extern RlAttempt rl_proto_writeback(RlRequest *req, int argc,
									const char **argv, size_t *argvlen);
extern RlAttempt rl_proto_grant(RlGrant *grant, int64 token, int ttl_ms,
								int64_t start_us);
extern void rl_proto_withdraw_attempt(const char *key, int keylen,
									  const char *owner, const bool *skip,
									  bool announce, bool offered);
extern void rl_proto_eval_header(const char **argv, size_t *argvlen,
								 const char *script, size_t scriptlen,
								 const char *numkeys);
extern void rl_proto_request_init(RlRequest *req, RlReplyKind kind,
								  RlRoundGoal goal, int argc,
								  const char **argv, const size_t *argvlen);

#endif							/* REDLOCK_PROTOCOL_INTERNAL_H */
