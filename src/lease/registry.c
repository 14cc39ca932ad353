/*-------------------------------------------------------------------------
 *
 * registry.c
 *	  The per-backend lease registry and the release of leases whose last
 *	  hold is gone.
 *
 * Leases are re-entrant per session, like advisory locks: taking a lease the
 * session already holds (at either scope) returns the same token and adds a
 * hold; the lease is released on the nodes when the last hold goes.  See
 * registry.h for the states of a lease.
 *
 * A lease whose last hold goes is marked releasing *before* any network
 * I/O, so an error that interrupts the release (cancel, statement_timeout,
 * a caught exception) can never leave it looking held; its release command
 * belongs to the node layer from then on, which delivers it when the nodes
 * can take it.
 *
 * Bulk releases (transaction end, exit, DISCARD ALL) send one command per
 * node per RL_RELEASE_CHUNK leases, pipelined, and wait once, for the last.
 * On the no-throw paths the whole bulk release has one deadline: one
 * connect attempt and one node_timeout per node, whatever the number of
 * leases; what could not be confirmed expires by TTL and is logged once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "shared/handoff.h"
#include "shared/lock_table.h"
#include "lease/registry.h"
#include "shared/stats.h"

static HTAB *rl_leases = NULL;
static uint64 rl_release_batches = 0;
static int	rl_acquiring_slot = -1;	/* lock table row of the lease being
										 * acquired (or waited for) */

static void
registry_init(void)
{
	HASHCTL		ctl;

	if (rl_leases != NULL)
		return;
	ctl.keysize = RL_MAX_RESOURCE_LEN + 1;
	ctl.entrysize = sizeof(RlLease);
	ctl.hcxt = TopMemoryContext;
	rl_leases = hash_create("redlock leases", 16, &ctl,
							HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* The registry entry of a resource, in any state; NULL if none. */
RlLease *
rl_registry_find(const char *resource)
{
	if (rl_leases == NULL)
		return NULL;
	return hash_search(rl_leases, resource, HASH_FIND, NULL);
}

/* The entry of a resource this session holds; NULL if none. */
RlLease *
rl_registry_held(const char *resource)
{
	RlLease    *lease = rl_registry_find(resource);

	return (lease != NULL && lease->state == RL_LEASE_HELD) ? lease : NULL;
}

/* A new, zeroed entry for a resource that has none. */
RlLease *
rl_registry_enter(const char *resource)
{
	RlLease    *lease;
	bool		found;

	registry_init();
	lease = hash_search(rl_leases, resource, HASH_ENTER, &found);
	Assert(!found);
	memset(((char *) lease) + sizeof(lease->resource), 0,
		   sizeof(RlLease) - sizeof(lease->resource));
	lease->state = RL_LEASE_HELD;
	lease->shm_slot = -1;
	return lease;
}

/* Leave the lock table, waking the next local waiter, and the registry. */
void
rl_registry_forget(RlLease *lease)
{
	rl_lock_table_remove(lease->shm_slot);
	hash_search(rl_leases, lease->resource, HASH_REMOVE, NULL);
}

/*
 * The lock table row of the lease this backend starts to acquire: entered
 * now (waiting), granted or removed when the acquire ends, removed by the
 * abort path if an error ends it.  -1 without the lock table.
 */
int
rl_registry_begin_acquire(const char *resource, const char *key)
{
	Assert(rl_acquiring_slot < 0);
	rl_acquiring_slot = rl_lock_table_enter(resource, key);
	return rl_acquiring_slot;
}

/* The acquire ended: granted to lease (which takes the row), or not (NULL). */
void
rl_registry_end_acquire(RlLease *lease)
{
	if (lease != NULL)
	{
		RlTableGrant g;

		rl_lock_table_remove(lease->shm_slot);	/* an expired grant's row */
		lease->shm_slot = rl_acquiring_slot;
		g.token = lease->token;
		g.scopes = (lease->session_holds ? RL_SCOPE_SESSION : 0) |
			(lease->xact_holds ? RL_SCOPE_XACT : 0);
		g.valid_until_us = lease->valid_until_us;
		g.ttl_ms = lease->ttl_ms;
		g.keep_alive = lease->keep_alive;
		g.owner = lease->owner;
		g.key = lease->key;
		rl_lock_table_granted(lease->shm_slot, &g);
	}
	else
		rl_lock_table_remove(rl_acquiring_slot);
	rl_acquiring_slot = -1;
}

/*
 * Abort path: an error ended the acquire (or wait), or interrupted a
 * release that was handing a lease to a waiter.  Raises nothing.
 */
void
rl_registry_abort_acquire(void)
{
	rl_handoff_abort();
	if (rl_acquiring_slot >= 0)
	{
		rl_handoff_abandon(rl_acquiring_slot);
		rl_lock_table_remove(rl_acquiring_slot);
		rl_acquiring_slot = -1;
	}
}

/* Holds or keep-alive changed: show it in the lock table. */
void
rl_registry_holds_changed(RlLease *lease)
{
	rl_lock_table_update(lease->shm_slot,
						 (lease->session_holds ? RL_SCOPE_SESSION : 0) |
						 (lease->xact_holds ? RL_SCOPE_XACT : 0),
						 lease->keep_alive);
}

/*
 * The lease ran out or was lost (its holds stay, until they are dropped or
 * the lease is taken again): leave the lock table and the keep-alive
 * worker, and never count as valid again.
 */
void
rl_registry_expired(RlLease *lease)
{
	rl_lock_table_remove(lease->shm_slot);
	lease->shm_slot = -1;
	lease->keep_alive = false;
	lease->valid_until_us = 0;
}

/*
 * Until when the lease is valid (monotonic clock): the keep-alive worker
 * moves it on for keep-alive leases; 0 once the worker lost it.
 */
int64_t
rl_registry_valid_until(const RlLease *lease)
{
	if (lease->keep_alive && lease->shm_slot >= 0)
		return rl_lock_table_valid_until(lease->shm_slot);
	return lease->valid_until_us;
}

/*
 * The lease this session holds with a given token, for the fence's 'held'
 * mode; NULL if none.  A linear scan: a session holds few leases.
 */
RlLease *
rl_registry_held_token(int64 token)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;

	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state == RL_LEASE_HELD && lease->token == token)
		{
			hash_seq_term(&status);
			return lease;
		}
	}
	return NULL;
}

