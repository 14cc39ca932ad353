/*-------------------------------------------------------------------------
 *
 * lease_shared.h
 *	  Shared leases (lease_shared.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_SHARED_H
#define REDLOCK_LEASE_SHARED_H

#include "lease/registry.h"

extern int64 rl_lease_acquire_shared(const char *resource, int ttl_ms,
									 bool xact, bool try_only, int wait_ms,
									 bool keep_alive);

#endif							/* REDLOCK_LEASE_SHARED_H */
