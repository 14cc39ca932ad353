/*-------------------------------------------------------------------------
 *
 * lease_acquire.c
 *	  The acquire loop of a lock call: re-entry, the attempts, waiting for
 *	  a turn, and the lease entered in the registry when granted.
 *
 * A lease the session already holds is re-entered: the same token, one
 * more hold.  Otherwise the call asks the nodes, one Redlock round at a
 * time (protocol_acquire.c).  Waiters on this server queue in the lock
 * table: only the first waiter of a resource asks the nodes, and while a
 * backend of this server holds it, nobody does; they sleep until their
 * turn (lease_wait.c), when a releasing holder may hand the lease straight
 * to them.  A lock call that waits leaves an offer on the nodes that
 * refuse it, so that a holder on another server hands it over too
 * (lease_handoff.c).  A try-lock asks once and never waits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"

#include "lease/lease_acquire.h"
#include "lease/lease_handoff.h"
#include "lease/lease_report.h"
#include "lease/lease_wait.h"
#include "lease/registry.h"
#include "lease/session_nodes.h"
#include "shared/lock_table.h"
#include "shared/stats.h"

/* One Redlock round: counted in redlock_stats as an attempt. */
static RlAttempt
attempt(const char *resource, const char *key, int keylen, int ttl_ms,
		RlOffer *offer, RlGrant *grant, RlRequest *req)
{
	rl_stats_count(RL_STAT_ATTEMPTS);
	return rl_proto_acquire(resource, key, keylen, ttl_ms, offer, grant, req);
}

/*
 * A lease whose TTL is longer than redlock.restart_quarantine outlives the
 * quarantine: a node that lost its lock could count for someone else while
 * it is still valid.  Said once per session, when the first such lease is
 * asked for.
 */
void
rl_warn_quarantine_short(int ttl_ms)
{
	static bool warned = false;

	if (warned || rl_restart_quarantine_ms <= 0 ||
		ttl_ms <= rl_restart_quarantine_ms)
		return;
	warned = true;
	ereport(WARNING,
			(errcode(ERRCODE_WARNING),
			 errmsg("lease TTL %d ms is longer than redlock.restart_quarantine (%d ms)",
					ttl_ms, rl_restart_quarantine_ms),
			 errdetail("A Redis node that loses its data is kept out of every majority for redlock.restart_quarantine; a lease that lives longer can then be granted to a second holder while the first still counts on it."),
			 errhint("Raise redlock.restart_quarantine above the largest TTL in use, or use shorter TTLs (keep_alive extends them). This warning is given once per session.")));
}

/*
 * What every lock call checks first: keep_alive needs the keep-alive
 * worker (55000 without redlock preloaded), the session's nodes are ready,
 * and a TTL longer than the restart quarantine is warned of.
 */
void
rl_lease_call_begin(int ttl_ms, bool keep_alive)
{
	if (keep_alive && !rl_lock_table_enabled())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("keep_alive needs redlock in shared_preload_libraries"),
				 errdetail("Leases are kept alive by a background worker, which only runs when redlock is preloaded."),
				 errhint("Add redlock to shared_preload_libraries and restart the server, or extend the lease with redlock_extend().")));
	rl_session_nodes_ready();
	if (keep_alive)
		rl_lock_table_keep_alive_check();
	rl_warn_quarantine_short(ttl_ms);
}

/*
 * A lock call on a resource, in the given mode (55000 when the session
 * holds it in the other, rl_registry_check_mode()): the lease re-entered
 * when the session holds it, valid (one more hold), or NULL when the nodes
 * must be asked.  An entry being released is forgotten (its release
 * belongs to the node layer: never held again); our own expired lease,
 * which may still sit on some nodes, is released ahead of the new attempt,
 * on the same connections so that it is applied first, and stays in the
 * registry with its holds, to be renewed.
 */
RlLease *
rl_lease_reenter(const char *resource, bool shared, bool xact,
				 bool keep_alive)
{
	RlLease    *lease = rl_registry_find(resource);

	rl_registry_check_mode(lease, shared);
	if (lease != NULL && lease->state == RL_LEASE_RELEASING)
	{
		rl_registry_forget(lease);
		return NULL;
	}
	if (lease != NULL && rl_registry_valid_until(lease) > rl_now_us())
	{
		rl_registry_add_hold(lease, xact);
		lease->keep_alive |= keep_alive;
		rl_registry_holds_changed(lease);
		return lease;
	}
	if (lease != NULL)
	{
		RlReleaseItem item = {lease->key, lease->keylen, lease->owner};
		RlRequest	req;

		/* from now on it can never count as valid again, holds aside */
		rl_registry_expired(lease);
		rl_proto_release(&item, 1, false, false, 0, NULL, &req);
	}
	return NULL;
}

/*
 * A lease granted: entered in the registry (an expired one being renewed
 * keeps its holds) with one more hold.  The caller then ends its acquire
 * in the registry (rl_registry_end_acquire*), which records it in the lock
 * table.
 */