long
rl_registry_count(void)
{
	return rl_leases ? hash_get_num_entries(rl_leases) : 0;
}

/* Iterate over the entries: first = true starts a scan. */
RlLease *
rl_registry_next(HASH_SEQ_STATUS *status, bool first)
{
	if (rl_leases == NULL)
		return NULL;
	if (first)
		hash_seq_init(status, rl_leases);
	return hash_seq_search(status);
}

bool
rl_registry_has_xact_holds(void)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;

	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state == RL_LEASE_HELD && lease->xact_holds > 0)
		{
			hash_seq_term(&status);
			return true;
		}
	}
	return false;
}

/*
 * A transaction lease first taken in a subtransaction moves to the parent
 * when the subtransaction commits.  (When it rolls back, the hold goes with
 * it, as advisory transaction locks do: RL_DROP_SUBXACT.)
 */
void
rl_registry_subxact_commit(SubTransactionId mySubid,
						   SubTransactionId parentSubid)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;

	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->xact_holds > 0 && lease->xact_subid == mySubid)
			lease->xact_subid = parentSubid;
	}
}

/* Did a majority answer a release round? */
static bool
release_confirmed(const RlRequest *req)
{
	return req->decision != RL_UNAVAILABLE &&
		req->tally.yes + req->tally.no >= rl_majority(req->nnodes);
}

/*
 * Release one lease whose last hold went: marked releasing first, then one
 * round.  Returns whether a majority confirmed the release; the lease is
 * gone from the registry either way.
 */
bool
rl_registry_release_one(RlLease *lease, bool nothrow, RlRequest *req)
{
	RlReleaseItem item;

	Assert(lease->state == RL_LEASE_HELD);
	lease->state = RL_LEASE_RELEASING;
	item.key = lease->key;
	item.keylen = lease->keylen;
	item.owner = lease->owner;
	if (rl_handoff_claim(lease->shm_slot, lease->resource, &item))
		rl_handoff_run(&item, lease->resource, nothrow,
					   nothrow ? rl_proto_release_deadline() : 0, req);
	else
		rl_proto_release(&item, 1, true, nothrow,
						 nothrow ? rl_proto_release_deadline() : 0, NULL, req);
	rl_stats_count(RL_STAT_RELEASES);
	rl_registry_forget(lease);
	return release_confirmed(req);
}

