/*-------------------------------------------------------------------------
 *
 * lease_release.h
 *	  Releasing leases whose last hold is gone (lease_release.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef REDLOCK_LEASE_RELEASE_H
#define REDLOCK_LEASE_RELEASE_H

#include "lease/registry.h"

extern bool rl_lease_release_one(RlLease *lease, bool nothrow,
								 RlRequest *req);
extern bool rl_lease_release_leases(RlLease **leases, int n, bool nothrow);
extern int	rl_lease_release(RlDropScope scope, SubTransactionId subid,
							 bool nothrow);

#endif							/* REDLOCK_LEASE_RELEASE_H */
