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

#define RL_EPOCH_ARGS	2
extern int	rl_proto_epoch_args(const char **argv, size_t *argvlen);

extern int64_t rl_proto_wall_clock_us(void);
extern int	rl_counter_key(char *buf, const char *resource);
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
extern void rl_proto_withdraw_attempt(const char *key, int keylen,
									  const char *owner, const bool *skip,
									  bool announce);
extern void rl_proto_eval_header(const char **argv, size_t *argvlen,
								 const char *script, size_t scriptlen,
								 const char *numkeys);
extern void rl_proto_request_init(RlRequest *req, RlReplyKind kind,
								  RlRoundGoal goal, int argc,
								  const char **argv, const size_t *argvlen);

#endif							/* REDLOCK_PROTOCOL_INTERNAL_H */
