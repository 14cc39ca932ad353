/*-------------------------------------------------------------------------
 *
 * protocol_internal.h
 *	  What the protocol files share: building a script call.
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_PROTOCOL_INTERNAL_H
#define REDLOCK_PROTOCOL_INTERNAL_H

#include "protocol.h"

extern void rl_proto_eval_header(const char **argv, size_t *argvlen,
								 const char *script, size_t scriptlen,
								 const char *numkeys);
extern void rl_proto_request_init(RlRequest *req, RlReplyKind kind,
								  RlRoundGoal goal, int argc,
								  const char **argv, const size_t *argvlen);

#endif							/* REDLOCK_PROTOCOL_INTERNAL_H */
