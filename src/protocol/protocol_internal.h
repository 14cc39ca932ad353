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
