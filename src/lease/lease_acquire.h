/*-------------------------------------------------------------------------
 *
 * lease_acquire.h
 *	  Taking a lease: the acquire loop of the lock calls (lease_acquire.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_ACQUIRE_H
#define REDLOCK_LEASE_ACQUIRE_H

#include "lease/registry.h"

extern int64 rl_lease_acquire(const char *resource, int ttl_ms, bool xact,
							  bool try_only, int wait_ms, bool keep_alive);
extern void rl_warn_quarantine_short(int ttl_ms);
extern void rl_lease_call_begin(int ttl_ms, bool keep_alive);
extern RlLease *rl_lease_reenter(const char *resource, bool shared, bool xact,
								 bool keep_alive);
extern RlLease *rl_lease_granted(const char *resource, const char *key,
								 int keylen, const RlGrant *grant, int ttl_ms,
								 bool shared, bool xact, bool keep_alive);

#endif							/* REDLOCK_LEASE_ACQUIRE_H */