/* Drop the holds scope covers; true when the lease has none left. */
static bool
drop_holds(RlLease *lease, RlDropScope scope, SubTransactionId subid)
{
	switch (scope)
	{
		case RL_DROP_XACT:
			lease->xact_holds = 0;
			break;
		case RL_DROP_SESSION:
			lease->session_holds = 0;
			break;
		case RL_DROP_ALL:
			lease->xact_holds = lease->session_holds = 0;
			break;
		case RL_DROP_SUBXACT:
			if (lease->xact_holds > 0 && lease->xact_subid == subid)
				lease->xact_holds = 0;
			break;
	}
	return lease->session_holds == 0 && lease->xact_holds == 0;
}

/*
 * Drop holds in bulk and release the leases left without any.  Entries
 * already releasing (an earlier release was interrupted; the node layer
 * owns their release) are just forgotten.  Returns the number of leases
 * released.
 */
int
rl_registry_release(RlDropScope scope, SubTransactionId subid, bool nothrow)
{
	HASH_SEQ_STATUS status;
	RlLease    *lease;
	uint64		batch = ++rl_release_batches;
	int			total = 0;
	int			sent = 0;
	int			unconfirmed = 0;
	int64_t		deadline = nothrow ? rl_proto_release_deadline() : 0;
	RlReleaseItem items[RL_RELEASE_CHUNK];
	int			nitems = 0;
	RlLease    *handed = NULL;
	RlReleaseItem handed_item;
	RlRequest	req;

	/* mark first: from here on none of them is held, whatever happens */
	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state != RL_LEASE_HELD)
			continue;
		if (drop_holds(lease, scope, subid))
		{
			lease->state = RL_LEASE_RELEASING;
			lease->release_batch = batch;
			total++;
		}
		else
			rl_registry_holds_changed(lease);
	}

	for (lease = total > 0 ? rl_registry_next(&status, true) : NULL;
		 lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		RlReleaseItem *item = &items[nitems];

		if (lease->state != RL_LEASE_RELEASING || lease->release_batch != batch)
			continue;
		item->key = lease->key;
		item->keylen = lease->keylen;
		item->owner = lease->owner;
		sent++;
		/* one lease per release may go straight to a waiter here */
		if (handed == NULL &&
			rl_handoff_claim(lease->shm_slot, lease->resource, item))
		{
			handed = lease;
			handed_item = *item;
		}
		else
			nitems++;
		if (nitems > 0 && (nitems == RL_RELEASE_CHUNK || sent == total))
		{
			bool		last = (sent == total && handed == NULL);

			rl_proto_release(items, nitems, last, nothrow, deadline, NULL, &req);
			if (last && !release_confirmed(&req))
				unconfirmed = total;
			nitems = 0;
		}
	}
	if (handed != NULL)
	{
		rl_handoff_run(&handed_item, handed->resource, nothrow, deadline, &req);
		if (!release_confirmed(&req))
			unconfirmed = total;
	}

	/* forget every releasing entry: the node layer owns their releases */
	for (lease = rl_registry_next(&status, true); lease != NULL;
		 lease = rl_registry_next(&status, false))
	{
		if (lease->state == RL_LEASE_RELEASING &&
			lease->session_holds == 0 && lease->xact_holds == 0)
		{
			if (lease->release_batch == batch)
				rl_stats_count(RL_STAT_RELEASES);
			rl_registry_forget(lease);
		}
	}

	if (unconfirmed > 0)
		ereport(nothrow ? LOG : WARNING,
				(errcode(ERRCODE_REDLOCK_NOT_GRANTED),
				 errmsg_plural("release of %d lease was not confirmed by a majority of Redis nodes",
							   "release of %d leases was not confirmed by a majority of Redis nodes",
							   unconfirmed, unconfirmed),
				 errdetail("Leases whose release did not reach a node expire there by their TTL; the release is sent again when the node can be reached.")));
	return total;
}
