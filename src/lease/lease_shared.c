/*-------------------------------------------------------------------------
 *
 * lease_shared.c
 *	  Shared leases: the acquire loop of a shared lock call, and the rule
 *	  that a session holds a resource in one mode at a time.
 *
 * Readers hold a resource together; an exclusive lease is granted only
 * once no shared one is valid, and a shared one neither while an
 * exclusive one is, nor while an exclusive call waits in line on the
 * nodes (protocol_shared.c), so that a stream of readers cannot starve a
 * writer.  Once granted, a shared lease is a lease like any other in the
 * registry and the lock table (its holds, validity, keep-alive, extension
 * and release, the views), marked shared: the release and extension
 * scripts tell it by its value.
 *
 * A shared call asks and waits as a multi-resource call does
 * (rl_lease_acquire_rounds(), lease_multi.c; lease_multi_wait.c):
 * it takes no place in line, leaves no offer and is never handed a lease;
 * it sleeps until a release of the resource (here, or on another server
 * through the waiters' marker its refusals leave), a local exclusive
 * holder's expiry, or the backstop.  It does not ask the nodes while a
 * backend of this server holds the resource exclusively.  An exclusive
 * call, on the contrary, asks the nodes while readers hold it, here or
 * elsewhere (rl_lock_table_holder_expiry() counts exclusive holders only):
 * its refused attempt leaves its offer in the nodes' queue, which stops
 * new readers, and the last reader's release hands it the lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lease/lease_acquire.h"
#include "lease/lease_multi.h"
#include "lease/lease_shared.h"
#include "shared/stats.h"

/*
 * Take (or re-enter) a shared lease on resource for ttl_ms, held for the
 * transaction (xact) or the session.  Returns the token, or -1 when
 * try_only and the resource is held exclusively (or a writer waits for
 * it).  wait_ms: -1 for no limit of its own.  keep_alive: the keep-alive
 * worker extends it while this backend lives.
 */
int64
rl_lease_acquire_shared(const char *resource, int ttl_ms, bool xact,
						bool try_only, int wait_ms, bool keep_alive)
{
	char		key[RL_KEY_MAX + 1];
	RlMultiSet	set;
	RlLease    *lease;
	RlGrant		grant;
	int			slot;

	rl_lease_call_begin(ttl_ms, keep_alive);
	lease = rl_lease_reenter(resource, true, xact, keep_alive);
	if (lease != NULL)
		return lease->token;

	set.n = 1;
	set.resources[0] = resource;
	set.keys[0] = key;
	set.keylens[0] = rl_lock_key(key, resource);
	rl_stats_count(RL_STAT_ACQUIRES);
	if (!rl_lease_acquire_rounds(&set, ttl_ms, try_only, wait_ms, true,
								 &grant, &slot))
		return -1;
	lease = rl_lease_granted(resource, key, set.keylens[0], &grant, ttl_ms,
							 true, xact, keep_alive);
	rl_registry_end_acquire_multi(&lease);
	return lease->token;
}
