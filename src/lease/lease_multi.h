/*-------------------------------------------------------------------------
 *
 * lease_multi.h
 *	  Several resources taken all or none, and released together
 *	  (lease_multi.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_MULTI_H
#define REDLOCK_LEASE_MULTI_H

#include "protocol/protocol.h"

extern bool rl_lease_acquire_multi(const char *const *resources, int n,
								   int ttl_ms, bool xact, bool try_only,
								   int wait_ms, bool keep_alive,
								   int64 *tokens);
extern bool rl_lease_unlock_multi(const char *const *resources, int n);
extern bool rl_lease_acquire_rounds(const RlMultiSet *set, int ttl_ms,
									bool try_only, int wait_ms, bool shared,
									RlGrant *grant, int *slots);

#endif							/* REDLOCK_LEASE_MULTI_H */