RlLease *
rl_lease_granted(const char *resource, const char *key, int keylen,
				 const RlGrant *grant, int ttl_ms, bool shared, bool xact,
				 bool keep_alive)
{
	RlLease    *lease = rl_registry_find(resource);

	if (lease == NULL)
		lease = rl_registry_enter(resource);
	lease->state = RL_LEASE_HELD;
	memcpy(lease->key, key, keylen + 1);
	lease->keylen = keylen;
	memcpy(lease->owner, grant->owner, RL_OWNER_LEN + 1);
	lease->token = grant->token;
	lease->in_row = grant->in_row;
	lease->shared = shared;
	lease->ttl_ms = ttl_ms;
	lease->valid_until_us = grant->valid_until_us;
	lease->keep_alive |= keep_alive;
	rl_registry_add_hold(lease, xact);
	return lease;
}

/*
 * Take (or re-enter) a lease on resource for ttl_ms, held for the
 * transaction (xact) or the session.  Returns the token, or -1 when
 * try_only and the resource is held elsewhere.  wait_ms: -1 for no limit
 * of its own.  keep_alive: the keep-alive worker extends it while this
 * backend lives.
 */
int64
rl_lease_acquire(const char *resource, int ttl_ms, bool xact, bool try_only,
				 int wait_ms, bool keep_alive)
{
	char		key[RL_KEY_MAX + 1];
	int			keylen;
	RlLease    *lease;
	RlGrant		grant;
	int64_t		started_us;
	int			slot;
	RlRequest	req;
	bool		asked = false;
	bool		announced = false;
	RlWaiter	waiter;

	rl_lease_call_begin(ttl_ms, keep_alive);
	lease = rl_lease_reenter(resource, false, xact, keep_alive);
	if (lease != NULL)
		return lease->token;

	keylen = rl_lock_key(key, resource);
	started_us = rl_now_us();
	rl_stats_count(RL_STAT_ACQUIRES);
	slot = rl_registry_begin_acquire(resource, key);
	waiter.resource = resource;
	waiter.key = key;
	waiter.keylen = keylen;
	waiter.ttl_ms = ttl_ms;
	waiter.slot = slot;
	waiter.started_us = started_us;
	waiter.wait_ms = wait_ms;
	memset(&waiter.offer, 0, sizeof(waiter.offer));
	for (;;)
	{
		RlAttempt	r;

		/*
		 * First come, first served among the waiters of this server; and
		 * while a backend of this server holds the lease, asking the nodes
		 * would only be refused: wait for its release (or expiry) instead.
		 */
		if (!try_only && (!rl_lock_table_first_waiter(slot) ||
						  rl_lock_table_holder_expiry(key) > rl_now_us()))
		{
			if (rl_wait_turn(&waiter, asked ? &req : NULL, &announced, &grant))
				break;			/* handed over by the releasing holder */
			continue;
		}

		/* a lock call that waits leaves its offer where it is refused */
		if (!try_only && wait_ms != 0 && rl_handoff_remote_possible(slot))
		{
			rl_handoff_new_offer(slot, key, &waiter.offer);
			r = attempt(resource, key, keylen, ttl_ms, &waiter.offer,
						&grant, &req);
			rl_handoff_attempted(slot, &waiter.offer, &req);
			if (r == RL_ATTEMPT_GRANTED)
				rl_handoff_wait_end(key, grant.owner);
		}
		else if (!try_only && wait_ms != 0 && slot >= 0)
		{
			/* still asks a release to announce the lock free */
			RlOffer		mark;

			rl_handoff_mark_only(&mark);
			r = attempt(resource, key, keylen, ttl_ms, &mark,
						&grant, &req);
		}
		else
			r = attempt(resource, key, keylen, ttl_ms, NULL,
						&grant, &req);
		asked = true;
		if (r == RL_ATTEMPT_GRANTED)
			break;
		if (r == RL_ATTEMPT_UNAVAILABLE)
		{
			rl_stats_acquire_latency(rl_now_us() - started_us);
			rl_report_unavailable(resource, &req, false);
		}
		if (try_only)
		{
			rl_stats_acquire_latency(rl_now_us() - started_us);
			if (r == RL_ATTEMPT_EXPIRED)
			{
				rl_stats_count(RL_STAT_REFUSED_TIMEOUT);
				ereport(ERROR,
						(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
						 errmsg("lease on \"%s\" expired before it was granted", resource),
						 errdetail("Acquiring took longer than the TTL of %d ms less the drift allowance.",
								   ttl_ms),
						 errhint("Use a longer TTL.")));
			}
			rl_stats_count(RL_STAT_REFUSED_HELD);
			/* an expired lease we could not renew keeps its holds */
			rl_registry_end_acquire(NULL);
			return -1;
		}
		if (rl_wait_turn(&waiter, &req, &announced, &grant))
			break;
	}

	rl_stats_count(RL_STAT_GRANTS);
	rl_stats_acquire_latency(rl_now_us() - started_us);

	lease = rl_lease_granted(resource, key, keylen, &grant, ttl_ms, false,
							 xact, keep_alive);
	rl_registry_end_acquire(lease);
	return lease->token;
}
